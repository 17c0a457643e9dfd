//! A runtime without its time or IO driver is reported as `Error::NoRuntime` without a word
//! from the panic hook (tokio panics when asked for a driver it lacks; the probe is silent),
//! and the application's hook is left as it was. A binary of its own: it sets the hook.

#[path = "support/no_driver.rs"]
mod no_driver;

use nsq_tokio::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn no_runtime_is_reported_without_a_panic_message() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    std::panic::set_hook(Box::new(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    }));
    for (missing, rt) in no_driver::runtimes_missing_a_driver() {
        let built =
            rt.block_on(async { nsq_tokio::Producer::builder().nsqd("127.0.0.1:1").build() });
        match built {
            Err(Error::NoRuntime(why)) => assert!(why.contains(missing), "{why}"),
            other => panic!("expected NoRuntime naming {missing}, got {other:?}"),
        }
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the hook heard of no probe");
    // The application's hook is still the one installed.
    let thread = std::thread::Builder::new().spawn(|| panic!("counted"));
    assert!(thread.unwrap().join().is_err());
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the hook is back");
    drop(std::panic::take_hook());
}
