//! Support for runtime adapters: the runtime-independent pieces that every adapter
//! (`nsq-tokio`, `nsq-async-std`, `nsq-blocking`) needs, written once.
//!
//! Like the rest of the crate this module is sans-IO: no sockets, clocks, threads, file
//! system or async. Adapters keep only what truly depends on their runtime (sockets, tasks,
//! channels, timers, reading TLS files and the OS hostname).
//!
//! * [`Answer`] / [`AnswerKind`]: the small `Copy` command a message sends to its driver to
//!   answer itself (no allocation per answer), and [`Answer::apply`], which hands it to the
//!   core [`Consumer`] (the core computes the default requeue delay from the attempt count).
//! * [`Delivery`]: the message type of every adapter (`Message` there), generic over the
//!   adapter's [`AnswerSink`]; it answers itself and requeues itself when dropped unanswered.
//! * [`HandlerError`]: what a message handler returns to requeue (with backoff by default,
//!   [`with_delay`](HandlerError::with_delay), [`without_backoff`](HandlerError::without_backoff)),
//!   and [`AnswerKind::from_handler`], the answer for a handler's outcome (a panic included).
//! * [`StopReport`], [`GiveUpHook`]: the user-facing results of a consumer.
//! * [`Error`] ([`InputError`], [`Backpressure`]): the adapters' error type, with the
//!   conversions from the core's errors, and [`IntoTopic`] / [`IntoChannel`] for name
//!   arguments.
//! * [`log_consumer_event`] / [`log_producer_event`] / [`log_max_in_flight`]: the `tracing`
//!   output for the events an adapter does not act on itself, so every adapter logs the same
//!   things at the same levels with the same fields; [`consumer_span`] / [`producer_span`] /
//!   [`connection_span`] / [`lookupd_span`]: the spans every driver enters.
//! * [`Links`] / [`Transport`]: performing the core's actions (which connection has which
//!   runtime handle), and [`hostname_from_os`] / [`seed_or_fallback`]: the hostname and the RNG
//!   seed from what the adapter reads from the OS.
//! * [`Outbox`]: gathers the bytes for one connection during one wake-up into one write.
//! * [`AdapterConfig`], [`consumer_config`], [`producer_config`]: a [`Config`] turned into the
//!   core's configuration plus the socket-level settings, with the OS hostname (read by the
//!   adapter) filled in when the configuration names none.
//! * [`ConsumerSetup`] / [`ProducerSetup`]: what the builders collect, validated and turned
//!   into a core by `start`; [`ConsumerBuilder`] / [`ProducerBuilder`]: every adapter's
//!   builders, generic over the adapter's [`Runtime`] (its OS reads and how it starts a
//!   driver).
//! * [`PublishRequest`] / [`Replies`]: a user's publish handed to the core [`Producer`], and
//!   which reply waits for which publish or ping.
//!
//! ```
//! use nsq_proto::adapter::{Answer, AnswerKind, HandlerError};
//! use std::time::Duration;
//!
//! let failed: Result<(), HandlerError> =
//!     Err(HandlerError::msg("database down").with_delay(Duration::from_secs(5)));
//! let kind = AnswerKind::from_handler(Some(failed));
//! assert_eq!(
//!     kind,
//!     AnswerKind::Requeue { delay: Some(Duration::from_secs(5)), backoff: true }
//! );
//! ```

use crate::command::CommandError;
use crate::config::{Config, OptionError};
use crate::connection::{CloseReason, ConfigError, ConnectionError};
use crate::consumer::LookupdAddressError;
use crate::consumer::{Consumer, ConsumerConfig, ConsumerError, ConsumerEvent};
use crate::driver::ConnId;
use crate::error_code::{ErrorCode, ServerError};
use crate::frame::{Message, MessageId};
use crate::names::{Channel, NameError, Topic};
use crate::producer::{
    PingId, Producer, ProducerConfig, ProducerError, ProducerEvent, PublishFailure, PublishId,
};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod builder;
mod hostname;
mod links;
mod seed;
pub use builder::{ConsumerBuilder, ProducerBuilder, Runtime};
pub use hostname::hostname_from_os;
pub use links::{Links, Transport};
pub use seed::{seed_from_entropy, seed_or_fallback};

// ------------------------------------------------------------------------------- answers

/// How a message is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswerKind {
    /// FIN: done.
    Finish,
    /// REQ: redeliver after `delay` (`None`: the configured default for the attempt count);
    /// with `backoff` the consumer slows down (a failure of the system, not of the message).
    Requeue {
        /// Explicit delay, or the default.
        delay: Option<Duration>,
        /// Count as a failure for backoff.
        backoff: bool,
    },
    /// TOUCH: more time (the message stays unanswered).
    Touch,
}

impl AnswerKind {
    /// The answer for a message dropped without one: requeue with the default delay, without
    /// backoff (the message is never lost silently; adapters log a warning).
    pub const DROPPED: AnswerKind = AnswerKind::Requeue {
        delay: None,
        backoff: false,
    };

    /// The answer for a message handed out after the consumer started stopping (or never
    /// taken by the application): requeue at once, without backoff.
    pub const UNTAKEN: AnswerKind = AnswerKind::Requeue {
        delay: Some(Duration::ZERO),
        backoff: false,
    };

    /// The answer for a handler's outcome: `Some(Ok)` finishes, `Some(Err(e))` requeues as
    /// `e` says, `None` (the handler panicked) requeues with backoff.
    /// ([`PendingAnswer::answer`] also logs the failures.)
    pub fn from_handler(outcome: Option<Result<(), HandlerError>>) -> AnswerKind {
        match outcome {
            Some(Ok(())) => AnswerKind::Finish,
            Some(Err(e)) => e.answer_kind(),
            None => AnswerKind::Requeue {
                delay: None,
                backoff: true,
            },
        }
    }
}

/// A small `Copy` command answering one message, sent by a `Message` to the driver that owns
/// the core: no allocation and no lock per answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The connection the message came from.
    pub conn: ConnId,
    /// The message id.
    pub id: MessageId,
    /// Its attempt count (the default requeue delay grows with it).
    pub attempts: u16,
    /// The answer.
    pub kind: AnswerKind,
}

impl Answer {
    /// The answer `kind` for `message`, delivered on `conn`.
    pub fn new(conn: ConnId, message: &Message, kind: AnswerKind) -> Answer {
        Answer {
            conn,
            id: message.id,
            attempts: message.attempts,
            kind,
        }
    }

    /// The same message, another answer.
    pub fn with_kind(self, kind: AnswerKind) -> Answer {
        Answer { kind, ..self }
    }

    /// Hands the answer to the consumer. A refusal (typically: the connection closed, so nsqd
    /// redelivers the message, or the message timed out) is logged at debug level and
    /// returned.
    pub fn apply(&self, consumer: &mut Consumer, now: Instant) -> Result<(), ConsumerError> {
        let result = match self.kind {
            AnswerKind::Finish => consumer.finish(now, self.conn, &self.id),
            AnswerKind::Touch => consumer.touch(now, self.conn, &self.id),
            AnswerKind::Requeue { delay, backoff } => {
                consumer.requeue_id(now, self.conn, &self.id, self.attempts, delay, backoff)
            }
        };
        if let Err(e) = &result {
            tracing::debug!(conn = %self.conn, msg_id = %self.id, error = %e, "answer not sent");
        }
        result
    }
}

// ------------------------------------------------------------------------------ deliveries

/// Where the answers of an adapter's messages go: its channel to the driver that owns the
/// core. Sending must not block and must not fail loudly: if the driver is gone, every
/// connection is closed and nsqd redelivers the message anyway.
pub trait AnswerSink: Send + Sync + 'static {
    /// Hands `answer` to the driver, with the `body` of the message when this is its last
    /// answer (empty otherwise). The driver drops the body: the read buffer the body is a
    /// slice of is then released on the thread that split it, so the buffer's reference count
    /// is not bounced between cores once per message.
    fn send_answer(&self, answer: Answer, body: Bytes);
}

/// What every message of one connection shares (one reference count per message): the nsqd
/// address, the sink for answers, and the consumer's span, so what a message logs on the
/// application's tasks names its consumer like the driver's own lines.
#[derive(Debug)]
pub struct Origin<S> {
    addr: String,
    sink: S,
    span: tracing::Span,
}

impl<S: AnswerSink> Origin<S> {
    /// The origin of the messages of the connection to `addr`, in the current span (the
    /// driver calls it inside its consumer's span).
    pub fn new(addr: impl Into<String>, sink: S) -> Arc<Origin<S>> {
        Arc::new(Origin {
            addr: addr.into(),
            sink,
            span: tracing::Span::current(),
        })
    }

    /// The nsqd address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }
}

/// A message delivered to a consumer; every adapter's `Message` is this type with its own
/// [`AnswerSink`]. It answers itself: [`finish`](Self::finish), [`requeue`](Self::requeue),
/// [`requeue_without_backoff`](Self::requeue_without_backoff), [`touch`](Self::touch).
///
/// A message dropped without an answer is requeued (without backoff, with the default delay
/// for its attempt count) and a warning is logged: it is never lost silently.
pub struct Delivery<S: AnswerSink> {
    inner: Message,
    conn: ConnId,
    origin: Arc<Origin<S>>,
    /// Answered, or taken over by a handler runner.
    done: bool,
}

impl<S: AnswerSink> fmt::Debug for Delivery<S> {
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

impl<S: AnswerSink> Delivery<S> {
    /// A message the core delivered on `conn` (for adapters).
    pub fn new(conn: ConnId, message: Message, origin: Arc<Origin<S>>) -> Delivery<S> {
        Delivery {
            inner: message,
            conn,
            origin,
            done: false,
        }
    }

    /// A message the core gave up on (`ConsumerEvent::GaveUp`), for the give-up hook: the
    /// core already finished it, so dropping it sends nothing.
    pub fn given_up(conn: ConnId, message: Message, origin: Arc<Origin<S>>) -> Delivery<S> {
        Delivery {
            inner: message,
            conn,
            origin,
            done: true,
        }
    }

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

    /// The core's message (id, attempts, timestamp, body).
    pub fn as_proto(&self) -> &Message {
        &self.inner
    }

    fn answer_for(&self, kind: AnswerKind) -> Answer {
        Answer::new(self.conn, &self.inner, kind)
    }

    /// Sends the last answer; the body goes back to the driver with it.
    fn send(&mut self, kind: AnswerKind) {
        self.done = true;
        let body = std::mem::take(&mut self.inner.body);
        self.origin.sink.send_answer(self.answer_for(kind), body);
    }

    /// FIN: the message is done.
    pub fn finish(mut self) {
        self.send(AnswerKind::Finish);
    }

    /// REQ with backoff: the message failed; nsqd redelivers it after `delay` (`None`: the
    /// configured default delay times the attempt count) and the consumer backs off.
    pub fn requeue(mut self, delay: Option<Duration>) {
        self.send(AnswerKind::Requeue {
            delay,
            backoff: true,
        });
    }

    /// REQ without backoff: redeliver after `delay` (`None`: the default), without slowing the
    /// consumer down.
    pub fn requeue_without_backoff(mut self, delay: Option<Duration>) {
        self.send(AnswerKind::Requeue {
            delay,
            backoff: false,
        });
    }

    /// TOUCH: asks nsqd for more time (another msg_timeout).
    pub fn touch(&self) {
        self.origin
            .sink
            .send_answer(self.answer_for(AnswerKind::Touch), Bytes::new());
    }

    /// For a handler runner: the message no longer answers itself when dropped; the returned
    /// [`PendingAnswer`] answers it once the handler is done (an answer the handler gave
    /// itself comes first; the later one is then refused by the core and ignored).
    pub fn take_over(&mut self) -> PendingAnswer<S> {
        self.done = true;
        PendingAnswer {
            answer: self.answer_for(AnswerKind::Finish),
            origin: self.origin.clone(),
        }
    }

    /// For adapters: the application never saw this message (received but not taken when
    /// the consumer stopped or its receiver was dropped): requeue it at once, without
    /// backoff and without the warning of an unanswered drop.
    pub fn release(mut self) {
        self.send(AnswerKind::UNTAKEN);
    }

    /// For a driver that answers a message it never handed out: the answer to apply to the
    /// core directly (nothing goes through the sink).
    pub fn into_answer(mut self, kind: AnswerKind) -> Answer {
        self.done = true;
        self.answer_for(kind)
    }
}

impl<S: AnswerSink> Drop for Delivery<S> {
    fn drop(&mut self) {
        if !self.done {
            self.origin.span.in_scope(|| {
                tracing::warn!(
                    msg_id = %self.inner.id,
                    attempts = self.inner.attempts,
                    nsqd = %self.origin.addr,
                    "message dropped without an answer: requeueing it"
                );
            });
            self.send(AnswerKind::DROPPED);
        }
    }
}

/// The answer a handler runner owes for a message it took over ([`Delivery::take_over`]).
#[derive(Debug)]
pub struct PendingAnswer<S> {
    answer: Answer,
    origin: Arc<Origin<S>>,
}

impl<S: AnswerSink> PendingAnswer<S> {
    /// Answers with the handler's outcome (see [`AnswerKind::from_handler`]). A failure is
    /// logged in the consumer's span: an error at WARN with its whole chain, a panic (`None`)
    /// at ERROR, both with the message id, attempts and nsqd address.
    pub fn answer(self, outcome: Option<Result<(), HandlerError>>) {
        let (id, attempts, nsqd) = (self.answer.id, self.answer.attempts, &self.origin.addr);
        match &outcome {
            Some(Ok(())) => {}
            Some(Err(e)) => self.origin.span.in_scope(|| {
                tracing::warn!(
                    msg_id = %id,
                    attempts,
                    nsqd = %nsqd,
                    error = format_args!("{e:#}"),
                    "handler failed: requeueing the message"
                );
            }),
            None => self.origin.span.in_scope(|| {
                tracing::error!(
                    msg_id = %id,
                    attempts,
                    nsqd = %nsqd,
                    "handler panicked: requeueing the message"
                );
            }),
        }
        let kind = AnswerKind::from_handler(outcome);
        self.origin
            .sink
            .send_answer(self.answer.with_kind(kind), Bytes::new());
    }
}

// ------------------------------------------------------------------------- handler errors

/// The error a message handler returns: the message is requeued, by default with backoff and
/// the configured delay.
///
/// Whatever converts into a `Box<dyn Error + Send + Sync>` converts into it, so `?` works in
/// a handler on any error: an `std::error::Error + Send + Sync + 'static`, a boxed
/// `Box<dyn Error + Send + Sync>`, an `anyhow::Error` or `eyre::Report`, even a `String`.
/// The error is kept as it is, with its chain of sources ([`chain`](Self::chain)).
///
/// Like `anyhow::Error`, it does not implement `std::error::Error` itself (that is what
/// makes the blanket conversion possible). `{}` shows the error, `{:#}` the whole chain
/// (`outer: cause: root cause`), which is what the consumer logs when a handler fails.
///
/// ```
/// use nsq_proto::adapter::HandlerError;
///
/// fn parse(body: &[u8]) -> Result<u64, HandlerError> {
///     let text = std::str::from_utf8(body)?; // Utf8Error
///     Ok(text.trim().parse::<u64>()?) // ParseIntError
/// }
/// assert_eq!(parse(b"42").unwrap(), 42);
/// let e = parse(b"forty-two").unwrap_err();
/// assert_eq!(e.to_string(), "invalid digit found in string");
/// ```
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

    /// The underlying error, then its sources, outermost first.
    pub fn chain(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        let first: &(dyn std::error::Error + 'static) = &*self.source;
        std::iter::successors(Some(first), |e| e.source())
    }

    /// The underlying error, to downcast or return.
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync> {
        self.source
    }

    /// The explicit requeue delay, if any.
    pub fn delay(&self) -> Option<Duration> {
        self.delay
    }

    /// Whether the requeue counts as a failure for backoff.
    pub fn backoff(&self) -> bool {
        self.backoff
    }

    /// The REQ this error asks for.
    pub fn answer_kind(&self) -> AnswerKind {
        AnswerKind::Requeue {
            delay: self.delay,
            backoff: self.backoff,
        }
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError {
            source: e.into(),
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

/// `{}`: the error; `{:#}`: the error and its sources, joined by `": "`.
impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return fmt::Display::fmt(&self.source, f);
        }
        for (i, e) in self.chain().enumerate() {
            if i > 0 {
                f.write_str(": ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------- consumer results

/// What a consumer's `stop` reports once every connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StopReport {
    /// Messages still unanswered when their connection closed (nsqd redelivers them).
    pub unanswered: usize,
}

impl StopReport {
    /// A report of `unanswered` leftovers (the core's [`ConsumerEvent::Closed`]).
    pub fn new(unanswered: usize) -> StopReport {
        StopReport { unanswered }
    }
}

/// Called (on the driver, so keep it short) for every message delivered more than
/// `max_attempts` times; the message has already been finished. `M` is the adapter's
/// `Message` (a [`Delivery`]), the type its handlers and streams hand out, so one function
/// can inspect messages in both places; each adapter names it `GiveUpHook`.
pub type GiveUpHook<M> = Arc<dyn Fn(&M) + Send + Sync>;

// ------------------------------------------------------------------------------- logging
//
// One spelling of each field in every adapter: `nsqd` (an nsqd TCP address), `conn` (the
// connection within its client), `lookupd` (an nsqlookupd address), `msg_id`, `attempts`,
// `error`, `reason`, `retry_in`. Every line of a client is inside its span (`consumer{id=..
// topic=.. channel=..}` or `producer{id=..}`, [`consumer_span`] / [`producer_span`]); the
// lines of one connection's socket are inside `connection{conn=.. nsqd=..}` below it
// ([`connection_span`]).

static NEXT_CLIENT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_client_id() -> u64 {
    NEXT_CLIENT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The span of a consumer: `consumer{id=3 topic=events channel=archive}`, with an id unique in
/// the process (shared with producers), so two clients' lines are never confused. Its driver
/// enters it for everything it does; messages log in it on the application's tasks too.
pub fn consumer_span(topic: &Topic, channel: &Channel) -> tracing::Span {
    tracing::info_span!(
        "consumer",
        id = next_client_id(),
        topic = %topic,
        channel = %channel
    )
}

/// The span of a producer: `producer{id=4}` (see [`consumer_span`]).
pub fn producer_span() -> tracing::Span {
    tracing::info_span!("producer", id = next_client_id())
}

/// The span of one nsqd connection's socket, `connection{conn=conn#1 nsqd=host:4150}`, made
/// inside the client's span (the driver's current span) so it nests below it.
pub fn connection_span(conn: impl fmt::Display, nsqd: &str) -> tracing::Span {
    tracing::info_span!("connection", %conn, nsqd = %nsqd)
}

/// The span of one HTTP exchange with an nsqlookupd (see [`connection_span`]).
pub fn lookupd_span(request: impl fmt::Display, lookupd: &str) -> tracing::Span {
    tracing::debug_span!("lookupd_request", %request, lookupd = %lookupd)
}

fn log_connection_closed(conn: ConnId, addr: &str, reason: &str, retry_in: Option<Duration>) {
    if let Some(retry_in) = retry_in {
        tracing::warn!(
            %conn,
            nsqd = %addr,
            %reason,
            retry_in = format_args!("{retry_in:.1?}"),
            "nsqd connection failed; retrying in {retry_in:.1?}"
        );
    } else {
        tracing::info!(%conn, nsqd = %addr, %reason, "nsqd connection closed");
    }
}

/// Logs a consumer event with `tracing`, the same way in every adapter, in the consumer's
/// span. Call it for every event; the ones an adapter acts on (`Message`, `Closed`) are not
/// logged here. `nsqd` gives the address of a connection (for the events that only name
/// their connection).
pub fn log_consumer_event<'a>(event: &ConsumerEvent, nsqd: impl FnOnce(ConnId) -> Option<&'a str>) {
    match event {
        ConsumerEvent::Message { .. } | ConsumerEvent::Closed { .. } => {}
        ConsumerEvent::GaveUp { conn, message } => {
            tracing::warn!(
                %conn,
                nsqd = %nsqd(*conn).unwrap_or_default(),
                msg_id = %message.id,
                attempts = message.attempts,
                "giving up on a message delivered more than max_attempts times: finished it"
            );
        }
        ConsumerEvent::MessageExpired { conn, id } => {
            tracing::warn!(
                %conn,
                nsqd = %nsqd(*conn).unwrap_or_default(),
                msg_id = %id,
                "message timed out before it was answered: nsqd redelivers it"
            );
        }
        ConsumerEvent::ConnectionReady { conn, addr } => {
            tracing::info!(%conn, nsqd = %addr, "connected to nsqd");
        }
        ConsumerEvent::ConnectionClosed {
            conn,
            addr,
            reason,
            retry_in,
        } => log_connection_closed(*conn, addr, reason, *retry_in),
        ConsumerEvent::ServerError { conn, error } => {
            tracing::warn!(
                %conn,
                nsqd = %nsqd(*conn).unwrap_or_default(),
                %error,
                "nsqd refused a command"
            );
        }
        ConsumerEvent::LookupdFailed { addr, error } => {
            tracing::warn!(lookupd = %addr, %error, "nsqlookupd query failed");
        }
        #[allow(unreachable_patterns, reason = "ConsumerEvent is non_exhaustive")]
        other => tracing::debug!(?other, "consumer event"),
    }
}

/// Logs a new `max_in_flight` of a consumer (the drivers call it for `set_max_in_flight`):
/// 0 pauses the consumer, which is said at INFO so a consumer that receives nothing explains
/// itself.
pub fn log_max_in_flight(max_in_flight: u32) {
    if max_in_flight == 0 {
        tracing::info!(
            max_in_flight,
            "max_in_flight is 0: the consumer is paused (RDY 0) until it is raised"
        );
    } else {
        tracing::info!(max_in_flight, "max_in_flight changed");
    }
}

/// Logs a producer event with `tracing`, the same way in every adapter, in the producer's
/// span. Call it for every event; successes and `Closed` are not logged (a failed publish is
/// the caller's error; it is logged at DEBUG only).
pub fn log_producer_event(event: &ProducerEvent) {
    match event {
        ProducerEvent::Published(_) | ProducerEvent::PingOk(_) | ProducerEvent::Closed => {}
        ProducerEvent::PublishFailed(id, failure) => {
            tracing::debug!(publish = %id, error = %failure, "publish failed");
        }
        ProducerEvent::PingFailed(id, failure) => {
            tracing::debug!(ping = %id, error = %failure, "ping failed");
        }
        ProducerEvent::ConnectionReady { conn, addr } => {
            tracing::info!(%conn, nsqd = %addr, "connected to nsqd");
        }
        ProducerEvent::ConnectionClosed {
            conn,
            addr,
            reason,
            retry_in,
        } => log_connection_closed(*conn, addr, reason, *retry_in),
        #[allow(unreachable_patterns, reason = "ProducerEvent is non_exhaustive")]
        other => tracing::debug!(?other, "producer event"),
    }
}

// -------------------------------------------------------------------------------- outbox

/// Gathers the bytes the core emits for one connection during one wake-up, so each
/// connection gets at most one write per wake-up.
#[derive(Debug, Default)]
pub struct Outbox {
    first: Option<Bytes>,
    more: BytesMut,
}

impl Outbox {
    /// Adds bytes (no copy for the first chunk of a wake-up).
    pub fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match &self.first {
            None if self.more.is_empty() => self.first = Some(data),
            _ => {
                if let Some(first) = self.first.take() {
                    self.more.extend_from_slice(&first);
                }
                self.more.extend_from_slice(&data);
            }
        }
    }

    /// Takes everything gathered, if anything.
    pub fn take(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.more.is_empty() {
            None
        } else {
            Some(self.more.split().freeze())
        }
    }
}

// -------------------------------------------------------------------------- configuration

/// A core configuration plus the socket-level settings an adapter applies itself.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AdapterConfig<C> {
    /// The core's configuration ([`ConsumerConfig`] or [`ProducerConfig`]).
    pub core: C,
    /// How long a TCP connect may take (go-nsq `dial_timeout`).
    pub dial_timeout: Duration,
    /// How long one socket write may take before the connection is dropped (go-nsq
    /// `write_timeout`).
    pub write_timeout: Duration,
}

impl<C: Default> Default for AdapterConfig<C> {
    fn default() -> Self {
        let defaults = Config::default();
        AdapterConfig {
            core: C::default(),
            dial_timeout: defaults.dial_timeout,
            write_timeout: defaults.write_timeout,
        }
    }
}

fn with_hostname(config: &Config, os_hostname: Option<String>) -> Option<Config> {
    match (&config.hostname, os_hostname) {
        (None, Some(h)) if !h.trim().is_empty() => Some(Config {
            hostname: Some(h.trim().to_owned()),
            ..config.clone()
        }),
        _ => None,
    }
}

/// The consumer's configuration from `config`. `os_hostname` (read by the adapter) fills
/// `hostname` when `config` names none; TLS files are read with `read_file` (`std::fs::read`).
pub fn consumer_config(
    config: &Config,
    os_hostname: Option<String>,
    read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
) -> Result<AdapterConfig<ConsumerConfig>, OptionError> {
    let filled = with_hostname(config, os_hostname);
    let config = filled.as_ref().unwrap_or(config);
    Ok(AdapterConfig {
        core: config.consumer_config(read_file)?,
        dial_timeout: config.dial_timeout,
        write_timeout: config.write_timeout,
    })
}

/// The producer's configuration from `config` (see [`consumer_config`]). The core also
/// applies `dial_timeout` as its connect timeout.
pub fn producer_config(
    config: &Config,
    os_hostname: Option<String>,
    read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
) -> Result<AdapterConfig<ProducerConfig>, OptionError> {
    let filled = with_hostname(config, os_hostname);
    let config = filled.as_ref().unwrap_or(config);
    Ok(AdapterConfig {
        core: config.producer_config(read_file)?,
        dial_timeout: config.dial_timeout,
        write_timeout: config.write_timeout,
    })
}

// ------------------------------------------------------------------------------- builders

/// What a consumer builder collects before it starts: [`ConsumerBuilder`] stores one and
/// fills its public fields; [`start`](Self::start) does the
/// validation and creates the core. Errors of the name and configuration arguments are kept
/// until then, so the builder methods stay infallible.
#[non_exhaustive]
pub struct ConsumerSetup<M> {
    /// The topic (validated by [`new`](Self::new)).
    pub topic: Result<Topic, Error>,
    /// The channel.
    pub channel: Result<Channel, Error>,
    /// The core's configuration.
    pub config: Result<ConsumerConfig, Error>,
    /// Overrides `config.max_in_flight`.
    pub max_in_flight: Option<u32>,
    /// Called for messages given up on.
    pub give_up: Option<GiveUpHook<M>>,
    /// nsqd TCP addresses to connect to directly.
    pub nsqd: Vec<String>,
    /// nsqlookupd HTTP addresses.
    pub lookupd: Vec<String>,
    /// Seed of the core's RNG (random when `None`).
    pub seed: Option<u64>,
    /// TCP connect timeout.
    pub dial_timeout: Duration,
    /// Socket write timeout.
    pub write_timeout: Duration,
}

impl<M> fmt::Debug for ConsumerSetup<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerSetup")
            .field("topic", &self.topic)
            .field("channel", &self.channel)
            .field("config", &self.config)
            .field("max_in_flight", &self.max_in_flight)
            .field("give_up", &self.give_up.is_some())
            .field("nsqd", &self.nsqd)
            .field("lookupd", &self.lookupd)
            .field("dial_timeout", &self.dial_timeout)
            .field("write_timeout", &self.write_timeout)
            .finish_non_exhaustive()
    }
}

/// A core consumer ready to be driven, with what its driver needs.
#[non_exhaustive]
pub struct ConsumerStart<M> {
    /// The core, with its nsqd and lookupd addresses added.
    pub core: Consumer,
    /// The give-up hook.
    pub give_up: Option<GiveUpHook<M>>,
    /// TCP connect timeout.
    pub dial_timeout: Duration,
    /// Socket write timeout.
    pub write_timeout: Duration,
    /// The consumer's span ([`consumer_span`]): its driver enters it for everything it does.
    pub span: tracing::Span,
}

impl<M> ConsumerSetup<M> {
    /// A setup for `topic`/`channel` with the default configuration.
    pub fn new(topic: impl IntoTopic, channel: impl IntoChannel) -> ConsumerSetup<M> {
        let defaults = AdapterConfig::<ConsumerConfig>::default();
        ConsumerSetup {
            topic: topic.into_topic(),
            channel: channel.into_channel(),
            config: Ok(defaults.core),
            max_in_flight: None,
            give_up: None,
            nsqd: Vec::new(),
            lookupd: Vec::new(),
            seed: None,
            dial_timeout: defaults.dial_timeout,
            write_timeout: defaults.write_timeout,
        }
    }

    /// Takes `config` (see [`consumer_config`]).
    pub fn config(
        &mut self,
        config: &Config,
        os_hostname: Option<String>,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) {
        match consumer_config(config, os_hostname, read_file) {
            Ok(c) => {
                self.config = Ok(c.core);
                self.dial_timeout = c.dial_timeout;
                self.write_timeout = c.write_timeout;
            }
            Err(e) => self.config = Err(e.into()),
        }
    }

    /// Validates everything and creates the core (`seed` is called when no seed was set).
    pub fn start(
        self,
        now: Instant,
        seed: impl FnOnce() -> u64,
    ) -> Result<ConsumerStart<M>, Error> {
        let topic = self.topic?;
        let channel = self.channel?;
        let mut config = self.config?;
        if let Some(n) = self.max_in_flight {
            config.max_in_flight = n;
        }
        let span = consumer_span(&topic, &channel);
        if config.max_in_flight == 0 {
            span.in_scope(|| log_max_in_flight(0));
        }
        let mut core = Consumer::new(config, topic, channel, self.seed.unwrap_or_else(seed));
        for a in &self.nsqd {
            core.add_nsqd(now, a)?;
        }
        for a in &self.lookupd {
            core.add_lookupd(now, a)?;
        }
        Ok(ConsumerStart {
            core,
            give_up: self.give_up,
            dial_timeout: self.dial_timeout,
            write_timeout: self.write_timeout,
            span,
        })
    }
}

/// What a producer builder collects before it starts (see [`ConsumerSetup`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct ProducerSetup {
    /// The core's configuration.
    pub config: Result<ProducerConfig, Error>,
    /// nsqd TCP addresses, in failover order.
    pub nsqd: Vec<String>,
    /// Seed of the core's RNG (random when `None`).
    pub seed: Option<u64>,
    /// Socket write timeout.
    pub write_timeout: Duration,
}

impl Default for ProducerSetup {
    fn default() -> Self {
        let defaults = AdapterConfig::<ProducerConfig>::default();
        ProducerSetup {
            config: Ok(defaults.core),
            nsqd: Vec::new(),
            seed: None,
            write_timeout: defaults.write_timeout,
        }
    }
}

/// A core producer ready to be driven, with what its driver needs.
#[derive(Debug)]
#[non_exhaustive]
pub struct ProducerStart {
    /// The core, with its nsqd addresses added (connecting).
    pub core: Producer,
    /// TCP connect timeout for the sockets: the core's own connect timeout plus a second
    /// (the core abandons a slow attempt itself; this only bounds the socket's).
    pub dial_timeout: Duration,
    /// Socket write timeout.
    pub write_timeout: Duration,
    /// The producer's span ([`producer_span`]): its driver enters it for everything it does.
    pub span: tracing::Span,
}

impl ProducerSetup {
    /// Takes `config` (see [`producer_config`]).
    pub fn config(
        &mut self,
        config: &Config,
        os_hostname: Option<String>,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) {
        match producer_config(config, os_hostname, read_file) {
            Ok(c) => {
                self.config = Ok(c.core);
                self.write_timeout = c.write_timeout;
            }
            Err(e) => self.config = Err(e.into()),
        }
    }

    /// Validates everything and creates the core (`seed` is called when no seed was set).
    pub fn start(self, now: Instant, seed: impl FnOnce() -> u64) -> Result<ProducerStart, Error> {
        let config = self.config?;
        let span = producer_span();
        let dial_timeout = config.connect_timeout + Duration::from_secs(1);
        let mut core = Producer::new(config, self.seed.unwrap_or_else(seed))?;
        for a in &self.nsqd {
            core.add_nsqd(now, a)?;
        }
        Ok(ProducerStart {
            core,
            dial_timeout,
            write_timeout: self.write_timeout,
            span,
        })
    }
}

// ------------------------------------------------------------------------------- publishes

/// A publish (or ping) a user asked for, on its way to the core [`Producer`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PublishRequest {
    /// PUB.
    Publish {
        /// The topic.
        topic: Topic,
        /// The body.
        body: Bytes,
    },
    /// MPUB.
    MultiPublish {
        /// The topic.
        topic: Topic,
        /// The bodies.
        bodies: Vec<Bytes>,
    },
    /// DPUB.
    DeferredPublish {
        /// The topic.
        topic: Topic,
        /// The delay.
        delay: Duration,
        /// The body.
        body: Bytes,
    },
    /// Resolves once a connection is ready.
    Ping,
}

impl PublishRequest {
    /// PUB of `body` to `topic` (the name validated here).
    pub fn publish(topic: impl IntoTopic, body: impl Into<Bytes>) -> Result<Self, Error> {
        Ok(PublishRequest::Publish {
            topic: topic.into_topic()?,
            body: body.into(),
        })
    }

    /// MPUB of `bodies` to `topic`.
    pub fn multi_publish<I, B>(topic: impl IntoTopic, bodies: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        Ok(PublishRequest::MultiPublish {
            topic: topic.into_topic()?,
            bodies: bodies.into_iter().map(Into::into).collect(),
        })
    }

    /// DPUB of `body` to `topic`, delivered after `delay`.
    pub fn deferred_publish(
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<Self, Error> {
        Ok(PublishRequest::DeferredPublish {
            topic: topic.into_topic()?,
            delay,
            body: body.into(),
        })
    }
}

/// Which reply (`R`: a one-shot sender of the adapter) waits for which publish or ping of a
/// core [`Producer`].
///
/// Resolved replies are held back until the driver takes them with
/// [`take_resolved`](Self::take_resolved), after it has published the producer's stats for
/// the wake-up: a caller whose publish resolved then sees it counted.
#[derive(Debug)]
pub struct Replies<R> {
    publishes: BTreeMap<PublishId, R>,
    pings: BTreeMap<PingId, R>,
    resolved: Vec<(R, Result<(), Error>)>,
}

impl<R> Default for Replies<R> {
    fn default() -> Self {
        Replies {
            publishes: BTreeMap::new(),
            pings: BTreeMap::new(),
            resolved: Vec::new(),
        }
    }
}

impl<R> Replies<R> {
    /// Hands `request` to the core; `reply` waits for its result. When the core refuses it
    /// (nothing was queued), the reply comes back with the error.
    pub fn submit(
        &mut self,
        core: &mut Producer,
        now: Instant,
        request: &PublishRequest,
        reply: R,
    ) -> Result<(), (R, Error)> {
        let result = match request {
            PublishRequest::Publish { topic, body } => core.publish(now, topic, body),
            PublishRequest::MultiPublish { topic, bodies } => {
                core.multi_publish(now, topic, bodies)
            }
            PublishRequest::DeferredPublish { topic, delay, body } => {
                core.deferred_publish(now, topic, *delay, body)
            }
            PublishRequest::Ping => {
                return match core.ping(now) {
                    Ok(id) => {
                        self.pings.insert(id, reply);
                        Ok(())
                    }
                    Err(e) => Err((reply, e.into())),
                };
            }
        };
        match result {
            Ok(id) => {
                self.publishes.insert(id, reply);
                Ok(())
            }
            Err(e) => Err((reply, e.into())),
        }
    }

    /// Records the result of the reply `event` resolves, for
    /// [`take_resolved`](Self::take_resolved); `false` for events that resolve no reply.
    pub fn resolve(&mut self, event: &ProducerEvent) -> bool {
        let resolved = self.resolution(event);
        let found = resolved.is_some();
        self.resolved.extend(resolved);
        found
    }

    /// The replies resolved since the last call, with their results, in resolution order.
    pub fn take_resolved(&mut self) -> std::vec::Drain<'_, (R, Result<(), Error>)> {
        self.resolved.drain(..)
    }

    fn resolution(&mut self, event: &ProducerEvent) -> Option<(R, Result<(), Error>)> {
        match event {
            ProducerEvent::Published(id) => self.publishes.remove(id).map(|r| (r, Ok(()))),
            ProducerEvent::PublishFailed(id, failure) => self
                .publishes
                .remove(id)
                .map(|r| (r, Err(failure.clone().into()))),
            ProducerEvent::PingOk(id) => self.pings.remove(id).map(|r| (r, Ok(()))),
            ProducerEvent::PingFailed(id, failure) => self
                .pings
                .remove(id)
                .map(|r| (r, Err(failure.clone().into()))),
            _ => None,
        }
    }

    /// How many replies wait.
    pub fn len(&self) -> usize {
        self.publishes.len() + self.pings.len()
    }

    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every waiting reply (when the driver stops; answer them with [`Error::Closed`]).
    pub fn take_all(&mut self) -> impl Iterator<Item = R> + use<R> {
        let publishes = std::mem::take(&mut self.publishes);
        let pings = std::mem::take(&mut self.pings);
        publishes.into_values().chain(pings.into_values())
    }
}

// --------------------------------------------------------------------------------- errors

/// Why an operation of an adapter failed.
///
/// `Display` says everything once, on one line; no variant also returns the text it shows from
/// [`source`](std::error::Error::source), so `{:#}` (anyhow/eyre) and error reporters print
/// each cause once.
///
/// ```
/// use nsq_proto::adapter::{Error, InputError, IntoTopic};
/// use nsq_proto::{ErrorCode, NameError};
///
/// let err = "bad topic!".into_topic().unwrap_err();
/// match &err {
///     Error::InvalidTopic { name, reason: NameError::InvalidChar { ch, .. } } => {
///         assert_eq!(name, "bad topic!");
///         assert_eq!(*ch, ' ');
///     }
///     other => panic!("{other}"),
/// }
/// assert_eq!(
///     err.to_string(),
///     "invalid topic name \"bad topic!\": invalid character ' ' at byte 3: \
///      names use only [.a-zA-Z0-9_-] with an optional #ephemeral suffix"
/// );
///
/// // nsqd's refusals carry their code.
/// # let err = Error::Server(nsq_proto::ServerError::new(ErrorCode::BadMessage, "PUB invalid message body size 0"));
/// if err.server_code() == Some(ErrorCode::BadMessage) {
///     // a bad message is not worth retrying
/// }
/// assert_eq!(err.to_string(), "nsqd error E_BAD_MESSAGE: PUB invalid message body size 0");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// A topic name that nsqd would refuse.
    InvalidTopic {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// A channel name that nsqd would refuse.
    InvalidChannel {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// Other input that was refused before anything was sent (address, empty batch, body too
    /// large, ...).
    InvalidInput(InputError),
    /// nsqd answered with an error; [`ServerError::code`] (or [`Error::server_code`]) says
    /// which (`E_BAD_MESSAGE`, `E_PUB_FAILED`, ...).
    Server(ServerError),
    /// The connection carrying the request was lost before the answer arrived (the message
    /// may or may not have been published).
    ConnectionLost(CloseReason),
    /// No answer within the configured timeout (may or may not have been published).
    Timeout,
    /// No nsqd connection is up (every configured nsqd is down, or none became ready within
    /// `publish_timeout`); the message was not sent. Carries the last connection error.
    NoServerAvailable(Option<String>),
    /// The nsqd at this address requires TLS (`--tls-required`) and the configuration has
    /// none (enable `tls_v1`); nothing was sent.
    TlsRequired(String),
    /// Too many publishes are outstanding (`max_outstanding_publishes` /
    /// `max_pending_publishes`); retry later.
    Backpressure(Backpressure),
    /// The consumer refused the command.
    Consumer(ConsumerError),
    /// The producer or consumer has been closed.
    Closed,
    /// Not called from within the runtime the adapter needs.
    NoRuntime,
    /// The driver (thread or task) could not be started.
    Spawn(String),
    /// A configuration option is unknown, malformed or out of range.
    Config(OptionError),
}

impl Error {
    /// nsqd's error code, for [`Error::Server`].
    pub fn server_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server(e) => Some(e.code()),
            _ => None,
        }
    }

    /// Whether the request may have reached nsqd although it failed (a connection lost or a
    /// timeout while waiting for the reply): retrying may publish a message twice.
    pub fn maybe_published(&self) -> bool {
        matches!(self, Error::ConnectionLost(_) | Error::Timeout)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidTopic { name, reason } => {
                write!(f, "invalid topic name {name:?}: {reason}")
            }
            Error::InvalidChannel { name, reason } => {
                write!(f, "invalid channel name {name:?}: {reason}")
            }
            Error::InvalidInput(e) => fmt::Display::fmt(e, f),
            Error::Server(e) => fmt::Display::fmt(e, f),
            Error::ConnectionLost(r) => {
                write!(f, "connection lost before nsqd answered: {r}")
            }
            Error::Timeout => f.write_str("no answer from nsqd in time"),
            Error::NoServerAvailable(None) => f.write_str("no nsqd available"),
            Error::NoServerAvailable(Some(e)) => {
                write!(f, "no nsqd available (last error: {e})")
            }
            Error::TlsRequired(addr) => write!(
                f,
                "nsqd {addr} requires TLS and the configuration has none (enable tls_v1)"
            ),
            Error::Backpressure(e) => fmt::Display::fmt(e, f),
            Error::Consumer(e) => fmt::Display::fmt(e, f),
            Error::Closed => f.write_str("closed"),
            Error::NoRuntime => f.write_str("must be called from within the adapter's runtime"),
            Error::Spawn(e) => write!(f, "could not start the driver: {e}"),
            Error::Config(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// Every cause is in the `Display` text, so there is no separate source.
impl std::error::Error for Error {}

/// Input refused before anything was sent ([`Error::InvalidInput`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InputError {
    /// An nsqd address that is not `host:port`.
    NsqdAddress(String),
    /// An nsqlookupd address that cannot be used.
    LookupdAddress(LookupdAddressError),
    /// A publish nsqd would refuse (empty body or batch, too large, delay too long, ...).
    Publish(CommandError),
    /// A connection setting nsqd would refuse, or a TLS server name that is not valid.
    Connection(ConfigError),
    /// The connection refused the command (its negotiated limits differ from the check made
    /// when the publish was accepted).
    Refused(ConnectionError),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::NsqdAddress(a) => {
                write!(f, "invalid nsqd address {a:?}: expected host:port")
            }
            InputError::LookupdAddress(e) => fmt::Display::fmt(e, f),
            InputError::Publish(e) => write!(f, "invalid publish: {e}"),
            InputError::Connection(e) => fmt::Display::fmt(e, f),
            InputError::Refused(e) => write!(f, "publish refused: {e}"),
        }
    }
}

impl std::error::Error for InputError {}

/// Which bound of the producer was reached ([`Error::Backpressure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backpressure {
    /// `max_outstanding_publishes` publishes are unresolved.
    TooManyOutstanding {
        /// The configured bound.
        limit: usize,
    },
    /// `max_pending_publishes` publishes already wait for a connection.
    PendingQueueFull {
        /// The configured bound.
        limit: usize,
    },
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backpressure::TooManyOutstanding { limit } => {
                write!(f, "{limit} publishes are already outstanding")
            }
            Backpressure::PendingQueueFull { limit } => {
                write!(f, "{limit} publishes already wait for a connection")
            }
        }
    }
}

impl std::error::Error for Backpressure {}

impl From<OptionError> for Error {
    fn from(e: OptionError) -> Self {
        Error::Config(e)
    }
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Self {
        Error::InvalidInput(e)
    }
}

impl From<ConsumerError> for Error {
    fn from(e: ConsumerError) -> Self {
        match e {
            ConsumerError::InvalidAddress(a) => InputError::NsqdAddress(a).into(),
            ConsumerError::InvalidLookupd(e) => InputError::LookupdAddress(e).into(),
            ConsumerError::Closing => Error::Closed,
            e => Error::Consumer(e),
        }
    }
}

impl From<ProducerError> for Error {
    fn from(e: ProducerError) -> Self {
        match e {
            ProducerError::Closed => Error::Closed,
            ProducerError::TooManyOutstanding { limit } => {
                Error::Backpressure(Backpressure::TooManyOutstanding { limit })
            }
            ProducerError::PendingQueueFull { limit } => {
                Error::Backpressure(Backpressure::PendingQueueFull { limit })
            }
            ProducerError::Invalid(e) => InputError::Publish(e).into(),
            ProducerError::InvalidAddress(a) => InputError::NsqdAddress(a).into(),
            ProducerError::Config(e) => InputError::Connection(e).into(),
        }
    }
}

impl From<PublishFailure> for Error {
    fn from(f: PublishFailure) -> Self {
        match f {
            PublishFailure::Server(e) => Error::Server(e),
            PublishFailure::ConnectionLost(r) => Error::ConnectionLost(r),
            PublishFailure::TimedOut { .. } => Error::Timeout,
            PublishFailure::NoServerAvailable { last_error } => {
                Error::NoServerAvailable(last_error)
            }
            PublishFailure::Refused(e) => InputError::Refused(e).into(),
            PublishFailure::TlsRequired { addr } => Error::TlsRequired(addr),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
    impl Sealed for crate::Topic {}
    impl Sealed for &crate::Topic {}
    impl Sealed for crate::Channel {}
    impl Sealed for &crate::Channel {}
}

/// A topic argument: a validated [`Topic`] or a string, validated on use.
pub trait IntoTopic: sealed::Sealed {
    /// The validated topic ([`Error::InvalidTopic`] names the rejected name).
    fn into_topic(self) -> Result<Topic, Error>;
}

fn topic(name: &str) -> Result<Topic, Error> {
    Topic::new(name).map_err(|reason| Error::InvalidTopic {
        name: name.to_owned(),
        reason,
    })
}

fn channel(name: &str) -> Result<Channel, Error> {
    Channel::new(name).map_err(|reason| Error::InvalidChannel {
        name: name.to_owned(),
        reason,
    })
}

impl IntoTopic for &str {
    fn into_topic(self) -> Result<Topic, Error> {
        topic(self)
    }
}
impl IntoTopic for String {
    fn into_topic(self) -> Result<Topic, Error> {
        topic(&self)
    }
}
impl IntoTopic for &String {
    fn into_topic(self) -> Result<Topic, Error> {
        topic(self)
    }
}
impl IntoTopic for Topic {
    fn into_topic(self) -> Result<Topic, Error> {
        Ok(self)
    }
}
impl IntoTopic for &Topic {
    fn into_topic(self) -> Result<Topic, Error> {
        Ok(self.clone())
    }
}

/// A channel argument: a validated [`Channel`] or a string, validated on use.
pub trait IntoChannel: sealed::Sealed {
    /// The validated channel ([`Error::InvalidChannel`] names the rejected name).
    fn into_channel(self) -> Result<Channel, Error>;
}

impl IntoChannel for &str {
    fn into_channel(self) -> Result<Channel, Error> {
        channel(self)
    }
}
impl IntoChannel for String {
    fn into_channel(self) -> Result<Channel, Error> {
        channel(&self)
    }
}
impl IntoChannel for &String {
    fn into_channel(self) -> Result<Channel, Error> {
        channel(self)
    }
}
impl IntoChannel for Channel {
    fn into_channel(self) -> Result<Channel, Error> {
        Ok(self)
    }
}
impl IntoChannel for &Channel {
    fn into_channel(self) -> Result<Channel, Error> {
        Ok(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbox_gathers_one_write() {
        let mut o = Outbox::default();
        assert_eq!(o.take(), None);
        o.push(Bytes::from_static(b"ab"));
        o.push(Bytes::new());
        assert_eq!(o.take().as_deref(), Some(&b"ab"[..]));
        o.push(Bytes::from_static(b"ab"));
        o.push(Bytes::from_static(b"cd"));
        o.push(Bytes::from_static(b"e"));
        assert_eq!(o.take().as_deref(), Some(&b"abcde"[..]));
        assert_eq!(o.take(), None);
    }

    #[test]
    fn handler_outcomes() {
        assert_eq!(AnswerKind::from_handler(Some(Ok(()))), AnswerKind::Finish);
        let e = HandlerError::msg("x").without_backoff();
        assert_eq!(e.to_string(), "x");
        assert_eq!(
            AnswerKind::from_handler(Some(Err(e))),
            AnswerKind::Requeue {
                delay: None,
                backoff: false
            }
        );
        let io: HandlerError = std::io::Error::other("disk").into();
        assert!(io.backoff());
        assert_eq!(io.delay(), None);
        assert_eq!(
            AnswerKind::from_handler(None),
            AnswerKind::Requeue {
                delay: None,
                backoff: true
            }
        );
    }

    #[test]
    fn hostname_is_filled_only_when_unset() {
        let c = consumer_config(&Config::default(), Some("box.example.com\n".into()), |_| {
            Err(std::io::Error::other("no files"))
        })
        .unwrap();
        assert_eq!(
            c.core.connection.hostname.as_deref(),
            Some("box.example.com")
        );
        let named = Config {
            hostname: Some("mine".into()),
            ..Config::default()
        };
        let p = producer_config(&named, Some("os".into()), |_| {
            Err(std::io::Error::other("no files"))
        })
        .unwrap();
        assert_eq!(p.core.connection.hostname.as_deref(), Some("mine"));
        assert_eq!(p.dial_timeout, Config::default().dial_timeout);
        let none = consumer_config(&Config::default(), None, |_| {
            Err(std::io::Error::other("no files"))
        })
        .unwrap();
        assert_eq!(none.core.connection.hostname, None);
    }

    #[test]
    fn replies_follow_the_core() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let mut setup = ProducerSetup::default();
        setup.nsqd.push("127.0.0.1:4150".into());
        setup.seed = Some(7);
        let mut core = setup.start(now, || unreachable!("seeded")).unwrap().core;
        let mut replies = Replies::default();
        let topic = Topic::new("t").unwrap();
        let publish = PublishRequest::Publish {
            topic: topic.clone(),
            body: Bytes::from_static(b"x"),
        };
        replies.submit(&mut core, now, &publish, 1).unwrap();
        replies
            .submit(&mut core, now, &PublishRequest::Ping, 2)
            .unwrap();
        let empty = PublishRequest::MultiPublish {
            topic,
            bodies: Vec::new(),
        };
        let (r, e) = replies.submit(&mut core, now, &empty, 3).unwrap_err();
        assert_eq!(r, 3);
        assert!(
            matches!(
                e,
                Error::InvalidInput(InputError::Publish(CommandError::EmptyBatch))
            ),
            "{e}"
        );
        assert_eq!(replies.len(), 2);
        // The only nsqd cannot be reached: both fail fast.
        let conn = loop {
            match core.poll_action() {
                Some(crate::driver::Action::Connect { conn, .. }) => break conn,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        core.handle_connect_failed(now, conn, "refused");
        let mut resolved = Vec::new();
        while let Some(ev) = core.poll_event() {
            replies.resolve(&ev);
        }
        for (r, result) in replies.take_resolved() {
            assert!(matches!(result, Err(Error::NoServerAvailable(_))));
            resolved.push(r);
        }
        resolved.sort_unstable();
        assert_eq!(resolved, [1, 2]);
        assert!(replies.is_empty());
        assert_eq!(replies.take_all().count(), 0);
    }

    #[test]
    fn consumer_setup_validates() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let bad = ConsumerSetup::<()>::new("bad topic!", "ch");
        assert!(matches!(
            bad.start(now, || 1),
            Err(Error::InvalidTopic { name, reason: NameError::InvalidChar { index: 3, ch: ' ' } })
                if name == "bad topic!"
        ));
        let bad = ConsumerSetup::<()>::new("t", "");
        assert!(matches!(
            bad.start(now, || 1),
            Err(Error::InvalidChannel { name, reason: NameError::Empty }) if name.is_empty()
        ));
        let mut setup = ConsumerSetup::<()>::new("t", "ch");
        setup.nsqd.push("nope".into());
        assert!(matches!(
            setup.start(now, || 1),
            Err(Error::InvalidInput(InputError::NsqdAddress(a))) if a == "nope"
        ));
        let mut setup = ConsumerSetup::<()>::new("t", "ch");
        setup.max_in_flight = Some(9);
        setup.nsqd.push("127.0.0.1:4150".into());
        let started = setup.start(now, || 1).unwrap();
        assert_eq!(started.core.max_in_flight(), 9);
    }

    #[derive(Default)]
    struct Collect(std::sync::Mutex<Vec<(Answer, Bytes)>>);

    impl AnswerSink for Arc<Collect> {
        fn send_answer(&self, answer: Answer, body: Bytes) {
            self.0.lock().unwrap().push((answer, body));
        }
    }

    #[test]
    fn deliveries_answer_themselves_once() {
        let sink = Arc::new(Collect::default());
        let origin = Origin::new("127.0.0.1:4150", sink.clone());
        let conn = {
            #[allow(
                clippy::disallowed_methods,
                reason = "origin of virtual time in a test"
            )]
            let now = Instant::now();
            let mut c = Consumer::new(
                ConsumerConfig::default(),
                Topic::new("t").unwrap(),
                Channel::new("c").unwrap(),
                1,
            );
            c.add_nsqd(now, "127.0.0.1:4150").unwrap();
            match c.poll_action() {
                Some(crate::driver::Action::Connect { conn, .. }) => conn,
                other => panic!("{other:?}"),
            }
        };
        let message = |attempts| Message {
            timestamp: 1,
            attempts,
            id: MessageId::from(*b"0123456789abcdef"),
            body: Bytes::from_static(b"body"),
        };
        let kinds =
            || -> Vec<AnswerKind> { sink.0.lock().unwrap().iter().map(|a| a.0.kind).collect() };
        // The body travels back to the driver with a message's last answer only.
        let bodies =
            || -> Vec<Bytes> { sink.0.lock().unwrap().iter().map(|a| a.1.clone()).collect() };

        let d = Delivery::new(conn, message(1), origin.clone());
        assert_eq!(d.nsqd_address(), "127.0.0.1:4150");
        assert_eq!(&d.body()[..], b"body");
        d.touch();
        d.finish();
        assert_eq!(kinds(), [AnswerKind::Touch, AnswerKind::Finish]);
        assert_eq!(bodies(), [Bytes::new(), Bytes::from_static(b"body")]);

        drop(Delivery::new(conn, message(2), origin.clone()));
        assert_eq!(kinds()[2], AnswerKind::DROPPED);
        assert_eq!(sink.0.lock().unwrap()[2].0.attempts, 2);
        assert_eq!(bodies()[2], Bytes::from_static(b"body"));

        let mut d = Delivery::new(conn, message(3), origin.clone());
        let pending = d.take_over();
        drop(d);
        assert_eq!(kinds().len(), 3, "taken over: no answer on drop");
        pending.answer(Some(
            Err(HandlerError::msg("no").with_delay(Duration::ZERO)),
        ));
        assert_eq!(
            kinds()[3],
            AnswerKind::Requeue {
                delay: Some(Duration::ZERO),
                backoff: true
            }
        );

        let d = Delivery::new(conn, message(4), origin.clone());
        let a = d.into_answer(AnswerKind::UNTAKEN);
        assert_eq!(a.attempts, 4);
        assert_eq!(kinds().len(), 4, "into_answer sends nothing");

        Delivery::new(conn, message(5), origin).release();
        assert_eq!(kinds()[4], AnswerKind::UNTAKEN);
        assert_eq!(bodies()[4], Bytes::from_static(b"body"));
    }

    /// A failed connect says when it is retried (the log line needs it); while closing, none.
    #[test]
    fn connection_closed_says_when_it_retries() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let closed_retry = |core: &mut Consumer| {
            let mut retry = None;
            while let Some(ev) = core.poll_event() {
                if let ConsumerEvent::ConnectionClosed { retry_in, .. } = ev {
                    retry = Some(retry_in);
                }
            }
            retry.expect("no ConnectionClosed")
        };
        let connect = |core: &mut Consumer| loop {
            match core.poll_action() {
                Some(crate::driver::Action::Connect { conn, .. }) => break conn,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        let mut setup = ConsumerSetup::<()>::new("t", "c");
        setup.nsqd.push("127.0.0.1:4150".into());
        let mut core = setup.start(now, || 3).unwrap().core;
        let conn = connect(&mut core);
        core.handle_connect_failed(now, conn, "refused");
        let retry = closed_retry(&mut core).expect("a direct nsqd is retried");
        assert!(retry > Duration::ZERO);

        let later = now + retry;
        core.handle_timeout(later);
        let conn = connect(&mut core);
        core.close(later);
        core.handle_connect_failed(later, conn, "refused");
        assert_eq!(closed_retry(&mut core), None, "closing: no retry");

        let mut setup = ProducerSetup::default();
        setup.nsqd.push("127.0.0.1:4150".into());
        setup.seed = Some(3);
        let mut producer = setup.start(now, || unreachable!("seeded")).unwrap().core;
        let conn = loop {
            match producer.poll_action() {
                Some(crate::driver::Action::Connect { conn, .. }) => break conn,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        producer.handle_connect_failed(now, conn, "refused");
        let mut retries = Vec::new();
        while let Some(ev) = producer.poll_event() {
            if let ProducerEvent::ConnectionClosed { retry_in, .. } = ev {
                retries.push(retry_in);
            }
        }
        assert!(
            matches!(retries[..], [Some(d)] if d > Duration::ZERO),
            "{retries:?}"
        );
    }

    #[test]
    fn errors_map() {
        assert!(matches!(Error::from(ProducerError::Closed), Error::Closed));
        assert!(matches!(
            Error::from(PublishFailure::NoServerAvailable { last_error: None }),
            Error::NoServerAvailable(None)
        ));
        assert!(matches!(Error::from(ConsumerError::Closing), Error::Closed));
        assert!("bad topic!".into_topic().is_err());
        assert!("ok".into_channel().is_ok());
    }
}
