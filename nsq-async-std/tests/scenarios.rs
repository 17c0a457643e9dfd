//! nsq-async-std against the in-process test broker: the shared adapter scenarios
//! (`nsq_test_broker::scenarios`, one `#[test]` each) and the tests only this adapter has,
//! every one under async-std's runtime AND under smol. Every test runs under a timeout so
//! nothing hangs.

mod common;
#[path = "../../tests/glue/nsq_proto.rs"]
mod glue;

use common::{AsyncStd, Join, Runtime, Smol, eventually, timeout};
use glue::{fast_config, map};
use nsq_async_std::{Consumer, ConsumerConfig, ConsumerHandle, Error, Message, Producer, Topic};
use nsq_test_broker::Nsqd;
use nsq_test_broker::scenarios::{self as s, WAIT, start};
use std::collections::BTreeSet;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

// ------------------------------------------------------------------- the shared scenarios

/// nsq-async-std, every call blocking on the runtime `R`.
struct AsyncStdAdapter<R>(PhantomData<fn() -> R>);

fn adapter<R: Runtime>() -> AsyncStdAdapter<R> {
    AsyncStdAdapter(PhantomData)
}

mod on_async_std {
    nsq_test_broker::adapter_scenario_tests!(super::adapter::<super::AsyncStd>);
}

mod on_smol {
    nsq_test_broker::adapter_scenario_tests!(super::adapter::<super::Smol>);
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
        let b = glue::producer_builder!(Producer::builder(), nsqd, options);
        let p = map(b.build())?;
        Ok(Box::new(AsyncProducer::<R> { p, rt: PhantomData }))
    }

    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder!(Consumer::builder(topic, channel), setup);
        let c = map(b.build())?;
        Ok(Box::new(AsyncConsumer::<R> { c, rt: PhantomData }))
    }

    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &s::ConsumerSetup,
    ) -> s::ClientResult<Box<dyn s::Consumer>> {
        let b = glue::consumer_builder!(Consumer::builder(topic, channel), setup);
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

// ----------------------------------------------------------- nsq-async-std's own tests

/// Runs `f` under runtime `R` with a hard timeout.
fn run<R: Runtime, F: Future<Output = ()>>(secs: u64, f: F) {
    R::block_on(async move {
        timeout(Duration::from_secs(secs), f)
            .await
            .unwrap_or_else(|| panic!("test timed out under {}", R::NAME));
    });
}

/// One `#[test]` per runtime for the test `async fn name<R: Runtime>()`.
macro_rules! both {
    ($name:ident, $secs:expr) => {
        mod $name {
            #[test]
            fn async_std() {
                super::run::<super::AsyncStd, _>($secs, super::$name::<super::AsyncStd>());
            }
            #[test]
            fn smol() {
                super::run::<super::Smol, _>($secs, super::$name::<super::Smol>());
            }
        }
    };
}

async fn next(consumer: &mut Consumer, within: Duration) -> Option<Message> {
    timeout(within, consumer.recv()).await.flatten()
}

fn consumer(nsqd: &Nsqd, topic: &str, config: ConsumerConfig) -> Consumer {
    glue::consumer!(Consumer, nsqd, topic, config)
}

both!(consumer_is_a_stream, 20);
async fn consumer_is_a_stream<R: Runtime>() {
    use futures_lite::StreamExt;
    let nsqd = start(Nsqd::builder());
    for i in 0..3 {
        nsqd.publish("stream", format!("s{i}").as_bytes());
    }
    let mut c = consumer(&nsqd, "stream", fast_config(3));
    let mut got = BTreeSet::new();
    while got.len() < 3 {
        let m = timeout(WAIT, c.next())
            .await
            .flatten()
            .expect("a message from the stream");
        assert!(format!("{m:?}").contains("attempts"));
        got.insert(String::from_utf8(m.body().to_vec()).unwrap());
        m.finish();
    }
    assert_eq!(got.len(), 3);
    // Pause, then resume: max_in_flight follows.
    c.set_max_in_flight(0);
    assert!(eventually(WAIT, || c.stats().total_rdy == 0).await);
    assert!(!c.is_starved());
    c.set_max_in_flight(2);
    assert!(eventually(WAIT, || c.stats().total_rdy == 2).await);
    let handle = c.handle();
    assert_eq!(handle.stop().await.unanswered, 0);
    // Once stopped the stream ends.
    assert!(
        timeout(WAIT, c.next())
            .await
            .expect("ends at once")
            .is_none()
    );
    assert!(matches!(
        handle.connect_to_nsqd("127.0.0.1:1").await,
        Err(Error::Closed)
    ));
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Producer>();
    send_sync::<nsq_async_std::ConsumerHandle>();
    send::<Consumer>();
    send::<Message>();
    send_sync::<Error>();
}

both!(a_dropped_receiver_stops_instead_of_looping, 20);
async fn a_dropped_receiver_stops_instead_of_looping<R: Runtime>() {
    let nsqd = start(Nsqd::builder());
    for i in 0..5 {
        nsqd.publish("droprx", format!("{i}").as_bytes());
    }
    let mut c = consumer(&nsqd, "droprx", fast_config(1));
    let handle = c.handle();
    next(&mut c, WAIT).await.expect("a message").finish();
    // The handle keeps the consumer alive, but nobody can receive its messages any more.
    drop(c);
    assert!(
        eventually(WAIT, || nsqd.clients().is_empty()).await,
        "the consumer stops"
    );
    let ch = nsqd.channel("droprx", "ch").unwrap();
    assert_eq!(ch.finished, 1);
    // At most the message queued when the receiver went and the one that found it gone.
    assert!(ch.requeued <= 2, "no redelivery loop: {ch:?}");
    assert_eq!(ch.depth + ch.deferred, 4, "{ch:?}");
    assert_eq!(handle.stop().await.unanswered, 0);
}
