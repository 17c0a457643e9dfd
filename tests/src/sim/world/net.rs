//! The network: links with latency and bandwidth, the connections on them (each side's view,
//! and the RDY counts the consumer sent), and nsqlookupd.

use std::time::{Duration, Instant};

use super::nodes::Node;
use super::{CHANNEL, Ev, Links, TOPIC, World};
use crate::model::ClientId;
use crate::sim::client::{Act, ConnRef, SimConsumer};

/// Who owns a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Who {
    Consumer(u32),
    Producer,
}

pub(super) type Key = (Who, ConnRef);

/// One direction of a link.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dir {
    pub(super) free_at: Instant,
    pub(super) last_arrival: Instant,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) nsqd: usize,
    /// Connection generation (events of an older one are dropped).
    pub(super) epoch: u64,
    pub(super) server: Option<ClientId>,
    pub(super) c2s: Dir,
    pub(super) s2c: Dir,
    /// The last RDY the client sent on it.
    pub(super) rdy: u64,
    /// Unparsed client bytes (for RDY).
    scan: Vec<u8>,
    /// The client closed it (what the server sends is dropped).
    pub(super) client_closed: bool,
}

impl Links {
    /// The seed's stream of draws for the links.
    pub(super) fn stream(self) -> u64 {
        match self {
            Links::Regions => 2,
            Links::OneRegion => 12,
        }
    }
}

/// When `len` bytes sent now on `dir` arrive.
pub(super) fn send(dir: &mut Dir, now: Instant, len: usize, node: &Node) -> Instant {
    let start = dir.free_at.max(now);
    let wire = match node.bytes_per_sec {
        Some(rate) => {
            Duration::from_nanos((len as u64).saturating_mul(1_000_000_000) / rate.max(1))
        }
        None => Duration::ZERO,
    };
    dir.free_at = start + wire;
    let mut at = start + wire + node.latency;
    if let Some(s) = node.silent_until {
        at = at.max(s);
    }
    at
}

impl World<'_> {
    pub(super) fn act(&mut self, who: Who, act: Act) {
        match act {
            Act::Connect { conn, addr } => {
                let key = (who, conn);
                self.trace(b'c', conn, addr.as_bytes());
                let Some(&i) = self.addr_index.get(&addr) else {
                    let at = self.now + Duration::from_millis(1);
                    self.next_epoch += 1;
                    let epoch = self.next_epoch;
                    // Unknown host: the connection fails.
                    self.conns.insert(key, self.new_conn(usize::MAX, epoch));
                    self.push(at, Ev::ConnectDone(key, epoch));
                    return;
                };
                self.next_epoch += 1;
                let epoch = self.next_epoch;
                let conn_state = self.new_conn(i, epoch);
                self.conns.insert(key, conn_state);
                let node = &self.nodes[i];
                let mut at = self.now + node.latency * 2;
                if let Some(s) = node.silent_until {
                    at = at.max(s);
                }
                self.push(at, Ev::ConnectDone(key, epoch));
            }
            Act::Transmit { conn, data } => {
                let key = (who, conn);
                if let Who::Consumer(epoch) = who {
                    self.scan_rdy(epoch, key, &data);
                }
                let Some(c) = self.conns.get_mut(&key) else {
                    return;
                };
                if c.nsqd == usize::MAX {
                    return;
                }
                let node = &self.nodes[c.nsqd];
                let mut at = send(&mut c.c2s, self.now, data.len(), node);
                if node.slow > 0 {
                    at += node.slow_extra;
                }
                at = at.max(c.c2s.last_arrival);
                c.c2s.last_arrival = at;
                let epoch = c.epoch;
                self.push(at, Ev::ToServer(key, epoch, data));
            }
            Act::Disconnect { conn } => {
                let key = (who, conn);
                self.trace(b'd', conn, &[]);
                self.forget_rdy(key);
                let Some(c) = self.conns.get(&key) else {
                    return;
                };
                let at = c
                    .c2s
                    .last_arrival
                    .max(self.now + self.nodes.get(c.nsqd).map_or(Duration::ZERO, |n| n.latency));
                let epoch = c.epoch;
                // The client is done with it: what the server still sends is dropped.
                if let Some(c) = self.conns.get_mut(&key) {
                    c.client_closed = true;
                }
                self.push(at, Ev::ServerEof(key, epoch));
            }
            Act::LookupdRequest { req, addr, data } => {
                let Who::Consumer(epoch) = who else { return };
                let k = addr
                    .strip_prefix("lookupd")
                    .and_then(|s| s.split('.').next())
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|k| *k < self.lookupd_up.len());
                let rtt = match self.links {
                    Links::Regions => Duration::from_micros(self.r_net.range(200, 40_000)),
                    Links::OneRegion => Duration::from_millis(1),
                };
                let reply = match k {
                    Some(k) if self.lookupd_up[k] == 0 => Some(self.lookupd_answer(&data)),
                    _ => None,
                };
                let at = self.now + rtt;
                self.push(at, Ev::Lookupd(epoch, req, reply));
            }
            Act::LookupdClose { req } => {
                // Its socket is closed: a reply still on its way is never read.
                if let Who::Consumer(epoch) = who {
                    self.closed_requests.insert((epoch, req));
                }
            }
        }
    }

    fn new_conn(&self, nsqd: usize, epoch: u64) -> Conn {
        let dir = Dir {
            free_at: self.now,
            last_arrival: self.now,
        };
        Conn {
            nsqd,
            epoch,
            server: None,
            c2s: dir,
            s2c: dir,
            rdy: 0,
            scan: Vec::new(),
            client_closed: false,
        }
    }

    pub(super) fn connect_done(&mut self, key: Key, epoch: u64) {
        let Some(c) = self.conns.get(&key) else {
            return;
        };
        if c.epoch != epoch {
            return;
        }
        let i = c.nsqd;
        if i == usize::MAX || self.nodes[i].down > 0 {
            self.conns.remove(&key);
            self.trace(b'f', key.1, &[]);
            self.client_call(key.0, |m, now| {
                m.connect_failed(now, key.1, "connection refused");
            });
            return;
        }
        let now = self.now;
        let sid = self.nodes[i].model.connect(now);
        self.nodes[i].by_server.insert(sid, key);
        if let Some(c) = self.conns.get_mut(&key) {
            c.server = Some(sid);
        }
        self.after_node(i);
        self.trace(b'o', key.1, &[]);
        self.client_call(key.0, |m, now| m.connected(now, key.1));
    }

    /// Bytes the client sent on `key` reach its nsqd (dropped if the connection is gone).
    pub(super) fn arrive_at_server(&mut self, key: Key, epoch: u64, data: &[u8]) {
        let Some(c) = self.conns.get(&key) else {
            return;
        };
        if c.epoch != epoch {
            return;
        }
        let (i, server) = (c.nsqd, c.server);
        if let Some(sid) = server {
            let now = self.now;
            self.nodes[i].model.input(now, sid, data);
            self.after_node(i);
        }
    }

    pub(super) fn server_eof(&mut self, key: Key, epoch: u64) {
        let Some(c) = self.conns.get(&key) else {
            return;
        };
        if c.epoch != epoch {
            return;
        }
        let c = self.conns.remove(&key).expect("present");
        if let Some(sid) = c.server {
            self.nodes[c.nsqd].model.disconnect(sid);
            self.nodes[c.nsqd].by_server.remove(&sid);
            self.after_node(c.nsqd);
        }
    }

    /// Bytes nsqd sent on `key` reach the client (dropped if the connection is gone).
    pub(super) fn arrive_at_client(&mut self, key: Key, epoch: u64, data: &[u8]) {
        if self
            .conns
            .get(&key)
            .is_none_or(|c| c.epoch != epoch || c.client_closed)
        {
            return;
        }
        self.trace(b'i', key.1, &(data.len() as u64).to_le_bytes());
        self.client_call(key.0, |m, now| m.input(now, key.1, data));
    }

    pub(super) fn client_eof(&mut self, key: Key, epoch: u64) {
        if self.conns.get(&key).is_none_or(|c| c.epoch != epoch) {
            return;
        }
        if self.conns.get(&key).is_some_and(|c| c.client_closed) {
            self.conns.remove(&key);
            return;
        }
        self.drop_conn(key);
        self.trace(b'e', key.1, &[]);
        self.client_call(key.0, |m, now| m.eof(now, key.1));
    }

    pub(super) fn conn_node(&self, who: Who, conn: ConnRef) -> Option<usize> {
        self.conns.get(&(who, conn)).map(|c| c.nsqd)
    }

    /// Forgets a connection on the client's side (EOF seen, or it disconnected).
    fn drop_conn(&mut self, key: Key) {
        self.forget_rdy(key);
        self.conns.remove(&key);
    }

    fn forget_rdy(&mut self, key: Key) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let rdy = std::mem::take(&mut c.rdy);
        if let Who::Consumer(epoch) = key.0 {
            if let Some(slot) = self.consumer.as_mut().filter(|s| s.epoch == epoch) {
                slot.rdy_sum -= rdy;
            }
        }
    }

    /// Follows the RDY counts the consumer sends.
    fn scan_rdy(&mut self, epoch: u32, key: Key, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        c.scan.extend_from_slice(data);
        let mut at = 0;
        let buf = std::mem::take(&mut c.scan);
        let mut new_rdy = None;
        if c.epoch > 0 {
            loop {
                let rest = &buf[at..];
                if rest.starts_with(b"  V2") {
                    at += 4;
                    continue;
                }
                let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                    break;
                };
                let line = &rest[..nl];
                let has_body = [&b"IDENTIFY"[..], b"PUB ", b"MPUB ", b"DPUB ", b"AUTH"]
                    .iter()
                    .any(|p| line.starts_with(p));
                if has_body {
                    if rest.len() < nl + 5 {
                        break;
                    }
                    let n = u32::from_be_bytes([
                        rest[nl + 1],
                        rest[nl + 2],
                        rest[nl + 3],
                        rest[nl + 4],
                    ]) as usize;
                    if rest.len() < nl + 5 + n {
                        break;
                    }
                    at += nl + 5 + n;
                    continue;
                }
                if let Some(n) = line.strip_prefix(b"RDY ") {
                    self.report.rdy_commands += 1;
                    if self.now < self.end_of_faults {
                        self.report.fault_phase_rdy_commands += 1;
                    }
                    new_rdy = std::str::from_utf8(n)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok());
                }
                at += nl + 1;
            }
        }
        c.scan = buf[at..].to_vec();
        if let Some(n) = new_rdy {
            tracing::trace!(
                at = self.now.duration_since(self.t0).as_secs_f64(),
                nsqd = c.nsqd,
                from = c.rdy,
                to = n,
                "RDY"
            );
            let old = std::mem::replace(&mut c.rdy, n);
            if let Some(slot) = self.consumer.as_mut().filter(|s| s.epoch == epoch) {
                slot.rdy_sum = slot.rdy_sum - old + n;
            }
        }
    }

    fn lookupd_answer(&self, request: &[u8]) -> Vec<u8> {
        let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        if !(line.contains("/lookup") && line.contains(&format!("topic={TOPIC}"))) {
            let body = r#"{"message":"TOPIC_NOT_FOUND"}"#;
            return format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes();
        }
        lookup_reply(
            CHANNEL,
            self.nodes
                .iter()
                .filter(|n| n.unlisted == 0)
                .map(|n| n.addr.trim_end_matches(":4150")),
        )
    }

    pub(super) fn lookupd_reply(&mut self, epoch: u32, req: ConnRef, reply: Option<&[u8]>) {
        if self.closed_requests.remove(&(epoch, req)) {
            return;
        }
        let f = |m: &mut dyn SimConsumer, now: Instant| match reply {
            Some(data) => {
                m.lookupd_input(now, req, data);
                m.lookupd_eof(now, req);
            }
            None => m.lookupd_failed(now, req, "connection refused"),
        };
        self.epoch_call(epoch, f);
    }
}

/// nsqlookupd's `200 OK` answer to `/lookup` listing `channel` and an nsqd (TCP port 4150,
/// HTTP 4151) on each of `hosts`.
fn lookup_reply(channel: &str, hosts: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<u8> {
    let producers: Vec<serde_json::Value> = hosts
        .into_iter()
        .map(|host| {
            let host = host.as_ref();
            serde_json::json!({
                "remote_address": format!("{host}:40000"),
                "hostname": host,
                "broadcast_address": host,
                "tcp_port": 4150,
                "http_port": 4151,
                "version": "1.3.0",
            })
        })
        .collect();
    let body = serde_json::json!({ "channels": [channel], "producers": producers }).to_string();
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}
