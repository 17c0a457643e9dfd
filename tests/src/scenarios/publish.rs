//! Publishing: round trips, go-nsq-style configuration, name checks, MPUB/DPUB, many
//! concurrent publishes and natural batching, producer failover and fail-fast, typed server
//! errors, a refused message that costs no outage.

use super::{
    ClientError, ConcurrentPublishes, ConsumerSetup, ErrorKind, Factory, GoConfig, WAIT, addr,
    consumer, eventually, fast_config, producer, start, text,
};
use crate::Nsqd;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

pub(super) fn pub_sub_round_trip(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    p.publish("rt", b"hello").unwrap();
    let mut c = consumer(f, &nsqd, "rt", fast_config(1));
    let m = c.next(WAIT).expect("a message");
    assert_eq!(m.body(), b"hello");
    assert_eq!(m.attempts(), 1);
    assert!(m.timestamp() > 0);
    assert_eq!(m.nsqd_address(), addr(&nsqd));
    m.finish();
    assert!(eventually(WAIT, || nsqd
        .channel("rt", "ch")
        .is_some_and(|c| c.finished == 1)));
    assert_eq!(c.stop().unanswered, 0);
    p.close();
}

pub(super) fn go_nsq_style_config(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let config = GoConfig::with(&[
        ("max_in_flight", "7"),
        ("snappy", "true"),
        ("heartbeat_interval", "2s"),
    ]);
    let p = f.producer_connect(&addr(&nsqd), &config).unwrap();
    p.publish("cfg", b"x").unwrap();
    // `Consumer::new(topic, channel, &config)`: not connected anywhere yet.
    let with_config = ConsumerSetup {
        config: Some(config),
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("cfg", "ch", &with_config).unwrap();
    c.connect_to_nsqd(&addr(&nsqd)).unwrap();
    c.next(WAIT).expect("a message").finish();
    assert!(eventually(WAIT, || c.stats().total_rdy == 7));
    assert!(nsqd.clients().iter().all(|c| c.snappy));
    assert!(f.check_option("max_in_flight", "-1").is_err());
    let bad = ConsumerSetup {
        config: Some(GoConfig {
            unchecked_max_attempts: Some(70_000u32 as u16),
            unchecked_deflate_level: Some(12),
            ..GoConfig::default()
        }),
        ..ConsumerSetup::default()
    };
    assert!(matches!(
        f.consumer("cfg", "ch", &bad),
        Err(ClientError {
            kind: ErrorKind::Config,
            ..
        })
    ));
    assert!(c.connect_to_nsqd("not an address").is_err());
    c.stop();
    p.close();
}

pub(super) fn topic_arguments_are_validated(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let err = p.publish("bad topic!", b"x").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidName, "{err}");
    assert!(
        err.message
            .starts_with("invalid topic name \"bad topic!\": "),
        "{err}"
    );
    p.publish_typed("typed", b"x").unwrap();
    let Err(err) = f.consumer("ok", "bad channel", &ConsumerSetup::default()) else {
        panic!("a bad channel name was accepted");
    };
    assert_eq!(err.kind, ErrorKind::InvalidName, "{err}");
    assert!(
        err.message
            .starts_with("invalid channel name \"bad channel\": "),
        "{err}"
    );
    p.close();
}

pub(super) fn multi_publish_delivers_every_body(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let bodies: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    p.multi_publish(
        "mpub",
        bodies.iter().map(|b| b.clone().into_bytes()).collect(),
    )
    .unwrap();
    assert!(p.multi_publish("mpub", Vec::new()).is_err());
    let mut c = consumer(f, &nsqd, "mpub", fast_config(50));
    let mut got = BTreeSet::new();
    while got.len() < 100 {
        let m = c.next(WAIT).expect("all 100 messages");
        got.insert(text(&*m));
        m.finish();
    }
    assert_eq!(got, bodies.into_iter().collect());
    c.stop();
    p.close();
}

pub(super) fn deferred_publish_honours_the_delay(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let mut c = consumer(f, &nsqd, "dpub", fast_config(1));
    let sent = Instant::now();
    p.deferred_publish("dpub", Duration::from_millis(1200), b"later")
        .unwrap();
    let m = c.next(WAIT).expect("the deferred message");
    assert!(
        sent.elapsed() >= Duration::from_millis(1100),
        "{:?}",
        sent.elapsed()
    );
    m.finish();
    c.stop();
    p.close();
}

pub(super) fn ten_thousand_concurrent_publishes_from_100_tasks(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    p.publish_concurrently(&ConcurrentPublishes {
        topic: "many".into(),
        tasks: 100,
        per_task: 100,
        body: |t, i| format!("{t}-{i}"),
    })
    .unwrap();
    assert_eq!(p.stats().published, 10_000);
    assert!(eventually(WAIT, || nsqd
        .topic("many")
        .is_some_and(|t| t.message_count == 10_000)));
    p.close();
}

pub(super) fn producer_fails_over_when_a_broker_dies(f: &dyn Factory) {
    let a = start(Nsqd::builder());
    let b = start(Nsqd::builder());
    let p = f.producer(&[addr(&a), addr(&b)], None).unwrap();
    p.ping().unwrap();
    assert!(eventually(WAIT, || p.stats().connections_ready == 2));
    p.publish("fo", b"to-a").unwrap();
    assert_eq!(a.topic("fo").map(|t| t.message_count), Some(1));
    a.shutdown();
    // Publishes in the window where the loss is discovered may fail (connection lost);
    // afterwards every publish goes to b.
    let mut ok = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while ok < 20 && Instant::now() < deadline {
        if p.publish("fo", b"to-b").is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 20);
    assert_eq!(b.topic("fo").map(|t| t.message_count), Some(20));
    p.close();
}

pub(super) fn producer_fails_fast_when_no_broker_is_up(f: &dyn Factory) {
    // A port that was just free: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let p = f.producer(std::slice::from_ref(&addr), None).unwrap();
    let started = Instant::now();
    let err = p.publish("nobody", b"x").unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoServerAvailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Once down, later publishes fail at once.
    let started = Instant::now();
    assert!(p.publish("nobody", b"y").is_err());
    assert!(started.elapsed() < Duration::from_millis(200));
    assert!(matches!(
        f.producer_connect(&addr, &GoConfig::default()),
        Err(ClientError {
            kind: ErrorKind::NoServerAvailable,
            ..
        })
    ));
    p.close();
}

pub(super) fn server_errors_are_typed(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().max_msg_size(10));
    let p = producer(f, &nsqd);
    let err = p.publish("small", &[b'x'; 100]).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::Server("E_BAD_MESSAGE".into()),
        "expected a server error, got {err}"
    );
    // The producer reconnects after nsqd closed the connection: later publishes work.
    let deadline = Instant::now() + WAIT;
    loop {
        match p.publish("small", b"ok") {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "never recovered: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    p.close();
}

pub(super) fn a_refused_message_costs_no_outage(f: &dyn Factory) {
    // nsqd refuses the oversize message and closes the connection; the producer reconnects
    // at once (no backoff: it is not a server failure), so the publishes that follow all
    // succeed. It also learns nsqd's max-msg-size from the refusal: the next oversize
    // messages fail before they are sent, with that limit, and cost no connection.
    let nsqd = start(Nsqd::builder().max_msg_size(1024));
    let p = producer(f, &nsqd);
    for round in 0..5 {
        let err = p.publish("refused", &[b'x'; 1100]).unwrap_err();
        if round == 0 {
            assert_eq!(err.kind, ErrorKind::Server("E_BAD_MESSAGE".into()), "{err}");
        } else {
            assert_eq!(err.kind, ErrorKind::InvalidInput, "round {round}: {err}");
            assert!(err.message.contains("1024"), "round {round}: {err}");
        }
        for i in 0..1000 {
            if let Err(e) = p.publish("refused", b"good") {
                panic!("round {round}, publish {i} after the refusal failed: {e}");
            }
        }
    }
    let s = p.stats();
    // The four refused before they were sent count as failed too.
    assert_eq!((s.published, s.failed), (5000, 5));
    assert!(eventually(WAIT, || nsqd
        .topic("refused")
        .is_some_and(|t| t.message_count == 5000)));
    // One connection was replaced, once: two IDENTIFYs in all.
    assert_eq!(identifies(&nsqd), 2);
    p.close();
}

pub(super) fn a_limit_nsqd_stated_applies_at_once(f: &dyn Factory) {
    // Two oversize publishes back to back: nsqd refuses the first and closes the connection;
    // the second, made before the connection is back, fails before it is sent, with nsqd's
    // limit in the error, and costs no connection. So do a DPUB and an MPUB over it.
    let nsqd = start(Nsqd::builder().max_msg_size(1000));
    let p = producer(f, &nsqd);
    let first = p.publish("limit", &[b'x'; 2000]).unwrap_err();
    assert_eq!(
        first.kind,
        ErrorKind::Server("E_BAD_MESSAGE".into()),
        "{first}"
    );
    let second = p.publish("limit", &[b'x'; 2000]).unwrap_err();
    assert_eq!(second.kind, ErrorKind::InvalidInput, "{second}");
    assert!(second.message.contains("1000"), "{second}");
    let deferred = p
        .deferred_publish("limit", Duration::from_millis(10), &[b'x'; 2000])
        .unwrap_err();
    assert_eq!(deferred.kind, ErrorKind::InvalidInput, "{deferred}");
    let multi = p
        .multi_publish("limit", vec![b"fits".to_vec(), vec![b'x'; 2000]])
        .unwrap_err();
    assert_eq!(multi.kind, ErrorKind::InvalidInput, "{multi}");
    p.publish("limit", b"fits").unwrap();
    let s = p.stats();
    assert_eq!(
        (s.published, s.failed),
        (1, 4),
        "local refusals count as failed"
    );
    // The one refusal nsqd made replaced the connection once: two IDENTIFYs in all.
    assert_eq!(identifies(&nsqd), 2);
    p.close();
}

pub(super) fn concurrent_publishes_leave_in_batches(f: &dyn Factory) {
    // 100 tasks publishing one message at a time: those waiting together leave as one MPUB,
    // each publish with its own result; one oversize message among them fails alone.
    let nsqd = start(Nsqd::builder().max_msg_size(1024));
    let p = producer(f, &nsqd);
    p.publish_concurrently(&ConcurrentPublishes {
        topic: "batched".into(),
        tasks: 100,
        per_task: 100,
        body: |t, i| format!("{t}-{i}"),
    })
    .unwrap();
    let s = p.stats();
    assert_eq!(s.published, 10_000);
    assert!(s.batches > 0 && s.batched_messages > 0, "{s:?}");
    assert!(eventually(WAIT, || nsqd
        .topic("batched")
        .is_some_and(|t| t.message_count == 10_000)));
    // Oversize publishes from other threads, while the tasks publish: a batch holding one
    // is refused by nsqd and retried one by one, so only the oversize ones fail.
    let oversize: Vec<_> = (0..5)
        .map(|_| {
            let big = p.clone_producer();
            std::thread::spawn(move || big.publish("batched", &[b'x'; 2000]))
        })
        .collect();
    p.publish_concurrently(&ConcurrentPublishes {
        topic: "batched".into(),
        tasks: 50,
        per_task: 20,
        body: |t, i| format!("{t}-{i}"),
    })
    .unwrap();
    // Refused by nsqd, or, once nsqd has stated its limit in a refusal, before sending
    // (the learned limit): either way they fail alone.
    let mut refused_by_nsqd = 0;
    for t in oversize {
        let err = t.join().unwrap().unwrap_err();
        match err.kind {
            ErrorKind::Server(ref code) if code == "E_BAD_MESSAGE" => refused_by_nsqd += 1,
            ErrorKind::InvalidInput => assert!(err.message.contains("max_msg_size 1024"), "{err}"),
            _ => panic!("{err}"),
        }
    }
    assert!(refused_by_nsqd >= 1, "the first one is nsqd's to refuse");
    assert!(eventually(WAIT, || nsqd
        .topic("batched")
        .is_some_and(|t| t.message_count == 11_000)));
    let s = p.stats();
    assert_eq!((s.published, s.failed), (11_000, 5));
    p.close();
}

pub(super) fn publish_async_keeps_thousands_under_way(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let bodies: Vec<Vec<u8>> = (0..5_000).map(|i| format!("a{i}").into_bytes()).collect();
    // Every 7th handle is dropped unwaited: its publish goes on all the same.
    p.publish_async_window("async", bodies, 1_000, 7).unwrap();
    assert!(eventually(WAIT, || nsqd
        .topic("async")
        .is_some_and(|t| t.message_count == 5_000)));
    // From one task they leave in publish order.
    let mut c = consumer(f, &nsqd, "async", fast_config(100));
    for i in 0..200 {
        let m = c.next(WAIT).expect("a message");
        assert_eq!(text(&*m), format!("a{i}"));
        m.finish();
    }
    c.stop();
    p.close();
}

pub(super) fn publish_async_is_refused_beyond_max_pending_publishes(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let config = GoConfig::with(&[("max_pending_publishes", "50")]);
    let p = f.producer_connect(&addr(&nsqd), &config).unwrap();
    // nsqd stops answering: every publish stays unanswered.
    nsqd.pause();
    let burst = p.publish_async_burst("bp", b"x", 200, &|| nsqd.resume());
    let refused = burst.refused.expect("refused once 50 are unanswered");
    assert_eq!(refused.kind, ErrorKind::Backpressure, "{refused}");
    assert!(refused.message.contains("50"), "{refused}");
    assert!(!burst.first_known_early, "no result while nsqd is silent");
    assert_eq!(burst.results.len(), 50);
    assert!(
        burst.results.iter().all(Result::is_ok),
        "{:?}",
        burst.results
    );
    assert!(eventually(WAIT, || nsqd
        .topic("bp")
        .is_some_and(|t| t.message_count == 50)));
    // Once answered, publishing goes on.
    let again = p.publish_async_burst("bp", b"y", 10, &|| {});
    assert!(again.refused.is_none());
    assert!(again.results.iter().all(Result::is_ok), "{again:?}");
    p.close();
}

/// go-nsq's `local_addr`: producer and consumer connections come from that address (on
/// Linux, from 127.0.0.2, which the whole of 127.0.0.0/8 being loopback makes available).
pub(super) fn local_addr_is_bound(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let local = if cfg!(target_os = "linux") {
        "127.0.0.2"
    } else {
        "127.0.0.1"
    };
    let config = GoConfig {
        options: vec![("local_addr".into(), local.into())],
        ..GoConfig::default()
    };
    let p = f.producer_connect(&addr(&nsqd), &config).unwrap();
    p.publish("local", b"x").unwrap();
    let mut c = f
        .consumer(
            "local",
            "ch",
            &ConsumerSetup {
                config: Some(config.clone()),
                nsqd: vec![addr(&nsqd)],
                ..ConsumerSetup::default()
            },
        )
        .unwrap();
    c.next(WAIT).expect("a message").finish();
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 2, "{clients:?}");
    for client in &clients {
        assert_eq!(client.remote_address.ip().to_string(), local, "{client:?}");
    }
    c.stop();
    p.close();
    // An address of the other family cannot reach the nsqd: a connect error, not a hang.
    let v6 = GoConfig {
        options: vec![("local_addr".into(), "::1".into())],
        ..GoConfig::default()
    };
    assert!(f.producer_connect(&addr(&nsqd), &v6).is_err());
}

/// The IDENTIFYs `nsqd` read: one per connection made.
fn identifies(nsqd: &Nsqd) -> usize {
    nsqd.commands()
        .iter()
        .filter(|c| c.name() == "IDENTIFY")
        .count()
}
