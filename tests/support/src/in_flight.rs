//! max_in_flight bounds what the application holds, at 40 busy brokers, written once for
//! every adapter: with max_in_flight 4 and every broker's topic stocked, messages taken with
//! `recv` (the call the `Stream` and the iterator make) and held 20 ms each, and messages
//! handed to `run(8, ..)` whose handlers take 20 ms, are never more than 4 at once, counted
//! by the application itself, until every broker has been served (the low-RDY rotation
//! serves 40 brokers in turns of RDY 1 over 4 seats).
//!
//! Each count is taken down just before its message is answered, so an answer cannot let
//! the next message in before the count has fallen: a peak above 4 is a message the consumer
//! handed out beyond max_in_flight.

use crate::exec::{Exec, Join, timeout};
use nsq_client::{self as client, Message, StopReport};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

/// Brokers, each with its own stock of messages.
pub const BROKERS: usize = 40;

/// The bound under test.
const MAX_IN_FLIGHT: u32 = 4;

/// How long the application holds each message (or a handler takes).
const HOLD: Duration = Duration::from_millis(20);

/// `run`'s concurrency: more than max_in_flight, so that only the consumer bounds it.
const HANDLERS: usize = 8;

/// Messages per broker and topic: more than a run until every broker is served takes
/// (about 1,500 of 20 ms over 4 seats, at most).
const STOCK: usize = 80;

/// How long a run may take to serve every broker (the rotation's goal is 10 s; this is
/// generous for a busy machine).
const WITHIN: Duration = Duration::from_secs(90);

/// The 40 brokers, with `STOCK` messages in each of the topics `{name}_recv` and `{name}_run`.
pub fn brokers(name: &str) -> Vec<Nsqd> {
    (0..BROKERS)
        .map(|_| {
            let nsqd = Nsqd::start().expect("a test broker");
            for topic in [format!("{name}_recv"), format!("{name}_run")] {
                for i in 0..STOCK {
                    nsqd.publish(&topic, format!("m{i}").as_bytes());
                }
            }
            nsqd
        })
        .collect()
}

fn config() -> Config {
    Config {
        max_in_flight: MAX_IN_FLIGHT,
        ..Config::default()
    }
}

/// The application's count of messages it holds, and its peak.
#[derive(Default)]
struct Held {
    now: AtomicUsize,
    peak: AtomicUsize,
    served: Mutex<BTreeSet<String>>,
}

impl Held {
    /// A message from `nsqd` is handed to the application; true once every broker has
    /// served one.
    fn take(&self, nsqd: &str) -> bool {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let mut served = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        served.insert(nsqd.to_owned());
        served.len() == BROKERS
    }

    /// A message is about to be answered.
    fn release(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn served(&self) -> usize {
        self.served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn check(&self, how: &str, report: StopReport) {
        let peak = self.peak.load(Ordering::SeqCst);
        assert!(
            peak <= MAX_IN_FLIGHT as usize,
            "{how}: the application held {peak} messages at once (max_in_flight {MAX_IN_FLIGHT})"
        );
        assert_eq!(self.served(), BROKERS, "{how}: every broker served");
        assert_eq!(report.unanswered, 0, "{how}");
    }
}

fn addrs(brokers: &[Nsqd]) -> Vec<String> {
    brokers
        .iter()
        .map(|n| n.tcp_address().to_string())
        .collect()
}

/// The async API on runtime `R`, awaited inside `exec`: `recv` (what the `Stream` polls),
/// then `run`.
pub fn async_consumer_holds_at_most_max_in_flight<E: Exec>(exec: &E, brokers: &[Nsqd], name: &str) {
    let build = |topic: String| {
        exec.enter(|| {
            client::Consumer::builder(topic.as_str(), "ch")
                .config(&config())
                .nsqds(addrs(brokers))
                .build()
                .expect("a consumer")
        })
    };

    // recv: each message held 20 ms by a task of its own.
    let mut consumer = build(format!("{name}_recv"));
    let held = Arc::new(Held::default());
    let report = exec.block_on(async {
        let end = Instant::now() + WITHIN;
        let mut holders: Vec<Join<()>> = Vec::new();
        while Instant::now() < end {
            let Some(Some(m)) = timeout(exec, Duration::from_secs(1), consumer.recv()).await else {
                continue;
            };
            let all = held.take(m.nsqd_address());
            let (held, sleep) = (held.clone(), exec.sleep(HOLD));
            holders.push(exec.spawn(async move {
                sleep.await;
                held.release();
                m.finish();
            }));
            if all {
                break;
            }
        }
        for h in holders {
            h.await;
        }
        consumer.stop().await
    });
    held.check("recv", report);

    // run: handlers of 20 ms, more of them than max_in_flight.
    let consumer = build(format!("{name}_run"));
    let handle = consumer.handle();
    let held = Arc::new(Held::default());
    let in_handlers = held.clone();
    let e = exec.clone();
    let report = exec.block_on(async {
        let run = consumer.run(HANDLERS, move |m: Message| {
            let (held, handle, sleep) = (in_handlers.clone(), handle.clone(), e.sleep(HOLD));
            async move {
                let all = held.take(m.nsqd_address());
                sleep.await;
                held.release();
                if all {
                    handle.stop().await;
                }
                Ok(())
            }
        });
        timeout(exec, WITHIN, run)
            .await
            .expect("run returned in time")
    });
    held.check("run", report);
}

/// The blocking API on runtime `R`: `recv_timeout` (what the iterator calls) with a pool of
/// threads holding the messages, then `run`.
pub fn blocking_consumer_holds_at_most_max_in_flight(brokers: &[Nsqd], name: &str) {
    let build = |topic: String| {
        client::blocking::Consumer::builder(topic.as_str(), "ch")
            .config(&config())
            .nsqds(addrs(brokers))
            .build()
            .expect("a consumer")
    };

    // recv: the messages go to a pool of threads that hold each 20 ms.
    let mut consumer = build(format!("{name}_recv"));
    let held = Arc::new(Held::default());
    let (tx, rx) = mpsc::channel::<Message>();
    let rx = Arc::new(Mutex::new(rx));
    let pool: Vec<_> = (0..HANDLERS)
        .map(|_| {
            let (rx, held) = (rx.clone(), held.clone());
            std::thread::spawn(move || {
                loop {
                    let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(m) = next else { return };
                    std::thread::sleep(HOLD);
                    held.release();
                    m.finish();
                }
            })
        })
        .collect();
    let end = Instant::now() + WITHIN;
    while Instant::now() < end {
        let Ok(m) = consumer.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let all = held.take(m.nsqd_address());
        tx.send(m).expect("the pool");
        if all {
            break;
        }
    }
    drop(tx);
    for t in pool {
        t.join().expect("a pool thread");
    }
    let report = consumer.stop();
    held.check("recv", report);

    // run: handlers of 20 ms, more of them than max_in_flight.
    let consumer = build(format!("{name}_run"));
    let handle = consumer.handle();
    let held = Arc::new(Held::default());
    let in_handlers = held.clone();
    let report = consumer.run(HANDLERS, move |m: Message| {
        let all = in_handlers.take(m.nsqd_address());
        std::thread::sleep(HOLD);
        in_handlers.release();
        if all {
            let _ = handle.stop();
        }
        Ok(())
    });
    held.check("run", report);
}
