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
//! installs a Prometheus recorder (`PrometheusBuilder`, as the guide's metrics recipe) before the
//! first consumer exists, runs its upkeep every second and renders it once at the end, printing
//! `metrics: N lines rendered (...)` before the final line: what recording costs, end to end.
//! Its histograms have the client's buckets (`HISTOGRAM_BUCKETS`); `--no-histograms` records
//! the counters and gauges only (`metrics_histograms = false`).
//!
//! ```text
//! cargo run --release -p nsq-tokio --example bench_reader -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --channel=ch --rdy=2500 --runfor=10s
//! ```
//!
//! `--downstream-capacity=C` (not in the Go tool) models a downstream service in the handler
//! instead ([`support::downstream`]): one consumer with max_in_flight `--rdy`, run with as many
//! concurrent handlers; each waits for one of `C` permits of a `tokio::sync::Semaphore` (FIFO),
//! holds it for `--service-time` (`tokio::time::sleep`, with `--collapse`), then finishes its
//! message. Two `downstream:` lines before the final one report the rate and the handling
//! latency. `--max-in-flight-mode`, `--min-in-flight` and `--consumer-option=name=value` set
//! consumer options by name (`Config::set_str`), in either mode.
//!
//! ```text
//! cargo run --release -p nsq-tokio --example bench_reader -- --topic=sub_bench --channel=ch \
//!     --rdy=50 --downstream-capacity=50 --service-time=5ms --runfor=10s
//! ```

mod support;

use nsq_tokio::{Config, Consumer};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::downstream::{
    ConsumerOption, Downstream, DownstreamArgs, apply_consumer_options, consumer_options,
    max_in_flight_mode,
};
use support::{
    BenchArgs, Flags, METRICS_FLAG, NO_HISTOGRAMS_FLAG, Usage, bench_flags, bench_line, cpus,
    fatal, init_logging, log, value,
};

const PREFIX: &str = "bench_reader";

const USAGE: Usage = Usage {
    name: "bench_reader",
    about: "Consumes with one consumer per CPU for a while, finishing every message; prints the rate. \
            With --downstream-capacity, one consumer whose handlers model a downstream service.",
    flags: bench_flags!(
        reader,
        downstream,
        value(
            "runtime",
            "current|multi",
            "tokio scheduler, not a Go flag (default: current)",
        ),
        METRICS_FLAG,
        NO_HISTOGRAMS_FLAG
    ),
};

/// The `--downstream-capacity` mode: one consumer, its handlers through the modelled
/// downstream until `--runfor` has passed. Returns the run's duration, the messages finished in
/// it and the report's lines.
async fn downstream(
    args: &BenchArgs,
    model: DownstreamArgs,
    options: &[ConsumerOption],
    no_histograms: bool,
) -> Result<(Duration, u64, [String; 2]), String> {
    let mut config = Config {
        max_in_flight: args.rdy,
        metrics_histograms: !no_histograms,
        ..Config::default()
    };
    apply_consumer_options(options, |name, value| config.set_str(name, value))?;
    // The ceiling: as many handlers as messages may be in flight.
    let max_in_flight = config.max_in_flight;
    if max_in_flight == 0 {
        return Err("-downstream-capacity needs a max_in_flight (-rdy) of at least 1".to_owned());
    }
    let consumer = Consumer::builder(args.topic.as_str(), args.channel.as_str())
        .config(&config)
        .nsqd(args.addr.as_str())
        .build()
        .map_err(|e| e.to_string())?;
    let ready_by = Instant::now() + Duration::from_secs(5);
    while consumer.as_handle().stats().connections == 0 {
        if Instant::now() > ready_by {
            return Err(format!("could not subscribe on {}", args.addr));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let end = Instant::now() + args.runfor;
    let model = Arc::new(Downstream::new(model, end));
    let permits = Arc::new(tokio::sync::Semaphore::new(model.args().capacity));
    let handle = consumer.handle();
    let stopper = async {
        tokio::time::sleep_until(end.into()).await;
        let rdy = handle.stats().total_rdy;
        handle.stop().await;
        rdy
    };
    let handled = model.clone();
    let run = consumer.run(max_in_flight as usize, move |m| {
        let (model, permits) = (handled.clone(), permits.clone());
        async move {
            model
                .serve(permits.acquire(), tokio::time::sleep, || m.finish())
                .await;
            Ok(())
        }
    });
    let (_, rdy_at_end) = tokio::join!(run, stopper);
    let report = model.report(
        args.runfor,
        max_in_flight,
        &max_in_flight_mode(options),
        rdy_at_end,
    );
    Ok((args.runfor, model.handled(), report))
}

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
        // Not Go flags: the modelled downstream, the consumer options.
        let model = DownstreamArgs::parse(&flags)?;
        let options = consumer_options(&flags)?;
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
        if let Some(model) = model {
            let (duration, total, report) =
                rt.block_on(downstream(&args, model, &options, no_histograms))?;
            if let Some(r) = &recording {
                log(PREFIX, &r.summary("nsq_consumer_messages_received_total"));
            }
            for line in report {
                log(PREFIX, &line);
            }
            log(PREFIX, &bench_line(duration, total, size));
            return Ok(());
        }
        let (duration, total) = rt.block_on(async {
            let mut consumers = Vec::with_capacity(workers);
            for _ in 0..workers {
                let mut config = Config {
                    max_in_flight: 0,
                    metrics_histograms: !no_histograms,
                    ..Config::default()
                };
                apply_consumer_options(&options, |name, value| config.set_str(name, value))?;
                let consumer = Consumer::builder(topic.as_str(), channel.as_str())
                    .config(&config)
                    .nsqd(addr.as_str())
                    .build()
                    .map_err(|e| e.to_string())?;
                consumers.push(consumer);
            }
            // Wait until every consumer is connected and subscribed (the Go tool's rdyChan).
            let ready_by = Instant::now() + Duration::from_secs(5);
            while consumers
                .iter()
                .any(|c| c.as_handle().stats().connections == 0)
            {
                if Instant::now() > ready_by {
                    return Err(format!("could not subscribe on {addr}"));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let start = Instant::now();
            let end_at = tokio::time::Instant::from_std(start + runfor);
            let mut tasks = Vec::with_capacity(workers);
            for mut consumer in consumers {
                consumer.as_handle().set_max_in_flight(rdy);
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
