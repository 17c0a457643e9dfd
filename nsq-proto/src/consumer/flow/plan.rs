//! RDY planning: the plan over every ready connection (a share each, lowering before
//! raising), and the low-RDY rotation (turns of RDY 1 when `max_in_flight` is below the number
//! of connections: who holds a seat, for how long, and the probe of idle nsqd).

use super::{FlowControl, MIN_TURN};
use crate::connection::Connection;
use crate::consumer::policy::{self, RdySlot};
use crate::consumer::shared::Shared;
use crate::consumer::slots::Slot;
use crate::consumer::timers::Deadline;
use crate::deadline::later;
use crate::driver::ConnId;
use std::time::{Duration, Instant};

impl FlowControl {
    /// Whether the rotation runs and still applies: the last plan over every connection was
    /// the rotation, and there are still more ready connections than max_in_flight, with no
    /// backoff and no close. Then turns move one connection at a time.
    pub(super) fn rotating(&self, sh: &mut Shared) -> bool {
        self.low_mode && self.low_mode_applies(sh)
    }

    /// More ready connections than seats, with no backoff and no close. The seats are
    /// max_in_flight less the shares held where no RDY can use them: messages the
    /// application holds from lost connections or after nsqd timed them out, from closing
    /// connections, and beyond the first of each connection. With every connection at RDY 1
    /// and one share held so (a slow handler's), one connection would otherwise wait at RDY 0
    /// for as long as that handler runs; in turns, it waits a turn or so.
    pub(super) fn low_mode_applies(&self, sh: &mut Shared) -> bool {
        let m = u64::from(self.limit);
        if sh.closing || m == 0 || self.backoff_level > 0 || sh.timers.is_set(Deadline::Backoff) {
            return false;
        }
        let held = sh.ghost_shares + sh.slots.held_beyond_seats();
        sh.slots.ready_counts().0 > m.saturating_sub(held)
    }

    /// Recomputes every ready connection's RDY and applies it, lowering before raising.
    pub(in crate::consumer) fn replan(
        &mut self,
        now: Instant,
        redistribute: bool,
        sh: &mut Shared,
    ) {
        let ready = sh.slots.ids_where(Slot::is_ready);
        let n = ready.len();
        let m = self.limit;
        let mut targets = vec![0u32; n];
        // The plan gave a connection less RDY than the messages it holds: when they are
        // answered, the share they free goes to a new plan (see `after_answer`).
        let mut held_back = false;
        let low_mode = self.low_mode_applies(sh);
        if self.low_mode && !low_mode {
            // The rotation is over: nobody holds a turn any more.
            for id in sh.slots.ids_where(Slot::holds_turn) {
                if let Some(slot) = sh.slots.get_mut(id) {
                    slot.end_turn();
                }
            }
        }
        self.low_mode = low_mode;
        if sh.closing || m == 0 || n == 0 || sh.timers.is_set(Deadline::Backoff) {
            // all zero
        } else if self.backoff_level > 0 {
            let keep = self.probe.and_then(|p| ready.iter().position(|&r| r == p));
            let idx = match keep {
                Some(i) if redistribute && Self::probe_idle(now, ready[i], sh) && n > 1 => {
                    // Move the probe away from an idle connection.
                    Self::choose_probe(now, &ready, Some(i), sh)
                }
                Some(i) => i,
                None => Self::choose_probe(now, &ready, None, sh),
            };
            self.probe = Some(ready[idx]);
            targets[idx] = 1;
        } else if !low_mode {
            if redistribute {
                self.rr_offset = self.rr_offset.wrapping_add(1);
            }
            // What the application holds from connections not planned here keeps its shares.
            let elsewhere: u64 = sh.ghost_shares
                + sh.slots
                    .values()
                    .filter(|s| !s.is_ready())
                    .map(Slot::committed)
                    .sum::<u64>();
            let budget = u64::from(m).saturating_sub(elsewhere);
            let caps: Vec<RdySlot> = ready
                .iter()
                .map(|id| {
                    let slot = &sh.slots[id];
                    RdySlot {
                        max_rdy: slot.conn.as_ref().map_or(0, Connection::max_rdy),
                        held: u32::try_from(slot.unanswered()).unwrap_or(u32::MAX),
                    }
                })
                .collect();
            let budget = u32::try_from(budget).unwrap_or(m);
            targets = policy::plan_rdy(budget, &caps, self.rr_offset % n);
            // Shares held outside the plan (closing connections, lost and expired messages)
            // or beyond a connection's RDY free up later.
            held_back = elsewhere > 0 || caps.iter().zip(&targets).any(|(c, &t)| c.held > t);
            for (t, id) in targets.iter_mut().zip(&ready) {
                if sh.slots[id].fresh_until.is_some() {
                    *t = (*t).min(1);
                }
            }
        } else {
            self.plan_low(now, &ready, &mut targets, sh);
        }
        self.apply(now, &ready, &targets, low_mode, sh);
        self.owed |= held_back;
        let probe_tick = self.backoff_level > 0 && !sh.timers.is_set(Deadline::Backoff) && n > 1;
        if sh.closing {
            sh.timers.stop(Deadline::Redistribute);
        } else if low_mode {
            self.rotation_fallback(now, sh);
        } else if probe_tick {
            // The probe moves on once it has been idle for `low_rdy_idle_timeout`: with many
            // connections, most nsqd may have nothing to send.
            let at = match self
                .probe
                .and_then(|p| sh.slots.get(p))
                .and_then(Slot::idle_deadline)
            {
                Some(t) if t > now => t,
                // Busy, or not granted yet (its budget is still held): the usual interval.
                _ => later(now, sh.config.rdy_redistribute_interval),
            };
            sh.timers.set(Deadline::Redistribute, at);
        } else {
            sh.timers.stop(Deadline::Redistribute);
        }
    }

    /// The rotation's own deadlines are its holders' (in the connections' deadline index);
    /// while a raise is owed, a redistribution interval later it looks again anyway (the
    /// answers and settle times that free the budget re-plan first).
    pub(super) fn rotation_fallback(&self, now: Instant, sh: &mut Shared) {
        if !self.owed {
            sh.timers.stop(Deadline::Redistribute);
        } else if !sh.timers.is_set(Deadline::Redistribute) {
            sh.timers.set(
                Deadline::Redistribute,
                later(now, sh.config.rdy_redistribute_interval),
            );
        }
    }

    /// The backoff probe has had RDY 1 and nothing to show for `low_rdy_idle_timeout`.
    pub(super) fn probe_idle(now: Instant, id: ConnId, sh: &Shared) -> bool {
        sh.slots
            .get(id)
            .and_then(Slot::idle_deadline)
            .is_some_and(|t| t <= now)
    }

    /// The next backoff probe among `ready` (not `avoid`): a connection that received a
    /// message since it last held the probe, the most recent first (its nsqd has shown it
    /// has messages); otherwise the one that held the probe longest ago (never counts as
    /// longest), random among equals. A probe parked on an nsqd with nothing to send would
    /// keep the consumer in backoff indefinitely (one random pick per redistribution, as
    /// go-nsq does, takes about connections x 5 s to find one of the few busy nsqd).
    pub(super) fn choose_probe(
        now: Instant,
        ready: &[ConnId],
        avoid: Option<usize>,
        sh: &mut Shared,
    ) -> usize {
        let n = ready.len();
        let start = sh.rng.index(n);
        type Key = (bool, std::cmp::Reverse<Option<Instant>>, Option<Instant>);
        let mut best: Option<(usize, Key)> = None;
        for k in 0..n {
            let i = (start + k) % n;
            if Some(i) == avoid {
                continue;
            }
            let slot = &sh.slots[&ready[i]];
            let last_msg = slot.conn.as_ref().and_then(Connection::last_message_at);
            let fresh = match (last_msg, slot.probed_at) {
                (Some(m), Some(p)) => m > p,
                (Some(_), None) => true,
                (None, _) => false,
            };
            // Smaller is better: fresh first, then the latest message, then the oldest probe.
            let key: Key = (
                !fresh,
                std::cmp::Reverse(last_msg.filter(|_| fresh)),
                slot.probed_at,
            );
            if best.as_ref().is_none_or(|(_, b)| key < *b) {
                best = Some((i, key));
            }
        }
        let idx = best.map_or(0, |(i, _)| i);
        if let Some(slot) = sh.slots.get_mut(ready[idx]) {
            slot.probed_at = Some(now);
        }
        idx
    }

    /// The low-RDY rotation (max_in_flight < connections), one step: RDY 1 is held in turns
    /// of [`FlowControl::turn_shape`]'s length, shorter when the holder is idle for its
    /// `idle_wait` or has delivered its share of messages. `due` are holders with a deadline
    /// due (or whose turn ends at the message that just arrived). Idle holders and those
    /// whose share is delivered give RDY up; turns that are over end one at a time, a turn's
    /// length divided by the seats apart, the longest held first (a busy holder gives up at
    /// once, so its RDY 0 goes out before its answer; one that has just answered, at its next
    /// message, so that message and the next holder's cannot overlap). Then the free shares
    /// go to the next in line ([`FlowControl::fill`]). Only the connections named are looked
    /// at.
    pub(super) fn rotate(&mut self, now: Instant, due: &[ConnId], sh: &mut Shared) {
        sh.slots.sync();
        let shape = self.turn_shape(sh);
        let spacing = shape.spacing();
        let mut release = sh.take_ids();
        let mut over = sh.take_ids();
        let mut idle = sh.take_ids();
        for &id in due {
            let Some(slot) = sh.slots.get(id) else {
                continue;
            };
            let rdy = slot.rdy();
            if !slot.holds_turn() || rdy == 0 {
                continue;
            }
            if slot.yield_pending && slot.unanswered() >= u64::from(rdy) {
                // Its turn ended just after an answer; now its next message is here.
                release.push(id);
            } else if slot.idle_deadline().is_some_and(|t| t <= now) {
                release.push(id);
                idle.push(id);
            } else if slot.turn_until.is_some_and(|t| t <= now) {
                over.push(id);
            }
        }
        if !over.is_empty() {
            // The longest held first (ties in id order).
            over.sort_unstable_by_key(|id| (sh.slots.get(*id).and_then(|s| s.granted_at), *id));
            let next_end = self.last_turn_end.map(|last| later(last, spacing));
            let first = match next_end {
                Some(t) if t > now => None,
                _ => Some(over[0]),
            };
            if let Some(id) = first {
                self.last_turn_end = Some(now);
                let slot = &sh.slots[&id];
                let in_flight = slot.conn.as_ref().map_or(0, Connection::in_flight);
                if in_flight >= slot.rdy() as usize {
                    // Busy: its RDY 0 goes out before the answer, so nsqd sends it nothing
                    // more and the share passes on when the answer frees it.
                    release.push(id);
                } else if let Some(slot) = sh.slots.get_mut(id) {
                    // It answered and its next message may be on the wire: taking RDY now
                    // could let that message and the next holder's overlap. It gives up at
                    // its next message (or when idle).
                    slot.turn_until = None;
                    slot.yield_pending = true;
                }
            }
            // The others' turns end one spacing later each time, so they stay staggered.
            let at = later(next_end.filter(|t| *t > now).unwrap_or(now), spacing);
            for &id in &over {
                if Some(id) == first {
                    continue;
                }
                if let Some(slot) = sh.slots.get_mut(id) {
                    slot.turn_until = Some(at);
                }
            }
        }
        for &id in &idle {
            if let Some(slot) = sh.slots.get_mut(id) {
                // Idle with nothing delivered in its turn: its nsqd has nothing to send.
                slot.idle_last = slot.turn_msg_at.is_none();
            }
        }
        sh.give_ids(idle);
        if !release.is_empty() {
            // Nobody else in line: a new turn starts for the same holder, with no RDY 0 and 1
            // on the wire.
            let nobody_waits = sh.slots.ordered().next().is_none();
            for &id in &release {
                let Some(slot) = sh.slots.get_mut(id) else {
                    continue;
                };
                if nobody_waits {
                    self.tickets += 1;
                    slot.start_turn(now, self.tickets, later(now, shape.length), 0);
                } else {
                    slot.lower_rdy(now, id, 0);
                    // Its turn is over even if the RDY 0 could not be sent.
                    slot.end_turn();
                    sh.queue_transmit(id);
                }
            }
        }
        sh.give_ids(release);
        sh.give_ids(over);
        self.fill(now, sh);
    }

    /// How long a low-RDY turn lasts now, and over how many seats the rotation runs.
    ///
    /// The seats are max_in_flight less the shares held outside the turns (messages of
    /// connections whose turn is over, lost or expired ones), at least one. Every ready
    /// connection has a turn per round, and a round takes the seat time of all of them over
    /// the seats: a connection whose last turn found its nsqd empty ([`Slot::idle_last`])
    /// takes its idle wait and settle time, each of the `busy` others a whole turn. Turns are
    /// as long as lets a round take at most half of `low_rdy_max_wait`,
    /// `(low_rdy_max_wait / 2 x seats - idle seat time) / busy`, so every connection with
    /// messages is served within the bound, the other half being slack for what a turn change
    /// costs beyond the turn (the next holder's round trip, the last message's handler) and
    /// for idle nsqd that have messages again. With all of them busy that is
    /// `low_rdy_max_wait / 2 x seats / ready`. When probing the idle ones takes more than
    /// half of that round, the busy turns together still get as much seat time as the probes
    /// (`idle seat time / busy` each): the round cannot be shorter than the probes, and
    /// shrinking the busy turns further would starve their nsqd of throughput (one message
    /// per round) for little gain in latency. Never longer than `low_rdy_timeout`, never
    /// shorter than [`MIN_TURN`] (and a turn lasts until its first message, or until its
    /// holder counts as idle, whatever its length): with so many connections that turns
    /// would be shorter than the handlers and the round trips take, the handlers' speed sets
    /// the bound, not the configuration. O(1): the sums are kept as connections change.
    pub(super) fn turn_shape(&self, sh: &mut Shared) -> TurnShape {
        let m = u64::from(self.limit).max(1);
        let (ready, holders) = sh.slots.ready_counts();
        let reserved = sh.slots.budget_totals().1 + sh.ghost_shares;
        let seats = m
            .saturating_sub(reserved.saturating_sub(holders))
            .clamp(1, m);
        let (busy, idle_us) = sh.slots.rotation_load();
        let cap = sh.config.low_rdy_timeout;
        let length = if busy == 0 {
            cap
        } else {
            let round = (sh.config.low_rdy_max_wait / 2).as_nanos() * u128::from(seats);
            let idle = u128::from(idle_us) * 1_000;
            // Probing the idle ones may take most of the round, or more: the busy ones
            // still get as much seat time as the probes.
            let left = round.saturating_sub(idle).max(idle);
            let sized =
                Duration::from_nanos(u64::try_from(left / u128::from(busy)).unwrap_or(u64::MAX));
            sized.max(MIN_TURN).min(cap)
        };
        TurnShape {
            length,
            seats,
            crowded: ready > seats,
        }
    }

    /// A turn's share of messages: while others wait, as many as a busy turn delivers in
    /// the turn's length at the measured pace, at least one (so a turn costs at most two RDY
    /// commands per message). A holder served faster than the pace (a near nsqd, quick
    /// handlers) passes its turn on early, so the round comes sooner; one served slower keeps
    /// its turn for its length. 0 (no share, the turn ends by time) until the pace is known
    /// or when nobody waits.
    pub(super) fn quota(&self, shape: &TurnShape) -> u32 {
        match self.pace {
            Some(pace) if shape.crowded && !pace.is_zero() => {
                let n = shape.length.as_nanos() / pace.as_nanos();
                u32::try_from(n).unwrap_or(u32::MAX).max(1)
            }
            _ => 0,
        }
    }

    /// The rotation's free shares go to the connections waiting longest for a turn (granted
    /// longest ago, then released longest ago, then at random: the order of the waiting line,
    /// [`Slot::wait_key`], kept indexed), as many as max_in_flight has room for among the
    /// holders and the budget allows. Looks at the line's first few only.
    pub(super) fn fill(&mut self, now: Instant, sh: &mut Shared) {
        if !self.rotating(sh) {
            self.replan(now, false, sh);
            return;
        }
        sh.slots.sync();
        let m = u64::from(self.limit);
        let ghosts = sh.ghost_shares;
        let (committed, reserved) = sh.slots.budget_totals();
        let (committed, reserved) = (committed + ghosts, reserved + ghosts);
        let holders = sh.slots.ready_counts().1;
        let full = committed >= m;
        let mut budget = m.saturating_sub(reserved);
        let mut seats = m.saturating_sub(holders);
        let mut owed = false;
        let mut grants = sh.take_ids();
        for (_, id) in sh.slots.ordered() {
            if seats == 0 {
                break;
            }
            if full {
                // What is committed fills max_in_flight: no RDY may leave room for one more
                // delivery anywhere.
                owed = true;
                break;
            }
            if sh.slots[&id].committed() == 0 {
                // Its RDY 1 takes a share of the budget; one with messages committed has it.
                if budget == 0 {
                    owed = true;
                    break;
                }
                budget -= 1;
            }
            seats -= 1;
            grants.push(id);
        }
        self.over_budget = committed > m;
        self.owed = owed || self.over_budget;
        self.cut_by_full = full && owed;
        self.full_at_plan = full;
        let shape = self.turn_shape(sh);
        let quota = self.quota(&shape);
        for &id in &grants {
            let Some(slot) = sh.slots.get_mut(id) else {
                continue;
            };
            let Some(c) = slot.conn.as_mut() else {
                continue;
            };
            match c.set_rdy(now, 1) {
                Ok(()) => {
                    slot.received_since_rdy = 0;
                    self.tickets += 1;
                    slot.start_turn(now, self.tickets, later(now, shape.length), quota);
                }
                Err(e) => {
                    tracing::debug!(conn = %id, nsqd = %slot.addr, error = %e, "RDY not sent");
                }
            }
            sh.queue_transmit(id);
        }
        sh.give_ids(grants);
        self.rotation_fallback(now, sh);
    }

    /// The rotation planned over every connection (it starts, max_in_flight changed, or
    /// every RDY must be capped): holders keep their turn (at most max_in_flight of them, the
    /// longest held give up first), and the free seats go to the first in line.
    pub(super) fn plan_low(
        &mut self,
        now: Instant,
        ready: &[ConnId],
        targets: &mut [u32],
        sh: &mut Shared,
    ) {
        let m = self.limit as usize;
        let turn = self.turn_shape(sh).length;
        let mut holders: Vec<(Option<Instant>, usize)> = Vec::new();
        for (i, id) in ready.iter().enumerate() {
            let slot = &sh.slots[id];
            if slot.rdy() == 0 {
                continue;
            }
            targets[i] = 1;
            holders.push((slot.granted_at, i));
            if !slot.holds_turn() {
                // Granted before the rotation started: its turn counts from its grant.
                let until = later(slot.granted_at.unwrap_or(now), turn);
                if let Some(slot) = sh.slots.get_mut(*id) {
                    slot.turn_until = Some(until);
                }
            }
        }
        // Too many holders (max_in_flight was lowered): drop the longest-held.
        if holders.len() > m {
            holders.sort_unstable();
            for &(_, i) in &holders[..holders.len() - m] {
                targets[i] = 0;
            }
        }
        let mut free = m.saturating_sub(holders.len().min(m));
        if free == 0 {
            return;
        }
        sh.slots.sync();
        for (_, id) in sh.slots.ordered() {
            if free == 0 {
                break;
            }
            // `ready` is in id order, as the connections are.
            if let Ok(i) = ready.binary_search(&id) {
                if targets[i] == 0 {
                    targets[i] = 1;
                    free -= 1;
                }
            }
        }
    }

    /// Sends the planned RDY values, each cut to the budget: a connection's reservation is
    /// `max(RDY, unanswered messages)` (see [`Slot::unanswered`]) and the unanswered
    /// messages cannot be taken back, so RDY above a connection's unanswered messages is
    /// granted only out of `max_in_flight` minus every connection's unanswered messages and
    /// the RDY granted before it (holders first, then raises). Every lowering goes out before
    /// any raise. A target cut short is owed: the answer that frees budget plans again.
    pub(super) fn apply(
        &mut self,
        now: Instant,
        ready: &[ConnId],
        targets: &[u32],
        low: bool,
        sh: &mut Shared,
    ) {
        let (turn, quota) = if low {
            let shape = self.turn_shape(sh);
            (shape.length, self.quota(&shape))
        } else {
            (Duration::ZERO, 0)
        };
        let m = u64::from(self.limit);
        // A lowered RDY frees nothing yet: what nsqd may have sent under it stays committed
        // (`Slot::transit`), so the budget counts every connection's current RDY.
        let ghosts = sh.ghost_shares;
        let (committed, reserved) = sh.slots.budget_totals();
        let (committed, reserved) = (committed + ghosts, reserved + ghosts);
        let mut free = m.saturating_sub(reserved);
        // At or over the limit with what is committed alone, no RDY may leave room for one
        // more delivery anywhere.
        let full = committed >= m;
        let mut owed = false;
        let mut cut_by_full = false;
        // Raises share what budget is free: the connection raised longest ago goes first,
        // so the ones a scarce budget cut short are served next time (in id order, the last
        // connections to join waited indefinitely while handlers held most of the budget).
        // Keys taken once; only the raises are sorted (a handful per plan), after the rest.
        let mut raises: Vec<(Option<Instant>, usize)> = Vec::new();
        let mut order: Vec<usize> = Vec::with_capacity(ready.len());
        for (i, id) in ready.iter().enumerate() {
            let slot = &sh.slots[id];
            if targets[i] > slot.rdy() {
                raises.push((slot.granted_at, i));
            } else {
                order.push(i);
            }
        }
        raises.sort_unstable();
        order.extend(raises.into_iter().map(|(_, i)| i));
        let mut grants = vec![0u32; ready.len()];
        for i in order {
            let slot = &sh.slots[&ready[i]];
            let target = targets[i];
            let current = slot.rdy();
            let held = slot.committed();
            let mut grant = target;
            if target > current {
                let base = held.max(u64::from(current));
                let given = u64::from(target).saturating_sub(base).min(free);
                free -= given;
                grant = u32::try_from(base + given).map_or(target, |g| g.min(target));
            }
            if full {
                let capped = grant.min(u32::try_from(held).unwrap_or(u32::MAX));
                cut_by_full |= capped < grant;
                grant = capped;
            }
            owed |= grant < target;
            grants[i] = grant;
        }
        self.over_budget = committed > m;
        self.owed = owed || self.over_budget;
        self.cut_by_full = cut_by_full;
        self.full_at_plan = full;
        for pass in [true, false] {
            for (id, &grant) in ready.iter().zip(&grants) {
                // Looked at first, taken mutably (so re-indexed) only when it changes.
                let current = sh.slots.get(*id).map_or(grant, Slot::rdy);
                if grant == current || (grant < current) != pass {
                    continue;
                }
                let Some(slot) = sh.slots.get_mut(*id) else {
                    continue;
                };
                if grant < current {
                    slot.lower_rdy(now, *id, grant);
                    sh.queue_transmit(*id);
                    continue;
                }
                let Some(c) = slot.conn.as_mut() else {
                    continue;
                };
                match c.set_rdy(now, grant) {
                    Ok(()) => {
                        slot.received_since_rdy = 0;
                        if current == 0 {
                            if low {
                                self.tickets += 1;
                                slot.start_turn(now, self.tickets, later(now, turn), quota);
                            } else {
                                // Not a turn of the rotation (a share, the backoff probe):
                                // it does not count among its turns, or a connection often
                                // chosen as the probe would wait at the end of the line.
                                slot.granted_at = Some(now);
                                slot.end_turn();
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(conn = %id, nsqd = %slot.addr, error = %e, "RDY not sent");
                    }
                }
                sh.queue_transmit(*id);
            }
        }
    }
}

/// The low-RDY rotation's current shape (see [`FlowControl::turn_shape`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct TurnShape {
    /// How long a turn lasts.
    length: Duration,
    /// Over how many seats turns run (at least 1).
    seats: u64,
    /// More connections take turns than there are seats: some wait.
    crowded: bool,
}

impl TurnShape {
    /// How far apart turns that are over end, so they stay staggered: a turn's length over
    /// the seats.
    fn spacing(&self) -> Duration {
        self.length / u32::try_from(self.seats).unwrap_or(u32::MAX).max(1)
    }
}
