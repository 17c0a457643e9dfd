//! How a test runs the futures of an async adapter: blocks on one, spawns one, sleeps. Each
//! adapter implements [`Exec`] for its runtime(s) (a tokio runtime; async-std's and smol's
//! `block_on`, with or without the drivers on the executor); the shared glue is written
//! once over it.

use nsq_client::Runtime;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A boxed, sendable future (a spawned task's join handle, a timer).
pub type Join<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A runtime a test blocks on.
pub trait Exec: Clone + Send + Sync + 'static {
    /// For messages (and the conformance suite's client name).
    fn name(&self) -> &'static str;
    /// Runs `f` to completion on this thread.
    fn block_on<F: Future>(&self, f: F) -> F::Output;
    /// Spawns `f` on the runtime's executor; the handle resolves to its output (a panic
    /// inside is a panic of the awaiting test).
    fn spawn<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> Join<T>;
    /// The runtime's timer (created and polled inside [`block_on`](Exec::block_on)).
    fn sleep(&self, d: Duration) -> Join<()>;
    /// Runs `f` where clients can be built (inside the runtime's context, for tokio).
    fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        f()
    }
    /// The runtime a client built by the test is given (its builder's `runtime`), if not the
    /// one found where it is built: nsq-async-std's executor mode.
    fn runtime(&self) -> Option<Arc<dyn Runtime>> {
        None
    }
}

/// The builders' `runtime(..)`, where the test gives one: the async and blocking builders,
/// consumer and producer, and the HTTP configuration.
pub trait GiveRuntime: Sized {
    /// `self` with `runtime` given, if any.
    fn given(self, runtime: Option<Arc<dyn Runtime>>) -> Self;
}

macro_rules! give_runtime {
    ($($t:ty),*) => {$(
        impl GiveRuntime for $t {
            fn given(self, runtime: Option<Arc<dyn Runtime>>) -> Self {
                match runtime {
                    Some(rt) => self.runtime(rt),
                    None => self,
                }
            }
        }
    )*};
}

give_runtime!(
    nsq_client::ConsumerBuilder,
    nsq_client::ProducerBuilder,
    nsq_client::blocking::ConsumerBuilder,
    nsq_client::blocking::ProducerBuilder
);

impl GiveRuntime for nsq_client::HttpConfig {
    fn given(self, runtime: Option<Arc<dyn Runtime>>) -> Self {
        match runtime {
            Some(rt) => self.with_runtime(rt),
            None => self,
        }
    }
}

/// `f`'s output, or `None` after `within` on `exec`'s timer.
pub async fn timeout<E: Exec, F: Future>(exec: &E, within: Duration, f: F) -> Option<F::Output> {
    futures_lite::future::or(async { Some(f.await) }, async {
        exec.sleep(within).await;
        None
    })
    .await
}
