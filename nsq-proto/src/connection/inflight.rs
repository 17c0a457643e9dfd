//! The consumer's in-flight table: message id -> deadline, with the deadlines ordered for
//! expiry.
//!
//! This is on the per-message path (one insert per delivery, one remove per answer), so it
//! avoids SipHash and hash look-ups for bookkeeping:
//!
//! * ids are hashed with [`IdHasher`], a fixed folded multiply of the id's two 8-byte halves
//!   (nsqd ids are 16 ASCII hex digits);
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
use std::collections::{HashMap, VecDeque, hash_map};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

/// A fast, deterministic hasher for [`MessageId`] keys: the two 8-byte halves are combined
/// with one folded 64x64->128 multiply. Other inputs are folded 16 bytes at a time.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const K1: u64 = 0x243f_6a88_85a3_08d3;
const K2: u64 = 0x1319_8a2e_0370_7344;

fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    // Truncations intended: the two halves of the 128-bit product are folded together.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "folding the 128-bit product"
    )]
    let (lo, hi) = (full as u64, (full >> 64) as u64);
    lo ^ hi
}

impl IdHasher {
    fn mix16(&mut self, a: u64, b: u64) {
        self.0 = folded_multiply(a ^ self.0 ^ K1, b ^ K2);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        if let Ok(id) = <&[u8; 16]>::try_from(bytes) {
            let (a, b) = id.split_at(8);
            let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
            let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
            self.mix16(a, b);
            return;
        }
        for chunk in bytes.chunks(16) {
            let mut block = [0u8; 16];
            block[..chunk.len()].copy_from_slice(chunk);
            let (a, b) = block.split_at(8);
            let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
            let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
            self.mix16(a, b ^ chunk.len() as u64);
        }
    }

    fn write_usize(&mut self, n: usize) {
        // The slice length prefix of the derived `Hash`; folded into the next block.
        self.0 ^= n as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type IdMap<V> = HashMap<MessageId, V, BuildHasherDefault<IdHasher>>;

/// Where an entry's live timer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// Slot with this sequence number in the FIFO.
    Fifo(u64),
    /// Entry with this generation in the sorted queue.
    Sorted(u64),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    deadline: Instant,
    delivered: Instant,
    timer: Timer,
    /// Its auto-touch timer, while the connection still touches it on its own.
    touch: Option<Timer>,
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
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    map: IdMap<Entry>,
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
    fn push(&mut self, id: MessageId, deadline: Instant) -> Timer {
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
            Timer::Fifo(seq)
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
            Timer::Sorted(order)
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

    fn kill(&mut self, timer: Timer) {
        if let Timer::Fifo(seq) = timer {
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
        self.map.contains_key(id)
    }

    /// `(deadline, delivered at)` of an in-flight message.
    pub(crate) fn get(&self, id: &MessageId) -> Option<(Instant, Instant)> {
        self.map.get(id).map(|e| (e.deadline, e.delivered))
    }

    /// Records a delivery (replacing an entry with the same id). One hash look-up. With
    /// `touch`, the message also gets an auto-touch timer.
    pub(crate) fn insert(
        &mut self,
        id: MessageId,
        deadline: Instant,
        delivered: Instant,
        touch: bool,
    ) {
        match self.map.entry(id) {
            hash_map::Entry::Vacant(v) => {
                let timer = self.timers.push(id, deadline);
                let touch = touch.then(|| self.touches.push(id, deadline));
                v.insert(Entry {
                    deadline,
                    delivered,
                    timer,
                    touch,
                });
            }
            hash_map::Entry::Occupied(mut o) => {
                let old = *o.get();
                if old.deadline == deadline && old.touch.is_some() == touch {
                    // The old timers already fire at this deadline and now stand for the
                    // new delivery.
                    o.get_mut().delivered = delivered;
                    return;
                }
                self.timers.kill(old.timer);
                if let Some(t) = old.touch {
                    self.touches.kill(t);
                }
                let timer = self.timers.push(id, deadline);
                let touch = touch.then(|| self.touches.push(id, deadline));
                *o.get_mut() = Entry {
                    deadline,
                    delivered,
                    timer,
                    touch,
                };
                self.clean();
            }
        }
    }

    /// Forgets a message; `false` if it was not in flight.
    pub(crate) fn remove(&mut self, id: &MessageId) -> bool {
        let Some(entry) = self.map.remove(id) else {
            return false;
        };
        self.timers.kill(entry.timer);
        if let Some(t) = entry.touch {
            self.touches.kill(t);
        }
        self.clean();
        true
    }

    /// Moves a message's deadline (TOUCH); its auto-touch timer, if it has one, follows.
    pub(crate) fn reschedule(&mut self, id: &MessageId, deadline: Instant) {
        let Some(entry) = self.map.get(id).copied() else {
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
        if let Some(e) = self.map.get_mut(id) {
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
        let e = self.map.get_mut(&id)?;
        let (d, delivered) = (e.deadline, e.delivered);
        if let Some(t) = e.touch.take() {
            self.touches.kill(t);
        }
        self.clean();
        Some((id, d, delivered))
    }

    /// Gives a message an auto-touch timer at its current deadline again.
    pub(crate) fn rearm_touch(&mut self, id: &MessageId) {
        let Some(e) = self.map.get(id).copied() else {
            return;
        };
        if e.touch.is_some() {
            return;
        }
        let t = self.touches.push(*id, e.deadline);
        if let Some(e) = self.map.get_mut(id) {
            e.touch = Some(t);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.timers.clear();
        self.touches.clear();
    }

    /// Drops dead timers from the fronts of the queues.
    fn clean(&mut self) {
        let map = &self.map;
        self.timers
            .clean(|id, order| map.get(id).is_some_and(|e| e.timer == Timer::Sorted(order)));
        self.touches.clean(|id, order| {
            map.get(id)
                .is_some_and(|e| e.touch == Some(Timer::Sorted(order)))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;
    use std::time::Duration;

    fn id(n: u64) -> MessageId {
        MessageId::try_from(format!("{n:016x}").as_bytes()).unwrap()
    }

    #[test]
    fn hasher_spreads_hex_ids() {
        let build = BuildHasherDefault::<IdHasher>::default();
        let mut low_bits = std::collections::HashSet::new();
        let mut top_bits = std::collections::HashSet::new();
        for n in 0..4096 {
            let h = build.hash_one(id(n));
            low_bits.insert(h & 0xfff);
            top_bits.insert(h >> 57);
        }
        // Bucket index (low bits) and control byte (top 7 bits) both vary.
        assert!(low_bits.len() > 2000, "{}", low_bits.len());
        assert_eq!(top_bits.len(), 128);
        // Deterministic.
        assert_eq!(build.hash_one(id(7)), build.hash_one(id(7)));
        let mut h = IdHasher::default();
        h.write(b"short");
        assert_ne!(h.finish(), 0);
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
