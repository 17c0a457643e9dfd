//! nsq-async-std's counterpart of nsq's `bench/bench_reader` (and of nsq-tokio's
//! `bench_reader`): same flags, same final line.
//!
//! One consumer (one nsqd connection, max_in_flight = `--rdy`) per CPU, like the Go tool's one
//! connection per GOMAXPROCS; every message is finished. Timing starts when every consumer is
//! subscribed and RDY is raised, and ends after `--runfor`.
//!
//! Extra flag (not in the Go tool): `--runtime=smol|async-std` picks the executor (default
//! smol, whose tasks run on `SMOL_THREADS` threads, default 1).
//!
//! ```text
//! cargo run --release -p nsq-async-std --example bench_reader_async_std -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --channel=ch --rdy=2500 --runfor=10s
//! ```
//!
//! `--downstream-capacity=C` (not in the Go tool) models a downstream service in the handler
//! instead ([`support::downstream`]): one consumer with max_in_flight `--rdy`, run with as many
//! concurrent handlers; each waits for one of `C` permits of a FIFO semaphore, holds it for
//! `--service-time` (`async_io::Timer`, with `--collapse`), then finishes its message. Two
//! `downstream:` lines before the final one report the rate and the handling latency.
//! `--max-in-flight-mode`, `--min-in-flight` and `--consumer-option=name=value` set consumer
//! options by name (`Config::set_str`), in either mode.
//!
//! The semaphore is `tokio::sync::Semaphore`, which needs no tokio runtime (no reactor, no
//! timer: wakers only) and hands a released permit to the longest waiter. `async-lock`'s, in
//! the tree through smol, is not first come first served: a woken waiter retries
//! `try_acquire` and, if a newcomer took the permit in between, listens again at the back,
//! which would distort the tail latency this mode measures.
//!
//! ```text
//! cargo run --release -p nsq-async-std --example bench_reader_async_std -- --topic=sub_bench \
//!     --channel=ch --rdy=50 --downstream-capacity=50 --service-time=5ms --runfor=10s
//! ```

mod drivers;
use nsq_example_cli as support;

use futures_lite::future;
use nsq_async_std::{Config, Consumer};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::downstream::{
    ConsumerOption, Downstream, DownstreamArgs, apply_consumer_options, consumer_options,
    max_in_flight_mode,
};
use support::{
    BenchArgs, Flags, Usage, bench_flags, bench_line, cpus, fatal, init_logging, log, value,
};

const PREFIX: &str = "bench_reader";

const USAGE: Usage = Usage {
    name: "bench_reader_async_std",
    about: "Consumes with one consumer per CPU for a while, finishing every message; prints the rate. \
            With --downstream-capacity, one consumer whose handlers model a downstream service.",
    flags: bench_flags!(
        reader,
        downstream,
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

/// One consuming task (spawned on the runtime, awaited for its count and its consumer).
type Task = std::pin::Pin<Box<dyn Future<Output = (u64, Consumer)> + Send>>;

struct Load {
    addr: String,
    topic: String,
    channel: String,
    rdy: u32,
    runfor: Duration,
    options: Vec<ConsumerOption>,
}

/// One consumer of the load's topic and channel on its nsqd, with `config`, its driver as
/// `--drivers` says.
fn consumer(load: &Load, config: &Config) -> Result<Consumer, String> {
    drivers::consumer(
        Consumer::builder(load.topic.as_str(), load.channel.as_str())
            .config(config)
            .nsqd(load.addr.as_str()),
    )
    .build()
    .map_err(|e| e.to_string())
}

async fn bench(load: Load, spawn: fn(Task) -> Task) -> Result<(Duration, u64), String> {
    let workers = cpus();
    let mut consumers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let mut config = Config {
            max_in_flight: 0,
            ..Config::default()
        };
        apply_consumer_options(&load.options, |name, value| config.set_str(name, value))?;
        let consumer = consumer(&load, &config)?;
        consumers.push(consumer);
    }
    // Wait until every consumer is connected and subscribed (the Go tool's rdyChan).
    let ready_by = Instant::now() + Duration::from_secs(5);
    while consumers
        .iter()
        .any(|c| c.as_handle().stats().connections == 0)
    {
        if Instant::now() > ready_by {
            return Err(format!("could not subscribe on {}", load.addr));
        }
        async_io::Timer::after(Duration::from_millis(5)).await;
    }
    let start = Instant::now();
    let end = start + load.runfor;
    let tasks: Vec<Task> = consumers
        .into_iter()
        .map(|mut consumer| {
            consumer.as_handle().set_max_in_flight(load.rdy);
            spawn(Box::pin(async move {
                let mut count = 0u64;
                let mut deadline = async_io::Timer::at(end);
                loop {
                    let next = future::or(async { consumer.recv().await.map(Some) }, async {
                        (&mut deadline).await;
                        Some(None)
                    });
                    match next.await {
                        Some(Some(m)) => {
                            m.finish();
                            count += 1;
                        }
                        Some(None) | None => break,
                    }
                }
                (count, consumer)
            }))
        })
        .collect();
    let mut total = 0;
    let mut consumers = Vec::with_capacity(workers);
    for t in tasks {
        let (count, consumer) = t.await;
        total += count;
        consumers.push(consumer);
    }
    let duration = start.elapsed();
    for c in &mut consumers {
        c.stop().await;
    }
    Ok((duration, total))
}

/// The `--downstream-capacity` mode: one consumer, its handlers through the modelled
/// downstream until `--runfor` has passed. Returns the run's duration, the messages finished in
/// it and the report's lines.
async fn downstream(
    load: Load,
    model: DownstreamArgs,
) -> Result<(Duration, u64, [String; 2]), String> {
    let mut config = Config {
        max_in_flight: load.rdy,
        ..Config::default()
    };
    apply_consumer_options(&load.options, |name, value| config.set_str(name, value))?;
    // The ceiling: as many handlers as messages may be in flight.
    let max_in_flight = config.max_in_flight;
    if max_in_flight == 0 {
        return Err("-downstream-capacity needs a max_in_flight (-rdy) of at least 1".to_owned());
    }
    let consumer = consumer(&load, &config)?;
    let ready_by = Instant::now() + Duration::from_secs(5);
    while consumer.as_handle().stats().connections == 0 {
        if Instant::now() > ready_by {
            return Err(format!("could not subscribe on {}", load.addr));
        }
        async_io::Timer::after(Duration::from_millis(5)).await;
    }
    let end = Instant::now() + load.runfor;
    let model = Arc::new(Downstream::new(model, end));
    let permits = Arc::new(tokio::sync::Semaphore::new(model.args().capacity));
    let handle = consumer.handle();
    let stopper = async {
        async_io::Timer::at(end).await;
        let rdy = handle.stats().total_rdy;
        handle.stop().await;
        rdy
    };
    let handled = model.clone();
    let run = consumer.run(max_in_flight as usize, move |m| {
        let (model, permits) = (handled.clone(), permits.clone());
        async move {
            let sleep = |d| async move {
                async_io::Timer::after(d).await;
            };
            model.serve(permits.acquire(), sleep, || m.finish()).await;
            Ok(())
        }
    });
    let (_, rdy_at_end) = future::zip(run, stopper).await;
    let report = model.report(
        load.runfor,
        max_in_flight,
        &max_in_flight_mode(&load.options),
        rdy_at_end,
    );
    Ok((load.runfor, model.handled(), report))
}

fn run() -> Result<(), String> {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let args = BenchArgs::parse(&flags, Duration::from_secs(10))?;
    let size: usize = args.size;
    let load = Load {
        addr: args.addr.clone(),
        topic: args.topic.clone(),
        channel: args.channel.clone(),
        rdy: args.rdy,
        runfor: args.runfor,
        // Not Go flags: the consumer options.
        options: consumer_options(&flags)?,
    };
    let runtime = flags.string("runtime", "smol");
    drivers::apply(&flags.string("drivers", "thread"), &runtime)?;
    // Not Go flags: the modelled downstream.
    if let Some(model) = DownstreamArgs::parse(&flags)? {
        let (duration, total, report) = match runtime.as_str() {
            "async-std" => async_std::task::block_on(downstream(load, model)),
            "smol" => smol::block_on(downstream(load, model)),
            other => return Err(format!("-runtime must be async-std or smol, not {other:?}")),
        }?;
        for line in report {
            log(PREFIX, &line);
        }
        log(PREFIX, &bench_line(duration, total, size));
        return Ok(());
    }
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
