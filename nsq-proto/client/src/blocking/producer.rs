//! The blocking [`Producer`], its [`PendingPublish`] and [`ProducerBuilder`].

use super::{call, call_for, wait_ended};
use crate::runtime::{Calls, Runtime};
use crate::{Error, IntoTopic};
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::producer::{ProducerConfig, ProducerStats};
use std::sync::Arc;
use std::time::Duration;

/// Publishes to one or more nsqd; each call blocks the calling thread until its own result
/// is known.
///
/// Cheap to clone (`Send + Sync`): clones share one driver and its connections; publishes
/// made concurrently from many threads are pipelined and leave in one write per wake-up of
/// the driver. Single publishes to one topic that wait at the same moment leave as one MPUB,
/// each still with its own result (natural batching; `producer_batching` turns it off). A
/// publish nsqd refuses (too big, say) fails alone. With several nsqd addresses, publishes
/// go to a healthy one (failover by default, round-robin with
/// [`Routing::RoundRobin`](nsq_proto::producer::Routing)); while no nsqd is reachable they
/// fail fast with [`Error::NoServerAvailable`].
///
/// [`Producer::connect`] connects to one nsqd; [`Producer::builder`] takes several. Dropping
/// the last clone closes the producer like [`close`](Self::close) (flushing what is
/// outstanding) and waits for its threads.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<LastClone>,
}

/// Closes the producer when the last clone goes.
#[derive(Debug)]
struct LastClone(crate::Producer);

impl Drop for LastClone {
    fn drop(&mut self) {
        self.0.request_close();
        wait_ended(self.0.runtime(), self.0.ended());
    }
}

impl Producer {
    fn from_async(inner: crate::Producer) -> Self {
        Producer {
            inner: Arc::new(LastClone(inner)),
        }
    }

    fn p(&self) -> &crate::Producer {
        &self.inner.0
    }

    fn rt(&self) -> &dyn Runtime {
        self.p().runtime()
    }

    /// A builder (several nsqd addresses, configuration); its
    /// [`build`](ProducerBuilder::build) starts the producer, which connects in the
    /// background.
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::new()
    }

    /// Connects to one nsqd and waits until the connection is ready, or fails like a publish
    /// would: [`Error::Misconfigured`] when the address cannot work as configured (not nsqd's
    /// TCP port, a TLS mismatch, refused credentials), else [`Error::NoServerAvailable`].
    /// Works from any thread; starts the client's driver thread.
    pub fn connect(addr: &str, config: &Config) -> Result<Producer, Error> {
        // Wrapped before the ping: a producer that fails it is closed, and waited for, on drop.
        let producer =
            Producer::from_async(crate::Producer::start_one(addr, config, Calls::Blocking)?);
        producer.ping()?;
        Ok(producer)
    }

    /// Publishes one message (PUB) and waits for nsqd's answer.
    pub fn publish(&self, topic: impl IntoTopic, body: impl Into<Bytes>) -> Result<(), Error> {
        call(self.rt(), self.p().publish(topic, body))
    }

    /// Publishes several messages atomically (MPUB) and waits for nsqd's answer.
    pub fn multi_publish<I, B>(&self, topic: impl IntoTopic, bodies: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        call(self.rt(), self.p().multi_publish(topic, bodies))
    }

    /// Publishes one message delivered after `delay` (DPUB) and waits for nsqd's answer.
    pub fn deferred_publish(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        call(self.rt(), self.p().deferred_publish(topic, delay, body))
    }

    /// Publishes one message (PUB) and returns at once with a [`PendingPublish`] of its
    /// result (go-nsq's `PublishAsync`): one thread can keep thousands of publishes under
    /// way. Results come in publish order per nsqd. Dropping the [`PendingPublish`] does not
    /// cancel the publish.
    ///
    /// Refused at once with [`Backpressure::Unanswered`](crate::Backpressure::Unanswered)
    /// while `max_pending_publishes` publishes of this producer await their result (and with
    /// the errors of the name or [`Error::Closed`]); every other error comes through the
    /// [`PendingPublish`].
    pub fn publish_async(
        &self,
        topic: impl IntoTopic,
        body: impl Into<Bytes>,
    ) -> Result<PendingPublish, Error> {
        self.p().publish_async(topic, body).map(|p| self.pending(p))
    }

    /// Publishes several messages atomically (MPUB) and returns at once (see
    /// [`publish_async`](Self::publish_async); go-nsq's `MultiPublishAsync`).
    pub fn multi_publish_async<I, B>(
        &self,
        topic: impl IntoTopic,
        bodies: I,
    ) -> Result<PendingPublish, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        self.p()
            .multi_publish_async(topic, bodies)
            .map(|p| self.pending(p))
    }

    /// Publishes one message delivered after `delay` (DPUB) and returns at once (see
    /// [`publish_async`](Self::publish_async); go-nsq's `DeferredPublishAsync`).
    pub fn deferred_publish_async(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<PendingPublish, Error> {
        self.p()
            .deferred_publish_async(topic, delay, body)
            .map(|p| self.pending(p))
    }

    fn pending(&self, publish: crate::PendingPublish) -> PendingPublish {
        PendingPublish {
            publish,
            producer: self.inner.clone(),
        }
    }

    /// Returns once a connection is ready (at once if one is); fails fast with
    /// [`Error::NoServerAvailable`] when every nsqd is down.
    pub fn ping(&self) -> Result<(), Error> {
        call(self.rt(), self.p().ping())
    }

    /// Adds an nsqd TCP address at runtime (connected at once; last in failover order).
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        call(self.rt(), self.p().connect_to_nsqd(addr))
    }

    /// A snapshot of the counters ([`ProducerStats`], updated after every wake-up of the
    /// driver).
    pub fn stats(&self) -> ProducerStats {
        self.p().stats()
    }

    /// Graceful close for every clone: no new publishes; outstanding ones are sent and
    /// answered (bounded by `drain_timeout`); then every connection is closed. Returns once
    /// the driver has ended.
    pub fn close(&self) {
        call(self.rt(), self.p().close());
        wait_ended(self.rt(), self.p().ended());
    }
}

/// A publish under way, made by [`Producer::publish_async`] (or its `multi_` and `deferred_`
/// variants). Dropping it does not cancel the publish, whose result is then not known.
#[derive(Debug)]
#[must_use = "a publish's result is only known through its PendingPublish"]
pub struct PendingPublish {
    publish: crate::PendingPublish,
    /// Its producer, whose runtime the wait goes through (and which stays open for it).
    producer: Arc<LastClone>,
}

impl PendingPublish {
    /// Waits for the publish's result (driving the client meanwhile, as every blocking call
    /// does).
    pub fn wait(self) -> Result<(), Error> {
        let PendingPublish { publish, producer } = self;
        call(producer.0.runtime(), publish)
    }

    /// Waits at most `timeout` for the publish's result: `None` if it is not known by then
    /// (the publish goes on; wait again later).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<(), Error>> {
        call_for(self.producer.0.runtime(), &mut self.publish, timeout)
    }

    /// The result if it is known, without waiting.
    pub fn try_result(&mut self) -> Option<Result<(), Error>> {
        self.publish.try_result()
    }
}

/// Builds a [`Producer`] with several nsqd addresses (made by [`Producer::builder`]). Every
/// setter is infallible; invalid options and addresses are reported by
/// [`build`](Self::build).
#[derive(Debug, Default)]
pub struct ProducerBuilder(crate::ProducerBuilder);

impl ProducerBuilder {
    /// A builder with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it) and no nsqd address yet; the same as
    /// [`Producer::builder`].
    pub fn new() -> Self {
        ProducerBuilder(crate::ProducerBuilder::new())
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(self, config: &Config) -> Self {
        ProducerBuilder(self.0.config(config))
    }

    /// The core's own configuration struct ([`ProducerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(self, config: ProducerConfig) -> Self {
        ProducerBuilder(self.0.core_config(config))
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`). Wins over `config`'s, given before it or after.
    pub fn write_timeout(self, timeout: Duration) -> Self {
        ProducerBuilder(self.0.write_timeout(timeout))
    }

    /// An nsqd TCP address (`host:port`); the order of addition is the failover order.
    pub fn nsqd(self, addr: impl Into<String>) -> Self {
        ProducerBuilder(self.0.nsqd(addr))
    }

    /// Several nsqd TCP addresses.
    pub fn nsqds<I, S>(self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ProducerBuilder(self.0.nsqds(addrs))
    }

    /// Seed of the core's RNG (reconnect jitter); random by default.
    pub fn seed(self, seed: u64) -> Self {
        ProducerBuilder(self.0.seed(seed))
    }

    /// The runtime the producer's driver runs on, instead of a thread and poller of the
    /// client's own: a runtime of your own (see [`Runtime`]).
    pub fn runtime(self, runtime: Arc<dyn Runtime>) -> Self {
        ProducerBuilder(self.0.runtime(runtime))
    }

    /// Validates the configuration and addresses and starts the producer; it connects in the
    /// background (publishes wait for a connection, or fail fast with
    /// [`Error::NoServerAvailable`] while no nsqd is reachable). Works from any thread;
    /// starts the client's driver thread.
    pub fn build(self) -> Result<Producer, Error> {
        crate::producer::start(self.0.into_setup(), Calls::Blocking).map(Producer::from_async)
    }
}
