//! The `metrics` feature on async-std and smol: every counter, gauge and histogram of a
//! scripted consumer and producer, read back from a capturing recorder (the test bodies of nsq-test-support).

use nsq_test_support::metrics;
use std::time::Duration;

async fn sleep(d: Duration) {
    async_io::Timer::after(d).await;
}

async fn bounded(topic: &str) {
    let deadline = async {
        async_io::Timer::after(Duration::from_secs(30)).await;
        panic!("not finished in 30 s");
    };
    futures_lite::future::or(metrics::scripted(topic, sleep), deadline).await;
}

#[test]
fn every_metric_counts_what_happened() {
    async_std::task::block_on(bounded("metrics_async_std"));
    smol::block_on(bounded("metrics_smol"));
}

#[test]
fn given_up_backoff_and_reconnect_are_counted() {
    smol::block_on(async {
        let deadline = async {
            async_io::Timer::after(Duration::from_secs(30)).await;
            panic!("not finished in 30 s");
        };
        futures_lite::future::or(metrics::faults("metrics_faults_smol", sleep), deadline).await;
    });
}

#[test]
fn handler_durations_are_the_handlers_own_and_waits_hold_the_queue() {
    for (topic, on_smol) in [
        ("metrics_times_async_std", false),
        ("metrics_times_smol", true),
    ] {
        let test = async {
            let deadline = async {
                async_io::Timer::after(Duration::from_secs(30)).await;
                panic!("not finished in 30 s");
            };
            futures_lite::future::or(metrics::handler_times(topic, sleep), deadline).await;
        };
        if on_smol {
            smol::block_on(test);
        } else {
            async_std::task::block_on(test);
        }
    }
}
