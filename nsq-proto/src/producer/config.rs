//! [`ProducerConfig`]: every producer knob.

use crate::connection::ConnectionConfig;
use std::time::Duration;

/// Which ready connection a publish goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Routing {
    /// The first ready connection in the order the nsqd addresses were added: one primary,
    /// the others only take over while it is down (failover).
    #[default]
    Failover,
    /// Ready connections in turn, spreading the load over every healthy nsqd.
    RoundRobin,
    /// The nearest ready connection by topology: an nsqd in the producer's own zone first
    /// (the connection's `topology_zone` as nsqd's IDENTIFY reply states it, against
    /// [`ConnectionConfig::topology_zone`](crate::ConnectionConfig::topology_zone)), then one in
    /// its own region, then any; the order the addresses were added breaks ties, as with
    /// [`Failover`](Routing::Failover). Cross-zone traffic is what a multi-zone deployment
    /// pays for. nsqd states its topology from after v1.3.0 (`--topology-zone`,
    /// `--topology-region`); without it, this is [`Failover`](Routing::Failover).
    ///
    /// nsqd states its zone in its IDENTIFY reply, so a publish made before the nearest has
    /// answered waits for it (from the first publish on): while no ready nsqd is in the
    /// producer's zone (or its region, when it names no zone), publishes wait for the nsqd
    /// whose first connection is still starting, each until it has answered, its connection
    /// has failed, or [`connect_timeout`](ProducerConfig::connect_timeout) (at most
    /// `publish_timeout`) has passed since that connection began; then the nearest that
    /// answered takes them.
    Topology,
}

/// Configuration of a [`Producer`](super::Producer).
///
/// A plain struct with public fields and [`Default`]:
///
/// ```
/// use nsq_proto::producer::{ProducerConfig, Routing};
/// let config = ProducerConfig { routing: Routing::RoundRobin, ..Default::default() };
/// assert_eq!(config.publish_timeout, std::time::Duration::from_secs(5));
/// ```
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Settings of every nsqd connection (IDENTIFY fields, TLS, compression, AUTH, limits).
    /// Its `max_outstanding_publishes` is ignored: the producer-wide
    /// [`max_outstanding`](Self::max_outstanding) applies instead.
    pub connection: ConnectionConfig,
    /// How publishes are spread over ready connections. Default [`Routing::Failover`].
    pub routing: Routing,
    /// The longest a TCP connect may take before the attempt counts as failed (the
    /// [`Action::Disconnect`](crate::driver::Action::Disconnect) that follows tells the
    /// driver to abandon it). go-nsq `dial_timeout`, default 1 s.
    pub connect_timeout: Duration,
    /// The longest a publish waits for a ready connection while one is being established;
    /// then it fails with `NoServerAvailable`. When no attempt is under way, a publish starts
    /// one to every nsqd not known to be down (its last connection was ready when it ended)
    /// and waits for it; it fails at once only when every nsqd's last connection attempt
    /// failed (each then waits for its reconnect delay). Default 5 s.
    pub publish_timeout: Duration,
    /// The longest a sent publish waits for nsqd's reply. When the oldest publish on a
    /// connection waits longer, the connection is presumed stuck: it is dropped and its
    /// publishes fail with `TimedOut`. `None` disables the check (the connection's heartbeat
    /// read timeout still detects dead servers). Default 30 s.
    pub reply_timeout: Option<Duration>,
    /// The most publishes unresolved at once (sent and awaiting a reply, plus waiting for a
    /// connection); beyond it publishing is refused with `TooManyOutstanding`. `None`:
    /// unbounded. Default `None`.
    pub max_outstanding: Option<usize>,
    /// The most publishes waiting for a connection at once; beyond it publishing is refused
    /// with `PendingQueueFull`. Default 10 000.
    pub max_pending: usize,
    /// First reconnect delay after a failure to connect or to complete the handshake (default
    /// 1 s), doubling per failure, with jitter. A connection that nsqd closed after refusing a
    /// command (`E_BAD_MESSAGE`, `E_BAD_TOPIC`, `E_PUB_FAILED`, ...) is not a failure of the
    /// server: it is replaced at once, and the schedule does not grow.
    pub reconnect_initial_delay: Duration,
    /// Longest reconnect delay (default 60 s).
    pub reconnect_max_delay: Duration,
    /// Natural batching (default on): single publishes to the same topic that wait for the
    /// same write of a connection (made since its last write, made while two commands await
    /// their reply on it, or waiting together for a connection) leave as one MPUB, within
    /// the nsqd's size limits; each still resolves on its own. Nothing waits for a batch to
    /// fill: a publish on an idle connection leaves at once. When nsqd refuses a batch because of one
    /// message (`E_BAD_MESSAGE`, `E_BAD_BODY`), its publishes are sent again one by one, so
    /// only the bad one fails. Other refusals (`E_BAD_TOPIC`, `E_MPUB_FAILED`, ...) fail
    /// every publish of the batch with nsqd's error. Explicit MPUBs and DPUBs are never
    /// merged. `false`: every publish is its own PUB.
    pub batching: bool,
    /// A connection up for this long resets its reconnect schedule (default 30 s).
    pub reconnect_reset_after: Duration,
    /// After [`close`](super::Producer::close), publishes still unresolved fail with
    /// `TimedOut` after this long and every connection is dropped (default 30 s).
    pub close_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            connection: ConnectionConfig::default(),
            routing: Routing::Failover,
            connect_timeout: Duration::from_secs(1),
            publish_timeout: Duration::from_secs(5),
            reply_timeout: Some(Duration::from_secs(30)),
            max_outstanding: None,
            max_pending: 10_000,
            reconnect_initial_delay: Duration::from_secs(1),
            reconnect_max_delay: Duration::from_secs(60),
            batching: true,
            reconnect_reset_after: Duration::from_secs(30),
            close_timeout: Duration::from_secs(30),
        }
    }
}
