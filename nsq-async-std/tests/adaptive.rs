//! The adaptive in-flight limit through `run`, under async-std's and smol's `block_on` (the
//! shared test of nsq-test-support).

mod common;

use common::{AsyncStd, Smol, on};
use nsq_test_broker::Nsqd;
use nsq_test_support::adaptive::async_consumer_adapts_its_limit;

#[test]
fn the_limit_moves_from_the_floor_within_the_ceiling() {
    let nsqd = Nsqd::start().unwrap();
    async_consumer_adapts_its_limit(&on::<AsyncStd>(), &nsqd);
    async_consumer_adapts_its_limit(&on::<Smol>(), &nsqd);
}
