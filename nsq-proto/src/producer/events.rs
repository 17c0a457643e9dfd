//! What a producer reports: publish and ping ids, [`ProducerEvent`], [`ProducerStats`], and
//! its errors ([`PublishFailure`], [`ProducerError`]).

#[cfg(doc)]
use super::Producer;
use crate::command::CommandError;
use crate::connection::{CloseReason, ConfigError, ConnectionError};
use crate::driver::ConnId;
use crate::error_code::ServerError;
use std::fmt;
use std::time::Duration;

/// Identifies one publish of a producer; resolved by exactly one
/// [`ProducerEvent::Published`] or [`ProducerEvent::PublishFailed`]. Never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublishId(pub(super) u64);

impl PublishId {
    /// The raw number (increasing per call), for logs and tables.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for PublishId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pub#{}", self.0)
    }
}

/// Identifies one [`Producer::ping`]; resolved by exactly one [`ProducerEvent::PingOk`] or
/// [`ProducerEvent::PingFailed`]. Never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PingId(pub(super) u64);

impl PingId {
    /// The raw number, for logs and tables.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for PingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ping#{}", self.0)
    }
}

/// Why a publish (or ping) failed after it was accepted.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PublishFailure {
    /// nsqd rejected the publish with this error (`E_BAD_TOPIC`, `E_BAD_MESSAGE`,
    /// `E_PUB_FAILED`, ...). It was not published. nsqd closes the connection after it; the
    /// producer reconnects.
    Server(ServerError),
    /// The connection ended after the publish was written and before nsqd's reply arrived.
    /// **The message may or may not have been published**: retrying can duplicate it.
    ConnectionLost(CloseReason),
    /// nsqd's reply did not arrive within `reply_timeout` (the connection was dropped as
    /// stuck), or the producer's `close_timeout` passed first. **The message may or may not
    /// have been published.**
    TimedOut {
        /// How long the publish had been waiting.
        waited: Duration,
    },
    /// No connection was ready: every nsqd was down (then this comes at once), or none
    /// became ready within `publish_timeout`. The message was **not** sent.
    NoServerAvailable {
        /// The most recent connection error, if any.
        last_error: Option<String>,
    },
    /// The connection refused the command locally (its limits differ from the check made
    /// when the publish was accepted). The message was not sent.
    Refused(ConnectionError),
    /// No connection can be made as configured: every nsqd's last connection showed a
    /// misconfiguration (the wrong port, a TLS mismatch, refused credentials), and none is
    /// retried on its own. The message was **not** sent.
    Misconfigured {
        /// The nsqd concerned (the most recent one, when several are).
        addr: String,
        /// What is wrong.
        problem: crate::Misconfiguration,
    },
}

impl fmt::Display for PublishFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishFailure::Server(e) => write!(f, "publish rejected: {e}"),
            PublishFailure::ConnectionLost(r) => {
                write!(f, "connection lost before nsqd confirmed the publish: {r}")
            }
            PublishFailure::TimedOut { waited } => {
                write!(f, "no reply from nsqd after {waited:?}")
            }
            PublishFailure::NoServerAvailable { last_error: None } => {
                f.write_str("no nsqd connection available")
            }
            PublishFailure::NoServerAvailable {
                last_error: Some(e),
            } => write!(f, "no nsqd connection available (last error: {e})"),
            PublishFailure::Refused(e) => write!(f, "publish refused: {e}"),
            PublishFailure::Misconfigured { addr, problem } => {
                write!(f, "cannot use nsqd {addr} as configured: {problem}")
            }
        }
    }
}

/// The inner errors are shown by `Display`, so none is returned as a source.
impl std::error::Error for PublishFailure {}

/// Why a producer command was refused. Nothing was queued.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProducerError {
    /// The publish is invalid (empty body, too large, delay too long, empty batch...).
    Invalid(CommandError),
    /// [`Producer::close`] was called.
    Closed,
    /// `max_outstanding` publishes are unresolved: retry after some resolve.
    TooManyOutstanding {
        /// The configured bound.
        limit: usize,
    },
    /// `max_pending` publishes already wait for a connection.
    PendingQueueFull {
        /// The configured bound.
        limit: usize,
    },
    /// An nsqd address that is not `host:port`.
    InvalidAddress(String),
    /// The connection configuration would be rejected.
    Config(ConfigError),
}

impl fmt::Display for ProducerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProducerError::Invalid(e) => write!(f, "invalid publish: {e}"),
            ProducerError::Closed => f.write_str("the producer is closed"),
            ProducerError::TooManyOutstanding { limit } => {
                write!(f, "{limit} publishes are already outstanding")
            }
            ProducerError::PendingQueueFull { limit } => {
                write!(f, "{limit} publishes already wait for a connection")
            }
            ProducerError::InvalidAddress(a) => {
                write!(f, "invalid nsqd address {a:?}: expected host:port")
            }
            ProducerError::Config(e) => write!(f, "{e}"),
        }
    }
}

/// The inner errors are shown by `Display`, so none is returned as a source.
impl std::error::Error for ProducerError {}

/// Something that happened, for the application.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProducerEvent {
    /// nsqd confirmed the publish.
    Published(PublishId),
    /// The publish failed; see [`PublishFailure`] for whether it may have been applied.
    PublishFailed(PublishId, PublishFailure),
    /// A connection is ready (see [`Producer::ping`]).
    PingOk(PingId),
    /// No connection became ready (`NoServerAvailable`), or the producer closed first.
    PingFailed(PingId, PublishFailure),
    /// A connection finished its handshake and takes publishes.
    ConnectionReady {
        /// The connection.
        conn: ConnId,
        /// Its nsqd address.
        addr: String,
    },
    /// A connection attempt failed or an established connection ended.
    ConnectionClosed {
        /// The connection.
        conn: ConnId,
        /// Its nsqd address.
        addr: String,
        /// Why, in words.
        reason: String,
        /// When the producer connects to this nsqd again (`None` when closing, or when
        /// `misconfigured`).
        retry_in: Option<Duration>,
        /// The connection never became ready, and the way it ended shows a configuration that
        /// cannot work ([`CloseReason::misconfiguration`](crate::CloseReason::misconfiguration)):
        /// the producer does not connect to this nsqd again unless it is added again
        /// ([`Producer::add_nsqd`](crate::Producer::add_nsqd)).
        misconfigured: Option<crate::Misconfiguration>,
    },
    /// The producer has shut down: every publish is resolved and every connection closed.
    /// Emitted once, after [`Producer::close`].
    Closed,
}

/// A snapshot of a producer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProducerStats {
    /// Publishes confirmed by nsqd.
    pub published: u64,
    /// Publishes that failed: refused by nsqd, lost with their connection, timed out, or
    /// refused before they were sent (over a size limit nsqd stated, malformed).
    pub failed: u64,
    /// Publishes unresolved: sent and awaiting a reply, or waiting for a connection.
    pub outstanding: usize,
    /// Of `outstanding`, those waiting for a connection.
    pub pending: usize,
    /// Connections that are ready.
    pub connections_ready: usize,
    /// Natural batches sent: publishes to one topic that were waiting at the same moment,
    /// sent as one MPUB (see [`ProducerConfig::batching`](super::ProducerConfig::batching)).
    pub batches: u64,
    /// Publishes that left in those batches.
    pub batched_messages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        assert_eq!(PublishId(3).to_string(), "pub#3");
        assert_eq!(PingId(4).to_string(), "ping#4");
        let f = PublishFailure::NoServerAvailable {
            last_error: Some("h:1: refused".into()),
        };
        assert_eq!(
            f.to_string(),
            "no nsqd connection available (last error: h:1: refused)"
        );
        assert!(
            PublishFailure::TimedOut {
                waited: Duration::from_secs(1)
            }
            .to_string()
            .contains("1s")
        );
    }
}
