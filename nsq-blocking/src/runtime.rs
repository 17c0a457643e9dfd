//! [`Blocking`]: the client layer's [`Runtime`] on one thread per client, waiting on a poller
//! of its own ([`nsq_client::poller`]).

use nsq_client::poller::{Poller, PollerTimer, Socket};
use nsq_client::{Adapter, BoxFuture, Error, Runtime, SocketOptions};
use std::io;
use std::time::Instant;

/// One thread per client as the client layer's runtime: each client gets its own poller,
/// waited on by its driver thread (`nsqb-consumer`, `nsqb-producer`).
#[derive(Debug, Clone)]
pub struct Blocking(Poller);

impl Runtime for Blocking {
    type Socket = Socket;
    type Timer = PollerTimer;
    fn connect(&self, addr: &str, options: SocketOptions) -> BoxFuture<io::Result<Socket>> {
        self.0.connect(addr, options)
    }

    fn timer(&self, at: Instant) -> PollerTimer {
        PollerTimer::new(at)
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        self.0.spawn(&name.replacen("nsq-", "nsqb-", 1), driver)
    }
}

impl Adapter for Blocking {
    fn current() -> Result<Self, Error> {
        Poller::new()
            .map(Blocking)
            .map_err(|e| Error::Spawn(format!("could not create a poller: {e}")))
    }

    /// A blocking call drives its client while it waits (no thread hop per round trip).
    fn poller(&self) -> Option<&Poller> {
        Some(&self.0)
    }
}
