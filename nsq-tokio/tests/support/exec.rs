//! nsq-tokio's way to run a test's futures (`nsq_test_support::exec::Exec`): a 2-thread
//! runtime that every call blocks on, for the shared scenarios, the conformance suite and the
//! driver-end test.

use nsq_test_support::exec::{Exec, Join};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;

/// A 2-thread tokio runtime, shared by the clients built on it (it ends with the last).
#[derive(Clone)]
pub(crate) struct TokioExec(Arc<Runtime>);

/// A new 2-thread runtime.
pub(crate) fn tokio() -> TokioExec {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    TokioExec(Arc::new(rt))
}

impl Exec for TokioExec {
    fn name(&self) -> &'static str {
        "nsq-tokio"
    }
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.0.block_on(f)
    }
    fn spawn<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> Join<T> {
        let task = self.0.spawn(f);
        Box::pin(async move { task.await.expect("a spawned task") })
    }
    fn sleep(&self, d: Duration) -> Join<()> {
        Box::pin(tokio::time::sleep(d))
    }
    fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        let _in_runtime = self.0.enter();
        f()
    }
}
