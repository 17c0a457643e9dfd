//! max_in_flight bounds what the application holds at 40 busy brokers, through
//! `recv_timeout` and `run`'s threads (the shared test of nsq-test-support).

use nsq_test_broker::scenarios::run_within;
use nsq_test_support::in_flight::{blocking_consumer_holds_at_most_max_in_flight, brokers};

#[test]
fn at_forty_busy_brokers_the_application_holds_at_most_max_in_flight() {
    run_within(240, || {
        let brokers = brokers("bound");
        blocking_consumer_holds_at_most_max_in_flight(&brokers, "bound");
    });
}
