//! Deterministic simulation support for consumer tests: sans-IO fake nsqd peers and fake
//! lookupds wired to a `Consumer`, with virtual time.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "shared test support; not every test uses all of it"
)]

use bytes::{Bytes, BytesMut};
use nsq_proto::consumer::{Consumer, ConsumerConfig, ConsumerEvent};
use nsq_proto::driver::{Action, ConnId, LookupdRequestId};
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig};
use nsq_proto::{Channel, Message, MessageId, Topic};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

pub use nsq_proto::test_support::ClientCommand as Cmd;

/// The server side of one TCP connection: the Connection helper's scripted [`FakeNsqd`]
/// (which parses commands and enforces nsqd's rules) plus the message bookkeeping of a topic
/// queue (attempts, bodies, msg_timeout deadlines).
pub struct FakeConn {
    pub addr: String,
    pub peer: FakeNsqd,
    pub log: Vec<Cmd>,
    pub in_flight: BTreeMap<MessageId, (u16, Bytes, Instant)>,
    pub dead: bool,
    pub closing: bool,
    next_heartbeat: Option<Instant>,
    pub delivered: u64,
}

/// One fake nsqd: a message queue shared by its connections.
#[derive(Debug)]
pub struct NsqdState {
    pub up: bool,
    pub max_rdy: u32,
    /// Messages waiting: the attempts made so far, the body, and for one the client
    /// requeued with no delay (REQ 0) its id, which nsqd keeps. (This fake ignores REQ
    /// delays, and one that timed out or whose connection was lost comes back at once: they
    /// come back under a new id, so that a late answer of the application names a message
    /// no longer in flight, as it would on nsqd.)
    pub queue: VecDeque<(u16, Bytes, Option<MessageId>)>,
    /// Keep the queue topped up to this many messages (steady traffic).
    pub steady: usize,
    pub msg_timeout: Duration,
    /// The max_msg_timeout announced in IDENTIFY's reply.
    pub max_msg_timeout: Duration,
    pub delivered: u64,
    pub connects: Vec<Instant>,
    /// `--tls-required`: the consumer (without TLS) cannot use it.
    pub tls_required: bool,
    /// The next message id (ids are unique per nsqd, over its connections).
    next_id: u64,
}

/// A fake nsqlookupd.
#[derive(Debug, Clone)]
pub struct FakeLookupd {
    pub mode: LookupdMode,
    pub producers: Vec<String>,
    pub queries: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupdMode {
    Up,
    Down,
    Hang,
    NotFound,
    Chunked,
    /// nsqd's HTTP port given as a lookupd: `404 NOT_FOUND` for `/lookup`.
    NsqdHttp,
}

/// How the simulated application answers messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    Finish,
    RequeueBackoff,
    RequeueNoBackoff,
    Hold,
    /// A busy handler: each message is finished this long after it arrived.
    FinishAfter(Duration),
}

pub struct World {
    pub now: Instant,
    pub start: Instant,
    pub consumer: Consumer,
    pub nsqds: BTreeMap<String, NsqdState>,
    pub conns: BTreeMap<ConnId, FakeConn>,
    pub lookupds: BTreeMap<String, FakeLookupd>,
    pub events: Vec<ConsumerEvent>,
    pub held: Vec<(ConnId, Message)>,
    /// Messages in a [`Handler::FinishAfter`] handler, with the instant they are finished.
    pub busy: Vec<(Instant, ConnId, Message)>,
    pub handler: Handler,
    /// Allowed total RDY while a max_in_flight change is being applied.
    limit: u32,
    /// Allowed total of messages in flight as the servers see them: max_in_flight, or
    /// (after max_in_flight was lowered below what was in flight) what is in flight, never
    /// growing until it is back under max_in_flight.
    inflight_limit: u32,
    pub max_total_rdy_seen: u32,
    pub max_total_in_flight_seen: u32,
    pub violations: Vec<String>,
    pub received_per_addr: BTreeMap<String, u64>,
    pub last_served: BTreeMap<String, Instant>,
    pub served_at: BTreeMap<String, Vec<Instant>>,
    pub lookupd_requests: Vec<(LookupdRequestId, String)>,
    /// How long the servers' bytes take to reach the consumer (commands reach the servers at
    /// once): messages nsqd sent before it read a lower RDY arrive after it.
    pub latency: Duration,
    /// Server bytes on their way to the consumer.
    wire: VecDeque<(Instant, ConnId, Bytes)>,
    /// When steady queues are topped up next.
    next_traffic: Instant,
}

pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// With steady traffic, queues are topped up this often.
pub const TRAFFIC_TICK: Duration = Duration::from_secs(1);

impl NsqdState {
    pub fn new(max_rdy: u32) -> NsqdState {
        NsqdState {
            up: true,
            max_rdy,
            queue: VecDeque::new(),
            steady: 0,
            msg_timeout: Duration::from_secs(60),
            max_msg_timeout: Duration::from_secs(15 * 60),
            delivered: 0,
            connects: Vec::new(),
            tls_required: false,
            next_id: 0,
        }
    }

    /// A new message id, as nsqd makes one when a message is published.
    fn new_id(&mut self) -> MessageId {
        let hex = format!("{:016x}", self.next_id);
        self.next_id += 1;
        let mut id = [0u8; 16];
        id.copy_from_slice(hex.as_bytes());
        MessageId::new(id)
    }

    /// Queues `n` messages whose next delivery will carry `attempts`.
    pub fn push(&mut self, n: usize, attempts: u16) {
        for _ in 0..n {
            self.queue.push_back((
                attempts.saturating_sub(1),
                Bytes::from_static(b"payload"),
                None,
            ));
        }
    }
}

impl FakeConn {
    fn new(addr: &str, nsqd: &NsqdState) -> FakeConn {
        FakeConn {
            addr: addr.to_string(),
            peer: FakeNsqd::new(FakeNsqdConfig {
                max_rdy_count: i64::from(nsqd.max_rdy),
                msg_timeout_ms: nsqd.msg_timeout.as_millis() as i64,
                max_msg_timeout_ms: nsqd.max_msg_timeout.as_millis() as i64,
                tls_required: nsqd.tls_required,
                ..FakeNsqdConfig::default()
            }),
            log: Vec::new(),
            in_flight: BTreeMap::new(),
            dead: false,
            closing: false,
            next_heartbeat: None,
            delivered: 0,
        }
    }

    /// The RDY the server holds for this client.
    pub fn rdy(&self) -> u32 {
        self.peer.rdy()
    }

    /// Feeds client bytes to the server and applies the commands to the topic queue.
    fn feed(
        &mut self,
        now: Instant,
        nsqd: &mut NsqdState,
        data: &[u8],
        violations: &mut Vec<String>,
    ) {
        self.peer.receive(data);
        for cmd in self.peer.take_commands() {
            match &cmd {
                Cmd::Identify(_) => self.next_heartbeat = Some(now + HEARTBEAT),
                Cmd::Rdy(n) if *n > nsqd.max_rdy => {
                    violations.push(format!("{}: RDY {n} above max {}", self.addr, nsqd.max_rdy));
                }
                Cmd::Fin(id) => {
                    self.in_flight.remove(id);
                }
                Cmd::Req(id, delay) => {
                    if let Some((attempts, body, _)) = self.in_flight.remove(id) {
                        let keep = (*delay == 0).then_some(*id);
                        nsqd.queue.push_back((attempts, body, keep));
                    }
                }
                Cmd::Touch(id) => {
                    if let Some((_, _, deadline)) = self.in_flight.get_mut(id) {
                        *deadline = now + nsqd.msg_timeout;
                    }
                }
                Cmd::Cls => self.closing = true,
                Cmd::Invalid(line) => {
                    violations.push(format!("{}: invalid command {line}", self.addr));
                }
                _ => {}
            }
            self.log.push(cmd);
        }
        if let Some(f) = self.peer.failure() {
            violations.push(format!("{}: server failure {f}", self.addr));
        }
        if self.peer.is_closed() {
            self.dead = true;
        }
    }

    fn deliver(&mut self, now: Instant, nsqd: &mut NsqdState) {
        while !self.dead
            && self.peer.is_subscribed()
            && !self.closing
            && (self.in_flight.len() as u32) < self.peer.rdy()
        {
            let Some((attempts, body, id)) = nsqd.queue.pop_front() else {
                return;
            };
            // The queue stores the attempts made so far; this delivery is one more.
            let attempts = attempts.saturating_add(1);
            let id = id.unwrap_or_else(|| nsqd.new_id());
            self.peer.send_message(id, attempts, &body);
            self.in_flight
                .insert(id, (attempts, body, now + nsqd.msg_timeout));
            nsqd.delivered += 1;
            self.delivered += 1;
        }
    }
}

impl World {
    pub fn new(config: ConsumerConfig, seed: u64) -> World {
        #[allow(
            clippy::disallowed_methods,
            reason = "tests need one real Instant as the origin of virtual time"
        )]
        let now = Instant::now();
        let limit = config.max_in_flight;
        let consumer = Consumer::new(
            config,
            Topic::new("topic").unwrap(),
            Channel::new("chan").unwrap(),
            seed,
        );
        World {
            now,
            start: now,
            consumer,
            nsqds: BTreeMap::new(),
            conns: BTreeMap::new(),
            lookupds: BTreeMap::new(),
            events: Vec::new(),
            held: Vec::new(),
            busy: Vec::new(),
            handler: Handler::Finish,
            limit,
            inflight_limit: limit,
            max_total_rdy_seen: 0,
            max_total_in_flight_seen: 0,
            violations: Vec::new(),
            received_per_addr: BTreeMap::new(),
            last_served: BTreeMap::new(),
            served_at: BTreeMap::new(),
            lookupd_requests: Vec::new(),
            latency: Duration::ZERO,
            wire: VecDeque::new(),
            next_traffic: now,
        }
    }

    pub fn add_nsqd(&mut self, addr: &str, max_rdy: u32) {
        self.nsqds.insert(addr.to_string(), NsqdState::new(max_rdy));
    }

    pub fn add_fake_lookupd(&mut self, addr: &str, producers: &[&str]) {
        self.lookupds.insert(
            addr.to_string(),
            FakeLookupd {
                mode: LookupdMode::Up,
                producers: producers.iter().map(ToString::to_string).collect(),
                queries: 0,
            },
        );
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Total RDY as the servers see it, over live subscribed connections.
    pub fn server_total_rdy(&self) -> u32 {
        self.conns
            .values()
            .filter(|c| !c.dead && !c.closing)
            .map(FakeConn::rdy)
            .sum()
    }

    pub fn consumer_total_rdy(&self) -> u32 {
        self.consumer
            .connections()
            .map(|(id, _)| self.consumer.rdy(id))
            .sum()
    }

    pub fn conn_of(&self, addr: &str) -> Option<ConnId> {
        self.conns
            .iter()
            .find(|(_, c)| c.addr == addr && !c.dead)
            .map(|(id, _)| *id)
    }

    /// Messages in flight as the servers see them (delivered, not yet answered, requeued
    /// or timed out), over every live connection.
    pub fn server_total_in_flight(&self) -> u32 {
        self.conns
            .values()
            .filter(|c| !c.dead)
            .map(|c| c.in_flight.len() as u32)
            .sum()
    }

    fn check_rdy(&mut self) {
        let total = self.server_total_rdy();
        self.max_total_rdy_seen = self.max_total_rdy_seen.max(total);
        if total > self.limit {
            self.violations
                .push(format!("total RDY {total} > max_in_flight {}", self.limit));
        }
        self.check_in_flight();
    }

    /// max_in_flight bounds the messages in flight, not only RDY.
    fn check_in_flight(&mut self) {
        let total = self.server_total_in_flight();
        self.max_total_in_flight_seen = self.max_total_in_flight_seen.max(total);
        if total > self.inflight_limit {
            self.violations.push(format!(
                "{total} messages in flight > max_in_flight {} (allowed {})",
                self.limit, self.inflight_limit
            ));
        }
        let m = self.consumer.max_in_flight();
        self.inflight_limit = m.max(self.inflight_limit.min(total));
    }

    /// Runs every queued action and event until nothing is left.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            let mut progressed = false;
            while let Some(action) = self.consumer.poll_action() {
                progressed = true;
                self.do_action(action);
            }
            // Server pushes.
            let ids: Vec<ConnId> = self.conns.keys().copied().collect();
            for id in ids {
                let conn = self.conns.get_mut(&id).unwrap();
                if conn.dead {
                    continue;
                }
                let nsqd = self.nsqds.get_mut(&conn.addr).unwrap();
                conn.deliver(self.now, nsqd);
                self.check_in_flight();
                let conn = self.conns.get_mut(&id).unwrap();
                let out = conn.peer.take_output();
                if !out.is_empty() {
                    progressed = true;
                    if self.latency.is_zero() {
                        let mut data = BytesMut::from(&out[..]);
                        self.consumer.handle_input(self.now, id, &mut data);
                    } else {
                        self.wire.push_back((self.now + self.latency, id, out));
                    }
                }
            }
            while self.wire.front().is_some_and(|(t, _, _)| *t <= self.now) {
                let (_, id, out) = self.wire.pop_front().unwrap();
                progressed = true;
                if self.conns.get(&id).is_some_and(|c| !c.dead) {
                    let mut data = BytesMut::from(&out[..]);
                    self.consumer.handle_input(self.now, id, &mut data);
                }
            }
            while let Some(event) = self.consumer.poll_event() {
                progressed = true;
                self.on_event(event);
            }
            if !progressed {
                return;
            }
        }
        panic!("simulation did not settle");
    }

    fn do_action(&mut self, action: Action) {
        match action {
            Action::Connect { conn, addr } => {
                let up = self.nsqds.get(&addr).is_some_and(|n| n.up);
                if up {
                    self.nsqds.get_mut(&addr).unwrap().connects.push(self.now);
                    let fc = FakeConn::new(&addr, &self.nsqds[&addr]);
                    self.conns.insert(conn, fc);
                    self.consumer.handle_connected(self.now, conn);
                } else {
                    self.consumer
                        .handle_connect_failed(self.now, conn, "connection refused");
                }
            }
            Action::Transmit { conn, data } => {
                let Some(fc) = self.conns.get_mut(&conn) else {
                    self.violations.push(format!("transmit to unknown {conn}"));
                    return;
                };
                if fc.dead {
                    return;
                }
                let nsqd = self.nsqds.get_mut(&fc.addr).unwrap();
                fc.feed(self.now, nsqd, &data, &mut self.violations);
                let dead = fc.dead;
                let mut out = if dead {
                    BytesMut::from(&fc.peer.take_output()[..])
                } else {
                    BytesMut::new()
                };
                self.check_rdy();
                if dead {
                    self.consumer.handle_input(self.now, conn, &mut out);
                    self.consumer.handle_eof(self.now, conn);
                }
            }
            Action::Disconnect { conn } => {
                if let Some(fc) = self.conns.remove(&conn) {
                    // The server requeues what was in flight.
                    if let Some(nsqd) = self.nsqds.get_mut(&fc.addr) {
                        for (_, (attempts, body, _)) in fc.in_flight {
                            nsqd.queue.push_back((attempts, body, None));
                        }
                    }
                }
            }
            Action::LookupdRequest {
                request,
                addr,
                data,
            } => {
                self.lookupd_requests.push((request, addr.clone()));
                let text = String::from_utf8_lossy(&data).to_string();
                assert!(
                    text.starts_with("GET /lookup?topic=topic HTTP/1.1\r\n"),
                    "{text}"
                );
                let Some(l) = self.lookupds.get_mut(&addr) else {
                    self.consumer
                        .handle_lookupd_failed(self.now, request, "connection refused");
                    return;
                };
                l.queries += 1;
                let producers: Vec<String> = l
                    .producers
                    .iter()
                    .map(|p| {
                        let (h, port) = p.rsplit_once(':').unwrap();
                        format!(r#"{{"broadcast_address":"{h}","hostname":"{h}","remote_address":"{p}","tcp_port":{port},"http_port":4151,"version":"1.3.0"}}"#)
                    })
                    .collect();
                let body = format!(
                    r#"{{"channels":["chan"],"producers":[{}]}}"#,
                    producers.join(",")
                );
                match l.mode {
                    LookupdMode::Down => {
                        self.consumer.handle_lookupd_failed(
                            self.now,
                            request,
                            "connection refused",
                        );
                    }
                    LookupdMode::Hang => {}
                    LookupdMode::NsqdHttp => {
                        let body = r#"{"message":"NOT_FOUND"}"#;
                        let resp = format!(
                            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        self.consumer
                            .handle_lookupd_input(self.now, request, resp.as_bytes());
                    }
                    LookupdMode::NotFound => {
                        let body = r#"{"message":"TOPIC_NOT_FOUND"}"#;
                        let resp = format!(
                            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        self.consumer
                            .handle_lookupd_input(self.now, request, resp.as_bytes());
                    }
                    LookupdMode::Up => {
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        for chunk in resp.as_bytes().chunks(17) {
                            self.consumer.handle_lookupd_input(self.now, request, chunk);
                        }
                    }
                    LookupdMode::Chunked => {
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                            body.len()
                        );
                        self.consumer
                            .handle_lookupd_input(self.now, request, resp.as_bytes());
                        self.consumer.handle_lookupd_eof(self.now, request);
                    }
                }
            }
            Action::LookupdClose { .. } => {}
            other => self.violations.push(format!("unknown action {other:?}")),
        }
    }

    fn on_event(&mut self, event: ConsumerEvent) {
        if let ConsumerEvent::Message { conn, message } = &event {
            let addr = self
                .conns
                .get(conn)
                .map(|c| c.addr.clone())
                .unwrap_or_default();
            *self.received_per_addr.entry(addr.clone()).or_default() += 1;
            let times = self.served_at.entry(addr.clone()).or_default();
            if times.last() != Some(&self.now) {
                times.push(self.now);
            }
            self.last_served.insert(addr, self.now);
            let (conn, message) = (*conn, message.clone());
            match self.handler {
                Handler::Finish => self.consumer.finish(self.now, conn, &message.id).unwrap(),
                Handler::RequeueBackoff => {
                    self.consumer
                        .requeue(self.now, conn, &message, Some(Duration::ZERO), true)
                        .unwrap();
                }
                Handler::RequeueNoBackoff => {
                    self.consumer
                        .requeue(self.now, conn, &message, Some(Duration::ZERO), false)
                        .unwrap();
                }
                Handler::Hold => self.held.push((conn, message)),
                Handler::FinishAfter(d) => self.busy.push((self.now + d, conn, message)),
            }
        }
        self.events.push(event);
    }

    /// Finishes the [`Handler::FinishAfter`] messages whose time has come, oldest first.
    fn finish_busy(&mut self) {
        let now = self.now;
        let mut due: Vec<(Instant, ConnId, Message)> = Vec::new();
        self.busy.retain(|b| {
            if b.0 <= now {
                due.push(b.clone());
                false
            } else {
                true
            }
        });
        due.sort_by_key(|b| b.0);
        for (_, conn, m) in due {
            let _ = self.consumer.finish(now, conn, &m.id);
            self.settle();
        }
    }

    /// Finishes every held message.
    pub fn finish_held(&mut self) {
        for (conn, m) in std::mem::take(&mut self.held) {
            let _ = self.consumer.finish(self.now, conn, &m.id);
        }
        self.settle();
    }

    pub fn set_max_in_flight(&mut self, n: u32) {
        self.limit = self.limit.max(n);
        self.inflight_limit = n.max(self.server_total_in_flight());
        self.consumer.set_max_in_flight(self.now, n);
        self.settle();
        self.limit = n;
        self.check_rdy();
    }

    /// The next instant something is due: the consumer's deadline or a server heartbeat or
    /// message expiry.
    fn next_due(&self) -> Option<Instant> {
        let servers = self.conns.values().filter(|c| !c.dead).flat_map(|c| {
            c.next_heartbeat
                .into_iter()
                .chain(c.in_flight.values().map(|(_, _, d)| *d))
        });
        let traffic = self
            .nsqds
            .values()
            .any(|n| n.steady > 0)
            .then(|| self.next_traffic.max(self.now));
        let handlers = self.busy.iter().map(|(t, _, _)| *t).min();
        let wire = self.wire.front().map(|(t, _, _)| *t);
        self.consumer
            .poll_timeout()
            .into_iter()
            .chain(servers)
            .chain(traffic)
            .chain(handlers)
            .chain(wire)
            .min()
    }

    /// Advances virtual time to `until`, jumping from deadline to deadline.
    pub fn run_until(&mut self, until: Instant) {
        self.settle();
        for _ in 0..1_000_000 {
            let Some(next) = self.next_due() else { break };
            if next > until {
                break;
            }
            self.now = self.now.max(next);
            self.fire_servers();
            self.consumer.handle_timeout(self.now);
            self.settle();
            self.finish_busy();
        }
        self.now = self.now.max(until);
        self.settle();
    }

    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    fn fire_servers(&mut self) {
        let now = self.now;
        if now >= self.next_traffic {
            self.next_traffic = now + TRAFFIC_TICK;
            for nsqd in self.nsqds.values_mut() {
                if nsqd.queue.len() < nsqd.steady {
                    let missing = nsqd.steady - nsqd.queue.len();
                    nsqd.push(missing, 1);
                }
            }
        }
        for (id, c) in &mut self.conns {
            if c.dead {
                continue;
            }
            if c.next_heartbeat.is_some_and(|t| t <= now) {
                c.peer.send_heartbeat();
                c.next_heartbeat = Some(now + HEARTBEAT);
            }
            let expired: Vec<MessageId> = c
                .in_flight
                .iter()
                .filter(|(_, (_, _, d))| *d <= now)
                .map(|(k, _)| *k)
                .collect();
            let nsqd = self.nsqds.get_mut(&c.addr).unwrap();
            for k in expired {
                let (attempts, body, _) = c.in_flight.remove(&k).unwrap();
                c.peer.time_out(&k);
                nsqd.queue.push_back((attempts, body, None));
            }
            let _ = id;
        }
    }

    /// The server side drops the connection to `addr` (as if nsqd went away).
    pub fn kill_nsqd(&mut self, addr: &str) {
        self.nsqds.get_mut(addr).unwrap().up = false;
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.addr == addr)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.conns.get_mut(&id).unwrap().dead = true;
            self.consumer.handle_eof(self.now, id);
        }
        self.settle();
    }

    pub fn revive_nsqd(&mut self, addr: &str) {
        self.nsqds.get_mut(addr).unwrap().up = true;
    }

    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "violations: {:#?}",
            self.violations
        );
    }

    pub fn count_events(&self, f: impl Fn(&ConsumerEvent) -> bool) -> usize {
        self.events.iter().filter(|e| f(e)).count()
    }
}

/// A config for simulations.
pub fn config(max_in_flight: u32) -> ConsumerConfig {
    ConsumerConfig {
        max_in_flight,
        ..ConsumerConfig::default()
    }
}

pub fn addr(i: usize) -> String {
    format!("10.0.0.{}:4150", i + 1)
}

impl World {
    /// The longest stretch within `[from, self.now]` during which `addr` received nothing.
    pub fn max_service_gap(&self, addr: &str, from: Instant) -> Duration {
        let mut last = from;
        let mut gap = Duration::ZERO;
        for &t in self.served_at.get(addr).map_or(&[][..], Vec::as_slice) {
            if t < from {
                continue;
            }
            gap = gap.max(t - last);
            last = t;
        }
        gap.max(self.now - last)
    }
}
