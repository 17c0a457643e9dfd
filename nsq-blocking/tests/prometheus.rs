//! The client's histograms as metrics-exporter-prometheus renders them with the client's
//! buckets, with blocking calls (a binary of its own: the recorder is global).

use nsq_blocking::{Batch, BatchOptions, Config, Consumer, Producer};
use nsq_test_broker::Nsqd;
use nsq_test_support::prometheus;

#[test]
fn histograms_render_as_histograms() {
    nsq_test_broker::scenarios::run_within(30, || {
        let handle = prometheus::handle();
        let topic = "prometheus_blocking";
        let nsqd = Nsqd::start().unwrap();
        let addr = nsqd.tcp_address().to_string();
        let producer = Producer::connect(&addr, &Config::default()).unwrap();
        (0..20).for_each(|i| producer.publish(topic, format!("m-{i}")).unwrap());
        producer
            .multi_publish(topic, ["a", "b", "c", "d", "e"])
            .unwrap();
        producer.close();
        let consumer = Consumer::builder(topic, "prometheus")
            .max_in_flight(8)
            .nsqd(addr.as_str())
            .build()
            .unwrap();
        let watch = consumer.handle();
        let stopper = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while watch.stats().finished < 25 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            watch.stop();
        });
        let batch_stats = consumer.handle();
        // In batches: the per-message histograms count every message all the same.
        let options = BatchOptions::new()
            .max_messages(4)
            .linger(std::time::Duration::from_millis(20));
        let report = consumer.run_batch(2, options, |_: Batch| Ok(()));
        stopper.join().unwrap();
        assert_eq!(report.unanswered, 0);
        let batches = batch_stats.batch_stats().batches;
        assert!(batches >= 7, "batches of at most 4: {batches}");
        prometheus::check(handle, topic, 25, 21, batches);
    });
}
