//! Batches across many nsqd (issue 46), in the simulator: nsq-proto's real consumer under an
//! application that gathers batches with the client layer's rules (`SimConfig::with_batches`,
//! `nsq_test_broker::sim::BatchConfig`), nsqd's msg_timeout 2 s, faults that keep every link
//! delivering (stops, max_in_flight changes, lookupd outages, nsqd leaving, resets,
//! restarts). Every run checks after each step, besides the world's invariants (the in-flight
//! bound, RDY within it, starvation, at least once, graceful stops): no message times out on
//! a connection still up, the consumer says it is full (`is_full`) whenever the application
//! holds max_in_flight, a failed batch raises the backoff level by one at most, and a stopped
//! consumer closes with nothing held. The large worlds are `simulate --batch`'s
//! (SIMULATION.md).

use nsq_test_support::sim as sim_glue;

use std::time::Duration;

use nsq_test_broker::sim::{self, BatchConfig, BatchEnd, BatchReport, Report, SimConfig};

/// A batch world of `nsqd` nsqd, kept busy (every nsqd holding messages) for a fault phase
/// of 30 s.
fn world(seed: u64, nsqd: usize, max_in_flight: u32, batch: BatchConfig, busy: bool) -> SimConfig {
    let mut cfg = SimConfig::new(seed, nsqd, max_in_flight).with_batches(batch);
    cfg.busy = busy;
    cfg.fault_phase = Duration::from_secs(30);
    cfg
}

fn run(cfg: &SimConfig) -> Report {
    sim::run(cfg, &mut sim_glue::NsqProtoFactory::default())
}

/// The run broke no invariant; its batch report.
fn clean(r: &Report) -> &BatchReport {
    assert!(
        r.violation.is_none(),
        "{} (faults: {:?})",
        r.violation
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        r.faults
    );
    let b = r
        .batches
        .as_ref()
        .expect("a batch world reports its batches");
    assert_eq!(b.timeouts, 0, "{}", b.line());
    assert!(b.batches > 0 && b.auto_touch_on >= 1, "{}", b.line());
    b
}

/// Batches of 100 lingering 3 s (longer than msg_timeout) over 20 busy nsqd, max_in_flight
/// 400: most batches are full and mix nsqd, none of their messages times out, and every
/// nsqd is served within the starvation bound.
#[test]
fn batches_fill_across_many_nsqd() {
    for seed in 1..=2 {
        let batch = BatchConfig {
            max_messages: 100,
            linger: Duration::from_secs(3),
            ..BatchConfig::default()
        };
        let r = run(&world(seed, 20, 400, batch, true));
        let b = clean(&r);
        assert!(
            b.ended_in_phase[BatchEnd::Full.index()] * 2 > b.batches,
            "{}",
            b.line()
        );
        assert!(b.mixed * 2 > b.batches && b.most_nsqd >= 10, "{}", b.line());
        assert!(r.worst_starvation <= r.starvation_bound, "{r:?}");
    }
}

/// The same seed, the same run: batches do not make the world depend on anything else.
#[test]
fn a_batch_world_replays() {
    let cfg = world(5, 8, 100, BatchConfig::default(), true);
    let (a, b) = (run(&cfg), run(&cfg));
    assert_eq!((a.trace_hash, a.steps), (b.trace_hash, b.steps));
}

/// With max_in_flight (50) below max_messages (200), batches end at the bound as soon as
/// the application holds max_in_flight: none waits for its linger (2 s) while every nsqd
/// has messages, and none is larger than max_in_flight allows (twice it while a fault raises
/// it). (After the fault phase, with most nsqd empty, batches do linger: SIMULATION.md,
/// "Open findings (batches)", 1.)
#[test]
fn below_max_messages_batches_end_at_the_bound() {
    for seed in 1..=2 {
        let batch = BatchConfig {
            max_messages: 200,
            linger: Duration::from_secs(2),
            ..BatchConfig::default()
        };
        let r = run(&world(seed, 20, 50, batch, true));
        let b = clean(&r);
        let ended = |e: BatchEnd| b.ended_in_phase[e.index()];
        assert_eq!(ended(BatchEnd::Linger), 0, "{}", b.line());
        assert_eq!(ended(BatchEnd::Full), 0, "{}", b.line());
        assert!(ended(BatchEnd::Bound) > 0, "{}", b.line());
        assert!(b.size_at(1.0) <= 100, "{}", b.line());
    }
}

/// A sparse world (2,000 messages over 30 s across 20 nsqd): batches linger 5 s and are
/// handled for 2.5 s, so messages are held more than twice msg_timeout, auto-touched; the
/// graceful stops hand their partial batches over, answered before the consumer closes.
#[test]
fn held_messages_are_touched_and_stops_answer_the_partial_batch() {
    let mut total = BatchReport::default();
    for seed in 1..=4 {
        let batch = BatchConfig {
            max_messages: 500,
            linger: Duration::from_secs(5),
            service: Duration::from_millis(2_500),
            ..BatchConfig::default()
        };
        let r = run(&world(seed, 20, 2_500, batch, false));
        total.add(clean(&r));
    }
    assert!(
        total.longest_hold > Duration::from_secs(4),
        "{}",
        total.line()
    );
    assert!(total.ended_by(BatchEnd::Linger) > 0, "{}", total.line());
    assert!(total.ended_by(BatchEnd::Stop) > 0, "{}", total.line());
}

/// One batch in seven fails: each one requeues all its messages, with backoff on the first
/// only, so the backoff level rises by one per failed batch, not by its size.
#[test]
fn a_failed_batch_counts_once_for_backoff() {
    let mut total = BatchReport::default();
    for seed in 1..=2 {
        let batch = BatchConfig {
            max_messages: 50,
            fail: 0.15,
            ..BatchConfig::default()
        };
        let r = run(&world(seed, 10, 100, batch, true));
        total.add(clean(&r));
    }
    assert!(total.failed >= 10, "{}", total.line());
    assert_eq!(total.worst_backoff_rise, 1, "{}", total.line());
}

/// The checks bite: with auto-touch kept up for only 500 ms after a delivery, messages held
/// in batches of 3 s time out on nsqd, and the run says so.
#[test]
fn a_message_that_times_out_is_a_violation() {
    let batch = BatchConfig {
        linger: Duration::from_secs(3),
        auto_touch_limit: Duration::from_millis(500),
        ..BatchConfig::default()
    };
    let r = run(&world(1, 5, 2_500, batch, false));
    let v = r.violation.expect("held messages time out");
    assert!(v.what.contains("timed out"), "{v}");
}

/// Batching turned on late (1.5 s after a consumer's first message, of nsqd's 2 s
/// msg_timeout): `set_auto_touch` arms the messages already in flight, and none times out.
#[test]
fn auto_touch_turned_on_late_arms_the_messages_in_flight() {
    for seed in 1..=3 {
        let batch = BatchConfig {
            linger: Duration::from_secs(5),
            auto_touch_after: Duration::from_millis(1_500),
            ..BatchConfig::default()
        };
        let r = run(&world(seed, 20, 2_500, batch, false));
        let b = clean(&r);
        assert!(b.longest_hold > Duration::from_secs(4), "{}", b.line());
    }
}

/// Many nsqd: 200 busy nsqd, max_in_flight 1,000, batches of 200 (linger 1 s, 4 workers):
/// full batches from dozens of nsqd each, no timeout, every nsqd served within the bound.
#[test]
fn batches_fill_across_two_hundred_nsqd() {
    let batch = BatchConfig {
        max_messages: 200,
        workers: 4,
        ..BatchConfig::default()
    };
    let r = run(&world(1, 200, 1_000, batch, true));
    let b = clean(&r);
    assert!(
        b.ended_in_phase[BatchEnd::Full.index()] * 2 > b.batches,
        "{}",
        b.line()
    );
    assert!(b.most_nsqd >= 50, "{}", b.line());
    assert!(r.worst_starvation <= r.starvation_bound, "{r:?}");
}
