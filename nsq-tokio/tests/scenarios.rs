//! nsq-tokio against the in-process test broker: the shared adapter scenarios
//! (`nsq_test_broker::scenarios`, one `#[test]` each), plus the tests only tokio has.
//! Every test runs under a timeout so nothing hangs.

use nsq_test_broker::scenarios::{self as s, WAIT, eventually, start};
use nsq_test_broker::{Nsqd, adapter_scenario_tests};
use nsq_test_support::glue::{self, map};
use nsq_tokio::{Consumer, ConsumerHandle, Error, Message, Producer, Topic};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;
use tokio::runtime::{Handle, Runtime};

// ------------------------------------------------------------------- the shared scenarios

/// nsq-tokio on a 2-thread runtime; every call blocks on it.
struct Tokio {
    rt: Runtime,
}

fn tokio() -> Tokio {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    Tokio { rt }
}

adapter_scenario_tests!(tokio);

struct TokioProducer {
    rt: Handle,
    p: Producer,
}

struct TokioConsumer {
    rt: Handle,
    c: Consumer,
}

struct TokioHandle {
    rt: Handle,
    h: ConsumerHandle,
}

struct TokioRunner {
    rt: Handle,
    task: tokio::task::JoinHandle<nsq_tokio::StopReport>,
}

impl s::Factory for Tokio {
    fn producer_connect(
        &self,
        addr: &str,
        config: &s::GoConfig,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let config = glue::go_config(config)?;
        let p = map(self.rt.block_on(Producer::connect(addr, &config)))?;
        Ok(Box::new(TokioProducer {
            rt: self.rt.handle().clone(),
            p,
        }))
    }

    fn producer(
        &self,
        nsqd: &[String],
        options: Option<&s::ProducerOptions>,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let _in_runtime = self.rt.enter();
        let b = glue::producer_builder(Producer::builder(), nsqd, options);
        Ok(Box::new(TokioProducer {
            rt: self.rt.handle().clone(),
            p: map(b.build())?,
        }))
    }

    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let _in_runtime = self.rt.enter();
        let b = glue::consumer_builder(Consumer::builder(topic, channel), setup)?;
        let c = map(b.build())?;
        Ok(Box::new(TokioConsumer {
            rt: self.rt.handle().clone(),
            c,
        }))
    }

    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let _in_runtime = self.rt.enter();
        let b = glue::consumer_builder(Consumer::builder(topic, channel), setup)?;
        let c = map(self.rt.block_on(b.connect()))?;
        Ok(Box::new(TokioConsumer {
            rt: self.rt.handle().clone(),
            c,
        }))
    }

    fn check_option(&self, option: &str, value: &str) -> s::ClientResult<()> {
        glue::check_option(option, value)
    }
}

impl s::Producer for TokioProducer {
    fn publish(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        map(self.rt.block_on(self.p.publish(topic, body.to_vec())))
    }
    fn publish_typed(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        let typed = Topic::new(topic).map_err(|reason| Error::InvalidTopic {
            name: topic.to_owned(),
            reason,
        });
        let topic = map(typed)?;
        map(self.rt.block_on(self.p.publish(&topic, body.to_vec())))
    }
    fn multi_publish(&self, topic: &str, bodies: Vec<Vec<u8>>) -> s::ClientResult<()> {
        map(self.rt.block_on(self.p.multi_publish(topic, bodies)))
    }
    fn deferred_publish(&self, topic: &str, delay: Duration, body: &[u8]) -> s::ClientResult<()> {
        map(self
            .rt
            .block_on(self.p.deferred_publish(topic, delay, body.to_vec())))
    }
    fn ping(&self) -> s::ClientResult<()> {
        map(self.rt.block_on(self.p.ping()))
    }
    fn stats(&self) -> s::ProducerStats {
        glue::producer_stats(&self.p.stats())
    }
    fn publish_concurrently(&self, load: &s::ConcurrentPublishes) -> s::ClientResult<()> {
        let tasks: Vec<_> = (0..load.tasks)
            .map(|t| {
                let (p, load) = (self.p.clone(), load.clone());
                self.rt.spawn(async move {
                    for i in 0..load.per_task {
                        p.publish(load.topic.as_str(), (load.body)(t, i)).await?;
                    }
                    Ok(())
                })
            })
            .collect();
        self.rt.block_on(async {
            for t in tasks {
                map(t.await.expect("a publishing task"))?;
            }
            Ok(())
        })
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
            |body| self.p.publish_async(topic, body),
            |p| self.rt.block_on(p),
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
            || self.p.publish_async(topic, body.to_vec()),
            |p| p.try_result().is_some(),
            between,
            |_, p| self.rt.block_on(p),
        )
    }
    fn close(&self) {
        self.rt.block_on(self.p.close());
    }
    fn clone_producer(&self) -> Box<dyn s::Producer> {
        Box::new(TokioProducer {
            rt: self.rt.clone(),
            p: self.p.clone(),
        })
    }
}

impl s::Consumer for TokioConsumer {
    fn next(&mut self, within: Duration) -> Option<Box<dyn s::Message>> {
        let m = self
            .rt
            .block_on(async { tokio::time::timeout(within, self.c.recv()).await })
            .ok()??;
        Some(glue::message(m))
    }
    fn stats(&self) -> s::ConsumerStats {
        glue::consumer_stats(&self.c.stats())
    }
    fn set_max_in_flight(&self, n: u32) {
        self.c.set_max_in_flight(n);
    }
    fn is_starved(&self) -> bool {
        self.c.is_starved()
    }
    fn connect_to_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.rt.block_on(self.c.connect_to_nsqd(addr)))
    }
    fn connect_to_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.rt.block_on(self.c.connect_to_lookupd(addr)))
    }
    fn disconnect_from_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.rt.block_on(self.c.disconnect_from_nsqd(addr)))
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.rt.block_on(self.c.disconnect_from_lookupd(addr)))
    }
    fn handle(&self) -> Box<dyn s::ConsumerHandle> {
        Box::new(TokioHandle {
            rt: self.rt.clone(),
            h: self.c.handle(),
        })
    }
    fn events(&self) -> Box<dyn s::EventStream> {
        Box::new(TokioEvents {
            rt: self.rt.clone(),
            e: self.c.events(),
        })
    }
    fn stop(&mut self) -> s::StopReport {
        glue::stop_report(self.rt.block_on(self.c.stop()))
    }
    fn run(self: Box<Self>, concurrency: usize, handler: s::Handler) -> Box<dyn s::Runner> {
        let task = self.rt.spawn(self.c.run(concurrency, move |m: Message| {
            let handler = handler.clone();
            async move { glue::handle(&handler, m) }
        }));
        Box::new(TokioRunner { rt: self.rt, task })
    }
}

struct TokioEvents {
    rt: Handle,
    e: nsq_tokio::Events,
}

impl s::EventStream for TokioEvents {
    fn next(&mut self, within: Duration) -> s::NextEvent {
        match self
            .rt
            .block_on(async { tokio::time::timeout(within, self.e.recv()).await })
        {
            Ok(Some(e)) => s::NextEvent::Event(glue::event(e)),
            Ok(None) => s::NextEvent::Ended,
            Err(_) => s::NextEvent::Timeout,
        }
    }
}

impl s::ConsumerHandle for TokioHandle {
    fn stop(&self) -> s::StopReport {
        glue::stop_report(self.rt.block_on(self.h.stop()))
    }
    fn is_stopping(&self) -> Option<bool> {
        None
    }
    fn set_max_in_flight(&self, n: u32) {
        self.h.set_max_in_flight(n);
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.rt.block_on(self.h.disconnect_from_lookupd(addr)))
    }
}

impl s::Runner for TokioRunner {
    fn join(self: Box<Self>) -> s::StopReport {
        let report = self.rt.block_on(self.task).expect("the handler runner");
        glue::stop_report(report)
    }
}

// --------------------------------------------------------------------- tokio's own tests

/// Runs `f` on a 2-thread runtime with a hard timeout.
fn run<F: Future<Output = ()> + Send + 'static>(secs: u64, f: F) {
    tokio().rt.block_on(async move {
        tokio::time::timeout(Duration::from_secs(secs), f)
            .await
            .expect("test timed out");
    });
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<ConsumerHandle>();
    send::<Consumer>();
    send::<Message>();
    send_sync::<Error>();
}

/// `Consumer` is a `futures` `Stream`: combinators work, and the stream ends once stopped.
#[test]
fn consumer_is_a_stream() {
    use futures_lite::StreamExt;
    run(20, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..20 {
            nsqd.publish("stream", format!("{i}").as_bytes());
        }
        let c = nsq_test_support::consumer!(Consumer, &nsqd, "stream", glue::fast_config(5));
        let handle = c.handle();
        // Stream combinators: each message is finished inside `map`.
        let mut bodies = c.map(|m| {
            let body = m.body().clone();
            m.finish();
            body
        });
        let mut seen = BTreeSet::new();
        while seen.len() < 20 {
            let body = tokio::time::timeout(WAIT, bodies.next())
                .await
                .expect("a message in time")
                .expect("the stream is still open");
            seen.insert(String::from_utf8(body.to_vec()).unwrap());
        }
        let expected: BTreeSet<String> = (0..20).map(|i| i.to_string()).collect();
        assert_eq!(seen, expected);
        assert!(
            eventually(WAIT, || nsqd
                .channel("stream", "ch")
                .is_some_and(|ch| ch.finished == 20 && ch.in_flight == 0)),
            "{:?}",
            nsqd.channel("stream", "ch")
        );
        assert_eq!(handle.stop().await.unanswered, 0);
        // A stopped consumer's stream ends.
        let end = tokio::time::timeout(WAIT, bodies.next())
            .await
            .expect("the stream ends in time");
        assert!(end.is_none(), "a message after stop");
    });
}

/// Dropping the `Consumer` (the only receiver) while a handle lives: what was queued is
/// requeued once, the driver stops instead of redelivering forever, nothing is lost.
#[test]
fn a_dropped_receiver_stops_instead_of_looping() {
    run(20, async {
        let nsqd = start(Nsqd::builder());
        for i in 0..5 {
            nsqd.publish("droprx", format!("{i}").as_bytes());
        }
        let mut c = nsq_test_support::consumer!(Consumer, &nsqd, "droprx", glue::fast_config(1));
        let handle = c.handle();
        tokio::time::timeout(WAIT, c.recv())
            .await
            .expect("a message in time")
            .expect("a message")
            .finish();
        // The handle keeps the consumer alive, but nobody can receive its messages any more.
        drop(c);
        assert!(
            eventually(WAIT, || nsqd.clients().is_empty()),
            "the consumer stops"
        );
        let ch = nsqd.channel("droprx", "ch").unwrap();
        assert_eq!(ch.finished, 1);
        // At most the message queued when the receiver went and the one that found it gone.
        assert!(ch.requeued <= 2, "no redelivery loop: {ch:?}");
        assert_eq!(ch.depth + ch.deferred, 4, "{ch:?}");
        assert_eq!(handle.stop().await.unanswered, 0);
    });
}
