//! The single-publish benchmark (nsq-tokio's `bench_publish`, with threads): `--concurrency`
//! threads share one [`Producer`] and each publishes one `--size`-byte message at a time,
//! waiting for its result before the next, until `--runfor` has passed. Publishes waiting at
//! the same moment leave as one MPUB (natural batching), each with its own result. Prints the
//! Go bench tools' final line. Extra flag: `--batching=true|false` (default true).
//!
//! ```text
//! cargo run --release -p nsq-blocking --example bench_publish_blocking -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --concurrency=100 --runfor=3s
//! ```

mod support;

use nsq_blocking::proto::config::parse_go_duration;
use nsq_blocking::{Config, Producer, Topic};
use std::time::{Duration, Instant};
use support::{bench_line, fatal, flag, log, parse_flags};

const PREFIX: &str = "bench_publish";

fn run() -> Result<(), String> {
    let flags = parse_flags(&[
        "nsqd-tcp-address",
        "topic",
        "size",
        "runfor",
        "concurrency",
        "batching",
    ])?;
    let runfor =
        parse_go_duration(flag(&flags, "runfor", "3s")).map_err(|e| format!("-runfor: {e}"))?;
    let topic = Topic::new(flag(&flags, "topic", "sub_bench")).map_err(|e| e.to_string())?;
    let size: usize = flag(&flags, "size", "200")
        .parse()
        .map_err(|_| "invalid -size")?;
    let concurrency: usize = flag(&flags, "concurrency", "100")
        .parse()
        .map_err(|_| "invalid -concurrency")?;
    let mut config = Config::default();
    config
        .set_str("producer_batching", flag(&flags, "batching", "true"))
        .map_err(|e| e.to_string())?;
    let producer = Producer::connect(flag(&flags, "nsqd-tcp-address", "127.0.0.1:4150"), &config)
        .map_err(|e| e.to_string())?;
    let body = bytes::Bytes::from(vec![0u8; size]);
    let start = Instant::now();
    let end = start + runfor;
    let threads: Vec<_> = (0..concurrency)
        .map(|_| {
            let (p, topic, body) = (producer.clone(), topic.clone(), body.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < end {
                    p.publish(&topic, body.clone())
                        .map_err(|e| format!("publish error: {e}"))?;
                    n += 1;
                }
                Ok::<u64, String>(n)
            })
        })
        .collect();
    let mut total = 0;
    for t in threads {
        total += t.join().map_err(|_| "a publishing thread panicked")??;
    }
    let duration: Duration = start.elapsed();
    let stats = producer.stats();
    producer.close();
    log(
        PREFIX,
        &format!(
            "{} MPUB batches carried {} of {total} messages",
            stats.batches, stats.batched_messages
        ),
    );
    log(PREFIX, &bench_line(duration, total, size));
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
