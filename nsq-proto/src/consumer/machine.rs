//! The [`Consumer`] state machine.

use super::config::ConsumerConfig;
use super::lookupd::{LookupdAddress, LookupdAddressError, LookupdError, LookupdResponseParser};
use super::policy::{self, RdySlot, ReconnectSchedule};
use super::slots::Slots;
use super::stats::{Counts, NsqdState, NsqdStats};
use crate::connection::{
    CloseReason, Connection, ConnectionError, ConnectionEvent, ConnectionState, Role,
};
use crate::error_code::ServerError;
use crate::frame::{Message, MessageId};
use crate::names::{Channel, Topic};
use crate::rng::Rng;
use crate::schedule::{MAX_DELAY, later, valid_host_port};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

/// Identifies one nsqd connection of a consumer. Never reused within a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(u64);

impl ConnId {
    /// The raw number, for logs.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A handle with the raw number `raw`, for the other state machines of this crate that
    /// share the driver vocabulary (the producer).
    pub(crate) const fn from_raw(raw: u64) -> ConnId {
        ConnId(raw)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Identifies one HTTP exchange with an nsqlookupd. Never reused within a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LookupdRequestId(u64);

impl LookupdRequestId {
    /// The raw number, for logs.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for LookupdRequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lookup#{}", self.0)
    }
}

/// Something the driver must do on the consumer's behalf, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Open a TCP connection to `addr` (`host:port`), then report
    /// [`Consumer::handle_connected`] or [`Consumer::handle_connect_failed`].
    Connect {
        /// The handle of the new connection.
        conn: ConnId,
        /// The nsqd TCP address.
        addr: String,
    },
    /// Write `data` to the connection.
    Transmit {
        /// The connection.
        conn: ConnId,
        /// The bytes, already encrypted/compressed as negotiated.
        data: Bytes,
    },
    /// Close the connection's socket (after writing any earlier `Transmit`); the consumer has
    /// forgotten it.
    Disconnect {
        /// The connection.
        conn: ConnId,
    },
    /// Open a TCP connection to the lookupd `addr` (`host:port`), write `data`, and feed what is
    /// read to [`Consumer::handle_lookupd_input`] / [`Consumer::handle_lookupd_eof`]
    /// (or report [`Consumer::handle_lookupd_failed`]).
    LookupdRequest {
        /// The exchange's handle.
        request: LookupdRequestId,
        /// The lookupd address to connect to.
        addr: String,
        /// The complete HTTP request.
        data: Bytes,
    },
    /// The exchange is over (answered, failed or timed out): close its socket.
    LookupdClose {
        /// The exchange's handle.
        request: LookupdRequestId,
    },
}

/// An action waiting in the output queue.
#[derive(Debug)]
enum Queued {
    Action(Action),
    /// The bytes a connection has queued, taken from it only when this is polled: every
    /// command queued on it until then (a wake-up's worth of FINs, say) leaves as one
    /// transmit, with no copy and, under TLS or compression, one record or chunk. Only ever
    /// the last entry of the queue: anything queued behind it freezes it into a `Transmit`
    /// first, so the order of the bytes across connections is the order they were queued in.
    Pending(ConnId),
}

/// Something that happened, for the application.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConsumerEvent {
    /// A message to handle; answer it with [`Consumer::finish`], [`Consumer::requeue`] or
    /// [`Consumer::touch`] on the same `conn`.
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
        /// once a lookupd lists it).
        retry_in: Option<Duration>,
    },
    /// A non-fatal server error (`E_FIN_FAILED`, `E_REQ_FAILED`, `E_TOUCH_FAILED`).
    ServerError {
        /// The connection.
        conn: ConnId,
        /// The error.
        error: ServerError,
    },
    /// One lookupd query failed; the others (and later polls) carry on.
    LookupdFailed {
        /// The lookupd.
        addr: String,
        /// Why.
        error: LookupdError,
    },
    /// The consumer has shut down: every connection is closed. Emitted once, after
    /// [`Consumer::close`].
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
    /// [`Consumer::disconnect_from_nsqd`] named an nsqd that is not configured: never added,
    /// already disconnected from, or discovered but listed by no lookupd any more.
    NsqdNotConfigured(String),
    /// [`Consumer::disconnect_from_nsqd`] named an nsqd known only through nsqlookupd: it is
    /// connected while a lookupd lists it (remove the lookupd, or tombstone the nsqd there).
    NsqdDiscovered(String),
    /// [`Consumer::disconnect_from_lookupd`] named a lookupd that is not configured.
    LookupdNotConfigured(String),
    /// [`Consumer::disconnect_from_lookupd`] named the only configured lookupd: discovery
    /// would stop (add its replacement first, or [`close`](Consumer::close) the consumer).
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

/// A snapshot of a consumer's counters, in total and per nsqd.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// Messages delivered by nsqd (including ones given up on).
    pub received: u64,
    /// Messages finished by the application.
    pub finished: u64,
    /// Messages requeued by the application.
    pub requeued: u64,
    /// Messages finished automatically because they exceeded `max_attempts`.
    pub gave_up: u64,
    /// Connections that are ready (handshake and SUB done).
    pub connections: usize,
    /// The current backoff level (0 = full speed).
    pub backoff_level: u32,
    /// Sum of the RDY counts last sent on ready connections.
    pub total_rdy: u64,
    /// nsqd addresses the consumer keeps track of, connected or not: every directly added
    /// address, and each lookupd-discovered address while it is connected (or connecting) or
    /// still listed by some lookupd's latest successful answer. Discovered addresses that are
    /// neither are forgotten, so this stays bounded however many nsqd come and go.
    pub known_nsqd: usize,
    /// Messages delivered and not answered yet, over every connection (closing ones
    /// included).
    pub in_flight: usize,
    /// Connection attempts to an nsqd after its first one, over every nsqd ever known.
    pub reconnects: u64,
    /// Every nsqd the consumer keeps track of (the `known_nsqd` of them), by address.
    pub nsqd: Vec<NsqdStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Direct,
    Lookupd,
}

#[derive(Debug)]
struct Producer {
    source: Source,
    conn: Option<ConnId>,
    schedule: ReconnectSchedule,
    next_attempt: Option<Instant>,
    /// Sequence number of the last disconnect: only a lookupd answer to a request sent after
    /// it may bring a discovered producer back.
    disconnected_seq: u64,
    /// Indexes (into `Consumer::lookupds`) of the lookupds whose latest successful answer
    /// listed this address. A failed query leaves its lookupd's entries as they were, so a
    /// lookupd being down never makes the consumer forget what it listed.
    listed_by: BTreeSet<usize>,
    /// Counters of its connections that have ended.
    counts: Counts,
    /// Connection attempts made.
    attempts: u64,
}

#[derive(Debug)]
struct Slot {
    addr: String,
    conn: Option<Connection>,
    ready_at: Option<Instant>,
    /// Just became ready: bootstrapped with RDY 1 until its first message or this instant.
    fresh_until: Option<Instant>,
    /// When it last went from RDY 0 to RDY > 0.
    granted_at: Option<Instant>,
    /// Messages received since the last RDY was sent (for the refill rule).
    received_since_rdy: u32,
    /// Message counters of this connection.
    counts: Counts,
}

impl Slot {
    fn is_ready(&self) -> bool {
        self.ready_at.is_some()
            && self
                .conn
                .as_ref()
                .is_some_and(|c| c.state() == ConnectionState::Ready)
    }

    fn rdy(&self) -> u32 {
        if self.is_ready() {
            self.conn.as_ref().map_or(0, Connection::rdy)
        } else {
            0
        }
    }
}

#[derive(Debug)]
struct Pending {
    id: LookupdRequestId,
    parser: LookupdResponseParser,
    deadline: Instant,
    seq: u64,
}

#[derive(Debug)]
struct Lookupd {
    addr: LookupdAddress,
    pending: Option<Pending>,
}

/// The consumer-level state machine: many nsqd connections for one topic/channel.
///
/// It owns a [`Connection`] per nsqd, distributes RDY over them, applies backoff, the attempts
/// policy and requeue delays, discovers nsqd through nsqlookupd (the HTTP exchange is sans-IO as
/// well), reconnects, and shuts down gracefully. It does no IO: the driver opens and closes
/// sockets as [`Action`]s say, feeds bytes and timeouts in, and drains the outputs after every
/// call.
///
/// Methods, in the house order: **queries** ([`stats`](Self::stats),
/// [`is_starved`](Self::is_starved), [`connection`](Self::connection), ...), **inputs**
/// ([`handle_connected`](Self::handle_connected), [`handle_input`](Self::handle_input),
/// [`handle_eof`](Self::handle_eof), [`handle_lookupd_input`](Self::handle_lookupd_input),
/// [`handle_timeout`](Self::handle_timeout), ...), **commands** ([`finish`](Self::finish),
/// [`requeue`](Self::requeue), [`touch`](Self::touch),
/// [`set_max_in_flight`](Self::set_max_in_flight), [`add_nsqd`](Self::add_nsqd),
/// [`add_lookupd`](Self::add_lookupd), [`disconnect_from_nsqd`](Self::disconnect_from_nsqd),
/// [`disconnect_from_lookupd`](Self::disconnect_from_lookupd), [`close`](Self::close)),
/// **outputs** ([`poll_action`](Self::poll_action), [`poll_event`](Self::poll_event),
/// [`poll_timeout`](Self::poll_timeout)).
///
/// # RDY
/// With `max_in_flight >= connections`, every ready connection gets `max_in_flight / n`
/// (capped at its max_rdy_count) and the remainder is handed out round-robin, so the total
/// reaches `max_in_flight`. A new connection starts at RDY 1 (other connections are lowered
/// first to make room for its share) and gets its share after its first message or after
/// `rdy_redistribute_interval`, whichever comes first: connections discovered together all get
/// a chance before one of them takes everything. Lowerings are always queued before raisings, so the sum of RDY never exceeds
/// `max_in_flight`. A connection's RDY is re-sent when its remaining count drops to <= 1 or
/// under 25% of the last value. With fewer `max_in_flight` than connections, connections hold
/// RDY 1 in turns: every `rdy_redistribute_interval`, holders idle for `low_rdy_idle_timeout`
/// or holding for `low_rdy_timeout` give it up, and it goes to the connections that have
/// waited longest (ties broken at random).
///
/// # Backoff
/// A requeue with backoff raises the level and queues RDY 0 on every connection before the
/// REQ; after `multiplier x 2^level` (capped; optionally fully jittered) one random
/// connection gets RDY 1. The next result decides: a success lowers the level (a new window
/// if still above 0, full RDY at 0), a failure raises it. Results inside a window are ignored.
///
/// # Discovery
/// Every lookupd is polled each round; the producers they list are unioned and new ones are
/// connected. Directly added nsqd are reconnected on an exponential schedule; a discovered
/// nsqd is reconnected only when an answer to a request sent after its connection ended still
/// lists it. A discovered nsqd is forgotten once it has no connection and no lookupd's latest
/// *successful* answer lists it: a connected one is kept until its connection ends, and a
/// lookupd that fails to answer keeps what it last listed, so a lookupd being down never makes
/// the consumer forget an nsqd. Directly added nsqd are never forgotten.
/// [`ConsumerStats::known_nsqd`] counts what is kept.
#[derive(Debug)]
pub struct Consumer {
    config: ConsumerConfig,
    topic: Topic,
    channel: Channel,
    rng: Rng,
    max_in_flight: u32,
    next_conn: u64,
    next_request: u64,
    seq: u64,
    slots: Slots<Slot>,
    producers: BTreeMap<String, Producer>,
    /// Recently forgotten discovered addresses and the sequence number of their last
    /// disconnect, kept only while a lookupd request sent before that disconnect is pending:
    /// such a stale answer must not bring the address back (see `Producer::disconnected_seq`).
    forgotten: BTreeMap<String, u64>,
    lookupds: Vec<Lookupd>,
    next_poll: Option<Instant>,
    rr_offset: usize,
    next_redistribute: Option<Instant>,
    // backoff
    backoff_level: u32,
    backoff_until: Option<Instant>,
    probe: Option<ConnId>,
    // shutdown
    closing: bool,
    close_deadline: Option<Instant>,
    closed_emitted: bool,
    leftovers: usize,
    // stats
    received: u64,
    finished: u64,
    requeued: u64,
    gave_up: u64,
    reconnects: u64,
    // outputs
    actions: VecDeque<Queued>,
    events: VecDeque<ConsumerEvent>,
}

impl Consumer {
    /// A consumer of `topic`/`channel`, with randomness (jitter, random connection choice)
    /// drawn from a generator seeded with `seed`. It does nothing until nsqd or lookupd
    /// addresses are added.
    pub fn new(config: ConsumerConfig, topic: Topic, channel: Channel, seed: u64) -> Consumer {
        Consumer {
            max_in_flight: config.max_in_flight,
            config,
            topic,
            channel,
            rng: Rng::new(seed),
            next_conn: 1,
            next_request: 1,
            seq: 0,
            slots: Slots::default(),
            producers: BTreeMap::new(),
            forgotten: BTreeMap::new(),
            lookupds: Vec::new(),
            next_poll: None,
            rr_offset: 0,
            next_redistribute: None,
            backoff_level: 0,
            backoff_until: None,
            probe: None,
            closing: false,
            close_deadline: None,
            closed_emitted: false,
            leftovers: 0,
            received: 0,
            finished: 0,
            requeued: 0,
            gave_up: 0,
            reconnects: 0,
            actions: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    // ---------------------------------------------------------------- queries

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// The current `max_in_flight` (changed by [`set_max_in_flight`](Self::set_max_in_flight)).
    pub fn max_in_flight(&self) -> u32 {
        self.max_in_flight
    }

    /// Counters and the current flow-control state, in total and per nsqd.
    pub fn stats(&self) -> ConsumerStats {
        let mut stats = ConsumerStats::default();
        self.stats_into(&mut stats);
        stats
    }

    /// [`stats`](Self::stats) written over `out`, reusing its allocations (a driver that
    /// publishes the snapshot after every wake-up allocates nothing once it has room).
    pub fn stats_into(&self, out: &mut ConsumerStats) {
        out.received = self.received;
        out.finished = self.finished;
        out.requeued = self.requeued;
        out.gave_up = self.gave_up;
        out.connections = self.slots.values().filter(|s| s.is_ready()).count();
        out.backoff_level = self.backoff_level;
        out.total_rdy = self.slots.values().map(|s| u64::from(s.rdy())).sum();
        out.known_nsqd = self.producers.len();
        out.in_flight = self
            .slots
            .values()
            .filter_map(|s| s.conn.as_ref())
            .map(Connection::in_flight)
            .sum();
        out.reconnects = self.reconnects;
        out.nsqd.truncate(self.producers.len());
        for (i, (addr, p)) in self.producers.iter().enumerate() {
            let slot = p.conn.and_then(|id| self.slots.get(id));
            let mut counts = p.counts;
            if let Some(s) = slot {
                counts.add(&s.counts);
            }
            let c = slot.and_then(|s| s.conn.as_ref());
            let state = match (slot, c.map(Connection::state)) {
                (None, _) => NsqdState::Disconnected,
                (Some(_), None) => NsqdState::Connecting,
                (Some(s), Some(ConnectionState::Ready)) if s.is_ready() => NsqdState::Ready,
                (Some(_), Some(ConnectionState::Ready | ConnectionState::Handshaking)) => {
                    NsqdState::Handshaking
                }
                (Some(_), Some(_)) => NsqdState::Closing,
            };
            let entry = NsqdStats {
                address: String::new(),
                configured: p.source == Source::Direct,
                state,
                connection: p.conn,
                rdy: slot.map_or(0, Slot::rdy),
                in_flight: c.map_or(0, Connection::in_flight),
                received: counts.received,
                finished: counts.finished,
                requeued: counts.requeued,
                gave_up: counts.gave_up,
                reconnects: p.attempts.saturating_sub(1),
                reconnect_at: p.next_attempt.filter(|_| p.conn.is_none()),
            };
            match out.nsqd.get_mut(i) {
                Some(old) => {
                    let mut address = std::mem::take(&mut old.address);
                    address.clone_from(addr);
                    *old = NsqdStats { address, ..entry };
                }
                None => out.nsqd.push(NsqdStats {
                    address: addr.clone(),
                    ..entry
                }),
            }
        }
    }

    /// True when any ready connection has messages in flight amounting to at least 85% of its
    /// last RDY: a batching handler should flush now rather than wait for more.
    pub fn is_starved(&self) -> bool {
        self.slots.values().any(|s| {
            s.is_ready()
                && s.conn
                    .as_ref()
                    .is_some_and(|c| policy::is_starved(c.in_flight(), c.rdy()))
        })
    }

    /// The current backoff level (0 = full speed).
    pub fn backoff_level(&self) -> u32 {
        self.backoff_level
    }

    /// True while a backoff window is running (all RDY 0).
    pub fn in_backoff_window(&self) -> bool {
        self.backoff_until.is_some()
    }

    /// True once [`close`](Self::close) was called.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// True once the [`ConsumerEvent::Closed`] event was emitted.
    pub fn is_closed(&self) -> bool {
        self.closed_emitted
    }

    /// The connections the consumer currently knows (connecting, handshaking, ready or
    /// draining), with their nsqd address.
    pub fn connections(&self) -> impl Iterator<Item = (ConnId, &str)> + '_ {
        self.slots.iter().map(|(id, s)| (*id, s.addr.as_str()))
    }

    /// The connection state machine behind `conn`, once the socket is connected.
    pub fn connection(&self, conn: ConnId) -> Option<&Connection> {
        self.slots.get(conn).and_then(|s| s.conn.as_ref())
    }

    /// The RDY count last sent on `conn` (0 while it is not ready).
    pub fn rdy(&self, conn: ConnId) -> u32 {
        self.slots.get(conn).map_or(0, Slot::rdy)
    }

    // ---------------------------------------------------------------- inputs

    /// The driver connected the socket of `conn`: the handshake starts (magic and IDENTIFY are
    /// queued).
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        let role = Role::Consumer {
            topic: self.topic.clone(),
            channel: self.channel.clone(),
        };
        let Some(slot) = self.slots.get_mut(conn) else {
            return;
        };
        if slot.conn.is_some() {
            return;
        }
        match Connection::new(self.config.connection.clone(), role, &slot.addr, now) {
            Ok(c) => {
                slot.conn = Some(c);
                self.pump(now, conn);
            }
            Err(e) => {
                let reason = format!("configuration error: {e}");
                self.drop_slot(now, conn, &reason, 0);
            }
        }
    }

    /// The driver could not connect `conn`.
    pub fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        if self.slots.contains_key(conn) {
            self.drop_slot(now, conn, reason, 0);
        }
    }

    /// Bytes read from `conn`'s socket. All of `data` is consumed.
    pub fn handle_input(&mut self, now: Instant, conn: ConnId, data: &mut BytesMut) {
        let Some(c) = self.slots.get_mut(conn).and_then(|s| s.conn.as_mut()) else {
            data.clear();
            return;
        };
        c.handle_input(now, data);
        self.pump(now, conn);
    }

    /// `conn`'s socket reached EOF or failed: the connection is gone.
    pub fn handle_eof(&mut self, now: Instant, conn: ConnId) {
        let Some(slot) = self.slots.get_mut(conn) else {
            return;
        };
        match slot.conn.as_mut() {
            Some(c) => {
                c.handle_eof(now);
                self.pump(now, conn);
                if self.slots.contains_key(conn) {
                    let left = self.in_flight(conn);
                    self.drop_slot(now, conn, "connection lost", left);
                }
            }
            None => self.drop_slot(now, conn, "connection lost while connecting", 0),
        }
    }

    /// Bytes of a lookupd response.
    pub fn handle_lookupd_input(&mut self, now: Instant, request: LookupdRequestId, data: &[u8]) {
        let Some(i) = self.lookupd_index(request) else {
            return;
        };
        let Some(p) = self.lookupds[i].pending.as_mut() else {
            return;
        };
        match p.parser.feed(data) {
            Ok(None) => {}
            Ok(Some(reply)) => self.lookupd_done(now, i, Ok(reply)),
            Err(e) => self.lookupd_done(now, i, Err(e)),
        }
    }

    /// The lookupd closed the response stream.
    pub fn handle_lookupd_eof(&mut self, now: Instant, request: LookupdRequestId) {
        let Some(i) = self.lookupd_index(request) else {
            return;
        };
        let Some(p) = self.lookupds[i].pending.as_mut() else {
            return;
        };
        let result = p.parser.eof();
        self.lookupd_done(now, i, result);
    }

    /// The driver could not complete the lookupd exchange (connect refused, IO error).
    pub fn handle_lookupd_failed(&mut self, now: Instant, request: LookupdRequestId, reason: &str) {
        if let Some(i) = self.lookupd_index(request) {
            self.lookupd_done(now, i, Err(LookupdError::Transport(reason.to_string())));
        }
    }

    /// Time has reached (or passed) [`poll_timeout`](Self::poll_timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        // Connections' own timers (heartbeat liveness, message expiry, drain deadline).
        let due: Vec<ConnId> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                s.conn
                    .as_ref()
                    .and_then(Connection::poll_timeout)
                    .is_some_and(|t| t <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(c) = self.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
                c.handle_timeout(now);
                self.pump(now, id);
            }
        }
        if self.close_deadline.is_some_and(|t| t <= now) {
            self.force_close(now);
        }
        if self.backoff_until.is_some_and(|t| t <= now) {
            self.backoff_until = None;
            self.probe = None;
            self.rebalance(now, false);
        }
        let mut bootstrapped = false;
        for slot in self.slots.values_mut() {
            if slot.fresh_until.is_some_and(|t| t <= now) {
                slot.fresh_until = None;
                bootstrapped = true;
            }
        }
        if self.next_redistribute.is_some_and(|t| t <= now) {
            self.next_redistribute = None;
            self.rebalance(now, true);
        } else if bootstrapped {
            self.rebalance(now, false);
        }
        // Lookupd exchanges that took too long.
        for i in 0..self.lookupds.len() {
            if self.lookupds[i]
                .pending
                .as_ref()
                .is_some_and(|p| p.deadline <= now)
            {
                self.lookupd_done(now, i, Err(LookupdError::Timeout));
            }
        }
        if self.next_poll.is_some_and(|t| t <= now) {
            self.poll_lookupds(now);
        }
        let reconnect: Vec<String> = self
            .producers
            .iter()
            .filter(|(_, p)| p.conn.is_none() && p.next_attempt.is_some_and(|t| t <= now))
            .map(|(a, _)| a.clone())
            .collect();
        for addr in reconnect {
            self.connect(&addr);
        }
    }

    // ---------------------------------------------------------------- commands

    /// Finishes a message delivered on `conn` (FIN). Counts as a success for backoff.
    pub fn finish(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: &MessageId,
    ) -> Result<(), ConsumerError> {
        self.connection_mut(conn)?.finish(now, id)?;
        self.finished += 1;
        self.count(conn, |c| c.finished += 1);
        // Backoff first: leaving backoff re-plans RDY, which makes a refill unnecessary.
        self.on_success(now);
        self.after_answer(now, conn);
        Ok(())
    }

    /// Requeues a message delivered on `conn` (REQ).
    ///
    /// `delay: None` uses `attempts x default_requeue_delay`, capped at `max_requeue_delay`;
    /// any delay is clamped to the connection's `max_req_timeout`. With `backoff` (and backoff
    /// enabled), this counts as a failure: RDY 0 goes to every connection before the REQ.
    pub fn requeue(
        &mut self,
        now: Instant,
        conn: ConnId,
        message: &Message,
        delay: Option<Duration>,
        backoff: bool,
    ) -> Result<(), ConsumerError> {
        self.requeue_id(now, conn, &message.id, message.attempts, delay, backoff)
    }

    /// [`requeue`](Self::requeue) for an adapter that kept only the message's id and attempt
    /// count (`attempts` computes the default delay when `delay` is `None`).
    pub fn requeue_id(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: &MessageId,
        attempts: u16,
        delay: Option<Duration>,
        backoff: bool,
    ) -> Result<(), ConsumerError> {
        let delay = delay
            .unwrap_or_else(|| {
                policy::requeue_delay(
                    attempts,
                    self.config.default_requeue_delay,
                    self.config.max_requeue_delay,
                )
            })
            .min(self.config.connection.limits.max_req_timeout);
        let c = self.connection_mut(conn)?;
        if !c.is_in_flight(id) {
            // Let the connection produce its own misuse error (nothing is sent). Should it
            // accept the REQ after all, it counts as a requeue without backoff.
            c.requeue(now, id, delay)?;
            self.requeued += 1;
            self.count(conn, |c| c.requeued += 1);
            self.after_answer(now, conn);
            return Ok(());
        }
        if backoff {
            // RDY 0 everywhere is queued before the REQ that caused it.
            self.on_failure(now);
        }
        self.connection_mut(conn)?.requeue(now, id, delay)?;
        self.requeued += 1;
        self.count(conn, |c| c.requeued += 1);
        self.after_answer(now, conn);
        Ok(())
    }

    /// Asks for more time for a message delivered on `conn` (TOUCH).
    pub fn touch(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: &MessageId,
    ) -> Result<(), ConsumerError> {
        self.connection_mut(conn)?.touch(now, id)?;
        self.pump(now, conn);
        Ok(())
    }

    /// Changes `max_in_flight` at runtime; 0 pauses the consumer (RDY 0 everywhere).
    pub fn set_max_in_flight(&mut self, now: Instant, max_in_flight: u32) {
        self.max_in_flight = max_in_flight;
        self.rebalance(now, false);
    }

    /// Adds an nsqd TCP address (`host:port`) to connect to directly; it is reconnected with
    /// exponential backoff after failures. Adding a known address does nothing.
    pub fn add_nsqd(&mut self, now: Instant, addr: &str) -> Result<(), ConsumerError> {
        let _ = now;
        if self.closing {
            return Err(ConsumerError::Closing);
        }
        let addr = addr.trim();
        if !valid_host_port(addr) {
            return Err(ConsumerError::InvalidAddress(addr.to_string()));
        }
        if let Some(p) = self.producers.get_mut(addr) {
            p.source = Source::Direct;
            if p.conn.is_none() && p.next_attempt.is_none() {
                self.connect(addr);
            }
        } else {
            self.producers
                .insert(addr.to_string(), self.new_producer(Source::Direct));
            self.connect(addr);
        }
        Ok(())
    }

    /// Adds an nsqlookupd (`host:port` or `http://host:port[/path]`) to poll; the next poll
    /// happens at once.
    pub fn add_lookupd(&mut self, now: Instant, addr: &str) -> Result<(), ConsumerError> {
        if self.closing {
            return Err(ConsumerError::Closing);
        }
        let addr = LookupdAddress::parse(addr).map_err(ConsumerError::InvalidLookupd)?;
        if self.lookupds.iter().any(|l| l.addr == addr) {
            return Ok(());
        }
        self.lookupds.push(Lookupd {
            addr,
            pending: None,
        });
        self.next_poll = Some(now);
        Ok(())
    }

    /// Stops consuming from an nsqd added with [`add_nsqd`](Self::add_nsqd) (go-nsq's
    /// `DisconnectFromNSQD`): its connection closes gracefully (CLS; messages in flight on it
    /// can still be answered, and it closes once they are, or after the connection's
    /// `drain_timeout`), its RDY goes to the other connections at once, and it is not
    /// reconnected. A connection attempt in progress is abandoned; a pending reconnect is
    /// cancelled. [`add_nsqd`](Self::add_nsqd) can add it again.
    ///
    /// Should a lookupd list the address too, it counts as discovered from then on: a lookupd
    /// answer asked for after its connection ended connects it again, as for any discovered
    /// nsqd. Otherwise the consumer forgets it once its connection has ended.
    ///
    /// Refused, with nothing changed: an address that is not `host:port`
    /// ([`ConsumerError::InvalidAddress`]), one never added or already disconnected from
    /// ([`ConsumerError::NsqdNotConfigured`]), one known only through nsqlookupd
    /// ([`ConsumerError::NsqdDiscovered`]: the lookupd would list it again; go-nsq refuses
    /// it too), and any while closing ([`ConsumerError::Closing`]).
    pub fn disconnect_from_nsqd(&mut self, now: Instant, addr: &str) -> Result<(), ConsumerError> {
        if self.closing {
            return Err(ConsumerError::Closing);
        }
        let addr = addr.trim();
        if !valid_host_port(addr) {
            return Err(ConsumerError::InvalidAddress(addr.to_string()));
        }
        let Some(p) = self.producers.get_mut(addr) else {
            return Err(ConsumerError::NsqdNotConfigured(addr.to_string()));
        };
        if p.source != Source::Direct {
            // Listed by a lookupd: discovered. Otherwise already disconnected from (and
            // draining), or a discovered nsqd no lookupd lists any more: not configured.
            return Err(if p.listed_by.is_empty() {
                ConsumerError::NsqdNotConfigured(addr.to_string())
            } else {
                ConsumerError::NsqdDiscovered(addr.to_string())
            });
        }
        // From now on it is handled like a discovered nsqd: no reconnect schedule, and
        // forgotten once no connection and no lookupd holds on to it.
        p.source = Source::Lookupd;
        p.next_attempt = None;
        let conn = p.conn;
        tracing::debug!(addr, "disconnecting from nsqd");
        match conn {
            Some(id) => self.close_connection(now, id),
            None => self.prune(Some(addr)),
        }
        Ok(())
    }

    /// Stops polling an nsqlookupd added with [`add_lookupd`](Self::add_lookupd) (go-nsq's
    /// `DisconnectFromNSQLookupd`); `addr` is matched as `add_lookupd` parses it. Its query in
    /// progress, if any, is abandoned. The nsqd that only it listed are not reconnected:
    /// connected ones are kept until their connection ends, then forgotten; the others are
    /// forgotten at once.
    ///
    /// Refused, with nothing changed: an address that does not parse
    /// ([`ConsumerError::InvalidLookupd`]), one not configured
    /// ([`ConsumerError::LookupdNotConfigured`]), the only lookupd configured
    /// ([`ConsumerError::LastLookupd`], as go-nsq: discovery would stop; add its replacement
    /// first), and any while closing ([`ConsumerError::Closing`]).
    pub fn disconnect_from_lookupd(
        &mut self,
        now: Instant,
        addr: &str,
    ) -> Result<(), ConsumerError> {
        let _ = now;
        if self.closing {
            return Err(ConsumerError::Closing);
        }
        let input = addr.trim();
        let addr = LookupdAddress::parse(input).map_err(ConsumerError::InvalidLookupd)?;
        let Some(i) = self.lookupds.iter().position(|l| l.addr == addr) else {
            return Err(ConsumerError::LookupdNotConfigured(input.to_string()));
        };
        if self.lookupds.len() == 1 {
            return Err(ConsumerError::LastLookupd(input.to_string()));
        }
        tracing::debug!(addr = %addr, "disconnecting from nsqlookupd");
        if let Some(pending) = self.lookupds.remove(i).pending {
            self.push_action(Action::LookupdClose {
                request: pending.id,
            });
        }
        // `listed_by` holds indexes into `lookupds`: drop `i`, shift the ones after it.
        for p in self.producers.values_mut() {
            p.listed_by = p
                .listed_by
                .iter()
                .filter(|&&j| j != i)
                .map(|&j| if j > i { j - 1 } else { j })
                .collect();
        }
        self.prune(None);
        Ok(())
    }

    /// Closes one connection gracefully (CLS and drain, or at once if not subscribed yet) and
    /// hands its RDY to the others.
    fn close_connection(&mut self, now: Instant, id: ConnId) {
        match self.slots.get_mut(id).map(|s| s.conn.as_mut()) {
            None => {}
            Some(None) => self.drop_slot(now, id, "disconnected while connecting", 0),
            Some(Some(c)) => {
                c.close(now);
                self.pump(now, id);
                if self.probe == Some(id) {
                    self.probe = None;
                }
                self.rebalance(now, false);
            }
        }
    }

    /// Starts a graceful shutdown: CLS on every connection, in-flight messages can still be
    /// answered; connections close when drained or after `close_timeout`. No new connections
    /// or lookupd queries. One [`ConsumerEvent::Closed`] follows.
    pub fn close(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.close_deadline = Some(later(now, self.config.close_timeout));
        self.next_poll = None;
        self.next_redistribute = None;
        self.backoff_until = None;
        let pending: Vec<LookupdRequestId> = self
            .lookupds
            .iter_mut()
            .filter_map(|l| l.pending.take().map(|p| p.id))
            .collect();
        for request in pending {
            self.push_action(Action::LookupdClose { request });
        }
        for p in self.producers.values_mut() {
            p.next_attempt = None;
        }
        let ids: Vec<ConnId> = self.slots.keys().copied().collect();
        for id in ids {
            let has_conn = self.slots.get(id).is_some_and(|s| s.conn.is_some());
            if has_conn {
                if let Some(c) = self.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
                    c.close(now);
                }
                self.pump(now, id);
            } else {
                self.drop_slot(now, id, "consumer closing", 0);
            }
        }
        self.maybe_emit_closed();
    }

    // ---------------------------------------------------------------- outputs

    /// The next thing the driver must do, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        loop {
            match self.actions.pop_front()? {
                Queued::Action(a) => return Some(a),
                Queued::Pending(conn) => {
                    if let Some(data) = self.take_transmit(conn) {
                        return Some(Action::Transmit { conn, data });
                    }
                }
            }
        }
    }

    /// The next event for the application.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ConsumerEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let conns = self
            .slots
            .values()
            .filter_map(|s| s.conn.as_ref().and_then(Connection::poll_timeout));
        let bootstraps = self.slots.values().filter_map(|s| s.fresh_until);
        let lookups = self
            .lookupds
            .iter()
            .filter_map(|l| l.pending.as_ref().map(|p| p.deadline));
        let reconnects = self
            .producers
            .values()
            .filter(|p| p.conn.is_none())
            .filter_map(|p| p.next_attempt);
        conns
            .chain(bootstraps)
            .chain(lookups)
            .chain(reconnects)
            .chain(self.next_poll)
            .chain(self.backoff_until)
            .chain(self.next_redistribute)
            .chain(self.close_deadline.filter(|_| !self.closed_emitted))
            .min()
    }

    // ---------------------------------------------------------------- internals

    fn new_producer(&self, source: Source) -> Producer {
        Producer {
            source,
            conn: None,
            schedule: ReconnectSchedule::new(
                self.config.reconnect_initial_delay,
                self.config.reconnect_max_delay,
            ),
            next_attempt: None,
            disconnected_seq: 0,
            listed_by: BTreeSet::new(),
            counts: Counts::default(),
            attempts: 0,
        }
    }

    fn push_action(&mut self, action: Action) {
        self.freeze_back();
        self.actions.push_back(Queued::Action(action));
    }

    fn connection_mut(&mut self, conn: ConnId) -> Result<&mut Connection, ConsumerError> {
        self.slots
            .get_mut(conn)
            .ok_or_else(|| ConsumerError::UnknownConnection(conn))?
            .conn
            .as_mut()
            .ok_or_else(|| ConsumerError::NotReady(conn))
    }

    /// Counts a message event on `conn`'s own counters.
    fn count(&mut self, conn: ConnId, f: impl FnOnce(&mut Counts)) {
        if let Some(slot) = self.slots.get_mut(conn) {
            f(&mut slot.counts);
        }
    }

    fn in_flight(&self, conn: ConnId) -> usize {
        self.slots
            .get(conn)
            .and_then(|s| s.conn.as_ref())
            .map_or(0, Connection::in_flight)
    }

    fn connect(&mut self, addr: &str) {
        if self.closing {
            return;
        }
        let Some(p) = self.producers.get_mut(addr) else {
            return;
        };
        if p.conn.is_some() {
            return;
        }
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        p.conn = Some(id);
        p.next_attempt = None;
        p.attempts += 1;
        if p.attempts > 1 {
            self.reconnects += 1;
        }
        self.slots.insert(
            id,
            Slot {
                addr: addr.to_string(),
                conn: None,
                ready_at: None,
                fresh_until: None,
                granted_at: None,
                received_since_rdy: 0,
                counts: Counts::default(),
            },
        );
        self.push_action(Action::Connect {
            conn: id,
            addr: addr.to_string(),
        });
    }

    /// Queues the connection's bytes for sending (see [`Queued::Pending`]).
    fn flush(&mut self, id: ConnId) {
        let Some(c) = self.slots.get(id).and_then(|s| s.conn.as_ref()) else {
            return;
        };
        if !c.has_transmit() || matches!(self.actions.back(), Some(Queued::Pending(b)) if *b == id)
        {
            return;
        }
        self.freeze_back();
        self.actions.push_back(Queued::Pending(id));
    }

    /// Turns a `Pending` at the back of the queue into the bytes it stands for, so what is
    /// queued next goes after them.
    fn freeze_back(&mut self) {
        if let Some(&Queued::Pending(conn)) = self.actions.back() {
            self.actions.pop_back();
            if let Some(data) = self.take_transmit(conn) {
                self.actions
                    .push_back(Queued::Action(Action::Transmit { conn, data }));
            }
        }
    }

    /// Everything the connection has to send (`None` if nothing, or if it is gone).
    fn take_transmit(&mut self, conn: ConnId) -> Option<Bytes> {
        // One call returns everything the connection has (its buffer is split off whole).
        let c = self.slots.get_mut(conn)?.conn.as_mut()?;
        c.poll_transmit().filter(|data| !data.is_empty())
    }

    /// Drains a connection's events (turning them into consumer actions) and its bytes.
    fn pump(&mut self, now: Instant, id: ConnId) {
        loop {
            let Some(slot) = self.slots.get_mut(id) else {
                return;
            };
            let Some(c) = slot.conn.as_mut() else {
                return;
            };
            let Some(event) = c.poll_event() else {
                break;
            };
            match event {
                ConnectionEvent::Ready(_) => {
                    slot.ready_at = Some(now);
                    slot.fresh_until = Some(later(now, self.config.rdy_redistribute_interval));
                    let addr = slot.addr.clone();
                    self.events
                        .push_back(ConsumerEvent::ConnectionReady { conn: id, addr });
                    self.flush(id);
                    self.rebalance(now, false);
                }
                ConnectionEvent::Message(message) => self.on_message(now, id, message),
                ConnectionEvent::MessageExpired(mid) => {
                    self.events
                        .push_back(ConsumerEvent::MessageExpired { conn: id, id: mid });
                }
                ConnectionEvent::ServerError(error) => {
                    self.events
                        .push_back(ConsumerEvent::ServerError { conn: id, error });
                }
                ConnectionEvent::Closed(reason) => {
                    let left = match &reason {
                        CloseReason::Graceful { unanswered } => *unanswered,
                        _ => c.in_flight(),
                    };
                    self.flush(id);
                    self.drop_slot(now, id, &reason.to_string(), left);
                    return;
                }
                _ => {}
            }
        }
        self.flush(id);
    }

    fn on_message(&mut self, now: Instant, id: ConnId, message: Message) {
        self.received += 1;
        self.count(id, |c| c.received += 1);
        let max_attempts = self.config.max_attempts;
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        slot.received_since_rdy = slot.received_since_rdy.saturating_add(1);
        let was_fresh = slot.fresh_until.take().is_some();
        if max_attempts > 0 && message.attempts > max_attempts {
            if let Some(c) = slot.conn.as_mut() {
                if let Err(e) = c.finish(now, &message.id) {
                    tracing::debug!(conn = %id, error = %e, "could not finish a message given up on");
                }
            }
            self.count(id, |c| c.gave_up += 1);
            self.gave_up += 1;
            self.events
                .push_back(ConsumerEvent::GaveUp { conn: id, message });
            self.after_answer(now, id);
        } else {
            self.events
                .push_back(ConsumerEvent::Message { conn: id, message });
        }
        if was_fresh {
            self.rebalance(now, false);
        }
    }

    /// After a FIN/REQ on `id`: refill its RDY if the remaining count ran low, then drain it.
    fn after_answer(&mut self, now: Instant, id: ConnId) {
        if let Some(slot) = self.slots.get_mut(id) {
            if slot.is_ready() && !self.closing {
                let rdy = slot.rdy();
                if policy::needs_refill(rdy, slot.received_since_rdy) {
                    if let Some(c) = slot.conn.as_mut() {
                        if c.set_rdy(now, rdy).is_ok() {
                            slot.received_since_rdy = 0;
                        }
                    }
                }
            }
        }
        self.pump(now, id);
    }

    /// Forgets a connection: Disconnect action, event, reconnect bookkeeping, RDY rebalance.
    fn drop_slot(&mut self, now: Instant, id: ConnId, reason: &str, unanswered: usize) {
        // Its last bytes are taken now, while the connection is still here.
        self.flush(id);
        self.freeze_back();
        let Some(slot) = self.slots.remove(id) else {
            return;
        };
        if let Some(p) = self.producers.get_mut(&slot.addr) {
            p.counts.add(&slot.counts);
        }
        self.push_action(Action::Disconnect { conn: id });
        let mut closed = ConsumerEvent::ConnectionClosed {
            conn: id,
            addr: slot.addr.clone(),
            reason: reason.to_string(),
            retry_in: None,
        };
        if self.probe == Some(id) {
            self.probe = None;
        }
        if self.closing {
            self.events.push_back(closed);
            self.leftovers += unanswered;
            self.maybe_emit_closed();
            return;
        }
        self.seq += 1;
        let seq = self.seq;
        let healthy = slot
            .ready_at
            .is_some_and(|t| now.saturating_duration_since(t) >= self.config.reconnect_reset_after);
        if let Some(p) = self.producers.get_mut(&slot.addr) {
            if p.conn == Some(id) {
                p.conn = None;
                p.disconnected_seq = seq;
                if p.source == Source::Direct {
                    if healthy {
                        p.schedule.reset();
                    }
                    let delay = p.schedule.next_delay(&mut self.rng);
                    p.next_attempt = Some(later(now, delay));
                    if let ConsumerEvent::ConnectionClosed { retry_in, .. } = &mut closed {
                        *retry_in = Some(delay);
                    }
                }
            }
        }
        self.events.push_back(closed);
        self.prune(Some(&slot.addr));
        self.rebalance(now, false);
    }

    fn maybe_emit_closed(&mut self) {
        if self.closing && !self.closed_emitted && self.slots.is_empty() {
            self.closed_emitted = true;
            self.close_deadline = None;
            self.events.push_back(ConsumerEvent::Closed {
                leftovers: self.leftovers,
            });
        }
    }

    fn force_close(&mut self, now: Instant) {
        self.close_deadline = None;
        let ids: Vec<ConnId> = self.slots.keys().copied().collect();
        for id in ids {
            let left = self.in_flight(id);
            self.drop_slot(now, id, "close timeout", left);
        }
        self.maybe_emit_closed();
    }

    // ------------------------------------------------------------- backoff

    fn backoff_max_level(&self) -> u32 {
        policy::max_backoff_level(
            self.config.backoff_multiplier,
            self.config.max_backoff_duration,
        )
        .max(1)
    }

    fn on_success(&mut self, now: Instant) {
        if !self.config.backoff_enabled || self.backoff_until.is_some() || self.backoff_level == 0 {
            return;
        }
        self.backoff_level -= 1;
        if self.backoff_level == 0 {
            self.probe = None;
            tracing::debug!("backoff over: full RDY restored");
            self.rebalance(now, false);
        } else {
            self.start_window(now);
        }
    }

    fn on_failure(&mut self, now: Instant) {
        if !self.config.backoff_enabled || self.backoff_until.is_some() || self.closing {
            return;
        }
        self.backoff_level = (self.backoff_level + 1).min(self.backoff_max_level());
        self.start_window(now);
    }

    fn start_window(&mut self, now: Instant) {
        let d = policy::backoff_duration(
            self.config.backoff_strategy,
            self.config.backoff_multiplier,
            self.backoff_level,
            self.config.max_backoff_duration,
            &mut self.rng,
        );
        tracing::debug!(level = self.backoff_level, window = ?d, "backing off");
        self.backoff_until = Some(later(now, d));
        self.probe = None;
        self.rebalance(now, false);
    }

    // ---------------------------------------------------------------- RDY

    /// Recomputes every ready connection's RDY and applies it, lowering before raising.
    fn rebalance(&mut self, now: Instant, redistribute: bool) {
        let ready: Vec<ConnId> = self
            .slots
            .iter()
            .filter(|(_, s)| s.is_ready())
            .map(|(id, _)| *id)
            .collect();
        let n = ready.len();
        let m = self.max_in_flight;
        let mut targets = vec![0u32; n];
        let mut low_mode = false;
        if self.closing || m == 0 || n == 0 || self.backoff_until.is_some() {
            // all zero
        } else if self.backoff_level > 0 {
            let keep = self.probe.and_then(|p| ready.iter().position(|&r| r == p));
            let idx = match keep {
                Some(i) if redistribute && self.is_idle(now, ready[i]) && n > 1 => {
                    // Move the probe away from an idle connection.
                    let mut j = self.rng.index(n - 1);
                    if j >= i {
                        j += 1;
                    }
                    j
                }
                Some(i) => i,
                None => self.rng.index(n),
            };
            self.probe = Some(ready[idx]);
            targets[idx] = 1;
        } else if n as u64 <= u64::from(m) {
            if redistribute {
                self.rr_offset = self.rr_offset.wrapping_add(1);
            }
            let caps: Vec<RdySlot> = ready
                .iter()
                .map(|id| RdySlot {
                    max_rdy: self.slots[id].conn.as_ref().map_or(0, Connection::max_rdy),
                })
                .collect();
            targets = policy::plan_rdy(m, &caps, self.rr_offset % n);
            for (t, id) in targets.iter_mut().zip(&ready) {
                if self.slots[id].fresh_until.is_some() {
                    *t = (*t).min(1);
                }
            }
        } else {
            low_mode = true;
            self.plan_low(now, &ready, &mut targets, redistribute);
        }
        self.apply(now, &ready, &targets);
        let needs_tick = !self.closing
            && ((low_mode && m > 0)
                || (self.backoff_level > 0 && self.backoff_until.is_none() && n > 1));
        if !needs_tick {
            self.next_redistribute = None;
        } else if self.next_redistribute.is_none() {
            self.next_redistribute = Some(later(now, self.config.rdy_redistribute_interval));
        }
    }

    fn is_idle(&self, now: Instant, id: ConnId) -> bool {
        let Some(slot) = self.slots.get(id) else {
            return true;
        };
        let last_msg = slot.conn.as_ref().and_then(Connection::last_message_at);
        let since = match (last_msg, slot.granted_at) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).unwrap_or(now),
        };
        now.saturating_duration_since(since) > self.config.low_rdy_idle_timeout
    }

    /// max_in_flight < connections: RDY 1 held in turns.
    fn plan_low(
        &mut self,
        now: Instant,
        ready: &[ConnId],
        targets: &mut [u32],
        redistribute: bool,
    ) {
        let m = self.max_in_flight as usize;
        let mut taken = vec![false; ready.len()];
        for (i, id) in ready.iter().enumerate() {
            let slot = &self.slots[id];
            if slot.rdy() > 0 {
                targets[i] = 1;
                if redistribute {
                    let held_too_long = slot.granted_at.is_some_and(|g| {
                        now.saturating_duration_since(g) > self.config.low_rdy_timeout
                    });
                    if held_too_long || self.is_idle(now, *id) {
                        targets[i] = 0;
                        taken[i] = true;
                    }
                }
            }
        }
        // Too many holders (max_in_flight was lowered): drop the longest-held.
        let mut holders: Vec<usize> = (0..ready.len()).filter(|&i| targets[i] > 0).collect();
        if holders.len() > m {
            holders.sort_by_key(|&i| self.slots[&ready[i]].granted_at);
            for &i in &holders[..holders.len() - m] {
                targets[i] = 0;
            }
        }
        let mut free = m.saturating_sub(targets.iter().filter(|&&t| t > 0).count());
        if free == 0 {
            return;
        }
        // Waited longest first (never granted counts as longest), random among equals.
        let mut candidates: Vec<usize> = (0..ready.len())
            .filter(|&i| targets[i] == 0 && !taken[i])
            .collect();
        for k in (1..candidates.len()).rev() {
            let j = self.rng.index(k + 1);
            candidates.swap(k, j);
        }
        candidates.sort_by_key(|&i| self.slots[&ready[i]].granted_at);
        let mut again: Vec<usize> = (0..ready.len()).filter(|&i| taken[i]).collect();
        for k in (1..again.len()).rev() {
            let j = self.rng.index(k + 1);
            again.swap(k, j);
        }
        for i in candidates.into_iter().chain(again) {
            if free == 0 {
                break;
            }
            targets[i] = 1;
            free -= 1;
        }
    }

    /// Sends the planned RDY values: every lowering first, then every raise, so the sum never
    /// exceeds the plan's total on the way.
    fn apply(&mut self, now: Instant, ready: &[ConnId], targets: &[u32]) {
        for pass in [true, false] {
            for (id, &target) in ready.iter().zip(targets) {
                let Some(slot) = self.slots.get_mut(*id) else {
                    continue;
                };
                let current = slot.rdy();
                let lowering = target < current;
                if target == current || lowering != pass {
                    continue;
                }
                let Some(c) = slot.conn.as_mut() else {
                    continue;
                };
                match c.set_rdy(now, target) {
                    Ok(()) => {
                        slot.received_since_rdy = 0;
                        if current == 0 && target > 0 {
                            slot.granted_at = Some(now);
                        }
                    }
                    Err(e) => tracing::debug!(conn = %id, error = %e, "RDY not sent"),
                }
                self.flush(*id);
            }
        }
    }

    // ------------------------------------------------------------ lookupd

    fn lookupd_index(&self, request: LookupdRequestId) -> Option<usize> {
        self.lookupds
            .iter()
            .position(|l| l.pending.as_ref().is_some_and(|p| p.id == request))
    }

    fn poll_lookupds(&mut self, now: Instant) {
        if self.closing {
            self.next_poll = None;
            return;
        }
        for i in 0..self.lookupds.len() {
            if self.lookupds[i].pending.is_some() {
                continue; // still waiting for the previous round's answer
            }
            let id = LookupdRequestId(self.next_request);
            self.next_request += 1;
            self.seq += 1;
            let l = &mut self.lookupds[i];
            let data = Bytes::from(l.addr.request(&self.topic));
            l.pending = Some(Pending {
                id,
                parser: LookupdResponseParser::new(self.config.max_lookupd_response_size),
                deadline: later(now, self.config.lookupd_timeout),
                seq: self.seq,
            });
            let addr = l.addr.authority().to_string();
            self.push_action(Action::LookupdRequest {
                request: id,
                addr,
                data,
            });
        }
        let interval = self.config.lookupd_poll_interval;
        let fraction = self.config.lookupd_poll_jitter;
        let fraction = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let interval = interval.min(MAX_DELAY);
        let jitter = interval.mul_f64(fraction * self.rng.unit_f64());
        self.next_poll = Some(later(now, interval + jitter));
    }

    fn lookupd_done(
        &mut self,
        _now: Instant,
        i: usize,
        result: Result<crate::lookup::LookupResponse, LookupdError>,
    ) {
        let Some(p) = self.lookupds[i].pending.take() else {
            return;
        };
        self.push_action(Action::LookupdClose { request: p.id });
        match result {
            Ok(reply) => {
                let mut listed = BTreeSet::new();
                for producer in &reply.producers {
                    let addr = producer.tcp_address();
                    if producer.tcp_port == 0 || !valid_host_port(&addr) {
                        tracing::debug!(
                            nsqd = addr,
                            "ignoring a lookupd producer with a bad address"
                        );
                        continue;
                    }
                    self.discovered(&addr, p.seq);
                    listed.insert(addr);
                }
                // This answer replaces what this lookupd listed before.
                for (addr, producer) in &mut self.producers {
                    if listed.contains(addr) {
                        producer.listed_by.insert(i);
                    } else {
                        producer.listed_by.remove(&i);
                    }
                }
                self.prune(None);
            }
            Err(error) => {
                let addr = self.lookupds[i].addr.to_string();
                self.events
                    .push_back(ConsumerEvent::LookupdFailed { addr, error });
            }
        }
        // This request is answered: forgotten addresses it predated may be let go.
        self.expire_forgotten();
    }

    /// Forgets lookupd-discovered addresses that nothing holds on to any more: no connection
    /// (live or being set up), no reconnect due, and no lookupd whose latest successful answer
    /// lists them. Directly added addresses are never forgotten. `only` limits the check to
    /// one address. Nothing is forgotten while closing (everything goes away then anyway).
    fn prune(&mut self, only: Option<&str>) {
        if self.closing {
            return;
        }
        let unheld = |p: &Producer| {
            p.source == Source::Lookupd
                && p.conn.is_none()
                && p.next_attempt.is_none()
                && p.listed_by.is_empty()
        };
        let forgotten = &mut self.forgotten;
        let mut forget = |addr: &str, p: &Producer| {
            tracing::debug!(nsqd = addr, "forgetting an nsqd no lookupd lists any more");
            forgotten.insert(addr.to_string(), p.disconnected_seq);
        };
        match only {
            Some(addr) => {
                if let Some(p) = self.producers.get(addr).filter(|p| unheld(p)) {
                    forget(addr, p);
                    self.producers.remove(addr);
                }
            }
            None => self.producers.retain(|addr, p| {
                if unheld(p) {
                    forget(addr, p);
                    false
                } else {
                    true
                }
            }),
        }
        self.expire_forgotten();
    }

    /// Drops the `forgotten` entries no pending lookupd request predates.
    fn expire_forgotten(&mut self) {
        if self.forgotten.is_empty() {
            return;
        }
        let oldest = self
            .lookupds
            .iter()
            .filter_map(|l| l.pending.as_ref().map(|p| p.seq))
            .min();
        self.forgotten
            .retain(|_, disconnected| oldest.is_some_and(|o| o < *disconnected));
    }

    fn discovered(&mut self, addr: &str, request_seq: u64) {
        if self.closing {
            return;
        }
        match self.producers.get(addr) {
            None => {
                if self
                    .forgotten
                    .get(addr)
                    .is_some_and(|&disconnected| request_seq < disconnected)
                {
                    return; // a stale answer about an nsqd that went away since
                }
                self.forgotten.remove(addr);
                let p = self.new_producer(Source::Lookupd);
                self.producers.insert(addr.to_string(), p);
                self.connect(addr);
            }
            Some(p) => {
                if p.source == Source::Lookupd
                    && p.conn.is_none()
                    && request_seq > p.disconnected_seq
                {
                    self.connect(addr);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_configured_durations_do_not_overflow() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let config = ConsumerConfig {
            lookupd_poll_interval: Duration::MAX,
            lookupd_poll_jitter: f64::NAN,
            lookupd_timeout: Duration::MAX,
            close_timeout: Duration::MAX,
            rdy_redistribute_interval: Duration::MAX,
            ..ConsumerConfig::default()
        };
        let mut c = Consumer::new(
            config,
            Topic::new("t").unwrap(),
            Channel::new("c").unwrap(),
            1,
        );
        c.add_lookupd(now, "h:4161").unwrap();
        c.handle_timeout(now);
        assert!(matches!(
            c.poll_action(),
            Some(Action::LookupdRequest { .. })
        ));
        assert!(c.poll_timeout().is_some_and(|t| t > now));
        c.close(now);
    }

    fn consumer() -> Consumer {
        Consumer::new(
            ConsumerConfig::default(),
            Topic::new("t").unwrap(),
            Channel::new("c").unwrap(),
            1,
        )
    }

    #[test]
    fn commands_validate_and_nothing_happens_on_error() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let mut c = consumer();
        assert_eq!(
            c.add_nsqd(now, "nope"),
            Err(ConsumerError::InvalidAddress("nope".into()))
        );
        assert!(matches!(
            c.add_lookupd(now, "https://h:4161"),
            Err(ConsumerError::InvalidLookupd(
                LookupdAddressError::UnsupportedScheme(_)
            ))
        ));
        assert_eq!(c.poll_action(), None);
        assert_eq!(c.poll_timeout(), None);
        let ghost = ConnId(99);
        assert_eq!(
            c.finish(now, ghost, &MessageId::new(*b"0123456789abcdef")),
            Err(ConsumerError::UnknownConnection(ghost))
        );
        assert_eq!(ghost.to_string(), "conn#99");
        assert_eq!(LookupdRequestId(3).to_string(), "lookup#3");
        // Adding the same nsqd twice connects once; a connecting socket is not ready.
        c.add_nsqd(now, "h:4150").unwrap();
        c.add_nsqd(now, " h:4150 ").unwrap();
        let Some(Action::Connect { conn, addr }) = c.poll_action() else {
            panic!("expected Connect");
        };
        assert_eq!(addr, "h:4150");
        assert_eq!(c.poll_action(), None);
        assert_eq!(
            c.touch(now, conn, &MessageId::new(*b"0123456789abcdef")),
            Err(ConsumerError::NotReady(conn))
        );
        // Close with nothing connected yet: the pending connect is dropped, Closed at once.
        c.close(now);
        assert_eq!(c.poll_action(), Some(Action::Disconnect { conn }));
        let events: Vec<ConsumerEvent> = std::iter::from_fn(|| c.poll_event()).collect();
        assert!(matches!(
            events.last(),
            Some(ConsumerEvent::Closed { leftovers: 0 })
        ));
        assert!(c.is_closed());
        assert_eq!(c.add_nsqd(now, "h:4151"), Err(ConsumerError::Closing));
        assert_eq!(c.poll_timeout(), None);
    }
}
