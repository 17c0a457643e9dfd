//! `stop()` from inside a handler of the same consumer (as go-nsq users call `c.Stop()` from
//! `HandleMessage`), written once for every adapter: the stop begins without waiting for the
//! handler that asked for it, that handler's message is answered by its result (finished:
//! not redelivered), and `run` returns promptly, well before the consumer's `drain_timeout`,
//! with nothing unanswered.

use crate::exec::{Exec, timeout};
use nsq_client::{self as client, Message, StopReport};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use nsq_test_broker::scenarios::{WAIT, eventually};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The consumer's drain bound: `run` must return long before it.
const DRAIN: Duration = Duration::from_secs(30);

/// How soon `run` must return once a handler has stopped the consumer.
const PROMPTLY: Duration = Duration::from_secs(5);

/// The configuration of the consumers under test.
fn config() -> Config {
    Config {
        max_in_flight: 4,
        drain_timeout: DRAIN,
        ..Config::default()
    }
}

/// Waits until nsqd's channel `ch` of `topic` shows the consumer done: `finished` holds, no
/// message requeued (none redelivered), none in flight.
fn assert_answered_once(nsqd: &Nsqd, topic: &str, finished: impl Fn(u64) -> bool) {
    let done = || {
        nsqd.channel(topic, "ch")
            .is_some_and(|c| finished(c.finished) && c.requeued == 0 && c.in_flight == 0)
    };
    assert!(eventually(WAIT, done), "{:?}", nsqd.channel(topic, "ch"));
}

/// The async API on runtime `R`, awaited inside `exec`.
pub fn async_handler_stops_its_consumer<E: Exec>(exec: &E, nsqd: &Nsqd) {
    let topic = format!("stop_inside_{}", exec.name().replace(['-', ' '], "_"));
    nsqd.publish(&topic, b"stop");
    let addr = nsqd.tcp_address().to_string();
    let consumer = exec.enter(|| {
        client::Consumer::builder(topic.as_str(), "ch")
            .config(&config())
            .nsqd(addr.as_str())
            .build()
            .expect("a consumer")
    });
    let handle = consumer.handle();
    let inner: Arc<Mutex<Option<StopReport>>> = Arc::default();
    let seen = inner.clone();
    let started = Instant::now();
    let report = exec.block_on(async {
        let run = consumer.run(2, move |_: Message| {
            let (handle, seen) = (handle.clone(), seen.clone());
            async move {
                // Awaited inside the handler: begins the stop, does not wait for the drain.
                let report = handle.stop().await;
                *seen.lock().unwrap() = Some(report);
                Ok(())
            }
        });
        timeout(exec, DRAIN + WAIT, run).await
    });
    let report = report.expect("run returned");
    assert!(
        started.elapsed() < PROMPTLY,
        "run returned after {:?}",
        started.elapsed()
    );
    assert_eq!(report.unanswered, 0);
    assert!(
        inner.lock().unwrap().is_some(),
        "the handler's stop returned"
    );
    assert_answered_once(nsqd, &topic, |f| f == 1);
}

/// The blocking API on runtime `R`.
pub fn blocking_handler_stops_its_consumer(nsqd: &Nsqd) {
    let topic = "stop_inside_blocking";
    nsqd.publish(topic, b"stop");
    let consumer = client::blocking::Consumer::builder(topic, "ch")
        .config(&config())
        .nsqd(nsqd.tcp_address().to_string())
        .build()
        .expect("a consumer");
    let handle = consumer.handle();
    let started = Instant::now();
    let report = consumer.run(2, move |_: Message| {
        let report = handle.stop();
        assert_eq!(report.unanswered, 0);
        Ok(())
    });
    assert!(
        started.elapsed() < PROMPTLY,
        "run returned after {:?}",
        started.elapsed()
    );
    assert_eq!(report.unanswered, 0);
    assert_answered_once(nsqd, topic, |f| f == 1);
}
