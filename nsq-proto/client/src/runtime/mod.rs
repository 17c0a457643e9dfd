//! What a runtime lends the one driver: the object-safe [`Runtime`] trait (clock, connect,
//! timer, spawn, and how a client's calls wait for its driver), its [`Socket`] and its
//! [`Timer`]. Clients hold their runtime as an `Arc<dyn Runtime>`, so their types name none.
//!
//! The runtimes the workspace ships live beside this file, each behind the cargo feature
//! its adapter crate turns on: [`Tokio`] (`tokio`), [`AsyncStd`] (`async-io`: async-std, smol
//! and any executor) and [`Blocking`] (`blocking`: a poller of the client's own). Where
//! `build` is called decides which serves a client ([`find`]); a runtime from outside the
//! workspace is given to a builder with `runtime(..)` (`examples/own_runtime.rs`). The
//! driver loop itself is written once, in this module's parent, and names no runtime.
//!
//! Why the runtimes live here and not in their adapter crates: a client type is shared by
//! every adapter (`nsq_tokio::Consumer` *is* `nsq_client::Consumer`, re-exported), so the
//! call that starts one must find a runtime from this crate, and Cargo allows no dependency
//! from this crate back to an adapter that depends on it. quinn does the same
//! (`quinn::runtime`, one module per runtime behind a feature).

use super::Error;
use bytes::{Bytes, BytesMut};
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[cfg(feature = "async-io")]
mod async_io;
#[cfg(any(feature = "async-io", feature = "blocking"))]
mod hold;
#[cfg(feature = "blocking")]
mod poller;
#[cfg(any(feature = "tokio", feature = "async-io", feature = "blocking"))]
mod read_buf;
#[cfg(feature = "tokio")]
mod tokio;

#[cfg(feature = "async-io")]
pub use self::async_io::AsyncStd;
#[cfg(feature = "tokio")]
pub use self::tokio::Tokio;
#[cfg(feature = "blocking")]
pub use poller::Blocking;

/// A boxed, sendable future: what a [`Runtime`] connects with and spawns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The IO a runtime lends a client, held by the client as an `Arc<dyn Runtime>`: sockets, a
/// timer, a place to run the driver, the clock, and how the client's calls wait.
///
/// The driver owns every socket of its client in one task:
///
/// * [`connect`](Self::connect) opens a TCP connection with `TCP_NODELAY` set; the
///   [`Socket`] it yields is read and written by the driver alone;
/// * [`timer`](Self::timer) makes the driver's one timer, armed for a first deadline and
///   re-armed when the core's `poll_timeout` changes;
/// * [`spawn`](Self::spawn) starts the driver (a task on the caller's runtime, or a thread
///   of the client's own);
/// * [`now`](Self::now) is the clock (the core never reads one).
///
/// The rest has defaults that suit a runtime whose driver runs on a task or thread of its
/// own and is never driven by the calls that wait for it: [`waiter`](Self::waiter) is
/// `None` (an async call only polls its own result), [`block_on`](Self::block_on) parks
/// the thread between polls, and [`run_workers`](Self::run_workers) polls a consumer's
/// handler workers inside the future it returns. A runtime may instead let a call drive its
/// client while it waits (poll its driver on the caller's own task or thread, so that a
/// round trip to nsqd wakes no other thread): the async-io runtime does, through a lease,
/// and the blocking one, through its poller.
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
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
    fn connect(&self, addr: &str, options: SocketOptions)
    -> BoxFuture<io::Result<Box<dyn Socket>>>;

    /// A timer armed for `at` (the runtime's own sleep).
    fn timer(&self, at: Instant) -> Box<dyn Timer>;

    /// Runs `driver` to completion in the background, named `name` where the runtime names
    /// its tasks or threads. The driver enters its client's span itself, and tells whoever
    /// waits for it when it has ended (dropping it counts). The client's span is the current
    /// one during the call, for what the runtime logs about this driver later. The client's span is the current
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

    /// How one async call of this runtime's client (a publish awaiting its reply, a `recv`
    /// awaiting a message, `Consumer::run`'s workers) waits: `None` (the default) when it
    /// only polls its own result and the driver's task or thread wakes it; a [`Waiter`]
    /// when the call drives the client meanwhile.
    fn waiter(&self) -> Option<Box<dyn Waiter>> {
        None
    }

    /// Runs the handler workers of `Consumer::run` to completion. By default they are
    /// polled concurrently inside the returned future (so they run on whatever executor
    /// polls it); a runtime that can spawn onto the caller's executor (tokio) spawns each,
    /// so handlers run in parallel.
    fn run_workers(&self, workers: Vec<BoxFuture<()>>) -> BoxFuture<()> {
        Box::pin(join_all(workers))
    }

    /// Runs `future` on the calling thread until it completes (`true`) or `deadline` passes
    /// (`false`): how a blocking call of this runtime's client waits. By default the thread
    /// parks between polls until its future is woken ([`park_on`]); a runtime whose blocking
    /// calls drive their client (the poller of `nsq-blocking`) polls the driver and waits for
    /// readiness meanwhile.
    fn block_on(
        &self,
        future: Pin<&mut (dyn Future<Output = ()> + '_)>,
        deadline: Option<Instant>,
    ) -> bool {
        park_on(future, deadline).is_some()
    }
}

/// Where a client finds its runtime: the one given to its builder, else the one of the
/// context `build` is called in ([`find`]).
#[derive(Clone, Default)]
pub(crate) struct RuntimeChoice(Option<Arc<dyn Runtime>>);

impl fmt::Debug for RuntimeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(rt) => fmt::Debug::fmt(rt, f),
            None => f.write_str("found where the client is built"),
        }
    }
}

/// Whether a client is async (awaited) or blocking (waited for on the calling thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Calls {
    Async,
    Blocking,
}

impl RuntimeChoice {
    pub(crate) fn given(runtime: Arc<dyn Runtime>) -> Self {
        RuntimeChoice(Some(runtime))
    }

    /// The runtime a new client of kind `calls` runs on.
    pub(crate) fn runtime(&self, calls: Calls) -> Result<Arc<dyn Runtime>, Error> {
        match &self.0 {
            Some(rt) => Ok(rt.clone()),
            None => find(calls),
        }
    }
}

/// The runtime of the context a client is built in, among those this build has (one per
/// adapter crate in the dependency graph, by cargo feature):
///
/// * a blocking client: a poller of its own (`blocking`);
/// * an async client inside a tokio runtime: that runtime (`tokio`), provided it has its IO
///   and time drivers;
/// * an async client elsewhere: async-io's reactor (`async-io`), which needs no executor;
///   without that feature, [`Error::NoRuntime`] (tokio's outside a tokio runtime).
pub(crate) fn find(calls: Calls) -> Result<Arc<dyn Runtime>, Error> {
    match calls {
        Calls::Blocking => {
            #[cfg(feature = "blocking")]
            return Blocking::for_client();
            #[cfg(not(feature = "blocking"))]
            return Err(Error::NoRuntime(
                "no blocking runtime in this build: depend on nsq-blocking, or give the \
                 builder a runtime",
            ));
        }
        Calls::Async => {
            #[cfg(feature = "tokio")]
            if let Some(runtime) = Tokio::current()? {
                return Ok(runtime);
            }
            #[cfg(feature = "async-io")]
            return Ok(AsyncStd::for_client());
            #[cfg(all(feature = "tokio", not(feature = "async-io")))]
            return Err(Error::NoRuntime(
                "no tokio runtime here: build the client inside one (#[tokio::main], or \
                 Runtime::enter), with its IO and time drivers enabled (enable_all)",
            ));
            #[cfg(not(any(feature = "tokio", feature = "async-io")))]
            return Err(Error::NoRuntime(
                "no async runtime in this build: depend on nsq-tokio or nsq-async-std, or \
                 give the builder a runtime",
            ));
        }
    }
}

/// The runtime an async client built here, without a runtime of its own, would run on
/// (see [`ConsumerBuilder::build`](crate::ConsumerBuilder::build)): for a runtime that wraps
/// it (to observe or fault its sockets, say) and is given to a builder's `runtime(..)`. The
/// async-io runtime's value is one client's (its lease): make one per client.
pub fn runtime_here() -> Result<Arc<dyn Runtime>, Error> {
    find(Calls::Async)
}

/// The runtime a blocking client built here would run on (a poller of its own): see
/// [`runtime_here`]. One per client.
pub fn blocking_runtime_here() -> Result<Arc<dyn Runtime>, Error> {
    find(Calls::Blocking)
}

/// [`Runtime::block_on`]'s default: polls `future` on this thread, parking between polls
/// until it is woken, until it completes (`Some`) or `deadline` passes (`None`).
pub fn park_on<F: Future + ?Sized>(
    mut future: Pin<&mut F>,
    deadline: Option<Instant>,
) -> Option<F::Output> {
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

/// Runs `future` through `runtime`'s [`block_on`](Runtime::block_on) until it completes
/// (`Some`) or `deadline` passes (`None`).
pub(crate) fn block_on_with<F: Future>(
    runtime: &dyn Runtime,
    future: F,
    deadline: Option<Instant>,
) -> Option<F::Output> {
    let mut output = None;
    let out = &mut output;
    let mut future = std::pin::pin!(future);
    let mut unit = std::pin::pin!(std::future::poll_fn(move |cx| {
        future.as_mut().poll(cx).map(|v| *out = Some(v))
    }));
    runtime.block_on(unit.as_mut(), deadline);
    output
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
/// `Consumer::run`'s workers) waits for what it asked of the client's driver, where the
/// runtime lets the call drive its client ([`Runtime::waiter`]). Made one per call; dropped,
/// the call waits no more.
pub trait Waiter: Send + 'static {
    /// Called before the call hands the driver its command: a waiter that drives may take
    /// the driver here, so that the wake-up the command makes is kept for this call's own
    /// poll instead of waking another task or thread. Nothing by default.
    fn hold(&mut self) {}

    /// Polls `ready` (whether the call's own result is there, taking it if so) for the
    /// call's task `cx`, polling the client's driver meanwhile while it is not; returns what
    /// `ready` last returned.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        ready: &mut dyn FnMut(&mut Context<'_>) -> bool,
    ) -> bool;
}

/// A call's way of waiting: its runtime's [`Waiter`], or none (it only polls its result).
#[derive(Default)]
pub(crate) struct CallWaiter(Option<Box<dyn Waiter>>);

impl fmt::Debug for CallWaiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "CallWaiter::Drives"
        } else {
            "CallWaiter::Direct"
        })
    }
}

impl CallWaiter {
    /// The waiter of a new call of a client on `runtime`.
    pub(crate) fn of(runtime: &dyn Runtime) -> Self {
        CallWaiter(runtime.waiter())
    }

    /// See [`Waiter::hold`].
    pub(crate) fn hold(&mut self) {
        if let Some(w) = &mut self.0 {
            w.hold();
        }
    }

    /// Polls `ready` for `cx` through the waiter (driving the client meanwhile where the
    /// runtime does).
    pub(crate) fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut ready: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let Some(waiter) = &mut self.0 else {
            return ready(cx);
        };
        let mut output = None;
        waiter.poll(cx, &mut |cx| match ready(cx) {
            Poll::Ready(v) => {
                output = Some(v);
                true
            }
            Poll::Pending => false,
        });
        output.map_or(Poll::Pending, Poll::Ready)
    }
}

/// Awaits `future` through `waiter` (driving the client meanwhile where the runtime does).
pub(crate) async fn wait_for<F: Future + Unpin>(
    mut waiter: CallWaiter,
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

impl<S: Socket + ?Sized> Socket for Box<S> {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        (**self).poll_read(cx)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        (**self).poll_write(cx, data)
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (**self).poll_close(cx)
    }
}

impl<T: Timer + ?Sized> Timer for Box<T> {
    fn reset(&mut self, at: Instant) {
        (**self).reset(at);
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        (**self).poll_expired(cx)
    }
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

    /// A timer that never fires.
    pub(crate) struct NoTimer;

    impl Timer for NoTimer {
        fn reset(&mut self, _: Instant) {}
        fn poll_expired(&mut self, _: &mut Context<'_>) -> Poll<()> {
            Poll::Pending
        }
    }

    impl Runtime for Idle {
        fn connect(&self, _: &str, _: SocketOptions) -> BoxFuture<io::Result<Box<dyn Socket>>> {
            Box::pin(std::future::pending())
        }
        fn timer(&self, _: Instant) -> Box<dyn Timer> {
            Box::new(NoTimer)
        }
        fn spawn(&self, _: &str, _: BoxFuture<()>) -> io::Result<()> {
            Ok(())
        }
    }

    /// The idle runtime, as a client holds it.
    pub(crate) fn idle() -> Arc<dyn Runtime> {
        Arc::new(Idle)
    }
}
