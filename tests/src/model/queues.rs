//! Topics, channels and their messages, and each client's flow control, with no IO: publishing
//! and fan-out, delivery to ready clients round robin, FIN/REQ/TOUCH, in-flight timeouts and
//! deferred messages. Time and message ids come from the caller, so the same inputs give the
//! same run.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client connection's number, unique within one nsqd.
pub type ClientId = u64;

/// A client's protocol state, as nsqd tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientState {
    /// Connected, not subscribed (publishers stay here).
    Init,
    /// After SUB.
    Subscribed,
    /// After CLS: no more deliveries; answers are still accepted.
    Closing,
}

/// One message as nsqd keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    /// The 16-byte id (hex digits, as nsqd's GUIDs are written).
    pub id: [u8; 16],
    /// The body.
    pub body: Arc<[u8]>,
    /// Publication time, Unix nanoseconds.
    pub timestamp: i64,
    /// Deliveries so far.
    pub attempts: u16,
}

impl Msg {
    /// A message with id `n` (written as 16 hex digits).
    pub fn new(n: u64, body: impl Into<Arc<[u8]>>, timestamp: i64) -> Self {
        let mut id = [0u8; 16];
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (i, b) in id.iter_mut().enumerate() {
            *b = HEX[((n >> (60 - 4 * i)) & 0xf) as usize];
        }
        Self {
            id,
            body: body.into(),
            timestamp,
            attempts: 0,
        }
    }

    /// Appends the message frame (size, type 2, timestamp, attempts, id, body).
    pub fn write_frame(&self, out: &mut Vec<u8>) {
        let size = 4 + 26 + self.body.len();
        out.reserve(4 + size);
        out.extend_from_slice(&(size as u32).to_be_bytes());
        out.extend_from_slice(&2u32.to_be_bytes());
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.attempts.to_be_bytes());
        out.extend_from_slice(&self.id);
        out.extend_from_slice(&self.body);
    }

    /// The message frame.
    pub fn frame(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_frame(&mut out);
        out
    }
}

/// A frame of type `kind` (0 response, 1 error, 2 message) around `data`.
pub fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(data.len() as u32 + 4).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.extend_from_slice(data);
    f
}

/// A message handed to a client and not answered yet.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// The message (its attempts as delivered).
    pub msg: Msg,
    /// Whom it was handed to.
    pub client: ClientId,
    /// When it times out (nsqd then requeues it).
    pub deadline: Instant,
    /// When it was handed out.
    pub delivered: Instant,
}

/// How many changes of a channel's in-flight count [`Channel::in_flight_log`] keeps.
pub const IN_FLIGHT_LOG_LEN: usize = 100_000;

/// One channel: its queue, deferred and in-flight messages, and subscribers.
#[derive(Default, Debug)]
pub struct Channel {
    /// Ready to deliver, oldest first.
    pub queue: VecDeque<Msg>,
    /// Deferred until the instant (DPUB, REQ with a delay), in no particular order.
    pub deferred: Vec<(Instant, Msg)>,
    /// Handed out and not answered.
    pub in_flight: HashMap<[u8; 16], InFlight>,
    /// Subscribers, in SUB order.
    pub clients: Vec<ClientId>,
    /// Where the round robin resumes.
    pub rr: usize,
    /// Messages the channel received.
    pub message_count: u64,
    /// FINs.
    pub finished: u64,
    /// REQs.
    pub requeued: u64,
    /// In-flight timeouts.
    pub timed_out: u64,
    /// `(instant, messages in flight)` after every change, oldest first (the last
    /// [`IN_FLIGHT_LOG_LEN`]), when [`Queues::log_in_flight`] is on.
    pub in_flight_log: VecDeque<(Instant, usize)>,
    /// `/channel/pause`: nothing is delivered until unpaused.
    pub paused: bool,
    /// Deliveries to zone-local subscribers (with [`Queues::topology`]).
    pub zone_local_msg_count: u64,
    /// Deliveries to region-local subscribers that are not zone-local.
    pub region_local_msg_count: u64,
    /// Deliveries to any other subscriber.
    pub global_msg_count: u64,
}

impl Channel {
    fn note_in_flight(&mut self, log: bool, now: Instant) {
        if !log {
            return;
        }
        let n = self.in_flight.len();
        if self.in_flight_log.back().map_or(0, |(_, last)| *last) != n {
            if self.in_flight_log.len() == IN_FLIGHT_LOG_LEN {
                self.in_flight_log.pop_front();
            }
            self.in_flight_log.push_back((now, n));
        }
    }

    /// Queues `msg`, or defers it by `defer`.
    pub fn put(&mut self, msg: Msg, defer: Duration, now: Instant) {
        if defer.is_zero() {
            self.queue.push_back(msg);
        } else {
            self.deferred.push((now + defer, msg));
        }
    }

    /// Messages the channel holds: queued, deferred and in flight.
    pub fn depth(&self) -> usize {
        self.queue.len() + self.deferred.len() + self.in_flight.len()
    }
}

/// One topic: its channels, and the messages it holds while it has none (or is paused).
#[derive(Default, Debug)]
pub struct Topic {
    /// By name.
    pub channels: BTreeMap<String, Channel>,
    /// Messages the topic holds: it has no channel yet, or it is paused.
    pub backlog: VecDeque<(Msg, Duration)>,
    /// Messages published to it.
    pub message_count: u64,
    /// Their bytes.
    pub message_bytes: u64,
    /// `/topic/pause`: messages stay in the topic until unpaused.
    pub paused: bool,
}

impl Topic {
    /// nsqd's topic message pump: while the topic has channels and is not paused, every
    /// message it holds is copied to each channel.
    pub fn pump(&mut self, now: Instant) {
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

/// One client's flow control and counters, as nsqd keeps them.
#[derive(Clone, Debug)]
pub struct Flow {
    /// Protocol state.
    pub state: ClientState,
    /// The last RDY count.
    pub rdy: i64,
    /// Messages in flight to it.
    pub in_flight: i64,
    /// Its msg_timeout (IDENTIFY reply, TOUCH), as of its latest IDENTIFY.
    pub msg_timeout: Duration,
    /// The timeout deliveries get: nsqd's message pump takes it from the first IDENTIFY only.
    pub pump_msg_timeout: Duration,
    /// Its subscription.
    pub sub: Option<(String, String)>,
    /// Messages handed to it.
    pub delivered: u64,
    /// Its FINs.
    pub finished: u64,
    /// Its REQs.
    pub requeued: u64,
    /// Its messages that timed out.
    pub timed_out: u64,
    /// In nsqd's zone (the topology experiment on): preferred for the channel's messages.
    pub zone_local: bool,
    /// In nsqd's region (the experiment on): preferred after zone-local subscribers.
    pub region_local: bool,
}

impl Flow {
    /// A new client with nsqd's `msg_timeout`.
    pub fn new(msg_timeout: Duration) -> Self {
        Self {
            state: ClientState::Init,
            rdy: 0,
            in_flight: 0,
            msg_timeout,
            pump_msg_timeout: msg_timeout,
            sub: None,
            delivered: 0,
            finished: 0,
            requeued: 0,
            timed_out: 0,
            zone_local: false,
            region_local: false,
        }
    }

    /// nsqd's `IsReadyForMessages`.
    pub fn is_ready(&self) -> bool {
        self.state == ClientState::Subscribed && self.in_flight < self.rdy
    }
}

/// What the queues push to clients; the driver writes it to the client's connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Push {
    /// A message frame for the client (buffered by nsqd like its `bufio.Writer`).
    Message(ClientId, Msg),
    /// Flush what is buffered: the client is not ready for more.
    Flush(ClientId),
}

/// Why FIN, REQ or TOUCH failed (nsqd's `popInFlightMessage`); non-fatal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// The id is not in flight (timed out and requeued, answered already, or never sent).
    NotInFlight,
    /// In flight, to another client.
    NotOwner,
}

impl AnswerError {
    /// nsqd's text.
    pub fn text(self) -> &'static str {
        match self {
            AnswerError::NotInFlight => "ID not in flight",
            AnswerError::NotOwner => "client does not own message",
        }
    }
}

/// What [`Queues::remove_client`] removed along with the client (for lookupd).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// An ephemeral channel that lost its last subscriber: `(topic, channel)`.
    pub channel: Option<(String, String)>,
    /// An ephemeral topic that lost its last channel.
    pub topic: Option<String>,
}

/// An nsqd's topics and its clients' flow control: nsqd's queue rules with no IO, shared by
/// the socket [`Nsqd`](crate::Nsqd) and the simulator's nsqd ([`crate::model::Nsqd`]).
///
/// Every method that can make a client ready or a message available appends what to send to
/// `out`; nothing is sent by the queues themselves.
#[derive(Debug)]
pub struct Queues {
    /// Topics by name.
    pub topics: BTreeMap<String, Topic>,
    /// Clients by id.
    pub flows: BTreeMap<ClientId, Flow>,
    /// Keep each channel's [`Channel::in_flight_log`].
    pub log_in_flight: bool,
    /// nsqd after v1.3.0 with a topology: deliveries are counted as zone-local, region-local
    /// or global; with `topology_aware`, zone-local subscribers are preferred, then
    /// region-local ones.
    pub topology: bool,
    /// The `topology-aware-consumption` experiment.
    pub topology_aware: bool,
    next_msg: u64,
}

impl Queues {
    /// Empty queues; message ids count up from `first_id`.
    pub fn new(first_id: u64) -> Self {
        Self {
            topics: BTreeMap::new(),
            flows: BTreeMap::new(),
            log_in_flight: false,
            topology: false,
            topology_aware: false,
            next_msg: first_id,
        }
    }

    /// A new message with the next id.
    pub fn new_msg(&mut self, body: impl Into<Arc<[u8]>>, timestamp: i64) -> Msg {
        let n = self.next_msg;
        self.next_msg = self.next_msg.wrapping_add(1);
        Msg::new(n, body, timestamp)
    }

    /// Creates the topic if needed; true if it was created.
    pub fn ensure_topic(&mut self, topic: &str) -> bool {
        if self.topics.contains_key(topic) {
            return false;
        }
        self.topics.insert(topic.to_owned(), Topic::default());
        true
    }

    /// Creates the channel (and topic) if needed; `(topic created, channel created)`.
    pub fn ensure_channel(&mut self, topic: &str, channel: &str, now: Instant) -> (bool, bool) {
        let created_topic = self.ensure_topic(topic);
        let Some(t) = self.topics.get_mut(topic) else {
            return (created_topic, false);
        };
        if t.channels.contains_key(channel) {
            return (created_topic, false);
        }
        t.channels.insert(channel.to_owned(), Channel::default());
        t.pump(now);
        (created_topic, true)
    }

    /// Publishes messages (already made with [`Queues::new_msg`]) to `topic`, deferred by
    /// `defer`; true if the topic was created.
    pub fn publish(
        &mut self,
        topic: &str,
        msgs: Vec<Msg>,
        defer: Duration,
        now: Instant,
        out: &mut Vec<Push>,
    ) -> bool {
        let created = self.ensure_topic(topic);
        if let Some(t) = self.topics.get_mut(topic) {
            for msg in msgs {
                t.message_bytes += msg.body.len() as u64;
                t.message_count += 1;
                t.backlog.push_back((msg, defer));
            }
            t.pump(now);
        }
        self.dispatch(now, out);
        created
    }

    /// A new client.
    pub fn add_client(&mut self, id: ClientId, msg_timeout: Duration) {
        self.flows.insert(id, Flow::new(msg_timeout));
    }

    /// SUB (after the caller's checks): adds the client to the channel, creating it;
    /// `Err(limit)` if the channel has `max_consumers` (non-zero) subscribers already.
    pub fn subscribe(
        &mut self,
        id: ClientId,
        topic: &str,
        channel: &str,
        max_consumers: usize,
        now: Instant,
    ) -> Result<(bool, bool), usize> {
        let created = self.ensure_channel(topic, channel, now);
        if let Some(ch) = self
            .topics
            .get_mut(topic)
            .and_then(|t| t.channels.get_mut(channel))
        {
            if max_consumers != 0 && ch.clients.len() >= max_consumers {
                return Err(max_consumers);
            }
            ch.clients.push(id);
        }
        if let Some(f) = self.flows.get_mut(&id) {
            f.state = ClientState::Subscribed;
            f.sub = Some((topic.to_owned(), channel.to_owned()));
        }
        Ok(created)
    }

    /// RDY (after the caller's range check).
    pub fn set_rdy(&mut self, id: ClientId, count: i64, now: Instant, out: &mut Vec<Push>) {
        if let Some(f) = self.flows.get_mut(&id) {
            f.rdy = count;
            if f.in_flight >= f.rdy {
                out.push(Push::Flush(id));
            }
        }
        self.dispatch(now, out);
    }

    /// CLS: no more deliveries to the client; false if it is not subscribed.
    pub fn close_wait(&mut self, id: ClientId, out: &mut Vec<Push>) -> bool {
        let Some(f) = self.flows.get_mut(&id) else {
            return false;
        };
        if f.state != ClientState::Subscribed {
            return false;
        }
        f.rdy = 0;
        f.state = ClientState::Closing;
        out.push(Push::Flush(id));
        true
    }

    fn channel_of(&mut self, id: ClientId) -> Option<&mut Channel> {
        let (topic, channel) = self.flows.get(&id)?.sub.as_ref()?;
        self.topics.get_mut(topic)?.channels.get_mut(channel)
    }

    /// Removes an in-flight message owned by `id` (nsqd's `popInFlightMessage`).
    fn pop_in_flight(
        &mut self,
        id: ClientId,
        msg: &[u8; 16],
        now: Instant,
    ) -> Result<InFlight, AnswerError> {
        let log = self.log_in_flight;
        let ch = self.channel_of(id).ok_or(AnswerError::NotInFlight)?;
        match ch.in_flight.get(msg) {
            None => return Err(AnswerError::NotInFlight),
            Some(f) if f.client != id => return Err(AnswerError::NotOwner),
            Some(_) => {}
        }
        let f = ch.in_flight.remove(msg).ok_or(AnswerError::NotInFlight)?;
        ch.note_in_flight(log, now);
        Ok(f)
    }

    /// FIN: returns the finished message.
    pub fn finish(
        &mut self,
        id: ClientId,
        msg: &[u8; 16],
        now: Instant,
        out: &mut Vec<Push>,
    ) -> Result<InFlight, AnswerError> {
        let f = self.pop_in_flight(id, msg, now)?;
        if let Some(ch) = self.channel_of(id) {
            ch.finished += 1;
        }
        if let Some(c) = self.flows.get_mut(&id) {
            c.in_flight -= 1;
            c.finished += 1;
        }
        self.dispatch(now, out);
        Ok(f)
    }

    /// REQ with `delay` (already clamped to max_req_timeout).
    pub fn requeue(
        &mut self,
        id: ClientId,
        msg: &[u8; 16],
        delay: Duration,
        now: Instant,
        out: &mut Vec<Push>,
    ) -> Result<(), AnswerError> {
        let f = self.pop_in_flight(id, msg, now)?;
        if let Some(ch) = self.channel_of(id) {
            ch.requeued += 1;
            ch.put(f.msg, delay, now);
        }
        if let Some(c) = self.flows.get_mut(&id) {
            c.in_flight -= 1;
            c.requeued += 1;
        }
        self.dispatch(now, out);
        Ok(())
    }

    /// TOUCH: the message's deadline moves to now + the client's msg_timeout, capped at
    /// `max_msg_timeout` after its delivery.
    pub fn touch(
        &mut self,
        id: ClientId,
        msg: &[u8; 16],
        max_msg_timeout: Duration,
        default_timeout: Duration,
        now: Instant,
    ) -> Result<(), AnswerError> {
        let timeout = self
            .flows
            .get(&id)
            .map_or(default_timeout, |c| c.msg_timeout);
        let log = self.log_in_flight;
        let ch = self.channel_of(id).ok_or(AnswerError::NotInFlight)?;
        let f = match ch.in_flight.get_mut(msg) {
            None => return Err(AnswerError::NotInFlight),
            Some(f) if f.client != id => return Err(AnswerError::NotOwner),
            Some(f) => f,
        };
        let mut deadline = now + timeout;
        if deadline.duration_since(f.delivered) >= max_msg_timeout {
            deadline = f.delivered + max_msg_timeout;
        }
        f.deadline = deadline;
        ch.note_in_flight(log, now);
        Ok(())
    }

    /// Forgets a client. Its in-flight messages stay in flight until they time out, as on
    /// nsqd; an ephemeral channel or topic left without subscribers goes.
    pub fn remove_client(&mut self, id: ClientId) -> Removed {
        let mut removed = Removed::default();
        let Some(c) = self.flows.remove(&id) else {
            return removed;
        };
        let Some((topic, channel)) = c.sub else {
            return removed;
        };
        if let Some(t) = self.topics.get_mut(&topic) {
            let mut drop_channel = false;
            if let Some(ch) = t.channels.get_mut(&channel) {
                ch.clients.retain(|&x| x != id);
                drop_channel = ch.clients.is_empty() && is_ephemeral(&channel);
            }
            if drop_channel {
                t.channels.remove(&channel);
                removed.channel = Some((topic.clone(), channel));
                if t.channels.is_empty() && is_ephemeral(&topic) {
                    self.topics.remove(&topic);
                    removed.topic = Some(topic);
                }
            }
        }
        removed
    }

    /// Every in-flight message goes back to the front of its queue, oldest delivery first
    /// (an nsqd restarting with its queues kept).
    pub fn requeue_in_flight(&mut self, now: Instant) {
        let log = self.log_in_flight;
        for topic in self.topics.values_mut() {
            for ch in topic.channels.values_mut() {
                let mut flying: Vec<InFlight> = ch.in_flight.drain().map(|(_, f)| f).collect();
                flying.sort_by_key(|f| (f.delivered, f.msg.id));
                for f in flying.into_iter().rev() {
                    ch.queue.push_front(f.msg);
                }
                ch.note_in_flight(log, now);
            }
        }
        for f in self.flows.values_mut() {
            f.in_flight = 0;
        }
    }

    /// Makes every in-flight message due now (it times out at the next
    /// [`Queues::process_timers`]).
    pub fn expire_in_flight(&mut self, now: Instant) {
        for topic in self.topics.values_mut() {
            for ch in topic.channels.values_mut() {
                for f in ch.in_flight.values_mut() {
                    f.deadline = f.deadline.min(now);
                }
            }
        }
    }

    /// Times out in-flight messages and releases due deferred ones; returns the next deadline.
    pub fn process_timers(&mut self, now: Instant) -> Option<Instant> {
        let log = self.log_in_flight;
        let Queues { topics, flows, .. } = self;
        let mut next: Option<Instant> = None;
        let mut upd = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for topic in topics.values_mut() {
            for ch in topic.channels.values_mut() {
                let mut expired: Vec<(Instant, [u8; 16])> = ch
                    .in_flight
                    .iter()
                    .filter(|(_, f)| f.deadline <= now)
                    .map(|(id, f)| (f.deadline, *id))
                    .collect();
                // Oldest first, so redelivery order is stable.
                expired.sort_unstable();
                for (_, id) in expired {
                    if let Some(f) = ch.in_flight.remove(&id) {
                        ch.timed_out += 1;
                        if let Some(c) = flows.get_mut(&f.client) {
                            c.in_flight -= 1;
                            c.timed_out += 1;
                        }
                        ch.queue.push_back(f.msg);
                    }
                }
                ch.note_in_flight(log, now);
                for f in ch.in_flight.values() {
                    upd(f.deadline);
                }
                if !ch.deferred.is_empty() {
                    ch.deferred.sort_by_key(|(t, m)| (*t, m.id));
                    let due = ch.deferred.partition_point(|(t, _)| *t <= now);
                    for (_, m) in ch.deferred.drain(..due) {
                        ch.queue.push_back(m);
                    }
                    if let Some((t, _)) = ch.deferred.first() {
                        upd(*t);
                    }
                }
            }
        }
        next
    }

    /// Sends queued messages to subscribers with `in_flight < rdy`, round robin.
    pub fn dispatch(&mut self, now: Instant, out: &mut Vec<Push>) {
        let log = self.log_in_flight;
        let (topology, topology_aware) = (self.topology, self.topology_aware);
        let Queues { topics, flows, .. } = self;
        for topic in topics.values_mut() {
            for ch in topic.channels.values_mut().filter(|ch| !ch.paused) {
                while !ch.queue.is_empty() {
                    let n = ch.clients.len();
                    let ready = |i: &usize, want: fn(&Flow) -> bool| {
                        flows
                            .get(&ch.clients[*i])
                            .is_some_and(|f| f.is_ready() && want(f))
                    };
                    let next = |want: fn(&Flow) -> bool| {
                        (0..n).map(|k| (ch.rr + k) % n).find(|i| ready(i, want))
                    };
                    // nsqd's channel hands a message to a waiting zone-local pump first, then
                    // a region-local one, then any.
                    let chosen = if topology_aware {
                        next(|f| f.zone_local)
                            .or_else(|| next(|f| f.region_local))
                            .or_else(|| next(|_| true))
                    } else {
                        next(|_| true)
                    };
                    let Some(i) = chosen else { break };
                    ch.rr = (i + 1) % n;
                    let cid = ch.clients[i];
                    let Some(c) = flows.get_mut(&cid) else {
                        break;
                    };
                    let Some(mut msg) = ch.queue.pop_front() else {
                        break;
                    };
                    msg.attempts = msg.attempts.saturating_add(1);
                    c.in_flight += 1;
                    c.delivered += 1;
                    if topology {
                        if c.zone_local {
                            ch.zone_local_msg_count += 1;
                        } else if c.region_local {
                            ch.region_local_msg_count += 1;
                        } else {
                            ch.global_msg_count += 1;
                        }
                    }
                    out.push(Push::Message(cid, msg.clone()));
                    if c.in_flight >= c.rdy {
                        // nsqd's message pump flushes once the client is not ready.
                        out.push(Push::Flush(cid));
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
                    ch.note_in_flight(log, now);
                }
            }
        }
    }
}

/// nsqd's HTTP `/topic/{pause,unpause,empty}` and `/channel/{pause,unpause,empty}`.
impl Queues {
    /// `/topic/pause` and `/topic/unpause`: a paused topic keeps what is published to it;
    /// unpaused, it hands that to its channels. False if there is no such topic.
    pub fn pause_topic(
        &mut self,
        topic: &str,
        paused: bool,
        now: Instant,
        out: &mut Vec<Push>,
    ) -> bool {
        let Some(t) = self.topics.get_mut(topic) else {
            return false;
        };
        t.paused = paused;
        t.pump(now);
        self.dispatch(now, out);
        true
    }

    /// `/channel/pause` and `/channel/unpause`: nothing is delivered from a paused channel,
    /// and its subscribers' message pumps flush what they buffered. False if there is no such
    /// channel.
    pub fn pause_channel(
        &mut self,
        topic: &str,
        channel: &str,
        paused: bool,
        now: Instant,
        out: &mut Vec<Push>,
    ) -> bool {
        let Some(ch) = self
            .topics
            .get_mut(topic)
            .and_then(|t| t.channels.get_mut(channel))
        else {
            return false;
        };
        ch.paused = paused;
        if paused {
            out.extend(ch.clients.iter().map(|&id| Push::Flush(id)));
        }
        self.dispatch(now, out);
        true
    }

    /// `/topic/empty`: drops the messages the topic holds (not its channels'). False if there
    /// is no such topic.
    pub fn empty_topic(&mut self, topic: &str) -> bool {
        let Some(t) = self.topics.get_mut(topic) else {
            return false;
        };
        t.backlog.clear();
        true
    }

    /// `/channel/empty` (nsqd's `Channel.Empty`): drops queued, deferred and in-flight
    /// messages, and every subscriber's in-flight count goes to 0. False if there is no such
    /// channel.
    pub fn empty_channel(
        &mut self,
        topic: &str,
        channel: &str,
        now: Instant,
        out: &mut Vec<Push>,
    ) -> bool {
        let log = self.log_in_flight;
        let Queues { topics, flows, .. } = self;
        let Some(ch) = topics
            .get_mut(topic)
            .and_then(|t| t.channels.get_mut(channel))
        else {
            return false;
        };
        ch.queue.clear();
        ch.deferred.clear();
        ch.in_flight.clear();
        ch.note_in_flight(log, now);
        for id in &ch.clients {
            if let Some(f) = flows.get_mut(id) {
                f.in_flight = 0;
            }
        }
        self.dispatch(now, out);
        true
    }
}

/// Whether a topic or channel name is ephemeral (`#ephemeral` suffix).
pub fn is_ephemeral(name: &str) -> bool {
    name.ends_with("#ephemeral")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_and_unique() {
        let mut q = Queues::new(0x1234);
        let a = q.new_msg(&b"a"[..], 0);
        let b = q.new_msg(&b"b"[..], 0);
        assert_eq!(&a.id, b"0000000000001234");
        assert_eq!(&b.id, b"0000000000001235");
    }

    #[test]
    fn round_robin_rdy_and_timeouts() {
        let t0 = Instant::now();
        let mut q = Queues::new(0);
        let mut out = Vec::new();
        for id in [1, 2] {
            q.add_client(id, Duration::from_secs(60));
            q.subscribe(id, "t", "c", 0, t0).unwrap();
            q.set_rdy(id, 1, t0, &mut out);
        }
        let msgs: Vec<Msg> = (0..3).map(|i| q.new_msg(vec![i], 0)).collect();
        q.publish("t", msgs, Duration::ZERO, t0, &mut out);
        let delivered: Vec<ClientId> = out
            .iter()
            .filter_map(|p| match p {
                Push::Message(c, _) => Some(*c),
                Push::Flush(_) => None,
            })
            .collect();
        assert_eq!(delivered, [1, 2]);
        assert_eq!(q.topics["t"].channels["c"].queue.len(), 1);
        // A timeout requeues; the late FIN fails.
        let t1 = t0 + Duration::from_secs(61);
        q.process_timers(t1);
        out.clear();
        let id0 = Msg::new(0, &b""[..], 0).id;
        assert_eq!(
            q.finish(1, &id0, t1, &mut out).unwrap_err(),
            AnswerError::NotInFlight
        );
        q.dispatch(t1, &mut out);
        assert_eq!(q.flows[&1].in_flight + q.flows[&2].in_flight, 2);
    }

    #[test]
    fn pause_and_empty() {
        let t0 = Instant::now();
        let mut q = Queues::new(0);
        q.log_in_flight = true;
        let mut out = Vec::new();
        q.add_client(1, Duration::from_secs(60));
        q.subscribe(1, "t", "c", 0, t0).unwrap();
        assert!(q.pause_channel("t", "c", true, t0, &mut out));
        assert_eq!(out, [Push::Flush(1)]);
        q.set_rdy(1, 5, t0, &mut out);
        out.clear();
        assert!(q.pause_topic("t", true, t0, &mut out));
        let msgs: Vec<Msg> = (0..3).map(|i| q.new_msg(vec![i], 0)).collect();
        q.publish("t", msgs, Duration::ZERO, t0, &mut out);
        assert_eq!(q.topics["t"].backlog.len(), 3);
        assert!(q.pause_topic("t", false, t0, &mut out));
        assert!(out.is_empty(), "the channel is still paused");
        assert!(q.empty_topic("t"));
        assert_eq!(q.topics["t"].channels["c"].queue.len(), 3);
        assert!(q.pause_channel("t", "c", false, t0, &mut out));
        assert_eq!(q.flows[&1].in_flight, 3);
        assert!(q.empty_channel("t", "c", t0, &mut out));
        assert_eq!(q.flows[&1].in_flight, 0);
        assert_eq!(q.topics["t"].channels["c"].depth(), 0);
        let log: Vec<usize> = q.topics["t"].channels["c"]
            .in_flight_log
            .iter()
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(log, [1, 2, 3, 0]);
        assert!(!q.pause_topic("nosuch", true, t0, &mut out));
        assert!(!q.pause_channel("t", "nosuch", true, t0, &mut out));
        assert!(!q.empty_topic("nosuch"));
        assert!(!q.empty_channel("t", "nosuch", t0, &mut out));
    }
}
