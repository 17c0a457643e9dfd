//! `run_batch` on nsq-async-std, under async-std's and smol's `block_on` and with the
//! drivers on async-std's executor (the shared scenarios of nsq-test-support; against a real
//! nsqd when `NSQD_TCP_ADDRESS` is set).

mod common;

use common::{AsyncStd, Smol, on};
use nsq_test_support::batches::{self, AsyncRunner};

#[test]
fn batches_fill_and_finish() {
    batches::batches_fill_and_finish(&AsyncRunner(on::<AsyncStd>()));
    batches::batches_fill_and_finish(&AsyncRunner(on::<Smol>()));
}

#[test]
fn the_bound_hands_batches_over() {
    batches::the_bound_hands_batches_over(&AsyncRunner(on::<AsyncStd>()));
    batches::the_bound_hands_batches_over(&AsyncRunner(on::<Smol>()));
}

#[test]
fn auto_touch_keeps_a_slow_batch() {
    batches::auto_touch_keeps_a_slow_batch(&AsyncRunner(on::<AsyncStd>()));
    batches::auto_touch_keeps_a_slow_batch(&AsyncRunner(on::<Smol>()));
}

#[test]
fn a_stop_hands_over_the_partial_batch() {
    batches::a_stop_hands_over_the_partial_batch(&AsyncRunner(on::<AsyncStd>()));
    batches::a_stop_hands_over_the_partial_batch(&AsyncRunner(on::<Smol>()));
}

#[test]
fn single_messages_fail_while_the_rest_finish() {
    batches::single_messages_fail_while_the_rest_finish(&AsyncRunner(on::<AsyncStd>()));
    batches::single_messages_fail_while_the_rest_finish(&AsyncRunner(on::<Smol>()));
}

#[test]
fn a_failed_batch_backs_off_once() {
    batches::a_failed_batch_backs_off_once(&AsyncRunner(on::<AsyncStd>()));
    batches::a_failed_batch_backs_off_once(&AsyncRunner(on::<Smol>()));
}

#[test]
fn batches_mix_nsqd() {
    batches::batches_mix_nsqd(&AsyncRunner(on::<AsyncStd>()));
    batches::batches_mix_nsqd(&AsyncRunner(on::<Smol>()));
}

#[test]
fn a_stop_takes_in_what_was_received() {
    batches::a_stop_takes_in_what_was_received(&AsyncRunner(on::<AsyncStd>()));
    batches::a_stop_takes_in_what_was_received(&AsyncRunner(on::<Smol>()));
}
