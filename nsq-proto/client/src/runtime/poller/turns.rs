//! Who drives: the poller and the driver are a lease, held by a caller waiting in a
//! blocking call or by the client's driver thread, on the policy of
//! [`hold`](crate::runtime::hold) (its callers threads, which hold the lease while they wait).

use super::Poller;
use super::reactor::{CALLER, Drive, NOBODY, Reactor, THREAD};
use crate::runtime::hold::{Look, Rouse, TICK, Ticks, Told, View};
use crate::sync::lock;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

impl Reactor {
    /// Takes the lease for `holder`, if it is free.
    pub(super) fn take(&self, holder: u8) -> Option<Drive> {
        let drive = lock(&self.drive).take()?;
        self.holder.store(holder, Ordering::SeqCst);
        if holder == CALLER {
            self.sessions.fetch_add(1, Ordering::SeqCst);
        }
        Some(drive)
    }

    /// Puts the lease back, and passes it on ([`hand_on`](Self::hand_on)).
    pub(super) fn put_back(&self, drive: Drive) {
        let deadline = drive.next_timer.map_or(u64::MAX, |t| self.since_epoch(t));
        self.next_deadline.store(deadline, Ordering::SeqCst);
        *lock(&self.drive) = Some(drive);
        self.holder.store(NOBODY, Ordering::SeqCst);
        self.hand_on();
    }

    /// The lease is free: the next caller waiting for it is woken to take it; if none waits,
    /// the driver thread, if it waits for this release.
    fn hand_on(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            if let Some(next) = lock(&self.waiters).pop() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                next.rouse();
                return;
            }
        }
        if self.parked_long.swap(false, Ordering::SeqCst) {
            self.thread.unpark();
        }
    }

    /// The driver thread: drives the client whenever no caller does, and leaves the lease
    /// to callers while they keep taking it, on the policy of [`hold`](crate::runtime::hold)
    /// ([`Ticks::decide`]): it takes the lease once callers have left it alone for a look
    /// (2 ms, up to 16 ms while each look finds them at work), or when a deadline of the
    /// driver is due, and sleeps until woken while a caller has held it since its last look.
    pub(super) fn run_thread(self: &Arc<Self>) -> io::Result<()> {
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        let mut ticks = Ticks::<Thread>::after(self.sessions.load(Ordering::SeqCst));
        while !self.done.load(Ordering::SeqCst) {
            let sessions = self.sessions.load(Ordering::SeqCst);
            let free = self.holder.load(Ordering::SeqCst) == NOBODY;
            let deadline = self.next_deadline.load(Ordering::SeqCst);
            let now = self.since_epoch(Instant::now());
            let view = View {
                turns: sessions,
                held: !free,
                // A free lease is work: its holder waits in the poller for the client.
                work: true,
                // A deadline due while nobody holds the lease is the thread's to take.
                told: if deadline <= now {
                    Told::Thread
                } else {
                    Told::Nobody
                },
                // Its own mark, down while it looks.
                parked_long: false,
            };
            let seen = ticks;
            match ticks.decide(&view) {
                Look::Drive => {
                    let Some(mut drive) = self.take(THREAD) else {
                        // A caller took it first: as if this look had not been.
                        ticks = seen;
                        continue;
                    };
                    let driven = self.drive_as_thread(&mut drive, &mut cx);
                    self.put_back(drive);
                    driven?;
                    ticks.turned(self.sessions.load(Ordering::SeqCst));
                    if !self.done.load(Ordering::SeqCst) {
                        // A caller asked for the lease: leave it to callers for a while.
                        std::thread::park_timeout(TICK);
                    }
                }
                Look::Park => {
                    // A caller has held the lease since the last look (a long wait): it
                    // drives, deadlines included. Its release wakes this thread.
                    self.parked_long.store(true, Ordering::SeqCst);
                    if self.holder.load(Ordering::SeqCst) == CALLER
                        && self.sessions.load(Ordering::SeqCst) == sessions
                        && !self.done.load(Ordering::SeqCst)
                    {
                        std::thread::park();
                    }
                    self.parked_long.store(false, Ordering::SeqCst);
                }
                // Callers drive: look again after the wait (longer while they keep at it), or
                // at the driver's deadline if the lease is free.
                Look::Wait(wait) => {
                    let wait = if free && deadline != u64::MAX {
                        Duration::from_nanos(deadline.saturating_sub(now)).min(wait)
                    } else {
                        wait
                    };
                    std::thread::park_timeout(wait);
                }
            }
        }
        Ok(())
    }

    /// Drives as the driver thread until the driver completes or a caller asks for the lease.
    fn drive_as_thread(&self, drive: &mut Drive, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            self.poll_driver(drive, cx);
            if drive.driver.is_none() || self.handover.swap(false, Ordering::SeqCst) {
                return Ok(());
            }
            self.sleep(drive, drive.next_timer, || {
                self.handover.load(Ordering::SeqCst)
            })?;
        }
    }

    /// Drives as a caller until its future completes, its deadline passes or the driver
    /// ends.
    fn drive_for<F: Future + ?Sized>(
        &self,
        drive: &mut Drive,
        driver_cx: &mut Context<'_>,
        mut future: Pin<&mut F>,
        cx: &mut Context<'_>,
        deadline: Option<Instant>,
    ) -> io::Result<TurnEnd<F::Output>> {
        loop {
            self.poll_driver(drive, driver_cx);
            if let Poll::Ready(v) = future.as_mut().poll(cx) {
                return Ok(TurnEnd::Output(v));
            }
            if drive.driver.is_none() {
                return Ok(TurnEnd::Ended);
            }
            let until = match (drive.next_timer, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Ok(TurnEnd::Deadline);
            }
            self.sleep(drive, until, || false)?;
        }
    }

    /// A caller leaves without driving: the lease, which may have been handed to it, is
    /// handed on if it is free.
    fn pass_on(&self) {
        if (self.waiting.load(Ordering::SeqCst) > 0 || self.parked_long.load(Ordering::SeqCst))
            && self.holder.load(Ordering::SeqCst) == NOBODY
            && lock(&self.drive).is_some()
        {
            self.hand_on();
        }
    }

    /// The poller failed: the driver is dropped (whoever waits for it hears), and nobody
    /// drives any more.
    pub(super) fn fail(&self) {
        let driver = lock(&self.drive).as_mut().and_then(|d| d.driver.take());
        drop(driver);
        self.done.store(true, Ordering::SeqCst);
        for waiter in lock(&self.waiters).drain() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            waiter.rouse();
        }
    }
}

/// The waker of a caller's future while it waits in [`Poller::wait`]: unparks the caller,
/// and interrupts its wait in the poller while it drives.
struct CallerWaker {
    thread: Thread,
    reactor: Arc<Reactor>,
    driving: AtomicBool,
}

impl Wake for CallerWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.thread.unpark();
        if self.driving.load(Ordering::SeqCst) {
            self.reactor.wake_by_ref();
        }
    }
}

impl Poller {
    /// Runs `future` on the calling thread until it completes (`Some`) or `deadline` passes
    /// (`None`): how a blocking call of this poller's client waits. While the future is
    /// pending, the caller drives the client itself (polls the driver and waits in the
    /// poller) if no other thread does, so a call's round trip to nsqd wakes no other thread;
    /// otherwise it parks until its future is woken or the lease comes back to it. The
    /// driver thread takes the lease back once callers have left it alone for a moment
    /// (2 ms, up to 16 ms while they keep driving), or when one of the driver's deadlines is
    /// due.
    pub(crate) fn wait<F: Future + ?Sized>(
        &self,
        future: Pin<&mut F>,
        deadline: Option<Instant>,
    ) -> Option<F::Output> {
        let mut future = future;
        let r = &self.reactor;
        let me = Arc::new(CallerWaker {
            thread: std::thread::current(),
            reactor: r.clone(),
            driving: AtomicBool::new(false),
        });
        let waker = Waker::from(me.clone());
        let mut cx = Context::from_waker(&waker);
        let driver_waker = Waker::from(r.clone());
        let mut driver_cx = Context::from_waker(&driver_waker);
        loop {
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                r.pass_on();
                return Some(v);
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                r.pass_on();
                return None;
            }
            if !r.done.load(Ordering::SeqCst) {
                if let Some(drive) = r.take(CALLER) {
                    // Put back however the turn ends (a panic in `future` included).
                    let mut turn = Turn {
                        reactor: r,
                        drive: Some(drive),
                    };
                    let drive = turn.drive.as_mut().expect("just taken");
                    me.driving.store(true, Ordering::SeqCst);
                    let driven =
                        r.drive_for(drive, &mut driver_cx, future.as_mut(), &mut cx, deadline);
                    me.driving.store(false, Ordering::SeqCst);
                    drop(turn);
                    match driven {
                        Ok(TurnEnd::Output(v)) => return Some(v),
                        Ok(TurnEnd::Deadline) => return None,
                        Ok(TurnEnd::Ended) => continue,
                        Err(e) => {
                            r.in_span(|| tracing::error!(error = %e, "the client's poller failed"));
                            r.fail();
                            continue;
                        }
                    }
                }
                // Someone else drives: wait for the lease (asking the driver thread for it)
                // or for the future, whichever comes first.
                let id = std::thread::current().id();
                r.waiting.fetch_add(1, Ordering::SeqCst);
                lock(&r.waiters).push(std::thread::current());
                if r.holder.load(Ordering::SeqCst) == THREAD {
                    r.handover.store(true, Ordering::SeqCst);
                    r.wake_by_ref();
                }
                // The lease may have come back before this caller was listed.
                let free = lock(&r.drive).is_some();
                if !free {
                    park_until(deadline);
                }
                if lock(&r.waiters).swap_remove(id).is_some() {
                    r.waiting.fetch_sub(1, Ordering::SeqCst);
                }
                continue;
            }
            // Nobody drives any more: the future is resolved by others, if at all.
            park_until(deadline);
        }
    }
}

/// Parks this thread until it is unparked or `deadline` passes.
fn park_until(deadline: Option<Instant>) {
    match deadline {
        None => std::thread::park(),
        Some(d) => std::thread::park_timeout(d.saturating_duration_since(Instant::now())),
    }
}

/// A caller's turn at driving: the lease it took, put back when dropped.
struct Turn<'a> {
    reactor: &'a Reactor,
    drive: Option<Drive>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(drive) = self.drive.take() {
            self.reactor.put_back(drive);
        }
    }
}

/// How a caller's turn at driving ended.
enum TurnEnd<T> {
    /// Its future completed.
    Output(T),
    /// Its deadline passed.
    Deadline,
    /// The driver completed (or failed) first: nothing is left to drive.
    Ended,
}
