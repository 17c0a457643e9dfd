//! `handle.stop().await` inside a handler of the same consumer's `run`, under async-std's and
//! smol's `block_on` (the shared test of nsq-test-support).

mod common;

use common::{AsyncStd, Smol, on};
use nsq_test_broker::Nsqd;
use nsq_test_support::stop_inside::async_handler_stops_its_consumer;

#[test]
fn a_handler_stops_its_own_consumer() {
    let nsqd = Nsqd::start().unwrap();
    async_handler_stops_its_consumer(&on::<AsyncStd>(), &nsqd);
    async_handler_stops_its_consumer(&on::<Smol>(), &nsqd);
}
