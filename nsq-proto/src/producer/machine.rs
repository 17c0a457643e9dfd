//! The [`Producer`] state machine.

use super::config::{ProducerConfig, Routing};
use crate::command::{self, CommandError};
use crate::connection::{
    CloseReason, ConfigError, Connection, ConnectionError, ConnectionEvent, ConnectionState,
    PublishError, PublishToken, Role,
};
use crate::consumer::policy::ReconnectSchedule;
use crate::driver::{Action, ConnId};
use crate::error_code::{ErrorCode, ServerError};
use crate::names::Topic;
use crate::rng::Rng;
use crate::schedule::{later, valid_host_port};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// Identifies one publish of a producer; resolved by exactly one
/// [`ProducerEvent::Published`] or [`ProducerEvent::PublishFailed`]. Never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublishId(u64);

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
pub struct PingId(u64);

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
    /// Like [`NoServerAvailable`](Self::NoServerAvailable), and the reason is that nsqd
    /// requires TLS (`--tls-required`) while the configuration has none. The message was
    /// **not** sent.
    TlsRequired {
        /// The nsqd that refused plain text.
        addr: String,
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
            PublishFailure::TlsRequired { addr } => write!(
                f,
                "nsqd {addr} requires TLS and the configuration has none (enable tls_v1)"
            ),
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
        /// When the producer connects to this nsqd again (`None` when closing).
        retry_in: Option<Duration>,
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
    /// Publishes that failed.
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

/// An action waiting in the output queue; consecutive bytes for one connection are gathered.
#[derive(Debug)]
enum Queued {
    Action(Action),
    Transmit {
        conn: ConnId,
        first: Bytes,
        more: Option<BytesMut>,
    },
}

impl Queued {
    fn into_action(self) -> Action {
        match self {
            Queued::Action(a) => a,
            Queued::Transmit { conn, first, more } => Action::Transmit {
                conn,
                data: more.map_or(first, BytesMut::freeze),
            },
        }
    }
}

/// With batching on, the most commands awaiting their reply on a connection; publishes made
/// meanwhile gather into the next batch. Two keep nsqd busy with one batch while the reply to
/// the other travels back and its publishers make their next publishes.
const MAX_SENT_WHILE_BATCHING: usize = 2;

/// The publish ids a command carries: one per message of a batch, one for an explicit MPUB
/// or a DPUB.
#[derive(Debug, Clone)]
enum Ids {
    One(PublishId),
    Many(Vec<PublishId>),
}

impl Ids {
    fn push(&mut self, id: PublishId) {
        match self {
            Ids::One(first) => *self = Ids::Many(vec![*first, id]),
            Ids::Many(v) => v.push(id),
        }
    }

    fn as_slice(&self) -> &[PublishId] {
        match self {
            Ids::One(id) => std::slice::from_ref(id),
            Ids::Many(v) => v,
        }
    }
}

/// What kind of command a [`Work`] becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Single publishes: one PUB, or one MPUB when several were merged (natural batching).
    /// `solo`: never merged with others (a retry after the batch holding it was refused).
    Batch { solo: bool },
    /// An explicit MPUB: atomic, one id.
    Multi,
    /// A DPUB.
    Deferred(Duration),
}

/// One command for a connection: being gathered (`D = BytesMut`, until the next
/// [`Producer::poll_action`]) or sent and awaiting its reply (`D = Bytes`). Its data is kept
/// until the reply, so the command can be sent again when nsqd never processed it.
#[derive(Debug)]
struct Work<D> {
    topic: Topic,
    shape: Shape,
    /// `Batch` and `Multi`: the MPUB entries (u32 length + body, per message); `Deferred`:
    /// the body.
    data: D,
    /// Messages in `data`.
    count: u32,
    ids: Ids,
}

impl Work<BytesMut> {
    fn freeze(self) -> Work<Bytes> {
        Work {
            topic: self.topic,
            shape: self.shape,
            data: self.data.freeze(),
            count: self.count,
            ids: self.ids,
        }
    }
}

/// A command written to a connection, awaiting its reply.
#[derive(Debug)]
struct Sent {
    token: u64,
    at: Instant,
    work: Work<Bytes>,
}

/// One socket to an nsqd: connecting (`conn: None`), handshaking, ready or closing.
#[derive(Debug)]
struct Link {
    id: ConnId,
    /// When the connection attempt started.
    started: Instant,
    conn: Option<Connection>,
    ready_at: Option<Instant>,
    /// Publishes gathered since the last write, in order; written by `emit`.
    open: Vec<Work<BytesMut>>,
    sent: VecDeque<Sent>,
    /// nsqd refused one of its commands (its error answered a publish).
    refused: bool,
    /// The connection may have bytes to transmit.
    dirty: bool,
}

impl Link {
    fn is_ready(&self) -> bool {
        self.ready_at.is_some()
            && self
                .conn
                .as_ref()
                .is_some_and(|c| c.state() == ConnectionState::Ready)
    }
}

#[derive(Debug)]
struct Node {
    addr: String,
    link: Option<Link>,
    schedule: ReconnectSchedule,
    next_attempt: Option<Instant>,
    /// The largest message this nsqd takes, as configured or as learned from its refusals
    /// (`E_BAD_MESSAGE ... too big N > MAX`); larger ones are not put in batches.
    max_msg: u32,
    /// The largest MPUB body, likewise (`E_BAD_BODY ... too big N > MAX`).
    max_body: u32,
}

#[derive(Debug)]
enum PendingKind {
    Publish {
        topic: Topic,
        body: Bytes,
        solo: bool,
    },
    Multi {
        topic: Topic,
        entries: Bytes,
        count: u32,
    },
    Deferred {
        topic: Topic,
        delay: Duration,
        body: Bytes,
    },
    Ping(PingId),
}

#[derive(Debug)]
struct Pending {
    /// The publish or ping id.
    id: u64,
    since: Instant,
    deadline: Instant,
    kind: PendingKind,
}

/// How a publish is given, borrowed from the caller (hot path) or from the pending queue.
#[derive(Clone, Copy)]
enum Item<'a> {
    One {
        body: &'a [u8],
        solo: bool,
    },
    /// An explicit MPUB, already encoded as entries.
    Multi {
        entries: &'a [u8],
        count: u32,
    },
    Deferred(Duration, &'a [u8]),
}

/// How publishes still held by a dropped connection fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Lost,
    TimedOut,
}

/// The producer-level state machine: publishing over one connection per nsqd, with routing,
/// failover, reconnection, a bounded wait for a connection, and graceful close.
///
/// It does no IO. The driver opens and closes sockets as [`Action`]s say (the same vocabulary
/// as the consumer's, so one driver loop serves both), feeds bytes and timeouts in, and after
/// every call drains the outputs: first [`poll_action`](Self::poll_action) until `None`, then
/// [`poll_event`](Self::poll_event), then re-arms its timer with
/// [`poll_timeout`](Self::poll_timeout).
///
/// Methods, in the house order: **queries** ([`stats`](Self::stats),
/// [`is_closed`](Self::is_closed), [`healthy_connections`](Self::healthy_connections), ...),
/// **inputs** ([`handle_connected`](Self::handle_connected),
/// [`handle_connect_failed`](Self::handle_connect_failed),
/// [`handle_input`](Self::handle_input), [`handle_eof`](Self::handle_eof),
/// [`handle_timeout`](Self::handle_timeout)), **commands** ([`add_nsqd`](Self::add_nsqd),
/// [`publish`](Self::publish), [`multi_publish`](Self::multi_publish),
/// [`deferred_publish`](Self::deferred_publish), [`ping`](Self::ping),
/// [`close`](Self::close)), **outputs**.
///
/// # Publishing
/// Every accepted publish gets a [`PublishId`] and resolves to exactly one
/// [`ProducerEvent::Published`] or [`ProducerEvent::PublishFailed`]. A publish goes to a
/// ready connection chosen by [`Routing`]; the bytes are encoded straight into that
/// connection's output buffer, and everything queued for a connection between two
/// [`poll_action`](Self::poll_action) calls leaves as one `Transmit` (one write, one TLS
/// record run, one compression flush). When no connection is ready but one is being
/// established, publishes wait (at most `publish_timeout`, at most `max_pending` of them) and
/// are sent when it becomes ready; when every nsqd is down they fail at once with
/// [`PublishFailure::NoServerAvailable`]. A connection that dies fails its unconfirmed
/// publishes with [`PublishFailure::ConnectionLost`] (they may have been applied); later
/// publishes go to another ready connection while it reconnects with exponential backoff and
/// jitter.
#[derive(Debug)]
pub struct Producer {
    config: ProducerConfig,
    rng: Rng,
    nodes: Vec<Node>,
    next_conn: u64,
    next_id: u64,
    rr_next: usize,
    pending: VecDeque<Pending>,
    /// Publishes accepted and not yet resolved (sent + pending).
    outstanding: usize,
    last_error: Option<String>,
    /// Set when the last connection error was an nsqd requiring TLS (its address).
    tls_required: Option<String>,
    scratch: BytesMut,
    any_dirty: bool,
    /// The latest `now` given to any input or command.
    clock: Option<Instant>,
    // shutdown
    closing: bool,
    close_deadline: Option<Instant>,
    closed_emitted: bool,
    // stats
    published: u64,
    failed: u64,
    batches: u64,
    batched_messages: u64,
    // outputs
    actions: VecDeque<Queued>,
    events: VecDeque<ProducerEvent>,
}

impl Producer {
    /// A producer with randomness (reconnect jitter) drawn from a generator seeded with
    /// `seed`. It does nothing until nsqd addresses are added. The connection configuration is
    /// checked here, so a bad one is reported before anything connects.
    pub fn new(config: ProducerConfig, seed: u64) -> Result<Producer, ProducerError> {
        config
            .connection
            .identify()
            .map_err(ProducerError::Config)?;
        let mut config = config;
        config.connection.max_outstanding_publishes = None;
        Ok(Producer {
            config,
            rng: Rng::new(seed),
            nodes: Vec::new(),
            next_conn: 1,
            next_id: 1,
            rr_next: 0,
            pending: VecDeque::new(),
            outstanding: 0,
            last_error: None,
            tls_required: None,
            scratch: BytesMut::new(),
            any_dirty: false,
            clock: None,
            closing: false,
            close_deadline: None,
            closed_emitted: false,
            published: 0,
            failed: 0,
            batches: 0,
            batched_messages: 0,
            actions: VecDeque::new(),
            events: VecDeque::new(),
        })
    }

    // ---------------------------------------------------------------- queries

    /// The configuration.
    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> ProducerStats {
        ProducerStats {
            published: self.published,
            failed: self.failed,
            outstanding: self.outstanding,
            pending: self
                .pending
                .iter()
                .filter(|p| !matches!(p.kind, PendingKind::Ping(_)))
                .count(),
            connections_ready: self.healthy_connections(),
            batches: self.batches,
            batched_messages: self.batched_messages,
        }
    }

    /// The number of ready connections.
    pub fn healthy_connections(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.link.as_ref().is_some_and(Link::is_ready))
            .count()
    }

    /// True once [`close`](Self::close) was called.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// True once the [`ProducerEvent::Closed`] event was emitted.
    pub fn is_closed(&self) -> bool {
        self.closed_emitted
    }

    /// The connections that exist now (connecting, handshaking, ready or closing), with their
    /// nsqd address.
    pub fn connections(&self) -> impl Iterator<Item = (ConnId, &str)> + '_ {
        self.nodes
            .iter()
            .filter_map(|n| n.link.as_ref().map(|l| (l.id, n.addr.as_str())))
    }

    /// The connection state machine behind `conn`, once its socket is connected.
    pub fn connection(&self, conn: ConnId) -> Option<&Connection> {
        self.link(conn).and_then(|l| l.conn.as_ref())
    }

    /// The nsqd addresses, in the order they were added.
    pub fn nsqd_addresses(&self) -> impl Iterator<Item = &str> + '_ {
        self.nodes.iter().map(|n| n.addr.as_str())
    }

    // ---------------------------------------------------------------- inputs

    /// The driver connected the socket of `conn`: the handshake starts.
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        let now = self.tick(now);
        let Some(i) = self.node_of(conn) else {
            return;
        };
        let node = &mut self.nodes[i];
        let Some(link) = node.link.as_mut() else {
            return;
        };
        if link.conn.is_some() {
            return;
        }
        match Connection::new(
            self.config.connection.clone(),
            Role::Producer,
            &node.addr,
            now,
        ) {
            Ok(c) => {
                link.conn = Some(c);
                link.dirty = true;
                self.any_dirty = true;
                self.pump(now, i);
            }
            Err(e) => {
                let reason = format!("configuration error: {e}");
                self.drop_link(now, i, &reason, Fate::Lost);
            }
        }
        self.settle(now);
    }

    /// The driver could not connect `conn` (`reason` is kept as the last connection error).
    pub fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        let now = self.tick(now);
        if let Some(i) = self.node_of(conn) {
            self.drop_link(now, i, reason, Fate::Lost);
        }
        self.settle(now);
    }

    /// Bytes read from `conn`'s socket. All of `data` is consumed.
    pub fn handle_input(&mut self, now: Instant, conn: ConnId, data: &mut BytesMut) {
        let now = self.tick(now);
        let Some(i) = self.node_of(conn) else {
            data.clear();
            return;
        };
        let Some(link) = self.nodes[i].link.as_mut() else {
            data.clear();
            return;
        };
        let Some(c) = link.conn.as_mut() else {
            data.clear();
            return;
        };
        c.handle_input(now, data);
        // Heartbeats are answered with NOP.
        link.dirty = true;
        self.any_dirty = true;
        self.pump(now, i);
        self.settle(now);
    }

    /// `conn`'s socket reached EOF or failed: the connection is gone and its unconfirmed
    /// publishes fail with [`PublishFailure::ConnectionLost`].
    pub fn handle_eof(&mut self, now: Instant, conn: ConnId) {
        let now = self.tick(now);
        let Some(i) = self.node_of(conn) else {
            return;
        };
        match self.nodes[i].link.as_mut().and_then(|l| l.conn.as_mut()) {
            Some(c) => {
                c.handle_eof(now);
                self.pump(now, i);
                if self.nodes[i].link.as_ref().is_some_and(|l| l.id == conn) {
                    self.drop_link(now, i, "connection lost", Fate::Lost);
                }
            }
            None => self.drop_link(now, i, "connection lost while connecting", Fate::Lost),
        }
        self.settle(now);
    }

    /// Time has reached (or passed) [`poll_timeout`](Self::poll_timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.tick(now);
        for i in 0..self.nodes.len() {
            let due = self.nodes[i]
                .link
                .as_ref()
                .and_then(|l| l.conn.as_ref())
                .and_then(Connection::poll_timeout)
                .is_some_and(|t| t <= now);
            if due {
                if let Some(c) = self.nodes[i].link.as_mut().and_then(|l| l.conn.as_mut()) {
                    c.handle_timeout(now);
                }
                self.pump(now, i);
            }
            let connect_expired = self.nodes[i].link.as_ref().is_some_and(|l| {
                l.conn.is_none()
                    && now.saturating_duration_since(l.started) >= self.config.connect_timeout
            });
            if connect_expired {
                self.drop_link(now, i, "connect timed out", Fate::Lost);
            }
            // A connection whose oldest publish waits too long for its reply is stuck.
            if let Some(limit) = self.config.reply_timeout {
                let stuck = self.nodes[i]
                    .link
                    .as_ref()
                    .and_then(|l| l.sent.front())
                    .is_some_and(|s| now.saturating_duration_since(s.at) >= limit);
                if stuck {
                    self.drop_link(
                        now,
                        i,
                        "no reply to a publish within reply_timeout",
                        Fate::TimedOut,
                    );
                }
            }
        }
        while self.pending.front().is_some_and(|p| p.deadline <= now) {
            if let Some(p) = self.pending.pop_front() {
                let failure = self.unavailable();
                self.fail_pending(&p, failure);
            }
        }
        if self.close_deadline.is_some_and(|t| t <= now) && !self.closed_emitted {
            self.force_close(now);
        }
        if !self.closing {
            for i in 0..self.nodes.len() {
                let node = &self.nodes[i];
                if node.link.is_none() && node.next_attempt.is_some_and(|t| t <= now) {
                    self.connect(now, i);
                }
            }
        }
        self.settle(now);
    }

    // ---------------------------------------------------------------- commands

    /// Adds an nsqd TCP address (`host:port`) and connects to it at once; it is reconnected
    /// with exponential backoff after failures. The order of addition is the failover order.
    /// Adding a known address does nothing.
    pub fn add_nsqd(&mut self, now: Instant, addr: &str) -> Result<(), ProducerError> {
        let now = self.tick(now);
        if self.closing {
            return Err(ProducerError::Closed);
        }
        let addr = addr.trim();
        if !valid_host_port(addr) {
            return Err(ProducerError::InvalidAddress(addr.to_string()));
        }
        if self.nodes.iter().any(|n| n.addr == addr) {
            return Ok(());
        }
        // A TLS server name derived from the address must be valid.
        Connection::new(self.config.connection.clone(), Role::Producer, addr, now)
            .map_err(ProducerError::Config)?;
        self.nodes.push(Node {
            addr: addr.to_string(),
            link: None,
            schedule: ReconnectSchedule::new(
                self.config.reconnect_initial_delay,
                self.config.reconnect_max_delay,
            ),
            next_attempt: None,
            max_msg: self.config.connection.limits.max_msg_size,
            max_body: self.config.connection.limits.max_body_size,
        });
        self.connect(now, self.nodes.len() - 1);
        Ok(())
    }

    /// Publishes one message to `topic` (PUB).
    ///
    /// With [`batching`](ProducerConfig::batching) on (the default), publishes to the same
    /// topic made before the next [`poll_action`](Self::poll_action) for the same connection
    /// leave as one MPUB; each still resolves on its own.
    pub fn publish(
        &mut self,
        now: Instant,
        topic: &Topic,
        body: &[u8],
    ) -> Result<PublishId, ProducerError> {
        let now = self.tick(now);
        self.admit()?;
        command::check_publish(body, None, &self.config.connection.limits)
            .map_err(ProducerError::Invalid)?;
        self.submit(now, topic, Item::One { body, solo: false })
    }

    /// Publishes several messages to `topic` atomically (MPUB): one id, one reply.
    pub fn multi_publish<B: AsRef<[u8]>>(
        &mut self,
        now: Instant,
        topic: &Topic,
        bodies: &[B],
    ) -> Result<PublishId, ProducerError> {
        let now = self.tick(now);
        self.admit()?;
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        let checked =
            command::multi_publish_entries(&mut entries, bodies, &self.config.connection.limits);
        let id = match checked {
            Ok(count) => self.submit(
                now,
                topic,
                Item::Multi {
                    entries: &entries,
                    count,
                },
            ),
            Err(e) => Err(ProducerError::Invalid(e)),
        };
        entries.clear();
        self.scratch = entries;
        id
    }

    /// Publishes one message to `topic`, delivered to consumers after `delay` (DPUB).
    pub fn deferred_publish(
        &mut self,
        now: Instant,
        topic: &Topic,
        delay: Duration,
        body: &[u8],
    ) -> Result<PublishId, ProducerError> {
        let now = self.tick(now);
        self.admit()?;
        command::check_publish(body, Some(delay), &self.config.connection.limits)
            .map_err(ProducerError::Invalid)?;
        self.submit(now, topic, Item::Deferred(delay, body))
    }

    /// Checks that the producer can publish: resolves with [`ProducerEvent::PingOk`] as soon
    /// as a connection is ready (at once if one is), or with [`ProducerEvent::PingFailed`]
    /// exactly like a publish would fail (`NoServerAvailable` when every nsqd is down or none
    /// became ready within `publish_timeout`).
    ///
    /// A ready connection has completed a request/reply round trip (IDENTIFY) and is watched
    /// by heartbeats, so no extra bytes are sent.
    pub fn ping(&mut self, now: Instant) -> Result<PingId, ProducerError> {
        let now = self.tick(now);
        if self.closing {
            return Err(ProducerError::Closed);
        }
        let id = PingId(self.take_id());
        if let Some(i) = self.route() {
            self.ping_on(now, i, id);
        } else if self.any_in_progress() {
            self.pending.push_back(Pending {
                id: id.0,
                since: now,
                deadline: later(now, self.config.publish_timeout),
                kind: PendingKind::Ping(id),
            });
        } else {
            let failure = self.unavailable();
            self.events
                .push_back(ProducerEvent::PingFailed(id, failure));
        }
        Ok(id)
    }

    /// Starts a graceful shutdown: no new publishes; publishes waiting for a connection keep
    /// waiting (bounded by `publish_timeout`); sent ones are awaited; then every connection is
    /// closed and one [`ProducerEvent::Closed`] follows. After `close_timeout`, whatever is
    /// unresolved fails with [`PublishFailure::TimedOut`] and connections are dropped.
    pub fn close(&mut self, now: Instant) {
        let now = self.tick(now);
        if self.closing {
            return;
        }
        tracing::debug!("producer closing");
        self.closing = true;
        self.close_deadline = Some(later(now, self.config.close_timeout));
        for n in &mut self.nodes {
            n.next_attempt = None;
        }
        self.settle(now);
    }

    // ---------------------------------------------------------------- outputs

    /// The next thing the driver must do, in order. Drain it completely before
    /// [`poll_event`](Self::poll_event): gathering the bytes to write can end a connection
    /// (a TLS failure), which produces events.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.any_dirty {
            self.any_dirty = false;
            for i in 0..self.nodes.len() {
                if self.nodes[i].link.as_ref().is_some_and(|l| l.dirty) {
                    self.flush(i);
                    // A failed TLS write ends the connection: surface its events.
                    let failed = self.nodes[i]
                        .link
                        .as_ref()
                        .and_then(|l| l.conn.as_ref())
                        .is_some_and(|c| c.state() == ConnectionState::Closed);
                    if let (true, Some(now)) = (failed, self.clock) {
                        self.pump(now, i);
                        self.settle(now);
                    }
                }
            }
        }
        self.actions.pop_front().map(Queued::into_action)
    }

    /// The next event for the application.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ProducerEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for n in &self.nodes {
            match &n.link {
                Some(l) => {
                    consider(l.conn.as_ref().and_then(Connection::poll_timeout));
                    if l.conn.is_none() {
                        consider(Some(later(l.started, self.config.connect_timeout)));
                    }
                    if let Some(limit) = self.config.reply_timeout {
                        consider(l.sent.front().map(|s| later(s.at, limit)));
                    }
                }
                None if !self.closing => consider(n.next_attempt),
                None => {}
            }
        }
        consider(self.pending.front().map(|p| p.deadline));
        consider(self.close_deadline.filter(|_| !self.closed_emitted));
        t
    }

    // ---------------------------------------------------------------- internals

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn tick(&mut self, now: Instant) -> Instant {
        let now = self.clock.map_or(now, |c| c.max(now));
        self.clock = Some(now);
        now
    }

    fn node_of(&self, conn: ConnId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.link.as_ref().is_some_and(|l| l.id == conn))
    }

    fn link(&self, conn: ConnId) -> Option<&Link> {
        self.nodes
            .iter()
            .filter_map(|n| n.link.as_ref())
            .find(|l| l.id == conn)
    }

    fn any_in_progress(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.link.as_ref().is_some_and(|l| l.ready_at.is_none()))
    }

    /// The ready node the next publish goes to.
    fn route(&mut self) -> Option<usize> {
        let n = self.nodes.len();
        match self.config.routing {
            Routing::Failover => (0..n).find(|&i| self.ready(i)),
            Routing::RoundRobin => {
                let start = self.rr_next % n.max(1);
                let found = (0..n).map(|k| (start + k) % n).find(|&i| self.ready(i))?;
                self.rr_next = found + 1;
                Some(found)
            }
        }
    }

    /// Sends a NOP on node `i` (ready) and resolves the ping: NOP has no reply, so a ready
    /// connection that accepted it is the answer.
    fn ping_on(&mut self, now: Instant, i: usize, id: PingId) {
        let sent = self.nodes[i]
            .link
            .as_mut()
            .and_then(|l| {
                l.dirty = true;
                l.conn.as_mut()
            })
            .map(|c| c.nop(now));
        self.any_dirty = true;
        match sent {
            Some(Ok(())) => self.events.push_back(ProducerEvent::PingOk(id)),
            Some(Err(e)) => self.events.push_back(ProducerEvent::PingFailed(
                id,
                PublishFailure::ConnectionLost(match e {
                    ConnectionError::Closed(reason) => reason,
                    other => CloseReason::Protocol(other.to_string()),
                }),
            )),
            None => self.events.push_back(ProducerEvent::PingFailed(
                id,
                PublishFailure::NoServerAvailable {
                    last_error: self.last_error.clone(),
                },
            )),
        }
    }

    fn ready(&self, i: usize) -> bool {
        self.nodes[i].link.as_ref().is_some_and(Link::is_ready)
    }

    /// Refuses a publish when the producer is closed or at its bound of outstanding publishes.
    fn admit(&self) -> Result<(), ProducerError> {
        if self.closing {
            return Err(ProducerError::Closed);
        }
        if let Some(limit) = self.config.max_outstanding {
            if self.outstanding >= limit {
                return Err(ProducerError::TooManyOutstanding { limit });
            }
        }
        Ok(())
    }

    /// How a publish (or ping) fails when no connection can take it.
    fn unavailable(&self) -> PublishFailure {
        match &self.tls_required {
            Some(addr) => PublishFailure::TlsRequired { addr: addr.clone() },
            None => PublishFailure::NoServerAvailable {
                last_error: self.last_error.clone(),
            },
        }
    }

    /// Takes a checked publish: gathered on a ready connection, or waiting for one being
    /// established, or failed at once when every nsqd is down.
    fn submit(
        &mut self,
        now: Instant,
        topic: &Topic,
        item: Item<'_>,
    ) -> Result<PublishId, ProducerError> {
        if let Some(i) = self.route() {
            // Hot path: gathered for the next write of that connection.
            let id = PublishId(self.take_id());
            self.outstanding += 1;
            self.enqueue(i, id, topic, item);
            return Ok(id);
        }
        if self.any_in_progress() {
            if self.pending.len() >= self.config.max_pending {
                return Err(ProducerError::PendingQueueFull {
                    limit: self.config.max_pending,
                });
            }
            let kind = match item {
                Item::One { body, solo } => PendingKind::Publish {
                    topic: topic.clone(),
                    body: Bytes::copy_from_slice(body),
                    solo,
                },
                Item::Multi { entries, count } => PendingKind::Multi {
                    topic: topic.clone(),
                    entries: Bytes::copy_from_slice(entries),
                    count,
                },
                Item::Deferred(delay, body) => PendingKind::Deferred {
                    topic: topic.clone(),
                    delay,
                    body: Bytes::copy_from_slice(body),
                },
            };
            let id = PublishId(self.take_id());
            self.outstanding += 1;
            self.pending.push_back(Pending {
                id: id.0,
                since: now,
                deadline: later(now, self.config.publish_timeout),
                kind,
            });
            return Ok(id);
        }
        // Every nsqd is down: fail fast.
        let id = PublishId(self.take_id());
        self.failed += 1;
        let failure = self.unavailable();
        self.events
            .push_back(ProducerEvent::PublishFailed(id, failure));
        Ok(id)
    }

    /// Gathers a publish for node `i`'s next write (`i` is ready). A single publish joins the
    /// batch of its topic gathered last, when batching is on, the batch is not closed to
    /// merging and the MPUB body stays within the nsqd's limit.
    fn enqueue(&mut self, i: usize, id: PublishId, topic: &Topic, item: Item<'_>) {
        let batching = self.config.batching;
        let node = &mut self.nodes[i];
        let (max_msg, max_body) = (node.max_msg as usize, node.max_body as usize);
        let Some(link) = node.link.as_mut() else {
            // Not reached: `route` only returns ready nodes.
            let failure = self.unavailable();
            self.resolve(id, Err(failure));
            return;
        };
        match item {
            Item::One { body, solo } => {
                let solo = solo || !batching || body.len() > max_msg;
                let joined = !solo
                    && link
                        .open
                        .iter_mut()
                        .rev()
                        .find(|w| w.topic == *topic)
                        .filter(|w| {
                            w.shape == (Shape::Batch { solo: false })
                                && 8 + w.data.len() + body.len() <= max_body
                        })
                        .map(|w| {
                            command::put_entry(&mut w.data, body);
                            w.count += 1;
                            w.ids.push(id);
                        })
                        .is_some();
                if !joined {
                    let mut data = BytesMut::with_capacity(4 + body.len());
                    command::put_entry(&mut data, body);
                    link.open.push(Work {
                        topic: topic.clone(),
                        shape: Shape::Batch { solo },
                        data,
                        count: 1,
                        ids: Ids::One(id),
                    });
                }
            }
            Item::Multi { entries, count } => link.open.push(Work {
                topic: topic.clone(),
                shape: Shape::Multi,
                data: BytesMut::from(entries),
                count,
                ids: Ids::One(id),
            }),
            Item::Deferred(delay, body) => link.open.push(Work {
                topic: topic.clone(),
                shape: Shape::Deferred(delay),
                data: BytesMut::from(body),
                count: 1,
                ids: Ids::One(id),
            }),
        }
        if !link.dirty {
            link.dirty = true;
            self.any_dirty = true;
        }
    }

    /// Writes node `i`'s gathered publishes to its connection, in the order they were
    /// gathered, and records them as awaiting a reply.
    ///
    /// With batching on, they are held while [`MAX_SENT_WHILE_BATCHING`] commands are
    /// outstanding on the connection (their replies come first anyway): what gathers meanwhile
    /// leaves as one MPUB when a reply arrives. `force`: write them now (the producer is closing).
    fn emit(&mut self, i: usize, force: bool) {
        let Some(now) = self.clock else {
            return;
        };
        let limits = self.config.connection.limits;
        let Some(link) = self.nodes[i].link.as_mut() else {
            return;
        };
        if link.open.is_empty()
            || (!force && self.config.batching && link.sent.len() >= MAX_SENT_WHILE_BATCHING)
        {
            return;
        }
        let Some(c) = link
            .conn
            .as_mut()
            .filter(|c| c.state() == ConnectionState::Ready)
        else {
            // Left for `drop_link`, which puts them back to wait for a connection.
            return;
        };
        let mut refused = Vec::new();
        for work in link.open.drain(..) {
            let result = c.publish_prepared(now, |buf| match work.shape {
                Shape::Batch { .. } | Shape::Multi => {
                    let multi = work.shape == Shape::Multi;
                    command::publish_entries(buf, &work.topic, work.count, &work.data, multi);
                    Ok(())
                }
                Shape::Deferred(delay) => {
                    command::deferred_publish(buf, &work.topic, delay, &work.data, &limits)
                }
            });
            match result {
                Ok(token) => {
                    if matches!(work.shape, Shape::Batch { .. }) && work.count > 1 {
                        self.batches += 1;
                        self.batched_messages += u64::from(work.count);
                    }
                    link.sent.push_back(Sent {
                        token: token.sequence(),
                        at: now,
                        work: work.freeze(),
                    });
                }
                Err(e) => refused.push((work.ids, e)),
            }
        }
        for (ids, e) in refused {
            for id in ids.as_slice() {
                self.resolve(*id, Err(PublishFailure::Refused(e.clone())));
            }
        }
    }

    /// Sends the publishes waiting for a connection (a connection just became ready).
    fn drain_pending(&mut self, now: Instant) {
        while let Some(p) = self.pending.pop_front() {
            let Some(i) = self.route() else {
                self.pending.push_front(p);
                return;
            };
            let id = PublishId(p.id);
            match &p.kind {
                PendingKind::Ping(ping) => self.ping_on(now, i, *ping),
                PendingKind::Publish { topic, body, solo } => {
                    self.enqueue(i, id, topic, Item::One { body, solo: *solo });
                }
                PendingKind::Multi {
                    topic,
                    entries,
                    count,
                } => self.enqueue(
                    i,
                    id,
                    topic,
                    Item::Multi {
                        entries,
                        count: *count,
                    },
                ),
                PendingKind::Deferred { topic, delay, body } => {
                    self.enqueue(i, id, topic, Item::Deferred(*delay, body));
                }
            }
        }
    }

    /// A command on node `i` failed: resolves its publishes, or puts them back to be sent
    /// again when nsqd never processed them, or one by one when nsqd refused their batch
    /// because of one message.
    fn publish_failed(&mut self, now: Instant, i: usize, work: Work<Bytes>, error: PublishError) {
        match error {
            PublishError::Server(e) => {
                self.learn_limits(i, &e);
                let per_message = matches!(e.code(), ErrorCode::BadMessage | ErrorCode::BadBody);
                if per_message && work.count > 1 && work.shape == (Shape::Batch { solo: false }) {
                    tracing::debug!(
                        addr = self.nodes[i].addr,
                        messages = work.count,
                        error = %e,
                        "nsqd refused a batch: sending its publishes one by one"
                    );
                    self.retry(now, work, true);
                } else {
                    for id in work.ids.as_slice() {
                        self.resolve(*id, Err(PublishFailure::Server(e.clone())));
                    }
                }
            }
            // nsqd stops reading at a fatal error: what was sent after the refused command
            // was never processed, and goes again on the next connection.
            PublishError::Closed(CloseReason::Server(_) | CloseReason::TlsRequired(_)) => {
                self.retry(now, work, false);
            }
            PublishError::Closed(reason) => {
                for id in work.ids.as_slice() {
                    self.resolve(*id, Err(PublishFailure::ConnectionLost(reason.clone())));
                }
            }
        }
    }

    /// Puts the publishes of `work` (never processed by nsqd) back in the pending queue;
    /// `split`: each message of a batch alone, never merged again.
    fn retry(&mut self, now: Instant, work: Work<Bytes>, split: bool) {
        let deadline = later(now, self.config.publish_timeout);
        let Work {
            topic,
            shape,
            data,
            count,
            ids,
        } = work;
        let mut push = |id: PublishId, kind: PendingKind| {
            self.pending.push_back(Pending {
                id: id.get(),
                since: now,
                deadline,
                kind,
            });
        };
        match shape {
            Shape::Batch { solo } => {
                let mut at = 0usize;
                for id in ids.as_slice() {
                    let body = data
                        .get(at..at + 4)
                        .and_then(|l| <[u8; 4]>::try_from(l).ok())
                        .map(|l| u32::from_be_bytes(l) as usize)
                        .and_then(|len| {
                            let body = data
                                .get(at + 4..at + 4 + len)
                                .map(|_| data.slice(at + 4..at + 4 + len));
                            at += 4 + len;
                            body
                        })
                        .unwrap_or_default();
                    push(
                        *id,
                        PendingKind::Publish {
                            topic: topic.clone(),
                            body,
                            solo: solo || split,
                        },
                    );
                }
            }
            Shape::Multi => push(
                ids.as_slice()[0],
                PendingKind::Multi {
                    topic,
                    entries: data,
                    count,
                },
            ),
            Shape::Deferred(delay) => push(
                ids.as_slice()[0],
                PendingKind::Deferred {
                    topic,
                    delay,
                    body: data,
                },
            ),
        }
    }

    /// Lowers node `i`'s size limits to what nsqd said in a refusal (`... too big N > MAX`).
    fn learn_limits(&mut self, i: usize, e: &ServerError) {
        let description = e.description();
        let Some((_, max)) = description.split_once(" too big ") else {
            return;
        };
        let Some(max) = max
            .rsplit('>')
            .next()
            .and_then(|m| m.trim().parse::<u32>().ok())
        else {
            return;
        };
        let node = &mut self.nodes[i];
        match e.code() {
            ErrorCode::BadMessage if max < node.max_msg => {
                tracing::info!(
                    addr = node.addr,
                    max,
                    "nsqd's max-msg-size is lower than configured"
                );
                node.max_msg = max;
            }
            ErrorCode::BadBody if max < node.max_body => {
                tracing::info!(
                    addr = node.addr,
                    max,
                    "nsqd's max-body-size is lower than configured"
                );
                node.max_body = max;
            }
            _ => {}
        }
    }

    fn fail_pending(&mut self, p: &Pending, failure: PublishFailure) {
        match p.kind {
            PendingKind::Ping(ping) => {
                self.events
                    .push_back(ProducerEvent::PingFailed(ping, failure));
            }
            _ => self.resolve(PublishId(p.id), Err(failure)),
        }
    }

    fn resolve(&mut self, id: PublishId, result: Result<(), PublishFailure>) {
        self.outstanding = self.outstanding.saturating_sub(1);
        match result {
            Ok(()) => {
                self.published += 1;
                self.events.push_back(ProducerEvent::Published(id));
            }
            Err(failure) => {
                self.failed += 1;
                self.events
                    .push_back(ProducerEvent::PublishFailed(id, failure));
            }
        }
    }

    /// Takes the record of the command with connection token `token` on node `i`.
    fn take_sent(&mut self, i: usize, token: PublishToken) -> Option<Work<Bytes>> {
        let link = self.nodes[i].link.as_mut()?;
        let seq = token.sequence();
        if link.sent.front().is_some_and(|s| s.token == seq) {
            return link.sent.pop_front().map(|s| s.work);
        }
        let at = link.sent.iter().position(|s| s.token == seq)?;
        link.sent.remove(at).map(|s| s.work)
    }

    fn connect(&mut self, now: Instant, i: usize) {
        if self.closing {
            return;
        }
        let node = &mut self.nodes[i];
        if node.link.is_some() {
            return;
        }
        let id = ConnId::from_raw(self.next_conn);
        self.next_conn += 1;
        node.next_attempt = None;
        node.link = Some(Link {
            id,
            started: now,
            conn: None,
            ready_at: None,
            open: Vec::new(),
            sent: VecDeque::new(),
            refused: false,
            dirty: false,
        });
        self.actions.push_back(Queued::Action(Action::Connect {
            conn: id,
            addr: node.addr.clone(),
        }));
    }

    /// Moves node `i`'s queued bytes to the action queue, gathering them with a `Transmit`
    /// for the same connection at the tail.
    fn flush(&mut self, i: usize) {
        self.emit(i, false);
        let Some(link) = self.nodes[i].link.as_mut() else {
            return;
        };
        link.dirty = false;
        let id = link.id;
        let Some(c) = link.conn.as_mut() else {
            return;
        };
        while let Some(data) = c.poll_transmit() {
            if data.is_empty() {
                continue;
            }
            if let Some(Queued::Transmit { conn, first, more }) = self.actions.back_mut() {
                if *conn == id {
                    let buf = more.get_or_insert_with(|| {
                        let mut b = BytesMut::with_capacity(2 * (first.len() + data.len()));
                        b.extend_from_slice(first);
                        b
                    });
                    buf.extend_from_slice(&data);
                    continue;
                }
            }
            self.actions.push_back(Queued::Transmit {
                conn: id,
                first: data,
                more: None,
            });
        }
    }

    /// Drains node `i`'s connection events into producer events.
    fn pump(&mut self, now: Instant, i: usize) {
        loop {
            let Some(link) = self.nodes[i].link.as_mut() else {
                return;
            };
            let Some(c) = link.conn.as_mut() else {
                return;
            };
            let Some(event) = c.poll_event() else {
                return;
            };
            match event {
                ConnectionEvent::Ready(_) => {
                    link.ready_at = Some(now);
                    self.tls_required = None;
                    link.dirty = true;
                    self.any_dirty = true;
                    let (conn, addr) = (link.id, self.nodes[i].addr.clone());
                    self.events
                        .push_back(ProducerEvent::ConnectionReady { conn, addr });
                    self.drain_pending(now);
                }
                ConnectionEvent::Published(token) => {
                    if let Some(work) = self.take_sent(i, token) {
                        for id in work.ids.as_slice() {
                            self.resolve(*id, Ok(()));
                        }
                    }
                }
                ConnectionEvent::PublishFailed(token, error) => {
                    if matches!(error, PublishError::Server(_)) {
                        link.refused = true;
                    }
                    if let Some(work) = self.take_sent(i, token) {
                        self.publish_failed(now, i, work, error);
                    }
                }
                ConnectionEvent::Closed(reason) => {
                    self.drop_link(now, i, &reason.to_string(), Fate::Lost);
                    return;
                }
                ConnectionEvent::ServerError(error) => {
                    tracing::debug!(%error, "non-fatal nsqd error on a producer connection");
                }
                other => {
                    tracing::debug!(?other, "unexpected event on a producer connection");
                }
            }
        }
    }

    /// Forgets node `i`'s connection: flushes its last bytes, `Disconnect`, event, fails what
    /// it still holds as `fate` says (publishes gathered but never written wait for a
    /// connection again), and reconnects: at once when nsqd closed it after refusing a
    /// command (a rejection is not a server failure), else on the backoff schedule.
    fn drop_link(&mut self, now: Instant, i: usize, reason: &str, fate: Fate) {
        let open = self.nodes[i]
            .link
            .as_mut()
            .map(|l| std::mem::take(&mut l.open))
            .unwrap_or_default();
        self.flush(i);
        let Some(mut link) = self.nodes[i].link.take() else {
            return;
        };
        let addr = self.nodes[i].addr.clone();
        self.actions
            .push_back(Queued::Action(Action::Disconnect { conn: link.id }));
        let close_reason = link.conn.as_ref().and_then(Connection::close_reason);
        let graceful = matches!(close_reason, Some(CloseReason::Graceful { .. }));
        // nsqd answered a publish with an error and closed: a refusal, not a failure. (A
        // server that errs on its own, with nothing to refuse, backs off like any failure.)
        let rejected = link.ready_at.is_some()
            && link.refused
            && matches!(close_reason, Some(CloseReason::Server(_)));
        if !graceful && !rejected {
            self.last_error = Some(format!("{addr}: {reason}"));
            self.tls_required =
                matches!(close_reason, Some(CloseReason::TlsRequired(_))).then(|| addr.clone());
        }
        let lost = close_reason.cloned().unwrap_or(CloseReason::Eof);
        for s in std::mem::take(&mut link.sent) {
            let failure = if fate == Fate::TimedOut {
                PublishFailure::TimedOut {
                    waited: now.saturating_duration_since(s.at),
                }
            } else {
                PublishFailure::ConnectionLost(lost.clone())
            };
            for id in s.work.ids.as_slice() {
                self.resolve(*id, Err(failure.clone()));
            }
        }
        for work in open {
            self.retry(now, work.freeze(), false);
        }
        // A refusal reconnects at once (`Some(ZERO)`), without touching the backoff schedule.
        let retry_in = (!self.closing).then(|| {
            if rejected {
                return Duration::ZERO;
            }
            let node = &mut self.nodes[i];
            let healthy = link.ready_at.is_some_and(|t| {
                now.saturating_duration_since(t) >= self.config.reconnect_reset_after
            });
            if healthy {
                node.schedule.reset();
            }
            let delay = node.schedule.next_delay(&mut self.rng);
            node.next_attempt = Some(later(now, delay));
            delay
        });
        self.events.push_back(ProducerEvent::ConnectionClosed {
            conn: link.id,
            addr,
            reason: reason.to_string(),
            retry_in,
        });
        if rejected && !self.closing {
            self.connect(now, i);
        }
    }

    /// Post-conditions after every input or command: waiting publishes fail at once when no
    /// connection can serve them; a closing producer closes connections once nothing waits
    /// for them; `Closed` is emitted when everything is done.
    fn settle(&mut self, now: Instant) {
        if !self.pending.is_empty() && self.healthy_connections() > 0 {
            self.drain_pending(now);
        }
        if !self.pending.is_empty() && self.healthy_connections() == 0 && !self.any_in_progress() {
            let failure = self.unavailable();
            while let Some(p) = self.pending.pop_front() {
                self.fail_pending(&p, failure.clone());
            }
        }
        if self.closing && self.pending.is_empty() {
            for i in 0..self.nodes.len() {
                let Some(link) = self.nodes[i].link.as_mut() else {
                    continue;
                };
                match link.conn.as_mut() {
                    Some(c) if link.ready_at.is_some() => {
                        if c.state() == ConnectionState::Ready {
                            // What was gathered goes out before the close.
                            self.emit(i, true);
                            if let Some(c) =
                                self.nodes[i].link.as_mut().and_then(|l| l.conn.as_mut())
                            {
                                c.close(now);
                            }
                            self.pump(now, i);
                        }
                    }
                    _ => self.drop_link(now, i, "producer closing", Fate::Lost),
                }
            }
        }
        if self.closing
            && !self.closed_emitted
            && self.pending.is_empty()
            && self.nodes.iter().all(|n| n.link.is_none())
        {
            self.closed_emitted = true;
            self.close_deadline = None;
            tracing::debug!("producer closed");
            self.events.push_back(ProducerEvent::Closed);
        }
    }

    /// The close deadline passed: fail everything, drop every connection.
    fn force_close(&mut self, now: Instant) {
        while let Some(p) = self.pending.pop_front() {
            let waited = now.saturating_duration_since(p.since);
            self.fail_pending(&p, PublishFailure::TimedOut { waited });
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].link.is_some() {
                self.drop_link(now, i, "close timeout", Fate::TimedOut);
            }
        }
        // Publishes gathered and never written were put back to wait.
        while let Some(p) = self.pending.pop_front() {
            let waited = now.saturating_duration_since(p.since);
            self.fail_pending(&p, PublishFailure::TimedOut { waited });
        }
    }
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
