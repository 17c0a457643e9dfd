//! The [`Consumer`] of every runtime: its handles, its message hand-off and the logic of its
//! driver around the core [`Consumer`](nsq_proto::Consumer).

use super::driver::{self, Logic, Net};
use super::events::{Event, EventHub, Events};
use super::runtime::{Adapter, BoxFuture, Ended, SocketOptions};
use super::sync::{Inbox, Mailbox, ReplyTx, oneshot};
use super::{
    Answer, AnswerKind, AnswerSink, ConsumerSetup, Delivery, Error, GiveUpHook, HandlerError,
    IntoChannel, IntoTopic, Origin, StopReport, log_consumer_event, log_max_in_flight,
};
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::consumer::{ConsumerError, ConsumerEvent, ConsumerStats};
use nsq_proto::driver::ConnId;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------ inputs

type Reply<T> = ReplyTx<T>;

/// Where a `connect_to_nsqd` call waits for its nsqd's first connection outcome.
type ConnectReply = Reply<Result<(), Error>>;

enum Control {
    /// Replied to once the nsqd's first connection is ready or has failed.
    AddNsqd(String, ConnectReply),
    /// Replied to once the lookupd has answered a query, or failed to (at once when its
    /// last outcome is known).
    AddLookupd(String, ConnectReply),
    DisconnectNsqd(String, Reply<Result<(), ConsumerError>>),
    DisconnectLookupd(String, Reply<Result<(), ConsumerError>>),
    SetMaxInFlight(u32),
    Stop(Option<Reply<StopReport>>),
    /// Every handle is gone: shut down gracefully.
    Dropped,
}

enum Input {
    /// An answer, with the body of the message it ends (dropped by the driver).
    Answer(Answer, Bytes),
    Control(Control),
}

/// What the driver, the handles and the messages share: the bridge between the application
/// and the driver.
struct Bridge {
    inbox: Arc<Inbox<Input>>,
    stopping: AtomicBool,
    starved: AtomicBool,
    /// The consumer's max_in_flight, as last set.
    max_in_flight: std::sync::atomic::AtomicU32,
    stats: Mutex<ConsumerStats>,
    /// The driver's report, once it has stopped.
    report: Mutex<Option<StopReport>>,
    /// The event streams.
    events: EventHub,
}

/// Sends `Dropped` to the driver when the last user handle goes.
struct HandleGuard<R: Adapter> {
    shared: Arc<Bridge>,
    runtime: R,
    ended: Arc<Ended>,
}

impl<R: Adapter> Drop for HandleGuard<R> {
    fn drop(&mut self) {
        let _ = self.shared.inbox.send(Input::Control(Control::Dropped));
    }
}

// ----------------------------------------------------------------------------------- message

/// Carries a message's answers to its consumer's driver (a push on its command queue).
pub(crate) struct AnswerChannel(Arc<Bridge>);

impl fmt::Debug for AnswerChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnswerChannel")
    }
}

impl AnswerSink for AnswerChannel {
    fn send_answer(&self, answer: Answer, body: Bytes) {
        // If the driver is gone every connection is closed: nsqd redelivers the message.
        let _ = self.0.inbox.send(Input::Answer(answer, body));
    }
}

/// A message delivered to a consumer. It answers itself: [`finish`](Self::finish),
/// [`requeue`](Self::requeue), [`requeue_without_backoff`](Self::requeue_without_backoff),
/// [`touch`](Self::touch); read it with [`body`](Self::body) (a slice of the read buffer:
/// zero-copy), [`attempts`](Self::attempts), [`timestamp`](Self::timestamp),
/// [`id`](Self::id), [`nsqd_address`](Self::nsqd_address).
///
/// A message dropped without an answer is requeued (without backoff, with the default delay
/// for its attempt count) and a warning is logged: it is never lost silently.
pub struct Message(pub(crate) Delivery<AnswerChannel>);

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Message {
    /// The message id.
    pub fn id(&self) -> nsq_proto::MessageId {
        self.0.id()
    }

    /// The payload (a slice of the read buffer: no copy was made).
    pub fn body(&self) -> &Bytes {
        self.0.body()
    }

    /// How many times nsqd delivered it, this delivery included.
    pub fn attempts(&self) -> u16 {
        self.0.attempts()
    }

    /// When it was published, in nanoseconds since the Unix epoch (nsqd's clock).
    pub fn timestamp(&self) -> i64 {
        self.0.timestamp()
    }

    /// The nsqd TCP address it came from.
    pub fn nsqd_address(&self) -> &str {
        self.0.nsqd_address()
    }

    /// FIN: the message is done; nsqd forgets it.
    pub fn finish(self) {
        self.0.finish();
    }

    /// REQ with backoff: nsqd delivers it again after `delay` (`None`: the consumer's
    /// `default_requeue_delay` times its attempts, capped at `max_requeue_delay`), and the
    /// consumer backs off.
    pub fn requeue(self, delay: Option<Duration>) {
        self.0.requeue(delay);
    }

    /// REQ without backoff: a failure of this message, not of the system.
    pub fn requeue_without_backoff(self, delay: Option<Duration>) {
        self.0.requeue_without_backoff(delay);
    }

    /// TOUCH: resets the message's timeout on nsqd (for work that takes longer than
    /// `msg_timeout`).
    pub fn touch(&self) {
        self.0.touch();
    }

    /// Nobody will answer it now (the receiver is gone): requeued at once, silently.
    pub(crate) fn release(self) {
        self.0.release();
    }

    /// A handler runner takes over answering it.
    pub(crate) fn take_over(&mut self) -> super::PendingAnswer<AnswerChannel> {
        self.0.take_over()
    }

    /// Its answer of `kind`, for the driver to apply.
    pub(crate) fn into_answer(self, kind: AnswerKind) -> Answer {
        self.0.into_answer(kind)
    }
}

/// Moves the calls in `waiting` that wait for `key` to `answered`, each with `outcome` (sent
/// once the round's stats are published).
fn answer_waiting(
    waiting: &mut Vec<(String, ConnectReply)>,
    key: &str,
    outcome: &Result<(), Error>,
    answered: &mut Vec<(ConnectReply, Result<(), Error>)>,
) {
    if waiting.iter().any(|(k, _)| k == key) {
        let (done, rest) = std::mem::take(waiting)
            .into_iter()
            .partition(|(k, _)| k == key);
        *waiting = rest;
        answered.extend(done.into_iter().map(|(_, reply)| (reply, outcome.clone())));
    }
}

/// A lookupd address as the core names it in its events (`http://host:port/path`).
fn lookupd_key(addr: &str) -> String {
    nsq_proto::consumer::LookupdAddress::parse(addr)
        .map_or_else(|_| addr.to_owned(), |a| a.to_string())
}

// ----------------------------------------------------------------------------------- start

/// Validates `setup` and starts the driver on `R` ([`ConsumerBuilder::build`](super::ConsumerBuilder::build)).
pub(crate) fn start<R: Adapter>(setup: ConsumerSetup) -> Result<Consumer<R>, Error> {
    let runtime = R::current()?;
    let start = setup.start(runtime.now(), super::random_seed)?;
    let inbox = Inbox::new();
    let mailbox = Mailbox::new();
    let shared = Arc::new(Bridge {
        inbox: inbox.clone(),
        stopping: AtomicBool::new(false),
        starved: AtomicBool::new(false),
        max_in_flight: std::sync::atomic::AtomicU32::new(start.core.max_in_flight()),
        stats: Mutex::new(ConsumerStats::default()),
        report: Mutex::new(None),
        events: EventHub::default(),
    });
    let logic = ConsumerLogic {
        core: start.core,
        shared: shared.clone(),
        mailbox: mailbox.clone(),
        handing_out: true,
        outgoing: VecDeque::new(),
        origins: BTreeMap::new(),
        stop_waiters: Vec::new(),
        connecting_to: Vec::new(),
        connected_now: Vec::new(),
        lookupd_waiting: Vec::new(),
        lookupd_outcome: BTreeMap::new(),
        give_up: start.give_up,
        report: None,
        backoff_level: 0,
        starved: false,
    };
    let net = Net::new(
        runtime.clone(),
        SocketOptions::new(start.dial_timeout, start.write_timeout)
            .with_local_addr(start.local_addr),
    );
    let ended = driver::spawn("nsq-consumer", logic, inbox, net, start.span)
        .map_err(|e| Error::Spawn(e.to_string()))?;
    let handle = ConsumerHandle {
        guard: Arc::new(HandleGuard {
            shared: shared.clone(),
            runtime,
            ended,
        }),
    };
    Ok(Consumer {
        receiver: MessageReceiver::new(mailbox, shared, true),
        handle,
    })
}

// ---------------------------------------------------------------------------------- handles

/// A cloneable control handle of a [`Consumer`] (stop it, change max_in_flight, add or remove
/// servers), usable while another task reads the messages.
pub struct ConsumerHandle<R: Adapter> {
    guard: Arc<HandleGuard<R>>,
}

impl<R: Adapter> Clone for ConsumerHandle<R> {
    fn clone(&self) -> Self {
        ConsumerHandle {
            guard: self.guard.clone(),
        }
    }
}

impl<R: Adapter> fmt::Debug for ConsumerHandle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHandle")
            .field("stats", &self.stats())
            .finish()
    }
}

impl<R: Adapter> ConsumerHandle<R> {
    fn shared(&self) -> &Bridge {
        &self.guard.shared
    }

    fn control(&self, c: Control) -> Result<(), Error> {
        self.shared()
            .inbox
            .send(Input::Control(c))
            .map_err(|_| Error::Closed)
    }

    async fn ask(
        &self,
        make: impl FnOnce(Reply<Result<(), ConsumerError>>) -> Control,
    ) -> Result<(), Error> {
        let (tx, rx) = oneshot();
        self.control(make(tx))?;
        rx.recv()
            .await
            .map_err(|_| Error::Closed)?
            .map_err(Error::from)
    }

    /// Adds an nsqd TCP address (`host:port`) to consume from directly, and resolves with
    /// its first connection's outcome (go-nsq's `ConnectToNSQD` returns the dial's error too):
    /// `Ok` once connected and subscribed (at once if it already is), else:
    /// - [`Error::Misconfigured`] when the address cannot work as configured (not nsqd's TCP
    ///   port, a TLS mismatch, refused credentials). The consumer does not retry it on its
    ///   own; calling `connect_to_nsqd` again tries once more.
    /// - [`Error::Connect`] with the reason otherwise (refused, timed out, reset, ...): the
    ///   consumer keeps the address and reconnects to it with backoff.
    ///
    /// [`disconnect_from_nsqd`](Self::disconnect_from_nsqd) gives an address up.
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = oneshot();
        self.control(Control::AddNsqd(addr.to_owned(), tx))?;
        rx.recv().await.map_err(|_| Error::Closed)?
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
    /// `lookupd_poll_interval`), and resolves with its first query's outcome: `Ok` once it
    /// has answered (listing the topic's nsqd, which are then being connected to, or none
    /// yet), else [`Error::Lookupd`]. An address that is not an nsqlookupd's HTTP port
    /// (nsqd's ports, nsqlookupd's TCP port) is not polled again until it is added again; any
    /// other failure is polled again on schedule. For a lookupd already added, the last
    /// outcome is returned at once.
    pub async fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        let (tx, rx) = oneshot();
        self.control(Control::AddLookupd(addr.to_owned(), tx))?;
        rx.recv().await.map_err(|_| Error::Closed)?
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
    /// other connections at once, and it is not reconnected. Resolves once the command is
    /// applied, not when the connection has drained: [`stats`](Self::stats) shows it as
    /// [`NsqdState::Closing`](nsq_proto::consumer::NsqdState::Closing) until it has drained.
    ///
    /// Errors: [`Error::Consumer`] with
    /// [`NsqdNotConfigured`](nsq_proto::consumer::ConsumerError::NsqdNotConfigured) for an
    /// address not configured (or already disconnected from), or
    /// [`NsqdDiscovered`](nsq_proto::consumer::ConsumerError::NsqdDiscovered) for one known only
    /// through nsqlookupd (disconnect from the lookupd instead); [`Error::InvalidInput`] for an
    /// address that is not `host:port`; [`Error::Closed`] once the consumer is stopping.
    pub async fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::DisconnectNsqd(addr.to_owned(), tx))
            .await
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
        self.ask(|tx| Control::DisconnectLookupd(addr.to_owned(), tx))
            .await
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

    /// A stream of what happens to the consumer from now on: connections made and lost
    /// (with why, and whether the configuration is at fault), backoff entered and left,
    /// messages given up on, starvation, failed lookupd queries. For health checks and
    /// tests; see [`Events`]. It ends when the consumer has stopped.
    pub fn events(&self) -> Events {
        self.shared().events.subscribe()
    }

    /// Whether the consumer is stopping or stopped ([`stop`](Self::stop) was called, every
    /// handle was dropped, or nobody can receive its messages any more).
    pub fn is_stopping(&self) -> bool {
        self.shared().stopping.load(Ordering::Acquire)
    }

    /// A snapshot of the counters, in total and per nsqd (updated after every wake-up of the
    /// driver).
    pub fn stats(&self) -> ConsumerStats {
        self.shared()
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Graceful shutdown: CLS on every connection, no new messages are handed out (those not
    /// yet taken are requeued by the next [`Consumer::recv`], or by dropping the
    /// [`Consumer`]: a consumer that is neither read nor dropped holds them until
    /// `drain_timeout`), messages already handed out can still be answered; resolves
    /// once every connection has drained or the consumer's `drain_timeout` passed, with the
    /// number of messages left unanswered (nsqd redelivers them).
    pub async fn stop(&self) -> StopReport {
        let (tx, rx) = oneshot();
        if self.control(Control::Stop(Some(tx))).is_ok() {
            if let Ok(report) = rx.recv().await {
                return report;
            }
        }
        self.final_report()
    }

    /// The report of a driver that has stopped.
    fn final_report(&self) -> StopReport {
        self.shared()
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or_default()
    }

    /// Says so (WARN, once per `run`) when more handlers run than messages may be in flight:
    /// the extra handlers would only wait.
    pub(crate) fn warn_if_handlers_would_wait(&self, concurrency: usize) {
        let max_in_flight = self.shared().max_in_flight.load(Ordering::Relaxed);
        if max_in_flight > 0 && concurrency > max_in_flight as usize {
            tracing::warn!(
                concurrency,
                max_in_flight,
                "more handlers than max_in_flight: at most max_in_flight messages are handled \
                 at a time (raise max_in_flight to keep every handler busy)"
            );
        }
    }

    /// Starts a graceful stop without waiting for it (the blocking API, on the driver's own
    /// thread, cannot wait).
    pub(crate) fn request_stop(&self) {
        let _ = self.control(Control::Stop(None));
    }

    /// When the driver has ended.
    pub(crate) fn ended(&self) -> &Ended {
        &self.guard.ended
    }
}

// -------------------------------------------------------------------------------- receiving

/// The receiving side of a consumer's messages (one per `run` worker).
struct MessageReceiver {
    mailbox: Arc<Mailbox<Message>>,
    shared: Arc<Bridge>,
    /// Messages taken from the mailbox at once, not yet handed out.
    local: VecDeque<Message>,
    /// Take every queued message at once (the consumer's own receiver), or one at a time
    /// (workers sharing the mailbox).
    batch: bool,
}

impl MessageReceiver {
    fn new(mailbox: Arc<Mailbox<Message>>, shared: Arc<Bridge>, batch: bool) -> Self {
        MessageReceiver {
            mailbox,
            shared,
            local: VecDeque::new(),
            batch,
        }
    }

    /// Another receiver of the same mailbox, taking one message at a time.
    fn worker(&self) -> Self {
        self.mailbox.add_receiver();
        MessageReceiver::new(self.mailbox.clone(), self.shared.clone(), false)
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        if self.shared.stopping.load(Ordering::Acquire) {
            // Messages not taken yet are requeued at once so the drain is quick.
            self.discard();
            return Poll::Ready(None);
        }
        if let Some(m) = super::sync::pop_front(&mut self.local) {
            return Poll::Ready(Some(m));
        }
        if !self.batch {
            return self.mailbox.poll_recv(cx);
        }
        match self.mailbox.poll_take_all(cx, &mut self.local) {
            Poll::Ready(true) => Poll::Ready(super::sync::pop_front(&mut self.local)),
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Requeues at once (no delay, no backoff) every message received but not taken: the
    /// application never saw them.
    fn discard(&mut self) {
        self.local.drain(..).for_each(Message::release);
        self.mailbox
            .take_all()
            .into_iter()
            .for_each(Message::release);
    }

    async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl Drop for MessageReceiver {
    fn drop(&mut self) {
        self.local.drain(..).for_each(Message::release);
        if self.mailbox.remove_receiver() {
            // The last receiver: nobody will take what is queued (the driver pushes nothing
            // more, and stops when it next has a message to hand out).
            self.discard();
        }
    }
}

// ---------------------------------------------------------------------------------- consumer

/// A consumer of one topic/channel over any number of nsqd connections, on runtime `R`
/// (each adapter names it `Consumer`).
///
/// Read messages with [`recv`](Self::recv) or as a [`Stream`](futures_core::Stream), or hand
/// them to a handler with [`run`](Self::run). Control it from other tasks through a
/// [`ConsumerHandle`] ([`handle`](Self::handle)).
///
/// As with go-nsq, servers can be added and removed while it runs:
/// [`connect_to_nsqd`](Self::connect_to_nsqd) / [`connect_to_lookupd`](Self::connect_to_lookupd),
/// and [`disconnect_from_nsqd`](Self::disconnect_from_nsqd) (CLS is sent, the messages in
/// flight on that nsqd can still be answered, its RDY goes to the other connections, and it
/// is not reconnected) / [`disconnect_from_lookupd`](Self::disconnect_from_lookupd) (the nsqd
/// only that lookupd listed are dropped once their connection ends; the last lookupd cannot
/// be removed). [`stats`](Self::stats) is a [`ConsumerStats`] snapshot: totals (received,
/// finished, requeued, in flight, reconnects, RDY, backoff level) and one
/// [`NsqdStats`](nsq_proto::consumer::NsqdStats) per nsqd (state, RDY, in flight, its own
/// counters).
///
/// One driver task owns the core and every socket of the consumer: bytes read from a socket
/// are decoded, delivered and answered without a hop between tasks other than the hand-off
/// to the application, which takes every message of a wake-up of the driver at once.
pub struct Consumer<R: Adapter> {
    receiver: MessageReceiver,
    handle: ConsumerHandle<R>,
}

impl<R: Adapter> fmt::Debug for Consumer<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl<R: Adapter> futures_core::Stream for Consumer<R> {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().receiver.poll_recv(cx)
    }
}

impl<R: Adapter> Consumer<R> {
    /// A builder for a consumer of `topic`/`channel` (names validated at `build`). Its
    /// [`build`](super::ConsumerBuilder::build) starts the driver on the runtime (the
    /// adapter's `Consumer::builder` says what that requires).
    pub fn builder(topic: impl IntoTopic, channel: impl IntoChannel) -> super::ConsumerBuilder<R> {
        super::ConsumerBuilder::new(topic, channel)
    }

    /// A consumer with `config`, not yet connected anywhere: add servers with
    /// [`connect_to_nsqd`](Self::connect_to_nsqd) / [`connect_to_lookupd`](Self::connect_to_lookupd).
    #[allow(
        clippy::new_ret_no_self,
        reason = "what the runtime's builders return: this type, or the blocking adapter's"
    )]
    pub fn new(
        topic: impl IntoTopic,
        channel: impl IntoChannel,
        config: &Config,
    ) -> Result<R::Consumer, Error> {
        Self::builder(topic, channel).config(config).build()
    }

    /// A cloneable control handle.
    pub fn handle(&self) -> ConsumerHandle<R> {
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

    /// See [`ConsumerHandle::events`].
    pub fn events(&self) -> Events {
        self.handle.events()
    }

    /// See [`ConsumerHandle::stats`].
    pub fn stats(&self) -> ConsumerStats {
        self.handle.stats()
    }

    /// See [`ConsumerHandle::stop`]. Messages received but not yet taken with
    /// [`recv`](Self::recv) are requeued at once, so the drain does not wait for them.
    pub async fn stop(&mut self) -> StopReport {
        let (tx, rx) = oneshot();
        if self.handle.control(Control::Stop(Some(tx))).is_err() {
            self.receiver.discard();
            return self.handle.final_report();
        }
        // The driver closes the mailbox when it starts stopping; every message still queued
        // is requeued at once.
        let receiver = &mut self.receiver;
        receiver.local.drain(..).for_each(Message::release);
        std::future::poll_fn(|cx| {
            loop {
                match receiver.mailbox.poll_take_all(cx, &mut receiver.local) {
                    Poll::Ready(true) => receiver.local.drain(..).for_each(Message::release),
                    Poll::Ready(false) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
        match rx.recv().await {
            Ok(report) => report,
            Err(_) => self.handle.final_report(),
        }
    }

    /// Runs `handler` on every message, `concurrency` at a time, until the consumer is
    /// stopped (through a [`ConsumerHandle`]); returns, with the stop's report (as
    /// [`stop`](Self::stop) gives it), once every handler has returned.
    ///
    /// On tokio each of the `concurrency` workers is a task of its own, so handlers run in
    /// parallel on a multi-threaded runtime; elsewhere they run concurrently inside the future
    /// this returns (poll it on the executor of your choice; spawn CPU-heavy work onto a
    /// thread pool yourself).
    ///
    /// `Ok(())` finishes the message; an `Err` requeues it (with backoff unless
    /// [`HandlerError::without_backoff`], after [`HandlerError::with_delay`] or the default
    /// delay); a panic requeues it with backoff. The handler may also answer or `touch` the
    /// message itself (a later answer of the same message is ignored).
    pub async fn run<H, Fut>(self, concurrency: usize, handler: H) -> StopReport
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handle.warn_if_handlers_would_wait(concurrency);
        let Consumer { receiver, handle } = self;
        let handler = Arc::new(handler);
        let mut receivers: Vec<MessageReceiver> =
            (1..concurrency.max(1)).map(|_| receiver.worker()).collect();
        // The consumer's own receiver becomes a worker too; what it took at once is handed
        // out first.
        let mut receiver = receiver;
        receiver.batch = false;
        receivers.push(receiver);
        let workers: Vec<BoxFuture<()>> = receivers
            .into_iter()
            .map(|mut receiver| {
                let handler = handler.clone();
                Box::pin(async move {
                    while let Some(msg) = receiver.recv().await {
                        handle_one(&*handler, msg).await;
                    }
                }) as BoxFuture<()>
            })
            .collect();
        handle.guard.runtime.run_workers(workers).await;
        // The workers end once the consumer stops: its report follows.
        handle.stop().await
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
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx)))
            .map_or_else(|panic| Poll::Ready(Err(panic)), |p| p.map(Ok))
    })
    .await;
    match outcome {
        Ok(result) => pending.answer(Some(result)),
        Err(panic) => pending.answer_panic(super::panic_message(&*panic)),
    }
}

// ----------------------------------------------------------------------------------- driver

struct ConsumerLogic {
    core: nsq_proto::Consumer,
    shared: Arc<Bridge>,
    mailbox: Arc<Mailbox<Message>>,
    /// Messages are handed out (false once stopping).
    handing_out: bool,
    /// Messages of this round, handed out at once by `deliver`.
    outgoing: VecDeque<Message>,
    origins: BTreeMap<ConnId, Arc<Origin<AnswerChannel>>>,
    stop_waiters: Vec<Reply<StopReport>>,
    /// `connect_to_nsqd` calls waiting for their nsqd's first connection outcome.
    connecting_to: Vec<(String, ConnectReply)>,
    /// Those resolved this round, answered once the round's stats are published (a caller
    /// told "connected" then sees the connection in `stats()`).
    connected_now: Vec<(ConnectReply, Result<(), Error>)>,
    /// `connect_to_lookupd` calls waiting for their lookupd's next answer (by its
    /// `http://..` form).
    lookupd_waiting: Vec<(String, ConnectReply)>,
    /// Each lookupd's last outcome.
    lookupd_outcome: BTreeMap<String, Result<(), Error>>,
    give_up: Option<GiveUpHook>,
    report: Option<StopReport>,
    /// The backoff level and starvation last seen (their changes are events).
    backoff_level: u32,
    starved: bool,
}

impl ConsumerLogic {
    /// Records a lookupd's outcome and resolves the `connect_to_lookupd` calls waiting for it.
    fn lookupd_answered(
        &mut self,
        key: &str,
        outcome: Result<(), nsq_proto::consumer::LookupdError>,
    ) {
        let outcome = outcome.map_err(|error| Error::Lookupd {
            lookupd: key.to_owned(),
            error,
        });
        answer_waiting(
            &mut self.lookupd_waiting,
            key,
            &outcome,
            &mut self.connected_now,
        );
        self.lookupd_outcome.insert(key.to_owned(), outcome);
    }

    /// The event stream's view of a core event, if it has one.
    fn stream_event(&self, event: &ConsumerEvent) -> Option<Event> {
        Some(match event {
            ConsumerEvent::ConnectionReady { addr, .. } => Event::Connected { nsqd: addr.clone() },
            ConsumerEvent::ConnectionClosed {
                addr,
                reason,
                retry_in,
                misconfigured,
                ..
            } => Event::Disconnected {
                nsqd: addr.clone(),
                reason: reason.clone(),
                retry_in: *retry_in,
                misconfigured: misconfigured.clone(),
            },
            ConsumerEvent::GaveUp { conn, message } => Event::GaveUp {
                nsqd: self
                    .origins
                    .get(conn)
                    .map(|o| o.addr().to_owned())
                    .unwrap_or_default(),
                id: message.id,
                attempts: message.attempts,
            },
            ConsumerEvent::LookupdFailed { addr, error } => Event::LookupdFailed {
                lookupd: addr.clone(),
                error: error.to_string(),
                misconfigured: error.is_misconfiguration(),
            },
            _ => return None,
        })
    }

    fn begin_stop(&mut self, now: Instant) {
        if self.core.is_closing() {
            return;
        }
        tracing::info!("stopping consumer");
        self.shared.stopping.store(true, Ordering::Release);
        self.handing_out = false;
        // Closing the mailbox wakes a reader waiting in recv(); it then sees `stopping`.
        self.mailbox.close();
        // CLS first, then the REQs of what was never handed out: nsqd then does not hand the
        // freed slots to more messages.
        self.core.close(now);
        for m in std::mem::take(&mut self.outgoing) {
            self.requeue_now(now, m);
        }
    }

    /// Resolves the `connect_to_nsqd` calls waiting for `addr` with its first outcome.
    fn connected(&mut self, addr: &str, outcome: &Result<(), Error>) {
        answer_waiting(
            &mut self.connecting_to,
            addr,
            outcome,
            &mut self.connected_now,
        );
    }

    /// Requeues a message the application never received: at once, without backoff.
    fn requeue_now(&mut self, now: Instant, m: Message) {
        let _ = m
            .into_answer(AnswerKind::UNTAKEN)
            .apply(&mut self.core, now);
    }

    fn origin(&self, conn: ConnId) -> Arc<Origin<AnswerChannel>> {
        match self.origins.get(&conn) {
            Some(o) => o.clone(),
            None => Origin::new("", AnswerChannel(self.shared.clone())),
        }
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
            // A refusal (typically: the connection closed, so nsqd redelivers) is logged by
            // `apply`.
            Input::Answer(a, _body) => {
                let _ = a.apply(&mut self.core, now);
            }
            Input::Control(c) => match c {
                Control::AddNsqd(a, reply) => {
                    if let Err(e) = self.core.add_nsqd(now, &a) {
                        reply.send(Err(e.into()));
                        return;
                    }
                    let addr = a.trim();
                    let ready = self.core.connections().any(|(conn, at)| {
                        at == addr
                            && self.core.connection(conn).is_some_and(|c| {
                                c.state() == nsq_proto::connection::ConnectionState::Ready
                            })
                    });
                    if ready {
                        reply.send(Ok(()));
                    } else {
                        self.connecting_to.push((addr.to_owned(), reply));
                    }
                }
                Control::DisconnectNsqd(a, reply) => {
                    reply.send(self.core.disconnect_from_nsqd(now, &a));
                }
                Control::DisconnectLookupd(a, reply) => {
                    let done = self.core.disconnect_from_lookupd(now, &a);
                    if done.is_ok() {
                        let gone = Err(nsq_proto::consumer::LookupdError::Transport(
                            "disconnected from before it answered".into(),
                        ));
                        self.lookupd_answered(&lookupd_key(&a), gone);
                        self.lookupd_outcome.remove(&lookupd_key(&a));
                    }
                    reply.send(done);
                }
                Control::AddLookupd(a, reply) => {
                    if let Err(e) = self.core.add_lookupd(now, &a) {
                        reply.send(Err(e.into()));
                        return;
                    }
                    let key = lookupd_key(&a);
                    match self.lookupd_outcome.get(&key) {
                        // Polled again now (it was parked), or never answered yet: wait.
                        Some(Err(Error::Lookupd { error, .. })) if error.is_misconfiguration() => {
                            self.lookupd_waiting.push((key, reply));
                        }
                        Some(last) => reply.send(last.clone()),
                        None => self.lookupd_waiting.push((key, reply)),
                    }
                }
                Control::SetMaxInFlight(n) => {
                    log_max_in_flight(n);
                    self.core.set_max_in_flight(now, n);
                    self.shared.max_in_flight.store(n, Ordering::Relaxed);
                }
                Control::Stop(reply) => {
                    self.stop_waiters.extend(reply);
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
        if self.shared.events.wanted() {
            if let Some(e) = self.stream_event(&event) {
                self.shared.events.emit(&e);
            }
        }
        match event {
            ConsumerEvent::Message { conn, message } => {
                let msg = Message(Delivery::new(conn, message, self.origin(conn)));
                if self.handing_out {
                    self.outgoing.push_back(msg);
                } else {
                    // Stopping: no new messages are handed out; requeue at once.
                    self.requeue_now(now, msg);
                }
            }
            ConsumerEvent::GaveUp { conn, message } => {
                if let Some(hook) = &self.give_up {
                    let message = Message(Delivery::given_up(conn, message, self.origin(conn)));
                    // The hook runs on the driver: its panic must not take the consumer down.
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        hook(&message);
                    }));
                    if let Err(panic) = ran {
                        tracing::error!(
                            msg_id = %message.id(),
                            panic = %super::panic_message(&*panic),
                            "the give-up hook panicked"
                        );
                    }
                }
            }
            ConsumerEvent::ConnectionReady { addr, .. } => self.connected(&addr, &Ok(())),
            ConsumerEvent::ConnectionClosed {
                addr,
                reason,
                misconfigured,
                ..
            } => {
                let failed = Err(match misconfigured {
                    Some(problem) => Error::Misconfigured {
                        nsqd: addr.clone(),
                        problem,
                    },
                    None => Error::Connect {
                        nsqd: addr.clone(),
                        reason,
                    },
                });
                self.connected(&addr, &failed);
            }
            ConsumerEvent::LookupdAnswered { addr, .. } => self.lookupd_answered(&addr, Ok(())),
            ConsumerEvent::LookupdFailed { addr, error } => {
                self.lookupd_answered(&addr, Err(error));
            }
            ConsumerEvent::Closed { leftovers } => {
                self.report = Some(StopReport::new(leftovers));
            }
            _ => {}
        }
    }

    fn deliver(&mut self, now: Instant) -> bool {
        if self.outgoing.is_empty() {
            return false;
        }
        if self.mailbox.push_all(&mut self.outgoing).is_ok() {
            return false;
        }
        // Nobody can receive messages any more: stop rather than loop redeliveries. CLS goes
        // out before the REQs, so nsqd does not hand the freed slots to more messages.
        if self.handing_out {
            tracing::info!("the consumer's message receiver was dropped");
        }
        self.begin_stop(now);
        for m in std::mem::take(&mut self.outgoing) {
            self.requeue_now(now, m);
        }
        true
    }

    fn after_round(&mut self) {
        let starved = self.core.is_starved();
        self.shared.starved.store(starved, Ordering::Relaxed);
        let level = self.core.backoff_level();
        let wanted = self.shared.events.wanted();
        if level != self.backoff_level {
            self.backoff_level = level;
            if wanted {
                self.shared.events.emit(&match level {
                    0 => Event::BackoffEnded,
                    level => Event::Backoff { level },
                });
            }
        }
        if starved != self.starved {
            self.starved = starved;
            if wanted {
                self.shared.events.emit(&Event::Starved(starved));
            }
        }
        // Written in place: no allocation once the snapshot has room for every nsqd.
        self.core.stats_into(
            &mut self
                .shared
                .stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (reply, outcome) in self.connected_now.drain(..) {
            reply.send(outcome);
        }
    }

    fn done(&self) -> bool {
        self.report.is_some()
    }

    fn finish(mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        self.mailbox.close();
        self.shared.events.close();
        let report = self.report.unwrap_or_default();
        *self
            .shared
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(report);
        for w in self.stop_waiters.drain(..) {
            w.send(report);
        }
        tracing::debug!(unanswered = report.unanswered, "consumer stopped");
    }
}
