//! [`AsyncStd`]: the client layer's [`Runtime`] on async-io (the reactor of async-std and
//! smol): async-net sockets, an async-io timer, and a thread per driver.

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncWrite};
use nsq_proto::client::{self, BoxFuture, Error, Runtime, Timeouts};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// Bytes zeroed per read buffer (std's `Read` wants initialised memory); a read never offers
/// less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;

/// async-io as the client layer's runtime. A runtime-agnostic library cannot spawn on the
/// caller's executor, so each client's driver runs on a thread of its own under
/// `async_io::block_on`; everything else (sockets, timer) is async-io's, shared with
/// async-std and smol.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncStd;

/// An async-net TCP stream and the buffer it reads into.
#[derive(Debug)]
pub struct Socket {
    stream: async_net::TcpStream,
    /// Zeroed space read into at its front; what is read is split off.
    buf: BytesMut,
}

impl client::Socket for Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        if self.buf.len() < MIN_READ {
            self.buf = BytesMut::zeroed(READ_CHUNK);
        }
        Pin::new(&mut self.stream)
            .poll_read(cx, &mut self.buf)
            .map_ok(|n| self.buf.split_to(n))
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_close(cx)
    }
}

/// async-io's timer.
#[derive(Debug)]
pub struct Timer(async_io::Timer);

impl client::Timer for Timer {
    fn reset(&mut self, at: Instant) {
        self.0.set_at(at);
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        std::future::Future::poll(Pin::new(&mut self.0), cx).map(drop)
    }
}

impl Runtime for AsyncStd {
    type Socket = Socket;
    type Timer = Timer;
    type Task = ();
    type Consumer = crate::Consumer;
    type Producer = crate::Producer;

    fn current() -> Result<Self, Error> {
        Ok(AsyncStd)
    }

    fn connect(&self, addr: &str, _timeouts: Timeouts) -> BoxFuture<io::Result<Socket>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            // Nagle off: the driver writes once per wake-up, and waits for nothing more.
            let stream = async_net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Socket {
                stream,
                buf: BytesMut::new(),
            })
        })
    }

    fn timer(&self) -> Timer {
        Timer(async_io::Timer::never())
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || async_io::block_on(driver))
            .map(drop)
    }
}
