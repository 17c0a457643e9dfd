//! Callers drive: a client whose driver is polled by the tasks that wait for it, with a
//! thread of its own for when none does (`nsq-async-std`'s default mode).
//!
//! A driver on a thread of its own costs two thread hops per round trip: the task that
//! publishes wakes the driver's thread (the command), and the driver's thread wakes the task
//! (the reply). With a [`Lease`], the task that awaits a publish's result or the next message
//! polls the driver itself, on its own executor's thread: its command is written in its own
//! poll, the sockets' readiness (async-io's reactor, which the executor's thread runs) wakes
//! that task, and it reads the reply itself. The lease's thread ([`Lease::run`]) drives only
//! what no caller does.
//!
//! The driver is one future, polled by one holder at a time (the lease), always with the
//! lease's waker. A wake-up of the driver (a socket, the timer, a command) is:
//!
//! * kept for the holder while someone polls it (they poll it again);
//! * else told to the caller that registered last (once: it registers again when it next
//!   waits), which polls the driver when its executor polls it;
//! * else left for the lease's thread, which takes it on the policy of
//!   [`hold`](crate::runtime::hold): it looks every 2 ms while callers are at work (so a
//!   caller that is told and does not come back, its task busy with something else, delays
//!   its client by a tick or two, not forever), less often while every look finds that
//!   callers took turns and left it nothing (up to 16 ms), and sleeps until it is woken once
//!   they have left the client alone for eight looks.
//!
//! Through the client layer's general hook ([`Waiter`]): each async call of a
//! client waits through a [`Caller`] of the client's lease.

use crate::runtime::hold::{Callers, DriverThread, Look, Rouse, Ticks, Told, View};
use crate::runtime::{BoxFuture, Waiter};
use crate::sync::lock;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// How many times one turn polls the driver while wake-ups keep arriving during its polls.
const POLLS_PER_TURN: usize = 4;

/// One client's lease: its driver, who drives it, and who is told when it has work. Cheap to
/// clone (an `Arc`). An adapter makes one per client, runs [`run`](Self::run) on a thread of
/// the client's own with the driver, and returns the lease from
/// its calls' [`Caller`]s from [`Runtime::waiter`](crate::Runtime::waiter), so that the
/// client's calls drive while they wait.
#[derive(Clone)]
pub(crate) struct Lease(Arc<Leased>);

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = lock(&self.0.state);
        f.debug_struct("Lease")
            .field("holding", &s.holding)
            .field("callers", &s.callers.len())
            .field("done", &s.done)
            .finish_non_exhaustive()
    }
}

struct Leased {
    /// The driver, from [`Lease::run`] until it completes; locked by the holder only.
    driver: Mutex<Option<BoxFuture<()>>>,
    state: Mutex<State>,
    /// The lease's thread, once it runs.
    thread: DriverThread,
}

#[derive(Default)]
struct State {
    /// Someone polls the driver, or is about to ([`Leased::hold`]).
    holding: bool,
    /// A wake-up arrived that no poll of the driver has seen yet.
    woken: bool,
    /// Who `woken` was told to.
    told: Told,
    /// Callers waiting for the client, each told of at most one wake-up: the last first.
    callers: Callers<Waiting>,
    next_id: u64,
    /// Turns taken so far (the thread's sign of callers at work).
    turns: u64,
    /// The lease's thread sleeps until it is unparked (it does not tick).
    parked_long: bool,
    /// The driver has completed.
    done: bool,
}

/// A caller in the list of those waiting.
struct Waiting {
    id: u64,
    waker: Waker,
    /// Whether it is in the list (its [`Caller`] skips the lock while it is, with the same
    /// waker).
    listed: Arc<AtomicBool>,
}

impl Waiting {
    /// Out of the list: its waker.
    fn unlist(self) -> Waker {
        self.listed.store(false, Ordering::SeqCst);
        self.waker
    }
}

/// A task that waits: woken through its waker, it is polled when its executor gets to it,
/// and it gives the driver back after each turn.
impl Rouse for Waiting {
    type Id = u64;
    const HOLDS_WHILE_WAITING: bool = false;

    fn id(&self) -> u64 {
        self.id
    }

    fn rouse(self) {
        self.unlist().wake();
    }
}

/// What a wake-up asks for, done once the state's lock is released.
enum Tell {
    /// Wake this caller, and unpark the lease's thread (so that it ticks) if it sleeps.
    Caller(Waker, bool),
    /// Unpark the lease's thread.
    Thread,
    Nothing,
}

impl State {
    /// Tells the pending wake-up to the last caller that waits, else leaves it to the lease's
    /// thread (unparking it if it sleeps; a ticking thread sees it at its next tick).
    fn tell(&mut self) -> Tell {
        match self.callers.pop() {
            Some(caller) => {
                self.told = Told::Caller(caller.id);
                Tell::Caller(caller.unlist(), std::mem::take(&mut self.parked_long))
            }
            None if self.parked_long => {
                self.parked_long = false;
                self.told = Told::Thread;
                Tell::Thread
            }
            None => Tell::Nothing,
        }
    }
}

impl Leased {
    fn act(&self, tell: Tell) {
        match tell {
            Tell::Caller(waker, unpark) => {
                waker.wake();
                if unpark {
                    self.thread.unpark();
                }
            }
            Tell::Thread => self.thread.unpark(),
            Tell::Nothing => {}
        }
    }
}

/// The driver's waker.
impl Wake for Leased {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let tell = {
            let mut s = lock(&self.state);
            if s.done || s.woken && !s.holding {
                return; // told already, or left for the thread's tick
            }
            s.woken = true;
            if s.holding {
                return; // the holder polls again
            }
            s.tell()
        };
        self.act(tell);
    }
}

/// What a turn at the lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// The driver was polled.
    Polled,
    /// Someone else holds the lease: what wakes the driver meanwhile is theirs.
    Busy,
    /// Nothing woke the driver since its last poll: not polled.
    Idle,
    /// The driver has completed.
    Done,
}

impl Leased {
    /// Takes the lease if it is free (and, `if_woken`, only if the driver was woken since
    /// it was last polled: else there is nothing for a turn to do, every source wakes it).
    fn take(&self, if_woken: bool) -> Turn {
        let mut s = lock(&self.state);
        if s.done {
            Turn::Done
        } else if s.holding {
            Turn::Busy
        } else if if_woken && !s.woken {
            Turn::Idle
        } else {
            s.holding = true;
            Turn::Polled
        }
    }

    /// Takes the lease for a caller about to hand its client a command ([`Caller`]'s
    /// `hold`).
    fn hold(self: &Arc<Self>) -> Option<Held> {
        (self.take(false) == Turn::Polled).then(|| Held(Some(self.clone())))
    }

    /// A turn, if the lease is free and the driver has something to do.
    fn turn(self: &Arc<Self>) -> Turn {
        match self.take(true) {
            Turn::Polled => self.turn_held(),
            other => other,
        }
    }

    /// Polls the driver (the lease held) until no wake-up arrives during a poll, at most
    /// [`POLLS_PER_TURN`] times, then gives the lease back.
    fn turn_held(self: &Arc<Self>) -> Turn {
        let mut slot = lock(&self.driver);
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        for _ in 0..POLLS_PER_TURN {
            {
                let mut s = lock(&self.state);
                s.woken = false;
                s.told = Told::Nobody;
                s.turns += 1;
            }
            let completed = match slot.as_mut() {
                Some(driver) => driver.as_mut().poll(&mut cx).is_ready(),
                None => true,
            };
            if completed {
                *slot = None;
                drop(slot);
                self.complete();
                return Turn::Done;
            }
            let mut s = lock(&self.state);
            if !s.woken {
                s.holding = false;
                return Turn::Polled;
            }
        }
        // Still woken after the turn's polls: told to the next holder.
        drop(slot);
        self.release();
        Turn::Polled
    }

    /// Gives the lease back; a wake-up kept meanwhile is told.
    fn release(&self) {
        let tell = {
            let mut s = lock(&self.state);
            s.holding = false;
            if s.woken && s.told == Told::Nobody && !s.done {
                s.tell()
            } else {
                Tell::Nothing
            }
        };
        self.act(tell);
    }

    /// The driver completed: everyone who waits is told.
    fn complete(&self) {
        let callers = {
            let mut s = lock(&self.state);
            s.done = true;
            s.holding = false;
            std::mem::take(&mut s.callers)
        };
        callers.into_iter().for_each(Rouse::rouse);
        self.thread.unpark();
    }

    /// Lists caller `id` (a new one if `None`, with its `listed` flag) with `waker`, as the
    /// next to be told; returns whether other callers wait too.
    fn wait(&self, id: &mut Option<(u64, Arc<AtomicBool>)>, waker: &Waker) -> bool {
        let mut s = lock(&self.state);
        if s.done {
            return false;
        }
        let (me, listed) = id.get_or_insert_with(|| {
            s.next_id += 1;
            (s.next_id, Arc::new(AtomicBool::new(false)))
        });
        let me = *me;
        if listed.swap(true, Ordering::SeqCst) {
            // Listed already (its waker changed): moved to the end with the new one (the old
            // entry, which shares the flag, is dropped as it is).
            drop(s.callers.remove(me));
        }
        s.callers.push(Waiting {
            id: me,
            waker: waker.clone(),
            listed: listed.clone(),
        });
        s.callers.len() > 1
    }

    /// Caller `id` waits no more; a wake-up it was told and did not act on is told again.
    fn leave(&self, id: u64) {
        let tell = {
            let mut s = lock(&self.state);
            if let Some(caller) = s.callers.remove(id) {
                caller.unlist();
            }
            if s.told == Told::Caller(id) && s.woken && !s.holding && !s.done {
                s.told = Told::Nobody;
                s.tell()
            } else {
                Tell::Nothing
            }
        };
        self.act(tell);
    }

    /// The lease's thread: drives what no caller does, looking every
    /// [`TICK`](crate::runtime::hold::TICK) to [`MAX_TICK`](crate::runtime::hold::MAX_TICK)
    /// while callers are at work, and sleeping until woken once they have left
    /// the client alone.
    fn run(self: &Arc<Self>) {
        let mut ticks = Ticks::default();
        loop {
            let (drive, long) = {
                let mut s = lock(&self.state);
                if s.done {
                    return;
                }
                let drive = ticks.look(&mut s);
                (drive, s.parked_long)
            };
            if drive {
                if self.turn() == Turn::Done {
                    return;
                }
                ticks.turned(lock(&self.state).turns);
                continue;
            }
            if long {
                std::thread::park();
            } else {
                std::thread::park_timeout(ticks.wait);
            }
        }
    }
}

impl State {
    /// What the lease's thread sees: the turns taken, and a wake-up no poll has seen yet as
    /// its work.
    fn view(&self) -> View {
        View {
            turns: self.turns,
            held: self.holding,
            work: self.woken,
            told: self.told,
            parked_long: self.parked_long,
        }
    }
}

/// The lease's thread's looks ([`Ticks::decide`], the policy) over the lease's state.
impl Ticks<Waiting> {
    /// Whether the thread should drive now. When it should not, and nothing has happened
    /// for [`IDLE_TICKS`](crate::runtime::hold::IDLE_TICKS) looks, the state is marked for
    /// the thread to sleep until woken (a wake-up's [`tell`](State::tell) unparks it).
    fn look(&mut self, s: &mut State) -> bool {
        match self.decide(&s.view()) {
            Look::Drive => true,
            Look::Park => {
                s.parked_long = true;
                false
            }
            Look::Wait(_) => false,
        }
    }
}

impl Lease {
    /// A lease with no driver yet.
    pub(crate) fn new() -> Lease {
        Lease(Arc::new(Leased {
            driver: Mutex::new(None),
            state: Mutex::new(State::default()),
            thread: DriverThread::default(),
        }))
    }

    /// Takes `driver`, to be run by [`run`](Self::run) and by the client's calls. A lease
    /// takes one driver: given another, it gives it back.
    pub(crate) fn start(&self, driver: BoxFuture<()>) -> Result<(), BoxFuture<()>> {
        let mut slot = lock(&self.0.driver);
        if slot.is_some() || lock(&self.0.state).done {
            return Err(driver);
        }
        *slot = Some(driver);
        // Its first poll is due.
        lock(&self.0.state).woken = true;
        Ok(())
    }

    /// The lease's thread (a thread of the client's own): drives the driver given to
    /// [`start`](Self::start) until it completes, whenever no call of the client does.
    pub(crate) fn run(&self) {
        if !self.0.thread.set(std::thread::current()) {
            return; // another thread runs it
        }
        self.0.run();
    }

    /// Takes the lease for a caller about to hand its client a command, so the wake-up the
    /// command makes is kept for the caller's own poll instead of waking another thread.
    #[cfg(test)]
    fn hold(&self) -> Option<Held> {
        Leased::hold(&self.0)
    }
}

impl Default for Lease {
    fn default() -> Self {
        Lease::new()
    }
}

/// The lease taken by [`Leased::hold`]: the first poll of its [`Caller`] uses it; dropped
/// unused, it is given back.
struct Held(Option<Arc<Leased>>);

impl Held {
    /// Polls the driver with the lease held.
    fn turn(mut self) -> Turn {
        match self.0.take() {
            Some(shared) => shared.turn_held(),
            None => Turn::Busy,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.release();
        }
    }
}

/// One async call's wait for its client ([`Waiter`]): drives the client while
/// what it waits for is pending, when the client has a lease. Dropped, it waits no more.
#[derive(Default)]
pub(crate) struct Caller {
    lease: Option<Arc<Leased>>,
    /// The lease taken before the call sent its command ([`Leased::hold`]), for its first poll.
    held: Option<Held>,
    /// Its id and whether it is listed, once it has waited.
    id: Option<(u64, Arc<AtomicBool>)>,
    /// The waker it was listed with.
    waker: Option<Waker>,
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caller")
            .field("lease", &self.lease.is_some())
            .finish_non_exhaustive()
    }
}

impl Waiter for Caller {
    fn hold(&mut self) {
        if self.held.is_none() {
            self.held = self.lease.as_ref().and_then(Leased::hold);
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        ready: &mut dyn FnMut(&mut Context<'_>) -> bool,
    ) -> bool {
        let held = self.held.take();
        self.poll_with(held, cx, |cx| {
            if ready(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .is_ready()
    }
}

impl Caller {
    /// A caller of the client of `lease` (none: polling never drives).
    pub(crate) fn new(lease: Option<&Lease>) -> Caller {
        Caller {
            lease: lease.map(|l| l.0.clone()),
            held: None,
            id: None,
            waker: None,
        }
    }

    /// Polls `f`; while it is pending, registers to be told of the driver's wake-ups, takes a
    /// turn at the lease (with `held`, the lease the caller took before sending its command,
    /// [`Leased::hold`]), and polls `f` once more.
    ///
    /// A caller that holds the lease while other callers wait does not poll the driver yet:
    /// it gives the lease back and is told (woken) at once, so that its executor polls the
    /// other tasks first and what they send leaves with its command, in one write.
    fn poll_with<T>(
        &mut self,
        held: Option<Held>,
        cx: &mut Context<'_>,
        mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let Some(lease) = &self.lease else {
            // No lease (no `held` either): the driver's own task or thread wakes `f`.
            drop(held);
            return f(cx);
        };
        if held.is_none() {
            if let Poll::Ready(v) = f(cx) {
                self.leave();
                return Poll::Ready(v);
            }
        }
        // Listed already with this waker (a handle polled again among many): no lock.
        let listed = self
            .id
            .as_ref()
            .is_some_and(|(_, l)| l.load(Ordering::SeqCst))
            && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        let others = !listed && lease.wait(&mut self.id, cx.waker());
        if !listed {
            self.waker = Some(cx.waker().clone());
        }
        match held {
            // Given back: the command's wake-up is told to the last caller, this one.
            Some(held) if others => drop(held),
            Some(held) => drop(held.turn()),
            None => drop(lease.turn()),
        }
        // Polled after the turn (and always: its own waker is registered here).
        let polled = f(cx);
        if polled.is_ready() {
            self.leave();
        }
        polled
    }

    fn leave(&mut self) {
        if let (Some(lease), Some((id, _))) = (&self.lease, self.id.take()) {
            lease.leave(id);
        }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    //! The lease's rules, with a driver that counts its polls and wakers that count their
    //! wake-ups; the thread's decisions through [`Ticks`] (no thread, no clock).
    use super::*;
    use crate::runtime::hold::{IDLE_TICKS, MAX_TICK, TICK};
    use std::sync::atomic::AtomicUsize as Counter;

    /// How many times its waker was woken (`.0`).
    struct Count(Counter);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A counting waker, and its count.
    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(Counter::new(0)));
        (count.clone(), Waker::from(count))
    }
    use std::sync::atomic::AtomicUsize;

    fn wakes(c: &Count) -> usize {
        c.0.load(Ordering::SeqCst)
    }

    /// A driver that counts its polls, keeps its waker (as a socket would), wakes itself on
    /// its first poll when asked (a look-again), and completes once told to.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        waker: Mutex<Option<Waker>>,
        wake_self_once: AtomicBool,
        complete: AtomicBool,
    }

    impl Probe {
        fn driver(self: &Arc<Self>) -> BoxFuture<()> {
            let probe = self.clone();
            Box::pin(std::future::poll_fn(move |cx| {
                probe.polls.fetch_add(1, Ordering::SeqCst);
                *lock(&probe.waker) = Some(cx.waker().clone());
                if probe.complete.load(Ordering::SeqCst) {
                    return Poll::Ready(());
                }
                if probe.wake_self_once.swap(false, Ordering::SeqCst) {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }))
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::SeqCst)
        }

        /// A socket's (or the inbox's) wake-up of the driver.
        fn fire(&self) {
            if let Some(w) = lock(&self.waker).clone() {
                w.wake();
            }
        }
    }

    fn started() -> (Lease, Arc<Probe>) {
        let lease = Lease::new();
        let probe = Arc::new(Probe::default());
        assert!(lease.start(probe.driver()).is_ok());
        assert!(lease.start(probe.driver()).is_err(), "one driver per lease");
        // The first turn, as the lease's thread takes it: the driver registers its waker.
        assert_eq!(lease.0.turn(), Turn::Polled);
        (lease, probe)
    }

    /// Two callers of `lease`, each with a counting waker.
    fn two_callers(lease: &Lease) -> [(Caller, Arc<Count>, Waker); 2] {
        [(), ()].map(|()| {
            let (count, waker) = counting();
            (Caller::new(Some(lease)), count, waker)
        })
    }

    /// Polls `caller` for a result that is not there.
    fn wait(caller: &mut Caller, held: Option<Held>, waker: &Waker) {
        let mut cx = Context::from_waker(waker);
        assert!(
            caller
                .poll_with(held, &mut cx, |_| Poll::<()>::Pending)
                .is_pending()
        );
    }

    /// Polls `caller` for a result that is there.
    fn done(caller: &mut Caller, waker: &Waker) {
        let mut cx = Context::from_waker(waker);
        assert!(
            caller
                .poll_with(None, &mut cx, |_| Poll::Ready(()))
                .is_ready()
        );
    }

    #[test]
    fn a_caller_holding_the_lease_writes_its_command_in_its_own_turn() {
        let (lease, probe) = started();
        let mut me = Caller::new(Some(&lease));
        let (count, waker) = counting();
        let held = lease.hold().expect("free");
        probe.fire(); // the command's wake-up: kept for the holder
        assert_eq!(wakes(&count), 0);
        wait(&mut me, Some(held), &waker);
        assert_eq!(probe.polls(), 2, "polled in the caller's own turn");
        assert_eq!(wakes(&count), 0, "nobody woken");
        // The reply's wake-up comes to this caller, which takes its turn when polled.
        probe.fire();
        assert_eq!(wakes(&count), 1);
        done(&mut me, &waker);
        assert_eq!(probe.polls(), 2, "the result was there: no turn");
        let s = lock(&lease.0.state);
        assert!(s.callers.is_empty() && !s.holding);
    }

    #[test]
    fn a_wake_up_is_told_to_the_last_caller_once_and_passed_on_if_it_leaves() {
        let (lease, probe) = started();
        let [(mut a, ca, wa), (mut b, cb, wb)] = two_callers(&lease);
        let (a, b) = (&mut a, &mut b);
        wait(a, None, &wa);
        wait(b, None, &wb);
        assert_eq!(
            probe.polls(),
            1,
            "nothing woke the driver: no turn polls it"
        );
        probe.fire();
        probe.fire(); // a second wake-up before b polls: one tell is enough
        assert_eq!((wakes(&ca), wakes(&cb)), (0, 1));
        // b's result came meanwhile: it leaves without a turn, and the wake-up goes to a.
        done(b, &wb);
        assert_eq!((wakes(&ca), wakes(&cb)), (1, 1));
        wait(a, None, &wa);
        assert_eq!(probe.polls(), 2, "a took the turn");
        assert!(!lock(&lease.0.state).woken);
    }

    #[test]
    fn a_caller_polled_again_is_listed_once() {
        let (lease, probe) = started();
        let [(mut a, ca, wa), (mut b, cb, wb)] = two_callers(&lease);
        let (a, b) = (&mut a, &mut b);
        wait(a, None, &wa);
        wait(b, None, &wb);
        wait(a, None, &wa); // polled again, same waker: stays where it is
        assert_eq!(lock(&lease.0.state).callers.len(), 2);
        probe.fire();
        assert_eq!(
            (wakes(&ca), wakes(&cb)),
            (0, 1),
            "b is still the last listed"
        );
        // Told, b is off the list; polled again it is listed anew.
        wait(b, None, &wb);
        assert_eq!(lock(&lease.0.state).callers.len(), 2);
    }

    #[test]
    fn a_holder_among_waiting_callers_lets_them_send_first() {
        let (lease, probe) = started();
        let [(mut a, ca, wa), (mut c, cc, wc)] = two_callers(&lease);
        let (a, c) = (&mut a, &mut c);
        wait(a, None, &wa);
        let polls = probe.polls();
        let held = lease.hold().expect("free");
        probe.fire(); // c's command
        wait(c, Some(held), &wc);
        assert_eq!(probe.polls(), polls, "no turn while another caller waits");
        assert_eq!(
            (wakes(&ca), wakes(&cc)),
            (0, 1),
            "c is told: it turns when polled again"
        );
        wait(c, None, &wc);
        assert_eq!(probe.polls(), polls + 1);
    }

    #[test]
    fn wake_ups_during_a_turn_are_kept_for_the_holder() {
        let (lease, probe) = started();
        let mut me = Caller::new(Some(&lease));
        let (count, waker) = counting();
        probe.wake_self_once.store(true, Ordering::SeqCst);
        let held = lease.hold().expect("free");
        probe.fire();
        wait(&mut me, Some(held), &waker);
        assert_eq!(probe.polls(), 3, "polled again in the same turn");
        assert_eq!(wakes(&count), 0);
    }

    #[test]
    fn a_held_lease_dropped_unused_tells_its_wake_up() {
        let (lease, probe) = started();
        let mut a = Caller::new(Some(&lease));
        let (ca, wa) = counting();
        wait(&mut a, None, &wa);
        let held = lease.hold().expect("free");
        probe.fire();
        assert_eq!(wakes(&ca), 0, "kept while held");
        drop(held); // the publish failed before it was sent
        assert_eq!(wakes(&ca), 1);
    }

    #[test]
    fn completion_wakes_every_caller() {
        let (lease, probe) = started();
        let [(mut a, ca, wa), (mut b, cb, wb)] = two_callers(&lease);
        let (a, b) = (&mut a, &mut b);
        wait(a, None, &wa);
        probe.complete.store(true, Ordering::SeqCst);
        let held = lease.hold().expect("free");
        probe.fire();
        assert_eq!(held.turn(), Turn::Done, "this turn completes the driver");
        wait(b, None, &wb);
        // a, waiting, hears (its result is Closed by then); b, after the end, is not listed.
        assert_eq!((wakes(&ca), wakes(&cb)), (1, 0));
        assert_eq!(lease.0.turn(), Turn::Done);
        assert!(lease.hold().is_none());
        assert!(lock(&lease.0.driver).is_none(), "the driver is dropped");
    }

    #[test]
    fn the_thread_starts_the_driver_then_takes_only_what_callers_leave() {
        let mut s = State::default();
        let mut t = Ticks::default();
        assert!(t.look(&mut s), "the first look starts the driver");
        t.turned(s.turns);
        // A wake-up left for the thread while callers take turns: theirs to take.
        s.woken = true;
        s.turns += 1;
        assert!(!t.look(&mut s));
        // A tick without a turn: the thread takes it.
        assert!(t.look(&mut s));
        // Told to a caller: taken only after a whole tick in which nobody turned.
        s.told = Told::Caller(7);
        assert!(!t.look(&mut s), "told since the last look");
        assert!(t.look(&mut s), "still not acted on a tick later");
        // Told to the thread itself: at once.
        s.told = Told::Thread;
        assert!(t.look(&mut s));
        // While someone holds the lease, never.
        s.holding = true;
        assert!(!t.look(&mut s));
    }

    #[test]
    fn the_thread_looks_less_often_while_callers_take_turns_and_soon_after_they_stop() {
        let mut s = State::default();
        let mut t = Ticks::default();
        assert!(t.look(&mut s));
        t.turned(s.turns);
        assert_eq!(t.wait, TICK);
        // Callers take turns between looks, their wake-ups told to them: 4, 8, 16, 16 ms.
        let mut waits = Vec::new();
        for id in 0..4 {
            s.turns += 1;
            s.woken = true;
            s.told = Told::Caller(id);
            assert!(!t.look(&mut s));
            waits.push(t.wait);
        }
        assert_eq!(waits, [2 * TICK, 4 * TICK, MAX_TICK, MAX_TICK]);
        // They stop, a wake-up told to the last of them before the last look: the next
        // look takes it.
        assert!(t.look(&mut s), "told a whole wait ago, still not acted on");
        assert_eq!(t.wait, TICK);
        t.turned(s.turns);
        // Told, with no turn since the last look: looked at again a tick later, and taken
        // then.
        s.told = Told::Caller(9);
        assert!(!t.look(&mut s), "told since the last look");
        assert_eq!(t.wait, TICK);
        assert!(t.look(&mut s));
        t.turned(s.turns);
        // Busy again, then a look that finds work left to the thread.
        s.turns += 1;
        s.woken = false;
        assert!(!t.look(&mut s));
        assert_eq!(t.wait, 2 * TICK);
        s.turns += 1;
        s.woken = true;
        s.told = Told::Thread;
        assert!(t.look(&mut s));
        assert_eq!(t.wait, TICK);
    }

    #[test]
    fn the_thread_sleeps_once_callers_leave_the_client_alone_and_is_woken_then() {
        let mut s = State::default();
        let mut t = Ticks::default();
        assert!(t.look(&mut s));
        t.turned(s.turns);
        for _ in 1..IDLE_TICKS {
            assert!(!t.look(&mut s));
            assert!(!s.parked_long);
        }
        assert!(!t.look(&mut s));
        assert!(s.parked_long, "idle: sleeps until woken");
        // A wake-up with no caller waiting now unparks the thread.
        s.woken = true;
        assert!(matches!(s.tell(), Tell::Thread));
        assert!(!s.parked_long && s.told == Told::Thread);
        // And one told to a caller also sets it ticking (to take over if the caller does not).
        s.parked_long = true;
        let (_, waker) = counting();
        s.callers.push(Waiting {
            id: 1,
            waker,
            listed: Arc::new(AtomicBool::new(true)),
        });
        assert!(matches!(s.tell(), Tell::Caller(_, true)));
    }
}
