//! The broker over [`model::Queues`](crate::model::Queues), which holds nsqd's queue rules:
//! message ids and timestamps, what the queues push sent to the connections' writers,
//! lookupd registrations, e2e latency and topic/channel deletion.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::model::is_ephemeral;
use crate::model::{Msg, Push};

use super::latency::Latency;
use super::stats::ClientId;
use super::{Inner, Out, State};

/// Message ids count up from a base taken from the clock, across every broker of the process,
/// so that they are unique among them.
static NEXT_MSG: AtomicU64 = AtomicU64::new(0);

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A new message, published now.
fn new_msg(body: Vec<u8>) -> Msg {
    static BASE: OnceLock<u64> = OnceLock::new();
    let base = *BASE.get_or_init(|| (unix_nanos() as u64) << 8);
    let n = base.wrapping_add(NEXT_MSG.fetch_add(1, Ordering::Relaxed));
    Msg::new(n, body, unix_nanos() as i64)
}

impl State {
    /// Sends what the queues pushed to the clients' writers.
    pub(super) fn send(&self, pushes: Vec<Push>) {
        for p in pushes {
            let (id, out) = match p {
                Push::Message(id, msg) => (id, Out::Message(msg.frame())),
                Push::Flush(id) => (id, Out::Flush),
            };
            if let Some(c) = self.clients.get(&id) {
                let _ = c.out.send(out);
            }
        }
    }

    /// Sends queued messages to subscribers with `in_flight < rdy`, round robin.
    pub(super) fn dispatch(&mut self, now: Instant) {
        let mut out = Vec::new();
        self.queues.dispatch(now, &mut out);
        self.send(out);
    }

    /// Records the end-to-end latency of a message `client` finished.
    pub(super) fn note_finished(&mut self, client: ClientId, msg: &Msg, now: Instant) {
        let Some(sub) = self.queues.flows.get(&client).and_then(|f| f.sub.as_ref()) else {
            return;
        };
        if let Some(e2e) = self.e2e.get_mut(sub) {
            let published = UNIX_EPOCH + Duration::from_nanos(msg.timestamp as u64);
            let nanos = SystemTime::now()
                .duration_since(published)
                .map_or(0.0, |d| d.as_nanos() as f64);
            e2e.insert(now, nanos);
        }
    }
}

impl Inner {
    pub(super) fn ensure_topic(&self, st: &mut State, topic: &str) {
        if st.queues.ensure_topic(topic) {
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
        let msgs = bodies.into_iter().map(new_msg).collect();
        let mut out = Vec::new();
        st.queues.publish(topic, msgs, defer, now, &mut out);
        st.send(out);
        self.wake.notify_all();
    }

    pub(super) fn ensure_channel(&self, st: &mut State, topic: &str, channel: &str, now: Instant) {
        let (created_topic, created_channel) = st.queues.ensure_channel(topic, channel, now);
        if created_topic {
            self.lookup_register(topic, None, true);
        }
        if created_channel {
            let opts = &self.opts;
            if !opts.e2e_processing_latency_percentiles.is_empty() {
                let e2e = Latency::new(opts.e2e_processing_latency_window_time, now);
                st.e2e.insert((topic.to_owned(), channel.to_owned()), e2e);
            }
            self.lookup_register(topic, Some(channel), true);
        }
    }

    pub(super) fn remove_client(&self, id: ClientId) {
        let mut st = self.lock();
        if st.clients.remove(&id).is_none() {
            return;
        }
        let removed = st.queues.remove_client(id);
        if let Some(key @ (topic, channel)) = &removed.channel {
            st.e2e.remove(key);
            self.lookup_register(topic, Some(channel), false);
        }
        if let Some(topic) = &removed.topic {
            self.lookup_register(topic, None, false);
        }
    }

    /// Deletes a topic or one of its channels like nsqd's `/topic/delete` and
    /// `/channel/delete`: their messages are dropped and their subscribers disconnected; an
    /// ephemeral topic goes with its last channel. Returns whether it existed.
    pub(super) fn delete(&self, topic: &str, channel: Option<&str>) -> bool {
        let mut st = self.lock();
        let Some(t) = st.queues.topics.get_mut(topic) else {
            return false;
        };
        let removed: Vec<(String, Vec<ClientId>)> = match channel {
            Some(c) => match t.channels.remove(c) {
                Some(ch) => vec![(c.to_owned(), ch.clients)],
                None => return false,
            },
            None => std::mem::take(&mut t.channels)
                .into_iter()
                .map(|(name, ch)| (name, ch.clients))
                .collect(),
        };
        let topic_gone = channel.is_none() || (t.channels.is_empty() && is_ephemeral(topic));
        if topic_gone {
            st.queues.topics.remove(topic);
        }
        for (name, clients) in &removed {
            st.e2e.remove(&(topic.to_owned(), name.clone()));
            for id in clients {
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
        let mut st = self.lock();
        let mut out = Vec::new();
        let found = st
            .queues
            .pause_topic(topic, paused, Instant::now(), &mut out);
        st.send(out);
        found
    }

    /// `/channel/pause` and `/channel/unpause`; false if there is no such channel.
    pub(super) fn pause_channel(&self, topic: &str, channel: &str, paused: bool) -> bool {
        let mut st = self.lock();
        let mut out = Vec::new();
        let found = st
            .queues
            .pause_channel(topic, channel, paused, Instant::now(), &mut out);
        st.send(out);
        found
    }

    /// `/topic/empty`: drops the messages the topic holds (not its channels'); false if there
    /// is no such topic.
    pub(super) fn empty_topic(&self, topic: &str) -> bool {
        self.lock().queues.empty_topic(topic)
    }

    /// `/channel/empty` (nsqd's `Channel.Empty`): drops queued, deferred and in-flight
    /// messages, and every subscriber's in-flight count goes to 0; false if there is no such
    /// channel.
    pub(super) fn empty_channel(&self, topic: &str, channel: &str) -> bool {
        let mut st = self.lock();
        let mut out = Vec::new();
        let found = st
            .queues
            .empty_channel(topic, channel, Instant::now(), &mut out);
        st.send(out);
        found
    }
}
