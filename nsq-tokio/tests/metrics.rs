//! The `metrics` feature on tokio: every counter, gauge and histogram of a scripted consumer
//! and producer, read back from a capturing recorder.

#[path = "support/recorder.rs"]
mod recorder;

#[path = "support/metrics.rs"]
mod metrics;

use nsq_tokio::Tokio;
use std::time::Duration;

#[test]
fn every_metric_counts_what_happened() {
    for (multi, topic) in [(false, "metrics_current"), (true, "metrics_multi")] {
        let rt = if multi {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        .unwrap();
        rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                metrics::scripted::<Tokio, _>(topic, tokio::time::sleep),
            )
            .await
            .expect("finished in time");
        });
    }
}

#[test]
fn given_up_backoff_and_reconnect_are_counted() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(30),
            metrics::faults::<Tokio, _>("metrics_faults", tokio::time::sleep),
        )
        .await
        .expect("finished in time");
    });
}
