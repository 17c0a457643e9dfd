//! The `metrics` feature with blocking calls: every counter, gauge and histogram of a
//! scripted consumer and producer, read back from a capturing recorder.

use nsq_blocking::{Config, Consumer, HandlerError, Message, Producer};
use nsq_test_broker::Nsqd;
use nsq_test_support::recorder;
use std::time::{Duration, Instant};

#[test]
fn every_metric_counts_what_happened() {
    recorder::snapshotter();
    let topic = "metrics_blocking";
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let producer = Producer::connect(&addr, &Config::default()).unwrap();
    for i in 0..5 {
        producer.publish(topic, format!("ok-{i}")).unwrap();
    }
    producer
        .multi_publish(topic, ["ok-5", "ok-6", "ok-7", "fail-8", "fail-9"])
        .unwrap();
    producer.close();

    let consumer = Consumer::builder(topic, "metrics")
        .max_in_flight(4)
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    let handle = consumer.handle();
    let watcher = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(20);
        while handle.stats().finished < 10 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        handle.stop()
    });
    let report = consumer.run(2, |m: Message| {
        if m.body().starts_with(b"fail") && m.attempts() == 1 {
            return Err(HandlerError::msg("first try fails")
                .without_backoff()
                .with_delay(Duration::ZERO));
        }
        Ok(())
    });
    watcher.join().unwrap();
    assert_eq!(report.unanswered, 0);

    recorder::check_scripted(topic, &addr);
}

/// The handler's duration is its own, and the wait for a handler holds the queue (see
/// `nsq_test_support::metrics::handler_times`, its async twin).
#[test]
fn handler_durations_are_the_handlers_own_and_waits_hold_the_queue() {
    use nsq_test_support::metrics::{HANDLER_TIME, QUEUED};
    use std::sync::atomic::{AtomicBool, Ordering};
    recorder::snapshotter();
    let topic = "metrics_times_blocking";
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
    let queued = consumer.handle();
    let watcher = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(20);
        while handle.stats().finished < QUEUED as u64 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        handle.stop()
    });
    let first = AtomicBool::new(true);
    let report = consumer.run(1, |_m: Message| {
        if first.swap(false, Ordering::SeqCst) {
            while queued.stats().received < QUEUED as u64 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        std::thread::sleep(HANDLER_TIME);
        Ok(())
    });
    watcher.join().unwrap();
    assert_eq!(report.unanswered, 0);
    recorder::check_handler_times(topic, QUEUED, HANDLER_TIME, started.elapsed());

    let topic = "metrics_times_blocking_recv";
    nsqd.publish(topic, b"a");
    nsqd.publish(topic, b"b");
    let mut consumer = Consumer::builder(topic, "times")
        .max_in_flight(2)
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    for _ in 0..2 {
        let m = consumer.recv().expect("a message");
        std::thread::sleep(HANDLER_TIME);
        m.finish();
    }
    consumer.stop();
    recorder::check_recv_times(topic, 2, HANDLER_TIME);
}
