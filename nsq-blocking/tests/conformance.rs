//! The broker crate's conformance scenarios, run against nsq-blocking (the blocking client
//! factory of nsq-test-support).

use nsq_test_support::conformance::{BlockingFactory, run_conformance};

#[test]
fn conformance() {
    run_conformance(BlockingFactory::new("nsq-blocking"), 90);
}
