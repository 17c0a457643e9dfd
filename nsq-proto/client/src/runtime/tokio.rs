//! [`Tokio`]: the [`Runtime`] on tokio (cargo feature `tokio`, which `nsq-tokio` turns on):
//! tokio sockets, a tokio timer, and the driver (and `Consumer::run`'s workers) as tasks of
//! the runtime `build` was called in.

#![allow(
    clippy::disallowed_methods,
    reason = "a runtime: its clock, sockets and threads are what the rest of the client layer may not touch"
)]

use super::read_buf::ReadBuf;
use super::{BoxFuture, Runtime, SocketOptions};
use crate::Error;
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::runtime::Handle;

/// tokio as a client's runtime: the handle of a tokio runtime, which must have its IO and
/// time drivers. A client built inside a tokio runtime runs on it without being told; this
/// is for a client built elsewhere (a thread of the application's own) that should run on a
/// given runtime: `builder.runtime(Tokio::on(handle)?)`.
#[derive(Debug, Clone)]
pub struct Tokio(Handle);

impl Tokio {
    /// The runtime of `handle`, checked for its IO and time drivers ([`Error::NoRuntime`]
    /// naming the `enable_*` call to add when one is missing).
    pub fn on(handle: Handle) -> Result<Arc<dyn Runtime>, Error> {
        check_drivers(&handle)?;
        Ok(Arc::new(Tokio(handle)))
    }

    /// The tokio runtime the calling thread is inside, if any (checked as [`on`](Self::on)).
    pub(crate) fn current() -> Result<Option<Arc<dyn Runtime>>, Error> {
        match Handle::try_current() {
            Ok(handle) => Tokio::on(handle).map(Some),
            Err(_) => Ok(None),
        }
    }
}

/// A tokio TCP stream and the buffer it reads into.
#[derive(Debug)]
struct Socket {
    stream: TcpStream,
    buf: ReadBuf,
}

impl super::Socket for Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        // Reads into the spare capacity (nothing is zeroed first) through `AsyncRead`, whose
        // read that fills less than it was offered marks the socket drained: the driver's next
        // poll waits for readiness instead of calling recv for a WouldBlock. (`try_read_buf`
        // keeps the readiness until a WouldBlock: one more syscall per wake-up.)
        let read = self.stream.read_buf(self.buf.spare());
        ready!(std::pin::pin!(read).poll(cx))?;
        Poll::Ready(Ok(self.buf.split()))
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Connects to `addr` (resolved, each address tried in turn) from `local`, bound first.
async fn connect_from(local: std::net::SocketAddr, addr: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
    for a in tokio::net::lookup_host(addr).await? {
        if a.is_ipv4() != local.is_ipv4() {
            last = io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("local_addr {local} cannot reach {a}"),
            );
            continue;
        }
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.bind(local)?;
        match socket.connect(a).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Whether `handle`'s runtime has the time and IO drivers the client needs.
///
/// tokio 1.x offers no way to ask (`Handle::has_time_driver` is proposed upstream, in
/// tokio-rs/tokio#8361): making a timer or registering a socket on a runtime without the
/// driver panics. So each probe is made under `catch_unwind`, with the panic hook silenced
/// for this thread meanwhile ([`quietly`]): nothing is printed, and the caller gets
/// [`Error::NoRuntime`] naming the call to add. Under `panic = "abort"` no panic can be
/// caught: a runtime without a driver then aborts the process here, as tokio itself would at
/// the client's first timer.
fn check_drivers(handle: &Handle) -> Result<(), Error> {
    let _in_runtime = handle.enter();
    if quietly(|| drop(tokio::time::sleep(Duration::ZERO))).is_err() {
        return Err(Error::NoRuntime(
            "the tokio runtime has no time driver: build it with enable_time() (or \
             enable_all())",
        ));
    }
    // A socket that cannot be made (no loopback) says nothing about the runtime: then the
    // probe is skipped.
    if let Ok(udp) = std::net::UdpSocket::bind(("127.0.0.1", 0)) {
        let registered = quietly(|| {
            let _ = udp
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UdpSocket::from_std(udp));
        });
        if registered.is_err() {
            return Err(Error::NoRuntime(
                "the tokio runtime has no IO driver: build it with enable_io() (or \
                 enable_all())",
            ));
        }
    }
    Ok(())
}

/// Runs `probe` under `catch_unwind` with the panic hook silenced for this thread: a panic of
/// the probe prints nothing; one of another thread meanwhile goes to the hook as before, and
/// the hook is given back as it was. Probes run one at a time.
fn quietly(probe: impl FnOnce()) -> std::thread::Result<()> {
    use std::panic::{AssertUnwindSafe, catch_unwind, set_hook, take_hook};
    use std::sync::{Arc, Mutex, PoisonError};
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _probing = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let prober = std::thread::current().id();
    let previous = Arc::new(take_hook());
    let others = Arc::clone(&previous);
    set_hook(Box::new(move |info| {
        if std::thread::current().id() != prober {
            others(info);
        }
    }));
    let caught = catch_unwind(AssertUnwindSafe(probe));
    // Dropping the silencing hook drops its share of the previous one.
    drop(take_hook());
    match Arc::try_unwrap(previous) {
        Ok(hook) => set_hook(hook),
        Err(shared) => set_hook(Box::new(move |info| shared(info))),
    }
    caught
}

/// tokio's timer.
#[derive(Debug)]
struct TokioTimer(Pin<Box<tokio::time::Sleep>>);

impl super::Timer for TokioTimer {
    fn reset(&mut self, at: Instant) {
        self.0.as_mut().reset(tokio::time::Instant::from_std(at));
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl Runtime for Tokio {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn connect(
        &self,
        addr: &str,
        options: SocketOptions,
    ) -> BoxFuture<io::Result<Box<dyn super::Socket>>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            let stream = match options.local_addr {
                None => TcpStream::connect(addr).await?,
                Some(local) => connect_from(local, &addr).await?,
            };
            // Nagle off: the driver writes once per wake-up, and waits for nothing more.
            stream.set_nodelay(true)?;
            Ok(Box::new(Socket {
                stream,
                buf: ReadBuf::default(),
            }) as Box<dyn super::Socket>)
        })
    }

    fn timer(&self, at: Instant) -> Box<dyn super::Timer> {
        let _in_runtime = self.0.enter();
        Box::new(TokioTimer(Box::pin(tokio::time::sleep_until(at.into()))))
    }

    fn spawn(&self, _name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        drop(self.0.spawn(driver));
        Ok(())
    }

    /// Not on a multi-threaded runtime: a task that wakes itself wakes another worker.
    fn look_again_after_work(&self) -> bool {
        self.0.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
    }

    /// Each worker is a task, so handlers run in parallel on a multi-threaded runtime.
    fn run_workers(&self, workers: Vec<BoxFuture<()>>) -> BoxFuture<()> {
        let tasks: Vec<_> = workers.into_iter().map(|w| self.0.spawn(w)).collect();
        Box::pin(async move {
            for t in tasks {
                let _ = t.await;
            }
        })
    }
}
