//! What a connection reports and how it ends: [`ConnectionEvent`], [`ConnectionState`],
//! what was negotiated ([`Negotiated`]), why it closed ([`CloseReason`]) and the errors of
//! its commands.

#[cfg(doc)]
use super::Connection;
use super::{DeflateError, SnappyError, TlsError};
use crate::command::CommandError;
use crate::error_code::ServerError;
use crate::frame::{DecodeError, Message, MessageId};
use crate::identify::{AuthResponse, IdentifyResponse, ReplyError};
use std::fmt;
use std::time::Duration;

/// Identifies one publish; resolved by exactly one [`ConnectionEvent::Published`] or
/// [`ConnectionEvent::PublishFailed`]. Tokens increase by one per publish on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublishToken(pub(super) u64);

impl PublishToken {
    /// The sequence number of the publish on its connection (0 for the first).
    pub fn sequence(self) -> u64 {
        self.0
    }
}

/// Coarse state of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Start-up in progress (IDENTIFY, upgrades, AUTH, SUB).
    Handshaking,
    /// Usable.
    Ready,
    /// [`Connection::close`] was called; draining in-flight messages or outstanding publishes.
    Closing,
    /// Finished; [`ConnectionEvent::Closed`] has been emitted.
    Closed,
}

/// Compression in force on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NegotiatedCompression {
    /// None.
    None,
    /// Snappy framing format.
    Snappy,
    /// Raw DEFLATE; `level` is what this client compresses with.
    Deflate {
        /// The level in use (the configured level capped by the server's maximum).
        level: u32,
    },
}

/// Settings the server agreed to, reported with [`ConnectionEvent::Ready`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Negotiated {
    /// Largest RDY count the server accepts.
    pub max_rdy_count: u32,
    /// The message timeout in force (messages not answered in time are requeued).
    pub msg_timeout: Duration,
    /// The largest msg_timeout the server allows (also the longest TOUCH extension).
    pub max_msg_timeout: Duration,
    /// The server's version string (empty for old servers without feature negotiation).
    pub version: String,
    /// Whether the connection runs over TLS.
    pub tls: bool,
    /// Compression in force.
    pub compression: NegotiatedCompression,
    /// The AUTH reply, when the server required authentication.
    pub auth: Option<AuthResponse>,
    /// The whole IDENTIFY reply.
    pub identify: IdentifyResponse,
}

/// Why a connection ended. Reported once with [`ConnectionEvent::Closed`], then returned by
/// every command as [`ConnectionError::Closed`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CloseReason {
    /// [`Connection::close`] finished. `unanswered` counts in-flight messages left
    /// unanswered (consumer; the server redelivers them) or publishes left without a reply
    /// (producer; they were failed) when the drain deadline passed or the peer hung up.
    Graceful {
        /// Messages or publishes left unanswered.
        unanswered: usize,
    },
    /// The server sent a fatal error (it closes the connection after it).
    Server(ServerError),
    /// The server's byte stream is not valid NSQ framing.
    Decode(DecodeError),
    /// The server broke the protocol (the text says how).
    Protocol(String),
    /// Nothing was received for the read timeout (dead or half-open connection).
    Timeout {
        /// How long the connection had been silent.
        idle: Duration,
    },
    /// The peer closed the connection.
    Eof,
    /// TLS failed (certificate rejected, handshake failure, bad record...).
    Tls(TlsError),
    /// TLS was configured but the server did not grant it; the client refuses to continue in
    /// plain text.
    TlsNotGranted,
    /// The server requires TLS (`nsqd --tls-required`) and the configuration has none: it
    /// refused the connection's first command with this error.
    TlsRequired(ServerError),
    /// The snappy stream from the server is invalid.
    Snappy(SnappyError),
    /// The DEFLATE stream from the server is invalid.
    Deflate(DeflateError),
    /// The reply to IDENTIFY could not be parsed.
    IdentifyReply(ReplyError),
    /// The reply to AUTH could not be parsed.
    AuthReply(ReplyError),
    /// The server requires AUTH but no `auth_secret` is configured.
    AuthSecretMissing,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Graceful { unanswered: 0 } => f.write_str("graceful close"),
            CloseReason::Graceful { unanswered } => {
                write!(f, "graceful close with {unanswered} left unanswered")
            }
            CloseReason::Server(e) => write!(f, "{e}"),
            CloseReason::Decode(e) => write!(f, "protocol error: {e}"),
            CloseReason::Protocol(e) => write!(f, "protocol violation by the server: {e}"),
            CloseReason::Timeout { idle } => {
                write!(
                    f,
                    "no data from the server for {idle:?}: connection presumed dead"
                )
            }
            CloseReason::Eof => f.write_str("the server closed the connection"),
            CloseReason::Tls(e) => write!(f, "{e}"),
            CloseReason::TlsNotGranted => {
                f.write_str("TLS is configured but the server did not grant it")
            }
            CloseReason::TlsRequired(e) => write!(
                f,
                "the server requires TLS and none is configured (enable tls_v1): {e}"
            ),
            CloseReason::Snappy(e) => write!(f, "{e}"),
            CloseReason::Deflate(e) => write!(f, "{e}"),
            CloseReason::IdentifyReply(e) | CloseReason::AuthReply(e) => write!(f, "{e}"),
            CloseReason::AuthSecretMissing => {
                f.write_str("the server requires authentication but no auth_secret is configured")
            }
        }
    }
}

impl std::error::Error for CloseReason {}

impl CloseReason {
    /// What this reason says about the configuration, when a connection ends this way before
    /// it was ever ready: the address is not nsqd's TCP port, TLS does not match, or nsqd
    /// refused the credentials. Trying again does not help until someone changes a
    /// configuration, so clients do not retry these on their own.
    ///
    /// Only meaningful for a connection that never became ready: after that, a TLS error is
    /// a broken stream and an `E_UNAUTHORIZED` concerns one command.
    pub fn misconfiguration(&self) -> Option<Misconfiguration> {
        use crate::ErrorCode;
        Some(match self {
            CloseReason::Decode(DecodeError::HttpPort) => Misconfiguration::HttpPort,
            CloseReason::Decode(DecodeError::LookupdTcpPort) => Misconfiguration::LookupdTcpPort,
            CloseReason::TlsRequired(_) => Misconfiguration::TlsRequired,
            CloseReason::TlsNotGranted => Misconfiguration::TlsNotOffered,
            CloseReason::Tls(e) => Misconfiguration::TlsHandshake(e.clone()),
            CloseReason::AuthSecretMissing => Misconfiguration::AuthSecretMissing,
            CloseReason::Server(e)
                if matches!(e.code(), ErrorCode::AuthFailed | ErrorCode::Unauthorized) =>
            {
                Misconfiguration::AuthRefused(e.clone())
            }
            _ => return None,
        })
    }
}

/// A connection that cannot work as configured ([`CloseReason::misconfiguration`]): the
/// wrong port, a TLS mismatch, or credentials nsqd refuses. Unlike an outage, waiting does not
/// help: the client's or the server's configuration has to change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Misconfiguration {
    /// The address answered in HTTP: an HTTP port (nsqd's, 4151 by default, or
    /// nsqlookupd's, 4161), not nsqd's TCP port (4150).
    HttpPort,
    /// The address refused nsqd's protocol with `E_BAD_PROTOCOL`: nsqlookupd's TCP port
    /// (4160 by default), not nsqd's (4150).
    LookupdTcpPort,
    /// nsqd requires TLS (`--tls-required`) and the configuration has none (`tls_v1`).
    TlsRequired,
    /// TLS is configured and nsqd does not offer it (it has no `--tls-cert`/`--tls-key`).
    TlsNotOffered,
    /// The TLS handshake failed: a certificate that is not trusted or does not name the
    /// server, or no protocol version or cipher in common.
    TlsHandshake(TlsError),
    /// nsqd requires authentication (`--auth-http-address`) and no `auth_secret` is
    /// configured.
    AuthSecretMissing,
    /// nsqd refused the `auth_secret` (`E_AUTH_FAILED`) or found no authorization for it, or
    /// none for this topic and channel (`E_UNAUTHORIZED`). nsqd answers `E_AUTH_FAILED` as
    /// well when its auth server cannot be reached; it does not say which.
    AuthRefused(ServerError),
}

impl fmt::Display for Misconfiguration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misconfiguration::HttpPort => f.write_str(
                "the address answered in HTTP: it is an HTTP port (nsqd's 4151 or nsqlookupd's \
                 4161 by default), not nsqd's TCP port (4150 by default)",
            ),
            Misconfiguration::LookupdTcpPort => f.write_str(
                "the address refused nsqd's protocol with E_BAD_PROTOCOL: it is nsqlookupd's \
                 TCP port (4160 by default), not nsqd's TCP port (4150 by default)",
            ),
            Misconfiguration::TlsRequired => {
                f.write_str("nsqd requires TLS and none is configured (enable tls_v1)")
            }
            Misconfiguration::TlsNotOffered => f.write_str(
                "TLS is configured and nsqd does not offer it (it runs without --tls-cert)",
            ),
            Misconfiguration::TlsHandshake(e) => write!(f, "the TLS handshake failed: {e}"),
            Misconfiguration::AuthSecretMissing => {
                f.write_str("nsqd requires authentication and no auth_secret is configured")
            }
            Misconfiguration::AuthRefused(e) => write!(f, "nsqd refused the credentials: {e}"),
        }
    }
}

impl std::error::Error for Misconfiguration {}

/// Why a publish failed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PublishError {
    /// The server rejected this publish (then closed the connection).
    Server(ServerError),
    /// The connection ended before the reply arrived; the message may or may not have been
    /// published.
    Closed(CloseReason),
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::Server(e) => write!(f, "publish rejected: {e}"),
            PublishError::Closed(r) => write!(f, "publish not confirmed: {r}"),
        }
    }
}

impl std::error::Error for PublishError {}

/// A command was refused locally; nothing was sent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The connection is closed (sticky).
    Closed(CloseReason),
    /// [`Connection::close`] was called: no new publishes or RDY.
    Closing,
    /// The start-up has not finished (RDY needs a subscribed connection).
    NotReady,
    /// Publishing on a consumer connection, or RDY on a producer connection.
    WrongRole,
    /// `max_outstanding_publishes` publishes are awaiting replies: retry after some resolve.
    TooManyOutstanding {
        /// The configured bound.
        limit: usize,
    },
    /// The message is not in flight on this connection (already answered, expired, or
    /// delivered elsewhere).
    NotInFlight(MessageId),
    /// RDY above the server's max_rdy_count (nsqd would close the connection).
    RdyTooHigh {
        /// The requested count.
        requested: u32,
        /// The negotiated maximum.
        max: u32,
    },
    /// The command is invalid (empty body, too large, delay too long...).
    Command(CommandError),
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionError::Closed(r) => write!(f, "connection closed: {r}"),
            ConnectionError::Closing => f.write_str("connection is closing"),
            ConnectionError::NotReady => f.write_str("connection start-up has not finished"),
            ConnectionError::WrongRole => {
                f.write_str("command not valid for this connection's role")
            }
            ConnectionError::TooManyOutstanding { limit } => {
                write!(f, "{limit} publishes already await a reply")
            }
            ConnectionError::NotInFlight(id) => write!(f, "message {id} is not in flight"),
            ConnectionError::RdyTooHigh { requested, max } => {
                write!(
                    f,
                    "RDY {requested} exceeds the server's max_rdy_count {max}"
                )
            }
            ConnectionError::Command(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ConnectionError {}

/// What happened on a connection; drained with [`Connection::poll_event`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConnectionEvent {
    /// Start-up finished; commands go out from now on. (Boxed: it happens once per
    /// connection, and keeps every event small enough to move cheaply per message.)
    Ready(Box<Negotiated>),
    /// A message was delivered (consumer). It is in flight until finished, requeued or
    /// expired.
    Message(Message),
    /// The server acknowledged a publish.
    Published(PublishToken),
    /// A publish failed.
    PublishFailed(PublishToken, PublishError),
    /// The message's msg_timeout passed without an answer: the server has requeued it and a
    /// later answer is refused locally.
    MessageExpired(MessageId),
    /// nsqd delivered again a message that is still in flight here, unanswered: its
    /// msg_timeout passed at nsqd first (nsqd's clock starts when it sends, this side's when
    /// it receives). Its in-flight entry now stands for this delivery, with a new deadline;
    /// answering the message (by its id) answers this delivery.
    Redelivered(Message),
    /// A non-fatal server error (`E_FIN_FAILED`, `E_REQ_FAILED`, `E_TOUCH_FAILED`); the
    /// connection stays up.
    ServerError(ServerError),
    /// The connection ended (exactly once). Write out the last [`Connection::poll_transmit`]
    /// bytes, then close the socket.
    Closed(CloseReason),
}
