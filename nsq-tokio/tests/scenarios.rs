//! nsq-tokio against the in-process test broker: the scenario list.
//! Every test runs under a timeout so nothing hangs.

use nsq_test_broker::{
    AuthGrant, AuthTable, Authorization, Lookupd, Nsqd, NsqdBuilder, Restart, TestPki,
};
use nsq_tokio::{
    Compression, Config, Consumer, ConsumerConfig, Error, Message, Producer, ProducerConfig,
    TlsConfig,
};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Runs `f` on a 2-thread runtime with a hard timeout.
fn run<F: Future<Output = ()> + Send + 'static>(secs: u64, f: F) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        tokio::time::timeout(Duration::from_secs(secs), f)
            .await
            .expect("test timed out");
    });
}

/// Polls `pred` every 10 ms until it holds or `within` passes.
async fn eventually(within: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn next(consumer: &mut Consumer, within: Duration) -> Option<Message> {
    tokio::time::timeout(within, consumer.recv())
        .await
        .ok()
        .flatten()
}

const WAIT: Duration = Duration::from_secs(5);

fn start(b: NsqdBuilder) -> Nsqd {
    b.start().expect("starting the test nsqd")
}

fn fast_config(max_in_flight: u32) -> ConsumerConfig {
    ConsumerConfig {
        max_in_flight,
        reconnect_initial_delay: Duration::from_millis(50),
        reconnect_max_delay: Duration::from_millis(200),
        lookupd_poll_interval: Duration::from_millis(200),
        ..Default::default()
    }
}

fn consumer(nsqd: &Nsqd, topic: &str, config: ConsumerConfig) -> Consumer {
    Consumer::builder(topic, "ch")
        .core_config(config)
        .nsqd(nsqd.tcp_address().to_string())
        .build()
        .unwrap()
}

async fn producer(nsqd: &Nsqd) -> Producer {
    Producer::connect(&nsqd.tcp_address().to_string(), &Config::default())
        .await
        .unwrap()
}

#[test]
fn pub_sub_round_trip() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd).await;
        p.publish("rt", "hello").await.unwrap();
        let mut c = consumer(&nsqd, "rt", fast_config(1));
        let m = next(&mut c, WAIT).await.expect("a message");
        assert_eq!(&m.body()[..], b"hello");
        assert_eq!(m.attempts(), 1);
        assert!(m.timestamp() > 0);
        assert_eq!(m.nsqd_address(), nsqd.tcp_address().to_string());
        m.finish();
        assert!(
            eventually(WAIT, || nsqd
                .channel("rt", "ch")
                .is_some_and(|c| c.finished == 1))
            .await
        );
        assert_eq!(c.stop().await.unanswered, 0);
        p.close().await;
    });
}

#[test]
fn go_nsq_style_config() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        let mut config = Config::default();
        config.set_str("max_in_flight", "7").unwrap();
        config.set_str("snappy", "true").unwrap();
        config.set_str("heartbeat_interval", "2s").unwrap();
        let p = Producer::connect(&nsqd.tcp_address().to_string(), &config)
            .await
            .unwrap();
        p.publish("cfg", "x").await.unwrap();
        let mut c = Consumer::new("cfg", "ch", &config).unwrap();
        c.connect_to_nsqd(&nsqd.tcp_address().to_string())
            .await
            .unwrap();
        next(&mut c, WAIT).await.expect("a message").finish();
        assert!(eventually(WAIT, || c.stats().total_rdy == 7).await);
        assert!(nsqd.clients().iter().all(|c| c.snappy));
        assert!(config.set_str("max_in_flight", "-1").is_err());
        let bad = Config {
            max_attempts: 70_000u32 as u16,
            deflate_level: 12,
            ..Config::default()
        };
        assert!(matches!(
            Consumer::builder("cfg", "ch").config(&bad).build(),
            Err(Error::Config(_))
        ));
        assert!(c.connect_to_nsqd("not an address").await.is_err());
        c.stop().await;
        p.close().await;
    });
}

#[test]
fn topic_arguments_are_validated() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd).await;
        let err = p.publish("bad topic!", "x").await.unwrap_err();
        assert!(matches!(err, Error::InvalidName(_)), "{err}");
        let topic = nsq_tokio::Topic::new("typed").unwrap();
        p.publish(&topic, "x").await.unwrap();
        assert!(matches!(
            Consumer::builder("ok", "bad channel").build(),
            Err(Error::InvalidName(_))
        ));
        p.close().await;
    });
}

#[test]
fn multi_publish_delivers_every_body() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd).await;
        let bodies: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
        p.multi_publish("mpub", bodies.clone()).await.unwrap();
        assert!(
            p.multi_publish("mpub", Vec::<Vec<u8>>::new())
                .await
                .is_err()
        );
        let mut c = consumer(&nsqd, "mpub", fast_config(50));
        let mut got = BTreeSet::new();
        while got.len() < 100 {
            let m = next(&mut c, WAIT).await.expect("all 100 messages");
            got.insert(String::from_utf8(m.body().to_vec()).unwrap());
            m.finish();
        }
        assert_eq!(got, bodies.into_iter().collect());
        c.stop().await;
        p.close().await;
    });
}

#[test]
fn deferred_publish_honours_the_delay() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd).await;
        let mut c = consumer(&nsqd, "dpub", fast_config(1));
        let sent = Instant::now();
        p.deferred_publish("dpub", Duration::from_millis(1200), "later")
            .await
            .unwrap();
        let m = next(&mut c, WAIT).await.expect("the deferred message");
        assert!(
            sent.elapsed() >= Duration::from_millis(1100),
            "{:?}",
            sent.elapsed()
        );
        m.finish();
        c.stop().await;
        p.close().await;
    });
}

#[test]
fn requeue_increments_attempts() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("req", b"again");
        let mut c = consumer(&nsqd, "req", fast_config(1));
        let m = next(&mut c, WAIT).await.unwrap();
        assert_eq!(m.attempts(), 1);
        m.requeue_without_backoff(Some(Duration::ZERO));
        let m = next(&mut c, WAIT).await.unwrap();
        assert_eq!(m.attempts(), 2);
        m.finish();
        c.stop().await;
    });
}

#[test]
fn dropped_message_is_requeued() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("drop", b"x");
        let mut c = consumer(&nsqd, "drop", fast_config(1));
        let m = next(&mut c, WAIT).await.unwrap();
        drop(m);
        assert!(
            eventually(WAIT, || nsqd
                .channel("drop", "ch")
                .is_some_and(|c| c.requeued == 1))
            .await
        );
        c.stop().await;
    });
}

#[test]
fn gives_up_after_max_attempts() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("giveup", b"poison");
        let gave_up = Arc::new(AtomicU32::new(0));
        let g = gave_up.clone();
        let mut c = Consumer::builder("giveup", "ch")
            .core_config(ConsumerConfig {
                max_attempts: 2,
                ..fast_config(1)
            })
            .on_give_up(move |m| {
                assert_eq!(m.attempts, 3);
                g.fetch_add(1, Ordering::SeqCst);
            })
            .nsqd(nsqd.tcp_address().to_string())
            .build()
            .unwrap();
        for attempt in 1..=2 {
            let m = next(&mut c, WAIT).await.unwrap();
            assert_eq!(m.attempts(), attempt);
            m.requeue_without_backoff(Some(Duration::ZERO));
        }
        assert!(eventually(WAIT, || gave_up.load(Ordering::SeqCst) == 1).await);
        assert!(
            eventually(WAIT, || nsqd
                .channel("giveup", "ch")
                .is_some_and(|c| c.finished == 1))
            .await
        );
        assert!(next(&mut c, Duration::from_millis(200)).await.is_none());
        assert_eq!(c.stats().gave_up, 1);
        c.stop().await;
    });
}

#[test]
fn backoff_is_rdy_0_then_rdy_1() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("backoff", b"fail once");
        let mut c = consumer(
            &nsqd,
            "backoff",
            ConsumerConfig {
                backoff_multiplier: Duration::from_millis(100),
                ..fast_config(5)
            },
        );
        let m = next(&mut c, WAIT).await.unwrap();
        assert!(eventually(WAIT, || c.stats().total_rdy == 5).await);
        let failed_at = Instant::now();
        m.requeue(Some(Duration::ZERO));
        // Redelivered through the RDY 1 probe after the backoff window.
        let m = next(&mut c, WAIT)
            .await
            .expect("redelivery after the backoff window");
        assert!(failed_at.elapsed() >= Duration::from_millis(100));
        assert_eq!(m.attempts(), 2);
        m.finish();
        let lines = || -> Vec<String> { nsqd.commands().into_iter().map(|r| r.line).collect() };
        assert!(
            eventually(WAIT, || lines()
                .iter()
                .filter(|l| l.starts_with("FIN"))
                .count()
                == 1)
            .await
        );
        let lines = lines();
        let req = lines
            .iter()
            .position(|l| l.starts_with("REQ"))
            .unwrap_or_else(|| panic!("REQ: {lines:?}"));
        let rdy0 = lines
            .iter()
            .position(|l| l == "RDY 0")
            .unwrap_or_else(|| panic!("RDY 0: {lines:?}"));
        assert!(rdy0 < req, "RDY 0 must precede the REQ: {lines:?}");
        let probe = lines[req..]
            .iter()
            .position(|l| l == "RDY 1")
            .unwrap_or_else(|| panic!("RDY 1 after the backoff window: {lines:?}"));
        let fin = lines.iter().position(|l| l.starts_with("FIN")).unwrap();
        assert!(req + probe < fin, "{lines:?}");
        // Success ends the backoff: full RDY again.
        assert!(
            eventually(WAIT, || c.stats().backoff_level == 0
                && c.stats().total_rdy == 5)
            .await
        );
        c.stop().await;
    });
}

#[test]
fn rdy_is_spread_over_three_brokers() {
    run(30, async {
        let brokers: Vec<Nsqd> = (0..3).map(|_| start(Nsqd::builder())).collect();
        let mut b = Consumer::builder("spread", "ch").core_config(ConsumerConfig {
            rdy_redistribute_interval: Duration::from_millis(200),
            ..fast_config(9)
        });
        for n in &brokers {
            n.publish("spread", b"warm-up");
            b = b.nsqd(n.tcp_address().to_string());
        }
        let mut c = b.build().unwrap();
        for _ in 0..3 {
            next(&mut c, WAIT).await.expect("warm-up message").finish();
        }
        let spread = || {
            brokers.iter().all(|n| {
                let clients = n.clients();
                clients.len() == 1 && clients[0].rdy == 3
            })
        };
        assert!(eventually(WAIT, spread).await, "RDY 3 on each broker");
        assert!(eventually(WAIT, || c.stats().total_rdy == 9).await);
        c.stop().await;
    });
}

#[test]
fn lookupd_discovers_a_broker_added_later() {
    run(30, async {
        let lookupd = Lookupd::start().unwrap();
        let mut c = Consumer::builder("late", "ch")
            .core_config(fast_config(1))
            .lookupd(lookupd.http_address().to_string())
            .build()
            .unwrap();
        assert!(next(&mut c, Duration::from_millis(300)).await.is_none());
        let nsqd = start(Nsqd::builder().lookupd(&lookupd));
        nsqd.publish("late", b"found you");
        let m = next(&mut c, WAIT)
            .await
            .expect("discovered through lookupd");
        assert_eq!(&m.body()[..], b"found you");
        m.finish();
        c.stop().await;
    });
}

#[test]
fn broker_restart_mid_stream_loses_nothing() {
    run(40, async {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd).await;
        let bodies: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
        p.multi_publish("restart", bodies.clone()).await.unwrap();
        p.close().await;
        let mut c = consumer(&nsqd, "restart", fast_config(10));
        let mut finished = BTreeSet::new();
        while finished.len() < 100 {
            let m = next(&mut c, WAIT).await.unwrap();
            finished.insert(String::from_utf8(m.body().to_vec()).unwrap());
            m.finish();
        }
        nsqd.restart(Restart::KeepMessages).unwrap();
        while finished.len() < 300 {
            let m = next(&mut c, WAIT)
                .await
                .expect("messages after the restart");
            finished.insert(String::from_utf8(m.body().to_vec()).unwrap());
            m.finish();
        }
        assert_eq!(finished, bodies.into_iter().collect());
        c.stop().await;
    });
}

#[test]
fn half_open_broker_is_detected_and_reconnected() {
    run(30, async {
        let nsqd = start(Nsqd::builder());
        let mut config = fast_config(1);
        config.connection.heartbeat_interval = Duration::from_secs(1);
        // A message nsqd hands to the dead connection comes back after msg_timeout.
        config.connection.msg_timeout = Some(Duration::from_secs(1));
        let mut c = consumer(&nsqd, "halfopen", config);
        assert!(eventually(WAIT, || c.stats().connections == 1).await);
        nsqd.pause();
        // No heartbeat for 2 x heartbeat_interval: the connection is presumed dead.
        assert!(eventually(Duration::from_secs(5), || c.stats().connections == 0).await);
        nsqd.resume();
        assert!(
            eventually(WAIT, || {
                let clients = nsqd.clients();
                clients.len() == 1 && clients[0].rdy > 0
            })
            .await
        );
        nsqd.publish("halfopen", b"back");
        let Some(m) = next(&mut c, WAIT).await else {
            let lines: Vec<String> = nsqd
                .commands()
                .into_iter()
                .map(|r| format!("{:?} {:?} {}", r.at, r.client, r.line))
                .collect();
            panic!(
                "a message after reconnecting {lines:#?} {:?} {:?}",
                nsqd.clients(),
                c.stats()
            );
        };
        assert_eq!(&m.body()[..], b"back");
        m.finish();
        c.stop().await;
    });
}

#[test]
fn graceful_stop_with_messages_in_flight_loses_nothing() {
    run(30, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..20 {
            nsqd.publish("stop", format!("s{i}").as_bytes());
        }
        let mut c = consumer(&nsqd, "stop", fast_config(10));
        let mut held = Vec::new();
        while held.len() < 5 {
            held.push(next(&mut c, WAIT).await.unwrap());
        }
        let handle = c.handle();
        let stopper = tokio::spawn(async move { handle.stop().await });
        // The handler finishes its in-flight messages while the stop drains.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !stopper.is_finished(),
            "stop must wait for in-flight messages"
        );
        for m in held {
            m.finish();
        }
        // The stream ends; messages not taken yet are requeued.
        while let Some(m) = next(&mut c, WAIT).await {
            m.finish();
        }
        let report = stopper.await.unwrap();
        assert_eq!(report.unanswered, 0);
        // Every message is finished or back in the queue: none lost.
        let settled = || {
            nsqd.channel("stop", "ch").is_some_and(|ch| {
                ch.in_flight == 0 && ch.finished as usize + ch.depth + ch.deferred == 20
            })
        };
        assert!(
            eventually(WAIT, settled).await,
            "{:?}",
            nsqd.channel("stop", "ch")
        );
        assert!(nsqd.channel("stop", "ch").unwrap().finished >= 5);
    });
}

#[test]
fn handler_api_runs_with_concurrency() {
    run(30, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..50 {
            nsqd.publish("handler", format!("{i}").as_bytes());
        }
        let c = consumer(&nsqd, "handler", fast_config(20));
        let handle = c.handle();
        let seen = Arc::new(AtomicU32::new(0));
        let s = seen.clone();
        let runner = tokio::spawn(c.run(4, move |m: Message| {
            let s = s.clone();
            async move {
                if m.attempts() == 1 && m.body()[0] == b'7' {
                    return Err(nsq_tokio::HandlerError::msg("retry me")
                        .without_backoff()
                        .with_delay(Duration::ZERO));
                }
                s.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }));
        assert!(
            eventually(Duration::from_secs(10), || seen.load(Ordering::SeqCst)
                >= 50)
            .await
        );
        let report = handle.stop().await;
        assert_eq!(report.unanswered, 0);
        runner.await.unwrap();
        let done = || {
            nsqd.channel("handler", "ch")
                .is_some_and(|ch| ch.finished == 50 && ch.requeued == 1)
        };
        assert!(
            eventually(WAIT, done).await,
            "{:?}",
            nsqd.channel("handler", "ch")
        );
    });
}

/// Publishes and consumes one 10 kB message with `connection`; while both are connected,
/// every broker client must satisfy `negotiated`.
async fn round_trip_with(
    nsqd: &Nsqd,
    topic: &str,
    connection: nsq_tokio::ConnectionConfig,
    negotiated: impl Fn(&nsq_test_broker::ClientStats) -> bool,
) {
    let p = Producer::builder()
        .core_config(ProducerConfig {
            connection: connection.clone(),
            ..Default::default()
        })
        .nsqd(nsqd.tcp_address().to_string())
        .build()
        .unwrap();
    p.ping().await.unwrap();
    let body = vec![b'z'; 10_000];
    p.publish(topic, body.clone()).await.unwrap();
    let mut c = consumer(
        nsqd,
        topic,
        ConsumerConfig {
            connection,
            ..fast_config(1)
        },
    );
    let m = next(&mut c, WAIT).await.expect("a message");
    assert_eq!(&m.body()[..], &body[..]);
    m.finish();
    assert!(
        eventually(WAIT, || nsqd
            .channel(topic, "ch")
            .is_some_and(|c| c.finished == 1))
        .await
    );
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 2, "{clients:?}");
    assert!(clients.iter().all(negotiated), "{clients:?}");
    c.stop().await;
    p.close().await;
}

#[test]
fn tls() {
    run(30, async {
        let nsqd = start(Nsqd::builder().tls_server_names(&["127.0.0.1"]));
        let conn = nsq_tokio::ConnectionConfig {
            tls: Some(TlsConfig::from_client_config(
                TestPki::global().client_config(),
            )),
            ..Default::default()
        };
        round_trip_with(&nsqd, "tls", conn, |c| c.tls).await;
    });
}

#[test]
fn snappy() {
    run(30, async {
        let nsqd = start(Nsqd::builder());
        let conn = nsq_tokio::ConnectionConfig {
            compression: Compression::Snappy,
            ..Default::default()
        };
        round_trip_with(&nsqd, "snappy", conn, |c| c.snappy).await;
    });
}

#[test]
fn deflate() {
    run(30, async {
        let nsqd = start(Nsqd::builder());
        let conn = nsq_tokio::ConnectionConfig {
            compression: Compression::Deflate { level: 3 },
            ..Default::default()
        };
        round_trip_with(&nsqd, "deflate", conn, |c| c.deflate == Some(3)).await;
    });
}

#[test]
fn auth() {
    run(30, async {
        let table = AuthTable::new().with(
            "s3cret",
            AuthGrant::new("tester", vec![Authorization::all()]),
        );
        let nsqd = start(Nsqd::builder().auth(table));
        let conn = nsq_tokio::ConnectionConfig {
            auth_secret: Some("s3cret".into()),
            ..Default::default()
        };
        round_trip_with(&nsqd, "auth", conn, |c| {
            c.identity.as_deref() == Some("tester")
        })
        .await;
        // A wrong secret: publishes fail, they do not hang.
        let mut bad = ProducerConfig::default();
        bad.connection.auth_secret = Some("wrong".into());
        bad.publish_timeout = Duration::from_secs(1);
        let p = Producer::builder()
            .core_config(bad)
            .nsqd(nsqd.tcp_address().to_string())
            .build()
            .unwrap();
        assert!(p.publish("auth", "x").await.is_err());
        p.close().await;
    });
}

#[test]
fn idle_connection_is_kept_alive_by_heartbeats() {
    run(30, async {
        let nsqd = start(Nsqd::builder());
        let mut config = fast_config(1);
        config.connection.heartbeat_interval = Duration::from_secs(1);
        let mut c = consumer(&nsqd, "idle", config);
        assert!(eventually(WAIT, || nsqd.clients().len() == 1).await);
        let id = nsqd.clients()[0].id;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let clients = nsqd.clients();
        assert_eq!(clients.len(), 1);
        assert_eq!(
            clients[0].id, id,
            "the connection must not have been replaced"
        );
        assert!(
            nsqd.commands_of(id).iter().any(|r| r.line == "NOP"),
            "heartbeats answered"
        );
        nsqd.publish("idle", b"still here");
        next(&mut c, WAIT).await.expect("a message").finish();
        c.stop().await;
    });
}

#[test]
fn ten_thousand_concurrent_publishes_from_100_tasks() {
    run(60, async {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd).await;
        let tasks: Vec<_> = (0..100)
            .map(|t| {
                let p = p.clone();
                tokio::spawn(async move {
                    for i in 0..100 {
                        p.publish("many", format!("{t}-{i}")).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(p.stats().published, 10_000);
        assert!(
            eventually(WAIT, || nsqd
                .topic("many")
                .is_some_and(|t| t.message_count == 10_000))
            .await
        );
        p.close().await;
    });
}

#[test]
fn producer_fails_over_when_a_broker_dies() {
    run(30, async {
        let a = start(Nsqd::builder());
        let b = start(Nsqd::builder());
        let p = Producer::builder()
            .nsqd(a.tcp_address().to_string())
            .nsqd(b.tcp_address().to_string())
            .build()
            .unwrap();
        p.ping().await.unwrap();
        assert!(eventually(WAIT, || p.stats().connections_ready == 2).await);
        p.publish("fo", "to-a").await.unwrap();
        assert_eq!(a.topic("fo").map(|t| t.message_count), Some(1));
        a.shutdown();
        // Publishes in the window where the loss is discovered may fail (connection lost);
        // afterwards every publish goes to b.
        let mut ok = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while ok < 20 && Instant::now() < deadline {
            if p.publish("fo", "to-b").await.is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, 20);
        assert_eq!(b.topic("fo").map(|t| t.message_count), Some(20));
        p.close().await;
    });
}

#[test]
fn producer_fails_fast_when_no_broker_is_up() {
    run(20, async {
        // A port that was just free: nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let p = Producer::builder().nsqd(addr.to_string()).build().unwrap();
        let started = Instant::now();
        let err = p.publish("nobody", "x").await.unwrap_err();
        assert!(matches!(err, Error::NoServerAvailable(_)), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // Once down, later publishes fail at once.
        let started = Instant::now();
        assert!(p.publish("nobody", "y").await.is_err());
        assert!(started.elapsed() < Duration::from_millis(200));
        assert!(matches!(
            Producer::connect(&addr.to_string(), &Config::default()).await,
            Err(Error::NoServerAvailable(_))
        ));
        p.close().await;
    });
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<nsq_tokio::ConsumerHandle>();
    send::<Consumer>();
    send::<Message>();
    send_sync::<Error>();
}

#[test]
fn server_errors_are_typed() {
    run(20, async {
        let nsqd = start(Nsqd::builder().max_msg_size(10));
        let p = producer(&nsqd).await;
        let err = p.publish("small", vec![b'x'; 100]).await.unwrap_err();
        match &err {
            Error::Server(e) => assert_eq!(e.code_str(), "E_BAD_MESSAGE", "{e}"),
            other => panic!("expected a server error, got {other:?}"),
        }
        // The producer reconnects after nsqd closed the connection: later publishes work.
        let deadline = Instant::now() + WAIT;
        loop {
            match p.publish("small", "ok").await {
                Ok(()) => break,
                Err(e) => assert!(Instant::now() < deadline, "never recovered: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        p.close().await;
    });
}

#[test]
fn dropping_the_consumer_stops_it() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..5 {
            nsqd.publish("dropc", format!("{i}").as_bytes());
        }
        let mut c = consumer(&nsqd, "dropc", fast_config(5));
        let handle = c.handle();
        next(&mut c, WAIT).await.expect("a message").finish();
        drop(c);
        // The handle outlives the consumer: the stop still completes and nothing is lost.
        let report = handle.stop().await;
        assert_eq!(report.unanswered, 0);
        assert!(
            eventually(WAIT, || nsqd.channel("dropc", "ch").is_some_and(|ch| {
                ch.in_flight == 0 && ch.finished == 1 && ch.depth + ch.deferred == 4
            }))
            .await,
            "{:?}",
            nsqd.channel("dropc", "ch")
        );
    });
}

#[test]
fn consumer_is_a_stream() {
    use futures_lite::StreamExt;
    run(20, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..20 {
            nsqd.publish("stream", format!("{i}").as_bytes());
        }
        let c = consumer(&nsqd, "stream", fast_config(5));
        let handle = c.handle();
        // Stream combinators: each message is finished inside `map`.
        let mut bodies = c.map(|m| {
            let body = m.body().clone();
            m.finish();
            body
        });
        let mut seen = BTreeSet::new();
        while seen.len() < 20 {
            let body = tokio::time::timeout(WAIT, bodies.next())
                .await
                .expect("a message in time")
                .expect("the stream is still open");
            seen.insert(String::from_utf8(body.to_vec()).unwrap());
        }
        let expected: BTreeSet<String> = (0..20).map(|i| i.to_string()).collect();
        assert_eq!(seen, expected);
        assert!(
            eventually(WAIT, || nsqd
                .channel("stream", "ch")
                .is_some_and(|ch| ch.finished == 20 && ch.in_flight == 0))
            .await,
            "{:?}",
            nsqd.channel("stream", "ch")
        );
        assert_eq!(handle.stop().await.unanswered, 0);
        // A stopped consumer's stream ends.
        let end = tokio::time::timeout(WAIT, bodies.next())
            .await
            .expect("the stream ends in time");
        assert!(end.is_none(), "a message after stop");
    });
}
