//! nsq-tokio's `nsq_stat`: the flags and the output of nsq's `nsq_stat` (v1.3.0), on the
//! cluster API ([`nsq_tokio::Cluster`]).
//!
//! Polls `/stats` of every nsqd that carries the topic (found through nsqlookupd, or among the
//! nsqd given) every `--interval` and prints the channel's rates and depths, summed over the
//! nsqd: a header every 25 reports, the first poll only sets the baseline, `--count` reports
//! in all (else until interrupted).
//!
//! ```text
//! cargo run -p nsq-tokio --example nsq_stat -- --lookupd-http-address=127.0.0.1:4161 \
//!     --topic=orders --channel=billing --interval=1s --count=10
//! cargo run -p nsq-tokio --example nsq_stat -- --nsqd-http-address=127.0.0.1:4151 \
//!     --topic=orders --channel=billing
//! ```
#![allow(clippy::print_stdout, reason = "a command-line tool")]

mod support;

use nsq_tokio::{Channel, Cluster, HttpConfig, Topic};
use std::time::Duration;
use support::{Flags, Usage, go_log_line, switch, value};

const USAGE: Usage = Usage {
    name: "nsq_stat",
    about: "Polls /stats for all the producers of a topic/channel and prints aggregate stats.",
    flags: &[
        value("topic", "TOPIC", "NSQ topic"),
        value("channel", "CHANNEL", "NSQ channel"),
        value(
            "interval",
            "DURATION",
            "duration of time between polling/printing output (default 2s)",
        ),
        value(
            "http-client-connect-timeout",
            "DURATION",
            "timeout for HTTP connect (default 2s)",
        ),
        value(
            "http-client-request-timeout",
            "DURATION",
            "timeout for HTTP request (default 5s)",
        ),
        value("count", "N", "number of reports"),
        value(
            "nsqd-http-address",
            "ADDR",
            "nsqd HTTP address (may be given multiple times)",
        ),
        value(
            "lookupd-http-address",
            "ADDR",
            "lookupd HTTP address (may be given multiple times)",
        ),
        switch("version", "print version"),
    ],
};

/// Like Go's `log.Fatal` with the default logger: `2006/01/02 15:04:05 message`, exit 1.
#[allow(clippy::print_stderr, reason = "a command-line tool")]
fn fatal(message: &str) -> ! {
    let line = go_log_line("", message);
    eprintln!("{}", line.trim_start_matches("[] "));
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let flags = Flags::parse(&USAGE);
    if let Err(e) = run(&flags).await {
        fatal(&e);
    }
}

async fn run(flags: &Flags) -> Result<(), String> {
    if flags.boolean("version")? {
        println!("nsq_stat v{} (nsq-tokio)", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let topic = flags.string("topic", "");
    let channel = flags.string("channel", "");
    if topic.is_empty() || channel.is_empty() {
        return Err("--topic and --channel are required".to_owned());
    }
    let interval = flags.duration("interval", Duration::from_secs(2))?;
    if interval.is_zero() {
        return Err("--interval should be positive".to_owned());
    }
    let connect = flags.duration("http-client-connect-timeout", Duration::from_secs(2))?;
    if connect.is_zero() {
        return Err("--http-client-connect-timeout should be positive".to_owned());
    }
    let request = flags.duration("http-client-request-timeout", Duration::from_secs(5))?;
    if request.is_zero() {
        return Err("--http-client-request-timeout should be positive".to_owned());
    }
    let count: Option<i64> = match flags.get("count") {
        Some(_) => Some(flags.number("count", 0)?),
        None => None,
    };
    if count.is_some_and(|n| n <= 0) {
        return Err("--count should be positive".to_owned());
    }
    let nsqd = flags.all("nsqd-http-address");
    let lookupd = flags.all("lookupd-http-address");
    if nsqd.is_empty() && lookupd.is_empty() {
        return Err("--nsqd-http-address or --lookupd-http-address required".to_owned());
    }
    if !nsqd.is_empty() && !lookupd.is_empty() {
        return Err("use --nsqd-http-address or --lookupd-http-address not both".to_owned());
    }
    for (flag, addrs) in [
        ("nsqd-http-address", &nsqd),
        ("lookupd-http-address", &lookupd),
    ] {
        if addrs.iter().any(|a| a.starts_with("http")) {
            return Err(format!(
                "--{flag} error - address should not contain scheme"
            ));
        }
    }
    let topic = Topic::new(&topic).map_err(|e| format!("invalid --topic: {e}"))?;
    let channel = Channel::new(&channel).map_err(|e| format!("invalid --channel: {e}"))?;
    let config = HttpConfig::new().with_timeouts(connect, connect + request);
    let cluster = if lookupd.is_empty() {
        Cluster::from_nsqds(&nsqd, config)
    } else {
        Cluster::with_config(&lookupd, config)
    }
    .map_err(|e| e.to_string())?;

    let mut previous: Option<nsq_tokio::http::nsqd::ChannelStats> = None;
    let mut i: i64 = 0;
    while count.is_none_or(|n| n >= i) {
        let stats = cluster.channel_stats(&topic, &channel).await;
        if let Some(failure) = stats.failures.first() {
            return Err(format!("ERROR: failed to get nsqd stats - {failure}"));
        }
        if stats.value.nodes.is_empty() {
            return Err(format!(
                "ERROR: failed to find channel({channel}) in stats metadata for topic({topic})"
            ));
        }
        let c = stats.value.total;
        if i % 25 == 0 {
            for line in support::nsq_stat_header() {
                println!("{line}");
            }
        }
        if let Some(o) = &previous {
            println!("{}", support::nsq_stat_row(o, &c, interval));
        }
        previous = Some(c);
        i += 1;
        tokio::time::sleep(interval).await;
    }
    Ok(())
}
