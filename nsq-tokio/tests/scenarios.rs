//! nsq-tokio against the in-process test broker: the shared adapter scenarios
//! (`nsq_test_broker::scenarios`, one `#[test]` each), plus the tests only tokio has.
//! Every test runs under a timeout so nothing hangs.

#[path = "support/exec.rs"]
mod exec;

use exec::tokio;
use nsq_client::{Error, Message};
use nsq_test_broker::scenarios::{WAIT, eventually, start};
use nsq_test_broker::{Nsqd, adapter_scenario_tests};
use nsq_test_support::exec::Exec;
use nsq_test_support::glue;
use nsq_test_support::scenarios::AsyncClients;
use nsq_tokio::{Consumer, ConsumerHandle, Producer};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

// ------------------------------------------------------------------- the shared scenarios

// nsq-tokio on a 2-thread runtime; every call blocks on it.
adapter_scenario_tests!(|| AsyncClients::new(tokio()));

// --------------------------------------------------------------------- tokio's own tests

/// Runs `f` on a 2-thread runtime with a hard timeout.
fn run<F: Future<Output = ()> + Send + 'static>(secs: u64, f: F) {
    tokio().block_on(async move {
        tokio::time::timeout(Duration::from_secs(secs), f)
            .await
            .expect("test timed out");
    });
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<ConsumerHandle>();
    send::<Consumer>();
    send::<Message>();
    send_sync::<Error>();
}

/// `Consumer` is a `futures` `Stream`: combinators work, and the stream ends once stopped.
#[test]
fn consumer_is_a_stream() {
    use futures_lite::StreamExt;
    run(20, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..20 {
            nsqd.publish("stream", format!("{i}").as_bytes());
        }
        let c = nsq_test_support::consumer!(Consumer, &nsqd, "stream", glue::fast_config(5));
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
                .is_some_and(|ch| ch.finished == 20 && ch.in_flight == 0)),
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

/// Dropping the `Consumer` (the only receiver) while a handle lives: what was queued is
/// requeued once, the driver stops instead of redelivering forever, nothing is lost.
#[test]
fn a_dropped_receiver_stops_instead_of_looping() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..5 {
            nsqd.publish("droprx", format!("{i}").as_bytes());
        }
        let mut c = nsq_test_support::consumer!(Consumer, &nsqd, "droprx", glue::fast_config(1));
        let handle = c.handle();
        tokio::time::timeout(WAIT, c.recv())
            .await
            .expect("a message in time")
            .expect("a message")
            .finish();
        // The handle keeps the consumer alive, but nobody can receive its messages any more.
        drop(c);
        assert!(
            eventually(WAIT, || nsqd.clients().is_empty()),
            "the consumer stops"
        );
        let ch = nsqd.channel("droprx", "ch").unwrap();
        assert_eq!(ch.finished, 1);
        // At most the message queued when the receiver went and the one that found it gone.
        assert!(ch.requeued <= 2, "no redelivery loop: {ch:?}");
        assert_eq!(ch.depth + ch.deferred, 4, "{ch:?}");
        assert_eq!(handle.stop().await.unanswered, 0);
    });
}
