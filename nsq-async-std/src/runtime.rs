//! [`AsyncStd`]: the client layer's [`Runtime`] for async-std, smol and any other executor,
//! in one of two modes:
//!
//! * by default each client's driver runs on a thread of its own, waiting on a poller of its
//!   own ([`nsq_client::poller`]); the application's tasks are woken through their wakers.
//!   It needs nothing from the application and works under any executor;
//! * after [`set_executor`], drivers are tasks spawned on the application's executor, over
//!   async-io's reactor (the one async-std and smol share): no thread of the client's own,
//!   and no thread hop between a task and its client's driver when they share an executor
//!   thread.

use bytes::{Bytes, BytesMut};
use nsq_client::poller::{self, Poller, PollerTimer};
use nsq_client::{Adapter, BoxFuture, Error, Runtime, SocketOptions};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

/// Bytes zeroed per read buffer (std's `Read` wants initialised memory); a read never offers
/// less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;

/// How a driver is started on the application's executor.
type Spawner = Arc<dyn Fn(BoxFuture<()>) + Send + Sync>;

/// The executor clients built from now on run their drivers on ([`set_executor`]).
static EXECUTOR: RwLock<Option<Spawner>> = RwLock::new(None);

/// Runs the driver of every client built from now on (consumers, producers, HTTP clients)
/// as a task spawned with `spawn` on the application's executor, its sockets and timer on
/// async-io's reactor (the one async-std and smol share), instead of on a thread of its own.
/// Clients built earlier keep their threads; [`clear_executor`] goes back to threads.
///
/// `spawn` must run the future to completion in the background (detached): for smol,
/// `|driver| smol::spawn(driver).detach()`; for async-std, `|driver| drop(async_std::task::spawn(driver))`.
///
/// What it buys: a task that waits for its publish's reply, or for the next message, is
/// woken by its driver on the executor's own thread, so a round trip costs no wake-up of
/// another thread when both share one (smol's default executor has one thread). On a
/// multi-threaded executor the driver and the task may still land on different threads.
/// A driver spawned on an executor runs only while that executor runs: it must outlive
/// every client built with it.
pub fn set_executor(spawn: impl Fn(BoxFuture<()>) + Send + Sync + 'static) {
    *EXECUTOR.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(spawn));
}

/// Undoes [`set_executor`]: clients built from now on run their drivers on threads of their
/// own again.
pub fn clear_executor() {
    *EXECUTOR.write().unwrap_or_else(PoisonError::into_inner) = None;
}

/// The client layer's runtime for async-std, smol and any executor: by default one driver
/// thread per client, waiting on the client's own poller; after [`set_executor`], the
/// application's executor and async-io's reactor.
#[derive(Clone)]
pub struct AsyncStd(Mode);

#[derive(Clone)]
enum Mode {
    /// A driver thread and a poller of the client's own.
    Thread(Poller),
    /// A task on the application's executor, over async-io's reactor.
    Executor(Spawner),
}

impl fmt::Debug for AsyncStd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Mode::Thread(p) => f.debug_tuple("AsyncStd::Thread").field(p).finish(),
            Mode::Executor(_) => f.write_str("AsyncStd::Executor"),
        }
    }
}

/// A client's TCP connection: on its own poller, or on async-io's reactor.
#[derive(Debug)]
pub struct Socket(SocketKind);

#[derive(Debug)]
enum SocketKind {
    Polled(nsq_client::poller::Socket),
    Reactor {
        stream: async_io::Async<TcpStream>,
        /// Zeroed space read into at its front; what is read is split off.
        buf: BytesMut,
        /// Whether a read may find bytes: false once a read came back short (drained the
        /// socket) or would block, until the reactor reports the socket readable.
        readable: bool,
        /// Likewise for writes (false once a write was short or would block).
        writable: bool,
    },
}

impl nsq_client::Socket for Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        let (stream, buf, readable) = match &mut self.0 {
            SocketKind::Polled(s) => return s.poll_read(cx),
            SocketKind::Reactor {
                stream,
                buf,
                readable,
                ..
            } => (stream, buf, readable),
        };
        loop {
            if !*readable {
                // Drained: wait for the reactor's word (no `recv` that returns EAGAIN).
                std::task::ready!(stream.poll_readable(cx))?;
                *readable = true;
            }
            if buf.len() < MIN_READ {
                *buf = BytesMut::zeroed(READ_CHUNK);
            }
            let offered = buf.len();
            match stream.get_ref().read(&mut buf[..]) {
                Ok(n) => {
                    // A read that took less than it was offered drained the socket.
                    *readable = n == offered || n == 0;
                    return Poll::Ready(Ok(buf.split_to(n)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        let (stream, writable) = match &mut self.0 {
            SocketKind::Polled(s) => return s.poll_write(cx, data),
            SocketKind::Reactor {
                stream, writable, ..
            } => (stream, writable),
        };
        loop {
            if !*writable {
                std::task::ready!(stream.poll_writable(cx))?;
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

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let stream = match &mut self.0 {
            SocketKind::Polled(s) => return s.poll_close(cx),
            SocketKind::Reactor { stream, .. } => stream,
        };
        // Everything was written (the driver closes once its queue is empty): send FIN.
        Poll::Ready(match stream.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}

/// The driver's timer: the poller's, or async-io's.
#[derive(Debug)]
pub struct Timer(TimerKind);

#[derive(Debug)]
enum TimerKind {
    Polled(PollerTimer),
    Reactor(async_io::Timer),
}

impl nsq_client::Timer for Timer {
    fn reset(&mut self, at: Instant) {
        match &mut self.0 {
            TimerKind::Polled(t) => t.reset(at),
            TimerKind::Reactor(t) => t.set_at(at),
        }
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            TimerKind::Polled(t) => t.poll_expired(cx),
            TimerKind::Reactor(t) => std::future::Future::poll(Pin::new(t), cx).map(drop),
        }
    }
}

impl Runtime for AsyncStd {
    type Socket = Socket;
    type Timer = Timer;

    fn connect(&self, addr: &str, options: SocketOptions) -> BoxFuture<io::Result<Socket>> {
        match &self.0 {
            Mode::Thread(p) => {
                let connecting = p.connect(addr, options);
                Box::pin(async move { Ok(Socket(SocketKind::Polled(connecting.await?))) })
            }
            Mode::Executor(_) => Box::pin(connect_on_reactor(addr.to_owned(), options)),
        }
    }

    fn timer(&self, at: Instant) -> Timer {
        Timer(match &self.0 {
            Mode::Thread(_) => TimerKind::Polled(PollerTimer::new(at)),
            Mode::Executor(_) => TimerKind::Reactor(async_io::Timer::at(at)),
        })
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        match &self.0 {
            Mode::Thread(p) => p.spawn(name, driver),
            Mode::Executor(spawn) => {
                spawn(driver);
                Ok(())
            }
        }
    }
}

impl Adapter for AsyncStd {
    fn current() -> Result<Self, Error> {
        if let Some(spawn) = EXECUTOR
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Ok(AsyncStd(Mode::Executor(spawn)));
        }
        Poller::new()
            .map(|p| AsyncStd(Mode::Thread(p)))
            .map_err(|e| Error::Spawn(format!("could not create a poller: {e}")))
    }
}

/// Connects to `addr` (`host:port`) on async-io's reactor with `TCP_NODELAY` on: each
/// address it resolves to in turn, from `options.local_addr` when set.
async fn connect_on_reactor(addr: String, options: SocketOptions) -> io::Result<Socket> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
    for a in poller::resolve(&addr).await? {
        let connected = match options.local_addr {
            None => async_io::Async::<TcpStream>::connect(a).await,
            Some(local) if local.is_ipv4() != a.is_ipv4() => Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("local_addr {local} cannot reach {a}"),
            )),
            Some(local) => match poller::connect_from(local, a, options.dial).await {
                Ok(stream) => async_io::Async::new(stream),
                Err(e) => Err(e),
            },
        };
        match connected {
            Ok(stream) => {
                // Nagle off: the driver writes once per wake-up, and waits for nothing more.
                stream.get_ref().set_nodelay(true)?;
                return Ok(Socket(SocketKind::Reactor {
                    stream,
                    buf: BytesMut::new(),
                    readable: true,
                    writable: true,
                }));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}
