//! A client's reactor: its mio poller, the readiness of each of its sockets, the wake-ups
//! of its driver, and the driver's timer (a deadline for the poller's wait).

use super::socket::Registered;
use crate::runtime::BoxFuture;
use crate::runtime::hold::{Callers, DriverThread, Rouse};
use crate::sync::lock;
use mio::net::TcpStream;
use mio::{Events, Interest, Registry, Token};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake};
use std::thread::Thread;
use std::time::Instant;

/// The token of the poller's waker (sockets count up from 1).
const WAKER: Token = Token(0);

/// What a socket's readiness events said since its last read or write would have blocked.
#[derive(Debug, Default)]
pub(super) struct Readiness(AtomicU8);

pub(super) const READABLE: u8 = 1;
pub(super) const WRITABLE: u8 = 2;
/// The read side has ended (the peer's FIN, a reset or an error): reported once, with
/// [`READABLE`], and kept until a read would block. A read that comes back short does not
/// clear it: the data and the end can arrive before one wait, and the end's edge is not
/// reported again, so the read after the data must still be made to find the EOF (tokio
/// keeps its `READ_CLOSED` for the same reason).
pub(super) const READ_CLOSED: u8 = 4;

impl Readiness {
    pub(super) fn is(&self, bit: u8) -> bool {
        self.0.load(Ordering::Relaxed) & bit != 0
    }

    fn set(&self, bits: u8) {
        self.0.fetch_or(bits, Ordering::Relaxed);
    }

    pub(super) fn clear(&self, bit: u8) {
        self.0.fetch_and(!bit, Ordering::Relaxed);
    }
}

/// One client's poller, shared by whoever drives the client (its driver thread, or a caller
/// waiting in a blocking call: see [`Poller::wait`](super::Poller::wait)), its sockets (which register with it) and
/// every waker of the driver (which interrupt the wait).
#[derive(Debug)]
pub(super) struct Reactor {
    /// The poller and the driver, out of the mutex while someone drives (the lease).
    pub(super) drive: Mutex<Option<Drive>>,
    pub(super) registry: Registry,
    waker: mio::Waker,
    /// The driver was woken since it last looked (set by wakers, cleared before a poll).
    notified: AtomicBool,
    /// Whoever drives waits in the poller, or is about to: a waker must interrupt it.
    sleeping: AtomicBool,
    /// Each registered socket's readiness, by token.
    pub(super) sockets: Mutex<HashMap<Token, Arc<Readiness>>>,
    next_token: AtomicUsize,
    /// Who holds the lease: [`NOBODY`], [`THREAD`] or [`CALLER`].
    pub(super) holder: AtomicU8,
    /// How many times a caller took the lease (the driver thread's sign of callers at work).
    pub(super) sessions: AtomicU64,
    /// A caller waits for the driver thread to put the lease back.
    pub(super) handover: AtomicBool,
    /// Callers waiting for the lease (each is unparked in turn when it comes back).
    pub(super) waiters: Mutex<Callers<Thread>>,
    pub(super) waiting: AtomicUsize,
    /// The driver thread, once started; and whether it parks until a caller's release.
    pub(super) thread: DriverThread,
    pub(super) parked_long: AtomicBool,
    /// The driver has completed: nobody needs to drive any more.
    pub(super) done: AtomicBool,
    /// The earliest deadline of the driver when the lease was last put back (nanoseconds
    /// since `epoch`; `u64::MAX`: none), for the driver thread's wait.
    pub(super) next_deadline: AtomicU64,
    epoch: Instant,
    /// The span of the client this poller drives (current when its driver was spawned): the
    /// poller's own lines go in it, on whichever thread they happen.
    pub(super) span: OnceLock<tracing::Span>,
}

/// The lease: what whoever drives the client holds.
pub(super) struct Drive {
    poll: mio::Poll,
    events: Events,
    /// The driver, from [`Poller::spawn`](super::Poller::spawn) until it completes.
    pub(super) driver: Option<BoxFuture<()>>,
    /// The deadline of the timer the driver polled pending in its last poll.
    pub(super) next_timer: Option<Instant>,
}

impl fmt::Debug for Drive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive")
            .field("driver", &self.driver.is_some())
            .field("next_timer", &self.next_timer)
            .finish_non_exhaustive()
    }
}

pub(super) const NOBODY: u8 = 0;
pub(super) const THREAD: u8 = 1;
pub(super) const CALLER: u8 = 2;

impl Reactor {
    /// Runs `f` (which logs) inside the client's span, once the driver was spawned.
    pub(super) fn in_span(&self, f: impl FnOnce()) {
        match self.span.get() {
            Some(span) => span.in_scope(f),
            None => f(),
        }
    }

    pub(super) fn new() -> io::Result<Reactor> {
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
            span: OnceLock::new(),
        })
    }

    pub(super) fn since_epoch(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Polls the driver once (if there is one) with the reactor's waker, noting the deadline
    /// of its timer; when it completes, everyone who waits for the lease is told.
    pub(super) fn poll_driver(&self, drive: &mut Drive, cx: &mut Context<'_>) {
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
    pub(super) fn sleep(
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
            if event.is_read_closed() || event.is_error() {
                bits |= READ_CLOSED;
            }
            if event.is_writable() || event.is_write_closed() || event.is_error() {
                bits |= WRITABLE;
            }
            readiness.set(bits);
        }
        Ok(())
    }

    /// Runs `future` to completion on this thread as the only driver (the sockets' tests).
    #[cfg(test)]
    pub(super) fn block_on<F: Future>(self: &Arc<Self>, future: F) -> io::Result<F::Output> {
        let mut drive = self
            .take(THREAD)
            .ok_or_else(|| io::Error::other("the poller is already in use"))?;
        let waker = std::task::Waker::from(self.clone());
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
    pub(super) fn register(self: &Arc<Self>, mut stream: TcpStream) -> io::Result<Registered> {
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
                self.in_span(|| tracing::error!(error = %e, "could not wake the driver"));
            }
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
