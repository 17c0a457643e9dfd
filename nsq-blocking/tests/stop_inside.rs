//! `handle.stop()` inside a handler of the same consumer's `run` (the shared test of
//! nsq-test-support).

use nsq_test_broker::Nsqd;
use nsq_test_support::stop_inside::blocking_handler_stops_its_consumer;

#[test]
fn a_handler_stops_its_own_consumer() {
    let nsqd = Nsqd::start().unwrap();
    blocking_handler_stops_its_consumer(&nsqd);
}
