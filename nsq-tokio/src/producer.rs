//! The tokio [`Producer`]: a driver task around [`nsq_proto::Producer`].

use crate::error::{Error, IntoTopic};
use crate::net::{self, Io, LookupEvent, NetEvent, Timer};
use bytes::Bytes;
use nsq_proto::consumer::LookupdRequestId;
use nsq_proto::producer::{
    ConnId, PingId, ProducerConfig, ProducerError, ProducerEvent, ProducerStats, PublishFailure,
    PublishId,
};
use nsq_proto::{Config, Topic};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<(), Error>>;

enum Request {
    Publish(Topic, Bytes),
    Multi(Topic, Vec<Bytes>),
    Deferred(Topic, Duration, Bytes),
    Ping,
}

enum Input {
    Net(NetEvent<ConnId>),
    Lookup(LookupEvent<LookupdRequestId>),
    Request(Request, Reply),
    AddNsqd(String, Reply),
    Close(oneshot::Sender<()>),
    /// Every handle is gone: close gracefully.
    Dropped,
}

fn wrap_net(e: NetEvent<ConnId>) -> Input {
    Input::Net(e)
}

/// The producer never queries nsqlookupd; the shared IO layer needs the mapping anyway.
fn wrap_lookup(e: LookupEvent<LookupdRequestId>) -> Input {
    Input::Lookup(e)
}

struct Inner {
    tx: mpsc::UnboundedSender<Input>,
    stats: Arc<Mutex<ProducerStats>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Input::Dropped);
    }
}

/// Publishes to one or more nsqd.
///
/// Cheap to clone (`Send + Sync`): clones share one driver task and its connections. Each
/// call resolves with its own result; publishes issued concurrently from many tasks are
/// pipelined and leave in one write per wake-up of the driver. With several nsqd addresses,
/// publishes go to a healthy one (failover by default, round-robin with
/// [`Routing::RoundRobin`](nsq_proto::producer::Routing)); while no nsqd is reachable they fail
/// fast with [`Error::NoServerAvailable`].
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Builds a [`Producer`] with several nsqd addresses.
#[derive(Debug)]
pub struct ProducerBuilder {
    config: Result<ProducerConfig, Error>,
    write_timeout: Duration,
    nsqd: Vec<String>,
    seed: Option<u64>,
}

impl Default for ProducerBuilder {
    fn default() -> Self {
        ProducerBuilder {
            config: Ok(ProducerConfig::default()),
            write_timeout: Duration::from_secs(1),
            nsqd: Vec::new(),
            seed: None,
        }
    }
}

impl ProducerBuilder {
    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here; errors are reported by [`build`](Self::build).
    pub fn config(mut self, config: &Config) -> Self {
        self.config = config.producer_config(std::fs::read).map_err(Error::from);
        self.write_timeout = config.write_timeout;
        self
    }

    /// The core's own configuration struct ([`ProducerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(mut self, config: ProducerConfig) -> Self {
        self.config = Ok(config);
        self
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// An nsqd TCP address (`host:port`); the order of addition is the failover order.
    pub fn nsqd(mut self, addr: impl Into<String>) -> Self {
        self.nsqd.push(addr.into());
        self
    }

    /// Several nsqd TCP addresses.
    pub fn nsqds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nsqd.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Seed of the core's RNG (reconnect jitter); random by default.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Validates the configuration and addresses and starts the driver task (connecting in
    /// the background). Must be called within a tokio runtime.
    pub fn build(self) -> Result<Producer, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let config = self.config?;
        let dial_timeout = config.connect_timeout;
        let mut core = nsq_proto::Producer::new(config, self.seed.unwrap_or_else(net::random_seed))
            .map_err(producer_error)?;
        let now = Instant::now();
        for a in &self.nsqd {
            core.add_nsqd(now, a).map_err(producer_error)?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Mutex::new(core.stats()));
        let driver = Driver {
            core,
            rx,
            // The core enforces its own connect timeout; the socket task's only bounds it.
            io: Io::new(
                tx.clone(),
                wrap_net,
                wrap_lookup,
                dial_timeout + Duration::from_secs(1),
                self.write_timeout,
            ),
            publishes: BTreeMap::new(),
            pings: BTreeMap::new(),
            close_waiters: Vec::new(),
            stats: stats.clone(),
            closed: false,
        };
        runtime.spawn(driver.run());
        Ok(Producer {
            inner: Arc::new(Inner { tx, stats }),
        })
    }
}

fn producer_error(e: ProducerError) -> Error {
    match e {
        ProducerError::Closed => Error::Closed,
        ProducerError::TooManyOutstanding { limit } => {
            Error::Backpressure(format!("{limit} publishes are already outstanding"))
        }
        ProducerError::PendingQueueFull { limit } => {
            Error::Backpressure(format!("{limit} publishes already wait for a connection"))
        }
        e => Error::InvalidInput(e.to_string()),
    }
}

fn publish_failure(f: PublishFailure) -> Error {
    match f {
        PublishFailure::Server(e) => Error::Server(e),
        PublishFailure::ConnectionLost(r) => Error::ConnectionLost(r.to_string()),
        PublishFailure::TimedOut { .. } => Error::Timeout,
        PublishFailure::NoServerAvailable { last_error } => Error::NoServerAvailable(last_error),
        e => Error::InvalidInput(e.to_string()),
    }
}

impl Producer {
    /// A builder (several nsqd addresses, configuration).
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::default()
    }

    /// Connects to one nsqd and waits until the connection is ready (or fails like a publish
    /// would: [`Error::NoServerAvailable`]).
    pub async fn connect(addr: &str, config: &Config) -> Result<Producer, Error> {
        let producer = Producer::builder().config(config).nsqd(addr).build()?;
        producer.ping().await?;
        Ok(producer)
    }

    async fn request(&self, request: Request) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Input::Request(request, tx))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Publishes one message (PUB) and waits for nsqd's answer.
    pub async fn publish(
        &self,
        topic: impl IntoTopic,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        let topic = topic.into_topic()?;
        self.request(Request::Publish(topic, body.into())).await
    }

    /// Publishes several messages atomically (MPUB) and waits for nsqd's answer.
    pub async fn multi_publish<I, B>(&self, topic: impl IntoTopic, bodies: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        let topic = topic.into_topic()?;
        let bodies: Vec<Bytes> = bodies.into_iter().map(Into::into).collect();
        self.request(Request::Multi(topic, bodies)).await
    }

    /// Publishes one message delivered after `delay` (DPUB) and waits for nsqd's answer.
    pub async fn deferred_publish(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        let topic = topic.into_topic()?;
        self.request(Request::Deferred(topic, delay, body.into()))
            .await
    }

    /// Resolves once a connection is ready (at once if one is); fails fast with
    /// [`Error::NoServerAvailable`] when every nsqd is down.
    pub async fn ping(&self) -> Result<(), Error> {
        self.request(Request::Ping).await
    }

    /// Adds an nsqd TCP address at runtime (connected at once; last in failover order).
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Input::AddNsqd(addr.to_owned(), tx))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// A snapshot of the counters (updated after every wake-up of the driver).
    pub fn stats(&self) -> ProducerStats {
        *self
            .inner
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Graceful close for every clone: no new publishes; outstanding ones are sent and
    /// answered (bounded by `close_timeout`); then every connection is closed.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.inner.tx.send(Input::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

// ----------------------------------------------------------------------------------- driver

struct Driver {
    core: nsq_proto::Producer,
    rx: mpsc::UnboundedReceiver<Input>,
    io: Io<Input>,
    publishes: BTreeMap<PublishId, Reply>,
    pings: BTreeMap<PingId, Reply>,
    close_waiters: Vec<oneshot::Sender<()>>,
    stats: Arc<Mutex<ProducerStats>>,
    closed: bool,
}

const BATCH: usize = 1024;

impl Driver {
    async fn run(mut self) {
        let mut timer = Timer::new();
        let mut batch = Vec::with_capacity(BATCH);
        self.drain();
        self.io.flush();
        while !self.closed {
            let deadline = self.core.poll_timeout();
            if !timer.wait(deadline, &mut self.rx, &mut batch, BATCH).await {
                break;
            }
            let now = Instant::now();
            // Every queued request first, so concurrent publishes leave in one write.
            for input in batch.drain(..) {
                self.handle(now, input);
            }
            if self.core.poll_timeout().is_some_and(|t| t <= now) {
                self.core.handle_timeout(now);
            }
            self.drain();
            self.io.flush();
            *self
                .stats
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = self.core.stats();
        }
        self.io.close_all();
        for (_, reply) in std::mem::take(&mut self.publishes) {
            let _ = reply.send(Err(Error::Closed));
        }
        for (_, reply) in std::mem::take(&mut self.pings) {
            let _ = reply.send(Err(Error::Closed));
        }
        for w in self.close_waiters.drain(..) {
            let _ = w.send(());
        }
        tracing::debug!("producer closed");
    }

    fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Request(request, reply) => {
                let result = match &request {
                    Request::Publish(topic, body) => self.core.publish(now, topic, body),
                    Request::Multi(topic, bodies) => self.core.multi_publish(now, topic, bodies),
                    Request::Deferred(topic, delay, body) => {
                        self.core.deferred_publish(now, topic, *delay, body)
                    }
                    Request::Ping => match self.core.ping(now) {
                        Ok(id) => {
                            self.pings.insert(id, reply);
                            return;
                        }
                        Err(e) => {
                            let _ = reply.send(Err(producer_error(e)));
                            return;
                        }
                    },
                };
                match result {
                    Ok(id) => {
                        self.publishes.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(producer_error(e)));
                    }
                }
            }
            Input::Net(ev) => self.io.net(&mut self.core, now, ev),
            Input::Lookup(ev) => self.io.lookup(&mut self.core, now, ev),
            Input::AddNsqd(addr, reply) => {
                let _ = reply.send(self.core.add_nsqd(now, &addr).map_err(producer_error));
            }
            Input::Close(waiter) => {
                self.close_waiters.push(waiter);
                self.core.close(now);
            }
            Input::Dropped => self.core.close(now),
        }
    }

    /// Drains every action, then every event (the core's order).
    fn drain(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(action) = self.core.poll_action() {
                progressed = true;
                self.io.act(action);
            }
            while let Some(event) = self.core.poll_event() {
                progressed = true;
                self.event(event);
            }
            if !progressed {
                break;
            }
        }
    }

    fn event(&mut self, event: ProducerEvent) {
        match event {
            ProducerEvent::Published(id) => {
                if let Some(reply) = self.publishes.remove(&id) {
                    let _ = reply.send(Ok(()));
                }
            }
            ProducerEvent::PublishFailed(id, failure) => {
                tracing::debug!(%id, %failure, "publish failed");
                if let Some(reply) = self.publishes.remove(&id) {
                    let _ = reply.send(Err(publish_failure(failure)));
                }
            }
            ProducerEvent::PingOk(id) => {
                if let Some(reply) = self.pings.remove(&id) {
                    let _ = reply.send(Ok(()));
                }
            }
            ProducerEvent::PingFailed(id, failure) => {
                if let Some(reply) = self.pings.remove(&id) {
                    let _ = reply.send(Err(publish_failure(failure)));
                }
            }
            ProducerEvent::ConnectionReady { conn, addr } => {
                tracing::info!(%conn, %addr, "nsqd connection ready");
            }
            ProducerEvent::ConnectionClosed { conn, addr, reason } => {
                tracing::info!(%conn, %addr, %reason, "nsqd connection closed");
            }
            ProducerEvent::Closed => self.closed = true,
            other => tracing::debug!(?other, "producer event"),
        }
    }
}
