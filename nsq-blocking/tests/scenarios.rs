//! nsq-blocking against the in-process test broker: the scenario list.
//! Every test runs under a timeout so nothing hangs.

use nsq_blocking::{
    Compression, Config, Consumer, ConsumerConfig, Error, Message, Producer, ProducerConfig,
    TlsConfig,
};
use nsq_test_broker::{
    AuthGrant, AuthTable, Authorization, Lookupd, Nsqd, NsqdBuilder, Restart, TestPki,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Runs `f` on its own thread with a hard timeout (a panic inside fails the test).
fn run<F: FnOnce() + Send + 'static>(secs: u64, f: F) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(t.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("test timed out"),
    }
}

/// Polls `pred` every 10 ms until it holds or `within` passes.
fn eventually(within: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn next(consumer: &mut Consumer, within: Duration) -> Option<Message> {
    consumer.recv_timeout(within).ok()
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

fn producer(nsqd: &Nsqd) -> Producer {
    Producer::connect(&nsqd.tcp_address().to_string(), &Config::default()).unwrap()
}

#[test]
fn pub_sub_round_trip() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        p.publish("rt", "hello").unwrap();
        let mut c = consumer(&nsqd, "rt", fast_config(1));
        let m = next(&mut c, WAIT).expect("a message");
        assert_eq!(&m.body()[..], b"hello");
        assert_eq!(m.attempts(), 1);
        assert!(m.timestamp() > 0);
        assert_eq!(m.nsqd_address(), nsqd.tcp_address().to_string());
        m.finish();
        assert!(eventually(WAIT, || nsqd
            .channel("rt", "ch")
            .is_some_and(|c| c.finished == 1)));
        assert_eq!(c.stop().unanswered, 0);
        p.close();
    });
}

#[test]
fn go_nsq_style_config() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        let mut config = Config::default();
        config.set_str("max_in_flight", "7").unwrap();
        config.set_str("snappy", "true").unwrap();
        config.set_str("heartbeat_interval", "2s").unwrap();
        let p = Producer::connect(&nsqd.tcp_address().to_string(), &config).unwrap();
        p.publish("cfg", "x").unwrap();
        let mut c = Consumer::new("cfg", "ch", &config).unwrap();
        c.connect_to_nsqd(&nsqd.tcp_address().to_string()).unwrap();
        next(&mut c, WAIT).expect("a message").finish();
        assert!(eventually(WAIT, || c.stats().total_rdy == 7));
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
        assert!(c.connect_to_nsqd("not an address").is_err());
        c.stop();
        p.close();
    });
}

#[test]
fn topic_arguments_are_validated() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let err = p.publish("bad topic!", "x").unwrap_err();
        assert!(matches!(err, Error::InvalidName(_)), "{err}");
        let topic = nsq_blocking::Topic::new("typed").unwrap();
        p.publish(&topic, "x").unwrap();
        assert!(matches!(
            Consumer::builder("ok", "bad channel").build(),
            Err(Error::InvalidName(_))
        ));
        p.close();
    });
}

#[test]
fn multi_publish_delivers_every_body() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let bodies: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
        p.multi_publish("mpub", bodies.clone()).unwrap();
        assert!(p.multi_publish("mpub", Vec::<Vec<u8>>::new()).is_err());
        let mut c = consumer(&nsqd, "mpub", fast_config(50));
        let mut got = BTreeSet::new();
        while got.len() < 100 {
            let m = next(&mut c, WAIT).expect("all 100 messages");
            got.insert(String::from_utf8(m.body().to_vec()).unwrap());
            m.finish();
        }
        assert_eq!(got, bodies.into_iter().collect());
        c.stop();
        p.close();
    });
}

#[test]
fn deferred_publish_honours_the_delay() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let mut c = consumer(&nsqd, "dpub", fast_config(1));
        let sent = Instant::now();
        p.deferred_publish("dpub", Duration::from_millis(1200), "later")
            .unwrap();
        let m = next(&mut c, WAIT).expect("the deferred message");
        assert!(
            sent.elapsed() >= Duration::from_millis(1100),
            "{:?}",
            sent.elapsed()
        );
        m.finish();
        c.stop();
        p.close();
    });
}

#[test]
fn requeue_increments_attempts() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("req", b"again");
        let mut c = consumer(&nsqd, "req", fast_config(1));
        let m = next(&mut c, WAIT).unwrap();
        assert_eq!(m.attempts(), 1);
        m.requeue_without_backoff(Some(Duration::ZERO));
        let m = next(&mut c, WAIT).unwrap();
        assert_eq!(m.attempts(), 2);
        m.finish();
        c.stop();
    });
}

#[test]
fn dropped_message_is_requeued() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("drop", b"x");
        let mut c = consumer(&nsqd, "drop", fast_config(1));
        let m = next(&mut c, WAIT).unwrap();
        drop(m);
        assert!(eventually(WAIT, || nsqd
            .channel("drop", "ch")
            .is_some_and(|c| c.requeued == 1)));
        c.stop();
    });
}

#[test]
fn gives_up_after_max_attempts() {
    run(20, || {
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
            let m = next(&mut c, WAIT).unwrap();
            assert_eq!(m.attempts(), attempt);
            m.requeue_without_backoff(Some(Duration::ZERO));
        }
        assert!(eventually(WAIT, || gave_up.load(Ordering::SeqCst) == 1));
        assert!(eventually(WAIT, || nsqd
            .channel("giveup", "ch")
            .is_some_and(|c| c.finished == 1)));
        assert!(next(&mut c, Duration::from_millis(200)).is_none());
        assert_eq!(c.stats().gave_up, 1);
        c.stop();
    });
}

#[test]
fn backoff_is_rdy_0_then_rdy_1() {
    run(20, || {
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
        let m = next(&mut c, WAIT).unwrap();
        assert!(eventually(WAIT, || c.stats().total_rdy == 5));
        let failed_at = Instant::now();
        m.requeue(Some(Duration::ZERO));
        // Redelivered through the RDY 1 probe after the backoff window.
        let m = next(&mut c, WAIT).expect("redelivery after the backoff window");
        assert!(failed_at.elapsed() >= Duration::from_millis(100));
        assert_eq!(m.attempts(), 2);
        m.finish();
        let lines = || -> Vec<String> { nsqd.commands().into_iter().map(|r| r.line).collect() };
        assert!(eventually(WAIT, || lines()
            .iter()
            .filter(|l| l.starts_with("FIN"))
            .count()
            == 1));
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
        assert!(eventually(WAIT, || c.stats().backoff_level == 0
            && c.stats().total_rdy == 5));
        c.stop();
    });
}

#[test]
fn rdy_is_spread_over_three_brokers() {
    run(30, || {
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
            next(&mut c, WAIT).expect("warm-up message").finish();
        }
        let spread = || {
            brokers.iter().all(|n| {
                let clients = n.clients();
                clients.len() == 1 && clients[0].rdy == 3
            })
        };
        assert!(eventually(WAIT, spread), "RDY 3 on each broker");
        assert!(eventually(WAIT, || c.stats().total_rdy == 9));
        c.stop();
    });
}

#[test]
fn lookupd_discovers_a_broker_added_later() {
    run(30, || {
        let lookupd = Lookupd::start().unwrap();
        let mut c = Consumer::builder("late", "ch")
            .core_config(fast_config(1))
            .lookupd(lookupd.http_address().to_string())
            .build()
            .unwrap();
        assert!(next(&mut c, Duration::from_millis(300)).is_none());
        let nsqd = start(Nsqd::builder().lookupd(&lookupd));
        nsqd.publish("late", b"found you");
        let m = next(&mut c, WAIT).expect("discovered through lookupd");
        assert_eq!(&m.body()[..], b"found you");
        m.finish();
        c.stop();
    });
}

#[test]
fn broker_restart_mid_stream_loses_nothing() {
    run(40, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let bodies: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
        p.multi_publish("restart", bodies.clone()).unwrap();
        p.close();
        let mut c = consumer(&nsqd, "restart", fast_config(10));
        let mut finished = BTreeSet::new();
        while finished.len() < 100 {
            let m = next(&mut c, WAIT).unwrap();
            finished.insert(String::from_utf8(m.body().to_vec()).unwrap());
            m.finish();
        }
        nsqd.restart(Restart::KeepMessages).unwrap();
        while finished.len() < 300 {
            let m = next(&mut c, WAIT).expect("messages after the restart");
            finished.insert(String::from_utf8(m.body().to_vec()).unwrap());
            m.finish();
        }
        assert_eq!(finished, bodies.into_iter().collect());
        c.stop();
    });
}

#[test]
fn half_open_broker_is_detected_and_reconnected() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let mut config = fast_config(1);
        config.connection.heartbeat_interval = Duration::from_secs(1);
        // A message nsqd hands to the dead connection comes back after msg_timeout.
        config.connection.msg_timeout = Some(Duration::from_secs(1));
        let mut c = consumer(&nsqd, "halfopen", config);
        assert!(eventually(WAIT, || c.stats().connections == 1));
        nsqd.pause();
        // No heartbeat for 2 x heartbeat_interval: the connection is presumed dead.
        assert!(eventually(Duration::from_secs(5), || c.stats().connections == 0));
        nsqd.resume();
        assert!(eventually(WAIT, || {
            let clients = nsqd.clients();
            clients.len() == 1 && clients[0].rdy > 0
        }));
        nsqd.publish("halfopen", b"back");
        let Some(m) = next(&mut c, WAIT) else {
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
        c.stop();
    });
}

#[test]
fn graceful_stop_with_messages_in_flight_loses_nothing() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        for i in 0..20 {
            nsqd.publish("stop", format!("s{i}").as_bytes());
        }
        let mut c = consumer(&nsqd, "stop", fast_config(10));
        let mut held = Vec::new();
        while held.len() < 5 {
            held.push(next(&mut c, WAIT).unwrap());
        }
        let handle = c.handle();
        let stopper = std::thread::spawn(move || handle.stop());
        // The handler finishes its in-flight messages while the stop drains.
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !stopper.is_finished(),
            "stop must wait for in-flight messages"
        );
        for m in held {
            m.finish();
        }
        // The stream ends; messages not taken yet are requeued.
        while let Some(m) = next(&mut c, WAIT) {
            m.finish();
        }
        let report = stopper.join().unwrap();
        assert_eq!(report.unanswered, 0);
        // Every message is finished or back in the queue: none lost.
        let settled = || {
            nsqd.channel("stop", "ch").is_some_and(|ch| {
                ch.in_flight == 0 && ch.finished as usize + ch.depth + ch.deferred == 20
            })
        };
        assert!(
            eventually(WAIT, settled),
            "{:?}",
            nsqd.channel("stop", "ch")
        );
        assert!(nsqd.channel("stop", "ch").unwrap().finished >= 5);
    });
}

#[test]
fn handler_api_runs_with_concurrency() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        for i in 0..50 {
            nsqd.publish("handler", format!("{i}").as_bytes());
        }
        let c = consumer(&nsqd, "handler", fast_config(20));
        let handle = c.handle();
        let seen = Arc::new(AtomicU32::new(0));
        let s = seen.clone();
        let runner = std::thread::spawn(move || {
            c.run(4, move |m: Message| {
                if m.attempts() == 1 && m.body()[0] == b'7' {
                    return Err(nsq_blocking::HandlerError::msg("retry me")
                        .without_backoff()
                        .with_delay(Duration::ZERO));
                }
                s.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        });
        assert!(eventually(Duration::from_secs(10), || seen
            .load(Ordering::SeqCst)
            >= 50));
        let report = handle.stop();
        assert_eq!(report.unanswered, 0);
        assert_eq!(runner.join().unwrap().unanswered, 0);
        let done = || {
            nsqd.channel("handler", "ch")
                .is_some_and(|ch| ch.finished == 50 && ch.requeued == 1)
        };
        assert!(
            eventually(WAIT, done),
            "{:?}",
            nsqd.channel("handler", "ch")
        );
    });
}

/// Publishes and consumes one 10 kB message with `connection`; while both are connected,
/// every broker client must satisfy `negotiated`.
fn round_trip_with(
    nsqd: &Nsqd,
    topic: &str,
    connection: nsq_blocking::ConnectionConfig,
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
    p.ping().unwrap();
    let body = vec![b'z'; 10_000];
    p.publish(topic, body.clone()).unwrap();
    let mut c = consumer(
        nsqd,
        topic,
        ConsumerConfig {
            connection,
            ..fast_config(1)
        },
    );
    let m = next(&mut c, WAIT).expect("a message");
    assert_eq!(&m.body()[..], &body[..]);
    m.finish();
    assert!(eventually(WAIT, || nsqd
        .channel(topic, "ch")
        .is_some_and(|c| c.finished == 1)));
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 2, "{clients:?}");
    assert!(clients.iter().all(negotiated), "{clients:?}");
    c.stop();
    p.close();
}

#[test]
fn tls() {
    run(30, || {
        let nsqd = start(Nsqd::builder().tls_server_names(&["127.0.0.1"]));
        let conn = nsq_blocking::ConnectionConfig {
            tls: Some(TlsConfig::from_client_config(
                TestPki::global().client_config(),
            )),
            ..Default::default()
        };
        round_trip_with(&nsqd, "tls", conn, |c| c.tls);
    });
}

#[test]
fn snappy() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let conn = nsq_blocking::ConnectionConfig {
            compression: Compression::Snappy,
            ..Default::default()
        };
        round_trip_with(&nsqd, "snappy", conn, |c| c.snappy);
    });
}

#[test]
fn deflate() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let conn = nsq_blocking::ConnectionConfig {
            compression: Compression::Deflate { level: 3 },
            ..Default::default()
        };
        round_trip_with(&nsqd, "deflate", conn, |c| c.deflate == Some(3));
    });
}

#[test]
fn auth() {
    run(30, || {
        let table = AuthTable::new().with(
            "s3cret",
            AuthGrant::new("tester", vec![Authorization::all()]),
        );
        let nsqd = start(Nsqd::builder().auth(table));
        let conn = nsq_blocking::ConnectionConfig {
            auth_secret: Some("s3cret".into()),
            ..Default::default()
        };
        round_trip_with(&nsqd, "auth", conn, |c| {
            c.identity.as_deref() == Some("tester")
        });
        // A wrong secret: publishes fail, they do not hang.
        let mut bad = ProducerConfig::default();
        bad.connection.auth_secret = Some("wrong".into());
        bad.publish_timeout = Duration::from_secs(1);
        let p = Producer::builder()
            .core_config(bad)
            .nsqd(nsqd.tcp_address().to_string())
            .build()
            .unwrap();
        assert!(p.publish("auth", "x").is_err());
        p.close();
    });
}

#[test]
fn idle_connection_is_kept_alive_by_heartbeats() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let mut config = fast_config(1);
        config.connection.heartbeat_interval = Duration::from_secs(1);
        let mut c = consumer(&nsqd, "idle", config);
        assert!(eventually(WAIT, || nsqd.clients().len() == 1));
        let id = nsqd.clients()[0].id;
        std::thread::sleep(Duration::from_millis(3500));
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
        next(&mut c, WAIT).expect("a message").finish();
        c.stop();
    });
}

#[test]
fn ten_thousand_concurrent_publishes_from_100_threads() {
    run(60, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let tasks: Vec<_> = (0..100)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        p.publish("many", format!("{t}-{i}")).unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.join().unwrap();
        }
        assert_eq!(p.stats().published, 10_000);
        assert!(eventually(WAIT, || nsqd
            .topic("many")
            .is_some_and(|t| t.message_count == 10_000)));
        p.close();
    });
}

#[test]
fn producer_fails_over_when_a_broker_dies() {
    run(30, || {
        let a = start(Nsqd::builder());
        let b = start(Nsqd::builder());
        let p = Producer::builder()
            .nsqd(a.tcp_address().to_string())
            .nsqd(b.tcp_address().to_string())
            .build()
            .unwrap();
        p.ping().unwrap();
        assert!(eventually(WAIT, || p.stats().connections_ready == 2));
        p.publish("fo", "to-a").unwrap();
        assert_eq!(a.topic("fo").map(|t| t.message_count), Some(1));
        a.shutdown();
        // Publishes in the window where the loss is discovered may fail (connection lost);
        // afterwards every publish goes to b.
        let mut ok = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while ok < 20 && Instant::now() < deadline {
            if p.publish("fo", "to-b").is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, 20);
        assert_eq!(b.topic("fo").map(|t| t.message_count), Some(20));
        p.close();
    });
}

#[test]
fn producer_fails_fast_when_no_broker_is_up() {
    run(20, || {
        // A port that was just free: nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let p = Producer::builder().nsqd(addr.to_string()).build().unwrap();
        let started = Instant::now();
        let err = p.publish("nobody", "x").unwrap_err();
        assert!(matches!(err, Error::NoServerAvailable(_)), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // Once down, later publishes fail at once.
        let started = Instant::now();
        assert!(p.publish("nobody", "y").is_err());
        assert!(started.elapsed() < Duration::from_millis(200));
        assert!(matches!(
            Producer::connect(&addr.to_string(), &Config::default()),
            Err(Error::NoServerAvailable(_))
        ));
        p.close();
    });
}

#[test]
fn stop_waits_for_handlers_in_flight() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("slow", b"take your time");
        let c = consumer(&nsqd, "slow", fast_config(1));
        let handle = c.handle();
        let started = Arc::new(AtomicU32::new(0));
        let s = started.clone();
        let runner = std::thread::spawn(move || {
            c.run(2, move |_m: Message| {
                s.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            })
        });
        assert!(eventually(WAIT, || started.load(Ordering::SeqCst) == 1));
        let stop_called = Instant::now();
        let report = handle.stop();
        // The handler in flight finished (FIN) before the consumer stopped.
        assert!(stop_called.elapsed() >= Duration::from_millis(300));
        assert_eq!(report.unanswered, 0);
        assert_eq!(runner.join().unwrap(), report);
        let ch = nsqd.channel("slow", "ch").unwrap();
        assert_eq!((ch.finished, ch.requeued, ch.in_flight), (1, 0, 0));
    });
}

#[test]
fn recv_timeout_iter_and_end_of_stream() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let mut c = consumer(&nsqd, "iter", fast_config(5));
        assert!(matches!(
            c.recv_timeout(Duration::from_millis(100)),
            Err(nsq_blocking::RecvTimeoutError::Timeout)
        ));
        for i in 0..3 {
            nsqd.publish("iter", format!("{i}").as_bytes());
        }
        let bodies: BTreeSet<Vec<u8>> = c
            .iter()
            .take(3)
            .map(|m| {
                let b = m.body().to_vec();
                m.finish();
                b
            })
            .collect();
        assert_eq!(bodies.len(), 3);
        let handle = c.handle();
        assert!(!handle.is_stopping());
        assert_eq!(handle.stop().unanswered, 0);
        assert!(handle.is_stopping());
        assert!(c.recv().is_none());
        assert!(matches!(
            c.recv_timeout(Duration::from_millis(10)),
            Err(nsq_blocking::RecvTimeoutError::Disconnected)
        ));
        assert_eq!(c.iter().count(), 0);
        assert!(matches!(
            c.connect_to_nsqd(&nsqd.tcp_address().to_string()),
            Err(Error::Closed)
        ));
    });
}

#[test]
fn producer_is_shared_across_threads_and_closed_once() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        std::thread::scope(|s| {
            for t in 0..8 {
                let p = &p;
                s.spawn(move || {
                    for i in 0..50 {
                        p.multi_publish("shared", [format!("{t}-{i}-a"), format!("{t}-{i}-b")])
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(p.stats().published, 400);
        assert_eq!(nsqd.topic("shared").map(|t| t.message_count), Some(800));
        // Every concurrent close returns once the producer is closed.
        std::thread::scope(|s| {
            for _ in 0..3 {
                let p = p.clone();
                s.spawn(move || {
                    p.close();
                    assert!(matches!(p.publish("shared", "late"), Err(Error::Closed)));
                });
            }
        });
        p.close();
    });
}

#[test]
fn a_panicking_handler_requeues_with_backoff() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("panic", b"boom once");
        let c = consumer(
            &nsqd,
            "panic",
            ConsumerConfig {
                backoff_multiplier: Duration::from_millis(50),
                default_requeue_delay: Duration::from_millis(10),
                ..fast_config(1)
            },
        );
        let handle = c.handle();
        let calls = Arc::new(AtomicU32::new(0));
        let k = calls.clone();
        let runner = std::thread::spawn(move || {
            c.run(1, move |m: Message| {
                k.fetch_add(1, Ordering::SeqCst);
                assert!(m.attempts() > 1, "first attempt panics (on purpose)");
                Ok(())
            })
        });
        assert!(eventually(WAIT, || nsqd
            .channel("panic", "ch")
            .is_some_and(|c| c.finished == 1)));
        let ch = nsqd.channel("panic", "ch").unwrap();
        assert_eq!(ch.requeued, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(
            nsqd.commands().iter().any(|r| r.line == "RDY 0"),
            "a panic counts as a failure: backoff"
        );
        handle.stop();
        assert_eq!(runner.join().unwrap().unanswered, 0);
    });
}

#[test]
fn max_in_flight_changes_at_runtime_and_starvation_is_reported() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("mif", b"warm-up");
        let mut c = consumer(&nsqd, "mif", fast_config(2));
        // The core starts each connection at RDY 1 and raises it after the first message.
        next(&mut c, WAIT).expect("warm-up message").finish();
        let nsqd = &nsqd;
        let rdy = |n: i64| {
            move || {
                let clients = nsqd.clients();
                clients.len() == 1 && clients[0].rdy == n
            }
        };
        assert!(eventually(WAIT, rdy(2)));
        assert!(!c.is_starved());
        c.set_max_in_flight(0);
        assert!(eventually(WAIT, rdy(0)), "max_in_flight 0 pauses");
        nsqd.publish("mif", b"a");
        nsqd.publish("mif", b"b");
        assert!(next(&mut c, Duration::from_millis(200)).is_none());
        c.handle().set_max_in_flight(2);
        assert!(eventually(WAIT, rdy(2)));
        // Both held: 2 in flight of RDY 2, so a batching handler should flush now.
        let a = next(&mut c, WAIT).unwrap();
        let b = next(&mut c, WAIT).unwrap();
        assert!(eventually(WAIT, || c.is_starved()));
        a.finish();
        b.finish();
        assert!(eventually(WAIT, || !c.is_starved()));
        assert_eq!(c.stop().unanswered, 0);
    });
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<nsq_blocking::ConsumerHandle>();
    send_sync::<Message>();
    send_sync::<Error>();
    send::<Consumer>();
    send::<nsq_blocking::ConsumerBuilder>();
    send::<nsq_blocking::ProducerBuilder>();
}

#[test]
fn server_errors_are_typed() {
    run(20, || {
        let nsqd = start(Nsqd::builder().max_msg_size(10));
        let p = producer(&nsqd);
        let err = p.publish("small", vec![b'x'; 100]).unwrap_err();
        match &err {
            Error::Server(e) => assert_eq!(e.code_str(), "E_BAD_MESSAGE", "{e}"),
            other => panic!("expected a server error, got {other:?}"),
        }
        // The producer reconnects after nsqd closed the connection: later publishes work.
        let deadline = Instant::now() + WAIT;
        loop {
            match p.publish("small", "ok") {
                Ok(()) => break,
                Err(e) => assert!(Instant::now() < deadline, "never recovered: {e}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        p.close();
    });
}

#[test]
fn dropping_the_consumer_stops_it() {
    run(20, || {
        let nsqd = start(Nsqd::builder());
        for i in 0..5 {
            nsqd.publish("dropc", format!("{i}").as_bytes());
        }
        let mut c = consumer(&nsqd, "dropc", fast_config(5));
        let handle = c.handle();
        next(&mut c, WAIT).expect("a message").finish();
        drop(c);
        // Dropping stopped it (messages received but not taken were released at once); the
        // handle outlives the consumer and its stop reports the same.
        assert!(handle.is_stopping());
        let report = handle.stop();
        assert_eq!(report.unanswered, 0);
        assert!(
            eventually(WAIT, || nsqd.channel("dropc", "ch").is_some_and(|ch| {
                ch.in_flight == 0 && ch.finished == 1 && ch.depth + ch.deferred == 4
            })),
            "{:?}",
            nsqd.channel("dropc", "ch")
        );
    });
}

#[test]
fn close_flushes_what_is_outstanding() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let ok = AtomicU32::new(0);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (p, ok) = (&p, &ok);
                s.spawn(move || {
                    for i in 0..200 {
                        match p.publish("flush", format!("{t}-{i}")) {
                            Ok(()) => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Error::Closed) => break,
                            Err(e) => panic!("unexpected {e}"),
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            p.close();
        });
        // Every publish that returned Ok is on the broker, and nothing else is.
        let ok = u64::from(ok.load(Ordering::SeqCst));
        assert!(ok > 0);
        assert_eq!(nsqd.topic("flush").map(|t| t.message_count), Some(ok));
        assert_eq!(p.stats().published, ok);
    });
}
