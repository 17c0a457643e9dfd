//! No call hangs when a client's driver panics (a socket that panics stands in for any bug):
//! every pending and later call returns (`Error::Closed`, `None`, a report), on smol
//! (nsq-test-support's `Panicky` runtime around nsq-async-std's, and its test).

mod common;

use common::Smol;
use nsq_test_broker::Nsqd;
use nsq_test_support::driver_end;

#[test]
fn every_call_returns_when_the_driver_panics() {
    nsq_test_broker::scenarios::run_within(60, || {
        let nsqd = Nsqd::start().unwrap();
        driver_end::every_call_returns_when_the_driver_panics(&common::on::<Smol>(), &nsqd);
    });
}
