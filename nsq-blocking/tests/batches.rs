//! `run_batch` on nsq-blocking, on threads (the shared scenarios of nsq-test-support; against
//! a real nsqd when `NSQD_TCP_ADDRESS` is set).

use nsq_test_support::batches::{self, BlockingRunner};

#[test]
fn batches_fill_and_finish() {
    batches::batches_fill_and_finish(&BlockingRunner);
}

#[test]
fn the_bound_hands_batches_over() {
    batches::the_bound_hands_batches_over(&BlockingRunner);
}

#[test]
fn auto_touch_keeps_a_slow_batch() {
    batches::auto_touch_keeps_a_slow_batch(&BlockingRunner);
}

#[test]
fn a_stop_hands_over_the_partial_batch() {
    batches::a_stop_hands_over_the_partial_batch(&BlockingRunner);
}

#[test]
fn single_messages_fail_while_the_rest_finish() {
    batches::single_messages_fail_while_the_rest_finish(&BlockingRunner);
}

#[test]
fn a_failed_batch_backs_off_once() {
    batches::a_failed_batch_backs_off_once(&BlockingRunner);
}

#[test]
fn batches_mix_nsqd() {
    batches::batches_mix_nsqd(&BlockingRunner);
}

#[test]
fn a_stop_takes_in_what_was_received() {
    batches::a_stop_takes_in_what_was_received(&BlockingRunner);
}
