//! The tokio [`Producer`]: a driver task around [`nsq_proto::Producer`].

use crate::Tokio;
use crate::net::{self, LookupEvent, Net, NetEvent, Timer};
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::client::{
    Error, IntoTopic, ProducerSetup, PublishRequest, Replies, log_producer_event,
};
use nsq_proto::driver::{ConnId, LookupdRequestId};
use nsq_proto::producer::{ProducerEvent, ProducerStats};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

type Reply = oneshot::Sender<Result<(), Error>>;

enum Input {
    Net(NetEvent<ConnId>),
    Lookup(LookupEvent<LookupdRequestId>),
    Request(PublishRequest, Reply),
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
/// Cheap to clone (`Send + Sync`): clones share one driver task and its connections. Each call
/// resolves with its own result; publishes issued concurrently from many tasks are pipelined
/// and leave in one write per wake-up of the driver. Single publishes to one topic that wait at
/// the same moment (made concurrently, or while the connection awaits replies) leave as one
/// MPUB, each still with its own result (natural batching; `producer_batching` turns it off). A
/// publish nsqd refuses (too big, say) fails alone: the connection nsqd then closes is replaced
/// at once, and publishes made meanwhile wait for it (at most `publish_timeout`). With several
/// nsqd addresses, publishes go to a healthy one (failover by default, round-robin with
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

/// Builds a [`Producer`] with several nsqd addresses (made by [`Producer::builder`]).
/// `build` starts the driver task: it must be called within a tokio runtime.
pub type ProducerBuilder = nsq_proto::client::ProducerBuilder<Tokio>;

/// Validates `setup` and starts the driver task on the current tokio runtime (connecting in
/// the background; [`ProducerBuilder::build`]).
pub(crate) fn start(setup: ProducerSetup) -> Result<Producer, Error> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let start = setup.start(Instant::now(), net::random_seed)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let stats = Arc::new(Mutex::new(start.core.stats()));
    let driver = Driver {
        core: start.core,
        rx,
        io: Net::new(
            tx.clone(),
            wrap_net,
            wrap_lookup,
            start.dial_timeout,
            start.write_timeout,
        ),
        replies: Replies::default(),
        close_waiters: Vec::new(),
        stats: stats.clone(),
        closed: false,
    };
    runtime.spawn(driver.run().instrument(start.span));
    Ok(Producer {
        inner: Arc::new(Inner { tx, stats }),
    })
}

impl Producer {
    /// A builder (several nsqd addresses, configuration). Its
    /// [`build`](ProducerBuilder::build) starts the driver task on the current tokio runtime:
    /// it must be called within one (else [`Error::NoRuntime`]).
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::new()
    }

    /// Connects to one nsqd and waits until the connection is ready (or fails like a publish
    /// would: [`Error::NoServerAvailable`], or [`Error::TlsRequired`] when nsqd requires TLS
    /// and `config` has none).
    pub async fn connect(addr: &str, config: &Config) -> Result<Producer, Error> {
        let producer = Producer::builder().config(config).nsqd(addr).build()?;
        producer.ping().await?;
        Ok(producer)
    }

    async fn request(&self, request: PublishRequest) -> Result<(), Error> {
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
        self.request(PublishRequest::publish(topic, body)?).await
    }

    /// Publishes several messages atomically (MPUB) and waits for nsqd's answer.
    pub async fn multi_publish<I, B>(&self, topic: impl IntoTopic, bodies: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        self.request(PublishRequest::multi_publish(topic, bodies)?)
            .await
    }

    /// Publishes one message delivered after `delay` (DPUB) and waits for nsqd's answer.
    pub async fn deferred_publish(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        self.request(PublishRequest::deferred_publish(topic, delay, body)?)
            .await
    }

    /// Resolves once a connection is ready (at once if one is); fails fast with
    /// [`Error::NoServerAvailable`] when every nsqd is down.
    pub async fn ping(&self) -> Result<(), Error> {
        self.request(PublishRequest::Ping).await
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
    /// answered (bounded by `drain_timeout`); then every connection is closed.
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
    io: Net<Input>,
    replies: Replies<Reply>,
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
            for (reply, result) in self.replies.take_resolved() {
                let _ = reply.send(result);
            }
        }
        for (reply, result) in self.replies.take_resolved() {
            let _ = reply.send(result);
        }
        self.io.close_all();
        for reply in self.replies.take_all() {
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
                if let Err((reply, e)) = self.replies.submit(&mut self.core, now, &request, reply) {
                    let _ = reply.send(Err(e));
                }
            }
            Input::Net(ev) => self.io.net(&mut self.core, now, ev),
            Input::Lookup(ev) => self.io.lookup(&mut self.core, now, ev),
            Input::AddNsqd(addr, reply) => {
                let _ = reply.send(self.core.add_nsqd(now, &addr).map_err(Error::from));
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
                self.event(&event);
            }
            if !progressed {
                break;
            }
        }
    }

    fn event(&mut self, event: &ProducerEvent) {
        log_producer_event(event);
        if !self.replies.resolve(event) && matches!(event, ProducerEvent::Closed) {
            self.closed = true;
        }
    }
}
