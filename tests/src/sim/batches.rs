//! Batches across many nsqd (issue 46): the settings of the batch application
//! ([`BatchConfig`], set as [`SimConfig::batch`](super::SimConfig::batch)) and what a run
//! of it reports ([`BatchReport`]). The application itself is the world's (`world/batch.rs`).
//!
//! The application gathers the messages the consumer hands out into batches with the client
//! layer's rules (nsq-client's `run_batch`): a batch is handed over when it holds
//! `max_messages`, when the next message would take it past `max_bytes`, `linger` after its
//! first message, at once when the consumer says no message can arrive before the
//! application answers one (`Consumer::is_full`), and, on stop, partial. Up to `workers`
//! batches are handled at once, each for `service + per_message x size` (±5%, and the
//! client's [`Noise`]), gathered one at a time by a free worker; a batch is then answered as
//! a whole: FIN, or, for a failing one, REQ with backoff on its first message and without on
//! the rest (one failure for backoff). Batching turns the consumer's auto-touch on
//! (`Consumer::set_auto_touch`) with the first message it hands out.

use std::time::Duration;

use super::noise::Noise;

/// Why a batch was handed over: nsq-client's `BatchEnd`, mirrored (the test broker does not
/// depend on the client it tests), in the order of [`BatchReport::ended`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchEnd {
    /// It holds `max_messages`.
    Full,
    /// The next message would take it past `max_bytes` (or it reached it).
    Bytes,
    /// No message could arrive before the application answers one (`is_full`).
    Bound,
    /// `linger` passed since its first message.
    Linger,
    /// The consumer is stopping: the partial batch.
    Stop,
}

impl BatchEnd {
    /// Every kind, in the order of [`BatchReport::ended`].
    pub const ALL: [BatchEnd; 5] = [
        BatchEnd::Full,
        BatchEnd::Bytes,
        BatchEnd::Bound,
        BatchEnd::Linger,
        BatchEnd::Stop,
    ];

    /// Its name in reports: `full`, `bytes`, `bound`, `linger`, `stop` (as the client
    /// layer's `BatchEnd::as_str`).
    pub fn name(self) -> &'static str {
        ["full", "bytes", "bound", "linger", "stop"][self.index()]
    }

    /// Its index in [`BatchReport::ended`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The batch application's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchConfig {
    /// The most messages in a batch (at least 1).
    pub max_messages: usize,
    /// The most bytes of bodies in a batch.
    pub max_bytes: u64,
    /// How long a batch waits for more after its first message.
    pub linger: Duration,
    /// Batches handled at once.
    pub workers: usize,
    /// A batch's fixed service time.
    pub service: Duration,
    /// A batch's service time per message.
    pub per_message: Duration,
    /// The fraction of batches that fail as a whole (requeued, one failure for backoff).
    pub fail: f64,
    /// How long auto-touch keeps a message alive at most (the client layer's
    /// `auto_touch_limit`, 15 minutes by default).
    pub auto_touch_limit: Duration,
    /// How long after a consumer's first hand-out its batching starts (auto-touch on, for the
    /// messages in flight then too); zero (the default): with the first message. A late start
    /// is an application that turns batching on while messages are already held.
    pub auto_touch_after: Duration,
    /// The client's noise (none by default): stalls delay the handling and the answers,
    /// jitter delays the answers.
    pub noise: Noise,
}

impl Default for BatchConfig {
    /// 500 messages, 16 MiB, a linger of 1 s, 2 workers, 50 ms + 20 us per message, 1% of
    /// batches failing, auto-touch for up to 15 minutes, no noise.
    fn default() -> Self {
        BatchConfig {
            max_messages: 500,
            max_bytes: 16 << 20,
            linger: Duration::from_secs(1),
            workers: 2,
            service: Duration::from_millis(50),
            per_message: Duration::from_micros(20),
            fail: 0.01,
            auto_touch_limit: Duration::from_secs(15 * 60),
            auto_touch_after: Duration::ZERO,
            noise: Noise::default(),
        }
    }
}

/// What the batch application saw in a run.
#[derive(Clone, Debug, Default)]
pub struct BatchReport {
    /// Batches handed over.
    pub batches: u64,
    /// Messages in them.
    pub messages: u64,
    /// Batches by why they were handed over, in the order of [`BatchEnd::ALL`].
    pub ended: [u64; 5],
    /// The same, of the batches handed over during the fault phase (in a busy world, while
    /// every nsqd has messages; the drain after it has few).
    pub ended_in_phase: [u64; 5],
    /// Every batch's size, in hand-over order.
    pub sizes: Vec<u32>,
    /// Batches with messages from two nsqd or more.
    pub mixed: u64,
    /// The most nsqd one batch had messages from.
    pub most_nsqd: usize,
    /// Batches that failed as a whole.
    pub failed: u64,
    /// The largest rise of the backoff level one failed batch caused.
    pub worst_backoff_rise: u32,
    /// Messages finished (FIN accepted by the consumer) during the fault phase.
    pub finished_in_phase: u64,
    /// The fault phase's length, for [`BatchReport::throughput`].
    pub phase: Duration,
    /// Messages the nsqd timed out on connections still up (0: every message the
    /// application held was touched in time).
    pub timeouts: u64,
    /// Messages the nsqd timed out after their connection was lost (nsqd keeps a lost
    /// client's messages in flight until they time out; a reset in the batch world's faults).
    pub timeouts_lost: u64,
    /// The most messages the application held at once.
    pub held_peak: u64,
    /// The longest a message was held, from its hand-out to its batch's answer.
    pub longest_hold: Duration,
    /// The longest a batch waited from its first message to its hand-over.
    pub longest_linger: Duration,
    /// Times batching started (auto-touch turned on): once per consumer that handed out a
    /// message.
    pub auto_touch_on: u32,
    /// Batches handed over at the bound (`is_full`) while the application held less than
    /// max_in_flight and the consumer was not backing off: every ready connection at its
    /// RDY, or none ready.
    pub bound_early: u64,
}

impl BatchReport {
    /// Batches handed over for `end`.
    pub fn ended_by(&self, end: BatchEnd) -> u64 {
        self.ended[end.index()]
    }

    /// The mean batch size.
    pub fn mean_size(&self) -> f64 {
        self.messages as f64 / self.batches.max(1) as f64
    }

    /// The size at quantile `q` (0..=1) of the batches (0 without batches).
    pub fn size_at(&self, q: f64) -> u32 {
        let mut s = self.sizes.clone();
        if s.is_empty() {
            return 0;
        }
        s.sort_unstable();
        let i = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1;
        s[i]
    }

    /// Messages finished per second of the fault phase.
    pub fn throughput(&self) -> f64 {
        self.finished_in_phase as f64 / self.phase.as_secs_f64().max(1e-9)
    }

    /// Adds `other`'s counts (a summary over seeds).
    pub fn add(&mut self, other: &BatchReport) {
        self.batches += other.batches;
        self.messages += other.messages;
        for (a, b) in self.ended.iter_mut().zip(other.ended) {
            *a += b;
        }
        for (a, b) in self.ended_in_phase.iter_mut().zip(other.ended_in_phase) {
            *a += b;
        }
        self.sizes.extend_from_slice(&other.sizes);
        self.mixed += other.mixed;
        self.most_nsqd = self.most_nsqd.max(other.most_nsqd);
        self.failed += other.failed;
        self.worst_backoff_rise = self.worst_backoff_rise.max(other.worst_backoff_rise);
        self.finished_in_phase += other.finished_in_phase;
        self.phase += other.phase;
        self.timeouts += other.timeouts;
        self.timeouts_lost += other.timeouts_lost;
        self.held_peak = self.held_peak.max(other.held_peak);
        self.longest_hold = self.longest_hold.max(other.longest_hold);
        self.longest_linger = self.longest_linger.max(other.longest_linger);
        self.auto_touch_on += other.auto_touch_on;
        self.bound_early += other.bound_early;
    }

    /// One line: throughput, sizes, why batches ended, mixing, failures, timeouts.
    pub fn line(&self) -> String {
        let ended: Vec<String> = BatchEnd::ALL
            .iter()
            .map(|e| {
                let (all, phase) = (self.ended[e.index()], self.ended_in_phase[e.index()]);
                format!("{}={all}({phase})", e.name())
            })
            .collect();
        format!(
            "batches={} messages={} throughput={:.0}/s size_mean={:.1} size_p50={} size_p99={} ended[{}] bound_early={} mixed={} most_nsqd={} failed={} worst_backoff_rise={} timeouts={} timeouts_lost_conn={} held_peak={} longest_hold_s={:.2} longest_linger_s={:.2}",
            self.batches,
            self.messages,
            self.throughput(),
            self.mean_size(),
            self.size_at(0.5),
            self.size_at(0.99),
            ended.join(" "),
            self.bound_early,
            self.mixed,
            self.most_nsqd,
            self.failed,
            self.worst_backoff_rise,
            self.timeouts,
            self.timeouts_lost,
            self.held_peak,
            self.longest_hold.as_secs_f64(),
            self.longest_linger.as_secs_f64(),
        )
    }
}
