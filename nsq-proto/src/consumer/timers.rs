//! The consumer's own deadlines, one slot per purpose ([`Deadline`]), in a [`TimerTable`].
//!
//! Deadlines that belong to one entity stay with it (a connection's own timers, a new
//! connection's bootstrap and a lowered RDY's settle time, a lookupd query's timeout, an
//! nsqd's reconnect): each part of the consumer reports the earliest of its own, and
//! `Consumer::poll_timeout` is the minimum of the table and those.

use std::time::Instant;

/// What a consumer-wide timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deadline {
    /// The next round of nsqlookupd queries.
    LookupdPoll,
    /// The end of the running backoff window (every RDY is 0 until then).
    Backoff,
    /// The next RDY redistribution: the low-RDY rotation's next turn end or idle deadline,
    /// or moving the backoff probe off an idle connection.
    Redistribute,
    /// After `close`, connections still draining are dropped at this instant.
    Close,
}

impl Deadline {
    const COUNT: usize = 4;

    fn index(self) -> usize {
        match self {
            Deadline::LookupdPoll => 0,
            Deadline::Backoff => 1,
            Deadline::Redistribute => 2,
            Deadline::Close => 3,
        }
    }
}

/// One optional deadline per [`Deadline`].
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct TimerTable {
    data: [Option<Instant>; Deadline::COUNT],
}

impl TimerTable {
    /// Arms `timer` for `at` (replacing its previous deadline).
    pub(super) fn set(&mut self, timer: Deadline, at: Instant) {
        self.data[timer.index()] = Some(at);
    }

    /// Disarms `timer`.
    pub(super) fn stop(&mut self, timer: Deadline) {
        self.data[timer.index()] = None;
    }

    /// The deadline of `timer`, if armed.
    pub(super) fn get(&self, timer: Deadline) -> Option<Instant> {
        self.data[timer.index()]
    }

    /// True when `timer` is armed.
    pub(super) fn is_set(&self, timer: Deadline) -> bool {
        self.get(timer).is_some()
    }

    /// True when `timer` is armed and due at `now`.
    pub(super) fn is_expired(&self, timer: Deadline, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// The earliest armed deadline.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        self.data.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The table answers as the minimum of what is armed, whatever the order of arming.
    #[test]
    fn the_table_is_the_minimum_of_its_armed_timers() {
        #[expect(clippy::disallowed_methods, reason = "origin of virtual time")]
        let now = Instant::now();
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Deadline::Close, now + Duration::from_secs(3));
        t.set(Deadline::Backoff, now + Duration::from_secs(1));
        assert_eq!(t.next_timeout(), Some(now + Duration::from_secs(1)));
        assert!(t.is_set(Deadline::Backoff) && !t.is_set(Deadline::LookupdPoll));
        assert!(!t.is_expired(Deadline::Backoff, now));
        assert!(t.is_expired(Deadline::Backoff, now + Duration::from_secs(1)));
        t.stop(Deadline::Backoff);
        assert_eq!(t.get(Deadline::Backoff), None);
        assert_eq!(t.next_timeout(), Some(now + Duration::from_secs(3)));
    }
}
