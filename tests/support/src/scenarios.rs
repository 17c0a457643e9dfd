//! The shared adapter scenarios (`nsq_test_broker::scenarios`) on the client layer, written
//! once: [`AsyncClients`] for the async adapters (`nsq_client::Consumer`, `Producer`,
//! every call blocking on an [`Exec`]), [`BlockingClients`] for the blocking one
//! (`nsq_client::blocking::Consumer`, `Producer`). An adapter's `tests/scenarios.rs`
//! runs them with `adapter_scenario_tests!(|| AsyncClients::new(exec))`.

use crate::exec::{Exec, GiveRuntime, Join, timeout};
use crate::glue::{self, map};
use nsq_client::{ConsumerHandle, Error, Events, Message, Producer, StopReport};
use nsq_proto::Topic;
use nsq_test_broker::scenarios as s;
use std::time::Duration;

/// `topic` as the validated `Topic` (an invalid one is the error a publish would return).
fn typed(topic: &str) -> s::ClientResult<Topic> {
    map(Topic::new(topic).map_err(|reason| Error::InvalidTopic {
        name: topic.to_owned(),
        reason,
    }))
}

// ------------------------------------------------------------------------------ async

/// An async adapter, every call blocking on `E` (its clients on the runtime found where they
/// are built, or the one `E` gives).
pub struct AsyncClients<E> {
    exec: E,
}

impl<E: Exec> AsyncClients<E> {
    /// The adapter's clients, blocking on `exec`.
    pub fn new(exec: E) -> Self {
        AsyncClients { exec }
    }
}

struct AsyncProducer<E> {
    exec: E,
    p: Producer,
}

struct AsyncConsumer<E> {
    exec: E,
    c: nsq_client::Consumer,
}

struct AsyncHandle<E> {
    exec: E,
    h: ConsumerHandle,
}

struct AsyncRunner<E> {
    exec: E,
    task: Join<StopReport>,
}

struct AsyncEvents<E> {
    exec: E,
    e: Events,
}

impl<E: Exec> AsyncClients<E> {
    fn producer_of(&self, p: Producer) -> Box<dyn s::Producer> {
        Box::new(AsyncProducer {
            exec: self.exec.clone(),
            p,
        })
    }

    fn consumer_of(&self, c: nsq_client::Consumer) -> Box<dyn s::Consumer> {
        Box::new(AsyncConsumer {
            exec: self.exec.clone(),
            c,
        })
    }
}

impl<E: Exec> s::Factory for AsyncClients<E> {
    fn producer_connect(
        &self,
        addr: &str,
        config: &s::GoConfig,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let config = glue::go_config(config)?;
        let p = match self.exec.runtime() {
            // Given a runtime: `connect` is `build` and a ping.
            Some(rt) => {
                let p = map(self.exec.enter(|| {
                    Producer::builder()
                        .config(&config)
                        .nsqd(addr)
                        .runtime(rt)
                        .build()
                }))?;
                map(self.exec.block_on(p.ping()))?;
                p
            }
            None => map(self.exec.block_on(Producer::connect(addr, &config)))?,
        };
        Ok(self.producer_of(p))
    }

    fn producer(
        &self,
        nsqd: &[String],
        options: Option<&s::ProducerOptions>,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let b =
            glue::producer_builder(Producer::builder(), nsqd, options).given(self.exec.runtime());
        let p = map(self.exec.enter(|| b.build()))?;
        Ok(self.producer_of(p))
    }

    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(nsq_client::Consumer::builder(topic, channel), setup)?
            .given(self.exec.runtime());
        let c = map(self.exec.enter(|| b.build()))?;
        Ok(self.consumer_of(c))
    }

    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(nsq_client::Consumer::builder(topic, channel), setup)?
            .given(self.exec.runtime());
        let c = map(self.exec.enter(|| self.exec.block_on(b.connect())))?;
        Ok(self.consumer_of(c))
    }

    fn check_option(&self, option: &str, value: &str) -> s::ClientResult<()> {
        glue::check_option(option, value)
    }
}

impl<E: Exec> s::Producer for AsyncProducer<E> {
    fn publish(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        map(self.exec.block_on(self.p.publish(topic, body.to_vec())))
    }
    fn publish_typed(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        let topic = typed(topic)?;
        map(self.exec.block_on(self.p.publish(&topic, body.to_vec())))
    }
    fn multi_publish(&self, topic: &str, bodies: Vec<Vec<u8>>) -> s::ClientResult<()> {
        map(self.exec.block_on(self.p.multi_publish(topic, bodies)))
    }
    fn deferred_publish(&self, topic: &str, delay: Duration, body: &[u8]) -> s::ClientResult<()> {
        let publish = self.p.deferred_publish(topic, delay, body.to_vec());
        map(self.exec.block_on(publish))
    }
    fn ping(&self) -> s::ClientResult<()> {
        map(self.exec.block_on(self.p.ping()))
    }
    fn stats(&self) -> s::ProducerStats {
        glue::producer_stats(&self.p.stats())
    }
    fn publish_concurrently(&self, load: &s::ConcurrentPublishes) -> s::ClientResult<()> {
        self.exec.block_on(async {
            let tasks: Vec<_> = (0..load.tasks)
                .map(|t| {
                    let (p, load) = (self.p.clone(), load.clone());
                    self.exec.spawn(async move {
                        for i in 0..load.per_task {
                            p.publish(load.topic.as_str(), (load.body)(t, i)).await?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for t in tasks {
                map(t.await)?;
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
            |p| self.exec.block_on(p),
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
            |_, p| self.exec.block_on(p),
        )
    }
    fn close(&self) {
        self.exec.block_on(self.p.close());
    }
    fn clone_producer(&self) -> Box<dyn s::Producer> {
        Box::new(AsyncProducer {
            exec: self.exec.clone(),
            p: self.p.clone(),
        })
    }
}

impl<E: Exec> s::Consumer for AsyncConsumer<E> {
    fn next(&mut self, within: Duration) -> Option<Box<dyn s::Message>> {
        let m = self
            .exec
            .block_on(timeout(&self.exec, within, self.c.recv()))??;
        Some(glue::message(m))
    }
    fn stats(&self) -> s::ConsumerStats {
        glue::consumer_stats(&self.c.handle().stats())
    }
    fn set_max_in_flight(&self, n: u32) {
        self.c.handle().set_max_in_flight(n);
    }
    fn is_starved(&self) -> bool {
        self.c.handle().is_starved()
    }
    fn connect_to_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.exec.block_on(self.c.handle().connect_to_nsqd(addr)))
    }
    fn connect_to_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.exec.block_on(self.c.handle().connect_to_lookupd(addr)))
    }
    fn disconnect_from_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self
            .exec
            .block_on(self.c.handle().disconnect_from_nsqd(addr)))
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self
            .exec
            .block_on(self.c.handle().disconnect_from_lookupd(addr)))
    }
    fn handle(&self) -> Box<dyn s::ConsumerHandle> {
        Box::new(AsyncHandle {
            exec: self.exec.clone(),
            h: self.c.handle(),
        })
    }
    fn events(&self) -> Box<dyn s::EventStream> {
        Box::new(AsyncEvents {
            exec: self.exec.clone(),
            e: self.c.handle().events(),
        })
    }
    fn stop(&mut self) -> s::StopReport {
        glue::stop_report(self.exec.block_on(self.c.stop()))
    }
    fn run(self: Box<Self>, concurrency: usize, handler: s::Handler) -> Box<dyn s::Runner> {
        let task = self.exec.spawn(self.c.run(concurrency, move |m: Message| {
            let handler = handler.clone();
            async move { glue::handle(&handler, m) }
        }));
        Box::new(AsyncRunner {
            exec: self.exec,
            task,
        })
    }
}

impl<E: Exec> s::EventStream for AsyncEvents<E> {
    fn next(&mut self, within: Duration) -> s::NextEvent {
        match self
            .exec
            .block_on(timeout(&self.exec, within, self.e.recv()))
        {
            Some(Some(e)) => s::NextEvent::Event(glue::event(e)),
            Some(None) => s::NextEvent::Ended,
            None => s::NextEvent::Timeout,
        }
    }
}

impl<E: Exec> s::ConsumerHandle for AsyncHandle<E> {
    fn stop(&self) -> s::StopReport {
        glue::stop_report(self.exec.block_on(self.h.stop()))
    }
    fn is_stopping(&self) -> Option<bool> {
        None
    }
    fn set_max_in_flight(&self, n: u32) {
        self.h.set_max_in_flight(n);
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.exec.block_on(self.h.disconnect_from_lookupd(addr)))
    }
}

impl<E: Exec> s::Runner for AsyncRunner<E> {
    fn join(self: Box<Self>) -> s::StopReport {
        glue::stop_report(self.exec.block_on(self.task))
    }
}

// --------------------------------------------------------------------------- blocking

/// The blocking client layer on runtime `R`: every call is a plain blocking call.
#[derive(Debug, Clone, Copy)]
pub struct BlockingClients;

impl BlockingClients {
    /// The blocking clients on `R`.
    pub fn new() -> Self {
        BlockingClients
    }
}

impl Default for BlockingClients {
    fn default() -> Self {
        Self::new()
    }
}

type BlockingProducer = nsq_client::blocking::Producer;
type BlockingConsumer = nsq_client::blocking::Consumer;

struct BlockingP(BlockingProducer);

struct BlockingC(BlockingConsumer);

struct BlockingH(nsq_client::blocking::ConsumerHandle);

struct BlockingRunner(std::thread::JoinHandle<StopReport>);

struct BlockingEvents(nsq_client::blocking::Events);

impl s::Factory for BlockingClients {
    fn producer_connect(
        &self,
        addr: &str,
        config: &s::GoConfig,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let config = glue::go_config(config)?;
        let p = map(BlockingProducer::connect(addr, &config))?;
        Ok(Box::new(BlockingP(p)))
    }

    fn producer(
        &self,
        nsqd: &[String],
        options: Option<&s::ProducerOptions>,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let b = glue::producer_builder(BlockingProducer::builder(), nsqd, options);
        Ok(Box::new(BlockingP(map(b.build())?)))
    }

    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(BlockingConsumer::builder(topic, channel), setup)?;
        Ok(Box::new(BlockingC(map(b.build())?)))
    }

    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(BlockingConsumer::builder(topic, channel), setup)?;
        Ok(Box::new(BlockingC(map(b.connect())?)))
    }

    fn check_option(&self, option: &str, value: &str) -> s::ClientResult<()> {
        glue::check_option(option, value)
    }
}

impl s::Producer for BlockingP {
    fn publish(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        map(self.0.publish(topic, body.to_vec()))
    }
    fn publish_typed(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        let topic = typed(topic)?;
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
            nsq_client::blocking::PendingPublish::wait,
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
                    p.wait_timeout(s::WAIT).expect("a result within WAIT")
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
        Box::new(BlockingP(self.0.clone()))
    }
}

impl s::Consumer for BlockingC {
    fn next(&mut self, within: Duration) -> Option<Box<dyn s::Message>> {
        self.0.recv_timeout(within).ok().map(glue::message)
    }
    fn stats(&self) -> s::ConsumerStats {
        glue::consumer_stats(&self.0.handle().stats())
    }
    fn set_max_in_flight(&self, n: u32) {
        self.0.handle().set_max_in_flight(n);
    }
    fn is_starved(&self) -> bool {
        self.0.handle().is_starved()
    }
    fn connect_to_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.handle().connect_to_nsqd(addr))
    }
    fn connect_to_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.handle().connect_to_lookupd(addr))
    }
    fn disconnect_from_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.handle().disconnect_from_nsqd(addr))
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(self.0.handle().disconnect_from_lookupd(addr))
    }
    fn handle(&self) -> Box<dyn s::ConsumerHandle> {
        Box::new(BlockingH(self.0.handle()))
    }
    fn events(&self) -> Box<dyn s::EventStream> {
        Box::new(BlockingEvents(self.0.handle().events()))
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

impl s::EventStream for BlockingEvents {
    fn next(&mut self, within: Duration) -> s::NextEvent {
        use std::sync::mpsc::RecvTimeoutError;
        match self.0.recv_timeout(within) {
            Ok(e) => s::NextEvent::Event(glue::event(e)),
            Err(RecvTimeoutError::Disconnected) => s::NextEvent::Ended,
            Err(RecvTimeoutError::Timeout) => s::NextEvent::Timeout,
        }
    }
}

impl s::ConsumerHandle for BlockingH {
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
