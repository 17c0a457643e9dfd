//! The [`Consumer`]: a driver thread around [`nsq_proto::Consumer`].

use crate::AsyncStd;
use crate::driver::{self, Logic, Net};
use bytes::Bytes;
use futures_lite::Stream;
use nsq_proto::Config;
use nsq_proto::client::{
    Answer, AnswerKind, AnswerSink, ConsumerSetup, Delivery, Error, GiveUpHook, HandlerError,
    IntoChannel, IntoTopic, Origin, StopReport, log_consumer_event, log_max_in_flight,
};
use nsq_proto::consumer::{ConsumerError, ConsumerEvent, ConsumerStats};
use nsq_proto::driver::ConnId;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

// ------------------------------------------------------------------------------------ inputs

type Reply<T> = driver::OneshotTx<T>;

enum Control {
    AddNsqd(String, Reply<Result<(), ConsumerError>>),
    AddLookupd(String, Reply<Result<(), ConsumerError>>),
    DisconnectNsqd(String, Reply<Result<(), ConsumerError>>),
    DisconnectLookupd(String, Reply<Result<(), ConsumerError>>),
    SetMaxInFlight(u32),
    Stop(Reply<StopReport>),
    /// Every handle is gone: shut down gracefully.
    Dropped,
}

enum Input {
    /// An answer, with the body of the message it ends (dropped by the driver).
    Answer(Answer, Bytes),
    Control(Control),
}

/// State shared by the driver and the handles.
struct Shared {
    inbox: Arc<driver::Inbox<Input>>,
    stopping: AtomicBool,
    starved: AtomicBool,
    stats: Mutex<ConsumerStats>,
}

impl Shared {
    fn answer(&self, a: Answer, body: Bytes) {
        // If the driver is gone every connection is closed: nsqd redelivers the message.
        let _ = self.inbox.send(Input::Answer(a, body));
    }
}

/// Sends `Dropped` to the driver when the last user handle goes.
struct HandleGuard(Arc<Shared>);

impl Drop for HandleGuard {
    fn drop(&mut self) {
        let _ = self.0.inbox.send(Input::Control(Control::Dropped));
    }
}

// ----------------------------------------------------------------------------------- message

/// Carries a message's answers to the driver thread (a lock-free channel send).
#[doc(hidden)]
pub struct AnswerChannel(Arc<Shared>);

impl fmt::Debug for AnswerChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnswerChannel")
    }
}

impl AnswerSink for AnswerChannel {
    fn send_answer(&self, answer: Answer, body: Bytes) {
        self.0.answer(answer, body);
    }
}

/// A message delivered to this consumer. It answers itself: `finish()`, `requeue(delay)`,
/// `requeue_without_backoff(delay)`, `touch()`; read it with `body()`, `attempts()`,
/// `timestamp()`, `id()`, `nsqd_address()` (see [`Delivery`]).
///
/// A message dropped without an answer is requeued (without backoff, with the default delay
/// for its attempt count) and a warning is logged: it is never lost silently.
pub type Message = Delivery<AnswerChannel>;

// ---------------------------------------------------------------------------------- builder

/// Builds a [`Consumer`]: topic, channel, configuration, addresses (made by
/// [`Consumer::builder`]). `build` starts the driver thread; it works from any thread,
/// inside or outside an async runtime.
pub type ConsumerBuilder = nsq_proto::client::ConsumerBuilder<AsyncStd>;

/// Validates `setup` and starts the driver thread ([`ConsumerBuilder::build`]).
pub(crate) fn start(setup: ConsumerSetup<Message>) -> Result<Consumer, Error> {
    let start = setup.start(Instant::now(), driver::random_seed)?;
    let inbox = driver::Inbox::new();
    let (msg_tx, msg_rx) = async_channel::unbounded();
    let shared = Arc::new(Shared {
        inbox: inbox.clone(),
        stopping: AtomicBool::new(false),
        starved: AtomicBool::new(false),
        stats: Mutex::new(ConsumerStats::default()),
    });
    let logic = ConsumerLogic {
        core: start.core,
        shared: shared.clone(),
        msg_tx: Some(msg_tx),
        origins: BTreeMap::new(),
        stop_waiters: Vec::new(),
        give_up: start.give_up,
        report: None,
    };
    let net = Net::new(start.dial_timeout, start.write_timeout);
    // The driver thread is this adapter's runtime.
    driver::spawn("nsq-consumer", logic, inbox, net, start.span)
        .map_err(|e| Error::Spawn(e.to_string()))?;
    let handle = ConsumerHandle {
        guard: Arc::new(HandleGuard(shared.clone())),
    };
    Ok(Consumer {
        receiver: MessageReceiver {
            rx: Box::pin(msg_rx),
            shared,
        },
        handle,
    })
}

// ---------------------------------------------------------------------------------- handles

/// A cloneable control handle of a [`Consumer`] (stop it, change max_in_flight, add or remove
/// servers)
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
            .inbox
            .send(Input::Control(c))
            .map_err(|_| Error::Closed)
    }

    /// Adds an nsqd TCP address (`host:port`) to consume from directly.
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = driver::oneshot();
        self.control(Control::AddNsqd(addr.to_owned(), tx))?;
        rx.recv()
            .await
            .map_err(|_| Error::Closed)?
            .map_err(Error::from)
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
        let (tx, rx) = driver::oneshot();
        self.control(Control::AddLookupd(addr.to_owned(), tx))?;
        rx.recv()
            .await
            .map_err(|_| Error::Closed)?
            .map_err(Error::from)
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

    /// Stops consuming from an nsqd added with [`connect_to_nsqd`](Self::connect_to_nsqd) or
    /// the builder's `nsqd` (go-nsq's `DisconnectFromNSQD`): CLS is sent, the messages in
    /// flight on it can still be answered and it closes once they are (or after the
    /// connection's `drain_timeout`; nsqd then redelivers what is left), its RDY goes to the
    /// other connections at once, and it is not reconnected. Resolves once the command is applied, not when the
    /// connection has drained:
    /// [`stats`](Self::stats) shows it as [`NsqdState::Closing`](crate::NsqdState::Closing)
    /// until it has drained.
    ///
    /// Errors: [`Error::Consumer`] with
    /// [`NsqdNotConfigured`](nsq_proto::consumer::ConsumerError::NsqdNotConfigured) for an
    /// address not configured (or already disconnected from), or
    /// [`NsqdDiscovered`](nsq_proto::consumer::ConsumerError::NsqdDiscovered) for one known only
    /// through nsqlookupd (disconnect from the lookupd instead); [`Error::InvalidInput`] for an
    /// address that is not `host:port`; [`Error::Closed`] once the consumer is stopping.
    pub async fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = driver::oneshot();
        self.control(Control::DisconnectNsqd(addr.to_owned(), tx))?;
        rx.recv()
            .await
            .map_err(|_| Error::Closed)?
            .map_err(Error::from)
    }

    /// Stops polling an nsqlookupd added with [`connect_to_lookupd`](Self::connect_to_lookupd)
    /// or the builder's `lookupd` (go-nsq's `DisconnectFromNSQLookupd`); `addr` is matched as
    /// `connect_to_lookupd` reads it. The nsqd that only it listed stay connected until their
    /// connection ends, and are not reconnected.
    ///
    /// Errors: [`Error::Consumer`] with
    /// [`LookupdNotConfigured`](nsq_proto::consumer::ConsumerError::LookupdNotConfigured) for
    /// a lookupd not configured, or
    /// [`LastLookupd`](nsq_proto::consumer::ConsumerError::LastLookupd) for the only one
    /// configured (as go-nsq: discovery would stop; connect its replacement first);
    /// [`Error::InvalidInput`] for an address that does not parse; [`Error::Closed`] once the
    /// consumer is stopping.
    pub async fn disconnect_from_lookupd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = driver::oneshot();
        self.control(Control::DisconnectLookupd(addr.to_owned(), tx))?;
        rx.recv()
            .await
            .map_err(|_| Error::Closed)?
            .map_err(Error::from)
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

    /// A snapshot of the counters, in total and per nsqd (updated after every wake-up of the
    /// driver).
    pub fn stats(&self) -> ConsumerStats {
        self.shared()
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Graceful shutdown: CLS on every connection, no new messages are handed out (those not
    /// yet taken are requeued by the next [`Consumer::recv`], or by dropping the
    /// [`Consumer`]: a consumer that is neither read nor dropped holds them until
    /// `drain_timeout`), messages already handed out can still be answered; resolves
    /// once every connection has drained or the consumer's `drain_timeout` passed, with the
    /// number of messages left unanswered (nsqd redelivers them).
    pub async fn stop(&self) -> StopReport {
        let (tx, rx) = driver::oneshot();
        if self.control(Control::Stop(tx)).is_err() {
            return StopReport::default();
        }
        rx.recv().await.unwrap_or_default()
    }
}

/// The receiving side of a consumer's messages (one per `run` worker: the channel is MPMC).
struct MessageReceiver {
    rx: Pin<Box<async_channel::Receiver<Message>>>,
    shared: Arc<Shared>,
}

impl Drop for MessageReceiver {
    fn drop(&mut self) {
        if self.rx.receiver_count() == 1 {
            // The last receiver: nobody will take what is queued. Close first, so the driver
            // cannot queue another message between the drain and the drop (it would then be
            // dropped unanswered and requeued once more); what is queued is still drained.
            self.rx.close();
            self.discard();
        }
    }
}

impl MessageReceiver {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        if self.shared.stopping.load(Ordering::Acquire) {
            // Messages not taken yet are requeued at once so the drain is quick.
            self.discard();
            return Poll::Ready(None);
        }
        self.rx.as_mut().poll_next(cx)
    }

    /// Requeues at once (no delay, no backoff) every message received but not taken: the
    /// application never saw them.
    fn discard(&mut self) {
        while let Ok(m) = self.rx.try_recv() {
            m.release();
        }
    }

    async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

/// A consumer of one topic/channel over any number of nsqd connections.
///
/// Read messages with [`recv`](Self::recv) or as a [`Stream`], or hand them to a handler with
/// [`run`](Self::run). Control it from other tasks through a [`ConsumerHandle`]
/// ([`handle`](Self::handle)).
///
/// As with go-nsq, servers can be added and removed while it runs:
/// [`connect_to_nsqd`](Self::connect_to_nsqd) / [`connect_to_lookupd`](Self::connect_to_lookupd),
/// and [`disconnect_from_nsqd`](Self::disconnect_from_nsqd) (CLS is sent, the messages in
/// flight on that nsqd can still be answered, its RDY goes to the other connections, and it
/// is not reconnected) / [`disconnect_from_lookupd`](Self::disconnect_from_lookupd) (the nsqd
/// only that lookupd listed are dropped once their connection ends; the last lookupd cannot
/// be removed). [`stats`](Self::stats) is a [`ConsumerStats`] snapshot: totals (received,
/// finished, requeued, in flight, reconnects, RDY, backoff level) and one
/// [`NsqdStats`](crate::NsqdStats) per nsqd (state, RDY, in flight, its own counters).
///
/// ```no_run
/// # async fn example(consumer: &nsq_async_std::Consumer) -> Result<(), nsq_async_std::Error> {
/// consumer.disconnect_from_nsqd("10.0.0.7:4150").await?; // being decommissioned
/// for nsqd in &consumer.stats().nsqd {
///     println!(
///         "{} {:?} rdy={} in_flight={} received={} reconnects={}",
///         nsqd.address, nsqd.state, nsqd.rdy, nsqd.in_flight, nsqd.received, nsqd.reconnects
///     );
/// }
/// # Ok(())
/// # }
/// ```
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

impl Stream for Consumer {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().receiver.poll_recv(cx)
    }
}

impl Consumer {
    /// A builder for a consumer of `topic`/`channel` (names validated at `build`). Its
    /// [`build`](ConsumerBuilder::build) starts the driver thread (this adapter's runtime);
    /// it works from any thread, inside or outside an async runtime.
    pub fn builder(topic: impl IntoTopic, channel: impl IntoChannel) -> ConsumerBuilder {
        ConsumerBuilder::new(topic, channel)
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

    /// See [`ConsumerHandle::disconnect_from_nsqd`].
    pub async fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.handle.disconnect_from_nsqd(addr).await
    }

    /// See [`ConsumerHandle::disconnect_from_lookupd`].
    pub async fn disconnect_from_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.handle.disconnect_from_lookupd(addr).await
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
        let (tx, rx) = driver::oneshot();
        if self.handle.control(Control::Stop(tx)).is_err() {
            return StopReport::default();
        }
        // The driver closes the message channel when it starts stopping; every message still
        // queued is requeued at once.
        while let Ok(m) = self.receiver.rx.recv().await {
            m.release();
        }
        rx.recv().await.unwrap_or_default()
    }

    /// Runs `handler` on every message, `concurrency` at a time, until the consumer is
    /// stopped (through a [`ConsumerHandle`]); returns once every handler has returned.
    ///
    /// The handlers run concurrently inside the future this returns (poll it on any
    /// executor: async-std, smol, ...); spawn CPU-heavy work onto your runtime's thread pool
    /// yourself.
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
        let handler = Arc::new(handler);
        let mut workers: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> =
            Vec::with_capacity(concurrency.max(1));
        let mut receivers: Vec<MessageReceiver> = (1..concurrency.max(1))
            .map(|_| MessageReceiver {
                rx: Box::pin((*receiver.rx).clone()),
                shared: receiver.shared.clone(),
            })
            .collect();
        receivers.push(receiver);
        for mut receiver in receivers {
            let handler = handler.clone();
            workers.push(Box::pin(async move {
                while let Some(msg) = receiver.recv().await {
                    handle_one(&*handler, msg).await;
                }
            }));
        }
        join_all(workers).await;
        drop(handle);
    }
}

/// Runs the handler on one message and answers it.
async fn handle_one<H, Fut>(handler: &H, mut msg: Message)
where
    H: Fn(Message) -> Fut,
    Fut: Future<Output = Result<(), HandlerError>>,
{
    let pending = msg.take_over();
    let mut fut = std::pin::pin!(handler(msg));
    let outcome = std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(p) => p.map(Some),
            Err(_) => Poll::Ready(None),
        }
    })
    .await;
    pending.answer(outcome);
}

/// Polls every worker until all are done.
async fn join_all(mut workers: Vec<Pin<Box<dyn Future<Output = ()> + Send>>>) {
    std::future::poll_fn(|cx| {
        workers.retain_mut(|w| w.as_mut().poll(cx).is_pending());
        if workers.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

// ----------------------------------------------------------------------------------- driver

struct ConsumerLogic {
    core: nsq_proto::Consumer,
    shared: Arc<Shared>,
    msg_tx: Option<async_channel::Sender<Message>>,
    origins: BTreeMap<ConnId, Arc<Origin<AnswerChannel>>>,
    stop_waiters: Vec<Reply<StopReport>>,
    give_up: Option<GiveUpHook<Message>>,
    report: Option<StopReport>,
}

impl ConsumerLogic {
    fn begin_stop(&mut self, now: Instant) {
        if self.core.is_closing() {
            return;
        }
        tracing::info!("stopping consumer");
        self.shared.stopping.store(true, Ordering::Release);
        // Closing the channel wakes a reader blocked in recv(); it then sees `stopping`.
        if let Some(tx) = self.msg_tx.take() {
            tx.close();
        }
        self.core.close(now);
    }
}

impl Logic for ConsumerLogic {
    type Machine = nsq_proto::Consumer;
    type Input = Input;

    fn machine(&mut self) -> &mut nsq_proto::Consumer {
        &mut self.core
    }

    fn input(&mut self, now: Instant, input: Input) {
        match input {
            Input::Answer(a, _body) => {
                let _ = a.apply(&mut self.core, now);
            }
            Input::Control(c) => match c {
                Control::AddNsqd(a, reply) => {
                    let _ = reply.try_send(self.core.add_nsqd(now, &a));
                }
                Control::DisconnectNsqd(a, reply) => {
                    let _ = reply.try_send(self.core.disconnect_from_nsqd(now, &a));
                }
                Control::DisconnectLookupd(a, reply) => {
                    let _ = reply.try_send(self.core.disconnect_from_lookupd(now, &a));
                }
                Control::AddLookupd(a, reply) => {
                    let _ = reply.try_send(self.core.add_lookupd(now, &a));
                }
                Control::SetMaxInFlight(n) => {
                    log_max_in_flight(n);
                    self.core.set_max_in_flight(now, n);
                }
                Control::Stop(reply) => {
                    self.stop_waiters.push(reply);
                    self.begin_stop(now);
                }
                // The guard is shared by every handle: this is the last one.
                Control::Dropped => self.begin_stop(now),
            },
        }
    }

    fn connecting(&mut self, conn: ConnId, addr: &str) {
        self.origins
            .insert(conn, Origin::new(addr, AnswerChannel(self.shared.clone())));
    }

    fn disconnected(&mut self, conn: ConnId) {
        self.origins.remove(&conn);
    }

    fn event(&mut self, now: Instant, event: ConsumerEvent) {
        log_consumer_event(&event, |c| self.origins.get(&c).map(|o| o.addr()));
        match event {
            ConsumerEvent::Message { conn, message } => {
                let origin = match self.origins.get(&conn) {
                    Some(o) => o.clone(),
                    None => Origin::new("", AnswerChannel(self.shared.clone())),
                };
                let msg = Delivery::new(conn, message, origin);
                // While stopping (no sender) no new messages are handed out: requeue at once.
                let unsent = match &self.msg_tx {
                    Some(tx) => tx
                        .try_send(msg)
                        .err()
                        .map(async_channel::TrySendError::into_inner),
                    None => Some(msg),
                };
                if let Some(m) = unsent {
                    if self.msg_tx.is_some() {
                        // Nobody can receive messages any more: stop rather than loop
                        // redeliveries. CLS goes out before the REQ, so nsqd does not hand
                        // the freed slot to yet another message.
                        tracing::info!("the consumer's message receiver was dropped");
                        self.begin_stop(now);
                    }
                    let _ = m
                        .into_answer(AnswerKind::UNTAKEN)
                        .apply(&mut self.core, now);
                }
            }
            ConsumerEvent::GaveUp { conn, message } => {
                if let Some(hook) = &self.give_up {
                    let origin = match self.origins.get(&conn) {
                        Some(o) => o.clone(),
                        None => Origin::new("", AnswerChannel(self.shared.clone())),
                    };
                    hook(&Delivery::given_up(conn, message, origin));
                }
            }
            ConsumerEvent::Closed { leftovers } => {
                self.report = Some(StopReport::new(leftovers));
            }
            _ => {}
        }
    }

    fn after_wake(&mut self) {
        self.shared
            .starved
            .store(self.core.is_starved(), Ordering::Relaxed);
        // Written in place: no allocation once the snapshot has room for every nsqd.
        self.core.stats_into(
            &mut self
                .shared
                .stats
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    fn done(&self) -> bool {
        self.report.is_some()
    }

    fn finish(mut self) {
        let report = self.report.unwrap_or_default();
        for w in self.stop_waiters.drain(..) {
            let _ = w.try_send(report);
        }
        tracing::debug!(unanswered = report.unanswered, "consumer stopped");
    }
}
