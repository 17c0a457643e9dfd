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

#[path = "../../nsq-tokio/examples/support/cli.rs"]
mod support;

use nsq_blocking::{Config, Producer, Topic};
use std::time::{Duration, Instant};
use support::{BenchArgs, Flags, Usage, bench_flags, bench_line, fatal, init_logging, log, value};

const PREFIX: &str = "bench_publish";

const USAGE: Usage = Usage {
    name: "bench_publish_blocking",
    about: "Publishes single messages from many threads sharing one producer; prints the rate.",
    flags: bench_flags!(
        publish,
        value(
            "batching",
            "true|false",
            "natural batching of concurrent publishes, not a Go flag (default: true)",
        )
    ),
};

fn run() -> Result<(), String> {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let args = BenchArgs::parse(&flags, Duration::from_secs(3))?;
    let runfor = args.runfor;
    let topic = Topic::new(args.topic.clone()).map_err(|e| e.to_string())?;
    let size: usize = args.size;
    let concurrency: usize = args.concurrency;
    let mut config = Config::default();
    config
        .set_str("producer_batching", &flags.string("batching", "true"))
        .map_err(|e| e.to_string())?;
    let producer = Producer::connect(&args.addr.clone(), &config).map_err(|e| e.to_string())?;
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
