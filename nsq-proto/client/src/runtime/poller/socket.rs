//! The client's sockets on its poller: registered once, edge-triggered, for both
//! directions; read and written only while the poller's events say they may be.

use super::reactor::{READ_CLOSED, READABLE, Reactor, Readiness, WRITABLE};
use crate::dial::connect_from;
use crate::runtime::read_buf::ReadBuf;
use crate::sync::lock;
use bytes::{Bytes, BytesMut};
use mio::Token;
use mio::net::TcpStream;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Connects to `addr` from `local` ([`connect_from`]), then registers the stream with the
/// poller like any other.
pub(super) async fn connect_from_on(
    reactor: &Arc<Reactor>,
    local: SocketAddr,
    addr: SocketAddr,
    dial: std::time::Duration,
) -> io::Result<Socket> {
    let stream = connect_from(local, addr, dial).await?;
    let socket = reactor.register(TcpStream::from_std(stream))?;
    socket.stream.set_nodelay(true)?;
    Ok(Socket {
        socket,
        buf: ReadBuf::default(),
    })
}

/// Connects to `addr` without blocking: the socket is writable once the connection is made
/// (or has failed).
pub(super) async fn connect_to(reactor: &Arc<Reactor>, addr: SocketAddr) -> io::Result<Socket> {
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
        buf: ReadBuf::default(),
    })
}

/// A socket registered with a client's poller; deregistered when dropped.
#[derive(Debug)]
pub(super) struct Registered {
    pub(super) stream: TcpStream,
    pub(super) token: Token,
    pub(super) readiness: Arc<Readiness>,
    pub(super) reactor: Arc<Reactor>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.reactor.sockets).remove(&self.token);
        let _ = self.reactor.registry.deregister(&mut self.stream);
    }
}

/// A non-blocking TCP stream on its client's poller, and the buffer it reads into.
#[derive(Debug)]
pub(crate) struct Socket {
    pub(super) socket: Registered,
    /// Zeroed space read into at its front; what is read is split off.
    buf: ReadBuf,
}

/// A read or write that took less than it was offered drained the socket (or filled its
/// buffer): the next would block, and the poller reports the next change (tokio does the
/// same). Not on Windows, whose poller is emulated and reports only what it was asked. A
/// short read leaves a reported end of the read side ([`READ_CLOSED`]) standing: the EOF
/// behind the data is read next, since its edge was reported once, with the data.
const SHORT_MEANS_DRAINED: bool = cfg!(not(windows));

impl crate::runtime::Socket for Socket {
    fn poll_read(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        let s = &mut self.socket;
        loop {
            if !s.readiness.is(READABLE) && !s.readiness.is(READ_CLOSED) {
                return Poll::Pending;
            }
            match self.buf.read_zeroed(|space| s.stream.read(space)) {
                Ok((read, short)) => {
                    if short && SHORT_MEANS_DRAINED {
                        s.readiness.clear(READABLE);
                    }
                    return Poll::Ready(Ok(read));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    s.readiness.clear(READABLE | READ_CLOSED);
                }
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
