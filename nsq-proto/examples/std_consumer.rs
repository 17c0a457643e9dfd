//! Subscribes, receives, finishes and closes cleanly by driving nsq-proto's `Consumer` over a
//! plain `std::net::TcpStream`: the whole client is the loop in `demo` plus the driver in
//! `std_driver/mod.rs`.
//!
//! ```text
//! cargo run -p nsq-proto --example std_consumer   # in-process test broker, seeded with messages
//! cargo run -p nsq-proto --example std_consumer -- --nsqd-tcp-address=127.0.0.1:4150 --count 3
//! ```
//!
//! Against a real nsqd, run `std_producer` first: it publishes to the same default topic.
//!
//! With `--runfor` it is the floor of the reader benchmark: go-nsq's `bench_reader` flags and
//! final line, one connection with RDY `--rdy`, every message finished as it arrives, from one
//! thread with nothing but this core and `std::net` in the way.
//!
//! ```text
//! cargo run --release -p nsq-proto --example std_consumer -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --channel=ch --rdy=2500 --runfor=2s
//! ```
#![allow(
    clippy::print_stdout,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a driver owns the socket and the clock, and an example prints what it does"
)]

#[path = "std_driver/mod.rs"]
mod std_driver;
use nsq_example_cli as support;

use nsq_proto::consumer::{Consumer, ConsumerConfig, ConsumerEvent};
use nsq_proto::{Channel, Topic};
use std::time::{Duration, Instant};
use support::{BenchArgs, Flags, Usage, bench_line, fatal, log, value};

const USAGE: Usage = Usage {
    name: "std_consumer",
    about: "Consumes messages with nsq-proto's Consumer over std::net, in one thread; \
            with --runfor, benchmarks reading like go-nsq's bench_reader.",
    flags: &[
        value(
            "nsqd-tcp-address",
            "ADDR",
            "nsqd TCP address (default: an in-process test broker)",
        ),
        value(
            "topic",
            "TOPIC",
            "topic to consume (default: std_example; sub_bench with --runfor)",
        ),
        value(
            "channel",
            "CHANNEL",
            "channel to consume (default: std_example; ch with --runfor)",
        ),
        value(
            "count",
            "N",
            "messages to finish without --runfor (default: 3)",
        ),
        value(
            "runfor",
            "DURATION",
            "benchmark reading for this long, like bench_reader",
        ),
        value("rdy", "N", "with --runfor: max in flight (default: 2500)"),
        value(
            "size",
            "BYTES",
            "with --runfor: size of each message, for the rate (default: 200)",
        ),
    ],
};

fn main() {
    if let Err(e) = dispatch(&Flags::parse(&USAGE)) {
        fatal("std_consumer", &e.to_string());
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs the example with `args` (the command line without the program's name).
#[allow(
    dead_code,
    reason = "tests/std_examples.rs runs the example through it"
)]
pub(crate) fn run(args: &[String]) -> Result<()> {
    let flags = Flags::parse_from(args.iter().cloned(), &USAGE).map_err(|e| format!("{e:?}"))?;
    dispatch(&flags)
}

fn dispatch(flags: &Flags) -> Result<()> {
    if flags.has("runfor") {
        bench(flags)
    } else {
        demo(flags)
    }
}

/// Subscribes to `--topic` (default `std_example`) on channel `--channel` (default
/// `std_example`), finishes `--count` messages (default 3), then closes gracefully.
fn demo(flags: &Flags) -> Result<()> {
    let (addr, broker) = std_driver::nsqd_address(flags)?;
    let topic = Topic::new(flags.string("topic", "std_example"))?;
    let channel = Channel::new(flags.string("channel", "std_example"))?;
    let count: usize = flags.number("count", 3)?;
    if let Some(broker) = &broker {
        for i in 0..count {
            broker.publish(topic.as_str(), format!("message {i}").as_bytes());
        }
    }

    let config = ConsumerConfig {
        max_in_flight: 10,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(config, topic, channel, std::process::id().into());
    consumer.add_nsqd(Instant::now(), &addr)?;
    let mut driver = std_driver::StdDriver::new(Duration::from_secs(10));
    let mut finished = 0;
    let mut events = Vec::new();
    loop {
        driver.drain(&mut consumer, &mut events);
        if events.is_empty() {
            driver.wait(&mut consumer)?;
        }
        for event in events.drain(..) {
            match event {
                ConsumerEvent::ConnectionReady { addr, .. } => println!("subscribed on {addr}"),
                ConsumerEvent::Message { conn, message } => {
                    println!("received {:?}", String::from_utf8_lossy(&message.body));
                    consumer.finish(Instant::now(), conn, &message.id)?;
                    finished += 1;
                    if finished == count {
                        consumer.close(Instant::now()); // CLS, waits for CLOSE_WAIT
                    }
                }
                ConsumerEvent::Closed { leftovers } => {
                    println!("closed ({leftovers} left unanswered)");
                    return if leftovers == 0 {
                        Ok(())
                    } else {
                        Err(format!("{leftovers} messages left unanswered").into())
                    };
                }
                _ => {}
            }
        }
    }
}

/// The reader benchmark: finish every message as it arrives until `--runfor` has passed.
fn bench(flags: &Flags) -> Result<()> {
    let args = BenchArgs::parse(flags, Duration::from_secs(10))?;
    let (addr, _broker) = std_driver::nsqd_address(flags)?;
    let config = ConsumerConfig {
        max_in_flight: args.rdy,
        ..ConsumerConfig::default()
    };
    let topic = Topic::new(args.topic.clone())?;
    let channel = Channel::new(args.channel.clone())?;
    let mut consumer = Consumer::new(config, topic, channel, std::process::id().into());
    consumer.add_nsqd(Instant::now(), &addr)?;
    let mut driver = std_driver::StdDriver::new(args.runfor + Duration::from_secs(30));
    let mut events = Vec::new();
    // Started once subscribed (as go-nsq's tool starts its clock before connecting, a
    // subscription takes a millisecond).
    let mut clock: Option<(Instant, Instant)> = None;
    let mut received = 0u64;
    let mut elapsed = Duration::ZERO;
    loop {
        driver.drain(&mut consumer, &mut events);
        if events.is_empty() {
            driver.wait(&mut consumer)?;
        }
        let now = Instant::now();
        if let Some((start, end)) = clock {
            if now >= end && !consumer.is_closing() {
                elapsed = now - start;
                consumer.close(now);
            }
        }
        for event in events.drain(..) {
            match event {
                ConsumerEvent::ConnectionReady { .. } => {
                    clock = Some((now, now + args.runfor));
                }
                ConsumerEvent::Message { conn, message } => {
                    consumer.finish(now, conn, &message.id)?;
                    if !consumer.is_closing() {
                        received += 1;
                    }
                }
                ConsumerEvent::Closed { .. } => {
                    log("bench_reader", &bench_line(elapsed, received, args.size));
                    return Ok(());
                }
                _ => {}
            }
        }
    }
}
