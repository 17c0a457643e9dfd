//! The blocking [`Producer`]: a driver thread around [`nsq_proto::Producer`].

use crate::Blocking;
use crate::driver::{BATCH, Input, Net};
use crate::net;
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::client::{
    Error, IntoTopic, ProducerSetup, PublishRequest, Replies, log_producer_event,
};
use nsq_proto::producer::{ProducerEvent, ProducerStats};
use std::fmt;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Reply = SyncSender<Result<(), Error>>;

enum Cmd {
    Request(PublishRequest, Reply),
    AddNsqd(String, Reply),
    Close,
    /// Every handle is gone: close gracefully.
    Dropped,
}

struct Inner {
    tx: Sender<Input<Cmd>>,
    stats: Arc<Mutex<ProducerStats>>,
    driver: Mutex<Option<JoinHandle<()>>>,
    done: Arc<Done>,
}

/// Set when the driver thread has finished (every socket closed, every thread joined), even
/// if it panicked, so that every caller of `close` waits for the same moment.
#[derive(Default)]
struct Done {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        while !*done {
            done = self.cv.wait(done).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Marks the driver done when its thread ends (normally or by a panic).
struct DoneGuard(Arc<Done>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}

impl Inner {
    /// Waits for the driver thread (it exits once the core has closed) and joins it.
    fn join(&self) {
        let handle = self
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = &handle {
            if h.thread().id() == std::thread::current().id() {
                return;
            }
        }
        self.done.wait();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Input::Cmd(Cmd::Dropped));
        self.join();
    }
}

/// Publishes to one or more nsqd.
///
/// Cheap to clone (`Send + Sync`): clones share one driver thread and its connections. Each
/// call blocks until its own result is known; publishes issued concurrently from many threads
/// are pipelined and leave in one write per wake-up of the driver. Single publishes to one
/// topic that wait at the same moment (made concurrently, or while the connection awaits
/// replies) leave as one MPUB, each still with its own result (natural batching;
/// `producer_batching` turns it off). A publish nsqd refuses (too big, say) fails alone: the
/// connection nsqd then closes is replaced at once, and publishes made meanwhile wait for it
/// (at most `publish_timeout`). With several nsqd addresses, publishes go to a healthy one
/// (failover by default, round-robin with
/// [`Routing::RoundRobin`](nsq_proto::producer::Routing)); while no nsqd is reachable they fail
/// fast with [`Error::NoServerAvailable`].
///
/// Dropping the last clone closes the producer like [`close`](Self::close) (flushing what is
/// outstanding) and waits for its threads.
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
/// `build` starts the driver thread.
pub type ProducerBuilder = nsq_proto::client::ProducerBuilder<Blocking>;

/// Validates `setup` and starts the driver thread (connecting in the background;
/// [`ProducerBuilder::build`]).
pub(crate) fn start(setup: ProducerSetup) -> Result<Producer, Error> {
    let start = setup.start(Instant::now(), net::random_seed)?;
    let core = start.core;
    let (tx, rx) = mpsc::channel();
    let stats = Arc::new(Mutex::new(core.stats()));
    // The core enforces its own connect timeout; `start.dial_timeout` only bounds the
    // socket's. A producer never queries lookupd.
    let io = Net::new(
        tx.clone(),
        start.dial_timeout,
        start.write_timeout,
        Duration::from_secs(5),
    );
    let driver = Driver {
        core,
        io,
        replies: Replies::default(),
        stats: stats.clone(),
        closed: false,
    };
    let span = start.span;
    let done = Arc::new(Done::default());
    let thread_done = done.clone();
    let handle = std::thread::Builder::new()
        .name("nsqb-producer".into())
        .spawn(move || {
            let _done = DoneGuard(thread_done);
            let _enter = span.enter();
            driver.run(&rx);
        })
        .map_err(|e| Error::Spawn(e.to_string()))?;
    Ok(Producer {
        inner: Arc::new(Inner {
            tx,
            stats,
            driver: Mutex::new(Some(handle)),
            done,
        }),
    })
}

impl Producer {
    /// A builder (several nsqd addresses, configuration). Its
    /// [`build`](ProducerBuilder::build) starts the driver thread; it works from any thread.
    pub fn builder() -> ProducerBuilder {
        ProducerBuilder::new()
    }

    /// Connects to one nsqd and waits until the connection is ready (or fails like a publish
    /// would: [`Error::NoServerAvailable`], or [`Error::TlsRequired`] when nsqd requires TLS
    /// and `config` has none).
    pub fn connect(addr: &str, config: &Config) -> Result<Producer, Error> {
        let producer = Producer::builder().config(config).nsqd(addr).build()?;
        producer.ping()?;
        Ok(producer)
    }

    fn send(&self, cmd: Cmd) -> Result<(), Error> {
        self.inner
            .tx
            .send(Input::Cmd(cmd))
            .map_err(|_| Error::Closed)
    }

    fn request(&self, request: PublishRequest) -> Result<(), Error> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Cmd::Request(request, tx))?;
        // The core resolves every request (publish_timeout, reply_timeout, close_timeout);
        // a driver that is gone drops the sender.
        rx.recv().map_err(|_| Error::Closed)?
    }

    /// Publishes one message (PUB) and waits for nsqd's answer.
    pub fn publish(&self, topic: impl IntoTopic, body: impl Into<Bytes>) -> Result<(), Error> {
        self.request(PublishRequest::publish(topic, body)?)
    }

    /// Publishes several messages atomically (MPUB) and waits for nsqd's answer.
    pub fn multi_publish<I, B>(&self, topic: impl IntoTopic, bodies: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        self.request(PublishRequest::multi_publish(topic, bodies)?)
    }

    /// Publishes one message delivered after `delay` (DPUB) and waits for nsqd's answer.
    pub fn deferred_publish(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        self.request(PublishRequest::deferred_publish(topic, delay, body)?)
    }

    /// Returns once a connection is ready (at once if one is); fails fast with
    /// [`Error::NoServerAvailable`] when every nsqd is down.
    pub fn ping(&self) -> Result<(), Error> {
        self.request(PublishRequest::Ping)
    }

    /// Adds an nsqd TCP address at runtime (connected at once; last in failover order).
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Cmd::AddNsqd(addr.to_owned(), tx))?;
        rx.recv().map_err(|_| Error::Closed)?
    }

    /// A snapshot of the counters (updated after every wake-up of the driver).
    pub fn stats(&self) -> ProducerStats {
        *self
            .inner
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Graceful close for every clone: no new publishes; outstanding ones are sent and
    /// answered (bounded by `drain_timeout`); then every connection is closed and every
    /// thread joined. Returns when that is done.
    pub fn close(&self) {
        if self.send(Cmd::Close).is_ok() {
            self.inner.join();
        }
    }
}

// ----------------------------------------------------------------------------------- driver

struct Driver {
    core: nsq_proto::Producer,
    io: Net<Cmd>,
    replies: Replies<Reply>,
    stats: Arc<Mutex<ProducerStats>>,
    closed: bool,
}

impl Driver {
    fn run(mut self, rx: &Receiver<Input<Cmd>>) {
        let mut batch = Vec::with_capacity(BATCH);
        self.drain();
        self.io.flush();
        while !self.closed {
            if !Net::wait(rx, self.core.poll_timeout(), &mut batch) {
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
            *self.stats.lock().unwrap_or_else(PoisonError::into_inner) = self.core.stats();
            for (reply, result) in self.replies.take_resolved() {
                let _ = reply.send(result);
            }
        }
        for (reply, result) in self.replies.take_resolved() {
            let _ = reply.send(result);
        }
        for reply in self.replies.take_all() {
            let _ = reply.send(Err(Error::Closed));
        }
        self.io.shutdown();
        // Requests that raced with the close: refuse them so nobody waits.
        while let Ok(input) = rx.try_recv() {
            if let Input::Cmd(Cmd::Request(_, reply) | Cmd::AddNsqd(_, reply)) = input {
                let _ = reply.send(Err(Error::Closed));
            }
        }
        tracing::debug!("producer closed");
    }

    fn handle(&mut self, now: Instant, input: Input<Cmd>) {
        match input {
            Input::Cmd(Cmd::Request(request, reply)) => {
                if let Err((reply, e)) = self.replies.submit(&mut self.core, now, &request, reply) {
                    let _ = reply.send(Err(e));
                }
            }
            Input::Cmd(Cmd::AddNsqd(addr, reply)) => {
                let _ = reply.send(self.core.add_nsqd(now, &addr).map_err(Error::from));
            }
            Input::Cmd(Cmd::Close | Cmd::Dropped) => self.core.close(now),
            Input::Net(ev) => self.io.net_input(&mut self.core, now, ev),
            Input::Lookup(ev) => self.io.lookup_input(&mut self.core, now, ev),
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
