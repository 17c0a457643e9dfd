//! The blocking API, for runtimes whose driver runs on a thread of its own (`nsq-blocking`):
//! [`Consumer`], [`ConsumerHandle`] and [`Producer`] run the client layer's async calls to
//! completion on the calling thread with [`block_on`], a small executor that parks the
//! thread until it is woken. The documentation of each method is on the async type
//! ([`Consumer`](super::Consumer), ...); only what blocking changes is said here.

use super::ClusterReport;
use super::builder::{BuildConsumer, BuildProducer, sealed};
use super::runtime::{Adapter, Ended, park_on};
use super::{Error, Event, HandlerError, IntoChannel, IntoTopic, Message, Outcome, StopReport};
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::consumer::ConsumerStats;
use nsq_proto::producer::ProducerStats;
use nsq_proto::{Channel, Topic};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------- executor

/// Runs `future` on this thread to completion.
pub fn block_on<F: Future>(future: F) -> F::Output {
    match block_on_until(future, None) {
        Some(v) => v,
        None => unreachable!("no deadline"),
    }
}

/// Runs `future` on this thread until it completes (`Some`) or `deadline` passes (`None`).
/// The thread parks between polls, until a waker calls or the deadline passes.
pub fn block_on_until<F: Future>(future: F, deadline: Option<Instant>) -> Option<F::Output> {
    park_on(std::pin::pin!(future), deadline)
}

/// Runs `future` on this thread until it completes (`Some`) or `timeout` has passed since
/// it first had to wait (`None`). A future that is ready at once costs no clock read.
pub(crate) fn block_on_for<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Some(v) = poll_now(future.as_mut()) {
        return Some(v);
    }
    park_on(future, Some(now() + timeout))
}

/// The thread's clock, for a deadline of a thread that parks.
#[allow(
    clippy::disallowed_methods,
    reason = "a thread parks for real time; the driver's clock is the runtime's"
)]
fn now() -> Instant {
    Instant::now()
}

/// Polls `future` once with a waker that does nothing: the common case of a blocking call, a
/// reply or message already there, costs no waker and no clock read.
fn poll_now<F: Future>(future: Pin<&mut F>) -> Option<F::Output> {
    match future.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// A blocking call of a client on runtime `rt`: runs `future` to completion on this thread
/// ([`Adapter::block_on`]: driving the client while it waits where the runtime does).
fn call<R: Adapter, F: Future>(rt: &R, future: F) -> F::Output {
    match wait_on(rt, future, || None) {
        Some(v) => v,
        None => unreachable!("no deadline"),
    }
}

/// [`call`] for at most `timeout` from when the future first has to wait (`None` after it).
fn call_for<R: Adapter, F: Future>(rt: &R, future: F, timeout: Duration) -> Option<F::Output> {
    wait_on(rt, future, || Some(rt.now() + timeout))
}

/// Runs `future` on this thread through `rt` until it completes (`Some`) or the deadline
/// (asked for when it first has to wait) passes.
fn wait_on<R: Adapter, F: Future>(
    rt: &R,
    future: F,
    deadline: impl FnOnce() -> Option<Instant>,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Some(v) = poll_now(future.as_mut()) {
        return Some(v);
    }
    rt.block_on(future, deadline())
}

/// Waits until the client's driver has ended (driving it meanwhile where the runtime's
/// blocking calls do); at once from inside the driver.
fn wait_ended<R: Adapter>(rt: &R, ended: &Ended) {
    if ended.is_current() {
        return;
    }
    call(rt, std::future::poll_fn(|cx| ended.poll_ended(cx)));
}

// ---------------------------------------------------------------------------------- handle

/// The blocking API's control handle of a [`Consumer`], on runtime `R`.
#[derive(Debug)]
pub struct ConsumerHandle<R: Adapter>(super::ConsumerHandle<R>);

impl<R: Adapter> Clone for ConsumerHandle<R> {
    fn clone(&self) -> Self {
        ConsumerHandle(self.0.clone())
    }
}

impl<R: Adapter> ConsumerHandle<R> {
    /// See the async [`ConsumerHandle::connect_to_nsqd`](super::ConsumerHandle::connect_to_nsqd).
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        call(self.0.runtime(), self.0.connect_to_nsqd(addr))
    }

    /// See the async [`ConsumerHandle::connect_to_nsqds`](super::ConsumerHandle::connect_to_nsqds).
    pub fn connect_to_nsqds<I: IntoIterator<Item = S>, S: AsRef<str>>(
        &self,
        addrs: I,
    ) -> Result<(), Error> {
        call(self.0.runtime(), self.0.connect_to_nsqds(addrs))
    }

    /// See the async [`ConsumerHandle::connect_to_lookupd`](super::ConsumerHandle::connect_to_lookupd).
    pub fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        call(self.0.runtime(), self.0.connect_to_lookupd(addr))
    }

    /// See the async [`ConsumerHandle::connect_to_lookupds`](super::ConsumerHandle::connect_to_lookupds).
    pub fn connect_to_lookupds<I: IntoIterator<Item = S>, S: AsRef<str>>(
        &self,
        addrs: I,
    ) -> Result<(), Error> {
        call(self.0.runtime(), self.0.connect_to_lookupds(addrs))
    }

    /// See the async [`ConsumerHandle::disconnect_from_nsqd`](super::ConsumerHandle::disconnect_from_nsqd).
    pub fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        call(self.0.runtime(), self.0.disconnect_from_nsqd(addr))
    }

    /// See the async [`ConsumerHandle::disconnect_from_lookupd`](super::ConsumerHandle::disconnect_from_lookupd).
    pub fn disconnect_from_lookupd(&self, addr: &str) -> Result<(), Error> {
        call(self.0.runtime(), self.0.disconnect_from_lookupd(addr))
    }

    /// See the async [`ConsumerHandle::set_max_in_flight`](super::ConsumerHandle::set_max_in_flight).
    pub fn set_max_in_flight(&self, n: u32) {
        self.0.set_max_in_flight(n);
    }

    /// See the async [`ConsumerHandle::is_starved`](super::ConsumerHandle::is_starved).
    pub fn is_starved(&self) -> bool {
        self.0.is_starved()
    }

    /// See the async [`ConsumerHandle::events`](super::ConsumerHandle::events).
    pub fn events(&self) -> Events {
        Events(self.0.events())
    }

    /// See the async [`ConsumerHandle::stats`](super::ConsumerHandle::stats).
    pub fn stats(&self) -> ConsumerStats {
        self.0.stats()
    }

    /// See the async [`ConsumerHandle::is_stopping`](super::ConsumerHandle::is_stopping).
    pub fn is_stopping(&self) -> bool {
        self.0.is_stopping()
    }

    /// Graceful shutdown (see the async [`ConsumerHandle::stop`](super::ConsumerHandle::stop)); returns once every
    /// connection has drained or `drain_timeout` passed and the driver has ended.
    pub fn stop(&self) -> StopReport {
        let ended = self.0.ended();
        if ended.is_current() || self.0.in_own_handler() {
            // A give-up hook runs on the driver, and a `run` handler's own message is only
            // answered once it returns: neither can wait for the drain. Begin the stop.
            self.0.request_stop();
            return StopReport::default();
        }
        let report = call(self.0.runtime(), self.0.stop());
        wait_ended(self.0.runtime(), ended);
        report
    }
}

// -------------------------------------------------------------------------------- consumer

/// The blocking API's consumer on runtime `R` (the async [`Consumer`](super::Consumer) run
/// to completion on the calling thread): nsq-blocking's `Consumer`
/// ([`blocking_api!`](crate::blocking_api)) wraps it, and documents it for its users.
pub struct Consumer<R: Adapter> {
    inner: super::Consumer<R>,
    handle: ConsumerHandle<R>,
    stopped: bool,
}

impl<R: Adapter> From<super::Consumer<R>> for Consumer<R> {
    fn from(inner: super::Consumer<R>) -> Self {
        Consumer {
            handle: ConsumerHandle(inner.handle()),
            inner,
            stopped: false,
        }
    }
}

impl<R: Adapter> BuildConsumer for Consumer<R> {
    type Connecting = Result<Self, Error>;
}

impl<R: Adapter> sealed::BuildConsumer for Consumer<R> {
    fn build(setup: sealed::ConsumerParts) -> Result<Self, Error> {
        <super::Consumer<R> as sealed::BuildConsumer>::build(setup).map(Consumer::from)
    }

    fn connect(setup: sealed::ConsumerParts) -> <Self as BuildConsumer>::Connecting {
        let (nsqd, lookupd) = (setup.0.nsqd.clone(), setup.0.lookupd.clone());
        let consumer = Self::build(setup)?;
        call(
            consumer.handle.0.runtime(),
            consumer.handle.0.await_nsqds(&nsqd),
        )?;
        consumer.handle.connect_to_lookupds(&lookupd)?;
        Ok(consumer)
    }
}

impl<R: Adapter> fmt::Debug for Consumer<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<R: Adapter> Consumer<R> {
    /// A builder for a consumer of `topic`/`channel` (names validated at `build`). Its
    /// [`build`](super::ConsumerBuilder::build) starts the driver thread; it works from any
    /// thread.
    pub fn builder(
        topic: impl IntoTopic,
        channel: impl IntoChannel,
    ) -> super::ConsumerBuilder<Self> {
        super::ConsumerBuilder::new(topic, channel)
    }

    /// A consumer with `config`, not yet connected anywhere: add servers with
    /// [`connect_to_nsqd`](ConsumerHandle::connect_to_nsqd) /
    /// [`connect_to_lookupd`](ConsumerHandle::connect_to_lookupd).
    pub fn new(
        topic: impl IntoTopic,
        channel: impl IntoChannel,
        config: &Config,
    ) -> Result<Self, Error> {
        Self::builder(topic, channel).config(config).build()
    }

    /// A cloneable control handle.
    pub fn handle(&self) -> ConsumerHandle<R> {
        self.handle.clone()
    }

    /// Its control handle, borrowed: the handle's methods (connect, disconnect,
    /// `set_max_in_flight`, `stats`, `events`, ...) without a clone.
    pub fn as_handle(&self) -> &ConsumerHandle<R> {
        &self.handle
    }

    /// The next message, waiting as long as it takes; `None` once the consumer is stopped.
    pub fn recv(&mut self) -> Option<Message> {
        call(self.handle.0.runtime(), self.inner.recv())
    }

    /// The next message, waiting at most `timeout`: `Err(Timeout)` if none came,
    /// `Err(Disconnected)` once the consumer is stopped.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Message, RecvTimeoutError> {
        match call_for(self.handle.0.runtime(), self.inner.recv(), timeout) {
            Some(Some(m)) => Ok(m),
            Some(None) => Err(RecvTimeoutError::Disconnected),
            None => Err(RecvTimeoutError::Timeout),
        }
    }

    /// An iterator over the messages (blocking in `next`), ending once the consumer is
    /// stopped.
    pub fn iter(&mut self) -> Iter<'_, R> {
        Iter { consumer: self }
    }

    /// See [`ConsumerHandle::stop`]. Messages received but not yet taken with
    /// [`recv`](Self::recv) are requeued at once, so the drain does not wait for them.
    pub fn stop(&mut self) -> StopReport {
        self.stopped = true;
        let report = call(self.handle.0.runtime(), self.inner.stop());
        wait_ended(self.handle.0.runtime(), self.handle.0.ended());
        report
    }

    /// Runs `handler` on every message, on a pool of `concurrency` threads, until the consumer
    /// is stopped (through a [`ConsumerHandle`]); returns once every handler has returned and
    /// the consumer has stopped.
    pub fn run<H>(mut self, concurrency: usize, handler: H) -> StopReport
    where
        H: Fn(Message) -> Result<(), HandlerError> + Sync,
    {
        let handle = self.inner.handle();
        handle.warn_if_handlers_would_wait(concurrency);
        let handle = &handle;
        let shared = Mutex::new(&mut self);
        std::thread::scope(|scope| {
            for i in 0..concurrency.max(1) {
                let (shared, handler) = (&shared, &handler);
                let spawned = std::thread::Builder::new()
                    .name(format!("nsqb-handler-{i}"))
                    .spawn_scoped(scope, move || {
                        // One worker at a time waits for the next message.
                        let next = || shared.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        while let Some(mut msg) = next() {
                            let pending = msg.take_over();
                            // In its message's span: the handler's own lines name it.
                            let span = msg.span();
                            let run = span.in_scope(|| {
                                handle.as_handler(|| {
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        handler(msg)
                                    }))
                                })
                            });
                            pending.answer(&Outcome::caught(run));
                        }
                    });
                if let Err(e) = spawned {
                    handle.in_span(|| {
                        tracing::error!(error = %e, "could not start a handler thread");
                    });
                }
            }
        });
        // Every worker saw the stop; messages still queued are requeued at once.
        self.stop()
    }
}

impl<R: Adapter> Drop for Consumer<R> {
    fn drop(&mut self) {
        if !self.stopped {
            self.stop();
        }
    }
}

/// The iterator of [`Consumer::iter`]: blocks in `next` until a message arrives; ends once the
/// consumer is stopped.
#[derive(Debug)]
pub struct Iter<'a, R: Adapter> {
    consumer: &'a mut Consumer<R>,
}

impl<R: Adapter> Iterator for Iter<'_, R> {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        self.consumer.recv()
    }
}

/// The owning iterator of a [`Consumer`] (`for msg in consumer`); dropping it stops the
/// consumer.
#[derive(Debug)]
pub struct IntoIter<R: Adapter> {
    consumer: Consumer<R>,
}

impl<R: Adapter> Iterator for IntoIter<R> {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        self.consumer.recv()
    }
}

impl<R: Adapter> IntoIterator for Consumer<R> {
    type Item = Message;
    type IntoIter = IntoIter<R>;

    fn into_iter(self) -> IntoIter<R> {
        IntoIter { consumer: self }
    }
}

// -------------------------------------------------------------------------------- producer

/// The blocking API's producer on runtime `R`: nsq-blocking's `Producer` wraps it.
#[derive(Debug)]
pub struct Producer<R: Adapter> {
    inner: Arc<LastClone<R>>,
}

impl<R: Adapter> Clone for Producer<R> {
    fn clone(&self) -> Self {
        Producer {
            inner: self.inner.clone(),
        }
    }
}

/// Closes the producer when the last clone goes.
#[derive(Debug)]
struct LastClone<R: Adapter>(super::Producer<R>);

impl<R: Adapter> Drop for LastClone<R> {
    fn drop(&mut self) {
        self.0.request_close();
        wait_ended(self.0.runtime(), self.0.ended());
    }
}

impl<R: Adapter> From<super::Producer<R>> for Producer<R> {
    fn from(inner: super::Producer<R>) -> Self {
        Producer {
            inner: Arc::new(LastClone(inner)),
        }
    }
}

impl<R: Adapter> BuildProducer for Producer<R> {}

impl<R: Adapter> sealed::BuildProducer for Producer<R> {
    fn build(setup: sealed::ProducerParts) -> Result<Self, Error> {
        <super::Producer<R> as sealed::BuildProducer>::build(setup).map(Producer::from)
    }
}

impl<R: Adapter> Producer<R> {
    fn p(&self) -> &super::Producer<R> {
        &self.inner.0
    }

    /// A builder (several nsqd addresses, configuration); `build` starts the driver thread.
    pub fn builder() -> super::ProducerBuilder<Self> {
        super::ProducerBuilder::new()
    }

    /// See the async [`Producer::connect`](super::Producer::connect).
    pub fn connect(addr: &str, config: &Config) -> Result<Producer<R>, Error> {
        // Wrapped before the ping: a producer that fails it is closed, and waited for, on drop.
        let producer = Producer::from(super::Producer::<R>::start_one(addr, config)?);
        producer.ping()?;
        Ok(producer)
    }

    /// See the async [`Producer::publish`](super::Producer::publish).
    pub fn publish(&self, topic: impl IntoTopic, body: impl Into<Bytes>) -> Result<(), Error> {
        call(self.p().runtime(), self.p().publish(topic, body))
    }

    /// See the async [`Producer::multi_publish`](super::Producer::multi_publish).
    pub fn multi_publish<I, B>(&self, topic: impl IntoTopic, bodies: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        call(self.p().runtime(), self.p().multi_publish(topic, bodies))
    }

    /// See the async [`Producer::deferred_publish`](super::Producer::deferred_publish).
    pub fn deferred_publish(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        call(
            self.p().runtime(),
            self.p().deferred_publish(topic, delay, body),
        )
    }

    /// Publishes one message and returns at once with a [`PendingPublish`] of its result
    /// (go-nsq's `PublishAsync`): one thread can keep thousands of publishes under way. See
    /// the async [`Producer::publish_async`](super::Producer::publish_async).
    pub fn publish_async(
        &self,
        topic: impl IntoTopic,
        body: impl Into<Bytes>,
    ) -> Result<PendingPublish<R>, Error> {
        self.p().publish_async(topic, body).map(|p| self.pending(p))
    }

    /// Publishes several messages atomically and returns at once (go-nsq's
    /// `MultiPublishAsync`; see [`publish_async`](Self::publish_async)).
    pub fn multi_publish_async<I, B>(
        &self,
        topic: impl IntoTopic,
        bodies: I,
    ) -> Result<PendingPublish<R>, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        self.p()
            .multi_publish_async(topic, bodies)
            .map(|p| self.pending(p))
    }

    /// Publishes one message delivered after `delay` and returns at once (go-nsq's
    /// `DeferredPublishAsync`; see [`publish_async`](Self::publish_async)).
    pub fn deferred_publish_async(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<PendingPublish<R>, Error> {
        self.p()
            .deferred_publish_async(topic, delay, body)
            .map(|p| self.pending(p))
    }

    fn pending(&self, publish: super::PendingPublish<R>) -> PendingPublish<R> {
        PendingPublish(publish, self.p().runtime().clone())
    }

    /// See the async [`Producer::ping`](super::Producer::ping).
    pub fn ping(&self) -> Result<(), Error> {
        call(self.p().runtime(), self.p().ping())
    }

    /// See the async [`Producer::connect_to_nsqd`](super::Producer::connect_to_nsqd).
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        call(self.p().runtime(), self.p().connect_to_nsqd(addr))
    }

    /// See the async [`Producer::stats`](super::Producer::stats).
    pub fn stats(&self) -> ProducerStats {
        self.p().stats()
    }

    /// Graceful close for every clone (see the async [`Producer::close`](super::Producer::close)); returns once every
    /// connection is closed and the driver has ended.
    pub fn close(&self) {
        call(self.p().runtime(), self.p().close());
        wait_ended(self.p().runtime(), self.p().ended());
    }
}

/// The blocking API's publish under way, on runtime `R`.
#[derive(Debug)]
#[must_use = "a publish's result is only known through its PendingPublish"]
pub struct PendingPublish<R: Adapter>(super::PendingPublish<R>, R);

impl<R: Adapter> PendingPublish<R> {
    /// Waits for the publish's result.
    pub fn wait(self) -> Result<(), Error> {
        let PendingPublish(publish, rt) = self;
        call(&rt, publish)
    }

    /// Waits at most `timeout` for the publish's result: `None` if it is not known by then
    /// (the publish goes on; wait again later).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<(), Error>> {
        let PendingPublish(publish, rt) = self;
        call_for(rt, publish, timeout)
    }

    /// The result if it is known, without waiting.
    pub fn try_result(&mut self) -> Option<Result<(), Error>> {
        self.0.try_result()
    }
}

// ------------------------------------------------------------------------------- HTTP APIs

/// The blocking API's HTTP client, on runtime `R`.
#[derive(Debug, Clone)]
pub struct HttpClient<R>(super::HttpClient<R>);

impl<R: Adapter> HttpClient<R> {
    /// See the async [`HttpClient::new`](super::HttpClient::new).
    pub fn new(addr: &str) -> Result<HttpClient<R>, Error> {
        super::HttpClient::new(addr).map(HttpClient)
    }

    /// See the async [`HttpClient::with_config`](super::HttpClient::with_config).
    pub fn with_config(addr: &str, config: super::HttpConfig) -> Result<HttpClient<R>, Error> {
        super::HttpClient::with_config(addr, config).map(HttpClient)
    }

    /// The address (`host:port`).
    pub fn addr(&self) -> &str {
        self.0.addr()
    }

    /// Makes `call` and returns its typed reply.
    pub fn call<T: Send + 'static>(&self, call: nsq_proto::http::Call<T>) -> Result<T, Error> {
        block_on(self.0.call(call))
    }
}

/// The blocking API's cluster operations, on runtime `R`.
#[derive(Debug, Clone)]
pub struct Cluster<R>(super::Cluster<R>);

impl<R: Adapter> Cluster<R> {
    /// See the async [`Cluster::new`](super::Cluster::new).
    pub fn new<I, S>(lookupd_http_addresses: I) -> Result<Cluster<R>, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        super::Cluster::new(lookupd_http_addresses).map(Cluster)
    }

    /// See the async [`Cluster::with_config`](super::Cluster::with_config).
    pub fn with_config<I, S>(
        lookupd_http_addresses: I,
        config: super::HttpConfig,
    ) -> Result<Cluster<R>, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        super::Cluster::with_config(lookupd_http_addresses, config).map(Cluster)
    }

    /// See the async [`Cluster::from_nsqds`](super::Cluster::from_nsqds).
    pub fn from_nsqds<I, S>(
        nsqd_http_addresses: I,
        config: super::HttpConfig,
    ) -> Result<Cluster<R>, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        super::Cluster::from_nsqds(nsqd_http_addresses, config).map(Cluster)
    }

    /// See the async [`Cluster::topics`](super::Cluster::topics).
    pub fn topics(&self) -> ClusterReport<Vec<String>> {
        block_on(self.0.topics())
    }

    /// See the async [`Cluster::channels`](super::Cluster::channels).
    pub fn channels(&self, topic: &Topic) -> ClusterReport<Vec<String>> {
        block_on(self.0.channels(topic))
    }

    /// See the async [`Cluster::nodes`](super::Cluster::nodes).
    pub fn nodes(&self) -> ClusterReport<Vec<nsq_proto::http::lookupd::Node>> {
        block_on(self.0.nodes())
    }

    /// See the async [`Cluster::producers`](super::Cluster::producers).
    pub fn producers(&self, topic: &Topic) -> ClusterReport<Vec<nsq_proto::LookupProducer>> {
        block_on(self.0.producers(topic))
    }

    /// See the async [`Cluster::topic_stats`](super::Cluster::topic_stats).
    pub fn topic_stats(&self, topic: &Topic) -> ClusterReport<super::TopicStatsReport> {
        block_on(self.0.topic_stats(topic))
    }

    /// See the async [`Cluster::channel_stats`](super::Cluster::channel_stats).
    pub fn channel_stats(
        &self,
        topic: &Topic,
        channel: &Channel,
    ) -> ClusterReport<super::ChannelStatsReport> {
        block_on(self.0.channel_stats(topic, channel))
    }

    /// See the async [`Cluster::create_topic`](super::Cluster::create_topic).
    pub fn create_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.create_topic(topic))
    }

    /// See the async [`Cluster::create_channel`](super::Cluster::create_channel).
    pub fn create_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.create_channel(topic, channel))
    }

    /// See the async [`Cluster::delete_topic`](super::Cluster::delete_topic).
    pub fn delete_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.delete_topic(topic))
    }

    /// See the async [`Cluster::delete_channel`](super::Cluster::delete_channel).
    pub fn delete_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.delete_channel(topic, channel))
    }

    /// See the async [`Cluster::pause_topic`](super::Cluster::pause_topic).
    pub fn pause_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.pause_topic(topic))
    }

    /// See the async [`Cluster::unpause_topic`](super::Cluster::unpause_topic).
    pub fn unpause_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.unpause_topic(topic))
    }

    /// See the async [`Cluster::empty_topic`](super::Cluster::empty_topic).
    pub fn empty_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.empty_topic(topic))
    }

    /// See the async [`Cluster::pause_channel`](super::Cluster::pause_channel).
    pub fn pause_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.pause_channel(topic, channel))
    }

    /// See the async [`Cluster::unpause_channel`](super::Cluster::unpause_channel).
    pub fn unpause_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.unpause_channel(topic, channel))
    }

    /// See the async [`Cluster::empty_channel`](super::Cluster::empty_channel).
    pub fn empty_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.empty_channel(topic, channel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a test of real waits: another thread wakes the parked one"
    )]
    fn block_on_runs_to_completion_or_to_the_deadline() {
        assert_eq!(block_on(async { 7 }), 7);
        let start = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(
            block_on_until(never, Some(start + Duration::from_millis(20))),
            None
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        // A waker from another thread unparks it.
        let (tx, rx) = super::super::sync::oneshot();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(5);
        });
        assert!(matches!(block_on(rx.recv()), Ok(5)));
        t.join().unwrap();
    }
}

// ------------------------------------------------------------------------------------ events

/// A consumer's event stream, blocking: see the async [`Events`](super::Events). Also an
/// iterator, blocking in `next`, that ends when the consumer has stopped.
#[derive(Debug)]
pub struct Events(super::Events);

impl Events {
    /// The next event, waiting for it; `None` once the consumer has stopped and every event
    /// was read.
    pub fn recv(&mut self) -> Option<Event> {
        block_on(self.0.recv())
    }

    /// The next event, waiting at most `timeout`: `Err(Timeout)` if none came,
    /// `Err(Disconnected)` once the consumer has stopped and every event was read.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        match block_on_for(self.0.recv(), timeout) {
            Some(Some(e)) => Ok(e),
            Some(None) => Err(RecvTimeoutError::Disconnected),
            None => Err(RecvTimeoutError::Timeout),
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Result<Event, TryRecvError> {
        self.0.try_recv()
    }
}

impl Iterator for Events {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.recv()
    }
}
