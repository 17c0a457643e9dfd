//! Publish a few messages and consume them, printing what happens (nsq-tokio's quickstart,
//! on async-std or smol).
//!
//! ```text
//! cargo run -p nsq-async-std --example quickstart_async_std  # in-process test broker
//! cargo run -p nsq-async-std --example quickstart_async_std -- --nsqd-tcp-address=127.0.0.1:4150
//! cargo run -p nsq-async-std --example quickstart_async_std -- --runtime=smol  # default: async-std
//! ```
//!
//! Without `--nsqd-tcp-address` it starts the in-process test nsqd from `tests/` (crate
//! `nsq-test-broker`), so it works on a fresh machine with nothing installed. Flags:
//! `--nsqd-tcp-address`, `--topic` (default `quickstart`), `--channel` (default `demo`),
//! `--runtime` (`async-std` or `smol`).
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example that shows what happened"
)]

use nsq_async_std::{Config, Consumer, Producer};
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
    let result = match flags.get("runtime").map_or("async-std", String::as_str) {
        "async-std" => async_std::task::block_on(run(&flags)),
        "smol" => smol::block_on(run(&flags)),
        other => Err(format!("unknown --runtime {other:?} (async-std or smol)").into()),
    };
    if let Err(e) = result {
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
        if !["nsqd-tcp-address", "topic", "channel", "runtime"].contains(&name.as_str()) {
            return Err(format!("unknown flag --{name}"));
        }
        flags.insert(name, value);
    }
    Ok(flags)
}

async fn run(flags: &HashMap<String, String>) -> Result<(), Box<dyn std::error::Error>> {
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
    let producer = Producer::connect(&addr, &Config::default()).await?;
    producer.publish(topic, "hello").await?;
    println!("published 1 message (PUB)");
    producer
        .multi_publish(topic, ["one", "two", "three"])
        .await?;
    println!("published 3 messages in one batch (MPUB)");
    producer
        .deferred_publish(topic, Duration::from_millis(500), "later")
        .await?;
    println!("published 1 message delivered after 500 ms (DPUB)");
    producer.close().await;

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
        let next = futures_lite::future::or(async { Some(consumer.recv().await) }, async {
            async_io::Timer::after(Duration::from_secs(10)).await;
            None
        })
        .await;
        let Some(next) = next else {
            return Err("timed out waiting for messages".into());
        };
        let Some(msg) = next else { break };
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
    let report = consumer.stop().await;
    let stats = consumer.stats();
    println!(
        "stopped: {} received, {} finished, {} requeued, {} left unanswered",
        stats.received, stats.finished, stats.requeued, report.unanswered
    );
    Ok(())
}
