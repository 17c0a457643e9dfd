//! The simulator (`nsq_test_broker::sim`) driving nsq-proto's real consumer and producer:
//! determinism, a bounded set of seeds with every fault kind, and the seeds whose runs found
//! bugs in the core (each a regression test now), and the batch world (issue 46). The long
//! campaigns are the `simulate` example's (SIMULATION.md).

use nsq_test_support::sim as sim_glue;

use std::time::Duration;

use nsq_test_broker::sim::{self, BatchConfig, BatchEnd, BatchReport, Report, SimConfig};

fn run(seed: u64, nsqd: usize, max_in_flight: u32) -> Report {
    let cfg = SimConfig::new(seed, nsqd, max_in_flight);
    sim::run(&cfg, &mut sim_glue::NsqProtoFactory::default())
}

fn assert_clean(r: &Report) {
    assert!(
        r.violation.is_none(),
        "{} (faults: {:?})",
        r.violation
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        r.faults
    );
}

/// The same seed gives the same run, event for event.
#[test]
fn a_seed_replays_the_same_run() {
    let a = run(11, 8, 20);
    let b = run(11, 8, 20);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!((a.steps, a.delivered), (b.steps, b.delivered));
    let c = run(12, 8, 20);
    assert_ne!(a.trace_hash, c.trace_hash, "another seed, another run");
}

/// A bounded sweep: every fault kind, small worlds (the example runs the big ones).
#[test]
fn seeds_with_every_fault_kind_break_no_invariant() {
    for (nsqd, max_in_flight) in [(1, 100), (3, 100), (5, 100), (10, 100)] {
        for seed in 1..=6 {
            let r = run(seed, nsqd, max_in_flight);
            assert_clean(&r);
            assert!(r.faults.len() >= 20, "{:?}", r.faults);
        }
    }
}

/// The same with fewer max_in_flight than nsqd (the low-RDY rotation), starvation at the
/// strict bound (10 s: these worlds are small enough to probe within half of it).
#[test]
fn seeds_with_fewer_max_in_flight_than_nsqd() {
    for (nsqd, max_in_flight) in [(3, 2), (10, 4), (20, 5)] {
        for seed in 1..=4 {
            let r = run(seed, nsqd, max_in_flight);
            assert_clean(&r);
            assert_eq!(r.starvation_bound, Duration::from_secs(10));
        }
    }
}

/// A busy world (every nsqd always has messages) with 40 nsqd and max_in_flight 4, every
/// fault kind: turns sized to the bound serve every nsqd within 10 s (with 2 s turns, as
/// before, the last nsqd waited about 22 s), and a turn costs at most two RDY commands per
/// message it delivers (RDY 1 and RDY 0, at least one message each).
#[test]
fn busy_world_serves_every_nsqd_within_the_bound() {
    for seed in 1..=2 {
        let mut cfg = SimConfig::new(seed, 40, 4);
        cfg.busy = true;
        let r = sim::run(&cfg, &mut sim_glue::NsqProtoFactory::default());
        assert_clean(&r);
        assert_eq!(r.starvation_bound, Duration::from_secs(10));
        assert!(r.worst_starvation < Duration::from_secs(10), "{r:?}");
        let per_msg = r.fault_phase_rdy_commands as f64 / r.fault_phase_delivered.max(1) as f64;
        assert!(per_msg <= 2.0, "{per_msg} RDY commands per message");
    }
}

/// Runs that broke an invariant before the core was fixed, by seed (10 nsqd,
/// max_in_flight 100): what broke, and the fix.
///
/// - 18, 107, 110: `set_max_in_flight(0)` during a half-open link; messages nsqd sent
///   before the pause arrived after the settle time and were handed out (a paused consumer
///   handing out messages). Now a message beyond its connection's RDY and transit goes back
///   to nsqd at once (`ConsumerStats::returned`).
/// - 27: max_in_flight lowered to 25 under slow handlers; arrivals under the old RDY filled
///   the budget while RDY elsewhere stayed open, and the application got 26. Now arrivals
///   that fill max_in_flight cap every RDY at what its connection holds (running sums of
///   the budget, checked after each input).
/// - 39, 135, 189: a connection reset or an nsqd restart under slow handlers; the lost
///   connection's messages, still in the handlers, stopped counting (the connection cleared
///   its in-flight table before the consumer looked), and their shares went to other nsqd:
///   the application held 84 with max_in_flight 25. Now they count until answered
///   (`ConsumerStats::unanswered_elsewhere`).
///
/// And with fewer max_in_flight than nsqd:
///
/// - seed 34 at 3 nsqd / max_in_flight 2, seed 31 at 10 / 2: a connection's RDY lowered to 0
///   to cap the budget left one message in transit; it arrived while the application held 2
///   of 2 (counted as covered by the transit) and was handed out. Now a message reaches the
///   application only while it holds fewer than max_in_flight, counting what it still holds
///   of lost connections; otherwise it goes back to nsqd at once.
#[test]
fn seeds_that_found_bugs() {
    for seed in [18, 27, 39, 107, 110, 135, 189] {
        assert_clean(&run(seed, 10, 100));
    }
    // A connection left at RDY 0 while shares of max_in_flight were held where no RDY could
    // use them (slow handlers' messages from lost connections, or beyond a lowered RDY).
    for (seed, nsqd) in [(4579, 20), (711, 50), (2877, 50), (1089, 100)] {
        assert_clean(&run(seed, nsqd, 100));
    }
    for (seed, nsqd, max_in_flight) in [(34, 3, 2), (31, 10, 2)] {
        assert_clean(&run(seed, nsqd, max_in_flight));
    }
}

/// The adaptive in-flight limit (`max_in_flight_mode = adaptive`) in the faulty world: every
/// invariant holds against the limit in force (the application never holds more, RDY never
/// sums above max_in_flight, no starvation while the consumer has room under its limit, at
/// least once, graceful stops).
#[test]
fn the_adaptive_limit_breaks_no_invariant() {
    for (nsqd, max_in_flight, bound) in [(1, 100, 10), (5, 100, 10), (10, 100, 10), (10, 4, 60)] {
        for seed in 1..=3 {
            let mut cfg = SimConfig::new(seed, nsqd, max_in_flight);
            cfg.adaptive = Some(1);
            cfg.starvation_bound = Some(std::time::Duration::from_secs(bound));
            assert_clean(&sim::run(&cfg, &mut sim_glue::NsqProtoFactory::default()));
        }
    }
}

/// One world of `simulate --downstream` (SIMULATION.md), against the bounds the adaptive limit
/// is built to: a service of 10 operations at once and 10 ms each, nsqd a round trip of
/// 0.2-4 ms away.
#[test]
fn the_adaptive_limit_finds_and_follows_a_modelled_downstream() {
    let world = sim::DownstreamService {
        capacity: 10,
        service: std::time::Duration::from_millis(10),
    };
    let v = sim::evaluate_downstream(world, 1, 1, 0.5, &mut sim_glue::NsqProtoFactory::default());
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    let converged = v
        .converge
        .expect("the limit settles near the best static setting");
    assert!(converged <= v.converge_bound, "{v:?}");
    assert!(v.throughput_vs_best >= 0.95, "{v:?}");
    assert!(v.p99_vs_uncongested <= 1.5, "{v:?}");
    assert!(v.static4x_p99_vs_uncongested >= 4.0, "{v:?}");
    assert_eq!(v.reconverge.len(), 2, "halved, then doubled back");
    for r in &v.reconverge {
        let r = r.expect("the limit settles again");
        assert!(r <= std::time::Duration::from_secs(10), "{v:?}");
    }
    assert!(v.collapse_vs_best >= 0.9, "{v:?}");
    assert!(v.static4x_collapse_vs_best < 0.5, "{v:?}");
}

// ------------------------------------------------------------------------------- batches
//
// Batches across many nsqd (issue 46): the application gathers batches with the client
// layer's rules (`SimConfig::with_batches`, `sim::BatchConfig`), nsqd's msg_timeout is 2 s,
// the faults keep every link delivering (stops, max_in_flight changes, lookupd outages, nsqd
// leaving, resets, restarts). Every run also checks after each step: no message times out on
// a connection still up, the consumer says it is full (`is_full`) whenever the application
// holds max_in_flight, a failed batch raises the backoff level by one at most, and a stopped
// consumer closes with nothing held. The large worlds are `simulate --batch`'s
// (SIMULATION.md).

/// A batch world of `nsqd` nsqd, kept busy (every nsqd holding messages) for a fault phase
/// of 30 s.
fn world(seed: u64, nsqd: usize, max_in_flight: u32, batch: BatchConfig, busy: bool) -> SimConfig {
    let mut cfg = SimConfig::new(seed, nsqd, max_in_flight).with_batches(batch);
    cfg.busy = busy;
    cfg.fault_phase = Duration::from_secs(30);
    cfg
}

fn run_batches(cfg: &SimConfig) -> Report {
    sim::run(cfg, &mut sim_glue::NsqProtoFactory::default())
}

/// The batch world's run broke no invariant; its batch report.
fn clean(r: &Report) -> &BatchReport {
    assert_clean(r);
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
        let r = run_batches(&world(seed, 20, 400, batch, true));
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
    let (a, b) = (run_batches(&cfg), run_batches(&cfg));
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
        let r = run_batches(&world(seed, 20, 50, batch, true));
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
        let r = run_batches(&world(seed, 20, 2_500, batch, false));
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
        let r = run_batches(&world(seed, 10, 100, batch, true));
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
    let r = run_batches(&world(1, 5, 2_500, batch, false));
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
        let r = run_batches(&world(seed, 20, 2_500, batch, false));
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
    let r = run_batches(&world(1, 200, 1_000, batch, true));
    let b = clean(&r);
    assert!(
        b.ended_in_phase[BatchEnd::Full.index()] * 2 > b.batches,
        "{}",
        b.line()
    );
    assert!(b.most_nsqd >= 50, "{}", b.line());
    assert!(r.worst_starvation <= r.starvation_bound, "{r:?}");
}
