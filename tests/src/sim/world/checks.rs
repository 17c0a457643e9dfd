//! The invariants (see [`crate::sim`]), checked after every step and once a virtual second,
//! and what a run reports.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::net::Who;
use super::{CHANNEL, Ev, Load, TOPIC, World};
use crate::sim::faults::Fault;

/// A graceful stop completes within the consumer's close_timeout and this much more (a few
/// round trips).
const CLOSE_SLACK: Duration = Duration::from_secs(5);

/// The first invariant a run broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The run's seed.
    pub seed: u64,
    /// The step (event) it happened at.
    pub step: u64,
    /// Virtual time since the run began.
    pub at: Duration,
    /// What was violated, with the figures.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {} at {:.3}s: {}",
            self.seed,
            self.step,
            self.at.as_secs_f64(),
            self.what
        )
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// nsqd in the world.
    pub nsqd: usize,
    /// Messages the nsqd accepted (from other producers and from the producer under test).
    pub published: u64,
    /// Messages handed to the application (redeliveries included).
    pub delivered: u64,
    /// Distinct messages finished by the application.
    pub finished: u64,
    /// Messages given up (the hook ran).
    pub gave_up: u64,
    /// Publishes of the producer under test confirmed.
    pub producer_ok: u64,
    /// Publishes of the producer under test failed.
    pub producer_failed: u64,
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// The longest an nsqd with messages waited while the consumer had room.
    pub worst_starvation: Duration,
    /// The starvation bound the run checked ([`SimConfig::effective_starvation_bound`] of
    /// its links).
    ///
    /// [`SimConfig::effective_starvation_bound`]: crate::sim::SimConfig::effective_starvation_bound
    pub starvation_bound: Duration,
    /// Real time spent inside the client under test.
    pub core_time: Duration,
    /// Events processed.
    pub steps: u64,
    /// Virtual time the run took.
    pub virtual_time: Duration,
    /// A hash of everything that happened, in order: the same seed gives the same hash.
    pub trace_hash: u64,
    /// The faults of the run.
    pub faults: Vec<Fault>,
    /// Consumers started (1 plus one per graceful stop).
    pub consumers: u32,
    /// RDY commands the consumers sent (two per low-RDY turn: the grant and the release).
    pub rdy_commands: u64,
    /// Of [`Report::rdy_commands`] and [`Report::delivered`], those during the fault phase
    /// (in a busy world, while every nsqd has messages; the drain after it is the sparse
    /// world's probing of mostly empty nsqd).
    pub fault_phase_rdy_commands: u64,
    /// See [`Report::fault_phase_rdy_commands`].
    pub fault_phase_delivered: u64,
    /// The batch application's report, in a batch world ([`SimConfig::batch`]).
    ///
    /// [`SimConfig::batch`]: crate::sim::SimConfig::batch
    pub batches: Option<crate::sim::BatchReport>,
}

/// The consumer's in-flight limit as it reports it (adaptive, or `max_in_flight`), for the
/// checks that no message is handed out at or above it and that it stays between its floor
/// and max_in_flight.
pub(super) struct LimitWatch {
    /// The limit when last looked at.
    pub(super) limit: u32,
    /// After the limit went down: the limit before, until then (the consumer's grace).
    grace: Option<(u32, Instant)>,
    /// The adaptive limit's floor (0: static).
    floor: u32,
    /// The limit over time: `(since the start, limit)` at each change.
    pub(super) trace: Vec<(Duration, u32)>,
}

impl LimitWatch {
    pub(super) fn new(floor: u32) -> Self {
        LimitWatch {
            limit: 0,
            grace: None,
            floor,
            trace: Vec::new(),
        }
    }
}

/// FNV-1a's offset basis: the trace hash before anything happened.
pub(super) fn fnv_init() -> u64 {
    0xcbf2_9ce4_8422_2325
}

fn fnv(h: &mut u64, data: &[u8]) {
    for b in data {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

impl World<'_> {
    /// Adds an event to the trace hash ([`Report::trace_hash`]), where the run reports it
    /// (see [`super::CoreClock`]).
    pub(super) fn trace(&mut self, tag: u8, a: u64, b: &[u8]) {
        if !self.core.on {
            return;
        }
        let t = self.at().as_nanos() as u64;
        fnv(&mut self.hash, &t.to_le_bytes());
        fnv(&mut self.hash, &[tag]);
        fnv(&mut self.hash, &a.to_le_bytes());
        fnv(&mut self.hash, b);
    }

    pub(super) fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(super::Violation {
                seed: self.cfg.seed,
                step: self.step,
                at: self.at(),
                what,
            });
        }
    }

    /// `dt` at the speed the low-RDY rotation can go (with more nsqd than max_in_flight):
    /// in proportion to its seats, the shares of max_in_flight not held by messages outside
    /// turns (the application still handling a message of a connection whose turn is over:
    /// a slow handler). With one seat of four, a round takes four times as long, whatever
    /// the consumer does; the starvation bound is judged in rotation time. Messages of the
    /// connections holding turns are the rotation's own work and slow nothing down.
    pub(super) fn at_rotation_speed(&self, dt: Duration) -> Duration {
        let m = self.max_in_flight;
        let Some(c) = &self.consumer else {
            return dt;
        };
        if self.nodes.len() as u64 <= u64::from(m) || c.held.is_empty() {
            return dt;
        }
        let epoch = c.epoch;
        let outside = c
            .held
            .keys()
            .filter(|(conn, _)| {
                self.conns
                    .get(&(Who::Consumer(epoch), *conn))
                    .is_none_or(|k| k.rdy == 0)
            })
            .count();
        let seats = u64::from(m).saturating_sub(outside as u64);
        let nanos = dt.as_nanos() * u128::from(seats) / u128::from(m.max(1));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The consumer has room for more messages: starvation counts now.
    pub(super) fn has_room(&self) -> bool {
        let Some(c) = &self.consumer else {
            return false;
        };
        // Judged under the configured max_in_flight only (not while a fault changed it), and
        // the adaptive limit in force below it.
        let limit = c
            .machine
            .in_flight_limit()
            .map_or(self.max_in_flight, |l| l.min(self.max_in_flight));
        !c.closing
            && self.mif_faults == 0
            && limit > 0
            && (c.held.len() as u64) < u64::from(limit)
            && c.machine.backoff_level() == 0
            && self.lookupd_up.contains(&0)
    }

    /// A message is about to be handed out while the application holds `held`: within the
    /// limit in force, or for the consumer's grace after the limit went down, the limit
    /// before (messages nsqd wrote under the higher RDY)? `false` after a violation.
    pub(super) fn check_hand_out(&mut self, held: u64) -> bool {
        let Some(c) = &self.consumer else {
            return true;
        };
        let Some(limit) = c.machine.in_flight_limit() else {
            return true;
        };
        let w = &self.limit;
        let grace = w.grace.filter(|g| self.now < g.1).map_or(0, |g| g.0);
        let bound = u64::from(limit.max(w.limit).max(grace));
        if held < bound {
            return true;
        }
        self.violate(format!(
            "at {:?}: a message was handed out while the application held {held} (limit {limit})",
            self.at()
        ));
        false
    }

    /// Follows the consumer's in-flight limit: its trace, its grace after it went down, and
    /// its bounds (between its floor and the max_in_flight in force).
    pub(super) fn check_limit(&mut self) {
        let Some(limit) = self
            .consumer
            .as_ref()
            .and_then(|c| c.machine.in_flight_limit())
        else {
            return;
        };
        let grace_for = self
            .consumer
            .as_ref()
            .map_or(Duration::ZERO, |c| c.machine.limit_grace());
        let (now, at, ceiling) = (self.now, self.at(), self.max_in_flight);
        let w = &mut self.limit;
        if limit == w.limit && !w.trace.is_empty() {
            return;
        }
        if limit < w.limit {
            let high = w.grace.filter(|g| now < g.1).map_or(0, |g| g.0);
            w.grace = Some((w.limit.max(high), now + grace_for));
        }
        w.limit = limit;
        w.trace.push((at, limit));
        let floor = w.floor.max(1).min(ceiling);
        if ceiling > 0 && (limit > ceiling || limit < floor) {
            self.violate(format!(
                "at {at:?}: the limit {limit} left {floor}..={ceiling}"
            ));
        }
    }

    pub(super) fn check_flow(&mut self) {
        let Some(c) = &self.consumer else { return };
        if c.closing || c.closed {
            return;
        }
        let sum = c.rdy_sum;
        if sum > u64::from(self.max_in_flight) {
            self.violate(format!(
                "the RDY counts sent add up to {sum}, above max_in_flight {}",
                self.max_in_flight
            ));
        } else if c.machine.backoff_level() > 0 && sum > 1 {
            let level = c.machine.backoff_level();
            self.violate(format!(
                "backing off (level {level}) with RDY counts adding up to {sum}"
            ));
        }
    }

    pub(super) fn closed_check(&mut self, epoch: u32, leftovers: usize, held: usize) {
        self.trace(b'C', u64::from(epoch), &(leftovers as u64).to_le_bytes());
        self.trace(b'H', u64::from(epoch), &(held as u64).to_le_bytes());
        let close_timeout = self
            .consumer
            .as_ref()
            .map_or(Duration::ZERO, |c| c.machine.close_timeout());
        if let Some(since) = self.closing_since.take() {
            let took = self.now.saturating_duration_since(since);
            let bound = close_timeout + CLOSE_SLACK;
            if took > bound {
                self.violate(format!(
                    "consumer {epoch} took {:.1}s to close (bound {}s)",
                    took.as_secs_f64(),
                    bound.as_secs()
                ));
            }
        }
    }

    /// The first nsqd still holding messages, and how its connections look from both sides.
    pub(super) fn stuck(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.model.depth(TOPIC, CHANNEL) == 0 {
                continue;
            }
            let ch = &n.model.queues.topics[TOPIC].channels[CHANNEL];
            let _ = write!(
                out,
                "nsqd{i}: queued {} deferred {} in flight {}; ",
                ch.queue.len(),
                ch.deferred.len(),
                ch.in_flight.len()
            );
            for (sid, f) in &n.model.queues.flows {
                let key = n.by_server.get(sid);
                let rdy_sent = key.and_then(|k| self.conns.get(k)).map(|c| c.rdy);
                let _ = write!(
                    out,
                    "client {sid} {key:?} {:?} rdy {} in flight {} (rdy sent {rdy_sent:?}); ",
                    f.state, f.rdy, f.in_flight
                );
            }
            if out.len() > 600 {
                break;
            }
        }
        out
    }

    /// Node `i`'s consumer connections, from nsqd's side and the consumer's.
    pub(super) fn node_view(&self, i: usize) -> String {
        let n = &self.nodes[i];
        let mut out = String::new();
        for (sid, f) in &n.model.queues.flows {
            let Some(key) = n.by_server.get(sid) else {
                continue;
            };
            let core = match (key.0, &self.consumer) {
                (Who::Consumer(e), Some(c)) if c.epoch == e => c.machine.describe(key.1),
                _ => "an older consumer".into(),
            };
            let _ = write!(
                out,
                "nsqd sees {:?} rdy {} in flight {}; consumer sees conn {} {core}. ",
                f.state, f.rdy, f.in_flight, key.1
            );
        }
        out
    }

    /// Once a virtual second: starvation, footprint, and the end of a run that follows every
    /// message.
    pub(super) fn tick(&mut self) {
        for i in 0..self.nodes.len() {
            self.collect_published(i);
        }
        let worst = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                n.waiting_since
                    .map(|s| (self.eligible.saturating_sub(s), i))
            })
            .max();
        if let Some((wait, i)) = worst {
            if wait > self.bound {
                let view = self.node_view(i);
                self.violate(format!(
                    "nsqd{i} with messages and a subscribed connection waited {:.1}s for a \
                     delivery while the consumer had room (bound {}s): {view}",
                    wait.as_secs_f64(),
                    self.bound.as_secs()
                ));
            }
            self.note_wait(wait);
        }
        if let Some(c) = &self.consumer {
            let fp = c.machine.footprint();
            tracing::debug!(
                at = self.at().as_secs_f64(),
                ?fp,
                held = c.held.len(),
                rdy_sum = c.rdy_sum,
                backoff = c.machine.backoff_level(),
                depth = self.total_depth(),
                "tick"
            );
            let bound = self.max_in_flight_ever as usize;
            if fp.in_flight > bound
                || fp.connections > self.nodes.len()
                || fp.known_nsqd > self.nodes.len()
            {
                self.violate(format!(
                    "consumer state out of bounds: {fp:?} with {} nsqd and max_in_flight up to {bound}",
                    self.nodes.len()
                ));
            }
        }
        if self.load == Load::Published
            && self.now >= self.end_of_faults
            && !self.final_close
            && self.publishes_left == 0
            && self.producer_left == 0
            && self.producer_bodies.is_empty()
            && self.total_depth() == 0
        {
            self.drained = true;
            self.final_close = true;
            self.end_checks();
            self.closing_since = Some(self.now);
            if let Some(c) = self.consumer.as_mut() {
                c.closing = true;
            }
            self.consumer_call(|c, now| c.close(now));
        }
        let at = self.now + Duration::from_secs(1);
        self.push(at, Ev::Tick);
    }

    pub(super) fn note_wait(&mut self, wait: Duration) {
        if wait > self.report.worst_starvation {
            self.report.worst_starvation = wait;
        }
        if wait > self.bound {
            self.violate(format!(
                "an nsqd with messages and a subscribed connection waited {:.1}s for a delivery \
                 while the consumer had room (bound {}s)",
                wait.as_secs_f64(),
                self.bound.as_secs()
            ));
        }
    }

    /// At least once: every accepted message was handed out and the nsqd are empty.
    fn end_checks(&mut self) {
        let mut missing = self
            .accepted
            .keys()
            .filter(|k| !self.handed.contains(k))
            .map(|(i, id)| format!("nsqd{i}:{}", String::from_utf8_lossy(id)))
            .collect::<Vec<_>>();
        if !missing.is_empty() {
            missing.sort();
            missing.truncate(5);
            self.violate(format!("accepted messages never handed out: {missing:?}"));
        }
    }

    /// The faulty world's report: a run that did not drain, or whose last graceful stop did
    /// not complete, broke an invariant.
    pub(super) fn finish_report(mut self) -> super::Report {
        if self.violation.is_none() && !self.drained {
            self.violate("the run ended before every message was delivered".into());
        }
        if self.violation.is_none() {
            let c = self.consumer.as_ref();
            if !c.is_some_and(|c| c.closed) {
                self.violate("the final graceful stop did not complete".into());
            }
        }
        self.report.violation = self.violation.take();
        self.report.finished = self.finished.len() as u64;
        self.report.steps = self.step;
        self.report.virtual_time = self.at();
        self.report.trace_hash = self.hash;
        self.report.core_time = self.core.total;
        self.report.batches = self.batch_report();
        self.report
    }
}
