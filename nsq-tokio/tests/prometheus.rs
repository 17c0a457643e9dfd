//! The client's histograms as metrics-exporter-prometheus renders them with the client's
//! buckets, on tokio (nsq-test-support's test; a binary of its own: the recorder is global).

#[test]
fn histograms_render_as_histograms() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let round_trip =
            nsq_test_support::prometheus::round_trip("prometheus_tokio", tokio::time::sleep);
        tokio::time::timeout(std::time::Duration::from_secs(30), round_trip)
            .await
            .expect("within 30 s");
    });
}
