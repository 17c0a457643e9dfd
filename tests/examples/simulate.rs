//! The real sans-IO consumer and producer of nsq-proto against a simulated NSQ world of up to
//! thousands of nsqd, in virtual time, with faults drawn from each seed and the invariants of
//! NSQ's client duties checked after every step (see `nsq_test_broker::sim`).
//!
//! ```text
//! cargo run --release -p nsq-test-broker --example simulate -- --nsqd 1000 --max-in-flight 100 --seeds 20
//! cargo run --release -p nsq-test-broker --example simulate -- --seed 7 --nsqd 1000   # replay one seed
//! cargo run --release -p nsq-test-broker --example simulate -- --campaign 10000       # sizes 1 to 1,000
//! ```
//!
//! Each seed runs twice, at `--nsqd` and at 10 nsqd, so the last line can compare the CPU the
//! core spends per delivered message at both sizes:
//!
//! ```text
//! simulate: seeds=20 nsqd=1000 messages=M violations=0 worst_starvation_s=S cpu_per_msg_10=Aus cpu_per_msg_1000=Bus growth=B/A
//! ```
//!
//! A violation prints the seed, the step, what broke, and a shorter fault schedule that still
//! breaks it; the run exits with status 1.
//!
//! `--batch MAX_MESSAGES[,LINGER_MS]` runs the batch world instead (issue 46: the application
//! gathers batches, nsqd's msg_timeout is 2 s, the faults keep every link delivering; see
//! `SimConfig::with_batches`), once per seed at `--nsqd`, with a line per seed and a summary:
//!
//! ```text
//! cargo run --release -p nsq-test-broker --example simulate -- --batch 500,1000 --batch-workers 4 --nsqd 1000 --max-in-flight 2500 --busy --seeds 3
//! batches: seeds=3 nsqd=1000 ... throughput=T/s size_mean=.. size_p50=.. size_p99=.. ended[full=.. bytes=.. bound=.. linger=.. stop=..] ... timeouts=0 violations=0
//! ```

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool"
)]

use nsq_test_support::sim as sim_glue;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use nsq_test_broker::sim::{self, BatchConfig, BatchReport, Report, SimConfig};

struct Args {
    nsqd: usize,
    max_in_flight: u32,
    seeds: u64,
    first_seed: u64,
    one_seed: Option<u64>,
    campaign: Option<u64>,
    faults: Option<usize>,
    starvation_bound: Option<u64>,
    quiet: bool,
    shrink: bool,
    max_nsqd: usize,
    messages_per_nsqd: Option<usize>,
    client_rounds: bool,
    busy: bool,
    /// The batch world's application (`--batch`).
    batch: Option<BatchConfig>,
    /// The fault phase's length (`--fault-phase`, seconds).
    fault_phase: Option<u64>,
    /// The batch application's noise (`--batch-noise`), by name.
    batch_noise: Option<&'static str>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        nsqd: 1000,
        max_in_flight: 100,
        seeds: 20,
        first_seed: 1,
        one_seed: None,
        campaign: None,
        faults: None,
        starvation_bound: None,
        quiet: false,
        shrink: true,
        max_nsqd: 1000,
        messages_per_nsqd: None,
        client_rounds: false,
        busy: false,
        batch: None,
        fault_phase: None,
        batch_noise: None,
    };
    let mut batch = BatchConfig::default();
    let mut batching = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (flag.clone(), None),
        };
        if name == "--quiet" {
            a.quiet = true;
            continue;
        }
        if name == "--no-shrink" {
            a.shrink = false;
            continue;
        }
        if name == "--client-rounds" {
            a.client_rounds = true;
            continue;
        }
        if name == "--busy" {
            a.busy = true;
            continue;
        }
        if name == "--help" || name == "-h" {
            return Err("usage: simulate [--nsqd N] [--max-in-flight N] [--seeds N] [--first-seed N] [--seed N] [--faults N] [--starvation-bound SECONDS] [--messages-per-nsqd N] [--client-rounds] [--busy] [--fault-phase SECONDS] [--campaign N [--max-nsqd N]] [--quiet] [--no-shrink] [--batch MAX_MESSAGES[,LINGER_MS] [--batch-workers N] [--batch-bytes N] [--batch-service MS[,US_PER_MESSAGE]] [--batch-fail FRACTION] [--batch-noise jitter|bursts|slow] [--batch-touch-after MS]]".into());
        }
        let value = inline
            .or_else(|| it.next())
            .ok_or_else(|| format!("{name} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: {v:?}"))
        };
        match name.as_str() {
            "--nsqd" => a.nsqd = num(&value)?.clamp(1, 100_000) as usize,
            "--max-in-flight" => {
                a.max_in_flight =
                    u32::try_from(num(&value)?).map_err(|_| "--max-in-flight too large")?;
            }
            "--seeds" => a.seeds = num(&value)?,
            "--first-seed" => a.first_seed = num(&value)?,
            "--seed" => a.one_seed = Some(num(&value)?),
            "--faults" => a.faults = Some(num(&value)? as usize),
            "--campaign" => a.campaign = Some(num(&value)?),
            "--starvation-bound" => a.starvation_bound = Some(num(&value)?),
            "--max-nsqd" => a.max_nsqd = num(&value)?.clamp(1, 100_000) as usize,
            "--messages-per-nsqd" => {
                a.messages_per_nsqd = Some(num(&value)?.clamp(1, 10_000) as usize);
            }
            "--fault-phase" => a.fault_phase = Some(num(&value)?.clamp(1, 3_600)),
            "--batch" => {
                batching = true;
                let (max, linger) = value.split_once(',').unwrap_or((value.as_str(), ""));
                batch.max_messages = num(max)?.max(1) as usize;
                if !linger.is_empty() {
                    batch.linger = Duration::from_millis(num(linger)?);
                }
            }
            "--batch-workers" => batch.workers = num(&value)?.clamp(1, 1_000) as usize,
            "--batch-noise" => {
                let kind = sim::NoiseKind::parse(&value)
                    .ok_or_else(|| format!("--batch-noise: no kind {value:?}"))?;
                batch.noise = kind.noise();
                a.batch_noise = Some(kind.name());
            }
            "--batch-bytes" => batch.max_bytes = num(&value)?,
            "--batch-touch-after" => batch.auto_touch_after = Duration::from_millis(num(&value)?),
            "--batch-service" => {
                let (fixed, per) = value.split_once(',').unwrap_or((value.as_str(), ""));
                batch.service = Duration::from_millis(num(fixed)?);
                if !per.is_empty() {
                    batch.per_message = Duration::from_micros(num(per)?);
                }
            }
            "--batch-fail" => {
                batch.fail = value
                    .parse::<f64>()
                    .map_err(|_| format!("--batch-fail: not a fraction: {value:?}"))?
                    .clamp(0.0, 1.0);
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    a.batch = batching.then_some(batch);
    Ok(a)
}

fn config(a: &Args, seed: u64, nsqd: usize) -> SimConfig {
    let mut c = SimConfig::new(seed, nsqd, a.max_in_flight);
    if let Some(b) = &a.batch {
        c = c.with_batches(b.clone());
    }
    if let Some(s) = a.fault_phase {
        c.fault_phase = Duration::from_secs(s);
    }
    if let Some(f) = a.faults {
        c.faults = f;
    }
    if let Some(s) = a.starvation_bound {
        c.starvation_bound = Some(Duration::from_secs(s));
    }
    if let Some(k) = a.messages_per_nsqd {
        c.messages = (nsqd * k).max(2_000);
    }
    c.busy = a.busy;
    c
}

/// Runs one seed; on a violation prints it with a shrunk schedule.
fn one(a: &Args, seed: u64, nsqd: usize) -> Report {
    let cfg = config(a, seed, nsqd);
    let mut factory = sim_glue::NsqProtoFactory {
        client_rounds: a.client_rounds,
    };
    let report = sim::run(&cfg, &mut factory);
    if let Some(v) = &report.violation {
        println!("VIOLATION nsqd={nsqd} {v}");
        if !a.shrink {
            return report;
        }
        let shrunk = sim::shrink(&cfg, &report.faults, &mut factory);
        let again = sim::run_with_faults(&cfg, &shrunk, &mut factory);
        println!(
            "  shrunk from {} to {} faults (still fails: {}):",
            report.faults.len(),
            shrunk.len(),
            again
                .violation
                .as_ref()
                .map_or("no".into(), ToString::to_string)
        );
        for f in &shrunk {
            println!("    at {:>8.3}s {:?}", f.at.as_secs_f64(), f.kind);
        }
        println!(
            "  replay: cargo run --release -p nsq-test-broker --example simulate -- --seed {seed} --nsqd {nsqd} --max-in-flight {}{}{}",
            a.max_in_flight,
            if a.busy { " --busy" } else { "" },
            replay_flags(a)
        );
    } else if !a.quiet {
        println!(
            "seed={seed} nsqd={nsqd} published={} delivered={} gave_up={} producer_ok={} producer_failed={} consumers={} worst_starvation_s={:.2} bound_s={:.1} virtual_s={:.0} steps={} rdy_per_msg={:.2} core_us_per_msg={:.2} trace={:016x}",
            report.published,
            report.delivered,
            report.gave_up,
            report.producer_ok,
            report.producer_failed,
            report.consumers,
            report.worst_starvation.as_secs_f64(),
            report.starvation_bound.as_secs_f64(),
            report.virtual_time.as_secs_f64(),
            report.steps,
            report.rdy_commands as f64 / report.delivered.max(1) as f64,
            us_per_msg(report.core_time, report.delivered),
            report.trace_hash
        );
        if let Some(b) = &report.batches {
            println!("  batches seed={seed}: {}", b.line());
        }
    }
    report
}

/// The flags of `a` a replay needs besides the seed, size and max_in_flight.
fn replay_flags(a: &Args) -> String {
    let mut out = Vec::new();
    if let Some(s) = a.fault_phase {
        out.push(format!("--fault-phase {s}"));
    }
    if let Some(f) = a.faults {
        out.push(format!("--faults {f}"));
    }
    if let Some(b) = &a.batch {
        out.push(format!(
            "--batch {},{} --batch-workers {} --batch-bytes {} --batch-service {},{} --batch-fail {} --batch-touch-after {}",
            b.max_messages,
            b.linger.as_millis(),
            b.workers,
            b.max_bytes,
            b.service.as_millis(),
            b.per_message.as_micros(),
            b.fail,
            b.auto_touch_after.as_millis()
        ));
    }
    if let Some(n) = a.batch_noise {
        out.push(format!("--batch-noise {n}"));
    }
    out.into_iter().flat_map(|f| [" ".to_owned(), f]).collect()
}

/// `--batch`: the batch world once per seed at `--nsqd`, and the summary over the seeds.
fn batches(a: &Args, seeds: &[u64]) -> ExitCode {
    let start = Instant::now();
    let (mut violations, mut worst, mut drain) = (0u64, Duration::ZERO, Duration::ZERO);
    let mut total = BatchReport::default();
    for &seed in seeds {
        let r = one(a, seed, a.nsqd);
        violations += u64::from(r.violation.is_some());
        worst = worst.max(r.worst_starvation);
        let phase = config(a, seed, a.nsqd).fault_phase;
        drain = drain.max(r.virtual_time.saturating_sub(phase));
        if let Some(b) = &r.batches {
            total.add(b);
        }
    }
    println!(
        "batches: seeds={} nsqd={} max_in_flight={} {} worst_starvation_s={:.2} worst_drain_s={:.0} violations={violations} wall_s={:.0}",
        seeds.len(),
        a.nsqd,
        a.max_in_flight,
        total.line(),
        worst.as_secs_f64(),
        drain.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    exit_code(violations)
}

/// Success without violations.
fn exit_code(violations: u64) -> ExitCode {
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn us_per_msg(t: Duration, msgs: u64) -> f64 {
    t.as_secs_f64() * 1e6 / msgs.max(1) as f64
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--downstream") {
        return downstream();
    }
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(n) = a.campaign {
        return campaign(&a, n);
    }
    let seeds: Vec<u64> = match a.one_seed {
        Some(s) => vec![s],
        None => (a.first_seed..a.first_seed + a.seeds).collect(),
    };
    if a.batch.is_some() {
        return batches(&a, &seeds);
    }
    let (mut violations, mut messages, mut worst) = (0u64, 0u64, Duration::ZERO);
    let (mut t_big, mut m_big, mut t_small, mut m_small) =
        (Duration::ZERO, 0u64, Duration::ZERO, 0u64);
    let (mut rdy_big, mut rdy_small) = (0u64, 0u64);
    let (mut phase_rdy, mut phase_msgs) = (0u64, 0u64);
    for &seed in &seeds {
        let r = one(&a, seed, a.nsqd);
        violations += u64::from(r.violation.is_some());
        messages += r.delivered;
        worst = worst.max(r.worst_starvation);
        t_big += r.core_time;
        m_big += r.delivered;
        rdy_big += r.rdy_commands;
        phase_rdy += r.fault_phase_rdy_commands;
        phase_msgs += r.fault_phase_delivered;
        let r = one(&a, seed, 10);
        violations += u64::from(r.violation.is_some());
        worst = worst.max(r.worst_starvation);
        t_small += r.core_time;
        m_small += r.delivered;
        rdy_small += r.rdy_commands;
    }
    // How much of the CPU goes to the low-RDY rotation: RDY commands per delivered message
    // (two per turn), and the core's CPU per RDY command (every input counted).
    let per = |n: u64, d: u64| n as f64 / d.max(1) as f64;
    println!(
        "simulate: rdy_per_msg_10={:.2} rdy_per_msg_{}={:.2} rdy_per_msg_{}_fault_phase={:.2} cpu_per_rdy_{}={:.2}us",
        per(rdy_small, m_small),
        a.nsqd,
        per(rdy_big, m_big),
        a.nsqd,
        per(phase_rdy, phase_msgs),
        a.nsqd,
        t_big.as_secs_f64() * 1e6 / rdy_big.max(1) as f64
    );
    let (small, big) = (us_per_msg(t_small, m_small), us_per_msg(t_big, m_big));
    println!(
        "simulate: seeds={} nsqd={} messages={messages} violations={violations} worst_starvation_s={:.2} cpu_per_msg_10={small:.2}us cpu_per_msg_{}={big:.2}us growth={:.2}",
        seeds.len(),
        a.nsqd,
        worst.as_secs_f64(),
        a.nsqd,
        big / small.max(f64::MIN_POSITIVE)
    );
    exit_code(violations)
}

/// `n` seeds, sizes spread from 1 to 1,000 nsqd (most small, some large).
fn campaign(a: &Args, n: u64) -> ExitCode {
    let start = Instant::now();
    let sizes = [1usize, 2, 3, 5, 8, 13, 20, 50, 100, 250, 500, 1000];
    let mut kinds: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let (mut violations, mut messages, mut worst) = (0u64, 0u64, Duration::ZERO);
    // Where the longest wait was: (seed, nsqd).
    let mut worst_at = (0u64, 0usize);
    let mut per_size = vec![(0u64, 0u64); sizes.len()];
    for k in 0..n {
        let seed = a.first_seed + k;
        // Small worlds often, big ones now and then: index weights fall with size.
        let pick = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) % 100;
        let i = match pick {
            0..=14 => 0,
            15..=26 => 1,
            27..=37 => 2,
            38..=48 => 3,
            49..=58 => 4,
            59..=67 => 5,
            68..=76 => 6,
            77..=84 => 7,
            85..=91 => 8,
            92..=96 => 9,
            97..=98 => 10,
            _ => 11,
        };
        let r = one(a, seed, sizes[i].min(a.max_nsqd));
        violations += u64::from(r.violation.is_some());
        if let Some(v) = &r.violation {
            // The kind: the text up to its first figure.
            let kind: String = v
                .what
                .split(|c: char| c.is_ascii_digit())
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            *kinds.entry(kind).or_default() += 1;
        }
        messages += r.delivered;
        if r.worst_starvation > worst {
            worst = r.worst_starvation;
            worst_at = (seed, sizes[i].min(a.max_nsqd));
        }
        per_size[i].0 += 1;
        per_size[i].1 += u64::from(r.violation.is_some());
    }
    for (i, (runs, bad)) in per_size.iter().enumerate() {
        if *runs > 0 {
            println!(
                "campaign: nsqd={} seeds={runs} violations={bad}",
                sizes[i].min(a.max_nsqd)
            );
        }
    }
    for (kind, n) in &kinds {
        println!("campaign: violation kind {n} x {kind:?}");
    }
    println!(
        "campaign: longest wait {:.2}s at seed {} with {} nsqd",
        worst.as_secs_f64(),
        worst_at.0,
        worst_at.1
    );
    println!(
        "campaign: seeds={n} first_seed={} messages={messages} violations={violations} worst_starvation_s={:.2} wall_s={:.0}",
        a.first_seed,
        worst.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    exit_code(violations)
}

/// `--downstream`: the adaptive in-flight limit against a modelled downstream, over seeds and
/// worlds (capacities x service times); see `nsq_test_broker::sim::evaluate_downstream`.
///
/// ```text
/// simulate --downstream [--seeds N] [--first-seed N] [--capacities 1,10,100,1000]
///          [--service-times 1ms,10ms,100ms,1s] [--collapse 0.5] [--nsqd N] [--quiet]
///          [--noise jitter,bursts,slow|none]
/// ```
///
/// Each world is also evaluated under each kind of client-side noise (`--noise`, all three by
/// default; see `nsq_test_broker::sim::evaluate_noise`).
fn downstream() -> ExitCode {
    let mut seeds = 3u64;
    let mut first = 1u64;
    let mut capacities = vec![1u32, 10, 100, 1000];
    let mut services: Vec<Duration> = ["1ms", "10ms", "100ms", "1s"]
        .iter()
        .filter_map(|s| duration(s).ok())
        .collect();
    let mut collapse = 0.5f64;
    let mut nsqd = 1usize;
    let mut quiet = false;
    let mut trace = false;
    let mut noises = sim::NoiseKind::ALL.to_vec();
    let mut it = std::env::args().skip(1);
    let parsed = (|| -> Result<(), String> {
        while let Some(flag) = it.next() {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
                None => (flag.clone(), None),
            };
            match name.as_str() {
                "--downstream" => continue,
                "--quiet" => {
                    quiet = true;
                    continue;
                }
                "--trace" => {
                    trace = true;
                    continue;
                }
                _ => {}
            }
            let value = inline
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))?;
            let bad = |_| format!("{name}: cannot read {value:?}");
            match name.as_str() {
                "--seeds" => seeds = value.parse().map_err(bad)?,
                "--first-seed" => first = value.parse().map_err(bad)?,
                "--nsqd" => nsqd = value.parse::<usize>().map_err(bad)?.clamp(1, 100),
                "--collapse" => {
                    collapse = value
                        .parse()
                        .map_err(|_| format!("--collapse: cannot read {value:?}"))?;
                }
                "--capacities" => {
                    capacities = value
                        .split(',')
                        .map(|c| c.trim().parse::<u32>().map(|c| c.clamp(1, 1000)))
                        .collect::<Result<_, _>>()
                        .map_err(|_| format!("--capacities: cannot read {value:?}"))?;
                }
                "--noise" => {
                    noises = value
                        .split(',')
                        .filter(|n| n.trim() != "none")
                        .map(|n| {
                            sim::NoiseKind::parse(n.trim())
                                .ok_or_else(|| format!("--noise: no kind {n:?}"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--service-times" => {
                    services = value
                        .split(',')
                        .map(|d| duration(d.trim()))
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("--service-times: {e}"))?;
                }
                other => return Err(format!("unknown flag {other} (with --downstream)")),
            }
        }
        Ok(())
    })();
    if let Err(e) = parsed {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let start = Instant::now();
    let mut factory = sim_glue::NsqProtoFactory::default();
    let (mut worlds, mut violations) = (0u64, 0u64);
    let mut worst_converge = 0f64;
    let mut worst_tp = f64::INFINITY;
    let mut worst_p99 = 0f64;
    let mut worst_reconverge = 0f64;
    let mut worst_collapse = f64::INFINITY;
    let mut static4x_collapse = 0f64;
    let mut worst_noise_tp = f64::INFINITY;
    let mut worst_noise_p99 = 0f64;
    // Never converging counts as the longest possible: the whole window.
    let secs = |d: Option<Duration>, whole: Duration| d.unwrap_or(whole).as_secs_f64();
    for &c in &capacities {
        for &s in &services {
            worlds += 1;
            for seed in first..first + seeds {
                let world = sim::DownstreamService {
                    capacity: c,
                    service: s,
                };
                let v = sim::evaluate_downstream(world, seed, nsqd, collapse, &mut factory);
                violations += v.violations.len() as u64;
                for x in &v.violations {
                    println!("VIOLATION capacity={c} service={s:?} seed={seed}: {x}");
                }
                let conv = secs(v.converge, Duration::from_secs(3600));
                // The bound is 10 s or 20 service times: reported against 10 s.
                let scaled = conv * 10.0 / v.converge_bound.as_secs_f64();
                worst_converge = worst_converge.max(scaled);
                worst_tp = worst_tp.min(v.throughput_vs_best);
                worst_p99 = worst_p99.max(v.p99_vs_uncongested);
                for r in &v.reconverge {
                    worst_reconverge = worst_reconverge.max(secs(*r, Duration::from_secs(3600)));
                }
                if collapse > 0.0 {
                    worst_collapse = worst_collapse.min(v.collapse_vs_best);
                    static4x_collapse = static4x_collapse.max(v.static4x_collapse_vs_best);
                }
                if trace {
                    let t: Vec<String> = v
                        .limits
                        .iter()
                        .map(|(t, l)| format!("{:.2}:{l}", t.as_secs_f64()))
                        .collect();
                    println!(
                        "trace capacity={c} service={s:?} seed={seed} changes={:?}: {}",
                        v.changes,
                        t.join(" ")
                    );
                }
                if !quiet {
                    let re: Vec<String> = v
                        .reconverge
                        .iter()
                        .map(|r| r.map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64())))
                        .collect();
                    println!(
                        "world capacity={c} service={s:?} seed={seed}: best_static={} ({:.0}/s) limit={} converge={} (bound {:.0}s) throughput_vs_best={:.3} p50={:.2}x p99={:.2}x static4x_p99={:.2}x reconverge=[{}] collapse: adaptive={:.3} static4x={:.3} virtual_s={:.0}",
                        v.best,
                        v.best_throughput,
                        v.limit,
                        v.converge
                            .map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64())),
                        v.converge_bound.as_secs_f64(),
                        v.throughput_vs_best,
                        v.p50_vs_uncongested,
                        v.p99_vs_uncongested,
                        v.static4x_p99_vs_uncongested,
                        re.join(", "),
                        v.collapse_vs_best,
                        v.static4x_collapse_vs_best,
                        v.virtual_s
                    );
                }
                for &kind in &noises {
                    let n = sim::evaluate_noise(world, seed, nsqd, kind, &mut factory);
                    violations += n.violations.len() as u64;
                    for x in &n.violations {
                        println!(
                            "VIOLATION capacity={c} service={s:?} seed={seed} noise={}: {x}",
                            kind.name()
                        );
                    }
                    worst_noise_tp = worst_noise_tp.min(n.throughput_vs_best);
                    worst_noise_p99 = worst_noise_p99.max(n.p99_vs_best);
                    if trace {
                        let t: Vec<String> = n
                            .limits
                            .iter()
                            .map(|(t, l)| format!("{:.2}:{l}", t.as_secs_f64()))
                            .collect();
                        println!(
                            "trace capacity={c} service={s:?} seed={seed} noise={}: {}",
                            kind.name(),
                            t.join(" ")
                        );
                    }
                    if !quiet {
                        let ms = |d: Duration| d.as_secs_f64() * 1e3;
                        println!(
                            "noise capacity={c} service={s:?} seed={seed} noise={}: best_static={} ({:.0}/s, p99 {:.2}ms) limit={} throughput_vs_best={:.3} p99={:.2}ms p99_vs_best={:.2} virtual_s={:.0}",
                            kind.name(),
                            n.best,
                            n.best_throughput,
                            ms(n.best_p99),
                            n.limit,
                            n.throughput_vs_best,
                            ms(n.p99),
                            n.p99_vs_best,
                            n.virtual_s
                        );
                    }
                }
            }
        }
    }
    println!("downstream: wall_s={:.0}", start.elapsed().as_secs_f64());
    // Without noise (`--noise none`) there is nothing to report.
    let (noise_tp, noise_p99) = if noises.is_empty() {
        ("n/a".to_owned(), "n/a".to_owned())
    } else {
        (
            format!("{worst_noise_tp:.3}"),
            format!("{worst_noise_p99:.2}"),
        )
    };
    println!(
        "downstream: seeds={seeds} worlds={worlds} worst_converge_s={worst_converge:.1} worst_throughput_vs_best={worst_tp:.3} worst_p99_vs_uncongested={worst_p99:.2} worst_reconverge_s={worst_reconverge:.1} worst_collapse_throughput_vs_best={worst_collapse:.3} static4x_collapse_throughput_vs_best={static4x_collapse:.3} violations={violations} worst_noise_throughput_vs_best={noise_tp} worst_noise_p99_vs_best_static={noise_p99}"
    );
    exit_code(violations)
}

/// `250us`, `5ms`, `1.5s`.
fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: f64 = n.parse().map_err(|_| format!("not a duration: {text:?}"))?;
    let scale = match unit {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("not a duration (us, ms, s): {text:?}")),
    };
    Duration::try_from_secs_f64(n * scale).map_err(|e| format!("{text:?}: {e}"))
}
