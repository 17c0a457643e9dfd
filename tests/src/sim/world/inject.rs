//! Faults ([`crate::sim::faults`]) as they happen to the world: links reset or silent,
//! nsqd restarting, slow or leaving, lookupd down, handlers slow, failing or panicking,
//! max_in_flight changed, the consumer stopped.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::net::Key;
use super::{Ev, World};
use crate::model::ClientId;
use crate::sim::faults::FaultKind;

impl World<'_> {
    /// Fault `k` starts (`start`) or heals.
    pub(super) fn fault(&mut self, k: usize, start: bool) {
        let f = self.faults[k].clone();
        self.trace(b'F', k as u64, &[u8::from(start)]);
        let now = self.now;
        match f.kind {
            FaultKind::Reset { nsqd } => self.reset(nsqd),
            FaultKind::HalfOpen { nsqd, for_ } => {
                if start {
                    let until = now + for_;
                    let node = &mut self.nodes[nsqd];
                    node.silent_until = Some(node.silent_until.map_or(until, |u| u.max(until)));
                    // Everything in transit arrives after the silence.
                    let keys: Vec<Key> = node.by_server.values().copied().collect();
                    for key in keys {
                        if let Some(c) = self.conns.get_mut(&key) {
                            c.c2s.last_arrival = c.c2s.last_arrival.max(until);
                            c.s2c.last_arrival = c.s2c.last_arrival.max(until);
                            c.c2s.free_at = c.c2s.free_at.max(until);
                            c.s2c.free_at = c.s2c.free_at.max(until);
                        }
                    }
                    self.reschedule_transit(nsqd, until);
                    // A silent nsqd does not count as waiting (its wait so far ends here).
                    self.after_node(nsqd);
                } else if self.nodes[nsqd].silent_until.is_some_and(|u| u <= now) {
                    self.nodes[nsqd].silent_until = None;
                    self.after_node(nsqd);
                }
            }
            FaultKind::Restart { nsqd, .. } => {
                if start {
                    self.nodes[nsqd].down += 1;
                    self.reset(nsqd);
                    self.nodes[nsqd].model.restart(now);
                } else {
                    self.nodes[nsqd].down -= 1;
                }
                self.after_node(nsqd);
            }
            FaultKind::SlowAnswers { nsqd, extra, .. } => {
                let node = &mut self.nodes[nsqd];
                if start {
                    node.slow += 1;
                    node.slow_extra = node.slow_extra.max(extra);
                } else {
                    node.slow -= 1;
                    if node.slow == 0 {
                        node.slow_extra = Duration::ZERO;
                    }
                }
                self.after_node(nsqd);
            }
            FaultKind::LookupdDown { lookupd, .. } => {
                let l = &mut self.lookupd_up[lookupd];
                if start {
                    *l += 1;
                } else {
                    *l -= 1;
                }
            }
            FaultKind::Leave { nsqd, .. } => {
                let node = &mut self.nodes[nsqd];
                if start {
                    node.unlisted += 1;
                } else {
                    node.unlisted -= 1;
                }
                self.after_node(nsqd);
            }
            FaultKind::SlowHandlers { .. }
            | FaultKind::FailingHandlers { .. }
            | FaultKind::PanickingHandlers { .. } => self.app.fault(&f.kind, start),
            FaultKind::MaxInFlight { to, .. } => {
                bump(&mut self.mif_faults, start);
                let n = if start {
                    to
                } else if self.mif_faults == 0 {
                    self.cfg.max_in_flight
                } else {
                    return;
                };
                self.max_in_flight = n;
                self.max_in_flight_ever = self.max_in_flight_ever.max(n);
                self.consumer_call(|c, now| c.set_max_in_flight(now, n));
            }
            FaultKind::Stop => {
                if let Some(c) = self.consumer.as_mut() {
                    if !c.closing {
                        c.closing = true;
                        self.closing_since = Some(now);
                        self.consumer_call(|c, now| c.close(now));
                    }
                }
            }
        }
    }

    /// Re-times what is in transit to or from node `i` so it arrives at `until` at the
    /// earliest (a half-open link holds it).
    fn reschedule_transit(&mut self, i: usize, until: Instant) {
        let keys: HashSet<Key> = self.nodes[i].by_server.values().copied().collect();
        self.queue.hold_until(until, |ev| match ev {
            Ev::ToServer(k, _, _)
            | Ev::ToClient(k, _, _)
            | Ev::ServerEof(k, _)
            | Ev::ClientEof(k, _) => keys.contains(k),
            _ => false,
        });
    }

    /// Resets every connection of node `i`: the server forgets them at once, the clients see
    /// EOF after the link's latency, and what was in transit is lost.
    fn reset(&mut self, i: usize) {
        let mut ids: Vec<(ClientId, Key)> = self.nodes[i].by_server.drain().collect();
        // In the order nsqd accepted them: a map's order differs from one process to the
        // next, and the clients see the EOFs in this order (at the same instant).
        ids.sort_unstable_by_key(|(sid, _)| *sid);
        for (sid, key) in ids {
            self.nodes[i].model.disconnect(sid);
            self.next_epoch += 1;
            let epoch = self.next_epoch;
            if self.conns.get(&key).is_some_and(|c| c.client_closed) {
                self.conns.remove(&key);
                continue;
            }
            if let Some(c) = self.conns.get_mut(&key) {
                c.epoch = epoch;
                c.server = None;
            }
            let at = self.now + self.nodes[i].latency;
            self.push(at, Ev::ClientEof(key, epoch));
        }
        self.after_node(i);
    }
}

/// One more (`start`) or one fewer of a fault that may overlap itself.
pub(super) fn bump(n: &mut u32, start: bool) {
    if start {
        *n += 1;
    } else {
        *n = n.saturating_sub(1);
    }
}
