//! What a runtime shim supplies to the one driver: the [`Runtime`] trait (clock, connect,
//! timer, spawn), its [`Socket`] and its [`Timer`]; and, apart from that IO, the [`Adapter`]
//! trait (which runtime `build` uses, and what it returns). Everything else, the driver loop
//! included, is written once in this module's parent.

use super::Error;
use bytes::{Bytes, BytesMut};
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A boxed, sendable future: what a [`Runtime`] connects with and spawns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The IO a runtime lends the client layer: sockets, a timer, a place to run the driver, and
/// the clock. Nothing else: what a shim's clients look like is its [`Adapter`].
///
/// Each adapter crate implements it once, on a small value (a runtime handle, or a poller);
/// the driver owns every socket of its client in one task:
///
/// * [`connect`](Self::connect) opens a TCP connection with `TCP_NODELAY` set; the
///   [`Socket`] it yields is read and written by the driver alone;
/// * [`timer`](Self::timer) makes the driver's one timer, armed for a first deadline and
///   re-armed when the core's `poll_timeout` changes;
/// * [`spawn`](Self::spawn) starts the driver (a task on the caller's runtime, or a thread
///   waiting on a poller of its own);
/// * [`now`](Self::now) is the clock (the core never reads one).
pub trait Runtime: Clone + Send + Sync + 'static {
    /// The socket type.
    type Socket: Socket;
    /// The timer type.
    type Timer: Timer;

    /// The current time: the system's monotonic clock unless the runtime has its own (tokio's
    /// can be paused in tests).
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
    /// waits for it when it has ended (dropping it counts).
    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()>;

    /// Whether a driver that did work looks once more before it parks, by waking itself:
    /// what the tasks it woke send at once (a producer's callers publish again as soon as
    /// their replies arrive) is then taken in the same wake-up. True by default: on a thread
    /// of its own, or a current-thread runtime, that costs one more poll and no wake-up.
    /// False where a task that wakes itself is rescheduled through other threads (tokio's
    /// multi-threaded runtime, whose writer cost 0.60x go-nsq's CPU per message with it and
    /// 0.43x without).
    fn look_again_after_work(&self) -> bool {
        true
    }
}

/// What an adapter crate adds to its [`Runtime`] for its clients: where
/// [`build`](super::ConsumerBuilder::build) finds the runtime, and how
/// [`Consumer::run`](super::Consumer::run)'s workers run. Implemented once per adapter
/// crate, on its runtime; the adapter's type aliases name the client types it yields.
pub trait Adapter: Runtime {
    /// The runtime to start a client on, from where `build` is called: [`Error::NoRuntime`]
    /// when there is none (tokio outside a runtime).
    fn current() -> Result<Self, Error>;

    /// Runs the handler workers of [`Consumer::run`](super::Consumer::run) to completion.
    /// By default they are polled concurrently inside the returned future (so they run on
    /// whatever executor polls it); a runtime that can spawn onto the caller's executor
    /// (tokio) spawns each, so handlers run in parallel.
    fn run_workers(&self, workers: Vec<BoxFuture<()>>) -> BoxFuture<()> {
        Box::pin(join_all(workers))
    }

    /// The poller of this client's driver, if it waits on one of its own
    /// ([`poller`](super::poller)). A blocking call ([`blocking`](super::blocking)) then
    /// drives its client while it waits ([`Poller::wait`](super::poller::Poller::wait)), so
    /// its round trip to nsqd wakes no other thread; without one (the default) the calling
    /// thread parks until the driver wakes it.
    fn poller(&self) -> Option<&super::poller::Poller> {
        None
    }

    /// The lease of this client's driver, if its calls drive it while they wait
    /// ([`lease`](super::lease)): a publish or a `recv` then polls the driver on its own
    /// task, and the client's own thread polls it only for what no call does. None by
    /// default (the driver's task or thread alone polls it).
    fn lease(&self) -> Option<&super::lease::Lease> {
        None
    }
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
    ended: Mutex<bool>,
    changed: Condvar,
}

impl Ended {
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn set(&self) {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    /// Whether the caller runs inside this driver (a give-up hook does): it must not wait
    /// for the driver then.
    pub(crate) fn is_current(&self) -> bool {
        POLLING.with(Cell::get) == self.id()
    }

    /// Whether the driver has ended.
    pub(crate) fn is_set(&self) -> bool {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the driver has ended (at once from inside it).
    pub(crate) fn wait(&self) {
        if self.is_current() {
            return;
        }
        let mut ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        while !*ended {
            ended = self
                .changed
                .wait(ended)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}
