//! [`Blocking`]: the client layer's [`Runtime`] on one thread per client, waiting on a poller
//! of its own ([`poller`](crate::poller)), whose blocking calls drive their client while they
//! wait.

use crate::poller::{Poller, PollerTimer, Socket};
use nsq_client::{Adapter, BoxFuture, Direct, Error, Runtime, SocketOptions};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Instant;

/// One thread per client as the client layer's runtime: each client gets its own poller,
/// waited on by its driver thread (`nsqb-consumer`, `nsqb-producer`) and by the blocking calls
/// that wait for the client, which drive it meanwhile.
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
    type Waiter = Direct;

    fn current() -> Result<Self, Error> {
        Poller::new()
            .map(Blocking)
            .map_err(|e| Error::Spawn(format!("could not create a poller: {e}")))
    }

    fn waiter(&self) -> Direct {
        Direct
    }

    /// A blocking call drives its client while it waits (over the client's poller): no thread hop per
    /// round trip.
    fn block_on<F: Future>(
        &self,
        future: Pin<&mut F>,
        deadline: Option<Instant>,
    ) -> Option<F::Output> {
        self.0.wait(future, deadline)
    }
}
