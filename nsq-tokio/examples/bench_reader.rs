//! nsq-tokio's counterpart of nsq's `bench/bench_reader`: same flags, same final line.
//!
//! One consumer (one nsqd connection, max_in_flight = `--rdy`) per CPU, like the Go tool's one
//! connection per GOMAXPROCS; every message is finished. Timing starts when every consumer is
//! subscribed and RDY is raised, and ends after `--runfor`.
//!
//! Extra flag (not in the Go tool): `--runtime=current|multi` picks tokio's scheduler
//! (default `current`: every task on one thread, which leaves the other cores to nsqd and
//! avoids cross-core reference-count traffic; `multi`: one worker thread per CPU).
//!
//! `--metrics` (not in the Go tool; needs nsq-tokio's `metrics` feature, refused otherwise)
//! installs a Prometheus recorder (`PrometheusBuilder`, as the README's recipe) before the
//! first consumer exists, runs its upkeep every second and renders it once at the end, printing
//! `metrics: N lines rendered (...)` before the final line: what recording costs, end to end.
//! Its histograms have the client's buckets (`HISTOGRAM_BUCKETS`); `--no-histograms` records
//! the counters and gauges only (`metrics_histograms = false`).
//!
//! ```text
//! cargo run --release -p nsq-tokio --example bench_reader -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --channel=ch --rdy=2500 --runfor=10s
//! ```

mod support;

use nsq_tokio::{Config, Consumer};
use std::time::{Duration, Instant};
use support::{
    BenchArgs, Flags, METRICS_FLAG, NO_HISTOGRAMS_FLAG, Usage, bench_flags, bench_line, cpus,
    fatal, init_logging, log, value,
};

const PREFIX: &str = "bench_reader";

const USAGE: Usage = Usage {
    name: "bench_reader",
    about: "Consumes with one consumer per CPU for a while, finishing every message; prints the rate.",
    flags: bench_flags!(
        reader,
        value(
            "runtime",
            "current|multi",
            "tokio scheduler, not a Go flag (default: current)",
        ),
        METRICS_FLAG,
        NO_HISTOGRAMS_FLAG
    ),
};

fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let run = || -> Result<(), String> {
        let args = BenchArgs::parse(&flags, Duration::from_secs(10))?;
        let runfor = args.runfor;
        let addr = args.addr.clone();
        let size: usize = args.size;
        let topic = args.topic.clone();
        let channel = args.channel.clone();
        let rdy: u32 = args.rdy;
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
        let no_histograms = flags.boolean("no-histograms")?;
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
            let mut consumers = Vec::with_capacity(workers);
            for _ in 0..workers {
                let consumer = Consumer::builder(topic.as_str(), channel.as_str())
                    .config(&Config {
                        max_in_flight: 0,
                        metrics_histograms: !no_histograms,
                        ..Config::default()
                    })
                    .nsqd(addr.as_str())
                    .build()
                    .map_err(|e| e.to_string())?;
                consumers.push(consumer);
            }
            // Wait until every consumer is connected and subscribed (the Go tool's rdyChan).
            let ready_by = Instant::now() + Duration::from_secs(5);
            while consumers.iter().any(|c| c.stats().connections == 0) {
                if Instant::now() > ready_by {
                    return Err(format!("could not subscribe on {addr}"));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let start = Instant::now();
            let end_at = tokio::time::Instant::from_std(start + runfor);
            let mut tasks = Vec::with_capacity(workers);
            for mut consumer in consumers {
                consumer.set_max_in_flight(rdy);
                tasks.push(tokio::spawn(async move {
                    let mut count = 0u64;
                    let deadline = tokio::time::sleep_until(end_at);
                    tokio::pin!(deadline);
                    loop {
                        tokio::select! {
                            biased;
                            m = consumer.recv() => match m {
                                Some(m) => {
                                    m.finish();
                                    count += 1;
                                }
                                None => break,
                            },
                            () = &mut deadline => break,
                        }
                    }
                    (count, consumer)
                }));
            }
            let mut total = 0;
            let mut consumers = Vec::with_capacity(workers);
            for t in tasks {
                let (count, consumer) = t.await.map_err(|e| e.to_string())?;
                total += count;
                consumers.push(consumer);
            }
            let duration = start.elapsed();
            for c in &mut consumers {
                c.stop().await;
            }
            Ok::<_, String>((duration, total))
        })?;
        if let Some(r) = &recording {
            log(PREFIX, &r.summary("nsq_consumer_messages_received_total"));
        }
        log(PREFIX, &bench_line(duration, total, size));
        Ok(())
    };
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
