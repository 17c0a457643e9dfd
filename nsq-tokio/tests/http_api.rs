//! nsqd's and nsqlookupd's HTTP APIs and the cluster operations on tokio (both schedulers),
//! against the test broker.

#[path = "support/http_api.rs"]
#[allow(
    clippy::many_single_char_names,
    reason = "t, c: the topic and channel; n, l: the nsqd and lookupd clients"
)]
mod http_api;

use nsq_tokio::Tokio;
use std::future::Future;
use std::time::Duration;

fn run<F: Future<Output = ()>>(multi: bool, f: F) {
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
        tokio::time::timeout(Duration::from_secs(30), f)
            .await
            .expect("finished in time");
    });
}

#[test]
fn every_endpoint() {
    run(false, http_api::every_endpoint::<Tokio>());
    run(true, http_api::every_endpoint::<Tokio>());
}

#[test]
fn wrong_addresses_are_typed_errors() {
    run(false, http_api::wrong_addresses_are_typed_errors::<Tokio>());
}

#[test]
fn cluster_operations() {
    run(false, http_api::cluster_operations::<Tokio>());
    run(true, http_api::cluster_operations::<Tokio>());
}

#[test]
fn configured_headers_are_sent() {
    run(false, http_api::configured_headers_are_sent::<Tokio>());
}
