//! The single-publish benchmark (nsq-tokio's `bench_publish`, with threads): `--concurrency`
//! threads share one [`Producer`] and each publishes one `--size`-byte message at a time,
//! waiting for its result before the next, until `--runfor` has passed. Publishes waiting at
//! the same moment leave as one MPUB (natural batching), each with its own result. Prints the
//! Go bench tools' final line. Extra flags: `--batching=true|false` (default true), and
//! `--async` with `--window=N`: one thread publishes with `publish_async`, keeping `N`
//! publishes under way (default 1000), like go-nsq's `PublishAsync` from one goroutine.
//!
//! ```text
//! cargo run --release -p nsq-blocking --example bench_publish_blocking -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --concurrency=100 --runfor=3s
//! ```

use nsq_example_cli as support;

use nsq_blocking::{Config, Producer, Topic};
use std::time::{Duration, Instant};
use support::{
    BenchArgs, Flags, Usage, WINDOW_FLAG, async_publish_flags, bench_flags, bench_line, fatal,
    init_logging, log, value,
};

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
        ),
        async_publish_flags!(),
        WINDOW_FLAG
    ),
};

/// `--async`: one thread keeps `window` publishes under way until `end`; returns how many
/// succeeded.
fn publish_window(
    producer: &Producer,
    topic: &Topic,
    body: &bytes::Bytes,
    window: usize,
    end: Instant,
) -> Result<u64, String> {
    let mut under_way = std::collections::VecDeque::with_capacity(window);
    let mut done = 0u64;
    let publish_error = |e: nsq_blocking::Error| format!("publish error: {e}");
    while Instant::now() < end {
        if under_way.len() >= window.max(1) {
            if let Some(p) = under_way.pop_front() {
                nsq_blocking::PendingPublish::wait(p).map_err(publish_error)?;
                done += 1;
            }
        }
        under_way.push_back(
            producer
                .publish_async(topic, body.clone())
                .map_err(publish_error)?,
        );
    }
    for p in under_way {
        p.wait().map_err(publish_error)?;
        done += 1;
    }
    Ok(done)
}

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
    let mut total = 0;
    if flags.boolean("async")? {
        let window = flags.number("window", 1000)?;
        total = publish_window(&producer, &topic, &body, window, end)?;
    }
    let concurrency = if flags.boolean("async")? {
        0
    } else {
        concurrency
    };
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
