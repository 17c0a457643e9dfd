//! The client's histograms rendered by metrics-exporter-prometheus with the client's own
//! buckets ([`nsq_client::HISTOGRAM_BUCKETS`]), as the `prometheus` example and the guide's
//! metrics recipe install it: real histogram families, no summaries, and each series' buckets agree
//! with its `_count`. Each adapter runs it in a test binary of its own (the recorder is
//! global).

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use nsq_client::{Batch, BatchOptions, Consumer, HISTOGRAM_BUCKETS, Producer};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

/// The process's Prometheus recorder, installed once with the client's buckets.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let mut builder = PrometheusBuilder::new();
        for (name, buckets) in HISTOGRAM_BUCKETS {
            builder = builder
                .set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
                .expect("valid buckets");
        }
        builder.install_recorder().expect("the only recorder")
    })
}

/// Publishes 20 single messages and one MPUB of 5 to `topic` through the async API on `R`,
/// consumes them with a handler, then checks the rendered histograms. `sleep` is the
/// runtime's timer.
pub async fn round_trip<S: Future<Output = ()>>(topic: &str, sleep: impl Fn(Duration) -> S) {
    let handle = handle();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let producer = Producer::connect(&addr, &Config::default()).await.unwrap();
    for i in 0..20 {
        producer.publish(topic, format!("m-{i}")).await.unwrap();
    }
    producer
        .multi_publish(topic, ["a", "b", "c", "d", "e"])
        .await
        .unwrap();
    producer.close().await;
    let consumer = Consumer::builder(topic, "prometheus")
        .max_in_flight(8)
        .nsqd(addr.as_str())
        .build()
        .unwrap();
    let watch = consumer.handle();
    // In batches: the per-message histograms count every message all the same.
    let options = BatchOptions::new()
        .max_messages(4)
        .linger(Duration::from_millis(20));
    let run = consumer.run_batch(2, options, |_: Batch| async { Ok(()) });
    let stop = async {
        for _ in 0..2000 {
            if watch.stats().finished == 25 {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        watch.stop().await
    };
    let (report, _) = futures_lite::future::zip(run, stop).await;
    assert_eq!(report.unanswered, 0);
    let batches = watch.batch_stats().batches;
    assert!(batches >= 7, "batches of at most 4: {batches}");
    check(handle, topic, 25, 21, batches);
}

/// The rendered metrics of `topic`: every histogram of the client a `histogram` family (no
/// summary), each series' `le="+Inf"` bucket equal to its `_count`, its buckets
/// non-decreasing; the consumer's histograms counted `messages` observations (its batch
/// histograms `batches`), the producer's `publishes`.
pub fn check(handle: &PrometheusHandle, topic: &str, messages: u64, publishes: u64, batches: u64) {
    handle.run_upkeep();
    let text = handle.render();
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("# TYPE nsq_") && l.ends_with(" summary")),
        "{text}"
    );
    let label = format!("topic=\"{topic}\"");
    for (name, bounds) in HISTOGRAM_BUCKETS {
        assert!(
            text.contains(&format!("# TYPE {name} histogram")),
            "{name} is not a histogram:\n{text}"
        );
        let value =
            |line: &str| -> u64 { line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64 };
        let series = |suffix: &str| -> Vec<&str> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{suffix}{{")) && l.contains(&label))
                .collect()
        };
        let buckets = series("_bucket");
        let count = series("_count");
        assert_eq!(count.len(), 1, "{name} of {topic}:\n{text}");
        let count = value(count[0]);
        assert_eq!(
            buckets.len(),
            bounds.len() + 1,
            "{name}: a bucket per bound, and +Inf"
        );
        let counts: Vec<u64> = buckets.iter().map(|l| value(l)).collect();
        assert!(
            counts.windows(2).all(|w| w[0] <= w[1]),
            "{name}: {counts:?}"
        );
        let inf = buckets
            .iter()
            .find(|l| l.contains("le=\"+Inf\""))
            .expect("a +Inf bucket");
        assert_eq!(value(inf), count, "{name}: +Inf against _count");
        let expected = if name.starts_with("nsq_consumer_batch") {
            batches
        } else if name.starts_with("nsq_consumer") {
            messages
        } else {
            publishes
        };
        assert_eq!(count, expected, "{name} of {topic}");
    }
}
