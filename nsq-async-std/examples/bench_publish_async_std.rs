//! The single-publish benchmark (nsq-tokio's `bench_publish`, on async-std or smol):
//! `--concurrency` tasks share one [`Producer`] and each publishes one `--size`-byte message
//! at a time, awaiting its result before the next, until `--runfor` has passed. Publishes
//! waiting at the same moment leave as one MPUB (natural batching), each with its own result.
//! Prints the Go bench tools' final line. Extra flags: `--runtime=smol|async-std` (default
//! smol, whose tasks run on `SMOL_THREADS` threads, default 1),
//! `--batching=true|false` (default true), and `--async` with `--window=N`: one task
//! publishes with `publish_async`, keeping `N` publishes under way (default 1000), like
//! go-nsq's `PublishAsync` from one goroutine.
//!
//! ```text
//! cargo run --release -p nsq-async-std --example bench_publish_async_std -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --concurrency=100 --runfor=3s
//! ```

mod drivers;
use nsq_example_cli as support;

use bytes::Bytes;
use nsq_async_std::{Config, Topic};
use std::time::{Duration, Instant};
use support::{
    BenchArgs, Flags, Usage, WINDOW_FLAG, async_publish_flags, bench_flags, bench_line, fatal,
    init_logging, log, publish_window, value,
};

const PREFIX: &str = "bench_publish";

const USAGE: Usage = Usage {
    name: "bench_publish_async_std",
    about: "Publishes single messages from many tasks sharing one producer; prints the rate.",
    flags: bench_flags!(
        publish,
        value(
            "runtime",
            "smol|async-std",
            "the executor, not a Go flag (default: smol)",
        ),
        value(
            "drivers",
            "thread|executor",
            "who drives each client, not a Go flag: the tasks that wait for it and a thread of \
             its own (the default mode), or a task on the executor \
             (AsyncStd::on_executor) (default: thread)",
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

/// One publishing task (spawned on the runtime, awaited for its count).
type Task = std::pin::Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;

struct Load {
    addr: String,
    topic: Topic,
    body: Bytes,
    concurrency: usize,
    runfor: Duration,
    config: Config,
    /// `--async`: the window of one task's `publish_async`s.
    window: Option<usize>,
}

async fn bench(
    load: Load,
    spawn: fn(Task) -> Task,
) -> Result<(Duration, u64, nsq_async_std::ProducerStats), String> {
    let producer = drivers::producer(&load.addr, &load.config)
        .await
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let end = start + load.runfor;
    if let Some(window) = load.window {
        let (topic, body) = (&load.topic, &load.body);
        let total =
            publish_window(window, end, || producer.publish_async(topic, body.clone())).await?;
        let duration = start.elapsed();
        let stats = producer.stats();
        producer.close().await;
        return Ok((duration, total, stats));
    }
    let tasks: Vec<_> = (0..load.concurrency)
        .map(|_| {
            let (p, topic, body) = (producer.clone(), load.topic.clone(), load.body.clone());
            spawn(Box::pin(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    p.publish(&topic, body.clone())
                        .await
                        .map_err(|e| format!("publish error: {e}"))?;
                    n += 1;
                }
                Ok(n)
            }))
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await?;
    }
    let duration = start.elapsed();
    let stats = producer.stats();
    producer.close().await;
    Ok((duration, total, stats))
}

fn run() -> Result<(), String> {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let args = BenchArgs::parse(&flags, Duration::from_secs(3))?;
    let mut config = Config::default();
    config
        .set_str("producer_batching", &flags.string("batching", "true"))
        .map_err(|e| e.to_string())?;
    let size: usize = args.size;
    let load = Load {
        addr: args.addr.clone(),
        topic: Topic::new(args.topic.clone()).map_err(|e| e.to_string())?,
        body: Bytes::from(vec![0u8; size]),
        concurrency: args.concurrency,
        runfor: args.runfor,
        config,
        window: if flags.boolean("async")? {
            Some(flags.number("window", 1000)?)
        } else {
            None
        },
    };
    let runtime = flags.string("runtime", "smol");
    drivers::apply(&flags.string("drivers", "thread"), &runtime)?;
    let (duration, total, stats) = match runtime.as_str() {
        "async-std" => {
            async_std::task::block_on(bench(load, |f| Box::pin(async_std::task::spawn(f))))
        }
        "smol" => smol::block_on(bench(load, |f| Box::pin(smol::spawn(f)))),
        other => return Err(format!("-runtime must be async-std or smol, not {other:?}")),
    }?;
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
