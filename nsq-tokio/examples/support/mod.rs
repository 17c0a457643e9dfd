//! Shared helpers of nsq-tokio's example tools: the runtime-free ones in `cli.rs` (flags,
//! logging, Go durations and output, also used by the other adapters' tools), plus go-nsq
//! style option flags and signal handling on tokio.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each example uses a different subset of these helpers"
)]

mod cli;
pub mod recording;

pub use cli::*;

/// Applies go-nsq style `--consumer-opt` / `--producer-opt` values (`name,value`; a bare
/// `name` means `true`, like go-nsq's `ConfigFlag`).
pub fn apply_opts(config: &mut nsq_tokio::Config, opts: &[String]) -> Result<(), String> {
    for opt in opts {
        let (name, value) = opt.split_once(',').unwrap_or((opt.as_str(), "true"));
        config.set_str(name, value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Resolves once SIGINT or SIGTERM arrives.
pub async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
