//! Batches (`run_batch`) on every adapter, written once: each scenario runs a consumer's
//! `run_batch` through a [`BatchRunner`] (the async API on an [`Exec`], or the blocking
//! API on threads) against [`Env`]: the in-process broker, or a real nsqd when
//! `NSQD_TCP_ADDRESS` (and `NSQD_HTTP_ADDRESS`, for its counters) is set.
//!
//! The scenarios: batches fill and finish; `max_in_flight` below `max_messages` hands batches
//! over at the bound, long before `linger`; a 1 s `msg_timeout` and a batch held 3 s (linger
//! and handler) time nothing out (auto-touch); a stop hands the partial batch over and waits
//! for its answer; single messages fail while the rest finish; a failed batch backs off once.

use crate::exec::{Exec, timeout};
use nsq_client::{Batch, BatchEnd, BatchOptions, BatchStats, Event, HandlerError, StopReport};
use nsq_proto::Config;
use nsq_test_broker::conformance::Env;
use nsq_test_broker::http_get_json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a scenario's handler saw of one batch.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its bodies, in order.
    pub bodies: Vec<String>,
    /// Its messages' attempts.
    pub attempts: Vec<u16>,
    /// The nsqd each message came from.
    pub nsqds: Vec<String>,
    /// Why it was handed over.
    pub end: BatchEnd,
    /// When it was handed over, since the run began.
    pub at: Duration,
}

/// How a scenario's handler answers a batch (after its work).
pub type Answer = Arc<dyn Fn(&mut Batch) -> Result<(), HandlerError> + Send + Sync>;

/// When a scenario stops its consumer, from the batches seen so far.
pub type StopWhen = Arc<dyn Fn(&[Seen]) -> bool + Send + Sync>;

/// What a scenario's handler does with a batch: how long it works (an async sleep, or a
/// thread's), then how it answers (marks single messages, returns the batch's result).
#[derive(Clone)]
pub struct Plan {
    /// The consumer's configuration.
    pub config: Config,
    /// Batches handled at once.
    pub workers: usize,
    /// The batches.
    pub options: BatchOptions,
    /// How long the handler works on each batch.
    pub work: Duration,
    /// How the handler answers (after its work).
    pub answer: Answer,
    /// Stop the consumer once this holds of what was seen (checked every 10 ms), or after
    /// [`LIMIT`].
    pub stop_when: StopWhen,
}

/// The longest a scenario's run may take.
pub const LIMIT: Duration = Duration::from_secs(30);

/// What a scenario's run came to.
#[derive(Debug)]
pub struct Run {
    /// The stop's report.
    pub report: StopReport,
    /// The batches the handler saw.
    pub seen: Vec<Seen>,
    /// The consumer's events.
    pub events: Vec<Event>,
    /// Its batch counters once stopped.
    pub stats: BatchStats,
}

/// How a scenario runs a consumer's `run_batch` on one adapter.
pub trait BatchRunner {
    /// Adapter name, for messages.
    fn name(&self) -> &'static str;
    /// Consumes `topic`/`ch` from `nsqds` (TCP addresses) under `plan` until
    /// `plan.stop_when` (or [`LIMIT`]).
    fn run(&self, nsqds: &[String], topic: &str, plan: &Plan) -> Run;
}

/// Records a batch, for the handler of a [`BatchRunner`].
pub fn record(seen: &Mutex<Vec<Seen>>, batch: &Batch, started: Instant) {
    let s = Seen {
        bodies: batch
            .iter()
            .map(|m| String::from_utf8_lossy(m.body()).into_owned())
            .collect(),
        attempts: batch.iter().map(nsq_client::Message::attempts).collect(),
        nsqds: batch.iter().map(|m| m.nsqd_address().to_owned()).collect(),
        end: batch.ended_by(),
        at: started.elapsed(),
    };
    seen.lock().unwrap().push(s);
}

/// The async API on `exec`.
pub struct AsyncRunner<E>(pub E);

impl<E: Exec> BatchRunner for AsyncRunner<E> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn run(&self, nsqds: &[String], topic: &str, plan: &Plan) -> Run {
        use crate::exec::GiveRuntime;
        let exec = &self.0;
        let consumer = exec.enter(|| {
            nsq_client::Consumer::builder(topic, "ch")
                .config(&plan.config)
                .nsqds(nsqds)
                .given(exec.runtime())
                .build()
                .expect("a consumer")
        });
        let handle = consumer.handle();
        let events = handle.events();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let started = Instant::now();
        let watcher = {
            let (seen, stop_when, exec2, handle) = (
                seen.clone(),
                plan.stop_when.clone(),
                exec.clone(),
                handle.clone(),
            );
            exec.spawn(async move {
                while !stop_when(&seen.lock().unwrap()) && started.elapsed() < LIMIT {
                    exec2.sleep(Duration::from_millis(10)).await;
                }
                handle.stop().await;
            })
        };
        let (work, answer, exec3, seen2) =
            (plan.work, plan.answer.clone(), exec.clone(), seen.clone());
        let report = exec.block_on(async move {
            let run = consumer.run_batch(plan.workers, plan.options, move |mut batch| {
                record(&seen2, &batch, started);
                let (answer, sleep) = (answer.clone(), exec3.sleep(work));
                async move {
                    sleep.await;
                    answer(&mut batch)
                }
            });
            let report = timeout(exec, LIMIT + Duration::from_secs(10), run).await;
            watcher.await;
            report
        });
        let report = report.expect("run_batch returned");
        let seen = seen.lock().unwrap().clone();
        let mut events = events;
        Run {
            report,
            seen,
            events: std::iter::from_fn(|| events.try_recv().ok()).collect(),
            stats: handle.batch_stats(),
        }
    }
}

/// The blocking API, on threads.
pub struct BlockingRunner;

impl BatchRunner for BlockingRunner {
    fn name(&self) -> &'static str {
        "nsq-blocking"
    }

    fn run(&self, nsqds: &[String], topic: &str, plan: &Plan) -> Run {
        let consumer = nsq_client::blocking::Consumer::builder(topic, "ch")
            .config(&plan.config)
            .nsqds(nsqds)
            .build()
            .expect("a consumer");
        let handle = consumer.handle();
        let events = handle.events();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let started = Instant::now();
        let watcher = {
            let (seen, stop_when, handle) = (seen.clone(), plan.stop_when.clone(), handle.clone());
            std::thread::spawn(move || {
                while !stop_when(&seen.lock().unwrap()) && started.elapsed() < LIMIT {
                    std::thread::sleep(Duration::from_millis(10));
                }
                handle.stop();
            })
        };
        let (work, answer, seen2) = (plan.work, plan.answer.clone(), seen.clone());
        let report = consumer.run_batch(plan.workers, plan.options, move |mut batch| {
            record(&seen2, &batch, started);
            std::thread::sleep(work);
            answer(&mut batch)
        });
        watcher.join().expect("the watcher");
        let seen = seen.lock().unwrap().clone();
        let mut events = events;
        Run {
            report,
            seen,
            events: std::iter::from_fn(|| events.try_recv().ok()).collect(),
            stats: handle.batch_stats(),
        }
    }
}

/// A channel's counters, from the local broker or a real nsqd's `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// FIN.
    pub finished: u64,
    /// REQ.
    pub requeued: u64,
    /// Timed out in flight.
    pub timed_out: u64,
    /// In flight now.
    pub in_flight: u64,
}

/// `topic`/`ch`'s counters (`None` for a real nsqd without `NSQD_HTTP_ADDRESS`). nsqd
/// v1.3.0 counts FIN per client only (gone once the consumer is), so against a real nsqd
/// `finished` is the messages that entered the channel once none is queued, deferred or in
/// flight (REQ puts a message back without counting it again).
pub fn counts(env: &Env, topic: &str) -> Option<Counts> {
    if let Some(nsqd) = env.nsqd() {
        let c = nsqd.channel(topic, "ch");
        return Some(c.map_or_else(Counts::default, |c| Counts {
            finished: c.finished,
            requeued: c.requeued,
            timed_out: c.timed_out,
            in_flight: c.in_flight as u64,
        }));
    }
    let http = env.http_address()?;
    let stats = http_get_json(http, &format!("/stats?format=json&topic={topic}")).ok();
    let channel = stats.as_ref().and_then(|(_, v)| {
        v["topics"]
            .as_array()?
            .iter()
            .find(|t| t["topic_name"] == topic)?["channels"]
            .as_array()?
            .iter()
            .find(|c| c["channel_name"] == "ch")
            .cloned()
    });
    let Some(c) = channel else {
        return Some(Counts::default());
    };
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    let pending = n("depth") + n("deferred_count") + n("in_flight_count");
    Some(Counts {
        finished: if pending == 0 { n("message_count") } else { 0 },
        requeued: n("requeue_count"),
        timed_out: n("timeout_count"),
        in_flight: n("in_flight_count"),
    })
}

/// Waits (up to 10 s) for `topic`/`ch`'s counters to satisfy `ok`; the last seen otherwise.
pub fn wait_counts(env: &Env, topic: &str, ok: impl Fn(&Counts) -> bool) -> Result<Counts, Counts> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let c = counts(env, topic);
        match c {
            None => return Ok(Counts::default()),
            Some(c) if ok(&c) => return Ok(c),
            Some(c) if Instant::now() >= until => return Err(c),
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A scenario's server (the local broker, or the real nsqd of `NSQD_TCP_ADDRESS`) and a
/// fresh topic on it named after `prefix`, with `bodies` published.
fn setup(prefix: &str, bodies: impl IntoIterator<Item = String>) -> (Env, String) {
    let env = Env::new(|b| b);
    let topic = env.topic(prefix);
    publish(&env, &topic, bodies);
    (env, topic)
}

/// `plan` run by `r` on `env`'s nsqd; the stop leaves nothing unanswered.
fn run_on(r: &dyn BatchRunner, env: &Env, topic: &str, plan: &Plan) -> Run {
    let run = r.run(&[env.tcp_address().to_string()], topic, plan);
    assert_eq!(run.report.unanswered, 0, "{}", r.name());
    run
}

/// Waits for `topic`/`ch`'s counters to satisfy `ok` (see [`wait_counts`]); fails the
/// scenario `name` with the last seen otherwise.
fn finished(env: &Env, topic: &str, name: &str, ok: impl Fn(&Counts) -> bool) -> Counts {
    wait_counts(env, topic, ok).unwrap_or_else(|c| panic!("{name}: {c:?}"))
}

fn publish(env: &Env, topic: &str, bodies: impl IntoIterator<Item = String>) {
    let mut raw = env.raw();
    for b in bodies {
        raw.publish(topic, b.as_bytes()).expect("a publish");
    }
}

fn config(max_in_flight: u32) -> Config {
    Config {
        max_in_flight,
        ..Config::default()
    }
}

fn total(seen: &[Seen]) -> usize {
    seen.iter().map(|s| s.bodies.len()).sum()
}

fn finish_all() -> Answer {
    Arc::new(|_| Ok(()))
}

/// 250 messages, batches of at most 50 with max_in_flight 100: every message in exactly one
/// batch, none larger than 50, all finished once, nothing requeued or timed out.
pub fn batches_fill_and_finish(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-fill", (0..250).map(|i| format!("m{i}")));
    let plan = Plan {
        config: config(100),
        workers: 2,
        options: BatchOptions::new()
            .max_messages(50)
            .linger(Duration::from_millis(200)),
        work: Duration::from_millis(5),
        answer: finish_all(),
        stop_when: Arc::new(|s| total(s) >= 250),
    };
    let Run { seen, stats, .. } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    let mut bodies: Vec<String> = seen.iter().flat_map(|s| s.bodies.clone()).collect();
    bodies.sort();
    let mut want: Vec<String> = (0..250).map(|i| format!("m{i}")).collect();
    want.sort();
    assert_eq!(bodies, want, "{name}: every message once");
    assert!(
        seen.iter().all(|s| s.bodies.len() <= 50),
        "{name}: {seen:?}"
    );
    assert!(
        seen.iter().any(|s| s.end == BatchEnd::Full),
        "{name}: full batches"
    );
    assert_eq!(stats.batches, seen.len() as u64, "{name}: {stats:?}");
    assert_eq!(stats.messages, 250, "{name}: {stats:?}");
    assert!(
        stats.largest <= 50 && stats.ended_by(BatchEnd::Full) >= 1,
        "{name}: {stats:?}"
    );
    assert_eq!(stats.failed, 0, "{name}: {stats:?}");
    let c = finished(&env, &topic, name, |c| {
        c.finished == 250 && c.in_flight == 0
    });
    assert_eq!((c.requeued, c.timed_out), (0, 0), "{name}");
}

/// max_in_flight 5, batches of up to 100 with a 30 s linger: batches are handed over at the
/// bound (5 messages, [`BatchEnd::Bound`]) at once, not after the linger.
pub fn the_bound_hands_batches_over(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-bound", (0..20).map(|i| format!("b{i}")));
    let plan = Plan {
        config: config(5),
        workers: 1,
        options: BatchOptions::new()
            .max_messages(100)
            .linger(Duration::from_secs(30)),
        work: Duration::ZERO,
        answer: finish_all(),
        stop_when: Arc::new(|s| total(s) >= 20),
    };
    let Run { seen, stats, .. } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    assert_eq!(total(&seen), 20, "{name}: {seen:?}");
    assert!(seen.iter().all(|s| s.bodies.len() <= 5), "{name}: {seen:?}");
    assert!(
        seen.iter().all(|s| s.end == BatchEnd::Bound),
        "{name}: every batch at the bound: {seen:?}"
    );
    assert_eq!(
        stats.ended_by(BatchEnd::Bound),
        seen.len() as u64,
        "{name}: {stats:?}"
    );
    let last = seen.last().map_or(Duration::ZERO, |s| s.at);
    assert!(
        last < Duration::from_secs(10),
        "{name}: waited for the linger: {seen:?}"
    );
    finished(&env, &topic, name, |c| c.finished == 20);
}

/// msg_timeout 1 s; a batch lingers 2 s and its handler works 1.5 s: auto-touch keeps every
/// message alive (one delivery each, nothing timed out on nsqd).
pub fn auto_touch_keeps_a_slow_batch(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-touch", (0..3).map(|i| format!("t{i}")));
    let plan = Plan {
        config: Config {
            msg_timeout: Duration::from_secs(1),
            ..config(10)
        },
        workers: 1,
        options: BatchOptions::new()
            .max_messages(10)
            .linger(Duration::from_secs(2)),
        work: Duration::from_millis(1500),
        answer: finish_all(),
        stop_when: Arc::new(|s| total(s) >= 3),
    };
    let Run { seen, stats, .. } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    assert_eq!(seen.len(), 1, "{name}: one batch: {seen:?}");
    assert_eq!(seen[0].end, BatchEnd::Linger, "{name}");
    assert_eq!(stats.ended_by(BatchEnd::Linger), 1, "{name}: {stats:?}");
    assert!(seen[0].attempts.iter().all(|a| *a == 1), "{name}: {seen:?}");
    let c = finished(&env, &topic, name, |c| c.finished == 3);
    assert_eq!((c.timed_out, c.requeued), (0, 0), "{name}: {c:?}");
}

/// A stop while a batch fills (3 messages, 60 s linger): the partial batch is handed over
/// ([`BatchEnd::Stop`]) and finished before the drain ends; nothing is left unanswered.
pub fn a_stop_hands_over_the_partial_batch(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-stop", (0..3).map(|i| format!("s{i}")));
    // Stop 2 s in (the batch holds the 3 messages, waiting for its linger).
    let counted = Arc::new(Mutex::new(None::<Instant>));
    let plan = Plan {
        config: config(10),
        workers: 1,
        options: BatchOptions::new()
            .max_messages(100)
            .linger(Duration::from_secs(60)),
        work: Duration::ZERO,
        answer: finish_all(),
        stop_when: {
            let counted = counted.clone();
            Arc::new(move |_| {
                let mut at = counted.lock().unwrap();
                let first = *at.get_or_insert_with(Instant::now);
                first.elapsed() >= Duration::from_secs(2)
            })
        },
    };
    let started = Instant::now();
    let Run { seen, stats, .. } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{name}: the stop waited for the linger"
    );
    assert_eq!(seen.len(), 1, "{name}: {seen:?}");
    assert_eq!(seen[0].end, BatchEnd::Stop, "{name}");
    assert_eq!(stats.ended_by(BatchEnd::Stop), 1, "{name}: {stats:?}");
    assert_eq!(seen[0].bodies.len(), 3, "{name}");
    let c = finished(&env, &topic, name, |c| c.finished == 3);
    assert_eq!(c.requeued, 0, "{name}");
}

/// A stop while the only worker handles a batch (3 of 5 messages, 1 s of work) and the other
/// 2 wait, received: after it, they make the partial batch ([`BatchEnd::Stop`]) instead of
/// going back to nsqd; all 5 finished, none requeued.
pub fn a_stop_takes_in_what_was_received(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-stop-received", (0..5).map(|i| format!("r{i}")));
    let plan = Plan {
        config: config(10),
        workers: 1,
        options: BatchOptions::new()
            .max_messages(3)
            .linger(Duration::from_millis(500)),
        work: Duration::from_secs(1),
        answer: finish_all(),
        // 300 ms into the first batch's handler (the other 2 arrive and wait meanwhile).
        stop_when: {
            let first = Mutex::new(None::<Instant>);
            Arc::new(move |s: &[Seen]| {
                let mut first = first.lock().unwrap();
                if s.is_empty() {
                    return false;
                }
                first.get_or_insert_with(Instant::now).elapsed() >= Duration::from_millis(300)
            })
        },
    };
    let Run { seen, stats, .. } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    assert_eq!(total(&seen), 5, "{name}: {seen:?}");
    assert_eq!(seen.len(), 2, "{name}: {seen:?}");
    assert_eq!(seen[1].end, BatchEnd::Stop, "{name}: {seen:?}");
    assert_eq!(stats.ended_by(BatchEnd::Stop), 1, "{name}: {stats:?}");
    let c = finished(&env, &topic, name, |c| c.finished == 5);
    assert_eq!(c.requeued, 0, "{name}: nothing went back");
}

/// Odd-numbered messages fail on their first attempt (without backoff, no delay) while the
/// batch finishes: only they come back, once, and are finished on their second attempt.
pub fn single_messages_fail_while_the_rest_finish(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-partial", (0..10).map(|i| i.to_string()));
    let plan = Plan {
        config: config(20),
        workers: 1,
        options: BatchOptions::new()
            .max_messages(10)
            .linger(Duration::from_millis(300)),
        work: Duration::ZERO,
        answer: Arc::new(|batch: &mut Batch| {
            for mut e in batch.iter_mut() {
                let odd = std::str::from_utf8(e.body())
                    .ok()
                    .and_then(|b| b.parse::<u32>().ok())
                    .is_some_and(|n| n % 2 == 1);
                if odd && e.attempts() == 1 {
                    e.fail(
                        HandlerError::msg("odd")
                            .without_backoff()
                            .with_delay(Duration::ZERO),
                    );
                }
            }
            Ok(())
        }),
        stop_when: Arc::new(|s| total(s) >= 15),
    };
    let Run {
        seen,
        events,
        stats,
        ..
    } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    assert_eq!(
        total(&seen),
        15,
        "{name}: 10 then the 5 odd again: {seen:?}"
    );
    let again: Vec<&String> = seen
        .iter()
        .flat_map(|s| s.bodies.iter().zip(&s.attempts))
        .filter(|(_, a)| **a == 2)
        .map(|(b, _)| b)
        .collect();
    assert_eq!(again.len(), 5, "{name}: {seen:?}");
    assert_eq!(
        (stats.messages_requeued, stats.failed),
        (5, 0),
        "{name}: {stats:?}"
    );
    assert!(
        !events.iter().any(|e| matches!(e, Event::Backoff { .. })),
        "{name}: no backoff for messages failed without it"
    );
    let c = finished(&env, &topic, name, |c| c.finished == 10);
    assert_eq!(c.requeued, 5, "{name}");
}

/// A batch of 10 fails as a whole once: all 10 are requeued, and the consumer backs off to
/// level 1 only (once for the batch, not once per message), then recovers.
pub fn a_failed_batch_backs_off_once(r: &dyn BatchRunner) {
    let (env, topic) = setup("batch-backoff", (0..10).map(|i| format!("f{i}")));
    let failed = Arc::new(Mutex::new(false));
    let plan = Plan {
        config: Config {
            backoff_multiplier: Duration::from_millis(100),
            ..config(20)
        },
        workers: 1,
        options: BatchOptions::new()
            .max_messages(10)
            .linger(Duration::from_millis(300)),
        work: Duration::ZERO,
        answer: {
            let failed = failed.clone();
            Arc::new(move |_: &mut Batch| {
                let mut f = failed.lock().unwrap();
                if *f {
                    Ok(())
                } else {
                    *f = true;
                    Err(HandlerError::msg("the store is down").with_delay(Duration::ZERO))
                }
            })
        },
        stop_when: Arc::new(|s| total(s) >= 20),
    };
    let Run {
        seen,
        events,
        stats,
        ..
    } = run_on(r, &env, &topic, &plan);
    let name = r.name();
    assert_eq!(total(&seen), 20, "{name}: {seen:?}");
    let levels: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Backoff { level } => Some(*level),
            _ => None,
        })
        .collect();
    assert_eq!(levels, [1], "{name}: one backoff for the batch: {events:?}");
    assert!(events.contains(&Event::BackoffEnded), "{name}: {events:?}");
    let failures: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::BatchFailed { .. }))
        .collect();
    assert!(
        matches!(failures.as_slice(), [Event::BatchFailed { messages: 10, error }] if error == "the store is down"),
        "{name}: {failures:?}"
    );
    assert_eq!(stats.failed, 1, "{name}: {stats:?}");
    let c = finished(&env, &topic, name, |c| c.finished == 10);
    assert_eq!(c.requeued, 10, "{name}");
}

/// Two nsqd (the env's and a second, local one), 100 messages on each, max_in_flight 200,
/// batches of up to 150: RDY goes to both, so a batch mixes their messages (neither has
/// 150), each answered on its own connection.
pub fn batches_mix_nsqd(r: &dyn BatchRunner) {
    let env = Env::new(|b| b);
    let topic = env.topic("batch-mix");
    let second = nsq_test_broker::Nsqd::start().expect("a second nsqd");
    publish(&env, &topic, (0..100).map(|i| format!("a{i}")));
    for i in 0..100 {
        second.publish(&topic, format!("b{i}").as_bytes());
    }
    let plan = Plan {
        config: config(200),
        workers: 1,
        options: BatchOptions::new()
            .max_messages(150)
            .linger(Duration::from_millis(300)),
        work: Duration::from_millis(20),
        answer: finish_all(),
        stop_when: Arc::new(|s| total(s) >= 200),
    };
    let nsqds = [
        env.tcp_address().to_string(),
        second.tcp_address().to_string(),
    ];
    let Run { report, seen, .. } = r.run(&nsqds, &topic, &plan);
    let name = r.name();
    assert_eq!(report.unanswered, 0, "{name}");
    assert_eq!(total(&seen), 200, "{name}");
    let mixed = seen.iter().filter(|s| {
        s.nsqds.iter().any(|n| *n == nsqds[0]) && s.nsqds.iter().any(|n| *n == nsqds[1])
    });
    assert!(
        mixed.count() >= 1,
        "{name}: no batch mixed the two nsqd: {seen:?}"
    );
    for (s, prefix) in seen
        .iter()
        .flat_map(|s| s.bodies.iter().zip(&s.nsqds))
        .map(|(b, n)| {
            (
                n,
                if b.starts_with('a') {
                    &nsqds[0]
                } else {
                    &nsqds[1]
                },
            )
        })
    {
        assert_eq!(s, prefix, "{name}: a message from the wrong nsqd");
    }
    finished(&env, &topic, name, |c| c.finished == 100);
    let done = nsq_test_broker::scenarios::eventually(Duration::from_secs(10), || {
        second
            .channel(&topic, "ch")
            .is_some_and(|c| c.finished == 100 && c.requeued == 0)
    });
    assert!(done, "{name}: {:?}", second.channel(&topic, "ch"));
}

/// Every scenario, in order.
pub fn run_all(r: &dyn BatchRunner) {
    batches_fill_and_finish(r);
    the_bound_hands_batches_over(r);
    auto_touch_keeps_a_slow_batch(r);
    a_stop_hands_over_the_partial_batch(r);
    a_stop_takes_in_what_was_received(r);
    single_messages_fail_while_the_rest_finish(r);
    a_failed_batch_backs_off_once(r);
    batches_mix_nsqd(r);
}
