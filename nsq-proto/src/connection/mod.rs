//! One nsqd TCP connection as a sans-IO state machine, for producers and consumers alike.
//!
//! A [`Connection`] owns everything between the socket and the frames: the start-up sequence
//! (magic, IDENTIFY with feature negotiation, TLS, snappy or deflate, AUTH, SUB), heartbeats
//! and liveness, the consumer's in-flight table and RDY bookkeeping, and the producer's
//! pipelined publishes. It does no IO: a driver moves bytes and time in and out.
//!
//! # Driving a connection
//!
//! A connection follows the crate's [driver contract](crate::driver): after creating it and
//! after **every** input or command, drain [`Connection::poll_transmit`] (bytes to write, in
//! one buffer), [`Connection::poll_event`] and [`Connection::poll_timeout`].
//!
//! ```
//! use std::time::Instant;
//! use bytes::BytesMut;
//! use nsq_proto::{Connection, ConnectionConfig, ConnectionEvent, Role, Topic};
//!
//! let now = Instant::now();
//! let mut conn = Connection::new(ConnectionConfig::default(), Role::Producer, "127.0.0.1:4150", now)?;
//! // Publishing before the handshake finished is fine: it is queued until `Ready`.
//! let token = conn.publish(now, &Topic::new("events")?, b"hello")?;
//! // magic, NOP (a producer's probe for nsqd requiring TLS) and IDENTIFY, for the socket
//! let hello = conn.poll_transmit().unwrap();
//! assert!(hello.starts_with(b"  V2NOP\nIDENTIFY\n"));
//!
//! // nsqd answers IDENTIFY with its negotiated settings ...
//! let mut read_buf = BytesMut::new();
//! nsq_proto::encode_frame(&mut read_buf, 0, br#"{"max_rdy_count":2500,"version":"1.3.0"}"#);
//! conn.handle_input(now, &mut read_buf);
//! assert!(matches!(conn.poll_event(), Some(ConnectionEvent::Ready(_))));
//! assert_eq!(&conn.poll_transmit().unwrap()[..], b"PUB events\n\x00\x00\x00\x05hello");
//!
//! // ... and the PUB with OK.
//! nsq_proto::encode_frame(&mut read_buf, 0, b"OK");
//! conn.handle_input(now, &mut read_buf);
//! assert_eq!(conn.poll_event(), Some(ConnectionEvent::Published(token)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
pub(crate) mod deflate;
mod disabled;
mod inflight;
pub(crate) mod snappy;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support;
#[cfg(feature = "tls")]
mod tls;
#[cfg(not(feature = "tls"))]
use disabled::tls;

pub use config::{Compression, ConfigError, ConnectionConfig, DEFAULT_USER_AGENT, Role, Secret};
pub use deflate::DeflateError;
pub use snappy::SnappyError;
#[cfg(feature = "tls")]
pub use tls::{ClientCert, TlsSetupError, webpki_root_store};
pub use tls::{TlsConfig, TlsError};

use crate::command::{self, CommandError};
use crate::error_code::{ErrorCode, ServerError};
use crate::frame::{DecodeError, Frame, FrameDecoder, Message, MessageId, Response};
use crate::identify::{AuthResponse, IdentifyResponse, ReplyError};
use crate::names::Topic;
use bytes::{Bytes, BytesMut};
#[cfg(feature = "tls")]
use rustls::pki_types::ServerName;
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};
#[cfg(not(feature = "tls"))]
use tls::ServerName;

/// Largest amount of plaintext produced by the TLS / decompression layers in one step, so a
/// small compressed input can never expand into an unbounded buffer.
const PULL_CHUNK: usize = 64 * 1024;

/// Identifies one publish; resolved by exactly one [`ConnectionEvent::Published`] or
/// [`ConnectionEvent::PublishFailed`]. Tokens increase by one per publish on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublishToken(u64);

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
    /// A non-fatal server error (`E_FIN_FAILED`, `E_REQ_FAILED`, `E_TOUCH_FAILED`); the
    /// connection stays up.
    ServerError(ServerError),
    /// The connection ended (exactly once). Write out the last [`Connection::poll_transmit`]
    /// bytes, then close the socket.
    Closed(CloseReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Identify,
    TlsOk,
    CompressionOk,
    Auth,
    Sub,
    Ready,
    Closing,
    Closed,
}

#[derive(Debug)]
// Without the `snappy` / `deflate` feature a variant holds an uninhabited stand-in and is
// never built.
#[cfg_attr(not(all(feature = "snappy", feature = "deflate")), allow(dead_code))]
enum Codec {
    Snappy(snappy::SnappyDecoder, Box<snappy::SnappyEncoder>),
    Deflate(deflate::DeflateDecoder, deflate::DeflateEncoder),
}

impl Codec {
    fn push(&mut self, data: &[u8]) {
        match self {
            Codec::Snappy(d, _) => d.push(data),
            Codec::Deflate(d, _) => d.push(data),
        }
    }

    fn pull(&mut self, out: &mut BytesMut) -> Result<usize, CloseReason> {
        match self {
            Codec::Snappy(d, _) => d.pull(out).map_err(CloseReason::Snappy),
            Codec::Deflate(d, _) => d.pull(out, PULL_CHUNK).map_err(CloseReason::Deflate),
        }
    }

    fn encode(&mut self, data: &[u8], out: &mut BytesMut) {
        match self {
            Codec::Snappy(_, e) => e.encode(data, out),
            Codec::Deflate(_, e) => e.encode(data, out),
        }
    }

    #[cfg_attr(
        not(any(feature = "fuzzing", feature = "test-support")),
        expect(
            dead_code,
            reason = "read only by Connection::buffered_input, a fuzzing and test aid"
        )
    )]
    fn buffered(&self) -> usize {
        match self {
            Codec::Snappy(d, _) => d.buffered(),
            Codec::Deflate(d, _) => d.buffered(),
        }
    }
}

/// Outcome of asking the layers for more plaintext.
enum Fill {
    More,
    Idle,
    Eof,
}

/// One nsqd connection. See the [module documentation](self) for how to drive it.
///
/// Methods come in four groups: queries (`&self`), inputs (`handle_*`), commands (misuse
/// returns an error and sends nothing) and outputs (`poll_*`).
pub struct Connection {
    config: ConnectionConfig,
    role: Role,
    server_name: Option<ServerName<'static>>,
    phase: Phase,
    decoder: FrameDecoder,
    /// Plaintext received, not yet decoded into frames.
    rbuf: BytesMut,
    /// Plaintext commands not yet passed through the layers.
    wbuf: BytesMut,
    /// Publishes made before `Ready`.
    pre_ready: BytesMut,
    /// Wire bytes ready for the socket.
    out: BytesMut,
    /// Scratch buffers for layer stacking.
    stage: BytesMut,
    tls_plain: BytesMut,
    tls: Option<tls::TlsLayer>,
    codec: Option<Codec>,
    pending_tls: bool,
    pending_codec: NegotiatedCompression,
    auth_done: bool,
    negotiated: Option<Negotiated>,
    read_timeout: Duration,
    msg_timeout: Duration,
    now: Instant,
    last_rx: Instant,
    rdy: u32,
    /// In-flight messages with their deadlines.
    inflight: inflight::InFlight,
    last_message_at: Option<Instant>,
    next_token: u64,
    first_outstanding: u64,
    close_wait: bool,
    drain_deadline: Option<Instant>,
    closed: Option<CloseReason>,
    events: VecDeque<ConnectionEvent>,
}

impl fmt::Debug for Connection {
    // Hand-written: buffers are not shown (a pending AUTH command holds the secret).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.role)
            .field("state", &self.state())
            .field("tls", &self.tls.is_some())
            .field("codec", &self.codec)
            .field("rdy", &self.rdy)
            .field("in_flight", &self.inflight.len())
            .field("outstanding_publishes", &self.outstanding_publishes())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Creates a connection to `server_addr` (`host:port`; the host names the server for TLS
    /// unless `TlsConfig::with_server_name` did) and queues the magic and IDENTIFY.
    pub fn new(
        config: ConnectionConfig,
        role: Role,
        server_addr: &str,
        now: Instant,
    ) -> Result<Connection, ConfigError> {
        let identify = config.identify()?;
        if config
            .auth_secret
            .as_ref()
            .is_some_and(|s| s.expose().is_empty())
        {
            return Err(ConfigError::Invalid("auth_secret is empty"));
        }
        let server_name = match &config.tls {
            Some(tls) => {
                let name = tls
                    .server_name()
                    .unwrap_or_else(|| config::host_of(server_addr))
                    .to_owned();
                Some(
                    ServerName::try_from(name.clone())
                        .map_err(|_| ConfigError::InvalidServerName(name))?,
                )
            }
            None => None,
        };
        let mut wbuf = BytesMut::with_capacity(256);
        command::magic(&mut wbuf);
        if !role.is_consumer() && config.tls.is_none() {
            // A probe: nsqd answers every command but IDENTIFY with a fatal
            // `E_INVALID ... (TLS required)` when it requires TLS and the client has not
            // started it, and says nothing otherwise (a NOP has no reply). Sent before
            // IDENTIFY, its error is the first frame, so a producer finds out during the
            // handshake instead of on its first publish (no other producer command is
            // both harmless and answered).
            command::nop(&mut wbuf);
        }
        command::identify(&mut wbuf, &identify)
            .map_err(|_| ConfigError::Invalid("IDENTIFY body rejected"))?;
        let read_timeout = config.effective_read_timeout();
        let decoder = FrameDecoder::for_max_msg_size(config.limits.max_msg_size);
        Ok(Connection {
            role,
            server_name,
            phase: Phase::Identify,
            decoder,
            rbuf: BytesMut::new(),
            wbuf,
            pre_ready: BytesMut::new(),
            out: BytesMut::new(),
            stage: BytesMut::new(),
            tls_plain: BytesMut::new(),
            tls: None,
            codec: None,
            pending_tls: false,
            pending_codec: NegotiatedCompression::None,
            auth_done: false,
            negotiated: None,
            read_timeout,
            msg_timeout: Duration::from_secs(60),
            now,
            last_rx: now,
            rdy: 0,
            inflight: inflight::InFlight::default(),
            last_message_at: None,
            next_token: 0,
            first_outstanding: 0,
            close_wait: false,
            drain_deadline: None,
            closed: None,
            events: VecDeque::new(),
            config,
        })
    }

    // ----- queries -----

    /// The coarse state.
    #[must_use]
    pub fn state(&self) -> ConnectionState {
        match self.phase {
            Phase::Identify | Phase::TlsOk | Phase::CompressionOk | Phase::Auth | Phase::Sub => {
                ConnectionState::Handshaking
            }
            Phase::Ready => ConnectionState::Ready,
            Phase::Closing => ConnectionState::Closing,
            Phase::Closed => ConnectionState::Closed,
        }
    }

    /// The role given at creation.
    #[must_use]
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// Negotiated settings, once IDENTIFY has been answered (`auth` is filled in when AUTH
    /// has been answered).
    #[must_use]
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// The server's max_rdy_count (2500 until IDENTIFY is answered).
    #[must_use]
    pub fn max_rdy(&self) -> u32 {
        self.negotiated
            .as_ref()
            .map_or(crate::identify::DEFAULT_MAX_RDY_COUNT as u32, |n| {
                n.max_rdy_count
            })
    }

    /// The last RDY count sent (0 initially and after [`Connection::close`]).
    #[must_use]
    pub fn rdy(&self) -> u32 {
        self.rdy
    }

    /// Messages delivered and not yet finished, requeued or expired.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Whether `id` is in flight on this connection.
    #[must_use]
    pub fn is_in_flight(&self, id: &MessageId) -> bool {
        self.inflight.contains(id)
    }

    /// When the last message was delivered.
    #[must_use]
    pub fn last_message_at(&self) -> Option<Instant> {
        self.last_message_at
    }

    /// Publishes awaiting a reply (including those queued before `Ready`).
    #[must_use]
    pub fn outstanding_publishes(&self) -> usize {
        (self.next_token - self.first_outstanding) as usize
    }

    /// The close reason, once closed.
    #[must_use]
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    // ----- inputs -----

    /// Feeds bytes read from the socket. All of `data` is consumed (it is left empty, keeping
    /// its spare capacity); in the plain-text path the bytes are taken without copying and
    /// message bodies are slices of them.
    pub fn handle_input(&mut self, now: Instant, data: &mut BytesMut) {
        let now = self.clock(now);
        if self.closed.is_some() {
            data.clear();
            return;
        }
        if data.is_empty() {
            return;
        }
        self.last_rx = now;
        if let Some(tls) = &mut self.tls {
            tls.push(data);
            data.clear();
        } else if let Some(codec) = &mut self.codec {
            codec.push(data);
            data.clear();
        } else {
            self.plain_input(now, data);
            return;
        }
        self.process(now);
    }

    /// The plain-text path: frames are split off the caller's buffer itself. Only a frame
    /// straddling two reads is copied (just that frame), so message bodies are slices of the
    /// buffers the driver read into.
    fn plain_input(&mut self, now: Instant, data: &mut BytesMut) {
        while !data.is_empty() {
            if self.rbuf.is_empty() {
                self.rbuf = data.split();
            } else {
                let n = self.bytes_to_complete_frame().min(data.len());
                self.rbuf.extend_from_slice(&data[..n]);
                bytes::Buf::advance(data, n);
            }
            self.process(now);
            if self.closed.is_some() {
                data.clear();
                return;
            }
            if self.tls.is_some() || self.codec.is_some() {
                // An upgrade happened: the rest belongs to the new layer.
                self.handle_input(now, data);
                return;
            }
        }
    }

    /// How many more bytes the partial frame at the front of `rbuf` needs (at least 1).
    fn bytes_to_complete_frame(&self) -> usize {
        let have = self.rbuf.len();
        if have < 4 {
            return 4 - have;
        }
        let size = u32::from_be_bytes([self.rbuf[0], self.rbuf[1], self.rbuf[2], self.rbuf[3]]);
        (4 + size as usize).saturating_sub(have).max(1)
    }

    /// The server closed its side of the socket.
    pub fn handle_eof(&mut self, now: Instant) {
        let _ = self.clock(now);
        self.on_eof();
    }

    /// Time has reached (at least) the last [`Connection::poll_timeout`]: checks liveness,
    /// message deadlines and the drain deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.closed.is_some() {
            return;
        }
        let idle = now.saturating_duration_since(self.last_rx);
        if idle >= self.read_timeout {
            tracing::debug!(?idle, "nsqd connection timed out");
            self.fail(CloseReason::Timeout { idle });
            return;
        }
        self.auto_touch(now);
        self.expire(now);
        self.check_close_done();
        if let Some(deadline) = self.drain_deadline {
            if now >= deadline && self.closed.is_none() {
                let unanswered = self.unanswered();
                self.fail(CloseReason::Graceful { unanswered });
            }
        }
    }

    // ----- commands -----

    /// Publishes one message. Before `Ready` it is queued and sent when the start-up ends.
    pub fn publish(
        &mut self,
        now: Instant,
        topic: &Topic,
        body: &[u8],
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        let limits = self.config.limits;
        self.publish_with(|buf| command::publish(buf, topic, body, &limits))
    }

    /// Publishes several messages atomically with MPUB (one reply for the batch).
    pub fn multi_publish<B: AsRef<[u8]>>(
        &mut self,
        now: Instant,
        topic: &Topic,
        bodies: &[B],
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        let limits = self.config.limits;
        self.publish_with(|buf| command::multi_publish(buf, topic, bodies, &limits))
    }

    /// Publishes one message delivered after `delay` (DPUB).
    pub fn deferred_publish(
        &mut self,
        now: Instant,
        topic: &Topic,
        delay: Duration,
        body: &[u8],
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        let limits = self.config.limits;
        self.publish_with(|buf| command::deferred_publish(buf, topic, delay, body, &limits))
    }

    /// Sends `RDY count` (consumer, after `Ready`). `count` must not exceed
    /// [`Connection::max_rdy`].
    pub fn set_rdy(&mut self, now: Instant, count: u32) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if !self.role.is_consumer() {
            return Err(ConnectionError::WrongRole);
        }
        match self.phase {
            Phase::Ready => {}
            Phase::Closing => return Err(ConnectionError::Closing),
            _ => return Err(ConnectionError::NotReady),
        }
        let max = self.max_rdy();
        if count > max {
            return Err(ConnectionError::RdyTooHigh {
                requested: count,
                max,
            });
        }
        command::rdy(&mut self.wbuf, count);
        self.rdy = count;
        Ok(())
    }

    /// Sends FIN for an in-flight message.
    pub fn finish(&mut self, now: Instant, id: &MessageId) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if !self.inflight.remove(id) {
            return Err(ConnectionError::NotInFlight(*id));
        }
        // `command::fin` in one copy: this is once per message.
        let mut fin = *b"FIN 0123456789abcdef\n";
        fin[4..20].copy_from_slice(id.as_bytes());
        self.wbuf.extend_from_slice(&fin);
        self.after_answer();
        Ok(())
    }

    /// Sends REQ for an in-flight message; the server redelivers it after `delay`.
    pub fn requeue(
        &mut self,
        now: Instant,
        id: &MessageId,
        delay: Duration,
    ) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if !self.inflight.contains(id) {
            return Err(ConnectionError::NotInFlight(*id));
        }
        command::req(&mut self.wbuf, id, delay, &self.config.limits)
            .map_err(ConnectionError::Command)?;
        self.inflight.remove(id);
        self.after_answer();
        Ok(())
    }

    /// Sends TOUCH for an in-flight message: its deadline becomes now + msg_timeout.
    pub fn touch(&mut self, now: Instant, id: &MessageId) -> Result<(), ConnectionError> {
        let now = self.clock(now);
        self.check_open()?;
        let Some((current, delivered)) = self.inflight.get(id) else {
            return Err(ConnectionError::NotInFlight(*id));
        };
        let deadline = self.touched_deadline(now, current, delivered);
        self.inflight.reschedule(id, deadline);
        command::touch(&mut self.wbuf, id);
        Ok(())
    }

    /// The deadline a TOUCH at `now` gives a message: now + msg_timeout, but nsqd never
    /// extends a message beyond delivery + max_msg_timeout, and never shortens it.
    fn touched_deadline(&self, now: Instant, current: Instant, delivered: Instant) -> Instant {
        let max_msg_timeout = self
            .negotiated
            .as_ref()
            .map_or(Duration::from_secs(15 * 60), |n| n.max_msg_timeout);
        (now + self.msg_timeout)
            .min(delivered + max_msg_timeout)
            .max(current)
    }

    /// How long before a message's deadline `auto_touch` touches it: a quarter of
    /// msg_timeout, at most 5 s (nsqd must read the TOUCH before the deadline passes).
    fn auto_touch_lead(&self) -> Duration {
        (self.msg_timeout / 4).min(Duration::from_secs(5))
    }

    /// `auto_touch`: touches the messages whose deadline is within the lead, as long as they
    /// have been in flight less than the configured limit and nsqd's max_msg_timeout still
    /// allows an extension; past that a message is left to time out (logged once).
    fn auto_touch(&mut self, now: Instant) {
        let Some(limit) = self.config.auto_touch else {
            return;
        };
        let lead = self.auto_touch_lead();
        while let Some((id, deadline, delivered)) = self.inflight.pop_touch_due(now + lead) {
            if deadline <= now {
                continue; // too late: it expires now
            }
            let held = now.saturating_duration_since(delivered);
            let extended = self.touched_deadline(now, deadline, delivered);
            if held >= limit || extended <= deadline {
                tracing::warn!(
                    %id,
                    ?held,
                    ?limit,
                    "auto-touch stops (its limit or nsqd's max_msg_timeout reached): the \
                     message will time out and be redelivered"
                );
                continue;
            }
            self.inflight.reschedule(&id, extended);
            self.inflight.rearm_touch(&id);
            command::touch(&mut self.wbuf, &id);
        }
    }

    /// Queues a NOP, which nsqd reads and never answers. Useful to exercise the write path of an
    /// idle connection (a producer's `ping`); heartbeats are answered without it.
    pub fn nop(&mut self, now: Instant) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if self.state() != ConnectionState::Ready {
            return Err(ConnectionError::NotReady);
        }
        command::nop(&mut self.wbuf);
        Ok(())
    }

    /// Starts a graceful close.
    ///
    /// Consumer: sends CLS, stops RDY, keeps accepting answers for in-flight messages, and
    /// closes once the server answered `CLOSE_WAIT` and nothing is in flight, or when
    /// `drain_timeout` passes. Producer: sends nothing (CLS is fatal on a publishing
    /// connection) and closes once every outstanding publish is resolved or `drain_timeout`
    /// passes. During start-up the connection closes at once (publishes queued for after the
    /// start-up fail). Calling it again does nothing.
    pub fn close(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.closed.is_some() || self.phase == Phase::Closing {
            return;
        }
        if self.phase != Phase::Ready {
            // Publishes queued during start-up were never sent: they fail and count as
            // unanswered.
            let unanswered = self.unanswered();
            self.fail(CloseReason::Graceful { unanswered });
            return;
        }
        self.phase = Phase::Closing;
        self.drain_deadline = Some(now + self.config.drain_timeout);
        if self.role.is_consumer() {
            command::cls(&mut self.wbuf);
            self.rdy = 0;
        }
        self.check_close_done();
    }

    // ----- outputs -----

    /// Everything queued since the last call, compressed and encrypted as negotiated, in one
    /// buffer. `None` when there is nothing to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if let Err(e) = self.flush_wbuf() {
            self.fail(CloseReason::Tls(e));
        }
        if self.out.is_empty() {
            None
        } else {
            Some(self.out.split().freeze())
        }
    }

    /// Whether [`Connection::poll_transmit`] may have bytes to return.
    pub(crate) fn has_transmit(&self) -> bool {
        !self.wbuf.is_empty() || !self.out.is_empty()
    }

    /// The earliest instant at which [`Connection::handle_timeout`] must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            // A close that happened outside an input (a failed TLS write in poll_transmit,
            // say) and is not reported yet: due at once, so a driver that only waits on
            // timers still gets to it. Nothing once the events are drained.
            return (!self.events.is_empty()).then_some(self.last_rx);
        }
        let mut t = self.last_rx + self.read_timeout;
        if let Some(deadline) = self.inflight.next_deadline() {
            t = t.min(deadline);
        }
        if let Some(deadline) = self.inflight.next_touch_deadline() {
            let lead = self.auto_touch_lead();
            t = t.min(deadline.checked_sub(lead).unwrap_or(deadline));
        }
        if let Some(deadline) = self.drain_deadline {
            t = t.min(deadline);
        }
        Some(t)
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ConnectionEvent> {
        self.events.pop_front()
    }

    // ----- internals -----

    fn clock(&mut self, now: Instant) -> Instant {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    fn check_open(&self) -> Result<(), ConnectionError> {
        match &self.closed {
            Some(reason) => Err(ConnectionError::Closed(reason.clone())),
            None => Ok(()),
        }
    }

    fn publish_with(
        &mut self,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), CommandError>,
    ) -> Result<PublishToken, ConnectionError> {
        self.check_open()?;
        if self.role.is_consumer() {
            return Err(ConnectionError::WrongRole);
        }
        if self.phase == Phase::Closing {
            return Err(ConnectionError::Closing);
        }
        if let Some(limit) = self.config.max_outstanding_publishes {
            if self.outstanding_publishes() >= limit {
                return Err(ConnectionError::TooManyOutstanding { limit });
            }
        }
        let buf = if self.phase == Phase::Ready {
            &mut self.wbuf
        } else {
            &mut self.pre_ready
        };
        encode(buf).map_err(ConnectionError::Command)?;
        let token = PublishToken(self.next_token);
        self.next_token += 1;
        Ok(token)
    }

    /// Queues a publish written by `encode` (a producer's prepared command; on error it
    /// must write nothing).
    pub(crate) fn publish_prepared(
        &mut self,
        now: Instant,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), CommandError>,
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        self.publish_with(encode)
    }

    fn unanswered(&self) -> usize {
        if self.role.is_consumer() {
            self.inflight.len()
        } else {
            self.outstanding_publishes()
        }
    }

    fn after_answer(&mut self) {
        self.check_close_done();
    }

    fn expire(&mut self, now: Instant) {
        while let Some(id) = self.inflight.pop_expired(now) {
            tracing::debug!(msg_id = %id, "message expired unanswered");
            self.events.push_back(ConnectionEvent::MessageExpired(id));
        }
    }

    fn check_close_done(&mut self) {
        if self.phase != Phase::Closing || self.closed.is_some() {
            return;
        }
        let done = if self.role.is_consumer() {
            self.close_wait && self.inflight.is_empty()
        } else {
            self.outstanding_publishes() == 0
        };
        if done {
            self.fail(CloseReason::Graceful { unanswered: 0 });
        }
    }

    fn on_eof(&mut self) {
        if self.closed.is_some() {
            return;
        }
        if self.phase == Phase::Closing {
            let unanswered = self.unanswered();
            self.fail(CloseReason::Graceful { unanswered });
        } else {
            self.fail(CloseReason::Eof);
        }
    }

    /// Ends the connection with `reason` (once): fails outstanding publishes and forgets
    /// in-flight messages.
    fn fail(&mut self, reason: CloseReason) {
        if self.closed.is_some() {
            return;
        }
        if let CloseReason::Graceful { .. } = &reason {
            tracing::debug!(%reason, "nsqd connection closed");
            // The last commands, then TLS close_notify, go out with the last poll_transmit.
            let flushed = self.flush_wbuf();
            if let (Ok(()), Some(tls)) = (flushed, &mut self.tls) {
                if let Err(e) = tls.close_notify(&mut self.out) {
                    tracing::debug!(error = %e, "could not queue TLS close_notify");
                }
            }
        } else {
            tracing::debug!(%reason, "nsqd connection failed");
        }
        for t in self.first_outstanding..self.next_token {
            self.events.push_back(ConnectionEvent::PublishFailed(
                PublishToken(t),
                PublishError::Closed(reason.clone()),
            ));
        }
        self.first_outstanding = self.next_token;
        self.inflight.clear();
        self.pre_ready.clear();
        self.drain_deadline = None;
        self.phase = Phase::Closed;
        self.closed = Some(reason.clone());
        self.events.push_back(ConnectionEvent::Closed(reason));
    }

    fn violation(&mut self, what: impl Into<String>) {
        self.fail(CloseReason::Protocol(what.into()));
    }

    /// Decodes frames and pulls plaintext from the layers until both are exhausted.
    fn process(&mut self, now: Instant) {
        loop {
            loop {
                if self.closed.is_some() {
                    return;
                }
                match self.decoder.decode(&mut self.rbuf) {
                    Ok(Some(frame)) => self.handle_frame(now, frame),
                    Ok(None) => break,
                    Err(e) => {
                        self.fail(CloseReason::Decode(e));
                        return;
                    }
                }
            }
            match self.fill() {
                Ok(Fill::More) => {}
                Ok(Fill::Idle) => return,
                Ok(Fill::Eof) => {
                    self.on_eof();
                    return;
                }
                Err(reason) => {
                    self.fail(reason);
                    return;
                }
            }
        }
    }

    /// Moves up to one chunk of plaintext from the layers into `rbuf`.
    fn fill(&mut self) -> Result<Fill, CloseReason> {
        match (&mut self.tls, &mut self.codec) {
            (None, None) => Ok(Fill::Idle),
            (Some(tls), None) => {
                match tls
                    .pull(&mut self.rbuf, PULL_CHUNK, &mut self.out)
                    .map_err(CloseReason::Tls)?
                {
                    tls::TlsPull::Data => Ok(Fill::More),
                    tls::TlsPull::NeedInput => Ok(Fill::Idle),
                    tls::TlsPull::Closed => Ok(Fill::Eof),
                }
            }
            (None, Some(codec)) => Ok(if codec.pull(&mut self.rbuf)? > 0 {
                Fill::More
            } else {
                Fill::Idle
            }),
            (Some(tls), Some(codec)) => loop {
                if codec.pull(&mut self.rbuf)? > 0 {
                    return Ok(Fill::More);
                }
                self.tls_plain.clear();
                match tls
                    .pull(&mut self.tls_plain, PULL_CHUNK, &mut self.out)
                    .map_err(CloseReason::Tls)?
                {
                    tls::TlsPull::Data => codec.push(&self.tls_plain),
                    tls::TlsPull::NeedInput => return Ok(Fill::Idle),
                    tls::TlsPull::Closed => return Ok(Fill::Eof),
                }
            },
        }
    }

    /// Passes queued plaintext through compression and TLS into `out`.
    fn flush_wbuf(&mut self) -> Result<(), TlsError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        if self.closed.is_some() && !matches!(self.closed, Some(CloseReason::Graceful { .. })) {
            // The stream is broken; nothing more can be sent meaningfully.
            self.wbuf.clear();
            return Ok(());
        }
        match (&mut self.tls, &mut self.codec) {
            (None, None) => {
                if self.out.is_empty() {
                    std::mem::swap(&mut self.out, &mut self.wbuf);
                } else {
                    self.out.extend_from_slice(&self.wbuf);
                    self.wbuf.clear();
                }
            }
            (None, Some(codec)) => {
                codec.encode(&self.wbuf, &mut self.out);
                self.wbuf.clear();
            }
            (Some(tls), None) => {
                tls.write(&self.wbuf, &mut self.out)?;
                self.wbuf.clear();
            }
            (Some(tls), Some(codec)) => {
                self.stage.clear();
                codec.encode(&self.wbuf, &mut self.stage);
                tls.write(&self.stage, &mut self.out)?;
                self.wbuf.clear();
            }
        }
        Ok(())
    }

    fn handle_frame(&mut self, now: Instant, frame: Frame) {
        match frame {
            Frame::Response(Response::Heartbeat) => {
                tracing::trace!("heartbeat");
                command::nop(&mut self.wbuf);
            }
            Frame::Response(response) => self.handle_response(response),
            Frame::Error(err) if !err.is_fatal() => {
                tracing::debug!(%err, "non-fatal nsqd error");
                self.events.push_back(ConnectionEvent::ServerError(err));
            }
            Frame::Error(err) => {
                if matches!(self.phase, Phase::Ready | Phase::Closing)
                    && !self.role.is_consumer()
                    && self.outstanding_publishes() > 0
                {
                    let token = PublishToken(self.first_outstanding);
                    self.first_outstanding += 1;
                    self.events.push_back(ConnectionEvent::PublishFailed(
                        token,
                        PublishError::Server(err.clone()),
                    ));
                }
                let reason = if err.code() == ErrorCode::Invalid
                    && err.description().contains("(TLS required)")
                {
                    CloseReason::TlsRequired(err)
                } else {
                    CloseReason::Server(err)
                };
                self.fail(reason);
            }
            Frame::Message(message) => self.handle_message(now, message),
        }
    }

    fn handle_message(&mut self, now: Instant, message: Message) {
        if !self.role.is_consumer() {
            return self.violation("message delivered on a producer connection");
        }
        if !matches!(self.phase, Phase::Ready | Phase::Closing) {
            return self.violation("message delivered before the subscription was confirmed");
        }
        let deadline = now + self.msg_timeout;
        self.inflight
            .insert(message.id, deadline, now, self.config.auto_touch.is_some());
        self.last_message_at = Some(now);
        self.events.push_back(ConnectionEvent::Message(message));
    }

    fn handle_response(&mut self, response: Response) {
        match self.phase {
            Phase::Identify => match IdentifyResponse::parse(response.as_bytes()) {
                Ok(reply) => self.on_identify(reply),
                Err(e) => self.fail(CloseReason::IdentifyReply(e)),
            },
            Phase::TlsOk => {
                if response == Response::Ok {
                    tracing::debug!("TLS established");
                    self.advance_handshake();
                } else {
                    self.violation("expected OK after the TLS upgrade");
                }
            }
            Phase::CompressionOk => {
                if response == Response::Ok {
                    self.advance_handshake();
                } else {
                    self.violation("expected OK after the compression upgrade");
                }
            }
            Phase::Auth => match response {
                Response::Other(data) => match AuthResponse::parse(&data) {
                    Ok(auth) => {
                        tracing::debug!(identity = %auth.identity, "authenticated");
                        if let Some(n) = &mut self.negotiated {
                            n.auth = Some(auth);
                        }
                        self.advance_handshake();
                    }
                    Err(e) => self.fail(CloseReason::AuthReply(e)),
                },
                _ => self.violation("expected a JSON reply to AUTH"),
            },
            Phase::Sub => {
                if response == Response::Ok {
                    self.ready();
                } else {
                    self.violation("expected OK after SUB");
                }
            }
            Phase::Ready | Phase::Closing => match response {
                Response::Ok if !self.role.is_consumer() && self.outstanding_publishes() > 0 => {
                    let token = PublishToken(self.first_outstanding);
                    self.first_outstanding += 1;
                    self.events.push_back(ConnectionEvent::Published(token));
                    self.check_close_done();
                }
                Response::CloseWait if self.role.is_consumer() && self.phase == Phase::Closing => {
                    self.close_wait = true;
                    self.check_close_done();
                }
                other => self.violation(format!(
                    "unexpected response {:?}",
                    String::from_utf8_lossy(&other.as_bytes()[..other.as_bytes().len().min(64)])
                )),
            },
            Phase::Closed => {}
        }
    }

    fn on_identify(&mut self, reply: IdentifyResponse) {
        if reply.snappy && reply.deflate {
            return self.violation("server granted both snappy and deflate");
        }
        if reply.tls_v1 && self.config.tls.is_none() {
            return self.violation("server started TLS that was not requested");
        }
        if self.config.tls.is_some() && !reply.tls_v1 {
            return self.fail(CloseReason::TlsNotGranted);
        }
        let compression = match self.config.compression {
            Compression::Snappy if reply.snappy => NegotiatedCompression::Snappy,
            Compression::Deflate { level } if reply.deflate => {
                let cap = reply.max_deflate_level.clamp(1, 9) as u32;
                NegotiatedCompression::Deflate {
                    level: level.min(cap),
                }
            }
            _ if reply.snappy || reply.deflate => {
                return self.violation("server enabled compression that was not requested");
            }
            _ => NegotiatedCompression::None,
        };
        if self.config.compression != Compression::None
            && compression == NegotiatedCompression::None
        {
            tracing::info!("server declined compression; continuing uncompressed");
        }
        if !reply.auth_required && self.config.auth_secret.is_some() {
            tracing::debug!("server does not require AUTH; the configured secret is not sent");
        }
        self.msg_timeout = if reply.msg_timeout > 0 {
            reply.msg_timeout()
        } else {
            Duration::from_secs(60)
        };
        self.pending_tls = reply.tls_v1;
        self.pending_codec = compression;
        self.negotiated = Some(Negotiated {
            max_rdy_count: reply.max_rdy(),
            msg_timeout: self.msg_timeout,
            max_msg_timeout: reply.max_msg_timeout(),
            version: reply.version.clone(),
            tls: reply.tls_v1,
            compression,
            auth: None,
            identify: reply,
        });
        self.advance_handshake();
    }

    /// Takes the next start-up step.
    fn advance_handshake(&mut self) {
        if self.pending_tls {
            self.pending_tls = false;
            if let Err(e) = self.flush_wbuf() {
                return self.fail(CloseReason::Tls(e));
            }
            let (Some(tls), Some(name)) = (&self.config.tls, &self.server_name) else {
                return self.fail(CloseReason::TlsNotGranted);
            };
            match tls::TlsLayer::start(tls.client_config().clone(), name.clone(), &mut self.out) {
                Ok(mut layer) => {
                    // Everything after the IDENTIFY reply is TLS records.
                    layer.push(&self.rbuf);
                    self.rbuf.clear();
                    self.tls = Some(layer);
                    self.phase = Phase::TlsOk;
                }
                Err(e) => self.fail(CloseReason::Tls(e)),
            }
            return;
        }
        if self.pending_codec != NegotiatedCompression::None {
            if let Err(e) = self.flush_wbuf() {
                return self.fail(CloseReason::Tls(e));
            }
            let codec: Option<Codec> = match self.pending_codec {
                #[cfg(feature = "deflate")]
                NegotiatedCompression::Deflate { level } => Some(Codec::Deflate(
                    deflate::DeflateDecoder::default(),
                    deflate::DeflateEncoder::new(level),
                )),
                #[cfg(feature = "snappy")]
                NegotiatedCompression::Snappy => Some(Codec::Snappy(
                    snappy::SnappyDecoder::default(),
                    Box::default(),
                )),
                // Only a compression this build can speak is ever asked for, hence granted.
                _ => None,
            };
            let Some(mut codec) = codec else {
                return self.fail(CloseReason::Protocol(format!(
                    "compression {:?} enabled without being asked for",
                    self.pending_codec
                )));
            };
            tracing::debug!(compression = ?self.pending_codec, "compression enabled");
            self.pending_codec = NegotiatedCompression::None;
            // Everything after the previous reply belongs to the compressed stream.
            codec.push(&self.rbuf);
            self.rbuf.clear();
            self.codec = Some(codec);
            self.phase = Phase::CompressionOk;
            return;
        }
        let auth_required = self
            .negotiated
            .as_ref()
            .is_some_and(|n| n.identify.auth_required);
        if auth_required && !self.auth_done {
            self.auth_done = true;
            let Some(secret) = &self.config.auth_secret else {
                return self.fail(CloseReason::AuthSecretMissing);
            };
            if command::auth(&mut self.wbuf, secret.expose()).is_err() {
                return self.fail(CloseReason::AuthSecretMissing);
            }
            self.phase = Phase::Auth;
            return;
        }
        if let Role::Consumer { topic, channel } = &self.role {
            if self.phase != Phase::Sub {
                command::sub(&mut self.wbuf, topic, channel);
                self.phase = Phase::Sub;
                return;
            }
        }
        self.ready();
    }

    fn ready(&mut self) {
        self.phase = Phase::Ready;
        if !self.pre_ready.is_empty() {
            self.wbuf.extend_from_slice(&self.pre_ready);
            self.pre_ready.clear();
        }
        let negotiated = self.negotiated.clone().unwrap_or_else(|| Negotiated {
            max_rdy_count: crate::identify::DEFAULT_MAX_RDY_COUNT as u32,
            msg_timeout: self.msg_timeout,
            max_msg_timeout: Duration::from_secs(15 * 60),
            version: String::new(),
            tls: false,
            compression: NegotiatedCompression::None,
            auth: None,
            identify: IdentifyResponse::default(),
        });
        tracing::debug!(?negotiated.version, "nsqd connection ready");
        self.events
            .push_back(ConnectionEvent::Ready(Box::new(negotiated)));
    }

    /// Bytes buffered inside the layers: the fuzzers and tests check that a small input never
    /// makes them grow without bound. Not part of the API (only built with the `fuzzing` or
    /// `test-support` feature).
    #[cfg(any(feature = "fuzzing", feature = "test-support"))]
    #[doc(hidden)]
    #[must_use]
    pub fn buffered_input(&self) -> usize {
        self.rbuf.len()
            + self.tls.as_ref().map_or(0, tls::TlsLayer::buffered)
            + self.codec.as_ref().map_or(0, Codec::buffered)
    }
}
