//! The nsqd: each one the shared [`crate::model`] behind its link, what it writes to its
//! clients, its timers, and what is published to it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::net::{Key, Who, send};
use super::{CHANNEL, Ev, Links, Load, TOPIC, Timers, World};
use crate::model::{ClientId, ClientState, Nsqd, NsqdOptions};
use crate::sim::SimConfig;
use crate::sim::rng::Rng;

/// In a busy world, what every nsqd is topped up to (messages ready) whenever it falls
/// under half of it, during the fault phase.
const BUSY_DEPTH: usize = 20;

#[derive(Debug)]
pub(super) struct Node {
    pub(super) model: Nsqd,
    pub(super) addr: String,
    pub(super) down: u32,
    pub(super) unlisted: u32,
    pub(super) silent_until: Option<Instant>,
    pub(super) slow: u32,
    pub(super) slow_extra: Duration,
    pub(super) latency: Duration,
    /// The link's bandwidth (`None`: no limit).
    pub(super) bytes_per_sec: Option<u64>,
    pub(super) timer_at: Option<Instant>,
    pub(super) by_server: HashMap<ClientId, Key>,
    /// Since when (on the eligible clock) it has waited with messages and a subscriber.
    pub(super) waiting_since: Option<Duration>,
    /// A busy world's top-up of it is scheduled.
    pub(super) refill_pending: bool,
}

/// The nsqd of `cfg`, each with its channel, on links drawn from `r_net`.
pub(super) fn build(
    cfg: &SimConfig,
    links: Links,
    opts: &NsqdOptions,
    r_net: &mut Rng,
    t0: Instant,
) -> Vec<Node> {
    // 2026-01-01T00:00:00Z, so message timestamps do not depend on the clock.
    let unix0: i64 = 1_767_225_600_000_000_000;
    (0..cfg.nsqd)
        .map(|i| {
            let addr = format!("nsqd{i}.sim:4150");
            let mut model = Nsqd::new(opts.clone(), (i as u64) << 40, t0, unix0);
            model.create_channel(t0, TOPIC, CHANNEL);
            let (latency, bytes_per_sec) = match links {
                Links::Regions => {
                    let latency = Duration::from_micros(match r_net.below(100) {
                        0..70 => r_net.range(100, 2_000),
                        70..95 => r_net.range(5_000, 40_000),
                        _ => r_net.range(60_000, 120_000),
                    });
                    (latency, Some(r_net.range(1, 100) * 1_000_000))
                }
                Links::OneRegion => (Duration::from_micros(r_net.range(100, 2_000)), None),
            };
            Node {
                model,
                addr,
                down: 0,
                unlisted: 0,
                silent_until: None,
                slow: 0,
                slow_extra: Duration::ZERO,
                latency,
                bytes_per_sec,
                timer_at: None,
                by_server: HashMap::new(),
                waiting_since: None,
                refill_pending: false,
            }
        })
        .collect()
}

/// How long the consumer's low-RDY rotation takes to give each of `nodes` one idle turn
/// (see [`SimConfig::effective_starvation_bound`]): an idle turn's seat time per nsqd is its
/// idle wait (the consumer's, `idle_wait`, for a handshake of two round trips: twice the
/// handshake, within 100 ms ..= 1 s by default) and the settle time of its RDY 0 (the
/// handshake), over max_in_flight seats.
pub(super) fn probe_round(
    nodes: &[Node],
    cfg: &SimConfig,
    idle_wait: impl Fn(Duration) -> Duration,
) -> Duration {
    let probes: Duration = nodes
        .iter()
        .map(|n| {
            let handshake = n.latency * 4;
            idle_wait(handshake) + handshake
        })
        .sum();
    probes / cfg.max_in_flight.max(1)
}

impl World<'_> {
    /// Sends what node `i` wrote, closes what it closed, re-arms its timer, and follows
    /// starvation.
    pub(super) fn after_node(&mut self, i: usize) {
        self.collect_published(i);
        let ids: Vec<ClientId> = self.nodes[i].model.clients().collect();
        for sid in ids {
            let out = self.nodes[i].model.take_output(sid);
            let closing = self.nodes[i].model.closing(sid).is_some();
            if out.is_empty() && !closing {
                continue;
            }
            let Some(&key) = self.nodes[i].by_server.get(&sid) else {
                continue;
            };
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            let epoch = c.epoch;
            let node = &self.nodes[i];
            let mut sends = Vec::new();
            // A stalled client reads nothing until the stall ends (the application's noise).
            if !out.is_empty() {
                let at = send(&mut c.s2c, self.now, out.len(), node).max(c.s2c.last_arrival);
                let at = self.app.awake(at);
                c.s2c.last_arrival = at;
                sends.push((at, Ev::ToClient(key, epoch, out)));
            }
            if closing {
                let at = self
                    .app
                    .awake(c.s2c.last_arrival.max(self.now + node.latency));
                c.server = None;
                sends.push((at, Ev::ClientEof(key, epoch)));
            }
            for (at, ev) in sends {
                self.push(at, ev);
            }
            if closing {
                self.nodes[i].model.disconnect(sid);
                self.nodes[i].by_server.remove(&sid);
            }
        }
        if self.timers == Timers::Deadlines {
            let next = self.nodes[i].model.next_deadline();
            if next.is_some() && next != self.nodes[i].timer_at {
                self.nodes[i].timer_at = next;
                if let Some(at) = next {
                    self.push(at, Ev::NsqdTimer(i));
                }
            }
        }
        self.refill_soon(i);
        // Starvation: messages ready and a subscriber, since when?
        let waiting = self.node_waiting(i);
        let node = &mut self.nodes[i];
        match (waiting, node.waiting_since) {
            (true, None) => node.waiting_since = Some(self.eligible),
            (false, Some(_)) => node.waiting_since = None,
            _ => {}
        }
    }

    fn node_waiting(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        if node.down > 0 || node.silent_until.is_some() || node.slow > 0 || node.unlisted > 0 {
            return false;
        }
        let q = &node.model.queues;
        let ready = q
            .topics
            .get(TOPIC)
            .and_then(|t| t.channels.get(CHANNEL))
            .is_some_and(|ch| !ch.queue.is_empty() && !ch.paused);
        ready
            && q.flows.iter().any(|(sid, f)| {
                f.state == ClientState::Subscribed
                    && f.in_flight == 0
                    && node
                        .by_server
                        .get(sid)
                        .is_some_and(|k| matches!(k.0, Who::Consumer(g) if self.consumer.as_ref().is_some_and(|c| c.epoch == g)))
            })
    }

    /// nsqd's timer scan ([`Timers::Scan`]): every nsqd runs its timers, a stocked world tops
    /// it up, and it sends what it wrote.
    pub(super) fn scan(&mut self) {
        let now = self.now;
        for i in 0..self.nodes.len() {
            self.nodes[i].model.tick(now);
            self.top_up(i);
            self.after_node(i);
        }
        if let Timers::Scan(every) = self.timers {
            self.push(now + every, Ev::Scan);
        }
    }

    /// In a stocked world ([`Load::Stocked`]): tops nsqd `i` up to twice the stock once it
    /// holds less than the stock.
    pub(super) fn top_up(&mut self, i: usize) {
        let Load::Stocked(stock) = self.load else {
            return;
        };
        let depth = self.nodes[i].model.depth(TOPIC, CHANNEL);
        if depth < stock {
            let n = stock * 2 - depth;
            let bodies = (0..n).map(|k| format!("d{}", self.refills + k as u64).into_bytes());
            let now = self.now;
            self.nodes[i].model.publish(now, TOPIC, bodies.collect());
            self.refills += n as u64;
            self.collect_published(i);
        }
    }

    pub(super) fn publish(&mut self, n: u64) {
        self.publishes_left = self.publishes_left.saturating_sub(1);
        let len = self.nodes.len() as u64;
        let mut i = self.r_pub.below(len) as usize;
        if self.nodes[i].down > 0 {
            // Its producer publishes to the next nsqd that is up.
            match (0..self.nodes.len())
                .map(|k| (i + k) % self.nodes.len())
                .find(|&k| self.nodes[k].down == 0)
            {
                Some(k) => i = k,
                None => return,
            }
        }
        let now = self.now;
        self.nodes[i]
            .model
            .publish(now, TOPIC, vec![format!("w{n}").into_bytes()]);
        self.after_node(i);
        self.collect_published(i);
    }

    /// In a busy world, during the fault phase: once nsqd `i` (up) has fewer than half of
    /// [`BUSY_DEPTH`] messages ready, a top-up is scheduled (now, as an event of its own).
    fn refill_soon(&mut self, i: usize) {
        if !self.cfg.busy || self.now >= self.end_of_faults {
            return;
        }
        let queued = self.queued(i);
        let node = &mut self.nodes[i];
        if node.refill_pending || node.down > 0 || queued >= BUSY_DEPTH / 2 {
            return;
        }
        node.refill_pending = true;
        let now = self.now;
        self.push(now, Ev::Refill(i));
    }

    /// Publishes to nsqd `i` (if it is up) what it takes to have [`BUSY_DEPTH`] messages ready.
    pub(super) fn refill(&mut self, i: usize) {
        self.nodes[i].refill_pending = false;
        if self.nodes[i].down > 0 || self.now >= self.end_of_faults {
            return;
        }
        let want = BUSY_DEPTH.saturating_sub(self.queued(i));
        if want == 0 {
            return;
        }
        let bodies: Vec<Vec<u8>> = (0..want)
            .map(|k| format!("b{}", self.refills + k as u64).into_bytes())
            .collect();
        self.refills += want as u64;
        let now = self.now;
        self.nodes[i].model.publish(now, TOPIC, bodies);
        self.collect_published(i);
        self.after_node(i);
    }

    /// Messages ready on nsqd `i`'s channel (not in flight, not deferred).
    fn queued(&self, i: usize) -> usize {
        self.nodes[i]
            .model
            .queues
            .topics
            .get(TOPIC)
            .and_then(|t| t.channels.get(CHANNEL))
            .map_or(0, |ch| ch.queue.len())
    }

    /// Takes what nsqd `i` accepted; in a world that follows every message
    /// ([`Load::Published`]), records it.
    pub(super) fn collect_published(&mut self, i: usize) {
        let published = self.nodes[i].model.take_published();
        if self.load != Load::Published {
            return;
        }
        for (id, body) in published {
            self.accepted_bodies.insert(body.to_vec());
            self.accepted.insert((i, id), body);
            self.report.published += 1;
        }
    }

    pub(super) fn total_depth(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.model.depth(TOPIC, CHANNEL))
            .sum()
    }
}
