//! The [`Consumer`] of every runtime: its handles, its messages and their hand-off to the
//! application. The logic of its driver around the core [`Consumer`](nsq_proto::Consumer)
//! is in `logic`.

mod batches;
mod logic;

pub use batches::Batches;

use crate::driver::{self, Net};
use crate::events::Events;
use crate::handler::Outcome;
use crate::message::Message;
use crate::runtime::{BoxFuture, CallWaiter, Calls, Ended, Runtime, SocketOptions, wait_for};
use crate::sync::{Inbox, Mailbox, oneshot};
use crate::{ConsumerSetup, Error, HandlerError, IntoChannel, IntoTopic, StopReport};
use logic::{Bridge, ConsumerLogic, Control, Input, Reply};
use nsq_proto::Config;
use nsq_proto::consumer::{ConsumerError, ConsumerStats};
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};

/// Sends `Dropped` to the driver when the last user handle goes.
struct HandleGuard {
    shared: Arc<Bridge>,
    runtime: Arc<dyn Runtime>,
    ended: Arc<Ended>,
}

impl Drop for HandleGuard {
    fn drop(&mut self) {
        let _ = self.shared.inbox.send(Input::Control(Control::Dropped));
    }
}

// ----------------------------------------------------------------------------------- start

/// Validates `setup` and starts the driver on its runtime (found for a client whose calls
/// are `calls`, unless the builder was given one): [`ConsumerBuilder::build`](super::ConsumerBuilder::build).
pub(crate) fn start(setup: ConsumerSetup, calls: Calls) -> Result<Consumer, Error> {
    let runtime = setup.runtime.runtime(calls)?;
    let start = setup.start(runtime.now(), super::random_seed)?;
    let inbox = Inbox::new();
    let mailbox = Mailbox::new();
    let shared = Arc::new(Bridge::new(
        inbox.clone(),
        start.machine.max_in_flight(),
        start.span.clone(),
        start.metrics.batches(),
    ));
    let logic = ConsumerLogic::new(
        start.machine,
        shared.clone(),
        mailbox.clone(),
        start.give_up,
        start.metrics,
        start.auto_touch_limit,
    );
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
        waiter: CallWaiter::of(&*handle.guard.runtime),
        receiver: MessageReceiver::new(mailbox, shared, true),
        handle,
    })
}

// ---------------------------------------------------------------------------------- handles

/// A cloneable control handle of a [`Consumer`] (stop it, change max_in_flight, add or
/// remove servers), usable while another task reads the messages. Made by
/// [`Consumer::handle`], or borrowed with [`Consumer::as_handle`]; cheap to clone,
/// `Send + Sync`.
pub struct ConsumerHandle {
    guard: Arc<HandleGuard>,
}

impl Clone for ConsumerHandle {
    fn clone(&self) -> Self {
        ConsumerHandle {
            guard: self.guard.clone(),
        }
    }
}

impl fmt::Debug for ConsumerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHandle")
            .field("stats", &self.stats())
            .finish()
    }
}

impl ConsumerHandle {
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
    /// its first connection's outcome (go-nsq's `ConnectToNSQD` returns the dial's error
    /// too): `Ok` once connected and subscribed, else:
    /// - [`Error::AlreadyConnected`] when a connection to it is open or being opened
    ///   (go-nsq's `ErrAlreadyConnected`): nothing changes.
    /// - [`Error::Misconfigured`] when the address cannot work as configured (not nsqd's TCP
    ///   port, a TLS mismatch, refused credentials). The consumer does not retry it on its
    ///   own; calling `connect_to_nsqd` again tries once more.
    /// - [`Error::Connect`] with the reason otherwise (refused, timed out, reset, ...): the
    ///   consumer keeps the address and reconnects to it with backoff.
    ///
    /// [`disconnect_from_nsqd`](Self::disconnect_from_nsqd) gives an address up.
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.add_nsqd(addr, true).await
    }

    /// Adds `addr` and waits for its first outcome; `strict`: refused when a connection to it
    /// is open or being opened.
    async fn add_nsqd(&self, addr: &str, strict: bool) -> Result<(), Error> {
        let (tx, rx) = oneshot();
        self.control(Control::AddNsqd(addr.to_owned(), strict, tx))?;
        rx.recv().await.map_err(|_| Error::Closed)?
    }

    /// Waits for the first outcome of each nsqd the builder added (`ConsumerBuilder::connect`).
    pub(crate) async fn await_nsqds(&self, addrs: &[String]) -> Result<(), Error> {
        for a in addrs {
            self.add_nsqd(a, false).await?;
        }
        Ok(())
    }

    /// Adds several nsqd TCP addresses (see [`connect_to_nsqd`](Self::connect_to_nsqd)), one
    /// after the other; the first error is returned.
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

    /// Adds several nsqlookupd HTTP addresses (see
    /// [`connect_to_lookupd`](Self::connect_to_lookupd)), one after the other; the first error
    /// is returned.
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
    /// [`NsqdDiscovered`](nsq_proto::consumer::ConsumerError::NsqdDiscovered) for one known
    /// only through nsqlookupd (disconnect from the lookupd instead); [`Error::InvalidInput`]
    /// for an address that is not `host:port`; [`Error::Closed`] once the consumer is
    /// stopping.
    pub async fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::DisconnectNsqd(addr.to_owned(), tx))
            .await
    }

    /// Stops polling an nsqlookupd added with [`connect_to_lookupd`](Self::connect_to_lookupd)
    /// or the builder's `lookupd` (go-nsq's `DisconnectFromNSQLookupd`); `addr` is matched as
    /// `connect_to_lookupd` reads it. The nsqd that only it listed stay connected until their
    /// connection ends, and are not reconnected.
    pub async fn disconnect_from_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::DisconnectLookupd(addr.to_owned(), tx))
            .await
    }

    /// Changes max_in_flight at runtime (0 pauses the consumer).
    pub fn set_max_in_flight(&self, n: u32) {
        let _ = self.control(Control::SetMaxInFlight(n));
    }

    /// The batches handed over so far ([`BatchStats`](crate::BatchStats)): how many, their
    /// messages, why each ended, the failed ones, the largest.
    pub fn batch_stats(&self) -> crate::BatchStats {
        self.shared().batches.stats()
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

    /// A snapshot of the counters, in total and per nsqd
    /// ([`ConsumerStats`](nsq_proto::consumer::ConsumerStats)). The totals are updated after
    /// every wake-up of the driver. So are the per-nsqd rows (`nsqd`) up to 16 nsqd; above that,
    /// when the set of nsqd or connections changes and otherwise at most every 100 ms (writing
    /// them costs a look at every nsqd, and a consumer of 1,000 nsqd wakes up thousands of
    /// times a second), and they are never more than about 100 ms behind.
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
    ///
    /// Awaited inside a handler of this consumer's [`Consumer::run`] (as go-nsq's `Stop`
    /// from `HandleMessage`), it begins the stop and resolves at once with an empty report:
    /// the drain cannot finish before that handler returns. The handler's own message is
    /// then answered by its result, and `run` returns the stop's report once every handler
    /// has returned.
    pub async fn stop(&self) -> StopReport {
        if self.in_own_handler() {
            // The drain waits for every message handed out, this handler's own included,
            // which is answered once the handler returns: begin the stop and return.
            self.request_stop();
            return StopReport::default();
        }
        let (tx, rx) = oneshot();
        if self.control(Control::Stop(Some(tx))).is_ok() {
            if let Ok(report) = rx.recv().await {
                return report;
            }
        }
        self.final_report()
    }

    /// This consumer's identity for [`HANDLING`].
    fn id(&self) -> usize {
        Arc::as_ptr(&self.guard.shared) as usize
    }

    /// Whether the caller is a handler of this consumer's `run` (on this thread).
    pub(crate) fn in_own_handler(&self) -> bool {
        HANDLING.with(Cell::get) == self.id()
    }

    /// Runs `f` as a handler of this consumer's `run`: a [`stop`](Self::stop) inside it begins
    /// the stop without waiting for the drain.
    pub(crate) fn as_handler<T>(&self, f: impl FnOnce() -> T) -> T {
        as_handler_of(self.id(), f)
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
            self.in_span(|| {
                tracing::warn!(
                    concurrency,
                    max_in_flight,
                    "more handlers than max_in_flight: at most max_in_flight messages are \
                     handled at a time (raise max_in_flight to keep every handler busy)"
                );
            });
        }
    }

    /// Runs `f` (which logs) inside the consumer's span, on the application's task.
    pub(crate) fn in_span<T>(&self, f: impl FnOnce() -> T) -> T {
        self.shared().span.in_scope(f)
    }

    /// Starts a graceful stop without waiting for it (the blocking API, on the driver's own
    /// thread, cannot wait).
    pub(crate) fn request_stop(&self) {
        let _ = self.control(Control::Stop(None));
    }

    /// The runtime the driver runs on (a blocking call waits through it).
    pub(crate) fn runtime(&self) -> &dyn Runtime {
        &*self.guard.runtime
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
    /// A message taken for a batch that had no room for it (`max_bytes`): the next one's
    /// first.
    carried: Option<Message>,
}

impl MessageReceiver {
    fn new(mailbox: Arc<Mailbox<Message>>, shared: Arc<Bridge>, batch: bool) -> Self {
        MessageReceiver {
            mailbox,
            shared,
            local: VecDeque::new(),
            batch,
            carried: None,
        }
    }

    /// Another receiver of the same mailbox, taking one message at a time.
    fn worker(&self) -> Self {
        self.mailbox.add_receiver();
        MessageReceiver::new(self.mailbox.clone(), self.shared.clone(), false)
    }

    /// What `poll_recv` answers without waiting (a message taken earlier, or the end once the
    /// consumer stops); `Pending` when that needs the mailbox.
    fn at_hand(&mut self) -> Poll<Option<Message>> {
        if self.shared.stopping.load(Ordering::Acquire) {
            // Messages not taken yet are requeued at once so the drain is quick.
            self.discard();
            return Poll::Ready(None);
        }
        if let Some(m) = self.carried.take() {
            // Taken already.
            return Poll::Ready(Some(m));
        }
        match super::sync::pop_front(&mut self.local) {
            Some(mut m) => {
                m.taken();
                Poll::Ready(Some(m))
            }
            None => Poll::Pending,
        }
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        if let Poll::Ready(at_hand) = self.at_hand() {
            return Poll::Ready(at_hand);
        }
        if !self.batch {
            let mut polled = self.mailbox.poll_recv(cx);
            if let Poll::Ready(Some(m)) = &mut polled {
                m.taken();
            }
            return polled;
        }
        match self.mailbox.poll_take_all(cx, &mut self.local) {
            Poll::Ready(true) => {
                let mut next = super::sync::pop_front(&mut self.local);
                if let Some(m) = &mut next {
                    m.taken();
                }
                Poll::Ready(next)
            }
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Requeues at once (no delay, no backoff) every message received but not taken: the
    /// application never saw them.
    fn discard(&mut self) {
        if let Some(m) = self.carried.take() {
            m.release();
        }
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
        if let Some(m) = self.carried.take() {
            m.release();
        }
        self.local.drain(..).for_each(Message::release);
        if self.mailbox.remove_receiver() {
            // The last receiver: nobody will take what is queued (the driver pushes nothing
            // more, and stops when it next has a message to hand out).
            self.discard();
        }
    }
}

// ---------------------------------------------------------------------------------- consumer

/// A consumer of one topic/channel over any number of nsqd connections.
///
/// Read messages with [`recv`](Self::recv) or as a `Stream` (`futures_core::Stream`, for the
/// combinators of `futures`/`futures-lite`/`tokio-stream`), or hand them to a handler with
/// [`run`](Self::run). Control it through its [`ConsumerHandle`]: borrowed with
/// [`as_handle`](Self::as_handle) (`consumer.as_handle().stats()`), or cloned with
/// [`handle`](Self::handle) for other tasks.
///
/// As with go-nsq, servers can be added and removed while it runs:
/// [`connect_to_nsqd`](ConsumerHandle::connect_to_nsqd) /
/// [`connect_to_lookupd`](ConsumerHandle::connect_to_lookupd), and
/// [`disconnect_from_nsqd`](ConsumerHandle::disconnect_from_nsqd) (CLS is sent, the messages
/// in flight on that nsqd can still be answered, its RDY goes to the other connections, and
/// it is not reconnected) /
/// [`disconnect_from_lookupd`](ConsumerHandle::disconnect_from_lookupd) (the nsqd only that
/// lookupd listed are dropped once their connection ends; the last lookupd cannot be
/// removed). [`stats`](ConsumerHandle::stats) is a
/// [`ConsumerStats`](nsq_proto::consumer::ConsumerStats) snapshot: totals (received,
/// finished, requeued, in flight, reconnects, RDY, backoff level) and one
/// [`NsqdStats`](nsq_proto::consumer::NsqdStats) per nsqd (state, RDY, in flight, its own
/// counters).
///
/// One driver owns the core and every socket of the consumer: bytes read from a socket are
/// decoded, delivered and answered without a hop between tasks other than the hand-off to
/// the application, which takes every message of a wake-up of the driver at once. A message
/// dropped without an answer is requeued (and a warning logged).
///
/// The application never holds more than `max_in_flight` messages (received and not
/// answered, over every nsqd, whether read with `recv` or handed to `run`'s handlers). A
/// message an nsqd sends after its RDY was taken back, too late to fit, goes back to it at
/// once without reaching the application
/// ([`ConsumerStats::returned`](nsq_proto::consumer::ConsumerStats::returned) says when and
/// what it costs).
///
/// [`Consumer::builder`] makes one.
pub struct Consumer {
    receiver: MessageReceiver,
    handle: ConsumerHandle,
    /// How [`poll_recv`](Consumer::poll_recv) waits (driving the client meanwhile where the
    /// runtime does).
    waiter: CallWaiter,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// The consumer's messages, as [`recv`](Consumer::recv) returns them; the stream ends once
/// the consumer is stopped.
impl futures_core::Stream for Consumer {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Consumer {
    /// A builder for a consumer of `topic`/`channel` (names validated by
    /// [`build`](super::ConsumerBuilder::build)), with the default
    /// [`Config`](nsq_proto::Config); set servers, configuration and hooks on it, then
    /// [`build`](super::ConsumerBuilder::build) or
    /// [`connect`](super::ConsumerBuilder::connect).
    pub fn builder(topic: impl IntoTopic, channel: impl IntoChannel) -> super::ConsumerBuilder {
        super::ConsumerBuilder::new(topic, channel)
    }

    /// A consumer of `topic`/`channel` with `config`, not yet connected anywhere: add servers
    /// with [`connect_to_nsqd`](ConsumerHandle::connect_to_nsqd) /
    /// [`connect_to_lookupd`](ConsumerHandle::connect_to_lookupd). Starts it as
    /// [`build`](super::ConsumerBuilder::build) does.
    pub fn new(
        topic: impl IntoTopic,
        channel: impl IntoChannel,
        config: &Config,
    ) -> Result<Self, Error> {
        Self::builder(topic, channel).config(config).build()
    }

    /// A cloneable control handle (stop the consumer, change max_in_flight, add or remove
    /// servers), usable while this consumer reads the messages.
    pub fn handle(&self) -> ConsumerHandle {
        self.handle.clone()
    }

    /// Its control handle, borrowed: the handle's methods (connect, disconnect,
    /// `set_max_in_flight`, `stats`, `events`, ...) without a clone.
    pub fn as_handle(&self) -> &ConsumerHandle {
        &self.handle
    }

    /// The next message; `None` once the consumer is stopped.
    pub async fn recv(&mut self) -> Option<Message> {
        // Most calls find a message of the last batch at hand.
        if let Poll::Ready(at_hand) = self.receiver.at_hand() {
            return at_hand;
        }
        // This call's own waiter: dropped with the future, it waits no more.
        let mut waiter = CallWaiter::of(self.handle.runtime());
        let receiver = &mut self.receiver;
        std::future::poll_fn(|cx| waiter.poll(cx, |cx| receiver.poll_recv(cx))).await
    }

    /// Polls for the next message (`Stream::poll_next` semantics): `Ready(None)` once the
    /// consumer is stopped.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let receiver = &mut self.receiver;
        self.waiter.poll(cx, |cx| receiver.poll_recv(cx))
    }

    /// Graceful shutdown (as [`ConsumerHandle::stop`]): CLS on every connection, no new
    /// messages are handed out, messages already handed out can still be answered; resolves
    /// once every connection has drained or the consumer's `drain_timeout` passed, with the
    /// number of messages left unanswered (nsqd redelivers them). Messages received but not
    /// yet taken with [`recv`](Self::recv) are requeued at once, so the drain does not wait
    /// for them.
    pub async fn stop(&mut self) -> StopReport {
        let (tx, rx) = oneshot();
        if self.handle.control(Control::Stop(Some(tx))).is_err() {
            self.receiver.discard();
            return self.handle.final_report();
        }
        // The driver closes the mailbox when it starts stopping; every message still queued
        // is requeued at once.
        let receiver = &mut self.receiver;
        if let Some(m) = receiver.carried.take() {
            m.release();
        }
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
    /// `Ok(())` finishes the message; an `Err` requeues it (with backoff unless
    /// [`HandlerError::without_backoff`], after [`HandlerError::with_delay`] or the default
    /// delay); a panic requeues it with backoff. The handler may also answer or `touch` the
    /// message itself (a later answer of the same message is ignored). Where the workers run
    /// is the runtime's part (the adapter's documentation says: on tokio each is a task of
    /// its own, so handlers run in parallel on a multi-threaded runtime; elsewhere they are
    /// polled inside the returned future).
    pub async fn run<H, Fut>(self, concurrency: usize, handler: H) -> StopReport
    where
        H: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handle.warn_if_handlers_would_wait(concurrency);
        let Consumer {
            receiver,
            handle,
            waiter,
        } = self;
        let handler = Arc::new(handler);
        let id = handle.id();
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
                        handle_one(&*handler, id, msg).await;
                    }
                }) as BoxFuture<()>
            })
            .collect();
        // The workers drive the client while they wait, where the runtime lets calls drive.
        wait_for(waiter, handle.runtime().run_workers(workers)).await;
        // The workers end once the consumer stops: its report follows.
        handle.stop().await
    }

    /// Starts the consumer of `setup` and waits for the first outcome of each of its servers
    /// ([`ConsumerBuilder::connect`](super::ConsumerBuilder::connect)).
    pub(crate) fn connecting(
        setup: ConsumerSetup,
    ) -> impl Future<Output = Result<Consumer, Error>> + Send + 'static {
        let (nsqd, lookupd) = (setup.nsqd.clone(), setup.lookupd.clone());
        let consumer = start(setup, Calls::Async);
        async move {
            let consumer = consumer?;
            consumer.handle.await_nsqds(&nsqd).await?;
            consumer.handle.connect_to_lookupds(&lookupd).await?;
            Ok(consumer)
        }
    }
}

thread_local! {
    /// The consumer (its [`ConsumerHandle::id`]) whose `run` handler this thread is running, or
    /// 0.
    static HANDLING: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f` as a handler of the consumer `id` ([`ConsumerHandle::as_handler`]).
fn as_handler_of<T>(id: usize, f: impl FnOnce() -> T) -> T {
    /// Puts the outer value back however `f` ends.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            HANDLING.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(HANDLING.with(|h| h.replace(id)));
    f()
}

/// Runs the handler on one message (as a handler of the consumer `id`) and answers it.
async fn handle_one<H, Fut>(handler: &H, id: usize, mut msg: Message)
where
    H: Fn(Message) -> Fut,
    Fut: Future<Output = Result<(), HandlerError>>,
{
    let pending = msg.take_over();
    // The handler runs in its message's span: what it logs says which message it is about.
    let span = msg.span();
    let mut fut = std::pin::pin!(span.in_scope(|| handler(msg)));
    let outcome = std::future::poll_fn(|cx| {
        span.in_scope(|| {
            let poll = || as_handler_of(id, || fut.as_mut().poll(cx));
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(poll))
                .map_or_else(|panic| Poll::Ready(Err(panic)), |p| p.map(Ok))
        })
    })
    .await;
    pending.answer(&Outcome::caught(outcome));
}
