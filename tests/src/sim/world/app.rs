//! The application under the consumer: what a handler does with each message handed out.
//!
//! Three models ([`App`]):
//! * **handlers** (the faulty world): each takes 20 us to 20 ms and finishes the message (0.2%
//!   fail); while a fault says so, 30% take seconds (some outlast msg_timeout: the application
//!   touches them first, or not), half fail, or 30% panic (requeued with backoff);
//! * **a service** (the downstream world, [`DownstreamConfig`]): each handler is one call to a
//!   service that serves `capacity` calls at once, each for the service time (±5%); above
//!   that, calls wait in a FIFO queue. With `collapse`, a call that starts while others wait
//!   takes longer: `service x (1 + collapse x waiting / capacity)` (lock contention,
//!   thrashing). The capacity can change at given times. The client's noise
//!   ([`crate::sim::noise`]) delays the handlers: jitter on each answer, stalls in which
//!   nothing of the client runs (what nsqd sends is read at their end too), CPU time before
//!   each call. A run measures the throughput and the handling latencies (hand-out to
//!   answer) of a window;
//! * **batches** ([`BatchConfig`](crate::sim::BatchConfig), in [`super::batch`]): messages
//!   gathered into batches with the client layer's rules, each batch handled for a service
//!   time and answered as a whole.
//!
//! Every model answers through [`World::answer_held`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::batch::Batches;
use super::net::Who;
use super::{Ev, Queue, World, timed};
use crate::sim::client::{Answer, Delivery};
use crate::sim::downstream::{DownstreamConfig, DownstreamReport};
use crate::sim::faults::FaultKind;
use crate::sim::noise::ClientNoise;
use crate::sim::rng::Rng;

/// The application model of a run.
pub(super) enum App {
    Handlers(Handlers),
    Service(Box<Service>),
    Batches(Box<Batches>),
}

/// The faulty world's handlers.
pub(super) struct Handlers {
    r: Rng,
    slow: u32,
    failing: u32,
    panicking: u32,
}

/// Handlers that call a service of limited capacity, with the client's noise.
pub(super) struct Service {
    capacity: u32,
    /// One call's mean service time.
    mean: Duration,
    collapse: f64,
    changes: Vec<(Duration, u32)>,
    /// Calls being served.
    running: u32,
    /// Calls waiting for the service, in order: the consumer's epoch and the message.
    waiting: VecDeque<(u32, Delivery)>,
    r: Rng,
    noise: ClientNoise,
    /// An [`AppEv::Wake`] is queued for then.
    wake_at: Option<Instant>,
    /// The measurement window, since the start.
    window: (Duration, Duration),
    /// Handling latencies (us) of the messages handed out and answered in the window.
    latencies: Vec<u32>,
    finished_in_window: u64,
    finished: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Finish,
    Fail,
    Panic,
    Touch,
}

/// The application's events.
#[derive(Clone, Copy, Debug)]
pub(super) enum AppEv {
    /// A handler of consumer `epoch` is done.
    Handler(u32, Delivery, Outcome),
    /// The batch being gathered (by its number) has lingered long enough.
    Linger(u64),
    /// A batch (by its number) is handled: it is answered.
    BatchDone(u64),
    /// Consumer `epoch`'s batching starts (auto-touch on), late.
    StartBatching(u32),
    /// A service call is done.
    CallDone(u32, Delivery),
    /// A handler's CPU part is done (noise): its call waits for the service.
    CpuDone(u32, Delivery),
    /// A handler answers, late (noise).
    Answer(u32, Delivery),
    /// A stall is over: the handlers waiting for the service may start their calls.
    Wake,
    /// The service's capacity changes.
    Capacity(u32),
}

impl App {
    /// The faulty world's handlers, drawing from `seed`.
    pub(super) fn handlers(seed: u64) -> App {
        App::Handlers(Handlers {
            r: Rng::new(seed, 3),
            slow: 0,
            failing: 0,
            panicking: 0,
        })
    }

    /// `cfg`'s service, for a run starting at `t0`.
    pub(super) fn service(cfg: &DownstreamConfig, t0: Instant) -> App {
        let end = cfg.measure_until.unwrap_or(cfg.duration);
        App::Service(Box::new(Service {
            capacity: cfg.capacity,
            mean: cfg.service,
            collapse: cfg.collapse,
            changes: cfg.changes.clone(),
            running: 0,
            waiting: VecDeque::new(),
            r: Rng::new(cfg.seed, 13),
            noise: ClientNoise::new(&cfg.noise, cfg.seed, t0),
            wake_at: None,
            window: (cfg.measure_from, end),
            latencies: Vec::new(),
            finished_in_window: 0,
            finished: 0,
        }))
    }

    /// When the client runs again at or after `t` (the end of a stall covering it).
    pub(super) fn awake(&mut self, t: Instant) -> Instant {
        match self {
            App::Handlers(_) => t,
            App::Service(s) => s.noise.awake(t),
            App::Batches(b) => b.noise.awake(t),
        }
    }

    /// A fault on the handlers starts or heals (the service's handlers have none).
    pub(super) fn fault(&mut self, kind: &FaultKind, start: bool) {
        let App::Handlers(h) = self else { return };
        let n = match kind {
            FaultKind::SlowHandlers { .. } => &mut h.slow,
            FaultKind::FailingHandlers { .. } => &mut h.failing,
            FaultKind::PanickingHandlers { .. } => &mut h.panicking,
            _ => return,
        };
        super::inject::bump(n, start);
    }
}

impl Service {
    /// Starts waiting calls while the service has room (at `now`, on `queue`).
    fn start_calls(&mut self, now: Instant, queue: &mut Queue) {
        // A stalled client issues no call (its handlers do not run): they start at the end.
        let awake = self.noise.awake(now);
        if awake > now {
            if self.wake_at != Some(awake) && !self.waiting.is_empty() {
                self.wake_at = Some(awake);
                queue.push(awake, Ev::App(AppEv::Wake));
            }
            return;
        }
        while self.running < self.capacity {
            let Some((epoch, d)) = self.waiting.pop_front() else {
                return;
            };
            let excess = self.waiting.len() as f64;
            let slow = 1.0 + self.collapse * excess / f64::from(self.capacity.max(1));
            let took = jittered(&mut self.r, self.mean.mul_f64(slow));
            self.running += 1;
            queue.push(now + took, Ev::App(AppEv::CallDone(epoch, d)));
        }
    }
}

/// A service time drawn around `mean`: service times vary by ±5%.
pub(super) fn jittered(r: &mut Rng, mean: Duration) -> Duration {
    mean.mul_f64(0.95 + 0.1 * (r.below(1_000) as f64 / 1_000.0))
}

impl World<'_> {
    /// The application's own schedule: the service's capacity changes.
    pub(super) fn start_app(&mut self) {
        if let App::Service(s) = &self.app {
            for (at, c) in s.changes.clone() {
                self.push(self.t0 + at, Ev::App(AppEv::Capacity(c)));
            }
        }
    }

    /// Consumer `epoch` handed `d` to the application.
    pub(super) fn on_message(&mut self, epoch: u32, d: crate::sim::client::Delivery) {
        let now = self.now;
        match &mut self.app {
            App::Handlers(_) => self.schedule_handler(epoch, d),
            App::Batches(_) => self.batch_message(epoch, d),
            App::Service(s) => {
                if let Some(at) = s.noise.cpu_done(now) {
                    self.queue.push(at, Ev::App(AppEv::CpuDone(epoch, d)));
                    return;
                }
                s.waiting.push_back((epoch, d));
                s.start_calls(now, &mut self.queue);
            }
        }
    }

    pub(super) fn app_event(&mut self, ev: AppEv) {
        let now = self.now;
        match ev {
            AppEv::Handler(epoch, d, outcome) => return self.handler_done(epoch, d, outcome),
            AppEv::Linger(id) => return self.linger(id),
            AppEv::BatchDone(id) => return self.batch_done(id),
            AppEv::StartBatching(epoch) => return self.start_batching(epoch),
            _ => {}
        }
        let App::Service(s) = &mut self.app else {
            return;
        };
        let answer = match ev {
            AppEv::CallDone(epoch, d) => {
                s.running -= 1;
                let at = s.noise.answer_at(now);
                let answer = if at > now {
                    self.queue.push(at, Ev::App(AppEv::Answer(epoch, d)));
                    None
                } else {
                    Some((epoch, d))
                };
                // Answered before the next calls start; the consumer is drained after both.
                if let Some((epoch, d)) = answer {
                    self.service_answer(epoch, d);
                }
                let App::Service(s) = &mut self.app else {
                    return;
                };
                s.start_calls(now, &mut self.queue);
                answer
            }
            AppEv::CpuDone(epoch, d) => {
                s.waiting.push_back((epoch, d));
                s.start_calls(now, &mut self.queue);
                None
            }
            AppEv::Answer(epoch, d) => {
                self.service_answer(epoch, d);
                Some((epoch, d))
            }
            AppEv::Wake => {
                s.start_calls(now, &mut self.queue);
                None
            }
            AppEv::Capacity(c) => {
                s.capacity = c;
                s.start_calls(now, &mut self.queue);
                None
            }
            AppEv::Handler(..)
            | AppEv::Linger(_)
            | AppEv::BatchDone(_)
            | AppEv::StartBatching(_) => None,
        };
        if let Some((epoch, _)) = answer {
            self.drain_epoch(epoch);
        }
    }

    /// Drains consumer `epoch`, the current one or a closed one.
    pub(super) fn drain_epoch(&mut self, epoch: u32) {
        if self.consumer.as_ref().is_some_and(|c| c.epoch == epoch) {
            self.drain_consumer();
        } else if let Some(i) = self.old_consumers.iter().position(|c| c.epoch == epoch) {
            self.drain_old(i);
        }
    }

    /// The application answers `d`, handed out by consumer `epoch` (the current one or a
    /// closed one), as `how`: traced, no longer held (unless touched), answered; a FIN the
    /// consumer took marks it finished (in a world that follows every message). Returns when
    /// it was handed out (if the application held it) and the consumer's result; `None` if
    /// that consumer is gone. The caller drains the consumer.
    pub(super) fn answer_held(
        &mut self,
        epoch: u32,
        d: &Delivery,
        how: Answer,
    ) -> Option<(Option<Instant>, Result<(), String>)> {
        self.trace(b'a', d.conn, &d.id);
        let node = self.conn_node(Who::Consumer(epoch), d.conn);
        let now = self.now;
        let slot = if self.consumer.as_ref().is_some_and(|c| c.epoch == epoch) {
            self.consumer.as_mut()
        } else {
            self.old_consumers.iter_mut().find(|c| c.epoch == epoch)
        }?;
        let key = (d.conn, d.id);
        let handed = if how == Answer::Touch {
            slot.held.get(&key).copied()
        } else {
            slot.held.remove(&key)
        };
        let machine = slot.machine.as_mut();
        let result = timed(&mut self.core, || machine.answer(now, d, how));
        if how == Answer::Finish && result.is_ok() && self.load == super::Load::Published {
            if let Some(n) = node {
                self.finished.insert((n, d.id));
            }
        }
        Some((handed, result))
    }

    /// A service handler finishes `d` (the consumer is drained by the caller).
    fn service_answer(&mut self, epoch: u32, d: Delivery) {
        let now = self.now;
        let Some((Some(handed), result)) = self.answer_held(epoch, &d, Answer::Finish) else {
            return;
        };
        if let Err(e) = result {
            // Only possible if nsqd timed it out: a bug in a world that never does.
            self.violate(format!("a FIN was refused: {e}"));
            return;
        }
        let (at, since) = (self.at(), handed.saturating_duration_since(self.t0));
        let App::Service(s) = &mut self.app else {
            return;
        };
        s.finished += 1;
        if at >= s.window.0 && at < s.window.1 {
            s.finished_in_window += 1;
        }
        if since >= s.window.0 && at < s.window.1 {
            let us = (now - handed).as_micros();
            s.latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
        }
    }

    fn schedule_handler(&mut self, epoch: u32, d: Delivery) {
        let App::Handlers(h) = &mut self.app else {
            return;
        };
        let r = &mut h.r;
        let (outcome, took) = if h.panicking > 0 && r.chance(0.3) {
            (Outcome::Panic, Duration::from_micros(r.range(10, 5_000)))
        } else if h.failing > 0 && r.chance(0.5) || r.chance(0.002) {
            (Outcome::Fail, Duration::from_micros(r.range(10, 20_000)))
        } else if h.slow > 0 && r.chance(0.3) {
            // Some outlast msg_timeout: the application touches them first, or not.
            let ms = r.range(1_000, 90_000);
            if ms > 30_000 && r.chance(0.5) {
                (Outcome::Touch, Duration::from_millis(ms / 3))
            } else {
                (Outcome::Finish, Duration::from_millis(ms))
            }
        } else {
            (Outcome::Finish, Duration::from_micros(r.range(20, 20_000)))
        };
        let at = self.now + took;
        self.push(at, Ev::App(AppEv::Handler(epoch, d, outcome)));
    }

    fn handler_done(&mut self, epoch: u32, d: Delivery, outcome: Outcome) {
        let how = match outcome {
            Outcome::Finish => Answer::Finish,
            Outcome::Fail | Outcome::Panic => Answer::Requeue { backoff: true },
            Outcome::Touch => Answer::Touch,
        };
        if self.answer_held(epoch, &d, how).is_none() {
            return;
        }
        self.drain_epoch(epoch);
        if how == Answer::Touch {
            // The handler goes on and finishes it later (within msg_timeout again if the
            // TOUCH got through; its FIN fails otherwise, and nsqd redelivers it).
            let App::Handlers(h) = &mut self.app else {
                return;
            };
            let at = self.now + Duration::from_millis(h.r.range(1, 20_000));
            self.push(at, Ev::App(AppEv::Handler(epoch, d, Outcome::Finish)));
        }
    }

    /// The downstream world's report: the throughput and latency percentiles of the window,
    /// the limit's trace, the first violation.
    pub(super) fn finish_downstream(mut self) -> DownstreamReport {
        let violation = self.violation.take().map(|v| v.what);
        let App::Service(s) = &mut self.app else {
            return DownstreamReport {
                violation,
                ..DownstreamReport::default()
            };
        };
        let window = s.window.1.saturating_sub(s.window.0);
        let mut report = DownstreamReport {
            throughput: s.finished_in_window as f64 / window.as_secs_f64().max(1e-9),
            samples: s.latencies.len(),
            limits: std::mem::take(&mut self.limit.trace),
            finished: s.finished,
            violation,
            ..DownstreamReport::default()
        };
        if !s.latencies.is_empty() {
            s.latencies.sort_unstable();
            let at = |q: f64| {
                let i = ((s.latencies.len() as f64 * q).ceil() as usize)
                    .clamp(1, s.latencies.len())
                    - 1;
                Duration::from_micros(u64::from(s.latencies[i]))
            };
            report.p50 = at(0.5);
            report.p99 = at(0.99);
        }
        report
    }
}
