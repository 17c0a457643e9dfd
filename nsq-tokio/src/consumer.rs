//! The tokio [`Consumer`]: a driver task around [`nsq_proto::Consumer`].

use crate::error::{Error, IntoChannel, IntoTopic};
use crate::net::{self, Io, LookupEvent, NetEvent, Timer};
use bytes::Bytes;
use nsq_proto::consumer::{
    Action, ConnId, ConsumerConfig, ConsumerError, ConsumerEvent, ConsumerStats, LookupdRequestId,
};
use nsq_proto::{Config, MessageId, Topic};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Called (on the driver task, so keep it short) for every message delivered more than
/// `max_attempts` times; the message has already been finished.
pub type GiveUpHook = Arc<dyn Fn(&nsq_proto::Message) + Send + Sync>;

/// What [`Consumer::stop`] reports once every connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StopReport {
    /// Messages still unanswered when their connection closed (nsqd redelivers them).
    pub unanswered: usize,
}

// ------------------------------------------------------------------------------------ inputs

#[derive(Debug, Clone, Copy)]
enum AnswerKind {
    Finish,
    Requeue {
        delay: Option<Duration>,
        backoff: bool,
    },
    Touch,
}

/// A small `Copy` command answering one message: no allocation per answer.
#[derive(Debug, Clone, Copy)]
struct Answer {
    conn: ConnId,
    id: MessageId,
    attempts: u16,
    timestamp: i64,
    kind: AnswerKind,
}

enum Control {
    AddNsqd(String, oneshot::Sender<Result<(), ConsumerError>>),
    AddLookupd(String, oneshot::Sender<Result<(), ConsumerError>>),
    SetMaxInFlight(u32),
    Stop(oneshot::Sender<StopReport>),
    /// Every handle is gone: shut down gracefully.
    Dropped,
}

enum Input {
    Net(NetEvent<ConnId>),
    Lookup(LookupEvent<LookupdRequestId>),
    Answer(Answer),
    Control(Control),
}

fn wrap_net(e: NetEvent<ConnId>) -> Input {
    Input::Net(e)
}

fn wrap_lookup(e: LookupEvent<LookupdRequestId>) -> Input {
    Input::Lookup(e)
}

/// State shared by the driver and the handles.
struct Shared {
    tx: mpsc::UnboundedSender<Input>,
    stopping: AtomicBool,
    starved: AtomicBool,
    stats: Mutex<ConsumerStats>,
}

impl Shared {
    fn answer(&self, a: Answer) {
        // If the driver is gone every connection is closed: nsqd redelivers the message.
        let _ = self.tx.send(Input::Answer(a));
    }
}

/// What every message of one connection shares: one reference count per message.
struct ConnShared {
    addr: String,
    shared: Arc<Shared>,
}

/// Sends `Dropped` to the driver when the last user handle goes.
struct HandleGuard(Arc<Shared>);

impl Drop for HandleGuard {
    fn drop(&mut self) {
        let _ = self.0.tx.send(Input::Control(Control::Dropped));
    }
}

// ----------------------------------------------------------------------------------- message

/// A message delivered to this consumer. It answers itself: [`finish`](Self::finish),
/// [`requeue`](Self::requeue), [`requeue_without_backoff`](Self::requeue_without_backoff),
/// [`touch`](Self::touch).
///
/// A message dropped without an answer is requeued (without backoff, with the default delay
/// for its attempt count) and a warning is logged: it is never lost silently.
pub struct Message {
    inner: nsq_proto::Message,
    conn: ConnId,
    origin: Arc<ConnShared>,
    /// Answered, or answered by [`Consumer::run`] on the handler's behalf.
    done: bool,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.inner.id)
            .field("attempts", &self.inner.attempts)
            .field("timestamp", &self.inner.timestamp)
            .field("body_len", &self.inner.body.len())
            .field("nsqd", &self.origin.addr)
            .finish_non_exhaustive()
    }
}

impl Message {
    /// The message id.
    pub fn id(&self) -> MessageId {
        self.inner.id
    }

    /// The payload (a slice of the read buffer: no copy was made).
    pub fn body(&self) -> &Bytes {
        &self.inner.body
    }

    /// How many times nsqd delivered it, this delivery included.
    pub fn attempts(&self) -> u16 {
        self.inner.attempts
    }

    /// When it was published, in nanoseconds since the Unix epoch (nsqd's clock).
    pub fn timestamp(&self) -> i64 {
        self.inner.timestamp
    }

    /// The nsqd TCP address it came from.
    pub fn nsqd_address(&self) -> &str {
        &self.origin.addr
    }

    fn answer(&self, kind: AnswerKind) {
        self.origin.shared.answer(Answer {
            conn: self.conn,
            id: self.inner.id,
            attempts: self.inner.attempts,
            timestamp: self.inner.timestamp,
            kind,
        });
    }

    /// FIN: the message is done.
    pub fn finish(mut self) {
        self.done = true;
        self.answer(AnswerKind::Finish);
    }

    /// REQ with backoff: the message failed; nsqd redelivers it after `delay` (`None`: the
    /// configured default delay times the attempt count) and the consumer backs off.
    pub fn requeue(mut self, delay: Option<Duration>) {
        self.done = true;
        self.answer(AnswerKind::Requeue {
            delay,
            backoff: true,
        });
    }

    /// REQ without backoff: redeliver after `delay` (`None`: the default), without slowing the
    /// consumer down.
    pub fn requeue_without_backoff(mut self, delay: Option<Duration>) {
        self.done = true;
        self.answer(AnswerKind::Requeue {
            delay,
            backoff: false,
        });
    }

    /// TOUCH: asks nsqd for more time (another msg_timeout).
    pub fn touch(&self) {
        self.answer(AnswerKind::Touch);
    }

    /// Requeues a message the application never received: at once, without backoff.
    fn release(mut self) {
        self.done = true;
        self.answer(AnswerKind::Requeue {
            delay: Some(Duration::ZERO),
            backoff: false,
        });
    }

    /// The core's message (id, attempts, timestamp, body).
    pub fn as_proto(&self) -> &nsq_proto::Message {
        &self.inner
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if !self.done {
            tracing::warn!(
                msg = %self.inner.id,
                nsqd = %self.origin.addr,
                "message dropped without an answer: requeueing it"
            );
            self.answer(AnswerKind::Requeue {
                delay: None,
                backoff: false,
            });
        }
    }
}

// ----------------------------------------------------------------------------- handler errors

/// The error a [`Consumer::run`] handler returns: the message is requeued, by default with
/// backoff and the configured delay.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it, so `?` works in handlers.
pub struct HandlerError {
    source: Box<dyn std::error::Error + Send + Sync>,
    delay: Option<Duration>,
    backoff: bool,
}

impl HandlerError {
    /// A failure with a message.
    pub fn msg(message: impl fmt::Display) -> HandlerError {
        HandlerError {
            source: message.to_string().into(),
            delay: None,
            backoff: true,
        }
    }

    /// Requeue after exactly `delay` instead of the configured default.
    pub fn with_delay(mut self, delay: Duration) -> HandlerError {
        self.delay = Some(delay);
        self
    }

    /// Requeue without backing off (a failure of this message, not of the system).
    pub fn without_backoff(mut self) -> HandlerError {
        self.backoff = false;
        self
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError {
            source: Box::new(e),
            delay: None,
            backoff: true,
        }
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("source", &self.source)
            .field("delay", &self.delay)
            .field("backoff", &self.backoff)
            .finish()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

// ---------------------------------------------------------------------------------- builder

/// Builds a [`Consumer`]: topic, channel, configuration, addresses.
pub struct ConsumerBuilder {
    topic: Result<Topic, Error>,
    channel: Result<nsq_proto::Channel, Error>,
    config: Result<ConsumerConfig, Error>,
    max_in_flight: Option<u32>,
    give_up: Option<GiveUpHook>,
    nsqd: Vec<String>,
    lookupd: Vec<String>,
    seed: Option<u64>,
    dial_timeout: Duration,
    write_timeout: Duration,
}

impl fmt::Debug for ConsumerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("topic", &self.topic)
            .field("channel", &self.channel)
            .field("config", &self.config)
            .field("nsqd", &self.nsqd)
            .field("lookupd", &self.lookupd)
            .finish_non_exhaustive()
    }
}

impl ConsumerBuilder {
    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here; errors are reported by [`build`](Self::build).
    pub fn config(mut self, config: &Config) -> Self {
        self.config = config.consumer_config(std::fs::read).map_err(Error::from);
        self.dial_timeout = config.dial_timeout;
        self.write_timeout = config.write_timeout;
        self
    }

    /// The core's own configuration struct ([`ConsumerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(mut self, config: ConsumerConfig) -> Self {
        self.config = Ok(config);
        self
    }

    /// Shorthand for `config.max_in_flight`.
    pub fn max_in_flight(mut self, n: u32) -> Self {
        self.max_in_flight = Some(n);
        self
    }

    /// Called for each message delivered more than `max_attempts` times (already finished).
    pub fn on_give_up(
        mut self,
        hook: impl Fn(&nsq_proto::Message) + Send + Sync + 'static,
    ) -> Self {
        self.give_up = Some(Arc::new(hook));
        self
    }

    /// An nsqd TCP address (`host:port`) to connect to directly.
    pub fn nsqd(mut self, addr: impl Into<String>) -> Self {
        self.nsqd.push(addr.into());
        self
    }

    /// An nsqlookupd HTTP address (`host:port` or `http://host:port`) to discover nsqd with.
    pub fn lookupd(mut self, addr: impl Into<String>) -> Self {
        self.lookupd.push(addr.into());
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

    /// Several nsqlookupd HTTP addresses.
    pub fn lookupds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.lookupd.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Seed of the core's RNG (jitter, random choices); random by default.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// How long a TCP connect may take (default 1 s, like go-nsq's `dial_timeout`).
    pub fn dial_timeout(mut self, timeout: Duration) -> Self {
        self.dial_timeout = timeout;
        self
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Validates everything and starts the driver task. Must be called within a tokio runtime.
    pub fn build(self) -> Result<Consumer, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let topic = self.topic?;
        let channel = self.channel?;
        let mut config = self.config?;
        if let Some(n) = self.max_in_flight {
            config.max_in_flight = n;
        }
        let now = Instant::now();
        let mut core = nsq_proto::Consumer::new(
            config,
            topic,
            channel,
            self.seed.unwrap_or_else(net::random_seed),
        );
        for a in &self.nsqd {
            core.add_nsqd(now, a)?;
        }
        for a in &self.lookupd {
            core.add_lookupd(now, a)?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (msg_tx, msg_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            tx: tx.clone(),
            stopping: AtomicBool::new(false),
            starved: AtomicBool::new(false),
            stats: Mutex::new(ConsumerStats::default()),
        });
        let driver = Driver {
            core,
            rx,
            io: Io::new(
                tx,
                wrap_net,
                wrap_lookup,
                self.dial_timeout,
                self.write_timeout,
            ),
            shared: shared.clone(),
            msg_tx: Some(msg_tx),
            outgoing: Vec::new(),
            origins: BTreeMap::new(),
            stop_waiters: Vec::new(),
            give_up: self.give_up,
            report: None,
        };
        runtime.spawn(driver.run());
        let handle = ConsumerHandle {
            guard: Arc::new(HandleGuard(shared.clone())),
        };
        Ok(Consumer {
            receiver: MessageReceiver {
                rx: msg_rx,
                batch: Vec::new().into_iter(),
                shared,
            },
            handle,
        })
    }
}

// ---------------------------------------------------------------------------------- handles

/// A cloneable control handle of a [`Consumer`] (stop it, change max_in_flight, add servers)
/// usable while another task reads the messages.
#[derive(Clone)]
pub struct ConsumerHandle {
    guard: Arc<HandleGuard>,
}

impl fmt::Debug for ConsumerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHandle")
            .field("stats", &self.stats())
            .finish()
    }
}

impl ConsumerHandle {
    fn shared(&self) -> &Shared {
        &self.guard.0
    }

    fn control(&self, c: Control) -> Result<(), Error> {
        self.shared()
            .tx
            .send(Input::Control(c))
            .map_err(|_| Error::Closed)
    }

    /// Adds an nsqd TCP address (`host:port`) to consume from directly.
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.control(Control::AddNsqd(addr.to_owned(), tx))?;
        rx.await.map_err(|_| Error::Closed)?.map_err(Error::from)
    }

    /// Adds several nsqd TCP addresses.
    pub async fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for a in addrs {
            self.connect_to_nsqd(a.as_ref()).await?;
        }
        Ok(())
    }

    /// Adds an nsqlookupd HTTP address to discover nsqd with (polled at once, then every
    /// `lookupd_poll_interval`).
    pub async fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.control(Control::AddLookupd(addr.to_owned(), tx))?;
        rx.await.map_err(|_| Error::Closed)?.map_err(Error::from)
    }

    /// Adds several nsqlookupd HTTP addresses.
    pub async fn connect_to_lookupds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for a in addrs {
            self.connect_to_lookupd(a.as_ref()).await?;
        }
        Ok(())
    }

    /// Changes max_in_flight at runtime (0 pauses the consumer).
    pub fn set_max_in_flight(&self, n: u32) {
        let _ = self.control(Control::SetMaxInFlight(n));
    }

    /// True when some connection has nearly as many messages in flight as its RDY: a batching
    /// handler should process what it has now.
    pub fn is_starved(&self) -> bool {
        self.shared().starved.load(Ordering::Relaxed)
    }

    /// A snapshot of the counters (updated after every wake-up of the driver).
    pub fn stats(&self) -> ConsumerStats {
        *self
            .shared()
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Graceful shutdown: CLS on every connection, no new messages are handed out (those not
    /// yet taken are requeued by the next [`Consumer::recv`], or by dropping the
    /// [`Consumer`]: a consumer that is neither read nor dropped holds them until
    /// `close_timeout`), messages already handed out can still be answered; resolves
    /// once every connection has drained or the consumer's `close_timeout` passed, with the
    /// number of messages left unanswered (nsqd redelivers them).
    pub async fn stop(&self) -> StopReport {
        let (tx, rx) = oneshot::channel();
        if self.control(Control::Stop(tx)).is_err() {
            return StopReport::default();
        }
        rx.await.unwrap_or_default()
    }
}

/// The receiving side of a consumer's messages.
///
/// The driver sends the messages of one wake-up as one batch: one channel operation per batch,
/// not per message.
struct MessageReceiver {
    rx: mpsc::UnboundedReceiver<Vec<Message>>,
    batch: std::vec::IntoIter<Message>,
    shared: Arc<Shared>,
}

impl Drop for MessageReceiver {
    fn drop(&mut self) {
        self.discard();
    }
}

impl MessageReceiver {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        if self.shared.stopping.load(Ordering::Acquire) {
            // Messages not taken yet are requeued (by their Drop) so the drain is quick.
            self.discard();
            return Poll::Ready(None);
        }
        loop {
            if let Some(m) = self.batch.next() {
                return Poll::Ready(Some(m));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(batch)) => self.batch = batch.into_iter(),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Requeues at once (no delay, no backoff) every message received but not taken: the
    /// application never saw them.
    fn discard(&mut self) {
        for m in std::mem::take(&mut self.batch) {
            m.release();
        }
        while let Ok(batch) = self.rx.try_recv() {
            batch.into_iter().for_each(Message::release);
        }
    }

    async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

/// A consumer of one topic/channel over any number of nsqd connections.
///
/// Read messages with [`recv`](Self::recv) (or [`poll_recv`](Self::poll_recv) to build a
/// `Stream`), or hand them to a handler with [`run`](Self::run). Control it from other tasks
/// through a [`ConsumerHandle`] ([`handle`](Self::handle)).
pub struct Consumer {
    receiver: MessageReceiver,
    handle: ConsumerHandle,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A builder for a consumer of `topic`/`channel` (names validated at `build`).
    pub fn builder(topic: impl IntoTopic, channel: impl IntoChannel) -> ConsumerBuilder {
        ConsumerBuilder {
            topic: topic.into_topic().map_err(Error::from),
            channel: channel.into_channel().map_err(Error::from),
            config: Ok(ConsumerConfig::default()),
            max_in_flight: None,
            give_up: None,
            nsqd: Vec::new(),
            lookupd: Vec::new(),
            seed: None,
            dial_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
        }
    }

    /// A consumer with `config`, not yet connected anywhere: add servers with
    /// [`connect_to_nsqd`](Self::connect_to_nsqd) / [`connect_to_lookupd`](Self::connect_to_lookupd).
    pub fn new(
        topic: impl IntoTopic,
        channel: impl IntoChannel,
        config: &Config,
    ) -> Result<Consumer, Error> {
        Consumer::builder(topic, channel).config(config).build()
    }

    /// A cloneable control handle.
    pub fn handle(&self) -> ConsumerHandle {
        self.handle.clone()
    }

    /// The next message; `None` once the consumer is stopped.
    pub async fn recv(&mut self) -> Option<Message> {
        self.receiver.recv().await
    }

    /// Polls for the next message (`Stream::poll_next` semantics): `Ready(None)` once stopped.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.receiver.poll_recv(cx)
    }

    /// See [`ConsumerHandle::connect_to_nsqd`].
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.handle.connect_to_nsqd(addr).await
    }

    /// See [`ConsumerHandle::connect_to_nsqds`].
    pub async fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.handle.connect_to_nsqds(addrs).await
    }

    /// See [`ConsumerHandle::connect_to_lookupd`].
    pub async fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.handle.connect_to_lookupd(addr).await
    }

    /// See [`ConsumerHandle::connect_to_lookupds`].
    pub async fn connect_to_lookupds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.handle.connect_to_lookupds(addrs).await
    }

    /// See [`ConsumerHandle::set_max_in_flight`].
    pub fn set_max_in_flight(&self, n: u32) {
        self.handle.set_max_in_flight(n);
    }

    /// See [`ConsumerHandle::is_starved`].
    pub fn is_starved(&self) -> bool {
        self.handle.is_starved()
    }

    /// See [`ConsumerHandle::stats`].
    pub fn stats(&self) -> ConsumerStats {
        self.handle.stats()
    }

    /// See [`ConsumerHandle::stop`]. Messages received but not yet taken with
    /// [`recv`](Self::recv) are requeued at once, so the drain does not wait for them.
    pub async fn stop(&mut self) -> StopReport {
        let (tx, rx) = oneshot::channel();
        if self.handle.control(Control::Stop(tx)).is_err() {
            return StopReport::default();
        }
        // The driver drops its sender when it starts stopping; every message still queued is
        // requeued here at once.
        self.receiver.discard();
        while let Some(batch) = self.receiver.rx.recv().await {
            batch.into_iter().for_each(Message::release);
        }
        rx.await.unwrap_or_default()
    }

    /// Runs `handler` on every message, on `concurrency` tasks, until the consumer is stopped
    /// (through a [`ConsumerHandle`]); returns once every handler has returned.
    ///
    /// `Ok(())` finishes the message; an `Err` requeues it (with backoff unless
    /// [`HandlerError::without_backoff`], after [`HandlerError::with_delay`] or the default
    /// delay); a panic requeues it with backoff. The handler may also answer or `touch` the
    /// message itself (a later answer of the same message is ignored).
    pub async fn run<H, Fut>(self, concurrency: usize, handler: H)
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        let Consumer { receiver, handle } = self;
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let handler = Arc::new(handler);
        let mut workers = Vec::with_capacity(concurrency.max(1));
        for _ in 0..concurrency.max(1) {
            let receiver = receiver.clone();
            let handler = handler.clone();
            workers.push(tokio::spawn(async move {
                loop {
                    let next = receiver.lock().await.recv().await;
                    let Some(mut msg) = next else { break };
                    msg.done = true;
                    let answer = Answer {
                        conn: msg.conn,
                        id: msg.inner.id,
                        attempts: msg.inner.attempts,
                        timestamp: msg.inner.timestamp,
                        kind: AnswerKind::Finish,
                    };
                    let origin = msg.origin.clone();
                    let mut fut = std::pin::pin!(handler(msg));
                    let outcome = std::future::poll_fn(|cx| {
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            fut.as_mut().poll(cx)
                        })) {
                            Ok(p) => p.map(Some),
                            Err(_) => Poll::Ready(None),
                        }
                    })
                    .await;
                    let kind = match outcome {
                        Some(Ok(())) => AnswerKind::Finish,
                        Some(Err(e)) => {
                            tracing::debug!(msg = %answer.id, error = %e, "handler failed: requeueing");
                            AnswerKind::Requeue {
                                delay: e.delay,
                                backoff: e.backoff,
                            }
                        }
                        None => {
                            tracing::error!(msg = %answer.id, "handler panicked: requeueing");
                            AnswerKind::Requeue {
                                delay: None,
                                backoff: true,
                            }
                        }
                    };
                    origin.shared.answer(Answer { kind, ..answer });
                }
            }));
        }
        for w in workers {
            let _ = w.await;
        }
        drop(handle);
    }
}

// ----------------------------------------------------------------------------------- driver

struct Driver {
    core: nsq_proto::Consumer,
    rx: mpsc::UnboundedReceiver<Input>,
    io: Io<Input>,
    shared: Arc<Shared>,
    msg_tx: Option<mpsc::UnboundedSender<Vec<Message>>>,
    /// Messages of this wake-up, sent as one batch by `deliver`.
    outgoing: Vec<Message>,
    origins: BTreeMap<ConnId, Arc<ConnShared>>,
    stop_waiters: Vec<oneshot::Sender<StopReport>>,
    give_up: Option<GiveUpHook>,
    report: Option<StopReport>,
}

const BATCH: usize = 1024;

impl Driver {
    async fn run(mut self) {
        let mut timer = Timer::new();
        let mut batch = Vec::with_capacity(BATCH);
        self.drain(Instant::now());
        self.io.flush();
        while self.report.is_none() {
            let deadline = self.core.poll_timeout();
            if !timer.wait(deadline, &mut self.rx, &mut batch, BATCH).await {
                break;
            }
            let now = Instant::now();
            for input in batch.drain(..) {
                self.handle(now, input);
                self.drain(now);
            }
            if self.core.poll_timeout().is_some_and(|t| t <= now) {
                self.core.handle_timeout(now);
                self.drain(now);
            }
            self.deliver(now);
            self.io.flush();
            self.publish_state();
        }
        self.io.close_all();
        let report = self.report.unwrap_or_default();
        for w in self.stop_waiters.drain(..) {
            let _ = w.send(report);
        }
        tracing::debug!(unanswered = report.unanswered, "consumer stopped");
    }

    fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Answer(a) => self.answer(now, a),
            Input::Net(ev) => self.io.net(&mut self.core, now, ev),
            Input::Lookup(ev) => self.io.lookup(&mut self.core, now, ev),
            Input::Control(c) => match c {
                Control::AddNsqd(a, reply) => {
                    let _ = reply.send(self.core.add_nsqd(now, &a));
                }
                Control::AddLookupd(a, reply) => {
                    let _ = reply.send(self.core.add_lookupd(now, &a));
                }
                Control::SetMaxInFlight(n) => self.core.set_max_in_flight(now, n),
                Control::Stop(reply) => {
                    self.stop_waiters.push(reply);
                    self.begin_stop(now);
                }
                Control::Dropped => {
                    // The guard is shared by every handle: this is the last one.
                    self.begin_stop(now);
                }
            },
        }
    }

    fn begin_stop(&mut self, now: Instant) {
        if self.core.is_closing() {
            return;
        }
        tracing::info!("stopping consumer");
        self.shared.stopping.store(true, Ordering::Release);
        // Dropping the sender wakes a reader blocked in recv(); it then sees `stopping`.
        self.msg_tx = None;
        for mut m in std::mem::take(&mut self.outgoing) {
            m.done = true;
            self.requeue_now(now, &m);
        }
        self.core.close(now);
    }

    fn answer(&mut self, now: Instant, a: Answer) {
        let result = match a.kind {
            AnswerKind::Finish => self.core.finish(now, a.conn, &a.id),
            AnswerKind::Touch => self.core.touch(now, a.conn, &a.id),
            AnswerKind::Requeue { delay, backoff } => {
                let m = nsq_proto::Message {
                    timestamp: a.timestamp,
                    attempts: a.attempts,
                    id: a.id,
                    body: Bytes::new(),
                };
                self.core.requeue(now, a.conn, &m, delay, backoff)
            }
        };
        if let Err(e) = result {
            // Typically the connection closed (nsqd redelivers) or the message timed out.
            tracing::debug!(conn = %a.conn, msg = %a.id, error = %e, "answer not sent");
        }
    }

    /// Drains every action and event of the core.
    fn drain(&mut self, now: Instant) {
        loop {
            let mut progressed = false;
            while let Some(action) = self.core.poll_action() {
                progressed = true;
                self.act(action);
            }
            while let Some(event) = self.core.poll_event() {
                progressed = true;
                self.event(now, event);
            }
            if !progressed {
                break;
            }
        }
    }

    fn act(&mut self, action: Action) {
        match &action {
            Action::Connect { conn, addr } => {
                let origin = Arc::new(ConnShared {
                    addr: addr.clone(),
                    shared: self.shared.clone(),
                });
                self.origins.insert(*conn, origin);
            }
            Action::Disconnect { conn } => {
                self.origins.remove(conn);
            }
            _ => {}
        }
        self.io.act(action);
    }

    fn event(&mut self, now: Instant, event: ConsumerEvent) {
        match event {
            ConsumerEvent::Message { conn, message } => {
                let origin = match self.origins.get(&conn) {
                    Some(o) => o.clone(),
                    None => Arc::new(ConnShared {
                        addr: String::new(),
                        shared: self.shared.clone(),
                    }),
                };
                let msg = Message {
                    inner: message,
                    conn,
                    origin,
                    done: false,
                };
                if self.msg_tx.is_some() {
                    self.outgoing.push(msg);
                } else {
                    // Stopping: no new messages are handed out; requeue at once.
                    let mut m = msg;
                    m.done = true;
                    self.requeue_now(now, &m);
                }
            }
            ConsumerEvent::GaveUp { conn, message } => {
                tracing::warn!(%conn, msg = %message.id, attempts = message.attempts, "giving up on message (max_attempts exceeded)");
                if let Some(hook) = &self.give_up {
                    hook(&message);
                }
            }
            ConsumerEvent::MessageExpired { conn, id } => {
                tracing::warn!(%conn, msg = %id, "message timed out before it was answered");
            }
            ConsumerEvent::ConnectionReady { conn, addr } => {
                tracing::info!(%conn, %addr, "nsqd connection ready");
            }
            ConsumerEvent::ConnectionClosed { conn, addr, reason } => {
                tracing::info!(%conn, %addr, %reason, "nsqd connection closed");
            }
            ConsumerEvent::ServerError { conn, error } => {
                tracing::warn!(%conn, %error, "nsqd error");
            }
            ConsumerEvent::LookupdFailed { addr, error } => {
                tracing::warn!(lookupd = %addr, %error, "nsqlookupd query failed");
            }
            ConsumerEvent::Closed { leftovers } => {
                self.report = Some(StopReport {
                    unanswered: leftovers,
                });
            }
            other => tracing::debug!(?other, "consumer event"),
        }
    }

    /// Hands this wake-up's messages to the application in one batch.
    fn deliver(&mut self, now: Instant) {
        if self.outgoing.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.outgoing);
        let unsent = match &self.msg_tx {
            Some(tx) => tx.send(batch).err().map(|e| e.0),
            None => Some(batch),
        };
        if let Some(batch) = unsent {
            for mut m in batch {
                m.done = true;
                self.requeue_now(now, &m);
            }
            if self.msg_tx.is_some() {
                // Nobody can receive messages any more: stop rather than loop redeliveries.
                tracing::info!("the consumer's message receiver was dropped");
                self.begin_stop(now);
            }
            self.drain(now);
        }
    }

    fn requeue_now(&mut self, now: Instant, m: &Message) {
        if let Err(e) = self
            .core
            .requeue(now, m.conn, &m.inner, Some(Duration::ZERO), false)
        {
            tracing::debug!(msg = %m.inner.id, error = %e, "requeue while stopping not sent");
        }
    }

    fn publish_state(&self) {
        self.shared
            .starved
            .store(self.core.is_starved(), Ordering::Relaxed);
        *self
            .shared
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.core.stats();
    }
}
