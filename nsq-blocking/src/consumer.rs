//! The blocking [`Consumer`]: a driver thread around [`nsq_proto::Consumer`].

use crate::Blocking;
use crate::driver::{BATCH, Input, Net};
use crate::net;
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::client::{
    self, Answer, AnswerKind, AnswerSink, ConsumerSetup, Delivery, Error, GiveUpHook, HandlerError,
    IntoChannel, IntoTopic, Origin, StopReport,
};
use nsq_proto::consumer::{ConsumerError, ConsumerEvent, ConsumerStats};
use nsq_proto::driver::{Action, ConnId};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------ inputs

enum Control {
    AddNsqd(String, SyncSender<Result<(), ConsumerError>>),
    AddLookupd(String, SyncSender<Result<(), ConsumerError>>),
    DisconnectNsqd(String, SyncSender<Result<(), ConsumerError>>),
    DisconnectLookupd(String, SyncSender<Result<(), ConsumerError>>),
    SetMaxInFlight(u32),
    Stop,
    /// Every handle is gone: shut down gracefully.
    Dropped,
}

enum Cmd {
    /// An answer, with the body of the message it ends (dropped by the driver).
    Answer(Answer, Bytes),
    Control(Control),
}

/// State shared by the driver, the handles and the messages.
struct Shared {
    tx: Sender<Input<Cmd>>,
    stopping: AtomicBool,
    starved: AtomicBool,
    stats: Mutex<ConsumerStats>,
    /// Set by the driver when it has stopped (every connection closed, every thread joined).
    report: Mutex<Option<StopReport>>,
    stopped: Condvar,
    driver: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn answer(&self, a: Answer, body: Bytes) {
        // If the driver is gone every connection is closed: nsqd redelivers the message.
        let _ = self.tx.send(Input::Cmd(Cmd::Answer(a, body)));
    }

    /// Waits until the driver has stopped, joins its thread and returns its report. On the
    /// driver thread itself (a give-up hook asking to stop) it cannot wait: the stop goes on
    /// after the hook returns, and an empty report is returned.
    fn wait_stopped(&self) -> StopReport {
        let on_driver = self
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|h| h.thread().id() == std::thread::current().id());
        if on_driver {
            return StopReport::default();
        }
        let report = {
            let mut report = self.report.lock().unwrap_or_else(PoisonError::into_inner);
            while report.is_none() {
                report = self
                    .stopped
                    .wait(report)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            report.unwrap_or_default()
        };
        let handle = self
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        report
    }
}

/// Marks the consumer stopped even if its driver thread panicked, so nobody waits forever.
struct StoppedGuard(Arc<Shared>);

impl Drop for StoppedGuard {
    fn drop(&mut self) {
        let shared = &self.0;
        shared.stopping.store(true, Ordering::Release);
        shared
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(StopReport::default);
        shared.stopped.notify_all();
    }
}

/// Sends `Dropped` to the driver when the last user handle goes.
struct HandleGuard(Arc<Shared>);

impl Drop for HandleGuard {
    fn drop(&mut self) {
        let _ = self.0.tx.send(Input::Cmd(Cmd::Control(Control::Dropped)));
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
/// `requeue_without_backoff(delay)`, `touch()`; read it with `body()` (a slice of the read
/// buffer: zero-copy), `attempts()`, `timestamp()`, `id()`, `nsqd_address()` (see
/// [`Delivery`], shared by every adapter).
///
/// A message dropped without an answer is requeued (without backoff, with the default delay
/// for its attempt count) and a warning is logged: it is never lost silently.
pub type Message = Delivery<AnswerChannel>;

// ---------------------------------------------------------------------------------- builder

/// Builds a [`Consumer`]: topic, channel, configuration, addresses (made by
/// [`Consumer::builder`]). `build` starts the driver thread.
pub type ConsumerBuilder = nsq_proto::client::ConsumerBuilder<Blocking>;

/// Validates `setup` and starts the driver thread ([`ConsumerBuilder::build`]).
pub(crate) fn start(setup: ConsumerSetup<Message>) -> Result<Consumer, Error> {
    let start = setup.start(Instant::now(), net::random_seed)?;
    let span = start.span;
    let core = start.core;
    let lookupd_timeout = core.config().lookupd_timeout;
    let (tx, rx) = mpsc::channel();
    let (msg_tx, msg_rx) = mpsc::channel();
    let shared = Arc::new(Shared {
        tx: tx.clone(),
        stopping: AtomicBool::new(false),
        starved: AtomicBool::new(false),
        stats: Mutex::new(ConsumerStats::default()),
        report: Mutex::new(None),
        stopped: Condvar::new(),
        driver: Mutex::new(None),
    });
    let driver = Driver {
        core,
        io: Net::new(tx, start.dial_timeout, start.write_timeout, lookupd_timeout),
        shared: shared.clone(),
        msg_tx: Some(msg_tx),
        origins: BTreeMap::new(),
        give_up: start.give_up,
        report: None,
    };
    let handle = std::thread::Builder::new()
        .name("nsqb-consumer".into())
        .spawn(move || {
            let _enter = span.enter();
            let _guard = StoppedGuard(driver.shared.clone());
            driver.run(&rx);
        })
        .map_err(|e| Error::Spawn(e.to_string()))?;
    *shared.driver.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
    let handle = ConsumerHandle {
        guard: Arc::new(HandleGuard(shared)),
    };
    Ok(Consumer {
        receiver: Some(msg_rx),
        handle,
    })
}

// ---------------------------------------------------------------------------------- handles

/// A cloneable control handle of a [`Consumer`] (stop it, change max_in_flight, add or remove
/// servers)
/// usable from other threads while one thread (or [`Consumer::run`]'s pool) reads messages.
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
            .send(Input::Cmd(Cmd::Control(c)))
            .map_err(|_| Error::Closed)
    }

    fn ask(
        &self,
        make: impl FnOnce(SyncSender<Result<(), ConsumerError>>) -> Control,
    ) -> Result<(), Error> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.control(make(tx))?;
        rx.recv().map_err(|_| Error::Closed)?.map_err(Error::from)
    }

    /// Adds an nsqd TCP address (`host:port`) to consume from directly.
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::AddNsqd(addr.to_owned(), tx))
    }

    /// Adds several nsqd TCP addresses.
    pub fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        addrs
            .into_iter()
            .try_for_each(|a| self.connect_to_nsqd(a.as_ref()))
    }

    /// Adds an nsqlookupd HTTP address to discover nsqd with (polled at once, then every
    /// `lookupd_poll_interval`).
    pub fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::AddLookupd(addr.to_owned(), tx))
    }

    /// Adds several nsqlookupd HTTP addresses.
    pub fn connect_to_lookupds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        addrs
            .into_iter()
            .try_for_each(|a| self.connect_to_lookupd(a.as_ref()))
    }

    /// Stops consuming from an nsqd added with [`connect_to_nsqd`](Self::connect_to_nsqd) or
    /// the builder's `nsqd` (go-nsq's `DisconnectFromNSQD`): CLS is sent, the messages in
    /// flight on it can still be answered and it closes once they are (or after the
    /// connection's `drain_timeout`; nsqd then redelivers what is left), its RDY goes to the
    /// other connections at once, and it is not reconnected. Returns once the command is applied, not when the
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
    pub fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::DisconnectNsqd(addr.to_owned(), tx))
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
    pub fn disconnect_from_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.ask(|tx| Control::DisconnectLookupd(addr.to_owned(), tx))
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
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Graceful shutdown: CLS on every connection, no new messages are handed out (those not
    /// yet taken are requeued by the next [`Consumer::recv`], or by dropping the
    /// [`Consumer`]: a consumer that is neither read nor dropped holds them until
    /// `drain_timeout`), messages already handed out can still be answered (handlers in
    /// flight finish first); returns once every connection has drained or the consumer's
    /// `drain_timeout` passed and every thread is joined, with the number of messages left
    /// unanswered (nsqd redelivers them).
    ///
    /// Called from inside a [`Consumer::run`] handler it also waits for that handler's own
    /// message (until `drain_timeout`): answer the message first, or stop from another thread.
    pub fn stop(&self) -> StopReport {
        let _ = self.control(Control::Stop);
        self.shared().wait_stopped()
    }

    /// Whether [`stop`](Self::stop) was called (or every handle dropped).
    pub fn is_stopping(&self) -> bool {
        self.shared().stopping.load(Ordering::Acquire)
    }
}

// ---------------------------------------------------------------------------------- consumer

/// A consumer of one topic/channel over any number of nsqd connections.
///
/// Read messages with [`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout) or
/// [`iter`](Self::iter) (or `for msg in consumer`), or hand them to a handler on a pool of
/// threads with [`run`](Self::run). Control it from other threads through a
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
/// [`NsqdStats`](crate::NsqdStats) per nsqd (state, RDY, in flight, its own counters).
///
/// ```no_run
/// # fn example(consumer: &nsq_blocking::Consumer) -> Result<(), nsq_blocking::Error> {
/// consumer.disconnect_from_nsqd("10.0.0.7:4150")?; // being decommissioned
/// for nsqd in &consumer.stats().nsqd {
///     println!(
///         "{} {:?} rdy={} in_flight={} received={} reconnects={}",
///         nsqd.address, nsqd.state, nsqd.rdy, nsqd.in_flight, nsqd.received, nsqd.reconnects
///     );
/// }
/// # Ok(())
/// # }
/// ```
///
/// Dropping it stops it like [`stop`](Self::stop) and waits for that (messages still held by
/// the application are waited for, up to `drain_timeout`).
pub struct Consumer {
    /// `None` once [`run`](Self::run) took it.
    receiver: Option<Receiver<Message>>,
    handle: ConsumerHandle,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// Takes the next message from `rx`; `None` once stopping. `timeout` bounds the wait.
fn next_message(
    shared: &Shared,
    rx: &Receiver<Message>,
    timeout: Option<Duration>,
) -> Result<Message, RecvTimeoutError> {
    if shared.stopping.load(Ordering::Acquire) {
        // Messages not taken yet are requeued at once so the drain is quick.
        while let Ok(m) = rx.try_recv() {
            m.release();
        }
        return Err(RecvTimeoutError::Disconnected);
    }
    match timeout {
        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        Some(t) => rx.recv_timeout(t),
    }
}

impl Consumer {
    /// A builder for a consumer of `topic`/`channel` (names validated at `build`). Its
    /// [`build`](ConsumerBuilder::build) starts the driver thread; it works from any thread.
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

    /// The next message, waiting as long as it takes; `None` once the consumer is stopped.
    pub fn recv(&mut self) -> Option<Message> {
        let rx = self.receiver.as_ref()?;
        next_message(self.handle.shared(), rx, None).ok()
    }

    /// The next message, waiting at most `timeout`: `Err(Timeout)` if none came,
    /// `Err(Disconnected)` once the consumer is stopped.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Message, RecvTimeoutError> {
        let rx = self
            .receiver
            .as_ref()
            .ok_or(RecvTimeoutError::Disconnected)?;
        next_message(self.handle.shared(), rx, Some(timeout))
    }

    /// An iterator over the messages (blocking in `next`), ending once the consumer is
    /// stopped.
    pub fn iter(&mut self) -> Iter<'_> {
        Iter { consumer: self }
    }

    /// See [`ConsumerHandle::connect_to_nsqd`].
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.handle.connect_to_nsqd(addr)
    }

    /// See [`ConsumerHandle::connect_to_nsqds`].
    pub fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.handle.connect_to_nsqds(addrs)
    }

    /// See [`ConsumerHandle::connect_to_lookupd`].
    pub fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.handle.connect_to_lookupd(addr)
    }

    /// See [`ConsumerHandle::connect_to_lookupds`].
    pub fn connect_to_lookupds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.handle.connect_to_lookupds(addrs)
    }

    /// See [`ConsumerHandle::disconnect_from_nsqd`].
    pub fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.handle.disconnect_from_nsqd(addr)
    }

    /// See [`ConsumerHandle::disconnect_from_lookupd`].
    pub fn disconnect_from_lookupd(&self, addr: &str) -> Result<(), Error> {
        self.handle.disconnect_from_lookupd(addr)
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
    pub fn stop(&mut self) -> StopReport {
        let _ = self.handle.control(Control::Stop);
        if let Some(rx) = &self.receiver {
            // The driver drops its sender when it starts stopping; every message still queued
            // is requeued at once.
            while let Ok(m) = rx.recv() {
                m.release();
            }
        }
        self.handle.shared().wait_stopped()
    }

    /// Runs `handler` on every message, on a pool of `concurrency` threads, until the consumer
    /// is stopped (through a [`ConsumerHandle`]); returns once every handler has returned and
    /// the consumer has stopped.
    ///
    /// `Ok(())` finishes the message; an `Err` requeues it (with backoff unless
    /// [`HandlerError::without_backoff`], after [`HandlerError::with_delay`] or the default
    /// delay); a panic requeues it with backoff. The handler may also answer or `touch` the
    /// message itself (a later answer of the same message is ignored). The handler need not
    /// be `'static`: the pool is scoped to this call.
    pub fn run<H>(mut self, concurrency: usize, handler: H) -> StopReport
    where
        H: Fn(Message) -> Result<(), HandlerError> + Sync,
    {
        let Some(rx) = self.receiver.take() else {
            return self.handle.shared().wait_stopped();
        };
        let receiver = Mutex::new(rx);
        let shared: &Shared = self.handle.shared();
        let handler = &handler;
        std::thread::scope(|scope| {
            for i in 0..concurrency.max(1) {
                let receiver = &receiver;
                let spawned = std::thread::Builder::new()
                    .name(format!("nsqb-handler-{i}"))
                    .spawn_scoped(scope, move || worker(shared, receiver, handler));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "could not start a handler thread");
                }
            }
        });
        // Every worker saw the stop; messages still queued are requeued at once.
        let rx = receiver
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        while let Ok(m) = rx.try_recv() {
            m.release();
        }
        drop(rx);
        shared.wait_stopped()
    }
}

fn worker<H>(shared: &Shared, receiver: &Mutex<Receiver<Message>>, handler: &H)
where
    H: Fn(Message) -> Result<(), HandlerError> + Sync,
{
    loop {
        let next = {
            let rx = receiver.lock().unwrap_or_else(PoisonError::into_inner);
            next_message(shared, &rx, None)
        };
        let Ok(mut msg) = next else { break };
        let pending = msg.take_over();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(msg))).ok();
        pending.answer(outcome);
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if self.receiver.is_some() {
            self.stop();
        }
    }
}

/// The iterator of [`Consumer::iter`]: blocks in `next` until a message arrives; ends once the
/// consumer is stopped.
#[derive(Debug)]
pub struct Iter<'a> {
    consumer: &'a mut Consumer,
}

impl Iterator for Iter<'_> {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        self.consumer.recv()
    }
}

/// The owning iterator of a [`Consumer`] (`for msg in consumer`); dropping it stops the
/// consumer.
#[derive(Debug)]
pub struct IntoIter {
    consumer: Consumer,
}

impl Iterator for IntoIter {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        self.consumer.recv()
    }
}

impl IntoIterator for Consumer {
    type Item = Message;
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter { consumer: self }
    }
}

// ----------------------------------------------------------------------------------- driver

struct Driver {
    core: nsq_proto::Consumer,
    io: Net<Cmd>,
    shared: Arc<Shared>,
    msg_tx: Option<Sender<Message>>,
    origins: BTreeMap<ConnId, Arc<Origin<AnswerChannel>>>,
    give_up: Option<GiveUpHook<Message>>,
    report: Option<StopReport>,
}

impl Driver {
    fn run(mut self, rx: &Receiver<Input<Cmd>>) {
        let mut batch = Vec::with_capacity(BATCH);
        self.drain(Instant::now());
        self.io.flush();
        while self.report.is_none() {
            if !Net::wait(rx, self.core.poll_timeout(), &mut batch) {
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
            self.io.flush();
            self.publish_state();
        }
        self.shared.stopping.store(true, Ordering::Release);
        self.msg_tx = None;
        self.io.shutdown();
        self.publish_state();
        let report = self.report.unwrap_or_default();
        tracing::debug!(unanswered = report.unanswered, "consumer stopped");
        *self
            .shared
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(report);
        self.shared.stopped.notify_all();
    }

    fn handle(&mut self, now: Instant, input: Input<Cmd>) {
        match input {
            Input::Cmd(Cmd::Answer(a, _body)) => {
                let _ = a.apply(&mut self.core, now);
            }
            Input::Net(ev) => self.io.net_input(&mut self.core, now, ev),
            Input::Lookup(ev) => self.io.lookup_input(&mut self.core, now, ev),
            Input::Cmd(Cmd::Control(c)) => match c {
                Control::AddNsqd(a, reply) => {
                    let _ = reply.send(self.core.add_nsqd(now, &a));
                }
                Control::DisconnectNsqd(a, reply) => {
                    let _ = reply.send(self.core.disconnect_from_nsqd(now, &a));
                }
                Control::DisconnectLookupd(a, reply) => {
                    let _ = reply.send(self.core.disconnect_from_lookupd(now, &a));
                }
                Control::AddLookupd(a, reply) => {
                    let _ = reply.send(self.core.add_lookupd(now, &a));
                }
                Control::SetMaxInFlight(n) => {
                    client::log_max_in_flight(n);
                    self.core.set_max_in_flight(now, n);
                }
                Control::Stop | Control::Dropped => self.begin_stop(now),
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
        self.core.close(now);
    }

    /// Drains every action and event of the core.
    fn drain(&mut self, now: Instant) {
        loop {
            let mut progressed = false;
            while let Some(action) = self.core.poll_action() {
                progressed = true;
                match &action {
                    Action::Connect { conn, addr } => {
                        self.origins.insert(
                            *conn,
                            Origin::new(addr.clone(), AnswerChannel(self.shared.clone())),
                        );
                    }
                    Action::Disconnect { conn } => {
                        self.origins.remove(conn);
                    }
                    _ => {}
                }
                self.io.act(action);
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

    fn event(&mut self, now: Instant, event: ConsumerEvent) {
        client::log_consumer_event(&event, |c| self.origins.get(&c).map(|o| o.addr()));
        match event {
            ConsumerEvent::Message { conn, message } => {
                let origin = match self.origins.get(&conn) {
                    Some(o) => o.clone(),
                    None => Origin::new("", AnswerChannel(self.shared.clone())),
                };
                let msg = Delivery::new(conn, message, origin);
                // While stopping (no sender) no new messages are handed out: requeue at once.
                let unsent = match &self.msg_tx {
                    Some(tx) => tx.send(msg).err().map(|e| e.0),
                    None => Some(msg),
                };
                if unsent.is_some() && self.msg_tx.is_some() {
                    // Nobody can receive messages any more: stop instead of redelivering
                    // them in a loop.
                    self.begin_stop(now);
                }
                if let Some(m) = unsent {
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

    fn publish_state(&self) {
        self.shared
            .starved
            .store(self.core.is_starved(), Ordering::Relaxed);
        // Written in place: no allocation once the snapshot has room for every nsqd.
        self.core.stats_into(
            &mut self
                .shared
                .stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
}
