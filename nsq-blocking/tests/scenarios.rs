//! nsq-blocking against the in-process test broker: the shared adapter scenarios
//! (`nsq_test_broker::scenarios`, one `#[test]` each), plus the tests only the blocking
//! adapter has (threads, `recv_timeout`/`iter`, handler panics ...). Every test runs under a
//! timeout so nothing hangs.

use nsq_blocking::{Consumer, Producer};
use nsq_client::{Error, Message};
use nsq_proto::Config;
use nsq_proto::consumer::ConsumerConfig;
use nsq_test_broker::scenarios::{WAIT, eventually, run_within as run, start};
use nsq_test_broker::{Nsqd, adapter_scenario_tests};
use nsq_test_support::glue::fast_config;
use nsq_test_support::scenarios::BlockingClients;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

// ------------------------------------------------------------------- the shared scenarios

// nsq-blocking: every call is a plain blocking call.
adapter_scenario_tests!(BlockingClients::new);

// ------------------------------------------------------------- nsq-blocking's own tests

fn consumer(nsqd: &Nsqd, topic: &str, config: ConsumerConfig) -> Consumer {
    nsq_test_support::consumer!(Consumer, nsqd, topic, config)
}

fn producer(nsqd: &Nsqd) -> Producer {
    Producer::connect(&nsqd.tcp_address().to_string(), &Config::default()).unwrap()
}

#[test]
fn stop_waits_for_handlers_in_flight() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        nsqd.publish("slow", b"take your time");
        let c = consumer(&nsqd, "slow", fast_config(1));
        let handle = c.handle();
        let started = Arc::new(AtomicU32::new(0));
        let s = started.clone();
        let runner = std::thread::spawn(move || {
            c.run(2, move |_m: Message| {
                s.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            })
        });
        assert!(eventually(WAIT, || started.load(Ordering::SeqCst) == 1));
        let stop_called = Instant::now();
        let report = handle.stop();
        // The handler in flight finished (FIN) before the consumer stopped.
        assert!(stop_called.elapsed() >= Duration::from_millis(300));
        assert_eq!(report.unanswered, 0);
        assert_eq!(runner.join().unwrap(), report);
        // The broker counts the FIN on its own thread.
        assert!(eventually(WAIT, || {
            let ch = nsqd.channel("slow", "ch").unwrap();
            (ch.finished, ch.requeued, ch.in_flight) == (1, 0, 0)
        }));
    });
}

#[test]
fn recv_timeout_iter_and_end_of_stream() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let mut c = consumer(&nsqd, "iter", fast_config(5));
        assert!(matches!(
            c.recv_timeout(Duration::from_millis(100)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        ));
        for i in 0..3 {
            nsqd.publish("iter", format!("{i}").as_bytes());
        }
        let bodies: BTreeSet<Vec<u8>> = c
            .iter()
            .take(3)
            .map(|m| {
                let b = m.body().to_vec();
                m.finish();
                b
            })
            .collect();
        assert_eq!(bodies.len(), 3);
        let handle = c.handle();
        assert!(!handle.is_stopping());
        assert_eq!(handle.stop().unanswered, 0);
        assert!(handle.is_stopping());
        assert!(c.recv().is_none());
        assert!(matches!(
            c.recv_timeout(Duration::from_millis(10)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        ));
        assert_eq!(c.iter().count(), 0);
        assert!(matches!(
            c.as_handle()
                .connect_to_nsqd(&nsqd.tcp_address().to_string()),
            Err(Error::Closed)
        ));
    });
}

#[test]
fn producer_is_shared_across_threads_and_closed_once() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        std::thread::scope(|s| {
            for t in 0..8 {
                let p = &p;
                s.spawn(move || {
                    for i in 0..50 {
                        p.multi_publish("shared", [format!("{t}-{i}-a"), format!("{t}-{i}-b")])
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(p.stats().published, 400);
        assert_eq!(nsqd.topic("shared").map(|t| t.message_count), Some(800));
        // Every concurrent close returns once the producer is closed.
        std::thread::scope(|s| {
            for _ in 0..3 {
                let p = p.clone();
                s.spawn(move || {
                    p.close();
                    assert!(matches!(p.publish("shared", "late"), Err(Error::Closed)));
                });
            }
        });
        p.close();
    });
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<nsq_blocking::ConsumerHandle>();
    send_sync::<Message>();
    send_sync::<Error>();
    send::<Consumer>();
    send::<nsq_blocking::ConsumerBuilder>();
    send::<nsq_blocking::ProducerBuilder>();
}

#[test]
fn close_flushes_what_is_outstanding() {
    run(30, || {
        let nsqd = start(Nsqd::builder());
        let p = producer(&nsqd);
        let ok = AtomicU32::new(0);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (p, ok) = (&p, &ok);
                s.spawn(move || {
                    for i in 0..200 {
                        match p.publish("flush", format!("{t}-{i}")) {
                            Ok(()) => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Error::Closed) => break,
                            Err(e) => panic!("unexpected {e}"),
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            p.close();
        });
        // Every publish that returned Ok is on the broker, and nothing else is.
        let ok = u64::from(ok.load(Ordering::SeqCst));
        assert!(ok > 0);
        assert_eq!(nsqd.topic("flush").map(|t| t.message_count), Some(ok));
        assert_eq!(p.stats().published, ok);
    });
}
