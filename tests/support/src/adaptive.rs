//! The adaptive in-flight limit (`max_in_flight_mode = adaptive`) through each adapter's
//! `run`, written once: set by its go-style option name, it starts at the floor and moves
//! with the handlers' latencies, within the ceiling, and every message is handled once.
//! (How well it finds a downstream's capacity is the simulator's to measure: SIMULATION.md.)

use crate::exec::{Exec, timeout};
use nsq_client::{self as client, Message};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use nsq_test_broker::scenarios::{WAIT, eventually};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Messages published per test.
const MESSAGES: u64 = 600;

/// The ceiling.
const CEILING: u32 = 32;

/// What a handler takes (on the thread it runs on: a blocking handler on purpose, so the run
/// lasts several of the limit's windows on every runtime).
const HANDLER: Duration = Duration::from_millis(1);

fn config() -> Config {
    let mut config = Config::default();
    config
        .set_str("max_in_flight", &CEILING.to_string())
        .unwrap();
    config.set_str("max_in_flight_mode", "adaptive").unwrap();
    config.set_str("min_in_flight", "1").unwrap();
    config
}

fn publish(nsqd: &Nsqd, topic: &str) {
    for i in 0..MESSAGES {
        nsqd.publish(topic, format!("m{i}").as_bytes());
    }
}

/// What the handlers saw: messages, and the lowest and highest limit in force.
#[derive(Default)]
struct Seen {
    handled: AtomicU64,
    lowest: AtomicU32,
    highest: AtomicU32,
}

impl Seen {
    fn new() -> Arc<Seen> {
        Arc::new(Seen {
            lowest: AtomicU32::new(u32::MAX),
            ..Seen::default()
        })
    }

    /// Counts a message; true for the last one.
    fn saw(&self, limit: u32) -> bool {
        self.lowest.fetch_min(limit, Ordering::Relaxed);
        self.highest.fetch_max(limit, Ordering::Relaxed);
        self.handled.fetch_add(1, Ordering::Relaxed) + 1 == MESSAGES
    }

    fn check(&self, nsqd: &Nsqd, topic: &str) {
        let (lo, hi) = (
            self.lowest.load(Ordering::Relaxed),
            self.highest.load(Ordering::Relaxed),
        );
        assert_eq!(self.handled.load(Ordering::Relaxed), MESSAGES);
        assert_eq!(lo, 1, "the limit starts at the floor");
        assert!(
            hi > 1 && hi <= CEILING,
            "the limit moved within the ceiling: {hi}"
        );
        let done = || {
            nsqd.channel(topic, "ch")
                .is_some_and(|c| c.finished == MESSAGES && c.requeued == 0 && c.in_flight == 0)
        };
        assert!(eventually(WAIT, done), "{:?}", nsqd.channel(topic, "ch"));
    }
}

/// The async API on runtime `R`, awaited inside `exec`.
pub fn async_consumer_adapts_its_limit<E: Exec>(exec: &E, nsqd: &Nsqd) {
    let topic = format!("adaptive_{}", exec.name().replace(['-', ' '], "_"));
    publish(nsqd, &topic);
    let addr = nsqd.tcp_address().to_string();
    let consumer = exec.enter(|| {
        client::Consumer::builder(topic.as_str(), "ch")
            .config(&config())
            .nsqd(addr.as_str())
            .build()
            .expect("a consumer")
    });
    let handle = consumer.handle();
    let seen = Seen::new();
    let counted = seen.clone();
    let report = exec.block_on(async {
        let run = consumer.run(CEILING as usize, move |_: Message| {
            let (handle, seen) = (handle.clone(), counted.clone());
            async move {
                // Long enough that the run spans several of the limit's windows (50 ms).
                std::thread::sleep(HANDLER);
                if seen.saw(handle.stats().in_flight_limit) {
                    handle.stop().await;
                }
                Ok(())
            }
        });
        timeout(exec, WAIT * 4, run).await
    });
    let report = report.expect("run returned");
    assert_eq!(report.unanswered, 0);
    seen.check(nsqd, &topic);
}

/// The blocking API on runtime `R`.
pub fn blocking_consumer_adapts_its_limit(nsqd: &Nsqd) {
    let topic = "adaptive_blocking";
    publish(nsqd, topic);
    let consumer = client::blocking::Consumer::builder(topic, "ch")
        .config(&config())
        .nsqd(nsqd.tcp_address().to_string())
        .build()
        .expect("a consumer");
    let handle = consumer.handle();
    let seen = Seen::new();
    let counted = seen.clone();
    let report = consumer.run(CEILING as usize, move |_: Message| {
        std::thread::sleep(HANDLER);
        if counted.saw(handle.stats().in_flight_limit) {
            let _ = handle.stop();
        }
        Ok(())
    });
    assert_eq!(report.unanswered, 0);
    seen.check(nsqd, topic);
}
