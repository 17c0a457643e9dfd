//! What a runtime shim supplies to the one driver: the [`Runtime`] trait (clock, connect,
//! timer, spawn), its [`Socket`] and its [`Timer`]. Everything else, the driver loop included,
//! is written once in this module's parent.

use super::Error;
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A boxed, sendable future: what a [`Runtime`] connects with and spawns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A runtime the client layer runs on: tokio, or a driver thread per client waiting on its own
/// [`Poller`](super::poller::Poller) (`nsq-async-std` for any executor, `nsq-blocking`).
///
/// Each adapter crate implements it once, on a small value (a runtime handle, or nothing);
/// the driver ([`Consumer`](super::Consumer), [`Producer`](super::Producer)) is generic over
/// it and owns every socket of its client in one task:
///
/// * [`connect`](Self::connect) opens a TCP connection with `TCP_NODELAY` set; the
///   [`Socket`] it yields is read and written by the driver alone;
/// * [`timer`](Self::timer) makes the driver's one timer, re-armed when the core's
///   `poll_timeout` changes;
/// * [`spawn`](Self::spawn) starts the driver (a task on the caller's runtime, or a thread
///   running a `block_on` of the runtime's own);
/// * [`now`](Self::now) is the clock (the core never reads one).
pub trait Runtime: Clone + Send + Sync + Sized + 'static {
    /// The socket type.
    type Socket: Socket;
    /// The timer type.
    type Timer: Timer;
    /// What [`spawn`](Self::spawn) returns: kept by the client's handles for as long as
    /// they live (a thread runtime keeps its driver thread here, to join it).
    type Task: DriverTask;
    /// What the builders' `build` returns for a consumer: [`Consumer<Self>`](super::Consumer)
    /// for an async runtime, or a wrapper of it (the blocking adapter's `Consumer`).
    type Consumer: From<super::Consumer<Self>>;
    /// What the builders' `build` returns for a producer (see [`Consumer`](Self::Consumer)).
    type Producer: From<super::Producer<Self>>;

    /// The runtime to start a client on, from where `build` is called: [`Error::NoRuntime`]
    /// when there is none (tokio outside a runtime).
    fn current() -> Result<Self, Error>;

    /// The current time: the system's monotonic clock unless the runtime has its own (tokio's
    /// can be paused in tests).
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Opens a TCP connection to `addr` (`host:port`, resolved by the runtime) with
    /// `TCP_NODELAY` on, from [`options.local_addr`](SocketOptions::local_addr) when it is
    /// set. The driver abandons it (drops the future) after
    /// [`options.dial`](SocketOptions::dial), and fails a write that stays blocked for
    /// [`options.write`](SocketOptions::write); a runtime that connects or writes on another
    /// thread bounds that thread's waits with them.
    fn connect(&self, addr: &str, options: SocketOptions) -> BoxFuture<io::Result<Self::Socket>>;

    /// A timer, not armed.
    fn timer(&self) -> Self::Timer;

    /// Runs `driver` to completion in the background, named `name` where the runtime names
    /// its tasks or threads. The driver enters its client's span itself.
    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<Self::Task>;

    /// Runs the handler workers of [`Consumer::run`](super::Consumer::run) to completion.
    /// By default they are polled concurrently inside the returned future (so they run on
    /// whatever executor polls it); a runtime that can spawn onto the caller's executor
    /// (tokio) spawns each, so handlers run in parallel.
    fn run_workers(&self, workers: Vec<BoxFuture<()>>) -> BoxFuture<()> {
        Box::pin(join_all(workers))
    }
}

/// The driver as [`Runtime::spawn`] started it. A task of an async runtime needs nothing
/// (`()`); a driver thread is joined by the blocking API once the client has stopped.
pub trait DriverTask: Send + Sync + 'static {
    /// Whether the caller runs on the driver itself (a give-up hook does): it must not wait
    /// for the driver then.
    fn is_current(&self) -> bool {
        false
    }

    /// Waits until the driver has finished everything it started (its threads included).
    fn join(&self) {}
}

impl DriverTask for () {}

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

/// The driver's one timer.
pub trait Timer: Send + 'static {
    /// Arms the timer for `at` (replacing any earlier deadline).
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

/// Wraps a future so that it runs inside `span` (entered around each poll).
pub(crate) fn in_span<F: Future + Send + 'static>(
    span: tracing::Span,
    future: F,
) -> impl Future<Output = F::Output> + Send + 'static {
    let mut future = Box::pin(future);
    std::future::poll_fn(move |cx| span.in_scope(|| future.as_mut().poll(cx)))
}
