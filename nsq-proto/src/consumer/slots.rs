//! The consumer's connections by id ([`Slots`], a vector sorted by [`ConnId`]) and what it
//! keeps per connection ([`Slot`]).
//!
//! Ids are handed out in increasing order, so a new connection is appended and iteration
//! order is id order, as with a `BTreeMap`; a look-up (several per message on the hot path)
//! is a binary search over a few contiguous entries instead of a walk down tree nodes.

use super::beyond::SentBack;
use super::policy;
use super::stats::Counts;
use crate::connection::{Connection, ConnectionState};
use crate::deadline::later;
use crate::driver::ConnId;
use std::collections::BTreeSet;
use std::ops::Index;
use std::time::{Duration, Instant};

/// What [`Slots`] keeps indexed about each of its values, recomputed only for the entries
/// changed since the last refresh.
pub(crate) trait Indexed {
    /// How entries are ordered in the second index ([`Slots::ordered`]).
    type Key: Ord + Copy;
    /// Its earliest deadline, if any.
    fn deadline(&self) -> Option<Instant>;
    /// Its weights, kept summed over every entry ([`Slots::totals`]).
    fn weight(&self) -> Weight;
    /// Its place in the second index (`None`: not in it).
    fn key(&self) -> Option<Self::Key>;
}

/// The weights of an entry (see [`Indexed::weight`]).
pub(crate) type Weight = [u64; WEIGHTS];

/// How many weights an entry has.
pub(crate) const WEIGHTS: usize = 10;

/// One entry of [`Slots`].
#[derive(Debug)]
struct Entry<T: Indexed> {
    id: ConnId,
    /// `None` once removed (a tombstone until the next compaction: removing from the middle
    /// of the vector would move every entry after it).
    value: Option<T>,
    /// Changed (looked up mutably) since its deadline and key were last indexed.
    dirty: bool,
    /// Changed since its weights were last counted.
    dirty_weight: bool,
    /// Its deadline as indexed in [`Slots::index`].
    indexed: Option<Instant>,
    /// Its key as indexed in [`Slots::order`].
    key: Option<T::Key>,
    /// Its weights as counted in [`Slots::totals`].
    weight: Weight,
}

/// The consumer's connections by id, with an index of their deadlines (the earliest is found
/// without looking at every connection, and so are the due ones), an index ordered by a key
/// of their own (the low-RDY rotation's waiting line), and running sums of their weights. An
/// entry looked up mutably is marked changed, and indexed again at the next
/// [`Slots::refresh`] (until then [`Slots::next_deadline`] looks at it directly), so no caller
/// has to remember to.
#[derive(Debug)]
pub(crate) struct Slots<T: Indexed> {
    entries: Vec<Entry<T>>,
    /// Entries with a value (the others are tombstones).
    live: usize,
    /// Entries changed since their deadline was indexed (ids of removed ones are skipped).
    dirty: Vec<ConnId>,
    /// Entries changed since their weights were counted (the budget check after each input
    /// needs only these: counting is cheap, re-indexing a deadline is not).
    dirty_weight: Vec<ConnId>,
    /// A spare buffer for draining the lists without allocating.
    scratch: Vec<ConnId>,
    index: BTreeSet<(Instant, ConnId)>,
    order: BTreeSet<(T::Key, ConnId)>,
    /// The sums of the entries' weights as of their last refresh.
    total: Weight,
}

impl<T: Indexed> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
            live: 0,
            dirty: Vec::new(),
            dirty_weight: Vec::new(),
            scratch: Vec::new(),
            index: BTreeSet::new(),
            order: BTreeSet::new(),
            total: [0; WEIGHTS],
        }
    }
}

impl<T: Indexed> Slots<T> {
    /// Marks `e` changed (its first mutable look-up since the last refresh: the cold path).
    #[cold]
    #[inline(never)]
    fn mark_slow(e: &mut Entry<T>, dirty: &mut Vec<ConnId>, dirty_weight: &mut Vec<ConnId>) {
        if !e.dirty {
            e.dirty = true;
            dirty.push(e.id);
        }
        if !e.dirty_weight {
            e.dirty_weight = true;
            dirty_weight.push(e.id);
        }
    }

    #[inline]
    fn position(&self, id: ConnId) -> Result<usize, usize> {
        match self.entries.last() {
            Some(last) if last.id == id => Ok(self.entries.len() - 1),
            Some(last) if last.id < id => Err(self.entries.len()),
            _ => self.entries.binary_search_by_key(&id, |e| e.id),
        }
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<&T> {
        self.position(id)
            .ok()
            .and_then(|i| self.entries[i].value.as_ref())
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: ConnId) -> Option<&mut T> {
        match self.position(id) {
            Ok(i) => {
                let e = &mut self.entries[i];
                e.value.as_ref()?;
                if !(e.dirty && e.dirty_weight) {
                    Self::mark_slow(e, &mut self.dirty, &mut self.dirty_weight);
                }
                e.value.as_mut()
            }
            Err(_) => None,
        }
    }

    pub(crate) fn contains_key(&self, id: ConnId) -> bool {
        self.get(id).is_some()
    }

    pub(crate) fn insert(&mut self, id: ConnId, value: T) -> Option<T> {
        match self.position(id) {
            Ok(i) => {
                let e = &mut self.entries[i];
                Self::mark_slow(e, &mut self.dirty, &mut self.dirty_weight);
                let old = e.value.replace(value);
                if old.is_none() {
                    self.live += 1;
                }
                old
            }
            Err(i) => {
                self.live += 1;
                self.entries.insert(
                    i,
                    Entry {
                        id,
                        value: Some(value),
                        dirty: true,
                        dirty_weight: true,
                        indexed: None,
                        key: None,
                        weight: [0; WEIGHTS],
                    },
                );
                self.dirty.push(id);
                self.dirty_weight.push(id);
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, id: ConnId) -> Option<T> {
        match self.position(id) {
            Ok(i) => {
                let e = &mut self.entries[i];
                let value = e.value.take()?;
                if let Some(t) = e.indexed.take() {
                    self.index.remove(&(t, id));
                }
                if let Some(k) = e.key.take() {
                    self.order.remove(&(k, id));
                }
                for (t, w) in self.total.iter_mut().zip(std::mem::take(&mut e.weight)) {
                    *t -= w;
                }
                self.live -= 1;
                // Compacted once tombstones outnumber the live entries: amortised O(1).
                let dead = self.entries.len() - self.live;
                if dead > 16 && dead > self.live {
                    self.entries.retain(|e| e.value.is_some());
                }
                Some(value)
            }
            Err(_) => None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&ConnId, &T)> {
        self.entries
            .iter()
            .filter_map(|e| e.value.as_ref().map(|v| (&e.id, v)))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &ConnId> {
        self.iter().map(|(id, _)| id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.iter().map(|(_, v)| v)
    }

    /// The ids of the entries for which `pred` holds, in id order.
    pub(crate) fn ids_where(&self, pred: impl Fn(&T) -> bool) -> Vec<ConnId> {
        self.iter()
            .filter(|(_, v)| pred(v))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Counts the weights of the entries changed since they were last counted.
    fn refresh_weights(&mut self) {
        let mut ids = std::mem::take(&mut self.scratch);
        std::mem::swap(&mut ids, &mut self.dirty_weight);
        for &id in &ids {
            let Ok(i) = self.position(id) else { continue };
            let e = &mut self.entries[i];
            e.dirty_weight = false;
            let Some(value) = &e.value else { continue };
            let w = value.weight();
            for ((t, old), new) in self.total.iter_mut().zip(e.weight).zip(w) {
                *t = *t - old + new;
            }
            e.weight = w;
        }
        ids.clear();
        self.scratch = ids;
    }

    /// Counts the weights, and indexes the deadlines and keys, of the entries changed since
    /// the last refresh.
    pub(crate) fn refresh(&mut self) {
        self.refresh_weights();
        let mut ids = std::mem::take(&mut self.scratch);
        std::mem::swap(&mut ids, &mut self.dirty);
        for &id in &ids {
            let Ok(i) = self.position(id) else { continue };
            let e = &mut self.entries[i];
            e.dirty = false;
            let Some(value) = &e.value else { continue };
            reindex(&mut self.index, id, &mut e.indexed, value.deadline());
            reindex(&mut self.order, id, &mut e.key, value.key());
        }
        ids.clear();
        self.scratch = ids;
    }

    /// The sums of every entry's weights (counted first).
    pub(crate) fn totals(&mut self) -> Weight {
        self.refresh_weights();
        self.total
    }

    /// The sums of every entry's weights as they are now, without counting them into the
    /// running sums (the entries changed since the last count are looked at: O(changed)).
    pub(crate) fn current_totals(&self) -> Weight {
        let mut total = self.total;
        for &id in &self.dirty_weight {
            let Ok(i) = self.position(id) else { continue };
            let e = &self.entries[i];
            if !e.dirty_weight {
                continue;
            }
            let now = e.value.as_ref().map_or([0; WEIGHTS], T::weight);
            for ((t, old), new) in total.iter_mut().zip(e.weight).zip(now) {
                *t = *t - old + new;
            }
        }
        total
    }

    /// The earliest deadline of any entry.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let indexed = self.index.first().map(|(t, _)| *t);
        let changed = self
            .dirty
            .iter()
            .filter_map(|id| self.get(*id))
            .filter_map(T::deadline);
        indexed.into_iter().chain(changed).min()
    }

    /// The entries whose deadline is `now` or earlier, in deadline order, added to `out`
    /// (indexed first).
    pub(crate) fn due(&mut self, now: Instant, out: &mut Vec<ConnId>) {
        self.refresh();
        out.extend(
            self.index
                .range(..=(now, ConnId::from_raw(u64::MAX)))
                .map(|(_, id)| *id),
        );
    }

    /// The entries with a key, in key order, as of the last [`Slots::refresh`] (call it
    /// first: an entry changed since may be out of place, or no longer have a key).
    pub(crate) fn ordered(&self) -> impl Iterator<Item = (T::Key, ConnId)> + '_ {
        self.order.iter().copied()
    }
}

impl Slots<Slot> {
    /// Re-indexes the connections changed since the last call.
    pub(crate) fn sync(&mut self) {
        self.refresh();
    }

    /// Over every connection, kept as running sums: the messages committed (unanswered, and
    /// possibly on the wire after a lowered RDY: [`Slot::committed`]) and the shares of
    /// max_in_flight reserved (`max(committed, RDY)`).
    pub(crate) fn budget_totals(&mut self) -> (u64, u64) {
        let [committed, reserved, ..] = self.totals();
        (committed, reserved)
    }

    /// How many connections are ready (subscribed, not closing), and how many of them have
    /// RDY above 0.
    pub(crate) fn ready_counts(&mut self) -> (u64, u64) {
        let [_, _, ready, holders, ..] = self.totals();
        (ready, holders)
    }

    /// Over every connection as they are now (O(connections changed since the last
    /// count)): ready connections, the sum of their RDY, messages delivered and not answered,
    /// and ready connections starved (in flight at least 85% of their RDY).
    pub(crate) fn live_counts(&self) -> LiveCounts {
        let t = self.current_totals();
        LiveCounts {
            ready: t[2],
            rdy: t[5],
            in_flight: t[6],
            starved: t[7],
        }
    }

    /// What a round of the low-RDY rotation costs, over the ready connections: how many of
    /// them deliver messages in their turns (all but those whose last turn ended idle), and
    /// the seat time the others take, in microseconds (each its idle wait and the settle time
    /// of its RDY 0). See [`Slot::idle_last`].
    pub(crate) fn rotation_load(&mut self) -> (u64, u64) {
        let t = self.totals();
        (t[8], t[9])
    }

    /// Shares of max_in_flight held beyond one per ready connection, over every connection:
    /// a ready connection's unanswered messages after the first, and everything a connection
    /// that is not ready (closing) still holds. Every ready connection can have a seat (RDY
    /// 1 or a message) only while these plus the ready connections fit in max_in_flight.
    pub(crate) fn held_beyond_seats(&mut self) -> u64 {
        self.totals()[4]
    }

    /// The connections with a deadline at or before `now`, added to `out`.
    pub(crate) fn due_at(&mut self, now: Instant, out: &mut Vec<ConnId>) {
        self.due(now, out);
    }
}

impl<T: Indexed> Index<&ConnId> for Slots<T> {
    type Output = T;

    /// Panics if `id` is absent (only for ids just read from the map itself).
    fn index(&self, id: &ConnId) -> &T {
        match self.get(*id) {
            Some(v) => v,
            None => panic!("no connection {id}"),
        }
    }
}

/// One connection of the consumer: its nsqd address, its [`Connection`] once the socket is
/// connected, the flow-control state kept per connection, and its message counters.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) addr: String,
    pub(super) conn: Option<Connection>,
    pub(super) ready_at: Option<Instant>,
    /// Just became ready: bootstrapped with RDY 1 until its first message or this instant.
    pub(super) fresh_until: Option<Instant>,
    /// When it last went from RDY 0 to RDY > 0.
    pub(super) granted_at: Option<Instant>,
    /// When it last went from RDY > 0 to RDY 0 (the low-RDY rotation serves the connection
    /// that has waited longest first).
    pub(super) released_at: Option<Instant>,
    /// When the application last answered a message on it (for the idle rule).
    pub(super) answered_at: Option<Instant>,
    /// Its ticket in the low-RDY rotation's line: the number of turns the rotation had
    /// granted when it was last granted one (or its turn renewed), so the line serves the
    /// connection granted longest ago first, and a turn sends its holder to the back of the
    /// line however long it held it. A new connection starts with the ticket of the first in
    /// line (the rotation's count with nobody in line), so it neither waits for nor
    /// overtakes a whole round. (Counting each connection's own turns instead let one that
    /// held a turn for long, or joined while nobody was in line, take many turns in a row.)
    pub(super) ticket: u64,
    /// When it last became the backoff probe.
    pub(super) probed_at: Option<Instant>,
    /// Its low-RDY turn is over but it had just answered: it gives RDY up at its next
    /// message.
    pub(super) yield_pending: bool,
    /// When its low-RDY turn ends (`Some` only while it holds a turn of the rotation, which
    /// then also ends when it is idle for `idle_wait`).
    pub(super) turn_until: Option<Instant>,
    /// Messages its low-RDY turn may still deliver before it ends early, its share of the
    /// turn delivered (0: no such limit, the turn ends by time only).
    pub(super) turn_quota: u32,
    /// When the last message of its current low-RDY turn arrived (the interval to the next
    /// one is a sample of how long a busy turn takes per message).
    pub(super) turn_msg_at: Option<Instant>,
    /// Its last low-RDY turn ended idle, without a message: its nsqd had nothing to send.
    /// The rotation counts its next turn as costing its idle wait, not a whole turn.
    pub(super) idle_last: bool,
    /// How long a holder of a low-RDY turn waits for a message with nothing in flight before
    /// it counts as idle (set when it becomes ready, from its round trip).
    pub(super) idle_wait: Duration,
    /// Its random tie-break among connections waiting for a low-RDY turn with as many turns
    /// and released at the same instant (mixed with its turns, so it changes every round).
    pub(super) salt: u64,
    /// When the driver connected its socket (the handshake's length estimates round trips).
    pub(super) connected_at: Option<Instant>,
    /// How long after a lower RDY nsqd may still deliver what it sent before reading it:
    /// the negotiated output_buffer_timeout plus the handshake's duration (two round trips
    /// or more).
    pub(super) settle: Duration,
    /// The handshake's length (IDENTIFY and SUB: two round trips), capped at the longest
    /// settle time: what a RDY 1 waits for its message, and the transit of a lowered RDY 1
    /// (nsqd flushes at once to a client with nothing more to receive).
    pub(super) handshake: Duration,
    /// Messages nsqd may have sent before it read a lower RDY and that have not arrived:
    /// they count against max_in_flight until they arrive or `settle` has passed.
    pub(super) transit: u64,
    pub(super) transit_until: Option<Instant>,
    /// When its RDY last went down (what nsqd wrote before it read that may arrive later).
    pub(super) lowered_at: Option<Instant>,
    /// Messages handed to the application on this connection and not answered (nor
    /// expired) yet.
    pub(super) handed: u64,
    /// Messages received since the last RDY was sent (for the refill rule).
    pub(super) received_since_rdy: u32,
    /// Messages it sent back unseen, beyond the in-flight bound (see [`super::beyond`]).
    pub(super) sent_back: SentBack,
    /// Message counters of this connection.
    pub(super) counts: Counts,
}

impl Slot {
    /// A connection to `addr` whose socket the driver is opening.
    pub(super) fn new(addr: &str) -> Slot {
        Slot {
            addr: addr.to_string(),
            conn: None,
            ready_at: None,
            fresh_until: None,
            granted_at: None,
            released_at: None,
            answered_at: None,
            ticket: 0,
            probed_at: None,
            yield_pending: false,
            turn_until: None,
            turn_quota: 0,
            turn_msg_at: None,
            idle_last: false,
            idle_wait: Duration::ZERO,
            salt: 0,
            connected_at: None,
            settle: Duration::ZERO,
            handshake: Duration::ZERO,
            transit: 0,
            transit_until: None,
            lowered_at: None,
            handed: 0,
            received_since_rdy: 0,
            sent_back: SentBack::default(),
            counts: Counts::default(),
        }
    }

    /// The earliest of its deadlines: the connection's own timers, the end of its bootstrap
    /// and of its settle time, and while it holds a low-RDY turn, the end of the turn and
    /// when it counts as idle.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let conn = self.conn.as_ref().and_then(Connection::poll_timeout);
        let own = conn
            .into_iter()
            .chain(self.fresh_until)
            .chain(self.transit_until)
            .min();
        if self.holds_turn() && self.rdy() > 0 {
            own.into_iter()
                .chain(self.turn_until)
                .chain(self.idle_deadline())
                .min()
        } else {
            own
        }
    }

    /// It holds a turn of the low-RDY rotation (possibly ending at its next message).
    pub(super) fn holds_turn(&self) -> bool {
        self.turn_until.is_some() || self.yield_pending
    }

    /// A low-RDY turn starts (or is renewed) at `now` with `ticket`: it ends at `until`, or
    /// early once it delivered `quota` messages (0: by time only).
    pub(super) fn start_turn(&mut self, now: Instant, ticket: u64, until: Instant, quota: u32) {
        self.granted_at = Some(now);
        self.ticket = ticket;
        self.yield_pending = false;
        self.turn_until = Some(until);
        self.turn_quota = quota;
        self.turn_msg_at = None;
    }

    /// It holds no low-RDY turn any more.
    pub(super) fn end_turn(&mut self) {
        self.yield_pending = false;
        self.turn_until = None;
        self.turn_quota = 0;
        self.turn_msg_at = None;
    }

    /// When it counts as idle: `idle_wait` after its last message, its last answer or its
    /// grant, whichever is latest. `None` while it has messages in flight (busy, not idle).
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let c = self.conn.as_ref()?;
        if c.in_flight() > 0 {
            return None;
        }
        let since = [c.last_message_at(), self.granted_at, self.answered_at]
            .into_iter()
            .flatten()
            .max()?;
        Some(later(since, self.idle_wait))
    }

    /// Its place in the line for a low-RDY turn while it is ready with RDY 0: the oldest
    /// ticket first, then released longest ago (never released first), then at random.
    pub(super) fn wait_key(&self) -> Option<WaitKey> {
        (self.is_ready() && self.rdy() == 0).then(|| {
            (
                self.ticket,
                self.released_at,
                mix(self.salt ^ self.ticket.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            )
        })
    }

    pub(super) fn is_ready(&self) -> bool {
        self.ready_at.is_some()
            && self
                .conn
                .as_ref()
                .is_some_and(|c| c.state() == ConnectionState::Ready)
    }

    pub(super) fn rdy(&self) -> u32 {
        if self.is_ready() {
            self.conn.as_ref().map_or(0, Connection::rdy)
        } else {
            0
        }
    }

    /// Messages delivered on it and not yet answered (nor expired).
    pub(super) fn unanswered(&self) -> u64 {
        self.conn
            .as_ref()
            .map_or(0, |c| u64::try_from(c.in_flight()).unwrap_or(u64::MAX))
    }

    /// The messages it holds whatever its RDY: unanswered ones, and ones nsqd may still be
    /// sending after a lower RDY (see `transit`). Its share of `max_in_flight` (its
    /// reservation) is `max(RDY, committed)`: a connection whose RDY was lowered keeps the
    /// share of its unanswered messages until they are answered, expire or the connection
    /// ends, and of the messages that may be on the wire until they arrive or `settle` passes.
    pub(super) fn committed(&self) -> u64 {
        self.unanswered().saturating_add(self.transit)
    }

    /// Whether the next message to arrive is covered by this connection's share: one of those
    /// possibly on the wire after a lowered RDY, or within its RDY. (Not ready, closing: always,
    /// the close drains what comes.)
    pub(super) fn covers_next(&self) -> bool {
        !self.is_ready() || self.transit > 0 || self.handed < u64::from(self.rdy())
    }

    /// `[committed, share, ready, holder, beyond, rdy, unanswered, starved, busy, idle]`:
    /// what it has committed, the share of max_in_flight it reserves, `max(committed, RDY)`,
    /// 1 if it is ready, 1 if it is ready with RDY above 0, what it holds beyond a seat (see
    /// [`Slots::held_beyond_seats`]), its RDY if ready, its messages delivered and not
    /// answered, 1 if it is ready and starved (see [`Slots::live_counts`]), and for the
    /// rotation's round (see [`Slots::rotation_load`]), if it is ready, 1 if its last turn was
    /// not idle, or else its idle wait and settle time in microseconds.
    pub(super) fn budget(&self) -> Weight {
        let c = self.committed();
        let ready = self.is_ready();
        let rdy = if ready {
            self.conn.as_ref().map_or(0, Connection::rdy)
        } else {
            0
        };
        let unanswered = self.unanswered();
        let beyond = if ready {
            unanswered.saturating_sub(1)
        } else {
            c
        };
        let starved =
            ready && policy::is_starved(usize::try_from(unanswered).unwrap_or(usize::MAX), rdy);
        let idle_cost = if ready && self.idle_last {
            let cost = self.idle_wait.saturating_add(self.handshake).as_micros();
            u64::try_from(cost).unwrap_or(u64::MAX)
        } else {
            0
        };
        [
            c,
            c.max(u64::from(rdy)),
            u64::from(ready),
            u64::from(rdy > 0),
            beyond,
            u64::from(rdy),
            unanswered,
            u64::from(starved),
            u64::from(ready && !self.idle_last),
            idle_cost,
        ]
    }

    /// Keeps what nsqd may still send under the current RDY committed (its RDY is about to go
    /// down, or the connection to close): the messages that RDY allows beyond those
    /// unanswered, until they arrive or the settle time passes.
    pub(super) fn keep_transit(&mut self, now: Instant) {
        self.lowered_at = Some(now);
        let current = self.rdy();
        let possible = self.committed().max(u64::from(current));
        self.transit = possible - self.unanswered();
        if self.transit > 0 {
            // Under RDY 1 nsqd flushed what it sent at once: a round trip is enough.
            let settle = if current <= 1 {
                self.handshake
            } else {
                self.settle
            };
            self.transit_until = Some(later(now, settle));
        }
    }

    /// Sends a lower RDY, and keeps what nsqd may still send under the old one committed.
    pub(super) fn lower_rdy(&mut self, now: Instant, id: ConnId, target: u32) {
        if self.conn.is_none() {
            return;
        }
        let (before, before_until) = (self.transit, self.transit_until);
        // Counted as the RDY was, before it changes.
        self.keep_transit(now);
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        match c.set_rdy(now, target) {
            Ok(()) => {
                self.received_since_rdy = 0;
                if target == 0 {
                    self.released_at = Some(now);
                    self.end_turn();
                }
            }
            Err(e) => {
                // Nothing changed on the wire.
                self.transit = before;
                self.transit_until = before_until;
                tracing::debug!(conn = %id, nsqd = %self.addr, error = %e, "RDY not sent");
            }
        }
    }
}

/// Moves `id` in `index` from `*at` to `to` (either may be none: not in it), if they differ.
fn reindex<K: Ord + Copy>(
    index: &mut BTreeSet<(K, ConnId)>,
    id: ConnId,
    at: &mut Option<K>,
    to: Option<K>,
) {
    if *at == to {
        return;
    }
    if let Some(k) = at.take() {
        index.remove(&(k, id));
    }
    if let Some(k) = to {
        index.insert((k, id));
    }
    *at = to;
}

/// What [`Slots::live_counts`] returns.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveCounts {
    pub(crate) ready: u64,
    pub(crate) rdy: u64,
    pub(crate) in_flight: u64,
    pub(crate) starved: u64,
}

/// A place in the line for a low-RDY turn (see [`Slot::wait_key`]).
pub(super) type WaitKey = (u64, Option<Instant>, u64);

impl Indexed for Slot {
    type Key = WaitKey;

    fn deadline(&self) -> Option<Instant> {
        self.next_timeout()
    }

    fn weight(&self) -> Weight {
        self.budget()
    }

    fn key(&self) -> Option<WaitKey> {
        self.wait_key()
    }
}

/// A bijective 64-bit mix (SplitMix64's finaliser): a random-looking order for tie-breaks.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A value with a deadline (base + value seconds, for even values), weights and a key
    /// (for multiples of 5) derived from it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct V(u64, Instant);

    impl Indexed for V {
        type Key = u64;
        fn deadline(&self) -> Option<Instant> {
            (self.0 % 2 == 0).then(|| self.1 + Duration::from_secs(self.0 % 1000))
        }
        fn weight(&self) -> Weight {
            [
                self.0 % 7,
                self.0 % 11,
                self.0 % 2,
                self.0 % 3,
                self.0 % 5,
                self.0 % 13,
                self.0 % 17,
                self.0 % 19,
                self.0 % 23,
                self.0 % 29,
            ]
        }
        fn key(&self) -> Option<u64> {
            (self.0 % 5 == 0).then_some(self.0 % 13)
        }
    }

    /// The same answers as a `BTreeMap` for any sequence of operations, and indexes that
    /// agree with a scan.
    #[test]
    fn behaves_like_a_btreemap() {
        #[expect(clippy::disallowed_methods, reason = "origin of virtual time")]
        let base = Instant::now();
        let mut rng = crate::rng::Rng::new(7);
        let mut slots = Slots::default();
        let mut model = BTreeMap::new();
        for step in 0..20_000u64 {
            let id = ConnId::from_raw(rng.below(40));
            match rng.below(5) {
                0 | 1 => assert_eq!(
                    slots.insert(id, V(step, base)),
                    model.insert(id, V(step, base))
                ),
                2 => assert_eq!(slots.remove(id), model.remove(&id)),
                3 => slots.refresh(),
                _ => {
                    assert_eq!(slots.get(id), model.get(&id));
                    assert_eq!(slots.contains_key(id), model.contains_key(&id));
                    if let Some(v) = slots.get_mut(id) {
                        v.0 += 1;
                        model.get_mut(&id).unwrap().0 += 1;
                    }
                }
            }
            assert_eq!(slots.is_empty(), model.is_empty());
        }
        assert!(slots.iter().eq(model.iter()));
        let sums = slots
            .values()
            .map(V::weight)
            .fold([0; WEIGHTS], |a, w| std::array::from_fn(|i| a[i] + w[i]));
        assert_eq!(slots.totals(), sums);
        let scan = slots.values().filter_map(V::deadline).min();
        assert_eq!(slots.next_deadline(), scan);
        let cut = base + Duration::from_secs(500);
        let mut due: Vec<ConnId> = Vec::new();
        slots.due(cut, &mut due);
        due.sort();
        let expect: Vec<ConnId> = slots
            .iter()
            .filter(|(_, v)| v.deadline().is_some_and(|t| t <= cut))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(due, expect);
        let mut keyed: Vec<(u64, ConnId)> = slots
            .iter()
            .filter_map(|(id, v)| v.key().map(|k| (k, *id)))
            .collect();
        keyed.sort();
        assert!(slots.ordered().eq(keyed));
        assert!(slots.keys().eq(model.keys()));
        assert!(slots.values().eq(model.values()));
    }
}
