//! The single-publish benchmark, side by side with go-nsq: `--concurrency` tasks share one
//! [`Producer`] and each publishes one `--size`-byte message at a time (PUB, awaiting the
//! result before the next) until `--runfor` has passed; the final line is the Go bench
//! tools' (`duration: ... - mb/s - ops/s - us/op`). This is the most common way services
//! publish: one message per request, from many tasks at once. Publishes waiting at the same
//! moment leave as one MPUB (natural batching), each with its own result.
//!
//! Flags beyond the Go program's (`--nsqd-tcp-address`, `--topic`, `--size`, `--runfor`,
//! `--concurrency`): `--runtime=multi|current` (tokio's scheduler, default `multi`, one worker
//! per CPU), `--batching=true|false` (default true), and `--async` with `--window=N`: one task
//! publishes with `publish_async`, keeping `N` publishes under way (default 1000), like
//! go-nsq's `PublishAsync` from one goroutine.
//!
//! ```text
//! cargo run --release -p nsq-tokio --example bench_publish -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --concurrency=100 --runfor=3s
//! ```

mod support;

use bytes::Bytes;
use nsq_tokio::{Config, Producer, Topic};
use std::time::{Duration, Instant};
use support::{
    BenchArgs, Flags, Usage, WINDOW_FLAG, async_publish_flags, bench_flags, bench_line, cpus,
    fatal, init_logging, log, publish_window, value,
};

const PREFIX: &str = "bench_publish";

const USAGE: Usage = Usage {
    name: "bench_publish",
    about: "Publishes single messages from many concurrent tasks sharing one producer; prints the rate.",
    flags: bench_flags!(
        publish,
        value(
            "runtime",
            "current|multi",
            "tokio scheduler, not a Go flag (default: multi)",
        ),
        value(
            "batching",
            "true|false",
            "natural batching of concurrent publishes, not a Go flag (default: true)",
        ),
        async_publish_flags!(),
        WINDOW_FLAG
    ),
};

fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let run = || -> Result<(), String> {
        let args = BenchArgs::parse(&flags, Duration::from_secs(3))?;
        let runfor = args.runfor;
        let addr = args.addr.clone();
        let topic = Topic::new(args.topic.clone()).map_err(|e| e.to_string())?;
        let size: usize = args.size;
        let concurrency: usize = args.concurrency;
        let runtime = flags.string("runtime", "multi");
        let mut config = Config::default();
        config
            .set_str("producer_batching", &flags.string("batching", "true"))
            .map_err(|e| e.to_string())?;
        let rt = match runtime.as_str() {
            "current" => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            "multi" => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(cpus())
                .enable_all()
                .build(),
            other => return Err(format!("--runtime must be multi or current, not {other:?}")),
        }
        .map_err(|e| e.to_string())?;
        let body = Bytes::from(vec![0u8; size]);
        let one_task = flags.boolean("async")?;
        let window: usize = flags.number("window", 1000)?;
        let (duration, total, stats) = rt.block_on(async {
            let producer = Producer::connect(&addr, &config)
                .await
                .map_err(|e| e.to_string())?;
            let start = Instant::now();
            let end = start + runfor;
            if one_task {
                let total =
                    publish_window(window, end, || producer.publish_async(&topic, body.clone()))
                        .await?;
                let duration = start.elapsed();
                let stats = producer.stats();
                producer.close().await;
                return Ok::<_, String>((duration, total, stats));
            }
            let tasks: Vec<_> = (0..concurrency)
                .map(|_| {
                    let (p, topic, body) = (producer.clone(), topic.clone(), body.clone());
                    tokio::spawn(async move {
                        let mut n = 0u64;
                        while Instant::now() < end {
                            p.publish(&topic, body.clone())
                                .await
                                .map_err(|e| format!("publish error: {e}"))?;
                            n += 1;
                        }
                        Ok::<u64, String>(n)
                    })
                })
                .collect();
            let mut total = 0;
            for t in tasks {
                total += t.await.map_err(|e| e.to_string())??;
            }
            let duration = start.elapsed();
            let stats = producer.stats();
            producer.close().await;
            Ok::<_, String>((duration, total, stats))
        })?;
        log(
            PREFIX,
            &format!(
                "{} MPUB batches carried {} of {total} messages",
                stats.batches, stats.batched_messages
            ),
        );
        log(PREFIX, &bench_line(duration, total, size));
        Ok(())
    };
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
