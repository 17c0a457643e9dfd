//! Topics, channels and their messages: publishing and fan-out, delivery to ready clients,
//! in-flight timeouts, requeue and deferred timers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::util::is_ephemeral;

use super::latency::Latency;
use super::stats::{ClientId, ClientState};
use super::{Inner, Out, State};

#[derive(Clone, Debug)]
pub(super) struct Msg {
    pub(super) id: [u8; 16],
    pub(super) body: Arc<[u8]>,
    pub(super) timestamp: i64,
    pub(super) attempts: u16,
}

pub(super) static NEXT_MSG: AtomicU64 = AtomicU64::new(0);

impl Msg {
    pub(super) fn new(body: Vec<u8>) -> Self {
        static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let base = *BASE.get_or_init(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                << 8
        });
        let n = base.wrapping_add(NEXT_MSG.fetch_add(1, Ordering::Relaxed));
        let mut id = [0u8; 16];
        id.copy_from_slice(format!("{n:016x}").as_bytes());
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        Self {
            id,
            body: body.into(),
            timestamp,
            attempts: 0,
        }
    }

    pub(super) fn frame(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(26 + self.body.len());
        data.extend_from_slice(&self.timestamp.to_be_bytes());
        data.extend_from_slice(&self.attempts.to_be_bytes());
        data.extend_from_slice(&self.id);
        data.extend_from_slice(&self.body);
        frame(2, &data)
    }
}

pub(super) fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(data.len() as u32 + 4).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.extend_from_slice(data);
    f
}

pub(super) struct InFlight {
    pub(super) msg: Msg,
    pub(super) client: ClientId,
    pub(super) deadline: Instant,
    pub(super) delivered: Instant,
}

#[derive(Default)]
pub(super) struct Channel {
    pub(super) queue: VecDeque<Msg>,
    pub(super) deferred: Vec<(Instant, Msg)>,
    pub(super) in_flight: HashMap<[u8; 16], InFlight>,
    pub(super) clients: Vec<ClientId>,
    pub(super) rr: usize,
    pub(super) message_count: u64,
    pub(super) finished: u64,
    pub(super) requeued: u64,
    pub(super) timed_out: u64,
    /// `(instant, messages in flight)` after every change, oldest first (bounded).
    pub(super) in_flight_log: VecDeque<(Instant, usize)>,
    /// `/channel/pause`: nothing is delivered until unpaused.
    pub(super) paused: bool,
    /// End-to-end latency of finished messages (with `e2e_processing_latency_percentiles`).
    pub(super) e2e: Option<Latency>,
}

/// How many changes of a channel's in-flight count [`Nsqd::in_flight_log`] keeps.
pub(crate) const IN_FLIGHT_LOG_LEN: usize = 100_000;

impl Channel {
    /// Records the in-flight count if it changed.
    pub(super) fn note_in_flight(&mut self) {
        let n = self.in_flight.len();
        if self.in_flight_log.back().map_or(0, |(_, last)| *last) != n {
            if self.in_flight_log.len() == IN_FLIGHT_LOG_LEN {
                self.in_flight_log.pop_front();
            }
            self.in_flight_log.push_back((Instant::now(), n));
        }
    }

    pub(super) fn put(&mut self, msg: Msg, defer: Duration, now: Instant) {
        if defer.is_zero() {
            self.queue.push_back(msg);
        } else {
            self.deferred.push((now + defer, msg));
        }
    }
}

#[derive(Default)]
pub(super) struct Topic {
    pub(super) channels: BTreeMap<String, Channel>,
    /// Messages the topic holds: it has no channel yet, or it is paused.
    pub(super) backlog: VecDeque<(Msg, Duration)>,
    pub(super) message_count: u64,
    pub(super) message_bytes: u64,
    /// `/topic/pause`: messages stay in the topic until unpaused.
    pub(super) paused: bool,
}

impl Topic {
    /// nsqd's topic message pump: while the topic has channels and is not paused, every
    /// message it holds is copied to each channel.
    pub(super) fn pump(&mut self, now: Instant) {
        if self.paused || self.channels.is_empty() {
            return;
        }
        for (msg, defer) in self.backlog.drain(..) {
            for ch in self.channels.values_mut() {
                ch.message_count += 1;
                ch.put(msg.clone(), defer, now);
            }
        }
    }
}

impl Inner {
    /// Times out in-flight messages and releases due deferred ones; returns the next deadline.
    pub(super) fn process_timers(st: &mut State, now: Instant) -> Option<Instant> {
        let State {
            topics, clients, ..
        } = st;
        let mut next: Option<Instant> = None;
        let mut upd = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for topic in topics.values_mut() {
            for ch in topic.channels.values_mut() {
                let mut expired: Vec<[u8; 16]> = ch
                    .in_flight
                    .iter()
                    .filter(|(_, f)| f.deadline <= now)
                    .map(|(id, _)| *id)
                    .collect();
                // Oldest first, so redelivery order is stable.
                expired.sort_by_key(|id| ch.in_flight[id].deadline);
                for id in expired {
                    if let Some(f) = ch.in_flight.remove(&id) {
                        ch.timed_out += 1;
                        if let Some(c) = clients.get_mut(&f.client) {
                            c.in_flight -= 1;
                            c.timed_out += 1;
                        }
                        ch.queue.push_back(f.msg);
                    }
                }
                ch.note_in_flight();
                for f in ch.in_flight.values() {
                    upd(f.deadline);
                }
                ch.deferred.sort_by_key(|(t, _)| *t);
                while ch.deferred.first().is_some_and(|(t, _)| *t <= now) {
                    let (_, m) = ch.deferred.remove(0);
                    ch.queue.push_back(m);
                }
                if let Some((t, _)) = ch.deferred.first() {
                    upd(*t);
                }
            }
        }
        next
    }

    /// Sends queued messages to subscribers with `in_flight < rdy`, round robin.
    pub(super) fn dispatch(st: &mut State, now: Instant) {
        let State {
            topics, clients, ..
        } = st;
        for topic in topics.values_mut() {
            for ch in topic.channels.values_mut().filter(|ch| !ch.paused) {
                while !ch.queue.is_empty() {
                    let n = ch.clients.len();
                    let chosen = (0..n).map(|k| (ch.rr + k) % n).find(|&i| {
                        clients.get(&ch.clients[i]).is_some_and(|c| {
                            c.state == ClientState::Subscribed && c.in_flight < c.rdy
                        })
                    });
                    let Some(i) = chosen else { break };
                    ch.rr = (i + 1) % n;
                    let cid = ch.clients[i];
                    let Some(c) = clients.get_mut(&cid) else {
                        break;
                    };
                    let Some(mut msg) = ch.queue.pop_front() else {
                        break;
                    };
                    msg.attempts = msg.attempts.saturating_add(1);
                    c.in_flight += 1;
                    c.delivered += 1;
                    let _ = c.out.send(Out::Message(msg.frame()));
                    if c.in_flight >= c.rdy {
                        // nsqd's message pump flushes once the client is not ready.
                        let _ = c.out.send(Out::Flush);
                    }
                    let deadline = now + c.pump_msg_timeout;
                    ch.in_flight.insert(
                        msg.id,
                        InFlight {
                            msg,
                            client: cid,
                            deadline,
                            delivered: now,
                        },
                    );
                    ch.note_in_flight();
                }
            }
        }
    }

    pub(super) fn ensure_topic(&self, st: &mut State, topic: &str) {
        if !st.topics.contains_key(topic) {
            st.topics.insert(topic.to_owned(), Topic::default());
            self.lookup_register(topic, None, true);
        }
    }

    pub(super) fn publish(
        &self,
        st: &mut State,
        topic: &str,
        bodies: Vec<Vec<u8>>,
        defer: Duration,
        now: Instant,
    ) {
        self.ensure_topic(st, topic);
        if let Some(t) = st.topics.get_mut(topic) {
            for body in bodies {
                t.message_bytes += body.len() as u64;
                t.message_count += 1;
                t.backlog.push_back((Msg::new(body), defer));
            }
            t.pump(now);
        }
        Self::dispatch(st, now);
        self.wake.notify_all();
    }

    pub(super) fn ensure_channel(&self, st: &mut State, topic: &str, channel: &str, now: Instant) {
        self.ensure_topic(st, topic);
        let Some(t) = st.topics.get_mut(topic) else {
            return;
        };
        if !t.channels.contains_key(channel) {
            let opts = &self.opts;
            let ch = Channel {
                e2e: (!opts.e2e_processing_latency_percentiles.is_empty())
                    .then(|| Latency::new(opts.e2e_processing_latency_window_time, now)),
                ..Channel::default()
            };
            t.channels.insert(channel.to_owned(), ch);
            t.pump(now);
            self.lookup_register(topic, Some(channel), true);
        }
    }

    pub(super) fn remove_client(&self, id: ClientId) {
        let mut st = self.lock();
        let Some(c) = st.clients.remove(&id) else {
            return;
        };
        let Some((topic, channel)) = c.sub else {
            return;
        };
        let mut drop_channel = false;
        let mut drop_topic = false;
        if let Some(t) = st.topics.get_mut(&topic) {
            if let Some(ch) = t.channels.get_mut(&channel) {
                ch.clients.retain(|&x| x != id);
                if ch.clients.is_empty() && is_ephemeral(&channel) {
                    drop_channel = true;
                }
            }
            if drop_channel {
                t.channels.remove(&channel);
                drop_topic = t.channels.is_empty() && is_ephemeral(&topic);
            }
        }
        if drop_channel {
            self.lookup_register(&topic, Some(&channel), false);
        }
        if drop_topic {
            st.topics.remove(&topic);
            self.lookup_register(&topic, None, false);
        }
    }
}

impl Inner {
    /// Deletes a topic or one of its channels like nsqd's `/topic/delete` and
    /// `/channel/delete`: their messages are dropped and their subscribers disconnected; an
    /// ephemeral topic goes with its last channel. Returns whether it existed.
    pub(super) fn delete(&self, topic: &str, channel: Option<&str>) -> bool {
        let mut st = self.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return false;
        };
        let removed: Vec<(String, Channel)> = match channel {
            Some(c) => match t.channels.remove(c) {
                Some(ch) => vec![(c.to_owned(), ch)],
                None => return false,
            },
            None => std::mem::take(&mut t.channels).into_iter().collect(),
        };
        let topic_gone = channel.is_none() || (t.channels.is_empty() && is_ephemeral(topic));
        if topic_gone {
            st.topics.remove(topic);
        }
        for (name, ch) in &removed {
            for id in &ch.clients {
                if let Some(c) = st.clients.get(id) {
                    c.kill();
                }
            }
            self.lookup_register(topic, Some(name), false);
        }
        if topic_gone {
            self.lookup_register(topic, None, false);
        }
        true
    }

    /// `/topic/pause` and `/topic/unpause`; false if there is no such topic.
    pub(super) fn pause_topic(&self, topic: &str, paused: bool) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return false;
        };
        t.paused = paused;
        t.pump(now);
        Self::dispatch(&mut st, now);
        true
    }

    /// `/channel/pause` and `/channel/unpause`; false if there is no such channel.
    pub(super) fn pause_channel(&self, topic: &str, channel: &str, paused: bool) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        let Some(ch) = st
            .topics
            .get_mut(topic)
            .and_then(|t| t.channels.get_mut(channel))
        else {
            return false;
        };
        ch.paused = paused;
        if paused {
            // nsqd's message pumps flush what they buffered once the client is not ready.
            for id in ch.clients.clone() {
                if let Some(c) = st.clients.get(&id) {
                    let _ = c.out.send(Out::Flush);
                }
            }
        }
        Self::dispatch(&mut st, now);
        true
    }

    /// `/topic/empty`: drops the messages the topic holds (not its channels'); false if there
    /// is no such topic.
    pub(super) fn empty_topic(&self, topic: &str) -> bool {
        let mut st = self.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return false;
        };
        t.backlog.clear();
        true
    }

    /// `/channel/empty` (nsqd's `Channel.Empty`): drops queued, deferred and in-flight
    /// messages, and every subscriber's in-flight count goes to 0; false if there is no such
    /// channel.
    pub(super) fn empty_channel(&self, topic: &str, channel: &str) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        let State {
            topics, clients, ..
        } = &mut *st;
        let Some(ch) = topics
            .get_mut(topic)
            .and_then(|t| t.channels.get_mut(channel))
        else {
            return false;
        };
        ch.queue.clear();
        ch.deferred.clear();
        ch.in_flight.clear();
        ch.note_in_flight();
        for id in &ch.clients {
            if let Some(c) = clients.get_mut(id) {
                c.in_flight = 0;
            }
        }
        Self::dispatch(&mut st, now);
        true
    }
}
