//! [`Blocking`]: the client layer's [`Runtime`] on plain threads and `std::net` (the model is
//! in the crate docs). Every thread is named and joined before the driver's thread ends.

use bytes::{Bytes, BytesMut};
use nsq_proto::client::blocking::{Timer, block_on};
use nsq_proto::client::{self, BoxFuture, DriverTask, Error, Runtime, Timeouts};
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

/// Bytes zeroed per read buffer (std's `Read` wants initialised memory); a read never offers
/// less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;
/// At most this many queued chunks are gathered into one write by a writer thread.
const MAX_GATHER: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ----------------------------------------------------------------------------------- threads

/// Every thread one client started, joined by its driver thread before it ends.
#[derive(Debug, Default)]
struct Threads {
    handles: Mutex<Vec<JoinHandle<()>>>,
    next: AtomicU64,
}

impl Threads {
    /// Starts a thread named `nsqb-<what>-N`.
    fn spawn(&self, what: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let handle = std::thread::Builder::new()
            .name(format!("nsqb-{what}-{n}"))
            .spawn(f)?;
        let mut handles = lock(&self.handles);
        // Forget threads that are done so a long-lived client does not accumulate handles.
        handles.retain(|h| !h.is_finished());
        handles.push(handle);
        Ok(())
    }

    /// Joins every thread (each ends once its socket is shut down).
    fn join_all(&self) {
        // A joined thread may have started another (a reader its writer): until none is left.
        loop {
            let handles = std::mem::take(&mut *lock(&self.handles));
            if handles.is_empty() {
                return;
            }
            for h in handles {
                let _ = h.join();
            }
        }
    }
}

/// A client's driver thread: joined by `stop`, `close` and drops.
#[derive(Debug)]
pub struct DriverThread {
    /// Taken by the first joiner, who holds the lock while joining: every caller returns
    /// once the thread has finished (every socket closed, every thread joined).
    handle: Mutex<Option<JoinHandle<()>>>,
    id: ThreadId,
}

impl DriverTask for DriverThread {
    /// Whether this is the driver's own thread (a give-up hook runs there: it cannot wait).
    fn is_current(&self) -> bool {
        self.id == std::thread::current().id()
    }

    /// Waits until the driver thread has finished, and joins it (not from itself).
    fn join(&self) {
        if self.is_current() {
            return;
        }
        let mut handle = lock(&self.handle);
        if let Some(h) = handle.take() {
            let _ = h.join();
        }
    }
}

// ----------------------------------------------------------------------------------- runtime

/// Plain threads as the client layer's runtime: one value per client, holding the registry
/// of the threads its sockets use.
#[derive(Debug, Clone, Default)]
pub struct Blocking {
    threads: Arc<Threads>,
}

impl Runtime for Blocking {
    type Socket = Socket;
    type Timer = Timer;
    type Task = DriverThread;
    type Consumer = crate::Consumer;
    type Producer = crate::Producer;

    fn current() -> Result<Self, Error> {
        Ok(Blocking::default())
    }

    fn connect(&self, addr: &str, timeouts: Timeouts) -> BoxFuture<io::Result<Socket>> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let addr = addr.to_owned();
        let threads = self.threads.clone();
        let started = self.threads.spawn("rd", move || {
            read_loop(&addr, timeouts, &theirs, &threads);
        });
        match started {
            Ok(()) => Box::pin(Connect(shared)),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn timer(&self) -> Timer {
        Timer::default()
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<DriverThread> {
        let threads = self.threads.clone();
        let name = name.replacen("nsq-", "nsqb-", 1);
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            block_on(driver);
            threads.join_all();
        })?;
        Ok(DriverThread {
            id: handle.thread().id(),
            handle: Mutex::new(Some(handle)),
        })
    }
}

// ------------------------------------------------------------------------------------ socket

/// What a socket's threads tell the driver.
#[derive(Debug, Default)]
struct Shared(Mutex<SharedState>);

#[derive(Debug, Default)]
struct SharedState {
    /// The connect's outcome: the stream (to shut it down) and the writer thread's sender.
    opened: Option<io::Result<(TcpStream, mpsc::Sender<Bytes>)>>,
    /// The driver dropped its [`Connect`] (taken, timed out, or no longer wanted).
    connect_dropped: bool,
    /// Chunks read (an empty one at EOF), or the read error.
    reads: VecDeque<io::Result<BytesMut>>,
    /// The writer failed.
    write_error: Option<io::Error>,
    /// The writer has written everything and shut the socket down.
    writer_done: bool,
    /// The driver's waker.
    waker: Option<Waker>,
}

impl Shared {
    /// Updates the state and wakes the driver.
    fn tell<T>(&self, f: impl FnOnce(&mut SharedState) -> T) -> T {
        let (out, waker) = {
            let mut state = lock(&self.0);
            (f(&mut state), state.waker.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        out
    }
}

/// The driver's side of a connect.
struct Connect(Arc<Shared>);

impl Future for Connect {
    type Output = io::Result<Socket>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = lock(&self.0.0);
        let Some(opened) = state.opened.take() else {
            state.waker = Some(cx.waker().clone());
            return Poll::Pending;
        };
        Poll::Ready(opened.map(|(stream, writer)| Socket {
            shared: self.0.clone(),
            writer: Some(writer),
            stream,
        }))
    }
}

impl Drop for Connect {
    fn drop(&mut self) {
        let mut state = lock(&self.0.0);
        state.connect_dropped = true;
        // A connection opened but never taken: its writer ends and shuts it down.
        state.opened = None;
    }
}

/// A blocking `TcpStream` read and written by threads of its own.
#[derive(Debug)]
pub struct Socket {
    shared: Arc<Shared>,
    /// Bytes for the writer thread; dropped to end it after its last write.
    writer: Option<mpsc::Sender<Bytes>>,
    /// To shut the socket down when the driver drops it.
    stream: TcpStream,
}

impl client::Socket for Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        let mut state = lock(&self.shared.0);
        if let Some(e) = state.write_error.take() {
            return Poll::Ready(Err(e));
        }
        if let Some(r) = state.reads.pop_front() {
            return Poll::Ready(r);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_write(&mut self, _cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        if let Some(e) = lock(&self.shared.0).write_error.take() {
            return Poll::Ready(Err(e));
        }
        match &self.writer {
            Some(w) if w.send(data.clone()).is_ok() => Poll::Ready(Ok(data.len())),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The writer writes what it was given, then shuts the socket down.
        self.writer = None;
        let mut state = lock(&self.shared.0);
        if state.writer_done {
            Poll::Ready(Ok(()))
        } else {
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // Ends both threads: the reader's read and a blocked write return at once.
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Resolves `addr` and connects to the first address that answers within `timeout` each.
fn dial(addr: &str, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout.max(Duration::from_millis(1))) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `e`, or if it is a timeout, one that says what timed out and after how long.
fn timed_out(e: io::Error, what: &str, after: Duration) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} timed out after {after:?}"),
        ),
        _ => e,
    }
}

/// Opens the socket, starts its writer, hands it to the driver, then reads until the end.
fn read_loop(addr: &str, timeouts: Timeouts, shared: &Arc<Shared>, threads: &Threads) {
    let opened = dial(addr, timeouts.dial).and_then(|stream| {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(timeouts.write.max(Duration::from_millis(1))))?;
        let (reader, writer, theirs) = (stream.try_clone()?, stream.try_clone()?, shared.clone());
        let (tx, rx) = mpsc::channel();
        threads.spawn("wr", move || write_loop(writer, &rx, timeouts, &theirs))?;
        Ok((reader, (stream, tx)))
    });
    let mut reader = match opened {
        Ok((reader, socket)) => {
            // If the driver dropped the connect, the writer ends and shuts the socket down.
            let dropped = shared.tell(|s| {
                if !s.connect_dropped {
                    s.opened = Some(Ok(socket));
                }
                s.connect_dropped
            });
            if dropped {
                return;
            }
            reader
        }
        Err(e) => {
            let e = timed_out(e, "connect", timeouts.dial);
            return shared.tell(|s| s.opened = Some(Err(e)));
        }
    };
    // std's Read wants initialised memory: `buf` is zeroed scratch space, read into at its
    // front; the bytes read are split off and the rest stays initialised, so each byte of a
    // chunk is zeroed once, not once per read.
    let mut buf = BytesMut::new();
    loop {
        if buf.len() < MIN_READ {
            buf = BytesMut::zeroed(READ_CHUNK);
        }
        let read = match reader.read(&mut buf[..]) {
            Ok(0) => Ok(BytesMut::new()),
            Ok(n) => Ok(buf.split_to(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => Err(e),
        };
        let end = !matches!(&read, Ok(chunk) if !chunk.is_empty());
        shared.tell(|s| s.reads.push_back(read));
        if end {
            return;
        }
    }
}

/// Writes what the driver hands over until it drops its sender, then shuts the socket down.
fn write_loop(
    mut stream: TcpStream,
    rx: &mpsc::Receiver<Bytes>,
    timeouts: Timeouts,
    shared: &Shared,
) {
    let mut gather = BytesMut::new();
    while let Ok(first) = rx.recv() {
        // Usually one chunk per wake-up of the driver; if this thread fell behind, gather what
        // queued up meanwhile into one write.
        let mut data = first;
        for _ in 0..MAX_GATHER {
            let Ok(next) = rx.try_recv() else { break };
            if gather.is_empty() {
                gather.extend_from_slice(&data);
            }
            gather.extend_from_slice(&next);
        }
        if !gather.is_empty() {
            data = gather.split().freeze();
        }
        if let Err(e) = stream.write_all(&data) {
            let e = timed_out(e, "write", timeouts.write);
            // Told before the shutdown, so the driver learns this reason before the EOF.
            shared.tell(|s| {
                s.write_error = Some(e);
                s.writer_done = true;
            });
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Both);
    shared.tell(|s| s.writer_done = true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::Socket as _;
    use std::net::TcpListener;
    use std::time::Instant;

    const WAIT: Duration = Duration::from_secs(5);

    fn timeouts(write: Duration) -> Timeouts {
        Timeouts::new(WAIT, write)
    }

    fn listen() -> (TcpListener, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        (listener, addr)
    }

    fn read(socket: &mut Socket) -> io::Result<BytesMut> {
        nsq_proto::client::blocking::block_on_until(
            std::future::poll_fn(|cx| socket.poll_read(cx)),
            Some(Instant::now() + WAIT),
        )
        .expect("a read within WAIT")
    }

    fn write(socket: &mut Socket, data: &Bytes) {
        let n = block_on(std::future::poll_fn(|cx| socket.poll_write(cx, data))).unwrap();
        assert_eq!(n, data.len(), "handed to the writer thread whole");
    }

    #[test]
    fn reads_arrive_as_chunks_then_eof() {
        let ((listener, addr), rt) = (listen(), Blocking::default());
        let mut socket = block_on(rt.connect(&addr, timeouts(WAIT))).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        assert!(socket.stream.nodelay().unwrap());
        write(&mut socket, &Bytes::from_static(b"ping"));
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        peer.write_all(b"hello").unwrap();
        let mut data = Vec::new();
        while data.len() < 5 {
            data.extend_from_slice(&read(&mut socket).unwrap());
        }
        assert_eq!(data, b"hello");
        drop(peer);
        assert!(read(&mut socket).unwrap().is_empty(), "EOF");
        // A graceful close ends the writer; dropping the socket ends the reader.
        block_on(std::future::poll_fn(|cx| socket.poll_close(cx))).unwrap();
        drop(socket);
        rt.threads.join_all();
    }

    #[test]
    fn a_stuck_write_times_out_and_reading_goes_on_meanwhile() {
        let ((listener, addr), rt) = (listen(), Blocking::default());
        let write_timeout = Duration::from_millis(300);
        let mut socket = block_on(rt.connect(&addr, timeouts(write_timeout))).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        // The peer never reads: 64 MiB cannot fit in the socket buffers.
        write(&mut socket, &Bytes::from(vec![0u8; 64 << 20]));
        std::thread::sleep(Duration::from_millis(100));
        peer.write_all(b"still reading").unwrap();
        let started = Instant::now();
        let mut saw_data = false;
        let reason = loop {
            match read(&mut socket) {
                Ok(chunk) if !chunk.is_empty() => saw_data = true,
                Ok(_) => panic!("EOF before the write error"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(reason.contains("timed out"), "{reason}");
        assert!(saw_data, "reads continue while a write is blocked");
        assert!(started.elapsed() < WAIT);
        drop((socket, peer));
        rt.threads.join_all();
    }

    #[test]
    fn connect_failures_are_reported_and_an_abandoned_connect_ends_its_thread() {
        let (closed, rt) = (listen().1, Blocking::default());
        assert!(block_on(rt.connect(&closed, timeouts(WAIT))).is_err());
        assert!(block_on(rt.connect("not an address", timeouts(WAIT))).is_err());
        // Abandoned before the connection completes: the reader shuts it down and ends.
        let (_listener, addr) = listen();
        drop(rt.connect(&addr, timeouts(WAIT)));
        rt.threads.join_all();
        assert!(lock(&rt.threads.handles).is_empty());
    }
}
