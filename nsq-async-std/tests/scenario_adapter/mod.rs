//! The shared adapter scenarios (`nsq_test_broker::scenarios`) on nsq-async-std: the
//! factory and client wrappers, every call blocking on the runtime `R`. Used by `scenarios`
//! (drivers on threads of their own) and `on_executor_*` (drivers on the executor).

use crate::common::{Join, Runtime, timeout};
use nsq_async_std::{Consumer, ConsumerHandle, Error, Message, Producer, Topic};
use nsq_test_broker::scenarios as s;
use nsq_test_support::glue::{self, map};
use std::marker::PhantomData;
use std::time::Duration;

// ------------------------------------------------------------------- the shared scenarios

/// nsq-async-std, every call blocking on the runtime `R`.
pub(crate) struct AsyncStdAdapter<R>(PhantomData<fn() -> R>);

pub(crate) fn adapter<R: Runtime>() -> AsyncStdAdapter<R> {
    R::setup();
    AsyncStdAdapter(PhantomData)
}

struct AsyncProducer<R> {
    p: Producer,
    rt: PhantomData<fn() -> R>,
}

struct AsyncConsumer<R> {
    c: Consumer,
    rt: PhantomData<fn() -> R>,
}

struct AsyncHandle<R> {
    h: ConsumerHandle,
    rt: PhantomData<fn() -> R>,
}

struct AsyncRunner<R> {
    task: Join<nsq_async_std::StopReport>,
    rt: PhantomData<fn() -> R>,
}

impl<R: Runtime> s::Factory for AsyncStdAdapter<R> {
    fn producer_connect(
        &self,
        addr: &str,
        config: &s::GoConfig,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let config = glue::go_config(config)?;
        let p = map(R::block_on(Producer::connect(addr, &config)))?;
        Ok(Box::new(AsyncProducer::<R> { p, rt: PhantomData }))
    }

    fn producer(
        &self,
        nsqd: &[String],
        options: Option<&s::ProducerOptions>,
    ) -> s::ClientResult<Box<dyn s::Producer>> {
        let b = glue::producer_builder(Producer::builder(), nsqd, options);
        let p = map(b.build())?;
        Ok(Box::new(AsyncProducer::<R> { p, rt: PhantomData }))
    }

    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(Consumer::builder(topic, channel), setup)?;
        let c = map(b.build())?;
        Ok(Box::new(AsyncConsumer::<R> { c, rt: PhantomData }))
    }

    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder(Consumer::builder(topic, channel), setup)?;
        let c = map(R::block_on(b.connect()))?;
        Ok(Box::new(AsyncConsumer::<R> { c, rt: PhantomData }))
    }

    fn check_option(&self, option: &str, value: &str) -> s::ClientResult<()> {
        glue::check_option(option, value)
    }
}

impl<R: Runtime> s::Producer for AsyncProducer<R> {
    fn publish(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        map(R::block_on(self.p.publish(topic, body.to_vec())))
    }
    fn publish_typed(&self, topic: &str, body: &[u8]) -> s::ClientResult<()> {
        let typed = Topic::new(topic).map_err(|reason| Error::InvalidTopic {
            name: topic.to_owned(),
            reason,
        });
        let topic = map(typed)?;
        map(R::block_on(self.p.publish(&topic, body.to_vec())))
    }
    fn multi_publish(&self, topic: &str, bodies: Vec<Vec<u8>>) -> s::ClientResult<()> {
        map(R::block_on(self.p.multi_publish(topic, bodies)))
    }
    fn deferred_publish(&self, topic: &str, delay: Duration, body: &[u8]) -> s::ClientResult<()> {
        map(R::block_on(self.p.deferred_publish(
            topic,
            delay,
            body.to_vec(),
        )))
    }
    fn ping(&self) -> s::ClientResult<()> {
        map(R::block_on(self.p.ping()))
    }
    fn stats(&self) -> s::ProducerStats {
        glue::producer_stats(&self.p.stats())
    }
    fn publish_concurrently(&self, load: &s::ConcurrentPublishes) -> s::ClientResult<()> {
        R::block_on(async {
            let tasks: Vec<_> = (0..load.tasks)
                .map(|t| {
                    let (p, load) = (self.p.clone(), load.clone());
                    R::spawn(async move {
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
            R::block_on,
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
            |_, p| R::block_on(p),
        )
    }
    fn close(&self) {
        R::block_on(self.p.close());
    }
    fn clone_producer(&self) -> Box<dyn s::Producer> {
        Box::new(AsyncProducer::<R> {
            p: self.p.clone(),
            rt: PhantomData,
        })
    }
}

impl<R: Runtime> s::Consumer for AsyncConsumer<R> {
    fn next(&mut self, within: Duration) -> Option<Box<dyn s::Message>> {
        let m = R::block_on(timeout(within, self.c.recv())).flatten()?;
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
        map(R::block_on(self.c.connect_to_nsqd(addr)))
    }
    fn connect_to_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(R::block_on(self.c.connect_to_lookupd(addr)))
    }
    fn disconnect_from_nsqd(&self, addr: &str) -> s::ClientResult<()> {
        map(R::block_on(self.c.disconnect_from_nsqd(addr)))
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(R::block_on(self.c.disconnect_from_lookupd(addr)))
    }
    fn handle(&self) -> Box<dyn s::ConsumerHandle> {
        Box::new(AsyncHandle::<R> {
            h: self.c.handle(),
            rt: PhantomData,
        })
    }
    fn events(&self) -> Box<dyn s::EventStream> {
        Box::new(AsyncEvents::<R> {
            e: self.c.events(),
            rt: PhantomData,
        })
    }
    fn stop(&mut self) -> s::StopReport {
        glue::stop_report(R::block_on(self.c.stop()))
    }
    fn run(self: Box<Self>, concurrency: usize, handler: s::Handler) -> Box<dyn s::Runner> {
        let task = R::spawn(self.c.run(concurrency, move |m: Message| {
            let handler = handler.clone();
            async move { glue::handle(&handler, m) }
        }));
        Box::new(AsyncRunner::<R> {
            task,
            rt: PhantomData,
        })
    }
}

struct AsyncEvents<R> {
    e: nsq_async_std::Events,
    rt: PhantomData<fn() -> R>,
}

impl<R: Runtime> s::EventStream for AsyncEvents<R> {
    fn next(&mut self, within: Duration) -> s::NextEvent {
        match R::block_on(timeout(within, self.e.recv())) {
            Some(Some(e)) => s::NextEvent::Event(glue::event(e)),
            Some(None) => s::NextEvent::Ended,
            None => s::NextEvent::Timeout,
        }
    }
}

impl<R: Runtime> s::ConsumerHandle for AsyncHandle<R> {
    fn stop(&self) -> s::StopReport {
        glue::stop_report(R::block_on(self.h.stop()))
    }
    fn is_stopping(&self) -> Option<bool> {
        None
    }
    fn set_max_in_flight(&self, n: u32) {
        self.h.set_max_in_flight(n);
    }
    fn disconnect_from_lookupd(&self, addr: &str) -> s::ClientResult<()> {
        map(R::block_on(self.h.disconnect_from_lookupd(addr)))
    }
}

impl<R: Runtime> s::Runner for AsyncRunner<R> {
    fn join(self: Box<Self>) -> s::StopReport {
        glue::stop_report(R::block_on(self.task))
    }
}
