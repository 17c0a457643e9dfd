//! The hold/grace policy of a client whose calls drive it while they wait, written once for
//! the two runtimes that have one: the async-io runtime's lease (`async_io::lease`, its
//! callers tasks) and the blocking runtime's poller (`poller`, its callers threads).
//!
//! A client's driver is held by one at a time: a caller that waits for the client (and
//! drives it meanwhile, so that a round trip to nsqd wakes no other thread), or the
//! client's own thread, which drives what no caller does. The policy:
//!
//! * callers that wait are listed, the last first ([`Callers`]): what the driver has for
//!   whoever takes it next (the lease: a wake-up of the driver; the poller: the driver
//!   itself, put back) goes to the last of them, each told once, and all of them hear when
//!   the driver ends;
//! * the thread looks every [`TICK`] while callers are at work, and takes what they leave
//!   once they have taken no turn for a look (or at once, when it is its own: [`Told`]).
//!   While every look finds that callers took turns and left it nothing, it looks less
//!   often, each wait twice the last up to [`MAX_TICK`] ([`longer`]): a thread that wakes
//!   500 times a second per client to find callers at work is a cost of its own. Any other
//!   look, and its own turn, bring it back to [`TICK`] (a sleep leaves it as it was);
//! * the thread sleeps until it is woken when nobody needs it: after [`IDLE_TICKS`] looks
//!   that found no turn and nothing to do, or while a caller holds the driver across its
//!   wait (whose release wakes it).
//!
//! What the policy is parameterised by is how a waiting caller is woken ([`Rouse`]): a
//! task's [`Waker`](std::task::Waker) (the lease), which may be polled late and cannot
//! block, so it gives the driver back after each turn; or a parked [`Thread`] (the poller),
//! which runs as soon as it is unparked and holds the driver for as long as it waits in the
//! client's own poller. Each runtime keeps its own readiness (what wakes its driver, how a
//! holder waits) and sockets; [`Ticks::decide`] is the thread's whole decision.

use std::marker::PhantomData;
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

/// How often the client's thread looks while callers are at work.
pub(crate) const TICK: Duration = Duration::from_millis(2);

/// The longest the client's thread waits between looks while callers keep taking turns and
/// leave it nothing to do: each such look doubles the wait, from [`TICK`] up to this; any
/// other look brings it back to [`TICK`]. Work left when callers stop waits at most this
/// long (plus a tick), once.
pub(crate) const MAX_TICK: Duration = Duration::from_millis(16);

/// The wait after `wait` for a thread whose look found callers at work and nothing for it:
/// twice as long, up to [`MAX_TICK`].
fn longer(wait: Duration) -> Duration {
    (wait * 2).min(MAX_TICK)
}

/// How many looks without a turn or any work before the client's thread sleeps until woken.
pub(crate) const IDLE_TICKS: u32 = 8;

/// How a caller that waits for its client is woken, and what follows from it for the policy.
pub(crate) trait Rouse {
    /// What tells one waiting caller from another.
    type Id: PartialEq + Copy;

    /// Whether a caller keeps the driver for as long as it waits: a thread can (it waits in
    /// the client's own poller, and its release wakes the client's thread); a task cannot
    /// block, so it gives the driver back after each turn.
    const HOLDS_WHILE_WAITING: bool;

    /// Which caller this is.
    fn id(&self) -> Self::Id;

    /// Wakes the caller (its waker, or its thread).
    fn rouse(self);
}

/// A blocking caller: a thread, parked while it waits, unparked to go on.
impl Rouse for Thread {
    type Id = std::thread::ThreadId;
    const HOLDS_WHILE_WAITING: bool = true;

    fn id(&self) -> Self::Id {
        Thread::id(self)
    }

    fn rouse(self) {
        self.unpark();
    }
}

/// The callers waiting for a client, the last listed first; a caller taken out of the list
/// is told once (it lists itself again when it next waits).
#[derive(Debug)]
pub(crate) struct Callers<W>(Vec<W>);

impl<W: Rouse> Callers<W> {
    /// How many wait.
    #[cfg(feature = "async-io")]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none waits.
    #[cfg(all(test, feature = "async-io"))]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lists `caller` last: the next to be told.
    pub(crate) fn push(&mut self, caller: W) {
        self.0.push(caller);
    }

    /// The caller listed last, out of the list.
    pub(crate) fn pop(&mut self) -> Option<W> {
        self.0.pop()
    }

    /// Caller `id` out of the list, the others keeping their order (the lease's, whose
    /// order is the policy's: the last first).
    #[cfg(feature = "async-io")]
    pub(crate) fn remove(&mut self, id: W::Id) -> Option<W> {
        let i = self.0.iter().rposition(|c| c.id() == id)?;
        Some(self.0.remove(i))
    }

    /// Caller `id` out of the list, the last listed moving into its place (the poller's
    /// waiters, which leave in O(1) as they always have).
    #[cfg(feature = "blocking")]
    pub(crate) fn swap_remove(&mut self, id: W::Id) -> Option<W> {
        let i = self.0.iter().position(|c| c.id() == id)?;
        Some(self.0.swap_remove(i))
    }

    /// Every caller, out of the list (the driver has ended: all are told).
    #[cfg(feature = "blocking")]
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, W> {
        self.0.drain(..)
    }
}

impl<W> IntoIterator for Callers<W> {
    type Item = W;
    type IntoIter = std::vec::IntoIter<W>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<W> Default for Callers<W> {
    fn default() -> Self {
        Callers(Vec::new())
    }
}

/// The client's own thread, once it runs: unparked when work is left to it.
#[derive(Debug, Default)]
pub(crate) struct DriverThread(OnceLock<Thread>);

impl DriverThread {
    /// Records `thread` as the client's thread; false if another is already.
    pub(crate) fn set(&self, thread: Thread) -> bool {
        self.0.set(thread).is_ok()
    }

    /// The client's thread, once it runs.
    #[cfg_attr(
        not(all(test, feature = "blocking")),
        expect(dead_code, reason = "the poller's tests ask which thread read")
    )]
    pub(crate) fn get(&self) -> Option<&Thread> {
        self.0.get()
    }

    /// Wakes the client's thread, if it runs.
    pub(crate) fn unpark(&self) {
        if let Some(t) = self.0.get() {
            t.unpark();
        }
    }
}

/// Who the driver's pending work was told to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Told {
    /// Nobody yet: the holder, or the client's thread once callers are quiet, takes it.
    #[default]
    Nobody,
    /// A caller (by id), which drives when its task is next polled.
    #[cfg_attr(
        not(feature = "async-io"),
        allow(
            dead_code,
            reason = "only the lease tells a caller: the poller hands the lease on"
        )
    )]
    Caller(u64),
    /// The client's thread: nobody else would see it (a wake-up left to the sleeping thread;
    /// a deadline of the poller's driver while nobody holds it). Taken at once.
    Thread,
}

/// What the client's thread sees when it looks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    /// Turns callers have taken so far (a count that only grows).
    pub(crate) turns: u64,
    /// Someone holds the driver.
    pub(crate) held: bool,
    /// The driver has work for whoever takes it next (the lease: a wake-up no poll has seen
    /// yet; the poller: always, since whoever holds it waits in its poller for the client).
    pub(crate) work: bool,
    /// Who that work was told to.
    pub(crate) told: Told,
    /// The thread is marked to sleep until it is woken.
    pub(crate) parked_long: bool,
}

/// What the client's thread does after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Take the driver.
    Drive,
    /// Look again after this long (at most).
    Wait(Duration),
    /// Sleep until woken.
    Park,
}

/// What the client's thread saw at its last look, and what it makes of what it sees now,
/// for a runtime whose callers are woken by `W`.
pub(crate) struct Ticks<W> {
    /// The turns counted at the last look (`None` before the first: a thread that starts
    /// the driver drives at its first look).
    turns: Option<u64>,
    /// Who the pending work was told to at the last look.
    told: Told,
    /// Looks in a row that found no turn and no work.
    idle: u32,
    /// How long to wait before the next look ([`TICK`] to [`MAX_TICK`]).
    pub(crate) wait: Duration,
    callers: PhantomData<fn() -> W>,
}

impl<W> Clone for Ticks<W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for Ticks<W> {}

impl<W> Default for Ticks<W> {
    fn default() -> Self {
        Ticks {
            turns: None,
            told: Told::Nobody,
            idle: 0,
            wait: TICK,
            callers: PhantomData,
        }
    }
}

impl<W: Rouse> Ticks<W> {
    /// For a thread that looked first when callers had taken `turns` turns (and does not
    /// drive at its first look for that alone).
    #[cfg(feature = "blocking")]
    pub(crate) fn after(turns: u64) -> Self {
        Ticks {
            turns: Some(turns),
            ..Ticks::default()
        }
    }

    /// What the thread does on seeing `v`:
    ///
    /// * it drives when the driver has work, nobody holds it, and that work is stale: its
    ///   own, or left to nobody while callers took no turn since the last look, or told to
    ///   a caller that has taken no turn for a whole look;
    /// * it sleeps until woken while a caller that holds the driver across its wait has
    ///   held it since the last look ([`Rouse::HOLDS_WHILE_WAITING`]), or once
    ///   [`IDLE_TICKS`] looks in a row found no turn and no work;
    /// * else it looks again after [`TICK`] if the callers were quiet, or a wait twice the
    ///   last ([`longer`]) if they took turns and left it nothing.
    pub(crate) fn decide(&mut self, v: &View) -> Look {
        let Some(seen) = self.turns else {
            self.turns = Some(v.turns);
            return Look::Drive;
        };
        let quiet = v.turns == seen;
        if W::HOLDS_WHILE_WAITING && v.held && quiet {
            // A caller has held the driver since the last look: it drives, deadlines
            // included, and its release wakes the thread.
            return Look::Park;
        }
        let stale = match v.told {
            Told::Thread => true,
            // Left to nobody: taken once callers have taken no turn for a look (while they
            // do, their next turn takes it).
            Told::Nobody => quiet,
            // Told to a caller that has taken no turn for a whole look.
            Told::Caller(_) => quiet && v.told == self.told,
        };
        let drive = v.work && !v.held && stale;
        self.idle = if quiet && !v.work { self.idle + 1 } else { 0 };
        // Callers took turns and left nothing: look again later. Anything else (quiet
        // callers, work to take): soon.
        self.wait = if quiet || drive {
            TICK
        } else {
            longer(self.wait)
        };
        self.turns = Some(v.turns);
        self.told = v.told;
        // Nobody at work: sleep until work is left to the thread.
        let park = v.parked_long || !drive && self.idle >= IDLE_TICKS;
        if park {
            self.idle = 0;
        }
        if drive {
            Look::Drive
        } else if park {
            Look::Park
        } else {
            Look::Wait(self.wait)
        }
    }

    /// The thread took a turn (`turns` counted after it).
    pub(crate) fn turned(&mut self, turns: u64) {
        self.turns = Some(turns);
        self.idle = 0;
        self.wait = TICK;
    }
}

#[cfg(all(test, feature = "blocking"))]
mod tests {
    //! The decisions of a thread whose callers hold the driver while they wait (the
    //! poller's); the lease's are tested with the lease (`async_io::lease`).
    use super::*;

    /// What the poller's thread sees: a free lease is always work; a due deadline is its own.
    fn poller(turns: u64, held: bool, due: bool) -> View {
        View {
            turns,
            held,
            work: true,
            told: if due { Told::Thread } else { Told::Nobody },
            parked_long: false,
        }
    }

    #[test]
    fn a_thread_whose_callers_hold_the_driver_sleeps_while_one_holds_it_and_drives_once_free() {
        let mut t = Ticks::<Thread>::after(0);
        // Free, and nobody took a turn since the thread started: it takes the lease.
        assert_eq!(t.decide(&poller(0, false, false)), Look::Drive);
        t.turned(0);
        // A caller took the lease and holds it across the next look: sleep until released.
        assert_eq!(t.decide(&poller(1, true, false)), Look::Wait(2 * TICK));
        assert_eq!(t.decide(&poller(1, true, false)), Look::Park);
        assert_eq!(
            t.decide(&poller(1, true, true)),
            Look::Park,
            "its deadlines too"
        );
        assert_eq!(t.wait, 2 * TICK, "a sleep leaves the wait as it was");
        // Released, nobody took it since: the thread takes it.
        assert_eq!(t.decide(&poller(1, false, false)), Look::Drive);
    }

    #[test]
    fn a_thread_whose_callers_hold_the_driver_looks_less_often_while_they_keep_taking_it() {
        let mut t = Ticks::<Thread>::after(0);
        let waits: Vec<Look> = (1..=4)
            .map(|turns| t.decide(&poller(turns, turns % 2 == 0, false)))
            .collect();
        assert_eq!(
            waits,
            [2 * TICK, 4 * TICK, MAX_TICK, MAX_TICK].map(Look::Wait),
            "held or free, a look that finds a new turn waits longer"
        );
        // A deadline due while the lease is free: taken at once, callers busy or not.
        assert_eq!(t.decide(&poller(5, false, true)), Look::Drive);
        assert_eq!(t.wait, TICK);
        // Never while someone holds it.
        assert_eq!(t.decide(&poller(6, true, true)), Look::Wait(2 * TICK));
    }

    #[test]
    #[cfg(feature = "async-io")]
    fn waiting_callers_are_told_the_last_first_and_leave_in_order_or_swapped() {
        /// A caller by number, which counts its wake-ups.
        #[derive(Debug)]
        struct Numbered(u32, std::sync::Arc<std::sync::atomic::AtomicU32>);

        impl Rouse for Numbered {
            type Id = u32;
            const HOLDS_WHILE_WAITING: bool = false;
            fn id(&self) -> u32 {
                self.0
            }
            fn rouse(self) {
                self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }

        let woken = std::sync::Arc::default();
        let mut callers = Callers::default();
        for n in 0..6 {
            callers.push(Numbered(n, std::sync::Arc::clone(&woken)));
        }
        let id = |c: Option<Numbered>| c.map(|c| c.0);
        assert_eq!(id(callers.pop()), Some(5), "the last listed first");
        // 0 1 2 3 4: 1 leaves, the others keep their order.
        assert_eq!(id(callers.remove(1)), Some(1));
        assert_eq!(id(callers.pop()), Some(4));
        // 0 2 3: 0 leaves, the last listed takes its place (3 2).
        assert_eq!(id(callers.swap_remove(0)), Some(0));
        assert_eq!(id(callers.pop()), Some(2));
        assert_eq!(id(callers.remove(7)), None);
        assert_eq!(callers.len(), 1);
        callers.drain().for_each(Rouse::rouse);
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(callers.is_empty());
    }
}
