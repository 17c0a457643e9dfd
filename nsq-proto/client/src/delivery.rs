//! The message type: [`Delivery`], generic over where its answers go ([`AnswerSink`]; every
//! consumer's is its driver's [`AnswerChannel`](super::AnswerChannel)), answering itself and
//! requeued when dropped unanswered; [`PendingAnswer`] for handlers.

use super::answer::{Answer, AnswerKind};
use super::handler::Outcome;
use super::metrics::{AnswerMetrics, HandOut, Timing};
use bytes::Bytes;
use nsq_proto::driver::ConnId;
use nsq_proto::{Message, MessageId};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where the answers of a consumer's messages go: its channel to the driver that owns the
/// core ([`AnswerChannel`](super::AnswerChannel)). Sending must not block and must not fail loudly: if the driver is gone, every
/// connection is closed and nsqd redelivers the message anyway.
pub(crate) trait AnswerSink: Send + Sync + 'static {
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
pub(crate) struct Origin<S> {
    addr: String,
    sink: S,
    span: tracing::Span,
    /// Where its messages' answers are counted (nothing without the `metrics` feature).
    metrics: AnswerMetrics,
}

impl<S: AnswerSink> Origin<S> {
    /// The origin of the messages of the connection to `addr`, in the current span (the
    /// driver calls it inside its consumer's span).
    pub(crate) fn new(addr: impl Into<String>, sink: S, metrics: AnswerMetrics) -> Arc<Origin<S>> {
        Arc::new(Origin {
            addr: addr.into(),
            sink,
            span: tracing::Span::current(),
            metrics,
        })
    }

    /// The span of one message's handler: `message{id, attempts, nsqd}`, a child of the
    /// consumer's. At INFO: it is made for every message, which only pays where INFO is on
    /// (see [`Delivery::span`] for a filter above it).
    pub(crate) fn message_span(&self, id: MessageId, attempts: u16) -> tracing::Span {
        tracing::info_span!(
            parent: &self.span,
            "message",
            id = %id,
            attempts,
            nsqd = %self.addr
        )
    }

    /// The nsqd address.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }
}

/// A message delivered to a consumer; [`Message`](super::Message) is this type with the
/// driver's [`AnswerChannel`](super::AnswerChannel). It answers itself: [`finish`](Self::finish), [`requeue`](Self::requeue),
/// [`requeue_without_backoff`](Self::requeue_without_backoff), [`touch`](Self::touch).
///
/// A message dropped without an answer is requeued (without backoff, with the default delay
/// for its attempt count) and a warning is logged: it is never lost silently.
pub(crate) struct Delivery<S: AnswerSink> {
    inner: Message,
    conn: ConnId,
    origin: Arc<Origin<S>>,
    /// Answered, or taken over by a handler runner.
    done: bool,
    /// Its wait and handling times (nothing without the `metrics` feature).
    timing: Timing,
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
    /// A message the core delivered on `conn` (for the driver).
    pub(crate) fn new(conn: ConnId, message: Message, origin: Arc<Origin<S>>) -> Delivery<S> {
        Delivery {
            inner: message,
            conn,
            origin,
            done: false,
            timing: Timing::none(),
        }
    }

    /// The driver hands it out at `at` (timed only with the `metrics` feature and
    /// histograms).
    pub(crate) fn handed_out(&mut self, at: HandOut) {
        self.timing = Timing::handed_out(at);
    }

    /// The application takes it now: a handler starts on it, or `recv` returns it (its wait
    /// is recorded).
    pub(crate) fn taken(&mut self) {
        self.timing.taken(&self.origin.metrics);
    }

    /// A message the core gave up on (`ConsumerEvent::GaveUp`), for the give-up hook: the
    /// core already finished it, so dropping it sends nothing.
    pub(crate) fn given_up(conn: ConnId, message: Message, origin: Arc<Origin<S>>) -> Delivery<S> {
        Delivery {
            inner: message,
            conn,
            origin,
            done: true,
            timing: Timing::none(),
        }
    }

    /// The message id.
    pub(crate) fn id(&self) -> MessageId {
        self.inner.id
    }

    /// The payload (a slice of the read buffer: no copy was made).
    pub(crate) fn body(&self) -> &Bytes {
        &self.inner.body
    }

    /// How many times nsqd delivered it, this delivery included.
    pub(crate) fn attempts(&self) -> u16 {
        self.inner.attempts
    }

    /// When it was published, in nanoseconds since the Unix epoch (nsqd's clock).
    pub(crate) fn timestamp(&self) -> i64 {
        self.inner.timestamp
    }

    /// The span its handler runs in: its message's ([`Origin::message_span`]), or when that
    /// is off (a filter above INFO), its consumer's, so that what the handler logs still
    /// names its consumer. Neither costs an allocation: the message's span is not made when
    /// it is off, and the consumer's is shared.
    pub(crate) fn span(&self) -> tracing::Span {
        let span = self.origin.message_span(self.inner.id, self.inner.attempts);
        if span.is_disabled() {
            self.origin.span.clone()
        } else {
            span
        }
    }

    /// The nsqd TCP address it came from.
    pub(crate) fn nsqd_address(&self) -> &str {
        &self.origin.addr
    }

    fn answer_for(&self, kind: AnswerKind) -> Answer {
        Answer::new(self.conn, &self.inner, kind)
    }

    /// Sends the last answer; the body goes back to the driver with it. The time since the
    /// application took it is its handling time.
    fn send(&mut self, kind: AnswerKind) {
        self.done = true;
        self.timing.answered(&self.origin.metrics);
        let body = std::mem::take(&mut self.inner.body);
        self.origin.sink.send_answer(self.answer_for(kind), body);
    }

    /// FIN: the message is done.
    pub(crate) fn finish(mut self) {
        self.send(AnswerKind::Finish);
    }

    /// REQ with backoff: the message failed; nsqd redelivers it after `delay` (`None`: the
    /// configured default delay times the attempt count) and the consumer backs off.
    pub(crate) fn requeue(mut self, delay: Option<Duration>) {
        self.send(AnswerKind::Requeue {
            delay,
            backoff: true,
        });
    }

    /// REQ without backoff: redeliver after `delay` (`None`: the default), without slowing the
    /// consumer down.
    pub(crate) fn requeue_without_backoff(mut self, delay: Option<Duration>) {
        self.send(AnswerKind::Requeue {
            delay,
            backoff: false,
        });
    }

    /// Its last answer, `kind` (`failed`: counted as a handler failure, as a handler's error
    /// is): how a batch answers its messages.
    pub(crate) fn answer_as(mut self, kind: AnswerKind, failed: bool) {
        if failed {
            self.origin.metrics.handler_failed();
        }
        self.send(kind);
    }

    /// TOUCH: asks nsqd for more time (another msg_timeout).
    pub(crate) fn touch(&self) {
        self.origin
            .sink
            .send_answer(self.answer_for(AnswerKind::Touch), Bytes::new());
    }

    /// For a handler runner: the message no longer answers itself when dropped; the returned
    /// [`PendingAnswer`] answers it once the handler is done (an answer the handler gave
    /// itself comes first; the later one is then refused by the core and ignored).
    pub(crate) fn take_over(&mut self) -> PendingAnswer<S> {
        self.done = true;
        PendingAnswer {
            answer: self.answer_for(AnswerKind::Finish),
            origin: self.origin.clone(),
            // The handler's answer is its return, not a `finish` it calls itself.
            timing: std::mem::replace(&mut self.timing, Timing::none()),
        }
    }

    /// For the driver: the application never saw this message (received but not taken when
    /// the consumer stopped or its receiver was dropped): requeue it at once, without
    /// backoff and without the warning of an unanswered drop.
    pub(crate) fn release(mut self) {
        self.send(AnswerKind::UNTAKEN);
    }

    /// For a driver that answers a message it never handed out: the answer to apply to the
    /// core directly (nothing goes through the sink).
    pub(crate) fn into_answer(mut self, kind: AnswerKind) -> Answer {
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
                    "message dropped without an answer: requeueing it with the default delay \
                     (default_requeue_delay x attempts); answer every message, or requeue it \
                     yourself for another delay"
                );
            });
            self.send(AnswerKind::DROPPED);
        }
    }
}

/// The answer a handler runner owes for a message it took over ([`Delivery::take_over`]).
#[derive(Debug)]
pub(crate) struct PendingAnswer<S> {
    answer: Answer,
    origin: Arc<Origin<S>>,
    /// Taken when the handler started: its duration ends with [`answer`](Self::answer).
    timing: Timing,
}

impl<S: AnswerSink> PendingAnswer<S> {
    /// Answers with the handler's `outcome` ([`Outcome::answer_kind`]). A failure is logged
    /// in the consumer's span: an error at WARN with its whole chain, a panic at ERROR with
    /// what it said, both with the message id, attempts and nsqd address.
    pub(crate) fn answer(mut self, outcome: &Outcome) {
        self.timing.answered(&self.origin.metrics);
        let (id, attempts, nsqd) = (self.answer.id, self.answer.attempts, &self.origin.addr);
        if !matches!(outcome, Outcome::Done) {
            self.origin.metrics.handler_failed();
        }
        match outcome {
            Outcome::Done => {}
            Outcome::Failed(e) => self.origin.span.in_scope(|| {
                tracing::warn!(
                    msg_id = %id,
                    attempts,
                    nsqd = %nsqd,
                    error = format_args!("{e:#}"),
                    "handler failed: requeueing the message"
                );
            }),
            Outcome::Panicked(panic) => self.origin.span.in_scope(|| {
                tracing::error!(
                    msg_id = %id,
                    attempts,
                    nsqd = %nsqd,
                    panic = panic.as_str(),
                    "handler panicked: requeueing the message"
                );
            }),
        }
        let kind = outcome.answer_kind();
        self.origin
            .sink
            .send_answer(self.answer.with_kind(kind), Bytes::new());
    }
}
