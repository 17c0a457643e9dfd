//! A client's IO over a poller of its own, for runtimes that have no reactor to lend
//! (`nsq-blocking`): a
//! [`Poller`] per client over the client's non-blocking sockets ([`Socket`]), with the
//! driver's [`PollerTimer`] as the wait's deadline. Other threads wake whoever waits in it
//! through the poller, once per batch of commands and only when it waits.
//!
//! Who drives: the poller and the driver are a lease. A blocking call that waits
//! ([`Poller::wait`]) takes it when it is free and drives the client on its own thread until
//! its own future is ready, so a call's round trip to nsqd wakes no other thread. The
//! driver thread ([`Poller::spawn`]) drives whenever no caller does: it takes the lease once
//! callers have left it alone for 2 ms (up to 16 ms after a run of looks that each found
//! them at work), or when a deadline of the driver is due, and gives it back to the first
//! caller that asks. Callers that wait at once take turns; each release wakes the next.
//!
//! The poller is mio's (epoll, kqueue or IOCP). Sockets are registered once, edge-triggered,
//! for both directions; what the events said is kept per socket, so a socket with nothing to
//! read is not read (no `recv` that returns `EAGAIN`) and no registration is re-armed per
//! wait.

#![allow(
    clippy::disallowed_methods,
    reason = "a runtime: its clock, sockets and threads are what the rest of the client layer may not touch"
)]

mod blocking;

pub use blocking::Blocking;

use crate::dial::{connect_from, resolve};
use crate::runtime::hold::{Callers, DriverThread, Look, Rouse, TICK, Ticks, Told, View};
use crate::runtime::{BoxFuture, SocketOptions};
use crate::sync::lock;
use bytes::{Bytes, BytesMut};
use mio::net::TcpStream;
use mio::{Events, Interest, Registry, Token};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;
use std::time::Instant;

/// Bytes zeroed per read buffer (std's `Read` wants initialised memory); a read never offers
/// less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;
/// The token of the poller's waker (sockets count up from 1).
const WAKER: Token = Token(0);

// ----------------------------------------------------------------------------------- reactor

/// What a socket's readiness events said since its last read or write would have blocked.
#[derive(Debug, Default)]
struct Readiness(AtomicU8);

const READABLE: u8 = 1;
const WRITABLE: u8 = 2;

impl Readiness {
    fn is(&self, bit: u8) -> bool {
        self.0.load(Ordering::Relaxed) & bit != 0
    }

    fn set(&self, bits: u8) {
        self.0.fetch_or(bits, Ordering::Relaxed);
    }

    fn clear(&self, bit: u8) {
        self.0.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// One client's poller, shared by whoever drives the client (its driver thread, or a caller
/// waiting in a blocking call: see [`Poller::wait`]), its sockets (which register with it) and
/// every waker of the driver (which interrupt the wait).
#[derive(Debug)]
struct Reactor {
    /// The poller and the driver, out of the mutex while someone drives (the lease).
    drive: Mutex<Option<Drive>>,
    registry: Registry,
    waker: mio::Waker,
    /// The driver was woken since it last looked (set by wakers, cleared before a poll).
    notified: AtomicBool,
    /// Whoever drives waits in the poller, or is about to: a waker must interrupt it.
    sleeping: AtomicBool,
    /// Each registered socket's readiness, by token.
    sockets: Mutex<HashMap<Token, Arc<Readiness>>>,
    next_token: AtomicUsize,
    /// Who holds the lease: [`NOBODY`], [`THREAD`] or [`CALLER`].
    holder: AtomicU8,
    /// How many times a caller took the lease (the driver thread's sign of callers at work).
    sessions: AtomicU64,
    /// A caller waits for the driver thread to put the lease back.
    handover: AtomicBool,
    /// Callers waiting for the lease (each is unparked in turn when it comes back).
    waiters: Mutex<Callers<Thread>>,
    waiting: AtomicUsize,
    /// The driver thread, once started; and whether it parks until a caller's release.
    thread: DriverThread,
    parked_long: AtomicBool,
    /// The driver has completed: nobody needs to drive any more.
    done: AtomicBool,
    /// The earliest deadline of the driver when the lease was last put back (nanoseconds
    /// since `epoch`; `u64::MAX`: none), for the driver thread's wait.
    next_deadline: AtomicU64,
    epoch: Instant,
}

/// The lease: what whoever drives the client holds.
struct Drive {
    poll: mio::Poll,
    events: Events,
    /// The driver, from [`Poller::spawn`] until it completes.
    driver: Option<BoxFuture<()>>,
    /// The deadline of the timer the driver polled pending in its last poll.
    next_timer: Option<Instant>,
}

impl fmt::Debug for Drive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive")
            .field("driver", &self.driver.is_some())
            .field("next_timer", &self.next_timer)
            .finish_non_exhaustive()
    }
}

const NOBODY: u8 = 0;
const THREAD: u8 = 1;
const CALLER: u8 = 2;

impl Reactor {
    fn new() -> io::Result<Reactor> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = mio::Waker::new(&registry, WAKER)?;
        Ok(Reactor {
            drive: Mutex::new(Some(Drive {
                poll,
                events: Events::with_capacity(256),
                driver: None,
                next_timer: None,
            })),
            registry,
            waker,
            notified: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            sockets: Mutex::new(HashMap::new()),
            next_token: AtomicUsize::new(WAKER.0 + 1),
            holder: AtomicU8::new(NOBODY),
            sessions: AtomicU64::new(0),
            handover: AtomicBool::new(false),
            waiters: Mutex::new(Callers::default()),
            waiting: AtomicUsize::new(0),
            thread: DriverThread::default(),
            parked_long: AtomicBool::new(false),
            done: AtomicBool::new(false),
            next_deadline: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        })
    }

    /// Takes the lease for `holder`, if it is free.
    fn take(&self, holder: u8) -> Option<Drive> {
        let drive = lock(&self.drive).take()?;
        self.holder.store(holder, Ordering::SeqCst);
        if holder == CALLER {
            self.sessions.fetch_add(1, Ordering::SeqCst);
        }
        Some(drive)
    }

    /// Puts the lease back, and passes it on ([`hand_on`](Self::hand_on)).
    fn put_back(&self, drive: Drive) {
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

    fn since_epoch(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Polls the driver once (if there is one) with the reactor's waker, noting the deadline
    /// of its timer; when it completes, everyone who waits for the lease is told.
    fn poll_driver(&self, drive: &mut Drive, cx: &mut Context<'_>) {
        let Some(driver) = drive.driver.as_mut() else {
            return;
        };
        self.notified.store(false, Ordering::SeqCst);
        NEXT_TIMER.with(|t| t.set(None));
        let polled = driver.as_mut().poll(cx);
        drive.next_timer = NEXT_TIMER.with(Cell::get);
        if polled.is_ready() {
            drive.driver = None;
            drive.next_timer = None;
            self.done.store(true, Ordering::SeqCst);
            self.thread.unpark();
            for waiter in lock(&self.waiters).drain() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                waiter.rouse();
            }
        }
    }

    /// Waits in the poller for readiness, a wake-up or `until`, unless woken already or
    /// `stop()` says not to; then records what the events said.
    fn sleep(
        &self,
        drive: &mut Drive,
        until: Option<Instant>,
        stop: impl Fn() -> bool,
    ) -> io::Result<()> {
        // Announce the wait, then look once more: a wake-up either sees `sleeping` and
        // interrupts the wait, or was seen here (both are SeqCst).
        self.sleeping.store(true, Ordering::SeqCst);
        if self.notified.load(Ordering::SeqCst) || stop() {
            self.sleeping.store(false, Ordering::SeqCst);
            return Ok(());
        }
        let timeout = until.map(|t| t.saturating_duration_since(Instant::now()));
        let waited = drive.poll.poll(&mut drive.events, timeout);
        self.sleeping.store(false, Ordering::SeqCst);
        match waited {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        let sockets = lock(&self.sockets);
        for event in &drive.events {
            let Some(readiness) = sockets.get(&event.token()) else {
                continue; // the waker, or a socket already gone
            };
            let mut bits = 0;
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                bits |= READABLE;
            }
            if event.is_writable() || event.is_write_closed() || event.is_error() {
                bits |= WRITABLE;
            }
            readiness.set(bits);
        }
        Ok(())
    }

    /// The driver thread: drives the client whenever no caller does, and leaves the lease
    /// to callers while they keep taking it, on the policy of [`hold`](crate::runtime::hold)
    /// ([`Ticks::decide`]): it takes the lease once callers have left it alone for a look
    /// (2 ms, up to 16 ms while each look finds them at work), or when a deadline of the
    /// driver is due, and sleeps until woken while a caller has held it since its last look.
    fn run_thread(self: &Arc<Self>) -> io::Result<()> {
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

    /// Runs `future` to completion on this thread as the only driver (the sockets' tests).
    #[cfg(test)]
    fn block_on<F: Future>(self: &Arc<Self>, future: F) -> io::Result<F::Output> {
        let mut drive = self
            .take(THREAD)
            .ok_or_else(|| io::Error::other("the poller is already in use"))?;
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        let output = loop {
            self.notified.store(false, Ordering::SeqCst);
            NEXT_TIMER.with(|t| t.set(None));
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                break Ok(v);
            }
            let until = NEXT_TIMER.with(Cell::get);
            if let Err(e) = self.sleep(&mut drive, until, || false) {
                break Err(e);
            }
        };
        self.put_back(drive);
        output
    }

    /// Registers `stream` for both directions (edge-triggered: one registration for its
    /// life, no re-arming per wait).
    fn register(self: &Arc<Self>, mut stream: TcpStream) -> io::Result<Registered> {
        let token = Token(self.next_token.fetch_add(1, Ordering::Relaxed));
        self.registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        let readiness = Arc::new(Readiness::default());
        lock(&self.sockets).insert(token, readiness.clone());
        Ok(Registered {
            stream,
            token,
            readiness,
            reactor: self.clone(),
        })
    }
}

/// Wakes the driver: the first wake-up since it last looked interrupts the wait of whoever
/// drives, if they wait; later ones (and any while it runs) cost an atomic operation.
impl Wake for Reactor {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.notified.swap(true, Ordering::SeqCst) && self.sleeping.load(Ordering::SeqCst) {
            if let Err(e) = self.waker.wake() {
                tracing::error!(error = %e, "could not wake the driver");
            }
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

thread_local! {
    /// The deadline of the [`PollerTimer`] polled pending during the current poll of
    /// [`Reactor::block_on`].
    static NEXT_TIMER: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The driver's timer: while it is pending, the driver thread waits no longer than its
/// deadline.
#[derive(Debug)]
pub(crate) struct PollerTimer {
    at: Instant,
}

impl PollerTimer {
    /// A timer armed for `at`.
    pub(crate) fn new(at: Instant) -> PollerTimer {
        PollerTimer { at }
    }
}

impl crate::runtime::Timer for PollerTimer {
    fn reset(&mut self, at: Instant) {
        self.at = at;
    }

    fn poll_expired(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        if at <= Instant::now() {
            return Poll::Ready(());
        }
        NEXT_TIMER.with(|t| t.set(Some(t.get().map_or(at, |e| e.min(at)))));
        Poll::Pending
    }
}

// ------------------------------------------------------------------------------------ poller

/// One client's poller, and what a runtime shim implements
/// [`Runtime`](crate::Runtime) with: [`connect`](Self::connect) a [`Socket`],
/// [`spawn`](Self::spawn) the driver on a thread that waits on the poller, and the
/// [`PollerTimer`] that bounds the wait. Cheap to clone (one poller per client, shared).
#[derive(Debug, Clone)]
pub(crate) struct Poller {
    reactor: Arc<Reactor>,
}

impl Poller {
    /// A poller of its own (an epoll instance and an eventfd on Linux).
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            reactor: Arc::new(Reactor::new()?),
        })
    }

    /// Opens a non-blocking TCP connection to `addr` (`host:port`) with `TCP_NODELAY` on, its
    /// readiness reported by this poller, from `options.local_addr` when set. The future is
    /// ready once connected (or failed); the driver bounds it with the dial timeout.
    pub(crate) fn connect(
        &self,
        addr: &str,
        options: SocketOptions,
    ) -> BoxFuture<io::Result<Socket>> {
        let (reactor, addr) = (self.reactor.clone(), addr.to_owned());
        Box::pin(async move {
            let addrs = resolve(&addr).await?;
            let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
            for a in addrs {
                let connected = match options.local_addr {
                    None => connect_to(&reactor, a).await,
                    Some(local) if local.is_ipv4() != a.is_ipv4() => {
                        last = io::Error::new(
                            io::ErrorKind::AddrNotAvailable,
                            format!("local_addr {local} cannot reach {a}"),
                        );
                        continue;
                    }
                    Some(local) => connect_from_on(&reactor, local, a, options.dial).await,
                };
                match connected {
                    Ok(socket) => return Ok(socket),
                    Err(e) => last = e,
                }
            }
            Err(last)
        })
    }

    /// Runs `driver` on a new thread named `name`, which waits on this poller between polls
    /// and ends with it.
    pub(crate) fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        {
            let mut lease = lock(&self.reactor.drive);
            let drive = lease
                .as_mut()
                .ok_or_else(|| io::Error::other("the poller is in use"))?;
            if drive.driver.is_some() || self.reactor.done.load(Ordering::SeqCst) {
                return Err(io::Error::other("the poller already has a driver"));
            }
            drive.driver = Some(driver);
        }
        let reactor = self.reactor.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                if let Err(e) = reactor.run_thread() {
                    tracing::error!(error = %e, "the driver's poller failed");
                    reactor.fail();
                }
            });
        match thread {
            Ok(handle) => {
                self.reactor.thread.set(handle.thread().clone());
                Ok(())
            }
            Err(e) => {
                // Nobody will drive: the driver is dropped (whoever waits for it hears).
                if let Some(drive) = lock(&self.reactor.drive).as_mut() {
                    drive.driver = None;
                }
                Err(e)
            }
        }
    }

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
                            tracing::error!(error = %e, "the client's poller failed");
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

impl Reactor {
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
    fn fail(&self) {
        let driver = lock(&self.drive).as_mut().and_then(|d| d.driver.take());
        drop(driver);
        self.done.store(true, Ordering::SeqCst);
        for waiter in lock(&self.waiters).drain() {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            waiter.rouse();
        }
    }
}

impl Poller {
    /// Runs `future` on this thread over this poller (its sockets' tests).
    #[cfg(test)]
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.reactor.block_on(future).expect("the poller works")
    }
}

/// Connects to `addr` from `local` ([`connect_from`]), then registers the stream with the
/// poller like any other.
async fn connect_from_on(
    reactor: &Arc<Reactor>,
    local: SocketAddr,
    addr: SocketAddr,
    dial: std::time::Duration,
) -> io::Result<Socket> {
    let stream = connect_from(local, addr, dial).await?;
    let socket = reactor.register(TcpStream::from_std(stream))?;
    socket.stream.set_nodelay(true)?;
    Ok(Socket {
        socket,
        buf: BytesMut::new(),
    })
}

/// Connects to `addr` without blocking: the socket is writable once the connection is made
/// (or has failed).
async fn connect_to(reactor: &Arc<Reactor>, addr: SocketAddr) -> io::Result<Socket> {
    let socket = reactor.register(TcpStream::connect(addr)?)?;
    std::future::poll_fn(|_| {
        if !socket.readiness.is(WRITABLE) {
            return Poll::Pending;
        }
        if let Some(e) = socket.stream.take_error()? {
            return Poll::Ready(Err(e));
        }
        match socket.stream.peer_addr() {
            Ok(_) => Poll::Ready(Ok(())),
            // Not connected yet (a spurious wake-up): wait for the next event.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                socket.readiness.clear(WRITABLE);
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    })
    .await?;
    // Nagle off: the driver writes once per wake-up, and waits for nothing more.
    socket.stream.set_nodelay(true)?;
    Ok(Socket {
        socket,
        buf: BytesMut::new(),
    })
}

// ------------------------------------------------------------------------------------ socket

/// A socket registered with a client's poller; deregistered when dropped.
#[derive(Debug)]
struct Registered {
    stream: TcpStream,
    token: Token,
    readiness: Arc<Readiness>,
    reactor: Arc<Reactor>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.reactor.sockets).remove(&self.token);
        let _ = self.reactor.registry.deregister(&mut self.stream);
    }
}

/// A non-blocking TCP stream on its client's poller, and the buffer it reads into.
#[derive(Debug)]
pub(crate) struct Socket {
    socket: Registered,
    /// Zeroed space read into at its front; what is read is split off.
    buf: BytesMut,
}

/// A read or write that took less than it was offered drained the socket (or filled its
/// buffer): the next would block, and the poller reports the next change (tokio does the
/// same). Not on Windows, whose poller is emulated and reports only what it was asked.
const SHORT_MEANS_DRAINED: bool = cfg!(not(windows));

impl crate::runtime::Socket for Socket {
    fn poll_read(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        let s = &mut self.socket;
        loop {
            if !s.readiness.is(READABLE) {
                return Poll::Pending;
            }
            if self.buf.len() < MIN_READ {
                self.buf = BytesMut::zeroed(READ_CHUNK);
            }
            let offered = self.buf.len();
            match s.stream.read(&mut self.buf[..]) {
                Ok(n) => {
                    if n > 0 && n < offered && SHORT_MEANS_DRAINED {
                        s.readiness.clear(READABLE);
                    }
                    return Poll::Ready(Ok(self.buf.split_to(n)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.readiness.clear(READABLE),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write(&mut self, _cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        let s = &mut self.socket;
        loop {
            if !s.readiness.is(WRITABLE) {
                return Poll::Pending;
            }
            match s.stream.write(data) {
                Ok(n) => {
                    if n < data.len() && SHORT_MEANS_DRAINED {
                        s.readiness.clear(WRITABLE);
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.readiness.clear(WRITABLE),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_close(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Everything was written (the driver closes once its queue is empty): send FIN.
        Poll::Ready(match self.socket.stream.shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    fn opts() -> SocketOptions {
        SocketOptions::new(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(5),
        )
    }

    use super::*;
    use crate::runtime::Socket as _;
    use crate::runtime::Timer as _;
    use std::net::TcpListener;
    use std::time::Duration;

    fn listen() -> (TcpListener, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        (listener, addr)
    }

    /// Polls `f` on `rt` until it is ready or five seconds have passed.
    fn within<T>(rt: &Poller, mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
        let mut timer = PollerTimer::new(Instant::now() + Duration::from_secs(5));
        rt.block_on(std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = f(cx) {
                return Poll::Ready(v);
            }
            assert!(timer.poll_expired(cx).is_pending(), "not ready within 5 s");
            Poll::Pending
        }))
    }

    fn write_all(rt: &Poller, socket: &mut Socket, mut data: Bytes) {
        while !data.is_empty() {
            let n = within(rt, |cx| socket.poll_write(cx, &data)).unwrap();
            bytes::Buf::advance(&mut data, n);
        }
    }

    #[test]
    fn reads_arrive_as_chunks_then_eof() {
        let ((listener, addr), rt) = (listen(), Poller::new().unwrap());
        let mut socket = rt.block_on(rt.connect(&addr, opts())).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        assert!(socket.socket.stream.nodelay().unwrap());
        write_all(&rt, &mut socket, Bytes::from_static(b"ping"));
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        peer.write_all(b"hello").unwrap();
        let mut data = Vec::new();
        while data.len() < 5 {
            data.extend_from_slice(&within(&rt, |cx| socket.poll_read(cx)).unwrap());
        }
        assert_eq!(data, b"hello");
        drop(peer);
        assert!(
            within(&rt, |cx| socket.poll_read(cx)).unwrap().is_empty(),
            "EOF"
        );
        within(&rt, |cx| socket.poll_close(cx)).unwrap();
        drop(socket);
        assert!(lock(&rt.reactor.sockets).is_empty(), "deregistered");
    }

    #[test]
    fn a_blocked_write_waits_and_reading_goes_on_meanwhile() {
        let ((listener, addr), rt) = (listen(), Poller::new().unwrap());
        let mut socket = rt.block_on(rt.connect(&addr, opts())).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        // The peer does not read: 64 MiB cannot fit in the socket buffers.
        let big = Bytes::from(vec![0u8; 64 << 20]);
        let taken = within(&rt, |cx| socket.poll_write(cx, &big)).unwrap();
        assert!(taken < big.len());
        let rest = big.slice(taken..);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(socket.poll_write(&mut cx, &rest).is_pending(), "blocked");
        peer.write_all(b"still reading").unwrap();
        let chunk = within(&rt, |cx| socket.poll_read(cx)).unwrap();
        assert!(!chunk.is_empty(), "reads go on while a write is blocked");
        // Once the peer reads, the write goes on.
        let reader = std::thread::spawn(move || {
            let mut sink = vec![0u8; 1 << 20];
            let mut total = 0;
            while total < 1 << 20 {
                total += peer.read(&mut sink).unwrap();
            }
            peer
        });
        assert!(within(&rt, |cx| socket.poll_write(cx, &rest)).unwrap() > 0);
        drop(reader.join().unwrap());
    }

    #[test]
    fn connect_failures_are_reported() {
        let (closed, rt) = (listen().1, Poller::new().unwrap());
        // `closed`'s listener is gone: refused.
        assert!(rt.block_on(rt.connect(&closed, opts())).is_err());
        let e = rt
            .block_on(rt.connect("not an address", opts()))
            .unwrap_err();
        assert!(!e.to_string().is_empty());
        // A host name is resolved on a thread of its own.
        let (listener, addr) = listen();
        let port = addr.rsplit(':').next().unwrap();
        let socket = rt
            .block_on(rt.connect(&format!("localhost:{port}"), opts()))
            .unwrap();
        drop(listener.accept().unwrap());
        drop(socket);
        // An abandoned connect deregisters its socket.
        let (_listener, addr) = listen();
        drop(rt.connect(&addr, opts()));
        let mut pending = rt.connect(&addr, opts());
        let mut cx = Context::from_waker(Waker::noop());
        let _ = pending.as_mut().poll(&mut cx);
        drop(pending);
        assert!(lock(&rt.reactor.sockets).is_empty(), "deregistered");
    }

    /// What a test driver read, and on which thread; and the wakers of whoever waits for it.
    #[derive(Default)]
    struct Seen {
        chunks: Mutex<Vec<(std::thread::ThreadId, Vec<u8>)>>,
        /// Every waiting future's waker.
        wakers: Mutex<Vec<Waker>>,
    }

    /// A driver that reads `socket` until EOF, noting each chunk and the thread that read it.
    fn reader_driver(mut socket: Socket, seen: Arc<Seen>) -> BoxFuture<()> {
        Box::pin(std::future::poll_fn(move |cx| {
            loop {
                match socket.poll_read(cx) {
                    Poll::Ready(Ok(chunk)) if !chunk.is_empty() => {
                        let me = std::thread::current().id();
                        lock(&seen.chunks).push((me, chunk.to_vec()));
                        for w in lock(&seen.wakers).drain(..) {
                            w.wake();
                        }
                    }
                    Poll::Ready(_) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        }))
    }

    /// Ready once `seen` has `n` chunks.
    fn chunks(seen: &Arc<Seen>, n: usize) -> impl Future<Output = ()> + use<> {
        let seen = seen.clone();
        std::future::poll_fn(move |cx| {
            lock(&seen.wakers).push(cx.waker().clone());
            if lock(&seen.chunks).len() >= n {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// Waits (bounded: 5 s) until `f` holds, looking every millisecond.
    fn eventually(what: &str, f: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(Instant::now() < until, "not within 5 s: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A poller whose driver reads from a connected peer.
    fn driven() -> (Poller, Arc<Seen>, std::net::TcpStream) {
        let ((listener, addr), rt) = (listen(), Poller::new().unwrap());
        let socket = rt.block_on(rt.connect(&addr, opts())).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let seen = Arc::new(Seen::default());
        rt.spawn("nsq-test-driver", reader_driver(socket, seen.clone()))
            .unwrap();
        (rt, seen, peer)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn a_waiting_caller_drives_and_the_driver_thread_takes_over_when_callers_leave() {
        let (rt, seen, mut peer) = driven();
        let reactor = rt.reactor.clone();
        // The peer writes once a caller holds the lease (the driver thread hands it over).
        let writer = std::thread::spawn(move || {
            eventually("a caller drives", || {
                reactor.holder.load(Ordering::SeqCst) == CALLER
            });
            peer.write_all(b"one").unwrap();
            peer
        });
        let me = std::thread::current().id();
        assert!(
            rt.wait(std::pin::pin!(chunks(&seen, 1)), Some(soon()))
                .is_some()
        );
        let mut peer = writer.join().unwrap();
        assert_eq!(
            lock(&seen.chunks)[0],
            (me, b"one".to_vec()),
            "read by the caller"
        );
        // No caller waits now: the driver thread takes the lease back, and reads.
        peer.write_all(b"two").unwrap();
        eventually("the driver thread reads", || lock(&seen.chunks).len() == 2);
        let thread = rt.reactor.thread.get().unwrap().id();
        assert_eq!(lock(&seen.chunks)[1], (thread, b"two".to_vec()));
        // A wait that times out gives the lease back.
        let waited = rt.wait(
            std::pin::pin!(chunks(&seen, 3)),
            Some(Instant::now() + Duration::from_millis(20)),
        );
        assert!(waited.is_none());
        assert_ne!(rt.reactor.holder.load(Ordering::SeqCst), CALLER);
        // EOF ends the driver, whoever drives.
        drop(peer);
        eventually("the driver ends", || rt.reactor.done.load(Ordering::SeqCst));
    }

    #[test]
    fn the_lease_passes_from_caller_to_waiting_caller() {
        let (rt, seen, mut peer) = driven();
        let reactor = rt.reactor.clone();
        let writer = std::thread::spawn(move || {
            // Both callers are there: one drives, the other waits for the lease.
            eventually("one caller drives, one waits", || {
                reactor.holder.load(Ordering::SeqCst) == CALLER
                    && reactor.waiting.load(Ordering::SeqCst) == 1
            });
            peer.write_all(b"one").unwrap();
            peer
        });
        let second = {
            let (rt, seen) = (rt.clone(), seen.clone());
            std::thread::spawn(move || {
                let waited = rt.wait(std::pin::pin!(chunks(&seen, 2)), Some(soon()));
                (std::thread::current().id(), waited.is_some())
            })
        };
        assert!(
            rt.wait(std::pin::pin!(chunks(&seen, 1)), Some(soon()))
                .is_some()
        );
        let mut peer = writer.join().unwrap();
        // The second caller now drives (the lease was handed to it), and reads the rest.
        let reactor = rt.reactor.clone();
        eventually("the second caller drives", || {
            reactor.holder.load(Ordering::SeqCst) == CALLER
        });
        peer.write_all(b"two").unwrap();
        let (id, waited) = second.join().unwrap();
        assert!(waited);
        assert_eq!(lock(&seen.chunks)[1], (id, b"two".to_vec()));
    }

    #[test]
    fn a_caller_that_drives_the_driver_to_its_end_returns() {
        let (rt, _seen, peer) = driven();
        let reactor = rt.reactor.clone();
        let closer = std::thread::spawn(move || {
            eventually("a caller drives", || {
                reactor.holder.load(Ordering::SeqCst) == CALLER
            });
            drop(peer);
        });
        let reactor = rt.reactor.clone();
        let ended = std::future::poll_fn(|_| {
            if reactor.done.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        assert!(rt.wait(std::pin::pin!(ended), Some(soon())).is_some());
        closer.join().unwrap();
        // Nothing is left to drive: a later wait only waits for its own future.
        let never = std::future::pending::<()>();
        let until = Some(Instant::now() + Duration::from_millis(10));
        assert!(rt.wait(std::pin::pin!(never), until).is_none());
    }
}
