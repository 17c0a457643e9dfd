//! A client's IO over a poller of its own, for runtimes that have no reactor to lend
//! (`nsq-blocking`): a [`Poller`] per client over the client's non-blocking sockets
//! ([`Socket`]), with the driver's [`PollerTimer`] as the wait's deadline. Other threads wake
//! whoever waits in it through the poller, once per batch of commands and only when it
//! waits.
//!
//! Who drives ([`turns`]): the poller and the driver are a lease. A blocking call that waits
//! ([`Poller::wait`]) takes it when it is free and drives the client on its own thread until
//! its own future is ready, so a call's round trip to nsqd wakes no other thread. The
//! driver thread ([`Poller::spawn`]) drives whenever no caller does, on the policy of
//! [`hold`](crate::runtime::hold): it takes the lease once callers have left it alone for
//! 2 ms (up to 16 ms after a run of looks that each found them at work), or when a deadline
//! of the driver is due, and gives it back to the first caller that asks. Callers that wait
//! at once take turns; each release wakes the next.
//!
//! The poller ([`reactor`]) is mio's (epoll, kqueue or IOCP). Sockets ([`socket`]) are
//! registered once, edge-triggered, for both directions; what the events said is kept per
//! socket, so a socket with nothing to read is not read (no `recv` that returns `EAGAIN`)
//! and no registration is re-armed per wait.

#![allow(
    clippy::disallowed_methods,
    reason = "a runtime: its clock, sockets and threads are what the rest of the client layer may not touch"
)]

mod blocking;
mod reactor;
mod socket;
#[cfg(test)]
mod tests;
mod turns;

pub use blocking::Blocking;
pub(crate) use reactor::PollerTimer;
pub(crate) use socket::Socket;

use crate::dial::resolve;
use crate::runtime::{BoxFuture, SocketOptions};
use crate::sync::lock;
use reactor::Reactor;
use socket::{connect_from_on, connect_to};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One client's poller, and what a runtime implements
/// [`Runtime`](crate::Runtime) with: [`connect`](Self::connect) a [`Socket`],
/// [`spawn`](Self::spawn) the driver on a thread that waits on the poller, and the
/// [`PollerTimer`] that bounds the wait. Cheap to clone (one poller per client, shared).
#[derive(Debug, Clone)]
pub(crate) struct Poller {
    reactor: Arc<Reactor>,
}

impl Poller {
    /// A poller of its own (an epoll instance and an eventfd on Linux).
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            reactor: Arc::new(Reactor::new()?),
        })
    }

    /// Opens a non-blocking TCP connection to `addr` (`host:port`) with `TCP_NODELAY` on, its
    /// readiness reported by this poller, from `options.local_addr` when set. The future is
    /// ready once connected (or failed); the driver bounds it with the dial timeout.
    pub(crate) fn connect(
        &self,
        addr: &str,
        options: SocketOptions,
    ) -> BoxFuture<io::Result<Socket>> {
        let (reactor, addr) = (self.reactor.clone(), addr.to_owned());
        Box::pin(async move {
            let addrs = resolve(&addr).await?;
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
                    Some(local) => connect_from_on(&reactor, local, a, options.dial).await,
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
    pub(crate) fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        // The client layer spawns its driver inside the client's span.
        let _ = self.reactor.span.set(tracing::Span::current());
        {
            let mut lease = lock(&self.reactor.drive);
            let drive = lease
                .as_mut()
                .ok_or_else(|| io::Error::other("the poller is in use"))?;
            if drive.driver.is_some() || self.reactor.done.load(Ordering::SeqCst) {
                return Err(io::Error::other("the poller already has a driver"));
            }
            drive.driver = Some(driver);
        }
        let reactor = self.reactor.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                if let Err(e) = reactor.run_thread() {
                    reactor.in_span(|| tracing::error!(error = %e, "the driver's poller failed"));
                    reactor.fail();
                }
            });
        match thread {
            Ok(handle) => {
                self.reactor.thread.set(handle.thread().clone());
                Ok(())
            }
            Err(e) => {
                // Nobody will drive: the driver is dropped (whoever waits for it hears).
                if let Some(drive) = lock(&self.reactor.drive).as_mut() {
                    drive.driver = None;
                }
                Err(e)
            }
        }
    }
}

impl Poller {
    /// Runs `future` on this thread over this poller (its sockets' tests).
    #[cfg(test)]
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.reactor.block_on(future).expect("the poller works")
    }
}
