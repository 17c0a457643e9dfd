//! Subscribes, receives, finishes and closes cleanly by driving nsq-proto's `Consumer` over a
//! plain `std::net::TcpStream`: the whole client is the loop in `run` plus the driver in
//! `std_driver/mod.rs`.
//!
//! ```text
//! cargo run -p nsq-proto --example std_consumer   # in-process test broker, seeded with messages
//! cargo run -p nsq-proto --example std_consumer -- --nsqd-tcp-address=127.0.0.1:4150 --count 3
//! ```
//!
//! Against a real nsqd, run `std_producer` first: it publishes to the same default topic.
#![allow(
    clippy::print_stdout,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a driver owns the socket and the clock, and an example prints what it does"
)]

#[path = "std_driver/mod.rs"]
mod std_driver;

use nsq_proto::consumer::{Consumer, ConsumerConfig, ConsumerEvent};
use nsq_proto::{Channel, Topic};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(&std::env::args().skip(1).collect::<Vec<_>>())
}

/// Subscribes to `--topic` (default `std_example`) on channel `--channel` (default
/// `std_example`), finishes `--count` messages (default 3), then closes gracefully.
pub(crate) fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let (addr, broker) = std_driver::nsqd_address(args)?;
    let topic = Topic::new(std_driver::flag(args, "topic").unwrap_or("std_example"))?;
    let channel = Channel::new(std_driver::flag(args, "channel").unwrap_or("std_example"))?;
    let count: usize = std_driver::flag(args, "count").unwrap_or("3").parse()?;
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
    loop {
        let events = driver.drain(&mut consumer);
        if events.is_empty() {
            driver.wait(&mut consumer)?;
        }
        for event in events {
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
