//! nsq-async-std's counterpart of nsq's `bench/bench_writer` (and of nsq-tokio's
//! `bench_writer`): same flags, same final line.
//!
//! One task per CPU (the Go tool's GOMAXPROCS workers), each with its own producer (one nsqd
//! connection), publishing MPUB batches of `--batch-size` messages of `--size` bytes and
//! awaiting each reply before the next, until `--runfor` has passed.
//!
//! Extra flag (not in the Go tool): `--runtime=smol|async-std` picks the executor (default
//! smol, whose tasks run on `SMOL_THREADS` threads, default 1).
//!
//! ```text
//! cargo run --release -p nsq-async-std --example bench_writer_async_std -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --batch-size=200 --runfor=10s
//! ```

mod drivers;
use nsq_example_cli as support;

use bytes::Bytes;
use nsq_async_std::{Config, Topic};
use std::time::{Duration, Instant};
use support::{
    BenchArgs, Flags, Usage, bench_flags, bench_line, cpus, fatal, init_logging, log, value,
};

const PREFIX: &str = "bench_writer";

const USAGE: Usage = Usage {
    name: "bench_writer_async_std",
    about: "Publishes MPUB batches from one producer per CPU for a while; prints the rate.",
    flags: bench_flags!(
        writer,
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
        )
    ),
};

/// One publishing task (spawned on the runtime, awaited for its count).
type Task = std::pin::Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;

struct Load {
    addr: String,
    topic: Topic,
    batch: Vec<Bytes>,
    runfor: Duration,
}

async fn bench(load: Load, spawn: fn(Task) -> Task) -> Result<(Duration, u64), String> {
    let workers = cpus();
    let mut producers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let p = drivers::producer(&load.addr, &Config::default())
            .await
            .map_err(|e| e.to_string())?;
        producers.push(p);
    }
    let start = Instant::now();
    let end = start + load.runfor;
    let tasks: Vec<Task> = producers
        .into_iter()
        .map(|p| {
            let (batch, topic) = (load.batch.clone(), load.topic.clone());
            spawn(Box::pin(async move {
                let mut count = 0u64;
                loop {
                    p.multi_publish(&topic, &batch)
                        .await
                        .map_err(|e| e.to_string())?;
                    count += batch.len() as u64;
                    if Instant::now() > end {
                        break;
                    }
                }
                p.close().await;
                Ok(count)
            }))
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await?;
    }
    Ok((start.elapsed(), total))
}

fn run() -> Result<(), String> {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let args = BenchArgs::parse(&flags, Duration::from_secs(10))?;
    let size: usize = args.size;
    let batch_size: usize = args.batch_size;
    let load = Load {
        addr: args.addr.clone(),
        topic: Topic::new(args.topic.clone()).map_err(|e| e.to_string())?,
        batch: vec![Bytes::from(vec![0u8; size]); batch_size],
        runfor: args.runfor,
    };
    let runtime = flags.string("runtime", "smol");
    drivers::apply(&flags.string("drivers", "thread"), &runtime)?;
    let (duration, total) = match runtime.as_str() {
        "async-std" => {
            async_std::task::block_on(bench(load, |f| Box::pin(async_std::task::spawn(f))))
        }
        "smol" => smol::block_on(bench(load, |f| Box::pin(smol::spawn(f)))),
        other => return Err(format!("-runtime must be async-std or smol, not {other:?}")),
    }?;
    log(PREFIX, &bench_line(duration, total, size));
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
