//! The poller's tests: its sockets over a real loopback connection, and the lease's hand-offs
//! between callers and the driver thread.

use super::reactor::CALLER;
use super::*;
use crate::runtime::Socket as _;
use crate::runtime::Timer as _;
use bytes::Bytes;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn opts() -> SocketOptions {
    SocketOptions::new(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_secs(5),
    )
}

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

/// The data and the peer's FIN both arrive before the poller's first wait, and the FIN's
/// edge is reported once, with the data: the short read that takes the data must not hide
/// the EOF behind it (a consumer held a connection nsqd had closed, seen `Ready` for good,
/// when its last message and the close came together).
#[test]
fn an_eof_that_arrives_with_the_last_data_is_read() {
    let ((listener, addr), rt) = (listen(), Poller::new().unwrap());
    let mut socket = rt.block_on(rt.connect(&addr, opts())).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    // On loopback both are in the client's receive queue once these calls return.
    peer.write_all(b"last words").unwrap();
    drop(peer);
    let mut data = Vec::new();
    loop {
        let chunk = within(&rt, |cx| socket.poll_read(cx)).unwrap();
        if chunk.is_empty() {
            break;
        }
        data.extend_from_slice(&chunk);
    }
    assert_eq!(data, b"last words", "then EOF");
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

/// What a test driver read, and on which thread; and the wakers of whoever waits for it.
#[derive(Default)]
struct Seen {
    chunks: Mutex<Vec<(std::thread::ThreadId, Vec<u8>)>>,
    /// Every waiting future's waker.
    wakers: Mutex<Vec<Waker>>,
}

/// A driver that reads `socket` until EOF, noting each chunk and the thread that read it.
fn reader_driver(mut socket: Socket, seen: Arc<Seen>) -> BoxFuture<()> {
    Box::pin(std::future::poll_fn(move |cx| {
        loop {
            match socket.poll_read(cx) {
                Poll::Ready(Ok(chunk)) if !chunk.is_empty() => {
                    let me = std::thread::current().id();
                    lock(&seen.chunks).push((me, chunk.to_vec()));
                    for w in lock(&seen.wakers).drain(..) {
                        w.wake();
                    }
                }
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }))
}

/// Ready once `seen` has `n` chunks.
fn chunks(seen: &Arc<Seen>, n: usize) -> impl Future<Output = ()> + use<> {
    let seen = seen.clone();
    std::future::poll_fn(move |cx| {
        lock(&seen.wakers).push(cx.waker().clone());
        if lock(&seen.chunks).len() >= n {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

/// Waits (bounded: 5 s) until `f` holds, looking every millisecond.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < until, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A poller whose driver reads from a connected peer.
fn driven() -> (Poller, Arc<Seen>, std::net::TcpStream) {
    let ((listener, addr), rt) = (listen(), Poller::new().unwrap());
    let socket = rt.block_on(rt.connect(&addr, opts())).unwrap();
    let (peer, _) = listener.accept().unwrap();
    let seen = Arc::new(Seen::default());
    rt.spawn("nsq-test-driver", reader_driver(socket, seen.clone()))
        .unwrap();
    (rt, seen, peer)
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[test]
fn a_waiting_caller_drives_and_the_driver_thread_takes_over_when_callers_leave() {
    let (rt, seen, mut peer) = driven();
    let reactor = rt.reactor.clone();
    // The peer writes once a caller holds the lease (the driver thread hands it over).
    let writer = std::thread::spawn(move || {
        eventually("a caller drives", || {
            reactor.holder.load(Ordering::SeqCst) == CALLER
        });
        peer.write_all(b"one").unwrap();
        peer
    });
    let me = std::thread::current().id();
    assert!(
        rt.wait(std::pin::pin!(chunks(&seen, 1)), Some(soon()))
            .is_some()
    );
    let mut peer = writer.join().unwrap();
    assert_eq!(
        lock(&seen.chunks)[0],
        (me, b"one".to_vec()),
        "read by the caller"
    );
    // No caller waits now: the driver thread takes the lease back, and reads.
    peer.write_all(b"two").unwrap();
    eventually("the driver thread reads", || lock(&seen.chunks).len() == 2);
    let thread = rt.reactor.thread.get().unwrap().id();
    assert_eq!(lock(&seen.chunks)[1], (thread, b"two".to_vec()));
    // A wait that times out gives the lease back.
    let waited = rt.wait(
        std::pin::pin!(chunks(&seen, 3)),
        Some(Instant::now() + Duration::from_millis(20)),
    );
    assert!(waited.is_none());
    assert_ne!(rt.reactor.holder.load(Ordering::SeqCst), CALLER);
    // EOF ends the driver, whoever drives.
    drop(peer);
    eventually("the driver ends", || rt.reactor.done.load(Ordering::SeqCst));
}

#[test]
fn the_lease_passes_from_caller_to_waiting_caller() {
    let (rt, seen, mut peer) = driven();
    let reactor = rt.reactor.clone();
    let writer = std::thread::spawn(move || {
        // Both callers are there: one drives, the other waits for the lease.
        eventually("one caller drives, one waits", || {
            reactor.holder.load(Ordering::SeqCst) == CALLER
                && reactor.waiting.load(Ordering::SeqCst) == 1
        });
        peer.write_all(b"one").unwrap();
        peer
    });
    let second = {
        let (rt, seen) = (rt.clone(), seen.clone());
        std::thread::spawn(move || {
            let waited = rt.wait(std::pin::pin!(chunks(&seen, 2)), Some(soon()));
            (std::thread::current().id(), waited.is_some())
        })
    };
    assert!(
        rt.wait(std::pin::pin!(chunks(&seen, 1)), Some(soon()))
            .is_some()
    );
    let mut peer = writer.join().unwrap();
    // The second caller now drives (the lease was handed to it), and reads the rest.
    let reactor = rt.reactor.clone();
    eventually("the second caller drives", || {
        reactor.holder.load(Ordering::SeqCst) == CALLER
    });
    peer.write_all(b"two").unwrap();
    let (id, waited) = second.join().unwrap();
    assert!(waited);
    assert_eq!(lock(&seen.chunks)[1], (id, b"two".to_vec()));
}

#[test]
fn a_caller_that_drives_the_driver_to_its_end_returns() {
    let (rt, _seen, peer) = driven();
    let reactor = rt.reactor.clone();
    let closer = std::thread::spawn(move || {
        eventually("a caller drives", || {
            reactor.holder.load(Ordering::SeqCst) == CALLER
        });
        drop(peer);
    });
    let reactor = rt.reactor.clone();
    let ended = std::future::poll_fn(|_| {
        if reactor.done.load(Ordering::SeqCst) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    assert!(rt.wait(std::pin::pin!(ended), Some(soon())).is_some());
    closer.join().unwrap();
    // Nothing is left to drive: a later wait only waits for its own future.
    let never = std::future::pending::<()>();
    let until = Some(Instant::now() + Duration::from_millis(10));
    assert!(rt.wait(std::pin::pin!(never), until).is_none());
}
