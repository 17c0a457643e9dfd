//! max_in_flight bounds what the application holds at 40 busy brokers, through `recv` and
//! `run`, on a multi-threaded tokio runtime (the shared test of nsq-test-support).

#[path = "support/exec.rs"]
mod exec;

use nsq_test_broker::scenarios::run_within;
use nsq_test_support::in_flight::{async_consumer_holds_at_most_max_in_flight, brokers};

#[test]
fn at_forty_busy_brokers_the_application_holds_at_most_max_in_flight() {
    run_within(240, || {
        let brokers = brokers("bound");
        async_consumer_holds_at_most_max_in_flight(&exec::tokio(), &brokers, "bound");
    });
}
