//! How a message is answered: [`AnswerKind`] and the `Copy` [`Answer`] a message sends to its
//! driver, applied to the core [`nsq_proto::Consumer`].

use nsq_proto::consumer::{Consumer, ConsumerError};
use nsq_proto::driver::ConnId;
use nsq_proto::{Message, MessageId};
use std::time::{Duration, Instant};

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
    pub(crate) const DROPPED: AnswerKind = AnswerKind::Requeue {
        delay: None,
        backoff: false,
    };

    /// The answer for a message handed out after the consumer started stopping (or never
    /// taken by the application): requeue at once, without backoff.
    pub(crate) const UNTAKEN: AnswerKind = AnswerKind::Requeue {
        delay: Some(Duration::ZERO),
        backoff: false,
    };
}

/// A small `Copy` command answering one message, sent by a `Message` to the driver that owns
/// the core: no allocation and no lock per answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
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
    pub(crate) fn new(conn: ConnId, message: &Message, kind: AnswerKind) -> Answer {
        Answer {
            conn,
            id: message.id,
            attempts: message.attempts,
            kind,
        }
    }

    /// The same message, another answer.
    pub(crate) fn with_kind(self, kind: AnswerKind) -> Answer {
        Answer { kind, ..self }
    }

    /// Hands the answer to the consumer. A refusal (typically: the connection closed, so nsqd
    /// redelivers the message, or the message timed out) is logged at debug level and
    /// returned.
    pub(crate) fn apply(&self, consumer: &mut Consumer, now: Instant) -> Result<(), ConsumerError> {
        let result = match self.kind {
            AnswerKind::Finish => consumer.finish(now, self.conn, &self.id),
            AnswerKind::Touch => consumer.touch(now, self.conn, &self.id),
            AnswerKind::Requeue { delay, backoff } => {
                consumer.requeue_id(now, self.conn, &self.id, self.attempts, delay, backoff)
            }
        };
        if let Err(e) = &result {
            // Rare (a connection that closed): a look through the connections is affordable.
            let nsqd = consumer
                .connections()
                .find_map(|(conn, addr)| (conn == self.conn).then_some(addr));
            tracing::debug!(
                conn = %self.conn,
                nsqd = nsqd.unwrap_or_default(),
                msg_id = %self.id,
                error = %e,
                "answer not sent"
            );
        }
        result
    }
}
