//! [`Message`]: what a consumer hands out, answering itself through its consumer's driver;
//! and the [`GiveUpHook`] that sees the messages a consumer gives up on.

use super::answer::{Answer, AnswerKind};
use super::delivery::{AnswerSink, Delivery, PendingAnswer};
use bytes::Bytes;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Carries a message's answers to its consumer's driver (a push on its command queue).
pub(crate) struct AnswerChannel(pub(crate) Arc<dyn AnswerSink>);

impl fmt::Debug for AnswerChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnswerChannel")
    }
}

impl AnswerSink for AnswerChannel {
    fn send_answer(&self, answer: Answer, body: Bytes) {
        self.0.send_answer(answer, body);
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

    /// How many times nsqd delivered it, this delivery included, less the deliveries this
    /// consumer sent back unseen because they arrived beyond `max_in_flight`
    /// ([`ConsumerStats::returned`](nsq_proto::consumer::ConsumerStats::returned)).
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

    /// Its last answer, `kind`, given for a batch (`failed`: counted as a handler failure).
    pub(crate) fn answer_as(self, kind: AnswerKind, failed: bool) {
        self.0.answer_as(kind, failed);
    }

    /// Nobody will answer it now (the receiver is gone): requeued at once, silently.
    pub(crate) fn release(self) {
        self.0.release();
    }

    /// The span its handler runs in: `message{id, attempts, nsqd}`, a child of the
    /// consumer's.
    pub(crate) fn span(&self) -> tracing::Span {
        self.0.span()
    }

    /// The application takes it now (see [`Delivery::taken`]).
    pub(crate) fn taken(&mut self) {
        self.0.taken();
    }

    /// A handler runner takes over answering it.
    pub(crate) fn take_over(&mut self) -> PendingAnswer<AnswerChannel> {
        self.0.take_over()
    }

    /// Its answer of `kind`, for the driver to apply.
    pub(crate) fn into_answer(self, kind: AnswerKind) -> Answer {
        self.0.into_answer(kind)
    }
}

/// Called (on the driver, so keep it short) for every message delivered more than
/// `max_attempts` times; the message has already been finished. It receives the same
/// [`Message`] type the consumer hands out everywhere else, so one function can inspect
/// messages in both places.
pub type GiveUpHook = Arc<dyn Fn(&Message) + Send + Sync>;
