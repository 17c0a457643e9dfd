//! The metrics tests of the async adapters, written once over the client layer's generic
//! types: a scripted consumer and producer against the test broker, then every counter,
//! gauge and histogram read back from a capturing recorder.

use crate::recorder::{self, Recorded, snapshotter};
use nsq_client::{Consumer, HandlerError, Message, Producer};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::time::Instant;

/// Publishes 5 single messages and one MPUB of 5 to `topic`, then consumes them with a
/// handler that fails the first delivery of 2 of them (no backoff, no delay): every figure
/// of the consumer and the producer is then known. `sleep` is the runtime's timer.
pub async fn scripted<S: Future<Output = ()>>(topic: &str, sleep: impl Fn(Duration) -> S) {
    snapshotter();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let producer = Producer::connect(&addr, &Config::default()).await.unwrap();
    for i in 0..5 {
        producer.publish(topic, format!("ok-{i}")).await.unwrap();
    }
    let bodies = ["ok-5", "ok-6", "ok-7", "fail-8", "fail-9"];
    producer.multi_publish(topic, bodies).await.unwrap();
    producer.close().await;

    let consumer = Consumer::builder(topic, "metrics")
        .max_in_flight(4)
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    let handle = consumer.handle();
    let run = consumer.run(2, |m: Message| async move {
        if m.body().starts_with(b"fail") && m.attempts() == 1 {
            return Err(HandlerError::msg("first try fails")
                .without_backoff()
                .with_delay(Duration::ZERO));
        }
        Ok(())
    });
    let watch = async {
        for _ in 0..2000 {
            if handle.stats().finished == 10 {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        handle.stop().await
    };
    let (report, _) = futures_lite::future::zip(run, watch).await;
    assert_eq!(report.unanswered, 0);

    recorder::check_scripted(topic, &addr);
}

/// A message that always fails (with backoff) until the consumer gives up on it, then a
/// dropped connection: the given-up, backoff and reconnect figures.
pub async fn faults<S: Future<Output = ()>>(topic: &str, sleep: impl Fn(Duration) -> S) {
    snapshotter();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    nsqd.publish(topic, b"doomed");
    let config = Config {
        max_attempts: 2,
        backoff_multiplier: Duration::from_millis(10),
        max_backoff_duration: Duration::from_millis(50),
        max_in_flight: 1,
        ..Config::default()
    };
    let consumer = Consumer::builder(topic, "faults")
        .config(&config)
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    let handle = consumer.handle();
    let run = consumer.run(1, |_m: Message| async move {
        Err(HandlerError::msg("always fails").with_delay(Duration::ZERO))
    });
    let watch = async {
        // Two failed deliveries, then the third is given up on (max_attempts 2).
        for _ in 0..2000 {
            if handle.stats().gave_up == 1 {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        nsqd.drop_connections();
        for _ in 0..2000 {
            let stats = handle.stats();
            if stats.reconnects == 1 && stats.connections == 1 {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        handle.stop().await
    };
    let _ = futures_lite::future::zip(run, watch).await;

    let r = Recorded::take(topic);
    let ch = [("channel", "faults")];
    assert_eq!(r.counter("nsq_consumer_messages_received_total", &ch), 3);
    assert_eq!(r.counter("nsq_consumer_handler_errors_total", &ch), 2);
    assert_eq!(r.counter("nsq_consumer_messages_requeued_total", &ch), 2);
    assert_eq!(r.counter("nsq_consumer_messages_given_up_total", &ch), 1);
    assert_eq!(r.counter("nsq_consumer_reconnects_total", &ch), 1);
    assert!(r.counter("nsq_consumer_backoffs_total", &ch) >= 1);
    // The given-up delivery never reached a handler.
    assert_eq!(r.observations("nsq_consumer_handler_duration_seconds"), 2);
    assert_eq!(r.observations("nsq_consumer_handler_wait_seconds"), 2);
    assert_eq!(r.gauge("nsq_consumer_connections", &ch), 0);
    assert_eq!(r.gauge("nsq_consumer_backoff_level", &ch), 0);
}

/// Messages in [`handler_times`].
pub const QUEUED: usize = 6;

/// How long each of [`handler_times`]' handlers takes, at least.
pub const HANDLER_TIME: Duration = Duration::from_millis(30);

/// [`QUEUED`] messages all handed out before the first is handled (the first handler waits
/// for `stats().received` to count them all), then handled by `run(1, ..)`, each handler
/// taking [`HANDLER_TIME`]: the handler durations are the handlers' own and the waits hold
/// the queue ([`recorder::check_handler_times`]). Then two messages taken with `recv` and
/// finished [`HANDLER_TIME`] later ([`recorder::check_recv_times`], on `{topic}_recv`).
pub async fn handler_times<S, F>(topic: &str, sleep: F)
where
    S: Future<Output = ()> + Send + 'static,
    F: Fn(Duration) -> S + Copy + Send + Sync + 'static,
{
    snapshotter();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let started = Instant::now();
    for i in 0..QUEUED {
        nsqd.publish(topic, format!("m{i}").as_bytes());
    }
    let consumer = Consumer::builder(topic, "times")
        .max_in_flight(u32::try_from(QUEUED).unwrap())
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    let handle = consumer.handle();
    let first = Arc::new(AtomicBool::new(true));
    let queued = handle.clone();
    let run = consumer.run(1, move |_m: Message| {
        let (queued, first) = (queued.clone(), first.clone());
        async move {
            if first.swap(false, Ordering::SeqCst) {
                while queued.stats().received < QUEUED as u64 {
                    sleep(Duration::from_millis(2)).await;
                }
            }
            sleep(HANDLER_TIME).await;
            Ok(())
        }
    });
    let watch = async {
        for _ in 0..5000 {
            if handle.stats().finished == QUEUED as u64 {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        handle.stop().await
    };
    let (report, _) = futures_lite::future::zip(run, watch).await;
    assert_eq!(report.unanswered, 0);
    recorder::check_handler_times(topic, QUEUED, HANDLER_TIME, started.elapsed());

    let topic = format!("{topic}_recv");
    nsqd.publish(&topic, b"a");
    nsqd.publish(&topic, b"b");
    let mut consumer = Consumer::builder(topic.as_str(), "times")
        .max_in_flight(2)
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    for _ in 0..2 {
        let m = consumer.recv().await.expect("a message");
        sleep(HANDLER_TIME).await;
        m.finish();
    }
    consumer.stop().await;
    recorder::check_recv_times(&topic, 2, HANDLER_TIME);
}
