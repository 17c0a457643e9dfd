//! nsqd's and nsqlookupd's HTTP APIs and the cluster operations on async-std and smol,
//! against the test broker (the same tests as nsq-tokio's, from nsq-test-support).

use nsq_test_support::http_api;
use std::future::Future;
use std::time::Duration;

/// Runs `f` under async-std, then a second copy under smol, each bounded in time.
fn run<F: Future<Output = ()>>(make: impl Fn() -> F) {
    let bounded = |f: F| async move {
        let deadline = async {
            async_io::Timer::after(Duration::from_secs(30)).await;
            panic!("not finished in 30 s");
        };
        futures_lite::future::or(f, deadline).await;
    };
    async_std::task::block_on(bounded(make()));
    smol::block_on(bounded(make()));
}

#[test]
fn every_endpoint() {
    run(http_api::every_endpoint);
}

#[test]
fn wrong_addresses_are_typed_errors() {
    run(http_api::wrong_addresses_are_typed_errors);
}

#[test]
fn cluster_operations() {
    run(http_api::cluster_operations);
}

#[test]
fn configured_headers_are_sent() {
    run(http_api::configured_headers_are_sent);
}
