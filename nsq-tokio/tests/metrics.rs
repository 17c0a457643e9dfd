//! The `metrics` feature on tokio: every counter, gauge and histogram of a scripted consumer
//! and producer, read back from a capturing recorder.

#[path = "support/runtime.rs"]
mod runtime;

use nsq_test_support::metrics;
use runtime::run;

#[test]
fn every_metric_counts_what_happened() {
    run(
        false,
        metrics::scripted("metrics_current", tokio::time::sleep),
    );
    run(true, metrics::scripted("metrics_multi", tokio::time::sleep));
}

#[test]
fn given_up_backoff_and_reconnect_are_counted() {
    run(false, metrics::faults("metrics_faults", tokio::time::sleep));
}

#[test]
fn handler_durations_are_the_handlers_own_and_waits_hold_the_queue() {
    run(
        false,
        metrics::handler_times("metrics_times_current", tokio::time::sleep),
    );
    run(
        true,
        metrics::handler_times("metrics_times_multi", tokio::time::sleep),
    );
}
