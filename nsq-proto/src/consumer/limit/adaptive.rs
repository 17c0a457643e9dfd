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
//!   at least [`MIN_WINDOW`]); its mean, without the messages the client's own pauses held
//!   (below), is the window's latency. The mean, not a percentile:
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
//! * **Noise.** On a loaded machine (or in a debug build) a window's mean moves by 10-30%
//!   from one window to the next at an unchanged limit, and a tolerance of 5% reads that as
//!   congestion: the limit ratchets down. A queue moves the mean at most as much as the
//!   limit moved; the rest of the move is noise, averaged over windows (where a window spans
//!   several latencies). Where it is above half the tolerance, the tolerance (and the margin
//!   by which a window is clearly faster than the baseline) is twice that spread. In a quiet
//!   world it stays near zero and the tolerance is [`TOLERANCE`].
//! * **The client's own delays.** A smaller limit removes only the queue it made. A client
//!   that does not run for a while (its process descheduled on a busy machine, a
//!   stop-the-world pause) delays every message it holds meanwhile, at any limit. Such a
//!   pause shows as a gap between two answers longer than [`PAUSE_ABOVE`] baselines and two
//!   round trips to nsqd (a busy downstream answers at least once a service time; an idle
//!   one waits at most a round trip for its next message) and longer than
//!   [`PAUSE_ABOVE`] times the window's latency without it (so that a limit answered in
//!   waves, a wave a latency, is not a pause). The messages handed out before the pause's
//!   end and answered after it are left out of the window's mean (a window left with fewer
//!   than [`PAUSED_MIN`] other samples changes nothing). A delay that does not show as gaps
//!   (a client slower throughout: a debug build, a loaded machine) is found by the fall:
//!   when lowering the limit by 60% did not lower the latency, that latency is the new
//!   baseline, and where it is short beside a window ([`RESTORE_BELOW`]) the limit goes
//!   back to where the fall began.
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
//!   latency (above).
//! * **Failures and timeouts.** A message that expired (nsqd's msg_timeout) halves the limit;
//!   a window in which more than [`FAILURE_SHARE`] of the answers were failures shrinks it by
//!   [`FAILURE_CUT`]. Backoff is left alone: while the consumer backs off the controller is
//!   paused (its windows are dropped), so the two never act on the same failures twice.
//!
//! Everything is deterministic: the only randomness (the re-measure jitter) comes from the
//! consumer's seed.

use std::time::{Duration, Instant};

use crate::rng::Rng;

/// The tolerated queueing: the limit settles where the mean latency is this much above the
/// baseline.
const TOLERANCE: f64 = 0.05;

/// Where the windows' means move more than a queue explains (see `Adaptive::tolerance`), the
/// tolerance is this many times that spread (never less than [`TOLERANCE`]).
const NOISE_ABOVE: f64 = 2.0;

/// How much of the spread each window replaces.
const NOISE_WEIGHT: f64 = 1.0 / 8.0;

/// One window counts at most this share of the previous window's mean toward the spread (a
/// step of the capacity is not noise).
const NOISE_CAP: f64 = 0.25;

/// A gap between two answers is the client's pause when it is longer than this many
/// baselines (and two round trips to nsqd) and this many times the window's latency without
/// the messages it held.
const PAUSE_ABOVE: f64 = 1.5;

/// A window needs this many samples untouched by the client's pauses to count.
const PAUSED_MIN: u32 = 4;

/// A fall that did not lower the latency gives the limit back (see `Adaptive::end_window`)
/// where the latency is at most this share of [`MIN_WINDOW`].
const RESTORE_BELOW: f64 = 0.25;

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
    /// A gap between answers longer than this (seconds) may be the client's pause.
    pause_above: f64,
    /// The longest such gap in the window, and the end of the last one: messages handed
    /// out before it were held through it.
    pause: f64,
    paused_until: Option<Instant>,
    /// After a pause, what the client held starts at once and queues at the downstream for
    /// about a service time: messages handed out then wait for the pause too.
    pause_tail: Duration,
    /// The samples not held through a pause: their count and (capped) sum.
    clean: u32,
    clean_sum: f64,
    /// The sums uncapped, of all samples and of those not held through a pause (a gap is
    /// weighed against these).
    raw_sum: f64,
    raw_clean_sum: f64,
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
            pause_above: f64::INFINITY,
            pause: 0.0,
            paused_until: None,
            pause_tail: Duration::ZERO,
            clean: 0,
            clean_sum: 0.0,
            raw_sum: 0.0,
            raw_clean_sum: 0.0,
        }
    }

    /// A new window from `start`, its samples capped at [`SAMPLE_CAP`] baselines, a gap
    /// longer than `pause_above` a possible pause.
    fn reset(&mut self, start: Instant, baseline: Option<Duration>, pause_above: Option<Duration>) {
        *self = Window {
            start: Some(start),
            cap: baseline.map_or(f64::INFINITY, |b| b.as_secs_f64() * SAMPLE_CAP),
            pause_above: pause_above.map_or(f64::INFINITY, |p| p.as_secs_f64()),
            pause_tail: baseline.unwrap_or_default(),
            ..Window::new()
        };
    }

    /// A gap of `gap` between two answers ended at `now`.
    fn gap(&mut self, now: Instant, gap: Duration) {
        let gap = gap.as_secs_f64();
        if gap > self.pause_above {
            self.pause = self.pause.max(gap);
            self.paused_until = now.checked_add(self.pause_tail).or(Some(now));
        }
    }

    fn add(&mut self, handed: Instant, latency: Duration) {
        let raw = latency.as_secs_f64();
        let sample = raw.min(self.cap);
        self.sum += sample;
        self.raw_sum += raw;
        self.count += 1;
        if self.paused_until.is_none_or(|p| handed >= p) {
            self.clean_sum += sample;
            self.raw_clean_sum += raw;
            self.clean += 1;
        }
    }

    /// The window's latency: the mean of its samples, or, where the client paused (see the
    /// module docs), of those it did not hold through a pause (`None`: too few of them).
    fn latency(&self) -> Option<Duration> {
        let mean = |sum: f64, n: u32| {
            Duration::try_from_secs_f64(sum / f64::from(n.max(1))).unwrap_or(Duration::MAX)
        };
        let all = mean(self.sum, self.count);
        if self.pause <= 0.0 {
            return Some(all);
        }
        // A gap no longer than the latency (without the gap's messages) is how this limit
        // answers, in waves.
        let longer = |sum: f64, n: u32| self.pause > PAUSE_ABOVE * sum / f64::from(n.max(1));
        if self.clean >= PAUSED_MIN {
            return Some(if longer(self.raw_clean_sum, self.clean) {
                mean(self.clean_sum, self.clean)
            } else {
                all
            });
        }
        (!longer(self.raw_sum, self.count)).then_some(all)
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
    /// The previous steady window's limit and mean, and how much more than the change of
    /// the limit explains the means move from one window to the next (a share of the
    /// previous mean, averaged over [`NOISE_WEIGHT`]).
    last_window: Option<(f64, Duration)>,
    noise: f64,
    /// The last answer.
    last_answer: Option<Instant>,
    remeasure_at: Option<Instant>,
    /// A round trip to nsqd, as the handshakes showed it.
    rtt: Duration,
    /// Handshakes averaged into `rtt` (at most 16).
    rtt_samples: u32,
    /// The re-measure jitter's generator (forked from the consumer's).
    rng: Rng,
    /// Windows to wait before the next probe of one more message at a small limit, and
    /// the wait after the next failed one.
    probe_hold: u32,
    probe_hold_next: u32,
}

/// Why the limit changed ([`Adaptive`]'s answer to an input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::consumer) struct Change {
    /// The new effective limit.
    pub(in crate::consumer) limit: u32,
    /// The uncongested latency it was measured against.
    pub(in crate::consumer) baseline: Option<Duration>,
    /// The latency of the window that moved it.
    pub(in crate::consumer) latency: Duration,
}

impl Adaptive {
    /// A controller between `floor` and `ceiling`, starting at the floor.
    pub(super) fn new(floor: u32, ceiling: u32, rng: Rng) -> Adaptive {
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
            last_window: None,
            noise: 0.0,
            last_answer: None,
            remeasure_at: None,
            rtt: Duration::ZERO,
            rtt_samples: 0,
            rng,
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
        self.new_window(now);
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
            self.last_window = None;
        }
    }

    /// Backoff is over: measuring starts afresh with the next messages.
    pub(super) fn resume(&mut self, now: Instant) {
        if self.phase == Phase::Held {
            self.phase = self.held_from;
            self.last_answer = None;
            self.new_window(now);
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
        if let Some(last) = self.last_answer.replace(now) {
            w.gap(now, now.saturating_duration_since(last));
        }
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
        w.add(handed, now.saturating_duration_since(handed));
        // A window sees the whole limit cycle once (the first answers of a window are the
        // messages that queued least).
        let cycle = self.limit as u32;
        let needed = match self.phase {
            // Start-up: the half the last doubling added is the test.
            Phase::Startup => (cycle / 2).max(2),
            _ => (cycle / 2).max(WINDOW_SAMPLES),
        };
        if w.count < needed || now.saturating_duration_since(start) < MIN_WINDOW {
            return None;
        }
        // A pause held most of the window: it waits for samples the pause did not hold (up
        // to four times as many in all).
        if w.pause > 0.0 && w.clean < PAUSED_MIN && w.count < needed.saturating_mul(4) {
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
        self.new_window(now);
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
        let Some(mean) = w.latency() else {
            // Mostly the client's own pause: nothing to judge the limit by.
            self.new_window(now);
            return None;
        };
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
                let tolerance = self.tolerance(mean);
                // A clearly faster service shows soon: two windows in a row clearly faster
                // lower the baseline halfway to the slower of them. One window's mean is
                // noisy (a runtime's timer rounding alone can move it by more than the
                // tolerance), and a baseline pulled low by noise cuts the limit window after window. A
                // slower service is re-measured.
                let clearly_faster = self
                    .baseline
                    .is_some_and(|b| mean.as_secs_f64() < b.as_secs_f64() * (1.0 - tolerance));
                let previous = std::mem::replace(&mut self.faster, clearly_faster.then_some(mean));
                let base = self.baseline.map_or(mean, |b| match previous {
                    Some(p) if clearly_faster => b.saturating_add(p.max(mean)) / 2,
                    _ => b,
                });
                self.baseline = Some(base);
                let target = base.as_secs_f64() * (1.0 + tolerance);
                if failed {
                    self.knee = self.limit;
                    self.limit = (self.limit * FAILURE_CUT).max(floor);
                    self.calm = 0;
                } else if mean.as_secs_f64() > target {
                    let (cut, estimate) = self.cut(rate, mean, base, tolerance);
                    let cut = cut.max(floor);
                    // Between the limit that queued and the estimate (which a service that
                    // slows down under load makes low): where probing slows down again.
                    self.knee = f64::midpoint(self.limit, estimate).max(floor);
                    // Lowering the limit by 60% did not lower the latency: the service itself
                    // is slower now, and the baseline is stale. Checked at each 60% step of
                    // the fall (the first congested window may have held a real queue on top
                    // of a slower service).
                    // It may be the client that is slower (a busy machine, a debug build):
                    // where a window spans several latencies, what the fall left queued has
                    // drained early in it, so the limit also goes back to where the fall
                    // began; with longer latencies the queue may still be draining, and the
                    // limit stays.
                    let (from, at) = *self.falling_from.get_or_insert((self.limit, mean));
                    let fell = self.limit <= from * 0.4;
                    if fell && mean.as_secs_f64() >= at.as_secs_f64() * 0.9 {
                        self.baseline = Some(mean);
                        if mean.as_secs_f64() <= RESTORE_BELOW * MIN_WINDOW.as_secs_f64() {
                            self.limit = from;
                            self.knee = from;
                        }
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
        self.new_window(now);
        self.changed(before, mean)
    }

    /// The limit after a congested window: less what queues, with `tolerance` of headroom,
    /// at most halved; and the estimate itself (the knee), however far.
    fn cut(&self, rate: f64, mean: Duration, base: Duration, tolerance: f64) -> (f64, f64) {
        let queued = rate * (mean.as_secs_f64() - base.as_secs_f64()).max(0.0);
        let headroom = rate * base.as_secs_f64() * tolerance;
        let estimate = (self.limit - queued + headroom).min(self.limit);
        (estimate.max(self.limit * 0.5), estimate)
    }

    /// The tolerated queueing after a steady window of `mean` at the current limit:
    /// [`TOLERANCE`], or where the windows' means move more than the limit's changes explain
    /// (a queue grows and shrinks with the limit; noise does not), [`NOISE_ABOVE`] times that
    /// spread. Measured only where a window spans several latencies (short beside
    /// [`MIN_WINDOW`]): with longer ones a window holds few samples, and the queue a wide
    /// tolerance would hide is long.
    fn tolerance(&mut self, mean: Duration) -> f64 {
        let m = mean.as_secs_f64();
        let short = m <= RESTORE_BELOW * MIN_WINDOW.as_secs_f64();
        let last = self.last_window.replace((self.limit, mean));
        if !short {
            self.noise = 0.0;
        } else if let Some((limit, prev)) = last {
            let p = prev.as_secs_f64().max(1e-9);
            // A queue moves the mean at most as much as the limit moved.
            let explained = (self.limit - limit).abs() / limit.max(1.0);
            let moved = ((m - p).abs() / p - explained).clamp(0.0, NOISE_CAP);
            self.noise += (moved - self.noise) * NOISE_WEIGHT;
        }
        TOLERANCE.max(NOISE_ABOVE * self.noise)
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

    /// A new window from `now` (its pauses: see [`Window::latency`]).
    fn new_window(&mut self, now: Instant) {
        let pause_above = self.baseline.map(|b| {
            b.mul_f64(PAUSE_ABOVE)
                .saturating_add(self.rtt.saturating_mul(2))
        });
        self.window.reset(now, self.baseline, pause_above);
    }

    fn enter_steady(&mut self, now: Instant) {
        self.phase = Phase::Steady;
        self.calm = 0;
        self.schedule_remeasure(now);
        // Start-up's baseline is the lowest of a few small windows' means, low by their
        // noise when the service is fast (a few small windows can read a fifth below what
        // the service takes, and the limit then drifts down window after window): it is
        // re-measured after a second, in a full window.
        if self.baseline.is_some_and(|b| b <= FIRST_REMEASURE / 10) {
            self.remeasure_at = now.checked_add(FIRST_REMEASURE);
        }
    }

    fn schedule_remeasure(&mut self, now: Instant) {
        let base = self.baseline.unwrap_or(Duration::ZERO);
        let every = REMEASURE_EVERY.max(base.saturating_mul(REMEASURE_LATENCIES));
        // Up to 25% more.
        let jitter = every.mul_f64(self.rng.unit_f64() / 4.0);
        self.remeasure_at = now.checked_add(every.saturating_add(jitter));
    }
}

#[cfg(test)]
mod tests;
