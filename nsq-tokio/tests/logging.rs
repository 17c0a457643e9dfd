//! Logs a user can read: every line of a consumer names its topic and channel (and the nsqd of
//! a connection), a producer's lines say producer, two clients are never confused, and the
//! failures a user must see come at WARN/ERROR with what identifies them. The lines are
//! captured with tracing-subscriber's `fmt` layer, as an application would print them.

use std::time::Duration;

use nsq_test_broker::Nsqd;
use nsq_tokio::{Consumer, HandlerError, Message, Producer};

use nsq_test_support::log_capture::{Capture, check_warn_only, closed_address, field};

/// Waiting for a line without blocking the runtime the clients run on.
trait WaitLine {
    /// Waits (bounded) until a line satisfies `pred`; returns it.
    async fn wait_line(&self, what: &str, pred: impl Fn(&str) -> bool) -> String;
}

impl WaitLine for Capture {
    async fn wait_line(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        for _ in 0..500 {
            if let Some(l) = self.lines().into_iter().find(|l| pred(l)) {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no log line {what}; got:\n{}", self.lines().join("\n"));
    }
}

/// A current-thread runtime whose tasks all log into `capture` (the subscriber is the
/// thread's default, so tests running in parallel do not mix).
fn run(capture: &Capture, level: &str, test: impl std::future::Future<Output = ()>) {
    let _guard = tracing::subscriber::set_default(capture.subscriber(level));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), test)
            .await
            .expect("test timed out");
    });
}

#[test]
fn consumer_lines_name_topic_channel_and_nsqd() {
    let capture = Capture::default();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    run(&capture, "info", async {
        nsqd.publish("orders", b"fails");
        nsqd.publish("orders", b"panics");
        let consumer = Consumer::builder("orders", "billing")
            .max_in_flight(2)
            .nsqd(&addr)
            .build()
            .unwrap();
        let handle = consumer.handle();
        let task = tokio::spawn(consumer.run(2, |m: Message| async move {
            tracing::info!("handling it");
            assert!(&m.body()[..] != b"panics", "handler bug");
            Err(HandlerError::from(std::io::Error::other("database down")))
        }));
        let ready = capture
            .wait_line("connected", |l| l.contains("connected to nsqd"))
            .await;
        assert!(ready.contains(" INFO "), "{ready}");
        assert!(
            ready.contains("consumer{id=") && ready.contains("topic=orders channel=billing}"),
            "{ready}"
        );
        assert_eq!(field(&ready, "nsqd"), Some(addr.as_str()), "{ready}");

        // A handler's own line is inside its message's span, inside the consumer's.
        let own = capture
            .wait_line("handling it", |l| l.contains("handling it"))
            .await;
        assert!(own.contains("consumer{id="), "{own}");
        assert!(own.contains(":message{id="), "{own}");
        assert_eq!(field(&own, "attempts"), Some("1"), "{own}");
        assert!(own.contains(&format!("nsqd={addr}")), "{own}");

        let failed = capture
            .wait_line("handler failed", |l| l.contains("handler failed"))
            .await;
        assert!(failed.contains(" WARN "), "{failed}");
        assert!(failed.contains("topic=orders channel=billing"), "{failed}");
        assert_eq!(field(&failed, "msg_id").map(str::len), Some(16), "{failed}");
        assert_eq!(field(&failed, "attempts"), Some("1"), "{failed}");
        assert_eq!(field(&failed, "nsqd"), Some(addr.as_str()), "{failed}");
        assert!(failed.contains("error=database down"), "{failed}");

        let panicked = capture
            .wait_line("handler panicked", |l| l.contains("handler panicked"))
            .await;
        assert!(panicked.contains(" ERROR "), "{panicked}");
        assert!(
            panicked.contains("topic=orders channel=billing"),
            "{panicked}"
        );
        assert_eq!(field(&panicked, "msg_id").map(str::len), Some(16));
        assert!(panicked.contains("panic=\"handler bug\""), "{panicked}");

        // A failure with backoff is said at WARN (go-nsq does too), with the level and window.
        let backoff = capture
            .wait_line("backing off", |l| l.contains("backing off"))
            .await;
        assert!(backoff.contains(" WARN "), "{backoff}");
        assert!(field(&backoff, "level").is_some(), "{backoff}");
        assert!(field(&backoff, "window").is_some(), "{backoff}");

        handle.set_max_in_flight(0);
        let paused = capture
            .wait_line("paused", |l| l.contains("consumer is paused"))
            .await;
        assert!(
            paused.contains(" INFO ") && paused.contains("channel=billing"),
            "{paused}"
        );
        handle.stop().await;
        task.await.unwrap();
    });
    // Every line of this consumer is inside its span; each event is logged once.
    let lines = capture.lines();
    for l in &lines {
        assert!(l.contains("topic=orders channel=billing"), "{l}");
    }
    let connected = lines
        .iter()
        .filter(|l| l.contains("connected to nsqd"))
        .count();
    assert_eq!(connected, 1, "{lines:#?}");
}

#[test]
fn failed_connects_say_when_they_retry_and_lookupd_wrong_port_is_named() {
    let capture = Capture::default();
    let nsqd = Nsqd::start().unwrap();
    let nsqd_port = nsqd.tcp_address().to_string();
    let closed = closed_address();
    run(&capture, "info", async {
        let consumer = Consumer::builder("t", "c")
            .nsqd(&closed)
            .lookupd(&nsqd_port) // nsqd's TCP port, not a lookupd's HTTP port
            .build()
            .unwrap();
        let handle = consumer.handle();
        let failed = capture
            .wait_line("a failed connect", |l| l.contains("nsqd connection failed"))
            .await;
        assert!(failed.contains(" WARN "), "{failed}");
        assert!(failed.contains("retrying in "), "{failed}");
        assert!(field(&failed, "retry_in").is_some(), "{failed}");
        assert_eq!(field(&failed, "nsqd"), Some(closed.as_str()), "{failed}");
        assert!(failed.contains("topic=t channel=c"), "{failed}");

        // Not a lookupd at all: said once, at ERROR, as a misconfiguration.
        let lookupd = capture
            .wait_line("a lookupd failure", |l| {
                l.contains("cannot use this nsqlookupd as configured")
            })
            .await;
        assert!(lookupd.contains(" ERROR "), "{lookupd}");
        assert!(lookupd.contains("wrong port?"), "{lookupd}");
        assert!(lookupd.contains("not polling it again"), "{lookupd}");
        assert!(lookupd.contains(&nsqd_port), "{lookupd}");
        handle.stop().await;
    });
    // The socket layer does not log the same failure again.
    let lines = capture.lines();
    let per_attempt = lines
        .iter()
        .filter(|l| l.contains("connect failed") || l.contains("lookupd request failed"))
        .count();
    assert_eq!(per_attempt, 0, "{lines:#?}");
}

#[test]
fn producers_say_producer_and_two_clients_are_told_apart() {
    let capture = Capture::default();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    run(&capture, "info", async {
        let a = Producer::builder().nsqd(&addr).build().unwrap();
        let b = Producer::builder().nsqd(&addr).build().unwrap();
        a.publish("t", "x").await.unwrap();
        b.publish("t", "y").await.unwrap();
        a.close().await;
        b.close().await;
    });
    let lines = capture.lines();
    let ids: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| l.contains("connected to nsqd"))
        .map(|l| {
            assert!(l.contains("producer{id="), "{l}");
            assert_eq!(field(l, "nsqd"), Some(addr.as_str()), "{l}");
            field(l, "producer{id").unwrap()
        })
        .collect();
    assert_eq!(ids.len(), 2, "{lines:#?}");
}

#[test]
fn more_handlers_than_max_in_flight_is_said() {
    let capture = Capture::default();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    run(&capture, "warn", async {
        let consumer = Consumer::builder("t", "c").nsqd(&addr).build().unwrap();
        let handle = consumer.handle();
        let task = tokio::spawn(consumer.run(8, |_m: Message| async move { Ok(()) }));
        let line = capture
            .wait_line("handlers", |l| {
                l.contains("more handlers than max_in_flight")
            })
            .await;
        assert!(line.contains(" WARN "), "{line}");
        assert_eq!(field(&line, "concurrency"), Some("8"), "{line}");
        assert_eq!(field(&line, "max_in_flight"), Some("1"), "{line}");
        handle.stop().await;
        task.await.unwrap();
    });
}

#[test]
fn under_a_warn_filter_every_line_names_its_client_and_nsqd() {
    let capture = Capture::default();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let closed = closed_address();
    run(&capture, "warn", async {
        nsqd.publish("warn_only", b"fails");
        let consumer = Consumer::builder("warn_only", "ch")
            .nsqd(&addr)
            .nsqd(&closed)
            .build()
            .unwrap();
        let handle = consumer.handle();
        let task = tokio::spawn(consumer.run(1, |_m: Message| async move {
            tracing::warn!("the handler warns");
            Err(HandlerError::msg("database down"))
        }));
        let producer = Producer::builder().nsqd(&closed).build().unwrap();
        for (what, needle) in [
            ("handler failed", "handler failed"),
            ("the handler's line", "the handler warns"),
            ("backing off", "backing off"),
        ] {
            capture.wait_line(what, |l| l.contains(needle)).await;
        }
        for client in ["consumer{id=", "producer{id="] {
            capture
                .wait_line(client, |l| {
                    l.contains(client) && l.contains("nsqd connection failed")
                })
                .await;
        }
        handle.stop().await;
        task.await.unwrap();
        producer.close().await;
    });
    check_warn_only(&capture, "warn_only", &addr, &closed, "the handler warns");
}
