//! The coordinator: [`Consumer`], its public API, and the dispatch of every input to the
//! connection it names and to the parts that act on it ([`FlowControl`] for RDY and backoff,
//! [`Discovery`] for the nsqd and lookupd sets), which share the state in [`Shared`].

use super::config::ConsumerConfig;
use super::discovery::Discovery;
use super::events::{ConsumerError, ConsumerEvent};
use super::flow::FlowControl;
use super::limit::{Change, InFlightLimit};
use super::lookupd::LookupdAddress;
use super::policy;
use super::shared::Shared;
use super::slots::Slot;
use super::stats::ConsumerStats;
use super::timers::Deadline;
use crate::addr::valid_host_port;
use crate::connection::{Connection, Role};
use crate::deadline::later;
use crate::driver::{Action, ConnId, LookupdRequestId};
use crate::frame::{Message, MessageId};
use crate::names::{Channel, Topic};
use bytes::BytesMut;
use std::time::{Duration, Instant};

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
/// What it guarantees and how (the in-flight bound, RDY, the rotation, backoff, the adaptive
/// limit, discovery) is in the [module docs](super).
#[derive(Debug)]
pub struct Consumer {
    topic: Topic,
    channel: Channel,
    /// Configuration, randomness, connections, timers, closing flag and output queues.
    shared: Shared,
    /// RDY distribution and backoff.
    flow: FlowControl,
    /// The in-flight limit in force and `max_in_flight`, static or adaptive.
    limit: InFlightLimit,
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
        let limit = InFlightLimit::new(&shared.config, &mut shared.rng);
        Consumer {
            flow: FlowControl::new(limit.limit()),
            limit,
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
        self.limit.max_in_flight()
    }

    /// The in-flight limit in force: `max_in_flight`, or in the adaptive mode the limit it
    /// found (between `min_in_flight` and `max_in_flight`).
    #[inline]
    pub fn in_flight_limit(&self) -> u32 {
        self.limit.limit()
    }

    /// In the adaptive mode, the handling latency the limit is measured against (the median
    /// at a limit where nothing queues), once measured.
    pub fn uncongested_latency(&self) -> Option<Duration> {
        self.limit.uncongested_latency()
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
        out.in_flight_limit = self.limit.limit();
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

    /// True when no message can arrive before the application answers one: it holds as many
    /// messages as the in-flight limit allows now, or a backoff window holds RDY at 0, or
    /// every ready connection has as many in flight as its RDY while no other connection is
    /// being opened and no RDY is to be handed out (backoff's RDY 1 while it tests the
    /// water), or the consumer is closing. Also true while no connection is open or being
    /// opened (every nsqd is down or waiting to be reconnected): nothing can arrive before a
    /// reconnect. A batching handler should hand over what it holds now rather than wait for
    /// more (see the batches of the client layer).
    ///
    /// In constant time unless no RDY is left unused; then one look at every connection.
    pub fn is_full(&self, now: Instant) -> bool {
        if self.shared.closing || self.in_backoff_window() {
            return true;
        }
        let held = self.shared.handed_total + self.shared.ghost_shares;
        if held >= u64::from(self.limit.hand_out_bound(now)) {
            return true;
        }
        let live = self.shared.slots.live_counts();
        if live.in_flight < live.rdy {
            // Some ready connection has room: in flight below its RDY.
            return false;
        }
        let backing_off = self.flow.backoff_level() > 0;
        !self.shared.slots.iter().any(|(_, s)| {
            if s.is_ready() {
                // Room under its RDY, or RDY 0 that the plan (the low-RDY rotation) may
                // raise: the application holds less than the bound.
                s.unanswered() < u64::from(s.rdy()) || (!backing_off && s.rdy() == 0)
            } else {
                // Being opened or handshaking: it gets a share once ready.
                s.conn
                    .as_ref()
                    .is_none_or(|c| c.state() == crate::connection::ConnectionState::Handshaking)
            }
        })
    }

    /// Turns auto-touch on (`Some(limit)`, as the `auto_touch` and `auto_touch_limit`
    /// options) or off while the consumer runs, on every connection and the ones it opens
    /// later. Turned on, the messages in flight now are touched too, a little before their
    /// deadline, for up to `limit` since their delivery (nsqd's max_msg_timeout caps it).
    /// The client layer's batches turn it on: their messages wait for the batch to fill.
    pub fn set_auto_touch(&mut self, now: Instant, limit: Option<Duration>) {
        self.shared.config.connection.auto_touch = limit;
        let ids: Vec<ConnId> = self.shared.slots.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
                c.set_auto_touch(now, limit);
            }
        }
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
        self.flow.release_replans(now, &mut self.shared);
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
        self.flow.release_replans(now, &mut self.shared);
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

    /// Answers follow in a row (a batch's, or every answer a driver took at once): the re-plan
    /// of RDY an answer may owe (a look at every connection, made when an answer frees a share
    /// some connection waits for) is made once, at [`release_replans`](Self::release_replans),
    /// instead of after each answer. The answers' own bytes are queued as usual; only raises
    /// elsewhere wait. The next input or timeout releases them too.
    pub fn hold_replans(&mut self) {
        self.flow.hold_replans();
    }

    /// The end of a row of answers begun with [`hold_replans`](Self::hold_replans): the
    /// re-plan one of them owed, if any, is made now.
    pub fn release_replans(&mut self, now: Instant) {
        self.flow.release_replans(now, &mut self.shared);
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
        let limit = self.limit.set_max_in_flight(now, max_in_flight);
        self.flow.set_limit(now, limit, &mut self.shared);
    }

    /// When the message `id` of `conn` was handed out, if the adaptive limit wants it.
    fn handed_at(&self, conn: ConnId, id: &MessageId) -> Option<Instant> {
        if !self.limit.measures_latency() {
            return None;
        }
        self.shared
            .slots
            .get(conn)
            .and_then(|s| s.conn.as_ref())
            .and_then(|c| c.delivered_at(id))
    }

    /// Feeds an answer to the in-flight limit (`handed`: from [`Consumer::handed_at`]).
    fn adapt(&mut self, now: Instant, handed: Option<Instant>, ok: bool) {
        let Some(handed) = handed else {
            return;
        };
        let measuring = self.flow.backoff_level() == 0 && !self.shared.closing;
        let held = self.shared.handed_total + self.shared.ghost_shares + 1;
        if let Some(change) = self.limit.on_answer(now, handed, held, ok, measuring) {
            self.limit_changed(now, change);
        }
    }

    /// The limit in force moved: RDY follows it, and the application hears of it.
    fn limit_changed(&mut self, now: Instant, change: Change) {
        self.flow.set_limit(now, change.limit, &mut self.shared);
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
}

#[path = "dispatch.rs"]
mod dispatch;

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
