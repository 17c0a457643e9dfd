//! The adaptive in-flight limit through `run`, on a multi-threaded tokio runtime (the shared
//! test of nsq-test-support).

#[path = "support/exec.rs"]
mod exec;

use nsq_test_broker::Nsqd;
use nsq_test_support::adaptive::async_consumer_adapts_its_limit;

#[test]
fn the_limit_moves_from_the_floor_within_the_ceiling() {
    let nsqd = Nsqd::start().unwrap();
    async_consumer_adapts_its_limit(&exec::tokio(), &nsqd);
}
