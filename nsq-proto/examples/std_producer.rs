//! Publishes messages by driving nsq-proto's `Producer` over a plain `std::net::TcpStream`:
//! the whole client is the loop in `run` plus the driver in `std_driver/mod.rs`.
//!
//! ```text
//! cargo run -p nsq-proto --example std_producer   # against an in-process test broker
//! cargo run -p nsq-proto --example std_producer -- --nsqd-tcp-address=127.0.0.1:4150 --count 3
//! ```
#![allow(
    clippy::print_stdout,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a driver owns the socket and the clock, and an example prints what it does"
)]

#[path = "std_driver/mod.rs"]
mod std_driver;

use nsq_proto::Topic;
use nsq_proto::producer::{Producer, ProducerConfig, ProducerEvent};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(&std::env::args().skip(1).collect::<Vec<_>>())
}

/// Connects, publishes `--count` messages (default 3) to `--topic` (default `std_example`)
/// once the connection is ready, and closes when nsqd has acknowledged them all.
pub(crate) fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let (addr, _broker) = std_driver::nsqd_address(args)?;
    let topic = Topic::new(std_driver::flag(args, "topic").unwrap_or("std_example"))?;
    let count: usize = std_driver::flag(args, "count").unwrap_or("3").parse()?;

    let mut producer = Producer::new(ProducerConfig::default(), std::process::id().into())?;
    producer.add_nsqd(Instant::now(), &addr)?;
    let mut driver = std_driver::StdDriver::new(Duration::from_secs(10));
    let mut acknowledged = 0;
    loop {
        let events = driver.drain(&mut producer);
        if events.is_empty() {
            driver.wait(&mut producer)?;
        }
        for event in events {
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
