//! Publishes messages by driving nsq-proto's `Producer` over a plain `std::net::TcpStream`:
//! the whole client is the loop in `demo` plus the driver in `std_driver/mod.rs`.
//!
//! ```text
//! cargo run -p nsq-proto --example std_producer   # against an in-process test broker
//! cargo run -p nsq-proto --example std_producer -- --nsqd-tcp-address=127.0.0.1:4150 --count 3
//! ```
//!
//! With `--runfor` it is the floor of the writer benchmark: go-nsq's `bench_writer` flags and
//! final line, MPUB batches of `--batch-size` messages of `--size` bytes from one thread over
//! one connection, with nothing but this core and `std::net` in the way. As many batches are
//! under way as the Go tool has workers (one per CPU), each replaced when its reply comes.
//!
//! ```text
//! cargo run --release -p nsq-proto --example std_producer -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --batch-size=200 --runfor=3s
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

use nsq_proto::Topic;
use nsq_proto::producer::{Producer, ProducerConfig, ProducerEvent};
use std::time::{Duration, Instant};
use support::{BenchArgs, Flags, Usage, bench_line, fatal, log, value};

const USAGE: Usage = Usage {
    name: "std_producer",
    about: "Publishes messages with nsq-proto's Producer over std::net, in one thread; \
            with --runfor, benchmarks MPUB batches like go-nsq's bench_writer.",
    flags: &[
        value(
            "nsqd-tcp-address",
            "ADDR",
            "nsqd TCP address (default: an in-process test broker)",
        ),
        value(
            "topic",
            "TOPIC",
            "topic to publish to (default: std_example; sub_bench with --runfor)",
        ),
        value(
            "count",
            "N",
            "messages to publish without --runfor (default: 3)",
        ),
        value(
            "runfor",
            "DURATION",
            "benchmark MPUB batches for this long, like bench_writer",
        ),
        value(
            "size",
            "BYTES",
            "with --runfor: size of each message (default: 200)",
        ),
        value(
            "batch-size",
            "N",
            "with --runfor: messages per MPUB batch (default: 200)",
        ),
    ],
};

fn main() {
    if let Err(e) = dispatch(&Flags::parse(&USAGE)) {
        fatal("std_producer", &e.to_string());
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

/// Connects, publishes `--count` messages (default 3) to `--topic` (default `std_example`)
/// once the connection is ready, and closes when nsqd has acknowledged them all.
fn demo(flags: &Flags) -> Result<()> {
    let (addr, _broker) = std_driver::nsqd_address(flags)?;
    let topic = Topic::new(flags.string("topic", "std_example"))?;
    let count: usize = flags.number("count", 3)?;

    let mut producer = Producer::new(ProducerConfig::default(), std::process::id().into())?;
    producer.add_nsqd(Instant::now(), &addr)?;
    let mut driver = std_driver::StdDriver::new(Duration::from_secs(10));
    let mut acknowledged = 0;
    let mut events = Vec::new();
    loop {
        driver.drain(&mut producer, &mut events);
        if events.is_empty() {
            driver.wait(&mut producer)?;
        }
        for event in events.drain(..) {
            match event {
                ProducerEvent::ConnectionReady { addr, .. } => {
                    println!("connected to {addr}");
                    for i in 0..count {
                        producer.publish(
                            Instant::now(),
                            &topic,
                            format!("message {i}").as_bytes(),
                        )?;
                    }
                }
                ProducerEvent::Published(id) => {
                    acknowledged += 1;
                    println!("published {id:?}");
                    if acknowledged == count {
                        producer.close(Instant::now());
                    }
                }
                ProducerEvent::PublishFailed(id, failure) => {
                    return Err(format!("publish {id:?} failed: {failure:?}").into());
                }
                ProducerEvent::Closed => {
                    println!("closed");
                    return Ok(());
                }
                _ => {}
            }
        }
    }
}

/// The writer benchmark: MPUB, await its reply, again, until `--runfor` has passed.
fn bench(flags: &Flags) -> Result<()> {
    let args = BenchArgs::parse(flags, Duration::from_secs(10))?;
    let (addr, _broker) = std_driver::nsqd_address(flags)?;
    let topic = Topic::new(args.topic.clone())?;
    let batch = vec![vec![0u8; args.size]; args.batch_size];

    let mut producer = Producer::new(ProducerConfig::default(), std::process::id().into())?;
    producer.add_nsqd(Instant::now(), &addr)?;
    let mut driver = std_driver::StdDriver::new(args.runfor + Duration::from_secs(30));
    let mut events = Vec::new();
    // Started at the first publish, once connected.
    let mut clock: Option<(Instant, Instant)> = None;
    let mut published = 0u64;
    let mut under_way = 0;
    let mut elapsed = Duration::ZERO;
    loop {
        driver.drain(&mut producer, &mut events);
        if events.is_empty() {
            driver.wait(&mut producer)?;
            continue;
        }
        for event in events.drain(..) {
            match event {
                ProducerEvent::ConnectionReady { .. } => {
                    let start = Instant::now();
                    clock = Some((start, start + args.runfor));
                    let workers = std::thread::available_parallelism().map_or(1, usize::from);
                    for _ in 0..workers {
                        producer.multi_publish(start, &topic, &batch)?;
                    }
                    under_way = workers;
                }
                ProducerEvent::Published(_) => {
                    published += batch.len() as u64;
                    under_way -= 1;
                    let now = Instant::now();
                    match clock {
                        Some((_, end)) if now < end => {
                            producer.multi_publish(now, &topic, &batch)?;
                            under_way += 1;
                        }
                        _ if under_way > 0 => {}
                        _ => {
                            elapsed = clock.map_or(Duration::ZERO, |(start, _)| now - start);
                            producer.close(now);
                        }
                    }
                }
                ProducerEvent::PublishFailed(id, failure) => {
                    return Err(format!("publish {id:?} failed: {failure:?}").into());
                }
                ProducerEvent::Closed if published > 0 => {
                    log("bench_writer", &bench_line(elapsed, published, args.size));
                    return Ok(());
                }
                ProducerEvent::Closed => return Err("closed before publishing".into()),
                _ => {}
            }
        }
    }
}
