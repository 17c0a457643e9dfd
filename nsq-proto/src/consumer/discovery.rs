//! Discovery ([`Discovery`]): which nsqd the consumer connects to. The nsqd set (each a
//! [`Node`]: added directly or listed by a lookupd, its reconnect schedule and counters), the
//! nsqlookupd set and its polling, and the connection and request ids.

use super::config::ConsumerConfig;
use super::events::{ConsumerError, ConsumerEvent};
use super::lookupd::{LookupdAddress, LookupdError, LookupdResponseParser};
use super::policy::ReconnectSchedule;
use super::shared::Shared;
use super::slots::{Slot, Slots};
use super::stats::{Counts, NsqdState, NsqdStats};
use super::timers::Deadline;
use crate::addr::valid_host_port;
use crate::connection::{Connection, ConnectionState};
use crate::deadline::{MAX_DELAY, later};
use crate::driver::{Action, ConnId, LookupdRequestId};
use crate::names::Topic;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How the consumer came to know an nsqd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Added with `add_nsqd`: reconnected on a schedule, never forgotten.
    Direct,
    /// Listed by a lookupd (or disconnected from): connected while a lookupd lists it.
    Lookupd,
}

/// One nsqd address the consumer keeps track of.
#[derive(Debug)]
struct Node {
    source: Source,
    conn: Option<ConnId>,
    schedule: ReconnectSchedule,
    next_attempt: Option<Instant>,
    /// Sequence number of the last disconnect: only a lookupd answer to a request sent after
    /// it may bring a discovered nsqd back.
    disconnected_seq: u64,
    /// Indexes (into `Discovery::lookupds`) of the lookupds whose latest successful answer
    /// listed this address. A failed query leaves its lookupd's entries as they were, so a
    /// lookupd being down never makes the consumer forget what it listed.
    listed_by: BTreeSet<usize>,
    /// Counters of its connections that have ended.
    counts: Counts,
    /// Its connections that became ready (see [`Discovery::connection_ready`]), over the
    /// consumer's life: kept while the address is forgotten ([`History`]).
    connected: u64,
    /// Its last connection showed a misconfiguration ([`CloseReason::misconfiguration`]):
    /// not connected to again on its own, only when added again (or, discovered, when a
    /// lookupd lists it anew after having forgotten it).
    ///
    /// [`CloseReason::misconfiguration`]: crate::CloseReason::misconfiguration
    parked: bool,
}

impl Node {
    fn new(source: Source, config: &ConsumerConfig) -> Node {
        Node {
            source,
            conn: None,
            schedule: ReconnectSchedule::new(
                config.reconnect_initial_delay,
                config.reconnect_max_delay,
            ),
            next_attempt: None,
            disconnected_seq: 0,
            listed_by: BTreeSet::new(),
            counts: Counts::default(),
            connected: 0,
            parked: false,
        }
    }
}

/// A lookupd query in progress.
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
    /// Its last answer showed it is not an nsqlookupd's HTTP port
    /// ([`LookupdError::is_misconfiguration`]): not polled again until it is added again.
    parked: bool,
}

/// The nsqd and lookupd sets. Its consumer-wide deadline is the [`Deadline::LookupdPoll`] entry
/// of the timer table; each lookupd query's timeout and each nsqd's reconnect stay with them
/// ([`next_timeout`](Self::next_timeout)).
#[derive(Debug)]
pub(super) struct Discovery {
    next_conn: u64,
    next_request: u64,
    /// Orders lookupd requests and disconnects (see `Node::disconnected_seq`).
    seq: u64,
    nodes: BTreeMap<String, Node>,
    /// Reconnect attempts by time, so the next one is found without a scan of `nodes`.
    /// Entries go stale (the nsqd connected, was removed, or was rescheduled) and are
    /// dropped when their time comes; `next_timeout` may then wake the consumer once for
    /// nothing.
    reconnect_queue: BTreeSet<(Instant, String)>,
    /// Recently forgotten discovered addresses and the sequence number of their last
    /// disconnect, kept only while a lookupd request sent before that disconnect is pending:
    /// such a stale answer must not bring the address back (see `Node::disconnected_seq`).
    forgotten: BTreeMap<String, u64>,
    lookupds: Vec<Lookupd>,
    /// Connections that became ready to an nsqd the consumer had been connected to before,
    /// over every nsqd ever known.
    reconnects: u64,
    /// How many connections became ready to each forgotten address it was connected to.
    history: History,
}

/// How many forgotten nsqd addresses the consumer remembers having been connected to (for
/// [`ConsumerStats::reconnects`](super::ConsumerStats::reconnects)): a discovered nsqd that
/// went away from every lookupd's answer is forgotten, and when it is listed again (an nsqd
/// restarted: it leaves nsqlookupd while it is down) its new connection is a reconnect. The
/// oldest are let go beyond this many (about 100 bytes each), so a cluster whose addresses
/// keep changing costs bounded memory.
pub(super) const REMEMBERED_ADDRESSES: usize = 4096;

/// The forgotten addresses' connection counts (see [`REMEMBERED_ADDRESSES`]), oldest first.
#[derive(Debug, Default)]
struct History {
    /// Address -> (when it was forgotten, in `next` order; its ready connections).
    by_addr: BTreeMap<String, (u64, u64)>,
    /// When forgotten -> address: the order in which they are let go.
    order: BTreeMap<u64, String>,
    next: u64,
}

impl History {
    /// Remembers that `addr`, now forgotten, had `connected` ready connections.
    fn remember(&mut self, addr: &str, connected: u64) {
        if connected == 0 {
            return;
        }
        let at = self.next;
        self.next += 1;
        if let Some((old, _)) = self.by_addr.insert(addr.to_owned(), (at, connected)) {
            self.order.remove(&old);
        }
        self.order.insert(at, addr.to_owned());
        while self.order.len() > REMEMBERED_ADDRESSES {
            if let Some((_, oldest)) = self.order.pop_first() {
                self.by_addr.remove(&oldest);
            }
        }
    }

    /// What was remembered of `addr` (0: nothing), which is known again from now on.
    fn recall(&mut self, addr: &str) -> u64 {
        match self.by_addr.remove(addr) {
            Some((at, connected)) => {
                self.order.remove(&at);
                connected
            }
            None => 0,
        }
    }
}

impl Discovery {
    pub(super) fn new() -> Discovery {
        Discovery {
            next_conn: 1,
            next_request: 1,
            seq: 0,
            nodes: BTreeMap::new(),
            reconnect_queue: BTreeSet::new(),
            forgotten: BTreeMap::new(),
            lookupds: Vec::new(),
            reconnects: 0,
            history: History::default(),
        }
    }

    /// A node for `addr`, newly known, with what is remembered of it.
    fn node(&mut self, addr: &str, source: Source, config: &ConsumerConfig) -> Node {
        Node {
            connected: self.history.recall(addr),
            ..Node::new(source, config)
        }
    }

    /// A connection to `addr` became ready (handshake and SUB done): a reconnect when the
    /// consumer had been connected to it before, whether it was given directly or listed by
    /// a lookupd (also after it was forgotten and listed again). Once per connection: kept
    /// out of line, off the path of the messages its caller also handles.
    #[cold]
    #[inline(never)]
    pub(super) fn connection_ready(&mut self, addr: &str) {
        if let Some(p) = self.nodes.get_mut(addr) {
            p.connected += 1;
            if p.connected > 1 {
                self.reconnects += 1;
            }
        }
    }

    /// How many nsqd addresses are kept track of.
    pub(super) fn known(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// The per-nsqd part of the stats, written over `out` (reusing its allocations).
    pub(super) fn nsqd_stats_into(&self, slots: &Slots<Slot>, out: &mut Vec<NsqdStats>) {
        out.truncate(self.nodes.len());
        for (i, (addr, p)) in self.nodes.iter().enumerate() {
            let slot = p.conn.and_then(|id| slots.get(id));
            let mut counts = p.counts;
            if let Some(s) = slot {
                counts.add(&s.counts);
            }
            let c = slot.and_then(|s| s.conn.as_ref());
            let state = match (slot, c.map(Connection::state)) {
                (None, _) if p.parked => NsqdState::Misconfigured,
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
                reconnects: p.connected.saturating_sub(1),
                reconnect_at: p.next_attempt.filter(|_| p.conn.is_none()),
                topology_zone: String::new(),
                topology_region: String::new(),
            };
            if let Some(old) = out.get_mut(i) {
                let mut address = std::mem::take(&mut old.address);
                address.clone_from(addr);
                let zone = std::mem::take(&mut old.topology_zone);
                let region = std::mem::take(&mut old.topology_region);
                *old = NsqdStats {
                    address,
                    topology_zone: zone,
                    topology_region: region,
                    ..entry
                };
            } else {
                out.push(NsqdStats {
                    address: addr.clone(),
                    ..entry
                });
            }
            // nsqd's topology, once a connection has heard it (kept after it ends); the
            // strings' allocations are reused.
            if let Some(n) = c.and_then(Connection::negotiated) {
                let row = &mut out[i];
                row.topology_zone.clone_from(&n.identify.topology_zone);
                row.topology_region.clone_from(&n.identify.topology_region);
            }
        }
    }

    /// The earliest of the lookupd queries' timeouts and the reconnects due.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let lookups = self
            .lookupds
            .iter()
            .filter_map(|l| l.pending.as_ref().map(|p| p.deadline));
        let reconnects = self.reconnect_queue.first().map(|(t, _)| *t);
        lookups.chain(reconnects).min()
    }

    /// Adds a directly configured nsqd (already validated) and connects it, unless it is
    /// connected or a reconnect is due.
    pub(super) fn add_nsqd(&mut self, addr: &str, sh: &mut Shared) {
        if let Some(p) = self.nodes.get_mut(addr) {
            p.source = Source::Direct;
            // Added again: the program asks to try, whatever the last attempt showed.
            p.parked = false;
            if p.conn.is_none() && p.next_attempt.is_none() {
                self.connect(addr, sh);
            }
        } else {
            let node = self.node(addr, Source::Direct, &sh.config);
            self.nodes.insert(addr.to_string(), node);
            self.connect(addr, sh);
        }
    }

    /// Adds a lookupd to poll (nothing if known); the next poll happens at once.
    pub(super) fn add_lookupd(&mut self, now: Instant, addr: LookupdAddress, sh: &mut Shared) {
        if let Some(l) = self.lookupds.iter_mut().find(|l| l.addr == addr) {
            // Added again: the program asks to try, whatever the last answer showed.
            if std::mem::take(&mut l.parked) {
                sh.timers.set(Deadline::LookupdPoll, now);
            }
            return;
        }
        self.lookupds.push(Lookupd {
            addr,
            pending: None,
            parked: false,
        });
        sh.timers.set(Deadline::LookupdPoll, now);
    }

    /// Stops reconnecting the directly added nsqd `addr` (already validated): it counts as
    /// discovered from now on. Returns its connection, for the caller to close; without one
    /// it may be forgotten at once.
    pub(super) fn disconnect_from_nsqd(
        &mut self,
        addr: &str,
        sh: &Shared,
    ) -> Result<Option<ConnId>, ConsumerError> {
        let Some(p) = self.nodes.get_mut(addr) else {
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
        tracing::debug!(nsqd = addr, "disconnecting from nsqd");
        if conn.is_none() {
            self.prune(Some(addr), sh);
        }
        Ok(conn)
    }

    /// Stops polling the lookupd `addr` (`input` as the application gave it, for errors).
    pub(super) fn disconnect_from_lookupd(
        &mut self,
        input: &str,
        addr: &LookupdAddress,
        sh: &mut Shared,
    ) -> Result<(), ConsumerError> {
        let Some(i) = self.lookupds.iter().position(|l| l.addr == *addr) else {
            return Err(ConsumerError::LookupdNotConfigured(input.to_string()));
        };
        if self.lookupds.len() == 1 {
            return Err(ConsumerError::LastLookupd(input.to_string()));
        }
        tracing::debug!(lookupd = %addr, "disconnecting from nsqlookupd");
        if let Some(pending) = self.lookupds.remove(i).pending {
            sh.push_action(Action::LookupdClose {
                request: pending.id,
            });
        }
        // `listed_by` holds indexes into `lookupds`: drop `i`, shift the ones after it.
        for p in self.nodes.values_mut() {
            p.listed_by = p
                .listed_by
                .iter()
                .filter(|&&j| j != i)
                .map(|&j| if j > i { j - 1 } else { j })
                .collect();
        }
        self.prune(None, sh);
        Ok(())
    }

    /// The consumer is closing: no more polls or reconnects; queries in progress are
    /// abandoned.
    pub(super) fn close(&mut self, sh: &mut Shared) {
        sh.timers.stop(Deadline::LookupdPoll);
        let pending: Vec<LookupdRequestId> = self
            .lookupds
            .iter_mut()
            .filter_map(|l| l.pending.take().map(|p| p.id))
            .collect();
        for request in pending {
            sh.push_action(Action::LookupdClose { request });
        }
        for p in self.nodes.values_mut() {
            p.next_attempt = None;
        }
    }

    /// Bytes of a lookupd response.
    pub(super) fn handle_lookupd_input(
        &mut self,
        now: Instant,
        request: LookupdRequestId,
        data: &[u8],
        sh: &mut Shared,
    ) {
        let Some(i) = self.lookupd_index(request) else {
            return;
        };
        let Some(p) = self.lookupds[i].pending.as_mut() else {
            return;
        };
        match p.parser.feed(data) {
            Ok(None) => {}
            Ok(Some(reply)) => self.lookupd_done(now, i, Ok(reply), sh),
            Err(e) => self.lookupd_done(now, i, Err(e), sh),
        }
    }

    /// The lookupd closed the response stream.
    pub(super) fn handle_lookupd_eof(
        &mut self,
        now: Instant,
        request: LookupdRequestId,
        sh: &mut Shared,
    ) {
        let Some(i) = self.lookupd_index(request) else {
            return;
        };
        let Some(p) = self.lookupds[i].pending.as_mut() else {
            return;
        };
        let result = p.parser.eof();
        self.lookupd_done(now, i, result, sh);
    }

    /// The driver could not complete the lookupd exchange.
    pub(super) fn handle_lookupd_failed(
        &mut self,
        now: Instant,
        request: LookupdRequestId,
        reason: &str,
        sh: &mut Shared,
    ) {
        if let Some(i) = self.lookupd_index(request) {
            let error = LookupdError::Transport(reason.to_string());
            self.lookupd_done(now, i, Err(error), sh);
        }
    }

    /// The discovery deadlines due at `now`: lookupd queries that took too long, the next
    /// poll, reconnects.
    pub(super) fn handle_timeout(&mut self, now: Instant, topic: &Topic, sh: &mut Shared) {
        for i in 0..self.lookupds.len() {
            if self.lookupds[i]
                .pending
                .as_ref()
                .is_some_and(|p| p.deadline <= now)
            {
                self.lookupd_done(now, i, Err(LookupdError::Timeout), sh);
            }
        }
        if sh.timers.is_expired(Deadline::LookupdPoll, now) {
            self.poll_lookupds(now, topic, sh);
        }
        while self.reconnect_queue.first().is_some_and(|(t, _)| *t <= now) {
            let Some((at, addr)) = self.reconnect_queue.pop_first() else {
                break;
            };
            let current = self
                .nodes
                .get(&addr)
                .is_some_and(|p| p.conn.is_none() && p.next_attempt == Some(at));
            if current {
                self.connect(&addr, sh);
            }
        }
    }

    /// Adds the counters of an ended connection to its nsqd's.
    pub(super) fn add_counts(&mut self, addr: &str, counts: &Counts) {
        if let Some(p) = self.nodes.get_mut(addr) {
            p.counts.add(counts);
        }
    }

    /// Connection `id` to `addr` ended (not while closing): a directly added nsqd gets its
    /// reconnect scheduled (the schedule starts over after a `healthy` connection), whose
    /// delay is returned; a discovered one waits for a lookupd to list it again.
    pub(super) fn connection_ended(
        &mut self,
        now: Instant,
        addr: &str,
        id: ConnId,
        healthy: bool,
        misconfigured: bool,
        sh: &mut Shared,
    ) -> Option<Duration> {
        self.seq += 1;
        let seq = self.seq;
        let p = self.nodes.get_mut(addr)?;
        if p.conn != Some(id) {
            return None;
        }
        p.conn = None;
        p.disconnected_seq = seq;
        if misconfigured {
            p.parked = true;
            p.next_attempt = None;
            return None;
        }
        if p.source != Source::Direct {
            return None;
        }
        if healthy {
            p.schedule.reset();
        }
        let delay = p.schedule.next_delay(&mut sh.rng);
        let at = later(now, delay);
        p.next_attempt = Some(at);
        self.reconnect_queue.insert((at, addr.to_owned()));
        Some(delay)
    }

    /// Opens a connection to the known nsqd `addr`, unless closing or it has one.
    fn connect(&mut self, addr: &str, sh: &mut Shared) {
        if sh.closing {
            return;
        }
        let Some(p) = self.nodes.get_mut(addr) else {
            return;
        };
        if p.conn.is_some() || p.parked {
            return;
        }
        let id = ConnId::from_raw(self.next_conn);
        self.next_conn += 1;
        p.conn = Some(id);
        p.next_attempt = None;
        sh.slots.insert(id, Slot::new(addr));
        sh.push_action(Action::Connect {
            conn: id,
            addr: addr.to_string(),
        });
    }

    fn lookupd_index(&self, request: LookupdRequestId) -> Option<usize> {
        self.lookupds
            .iter()
            .position(|l| l.pending.as_ref().is_some_and(|p| p.id == request))
    }

    fn poll_lookupds(&mut self, now: Instant, topic: &Topic, sh: &mut Shared) {
        if sh.closing {
            sh.timers.stop(Deadline::LookupdPoll);
            return;
        }
        for i in 0..self.lookupds.len() {
            if self.lookupds[i].pending.is_some() || self.lookupds[i].parked {
                continue; // still waiting for the previous round's answer, or not a lookupd
            }
            let id = LookupdRequestId::from_raw(self.next_request);
            self.next_request += 1;
            self.seq += 1;
            let l = &mut self.lookupds[i];
            let data = Bytes::from(l.addr.request(topic));
            l.pending = Some(Pending {
                id,
                parser: LookupdResponseParser::new(sh.config.max_lookupd_response_size),
                deadline: later(now, sh.config.lookupd_timeout),
                seq: self.seq,
            });
            let addr = l.addr.authority().to_string();
            sh.push_action(Action::LookupdRequest {
                request: id,
                addr,
                data,
            });
        }
        let interval = sh.config.lookupd_poll_interval;
        let fraction = sh.config.lookupd_poll_jitter;
        let fraction = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let interval = interval.min(MAX_DELAY);
        let jitter = interval.mul_f64(fraction * sh.rng.unit_f64());
        sh.timers
            .set(Deadline::LookupdPoll, later(now, interval + jitter));
    }

    fn lookupd_done(
        &mut self,
        _now: Instant,
        i: usize,
        result: Result<crate::lookup::LookupResponse, LookupdError>,
        sh: &mut Shared,
    ) {
        let Some(p) = self.lookupds[i].pending.take() else {
            return;
        };
        sh.push_action(Action::LookupdClose { request: p.id });
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
                    self.discovered(&addr, p.seq, sh);
                    listed.insert(addr);
                }
                // This answer replaces what this lookupd listed before.
                for (addr, node) in &mut self.nodes {
                    if listed.contains(addr) {
                        node.listed_by.insert(i);
                    } else {
                        node.listed_by.remove(&i);
                    }
                }
                self.prune(None, sh);
                sh.events.push_back(ConsumerEvent::LookupdAnswered {
                    addr: self.lookupds[i].addr.to_string(),
                    producers: listed.len(),
                });
            }
            Err(error) => {
                self.lookupds[i].parked = error.is_misconfiguration();
                let addr = self.lookupds[i].addr.to_string();
                sh.events
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
    pub(super) fn prune(&mut self, only: Option<&str>, sh: &Shared) {
        if sh.closing {
            return;
        }
        let unheld = |p: &Node| {
            p.source == Source::Lookupd
                && p.conn.is_none()
                && p.next_attempt.is_none()
                && p.listed_by.is_empty()
        };
        let forgotten = &mut self.forgotten;
        let history = &mut self.history;
        let mut forget = |addr: &str, p: &Node| {
            tracing::debug!(nsqd = addr, "forgetting an nsqd no lookupd lists any more");
            forgotten.insert(addr.to_string(), p.disconnected_seq);
            history.remember(addr, p.connected);
        };
        match only {
            Some(addr) => {
                if let Some(p) = self.nodes.get(addr).filter(|p| unheld(p)) {
                    forget(addr, p);
                    self.nodes.remove(addr);
                }
            }
            None => self.nodes.retain(|addr, p| {
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

    fn discovered(&mut self, addr: &str, request_seq: u64, sh: &mut Shared) {
        if sh.closing {
            return;
        }
        match self.nodes.get(addr) {
            None => {
                if self
                    .forgotten
                    .get(addr)
                    .is_some_and(|&disconnected| request_seq < disconnected)
                {
                    return; // a stale answer about an nsqd that went away since
                }
                self.forgotten.remove(addr);
                let p = self.node(addr, Source::Lookupd, &sh.config);
                self.nodes.insert(addr.to_string(), p);
                self.connect(addr, sh);
            }
            Some(p) => {
                if p.source == Source::Lookupd
                    && p.conn.is_none()
                    && request_seq > p.disconnected_seq
                {
                    self.connect(addr, sh);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{History, REMEMBERED_ADDRESSES};

    #[test]
    fn history_remembers_the_latest_forgotten_addresses_and_lets_the_oldest_go() {
        let mut h = History::default();
        h.remember("never-connected:4150", 0);
        assert_eq!(h.recall("never-connected:4150"), 0, "nothing to remember");
        for i in 0..=REMEMBERED_ADDRESSES {
            h.remember(&format!("10.0.{}.{}:4150", i / 256, i % 256), 1);
        }
        assert_eq!(
            (h.by_addr.len(), h.order.len()),
            (REMEMBERED_ADDRESSES, REMEMBERED_ADDRESSES)
        );
        assert_eq!(h.recall("10.0.0.0:4150"), 0, "the oldest was let go");
        assert_eq!(h.recall("10.0.0.1:4150"), 1);
        assert_eq!(
            h.recall("10.0.0.1:4150"),
            0,
            "known again: no longer remembered"
        );
        // Forgotten again later: its newer count replaces the older entry.
        h.remember("10.0.0.2:4150", 3);
        assert_eq!(h.order.len(), REMEMBERED_ADDRESSES - 1);
        assert_eq!(h.recall("10.0.0.2:4150"), 3);
    }
}
