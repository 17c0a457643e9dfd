//! Socket plumbing shared by the consumer and producer drivers: threads that only move bytes.
//!
//! Per nsqd connection there is one thread that connects and then reads (forwarding every
//! read as a `BytesMut` chunk to the driver), and one writer thread, started by the driver once
//! the socket is connected, that writes the `Bytes` the driver hands it. Reading never waits
//! for writing, so a peer that stops reading cannot stop us from reading (no write/write
//! deadlock), and a stuck write is cut off by the socket's write timeout.
//!
//! Every thread is named (`nsqb-...`) and its `JoinHandle` is kept by the driver ([`Threads`]),
//! which joins them all before it exits. Nothing blocks without a bound: connects use
//! `connect_timeout`, writes a write timeout, and a closed link shuts its socket down, which
//! wakes a blocked read (reads also time out now and then to look at the link's closed flag).

use bytes::{Bytes, BytesMut};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes reserved per read; a read never uses less than [`MIN_READ`] free bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;
/// How often a blocked read wakes up to check whether its link was closed (a closed link also
/// shuts the socket down, which wakes the read at once; this is only a backstop).
const READ_POLL: Duration = Duration::from_millis(500);
/// At most this many queued chunks are gathered into one write by a writer thread.
const MAX_GATHER: usize = 64;

/// What a connection's threads report to the driver.
#[derive(Debug)]
pub(crate) enum NetEvent<K> {
    /// The socket is connected; the driver starts the writer on `stream`.
    Connected { key: K, stream: TcpStream },
    /// The connection attempt failed.
    ConnectFailed { key: K, reason: String },
    /// Bytes were read.
    Data { key: K, data: BytesMut },
    /// The socket reached EOF or failed (read or write side).
    Closed { key: K, reason: String },
}

/// What a lookupd exchange reports to the driver.
#[derive(Debug)]
pub(crate) enum LookupEvent<K> {
    /// Response bytes.
    Data { key: K, data: Bytes },
    /// The server closed the response stream.
    Eof { key: K },
    /// Connecting, writing or reading failed.
    Failed { key: K, reason: String },
}

/// Every thread a driver started, joined when the driver exits.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    /// Starts a named thread.
    pub(crate) fn spawn(&mut self, name: &str, f: impl FnOnce() + Send + 'static) {
        // Forget threads that are done so a long-lived driver does not accumulate handles.
        self.handles.retain(|h| !h.is_finished());
        match std::thread::Builder::new().name(name.to_owned()).spawn(f) {
            Ok(h) => self.handles.push(h),
            Err(e) => tracing::error!(thread = %name, error = %e, "could not start a thread"),
        }
    }

    /// Joins every thread (each one ends on its own within its IO timeouts).
    pub(crate) fn join_all(&mut self) {
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A socket that can be shut down from another thread, and a flag saying it should be.
#[derive(Debug, Default)]
struct Cancel {
    closed: AtomicBool,
    stream: Mutex<Option<TcpStream>>,
}

impl Cancel {
    /// Records the socket; false (and the socket is shut down) if already cancelled.
    fn register(&self, stream: &TcpStream) -> bool {
        let mut slot = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        if self.closed.load(Ordering::Acquire) {
            let _ = stream.shutdown(Shutdown::Both);
            return false;
        }
        *slot = stream.try_clone().ok();
        true
    }

    fn is_cancelled(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks it cancelled and shuts the socket down (waking a blocked read).
    fn cancel(&self) {
        let slot = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, Ordering::Release);
        if let Some(s) = slot.as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Resolves `addr` and connects to the first address that answers within `timeout` each.
fn dial(addr: &str, timeout: Duration) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout.max(Duration::from_millis(1))) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The driver's handle on one nsqd connection's threads.
#[derive(Debug)]
pub(crate) struct ConnThreads {
    cancel: Arc<Cancel>,
    writer: Option<Sender<Bytes>>,
    span: tracing::Span,
}

impl ConnThreads {
    /// Queues bytes for the writer thread (dropped if the socket is not connected yet, which
    /// the core never asks for).
    pub(crate) fn send(&self, data: Bytes) {
        if let Some(w) = &self.writer {
            let _ = w.send(data);
        }
    }

    /// The connection's tracing span (the core handles its socket events inside it).
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Whether the writer is running (the socket is connected).
    pub(crate) fn is_connected(&self) -> bool {
        self.writer.is_some()
    }

    /// Starts the writer thread on the connected `stream`.
    pub(crate) fn start_writer<K, T>(
        &mut self,
        key: K,
        stream: TcpStream,
        write_timeout: Duration,
        threads: &mut Threads,
        tx: Sender<T>,
        wrap: fn(NetEvent<K>) -> T,
    ) where
        K: Copy + Send + std::fmt::Display + 'static,
        T: Send + 'static,
    {
        let (wtx, wrx) = mpsc::channel();
        self.writer = Some(wtx);
        let span = tracing::debug_span!(parent: &self.span, "nsqd-writer");
        threads.spawn(&format!("nsqb-wr-{key}"), move || {
            let _enter = span.enter();
            write_loop(key, stream, &wrx, write_timeout, &tx, wrap);
        });
    }

    /// Closes the connection: the writer writes what it was given, then shuts the socket
    /// down; a socket still connecting is shut down as soon as it connects.
    pub(crate) fn close(self) {
        if self.writer.is_none() {
            // No writer: nothing to flush, shut down now.
            self.cancel.cancel();
        }
        // Otherwise dropping the sender ends the writer after its last write; it shuts the
        // socket down, which ends the reader.
        drop(self.writer);
    }

    /// Shuts the socket down at once (even with writes queued).
    pub(crate) fn abort(self) {
        self.cancel.cancel();
    }
}

/// Starts connecting to `addr` on a new reader thread; events arrive on `tx`, mapped by `wrap`.
pub(crate) fn connect<K, T>(
    key: K,
    addr: &str,
    dial_timeout: Duration,
    threads: &mut Threads,
    tx: Sender<T>,
    wrap: fn(NetEvent<K>) -> T,
) -> ConnThreads
where
    K: Copy + Send + std::fmt::Display + 'static,
    T: Send + 'static,
{
    let cancel = Arc::new(Cancel::default());
    let c = cancel.clone();
    let span = nsq_proto::client::connection_span(key, addr);
    let link_span = span.clone();
    let addr = addr.to_owned();
    threads.spawn(&format!("nsqb-rd-{key}"), move || {
        let _enter = span.enter();
        read_loop(key, &addr, dial_timeout, &c, &tx, wrap);
    });
    ConnThreads {
        cancel,
        writer: None,
        span: link_span,
    }
}

fn read_loop<K, T>(
    key: K,
    addr: &str,
    dial_timeout: Duration,
    cancel: &Cancel,
    tx: &Sender<T>,
    wrap: fn(NetEvent<K>) -> T,
) where
    K: Copy,
{
    let mut stream = match dial(addr, dial_timeout) {
        Ok(s) => s,
        Err(e) => {
            let reason = if e.kind() == io::ErrorKind::TimedOut {
                format!("connect timed out after {dial_timeout:?}")
            } else {
                e.to_string()
            };
            tracing::debug!(%reason, "connect failed");
            let _ = tx.send(wrap(NetEvent::ConnectFailed { key, reason }));
            return;
        }
    };
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    if !cancel.register(&stream) {
        return;
    }
    let _ = stream.set_read_timeout(Some(READ_POLL));
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            let _ = tx.send(wrap(NetEvent::ConnectFailed {
                key,
                reason: e.to_string(),
            }));
            return;
        }
    };
    tracing::debug!("connected");
    if tx
        .send(wrap(NetEvent::Connected {
            key,
            stream: writer,
        }))
        .is_err()
    {
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    // std's Read wants initialised memory: `buf` is zeroed scratch space, read into at its
    // front; the bytes read are split off and the rest stays initialised, so each byte of a
    // chunk is zeroed once, not once per read.
    let mut buf = BytesMut::zeroed(READ_CHUNK);
    loop {
        if buf.len() < MIN_READ {
            buf.clear();
            buf.reserve(READ_CHUNK);
            buf.resize(READ_CHUNK, 0);
        }
        let result = stream.read(&mut buf[..]);
        let reason = match result {
            Ok(0) => "EOF".to_owned(),
            Ok(n) => {
                if tx
                    .send(wrap(NetEvent::Data {
                        key,
                        data: buf.split_to(n),
                    }))
                    .is_err()
                {
                    return;
                }
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if cancel.is_cancelled() {
                    return;
                }
                continue;
            }
            Err(e) => e.to_string(),
        };
        if cancel.is_cancelled() {
            tracing::debug!("connection closed");
        } else {
            tracing::debug!(%reason, "nsqd socket closed");
        }
        let _ = tx.send(wrap(NetEvent::Closed { key, reason }));
        return;
    }
}

fn write_loop<K, T>(
    key: K,
    mut stream: TcpStream,
    rx: &Receiver<Bytes>,
    write_timeout: Duration,
    tx: &Sender<T>,
    wrap: fn(NetEvent<K>) -> T,
) where
    K: Copy,
{
    let _ = stream.set_write_timeout(Some(write_timeout.max(Duration::from_millis(1))));
    let mut gather = BytesMut::new();
    while let Ok(first) = rx.recv() {
        // Usually one chunk per wake-up of the driver; if this thread fell behind, gather what
        // queued up meanwhile into one write.
        let mut data = first;
        let mut more = 0;
        while more < MAX_GATHER {
            let Ok(next) = rx.try_recv() else { break };
            if gather.is_empty() {
                gather.extend_from_slice(&data);
            }
            gather.extend_from_slice(&next);
            more += 1;
        }
        if more > 0 {
            data = gather.split().freeze();
        }
        if let Err(e) = stream.write_all(&data) {
            let reason = if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                format!("write timed out after {write_timeout:?}")
            } else {
                e.to_string()
            };
            tracing::warn!(%reason, "write failed");
            // Report first, so the driver learns this reason before the reader's EOF.
            let _ = tx.send(wrap(NetEvent::Closed { key, reason }));
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Both);
    tracing::debug!("writer done");
}

/// The driver's handle on one lookupd exchange.
#[derive(Debug)]
pub(crate) struct LookupThread {
    cancel: Arc<Cancel>,
}

impl LookupThread {
    /// Ends the exchange (shuts its socket down).
    pub(crate) fn close(self) {
        self.cancel.cancel();
    }
}

/// Runs one HTTP exchange with nsqlookupd on a short-lived thread: connect, write `request`,
/// forward the response. `dial_timeout` bounds the connect and `timeout` every read and
/// write (the core applies its own overall timeout and then asks to close the exchange, which
/// shuts the socket down at once).
pub(crate) fn lookup<K, T>(
    key: K,
    addr: &str,
    request: Bytes,
    (dial_timeout, timeout): (Duration, Duration),
    threads: &mut Threads,
    tx: Sender<T>,
    wrap: fn(LookupEvent<K>) -> T,
) -> LookupThread
where
    K: Copy + Send + std::fmt::Display + 'static,
    T: Send + 'static,
{
    let cancel = Arc::new(Cancel::default());
    let c = cancel.clone();
    let span = nsq_proto::client::lookupd_span(key, addr);
    let addr = addr.to_owned();
    let timeout = timeout.max(Duration::from_millis(1));
    threads.spawn(&format!("nsqb-lookup-{key}"), move || {
        let _enter = span.enter();
        let fail = |reason: String| {
            if !c.is_cancelled() {
                tracing::debug!(%reason, "lookupd request failed");
                let _ = tx.send(wrap(LookupEvent::Failed { key, reason }));
            }
        };
        let mut stream = match dial(&addr, dial_timeout) {
            Ok(s) => s,
            Err(e) => return fail(e.to_string()),
        };
        if !c.register(&stream) {
            return;
        }
        let _ = stream.set_read_timeout(Some(timeout));
        let _ = stream.set_write_timeout(Some(timeout));
        if let Err(e) = stream.write_all(&request) {
            return fail(e.to_string());
        }
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => {
                    let _ = tx.send(wrap(LookupEvent::Eof { key }));
                    return;
                }
                Ok(n) => {
                    let data = Bytes::copy_from_slice(&buf[..n]);
                    if tx.send(wrap(LookupEvent::Data { key, data })).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return fail(e.to_string()),
            }
        }
    });
    LookupThread { cancel }
}

/// A random seed for a state machine's RNG (jitter, random connection choice), from the OS.
pub(crate) fn random_seed() -> u64 {
    nsq_proto::client::seed_or_fallback(
        getrandom::u64(),
        &std::collections::hash_map::RandomState::new(),
        u64::from(std::process::id()),
    )
}

/// The OS hostname, sent in IDENTIFY when the configuration names none (go-nsq sends
/// `os.Hostname()`).
pub(crate) fn os_hostname() -> Option<String> {
    nsq_proto::client::hostname_from_os(&gethostname::gethostname())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    const WAIT: Duration = Duration::from_secs(5);

    fn ident(e: NetEvent<u32>) -> NetEvent<u32> {
        e
    }

    fn connected(rx: &Receiver<NetEvent<u32>>) -> TcpStream {
        match rx.recv_timeout(WAIT).unwrap() {
            NetEvent::Connected { stream, .. } => stream,
            other => panic!("expected Connected, got {other:?}"),
        }
    }

    #[test]
    fn reads_arrive_as_chunks_then_eof() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut threads = Threads::default();
        let (tx, rx) = mpsc::channel();
        let mut link = connect(7, &addr, WAIT, &mut threads, tx.clone(), ident);
        let (mut peer, _) = listener.accept().unwrap();
        let stream = connected(&rx);
        assert!(stream.nodelay().unwrap());
        link.start_writer(7, stream, WAIT, &mut threads, tx, ident);
        link.send(Bytes::from_static(b"ping"));
        let mut got = [0u8; 4];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        peer.write_all(b"hello").unwrap();
        let mut data = Vec::new();
        while data.len() < 5 {
            match rx.recv_timeout(WAIT).unwrap() {
                NetEvent::Data { key: 7, data: d } => data.extend_from_slice(&d),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(data, b"hello");
        drop(peer);
        assert!(matches!(
            rx.recv_timeout(WAIT).unwrap(),
            NetEvent::Closed { key: 7, .. }
        ));
        link.close();
        threads.join_all();
    }

    #[test]
    fn a_stuck_write_times_out_and_reading_goes_on_meanwhile() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut threads = Threads::default();
        let (tx, rx) = mpsc::channel();
        let mut link = connect(1, &addr, WAIT, &mut threads, tx.clone(), ident);
        let (mut peer, _) = listener.accept().unwrap();
        let stream = connected(&rx);
        let write_timeout = Duration::from_millis(300);
        link.start_writer(1, stream, write_timeout, &mut threads, tx, ident);
        // The peer never reads: 64 MiB cannot fit in the socket buffers.
        link.send(Bytes::from(vec![0u8; 64 << 20]));
        std::thread::sleep(Duration::from_millis(100));
        peer.write_all(b"still reading").unwrap();
        let started = Instant::now();
        let mut saw_data = false;
        loop {
            match rx.recv_timeout(WAIT).unwrap() {
                NetEvent::Data { .. } => saw_data = true,
                NetEvent::Closed { reason, .. } => {
                    assert!(reason.contains("timed out"), "{reason}");
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(saw_data, "reads continue while a write is blocked");
        assert!(started.elapsed() < WAIT);
        link.close();
        drop(peer);
        threads.join_all();
    }

    #[test]
    fn connect_failures_are_reported_and_closing_while_connecting_ends_the_thread() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let mut threads = Threads::default();
        let (tx, rx) = mpsc::channel();
        let _link = connect(2, &addr, WAIT, &mut threads, tx.clone(), ident);
        assert!(matches!(
            rx.recv_timeout(WAIT).unwrap(),
            NetEvent::ConnectFailed { key: 2, .. }
        ));
        let _bad = connect(3, "not an address", WAIT, &mut threads, tx.clone(), ident);
        assert!(matches!(
            rx.recv_timeout(WAIT).unwrap(),
            NetEvent::ConnectFailed { key: 3, .. }
        ));
        // Closed before the connection completes: the reader shuts it down and ends.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let link = connect(4, &addr, WAIT, &mut threads, tx, ident);
        link.close();
        threads.join_all();
        while let Ok(ev) = rx.try_recv() {
            if let NetEvent::Connected { stream, .. } = ev {
                // The driver shuts such a late socket down; so does the test.
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    #[test]
    fn lookup_exchanges_forward_the_response() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 3];
            s.read_exact(&mut req).unwrap();
            assert_eq!(&req, b"GET");
            s.write_all(b"HTTP/1.1 200 OK\r\n\r\n{}").unwrap();
        });
        let mut threads = Threads::default();
        let (tx, rx) = mpsc::channel::<LookupEvent<u32>>();
        let _l = lookup(
            9,
            &addr,
            Bytes::from_static(b"GET"),
            (WAIT, WAIT),
            &mut threads,
            tx,
            |e| e,
        );
        let mut body = Vec::new();
        loop {
            match rx.recv_timeout(WAIT).unwrap() {
                LookupEvent::Data { data, .. } => body.extend_from_slice(&data),
                LookupEvent::Eof { key: 9 } => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(body.ends_with(b"{}"));
        server.join().unwrap();
        threads.join_all();
    }
}
