//! The blocking [`Consumer`], its [`ConsumerHandle`], iterators and [`ConsumerBuilder`].

use super::{Events, call, call_for, wait_ended};
use crate::StopReport;
use crate::batch::Runner;
use crate::runtime::{Calls, Runtime};
use crate::{Batch, BatchOptions, BatchStats};
use crate::{ConsumerSetup, Error, HandlerError, IntoChannel, IntoTopic, Message, Outcome};
use nsq_proto::Config;
use nsq_proto::consumer::{ConsumerConfig, ConsumerStats};
use std::fmt;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

// ---------------------------------------------------------------------------------- handle

/// A cloneable control handle of a [`Consumer`], usable from other threads while one thread
/// (or [`Consumer::run`]'s pool) reads messages. Made by [`Consumer::handle`], or borrowed
/// with [`Consumer::as_handle`]; cheap to clone, `Send + Sync`. Each call blocks the calling
/// thread until its result is known.
#[derive(Debug, Clone)]
pub struct ConsumerHandle(crate::ConsumerHandle);

impl ConsumerHandle {
    fn rt(&self) -> &dyn Runtime {
        self.0.runtime()
    }

    /// Adds an nsqd TCP address (`host:port`) to consume from directly, and returns its
    /// first connection's outcome (go-nsq's `ConnectToNSQD` returns the dial's error too):
    /// `Ok` once connected and subscribed, else:
    /// - [`Error::AlreadyConnected`] when a connection to it is open or being opened
    ///   (go-nsq's `ErrAlreadyConnected`): nothing changes.
    /// - [`Error::Misconfigured`] when the address cannot work as configured (not nsqd's TCP
    ///   port, a TLS mismatch, refused credentials). The consumer does not retry it on its
    ///   own; calling `connect_to_nsqd` again tries once more.
    /// - [`Error::Connect`] with the reason otherwise (refused, timed out, reset, ...): the
    ///   consumer keeps the address and reconnects to it with backoff.
    ///
    /// [`disconnect_from_nsqd`](Self::disconnect_from_nsqd) gives an address up.
    pub fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        call(self.rt(), self.0.connect_to_nsqd(addr))
    }

    /// Adds several nsqd TCP addresses (see [`connect_to_nsqd`](Self::connect_to_nsqd)), one
    /// after the other; the first error is returned.
    pub fn connect_to_nsqds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        call(self.rt(), self.0.connect_to_nsqds(addrs))
    }

    /// Adds an nsqlookupd HTTP address to discover nsqd with (polled at once, then every
    /// `lookupd_poll_interval`), and returns its first query's outcome: `Ok` once it has
    /// answered (listing the topic's nsqd, which are then being connected to, or none yet),
    /// else [`Error::Lookupd`]. An address that is not an nsqlookupd's HTTP port (nsqd's
    /// ports, nsqlookupd's TCP port) is not polled again until it is added again; any other
    /// failure is polled again on schedule. For a lookupd already added, the last outcome
    /// is returned at once.
    pub fn connect_to_lookupd(&self, addr: &str) -> Result<(), Error> {
        call(self.rt(), self.0.connect_to_lookupd(addr))
    }

    /// Adds several nsqlookupd HTTP addresses (see
    /// [`connect_to_lookupd`](Self::connect_to_lookupd)), one after the other; the first
    /// error is returned.
    pub fn connect_to_lookupds<I, S>(&self, addrs: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        call(self.rt(), self.0.connect_to_lookupds(addrs))
    }

    /// Stops consuming from an nsqd added with [`connect_to_nsqd`](Self::connect_to_nsqd) or
    /// the builder's `nsqd` (go-nsq's `DisconnectFromNSQD`): CLS is sent, the messages in
    /// flight on it can still be answered and it closes once they are (or after the
    /// connection's `drain_timeout`; nsqd then redelivers what is left), its RDY goes to the
    /// other connections at once, and it is not reconnected. Returns once the command is
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
    pub fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), Error> {
        call(self.rt(), self.0.disconnect_from_nsqd(addr))
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
        call(self.rt(), self.0.disconnect_from_lookupd(addr))
    }

    /// Changes max_in_flight at runtime (0 pauses the consumer).
    pub fn set_max_in_flight(&self, n: u32) {
        self.0.set_max_in_flight(n);
    }

    /// The batches handed over so far ([`BatchStats`]).
    pub fn batch_stats(&self) -> BatchStats {
        self.0.batch_stats()
    }

    /// True when some connection has nearly as many messages in flight as its RDY: a
    /// batching handler should process what it has now.
    pub fn is_starved(&self) -> bool {
        self.0.is_starved()
    }

    /// What happens to the consumer from now on ([`Events`]). It ends when the consumer has
    /// stopped.
    pub fn events(&self) -> Events {
        Events(self.0.events())
    }

    /// A snapshot of the counters, in total and per nsqd ([`ConsumerStats`]). The totals are
    /// updated after every wake-up of the driver. So are the per-nsqd rows (`nsqd`) up to 16
    /// nsqd; above that, when the set of nsqd or connections changes and otherwise at most
    /// every 100 ms, and they are never more than about 100 ms behind.
    pub fn stats(&self) -> ConsumerStats {
        self.0.stats()
    }

    /// Whether the consumer is stopping or stopped ([`stop`](Self::stop) was called, every
    /// handle was dropped, or nobody can receive its messages any more).
    pub fn is_stopping(&self) -> bool {
        self.0.is_stopping()
    }

    /// Graceful shutdown: CLS on every connection, no new messages are handed out, messages
    /// already handed out can still be answered; returns once every connection has drained
    /// or `drain_timeout` passed and the driver has ended, with the number of messages left
    /// unanswered (nsqd redelivers them).
    ///
    /// Called from inside a handler of this consumer's [`Consumer::run`] (as go-nsq's `Stop`
    /// from `HandleMessage`), or from a give-up hook (which runs on the driver's thread), it
    /// begins the stop and returns at once with an empty report: the drain cannot finish
    /// before the caller returns. The handler's own message is then answered by its result,
    /// and `run` returns the stop's report once every handler has returned.
    pub fn stop(&self) -> StopReport {
        let ended = self.0.ended();
        if ended.is_current() || self.0.in_own_handler() {
            // A give-up hook runs on the driver, and a `run` handler's own message is only
            // answered once it returns: neither can wait for the drain. Begin the stop.
            self.0.request_stop();
            return StopReport::default();
        }
        let report = call(self.rt(), self.0.stop());
        wait_ended(self.rt(), ended);
        report
    }
}

// -------------------------------------------------------------------------------- consumer

/// A consumer of one topic/channel over any number of nsqd connections; each call blocks the
/// calling thread until its result is known.
///
/// Read messages with [`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout) or
/// [`iter`](Self::iter) (or `for msg in consumer`), or hand them to a handler on a pool of
/// threads with [`run`](Self::run). Control it through its [`ConsumerHandle`]: borrowed with
/// [`as_handle`](Self::as_handle) (`consumer.as_handle().stats()`), or cloned with
/// [`handle`](Self::handle) for other threads.
///
/// As with go-nsq, servers can be added and removed while it runs:
/// [`connect_to_nsqd`](ConsumerHandle::connect_to_nsqd) /
/// [`connect_to_lookupd`](ConsumerHandle::connect_to_lookupd), and
/// [`disconnect_from_nsqd`](ConsumerHandle::disconnect_from_nsqd) /
/// [`disconnect_from_lookupd`](ConsumerHandle::disconnect_from_lookupd).
/// [`stats`](ConsumerHandle::stats) is a [`ConsumerStats`] snapshot: totals and one
/// [`NsqdStats`](nsq_proto::consumer::NsqdStats) per nsqd. A message dropped without an
/// answer is requeued (and a warning logged).
///
/// Dropping it stops it like [`stop`](Self::stop) and waits for that (messages still held by
/// the application are waited for, up to `drain_timeout`).
///
/// [`Consumer::builder`] makes one.
pub struct Consumer {
    inner: crate::Consumer,
    handle: ConsumerHandle,
    stopped: bool,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Consumer {
    fn from_async(inner: crate::Consumer) -> Self {
        Consumer {
            handle: ConsumerHandle(inner.handle()),
            inner,
            stopped: false,
        }
    }

    /// A builder for a consumer of `topic`/`channel` (names validated by
    /// [`build`](ConsumerBuilder::build)), with the default [`Config`]; set servers,
    /// configuration and hooks on it, then [`build`](ConsumerBuilder::build) or
    /// [`connect`](ConsumerBuilder::connect).
    pub fn builder(topic: impl IntoTopic, channel: impl IntoChannel) -> ConsumerBuilder {
        ConsumerBuilder::new(topic, channel)
    }

    /// A consumer of `topic`/`channel` with `config`, not yet connected anywhere: add servers
    /// with [`connect_to_nsqd`](ConsumerHandle::connect_to_nsqd) /
    /// [`connect_to_lookupd`](ConsumerHandle::connect_to_lookupd). Starts it as
    /// [`build`](ConsumerBuilder::build) does.
    pub fn new(
        topic: impl IntoTopic,
        channel: impl IntoChannel,
        config: &Config,
    ) -> Result<Self, Error> {
        Self::builder(topic, channel).config(config).build()
    }

    /// A cloneable control handle (stop the consumer, change max_in_flight, add or remove
    /// servers), usable from other threads while this consumer reads the messages.
    pub fn handle(&self) -> ConsumerHandle {
        self.handle.clone()
    }

    /// Its control handle, borrowed: the handle's methods (connect, disconnect,
    /// `set_max_in_flight`, `stats`, `events`, ...) without a clone.
    pub fn as_handle(&self) -> &ConsumerHandle {
        &self.handle
    }

    /// The next message, waiting as long as it takes; `None` once the consumer is stopped.
    pub fn recv(&mut self) -> Option<Message> {
        call(self.handle.rt(), self.inner.recv())
    }

    /// The next message, waiting at most `timeout`: `Err(Timeout)` if none came,
    /// `Err(Disconnected)` once the consumer is stopped.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Message, RecvTimeoutError> {
        match call_for(self.handle.rt(), self.inner.recv(), timeout) {
            Some(Some(m)) => Ok(m),
            Some(None) => Err(RecvTimeoutError::Disconnected),
            None => Err(RecvTimeoutError::Timeout),
        }
    }

    /// The next batch of messages ([`BatchOptions`]: at most `max_messages` and
    /// `max_bytes`, handed over `linger` after its first message at the latest, or as soon as
    /// nothing more can arrive before an answer), waiting as long as it takes; `None` once
    /// the consumer is stopped. After a stop, the partial batch comes first (with the messages
    /// received and not taken yet, as far as it has room): answer it, the drain waits for it.
    ///
    /// Answer the batch ([`Batch::finish`], [`Batch::requeue`], [`Batch::answer`]); one
    /// dropped unanswered is requeued. Batches turn the consumer's `auto_touch` on: their
    /// messages are touched before `msg_timeout` while the batch fills and is handled.
    pub fn recv_batch(&mut self, options: &BatchOptions) -> Option<Batch> {
        self.inner.recv_batch_blocking(options)
    }

    /// An iterator over the messages (blocking in `next`), ending once the consumer is
    /// stopped.
    pub fn iter(&mut self) -> Iter<'_> {
        Iter { consumer: self }
    }

    /// Graceful shutdown (as [`ConsumerHandle::stop`]); returns once every connection has
    /// drained or `drain_timeout` passed and the driver has ended. Messages received but not
    /// yet taken with [`recv`](Self::recv) are requeued at once, so the drain does not wait
    /// for them.
    pub fn stop(&mut self) -> StopReport {
        self.stopped = true;
        let report = call(self.handle.rt(), self.inner.stop());
        wait_ended(self.handle.rt(), self.handle.0.ended());
        report
    }

    /// Runs `handler` on every message, on a pool of `concurrency` threads, until the
    /// consumer is stopped (through a [`ConsumerHandle`]); returns once every handler has
    /// returned and the consumer has stopped.
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

impl Consumer {
    /// Runs `handler` on batches of messages ([`BatchOptions`]), on a pool of `workers`
    /// threads, until the consumer is stopped (through a [`ConsumerHandle`]); returns once
    /// every handler has returned and the consumer has stopped. One thread gathers a batch
    /// at a time, while the others handle theirs.
    ///
    /// The handler's result answers its batch: `Ok(())` finishes every message, except those
    /// marked otherwise ([`Batch::iter_mut`], [`BatchEntry`](crate::BatchEntry): failed or
    /// requeued on their own); an `Err` requeues the batch (as [`HandlerError`] says: its
    /// delay, with backoff unless [`HandlerError::without_backoff`]), counted once for
    /// backoff; a panic requeues it with backoff. The handler may also answer the batch
    /// itself ([`Batch::finish`], ...); its result then changes nothing. On stop, the partial
    /// batch is handed to a handler (with the messages received and not taken yet, as far
    /// as it has room), and the drain waits for its answer. `max_in_flight`
    /// bounds what all the batches hold together: below `max_messages x workers`, batches
    /// are handed over as soon as the bound is reached, smaller than `max_messages`.
    pub fn run_batch<H>(mut self, workers: usize, options: BatchOptions, handler: H) -> StopReport
    where
        H: Fn(Batch) -> Result<(), HandlerError> + Sync,
    {
        let handle = self.inner.handle();
        handle.warn_if_batches_capped(workers, &options);
        let handle = &handle;
        let shared = Mutex::new(&mut self);
        std::thread::scope(|scope| {
            for i in 0..workers.max(1) {
                let (shared, handler, options) = (&shared, &handler, &options);
                let spawned = std::thread::Builder::new()
                    .name(format!("nsqb-batch-{i}"))
                    .spawn_scoped(scope, move || {
                        // One worker at a time gathers the next batch.
                        let next = || {
                            shared
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .recv_batch(options)
                        };
                        while let Some(mut batch) = next() {
                            let runner = Arc::new(Runner::default());
                            batch.run_by(runner.clone());
                            let batches = batch.shared();
                            let run = batches.span().in_scope(|| {
                                handle.as_handler(|| {
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        handler(batch)
                                    }))
                                })
                            });
                            runner.handler_returned(&Outcome::caught(run), &batches);
                        }
                    });
                if let Err(e) = spawned {
                    handle.in_span(|| {
                        tracing::error!(error = %e, "could not start a batch handler thread");
                    });
                }
            }
        });
        // Every worker saw the stop; messages still queued are requeued at once.
        self.stop()
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if !self.stopped {
            self.stop();
        }
    }
}

/// The iterator of [`Consumer::iter`]: blocks in `next` until a message arrives; ends once
/// the consumer is stopped.
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

/// The owning iterator of a [`Consumer`] (`for msg in consumer`): blocks in `next` until a
/// message arrives; ends once the consumer is stopped. Dropping it stops the consumer.
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

// --------------------------------------------------------------------------------- builder

/// Builds a [`Consumer`] (made by [`Consumer::builder`]): topic, channel, configuration,
/// addresses. Every setter is infallible; invalid names, options and addresses are reported
/// by [`build`](Self::build).
#[derive(Debug)]
pub struct ConsumerBuilder(crate::ConsumerBuilder);

impl ConsumerBuilder {
    /// A builder for a consumer of `topic`/`channel` (names validated by
    /// [`build`](Self::build)) with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it); the same as [`Consumer::builder`].
    pub fn new(topic: impl IntoTopic, channel: impl IntoChannel) -> Self {
        ConsumerBuilder(crate::ConsumerBuilder::new(topic, channel))
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(self, config: &Config) -> Self {
        ConsumerBuilder(self.0.config(config))
    }

    /// The core's own configuration struct ([`ConsumerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(self, config: ConsumerConfig) -> Self {
        ConsumerBuilder(self.0.core_config(config))
    }

    /// Shorthand for `config.max_in_flight`.
    pub fn max_in_flight(self, n: u32) -> Self {
        ConsumerBuilder(self.0.max_in_flight(n))
    }

    /// Called for each message delivered more than `max_attempts` times; the message has
    /// already been finished. It runs on the driver's thread, so keep it short. It receives
    /// the same [`Message`] type the consumer hands out everywhere else (answering it does
    /// nothing: it is already finished).
    pub fn on_give_up(self, hook: impl Fn(&Message) + Send + Sync + 'static) -> Self {
        ConsumerBuilder(self.0.on_give_up(hook))
    }

    /// An nsqd TCP address (`host:port`) to connect to directly.
    pub fn nsqd(self, addr: impl Into<String>) -> Self {
        ConsumerBuilder(self.0.nsqd(addr))
    }

    /// An nsqlookupd HTTP address (`host:port` or `http://host:port`) to discover nsqd with.
    pub fn lookupd(self, addr: impl Into<String>) -> Self {
        ConsumerBuilder(self.0.lookupd(addr))
    }

    /// Several nsqd TCP addresses.
    pub fn nsqds<I, S>(self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ConsumerBuilder(self.0.nsqds(addrs))
    }

    /// Several nsqlookupd HTTP addresses.
    pub fn lookupds<I, S>(self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ConsumerBuilder(self.0.lookupds(addrs))
    }

    /// Seed of the core's RNG (jitter, random choices); random by default.
    pub fn seed(self, seed: u64) -> Self {
        ConsumerBuilder(self.0.seed(seed))
    }

    /// How long a TCP connect may take (default 1 s, like go-nsq's `dial_timeout`). Wins over
    /// [`config`](Self::config)'s, given before it or after.
    pub fn dial_timeout(self, timeout: Duration) -> Self {
        ConsumerBuilder(self.0.dial_timeout(timeout))
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`). Wins over `config`'s, given before it or after.
    pub fn write_timeout(self, timeout: Duration) -> Self {
        ConsumerBuilder(self.0.write_timeout(timeout))
    }

    /// The runtime the consumer's driver runs on, instead of a thread and poller of the
    /// client's own: a runtime of your own (see [`Runtime`]).
    pub fn runtime(self, runtime: Arc<dyn Runtime>) -> Self {
        ConsumerBuilder(self.0.runtime(runtime))
    }

    /// Validates everything and starts the consumer, which connects to its servers in the
    /// background (watch [`ConsumerHandle::events`], or use [`connect`](Self::connect) to
    /// wait for them). Works from any thread; starts the client's driver thread.
    pub fn build(self) -> Result<Consumer, Error> {
        start(self.0.into_setup())
    }

    /// [`build`](Self::build), then waits for the first outcome of every nsqd given with
    /// [`nsqd`](Self::nsqd) / [`nsqds`](Self::nsqds) (like go-nsq's `ConnectToNSQDs`) and of
    /// every lookupd given with [`lookupd`](Self::lookupd) / [`lookupds`](Self::lookupds):
    /// `Ok` once each nsqd is connected and subscribed and each lookupd has answered, else
    /// the first error ([`Error::Misconfigured`] for an nsqd that cannot work as configured,
    /// [`Error::Connect`] for one that is unreachable now, [`Error::Lookupd`] for a lookupd),
    /// and the consumer is stopped.
    ///
    /// The nsqd a lookupd lists are being connected to when it returns, not waited for;
    /// watch [`ConsumerHandle::events`] for them. To keep a consumer whose servers are partly
    /// down, use `build`, then [`connect_to_nsqd`](ConsumerHandle::connect_to_nsqd) /
    /// [`connect_to_lookupd`](ConsumerHandle::connect_to_lookupd) per address.
    pub fn connect(self) -> Result<Consumer, Error> {
        let setup = self.0.into_setup();
        let (nsqd, lookupd) = (setup.nsqd.clone(), setup.lookupd.clone());
        let consumer = start(setup)?;
        call(consumer.handle.rt(), consumer.handle.0.await_nsqds(&nsqd))?;
        consumer.handle.connect_to_lookupds(&lookupd)?;
        Ok(consumer)
    }
}

/// Starts the blocking consumer of `setup`.
fn start(setup: ConsumerSetup) -> Result<Consumer, Error> {
    crate::consumer::start(setup, Calls::Blocking).map(Consumer::from_async)
}
