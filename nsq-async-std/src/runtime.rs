//! [`AsyncStd`]: the client layer's [`Runtime`] for async-std, smol and any other executor.
//! A runtime-agnostic library cannot spawn on the caller's executor, so each client's driver
//! runs on a thread of its own, waiting on a poller of its own
//! ([`nsq_client::poller`]); the application's tasks are woken through their wakers.

use nsq_client::poller::{Poller, PollerTimer, Socket};
use nsq_client::{Adapter, BoxFuture, Error, Runtime, SocketOptions};
use std::io;
use std::time::Instant;

/// The client layer's runtime for async-std, smol and any executor: one driver thread per
/// client, waiting on the client's own poller.
#[derive(Debug, Clone)]
pub struct AsyncStd(Poller);

impl Runtime for AsyncStd {
    type Socket = Socket;
    type Timer = PollerTimer;
    fn connect(&self, addr: &str, options: SocketOptions) -> BoxFuture<io::Result<Socket>> {
        self.0.connect(addr, options)
    }

    fn timer(&self, at: Instant) -> PollerTimer {
        PollerTimer::new(at)
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        self.0.spawn(name, driver)
    }
}

impl Adapter for AsyncStd {
    fn current() -> Result<Self, Error> {
        Poller::new()
            .map(AsyncStd)
            .map_err(|e| Error::Spawn(format!("could not create a poller: {e}")))
    }
}
