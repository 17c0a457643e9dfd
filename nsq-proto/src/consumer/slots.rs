//! The consumer's connections by id ([`Slots`], a vector sorted by [`ConnId`]) and what it
//! keeps per connection ([`Slot`]).
//!
//! Ids are handed out in increasing order, so a new connection is appended and iteration
//! order is id order, as with a `BTreeMap`; a look-up (several per message on the hot path)
//! is a binary search over a few contiguous entries instead of a walk down tree nodes.

use super::stats::Counts;
use crate::connection::{Connection, ConnectionState};
use crate::deadline::later;
use crate::driver::ConnId;
use std::collections::BTreeSet;
use std::ops::Index;
use std::time::{Duration, Instant};

/// One entry of [`Slots`].
#[derive(Debug)]
struct Entry<T> {
    id: ConnId,
    value: T,
    /// Changed (looked up mutably) since its deadline was last indexed.
    dirty: bool,
    /// Changed since its weights were last counted.
    dirty_weight: bool,
    /// Its deadline as indexed in [`Slots::index`].
    indexed: Option<Instant>,
    /// Its weights as counted in [`Slots::totals`].
    weight: (u64, u64),
}

/// The consumer's connections by id, with an index of their deadlines: the earliest is found
/// without looking at every connection, and so are the due ones. An entry looked up mutably
/// is marked changed, and its deadline is indexed again at the next [`Slots::refresh`] (until
/// then [`Slots::next_deadline`] looks at it directly), so no caller has to remember to.
#[derive(Debug)]
pub(crate) struct Slots<T> {
    entries: Vec<Entry<T>>,
    /// Entries changed since their deadline was indexed (ids of removed ones are skipped).
    dirty: Vec<ConnId>,
    /// Entries changed since their weights were counted (the budget check after each input
    /// needs only these: counting is cheap, re-indexing a deadline is not).
    dirty_weight: Vec<ConnId>,
    /// A spare buffer for draining the lists without allocating.
    scratch: Vec<ConnId>,
    index: BTreeSet<(Instant, ConnId)>,
    /// The sums of the entries' weights as of their last refresh.
    total: (u64, u64),
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
            dirty: Vec::new(),
            dirty_weight: Vec::new(),
            scratch: Vec::new(),
            index: BTreeSet::new(),
            total: (0, 0),
        }
    }
}

impl<T> Slots<T> {
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
        self.position(id).ok().map(|i| &self.entries[i].value)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: ConnId) -> Option<&mut T> {
        match self.position(id) {
            Ok(i) => {
                let e = &mut self.entries[i];
                if !(e.dirty && e.dirty_weight) {
                    Self::mark_slow(e, &mut self.dirty, &mut self.dirty_weight);
                }
                Some(&mut e.value)
            }
            Err(_) => None,
        }
    }

    pub(crate) fn contains_key(&self, id: ConnId) -> bool {
        self.position(id).is_ok()
    }

    pub(crate) fn insert(&mut self, id: ConnId, value: T) -> Option<T> {
        match self.position(id) {
            Ok(i) => {
                let e = &mut self.entries[i];
                Self::mark_slow(e, &mut self.dirty, &mut self.dirty_weight);
                Some(std::mem::replace(&mut e.value, value))
            }
            Err(i) => {
                self.entries.insert(
                    i,
                    Entry {
                        id,
                        value,
                        dirty: true,
                        dirty_weight: true,
                        indexed: None,
                        weight: (0, 0),
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
                let e = self.entries.remove(i);
                if let Some(t) = e.indexed {
                    self.index.remove(&(t, id));
                }
                self.total.0 -= e.weight.0;
                self.total.1 -= e.weight.1;
                Some(e.value)
            }
            Err(_) => None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&ConnId, &T)> {
        self.entries.iter().map(|e| (&e.id, &e.value))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &ConnId> {
        self.entries.iter().map(|e| &e.id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|e| &e.value)
    }

    /// Counts the weights (`weight`) of the entries changed since they were last counted.
    pub(crate) fn refresh_weights(&mut self, weight: impl Fn(&T) -> (u64, u64)) {
        let mut ids = std::mem::take(&mut self.scratch);
        std::mem::swap(&mut ids, &mut self.dirty_weight);
        for &id in &ids {
            let Ok(i) = self.position(id) else { continue };
            let e = &mut self.entries[i];
            e.dirty_weight = false;
            let w = weight(&e.value);
            self.total.0 = self.total.0 - e.weight.0 + w.0;
            self.total.1 = self.total.1 - e.weight.1 + w.1;
            e.weight = w;
        }
        ids.clear();
        self.scratch = ids;
    }

    /// Counts the weights and indexes the deadlines (`deadline` of each entry) of the entries
    /// changed since the last refresh.
    pub(crate) fn refresh(
        &mut self,
        deadline: impl Fn(&T) -> Option<Instant>,
        weight: impl Fn(&T) -> (u64, u64),
    ) {
        self.refresh_weights(weight);
        let mut ids = std::mem::take(&mut self.scratch);
        std::mem::swap(&mut ids, &mut self.dirty);
        for &id in &ids {
            let Ok(i) = self.position(id) else { continue };
            let e = &mut self.entries[i];
            e.dirty = false;
            let d = deadline(&e.value);
            if d != e.indexed {
                if let Some(t) = e.indexed {
                    self.index.remove(&(t, id));
                }
                if let Some(t) = d {
                    self.index.insert((t, id));
                }
                e.indexed = d;
            }
        }
        ids.clear();
        self.scratch = ids;
    }

    /// The sums of every entry's two weights (counted first).
    pub(crate) fn totals(&mut self, weight: impl Fn(&T) -> (u64, u64)) -> (u64, u64) {
        self.refresh_weights(weight);
        self.total
    }

    /// The earliest deadline of any entry.
    pub(crate) fn next_deadline(
        &self,
        deadline: impl Fn(&T) -> Option<Instant>,
    ) -> Option<Instant> {
        let indexed = self.index.first().map(|(t, _)| *t);
        let changed = self
            .dirty
            .iter()
            .filter_map(|id| self.get(*id))
            .filter_map(deadline);
        indexed.into_iter().chain(changed).min()
    }

    /// The entries whose deadline is `now` or earlier, in deadline order.
    pub(crate) fn due(
        &mut self,
        now: Instant,
        deadline: impl Fn(&T) -> Option<Instant>,
        weight: impl Fn(&T) -> (u64, u64),
    ) -> Vec<ConnId> {
        self.refresh(deadline, weight);
        self.index
            .range(..=(now, ConnId::from_raw(u64::MAX)))
            .map(|(_, id)| *id)
            .collect()
    }
}

impl Slots<Slot> {
    /// Re-indexes the connections changed since the last call.
    pub(crate) fn sync(&mut self) {
        self.refresh(Slot::next_timeout, Slot::budget);
    }

    /// Over every connection, kept as running sums: the messages committed (unanswered, and
    /// possibly on the wire after a lowered RDY: [`Slot::committed`]) and the shares of
    /// max_in_flight reserved (`max(committed, RDY)`).
    pub(crate) fn budget_totals(&mut self) -> (u64, u64) {
        self.totals(Slot::budget)
    }

    /// The connections with a deadline at or before `now`.
    pub(crate) fn due_at(&mut self, now: Instant) -> Vec<ConnId> {
        self.due(now, Slot::next_timeout, Slot::budget)
    }
}

impl<T> Index<&ConnId> for Slots<T> {
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
    /// How many turns it had (RDY from 0 to more, or a turn renewed): the rotation serves
    /// fewer turns first, then the longest waiting. A new connection starts at the fewest
    /// turns of the others, so it neither waits for nor overtakes a whole round.
    pub(super) turns: u64,
    /// When it last became the backoff probe.
    pub(super) probed_at: Option<Instant>,
    /// Its low-RDY turn is over but it had just answered: it gives RDY up at its next
    /// message.
    pub(super) yield_pending: bool,
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
    /// Messages handed to the application on this connection and not answered (nor
    /// expired) yet.
    pub(super) handed: u64,
    /// Messages received since the last RDY was sent (for the refill rule).
    pub(super) received_since_rdy: u32,
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
            turns: 0,
            probed_at: None,
            yield_pending: false,
            connected_at: None,
            settle: Duration::ZERO,
            handshake: Duration::ZERO,
            transit: 0,
            transit_until: None,
            handed: 0,
            received_since_rdy: 0,
            counts: Counts::default(),
        }
    }

    /// The earliest of its deadlines: the connection's own timers, the end of its bootstrap
    /// and of its settle time.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let conn = self.conn.as_ref().and_then(Connection::poll_timeout);
        conn.into_iter()
            .chain(self.fresh_until)
            .chain(self.transit_until)
            .min()
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

    /// `(committed, share)`: what it has committed, and the share of max_in_flight it
    /// reserves, `max(committed, RDY)`.
    pub(super) fn budget(&self) -> (u64, u64) {
        let c = self.committed();
        (c, c.max(u64::from(self.rdy())))
    }

    /// Sends a lower RDY, and keeps what nsqd may still send under the old one committed.
    pub(super) fn lower_rdy(&mut self, now: Instant, id: ConnId, target: u32) {
        let current = self.rdy();
        let committed = self.committed();
        let f = self.unanswered();
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        match c.set_rdy(now, target) {
            Ok(()) => {
                self.received_since_rdy = 0;
                let possible = committed.max(u64::from(current));
                self.transit = possible - f;
                if self.transit > 0 {
                    // Under RDY 1 nsqd flushed what it sent at once: a round trip is enough.
                    let settle = if current <= 1 {
                        self.handshake
                    } else {
                        self.settle
                    };
                    self.transit_until = Some(later(now, settle));
                }
                if target == 0 {
                    self.released_at = Some(now);
                    self.yield_pending = false;
                }
            }
            Err(e) => tracing::debug!(%id, error = %e, "RDY not sent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The same answers as a `BTreeMap` for any sequence of operations.
    #[test]
    fn behaves_like_a_btreemap() {
        let mut rng = crate::rng::Rng::new(7);
        let mut slots = Slots::default();
        let mut model = BTreeMap::new();
        for step in 0..20_000u64 {
            let id = ConnId::from_raw(rng.below(40));
            match rng.below(4) {
                0 | 1 => assert_eq!(slots.insert(id, step), model.insert(id, step)),
                2 => assert_eq!(slots.remove(id), model.remove(&id)),
                _ => {
                    assert_eq!(slots.get(id), model.get(&id));
                    assert_eq!(slots.contains_key(id), model.contains_key(&id));
                    if let Some(v) = slots.get_mut(id) {
                        *v += 1;
                        *model.get_mut(&id).unwrap() += 1;
                    }
                }
            }
            assert_eq!(slots.is_empty(), model.is_empty());
        }
        assert!(slots.iter().eq(model.iter()));
        // The index agrees with a scan: deadline = base + value seconds for even values.
        #[expect(clippy::disallowed_methods, reason = "origin of virtual time")]
        let base = Instant::now();
        let f = |v: &u64| (v % 2 == 0).then(|| base + std::time::Duration::from_secs(*v % 1000));
        let w = |v: &u64| (*v % 7, *v % 11);
        let sums = slots
            .values()
            .map(w)
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        assert_eq!(slots.totals(w), sums);
        let scan = slots.values().filter_map(f).min();
        assert_eq!(slots.next_deadline(f), scan);
        let cut = base + std::time::Duration::from_secs(500);
        let mut due: Vec<ConnId> = slots.due(cut, f, w);
        due.sort();
        let expect: Vec<ConnId> = slots
            .iter()
            .filter(|(_, v)| f(v).is_some_and(|t| t <= cut))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(due, expect);
        assert!(slots.keys().eq(model.keys()));
        assert!(slots.values().eq(model.values()));
    }
}
