//! The adaptive in-flight limit against a modelled downstream: the consumer under test, in
//! the one simulated world, against nsqd that always have messages, with handlers that call a
//! service of limited capacity (the application model of [`DownstreamConfig`]; see
//! [`run_downstream`]), and the evaluation of `simulate --downstream` over it.
//!
//! The world keeps every nsqd stocked, so the consumer's limit (static, or adaptive) and the
//! service decide the throughput. A run reports the throughput and the handling latencies
//! (hand-out to answer) of a measurement window, and the trace of the consumer's in-flight
//! limit. Besides the world's invariants (no more held than max_in_flight, RDY within it,
//! starvation, the consumer's footprint), it checks after every step that no message is
//! handed out while the application holds the limit in force or more (for the consumer's
//! grace after the limit went down, the limit before: messages nsqd wrote under the higher
//! RDY), and that the limit stays between its floor and `max_in_flight`.

use std::time::Duration;

use super::client::ClientFactory;
use super::noise::{Noise, NoiseKind};

/// One downstream run.
#[derive(Clone, Debug)]
pub struct DownstreamConfig {
    /// Link latencies and the consumer's seed.
    pub seed: u64,
    /// nsqd (each one way 0.1-2 ms from the consumer, in its region).
    pub nsqd: usize,
    /// Operations the service runs at once.
    pub capacity: u32,
    /// One operation's service time.
    pub service: Duration,
    /// Slow-down per waiting operation, relative to the capacity (0: none).
    pub collapse: f64,
    /// Capacity changes: at this time since the start, the capacity becomes this.
    pub changes: Vec<(Duration, u32)>,
    /// The static limit, or the adaptive limit's ceiling.
    pub max_in_flight: u32,
    /// `Some(floor)`: the adaptive mode.
    pub adaptive: Option<u32>,
    /// How long the run lasts.
    pub duration: Duration,
    /// Throughput and latencies are measured from here to the end (or the first change).
    pub measure_from: Duration,
    /// ... until here (`None`: the end).
    pub measure_until: Option<Duration>,
    /// Client-side delay the downstream does not cause (see [`Noise`]).
    pub noise: Noise,
}

/// What a downstream run measured.
#[derive(Clone, Debug, Default)]
pub struct DownstreamReport {
    /// Messages finished in the measurement window, per second.
    pub throughput: f64,
    /// Handling latency percentiles of the messages handed out in the window.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// How many latencies the percentiles are of.
    pub samples: usize,
    /// The in-flight limit over time: `(since the start, limit)` at each change.
    pub limits: Vec<(Duration, u32)>,
    /// Messages finished in the whole run.
    pub finished: u64,
    /// The first broken invariant.
    pub violation: Option<String>,
}

impl DownstreamReport {
    /// The limit in force at `at`.
    pub fn limit_at(&self, at: Duration) -> u32 {
        self.limits
            .iter()
            .take_while(|(t, _)| *t <= at)
            .last()
            .map_or(0, |(_, l)| *l)
    }

    /// The first time in `from..until` after which the limit stays within `lo..=hi` until
    /// `until` (`None`: it does not settle there).
    pub fn settled(&self, from: Duration, until: Duration, lo: f64, hi: f64) -> Option<Duration> {
        let inside = |l: u32| f64::from(l) >= lo && f64::from(l) <= hi;
        let mut since = inside(self.limit_at(from)).then_some(from);
        for &(t, l) in &self.limits {
            if t <= from || t > until {
                continue;
            }
            match (inside(l), since) {
                (true, None) => since = Some(t),
                (false, Some(_)) => since = None,
                _ => {}
            }
        }
        since.map(|s| s.saturating_sub(from))
    }
}

/// Runs one downstream world: the consumer against nsqd in its region (0.1-2 ms one way,
/// drawn from the seed) kept stocked, with handlers that call `cfg`'s service, in the one
/// simulated world ([`crate::sim::run`]'s, with its nsqd, links and invariants).
pub fn run_downstream(cfg: &DownstreamConfig, factory: &mut dyn ClientFactory) -> DownstreamReport {
    super::world::run_downstream(cfg, factory)
}

/// The service of one world of the `--downstream` evaluation (the settings
/// [`evaluate_downstream`] varies; the rest are its own).
#[derive(Clone, Copy, Debug)]
pub struct DownstreamService {
    /// The service's capacity.
    pub capacity: u32,
    /// Its service time.
    pub service: Duration,
}

/// What the evaluation of one world and seed found (see [`evaluate_downstream`]).
#[derive(Clone, Debug, Default)]
pub struct DownstreamVerdict {
    /// The best static max_in_flight of the sweep, and its throughput (messages/s).
    pub best: u32,
    /// Its throughput.
    pub best_throughput: f64,
    /// From the start, until the adaptive limit stayed within 25% of `best` (`None`: never).
    pub converge: Option<Duration>,
    /// The bound it had: 10 s or 20 service times.
    pub converge_bound: Duration,
    /// The limit the adaptive consumer held at the end of the measurement.
    pub limit: u32,
    /// Its throughput over the best static one's.
    pub throughput_vs_best: f64,
    /// Its p50 and p99 handling latency over the uncongested latency (the service time).
    pub p50_vs_uncongested: f64,
    /// p99.
    pub p99_vs_uncongested: f64,
    /// A static setting 4x the best: its p99 over the uncongested latency.
    pub static4x_p99_vs_uncongested: f64,
    /// After the capacity halved, then doubled back: the time until the limit was within
    /// 25% of that capacity's best static setting again (`None`: never, or no change for a
    /// capacity of 1).
    pub reconverge: Vec<Option<Duration>>,
    /// With collapse: the adaptive consumer's and the static 4x setting's throughput over the
    /// best static one's.
    pub collapse_vs_best: f64,
    /// Static 4x with collapse.
    pub static4x_collapse_vs_best: f64,
    /// Violations of the invariants in any of the runs.
    pub violations: Vec<String>,
    /// The adaptive run's limit over time (see [`DownstreamReport::limits`]), and the times
    /// the capacity changed.
    pub limits: Vec<(Duration, u32)>,
    /// When the capacity halved and doubled back.
    pub changes: Vec<Duration>,
    /// Virtual seconds simulated, in every run together.
    pub virtual_s: f64,
}

/// The best static setting of a sweep: the smallest within 1% of the most throughput.
#[derive(Clone, Copy, Debug, Default)]
struct Best {
    limit: u32,
    throughput: f64,
}

/// The sweep of static settings around the capacity (around what the client's noise lets
/// through, with noise: see [`sweep_center`]), and the best of them.
fn sweep(
    base: &DownstreamConfig,
    capacity: u32,
    collapse: f64,
    factory: &mut dyn ClientFactory,
    verdict: &mut DownstreamVerdict,
) -> Best {
    let factors = [
        0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0,
    ];
    let center = sweep_center(capacity, base.service, &base.noise);
    let mut limits: Vec<u32> = factors
        .iter()
        .map(|f| ((center * f).round() as u32).max(1))
        .collect();
    limits.dedup();
    let mut results = Vec::new();
    for l in limits {
        let cfg = DownstreamConfig {
            capacity,
            collapse,
            changes: Vec::new(),
            max_in_flight: l,
            adaptive: None,
            ..base.clone()
        };
        let r = run_downstream(&cfg, factory);
        verdict.virtual_s += cfg.duration.as_secs_f64();
        if let Some(v) = r.violation {
            verdict.violations.push(format!("static {l}: {v}"));
        }
        results.push(Best {
            limit: l,
            throughput: r.throughput,
        });
    }
    let most = results.iter().map(|r| r.throughput).fold(0.0, f64::max);
    results
        .into_iter()
        .find(|r| r.throughput >= 0.99 * most)
        .unwrap_or(Best {
            limit: 1,
            ..Best::default()
        })
}

/// Where the sweep centres: the capacity, or with noise what keeps the service (or the
/// client's CPUs, if they are slower) busy through the noise's mean delay.
fn sweep_center(capacity: u32, service: Duration, noise: &Noise) -> f64 {
    if noise.is_quiet() {
        return f64::from(capacity);
    }
    let s = service.as_secs_f64().max(1e-6);
    let rate = (f64::from(capacity) / s).min(noise.cpu_rate());
    (rate * (s + noise.mean_delay().as_secs_f64())).max(1.0)
}

/// Evaluates the adaptive limit in one world and seed: the best static setting by a sweep,
/// the adaptive consumer from start-up (convergence, throughput, latency), the capacity
/// halved and doubled back (re-convergence), a static setting 4x too high, and the same with
/// collapse past the capacity (`collapse`, e.g. 0.5).
pub fn evaluate_downstream(
    service: DownstreamService,
    seed: u64,
    nsqd: usize,
    collapse: f64,
    factory: &mut dyn ClientFactory,
) -> DownstreamVerdict {
    let s = service.service;
    let c = service.capacity.max(1);
    let mut v = DownstreamVerdict::default();
    let base = static_run(service, seed, nsqd, Noise::default());
    let Best {
        limit: best,
        throughput: best_tp,
        ..
    } = sweep(&base, c, 0.0, factory, &mut v);
    v.best = best;
    v.best_throughput = best_tp;
    let half = (c / 2).max(1);
    let best_half = if half < c {
        sweep(&base, half, 0.0, factory, &mut v).limit
    } else {
        best
    };

    // Static 4x too high.
    let four = DownstreamConfig {
        max_in_flight: best.saturating_mul(4),
        ..base.clone()
    };
    let r4 = run_downstream(&four, factory);
    v.virtual_s += four.duration.as_secs_f64();
    if let Some(x) = r4.violation {
        v.violations.push(format!("static 4x: {x}"));
    }
    v.static4x_p99_vs_uncongested = r4.p99.as_secs_f64() / s.as_secs_f64();

    // Adaptive: start-up, measurement, the capacity halved, then doubled back.
    let ceiling = 10_000;
    let bound = Duration::from_secs(10).max(s * 20);
    let steady = Duration::from_secs(10).max(s * 100);
    let phase = Duration::from_secs(20).max(s * 40);
    let t1 = bound + steady;
    let t2 = t1 + phase;
    let changes = if half < c {
        vec![(t1, half), (t2, c)]
    } else {
        Vec::new()
    };
    let adaptive = DownstreamConfig {
        max_in_flight: ceiling,
        adaptive: Some(1),
        duration: if half < c { t2 + phase } else { t1 },
        measure_from: bound,
        measure_until: Some(t1),
        changes,
        ..base.clone()
    };
    let r = run_downstream(&adaptive, factory);
    v.virtual_s += adaptive.duration.as_secs_f64();
    if let Some(x) = &r.violation {
        v.violations.push(format!("adaptive: {x}"));
    }
    v.converge_bound = bound;
    v.limits.clone_from(&r.limits);
    v.changes = adaptive.changes.iter().map(|c| c.0).collect();
    let band = |b: u32| (f64::from(b) * 0.75, f64::from(b) * 1.25);
    let (lo, hi) = band(best);
    v.converge = r.settled(Duration::ZERO, t1, lo, hi);
    v.limit = r.limit_at(t1);
    v.throughput_vs_best = r.throughput / best_tp.max(1e-9);
    v.p50_vs_uncongested = r.p50.as_secs_f64() / s.as_secs_f64();
    v.p99_vs_uncongested = r.p99.as_secs_f64() / s.as_secs_f64();
    if half < c {
        let (lo, hi) = band(best_half);
        v.reconverge.push(r.settled(t1, t2, lo, hi));
        let (lo, hi) = band(best);
        v.reconverge.push(r.settled(t2, t2 + phase, lo, hi));
    }

    // Collapse past the capacity.
    if collapse > 0.0 {
        let cbase = DownstreamConfig {
            collapse,
            ..base.clone()
        };
        let Best {
            limit: cbest,
            throughput: cbest_tp,
            ..
        } = sweep(&cbase, c, collapse, factory, &mut v);
        let c4 = DownstreamConfig {
            max_in_flight: cbest.saturating_mul(4),
            ..cbase.clone()
        };
        let r4 = run_downstream(&c4, factory);
        v.virtual_s += c4.duration.as_secs_f64();
        v.static4x_collapse_vs_best = r4.throughput / cbest_tp.max(1e-9);
        let ca = DownstreamConfig {
            collapse,
            changes: Vec::new(),
            duration: t1,
            ..adaptive.clone()
        };
        let r = run_downstream(&ca, factory);
        v.virtual_s += ca.duration.as_secs_f64();
        if let Some(x) = &r.violation {
            v.violations.push(format!("adaptive with collapse: {x}"));
        }
        v.collapse_vs_best = r.throughput / cbest_tp.max(1e-9);
    }
    v
}

/// What the evaluation of one world, seed and kind of client noise found (see
/// [`evaluate_noise`]).
#[derive(Clone, Debug)]
pub struct NoiseVerdict {
    /// The noise.
    pub kind: NoiseKind,
    /// The best static max_in_flight under this noise.
    pub best: u32,
    /// Its throughput (messages/s) and p99 over the adaptive run's measurement window.
    pub best_throughput: f64,
    /// Its p99.
    pub best_p99: Duration,
    /// The limit the adaptive consumer held at the end of the measurement.
    pub limit: u32,
    /// Its throughput over the best static one's.
    pub throughput_vs_best: f64,
    /// Its p99.
    pub p99: Duration,
    /// Its p99 over the best static one's.
    pub p99_vs_best: f64,
    /// Violations of the invariants in any of the runs.
    pub violations: Vec<String>,
    /// The adaptive run's limit over time.
    pub limits: Vec<(Duration, u32)>,
    /// Virtual seconds simulated, in every run together.
    pub virtual_s: f64,
}

/// Evaluates the adaptive limit in one world and seed under one kind of client-side noise
/// (see [`Noise`]): the best static setting by a sweep under the same noise, then that
/// setting and the adaptive consumer (from start-up) over the same measurement window as the
/// quiet world's (from 10 s or 20 service times, for 10 s or 100 service times). The noise is
/// drawn from the seed alone, so every run of the seed meets the same stalls at the same
/// times.
pub fn evaluate_noise(
    service: DownstreamService,
    seed: u64,
    nsqd: usize,
    kind: NoiseKind,
    factory: &mut dyn ClientFactory,
) -> NoiseVerdict {
    let s = service.service;
    let c = service.capacity.max(1);
    let mut v = DownstreamVerdict::default();
    let base = static_run(service, seed, nsqd, kind.noise());
    let best = sweep(&base, c, 0.0, factory, &mut v).limit;
    let bound = Duration::from_secs(10).max(s * 20);
    let steady = Duration::from_secs(10).max(s * 100);
    let long = DownstreamConfig {
        max_in_flight: best,
        duration: bound + steady,
        measure_from: bound,
        ..base
    };
    let rs = run_downstream(&long, factory);
    if let Some(x) = rs.violation {
        v.violations.push(format!("static {best}: {x}"));
    }
    let adaptive = DownstreamConfig {
        max_in_flight: 10_000,
        adaptive: Some(1),
        ..long.clone()
    };
    let r = run_downstream(&adaptive, factory);
    if let Some(x) = &r.violation {
        v.violations.push(format!("adaptive: {x}"));
    }
    NoiseVerdict {
        kind,
        best,
        best_throughput: rs.throughput,
        best_p99: rs.p99,
        limit: r.limit_at(bound + steady),
        throughput_vs_best: r.throughput / rs.throughput.max(1e-9),
        p99: r.p99,
        p99_vs_best: r.p99.as_secs_f64() / rs.p99.as_secs_f64().max(1e-9),
        violations: v.violations,
        limits: r.limits,
        virtual_s: v.virtual_s + 2.0 * long.duration.as_secs_f64(),
    }
}

/// The static runs' setting of a sweep: max_in_flight at the capacity, a warm-up (300 ms or 10
/// service times), then the measurement (1 s or 40 service times), under `noise`.
fn static_run(
    service: DownstreamService,
    seed: u64,
    nsqd: usize,
    noise: Noise,
) -> DownstreamConfig {
    let s = service.service;
    let c = service.capacity.max(1);
    let warm = Duration::from_millis(300).max(s * 10);
    let measure = Duration::from_secs(1).max(s * 40);
    DownstreamConfig {
        seed,
        nsqd,
        capacity: c,
        service: s,
        collapse: 0.0,
        changes: Vec::new(),
        max_in_flight: c,
        adaptive: None,
        duration: warm + measure,
        measure_from: warm,
        measure_until: None,
        noise,
    }
}
