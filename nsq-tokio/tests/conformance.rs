//! The broker crate's conformance scenarios, run against nsq-tokio (the client factory of
//! nsq-test-support, on a 2-thread runtime).

#[path = "support/exec.rs"]
mod exec;

use nsq_test_support::conformance::{AsyncFactory, run_conformance};

#[test]
fn conformance() {
    run_conformance(AsyncFactory::new(exec::tokio()), 60);
}
