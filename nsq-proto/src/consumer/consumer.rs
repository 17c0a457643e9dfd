//! The coordinator: [`Consumer`], its public API, and the dispatch of every input to the
//! connection it names and to the parts that act on it ([`FlowControl`] for RDY and backoff,
//! [`Discovery`] for the nsqd and lookupd sets), which share the state in [`Shared`].

use super::adaptive::{Adaptive, Change};
use super::beyond;
use super::config::{ConsumerConfig, InFlightMode};
use super::discovery::Discovery;
use super::events::{ConsumerError, ConsumerEvent};
use super::flow::FlowControl;
use super::lookupd::LookupdAddress;
use super::policy;
use super::shared::Shared;
use super::slots::Slot;
use super::stats::{ConsumerStats, Counts};
use super::timers::Deadline;
#[cfg(doc)]
use super::{ANSWER_FAILURE_BURST, ANSWER_FAILURE_WINDOW};
use crate::addr::valid_host_port;
use crate::connection::{CloseReason, Connection, ConnectionEvent, Role};
use crate::deadline::later;
use crate::driver::{Action, ConnId, LookupdRequestId};
use crate::frame::{Message, MessageId};
use crate::names::{Channel, Topic};
use bytes::BytesMut;
use std::time::{Duration, Instant};

/// How long after the adaptive limit went down messages already on the wire are still handed
/// out up to the limit before (a few round trips and nsqd's output buffer timeout).
pub const GRACE: Duration = Duration::from_secs(1);

/// The consumer-level state machine: many nsqd connections for one topic/channel.
///
/// It owns a [`Connection`] per nsqd, distributes RDY over them, applies backoff, the attempts
/// policy and requeue delays, discovers nsqd through nsqlookupd (the HTTP exchange is sans-IO as
/// well), reconnects, and shuts down gracefully. It does no IO: it is driven by the crate's
/// [driver contract](crate::driver), opening and closing sockets as its [`Action`]s say, and
/// the [module docs](super) drive one from the start.
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
/// # max_in_flight bounds what the application holds
/// Messages handed out and not yet answered never exceed `max_in_flight`, through joins,
/// leaves, rotation, backoff, [`set_max_in_flight`](Self::set_max_in_flight) and reconnects
/// (go-nsq bounds only the sum of RDY). Each connection holds a share, `max(RDY, messages
/// delivered on it and not yet answered)`, and the shares never sum above `max_in_flight`:
/// lowerings go out before raises, RDY is raised only out of budget no connection holds, and
/// a lowered RDY stays committed until the messages nsqd may already have written arrive or a
/// settle time passes. A message whose connection was lost, or which expired, keeps its share
/// until the application answers it (the answer then fails). One case stays uncounted: a
/// message that expired and came back on the same connection, answered twice. What no client
/// controls: a FIN and a RDY sent to two different nsqd may be read in either order, and a
/// message nsqd wrote before it read a lowered RDY may arrive after the settle time, its share
/// given on: it goes back at once, unseen ([`ConsumerStats::returned`] says what it costs).
///
/// # RDY
/// With `max_in_flight >= connections`, every ready connection gets `max_in_flight / n`
/// (capped at its max_rdy_count), the remainder round-robin, each connection's unanswered
/// messages counting in its share. A new connection starts at RDY 1 and gets its share after
/// its first message or after `rdy_redistribute_interval`, so connections discovered together
/// all get a chance. A connection's RDY is re-sent when its remaining count drops to <= 1 or
/// under 25% of the last value.
///
/// # Fewer max_in_flight than connections: a rotation
/// Connections hold RDY 1 in turns, round-robin: the line is served in the order of the
/// connections' last turns (granted longest ago first, then released longest ago), and a
/// connection joins it at its head's place. Turns are sized so that every connection with
/// messages gets one within `low_rdy_max_wait` (default 10 s), as far as the handlers allow:
/// a round (each ready connection one turn, over the seats, max_in_flight less the shares
/// held by messages outside turns) is to take half of it, the other half being slack for turn
/// changes. A connection whose last turn found its nsqd empty counts for its idle wait, a busy
/// one for a turn, so a turn lasts `(low_rdy_max_wait / 2 x seats - idle time) / busy` (with
/// every nsqd busy, `low_rdy_max_wait / 2 x seats / connections`), never longer than
/// `low_rdy_timeout` (default 2 s), never shorter than 10 ms; when probing the idle ones
/// takes the whole round, busy turns still get as much seat time as the probes. Turns that
/// are over end one at a time, a turn's length over the seats apart, by exact timers.
///
/// A turn ends sooner when its holder is idle for `low_rdy_idle_timeout` (less on a short
/// round trip), or, while others wait, once it has delivered its share: as many messages as
/// a busy turn delivers in the turn's length at the pace measured between a holder's
/// messages, at least one, so a holder served faster than the others passes on sooner. A
/// busy turn ends at a message, so it costs at most two RDY commands per message it delivers
/// (RDY 1 and RDY 0, and a RDY 1 re-sent after each answer in between). A turn change looks at the holder and the first in line only, and costs
/// about one round trip of idle budget (the busy holder's last message keeps its share until
/// answered). The bound holds only as far as the handlers allow: a turn cannot be shorter
/// than its first message's round trip and handler, nor an idle one than its idle wait, so
/// with very many nsqd per max_in_flight the handlers' and the round trips' speed set the
/// wait. The same rotation serves the connections when shares held where no RDY can use
/// them leave too few for all.
///
/// # Backoff
/// A requeue with backoff raises the level and queues RDY 0 on every connection before the
/// REQ; after `multiplier x 2^level` (capped; optionally fully jittered) one connection gets
/// RDY 1 (one that received a message since it last held this probe, the latest first, else
/// the one that held it longest ago; an idle probe moves on). Its next result decides: a
/// success lowers the level, a failure raises it; results inside a window are ignored. A
/// message given up on (attempts above `max_attempts`, finished automatically) counts as a
/// success, as in go-nsq. A burst of answers nsqd rejects as timed out ([`ANSWER_FAILURE_BURST`]
/// within [`ANSWER_FAILURE_WINDOW`]) counts as one failure, logged once.
///
/// # An adaptive limit
/// With [`InFlightMode::Adaptive`] (go-style option `max_in_flight_mode = adaptive`),
/// `max_in_flight` is a ceiling and `min_in_flight` a floor; between them the consumer finds
/// the limit itself, from each message's handling latency (hand-out to answer: the
/// handler's time, including any wait for what it calls) and outcome. Everything above
/// (the exact bound, RDY, the rotation) then holds against that limit
/// ([`in_flight_limit`](Self::in_flight_limit), [`ConsumerStats::in_flight_limit`],
/// [`ConsumerEvent::InFlightLimitChanged`]), with one allowance: for a second after the limit
/// went down, messages nsqd had already written under the higher RDY are handed out up to
/// the limit before, rather than sent back to the end of nsqd's queue (the lowered RDY lets
/// no new ones come). `max_in_flight` itself is never exceeded.
///
/// * **When to use it**: the handlers call something of limited capacity (a database, a
///   service, a disk) whose capacity you do not know, or which changes (deploys, noisy
///   neighbours, time of day). Beyond that capacity more messages in flight only queue in
///   front of it: latency grows, messages time out on nsqd and come back as duplicates, and
///   a service that slows down under load collapses.
/// * **What it converges to**: the knee, where the handlers' downstream is kept busy and
///   nothing queues in front of it (a window's mean latency within 5% of the uncongested
///   latency): about the capacity, plus what is on the wire to and from nsqd when its round
///   trip is not small beside the service time. It starts at the floor and doubles until
///   latency grows, so it gets there within a few latencies; it follows the capacity when
///   it halves or doubles, and re-measures the uncongested latency now and then (one window
///   at 85% of the limit; the first a second after start-up when the latency is short). It
///   holds the mean, not the tail: at the knee up to about 5% of the messages may wait for a
///   slot, and where the downstream frees its slots in waves (every operation taking the
///   same time) they wait a whole service time, so p99 can reach twice the uncongested
///   latency while p50 stays at it (BENCHMARKS.md). Where a p99 bound matters more than the
///   last few percent of throughput, set `max_in_flight` (the ceiling) at the capacity.
/// * **Backoff** stays as it is and the two do not fight: while the consumer backs off the
///   limit is frozen and nothing is measured. A message that expires (nsqd's msg_timeout)
///   halves the limit; a window in which more than 10% of the answers are requeues lowers it
///   by 10%.
/// * **Below the number of connections** the rotation serves them with the limit as
///   `max_in_flight`; the limit only moves by what the handlers' latency says.
/// * **Handlers that do not wait on anything** (CPU-bound): latency then grows with the
///   number of handlers the runtime runs at once, and the limit settles where that begins.
///   Without such a bound, a static `max_in_flight` is the better choice.
///
/// The limit's algorithm (a gradient over a re-measured minimum latency, as Envoy's adaptive
/// concurrency filter and Netflix's Gradient2 do, computed on what the application holds by
/// Little's law) is O(1) per answer and deterministic; the simulator's `--downstream` mode
/// measures it (SIMULATION.md).
///
/// # Discovery
/// Every lookupd is polled each round; the producers they list are unioned and new ones are
/// connected. Directly added nsqd are reconnected on an exponential schedule and never
/// forgotten; a discovered nsqd is reconnected only when a lookupd answer sent after its
/// connection ended still lists it, and forgotten once it has no connection and no lookupd's
/// latest *successful* answer lists it (a lookupd that is down never makes the consumer forget
/// an nsqd). [`ConsumerStats::known_nsqd`] counts what is kept.
///
/// Figures (flow control on a real nsqd against go-nsq's rules, the reader's cost) are in the
/// repository's BENCHMARKS.md; the invariants above are checked by the simulator
/// (SIMULATION.md).
#[derive(Debug)]
pub struct Consumer {
    topic: Topic,
    channel: Channel,
    /// Configuration, randomness, connections, timers, closing flag and output queues.
    shared: Shared,
    /// RDY distribution and backoff.
    flow: FlowControl,
    /// The adaptive limit ([`InFlightMode::Adaptive`]).
    adaptive: Option<Adaptive>,
    /// After the adaptive limit went down: the limit before, until this instant. Messages
    /// nsqd wrote under the RDY of the higher limit (on the wire when RDY went down) are
    /// still handed out up to it, rather than sent back to the end of nsqd's queue; the
    /// lowered RDY lets no new ones come.
    grace: Option<(u32, Instant)>,
    /// The nsqd and lookupd sets, reconnects.
    discovery: Discovery,
    closed_emitted: bool,
    /// Messages still unanswered when their connection closed while closing (reported in
    /// [`ConsumerEvent::Closed`]).
    leftovers: usize,
    // stats
    received: u64,
    finished: u64,
    requeued: u64,
    gave_up: u64,
    returned: u64,
}

impl Consumer {
    /// A consumer of `topic`/`channel`, with randomness (jitter, random connection choice)
    /// drawn from a generator seeded with `seed`. It does nothing until nsqd or lookupd
    /// addresses are added.
    pub fn new(config: ConsumerConfig, topic: Topic, channel: Channel, seed: u64) -> Consumer {
        let mut shared = Shared::new(config, seed);
        // The adaptive limit's jitter: a generator forked from the consumer's (in the
        // adaptive mode only, so the static mode's draws are as they were).
        let adaptive = (shared.config.max_in_flight_mode == InFlightMode::Adaptive).then(|| {
            let c = &shared.config;
            Adaptive::new(c.min_in_flight, c.max_in_flight, shared.rng.fork())
        });
        let limit = adaptive
            .as_ref()
            .map_or(shared.config.max_in_flight, Adaptive::limit);
        Consumer {
            flow: FlowControl::new(limit),
            adaptive,
            grace: None,
            topic,
            channel,
            shared,
            discovery: Discovery::new(),
            closed_emitted: false,
            leftovers: 0,
            received: 0,
            finished: 0,
            requeued: 0,
            gave_up: 0,
            returned: 0,
        }
    }

    // ---------------------------------------------------------------- queries

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.shared.config
    }

    /// The current `max_in_flight` (changed by [`set_max_in_flight`](Self::set_max_in_flight)):
    /// the limit, or in the adaptive mode its ceiling.
    #[inline]
    pub fn max_in_flight(&self) -> u32 {
        self.adaptive
            .as_ref()
            .map_or(self.flow.max_in_flight(), Adaptive::ceiling)
    }

    /// The in-flight limit in force: `max_in_flight`, or in the adaptive mode the limit it
    /// found (between `min_in_flight` and `max_in_flight`).
    #[inline]
    pub fn in_flight_limit(&self) -> u32 {
        self.flow.max_in_flight()
    }

    /// In the adaptive mode, the handling latency the limit is measured against (the median
    /// at a limit where nothing queues), once measured.
    pub fn uncongested_latency(&self) -> Option<Duration> {
        self.adaptive.as_ref().and_then(Adaptive::baseline)
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
        self.counters_into(out);
        self.discovery
            .nsqd_stats_into(&self.shared.slots, &mut out.nsqd);
    }

    /// [`stats_into`](Self::stats_into) without the per-nsqd rows (`nsqd` is left as it
    /// is): every total, in time independent of the number of connections (running sums), so
    /// a driver can publish them after every round however many nsqd there are.
    pub fn counters_into(&self, out: &mut ConsumerStats) {
        let live = self.shared.slots.live_counts();
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        out.received = self.received;
        out.finished = self.finished;
        out.requeued = self.requeued;
        out.gave_up = self.gave_up;
        out.returned = self.returned;
        out.unanswered_elsewhere = count(self.shared.ghost_shares);
        out.connections = count(live.ready);
        out.backoff_level = self.flow.backoff_level();
        out.in_flight_limit = self.flow.max_in_flight();
        out.total_rdy = live.rdy;
        out.known_nsqd = self.discovery.known();
        out.in_flight = count(live.in_flight);
        out.reconnects = self.discovery.reconnects();
    }

    /// True when any ready connection has messages in flight amounting to at least 85% of its
    /// last RDY: a batching handler should flush now rather than wait for more.
    /// In time independent of the number of connections (a running count).
    #[inline]
    pub fn is_starved(&self) -> bool {
        self.shared.slots.live_counts().starved > 0
    }

    /// The current backoff level (0 = full speed).
    #[inline]
    pub fn backoff_level(&self) -> u32 {
        self.flow.backoff_level()
    }

    /// True while a backoff window is running (all RDY 0).
    pub fn in_backoff_window(&self) -> bool {
        self.shared.timers.is_set(Deadline::Backoff)
    }

    /// True once [`close`](Self::close) was called.
    #[inline]
    pub fn is_closing(&self) -> bool {
        self.shared.closing
    }

    /// True once the [`ConsumerEvent::Closed`] event was emitted.
    pub fn is_closed(&self) -> bool {
        self.closed_emitted
    }

    /// The connections the consumer currently knows (connecting, handshaking, ready or
    /// draining), with their nsqd address.
    pub fn connections(&self) -> impl Iterator<Item = (ConnId, &str)> + '_ {
        self.shared
            .slots
            .iter()
            .map(|(id, s)| (*id, s.addr.as_str()))
    }

    /// The connection state machine behind `conn`, once the socket is connected.
    pub fn connection(&self, conn: ConnId) -> Option<&Connection> {
        self.shared.slots.get(conn).and_then(|s| s.conn.as_ref())
    }

    /// The RDY count last sent on `conn` (0 while it is not ready).
    pub fn rdy(&self, conn: ConnId) -> u32 {
        self.shared.slots.get(conn).map_or(0, Slot::rdy)
    }

    // ---------------------------------------------------------------- inputs

    /// The driver connected the socket of `conn`: the handshake starts (magic and IDENTIFY are
    /// queued).
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        let role = Role::Consumer {
            topic: self.topic.clone(),
            channel: self.channel.clone(),
        };
        let Some(slot) = self.shared.slots.get_mut(conn) else {
            return;
        };
        if slot.conn.is_some() {
            return;
        }
        match Connection::new(self.shared.config.connection.clone(), role, &slot.addr, now) {
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
        if self.shared.slots.contains_key(conn) {
            self.drop_slot(now, conn, reason, 0);
        }
    }

    /// Bytes read from `conn`'s socket. All of `data` is consumed.
    pub fn handle_input(&mut self, now: Instant, conn: ConnId, data: &mut BytesMut) {
        let Some(c) = self
            .shared
            .slots
            .get_mut(conn)
            .and_then(|s| s.conn.as_mut())
        else {
            data.clear();
            return;
        };
        c.handle_input(now, data);
        self.pump(now, conn);
        // Only arrivals can fill the budget (an answer empties it).
        self.flow.after_deliveries(now, &mut self.shared);
    }

    /// `conn`'s socket reached EOF or failed: the connection is gone.
    pub fn handle_eof(&mut self, now: Instant, conn: ConnId) {
        let Some(slot) = self.shared.slots.get_mut(conn) else {
            return;
        };
        match slot.conn.as_mut() {
            Some(c) => {
                c.handle_eof(now);
                self.pump(now, conn);
                if self.shared.slots.contains_key(conn) {
                    let leftovers = self.in_flight(conn);
                    self.drop_slot(now, conn, "connection lost", leftovers);
                }
            }
            None => self.drop_slot(now, conn, "connection lost while connecting", 0),
        }
    }

    /// Bytes of a lookupd response.
    pub fn handle_lookupd_input(&mut self, now: Instant, request: LookupdRequestId, data: &[u8]) {
        self.discovery
            .handle_lookupd_input(now, request, data, &mut self.shared);
    }

    /// The lookupd closed the response stream.
    pub fn handle_lookupd_eof(&mut self, now: Instant, request: LookupdRequestId) {
        self.discovery
            .handle_lookupd_eof(now, request, &mut self.shared);
    }

    /// The driver could not complete the lookupd exchange (connect refused, IO error).
    pub fn handle_lookupd_failed(&mut self, now: Instant, request: LookupdRequestId, reason: &str) {
        self.discovery
            .handle_lookupd_failed(now, request, reason, &mut self.shared);
    }

    /// Time has reached (or passed) [`poll_timeout`](Self::poll_timeout).
    pub fn handle_timeout(&mut self, now: Instant) {
        // The connections with a deadline due (from the deadline index, not a scan): their
        // own timers (heartbeat liveness, message expiry, drain deadline), then flow
        // control's (bootstrap, settle).
        let mut due = self.shared.take_ids();
        self.shared.slots.due_at(now, &mut due);
        for &id in &due {
            let conn_due = self
                .shared
                .slots
                .get(id)
                .and_then(|s| s.conn.as_ref())
                .and_then(Connection::poll_timeout)
                .is_some_and(|t| t <= now);
            if !conn_due {
                continue;
            }
            if let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
                c.handle_timeout(now);
                self.pump(now, id);
            }
        }
        if self.shared.timers.is_expired(Deadline::Close, now) {
            self.force_close(now);
        }
        self.flow.handle_timeout(now, &due, &mut self.shared);
        self.shared.give_ids(due);
        self.discovery
            .handle_timeout(now, &self.topic, &mut self.shared);
    }

    // ---------------------------------------------------------------- commands

    /// Finishes a message delivered on `conn` (FIN). Counts as a success for backoff.
    pub fn finish(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: &MessageId,
    ) -> Result<(), ConsumerError> {
        self.forget_ghost(now, conn, id);
        let handed = self.handed_at(conn, id);
        self.flow.before_answer(now, conn, id, &mut self.shared);
        self.connection_mut(conn)?.finish(now, id)?;
        self.finished += 1;
        self.answered(conn, |c| c.finished += 1);
        // Backoff first: leaving backoff re-plans RDY, which makes a refill unnecessary.
        self.flow.on_success(now, &mut self.shared);
        self.adapt(now, handed, true);
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
        let config = &self.shared.config;
        let delay = delay
            .unwrap_or_else(|| {
                policy::requeue_delay(
                    attempts,
                    config.default_requeue_delay,
                    config.max_requeue_delay,
                )
            })
            .min(config.connection.limits.max_req_timeout);
        self.forget_ghost(now, conn, id);
        let c = self.connection_mut(conn)?;
        if !c.is_in_flight(id) {
            // Let the connection produce its own misuse error (nothing is sent). Should it
            // accept the REQ after all, it counts as a requeue without backoff.
            c.requeue(now, id, delay)?;
            self.requeued += 1;
            self.answered(conn, |c| c.requeued += 1);
            self.after_answer(now, conn);
            return Ok(());
        }
        let handed = self.handed_at(conn, id);
        if backoff {
            // RDY 0 everywhere is queued before the REQ that caused it.
            self.flow.on_failure(now, &mut self.shared);
        }
        self.flow.before_answer(now, conn, id, &mut self.shared);
        self.connection_mut(conn)?.requeue(now, id, delay)?;
        self.requeued += 1;
        self.answered(conn, |c| c.requeued += 1);
        self.adapt(now, handed, false);
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

    /// Changes `max_in_flight` at runtime; 0 pauses the consumer (RDY 0 everywhere). In the
    /// adaptive mode it is the ceiling: the limit stays where it was if it is below.
    pub fn set_max_in_flight(&mut self, now: Instant, max_in_flight: u32) {
        let limit = match self.adaptive.as_mut() {
            Some(a) => {
                a.set_ceiling(now, max_in_flight);
                a.limit()
            }
            None => max_in_flight,
        };
        self.flow.set_max_in_flight(now, limit, &mut self.shared);
    }

    /// The most messages the application may hold when one more is handed out: the limit,
    /// or for a while after the adaptive limit went down, the limit before (see `grace`).
    fn hand_out_bound(&self, now: Instant) -> u64 {
        let limit = self.flow.max_in_flight();
        let grace = self
            .grace
            .filter(|g| now < g.1)
            .map_or(0, |g| g.0.min(self.max_in_flight()));
        u64::from(limit.max(grace))
    }

    /// When the message `id` of `conn` was handed out, if the adaptive limit wants it.
    fn handed_at(&self, conn: ConnId, id: &MessageId) -> Option<Instant> {
        self.adaptive.as_ref()?;
        self.shared
            .slots
            .get(conn)
            .and_then(|s| s.conn.as_ref())
            .and_then(|c| c.delivered_at(id))
    }

    /// Feeds an answer to the adaptive limit (`handed`: from [`Consumer::handed_at`]).
    fn adapt(&mut self, now: Instant, handed: Option<Instant>, ok: bool) {
        let (Some(handed), Some(a)) = (handed, self.adaptive.as_mut()) else {
            return;
        };
        if self.flow.backoff_level() > 0 || self.shared.closing {
            a.hold();
            return;
        }
        a.resume(now);
        let held = self.shared.handed_total + self.shared.ghost_shares + 1;
        if let Some(change) = a.on_answer(now, handed, held, ok) {
            self.limit_changed(now, change);
        }
    }

    fn limit_changed(&mut self, now: Instant, change: Change) {
        let before = self.flow.max_in_flight();
        if change.limit < before {
            let bound = self
                .grace
                .filter(|g| now < g.1)
                .map_or(before, |g| g.0.max(before));
            self.grace = Some((bound, later(now, GRACE)));
        }
        self.flow
            .set_max_in_flight(now, change.limit, &mut self.shared);
        self.shared
            .events
            .push_back(ConsumerEvent::InFlightLimitChanged {
                limit: change.limit,
                latency: change.latency,
                uncongested: change.baseline,
            });
    }

    /// Adds an nsqd TCP address (`host:port`) to connect to directly; it is reconnected with
    /// exponential backoff after failures. Adding a known address does nothing.
    pub fn add_nsqd(&mut self, now: Instant, addr: &str) -> Result<(), ConsumerError> {
        let _ = now;
        if self.shared.closing {
            return Err(ConsumerError::Closing);
        }
        let addr = addr.trim();
        if !valid_host_port(addr) {
            return Err(ConsumerError::InvalidAddress(addr.to_string()));
        }
        self.discovery.add_nsqd(addr, &mut self.shared);
        Ok(())
    }

    /// Adds an nsqlookupd (`host:port` or `http://host:port[/path]`) to poll; the next poll
    /// happens at once.
    pub fn add_lookupd(&mut self, now: Instant, addr: &str) -> Result<(), ConsumerError> {
        if self.shared.closing {
            return Err(ConsumerError::Closing);
        }
        let addr = LookupdAddress::parse(addr).map_err(ConsumerError::InvalidLookupd)?;
        self.discovery.add_lookupd(now, addr, &mut self.shared);
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
        if self.shared.closing {
            return Err(ConsumerError::Closing);
        }
        let addr = addr.trim();
        if !valid_host_port(addr) {
            return Err(ConsumerError::InvalidAddress(addr.to_string()));
        }
        if let Some(id) = self.discovery.disconnect_from_nsqd(addr, &self.shared)? {
            self.close_connection(now, id);
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
        if self.shared.closing {
            return Err(ConsumerError::Closing);
        }
        let input = addr.trim();
        let addr = LookupdAddress::parse(input).map_err(ConsumerError::InvalidLookupd)?;
        self.discovery
            .disconnect_from_lookupd(input, &addr, &mut self.shared)
    }

    /// Closes one connection gracefully (CLS and drain, or at once if not subscribed yet) and
    /// hands its RDY to the others.
    fn close_connection(&mut self, now: Instant, id: ConnId) {
        match self.shared.slots.get_mut(id).map(|s| s.conn.as_mut()) {
            None => {}
            Some(None) => self.drop_slot(now, id, "disconnected while connecting", 0),
            Some(Some(_)) => {
                if let Some(slot) = self.shared.slots.get_mut(id) {
                    // What nsqd sent under the RDY before it reads the CLS may still arrive:
                    // it stays committed, as after a lower RDY, so no RDY elsewhere is raised
                    // into its share (it would arrive with the application full, and go back).
                    slot.keep_transit(now);
                    if let Some(c) = slot.conn.as_mut() {
                        c.close(now);
                    }
                }
                self.pump(now, id);
                self.flow.forget(id);
                self.flow.rebalance(now, false, &mut self.shared);
            }
        }
    }

    /// Starts a graceful shutdown: CLS on every connection, in-flight messages can still be
    /// answered; connections close when drained or after `close_timeout`. No new connections
    /// or lookupd queries. One [`ConsumerEvent::Closed`] follows.
    pub fn close(&mut self, now: Instant) {
        if self.shared.closing {
            return;
        }
        self.shared.closing = true;
        let deadline = later(now, self.shared.config.close_timeout);
        self.shared.timers.set(Deadline::Close, deadline);
        self.shared.timers.stop(Deadline::Redistribute);
        self.shared.timers.stop(Deadline::Backoff);
        self.discovery.close(&mut self.shared);
        let ids: Vec<ConnId> = self.shared.slots.keys().copied().collect();
        for id in ids {
            let has_conn = self.shared.slots.get(id).is_some_and(|s| s.conn.is_some());
            if has_conn {
                if let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
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
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.shared.poll_action()
    }

    /// The next event for the application.
    #[must_use]
    #[inline]
    pub fn poll_event(&mut self) -> Option<ConsumerEvent> {
        crate::queue::pop_front(&mut self.shared.events)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next: the earliest entry
    /// of the timer table, of a connection's deadlines and of discovery's.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let slots = self.shared.slots.next_deadline();
        slots
            .into_iter()
            .chain(self.discovery.next_timeout())
            .chain(self.shared.timers.next_timeout())
            .min()
    }

    // ---------------------------------------------------------------- internals

    fn connection_mut(&mut self, conn: ConnId) -> Result<&mut Connection, ConsumerError> {
        self.shared
            .slots
            .get_mut(conn)
            .ok_or_else(|| ConsumerError::UnknownConnection(conn))?
            .conn
            .as_mut()
            .ok_or_else(|| ConsumerError::NotReady(conn))
    }

    /// Counts a message event on `conn`'s own counters.
    /// The application answered a message of `conn`: counts it (one look-up for both).
    fn answered(&mut self, conn: ConnId, f: impl FnOnce(&mut Counts)) {
        if let Some(slot) = self.shared.slots.get_mut(conn) {
            f(&mut slot.counts);
            if slot.handed > 0 {
                slot.handed -= 1;
                self.shared.handed_total -= 1;
            }
        }
    }

    fn count(&mut self, conn: ConnId, f: impl FnOnce(&mut Counts)) {
        if let Some(slot) = self.shared.slots.get_mut(conn) {
            f(&mut slot.counts);
        }
    }

    fn in_flight(&self, conn: ConnId) -> usize {
        self.shared
            .slots
            .get(conn)
            .and_then(|s| s.conn.as_ref())
            .map_or(0, Connection::in_flight)
    }

    /// Drains a connection's events (turning them into consumer actions) and its bytes.
    fn pump(&mut self, now: Instant, id: ConnId) {
        let returned_before = self.returned;
        loop {
            self.pump_deliveries(now, id);
            let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) else {
                return;
            };
            let Some(event) = c.poll_event() else {
                break;
            };
            match event {
                ConnectionEvent::Ready(negotiated) => {
                    let output_buffer_timeout = negotiated.identify.output_buffer_timeout;
                    self.flow
                        .connection_ready(now, id, output_buffer_timeout, &mut self.shared);
                    let Some(slot) = self.shared.slots.get(id) else {
                        return;
                    };
                    if let Some(a) = self.adaptive.as_mut() {
                        a.note_handshake(slot.handshake);
                    }
                    let addr = slot.addr.clone();
                    self.discovery.connection_ready(&addr);
                    self.shared
                        .events
                        .push_back(ConsumerEvent::ConnectionReady { conn: id, addr });
                    self.shared.queue_transmit(id);
                    self.flow.replan_soon(now, &mut self.shared);
                }
                ConnectionEvent::Message(message) => self.on_message(now, id, message),
                ConnectionEvent::Redelivered(_) => {
                    // The application still holds it: nothing to hand out, and its answer will
                    // answer this delivery. It took a RDY slot like any delivery.
                    self.received += 1;
                    if let Some(slot) = self.shared.slots.get_mut(id) {
                        slot.counts.received += 1;
                        let after = self.flow.on_message(now, slot);
                        if after.turn_over {
                            self.flow.after_message(now, id, after, &mut self.shared);
                        }
                    }
                }
                ConnectionEvent::MessageExpired(mid) => {
                    if let Some(change) = self.adaptive.as_mut().and_then(|a| a.on_expired(now)) {
                        self.limit_changed(now, change);
                    }
                    // nsqd has requeued it, but the application still holds it.
                    if self.shared.ghosts.insert((id, mid)) {
                        self.shared.ghost_shares += 1;
                    }
                    self.unhand(id);
                    // Its share stays taken: a RDY left open may now exceed the budget.
                    self.flow.after_deliveries(now, &mut self.shared);
                    self.shared
                        .events
                        .push_back(ConsumerEvent::MessageExpired { conn: id, id: mid });
                    // Its share of max_in_flight is free again.
                    self.flow.replan_if_owed(now, &mut self.shared);
                }
                ConnectionEvent::ServerError(error) => {
                    self.flow
                        .on_answer_failed(now, id, &error, &mut self.shared);
                    self.shared
                        .events
                        .push_back(ConsumerEvent::ServerError { conn: id, error });
                }
                ConnectionEvent::Closed(reason) => {
                    let leftovers = match &reason {
                        CloseReason::Graceful { unanswered } => *unanswered,
                        _ => c.in_flight_ids().count(),
                    };
                    self.shared.queue_transmit(id);
                    self.drop_slot(now, id, &reason.to_string(), leftovers);
                    return;
                }
                _ => {}
            }
        }
        self.shared.queue_transmit(id);
        if self.returned != returned_before {
            // Messages went back because the application is full while a RDY is open: close
            // it now, or nsqd sends them again at once.
            self.flow.replan(now, false, &mut self.shared);
        }
    }

    /// The common case of [`Consumer::pump`] with one look-up for a whole run of messages, not
    /// several per message: moves the deliveries at the front of `id`'s events to the
    /// consumer's events while none of them needs more (a re-plan because the connection's
    /// bootstrap or low-RDY turn ends, or a give-up); `pump` takes the rest one at a time.
    fn pump_deliveries(&mut self, now: Instant, id: ConnId) {
        let max_attempts = self.shared.config.max_attempts;
        let max_in_flight = self.hand_out_bound(now);
        let idle_cap = self.shared.config.low_rdy_idle_timeout;
        let plain = |m: &Message| !gives_up(max_attempts, m);
        let Some(slot) = self.shared.slots.get_mut(id) else {
            return;
        };
        let mut received = 0;
        // A message that ends the connection's low-RDY turn (its share delivered) takes the
        // way that re-plans; one that may have been sent back before, the way that counts it.
        while slot.fresh_until.is_none()
            && !slot.yield_pending
            && slot.turn_quota != 1
            && slot.sent_back.is_empty()
        {
            let Some(message) = slot.conn.as_mut().and_then(|c| c.poll_message(plain)) else {
                break;
            };
            if !self.shared.ghosts.is_empty() && self.shared.ghosts.remove(&(id, message.id)) {
                // nsqd timed it out and sent it again while the application still holds it:
                // the application's answer will answer this delivery. Nothing to hand out.
                self.shared.ghost_shares = self.shared.ghost_shares.saturating_sub(1);
                let _ = self.flow.on_message(now, slot);
                slot.counts.received += 1;
                received += 1;
                slot.handed += 1;
                self.shared.handed_total += 1;
                continue;
            }
            let covered = slot.covers_next()
                && self.shared.handed_total + self.shared.ghost_shares < max_in_flight;
            // (false, false) under this loop's condition: nothing to re-plan.
            let _ = self.flow.on_message(now, slot);
            slot.counts.received += 1;
            received += 1;
            if covered {
                slot.handed += 1;
                self.shared.handed_total += 1;
                self.shared
                    .events
                    .push_back(ConsumerEvent::Message { conn: id, message });
            } else {
                beyond::send_back(now, id, slot, &message, 0, idle_cap);
                self.returned += 1;
            }
        }
        self.received += received;
    }

    /// The application answered a message of `conn` (or it expired).
    fn unhand(&mut self, conn: ConnId) {
        if let Some(slot) = self.shared.slots.get_mut(conn) {
            if slot.handed > 0 {
                slot.handed -= 1;
                self.shared.handed_total -= 1;
            }
        }
    }

    fn on_message(&mut self, now: Instant, id: ConnId, mut message: Message) {
        self.received += 1;
        let max_attempts = self.shared.config.max_attempts;
        let bound = self.hand_out_bound(now);
        let idle_cap = self.shared.config.low_rdy_idle_timeout;
        let Some(slot) = self.shared.slots.get_mut(id) else {
            return;
        };
        slot.counts.received += 1;
        let unseen = slot.sent_back.correct(&mut message);
        if !self.shared.ghosts.is_empty() && self.shared.ghosts.remove(&(id, message.id)) {
            // As in pump_deliveries: the application still holds it.
            self.shared.ghost_shares = self.shared.ghost_shares.saturating_sub(1);
            let after = self.flow.on_message(now, slot);
            slot.handed += 1;
            self.shared.handed_total += 1;
            if after.replan() {
                self.flow.after_message(now, id, after, &mut self.shared);
            }
            return;
        }
        let covered =
            slot.covers_next() && self.shared.handed_total + self.shared.ghost_shares < bound;
        let after = self.flow.on_message(now, slot);
        if !gives_up(max_attempts, &message) && !covered {
            beyond::send_back(now, id, slot, &message, unseen, idle_cap);
            self.returned += 1;
        } else if gives_up(max_attempts, &message) {
            if let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
                if let Err(e) = c.finish(now, &message.id) {
                    tracing::debug!(conn = %id, error = %e, "could not finish a message given up on");
                }
            }
            self.count(id, |c| c.gave_up += 1);
            self.gave_up += 1;
            self.shared
                .events
                .push_back(ConsumerEvent::GaveUp { conn: id, message });
            // Like go-nsq: the FIN of a message given up on is a success for backoff.
            self.flow.on_success(now, &mut self.shared);
            self.after_answer(now, id);
        } else {
            if let Some(slot) = self.shared.slots.get_mut(id) {
                slot.handed += 1;
                self.shared.handed_total += 1;
            }
            self.shared
                .events
                .push_back(ConsumerEvent::Message { conn: id, message });
        }
        if after.replan() {
            self.flow.after_message(now, id, after, &mut self.shared);
        }
    }

    /// The application answered a message no connection counts any more (its connection was
    /// lost, or it expired): its share of max_in_flight is free. The answer itself then
    /// fails as before (unknown connection, or not in flight).
    fn forget_ghost(&mut self, now: Instant, conn: ConnId, id: &MessageId) {
        // No hashing on the hot path: there are almost never any.
        if !self.shared.ghosts.is_empty() && self.shared.ghosts.remove(&(conn, *id)) {
            self.shared.ghost_shares = self.shared.ghost_shares.saturating_sub(1);
            // A share is free again (rare: plan at once).
            if !self.shared.closing {
                self.flow.rebalance(now, false, &mut self.shared);
            }
        }
    }

    /// After a FIN/REQ on `id`: flow control refills its RDY or re-plans, then it is drained.
    fn after_answer(&mut self, now: Instant, id: ConnId) {
        self.flow.after_answer(now, id, &mut self.shared);
        self.pump(now, id);
    }

    /// Forgets a connection: Disconnect action, event, reconnect bookkeeping, RDY rebalance.
    /// `leftovers`: its messages still unanswered (nsqd redelivers them).
    fn drop_slot(&mut self, now: Instant, id: ConnId, reason: &str, leftovers: usize) {
        // Its last bytes are taken now, while the connection is still here.
        self.shared.queue_transmit(id);
        self.shared.freeze_back();
        let Some(slot) = self.shared.slots.remove(id) else {
            return;
        };
        // nsqd requeues what was in flight, but the application still holds it.
        if let Some(c) = &slot.conn {
            self.shared
                .ghosts
                .extend(c.in_flight_ids().map(|mid| (id, mid)));
        }
        self.shared.handed_total -= slot.handed;
        self.shared.ghost_shares += slot.handed;
        self.discovery.add_counts(&slot.addr, &slot.counts);
        self.shared.push_action(Action::Disconnect { conn: id });
        // A connection that never became ready may say the configuration cannot work.
        let misconfigured = slot
            .ready_at
            .is_none()
            .then(|| slot.conn.as_ref().and_then(Connection::close_reason))
            .flatten()
            .and_then(CloseReason::misconfiguration);
        let parked = misconfigured.is_some();
        let mut closed = ConsumerEvent::ConnectionClosed {
            conn: id,
            addr: slot.addr.clone(),
            reason: reason.to_string(),
            retry_in: None,
            misconfigured,
        };
        self.flow.forget(id);
        if self.shared.closing {
            self.shared.events.push_back(closed);
            self.leftovers += leftovers;
            self.maybe_emit_closed();
            return;
        }
        let healthy = slot.ready_at.is_some_and(|t| {
            now.saturating_duration_since(t) >= self.shared.config.reconnect_reset_after
        });
        let retry =
            self.discovery
                .connection_ended(now, &slot.addr, id, healthy, parked, &mut self.shared);
        if let ConsumerEvent::ConnectionClosed { retry_in, .. } = &mut closed {
            *retry_in = retry;
        }
        self.shared.events.push_back(closed);
        self.discovery.prune(Some(&slot.addr), &self.shared);
        self.flow.rebalance(now, false, &mut self.shared);
    }

    fn maybe_emit_closed(&mut self) {
        if self.shared.closing && !self.closed_emitted && self.shared.slots.is_empty() {
            self.closed_emitted = true;
            self.shared.timers.stop(Deadline::Close);
            self.shared.events.push_back(ConsumerEvent::Closed {
                leftovers: self.leftovers,
            });
        }
    }

    fn force_close(&mut self, now: Instant) {
        self.shared.timers.stop(Deadline::Close);
        let ids: Vec<ConnId> = self.shared.slots.keys().copied().collect();
        for id in ids {
            let leftovers = self.in_flight(id);
            self.drop_slot(now, id, "close timeout", leftovers);
        }
        self.maybe_emit_closed();
    }
}

/// Whether a delivery is given up on: attempts above `max_attempts` (0: never).
fn gives_up(max_attempts: u16, message: &Message) -> bool {
    max_attempts > 0 && message.attempts > max_attempts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::LookupdAddressError;

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
