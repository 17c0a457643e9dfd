//! Shared helpers of nsq-tokio's example tools: the runtime-free ones of `nsq-example-cli`
//! (flags, logging, Go durations and output, also used by the other packages' tools), plus
//! go-nsq style option flags and signal handling on tokio.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each example uses a different subset of these helpers"
)]

pub mod recording;

pub use nsq_example_cli::*;

/// Applies go-nsq style `--consumer-opt` / `--producer-opt` values to `config`
/// ([`nsq_example_cli::apply_opts`]).
pub fn apply_opts(config: &mut nsq_tokio::Config, opts: &[String]) -> Result<(), String> {
    nsq_example_cli::apply_opts(opts, |name, value| config.set_str(name, value))
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

/// `nsq_stat`'s header, every 25 reports: nsq v1.3.0's two lines.
pub fn nsq_stat_header() -> [String; 2] {
    [
        "------rate------+----------------depth----------------+\
         --------------metadata---------------"
            .to_owned(),
        format!(
            "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}",
            "ingress",
            "egress",
            "total",
            "mem",
            "disk",
            "inflt",
            "def",
            "req",
            "t-o",
            "msgs",
            "clients"
        ),
    ]
}

/// One `nsq_stat` report: the channel summed over the nsqd now (`c`) against the previous
/// poll (`o`), `interval` apart, in nsq v1.3.0's columns and arithmetic (rates in whole
/// messages per second, truncated; egress is what was published less what the depth grew).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss,
    reason = "the Go tool's int64(float64(...)) arithmetic"
)]
pub fn nsq_stat_row(
    o: &nsq_tokio::http::nsqd::ChannelStats,
    c: &nsq_tokio::http::nsqd::ChannelStats,
    interval: std::time::Duration,
) -> String {
    let secs = interval.as_secs_f64();
    let published = c.message_count.wrapping_sub(o.message_count) as i64;
    let ingress = (published as f64 / secs) as i64;
    let egress = ((published - (c.depth - o.depth)) as f64 / secs) as i64;
    format!(
        "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}",
        ingress,
        egress,
        c.depth,
        c.depth - c.backend_depth,
        c.backend_depth,
        c.in_flight_count,
        c.deferred_count,
        c.requeue_count,
        c.timeout_count,
        c.message_count,
        c.client_count
    )
}
