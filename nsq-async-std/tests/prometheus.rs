//! The client's histograms as metrics-exporter-prometheus renders them with the client's
//! buckets, on smol (nsq-test-support's test; a binary of its own: the recorder is global).

use std::time::Duration;

#[test]
fn histograms_render_as_histograms() {
    smol::block_on(async {
        let sleep = |d| async move {
            async_io::Timer::after(d).await;
        };
        let round_trip = nsq_test_support::prometheus::round_trip("prometheus_smol", sleep);
        let deadline = async {
            async_io::Timer::after(Duration::from_secs(30)).await;
            panic!("not finished in 30 s");
        };
        futures_lite::future::or(round_trip, deadline).await;
    });
}
