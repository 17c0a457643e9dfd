//! [`Blocking`]: the [`Runtime`] of the blocking clients (cargo feature `blocking`, which
//! `nsq-blocking` turns on): one thread per client, waiting on a poller of its own
//! ([`Poller`]), whose blocking calls drive their client while they wait.

use super::{Poller, PollerTimer};
use crate::Error;
use crate::runtime::{BoxFuture, Runtime, SocketOptions};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// One thread per client as its runtime: each blocking client gets its own poller, waited on
/// by its driver thread (`nsqb-consumer`, `nsqb-producer`) and by the blocking calls that
/// wait for the client, which drive it meanwhile. A blocking client runs on it without being
/// told.
#[derive(Debug, Clone)]
pub struct Blocking(Poller);

impl Blocking {
    /// A runtime with a poller of its own: one per client.
    pub(crate) fn for_client() -> Result<Arc<dyn Runtime>, Error> {
        Poller::new()
            .map(|p| Arc::new(Blocking(p)) as Arc<dyn Runtime>)
            .map_err(|e| Error::Spawn(format!("could not create a poller: {e}")))
    }
}

impl Runtime for Blocking {
    fn connect(
        &self,
        addr: &str,
        options: SocketOptions,
    ) -> BoxFuture<io::Result<Box<dyn crate::runtime::Socket>>> {
        let connect = self.0.connect(addr, options);
        Box::pin(async move { Ok(Box::new(connect.await?) as Box<dyn crate::runtime::Socket>) })
    }

    fn timer(&self, at: Instant) -> Box<dyn crate::runtime::Timer> {
        Box::new(PollerTimer::new(at))
    }

    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        self.0.spawn(&name.replacen("nsq-", "nsqb-", 1), driver)
    }

    /// A blocking call drives its client while it waits (over the client's poller): no
    /// thread hop per round trip.
    fn block_on(
        &self,
        future: Pin<&mut (dyn Future<Output = ()> + '_)>,
        deadline: Option<Instant>,
    ) -> bool {
        self.0.wait(future, deadline).is_some()
    }
}
