//! `handle.stop().await` inside a handler of the same consumer's `run`, on a multi-threaded
//! tokio runtime (the shared test of nsq-test-support).

#[path = "support/exec.rs"]
mod exec;

use nsq_test_broker::Nsqd;
use nsq_test_support::stop_inside::async_handler_stops_its_consumer;

#[test]
fn a_handler_stops_its_own_consumer() {
    let nsqd = Nsqd::start().unwrap();
    async_handler_stops_its_consumer(&exec::tokio(), &nsqd);
}
