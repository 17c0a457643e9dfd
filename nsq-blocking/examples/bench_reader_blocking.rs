//! nsq-blocking's counterpart of nsq's `bench/bench_reader` (and of nsq-tokio's
//! `bench_reader`): same flags, same final line.
//!
//! One consumer (one nsqd connection, max_in_flight = `--rdy`) per CPU, each read by its own
//! thread, like the Go tool's one connection per GOMAXPROCS; every message is finished.
//! Timing starts when every consumer is subscribed and RDY is raised, and ends after
//! `--runfor`.
//!
//! ```text
//! cargo run --release -p nsq-blocking --example bench_reader_blocking -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --channel=ch --rdy=2500 --runfor=10s
//! ```
//!
//! `--downstream-capacity=C` (not in the Go tool) models a downstream service in the handler
//! instead ([`support::downstream`]): one consumer with max_in_flight `--rdy`, run on a pool of
//! as many threads (`Consumer::run`); each handler waits for one of `C` permits of a FIFO
//! semaphore ([`support::downstream::FifoSemaphore`]), holds it for `--service-time`
//! (`std::thread::sleep`, with `--collapse`), then finishes its message. Two `downstream:`
//! lines before the final one report the rate and the handling latency.
//! `--max-in-flight-mode`, `--min-in-flight` and `--consumer-option=name=value` set consumer
//! options by name (`Config::set_str`), in either mode.
//!
//! ```text
//! cargo run --release -p nsq-blocking --example bench_reader_blocking -- --topic=sub_bench \
//!     --channel=ch --rdy=50 --downstream-capacity=50 --service-time=5ms --runfor=10s
//! ```

use nsq_example_cli as support;

use nsq_blocking::{Config, Consumer};
use std::time::{Duration, Instant};
use support::downstream::{
    ConsumerOption, Downstream, DownstreamArgs, FifoSemaphore, apply_consumer_options,
    consumer_options, max_in_flight_mode,
};
use support::{BenchArgs, Flags, Usage, bench_flags, bench_line, cpus, fatal, init_logging, log};

const PREFIX: &str = "bench_reader";

const USAGE: Usage = Usage {
    name: "bench_reader_blocking",
    about: "Consumes with one consumer per CPU for a while, finishing every message; prints the rate. \
            With --downstream-capacity, one consumer whose handlers model a downstream service.",
    flags: bench_flags!(reader, downstream),
};

/// The `--downstream-capacity` mode: one consumer, its handlers through the modelled
/// downstream until `--runfor` has passed. Returns the run's duration, the messages finished in
/// it and the report's lines.
fn downstream(
    args: &BenchArgs,
    model: DownstreamArgs,
    options: &[ConsumerOption],
) -> Result<(Duration, u64, [String; 2]), String> {
    let mut config = Config {
        max_in_flight: args.rdy,
        ..Config::default()
    };
    apply_consumer_options(options, |name, value| config.set_str(name, value))?;
    // The ceiling: as many handler threads as messages may be in flight.
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
        std::thread::sleep(Duration::from_millis(5));
    }
    let end = Instant::now() + args.runfor;
    let model = Downstream::new(model, end);
    let permits = FifoSemaphore::new(model.args().capacity);
    // At `end`, a timer thread stops the consumer: `run` then returns once its handlers have.
    let handle = consumer.handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let rdy = handle.stats().total_rdy;
        handle.stop();
        rdy
    });
    consumer.run(max_in_flight as usize, |m| {
        model.serve_blocking(&permits, || m.finish());
        Ok(())
    });
    let rdy_at_end = stopper.join().map_err(|_| "the timer thread panicked")?;
    let report = model.report(
        args.runfor,
        max_in_flight,
        &max_in_flight_mode(options),
        rdy_at_end,
    );
    Ok((args.runfor, model.handled(), report))
}

fn run() -> Result<(), String> {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let args = BenchArgs::parse(&flags, Duration::from_secs(10))?;
    // Not Go flags: the consumer options, the modelled downstream.
    let options = consumer_options(&flags)?;
    if let Some(model) = DownstreamArgs::parse(&flags)? {
        let (duration, total, report) = downstream(&args, model, &options)?;
        for line in report {
            log(PREFIX, &line);
        }
        log(PREFIX, &bench_line(duration, total, args.size));
        return Ok(());
    }
    let runfor = args.runfor;
    let addr = args.addr.clone();
    let size: usize = args.size;
    let topic = args.topic.clone();
    let channel = args.channel.clone();
    let rdy: u32 = args.rdy;
    let workers = cpus();
    let mut consumers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let mut config = Config {
            max_in_flight: 0,
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
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    let end = start + runfor;
    // At `end`, a timer thread stops every consumer: each reader's `recv` then ends, so the
    // loop reads no clock per message.
    let handles: Vec<_> = consumers.iter().map(Consumer::handle).collect();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let duration = start.elapsed();
        for h in &handles {
            h.stop();
        }
        duration
    });
    let threads: Vec<_> = consumers
        .into_iter()
        .map(|mut consumer| {
            consumer.as_handle().set_max_in_flight(rdy);
            std::thread::spawn(move || {
                let mut count = 0u64;
                while let Some(m) = consumer.recv() {
                    m.finish();
                    count += 1;
                }
                (count, consumer)
            })
        })
        .collect();
    let mut total = 0;
    let mut consumers = Vec::with_capacity(workers);
    for t in threads {
        let (count, consumer) = t.join().map_err(|_| "a consuming thread panicked")?;
        total += count;
        consumers.push(consumer);
    }
    let duration = timer.join().map_err(|_| "the timer thread panicked")?;
    for c in &mut consumers {
        c.stop();
    }
    log(PREFIX, &bench_line(duration, total, size));
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
