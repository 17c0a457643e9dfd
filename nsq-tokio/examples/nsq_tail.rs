//! nsq-tokio's `nsq_tail`: same flags and behaviour as nsq's `nsq_tail` (v1.3.0).
//!
//! Consumes one or more topics (an ephemeral channel by default) and writes every message body
//! to stdout, one per line. `-n` (alias `--max-messages`) stops after that many messages. Like
//! the Go tool, an undefined flag is an error (a typo is not silently ignored).
//!
//! ```text
//! cargo run -p nsq-tokio --example nsq_tail -- --nsqd-tcp-address=127.0.0.1:4150 --topic=events -n 10
//! cargo run -p nsq-tokio --example nsq_tail -- --lookupd-http-address=127.0.0.1:4161 --topic=a --topic=b --print-topic
//! cargo run -p nsq-tokio --example nsq_tail -- --nsqd-tcp-address=127.0.0.1:4150 --topic=t \
//!     --consumer-opt=tls_v1,true --consumer-opt=tls_root_ca_file,ca.pem --consumer-opt=snappy,true
//! ```
#![allow(clippy::print_stdout, reason = "a command-line tool")]

mod support;

use nsq_tokio::{Config, Consumer};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use support::{
    CONSUMER_OPT_FLAG, Flags, LOOKUPD_HTTP_ADDRESS_FLAG, NSQD_TCP_ADDRESS_FLAG, Usage, apply_opts,
    fatal, init_logging, log, switch, terminated, value,
};

const PREFIX: &str = "nsq_tail";

const USAGE: Usage = Usage {
    name: "nsq_tail",
    about: "Consumes the given topics and writes every message body to stdout, one per line.",
    flags: &[
        NSQD_TCP_ADDRESS_FLAG,
        LOOKUPD_HTTP_ADDRESS_FLAG,
        value("topic", "TOPIC", "NSQ topic (may be given multiple times)"),
        value(
            "channel",
            "CHANNEL",
            "NSQ channel (default: an ephemeral tailNNNNNN#ephemeral)",
        ),
        value("n", "N", "total messages to show (will wait if starved)"),
        value("max-messages", "N", "alias of -n"),
        value(
            "max-in-flight",
            "N",
            "max number of messages to allow in flight (default: 200)",
        ),
        CONSUMER_OPT_FLAG,
        switch(
            "print-topic",
            "print the topic name where the message was received",
        ),
        switch("version", "print version string"),
    ],
};

#[tokio::main]
async fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    if let Err(e) = run(&flags).await {
        fatal(PREFIX, &e);
    }
}

async fn run(flags: &Flags) -> Result<(), String> {
    if flags.boolean("version")? {
        println!("nsq_tail v{} (nsq-tokio)", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let channel = match flags.get("channel") {
        Some(c) if !c.is_empty() => c.to_owned(),
        _ => format!(
            "tail{:06}#ephemeral",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
                % 999_999
        ),
    };
    let nsqd = flags.all("nsqd-tcp-address");
    let lookupd = flags.all("lookupd-http-address");
    let topics = flags.all("topic");
    // `-n` is the Go tool's name; `--max-messages` an alias.
    let total: u64 = match flags.get("n") {
        Some(_) => flags.number("n", 0)?,
        None => flags.number("max-messages", 0)?,
    };
    let mut max_in_flight: u32 = flags.number("max-in-flight", 200)?;
    let print_topic = flags.boolean("print-topic")?;
    if nsqd.is_empty() && lookupd.is_empty() {
        return Err("--nsqd-tcp-address or --lookupd-http-address required".to_owned());
    }
    if !nsqd.is_empty() && !lookupd.is_empty() {
        return Err("use --nsqd-tcp-address or --lookupd-http-address not both".to_owned());
    }
    if topics.is_empty() {
        return Err("--topic required".to_owned());
    }
    // Don't ask for more messages than we want.
    if total > 0 && total < u64::from(max_in_flight) {
        max_in_flight = total as u32;
    }
    let mut config = Config {
        user_agent: Some(format!("nsq_tail/nsq-tokio-{}", env!("CARGO_PKG_VERSION"))),
        ..Config::default()
    };
    apply_opts(&mut config, &flags.all("consumer-opt"))?;
    config.max_in_flight = max_in_flight;

    let shown = Arc::new(AtomicU64::new(0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut handles = Vec::new();
    let mut tasks = Vec::new();
    for topic in &topics {
        log(PREFIX, &format!("Adding consumer for topic: {topic}"));
        let mut consumer = Consumer::builder(topic.as_str(), channel.as_str())
            .config(&config)
            .nsqds(nsqd.iter().cloned())
            .lookupds(lookupd.iter().cloned())
            .build()
            .map_err(|e| e.to_string())?;
        handles.push(consumer.handle());
        let topic = topic.clone();
        let shown = shown.clone();
        let done_tx = done_tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(msg) = consumer.recv().await {
                let n = shown.fetch_add(1, Ordering::Relaxed) + 1;
                if total > 0 && n > total {
                    // Enough shown (another topic got there first): leave it for others.
                    msg.requeue_without_backoff(Some(std::time::Duration::ZERO));
                    break;
                }
                let mut out = std::io::stdout().lock();
                let written = if print_topic {
                    write!(out, "{topic} | ")
                } else {
                    Ok(())
                }
                .and_then(|()| out.write_all(msg.body()))
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.flush());
                drop(out);
                if let Err(e) = written {
                    fatal(
                        PREFIX,
                        &format!("ERROR: failed to write to os.Stdout - {e}"),
                    );
                }
                msg.finish();
                if total > 0 && n >= total {
                    let _ = done_tx.send(());
                    break;
                }
            }
        }));
    }
    drop(done_tx);
    tokio::select! {
        () = terminated() => {}
        _ = done_rx.recv() => {}
    }
    for h in &handles {
        h.stop().await;
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
