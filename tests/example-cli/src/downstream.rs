//! The modelled downstream of the bench_reader tools (`--downstream-capacity`), shared by every
//! adapter's tool; only the waiting (a permit, the service time) is the adapter's.
//!
//! With the model on, each message's handler stands for a call to a downstream service of
//! `C` slots: it waits for one of `C` permits, handed out first come first served, holds it
//! for the service time, releases it, then finishes the message. With `--collapse=F`, a
//! congested downstream also slows down: an operation that starts while `excess` others wait
//! for a permit takes `s × (1 + F × excess / C)`. Throughput is then at most `C / s`, and every
//! message in flight beyond `C` only adds waiting: the handling latency is about
//! `s × max(1, L / C)` for a max_in_flight `L`.
//!
//! What is measured: messages finished within the run, and each one's handling latency, from
//! the handler's start (the hand-out) to its `finish` (kept in a reservoir of at most
//! [`MAX_SAMPLES`]).
//!
//! The consumer options (`--consumer-option=name=value`, `--max-in-flight-mode`,
//! `--min-in-flight`) are passed by name to the adapter's `Config::set_str`, which refuses an
//! option it does not know: the tools report that error and stop.

use crate::{Flags, go_duration};
use std::collections::VecDeque;
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Latency samples kept at most (a uniform reservoir beyond).
pub const MAX_SAMPLES: usize = 1_000_000;

/// Service time when `--service-time` is not given.
pub const DEFAULT_SERVICE_TIME: Duration = Duration::from_millis(5);

/// One consumer option to pass to `Config::set_str`, with the flag it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOption {
    /// The flag, for the error message (`--min-in-flight`).
    pub flag: &'static str,
    /// The option's name (`min_in_flight`).
    pub name: String,
    /// Its value, as text.
    pub value: String,
}

/// The consumer options of the command line, in the order they are applied: every
/// `--consumer-option=name=value` as given, then `--max-in-flight-mode`, then
/// `--min-in-flight` (so those two win).
pub fn consumer_options(flags: &Flags) -> Result<Vec<ConsumerOption>, String> {
    let mut options = Vec::new();
    for opt in flags.all("consumer-option") {
        let Some((name, value)) = opt.split_once('=') else {
            return Err(format!(
                "invalid value {opt:?} for flag -consumer-option: expected NAME=VALUE"
            ));
        };
        options.push(ConsumerOption {
            flag: "consumer-option",
            name: name.trim().to_owned(),
            value: value.to_owned(),
        });
    }
    for (flag, name) in [
        ("max-in-flight-mode", "max_in_flight_mode"),
        ("min-in-flight", "min_in_flight"),
    ] {
        if let Some(value) = flags.get(flag) {
            options.push(ConsumerOption {
                flag,
                name: name.to_owned(),
                value: value.to_owned(),
            });
        }
    }
    Ok(options)
}

/// Applies `options` with `set` (the adapter's `Config::set_str`); the first refusal is
/// reported with the flag that asked for it.
pub fn apply_consumer_options<E: Display>(
    options: &[ConsumerOption],
    mut set: impl FnMut(&str, &str) -> Result<(), E>,
) -> Result<(), String> {
    for o in options {
        set(&o.name, &o.value).map_err(|e| {
            let given = if o.flag == "consumer-option" {
                format!("{}={}", o.name, o.value)
            } else {
                o.value.clone()
            };
            format!("-{}={given}: {e}", o.flag)
        })?;
    }
    Ok(())
}

/// The max_in_flight mode the options ask for (`static` unless one sets
/// `max_in_flight_mode`), for the report.
pub fn max_in_flight_mode(options: &[ConsumerOption]) -> String {
    options
        .iter()
        .rev()
        .find(|o| o.name.replace('-', "_") == "max_in_flight_mode")
        .map_or_else(|| "static".to_owned(), |o| o.value.clone())
}

/// The model's flags: `--downstream-capacity`, `--service-time`, `--collapse`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DownstreamArgs {
    /// `C`: permits of the downstream.
    pub capacity: usize,
    /// `s`: how long an uncongested operation holds its permit.
    pub service: Duration,
    /// `F`: how much the service time grows with the operations waiting.
    pub collapse: f64,
}

impl DownstreamArgs {
    /// The model's flags, or `None` without `--downstream-capacity` (the other two are then
    /// refused).
    pub fn parse(flags: &Flags) -> Result<Option<DownstreamArgs>, String> {
        if !flags.has("downstream-capacity") {
            for flag in ["service-time", "collapse"] {
                if flags.has(flag) {
                    return Err(format!("-{flag} needs -downstream-capacity"));
                }
            }
            return Ok(None);
        }
        let capacity: usize = flags.number("downstream-capacity", 0)?;
        if capacity == 0 {
            return Err("-downstream-capacity must be at least 1".to_owned());
        }
        let collapse: f64 = flags.number("collapse", 0.0)?;
        if !(collapse.is_finite() && collapse >= 0.0) {
            return Err(format!(
                "-collapse must be a non-negative number, not {collapse}"
            ));
        }
        Ok(Some(DownstreamArgs {
            capacity,
            service: flags.duration("service-time", DEFAULT_SERVICE_TIME)?,
            collapse,
        }))
    }

    /// The service time of an operation that starts while `excess` others wait for a permit:
    /// `s × (1 + F × excess / C)`.
    pub fn service_time(&self, excess: usize) -> Duration {
        if self.collapse == 0.0 || excess == 0 {
            return self.service;
        }
        self.service
            .mul_f64(1.0 + self.collapse * excess as f64 / self.capacity as f64)
    }
}

/// The model during a run: who waits for a permit, and what was measured.
#[derive(Debug)]
pub struct Downstream {
    args: DownstreamArgs,
    /// Operations waiting for a permit now.
    waiting: AtomicUsize,
    /// Of the messages counted, those whose operation found others waiting for a permit.
    queued: AtomicU64,
    /// Messages finished by `end`.
    handled: AtomicU64,
    /// Of the messages counted, the time their operations held a permit, in nanoseconds: the
    /// service time as the runtime's timer kept it.
    held_nanos: AtomicU64,
    end: Instant,
    samples: Mutex<Reservoir>,
}

/// An operation under way: when its handler started, whether it found others waiting, how
/// long it held its permit.
#[derive(Debug)]
#[must_use = "an operation ends with Downstream::done"]
pub struct Operation {
    started: Instant,
    queued: bool,
    held: Duration,
}

impl Downstream {
    /// The model for a run that counts what is finished until `end`.
    pub fn new(args: DownstreamArgs, end: Instant) -> Downstream {
        Downstream {
            args,
            waiting: AtomicUsize::new(0),
            queued: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            held_nanos: AtomicU64::new(0),
            end,
            samples: Mutex::new(Reservoir::default()),
        }
    }

    /// The model's flags.
    pub fn args(&self) -> &DownstreamArgs {
        &self.args
    }

    /// A handler starts: from now on its operation waits for a permit.
    pub fn arrive(&self) -> Operation {
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel) > 0;
        Operation {
            started: Instant::now(),
            queued,
            held: Duration::ZERO,
        }
    }

    /// The operation has its permit: how long it holds it (the service time for the
    /// operations still waiting).
    pub fn admitted(&self) -> Duration {
        let excess = self.waiting.fetch_sub(1, Ordering::AcqRel) - 1;
        self.args.service_time(excess)
    }

    /// The operation's message is finished: counted, with its latency, if by the end.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "an operation ends once: done takes it"
    )]
    pub fn done(&self, op: Operation) {
        let now = Instant::now();
        if now > self.end {
            return;
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
        self.queued
            .fetch_add(u64::from(op.queued), Ordering::Relaxed);
        self.held_nanos
            .fetch_add(op.held.as_nanos() as u64, Ordering::Relaxed);
        let nanos = now.duration_since(op.started).as_nanos() as u64;
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(nanos);
    }

    /// One message through the downstream on an async runtime: wait for a permit
    /// (`acquire`), hold it for the service time (`sleep`), release it, then `finish`.
    pub async fn serve<P, S>(
        &self,
        acquire: impl Future<Output = P>,
        sleep: impl FnOnce(Duration) -> S,
        finish: impl FnOnce(),
    ) where
        S: Future<Output = ()>,
    {
        let mut op = self.arrive();
        let permit = acquire.await;
        let service = self.admitted();
        let admitted = Instant::now();
        sleep(service).await;
        drop(permit);
        op.held = admitted.elapsed();
        finish();
        self.done(op);
    }

    /// [`serve`](Self::serve) on a thread: `std::thread::sleep` holds the permit.
    pub fn serve_blocking(&self, semaphore: &FifoSemaphore, finish: impl FnOnce()) {
        let mut op = self.arrive();
        let permit = semaphore.acquire();
        let service = self.admitted();
        let admitted = Instant::now();
        std::thread::sleep(service);
        drop(permit);
        op.held = admitted.elapsed();
        finish();
        self.done(op);
    }

    /// Messages finished by the end of the run.
    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }

    /// The report's lines, for a run of `duration`: the model and the consumer's limits
    /// (`max_in_flight`, `mode`, the RDY it had at the end), then the rate and the latency.
    pub fn report(
        &self,
        duration: Duration,
        max_in_flight: u32,
        mode: &str,
        rdy_at_end: u64,
    ) -> [String; 2] {
        let a = &self.args;
        let mut samples = std::mem::take(
            &mut self
                .samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .samples,
        );
        samples.sort_unstable();
        let handled = self.handled();
        let pct = |p: f64| Duration::from_nanos(percentile(&samples, p));
        let max = Duration::from_nanos(samples.last().copied().unwrap_or(0));
        let p99 = pct(99.0);
        [
            format!(
                "downstream: capacity {} - service time {} - collapse {} - max_in_flight {} \
                 ({mode}) - RDY at end {rdy_at_end} - {} of {handled} queued for a permit - \
                 permit held {} on average",
                a.capacity,
                go_duration(a.service),
                a.collapse,
                max_in_flight,
                self.queued.load(Ordering::Relaxed),
                micros(Duration::from_nanos(
                    self.held_nanos.load(Ordering::Relaxed) / handled.max(1)
                )),
            ),
            format!(
                "downstream: {:.1} msg/s - latency p50 {} - p99 {} - max {} ({} samples) - \
                 uncongested {} - p99/uncongested {:.2}",
                handled as f64 / duration.as_secs_f64(),
                micros(pct(50.0)),
                micros(p99),
                micros(max),
                samples.len(),
                go_duration(a.service),
                p99.as_secs_f64() / a.service.as_secs_f64(),
            ),
        ]
    }
}

/// `d` rounded to whole microseconds, Go style.
fn micros(d: Duration) -> String {
    go_duration(Duration::from_micros((d.as_nanos() as u64 + 500) / 1000))
}

/// The nearest-rank `p`th percentile of sorted `samples` (0 when empty).
fn percentile(samples: &[u64], p: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Latency samples in nanoseconds: every one up to [`MAX_SAMPLES`], then a uniform sample of
/// them (Vitter's algorithm R, with a xorshift generator).
#[derive(Debug)]
struct Reservoir {
    samples: Vec<u64>,
    seen: u64,
    rng: u64,
}

impl Default for Reservoir {
    fn default() -> Self {
        Reservoir {
            samples: Vec::new(),
            seen: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl Reservoir {
    fn add(&mut self, nanos: u64) {
        self.seen += 1;
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(nanos);
            return;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let slot = (self.rng % self.seen) as usize;
        if slot < MAX_SAMPLES {
            self.samples[slot] = nanos;
        }
    }
}

/// A counting semaphore for threads whose permits go to the waiters in arrival order: a
/// release hands its permit straight to the longest waiter (no barging), waking that thread
/// only.
#[derive(Debug)]
pub struct FifoSemaphore {
    state: Mutex<FifoState>,
}

#[derive(Debug)]
struct FifoState {
    free: usize,
    waiters: VecDeque<Arc<Waiter>>,
}

#[derive(Debug)]
struct Waiter {
    granted: AtomicBool,
    thread: std::thread::Thread,
}

/// A permit of a [`FifoSemaphore`], released when dropped.
#[derive(Debug)]
#[must_use = "the permit is released when dropped"]
pub struct FifoPermit<'a>(&'a FifoSemaphore);

impl FifoSemaphore {
    /// A semaphore of `permits` permits.
    pub fn new(permits: usize) -> FifoSemaphore {
        FifoSemaphore {
            state: Mutex::new(FifoState {
                free: permits,
                waiters: VecDeque::new(),
            }),
        }
    }

    /// Waits (parks the thread) for a permit, behind every thread that asked before.
    pub fn acquire(&self) -> FifoPermit<'_> {
        let waiter = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.free > 0 && state.waiters.is_empty() {
                state.free -= 1;
                return FifoPermit(self);
            }
            let waiter = Arc::new(Waiter {
                granted: AtomicBool::new(false),
                thread: std::thread::current(),
            });
            state.waiters.push_back(waiter.clone());
            waiter
        };
        while !waiter.granted.load(Ordering::Acquire) {
            std::thread::park();
        }
        FifoPermit(self)
    }

    fn release(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.waiters.pop_front() {
            Some(next) => {
                drop(state);
                next.granted.store(true, Ordering::Release);
                next.thread.unpark();
            }
            None => state.free += 1,
        }
    }
}

impl Drop for FifoPermit<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Flags, Usage};

    const USAGE: Usage = Usage {
        name: "t",
        about: "t",
        flags: crate::bench_flags!(reader, downstream),
    };

    fn flags(args: &[&str]) -> Flags {
        Flags::parse_from(args.iter().map(|a| (*a).to_owned()), &USAGE).unwrap()
    }

    #[test]
    fn the_model_is_off_without_a_capacity() {
        assert_eq!(DownstreamArgs::parse(&flags(&[])), Ok(None));
        assert!(DownstreamArgs::parse(&flags(&["--collapse=1"])).is_err());
        assert!(DownstreamArgs::parse(&flags(&["--downstream-capacity=0"])).is_err());
        let args = DownstreamArgs::parse(&flags(&["--downstream-capacity=50"]))
            .unwrap()
            .unwrap();
        assert_eq!(args.service, DEFAULT_SERVICE_TIME);
        assert!(args.collapse == 0.0);
    }

    #[test]
    fn collapse_stretches_the_service_time_with_the_waiters() {
        let args = DownstreamArgs {
            capacity: 50,
            service: Duration::from_millis(5),
            collapse: 1.0,
        };
        assert_eq!(args.service_time(0), Duration::from_millis(5));
        assert_eq!(args.service_time(50), Duration::from_millis(10));
        assert_eq!(args.service_time(150), Duration::from_millis(20));
        let none = DownstreamArgs {
            collapse: 0.0,
            ..args
        };
        assert_eq!(none.service_time(150), Duration::from_millis(5));
    }

    #[test]
    fn options_keep_their_order_and_name_their_flag_on_error() {
        let f = flags(&[
            "--min-in-flight=3",
            "--consumer-option=max_in_flight_mode=static",
            "--max-in-flight-mode=adaptive",
            "--consumer-option=snappy=true",
        ]);
        let options = consumer_options(&f).unwrap();
        let names: Vec<&str> = options.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "max_in_flight_mode",
                "snappy",
                "max_in_flight_mode",
                "min_in_flight"
            ]
        );
        assert_eq!(max_in_flight_mode(&options), "adaptive");
        assert_eq!(max_in_flight_mode(&[]), "static");
        let e = apply_consumer_options(&options[2..], |name, _| {
            Err(format!("unknown option {name:?}"))
        });
        assert_eq!(
            e,
            Err("-max-in-flight-mode=adaptive: unknown option \"max_in_flight_mode\"".to_owned())
        );
        assert!(consumer_options(&flags(&["--consumer-option=snappy"])).is_err());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&samples, 50.0), 50);
        assert_eq!(percentile(&samples, 99.0), 99);
        assert_eq!(percentile(&samples, 100.0), 100);
        assert_eq!(percentile(&[], 99.0), 0);
    }

    #[test]
    fn the_fifo_semaphore_serves_threads_in_arrival_order() {
        let sem = FifoSemaphore::new(1);
        let order = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            let first = sem.acquire();
            for i in 0..4 {
                s.spawn({
                    let (sem, order) = (&sem, &order);
                    move || {
                        let _p = sem.acquire();
                        order.lock().unwrap().push(i);
                    }
                });
                // Each thread queues before the next is started.
                while sem.state.lock().unwrap().waiters.len() < i + 1 {
                    std::thread::yield_now();
                }
            }
            drop(first);
        });
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
        assert_eq!(sem.state.lock().unwrap().free, 1);
    }
}
