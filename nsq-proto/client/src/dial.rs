//! Helpers for runtimes over `std` sockets (nsq-blocking's poller, nsq-async-std's
//! reactor, or a runtime of your own): name resolution and a connect from a bound local
//! address, each on a short-lived thread of its own where `std` only offers a blocking call.

use crate::sync::lock;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

/// The addresses of `addr` (`host:port`): at once for an IP address, else resolved on a
/// short-lived thread of its own (the system resolver blocks; the polling task must not).
/// For any runtime: the thread wakes whoever polls the future.
pub async fn resolve(addr: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    let addr = addr.to_owned();
    on_thread("nsq-resolve", move || {
        addr.to_socket_addrs().map(Iterator::collect)
    })
    .await
}

/// A non-blocking TCP stream to `addr` from `local` (bound first), connected on a short-lived
/// thread of its own: std has no portable way to tell a non-blocking connect in progress from
/// one that failed, so the connect blocks there, for at most `dial`. For any runtime, which
/// then registers the stream with its reactor.
pub async fn connect_from(
    local: SocketAddr,
    addr: SocketAddr,
    dial: std::time::Duration,
) -> io::Result<std::net::TcpStream> {
    use socket2::{Domain, Protocol, Type};
    on_thread("nsq-connect", move || {
        let s = socket2::Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.bind(&local.into())?;
        s.connect_timeout(&addr.into(), dial)?;
        s.set_nonblocking(true)?;
        Ok(std::net::TcpStream::from(s))
    })
    .await
}

/// Runs the blocking `work` on a short-lived thread named `name` and waits for its result
/// without blocking the polling task: the thread wakes the last waker that polled.
async fn on_thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    type Slot<T> = Mutex<(Option<io::Result<T>>, Option<Waker>)>;
    let slot: Arc<Slot<T>> = Arc::default();
    let theirs = slot.clone();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let done = work();
            let waker = {
                let mut s = lock(&theirs);
                s.0 = Some(done);
                s.1.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        })?;
    std::future::poll_fn(|cx| {
        let mut s = lock(&slot);
        if let Some(done) = s.0.take() {
            Poll::Ready(done)
        } else {
            s.1 = Some(cx.waker().clone());
            Poll::Pending
        }
    })
    .await
}
