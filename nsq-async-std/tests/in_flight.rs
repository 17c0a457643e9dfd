//! max_in_flight bounds what the application holds at 40 busy brokers, through `recv` and
//! `run`, under async-std's and smol's `block_on` (the shared test of nsq-test-support).

mod common;

use common::{AsyncStd, Smol, on};
use nsq_test_broker::scenarios::run_within;
use nsq_test_support::in_flight::{async_consumer_holds_at_most_max_in_flight, brokers};

#[test]
fn at_forty_busy_brokers_the_application_holds_at_most_max_in_flight_on_async_std() {
    run_within(240, || {
        let brokers = brokers("bound");
        async_consumer_holds_at_most_max_in_flight(&on::<AsyncStd>(), &brokers, "bound");
    });
}

#[test]
fn at_forty_busy_brokers_the_application_holds_at_most_max_in_flight_on_smol() {
    run_within(240, || {
        let brokers = brokers("bound");
        async_consumer_holds_at_most_max_in_flight(&on::<Smol>(), &brokers, "bound");
    });
}
