//! Runs a test's future on a tokio runtime of either scheduler, bounded in time.

use std::future::Future;
use std::time::Duration;

/// Runs `f` on a new runtime (multi-threaded when `multi`, else current-thread), failing if
/// it takes over 30 s.
pub(crate) fn run<F: Future<Output = ()>>(multi: bool, f: F) {
    let rt = if multi {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), f)
            .await
            .expect("finished in time");
    });
}
