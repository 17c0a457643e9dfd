//! The consumer's in-flight table: message id -> deadline, with the deadlines ordered for
//! expiry.
//!
//! This is on the per-message path (one insert per delivery, one remove per answer), so it
//! avoids SipHash and hash look-ups for bookkeeping:
//!
//! * ids are hashed with [`hash_id`], a fixed folded multiply of the id's two 8-byte halves
//!   (nsqd ids are 16 ASCII hex digits), into a table of 4-byte indices of entry slots;
//! * deliveries get deadlines `now + msg_timeout` with a fixed `msg_timeout` and a monotone
//!   `now`, so their timers are appended to a FIFO in deadline order; an answered message only
//!   clears a flag in its slot (found by index, no hashing) and dead slots are dropped from the
//!   front;
//! * the rare timers that are not in delivery order (TOUCH, or a deadline earlier than the
//!   last one) go into a small sorted queue whose stale entries are recognised by a generation
//!   number.
//!
//! Expiry order is deadline order, ties in the order the timers were set, as before.
//!
//! Messages the connection touches on its own (`auto_touch`) also have a second timer, in a
//! second pair of queues of the same kind, keyed by the same deadline: the connection touches
//! them a fixed lead before it, so the deadline order is the touch order.

use crate::frame::MessageId;
use hashbrown::HashTable;
use hashbrown::hash_table;
use std::collections::VecDeque;
use std::time::Instant;

const K1: u64 = 0x243f_6a88_85a3_08d3;
const K2: u64 = 0x1319_8a2e_0370_7344;

/// A fast, deterministic hash of a [`MessageId`]: its two 8-byte halves combined with one
/// folded 64x64->128 multiply (nsqd ids are 16 ASCII hex digits).
fn hash_id(id: &MessageId) -> u64 {
    let (a, b) = id.as_bytes().split_at(8);
    let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
    let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
    let full = u128::from(a ^ K1) * u128::from(b ^ K2);
    // Truncations intended: the two halves of the 128-bit product are folded together.
    (full as u64) ^ ((full >> 64) as u64)
}

/// Whether slot `i` of `entries` holds `id`.
fn is(entries: &[Entry], i: u32, id: &MessageId) -> bool {
    entries.get(i as usize).is_some_and(|e| e.id == *id)
}

/// Where an entry's live timer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerSlot {
    /// Slot with this sequence number in the FIFO.
    Fifo(u64),
    /// Entry with this generation in the sorted queue.
    Sorted(u64),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    id: MessageId,
    deadline: Instant,
    delivered: Instant,
    timer: TimerSlot,
    /// Its auto-touch timer, while the connection still touches it on its own.
    touch: Option<TimerSlot>,
}

#[derive(Debug, Clone, Copy)]
struct FifoSlot {
    deadline: Instant,
    /// Global order in which timers were set (ties between the two queues).
    order: u64,
    id: MessageId,
    live: bool,
}

#[derive(Debug, Clone, Copy)]
struct SortedSlot {
    deadline: Instant,
    order: u64,
    id: MessageId,
}

/// In-flight messages and their deadlines.
///
/// The hash table holds only 4-byte indices into `entries` (ids are compared there, after a
/// 7-bit tag of the hash matched): with thousands of messages in flight, the random probe per
/// delivery and per answer then touches far less memory than a map of 88-byte buckets, and
/// entry slots are reused last-freed-first, so the slot a new delivery takes is usually the
/// one an answer just freed.
// Measured: with `max_in_flight` 2,500 the random probes into a map of 88-byte buckets
// stalled the reader (BENCHMARKS-HISTORY.md, issue 13's second session).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    map: HashTable<u32>,
    entries: Vec<Entry>,
    /// Free slots of `entries`, the last freed on top.
    free: Vec<u32>,
    timers: Timers,
    /// Auto-touch timers (at the deadline; the connection applies its lead).
    touches: Timers,
}

/// The deadline queues.
#[derive(Debug, Default)]
struct Timers {
    /// Timers in the order they were set, deadlines non-decreasing; slot `i` has sequence
    /// number `base + i`. The front slot is always live.
    fifo: VecDeque<FifoSlot>,
    base: u64,
    /// Out-of-order timers sorted by (deadline, order); an entry is live if the map points at
    /// its generation (its `order`). The front entry is always live.
    sorted: VecDeque<SortedSlot>,
    /// Next timer order / generation.
    next_order: u64,
}

impl Timers {
    fn push(&mut self, id: MessageId, deadline: Instant) -> TimerSlot {
        let order = self.next_order;
        self.next_order += 1;
        if self.fifo.back().is_none_or(|b| b.deadline <= deadline) {
            let seq = self.base + self.fifo.len() as u64;
            self.fifo.push_back(FifoSlot {
                deadline,
                order,
                id,
                live: true,
            });
            TimerSlot::Fifo(seq)
        } else {
            let at = self
                .sorted
                .iter()
                .rposition(|s| s.deadline <= deadline)
                .map_or(0, |i| i + 1);
            self.sorted.insert(
                at,
                SortedSlot {
                    deadline,
                    order,
                    id,
                },
            );
            TimerSlot::Sorted(order)
        }
    }

    fn front(&self) -> Option<(Instant, MessageId)> {
        let from_fifo = match (self.fifo.front(), self.sorted.front()) {
            (Some(f), Some(s)) => (f.deadline, f.order) < (s.deadline, s.order),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        if from_fifo {
            self.fifo.front().map(|f| (f.deadline, f.id))
        } else {
            self.sorted.front().map(|s| (s.deadline, s.id))
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.front().map(|(d, _)| d)
    }

    /// Drops dead timers from the fronts of both queues; a sorted entry is live when
    /// `live(id, generation)` says so.
    fn clean(&mut self, live: impl Fn(&MessageId, u64) -> bool) {
        while self.fifo.front().is_some_and(|f| !f.live) {
            self.fifo.pop_front();
            self.base += 1;
        }
        while let Some(s) = self.sorted.front() {
            if live(&s.id, s.order) {
                break;
            }
            self.sorted.pop_front();
        }
    }

    fn clear(&mut self) {
        self.base += self.fifo.len() as u64;
        self.fifo.clear();
        self.sorted.clear();
    }

    fn kill(&mut self, timer: TimerSlot) {
        if let TimerSlot::Fifo(seq) = timer {
            if let Some(slot) = seq
                .checked_sub(self.base)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| self.fifo.get_mut(i))
            {
                slot.live = false;
            }
        }
        // A sorted entry goes stale by itself: the map no longer points at its generation.
    }
}

impl InFlight {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn contains(&self, id: &MessageId) -> bool {
        self.entry(id).is_some()
    }

    /// The ids in flight, in no particular order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        self.map
            .iter()
            .filter_map(|&i| self.entries.get(i as usize).map(|e| e.id))
    }

    fn entry(&self, id: &MessageId) -> Option<&Entry> {
        Self::find(&self.map, &self.entries, id)
    }

    fn entry_mut(&mut self, id: &MessageId) -> Option<&mut Entry> {
        let i = Self::slot_of(&self.map, &self.entries, id)?;
        self.entries.get_mut(i)
    }

    fn find<'a>(map: &HashTable<u32>, entries: &'a [Entry], id: &MessageId) -> Option<&'a Entry> {
        entries.get(Self::slot_of(map, entries, id)?)
    }

    /// The slot of `entries` holding `id`.
    fn slot_of(map: &HashTable<u32>, entries: &[Entry], id: &MessageId) -> Option<usize> {
        map.find(hash_id(id), |&i| is(entries, i, id))
            .map(|&i| i as usize)
    }

    /// `(deadline, delivered at)` of an in-flight message.
    pub(crate) fn get(&self, id: &MessageId) -> Option<(Instant, Instant)> {
        self.entry(id).map(|e| (e.deadline, e.delivered))
    }

    /// Records a delivery (replacing an entry with the same id: then it returns true). One
    /// hash look-up. With `touch`, the message also gets an auto-touch timer.
    pub(crate) fn insert(
        &mut self,
        id: MessageId,
        deadline: Instant,
        delivered: Instant,
        touch: bool,
    ) -> bool {
        let entries = &self.entries;
        let found = self.map.entry(
            hash_id(&id),
            |&i| is(entries, i, &id),
            |&i| entries.get(i as usize).map_or(0, |e| hash_id(&e.id)),
        );
        match found {
            hash_table::Entry::Vacant(v) => {
                let timer = self.timers.push(id, deadline);
                let touch = touch.then(|| self.touches.push(id, deadline));
                let entry = Entry {
                    id,
                    deadline,
                    delivered,
                    timer,
                    touch,
                };
                let slot = if let Some(i) = self.free.pop() {
                    if let Some(e) = self.entries.get_mut(i as usize) {
                        *e = entry;
                    }
                    i
                } else {
                    // As many messages in flight as a u32 counts cannot happen (RDY is far
                    // smaller, and they would need hundreds of GiB).
                    let i = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
                    self.entries.push(entry);
                    i
                };
                v.insert(slot);
                false
            }
            hash_table::Entry::Occupied(o) => {
                let Some(e) = self.entries.get_mut(*o.get() as usize) else {
                    return true;
                };
                let old = *e;
                if old.deadline == deadline && old.touch.is_some() == touch {
                    // The old timers already fire at this deadline and now stand for the
                    // new delivery.
                    e.delivered = delivered;
                    return true;
                }
                self.timers.kill(old.timer);
                if let Some(t) = old.touch {
                    self.touches.kill(t);
                }
                let timer = self.timers.push(id, deadline);
                let touch = touch.then(|| self.touches.push(id, deadline));
                *e = Entry {
                    id,
                    deadline,
                    delivered,
                    timer,
                    touch,
                };
                self.clean();
                true
            }
        }
    }

    /// Forgets a message; `false` if it was not in flight.
    pub(crate) fn remove(&mut self, id: &MessageId) -> bool {
        let entries = &self.entries;
        let Ok(found) = self.map.find_entry(hash_id(id), |&i| is(entries, i, id)) else {
            return false;
        };
        let (slot, _) = found.remove();
        let Some(&entry) = self.entries.get(slot as usize) else {
            return true;
        };
        self.free.push(slot);
        self.timers.kill(entry.timer);
        if let Some(t) = entry.touch {
            self.touches.kill(t);
        }
        self.clean();
        true
    }

    /// Moves a message's deadline (TOUCH); its auto-touch timer, if it has one, follows.
    pub(crate) fn reschedule(&mut self, id: &MessageId, deadline: Instant) {
        let Some(entry) = self.entry(id).copied() else {
            return;
        };
        if entry.deadline == deadline {
            return;
        }
        self.timers.kill(entry.timer);
        let timer = self.timers.push(*id, deadline);
        let touch = entry.touch.map(|t| {
            self.touches.kill(t);
            self.touches.push(*id, deadline)
        });
        if let Some(e) = self.entry_mut(id) {
            e.deadline = deadline;
            e.timer = timer;
            e.touch = touch;
        }
        self.clean();
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// The earliest deadline among the messages with an auto-touch timer.
    pub(crate) fn next_touch_deadline(&self) -> Option<Instant> {
        self.touches.next_deadline()
    }

    /// Removes and returns the message with the earliest deadline if it is `<= now`.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<MessageId> {
        let (deadline, id) = self.timers.front()?;
        if deadline > now {
            return None;
        }
        self.remove(&id);
        Some(id)
    }

    /// Takes the auto-touch timer of the message with the earliest deadline if that deadline
    /// is `<= until`, and returns the message with `(deadline, delivered at)`. Rescheduling
    /// it gives it a new auto-touch timer only through [`InFlight::rearm_touch`].
    pub(crate) fn pop_touch_due(
        &mut self,
        until: Instant,
    ) -> Option<(MessageId, Instant, Instant)> {
        let (deadline, id) = self.touches.front()?;
        if deadline > until {
            return None;
        }
        let e = self.entry_mut(&id)?;
        let (d, delivered) = (e.deadline, e.delivered);
        if let Some(t) = e.touch.take() {
            self.touches.kill(t);
        }
        self.clean();
        Some((id, d, delivered))
    }

    /// Gives a message an auto-touch timer at its current deadline again.
    pub(crate) fn rearm_touch(&mut self, id: &MessageId) {
        let Some(e) = self.entry(id).copied() else {
            return;
        };
        if e.touch.is_some() {
            return;
        }
        let t = self.touches.push(*id, e.deadline);
        if let Some(e) = self.entry_mut(id) {
            e.touch = Some(t);
        }
    }

    /// Gives every message in flight an auto-touch timer at its current deadline (auto-touch
    /// turned on while messages are in flight), or takes every one away (`touch` false).
    pub(crate) fn set_touch_all(&mut self, touch: bool) {
        if !touch {
            self.touches.clear();
            for e in &mut self.entries {
                e.touch = None;
            }
            return;
        }
        let slots: Vec<u32> = self.map.iter().copied().collect();
        for i in slots {
            let Some(e) = self.entries.get(i as usize).copied() else {
                continue;
            };
            if e.touch.is_none() {
                let t = self.touches.push(e.id, e.deadline);
                if let Some(e) = self.entries.get_mut(i as usize) {
                    e.touch = Some(t);
                }
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.entries.clear();
        self.free.clear();
        self.timers.clear();
        self.touches.clear();
    }

    /// Drops dead timers from the fronts of the queues.
    fn clean(&mut self) {
        let (map, entries) = (&self.map, &self.entries);
        self.timers.clean(|id, order| {
            Self::find(map, entries, id).is_some_and(|e| e.timer == TimerSlot::Sorted(order))
        });
        self.touches.clean(|id, order| {
            Self::find(map, entries, id).is_some_and(|e| e.touch == Some(TimerSlot::Sorted(order)))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(n: u64) -> MessageId {
        MessageId::try_from(format!("{n:016x}").as_bytes()).unwrap()
    }

    #[test]
    fn hasher_spreads_hex_ids() {
        let mut low_bits = std::collections::HashSet::new();
        let mut top_bits = std::collections::HashSet::new();
        for n in 0..4096 {
            let h = hash_id(&id(n));
            low_bits.insert(h & 0xfff);
            top_bits.insert(h >> 57);
        }
        // Bucket index (low bits) and control byte (top 7 bits) both vary.
        assert!(low_bits.len() > 2000, "{}", low_bits.len());
        assert_eq!(top_bits.len(), 128);
        // Deterministic.
        assert_eq!(hash_id(&id(7)), hash_id(&id(7)));
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "test: the origin of virtual time; only offsets from it matter"
    )]
    fn grows_then_reuses_freed_slots_last_freed_first() {
        let t0 = Instant::now();
        let mut table = InFlight::default();
        // Enough ids to make the hash table grow several times (it re-hashes from the slots).
        for n in 0..10_000 {
            table.insert(id(n), t0 + Duration::from_secs(n), t0, n % 3 == 0);
        }
        assert_eq!(table.len(), 10_000);
        for n in (0..10_000).step_by(2) {
            assert!(table.remove(&id(n)));
            assert!(!table.remove(&id(n)), "removed once");
        }
        assert_eq!((table.len(), table.free.len()), (5_000, 5_000));
        // The slot freed last is taken first; no new slot while free ones remain.
        table.insert(id(20_000), t0, t0, false);
        assert_eq!(table.free.len(), 4_999);
        assert_eq!(table.entries.len(), 10_000);
        assert_eq!(
            table
                .map
                .find(hash_id(&id(20_000)), |&i| i == 9_998)
                .copied(),
            Some(9_998)
        );
        for n in 0..10_000 {
            let want = (n % 2 == 1).then(|| (t0 + Duration::from_secs(n), t0));
            assert_eq!(table.get(&id(n)), want, "id {n}");
        }
        assert_eq!(table.next_deadline(), Some(t0));
        table.clear();
        assert!(table.is_empty() && table.entries.is_empty() && table.free.is_empty());
        assert_eq!(table.next_deadline(), None);
    }

    /// The reference the table replaces: a map plus a sorted list of (deadline, id) with
    /// stale entries, expiring in deadline order.
    #[derive(Default)]
    struct Model {
        map: std::collections::BTreeMap<MessageId, (Instant, u64)>,
        next: u64,
    }

    impl Model {
        fn set(&mut self, id: MessageId, deadline: Instant) {
            let order = self.next;
            self.next += 1;
            self.map.insert(id, (deadline, order));
        }
        fn pop_expired(&mut self, now: Instant) -> Option<MessageId> {
            let (&id, _) = self
                .map
                .iter()
                .filter(|(_, (d, _))| *d <= now)
                .min_by_key(|(_, (d, o))| (*d, *o))?;
            self.map.remove(&id);
            Some(id)
        }
        fn next_deadline(&self) -> Option<Instant> {
            self.map.values().map(|(d, _)| *d).min()
        }
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "test: the origin of virtual time; only offsets from it matter"
    )]
    fn matches_a_sorted_model_with_touches_and_out_of_order_deadlines() {
        let t0 = Instant::now();
        let mut rng = crate::rng::Rng::new(11);
        let mut table = InFlight::default();
        let mut model = Model::default();
        let mut now = t0;
        for step in 0..20_000u32 {
            let n = rng.next_u64() % 64;
            let m = id(n);
            match rng.next_u64() % 10 {
                0..=3 => {
                    // Delivery (sometimes of an id already in flight, sometimes earlier).
                    let back = if rng.next_u64() % 8 == 0 { 5 } else { 0 };
                    let deadline = now + Duration::from_millis(60 - back);
                    if table.get(&m).map(|e| e.0) != Some(deadline) {
                        model.set(m, deadline);
                    } else if let Some(e) = model.map.get_mut(&m) {
                        e.0 = deadline;
                    }
                    table.insert(m, deadline, now, false);
                }
                4..=6 => {
                    assert_eq!(table.remove(&m), model.map.remove(&m).is_some());
                }
                7 => {
                    if let Some((d, _)) = table.get(&m) {
                        let deadline = d.max(now + Duration::from_millis(rng.next_u64() % 90));
                        if deadline != d {
                            model.set(m, deadline);
                        }
                        table.reschedule(&m, deadline);
                    }
                }
                _ => {
                    now += Duration::from_millis(rng.next_u64() % 20);
                    loop {
                        let a = table.pop_expired(now);
                        assert_eq!(a, model.pop_expired(now), "step {step}");
                        if a.is_none() {
                            break;
                        }
                    }
                }
            }
            assert_eq!(table.len(), model.map.len());
            assert_eq!(table.next_deadline(), model.next_deadline(), "step {step}");
            for (k, (d, _)) in &model.map {
                assert_eq!(table.get(k).map(|e| e.0), Some(*d));
            }
        }
        table.clear();
        assert!(table.is_empty());
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "test: the origin of virtual time; only offsets from it matter"
    )]
    fn touch_timers_follow_deadlines_and_answers() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut table = InFlight::default();
        table.insert(id(1), t0 + ms(100), t0, true);
        table.insert(id(2), t0 + ms(110), t0, false);
        table.insert(id(3), t0 + ms(120), t0, true);
        assert_eq!(table.next_touch_deadline(), Some(t0 + ms(100)));
        // A touch of 1 moves its touch timer behind 3's.
        table.reschedule(&id(1), t0 + ms(200));
        assert_eq!(table.next_touch_deadline(), Some(t0 + ms(120)));
        assert_eq!(table.pop_touch_due(t0 + ms(119)), None);
        assert_eq!(
            table.pop_touch_due(t0 + ms(150)),
            Some((id(3), t0 + ms(120), t0))
        );
        // Taken: 3 has no touch timer until re-armed.
        assert_eq!(table.next_touch_deadline(), Some(t0 + ms(200)));
        table.reschedule(&id(3), t0 + ms(300));
        table.rearm_touch(&id(3));
        table.rearm_touch(&id(3));
        // An answered message loses its touch timer; one never armed has none.
        assert!(table.remove(&id(1)));
        assert_eq!(table.next_touch_deadline(), Some(t0 + ms(300)));
        assert_eq!(table.pop_touch_due(t0 + ms(1000)).map(|t| t.0), Some(id(3)));
        assert_eq!(table.pop_touch_due(t0 + ms(1000)), None);
        assert_eq!(table.next_touch_deadline(), None);
        // Expiry is unaffected by touch timers.
        assert_eq!(table.pop_expired(t0 + ms(1000)), Some(id(2)));
        assert_eq!(table.pop_expired(t0 + ms(1000)), Some(id(3)));
        assert!(table.is_empty());
    }
}
