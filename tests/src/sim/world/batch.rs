//! The batch application (issue 46; its settings and report are
//! [`crate::sim::batches`]): the messages the consumer hands out are gathered into batches
//! with the client layer's rules (nsq-client's `run_batch`), handled for a service time and
//! answered as a whole; and the checks that batches keep the client's duties.
//!
//! As `run_batch` does it: up to `workers` batches are handled at once; a free worker
//! gathers the next one (one at a time), taking the messages at hand (handed out while every
//! worker was busy) and then the ones that arrive, until the batch holds `max_messages`, the
//! next message would take it past `max_bytes` (that message starts the next batch), `linger`
//! has passed since its first message, or, once the consumer has said everything it had to
//! say (the end of a drain: the driver's round), the consumer is full (`is_full`: no message
//! can arrive before the application answers one) or stopping (the partial batch). A batch
//! is handled for `service + per_message x size` (±5%), starting when the client is not
//! stalled (noise), and answered at once: every message FIN, or, for a failing batch, REQ
//! with backoff on its first message and without on the rest. Batching starts, and turns the
//! consumer's auto-touch on (`set_auto_touch`), with the first message each consumer hands
//! out (messages already in flight then are armed too).
//!
//! The checks, besides the world's: no message times out on nsqd (nsqd's msg_timeout is short
//! in the batch world; batches linger and are handled longer); whenever the application holds
//! max_in_flight, the consumer says it is full (else a batch would wait for messages that
//! cannot come); a failed batch raises the backoff level by one at most; a stopped consumer
//! closes with nothing held (its partial batch answered).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::app::{App, AppEv, jittered};
use super::net::Who;
use super::{CHANNEL, Ev, Queue, TOPIC, World, timed};
use crate::sim::batches::{BatchConfig, BatchEnd, BatchReport};
use crate::sim::client::{Answer, Delivery};
use crate::sim::noise::ClientNoise;
use crate::sim::rng::Rng;

/// A message handed out: by which consumer, from which nsqd (if known), when.
#[derive(Clone, Copy, Debug)]
struct Item {
    epoch: u32,
    d: Delivery,
    node: Option<usize>,
    at: Instant,
}

/// The batch being gathered.
#[derive(Debug, Default)]
struct Filling {
    /// Its number (its linger event carries it).
    id: u64,
    items: Vec<Item>,
    bytes: u64,
    first_at: Option<Instant>,
}

/// The batch application's state.
pub(super) struct Batches {
    cfg: BatchConfig,
    r: Rng,
    pub(super) noise: ClientNoise,
    /// Handed out while no worker was free to gather them, in order.
    pending: VecDeque<Item>,
    filling: Filling,
    /// Batches being handled, by number: their messages, and whether they fail.
    handling: HashMap<u64, (Vec<Item>, bool)>,
    next_id: u64,
    /// The consumer whose batching has started (auto-touch on).
    batching: Option<u32>,
    /// Each nsqd's timeouts as last seen.
    timed_out: Vec<u64>,
    report: BatchReport,
}

impl App {
    /// The batch application of `cfg`, drawing from `seed`, for a run of `nsqd` nsqd starting
    /// at `t0`.
    pub(super) fn batches(cfg: &BatchConfig, seed: u64, t0: Instant, nsqd: usize) -> App {
        App::Batches(Box::new(Batches {
            cfg: BatchConfig {
                max_messages: cfg.max_messages.max(1),
                workers: cfg.workers.max(1),
                ..cfg.clone()
            },
            r: Rng::new(seed, 15),
            noise: ClientNoise::new(&cfg.noise, seed, t0),
            pending: VecDeque::new(),
            filling: Filling::default(),
            handling: HashMap::new(),
            next_id: 0,
            batching: None,
            timed_out: vec![0; nsqd],
            report: BatchReport::default(),
        }))
    }
}

impl Batches {
    /// Takes the messages at hand into the batch being gathered: `Some(end)` once it is to
    /// be handed over (full, bytes, or the next message is another consumer's: this one's
    /// consumer has stopped), `None` once nothing is left at hand. Its first message arms
    /// its linger on `queue`.
    fn take(&mut self, now: Instant, queue: &mut Queue) -> Option<BatchEnd> {
        loop {
            let f = &mut self.filling;
            if f.items.len() >= self.cfg.max_messages {
                return Some(BatchEnd::Full);
            }
            let next = *self.pending.front()?;
            let len = u64::from(next.d.len);
            if let Some(first) = f.items.first() {
                if first.epoch != next.epoch {
                    return Some(BatchEnd::Stop);
                }
                if f.bytes.saturating_add(len) > self.cfg.max_bytes {
                    return Some(BatchEnd::Bytes);
                }
            } else {
                f.id = self.next_id;
                self.next_id += 1;
                f.first_at = Some(now);
                queue.push(now + self.cfg.linger, Ev::App(AppEv::Linger(f.id)));
            }
            self.pending.pop_front();
            f.bytes = f.bytes.saturating_add(len);
            f.items.push(next);
            if f.bytes >= self.cfg.max_bytes {
                return Some(BatchEnd::Bytes);
            }
        }
    }
}

impl World<'_> {
    fn batches(&mut self) -> Option<&mut Batches> {
        match &mut self.app {
            App::Batches(b) => Some(b),
            _ => None,
        }
    }

    /// Consumer `epoch` handed `d` out: batching starts with its first message (auto-touch
    /// on), and it waits for a worker to gather it.
    pub(super) fn batch_message(&mut self, epoch: u32, d: Delivery) {
        let (now, node) = (self.now, self.conn_node(Who::Consumer(epoch), d.conn));
        let Some(b) = self.batches() else { return };
        b.pending.push_back(Item {
            epoch,
            d,
            node,
            at: now,
        });
        if b.batching != Some(epoch) {
            b.batching = Some(epoch);
            let after = b.cfg.auto_touch_after;
            if after.is_zero() {
                self.start_batching(epoch);
            } else {
                self.push(now + after, Ev::App(AppEv::StartBatching(epoch)));
            }
        }
        self.gather(false);
    }

    /// Consumer `epoch`'s batching starts: its auto-touch on, for the messages in flight too.
    pub(super) fn start_batching(&mut self, epoch: u32) {
        let now = self.now;
        let Some(b) = self.batches() else { return };
        b.report.auto_touch_on += 1;
        let limit = b.cfg.auto_touch_limit;
        if let Some(c) = self.consumer.as_mut().filter(|c| c.epoch == epoch) {
            let m = c.machine.as_mut();
            timed(&mut self.core, || m.set_auto_touch(now, Some(limit)));
        }
    }

    /// The gatherer's turn, while a worker is free: the messages at hand into the batch,
    /// handed over when one of the rules says so. Once the consumer has said all it had to
    /// (`settled`: the end of a drain), also when it is full, or stopping.
    pub(super) fn gather(&mut self, settled: bool) {
        loop {
            let now = self.now;
            let App::Batches(b) = &mut self.app else {
                return;
            };
            if b.handling.len() >= b.cfg.workers {
                return;
            }
            if let Some(end) = b.take(now, &mut self.queue) {
                self.hand_over(end);
                continue;
            }
            let Some(epoch) = b.filling.items.first().map(|i| i.epoch) else {
                return;
            };
            if !settled {
                return;
            }
            let end = match self.consumer.as_ref() {
                Some(c) if c.epoch == epoch && !c.closing && !c.closed => {
                    let m = c.machine.as_ref();
                    if !timed(&mut self.core, || m.is_full(now)) {
                        return;
                    }
                    let early = (c.held.len() as u64) < u64::from(self.max_in_flight)
                        && m.backoff_level() == 0;
                    b.report.bound_early += u64::from(early);
                    BatchEnd::Bound
                }
                _ => BatchEnd::Stop,
            };
            self.hand_over(end);
        }
    }

    /// The batch being gathered is handed to a worker for `end`.
    fn hand_over(&mut self, end: BatchEnd) {
        let (now, in_phase) = (self.now, self.now < self.end_of_faults);
        let Some(b) = self.batches() else { return };
        let f = std::mem::take(&mut b.filling);
        let n = f.items.len();
        if n == 0 {
            return;
        }
        let r = &mut b.report;
        r.batches += 1;
        r.messages += n as u64;
        r.ended[end.index()] += 1;
        if in_phase {
            r.ended_in_phase[end.index()] += 1;
        }
        r.sizes.push(u32::try_from(n).unwrap_or(u32::MAX));
        let mut nodes: Vec<usize> = f.items.iter().filter_map(|i| i.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        r.mixed += u64::from(nodes.len() > 1);
        r.most_nsqd = r.most_nsqd.max(nodes.len());
        if let Some(t) = f.first_at {
            r.longest_linger = r.longest_linger.max(now - t);
        }
        let fail = b.r.chance(b.cfg.fail);
        let per = b
            .cfg
            .per_message
            .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        let service = jittered(&mut b.r, b.cfg.service.saturating_add(per));
        let start = b.noise.awake(now);
        let done = b.noise.answer_at(start + service);
        b.handling.insert(f.id, (f.items, fail));
        self.push(done, Ev::App(AppEv::BatchDone(f.id)));
        self.trace(b'B', f.id, &[end.index() as u8, u8::from(fail)]);
    }

    /// Batch `id`'s linger is over: handed over if it is still being gathered.
    pub(super) fn linger(&mut self, id: u64) {
        let Some(b) = self.batches() else { return };
        if b.filling.id == id && !b.filling.items.is_empty() {
            self.hand_over(BatchEnd::Linger);
            self.gather(true);
        }
    }

    /// Batch `id` is handled: every message answered at once (FIN; a failing batch REQ,
    /// with backoff on its first message only), then its worker is free.
    pub(super) fn batch_done(&mut self, id: u64) {
        let (now, in_phase) = (self.now, self.now < self.end_of_faults);
        let Some(b) = self.batches() else { return };
        let Some((items, fail)) = b.handling.remove(&id) else {
            return;
        };
        let Some(epoch) = items.first().map(|i| i.epoch) else {
            return;
        };
        for i in &items {
            b.report.longest_hold = b.report.longest_hold.max(now - i.at);
        }
        let level = |w: &Self| {
            w.consumer
                .as_ref()
                .filter(|c| c.epoch == epoch)
                .map(|c| c.machine.backoff_level())
        };
        let before = level(self);
        // One plan after the batch's last answer, as the client layer's driver makes.
        if let Some(c) = self.consumer.as_mut().filter(|c| c.epoch == epoch) {
            c.machine.hold_replans();
        }
        let mut finished = 0;
        for (k, i) in items.iter().enumerate() {
            let how = if fail {
                Answer::Requeue { backoff: k == 0 }
            } else {
                Answer::Finish
            };
            let answered = self.answer_held(i.epoch, &i.d, how);
            finished += u64::from(!fail && matches!(answered, Some((_, Ok(())))));
        }
        if let Some(c) = self.consumer.as_mut().filter(|c| c.epoch == epoch) {
            let machine = c.machine.as_mut();
            timed(&mut self.core, || machine.release_replans(now));
        }
        let after = level(self);
        let Some(b) = self.batches() else { return };
        if in_phase {
            b.report.finished_in_phase += finished;
        }
        if fail {
            b.report.failed += 1;
            if let (Some(before), Some(after)) = (before, after) {
                let rise = after.saturating_sub(before);
                b.report.worst_backoff_rise = b.report.worst_backoff_rise.max(rise);
                if rise > 1 {
                    self.violate(format!(
                        "a failed batch of {} messages raised the backoff level from {before} \
                         to {after}: a batch counts once",
                        items.len()
                    ));
                }
            }
        }
        self.drain_epoch(epoch);
        self.gather(true);
    }

    /// After each drain of the current consumer: the application's peak, the check that a
    /// consumer whose application holds max_in_flight says it is full, and the gatherer's
    /// turn (is_full, or a stop, may end the batch).
    pub(super) fn after_drain_batches(&mut self) {
        let now = self.now;
        let Some(c) = self.consumer.as_ref() else {
            return;
        };
        let App::Batches(b) = &mut self.app else {
            return;
        };
        let held = c.held.len() as u64;
        b.report.held_peak = b.report.held_peak.max(held);
        let strict = !c.closing && !c.closed && self.cfg.adaptive.is_none();
        if strict && held >= u64::from(self.max_in_flight) {
            let m = c.machine.as_ref();
            if !timed(&mut self.core, || m.is_full(now)) {
                self.violate(format!(
                    "the application holds {held} messages, max_in_flight is {}, yet the \
                     consumer says one can still arrive (is_full false): a batch would wait \
                     for its linger",
                    self.max_in_flight
                ));
                return;
            }
        }
        self.gather(true);
    }

    /// In the batch world, the timeouts of nsqd `i`'s connected clients so far (0 in other
    /// worlds).
    pub(super) fn live_timeouts(&self, i: usize) -> u64 {
        if !matches!(self.app, App::Batches(_)) {
            return 0;
        }
        self.nodes[i]
            .model
            .queues
            .flows
            .values()
            .map(|f| f.timed_out)
            .sum()
    }

    /// After nsqd `i`'s timers ran, `live` of its messages having timed out on connections
    /// still up: in the batch world there must be none (the consumer auto-touches every
    /// message the application holds). Those of lost connections are nsqd's own rule (it
    /// keeps a lost client's messages in flight until they time out): counted apart.
    pub(super) fn check_timeouts(&mut self, i: usize, live: u64) {
        let n = self.nodes[i]
            .model
            .queues
            .topics
            .get(TOPIC)
            .and_then(|t| t.channels.get(CHANNEL))
            .map_or(0, |ch| ch.timed_out);
        let Some(b) = self.batches() else { return };
        let Some(seen) = b.timed_out.get_mut(i) else {
            return;
        };
        let new = n.saturating_sub(*seen);
        *seen = n;
        b.report.timeouts += live;
        b.report.timeouts_lost += new.saturating_sub(live);
        if live == 0 {
            return;
        }
        let oldest = self
            .consumer
            .as_ref()
            .and_then(|c| c.held.values().min().copied())
            .map_or(Duration::ZERO, |t| self.now - t);
        let view = self.node_view(i);
        self.violate(format!(
            "nsqd{i} timed out {live} message(s) of a connection still up (msg_timeout \
             {:?}); the application's oldest held message was handed out {:.2}s ago; {view}",
            self.cfg.msg_timeout,
            oldest.as_secs_f64()
        ));
    }

    /// A consumer of the batch world closed while the application held `held` messages:
    /// every batch, the partial one too, must have been answered first.
    pub(super) fn closed_batches(&mut self, epoch: u32, held: usize) {
        if held > 0 && self.batches().is_some() {
            self.violate(format!(
                "consumer {epoch} closed while the application held {held} messages of its \
                 batches"
            ));
        }
    }

    /// The batch application's report.
    pub(super) fn batch_report(&mut self) -> Option<BatchReport> {
        let phase = self.cfg.fault_phase;
        let b = self.batches()?;
        let mut r = std::mem::take(&mut b.report);
        r.phase = phase;
        Some(r)
    }
}
