//! The adaptive in-flight limit ([`Adaptive`]): `max_in_flight` as a ceiling, and below it a
//! limit that follows what the handlers' downstream can take, from each message's handling
//! latency (hand-out to answer) and outcome.
//!
//! # The model
//!
//! A handler's downstream (a database, a service, a disk) serves some number of operations at
//! once at its service time; beyond that, operations queue, and the handling latency grows
//! with the queue while the throughput does not. The best limit is the knee: as many messages
//! as keep the downstream busy, and no queue.
//!
//! # The algorithm: a gradient over a re-measured minimum latency
//!
//! * **Windows.** Latencies are summed per window (O(1) per answer) from the messages handed
//!   out after the window began, so a window measures the limit it was opened with. A window
//!   closes once it holds half the limit's messages, at least [`WINDOW_SAMPLES`] (and lasts
//!   at least [`MIN_WINDOW`]); its mean is the window's latency. The mean, not a percentile:
//!   with the rate of answers it is what the application holds (Little's law), and a few
//!   messages that wait a whole service time move it (each sample counts at most
//!   [`SAMPLE_CAP`] baselines, so one stuck handler does not).
//! * **Start-up.** From the floor, the limit doubles each window while the mean stays
//!   within [`STARTUP_EXIT`] of the lowest mean seen, which is the baseline (the
//!   uncongested latency).
//! * **The gradient.** When a window's mean exceeds the baseline by more than
//!   [`TOLERANCE`], the application holds more than the downstream serves: by Little's law it
//!   holds `rate x mean` on average, of which `rate x baseline` are served, so the rest,
//!   `rate x (mean - baseline)`, queues. The limit drops by that much (at most by half),
//!   leaving [`TOLERANCE`] of headroom. With nothing in transit this is the gradient of Envoy
//!   and Gradient2, `limit x baseline / mean`; counting what the application holds makes it
//!   exact when nsqd is far away and much of the limit is on the wire.
//! * **Growth.** Below the last congestion the limit climbs back quickly; near it, slowly
//!   (probing, 3% a window); once a message or 10% past it without congestion (the
//!   capacity grew), by 6% and then 12% a window. Below [`SMALL`], where one more message is
//!   a big step, a failed probe makes the next wait twice as many windows (at most
//!   [`MAX_PROBE_HOLD`]). It grows only while the limit is used: a consumer with little to
//!   do keeps its limit.
//! * **Re-measuring the baseline.** Two windows in a row clearly faster than the baseline
//!   lower it (halfway; one window's mean is too noisy). Every [`REMEASURE_EVERY`]
//!   (jittered, and at least [`REMEASURE_LATENCIES`] baselines; the first
//!   [`FIRST_REMEASURE`] after start-up when the service is fast), above a limit of
//!   [`REMEASURE_ABOVE`], one window runs at [`REMEASURE_DIP`] of the limit, where the
//!   tolerated queue is gone: its mean is the new baseline, higher or lower than the old
//!   one. The baseline is also taken afresh when lowering the limit by 60% did not lower the
//!   latency (the service itself became slower).
//! * **Failures and timeouts.** A message that expired (nsqd's msg_timeout) halves the limit;
//!   a window in which more than [`FAILURE_SHARE`] of the answers were failures shrinks it by
//!   [`FAILURE_CUT`]. Backoff is left alone: while the consumer backs off the controller is
//!   paused (its windows are dropped), so the two never act on the same failures twice.
//!
//! Everything is deterministic: the only randomness (the re-measure jitter) comes from the
//! consumer's seed.

use std::time::{Duration, Instant};

/// The tolerated queueing: the limit settles where the mean latency is this much above the
/// baseline.
const TOLERANCE: f64 = 0.05;

/// Start-up ends at the first window whose mean exceeds the baseline by this much.
const STARTUP_EXIT: f64 = 0.25;

/// The shortest window.
const MIN_WINDOW: Duration = Duration::from_millis(50);

/// Samples in a window in steady state (start-up's windows take at most this many, fewer
/// at a small limit).
const WINDOW_SAMPLES: u32 = 8;

/// The baseline is re-measured this often (with up to 25% jitter).
const REMEASURE_EVERY: Duration = Duration::from_secs(30);

/// ... but no more often than once in this many baselines.
const REMEASURE_LATENCIES: u32 = 60;

/// The first re-measure comes this soon after start-up, where the service takes at most a
/// tenth of it.
const FIRST_REMEASURE: Duration = Duration::from_secs(1);

/// The re-measuring window takes this share of what the application holds off the limit (at
/// least one message), which takes away the tolerated queue and stays within 25% of it.
const REMEASURE_DIP: f64 = 0.85;

/// Below this limit the baseline is not re-measured by a dip (see `Adaptive::end_window`).
const REMEASURE_ABOVE: f64 = 10.0;

/// Below this limit one more message is a big step (a third or more): after a failed probe,
/// the next one waits (twice as many windows each time, at most [`MAX_PROBE_HOLD`]).
const SMALL: f64 = 3.0;

/// The longest wait between probes at a small limit, in windows.
const MAX_PROBE_HOLD: u32 = 64;

/// A window with more failures (requeues) than this share of its answers shrinks the limit.
const FAILURE_SHARE: f64 = 0.1;

/// How much such a window shrinks it.
const FAILURE_CUT: f64 = 0.9;

/// A sample counts at most this many baselines in a window's mean (one stuck handler must
/// not read as a queue of them).
const SAMPLE_CAP: f64 = 4.0;

/// Where the controller is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Doubling from the floor; the baseline is the lowest mean so far.
    Startup,
    /// Following the gradient.
    Steady,
    /// One window at a lowered limit to re-measure the baseline; then back to `restore`.
    Remeasure { restore: f64 },
    /// Backing off or paused: nothing is measured.
    Held,
}

/// One window's latencies.
#[derive(Debug)]
struct Window {
    /// When it began (`None`: at the first answer, with everything handed out before).
    start: Option<Instant>,
    /// Samples: answers to messages handed out in this window.
    count: u32,
    /// Every answer in it (for the rate).
    answers: u32,
    failures: u32,
    /// The most messages the application held at an answer.
    peak_held: u64,
    /// The samples' sum, in seconds, each at most `cap`.
    sum: f64,
    cap: f64,
}

impl Window {
    fn new() -> Window {
        Window {
            start: None,
            count: 0,
            answers: 0,
            failures: 0,
            peak_held: 0,
            sum: 0.0,
            cap: f64::INFINITY,
        }
    }

    /// A new window from `start`, its samples capped at [`SAMPLE_CAP`] baselines.
    fn reset(&mut self, start: Instant, baseline: Option<Duration>) {
        *self = Window {
            start: Some(start),
            cap: baseline.map_or(f64::INFINITY, |b| b.as_secs_f64() * SAMPLE_CAP),
            ..Window::new()
        };
    }

    fn add(&mut self, latency: Duration) {
        self.sum += latency.as_secs_f64().min(self.cap);
        self.count += 1;
    }

    /// The mean of the window's latencies: by Little's law, with the rate, what the
    /// application holds on average.
    fn mean(&self) -> Duration {
        Duration::try_from_secs_f64(self.sum / f64::from(self.count.max(1)))
            .unwrap_or(Duration::MAX)
    }
}

/// The adaptive limit's state (see the module docs).
#[derive(Debug)]
pub(super) struct Adaptive {
    floor: u32,
    ceiling: u32,
    limit: f64,
    phase: Phase,
    /// The phase to return to when a backoff ends.
    held_from: Phase,
    /// The uncongested latency.
    baseline: Option<Duration>,
    window: Window,
    /// The limit measured as the knee at the last congestion (0: none yet).
    knee: f64,
    /// Windows in a row past the knee without congestion.
    calm: u32,
    /// Lowering the limit began at this limit and mean (`None` once the limit is back
    /// there: a few uncongested windows on the way down do not end the fall).
    falling_from: Option<(f64, Duration)>,
    /// The previous window was clearly faster than the baseline: its mean.
    faster: Option<Duration>,
    remeasure_at: Option<Instant>,
    /// A round trip to nsqd, as the handshakes showed it.
    rtt: Duration,
    /// Handshakes averaged into `rtt` (at most 16).
    rtt_samples: u32,
    /// The re-measure jitter's generator (xorshift, from the consumer's seed).
    seed: u64,
    /// Windows to wait before the next probe of one more message at a small limit, and
    /// the wait after the next failed one.
    probe_hold: u32,
    probe_hold_next: u32,
}

/// Why the limit changed ([`Adaptive`]'s answer to an input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Change {
    /// The new effective limit.
    pub(super) limit: u32,
    /// The uncongested latency it was measured against.
    pub(super) baseline: Option<Duration>,
    /// The latency of the window that moved it.
    pub(super) latency: Duration,
}

impl Adaptive {
    /// A controller between `floor` and `ceiling`, starting at the floor.
    pub(super) fn new(floor: u32, ceiling: u32, seed: u64) -> Adaptive {
        let floor = floor.max(1);
        Adaptive {
            floor,
            ceiling,
            limit: f64::from(floor.min(ceiling)),
            phase: Phase::Startup,
            held_from: Phase::Startup,
            baseline: None,
            window: Window::new(),
            knee: 0.0,
            calm: 0,
            falling_from: None,
            faster: None,
            remeasure_at: None,
            rtt: Duration::ZERO,
            rtt_samples: 0,
            seed: seed | 1,
            probe_hold: 0,
            probe_hold_next: 0,
        }
    }

    /// A connection's handshake took `handshake` (a few round trips): the round-trip
    /// estimate moves toward half of it.
    pub(super) fn note_handshake(&mut self, handshake: Duration) {
        let n = self.rtt_samples.min(15);
        let sample = handshake / 2;
        self.rtt = self.rtt.saturating_mul(n).saturating_add(sample) / (n + 1);
        self.rtt_samples = n + 1;
    }

    /// The effective limit: an integer between the floor and the ceiling (0 while the
    /// ceiling is 0: paused).
    pub(super) fn limit(&self) -> u32 {
        if self.ceiling == 0 {
            return 0;
        }
        let lo = f64::from(self.floor.min(self.ceiling));
        // Truncation intended: the limit is clamped to 1..=u32::MAX first.
        (self.limit.clamp(lo, f64::from(self.ceiling)).floor()) as u32
    }

    /// The ceiling (`max_in_flight`).
    pub(super) fn ceiling(&self) -> u32 {
        self.ceiling
    }

    /// The uncongested latency measured so far.
    pub(super) fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    /// `max_in_flight` changed: the ceiling moves, the limit stays inside it.
    pub(super) fn set_ceiling(&mut self, now: Instant, ceiling: u32) {
        self.ceiling = ceiling;
        if ceiling > 0 {
            self.limit = self.limit.min(f64::from(ceiling));
        }
        self.window.reset(now, self.baseline);
    }

    /// Backing off (or paused): windows are dropped until [`Adaptive::resume`].
    pub(super) fn hold(&mut self) {
        if self.phase != Phase::Held {
            self.held_from = match self.phase {
                Phase::Remeasure { restore } => {
                    self.limit = restore;
                    Phase::Steady
                }
                p => p,
            };
            self.phase = Phase::Held;
        }
    }

    /// Backoff is over: measuring starts afresh with the next messages.
    pub(super) fn resume(&mut self, now: Instant) {
        if self.phase == Phase::Held {
            self.phase = self.held_from;
            self.window.reset(now, self.baseline);
        }
    }

    /// A message handed out at `handed` was answered at `now` (`ok`: finished; otherwise
    /// requeued), while the application held `held` messages (this one included). Returns
    /// the change of the effective limit, if any. O(1) but at the end of a window.
    pub(super) fn on_answer(
        &mut self,
        now: Instant,
        handed: Instant,
        held: u64,
        ok: bool,
    ) -> Option<Change> {
        if self.phase == Phase::Held || self.ceiling == 0 {
            return None;
        }
        let w = &mut self.window;
        w.peak_held = w.peak_held.max(held);
        w.answers = w.answers.saturating_add(1);
        let start = *w.start.get_or_insert(handed);
        if handed < start {
            // Handed out under an earlier limit.
            return None;
        }
        if !ok {
            w.failures += 1;
        }
        w.add(now.saturating_duration_since(handed));
        // A window sees the whole limit cycle once (the first answers of a window are the
        // messages that queued least).
        let cycle = self.limit as u32;
        let enough = match self.phase {
            // Start-up: the half the last doubling added is the test.
            Phase::Startup => w.count >= (cycle / 2).max(2),
            _ => w.count >= (cycle / 2).max(WINDOW_SAMPLES),
        };
        if !enough || now.saturating_duration_since(start) < MIN_WINDOW {
            return None;
        }
        self.end_window(now, start)
    }

    /// A message expired (nsqd timed it out while the application held it): the limit halves.
    pub(super) fn on_expired(&mut self, now: Instant) -> Option<Change> {
        if self.phase == Phase::Held || self.ceiling == 0 {
            return None;
        }
        let before = self.limit();
        if let Phase::Remeasure { restore } = self.phase {
            self.limit = restore;
        }
        self.knee = self.limit;
        self.limit = (self.limit * 0.5).max(f64::from(self.floor));
        self.phase = Phase::Steady;
        self.calm = 0;
        self.window.reset(now, self.baseline);
        self.changed(before, Duration::ZERO)
    }

    fn changed(&self, before: u32, latency: Duration) -> Option<Change> {
        let limit = self.limit();
        (limit != before).then_some(Change {
            limit,
            baseline: self.baseline,
            latency,
        })
    }

    fn end_window(&mut self, now: Instant, start: Instant) -> Option<Change> {
        let before = self.limit();
        let w = &self.window;
        let mean = w.mean();
        let elapsed = now.saturating_duration_since(start).as_secs_f64();
        // Answers per second.
        let rate = f64::from(w.answers) / elapsed.max(1e-9);
        let failed = f64::from(w.failures) > FAILURE_SHARE * f64::from(w.count);
        // Is the limit used? The application held at least half of it, or the answers come
        // about as fast as the limit allows (each share cycles through the application and
        // a round trip to nsqd).
        let cycle = mean.as_secs_f64() + self.rtt.as_secs_f64();
        let used = w.peak_held as f64 >= 0.5 * self.limit || rate * cycle >= 0.7 * self.limit;
        let floor = f64::from(self.floor);
        let ceiling = f64::from(self.ceiling.max(1));
        match self.phase {
            Phase::Held => {}
            Phase::Startup => {
                let base = self.baseline.map_or(mean, |b| b.min(mean));
                self.baseline = Some(base);
                if failed {
                    self.knee = self.limit;
                    self.limit = (self.limit * FAILURE_CUT).max(floor);
                    self.enter_steady(now);
                } else if mean.as_secs_f64() > base.as_secs_f64() * (1.0 + STARTUP_EXIT) {
                    // The doubling overshot: straight to the estimate, however far, and no
                    // higher than before the doubling.
                    let queued = rate * (mean.as_secs_f64() - base.as_secs_f64());
                    let headroom = rate * base.as_secs_f64() * TOLERANCE;
                    let before = (self.limit * 0.5).max(floor);
                    self.limit = (self.limit - queued + headroom).clamp(floor, before);
                    self.knee = self.limit;
                    self.enter_steady(now);
                } else if used {
                    if self.limit >= ceiling {
                        self.enter_steady(now);
                    } else {
                        self.limit = (self.limit * 2.0).min(ceiling);
                    }
                }
            }
            Phase::Remeasure { restore } => {
                // Measured at a limit where nothing queues: the uncongested latency, whether
                // higher or lower than before.
                self.baseline = Some(mean);
                self.limit = restore;
                self.phase = Phase::Steady;
                self.schedule_remeasure(now);
            }
            Phase::Steady => {
                // A clearly faster service shows soon: two windows in a row clearly faster
                // lower the baseline halfway to the slower of them. One window's mean is
                // noisy (on tokio a timer's rounding moves it by more than the tolerance),
                // and a baseline pulled low by noise cuts the limit window after window. A
                // slower service is re-measured.
                let clearly_faster = self
                    .baseline
                    .is_some_and(|b| mean.as_secs_f64() < b.as_secs_f64() * (1.0 - TOLERANCE));
                let previous = std::mem::replace(&mut self.faster, clearly_faster.then_some(mean));
                let base = self.baseline.map_or(mean, |b| match previous {
                    Some(p) if clearly_faster => b.saturating_add(p.max(mean)) / 2,
                    _ => b,
                });
                self.baseline = Some(base);
                let target = base.as_secs_f64() * (1.0 + TOLERANCE);
                if failed {
                    self.knee = self.limit;
                    self.limit = (self.limit * FAILURE_CUT).max(floor);
                    self.calm = 0;
                } else if mean.as_secs_f64() > target {
                    let (cut, estimate) = self.cut(rate, mean, base);
                    let cut = cut.max(floor);
                    // Between the limit that queued and the estimate (which a service that
                    // slows down under load makes low): where probing slows down again.
                    self.knee = f64::midpoint(self.limit, estimate).max(floor);
                    // Lowering the limit by 60% did not lower the latency: the service itself
                    // is slower now, and the baseline is stale. Checked at each 60% step of
                    // the fall (the first congested window may have held a real queue on top
                    // of a slower service).
                    let (from, at) = *self.falling_from.get_or_insert((self.limit, mean));
                    let fell = self.limit <= from * 0.4;
                    if fell && mean.as_secs_f64() >= at.as_secs_f64() * 0.9 {
                        self.baseline = Some(mean);
                        self.falling_from = None;
                    } else {
                        if fell {
                            self.falling_from = Some((self.limit, mean));
                        }
                        if self.limit < SMALL {
                            // A probe of one more message at a small limit failed: the next
                            // waits twice as long.
                            self.probe_hold_next =
                                (self.probe_hold_next * 2).clamp(1, MAX_PROBE_HOLD);
                            self.probe_hold = self.probe_hold_next;
                        }
                        self.limit = cut;
                    }
                    self.calm = 0;
                } else {
                    if self
                        .falling_from
                        .is_some_and(|(from, _)| self.limit >= from)
                    {
                        self.falling_from = None;
                    }
                    if used {
                        self.grow(ceiling);
                    }
                    if self.remeasure_at.is_some_and(|at| now >= at) {
                        if self.limit >= REMEASURE_ABOVE {
                            // Less by a share of what the application holds (Little's law),
                            // not of the limit: the part of the limit on the wire to nsqd
                            // does not queue at the downstream.
                            let restore = self.limit;
                            let held = (rate * mean.as_secs_f64()).min(self.limit);
                            self.limit =
                                (self.limit - (1.0 - REMEASURE_DIP) * held).min(self.limit - 1.0);
                            self.phase = Phase::Remeasure { restore };
                        } else {
                            // Nothing can queue unseen at so small a limit: the mean of
                            // any window shows the baseline going up (see `falling_from`).
                            self.schedule_remeasure(now);
                        }
                    }
                }
            }
        }
        self.limit = self.limit.clamp(floor.min(ceiling), ceiling);
        self.window.reset(now, self.baseline);
        self.changed(before, mean)
    }

    /// The limit after a congested window: less what queues, with [`TOLERANCE`] of headroom,
    /// at most halved; and the estimate itself (the knee), however far.
    fn cut(&self, rate: f64, mean: Duration, base: Duration) -> (f64, f64) {
        let queued = rate * (mean.as_secs_f64() - base.as_secs_f64()).max(0.0);
        let headroom = rate * base.as_secs_f64() * TOLERANCE;
        let estimate = (self.limit - queued + headroom).min(self.limit);
        (estimate.max(self.limit * 0.5), estimate)
    }

    /// Growth in an uncongested window that used the limit: quickly back up to the last
    /// congestion; near it, probing by 3% of the limit a window (at least half a message);
    /// once past it without congestion by a message or 10% (the capacity grew), by 6% and
    /// then 12% a window: at a 1 s service time a window lasts 1.5-2.5 s, and the limit must
    /// grow by half within 10 s after the capacity doubles. (Steps of 24% overshot the new
    /// knee by more than 25%.)
    fn grow(&mut self, ceiling: f64) {
        let l = self.limit;
        let next = if self.knee <= 0.0 || l < self.knee * 0.9 {
            let to = if self.knee > 0.0 {
                (l * 1.25).min(self.knee)
            } else {
                l * 1.25
            };
            to.max(l + 0.05)
        } else {
            if l >= (self.knee * 1.1).min(self.knee + 1.0) {
                self.calm = (self.calm + 1).min(2);
                self.probe_hold_next = 0;
            }
            let step = 0.03 * f64::from(1u32 << self.calm);
            let next = l + (l * step).max(0.5);
            // At a small limit, one more message is a big step: as often as the failed
            // probes allow.
            if l < SMALL && next.floor() > l.floor() && self.probe_hold > 0 {
                self.probe_hold -= 1;
                return;
            }
            next
        };
        self.limit = next.min(ceiling);
    }

    fn enter_steady(&mut self, now: Instant) {
        self.phase = Phase::Steady;
        self.calm = 0;
        self.schedule_remeasure(now);
        // Start-up's baseline is the lowest of a few small windows' means, low by their
        // noise when the service is fast (on tokio 5.8-5.9 ms where a 5 ms sleep takes
        // 6.1-6.4 ms, and the limit drifted down window after window): it is re-measured
        // after a second, in a full window.
        if self.baseline.is_some_and(|b| b <= FIRST_REMEASURE / 10) {
            self.remeasure_at = now.checked_add(FIRST_REMEASURE);
        }
    }

    fn schedule_remeasure(&mut self, now: Instant) {
        let base = self.baseline.unwrap_or(Duration::ZERO);
        let every = REMEASURE_EVERY.max(base.saturating_mul(REMEASURE_LATENCIES));
        // Up to 25% more (xorshift64 from the consumer's seed).
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let jitter = every.mul_f64((self.seed % 1024) as f64 / 4096.0);
        self.remeasure_at = now.checked_add(every.saturating_add(jitter));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The origin of virtual time.
    fn t0() -> Instant {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        Instant::now()
    }

    /// A downstream of `capacity` at `service`, nothing in transit, for `rounds` rounds: in
    /// each, the limit's messages are handed out together and answered a service time later
    /// (more, in proportion, beyond the capacity).
    fn drive(a: &mut Adaptive, t: &mut Instant, capacity: f64, service: Duration, rounds: usize) {
        for _ in 0..rounds {
            let l = a.limit();
            assert!(l >= a.floor.min(a.ceiling) && l <= a.ceiling, "{l}");
            let latency = service.mul_f64((f64::from(l) / capacity).max(1.0));
            let handed = *t;
            *t += latency;
            for _ in 0..l {
                let _ = a.on_answer(*t, handed, u64::from(l), true);
            }
        }
    }

    #[test]
    fn converges_to_the_knee_and_follows_it() {
        let mut t = t0();
        let mut a = Adaptive::new(1, 10_000, 7);
        drive(&mut a, &mut t, 100.0, Duration::from_millis(5), 400);
        let l = a.limit();
        assert!((90..=125).contains(&l), "{l}");
        assert_eq!(a.baseline().map(|b| b.as_millis()), Some(5));
        // The capacity halves.
        drive(&mut a, &mut t, 50.0, Duration::from_millis(5), 100);
        let l = a.limit();
        assert!((40..=63).contains(&l), "{l}");
        // And doubles.
        drive(&mut a, &mut t, 200.0, Duration::from_millis(5), 600);
        let l = a.limit();
        assert!((150..=250).contains(&l), "{l}");
    }

    #[test]
    fn stays_within_floor_and_ceiling() {
        let mut t = t0();
        let mut a = Adaptive::new(3, 20, 7);
        assert_eq!(a.limit(), 3);
        drive(&mut a, &mut t, 1_000.0, Duration::from_millis(1), 500);
        assert_eq!(a.limit(), 20);
        drive(&mut a, &mut t, 2.0, Duration::from_millis(1), 500);
        assert!(a.limit() <= 4, "{}", a.limit());
        a.set_ceiling(t, 2);
        assert_eq!(a.limit(), 2);
        a.set_ceiling(t, 0);
        assert_eq!(a.limit(), 0);
    }

    #[test]
    fn expiry_halves_and_backoff_holds() {
        let mut t = t0();
        let mut a = Adaptive::new(1, 1_000, 7);
        drive(&mut a, &mut t, 64.0, Duration::from_millis(2), 500);
        let l = a.limit();
        let c = a.on_expired(t).map(|c| c.limit);
        assert_eq!(c, Some(l / 2));
        a.hold();
        let before = a.limit();
        drive(&mut a, &mut t, 1_000.0, Duration::from_millis(2), 100);
        assert_eq!(a.limit(), before, "no change while backing off");
        a.resume(t);
        drive(&mut a, &mut t, 64.0, Duration::from_millis(2), 500);
        let l = a.limit();
        assert!((58..=85).contains(&l), "{l}");
    }

    /// The service is slower at a higher concurrency without a queue (6.1 ms from 5 ms, as a
    /// timer wheel's rounding makes it on tokio), and the first congested window also held
    /// a real queue: lowering the limit finds the latency flat below the queue, and the
    /// baseline is taken afresh instead of cutting to the floor.
    #[test]
    fn a_stale_baseline_is_replaced_when_cutting_stops_helping() {
        let mut t = t0();
        let mut a = Adaptive::new(1, 400, 7);
        a.phase = Phase::Steady;
        a.baseline = Some(Duration::from_millis(5));
        a.limit = 64.0;
        a.window.reset(t, a.baseline);
        for _ in 0..400 {
            let l = a.limit();
            let latency = Duration::from_micros(6_100).mul_f64((f64::from(l) / 50.0).max(1.0));
            let handed = t;
            t += latency;
            for _ in 0..l {
                let _ = a.on_answer(t, handed, u64::from(l), true);
            }
        }
        let l = a.limit();
        assert!((40..=63).contains(&l), "{l}");
        let b = a.baseline().unwrap_or_default();
        assert!(b >= Duration::from_millis(6), "{b:?}");
    }
}
