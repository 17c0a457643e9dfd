//! nsq-blocking against the in-process test broker: the shared adapter scenarios
//! (`nsq_test_broker::scenarios`, one `#[test]` each), plus the tests only the blocking
//! adapter has (threads, `recv_timeout`/`iter`, handler panics ...). Every test runs under a
//! timeout so nothing hangs.

use nsq_blocking::{
    Config, Consumer, ConsumerConfig, ConsumerHandle, Error, Message, Producer, Topic,
};
use nsq_test_broker::scenarios::{self as s, WAIT, eventually, run_within as run, start};
use nsq_test_broker::{Nsqd, adapter_scenario_tests};
use nsq_test_support::glue::{self, fast_config, map};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ------------------------------------------------------------------- the shared scenarios

/// nsq-blocking: every call is a plain blocking call.
struct Blocking;

adapter_scenario_tests!(|| Blocking);

struct BlockingProducer(Producer);

struct BlockingConsumer(Consumer);

struct BlockingHandle(ConsumerHandle);

struct BlockingRunner(JoinHandle<nsq_blocking::StopReport>);

impl s::Factory for Blocking {
    fn producer_connect(
        &self,
        addr: &str,
        config: &s::GoConfig,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let config = glue::go_config(config)?;
        Ok(Box::new(BlockingProducer(map(Producer::connect(
            addr, &config,
        ))?)))
    }

    fn producer(
        &self,
        nsqd: &[String],
        options: Option<&s::ProducerOptions>,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let b = glue::producer_builder(Producer::builder(), nsqd, options);
        Ok(Box::new(BlockingProducer(map(b.build())?)))
    }

    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(Consumer::builder(topic, channel), setup)?;
        let c = map(b.build())?;
        Ok(Box::new(BlockingConsumer(c)))
    }

    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(Consumer::builder(topic, channel), setup)?;
        Ok(Box::new(BlockingConsumer(map(b.connect())?)))
    }

    fn check_option(&self, option: &str, value: &str) -> s::ClientResult<()> {
        glue::check_option(option, value)
    }
}

impl s::Producer for BlockingProducer {
    fn publish(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        map(self.0.publish(topic, body.to_vec()))
    }
    fn publish_typed(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        let typed = Topic::new(topic).map_err(|reason| Error::InvalidTopic {
            name: topic.to_owned(),
            reason,
        });
        let topic = map(typed)?;
        map(self.0.publish(&topic, body.to_vec()))
    }
    fn multi_publish(&self, topic: &str, bodies: Vec<Vec<u8>>) -> s::ClientResult<()> {
        map(self.0.multi_publish(topic, bodies))
    }
    fn deferred_publish(&self, topic: &str, delay: Duration, body: &[u8]) -> s::ClientResult<()> {
        map(self.0.deferred_publish(topic, delay, body.to_vec()))
    }
    fn ping(&self) -> s::ClientResult<()> {
        map(self.0.ping())
    }
    fn stats(&self) -> s::ProducerStats {
        glue::producer_stats(&self.0.stats())
    }
    fn publish_concurrently(&self, load: &s::ConcurrentPublishes) -> s::ClientResult<()> {
        let threads: Vec<_> = (0..load.tasks)
            .map(|t| {
                let (p, load) = (self.0.clone(), load.clone());
                std::thread::spawn(move || {
                    for i in 0..load.per_task {
                        p.publish(load.topic.as_str(), (load.body)(t, i))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            map(t.join().expect("a publishing thread"))?;
        }
        Ok(())
    }
    fn publish_async_window(
        &self,
        topic: &str,
        bodies: Vec<Vec<u8>>,
        window: usize,
        drop_every: usize,
    ) -> s::ClientResult<()> {
        glue::publish_async_window(
            bodies,
            window,
            drop_every,
            |body| self.0.publish_async(topic, body),
            nsq_blocking::PendingPublish::wait,
        )
    }
    fn publish_async_burst(
        &self,
        topic: &str,
        body: &[u8],
        count: usize,
        between: &dyn Fn(),
    ) -> s::AsyncBurst {
        glue::publish_async_burst(
            count,
            || self.0.publish_async(topic, body.to_vec()),
            |p| p.try_result().is_some(),
            between,
            // One waits with a timeout, the rest without.
            |i, mut p| {
                if i == 0 {
                    p.wait_timeout(WAIT).expect("a result within WAIT")
                } else {
                    p.wait()
                }
            },
        )
    }
    fn close(&self) {
        self.0.close();
    }
    fn clone_producer(&self) -> Box<dyn s::Producer> {
        Box::new(BlockingProducer(self.0.clone()))
    }
}

impl s::Consumer for BlockingConsumer {
    fn next(&mut self, within: Duration) -> Option<Box<dyn s::Message>> {
        self.0.recv_timeout(within).ok().map(glue::message)
    }
    fn stats(&self) -> s::ConsumerStats {
        glue::consumer_stats(&self.0.stats())
    }
    fn set_max_in_flight(&self, n: u32) {
        self.0.set_max_in_flight(n);
    }
    fn is_starved(&self) -> bool {
        self.0.is_starved()
    }
    fn connect_to_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.connect_to_nsqd(addr))
    }
    fn connect_to_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.connect_to_lookupd(addr))
    }
    fn disconnect_from_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.disconnect_from_nsqd(addr))
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.disconnect_from_lookupd(addr))
    }
    fn handle(&self) -> Box<dyn s::ConsumerHandle> {
        Box::new(BlockingHandle(self.0.handle()))
    }
    fn events(&self) -> Box<dyn s::EventStream> {
        Box::new(BlockingEvents(self.0.events()))
    }
    fn stop(&mut self) -> s::StopReport {
        glue::stop_report(self.0.stop())
    }
    fn run(self: Box<Self>, concurrency: usize, handler: s::Handler) -> Box<dyn s::Runner> {
        let c = self.0;
        Box::new(BlockingRunner(std::thread::spawn(move || {
            c.run(concurrency, move |m: Message| glue::handle(&handler, m))
        })))
    }
}

struct BlockingEvents(nsq_blocking::Events);

impl s::EventStream for BlockingEvents {
    fn next(&mut self, within: Duration) -> s::NextEvent {
        match self.0.recv_timeout(within) {
            Ok(e) => s::NextEvent::Event(glue::event(e)),
            Err(nsq_blocking::RecvTimeoutError::Disconnected) => s::NextEvent::Ended,
            Err(nsq_blocking::RecvTimeoutError::Timeout) => s::NextEvent::Timeout,
        }
    }
}

impl s::ConsumerHandle for BlockingHandle {
    fn stop(&self) -> s::StopReport {
        glue::stop_report(self.0.stop())
    }
    fn is_stopping(&self) -> Option<bool> {
        Some(self.0.is_stopping())
    }
    fn set_max_in_flight(&self, n: u32) {
        self.0.set_max_in_flight(n);
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.disconnect_from_lookupd(addr))
    }
}

impl s::Runner for BlockingRunner {
    fn join(self: Box<Self>) -> s::StopReport {
        glue::stop_report(self.0.join().expect("the handler runner"))
    }
}

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
            Err(nsq_blocking::RecvTimeoutError::Timeout)
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
            Err(nsq_blocking::RecvTimeoutError::Disconnected)
        ));
        assert_eq!(c.iter().count(), 0);
        assert!(matches!(
            c.connect_to_nsqd(&nsqd.tcp_address().to_string()),
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
