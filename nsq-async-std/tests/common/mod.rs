//! The runtimes every test runs under (async-std, smol, and each with the drivers on its
//! executor), as nsq-test-support's `Exec` too, and timeouts that work under all of them.
#![allow(dead_code, reason = "each test binary uses a part of it")]

use nsq_client::Runtime as ClientRuntime;
use nsq_test_support::conformance::AsyncFactory;
use nsq_test_support::exec::{Exec, Join};
use nsq_test_support::scenarios::AsyncClients;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An executor to run a test under.
pub(crate) trait Runtime: 'static {
    /// For messages.
    const NAME: &'static str;
    /// Runs `f` to completion on this thread.
    fn block_on<F: Future>(f: F) -> F::Output;
    /// Spawns `f` on the runtime's executor.
    fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> Join<T>;
    /// The runtime the test's clients are given, if not the default mode (drivers on the
    /// executor: [`nsq_async_std::AsyncStd::on_executor`]).
    fn client_runtime() -> Option<Arc<dyn ClientRuntime>> {
        None
    }
}

/// Runtime `R` as nsq-test-support's [`Exec`] (the shared scenarios, conformance and
/// driver-end tests block on it).
pub(crate) struct On<R>(PhantomData<fn() -> R>);

impl<R> Clone for On<R> {
    fn clone(&self) -> Self {
        On(PhantomData)
    }
}

impl<R: Runtime> Exec for On<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        R::block_on(f)
    }
    fn spawn<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> Join<T> {
        R::spawn(f)
    }
    fn sleep(&self, d: Duration) -> Join<()> {
        Box::pin(sleep(d))
    }
    fn runtime(&self) -> Option<Arc<dyn ClientRuntime>> {
        R::client_runtime()
    }
}

/// Runtime `R` as an [`Exec`].
pub(crate) fn on<R: Runtime>() -> On<R> {
    On(PhantomData)
}

/// The shared adapter scenarios' clients: nsq-async-std, every call blocking on `R`.
pub(crate) fn clients<R: Runtime>() -> AsyncClients<On<R>> {
    AsyncClients::new(on::<R>())
}

/// The conformance suite's clients: nsq-async-std, every call blocking on `R`.
pub(crate) fn conformance<R: Runtime>() {
    let factory = AsyncFactory::new(on::<R>());
    nsq_test_support::conformance::run_conformance(factory, 60);
}

/// async-std's runtime.
pub(crate) struct AsyncStd;

impl Runtime for AsyncStd {
    const NAME: &'static str = "async-std";
    fn block_on<F: Future>(f: F) -> F::Output {
        async_std::task::block_on(f)
    }
    fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> Join<T> {
        Box::pin(async_std::task::spawn(f))
    }
}

/// smol's runtime.
pub(crate) struct Smol;

impl Runtime for Smol {
    const NAME: &'static str = "smol";
    fn block_on<F: Future>(f: F) -> F::Output {
        smol::block_on(f)
    }
    fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> Join<T> {
        Box::pin(smol::spawn(f))
    }
}

/// `f`'s output, or `None` after `within`.
pub(crate) async fn timeout<F: Future>(within: Duration, f: F) -> Option<F::Output> {
    futures_lite::future::or(async { Some(f.await) }, async {
        async_io::Timer::after(within).await;
        None
    })
    .await
}

/// Sleeps (async-io's timer: the same under both runtimes).
pub(crate) async fn sleep(d: Duration) {
    async_io::Timer::after(d).await;
}

/// Polls `pred` every 10 ms until it holds or `within` passes.
pub(crate) async fn eventually(within: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

/// smol, with every client's driver a task on smol's executor
/// ([`nsq_async_std::AsyncStd::on_executor`]).
pub(crate) struct SmolExecutor;

impl Runtime for SmolExecutor {
    const NAME: &'static str = "smol, drivers on its executor";
    fn block_on<F: Future>(f: F) -> F::Output {
        smol::block_on(f)
    }
    fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> Join<T> {
        Box::pin(smol::spawn(f))
    }
    fn client_runtime() -> Option<Arc<dyn ClientRuntime>> {
        Some(nsq_async_std::AsyncStd::on_executor(|driver| {
            smol::spawn(driver).detach();
        }))
    }
}

/// async-std, with every client's driver a task on its executor
/// ([`nsq_async_std::AsyncStd::on_executor`]).
pub(crate) struct AsyncStdExecutor;

impl Runtime for AsyncStdExecutor {
    const NAME: &'static str = "async-std, drivers on its executor";
    fn block_on<F: Future>(f: F) -> F::Output {
        async_std::task::block_on(f)
    }
    fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> Join<T> {
        Box::pin(async_std::task::spawn(f))
    }
    fn client_runtime() -> Option<Arc<dyn ClientRuntime>> {
        Some(nsq_async_std::AsyncStd::on_executor(|driver| {
            drop(async_std::task::spawn(driver));
        }))
    }
}

/// Names of this process's threads that run a client's driver of their own (`nsq-*`).
#[cfg(target_os = "linux")]
pub(crate) fn driver_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("nsq-consumer") || n.starts_with("nsq-producer"))
        .collect()
}

/// A client given runtime `R`'s executor runs no thread of its own: its driver is a task
/// of that executor.
#[cfg(target_os = "linux")]
pub(crate) fn drivers_are_tasks_not_threads<R: Runtime>() {
    use nsq_async_std::{Consumer, Producer};
    let runtime = R::client_runtime().expect("drivers on the executor");
    let nsqd = nsq_test_broker::Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    R::block_on(async {
        timeout(Duration::from_secs(20), async {
            let p = Producer::builder()
                .nsqd(addr.as_str())
                .runtime(runtime.clone())
                .build()
                .unwrap();
            p.ping().await.unwrap();
            let mut c = Consumer::builder("t", "c")
                .nsqd(addr.as_str())
                .runtime(runtime)
                .build()
                .unwrap();
            p.publish("t", "hello").await.unwrap();
            assert!(driver_threads().is_empty(), "{:?}", driver_threads());
            p.close().await;
            c.stop().await;
        })
        .await
        .expect("within 20 s");
    });
}
