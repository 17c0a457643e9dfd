//! The adaptive in-flight limit through `run`'s threads (the shared test of
//! nsq-test-support).

use nsq_test_broker::Nsqd;
use nsq_test_support::adaptive::blocking_consumer_adapts_its_limit;

#[test]
fn the_limit_moves_from_the_floor_within_the_ceiling() {
    let nsqd = Nsqd::start().unwrap();
    blocking_consumer_adapts_its_limit(&nsqd);
}
