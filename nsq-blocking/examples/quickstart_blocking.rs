//! Publish a few messages and consume them, printing what happens (nsq-tokio's quickstart,
//! on plain threads).
//!
//! ```text
//! cargo run -p nsq-blocking --example quickstart_blocking  # in-process test broker
//! cargo run -p nsq-blocking --example quickstart_blocking -- --nsqd-tcp-address=127.0.0.1:4150
//! ```
//!
//! Without `--nsqd-tcp-address` it starts the in-process test nsqd from `tests/` (crate
//! `nsq-test-broker`), so it works on a fresh machine with nothing installed. `--help` lists
//! the flags.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example that shows what happened"
)]

use nsq_example_cli as support;

use nsq_blocking::{Config, Consumer, Producer};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};
use support::{Flags, Usage, fatal, init_logging, value};

const USAGE: Usage = Usage {
    name: "quickstart_blocking",
    about: "Publishes a few messages (PUB, MPUB, DPUB) and consumes them, printing what happens.",
    flags: &[
        value(
            "nsqd-tcp-address",
            "ADDR",
            "nsqd TCP address (default: start the in-process test nsqd)",
        ),
        value("topic", "TOPIC", "topic to use (default: quickstart)"),
        value(
            "channel",
            "CHANNEL",
            "channel to consume from (default: demo)",
        ),
    ],
};

fn main() {
    let flags = Flags::parse(&USAGE);
    // Log lines (connections, failures) on stderr; RUST_LOG sets the level (default: info).
    init_logging();
    if let Err(e) = run(&flags) {
        fatal("quickstart", &e.to_string());
    }
}

fn run(flags: &Flags) -> Result<(), Box<dyn std::error::Error>> {
    // 1. A server: the one given, or the in-process test broker.
    let (_broker, addr) = if let Some(a) = flags.get("nsqd-tcp-address") {
        (None, a.to_owned())
    } else {
        let nsqd = nsq_test_broker::Nsqd::start()?;
        let addr = nsqd.tcp_address().to_string();
        println!("started the in-process test nsqd on {addr}");
        (Some(nsqd), addr)
    };
    let topic = flags.get("topic").unwrap_or("quickstart");
    let channel = flags.get("channel").unwrap_or("demo");

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
        // Waits until subscribed; the wrong port or an nsqd that is down is an error here.
        .connect()?;
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
    let stats = consumer.as_handle().stats();
    println!(
        "stopped: {} received, {} finished, {} requeued, {} left unanswered",
        stats.received, stats.finished, stats.requeued, report.unanswered
    );
    Ok(())
}
