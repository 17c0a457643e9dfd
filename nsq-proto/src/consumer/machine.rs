//! The [`Consumer`] state machine.

use super::config::ConsumerConfig;
use super::lookupd::{LookupdAddress, LookupdAddressError, LookupdError, LookupdResponseParser};
use super::policy::{self, RdySlot, ReconnectSchedule};
use super::slots::Slots;
use super::stats::{Counts, NsqdState, NsqdStats};
use crate::connection::{
    CloseReason, Connection, ConnectionError, ConnectionEvent, ConnectionState, Role,
};
use crate::driver::{Action, ConnId, LookupdRequestId};
use crate::error_code::{ErrorCode, ServerError};
use crate::frame::{Message, MessageId};
use crate::names::{Channel, Topic};
use crate::rng::Rng;
use crate::schedule::{MAX_DELAY, later, valid_host_port};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

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

/// The longest a lowered RDY's possible deliveries are waited for (see `Slot::transit`).
const MAX_SETTLE: Duration = Duration::from_secs(5);

/// How many E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED within [`ANSWER_FAILURE_WINDOW`]
/// count as one handler failure for backoff.
pub const ANSWER_FAILURE_BURST: u32 = 3;

/// The window in which [`ANSWER_FAILURE_BURST`] rejected answers make a burst, counted from
/// the first of them.
pub const ANSWER_FAILURE_WINDOW: Duration = Duration::from_secs(1);

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
    /// When it last went from RDY > 0 to RDY 0 (the low-RDY rotation serves the connection
    /// that has waited longest first).
    released_at: Option<Instant>,
    /// When the application last answered a message on it (for the idle rule).
    answered_at: Option<Instant>,
    /// How many turns it had (RDY from 0 to more, or a turn renewed): the rotation serves
    /// fewer turns first, then the longest waiting. A new connection starts at the fewest
    /// turns of the others, so it neither waits for nor overtakes a whole round.
    turns: u64,
    /// Its low-RDY turn is over but it had just answered: it gives RDY up at its next
    /// message.
    yield_pending: bool,
    /// When the driver connected its socket (the handshake's length estimates round trips).
    connected_at: Option<Instant>,
    /// How long after a lower RDY nsqd may still deliver what it sent before reading it:
    /// the negotiated output_buffer_timeout plus the handshake's duration (two round trips
    /// or more).
    settle: Duration,
    /// Messages nsqd may have sent before it read a lower RDY and that have not arrived:
    /// they count against max_in_flight until they arrive or `settle` has passed.
    transit: u64,
    transit_until: Option<Instant>,
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

    /// Messages delivered on it and not yet answered (nor expired).
    fn unanswered(&self) -> u64 {
        self.conn
            .as_ref()
            .map_or(0, |c| u64::try_from(c.in_flight()).unwrap_or(u64::MAX))
    }

    /// The messages it holds whatever its RDY: unanswered ones, and ones nsqd may still be
    /// sending after a lower RDY (see `transit`). Its share of `max_in_flight` (its
    /// reservation) is `max(RDY, committed)`: a connection whose RDY was lowered keeps the
    /// share of its unanswered messages until they are answered, expire or the connection
    /// ends, and of the messages that may be on the wire until they arrive or `settle` passes.
    fn committed(&self) -> u64 {
        self.unanswered().saturating_add(self.transit)
    }

    /// Sends a lower RDY, and keeps what nsqd may still send under the old one committed.
    fn lower_rdy(&mut self, now: Instant, id: ConnId, target: u32) {
        let current = self.rdy();
        let committed = self.committed();
        let f = self.unanswered();
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        match c.set_rdy(now, target) {
            Ok(()) => {
                self.received_since_rdy = 0;
                let possible = committed.max(u64::from(current));
                self.transit = possible - f;
                if self.transit > 0 {
                    self.transit_until = Some(later(now, self.settle));
                }
                if target == 0 {
                    self.released_at = Some(now);
                    self.yield_pending = false;
                }
            }
            Err(e) => tracing::debug!(%id, error = %e, "RDY not sent"),
        }
    }
}

/// What the low-RDY rotation does with a holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Keep,
    GiveUp,
    AtNextMessage,
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
/// a chance before one of them takes everything. A connection's RDY is re-sent when its
/// remaining count drops to <= 1 or under 25% of the last value.
///
/// # max_in_flight bounds messages in flight, not only RDY
/// Each connection holds a share of `max_in_flight`: `max(RDY, messages delivered on it and
/// not yet answered)`. The sum of the shares never exceeds `max_in_flight`, through joins,
/// leaves, rotation, backoff, [`set_max_in_flight`](Self::set_max_in_flight) and reconnects:
/// lowerings go out before raises, and RDY is raised only out of budget no connection holds,
/// so RDY taken from a connection whose message is still in its handler passes on when that
/// message is answered (expires, or its connection ends), not before. When more messages are
/// unanswered than `max_in_flight` allows (after lowering it), no RDY opens room for a
/// delivery: an answer on such a connection is preceded by a lower RDY. go-nsq bounds only
/// the sum of RDY, so with RDY rotating it lets more messages into handlers than
/// `max_in_flight` (measured on nsqd v1.3.0: 3 in flight with `max_in_flight` 2).
/// Messages nsqd wrote before it read a lower RDY may still be on the wire (or in nsqd's
/// output buffer): after lowering RDY on a connection with fewer messages in flight than its
/// RDY, the difference stays committed until those messages arrive or a settle time passes
/// (the negotiated output_buffer_timeout plus the handshake's duration, at least two round
/// trips). The rotation below mostly avoids the case: it takes RDY from a busy holder (its
/// message in the handler, so nsqd sends nothing more) or from one idle for
/// `low_rdy_idle_timeout`, never right after an answer. What no client controls: a FIN and
/// a RDY sent to two different nsqd may be read in either order, for microseconds. Messages
/// of a connection that was lost are not counted: nsqd has requeued them.
///
/// # Fewer max_in_flight than connections: a rotation in seconds
/// Connections hold RDY 1 in turns. A turn lasts `low_rdy_timeout` (default **2 s**), or ends
/// earlier when the holder had nothing in flight and no message or answer for
/// `low_rdy_idle_timeout` (default **1 s**); a holder whose turn ends just after an answer
/// (its next message may be on the wire) passes RDY on at its next message. The freed turn
/// goes to the connection that has had the fewest turns (a new one counts as having had as
/// few as the others), then the one that has waited longest, random among equals, so the
/// rotation is round-robin: with `w` connections waiting and
/// `m = max_in_flight` turns running, a connection with messages waits at most about
/// `ceil(w / m)` turns. Turns end one at a time, at least `low_rdy_timeout / m` apart, so
/// they stay staggered and every connection holds RDY about as long as the others (turns
/// that ended together let one connection in and the other straight back). Turn ends are
/// exact timers, not a periodic tick.
///
/// go-nsq's defaults (30 s and 10 s, checked every 5 s) let the third of 3 nsqd wait 30 s
/// with `max_in_flight` 2 (measured on nsqd v1.3.0: 30.0 s, every run). The option names are
/// go-nsq's, the defaults are not: with 3 nsqd and `max_in_flight` 2 every nsqd now gets its
/// first message within 2.0 s to 2.1 s on a real nsqd v1.3.0 (a 300 ms handler), and a busy
/// handler (10 ms per message) keeps 0.97x of the old throughput while all three nsqd are
/// served instead of two (BENCHMARKS.md, "Consumer flow control on real nsqd"). A turn change
/// costs about one round trip of idle budget: the busy holder keeps working on its last
/// message while its successor's RDY waits for that answer.
///
/// # Backoff
/// A requeue with backoff raises the level and queues RDY 0 on every connection before the
/// REQ; after `multiplier x 2^level` (capped; optionally fully jittered) one random
/// connection gets RDY 1. The next result decides: a success lowers the level (a new window
/// if still above 0, full RDY at 0), a failure raises it. Results inside a window are ignored.
/// A message given up on (attempts above `max_attempts`, finished automatically) counts as a
/// success, as in go-nsq. A burst of answers nsqd rejects because the messages had already
/// timed out (`E_FIN_FAILED`, `E_REQ_FAILED`, `E_TOUCH_FAILED`: [`ANSWER_FAILURE_BURST`]
/// within [`ANSWER_FAILURE_WINDOW`]) counts as one failure, logged once with the count: a
/// consumer whose handler is slower than msg_timeout slows its intake instead of pulling more
/// messages it would also lose.
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
    /// A planned RDY raise was cut short because the budget was held by unanswered
    /// messages: the next answer re-plans.
    owed: bool,
    /// When a low-RDY turn last ended for its length (not idleness): turns end one at a
    /// time, `low_rdy_timeout / max_in_flight` apart, so they stay staggered.
    last_turn_end: Option<Instant>,
    /// More messages are unanswered than max_in_flight (after it was lowered): answers lower
    /// RDY before they go out (see `before_answer`).
    over_budget: bool,
    /// E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED burst: (start of the window, count).
    answer_failures: Option<(Instant, u32)>,
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
            owed: false,
            last_turn_end: None,
            over_budget: false,
            answer_failures: None,
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
                slot.connected_at = Some(now);
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
        let mut settled = false;
        for slot in self.slots.values_mut() {
            if slot.fresh_until.is_some_and(|t| t <= now) {
                slot.fresh_until = None;
                bootstrapped = true;
            }
            if slot.transit_until.is_some_and(|t| t <= now) {
                slot.transit_until = None;
                slot.transit = 0;
                settled = true;
            }
        }
        if settled && !bootstrapped {
            self.replan_if_owed(now);
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
        self.before_answer(now, conn, id);
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
        self.before_answer(now, conn, id);
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
        let bootstraps = self
            .slots
            .values()
            .flat_map(|s| s.fresh_until.into_iter().chain(s.transit_until));
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
        let id = ConnId::from_raw(self.next_conn);
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
                released_at: None,
                answered_at: None,
                turns: 0,
                yield_pending: false,
                connected_at: None,
                settle: Duration::ZERO,
                transit: 0,
                transit_until: None,
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
                ConnectionEvent::Ready(negotiated) => {
                    let buffered = u64::try_from(negotiated.identify.output_buffer_timeout)
                        .map_or(Duration::ZERO, Duration::from_millis);
                    let handshake = now.saturating_duration_since(slot.connected_at.unwrap_or(now));
                    slot.settle = buffered.saturating_add(handshake).min(MAX_SETTLE);
                    slot.ready_at = Some(now);
                    let fewest = self
                        .slots
                        .iter()
                        .filter(|(other, s)| **other != id && s.ready_at.is_some())
                        .map(|(_, s)| s.turns)
                        .min()
                        .unwrap_or(0);
                    let Some(slot) = self.slots.get_mut(id) else {
                        return;
                    };
                    slot.turns = fewest;
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
                    // Its share of max_in_flight is free again.
                    self.replan_if_owed(now);
                }
                ConnectionEvent::ServerError(error) => {
                    self.on_answer_failed(now, id, &error);
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
        // One of the messages that may have been on the wire arrived.
        slot.transit = slot.transit.saturating_sub(1);
        let was_fresh = slot.fresh_until.take().is_some();
        let turn_over = slot.yield_pending;
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
            // Like go-nsq: the FIN of a message given up on is a success for backoff.
            self.on_success(now);
            self.after_answer(now, id);
        } else {
            self.events
                .push_back(ConsumerEvent::Message { conn: id, message });
        }
        if was_fresh || turn_over {
            self.rebalance(now, turn_over);
        }
    }

    /// After a FIN/REQ on `id`: refill its RDY if the remaining count ran low, hand out the
    /// share the answer freed if a raise is owed, then drain it.
    fn after_answer(&mut self, now: Instant, id: ConnId) {
        if let Some(slot) = self.slots.get_mut(id) {
            slot.answered_at = Some(now);
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
        if self.owed {
            // This connection's bytes (a lowered RDY, the answer) go out before any raise
            // the re-plan queues elsewhere.
            self.flush(id);
            self.replan_if_owed(now);
        }
        self.pump(now, id);
    }

    /// A share of max_in_flight was freed (an answer, an expiry): if a raise is waiting for
    /// budget, plan again.
    fn replan_if_owed(&mut self, now: Instant) {
        if self.owed && !self.closing {
            self.rebalance(now, false);
        }
    }

    /// E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED mean answers arrived after nsqd had
    /// already timed the messages out: the handler is slower than msg_timeout. A burst of
    /// [`ANSWER_FAILURE_BURST`] of them within [`ANSWER_FAILURE_WINDOW`] counts as one
    /// handler failure for backoff, so a consumer that cannot keep up slows its intake.
    fn on_answer_failed(&mut self, now: Instant, id: ConnId, error: &ServerError) {
        if !matches!(
            error.code(),
            ErrorCode::FinFailed | ErrorCode::ReqFailed | ErrorCode::TouchFailed
        ) {
            return;
        }
        let (start, count) = match self.answer_failures {
            Some((start, count))
                if now.saturating_duration_since(start) < ANSWER_FAILURE_WINDOW =>
            {
                (start, count.saturating_add(1))
            }
            _ => (now, 1),
        };
        self.answer_failures = Some((start, count));
        if count == ANSWER_FAILURE_BURST {
            tracing::warn!(
                %id,
                count,
                window = ?ANSWER_FAILURE_WINDOW,
                "answers rejected by nsqd (messages already timed out): the handler is slower \
                 than msg_timeout; backing off"
            );
            self.on_failure(now);
        }
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
        let probe_tick = self.backoff_level > 0 && self.backoff_until.is_none() && n > 1;
        if self.closing {
            self.next_redistribute = None;
        } else if low_mode && m > 0 {
            self.next_redistribute = Some(self.next_rotation(now, &ready));
        } else if probe_tick {
            if self.next_redistribute.is_none() {
                self.next_redistribute = Some(later(now, self.config.rdy_redistribute_interval));
            }
        } else {
            self.next_redistribute = None;
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

    /// When a RDY holder with nothing in flight counts as idle: `low_rdy_idle_timeout` after
    /// its last message, its last answer or its grant, whichever is latest. `None` while it
    /// has messages in flight (busy, not idle).
    fn idle_deadline(&self, id: ConnId) -> Option<Instant> {
        let slot = self.slots.get(id)?;
        let c = slot.conn.as_ref()?;
        if c.in_flight() > 0 {
            return None;
        }
        let since = [c.last_message_at(), slot.granted_at, slot.answered_at]
            .into_iter()
            .flatten()
            .max()?;
        Some(later(since, self.config.low_rdy_idle_timeout))
    }

    /// What the low-RDY rotation does with a holder of RDY at `now`.
    fn turn_verdict(&self, now: Instant, id: ConnId) -> Turn {
        let Some(slot) = self.slots.get(id) else {
            return Turn::Keep;
        };
        if self.idle_deadline(id).is_some_and(|t| t <= now) {
            return Turn::GiveUp;
        }
        let over = slot.granted_at.is_some_and(|g| self.turn_end(g) <= now);
        if !over {
            return Turn::Keep;
        }
        let in_flight = slot.conn.as_ref().map_or(0, Connection::in_flight);
        if in_flight >= slot.rdy() as usize {
            // Busy: its RDY 0 goes out before the answer, so nsqd sends it nothing more and
            // the share passes on when the answer frees it.
            Turn::GiveUp
        } else {
            // It answered and its next message may be on the wire: taking RDY now could let
            // that message and the next holder's overlap. It gives up at its next message
            // (or when idle).
            Turn::AtNextMessage
        }
    }

    /// When a turn granted at `granted` ends: after `low_rdy_timeout`, and not sooner than
    /// `low_rdy_timeout / max_in_flight` after the previous turn ended.
    fn turn_end(&self, granted: Instant) -> Instant {
        let end = later(granted, self.config.low_rdy_timeout);
        let spacing = self.config.low_rdy_timeout / self.max_in_flight.max(1);
        self.last_turn_end
            .map_or(end, |last| end.max(later(last, spacing)))
    }

    /// The next instant the low-RDY rotation must look again: the earliest end of a turn or
    /// idle deadline among the holders.
    fn next_rotation(&self, now: Instant, ready: &[ConnId]) -> Instant {
        let mut next: Option<Instant> = None;
        for id in ready {
            let slot = &self.slots[id];
            if slot.rdy() == 0 {
                continue;
            }
            let turn_end = slot
                .granted_at
                .filter(|_| !slot.yield_pending)
                .map(|g| self.turn_end(g));
            for t in turn_end.into_iter().chain(self.idle_deadline(*id)) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        // No holder (the budget is held by unanswered messages; their answers re-plan): look
        // again after a redistribution interval anyway.
        next.unwrap_or_else(|| later(now, self.config.rdy_redistribute_interval))
            .max(now)
    }

    /// max_in_flight < connections: RDY 1 held in turns of `low_rdy_timeout` (shorter when
    /// idle for `low_rdy_idle_timeout`); a freed turn goes to the connection that has waited
    /// longest (never served first, ties broken at random), so the rotation is round-robin.
    fn plan_low(
        &mut self,
        now: Instant,
        ready: &[ConnId],
        targets: &mut [u32],
        redistribute: bool,
    ) {
        let m = self.max_in_flight as usize;
        let mut taken = vec![false; ready.len()];
        // Turns end one at a time: only the longest-held of the holders whose turn is over
        // (idle holders give up regardless).
        let mut ending: Option<(Instant, usize, Turn)> = None;
        for (i, id) in ready.iter().enumerate() {
            if self.slots[id].rdy() == 0 {
                continue;
            }
            targets[i] = 1;
            if !redistribute {
                continue;
            }
            let slot = &self.slots[id];
            if slot.yield_pending && slot.unanswered() >= u64::from(slot.rdy()) {
                // Its turn ended just after an answer; now its next message is here.
                targets[i] = 0;
                taken[i] = true;
                continue;
            }
            let verdict = self.turn_verdict(now, *id);
            if verdict == Turn::Keep {
                continue;
            }
            if self.idle_deadline(*id).is_some_and(|t| t <= now) {
                targets[i] = 0;
                taken[i] = true;
                continue;
            }
            let granted = self.slots[id].granted_at.unwrap_or(now);
            if ending.is_none_or(|(g, _, _)| granted < g) {
                ending = Some((granted, i, verdict));
            }
        }
        if let Some((_, i, verdict)) = ending {
            self.last_turn_end = Some(now);
            if verdict == Turn::GiveUp {
                targets[i] = 0;
                taken[i] = true;
            } else if let Some(slot) = self.slots.get_mut(ready[i]) {
                slot.yield_pending = true;
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
        // Waited longest first (never served counts as longest), random among equals.
        let mut candidates: Vec<usize> = (0..ready.len())
            .filter(|&i| targets[i] == 0 && !taken[i])
            .collect();
        for k in (1..candidates.len()).rev() {
            let j = self.rng.index(k + 1);
            candidates.swap(k, j);
        }
        candidates.sort_by_key(|&i| {
            let s = &self.slots[&ready[i]];
            (s.turns, s.released_at)
        });
        // Holders whose turn ended at this same instant: the one with fewer turns goes on.
        let mut again: Vec<usize> = (0..ready.len()).filter(|&i| taken[i]).collect();
        for k in (1..again.len()).rev() {
            let j = self.rng.index(k + 1);
            again.swap(k, j);
        }
        again.sort_by_key(|&i| self.slots[&ready[i]].turns);
        for i in candidates.into_iter().chain(again) {
            if free == 0 {
                break;
            }
            targets[i] = 1;
            free -= 1;
            if taken[i] {
                // Nobody else wants the turn: a new one starts for the same holder.
                if let Some(slot) = self.slots.get_mut(ready[i]) {
                    slot.granted_at = Some(now);
                    slot.turns += 1;
                    slot.yield_pending = false;
                }
            }
        }
    }

    /// Sends the planned RDY values, each cut to the budget: a connection's reservation is
    /// `max(RDY, unanswered messages)` (see [`Slot::unanswered`]) and the unanswered
    /// messages cannot be taken back, so RDY above a connection's unanswered messages is
    /// granted only out of `max_in_flight` minus every connection's unanswered messages and
    /// the RDY granted before it (holders first, then raises). Every lowering goes out before
    /// any raise. A target cut short is owed: the answer that frees budget plans again.
    fn apply(&mut self, now: Instant, ready: &[ConnId], targets: &[u32]) {
        let m = u64::from(self.max_in_flight);
        // A lowered RDY frees nothing yet: what nsqd may have sent under it stays committed
        // (`Slot::transit`), so the budget counts every connection's current RDY.
        let committed: u64 = self.slots.values().map(Slot::committed).sum();
        let reserved: u64 = self
            .slots
            .values()
            .map(|s| s.committed().max(u64::from(s.rdy())))
            .sum();
        let mut free = m.saturating_sub(reserved);
        // At or over the limit with what is committed alone, no RDY may leave room for one
        // more delivery anywhere.
        let full = committed >= m;
        let mut owed = false;
        let grants: Vec<u32> = ready
            .iter()
            .zip(targets)
            .map(|(id, &target)| {
                let slot = &self.slots[id];
                let current = slot.rdy();
                let held = slot.committed();
                let mut grant = target;
                if target > current {
                    let base = held.max(u64::from(current));
                    let given = u64::from(target).saturating_sub(base).min(free);
                    free -= given;
                    grant = u32::try_from(base + given).map_or(target, |g| g.min(target));
                }
                if full {
                    grant = grant.min(u32::try_from(held).unwrap_or(u32::MAX));
                }
                owed |= grant < target;
                grant
            })
            .collect();
        self.over_budget = committed > m;
        self.owed = owed || self.over_budget;
        for pass in [true, false] {
            for (id, &grant) in ready.iter().zip(&grants) {
                let Some(slot) = self.slots.get_mut(*id) else {
                    continue;
                };
                let current = slot.rdy();
                if grant == current || (grant < current) != pass {
                    continue;
                }
                if grant < current {
                    slot.lower_rdy(now, *id, grant);
                    self.flush(*id);
                    continue;
                }
                let Some(c) = slot.conn.as_mut() else {
                    continue;
                };
                match c.set_rdy(now, grant) {
                    Ok(()) => {
                        slot.received_since_rdy = 0;
                        if current == 0 {
                            slot.granted_at = Some(now);
                            slot.turns += 1;
                            slot.yield_pending = false;
                        }
                    }
                    Err(e) => tracing::debug!(conn = %id, error = %e, "RDY not sent"),
                }
                self.flush(*id);
            }
        }
    }

    /// Before an answer to message `id` on `conn` goes out: while more messages are
    /// unanswered than `max_in_flight` allows (it was lowered, or RDY moved), an answer must
    /// not open room for a delivery, so RDY on `conn` is lowered first, on the wire ahead of
    /// the FIN/REQ.
    fn before_answer(&mut self, now: Instant, conn: ConnId, id: &MessageId) {
        if !self.over_budget {
            return;
        }
        let committed: u64 = self.slots.values().map(Slot::committed).sum();
        if committed <= u64::from(self.max_in_flight) {
            return;
        }
        let Some(slot) = self.slots.get_mut(conn) else {
            return;
        };
        let rdy = slot.rdy();
        let Some(c) = slot.conn.as_ref() else {
            return;
        };
        let f = c.in_flight();
        if !c.is_in_flight(id) || rdy == 0 || (rdy as usize) < f {
            return;
        }
        let lower = u32::try_from(f - 1).unwrap_or(0).min(rdy);
        slot.lower_rdy(now, conn, lower);
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
            let id = LookupdRequestId::from_raw(self.next_request);
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
        let ghost = ConnId::from_raw(99);
        assert_eq!(
            c.finish(now, ghost, &MessageId::new(*b"0123456789abcdef")),
            Err(ConsumerError::UnknownConnection(ghost))
        );
        assert_eq!(ghost.to_string(), "conn#99");
        assert_eq!(LookupdRequestId::from_raw(3).to_string(), "lookup#3");
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
