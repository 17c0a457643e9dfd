//! The `--drivers` flag of nsq-async-std's bench tools, shared by them.

use nsq_async_std::{AsyncStd, Config, ConsumerBuilder, Error, Producer};
use nsq_client::Runtime;
use std::sync::{Arc, OnceLock};

/// The runtime the tool's clients are given (`--drivers=executor`), set once by [`apply`].
static RUNTIME: OnceLock<Option<Arc<dyn Runtime>>> = OnceLock::new();

/// Applies `--drivers=thread|executor` for `--runtime=runtime`: with `executor`, every
/// client's driver is a task on that runtime's executor ([`AsyncStd::on_executor`]).
pub(crate) fn apply(drivers: &str, runtime: &str) -> Result<(), String> {
    let chosen = match (drivers, runtime) {
        ("thread", _) => None,
        ("executor", "async-std") => Some(AsyncStd::on_executor(|driver| {
            drop(async_std::task::spawn(driver));
        })),
        ("executor", _) => Some(AsyncStd::on_executor(|driver| {
            smol::spawn(driver).detach();
        })),
        (other, _) => {
            return Err(format!(
                "-drivers must be thread or executor, not {other:?}"
            ));
        }
    };
    let _ = RUNTIME.set(chosen);
    Ok(())
}

/// `b`, given the runtime `--drivers` chose.
#[allow(dead_code, reason = "not every tool builds a consumer")]
pub(crate) fn consumer(b: ConsumerBuilder) -> ConsumerBuilder {
    match RUNTIME.get().cloned().flatten() {
        Some(rt) => b.runtime(rt),
        None => b,
    }
}

/// `Producer::connect(addr, config)` on the runtime `--drivers` chose.
#[allow(dead_code, reason = "not every tool publishes")]
pub(crate) async fn producer(addr: &str, config: &Config) -> Result<Producer, Error> {
    match RUNTIME.get().cloned().flatten() {
        Some(rt) => {
            let p = Producer::builder()
                .config(config)
                .nsqd(addr)
                .runtime(rt)
                .build()?;
            p.ping().await?;
            Ok(p)
        }
        None => Producer::connect(addr, config).await,
    }
}
