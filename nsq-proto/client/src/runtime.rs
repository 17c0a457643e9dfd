//! What a runtime shim supplies to the one driver: the [`Runtime`] trait (clock, connect,
//! timer, spawn), its [`Socket`] and its [`Timer`]; and, apart from that IO, the [`Adapter`]
//! trait: where `build` finds the runtime, and how a client's calls wait for its driver (the
//! [`Waiter`] of an async call, [`Adapter::block_on`] for a blocking one), the hook through
//! which a call that waits may drive its client. Everything else, the driver loop included,
//! is written once in this module's parent; a runtime strategy (a poller of a client's own,
//! callers that drive) lives in the shim that uses it.

use super::Error;
use bytes::{Bytes, BytesMut};
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A boxed, sendable future: what a [`Runtime`] connects with and spawns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The IO a runtime lends the client layer: sockets, a timer, a place to run the driver, and
/// the clock. Nothing else: what a shim's clients look like is its [`Adapter`].
///
/// Each adapter crate implements it once, on a small value (a runtime handle, or what one
/// client's driver runs on);
/// the driver owns every socket of its client in one task:
///
/// * [`connect`](Self::connect) opens a TCP connection with `TCP_NODELAY` set; the
///   [`Socket`] it yields is read and written by the driver alone;
/// * [`timer`](Self::timer) makes the driver's one timer, armed for a first deadline and
///   re-armed when the core's `poll_timeout` changes;
/// * [`spawn`](Self::spawn) starts the driver (a task on the caller's runtime, or a thread
///   of the client's own);
/// * [`now`](Self::now) is the clock (the core never reads one).
pub trait Runtime: Clone + Send + Sync + 'static {
    /// The socket type.
    type Socket: Socket;
    /// The timer type.
    type Timer: Timer;

    /// The current time: the system's monotonic clock unless the runtime has its own (tokio's
    /// can be paused in tests).
    #[allow(
        clippy::disallowed_methods,
        reason = "the default clock of a runtime without one of its own"
    )]
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Opens a TCP connection to `addr` (`host:port`, resolved by the runtime) with
    /// `TCP_NODELAY` on, from [`options.local_addr`](SocketOptions::local_addr) when it is
    /// set. The driver abandons it (drops the future) after
    /// [`options.dial`](SocketOptions::dial), and fails a write that stays blocked for
    /// [`options.write`](SocketOptions::write); a runtime that connects on another thread
    /// bounds that thread's wait with them.
    fn connect(&self, addr: &str, options: SocketOptions) -> BoxFuture<io::Result<Self::Socket>>;

    /// A timer armed for `at` (the runtime's own sleep).
    fn timer(&self, at: Instant) -> Self::Timer;

    /// Runs `driver` to completion in the background, named `name` where the runtime names
    /// its tasks or threads. The driver enters its client's span itself, and tells whoever
    /// waits for it when it has ended (dropping it counts). The client's span is the current
    /// one during the call, for what the runtime logs about this driver later.
    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()>;

    /// Whether a driver that did work looks once more before it parks, by waking itself:
    /// what the tasks it woke send at once (a producer's callers publish again as soon as
    /// their replies arrive) is then taken in the same wake-up. True by default: on a thread
    /// of its own, or a current-thread runtime, that costs one more poll and no wake-up.
    /// False where a task that wakes itself is rescheduled through other threads (a
    /// multi-threaded executor), or where the tasks the driver woke drive it themselves.
    fn look_again_after_work(&self) -> bool {
        true
    }
}

/// What an adapter crate adds to its [`Runtime`] for its clients: where
/// [`build`](super::ConsumerBuilder::build) finds the runtime, how
/// [`Consumer::run`](super::Consumer::run)'s workers run, and how a client's calls wait for
/// its driver. Implemented once per adapter crate, on its runtime.
///
/// The waiting is the general hook through which a call that waits may drive its client
/// (poll its driver on the caller's own task or thread, so that a round trip to nsqd wakes
/// no other thread): an async call waits through its [`Waiter`], a blocking call through
/// [`block_on`](Self::block_on). A runtime whose driver runs on a task or thread of its own
/// and is never driven by callers (tokio) takes the defaults: [`Direct`] waiters, and a
/// `block_on` that parks the thread between polls.
pub trait Adapter: Runtime {
    /// How one async call of a client on this runtime waits ([`Direct`]: it only polls).
    type Waiter: Waiter;

    /// The runtime to start a client on, from where `build` is called: [`Error::NoRuntime`]
    /// when there is none (tokio outside a runtime).
    fn current() -> Result<Self, Error>;

    /// The waiter of a new call of this runtime value's client.
    fn waiter(&self) -> Self::Waiter;

    /// Runs the handler workers of [`Consumer::run`](super::Consumer::run) to completion.
    /// By default they are polled concurrently inside the returned future (so they run on
    /// whatever executor polls it); a runtime that can spawn onto the caller's executor
    /// (tokio) spawns each, so handlers run in parallel.
    fn run_workers(&self, workers: Vec<BoxFuture<()>>) -> BoxFuture<()> {
        Box::pin(join_all(workers))
    }

    /// Runs `future` on the calling thread until it completes (`Some`) or `deadline` passes
    /// (`None`): how a blocking call ([`blocking`](super::blocking)) of this runtime value's
    /// client waits. By default the thread parks between polls until its future is woken; a
    /// runtime whose blocking calls drive their client (nsq-blocking, over a poller of the
    /// client's own) polls the driver and waits for readiness meanwhile.
    fn block_on<F: Future>(
        &self,
        future: Pin<&mut F>,
        deadline: Option<Instant>,
    ) -> Option<F::Output> {
        park_on(future, deadline)
    }
}

/// [`Adapter::block_on`]'s default: polls `future` on this thread, parking between polls
/// until it is woken, until it completes (`Some`) or `deadline` passes (`None`).
pub fn park_on<F: Future>(mut future: Pin<&mut F>, deadline: Option<Instant>) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return Some(v);
        }
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                #[allow(
                    clippy::disallowed_methods,
                    reason = "a thread parks for real time; the driver's clock is the runtime's"
                )]
                let now = Instant::now();
                if d <= now {
                    return None;
                }
                std::thread::park_timeout(d - now);
            }
        }
    }
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// How one async call of a client (a publish awaiting its reply, a `recv` awaiting a message,
/// `Consumer::run`'s workers) waits for what it asked of the client's driver. Made by
/// [`Adapter::waiter`], one per call; dropped, the call waits no more.
///
/// A runtime may let the call drive its client while it waits (nsq-async-std's default
/// mode): [`poll`](Self::poll) then polls the client's driver on the caller's own task
/// before and after it polls the call's own result.
pub trait Waiter: Send + Unpin + 'static {
    /// Called before the call hands the driver its command: a waiter that drives may take
    /// the driver here, so that the wake-up the command makes is kept for this call's own
    /// poll instead of waking another task or thread. Nothing by default.
    fn hold(&mut self) {}

    /// Polls `ready` (the call's own result) for the call's task `cx`; a waiter that drives
    /// polls the client's driver meanwhile while `ready` is pending.
    fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        ready: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T>;
}

/// The [`Waiter`] of a runtime whose calls never drive their client: it polls the call's own
/// result, and the driver's task or thread wakes it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Direct;

impl Waiter for Direct {
    fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut ready: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        ready(cx)
    }
}

/// Awaits `future` through `waiter` (driving the client meanwhile where the runtime does).
pub(crate) async fn wait_for<W: Waiter, F: Future + Unpin>(
    mut waiter: W,
    mut future: F,
) -> F::Output {
    std::future::poll_fn(|cx| waiter.poll(cx, |cx| Pin::new(&mut future).poll(cx))).await
}

/// A client's socket-level settings (go-nsq's `dial_timeout`, `write_timeout` and
/// `local_addr`), given to [`Runtime::connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketOptions {
    /// How long a TCP connect may take (the driver enforces it; a runtime may too).
    pub dial: Duration,
    /// How long one write may stay blocked before the connection is dropped (the driver
    /// enforces it).
    pub write: Duration,
    /// The local address to bind before connecting (port 0: any), if any. A runtime must
    /// honour it.
    pub local_addr: Option<SocketAddr>,
}

impl SocketOptions {
    /// The settings `dial` and `write`, no local address.
    pub fn new(dial: Duration, write: Duration) -> SocketOptions {
        SocketOptions {
            dial,
            write,
            local_addr: None,
        }
    }

    /// With the local address to connect from.
    #[must_use]
    pub fn with_local_addr(mut self, local_addr: Option<SocketAddr>) -> SocketOptions {
        self.local_addr = local_addr;
        self
    }
}

/// One TCP connection, read and written by the driver only. Every method is non-blocking: it
/// returns `Pending` after arranging for `cx`'s waker to be woken when it can go on.
pub trait Socket: Send + 'static {
    /// The next bytes read, as a chunk the driver splits messages off (their bodies are
    /// slices of it: zero-copy); an empty chunk at end of stream. A runtime reads into a
    /// buffer of its own (64 KiB at a time is good) and splits off what was read.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>>;

    /// Writes a prefix of `data`, returning how many bytes were taken. (`data` is a
    /// [`Bytes`] so a runtime that writes on another thread can keep a clone instead of a
    /// copy.)
    fn poll_write(&mut self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>>;

    /// Shuts the connection down once what was written has been sent.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// The driver's one timer, made armed by [`Runtime::timer`].
pub trait Timer: Send + 'static {
    /// Arms the timer for `at` (replacing the earlier deadline).
    fn reset(&mut self, at: Instant);

    /// `Ready` once the deadline set by [`reset`](Self::reset) has passed; `Pending`
    /// (waking `cx` at the deadline) before that.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()>;
}

/// Polls every future until all are done.
pub(crate) async fn join_all(mut futures: Vec<BoxFuture<()>>) {
    std::future::poll_fn(|cx| {
        futures.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if futures.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Wraps a driver so that it runs inside `span` (entered around each poll), marks its thread
/// as this driver's while it is polled ([`Ended::is_current`]), and sets `ended` once it has
/// completed or been dropped.
pub(crate) fn driver_future<F: Future<Output = ()> + Send + 'static>(
    span: tracing::Span,
    ended: Arc<Ended>,
    future: F,
) -> impl Future<Output = ()> + Send + 'static {
    struct SetOnDrop(Arc<Ended>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.set();
        }
    }
    // The driver first, then `ended`: a tuple's fields drop in order.
    let mut driver = (Box::pin(future), SetOnDrop(ended));
    std::future::poll_fn(move |cx| {
        let outer = POLLING.with(|d| d.replace(driver.1.0.id()));
        let polled = span.in_scope(|| driver.0.as_mut().poll(cx));
        POLLING.with(|d| d.set(outer));
        polled
    })
}

thread_local! {
    /// The driver this thread is polling ([`Ended::id`]), or 0.
    static POLLING: Cell<usize> = const { Cell::new(0) };
}

/// That a client's driver has ended (every socket closed), for the blocking API to wait on.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    state: Mutex<EndedState>,
}

#[derive(Debug, Default)]
struct EndedState {
    ended: bool,
    waiters: Vec<Waker>,
}

impl Ended {
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn lock(&self) -> MutexGuard<'_, EndedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self) {
        let waiters = {
            let mut state = self.lock();
            state.ended = true;
            std::mem::take(&mut state.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
    }

    /// Whether the caller runs inside this driver (a give-up hook does): it must not wait
    /// for the driver then.
    pub(crate) fn is_current(&self) -> bool {
        POLLING.with(Cell::get) == self.id()
    }

    /// `Ready` once the driver has ended; `Pending` until then, waking `cx` when it ends.
    pub(crate) fn poll_ended(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        if state.ended {
            return Poll::Ready(());
        }
        if !state.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            state.waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A runtime for this crate's unit tests: its connects never finish, its timer never fires,
/// its calls never drive.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// The runtime.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Idle;

    /// A socket that never connects.
    pub(crate) struct NoSocket;

    /// A timer that never fires.
    pub(crate) struct NoTimer;

    impl Socket for NoSocket {
        fn poll_read(&mut self, _: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
            Poll::Pending
        }
        fn poll_write(&mut self, _: &mut Context<'_>, _: &Bytes) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn poll_close(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl Timer for NoTimer {
        fn reset(&mut self, _: Instant) {}
        fn poll_expired(&mut self, _: &mut Context<'_>) -> Poll<()> {
            Poll::Pending
        }
    }

    impl Runtime for Idle {
        type Socket = NoSocket;
        type Timer = NoTimer;
        fn connect(&self, _: &str, _: SocketOptions) -> BoxFuture<io::Result<NoSocket>> {
            Box::pin(std::future::pending())
        }
        fn timer(&self, _: Instant) -> NoTimer {
            NoTimer
        }
        fn spawn(&self, _: &str, _: BoxFuture<()>) -> io::Result<()> {
            Ok(())
        }
    }

    impl Adapter for Idle {
        type Waiter = Direct;
        fn current() -> Result<Self, Error> {
            Ok(Idle)
        }
        fn waiter(&self) -> Direct {
            Direct
        }
    }
}
