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
