//! A client's IO on a thread of its own, for runtimes that have no reactor to lend
//! (`nsq-blocking`) or whose reactor costs more than it gives (`nsq-async-std`): a
//! [`Poller`] per client, waited on by its driver thread over the client's non-blocking
//! sockets ([`Socket`]), with the driver's [`PollerTimer`] as the wait's deadline. Other threads
//! wake the driver through the poller, once per batch of commands and only when it waits.
//!
//! The poller is mio's (epoll, kqueue or IOCP). Sockets are registered once, edge-triggered,
//! for both directions; what the events said is kept per socket, so a socket with nothing to
//! read is not read (no `recv` that returns `EAGAIN`) and no registration is re-armed per
//! wait.

use super::runtime::{BoxFuture, SocketOptions};
use bytes::{Bytes, BytesMut};
use mio::net::TcpStream;
use mio::{Events, Interest, Registry, Token};
use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

/// Bytes zeroed per read buffer (std's `Read` wants initialised memory); a read never offers
/// less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;
/// The token of the poller's waker (sockets count up from 1).
const WAKER: Token = Token(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

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

/// One client's poller, shared by its driver thread (which waits on it), its sockets (which
/// register with it) and every waker of the driver (which interrupt the wait).
#[derive(Debug)]
struct Reactor {
    /// The poller, until the driver thread (or a test's `Poller::block_on`) takes it.
    poller: Mutex<Option<mio::Poll>>,
    registry: Registry,
    waker: mio::Waker,
    /// The driver was woken since it last looked (set by wakers, cleared before a poll).
    notified: AtomicBool,
    /// The driver waits in the poller, or is about to: a waker must interrupt it.
    sleeping: AtomicBool,
    /// Each registered socket's readiness, by token.
    sockets: Mutex<HashMap<Token, Arc<Readiness>>>,
    next_token: AtomicUsize,
}

impl Reactor {
    fn new() -> io::Result<Reactor> {
        let poller = mio::Poll::new()?;
        let registry = poller.registry().try_clone()?;
        let waker = mio::Waker::new(&registry, WAKER)?;
        Ok(Reactor {
            poller: Mutex::new(Some(poller)),
            registry,
            waker,
            notified: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            sockets: Mutex::new(HashMap::new()),
            next_token: AtomicUsize::new(WAKER.0 + 1),
        })
    }

    /// Runs `future` to completion on this thread: polls it, then waits for readiness, a
    /// wake-up or the deadline of the [`PollerTimer`] it polled last, and again.
    fn block_on<F: Future>(self: &Arc<Self>, future: F) -> io::Result<F::Output> {
        let mut poller = lock(&self.poller)
            .take()
            .ok_or_else(|| io::Error::other("the poller is already in use"))?;
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        let mut events = Events::with_capacity(256);
        let output = loop {
            self.notified.store(false, Ordering::SeqCst);
            NEXT_TIMER.with(|t| t.set(None));
            if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                break v;
            }
            let timeout = NEXT_TIMER
                .with(Cell::get)
                .map(|t| t.saturating_duration_since(Instant::now()));
            // Announce the wait, then look once more: a wake-up either sees `sleeping` and
            // interrupts the wait, or was seen here (both are SeqCst).
            self.sleeping.store(true, Ordering::SeqCst);
            if self.notified.load(Ordering::SeqCst) {
                self.sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            let waited = poller.poll(&mut events, timeout);
            self.sleeping.store(false, Ordering::SeqCst);
            match waited {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    *lock(&self.poller) = Some(poller);
                    return Err(e);
                }
            }
            let sockets = lock(&self.sockets);
            for event in &events {
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
        };
        *lock(&self.poller) = Some(poller);
        Ok(output)
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

/// Wakes the driver: the first wake-up since it last looked interrupts its wait, if it
/// waits; later ones (and any while it runs) cost an atomic operation.
impl Wake for Reactor {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.notified.swap(true, Ordering::SeqCst) && self.sleeping.load(Ordering::SeqCst) {
            if let Err(e) = self.waker.wake() {
                tracing::error!(error = %e, "could not wake the driver thread");
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
pub struct PollerTimer {
    at: Instant,
}

impl PollerTimer {
    /// A timer armed for `at`.
    pub fn new(at: Instant) -> PollerTimer {
        PollerTimer { at }
    }
}

impl super::Timer for PollerTimer {
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
/// [`Runtime`](super::Runtime) with: [`connect`](Self::connect) a [`Socket`],
/// [`spawn`](Self::spawn) the driver on a thread that waits on the poller, and the
/// [`PollerTimer`] that bounds the wait. Cheap to clone (one poller per client, shared).
#[derive(Debug, Clone)]
pub struct Poller {
    reactor: Arc<Reactor>,
}

impl Poller {
    /// A poller of its own (an epoll instance and an eventfd on Linux).
    pub fn new() -> io::Result<Poller> {
        Ok(Poller {
            reactor: Arc::new(Reactor::new()?),
        })
    }

    /// Opens a non-blocking TCP connection to `addr` (`host:port`) with `TCP_NODELAY` on, its
    /// readiness reported by this poller, from `options.local_addr` when set. The future is
    /// ready once connected (or failed); the driver bounds it with the dial timeout.
    pub fn connect(&self, addr: &str, options: SocketOptions) -> BoxFuture<io::Result<Socket>> {
        let (reactor, addr) = (self.reactor.clone(), addr.to_owned());
        Box::pin(async move {
            let addrs = resolve(&reactor, addr).await?;
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
                    Some(local) => connect_from(&reactor, local, a, options.dial).await,
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
    pub fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        let reactor = self.reactor.clone();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                if let Err(e) = reactor.block_on(driver) {
                    tracing::error!(error = %e, "the driver's poller failed");
                }
            })?;
        Ok(())
    }

    /// Runs `future` on this thread over this poller (its sockets' tests).
    #[cfg(test)]
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.reactor.block_on(future).expect("the poller works")
    }
}

/// The addresses of `addr` (`host:port`): at once for an IP address, else resolved on a
/// short-lived thread of its own (the system resolver blocks; the driver must not).
async fn resolve(reactor: &Arc<Reactor>, addr: String) -> io::Result<Vec<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    on_thread(reactor, "nsqb-resolve", move || {
        addr.to_socket_addrs().map(Iterator::collect)
    })
    .await
}

/// Runs the blocking `work` on a short-lived thread named `name` and waits for its result
/// without blocking the driver: the thread wakes the poller when it is done.
async fn on_thread<T: Send + 'static>(
    reactor: &Arc<Reactor>,
    name: &str,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let slot: Arc<Mutex<Option<io::Result<T>>>> = Arc::default();
    let (theirs, waker) = (slot.clone(), Waker::from(reactor.clone()));
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            *lock(&theirs) = Some(work());
            waker.wake();
        })?;
    std::future::poll_fn(|_| match lock(&slot).take() {
        Some(done) => Poll::Ready(done),
        None => Poll::Pending,
    })
    .await
}

/// Connects to `addr` from `local` (bound first), on a short-lived thread of its own: std has
/// no portable way to tell a non-blocking connect in progress from one that failed, so the
/// connect blocks there, for at most `dial`. Then the stream joins the poller like any other.
async fn connect_from(
    reactor: &Arc<Reactor>,
    local: SocketAddr,
    addr: SocketAddr,
    dial: std::time::Duration,
) -> io::Result<Socket> {
    use socket2::{Domain, Protocol, Type};
    let stream = on_thread(reactor, "nsqb-connect", move || {
        let s = socket2::Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.bind(&local.into())?;
        s.connect_timeout(&addr.into(), dial)?;
        s.set_nonblocking(true)?;
        Ok(std::net::TcpStream::from(s))
    })
    .await?;
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
pub struct Socket {
    socket: Registered,
    /// Zeroed space read into at its front; what is read is split off.
    buf: BytesMut,
}

/// A read or write that took less than it was offered drained the socket (or filled its
/// buffer): the next would block, and the poller reports the next change (tokio does the
/// same). Not on Windows, whose poller is emulated and reports only what it was asked.
const SHORT_MEANS_DRAINED: bool = cfg!(not(windows));

impl super::Socket for Socket {
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
    fn opts() -> super::SocketOptions {
        super::SocketOptions::new(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(5),
        )
    }

    use super::super::Socket as _;
    use super::super::Timer as _;
    use super::*;
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
}
