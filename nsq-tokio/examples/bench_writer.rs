//! nsq-tokio's counterpart of nsq's `bench/bench_writer`: same flags, same final line.
//!
//! One task per CPU (the Go tool's GOMAXPROCS workers), each with its own producer (one nsqd
//! connection), publishing MPUB batches of `--batch-size` messages of `--size` bytes and
//! awaiting each reply before the next, until `--runfor` has passed.
//!
//! Extra flag (not in the Go tool): `--runtime=current|multi` picks tokio's scheduler
//! (default `current`: every task on one thread, which leaves the other cores to nsqd and
//! saves the cross-thread wake-ups; `multi`: one worker thread per CPU). The workload is the
//! same either way: one producer per CPU, each awaiting its MPUB's reply before the next.
//!
//! `--metrics` (not in the Go tool; needs nsq-tokio's `metrics` feature, refused otherwise)
//! installs a Prometheus recorder (`PrometheusBuilder::new().install_recorder()`) before the
//! first producer exists, runs its upkeep every second and renders it once at the end, printing
//! `metrics: N lines rendered (...)` before the final line: what recording costs, end to end.
//!
//! ```text
//! cargo run --release -p nsq-tokio --example bench_writer -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --batch-size=200 --runfor=10s
//! ```

mod support;

use bytes::Bytes;
use nsq_tokio::{Config, Producer, Topic};
use std::time::{Duration, Instant};
use support::{
    BenchArgs, Flags, METRICS_FLAG, Usage, bench_flags, bench_line, cpus, fatal, init_logging, log,
    value,
};

const PREFIX: &str = "bench_writer";

const USAGE: Usage = Usage {
    name: "bench_writer",
    about: "Publishes MPUB batches from one producer per CPU for a while; prints the rate.",
    flags: bench_flags!(
        writer,
        value(
            "runtime",
            "current|multi",
            "tokio scheduler, not a Go flag (default: current)",
        ),
        METRICS_FLAG
    ),
};

fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let run = || -> Result<(), String> {
        let args = BenchArgs::parse(&flags, Duration::from_secs(10))?;
        let runfor = args.runfor;
        let addr = args.addr.clone();
        let topic = Topic::new(args.topic.clone()).map_err(|e| e.to_string())?;
        let size: usize = args.size;
        let batch_size: usize = args.batch_size;
        let workers = cpus();
        // Not a Go flag: tokio's scheduler. `current` runs every task on one thread.
        let runtime = flags.string("runtime", "current");
        if runtime != "current" && runtime != "multi" {
            return Err(format!(
                "--runtime must be current or multi, not {runtime:?}"
            ));
        }
        // Not a Go flag: `--metrics` records into a Prometheus recorder, installed now.
        let recording = support::recording::Recording::start(flags.boolean("metrics")?)?;
        let body = Bytes::from(vec![0u8; size]);
        let batch: Vec<Bytes> = vec![body; batch_size];
        let rt = if runtime == "current" {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
        }
        .map_err(|e| e.to_string())?;
        if let Some(r) = &recording {
            r.spawn_upkeep(&rt);
        }
        let (duration, total) = rt.block_on(async {
            let mut producers = Vec::with_capacity(workers);
            for _ in 0..workers {
                let p = Producer::connect(&addr, &Config::default())
                    .await
                    .map_err(|e| e.to_string())?;
                producers.push(p);
            }
            let start = Instant::now();
            let end = start + runfor;
            let mut tasks = Vec::with_capacity(workers);
            for p in producers {
                let batch = batch.clone();
                let topic = topic.clone();
                tasks.push(tokio::spawn(async move {
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
                    Ok::<u64, String>(count)
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.map_err(|e| e.to_string())??;
            }
            Ok::<_, String>((start.elapsed(), total))
        })?;
        if let Some(r) = &recording {
            log(PREFIX, &r.summary("nsq_producer_messages_total"));
        }
        log(PREFIX, &bench_line(duration, total, size));
        Ok(())
    };
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
