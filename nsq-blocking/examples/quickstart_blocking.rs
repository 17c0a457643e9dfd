//! Publish a few messages and consume them, printing what happens (nsq-tokio's quickstart,
//! on plain threads).
//!
//! ```text
//! cargo run -p nsq-blocking --example quickstart_blocking  # in-process test broker
//! cargo run -p nsq-blocking --example quickstart_blocking -- --nsqd-tcp-address=127.0.0.1:4150
//! ```
//!
//! Without `--nsqd-tcp-address` it starts the in-process test nsqd from `tests/` (crate
//! `nsq-test-broker`), so it works on a fresh machine with nothing installed. Flags:
//! `--nsqd-tcp-address`, `--topic` (default `quickstart`), `--channel` (default `demo`).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example that shows what happened"
)]

use nsq_blocking::{Config, Consumer, Producer, RecvTimeoutError};
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn main() {
    let flags = match parse_flags() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("quickstart: {e}");
            std::process::exit(2);
        }
    };
    // Log lines (connections, failures) on stderr; RUST_LOG sets the level (default: info).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(&flags) {
        eprintln!("quickstart: {e}");
        std::process::exit(1);
    }
}

/// `--name=value` / `--name value` flags.
fn parse_flags() -> Result<HashMap<String, String>, String> {
    let mut flags = HashMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let Some(name) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let (name, value) = if let Some((n, v)) = name.split_once('=') {
            (n.to_owned(), v.to_owned())
        } else {
            let v = args
                .next()
                .ok_or_else(|| format!("--{name} needs a value"))?;
            (name.to_owned(), v)
        };
        if !["nsqd-tcp-address", "topic", "channel"].contains(&name.as_str()) {
            return Err(format!("unknown flag --{name}"));
        }
        flags.insert(name, value);
    }
    Ok(flags)
}

fn run(flags: &HashMap<String, String>) -> Result<(), Box<dyn std::error::Error>> {
    // 1. A server: the one given, or the in-process test broker.
    let (_broker, addr) = if let Some(a) = flags.get("nsqd-tcp-address") {
        (None, a.clone())
    } else {
        let nsqd = nsq_test_broker::Nsqd::start()?;
        let addr = nsqd.tcp_address().to_string();
        println!("started the in-process test nsqd on {addr}");
        (Some(nsqd), addr)
    };
    let topic = flags.get("topic").map_or("quickstart", String::as_str);
    let channel = flags.get("channel").map_or("demo", String::as_str);

    // 2. Publish: one message, a batch, and a deferred one.
    let producer = Producer::connect(&addr, &Config::default())?;
    producer.publish(topic, "hello")?;
    println!("published 1 message (PUB)");
    producer.multi_publish(topic, ["one", "two", "three"])?;
    println!("published 3 messages in one batch (MPUB)");
    producer.deferred_publish(topic, Duration::from_millis(500), "later")?;
    println!("published 1 message delivered after 500 ms (DPUB)");
    producer.close();

    // 3. Consume them; the first attempt of "two" fails and is requeued.
    let mut consumer = Consumer::builder(topic, channel)
        .config(&Config {
            max_in_flight: 10,
            ..Config::default()
        })
        .nsqd(addr.as_str())
        .build()?;
    let started = Instant::now();
    let mut done = 0;
    while done < 5 {
        let msg = match consumer.recv_timeout(Duration::from_secs(10)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => return Err("timed out waiting for messages".into()),
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let body = String::from_utf8_lossy(msg.body()).into_owned();
        if body == "two" && msg.attempts() == 1 {
            println!("received {body:?} (attempt 1): requeueing it for a retry");
            msg.requeue_without_backoff(Some(Duration::ZERO));
            continue;
        }
        println!(
            "received {body:?} (attempt {}) from {} after {:?}: finishing it",
            msg.attempts(),
            msg.nsqd_address(),
            started.elapsed()
        );
        msg.finish();
        done += 1;
    }
    let report = consumer.stop();
    let stats = consumer.stats();
    println!(
        "stopped: {} received, {} finished, {} requeued, {} left unanswered",
        stats.received, stats.finished, stats.requeued, report.unanswered
    );
    Ok(())
}
