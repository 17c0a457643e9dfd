//! nsqd's and nsqlookupd's HTTP APIs and the cluster operations on tokio (both schedulers),
//! against the test broker.

#[path = "support/runtime.rs"]
mod runtime;

use nsq_test_support::http_api;
use runtime::run;

#[test]
fn every_endpoint() {
    run(false, http_api::every_endpoint());
    run(true, http_api::every_endpoint());
}

#[test]
fn wrong_addresses_are_typed_errors() {
    run(false, http_api::wrong_addresses_are_typed_errors());
}

#[test]
fn cluster_operations() {
    run(false, http_api::cluster_operations());
    run(true, http_api::cluster_operations());
}

#[test]
fn configured_headers_are_sent() {
    run(false, http_api::configured_headers_are_sent());
}
