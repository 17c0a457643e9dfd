//! What a [`Consumer`](super::Consumer) tells the application ([`ConsumerEvent`]) and why it
//! refuses a command ([`ConsumerError`]).

use super::lookupd::{LookupdAddressError, LookupdError};
use crate::connection::ConnectionError;
use crate::driver::ConnId;
use crate::error_code::ServerError;
use crate::frame::{Message, MessageId};
use std::fmt;
use std::time::Duration;

/// Something that happened, for the application.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConsumerEvent {
    /// A message to handle; answer it with [`Consumer::finish`](super::Consumer::finish),
    /// [`Consumer::requeue`](super::Consumer::requeue) or
    /// [`Consumer::touch`](super::Consumer::touch) on the same `conn`. Its `attempts` leave
    /// out the deliveries this consumer sent back unseen, beyond max_in_flight
    /// ([`ConsumerStats::returned`](super::ConsumerStats::returned)).
    Message {
        /// The connection it came from.
        conn: ConnId,
        /// The message.
        message: Message,
    },
    /// A message delivered more than `max_attempts` times: it has been finished (FIN queued)
    /// and is handed over so it can be logged or parked elsewhere.
    GaveUp {
        /// The connection it came from.
        conn: ConnId,
        /// The message.
        message: Message,
    },
    /// A message was not answered within the server's msg_timeout; nsqd has requeued it and an
    /// answer for it is no longer accepted.
    MessageExpired {
        /// The connection it came from.
        conn: ConnId,
        /// Its id.
        id: MessageId,
    },
    /// A connection finished its handshake and subscription.
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
        /// Why, in words (the connection's close reason or the driver's report).
        reason: String,
        /// When the consumer connects to this nsqd again (an address given directly; `None`
        /// when closing, or for an nsqd found through nsqlookupd, which is connected to again
        /// once a lookupd lists it, and `None` when `misconfigured`).
        retry_in: Option<Duration>,
        /// The connection never became ready, and the way it ended shows a configuration that
        /// cannot work ([`CloseReason::misconfiguration`](crate::CloseReason::misconfiguration)):
        /// the consumer does not connect to this nsqd again on its own. Adding it again
        /// ([`Consumer::add_nsqd`](crate::Consumer::add_nsqd)) tries once more; a discovered
        /// nsqd is tried again when a lookupd lists it after having stopped listing it.
        misconfigured: Option<crate::Misconfiguration>,
    },
    /// A non-fatal server error (`E_FIN_FAILED`, `E_REQ_FAILED`, `E_TOUCH_FAILED`).
    ServerError {
        /// The connection.
        conn: ConnId,
        /// The error.
        error: ServerError,
    },
    /// A lookupd answered a query (the producers it listed are connected to).
    LookupdAnswered {
        /// The lookupd (as `http://host:port/path`).
        addr: String,
        /// How many nsqd it listed for the topic.
        producers: usize,
    },
    /// One lookupd query failed; the others (and later polls) carry on. An error that shows
    /// the address is no nsqlookupd ([`LookupdError::is_misconfiguration`]) stops the polls
    /// of that address until it is added again.
    LookupdFailed {
        /// The lookupd.
        addr: String,
        /// Why.
        error: LookupdError,
    },
    /// The adaptive in-flight limit moved
    /// ([`InFlightMode::Adaptive`](super::InFlightMode::Adaptive)); RDY follows it.
    InFlightLimitChanged {
        /// The new limit.
        limit: u32,
        /// The median handling latency of the window that moved it (zero when a message's
        /// expiry moved it).
        latency: Duration,
        /// The uncongested latency it was measured against.
        uncongested: Option<Duration>,
    },
    /// The consumer has shut down: every connection is closed. Emitted once, after
    /// [`Consumer::close`](super::Consumer::close).
    Closed {
        /// Messages still unanswered when their connection closed (nsqd redelivers them).
        leftovers: usize,
    },
}

/// Why a consumer command was refused. Nothing was sent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConsumerError {
    /// No such connection (never existed, or already closed: nsqd will redeliver its messages).
    UnknownConnection(ConnId),
    /// The connection exists but is not yet ready.
    NotReady(ConnId),
    /// The connection refused the command.
    Connection(ConnectionError),
    /// An nsqd address that is not `host:port`.
    InvalidAddress(String),
    /// A lookupd address that could not be parsed.
    InvalidLookupd(LookupdAddressError),
    /// The consumer is closing; no new connections.
    Closing,
    /// [`Consumer::disconnect_from_nsqd`](super::Consumer::disconnect_from_nsqd) named an nsqd
    /// that is not configured: never added, already disconnected from, or discovered but
    /// listed by no lookupd any more.
    NsqdNotConfigured(String),
    /// [`Consumer::disconnect_from_nsqd`](super::Consumer::disconnect_from_nsqd) named an nsqd
    /// known only through nsqlookupd: it is connected while a lookupd lists it (remove the
    /// lookupd, or tombstone the nsqd there).
    NsqdDiscovered(String),
    /// [`Consumer::disconnect_from_lookupd`](super::Consumer::disconnect_from_lookupd) named a
    /// lookupd that is not configured.
    LookupdNotConfigured(String),
    /// [`Consumer::disconnect_from_lookupd`](super::Consumer::disconnect_from_lookupd) named
    /// the only configured lookupd: discovery would stop (add its replacement first, or
    /// [`close`](super::Consumer::close) the consumer).
    LastLookupd(String),
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerError::UnknownConnection(c) => write!(f, "unknown or closed connection {c}"),
            ConsumerError::NotReady(c) => write!(f, "connection {c} is not ready"),
            ConsumerError::Connection(e) => write!(f, "{e}"),
            ConsumerError::InvalidAddress(a) => {
                write!(f, "invalid nsqd address {a:?}: expected host:port")
            }
            ConsumerError::InvalidLookupd(e) => write!(f, "{e}"),
            ConsumerError::Closing => f.write_str("the consumer is closing"),
            ConsumerError::NsqdNotConfigured(a) => write!(f, "nsqd {a} is not configured"),
            ConsumerError::NsqdDiscovered(a) => write!(
                f,
                "nsqd {a} was discovered through nsqlookupd, not added directly"
            ),
            ConsumerError::LookupdNotConfigured(a) => write!(f, "nsqlookupd {a} is not configured"),
            ConsumerError::LastLookupd(a) => write!(
                f,
                "cannot disconnect from nsqlookupd {a}: it is the only one configured"
            ),
        }
    }
}

/// The inner errors are shown by `Display`, so none is returned as a source.
impl std::error::Error for ConsumerError {}

impl From<ConnectionError> for ConsumerError {
    fn from(e: ConnectionError) -> Self {
        ConsumerError::Connection(e)
    }
}
