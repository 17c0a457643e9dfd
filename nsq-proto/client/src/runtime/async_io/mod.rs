//! [`AsyncStd`]: the [`Runtime`] for async-std, smol and any other executor (cargo feature
//! `async-io`, which `nsq-async-std` turns on), over async-io's reactor (the one async-std
//! and smol share), in one of two modes:
//!
//! * by default the tasks that wait for a client drive it themselves ([`Lease`], through
//!   each call's [`Caller`]), and a thread of the client's own drives it when none does. It
//!   needs nothing from the application and works under any executor;
//! * [`AsyncStd::on_executor`]: drivers are tasks spawned on the application's executor: no
//!   thread of the client's own, and no thread hop between a task and its client's driver
//!   when they share an executor thread.

#![allow(
    clippy::disallowed_methods,
    reason = "a runtime: its clock, sockets and threads are what the rest of the client layer may not touch"
)]

mod lease;

use super::read_buf::ReadBuf;
use super::{BoxFuture, Runtime, SocketOptions, Waiter};
use crate::dial;
use atomic_waker::AtomicWaker;
use bytes::{Bytes, BytesMut};
use lease::{Caller, Lease};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// How a driver is started on the application's executor.
type Spawner = Arc<dyn Fn(BoxFuture<()>) + Send + Sync>;

/// The runtime for async-std, smol and any executor, over async-io's reactor. A client
/// built outside a tokio runtime runs on it without being told, in its default mode: driven
/// by the tasks that wait for it (through a lease) and by a thread of its own when none
/// does. [`on_executor`](Self::on_executor) makes the other mode, for a builder's
/// `runtime(..)`.
#[derive(Clone)]
pub struct AsyncStd(Mode);

#[derive(Clone)]
enum Mode {
    /// The client's calls drive it while they wait; a thread of the client's own when none
    /// does.
    Thread(Lease),
    /// A task on the application's executor.
    Executor(Spawner),
}

impl fmt::Debug for AsyncStd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Mode::Thread(lease) => f.debug_tuple("AsyncStd::Thread").field(lease).finish(),
            Mode::Executor(_) => f.write_str("AsyncStd::Executor"),
        }
    }
}

impl AsyncStd {
    /// A runtime that runs the driver of each client given it (consumers, producers, HTTP
    /// clients: one value serves any number) as a task spawned with `spawn` on the
    /// application's executor, instead of driven by the tasks that wait for the client with
    /// a thread of the client's own for the rest (the default).
    ///
    /// `spawn` must run the future to completion in the background (detached): for smol,
    /// `|driver| smol::spawn(driver).detach()`; for async-std,
    /// `|driver| drop(async_std::task::spawn(driver))`.
    ///
    /// What it buys: no thread of the client's own. A task that waits for its publish's
    /// reply, or for the next message, is woken by its driver on the executor's own thread,
    /// so a round trip costs no wake-up of another thread when both share one (smol's
    /// default executor has one thread): about as cheap per message as the default mode, a
    /// little cheaper on smol. On a multi-threaded executor the driver and the task may
    /// still land on different threads. A driver spawned on an executor runs only while that
    /// executor runs: it must outlive every client built with it.
    pub fn on_executor(spawn: impl Fn(BoxFuture<()>) + Send + Sync + 'static) -> Arc<dyn Runtime> {
        Arc::new(AsyncStd(Mode::Executor(Arc::new(spawn))))
    }

    /// The default mode, with a lease of its own: one per client.
    pub(crate) fn for_client() -> Arc<dyn Runtime> {
        Arc::new(AsyncStd(Mode::Thread(Lease::new())))
    }
}

/// A client's TCP connection, on async-io's reactor.
#[derive(Debug)]
struct Socket {
    stream: async_io::Async<TcpStream>,
    /// Zeroed space read into at its front; what is read is split off.
    buf: ReadBuf,
    /// Whether a read may find bytes: false once a read came back short (drained the
    /// socket) or would block, until the reactor reports the socket readable.
    readable: bool,
    /// Likewise for writes (false once a write was short or would block).
    writable: bool,
    /// What the reactor said, and who to tell.
    ready: Arc<Readiness>,
    /// The wakers this socket registers with the reactor, one per direction: each notes
    /// that its direction is ready, then wakes the driver.
    read_waker: Waker,
    write_waker: Waker,
}

/// A socket's readiness as the reactor reported it through the socket's own wakers.
///
/// async-io's `poll_readable` can answer `Pending` after the reactor has woken it for that
/// very readiness: it drops an event delivered in the reactor tick during which it was
/// registered (it cannot tell whether the event came before the registration), and
/// re-arms. A socket polled from a thread other than the one waiting in the reactor (the
/// lease's, or another worker's) registers during the reactor's wait, so that can happen at
/// every wake-up: the client stalls until some other wake-up lands between two of the
/// reactor's waits (seconds, in a PublishAsync loop). The socket's own wakers record the
/// reactor's word, so a direction it reported ready is tried even when `poll_readable`
/// (still asked first, so that it takes the event as seen) says `Pending`.
#[derive(Debug, Default)]
struct Readiness {
    read: AtomicBool,
    write: AtomicBool,
    driver: AtomicWaker,
}

impl Readiness {
    /// Whether the reactor says one direction is ready: `poll` asks async-io with that
    /// direction's own waker `own` (taking the event as seen), and `flag`, which `own` sets,
    /// overrides a `Pending` that follows the reactor's word. The driver's waker (`cx`) is
    /// woken by `own`.
    fn poll(
        &self,
        flag: &AtomicBool,
        cx: &Context<'_>,
        own: &Waker,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<()>>,
    ) -> Poll<io::Result<()>> {
        self.driver.register(cx.waker());
        let polled = poll(&mut Context::from_waker(own));
        // Reported ready (even if async-io took the event for a stale one).
        let reported = flag.swap(false, Ordering::SeqCst);
        match polled {
            Poll::Pending if reported => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

/// One direction's waker ([`Readiness`]).
struct DirectionWaker {
    ready: Arc<Readiness>,
    write: bool,
}

impl Wake for DirectionWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let flag = if self.write {
            &self.ready.write
        } else {
            &self.ready.read
        };
        flag.store(true, Ordering::SeqCst);
        self.ready.driver.wake();
    }
}

impl Socket {
    fn new(stream: async_io::Async<TcpStream>) -> Socket {
        let ready = Arc::new(Readiness::default());
        let waker = |write| {
            Waker::from(Arc::new(DirectionWaker {
                ready: ready.clone(),
                write,
            }))
        };
        Socket {
            stream,
            buf: ReadBuf::default(),
            readable: true,
            writable: true,
            read_waker: waker(false),
            write_waker: waker(true),
            ready,
        }
    }
}

impl super::Socket for Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        let Socket {
            stream,
            buf,
            readable,
            ready,
            read_waker,
            ..
        } = self;
        loop {
            if !*readable {
                // Drained: wait for the reactor's word (no `recv` that returns EAGAIN).
                std::task::ready!(ready.poll(&ready.read, cx, read_waker, |own| {
                    stream.poll_readable(own)
                }))?;
                *readable = true;
            }
            match buf.read_zeroed(|space| stream.get_ref().read(space)) {
                Ok((read, short)) => {
                    // A read that took less than it was offered drained the socket.
                    *readable = !short;
                    return Poll::Ready(Ok(read));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        let Socket {
            stream,
            writable,
            ready,
            write_waker,
            ..
        } = self;
        loop {
            if !*writable {
                std::task::ready!(ready.poll(&ready.write, cx, write_waker, |own| {
                    stream.poll_writable(own)
                }))?;
                *writable = true;
            }
            match stream.get_ref().write(data) {
                Ok(n) => {
                    // A write that took less than it was offered filled the socket's buffer.
                    *writable = n == data.len();
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_close(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let stream = &self.stream;
        // Everything was written (the driver closes once its queue is empty): send FIN.
        Poll::Ready(match stream.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}

/// The driver's timer: async-io's.
#[derive(Debug)]
struct ReactorTimer(async_io::Timer);

impl super::Timer for ReactorTimer {
    fn reset(&mut self, at: Instant) {
        self.0.set_at(at);
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        std::future::Future::poll(Pin::new(&mut self.0), cx).map(drop)
    }
}

impl Runtime for AsyncStd {
    fn connect(
        &self,
        addr: &str,
        options: SocketOptions,
    ) -> BoxFuture<io::Result<Box<dyn super::Socket>>> {
        let connect = connect_on_reactor(addr.to_owned(), options);
        Box::pin(async move { Ok(Box::new(connect.await?) as Box<dyn super::Socket>) })
    }

    fn timer(&self, at: Instant) -> Box<dyn super::Timer> {
        Box::new(ReactorTimer(async_io::Timer::at(at)))
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        match &self.0 {
            Mode::Thread(lease) => {
                let thread = std::thread::Builder::new().name(name.to_owned());
                match lease.start(driver) {
                    Ok(()) => {
                        let lease = lease.clone();
                        thread.spawn(move || lease.run())
                    }
                    // A second driver on this runtime value: a thread of its own, no callers.
                    Err(driver) => thread.spawn(move || crate::blocking::block_on(driver)),
                }
                .map(drop)
            }
            Mode::Executor(spawn) => {
                spawn(driver);
                Ok(())
            }
        }
    }

    fn look_again_after_work(&self) -> bool {
        // With callers driving, the tasks a poll woke drive the client themselves.
        matches!(self.0, Mode::Executor(_))
    }

    /// A call drives its client while it waits, when the client has a lease (the default
    /// mode).
    fn waiter(&self) -> Option<Box<dyn Waiter>> {
        match &self.0 {
            Mode::Thread(lease) => Some(Box::new(Caller::new(Some(lease)))),
            Mode::Executor(_) => None,
        }
    }
}

/// Connects to `addr` (`host:port`) on async-io's reactor with `TCP_NODELAY` on: each
/// address it resolves to in turn, from `options.local_addr` when set.
async fn connect_on_reactor(addr: String, options: SocketOptions) -> io::Result<Socket> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
    for a in dial::resolve(&addr).await? {
        let connected = match options.local_addr {
            None => async_io::Async::<TcpStream>::connect(a).await,
            Some(local) if local.is_ipv4() != a.is_ipv4() => Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("local_addr {local} cannot reach {a}"),
            )),
            Some(local) => match dial::connect_from(local, a, options.dial).await {
                Ok(stream) => async_io::Async::new(stream),
                Err(e) => Err(e),
            },
        };
        match connected {
            Ok(stream) => {
                // Nagle off: the driver writes once per wake-up, and waits for nothing more.
                stream.get_ref().set_nodelay(true)?;
                return Ok(Socket::new(stream));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Socket as _;
    use std::net::TcpListener;
    use std::sync::{Mutex, PoisonError, mpsc};
    use std::time::Duration;

    /// A waker that reports each wake-up on a channel.
    struct Report(Mutex<mpsc::Sender<()>>);

    impl Wake for Report {
        fn wake(self: Arc<Self>) {
            let _ = self
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .send(());
        }
    }

    /// The socket is registered while another thread waits in async-io's reactor, and its
    /// bytes arrive during that same wait: async-io's own check takes the event for a stale
    /// one (it cannot tell it from one that came before the registration); the socket's own
    /// waker does not. Before the socket had wakers of its own, the poll after the wake-up
    /// was `Pending` and the bytes were not read until some other wake-up.
    #[test]
    fn bytes_reported_during_the_reactor_wait_that_registered_the_socket_are_read() {
        // Another thread waits in the reactor while the test runs (its timer ends each
        // wait after 50 ms; each round below takes far less).
        let stop = Arc::new(AtomicBool::new(false));
        let reactor = std::thread::spawn({
            let stop = stop.clone();
            move || {
                async_io::block_on(async move {
                    while !stop.load(Ordering::SeqCst) {
                        async_io::Timer::after(Duration::from_millis(50)).await;
                    }
                });
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        for round in 0..20 {
            // A connection of its own per round: the one wake-up its waker sees is the
            // reactor's word for the byte written below.
            let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (ours, _) = listener.accept().unwrap();
            let mut socket = Socket::new(async_io::Async::new(ours).unwrap());
            let (tx, rx) = mpsc::channel();
            let waker = Waker::from(Arc::new(Report(Mutex::new(tx))));
            let mut cx = Context::from_waker(&waker);
            // Nothing to read: this poll registers with the reactor, which waits on another
            // thread.
            assert!(socket.poll_read(&mut cx).is_pending(), "round {round}");
            peer.write_all(b"x").unwrap();
            rx.recv_timeout(Duration::from_secs(10))
                .expect("the reactor reports the socket readable");
            match socket.poll_read(&mut cx) {
                Poll::Ready(Ok(bytes)) => assert_eq!(&bytes[..], b"x", "round {round}"),
                other => panic!("round {round}: woken for bytes but not read: {other:?}"),
            }
        }
        stop.store(true, Ordering::SeqCst);
        reactor.join().unwrap();
    }
}
