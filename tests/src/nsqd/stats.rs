//! Introspection: what [`Nsqd::stats`](super::Nsqd::stats) and the command log report.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Inner;
pub use crate::model::ClientState;

/// Identifies a client connection of a test nsqd (1, 2, 3 ... in connection order).
pub type ClientId = u64;

/// Counters of a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelStats {
    /// Topic name.
    pub topic: String,
    /// Channel name.
    pub name: String,
    /// Messages that entered the channel (from the topic).
    pub message_count: u64,
    /// Messages waiting to be sent.
    pub depth: usize,
    /// Messages deferred (DPUB or REQ with delay).
    pub deferred: usize,
    /// Messages in flight.
    pub in_flight: usize,
    /// Messages finished (FIN).
    pub finished: u64,
    /// Messages requeued (REQ).
    pub requeued: u64,
    /// Messages that timed out in flight.
    pub timed_out: u64,
    /// Subscribed clients.
    pub clients: Vec<ClientId>,
    /// Paused (`/channel/pause`): nothing is delivered.
    pub paused: bool,
    /// Deliveries to subscribers in the broker's zone (with a topology: nsqd after v1.3.0).
    pub zone_local_msg_count: u64,
    /// Deliveries to subscribers in its region, not its zone.
    pub region_local_msg_count: u64,
    /// Deliveries to any other subscriber.
    pub global_msg_count: u64,
}

/// Counters of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicStats {
    /// Topic name.
    pub name: String,
    /// Messages published to it.
    pub message_count: u64,
    /// Bytes of the message bodies published to it.
    pub message_bytes: u64,
    /// Messages held by the topic because it has no channel yet or is paused.
    pub depth: usize,
    /// Paused (`/topic/pause`): messages stay in the topic.
    pub paused: bool,
    /// Its channels.
    pub channels: Vec<ChannelStats>,
}

/// A client connection's state.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientStats {
    /// Its id.
    pub id: ClientId,
    /// The client's address.
    pub remote_address: SocketAddr,
    /// Protocol state.
    pub state: ClientState,
    /// Current RDY.
    pub rdy: i64,
    /// Messages in flight to it.
    pub in_flight: i64,
    /// `(topic, channel)` after SUB.
    pub subscription: Option<(String, String)>,
    /// Negotiated message timeout.
    pub msg_timeout: Duration,
    /// Negotiated heartbeat interval (`None` = disabled).
    pub heartbeat_interval: Option<Duration>,
    /// TLS is on.
    pub tls: bool,
    /// Snappy is on.
    pub snappy: bool,
    /// Deflate is on (with this level).
    pub deflate: Option<u32>,
    /// AUTH identity.
    pub identity: Option<String>,
    /// The IDENTIFY body, as JSON.
    pub identify: Option<Value>,
    /// Messages sent to it.
    pub delivered: u64,
    /// FIN received.
    pub finished: u64,
    /// REQ received.
    pub requeued: u64,
    /// Its messages that timed out.
    pub timed_out: u64,
    /// IDENTIFY's `client_id` (the remote host before an IDENTIFY, as in nsqd).
    pub client_id: String,
    /// IDENTIFY's `hostname` (the remote host before an IDENTIFY).
    pub hostname: String,
    /// IDENTIFY's `user_agent`.
    pub user_agent: String,
    /// Messages it published, per topic, in the order of the first publish to each.
    pub pub_counts: Vec<(String, u64)>,
}

/// A snapshot of the whole broker.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Topics, by name.
    pub topics: Vec<TopicStats>,
    /// Connected clients, by id.
    pub clients: Vec<ClientStats>,
}

/// One command received, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    /// Global sequence number (0, 1, 2 ...).
    pub seq: u64,
    /// Which client sent it.
    pub client: ClientId,
    /// When it was handled.
    pub at: Instant,
    /// The command line without its newline (lossy UTF-8).
    pub line: String,
    /// The body, when the command had one and it was read (at most
    /// [`Options::command_log_body_limit`](crate::Options::command_log_body_limit) bytes of it).
    pub body: Option<Vec<u8>>,
    /// The body's full length.
    pub body_len: usize,
    /// The error sent back, if any (`E_CODE description`).
    pub error: Option<String>,
}

impl CommandRecord {
    /// The command name (`PUB`, `RDY` ...).
    pub fn name(&self) -> &str {
        self.line.split(' ').next().unwrap_or("")
    }
}

impl Inner {
    pub(super) fn stats(&self) -> Stats {
        let st = self.lock();
        let topics = st
            .queues
            .topics
            .iter()
            .map(|(name, t)| TopicStats {
                name: name.clone(),
                message_count: t.message_count,
                message_bytes: t.message_bytes,
                depth: t.backlog.len(),
                paused: t.paused,
                channels: t
                    .channels
                    .iter()
                    .map(|(cname, ch)| ChannelStats {
                        topic: name.clone(),
                        name: cname.clone(),
                        message_count: ch.message_count,
                        depth: ch.queue.len(),
                        deferred: ch.deferred.len(),
                        in_flight: ch.in_flight.len(),
                        finished: ch.finished,
                        requeued: ch.requeued,
                        timed_out: ch.timed_out,
                        clients: ch.clients.clone(),
                        paused: ch.paused,
                        zone_local_msg_count: ch.zone_local_msg_count,
                        region_local_msg_count: ch.region_local_msg_count,
                        global_msg_count: ch.global_msg_count,
                    })
                    .collect(),
            })
            .collect();
        let clients = st
            .clients
            .iter()
            .filter_map(|(&id, c)| Some((id, c, st.queues.flows.get(&id)?)))
            .map(|(id, c, f)| ClientStats {
                id,
                remote_address: c.remote,
                state: f.state,
                rdy: f.rdy,
                in_flight: f.in_flight,
                subscription: f.sub.clone(),
                msg_timeout: f.msg_timeout,
                heartbeat_interval: c.heartbeat,
                tls: c.tls,
                snappy: c.snappy,
                deflate: c.deflate,
                identity: c.auth.as_ref().map(|a| a.identity.clone()),
                identify: c.identify.clone(),
                delivered: f.delivered,
                finished: f.finished,
                requeued: f.requeued,
                timed_out: f.timed_out,
                client_id: c.client_id.clone(),
                hostname: c.hostname.clone(),
                user_agent: c.user_agent.clone(),
                pub_counts: c.pub_counts.clone(),
            })
            .collect();
        Stats { topics, clients }
    }
}
