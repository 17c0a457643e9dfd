//! Measures the low-RDY rotation on a real cluster: one consumer with fewer `max_in_flight`
//! than nsqd, handlers of a fixed duration, until `--messages` are finished.
//!
//! It prints when each nsqd's first message reached a handler (median and last, and how
//! many within 10 s), the most handlers that ran at once and the most messages the
//! application held (handed out and not answered, counted by the handlers themselves and by
//! `stats()` polled every millisecond), the messages nsqd sent beyond the in-flight bound
//! (`stats().returned`), and, from every nsqd's `/stats` (polled every `--stats-interval`
//! through the lookupds, all nsqd at once), how many samples had a sum of RDY or of messages
//! in flight above `max_in_flight`.
//!
//! ```text
//! cargo run --release -p nsq-tokio --example rotation -- \
//!     --lookupd-http-address=127.0.0.1:4161 --topic=rot --channel=rot \
//!     --max-in-flight=4 --handlers=4 --handler-time=20ms --messages=8000
//! ```
#![allow(
    clippy::print_stdout,
    reason = "a measurement tool that prints its figures"
)]

mod support;

use nsq_tokio::{Channel, Cluster, Config, Consumer, HttpConfig, Topic};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use support::{Flags, Usage, apply_opts, fatal, init_logging, value};

const USAGE: Usage = Usage {
    name: "rotation",
    about: "Consumes with fewer max_in_flight than nsqd and reports how the rotation served them.",
    flags: &[
        value(
            "lookupd-http-address",
            "ADDR",
            "nsqlookupd HTTP address (may be given multiple times)",
        ),
        value("topic", "TOPIC", "topic (default: rot)"),
        value("channel", "CHANNEL", "channel (default: rot)"),
        value("max-in-flight", "N", "max_in_flight (default: 4)"),
        value(
            "handlers",
            "N",
            "handlers running at most at once, run(N, ..) (default: 4)",
        ),
        value(
            "handler-time",
            "DURATION",
            "how long each handler sleeps (default: 20ms)",
        ),
        value(
            "messages",
            "N",
            "stop after this many are finished (default: 8000)",
        ),
        value(
            "stats-interval",
            "DURATION",
            "how often every nsqd's /stats is polled (default: 200ms; 0 = never)",
        ),
        value(
            "consumer-opt",
            "NAME,VALUE",
            "option to pass through to the consumer (may be given multiple times)",
        ),
    ],
};

/// What the handlers and the pollers saw.
#[derive(Default)]
struct Seen {
    /// When each nsqd's first message reached a handler, after the start.
    first: Mutex<BTreeMap<String, Duration>>,
    running: AtomicUsize,
    most_running: AtomicUsize,
    finished: AtomicU64,
    most_in_flight: AtomicUsize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    if let Err(e) = run(&flags).await {
        fatal("rotation", &e);
    }
}

async fn run(flags: &Flags) -> Result<(), String> {
    let lookupd = flags.all("lookupd-http-address");
    if lookupd.is_empty() {
        return Err("--lookupd-http-address required".to_owned());
    }
    let topic = flags.string("topic", "rot");
    let channel = flags.string("channel", "rot");
    let max_in_flight: u32 = flags.number("max-in-flight", 4)?;
    let handlers: usize = flags.number("handlers", 4)?;
    let handler_time = flags.duration("handler-time", Duration::from_millis(20))?;
    let messages: u64 = flags.number("messages", 8000)?;
    let interval = flags.duration("stats-interval", Duration::from_millis(200))?;
    let mut config = Config {
        max_in_flight,
        ..Config::default()
    };
    apply_opts(&mut config, &flags.all("consumer-opt"))?;
    let consumer = Consumer::builder(topic.as_str(), channel.as_str())
        .config(&config)
        .lookupds(lookupd.iter().map(String::as_str))
        .build()
        .map_err(|e| e.to_string())?;
    let handle = consumer.handle();
    let seen = Arc::new(Seen::default());
    let started = Instant::now();

    // The consumer's own count of what it handed out and has not had answered.
    let poll = {
        let (seen, handle) = (seen.clone(), handle.clone());
        tokio::spawn(async move {
            loop {
                let n = handle.stats().in_flight;
                seen.most_in_flight.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    // nsqd's view: the sums of RDY and in flight over every nsqd's clients of the channel.
    let samples = Arc::new(Mutex::new(Vec::<(i64, i64)>::new()));
    let servers = if interval.is_zero() {
        None
    } else {
        let cluster =
            Cluster::with_config(&lookupd, HttpConfig::new()).map_err(|e| e.to_string())?;
        let (t, c) = (
            Topic::new(&topic).map_err(|e| e.to_string())?,
            Channel::new(&channel).map_err(|e| e.to_string())?,
        );
        let samples = samples.clone();
        Some(tokio::spawn(async move {
            loop {
                let report = cluster.channel_stats(&t, &c).await;
                let (mut rdy, mut in_flight) = (0, 0);
                for (_, ch) in &report.value.nodes {
                    in_flight += ch.in_flight_count;
                    rdy += ch.clients.iter().map(|c| c.ready_count).sum::<i64>();
                }
                samples
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((rdy, in_flight));
                tokio::time::sleep(interval).await;
            }
        }))
    };

    let report = {
        let (seen, handle) = (seen.clone(), handle.clone());
        consumer
            .run(handlers, move |m| {
                let (seen, handle) = (seen.clone(), handle.clone());
                async move {
                    seen.first
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(m.nsqd_address().to_owned())
                        .or_insert_with(|| started.elapsed());
                    let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.most_running.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(handler_time).await;
                    seen.running.fetch_sub(1, Ordering::SeqCst);
                    if seen.finished.fetch_add(1, Ordering::SeqCst) + 1 == messages {
                        tokio::spawn(async move { handle.stop().await });
                    }
                    Ok::<(), nsq_tokio::HandlerError>(())
                }
            })
            .await
    };
    let elapsed = started.elapsed();
    poll.abort();
    if let Some(s) = servers {
        s.abort();
    }
    let stats = handle.stats();
    let first = seen
        .first
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut times: Vec<Duration> = first.values().copied().collect();
    times.sort_unstable();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    let last = times.last().copied().unwrap_or_default();
    let within = times
        .iter()
        .filter(|t| **t <= Duration::from_secs(10))
        .count();
    let samples = samples.lock().unwrap_or_else(PoisonError::into_inner);
    let limit = i64::from(max_in_flight);
    let rdy_over = samples.iter().filter(|s| s.0 > limit).count();
    let in_flight_over: Vec<i64> = samples
        .iter()
        .filter(|s| s.1 > limit)
        .map(|s| s.1)
        .collect();
    println!(
        "nsqd served: {} (median first {:.1} s, last {:.1} s, {} within 10 s); handlers at once \
         at most {}, in flight (stats) at most {}; returned {} of {} received; nsqd samples {}: \
         RDY sum > {limit} in {}, in-flight sum > {limit} in {} (max {}); {} finished in {:.1} s; \
         unanswered at stop {}",
        first.len(),
        median.as_secs_f64(),
        last.as_secs_f64(),
        within,
        seen.most_running.load(Ordering::SeqCst),
        seen.most_in_flight.load(Ordering::SeqCst),
        stats.returned,
        stats.received,
        samples.len(),
        rdy_over,
        in_flight_over.len(),
        in_flight_over.iter().max().copied().unwrap_or(0),
        seen.finished.load(Ordering::SeqCst),
        elapsed.as_secs_f64(),
        report.unanswered,
    );
    Ok(())
}
