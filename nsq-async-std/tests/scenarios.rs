//! nsq-async-std against the in-process test broker: the shared adapter scenarios
//! (`nsq_test_broker::scenarios`, one `#[test]` each) and the tests only this adapter has,
//! every one under async-std's runtime AND under smol. Every test runs under a timeout so
//! nothing hangs.

mod common;

use common::{AsyncStd, Runtime, Smol, eventually, timeout};
use nsq_async_std::{Consumer, Producer};
use nsq_client::{Error, Message};
use nsq_proto::consumer::ConsumerConfig;
use nsq_test_broker::Nsqd;
use nsq_test_broker::scenarios::{WAIT, start};
use nsq_test_support::glue::fast_config;
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

// ------------------------------------------------------------------- the shared scenarios

mod on_async_std {
    nsq_test_broker::adapter_scenario_tests!(crate::common::clients::<crate::AsyncStd>);
}

mod on_smol {
    nsq_test_broker::adapter_scenario_tests!(crate::common::clients::<crate::Smol>);
}

// ----------------------------------------------------------- nsq-async-std's own tests

/// Runs `f` under runtime `R` with a hard timeout.
fn run<R: Runtime, F: Future<Output = ()>>(secs: u64, f: F) {
    R::block_on(async move {
        timeout(Duration::from_secs(secs), f)
            .await
            .unwrap_or_else(|| panic!("test timed out under {}", R::NAME));
    });
}

/// One `#[test]` per runtime for the test `async fn name<R: Runtime>()`.
macro_rules! both {
    ($name:ident, $secs:expr) => {
        mod $name {
            #[test]
            fn async_std() {
                super::run::<super::AsyncStd, _>($secs, super::$name::<super::AsyncStd>());
            }
            #[test]
            fn smol() {
                super::run::<super::Smol, _>($secs, super::$name::<super::Smol>());
            }
        }
    };
}

async fn next(consumer: &mut Consumer, within: Duration) -> Option<Message> {
    timeout(within, consumer.recv()).await.flatten()
}

fn consumer(nsqd: &Nsqd, topic: &str, config: ConsumerConfig) -> Consumer {
    nsq_test_support::consumer!(Consumer, nsqd, topic, config)
}

both!(consumer_is_a_stream, 20);
async fn consumer_is_a_stream<R: Runtime>() {
    use futures_lite::StreamExt;
    let nsqd = start(Nsqd::builder());
    for i in 0..3 {
        nsqd.publish("stream", format!("s{i}").as_bytes());
    }
    let mut c = consumer(&nsqd, "stream", fast_config(3));
    let mut got = BTreeSet::new();
    while got.len() < 3 {
        let m = timeout(WAIT, c.next())
            .await
            .flatten()
            .expect("a message from the stream");
        assert!(format!("{m:?}").contains("attempts"));
        got.insert(String::from_utf8(m.body().to_vec()).unwrap());
        m.finish();
    }
    assert_eq!(got.len(), 3);
    // Pause, then resume: max_in_flight follows.
    c.as_handle().set_max_in_flight(0);
    assert!(eventually(WAIT, || c.as_handle().stats().total_rdy == 0).await);
    assert!(!c.as_handle().is_starved());
    c.as_handle().set_max_in_flight(2);
    assert!(eventually(WAIT, || c.as_handle().stats().total_rdy == 2).await);
    let handle = c.handle();
    assert_eq!(handle.stop().await.unanswered, 0);
    // Once stopped the stream ends.
    assert!(
        timeout(WAIT, c.next())
            .await
            .expect("ends at once")
            .is_none()
    );
    assert!(matches!(
        handle.connect_to_nsqd("127.0.0.1:1").await,
        Err(Error::Closed)
    ));
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<nsq_async_std::ConsumerHandle>();
    send::<Consumer>();
    send::<Message>();
    send_sync::<Error>();
}

both!(a_dropped_receiver_stops_instead_of_looping, 20);
async fn a_dropped_receiver_stops_instead_of_looping<R: Runtime>() {
    let nsqd = start(Nsqd::builder());
    for i in 0..5 {
        nsqd.publish("droprx", format!("{i}").as_bytes());
    }
    let mut c = consumer(&nsqd, "droprx", fast_config(1));
    let handle = c.handle();
    next(&mut c, WAIT).await.expect("a message").finish();
    // The handle keeps the consumer alive, but nobody can receive its messages any more.
    drop(c);
    assert!(
        eventually(WAIT, || nsqd.clients().is_empty()).await,
        "the consumer stops"
    );
    let ch = nsqd.channel("droprx", "ch").unwrap();
    assert_eq!(ch.finished, 1);
    // At most the message queued when the receiver went and the one that found it gone.
    assert!(ch.requeued <= 2, "no redelivery loop: {ch:?}");
    assert_eq!(ch.depth + ch.deferred, 4, "{ch:?}");
    assert_eq!(handle.stop().await.unanswered, 0);
}
