//! Resource hygiene: after a busy broker and lookupd are dropped, no thread and no listening
//! port is left behind. Alone in its own test binary, so the thread count is not disturbed
//! by other tests.

use std::net::TcpStream;
use std::time::Duration;

use nsq_test_broker::{Lookupd, Nsqd, RawClient, TestPki, http_get_json, wait_until};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

#[cfg(target_os = "linux")]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

#[cfg(not(target_os = "linux"))]
fn threads() -> usize {
    0
}

#[test]
fn dropping_the_servers_leaves_no_thread_or_port_behind() -> R {
    let baseline = threads();
    let lookupd = Lookupd::start()?;
    let nsqd = Nsqd::builder()
        .tls(true)
        .http(true)
        .heartbeat_interval(Duration::from_secs(1))
        .lookupd(&lookupd)
        .start()?;
    let tcp = nsqd.tcp_address();
    let http = nsqd.http_address().ok_or("http")?;
    let lookup_http = lookupd.http_address();

    let mut sub = RawClient::connect_v2(tcp)?;
    sub.identify_negotiate(&json!({"tls_v1": true, "snappy": true}))?;
    sub.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    sub.upgrade_snappy()?;
    sub.subscribe("hyg", "c")?;
    sub.cmd("RDY 10")?;
    let mut publisher = RawClient::connect_v2(tcp)?;
    publisher.identify_negotiate(&json!({"deflate": true}))?;
    publisher.upgrade_deflate(6)?;
    for _ in 0..20 {
        publisher.publish("hyg", b"x")?;
    }
    sub.expect_message()?;
    let _idle = TcpStream::connect(tcp)?; // never sends the magic
    let _half = TcpStream::connect(http)?; // never sends a request
    assert_eq!(http_get_json(lookup_http, "/lookup?topic=hyg")?.0, 200);
    nsqd.pause(); // threads blocked on a pause must stop too
    assert!(threads() > baseline);

    drop(nsqd);
    drop(lookupd);
    assert!(
        wait_until(Duration::from_secs(2), || threads() <= baseline),
        "{} threads left, baseline {baseline}",
        threads()
    );
    for addr in [tcp, http, lookup_http] {
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
            "{addr} still listening"
        );
    }
    Ok(())
}
