//! The [`Producer`] state machine.

use super::batch::Batch;
use super::config::{ProducerConfig, Routing};
use crate::addr::valid_host_port;
use crate::command::{self, CommandError};
use crate::connection::{
    CloseReason, Connection, ConnectionError, ConnectionState, PublishToken, Role,
};
use crate::consumer::policy::ReconnectSchedule;
use crate::deadline::later;
use crate::driver::{Action, ConnId};
use crate::names::Topic;
use crate::rng::Rng;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::events::{
    PingId, ProducerError, ProducerEvent, ProducerStats, PublishFailure, PublishId,
};
use super::node::{Node, Session};
use super::refusal::{Accepted, Inferred};
use super::work::{Fate, Item, Pending, PendingKind, Work};
/// An action waiting in the output queue; consecutive bytes for one connection are gathered.
#[derive(Debug)]
pub(super) enum Queued {
    Action(Action),
    Transmit {
        conn: ConnId,
        first: Bytes,
        more: Option<BytesMut>,
    },
}

impl Queued {
    pub(super) fn into_action(self) -> Action {
        match self {
            Queued::Action(a) => a,
            Queued::Transmit { conn, first, more } => Action::Transmit {
                conn,
                data: more.map_or(first, BytesMut::freeze),
            },
        }
    }
}

/// The producer-level state machine: publishing over one connection per nsqd, with routing,
/// failover, reconnection, a bounded wait for a connection, and graceful close.
///
/// It does no IO: it is driven by the crate's [driver contract](crate::driver), opening and
/// closing sockets as its [`Action`]s say (the consumer's vocabulary, so one driver loop
/// serves both).
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
/// are sent when it becomes ready. When none is being established, a publish connects at once
/// to every nsqd not known to be down (its last connection was ready when it ended: lost, or
/// closed by nsqd; as go-nsq connects inside `Publish`) and waits for it; it fails at once
/// with [`PublishFailure::NoServerAvailable`] only when every nsqd is known to be down (its
/// last connection attempt failed). A connection that dies fails its unconfirmed publishes
/// with [`PublishFailure::ConnectionLost`] (they may have been applied); later publishes go
/// to another ready connection while it reconnects with exponential backoff and jitter.
///
/// A publish nsqd refuses for its size fails alone: nsqd closes the connection, which is
/// replaced at once, and the limit is kept, so later publishes over it fail before they are
/// sent. nsqd states the limit in its refusal; when the reset that follows (nsqd closes with
/// the body unread) destroys that refusal, a connection that ends while its oldest
/// unanswered publish holds a message larger than any this nsqd took is taken as the
/// refusal, with the limit one byte below that message's size (likewise an MPUB body).
/// Sizes within nsqd's default limits (1 MiB per message, 5 MiB per MPUB) are never taken
/// so, and the guess is withdrawn if nsqd then cannot be reached: it was a crash.
#[derive(Debug)]
pub struct Producer {
    pub(super) config: ProducerConfig,
    pub(super) rng: Rng,
    pub(super) nodes: Vec<Node>,
    pub(super) next_conn: u64,
    pub(super) next_id: u64,
    pub(super) rr_next: usize,
    pub(super) pending: VecDeque<Pending>,
    /// Publishes accepted and not yet resolved (sent + pending).
    pub(super) outstanding: usize,
    pub(super) last_error: Option<String>,
    /// The last nsqd whose connection showed a misconfiguration (cleared when one is ready).
    pub(super) misconfigured: Option<usize>,
    pub(super) any_dirty: bool,
    /// The latest `now` given to any input or command.
    pub(super) clock: Option<Instant>,
    // shutdown
    pub(super) closing: bool,
    pub(super) close_deadline: Option<Instant>,
    pub(super) closed_emitted: bool,
    // stats
    pub(super) published: u64,
    pub(super) failed: u64,
    /// The lowest size limits any nsqd has stated in a refusal (`... too big N > MAX`), or
    /// was taken to refuse by resetting the connection (see `refusal`), starting at the
    /// configured ones: every later publish is checked against them, on any connection,
    /// from the moment the refusal is read.
    pub(super) learned: crate::Limits,
    /// A limit of `learned` lowered on the evidence of a reset alone (see `refusal`).
    pub(super) inferred: Option<Inferred>,
    pub(super) batches: u64,
    pub(super) batched_messages: u64,
    // outputs
    pub(super) actions: VecDeque<Queued>,
    pub(super) events: VecDeque<ProducerEvent>,
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
        let learned = config.connection.limits;
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
            misconfigured: None,
            any_dirty: false,
            clock: None,
            closing: false,
            close_deadline: None,
            closed_emitted: false,
            published: 0,
            failed: 0,
            learned,
            inferred: None,
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
            .filter(|n| n.link.as_ref().is_some_and(Session::is_ready))
            .count()
    }

    /// True once [`close`](Self::close) was called.
    #[inline]
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
        // A reset during a body larger than nsqd ever took may be its refusal.
        self.note_reset(i);
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
        // What can go now goes before the deadlines fail anything (topology routing may
        // have waited for a nearer nsqd until this instant).
        if !self.pending.is_empty() && self.healthy_connections() > 0 {
            self.drain_pending(now);
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
        if let Some(i) = self.nodes.iter().position(|n| n.addr == addr) {
            // Added again: the program asks to try, whatever the last attempt showed.
            if self.nodes[i].parked.take().is_some() {
                self.connect(now, i);
            }
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
            parked: None,
            down: false,
            accepted: Accepted::default(),
            stated: false,
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
        let checked = command::check_publish(body, None, &self.limits_now());
        self.refused_locally(checked)?;
        self.submit(now, topic, Item::One { body, solo: false })
    }

    /// Publishes several messages to `topic` atomically (MPUB): one id, one reply.
    pub fn multi_publish<B: AsRef<[u8]>>(
        &mut self,
        now: Instant,
        topic: &Topic,
        bodies: &[B],
    ) -> Result<PublishId, ProducerError> {
        let batch = Batch::new(topic, bodies, &self.config.connection.limits);
        let batch = self.refused_locally(batch)?;
        self.multi_publish_batch(now, batch)
    }

    /// Publishes a [`Batch`] atomically (MPUB): one id, one reply. Its bodies were encoded
    /// when the batch was made and are written as they are. Refused, sending nothing, if the
    /// batch exceeds this producer's limits.
    pub fn multi_publish_batch(
        &mut self,
        now: Instant,
        batch: Batch,
    ) -> Result<PublishId, ProducerError> {
        let now = self.tick(now);
        self.admit()?;
        let checked = batch.check(&self.limits_now());
        self.refused_locally(checked)?;
        let (topic, data, count) = batch.into_parts();
        self.submit(now, &topic, Item::Entries { data, count })
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
        let checked = command::check_publish(body, Some(delay), &self.limits_now());
        self.refused_locally(checked)?;
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
        } else if self.any_in_progress() || self.connect_on_demand(now) {
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
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.any_dirty {
            self.any_dirty = false;
            for i in 0..self.nodes.len() {
                if self.nodes[i].link.as_ref().is_some_and(|l| l.dirty) {
                    self.queue_transmit(i);
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
    #[inline]
    pub fn poll_event(&mut self) -> Option<ProducerEvent> {
        crate::queue::pop_front(&mut self.events)
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
        if !self.pending.is_empty() {
            // Publishes wait for a nearer nsqd's answer until then (see `nearest`).
            let ready = (0..self.nodes.len()).filter(|&i| self.ready(i));
            consider(self.nearer_may_answer(self.nearest_ready(ready).map(|b| b.1)));
        }
        consider(self.close_deadline.filter(|_| !self.closed_emitted));
        t
    }

    // ---------------------------------------------------------------- internals

    pub(super) fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(super) fn tick(&mut self, now: Instant) -> Instant {
        let now = self.clock.map_or(now, |c| c.max(now));
        self.clock = Some(now);
        now
    }

    pub(super) fn node_of(&self, conn: ConnId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.link.as_ref().is_some_and(|l| l.id == conn))
    }

    pub(super) fn link(&self, conn: ConnId) -> Option<&Session> {
        self.nodes
            .iter()
            .filter_map(|n| n.link.as_ref())
            .find(|l| l.id == conn)
    }

    pub(super) fn any_in_progress(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.link.as_ref().is_some_and(|l| l.ready_at.is_none()))
    }

    /// The limits a publish must fit now: the configured ones, lowered to what any nsqd has
    /// said in a refusal (`... too big N > MAX`), from the moment it was read: even before
    /// the connection nsqd closed is replaced, on whichever connection the publish would
    /// take. A publish over them fails before it is sent: sent, nsqd would refuse it and
    /// close the connection.
    fn limits_now(&self) -> crate::Limits {
        self.learned
    }

    /// A publish refused before it was sent (over a limit, or malformed) counts as failed.
    fn refused_locally<T>(&mut self, checked: Result<T, CommandError>) -> Result<T, ProducerError> {
        checked.map_err(|e| {
            self.failed += 1;
            ProducerError::Invalid(e)
        })
    }

    /// The ready node the next publish goes to, without taking the turn.
    fn next_route(&self) -> Option<usize> {
        let n = self.nodes.len();
        let start = match self.config.routing {
            Routing::RoundRobin => self.rr_next % n.max(1),
            _ => 0,
        };
        let mut ready = (0..n).map(|k| (start + k) % n).filter(|&i| self.ready(i));
        if self.config.routing != Routing::Topology {
            return ready.next();
        }
        let best = self.nearest_ready(ready);
        // A nearer nsqd may still state its zone: the publish waits for it.
        if self.nearer_may_answer(best.map(|b| b.1)).is_some() {
            return None;
        }
        best.map(|(i, _)| i)
    }

    /// The ready node the next publish goes to; with round-robin, the turn passes on.
    pub(super) fn route(&mut self) -> Option<usize> {
        let found = self.next_route()?;
        if self.config.routing == Routing::RoundRobin {
            self.rr_next = found + 1;
        }
        Some(found)
    }

    /// Sends a NOP on node `i` (ready) and resolves the ping: NOP has no reply, so a ready
    /// connection that accepted it is the answer.
    pub(super) fn ping_on(&mut self, now: Instant, i: usize, id: PingId) {
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

    pub(super) fn ready(&self, i: usize) -> bool {
        self.nodes[i].link.as_ref().is_some_and(Session::is_ready)
    }

    /// Refuses a publish when the producer is closed or at its bound of outstanding publishes.
    pub(super) fn admit(&self) -> Result<(), ProducerError> {
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
    pub(super) fn unavailable(&self) -> PublishFailure {
        // Misconfigured only when no nsqd is left to come back on its own.
        let parked = self
            .misconfigured
            .map(|i| &self.nodes[i])
            .filter(|_| self.nodes.iter().all(|n| n.parked.is_some()));
        match parked {
            Some(node) => PublishFailure::Misconfigured {
                addr: node.addr.clone(),
                problem: node.parked.clone().expect("every node is parked"),
            },
            None => PublishFailure::NoServerAvailable {
                last_error: self.last_error.clone(),
            },
        }
    }

    /// Takes a checked publish: gathered on a ready connection, or waiting for one being
    /// established, or failed at once when every nsqd is down.
    pub(super) fn fail_pending(&mut self, p: &Pending, failure: PublishFailure) {
        match p.kind {
            PendingKind::Ping(ping) => {
                self.events
                    .push_back(ProducerEvent::PingFailed(ping, failure));
            }
            _ => self.resolve(PublishId(p.id), Err(failure)),
        }
    }

    pub(super) fn resolve(&mut self, id: PublishId, result: Result<(), PublishFailure>) {
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
    pub(super) fn take_sent(&mut self, i: usize, token: PublishToken) -> Option<Work<Bytes>> {
        let link = self.nodes[i].link.as_mut()?;
        let seq = token.sequence();
        if link.sent.front().is_some_and(|s| s.token == seq) {
            return link.sent.pop_front().map(|s| s.work);
        }
        let at = link.sent.iter().position(|s| s.token == seq)?;
        link.sent.remove(at).map(|s| s.work)
    }

    /// Post-conditions after every input or command: waiting publishes fail at once when no
    /// connection can serve them; a closing producer closes connections once nothing waits
    /// for them; `Closed` is emitted when everything is done.
    pub(super) fn settle(&mut self, now: Instant) {
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
    pub(super) fn force_close(&mut self, now: Instant) {
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
