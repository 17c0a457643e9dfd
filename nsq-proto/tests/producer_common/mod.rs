//! Deterministic simulation support for producer tests: sans-IO fake nsqd peers wired to a
//! `Producer`, with virtual time.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "shared test support; not every test uses all of it"
)]

use bytes::BytesMut;
use nsq_proto::driver::{Action, ConnId};
use nsq_proto::producer::{
    PingId, Producer, ProducerConfig, ProducerEvent, PublishFailure, PublishId,
};
use nsq_proto::test_support::{ClientCommand, FakeNsqd, FakeNsqdConfig};
use nsq_proto::{ErrorCode, Topic};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub fn addr(i: usize) -> String {
    format!("10.0.0.{}:4150", i + 1)
}

pub fn topic() -> Topic {
    Topic::new("t").unwrap()
}

/// One fake nsqd host.
#[derive(Debug)]
pub struct Server {
    /// Accepts TCP connections.
    pub up: bool,
    /// Answers publishes right away.
    pub auto_ack: bool,
    /// Leaves Connect actions unanswered (the TCP connect hangs) until `complete_connects`.
    pub hold_connects: bool,
    /// When each connection attempt was made.
    pub connects: Vec<Instant>,
    /// Publish bodies received (PUB and DPUB one each, MPUB all of them), in order.
    pub received: Vec<Vec<u8>>,
    /// NOPs received after IDENTIFY (answers to heartbeats, pings).
    pub nops: usize,
    /// NOPs received before IDENTIFY (the producer's TLS-required probe, one per connection).
    pub probes: usize,
    /// `--max-msg-size`: larger messages are refused like nsqd does (fatal E_BAD_MESSAGE).
    pub max_msg_size: Option<usize>,
    /// `--tls-required`.
    pub tls_required: bool,
    /// Commands received (PUB, MPUB, DPUB), as (verb, message count), in order.
    pub commands: Vec<(&'static str, usize)>,
    /// A refusal (over `max_msg_size`) ends the connection with a reset that destroys the
    /// error frame before the client reads it: the client sees the replies sent before it,
    /// then EOF.
    pub reset_refusals: bool,
    /// The zone and region its IDENTIFY reply states (nsqd after v1.3.0).
    pub topology: Option<(String, String)>,
    /// Its replies (IDENTIFY's first) wait until `release_replies` (a slow nsqd).
    pub hold_replies: bool,
}

pub struct Peer {
    pub addr: String,
    pub fake: FakeNsqd,
    /// IDENTIFY was received.
    pub identified: bool,
}

pub struct World {
    pub producer: Producer,
    pub now: Instant,
    pub servers: BTreeMap<String, Server>,
    pub peers: BTreeMap<ConnId, Peer>,
    pub connecting: Vec<(ConnId, String)>,
    pub events: Vec<ProducerEvent>,
    /// Times each publish id resolved, and how.
    pub resolved: BTreeMap<PublishId, Vec<Result<(), PublishFailure>>>,
    pub pings: BTreeMap<PingId, Vec<Result<(), PublishFailure>>>,
    /// Transmit actions seen, per connection.
    pub transmits: BTreeMap<ConnId, usize>,
    pub heartbeat_every: Option<Duration>,
    next_heartbeat: Option<Instant>,
}

impl World {
    #[allow(clippy::disallowed_methods, reason = "origin of virtual time in tests")]
    pub fn new(config: ProducerConfig, servers: usize) -> World {
        let now = Instant::now();
        let mut w = World {
            producer: Producer::new(config, 7).unwrap(),
            now,
            servers: BTreeMap::new(),
            peers: BTreeMap::new(),
            connecting: Vec::new(),
            events: Vec::new(),
            resolved: BTreeMap::new(),
            pings: BTreeMap::new(),
            transmits: BTreeMap::new(),
            heartbeat_every: Some(Duration::from_secs(30)),
            next_heartbeat: Some(now + Duration::from_secs(30)),
        };
        for i in 0..servers {
            w.servers.insert(
                addr(i),
                Server {
                    up: true,
                    auto_ack: true,
                    hold_connects: false,
                    connects: Vec::new(),
                    received: Vec::new(),
                    nops: 0,
                    probes: 0,
                    max_msg_size: None,
                    tls_required: false,
                    commands: Vec::new(),
                    reset_refusals: false,
                    topology: None,
                    hold_replies: false,
                },
            );
        }
        w
    }

    /// Adds every server to the producer, in order, and settles.
    pub fn add_all(&mut self) {
        let addrs: Vec<String> = self.servers.keys().cloned().collect();
        for a in addrs {
            self.producer.add_nsqd(self.now, &a).unwrap();
        }
        self.settle();
    }

    pub fn server(&mut self, i: usize) -> &mut Server {
        self.servers.get_mut(&addr(i)).unwrap()
    }

    pub fn conn_of(&self, i: usize) -> Option<ConnId> {
        let a = addr(i);
        self.peers
            .iter()
            .find(|(_, p)| p.addr == a)
            .map(|(id, _)| *id)
    }

    /// Publishes every body without settling in between (they wait for the same write),
    /// then settles.
    pub fn publish_together(&mut self, bodies: &[&[u8]]) -> Vec<PublishId> {
        let ids = bodies
            .iter()
            .map(|b| self.producer.publish(self.now, &topic(), b).unwrap())
            .collect();
        self.settle();
        ids
    }

    pub fn publish(&mut self, body: &[u8]) -> PublishId {
        let id = self.producer.publish(self.now, &topic(), body).unwrap();
        self.settle();
        id
    }

    fn open(&mut self, conn: ConnId, a: String) {
        let up = self.servers.get(&a).is_some_and(|s| s.up);
        if up {
            let s = &self.servers[&a];
            let fake = FakeNsqd::new(FakeNsqdConfig {
                auto_ack_publishes: s.auto_ack,
                max_msg_size: s.max_msg_size,
                tls_required: s.tls_required,
                topology: s.topology.clone(),
                ..FakeNsqdConfig::default()
            });
            self.peers.insert(
                conn,
                Peer {
                    addr: a,
                    fake,
                    identified: false,
                },
            );
            self.producer.handle_connected(self.now, conn);
        } else {
            self.producer
                .handle_connect_failed(self.now, conn, "connection refused");
        }
    }

    /// Server `i`'s held replies go out, and its later ones at once.
    pub fn release_replies(&mut self, i: usize) {
        self.server(i).hold_replies = false;
        self.settle();
    }

    /// Completes every held TCP connect.
    pub fn complete_connects(&mut self) {
        for (conn, a) in std::mem::take(&mut self.connecting) {
            self.open(conn, a);
        }
        self.settle();
    }

    /// Moves bytes and events until nothing moves.
    pub fn settle(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(action) = self.producer.poll_action() {
                progressed = true;
                match action {
                    Action::Connect { conn, addr } => {
                        if let Some(s) = self.servers.get_mut(&addr) {
                            s.connects.push(self.now);
                        }
                        if self.servers.get(&addr).is_some_and(|s| s.hold_connects) {
                            self.connecting.push((conn, addr));
                        } else {
                            self.open(conn, addr);
                        }
                    }
                    Action::Transmit { conn, data } => {
                        *self.transmits.entry(conn).or_default() += 1;
                        if let Some(p) = self.peers.get_mut(&conn) {
                            p.fake.receive(&data);
                            let cmds = p.fake.take_commands();
                            let server = self.servers.get_mut(&p.addr).unwrap();
                            for c in cmds {
                                match c {
                                    ClientCommand::Pub { body, .. } => {
                                        server.commands.push(("PUB", 1));
                                        server.received.push(body.to_vec());
                                    }
                                    ClientCommand::Dpub { body, .. } => {
                                        server.commands.push(("DPUB", 1));
                                        server.received.push(body.to_vec());
                                    }
                                    ClientCommand::Mpub { bodies, .. } => {
                                        server.commands.push(("MPUB", bodies.len()));
                                        server.received.extend(bodies.iter().map(|b| b.to_vec()));
                                    }
                                    ClientCommand::Identify(_) => p.identified = true,
                                    ClientCommand::Nop if p.identified => server.nops += 1,
                                    ClientCommand::Nop => server.probes += 1,
                                    _ => {}
                                }
                            }
                        }
                    }
                    Action::Disconnect { conn } => {
                        self.peers.remove(&conn);
                        self.connecting.retain(|(c, _)| *c != conn);
                    }
                    other => panic!("unexpected action {other:?}"),
                }
            }
            let ids: Vec<ConnId> = self
                .peers
                .iter()
                .filter(|(_, p)| !self.servers[&p.addr].hold_replies)
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                let peer = self.peers.get_mut(&id).unwrap();
                let mut out = peer.fake.take_output();
                let reset = peer.fake.is_closed() && self.servers[&peer.addr].reset_refusals;
                if reset {
                    out.truncate(before_first_error(&out));
                }
                if !out.is_empty() {
                    progressed = true;
                    let mut buf = BytesMut::from(&out[..]);
                    self.producer.handle_input(self.now, id, &mut buf);
                }
                if reset {
                    progressed = true;
                    self.peers.remove(&id);
                    self.producer.handle_eof(self.now, id);
                }
            }
            while let Some(e) = self.producer.poll_event() {
                progressed = true;
                match &e {
                    ProducerEvent::Published(id) => {
                        self.resolved.entry(*id).or_default().push(Ok(()));
                    }
                    ProducerEvent::PublishFailed(id, f) => {
                        self.resolved.entry(*id).or_default().push(Err(f.clone()));
                    }
                    ProducerEvent::PingOk(id) => self.pings.entry(*id).or_default().push(Ok(())),
                    ProducerEvent::PingFailed(id, f) => {
                        self.pings.entry(*id).or_default().push(Err(f.clone()));
                    }
                    _ => {}
                }
                self.events.push(e);
            }
            if !progressed {
                return;
            }
        }
    }

    /// Acknowledges `n` publishes on server `i`'s connection (server with `auto_ack: false`).
    pub fn ack(&mut self, i: usize, n: usize) {
        let conn = self.conn_of(i).expect("connected");
        let p = self.peers.get_mut(&conn).unwrap();
        for _ in 0..n {
            p.fake.send_ok();
        }
        self.settle();
    }

    /// Acknowledges `n` publishes on server `i`, with a heartbeat before every `every`-th OK.
    pub fn ack_with_heartbeats(&mut self, i: usize, n: usize, every: usize) {
        let conn = self.conn_of(i).expect("connected");
        let p = self.peers.get_mut(&conn).unwrap();
        for k in 0..n {
            if k % every == 0 {
                p.fake.send_heartbeat();
            }
            p.fake.send_ok();
        }
        self.settle();
    }

    /// Rejects the next publish on server `i` with a fatal error, like nsqd.
    pub fn reject(&mut self, i: usize) {
        let conn = self.conn_of(i).expect("connected");
        let p = self.peers.get_mut(&conn).unwrap();
        p.fake
            .close_with_error(ErrorCode::BadTopic, "PUB topic name is not valid");
        self.settle();
    }

    /// Server `i` closes its connections (they hit EOF) and stays up.
    pub fn drop_connections(&mut self, i: usize) {
        let a = addr(i);
        let gone: Vec<ConnId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.addr == a)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.peers.remove(&id);
            self.producer.handle_eof(self.now, id);
        }
        self.settle();
    }

    /// Server `i` goes down: its connections hit EOF, new connects are refused.
    pub fn kill(&mut self, i: usize) {
        let a = addr(i);
        self.servers.get_mut(&a).unwrap().up = false;
        let dead: Vec<ConnId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.addr == a)
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            self.peers.remove(&id);
            self.producer.handle_eof(self.now, id);
        }
        self.settle();
    }

    pub fn revive(&mut self, i: usize) {
        self.server(i).up = true;
    }

    /// Virtual time moves to `t`, firing every producer timeout (and server heartbeats) on
    /// the way.
    pub fn run_until(&mut self, t: Instant) {
        loop {
            let next_timeout = self.producer.poll_timeout().filter(|&x| x <= t);
            let next_hb = self.next_heartbeat.filter(|&x| x <= t);
            let next = match (next_timeout, next_hb) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(x) => x,
                    None => break,
                },
            };
            self.now = self.now.max(next);
            if next_hb == Some(next) {
                for p in self.peers.values_mut() {
                    p.fake.send_heartbeat();
                }
                self.next_heartbeat = self.heartbeat_every.map(|d| next + d);
            }
            if next_timeout == Some(next) {
                self.producer.handle_timeout(self.now);
            }
            self.settle();
        }
        self.now = self.now.max(t);
        self.settle();
    }

    pub fn advance(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_until(t);
    }

    /// Asserts every id resolved exactly once; returns how many failed.
    pub fn assert_resolved_once(&self, ids: &[PublishId]) -> usize {
        let mut failed = 0;
        for id in ids {
            let r = self
                .resolved
                .get(id)
                .unwrap_or_else(|| panic!("{id} unresolved"));
            assert_eq!(r.len(), 1, "{id} resolved {} times: {r:?}", r.len());
            if r[0].is_err() {
                failed += 1;
            }
        }
        failed
    }

    pub fn outcome(&self, id: PublishId) -> &Result<(), PublishFailure> {
        let r = &self.resolved[&id];
        assert_eq!(r.len(), 1, "{id}: {r:?}");
        &r[0]
    }

    pub fn is_resolved(&self, id: PublishId) -> bool {
        self.resolved.contains_key(&id)
    }
}

/// Where the first error frame starts in `out` (a server's bytes, whole frames), or its
/// length if there is none.
fn before_first_error(out: &[u8]) -> usize {
    let mut at = 0;
    while let Some(head) = out.get(at..at + 8) {
        let size = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if u32::from_be_bytes([head[4], head[5], head[6], head[7]]) == 1 {
            return at;
        }
        at += 4 + size;
    }
    out.len()
}
