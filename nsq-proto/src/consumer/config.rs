//! [`ConsumerConfig`]: every consumer knob, with go-nsq's defaults where go-nsq has one.

use super::policy::BackoffStrategy;
use crate::connection::ConnectionConfig;
use std::time::Duration;

/// How the consumer's in-flight limit is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InFlightMode {
    /// `max_in_flight` is the limit, changed only by `set_max_in_flight` (go-nsq's way).
    #[default]
    Static,
    /// `max_in_flight` is a ceiling; the limit below it follows the handlers' latencies: it
    /// settles where the handlers' downstream is busy without a queue, and follows its
    /// capacity as it changes (see [`Consumer`](super::Consumer#an-adaptive-limit)).
    Adaptive,
}

/// Configuration of a [`Consumer`](super::Consumer).
///
/// A plain struct with public fields and [`Default`], so `..Default::default()` works:
///
/// ```
/// use nsq_proto::consumer::ConsumerConfig;
/// let config = ConsumerConfig { max_in_flight: 100, ..Default::default() };
/// assert_eq!(config.max_attempts, 5);
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Settings of every nsqd connection (IDENTIFY fields, TLS, compression, AUTH, limits).
    pub connection: ConnectionConfig,
    /// The most messages in flight over all connections together (go-nsq `max_in_flight`,
    /// default 1). 0 pauses the consumer.
    pub max_in_flight: u32,
    /// Whether `max_in_flight` is the limit ([`InFlightMode::Static`], the default) or the
    /// ceiling of a limit the consumer finds from the handlers' latencies
    /// ([`InFlightMode::Adaptive`]; go-style option `max_in_flight_mode`).
    pub max_in_flight_mode: InFlightMode,
    /// The adaptive limit's floor (option `min_in_flight`, default 1; capped by
    /// `max_in_flight`). Unused in the static mode.
    pub min_in_flight: u32,
    /// Messages delivered more often than this are finished and reported as
    /// [`ConsumerEvent::GaveUp`](super::ConsumerEvent::GaveUp) (go-nsq `max_attempts`, default
    /// 5). 0 means unlimited.
    pub max_attempts: u16,
    /// Requeue delay per attempt when the handler gives none (go-nsq
    /// `default_requeue_delay`, default 90 s).
    pub default_requeue_delay: Duration,
    /// Cap on the computed requeue delay (go-nsq `max_requeue_delay`, default 15 min).
    pub max_requeue_delay: Duration,
    /// Whether failed messages (requeue with backoff) slow the consumer down. Default true.
    pub backoff_enabled: bool,
    /// How backoff windows grow (go-nsq `backoff_strategy`, default exponential).
    pub backoff_strategy: BackoffStrategy,
    /// Unit of the backoff window: `multiplier x 2^level` (go-nsq `backoff_multiplier`,
    /// default 1 s).
    pub backoff_multiplier: Duration,
    /// Longest backoff window (go-nsq `max_backoff_duration`, default 2 min).
    pub max_backoff_duration: Duration,
    /// Time between nsqlookupd polls (go-nsq `lookupd_poll_interval`, default 60 s).
    pub lookupd_poll_interval: Duration,
    /// Random extra delay added to each poll, as a fraction of the interval (go-nsq
    /// `lookupd_poll_jitter`, default 0.3).
    pub lookupd_poll_jitter: f64,
    /// How long one lookupd query may take before it counts as failed (default 30 s).
    pub lookupd_timeout: Duration,
    /// Cap on a lookupd response body, in bytes (default 4 MiB).
    pub max_lookupd_response_size: usize,
    /// How often RDY is redistributed when `max_in_flight` is smaller than the number of
    /// connections, or a backoff probe sits idle (go-nsq `rdy_redistribute_interval`, 5 s).
    pub rdy_redistribute_interval: Duration,
    /// With fewer `max_in_flight` than connections: a connection holding RDY with nothing in
    /// flight and no message or answer for this long gives its turn up (go-nsq
    /// `low_rdy_idle_timeout`; default 1 s here, 10 s in go-nsq). The longest such wait: a
    /// connection whose handshake showed a short round trip gives up sooner, after twice its
    /// handshake (four round trips), at least 100 ms, since a message nsqd has ready arrives
    /// one round trip after the RDY. The backoff probe moves on after the same wait.
    pub low_rdy_idle_timeout: Duration,
    /// With fewer `max_in_flight` than connections: the longest turn of a connection
    /// holding RDY, after which it passes RDY on even when busy, so others get served (go-nsq
    /// `low_rdy_timeout`; default 2 s here, 30 s in go-nsq: see the
    /// [`Consumer`](super::Consumer) docs for why and what it costs). Turns are shorter when
    /// many connections wait (see `low_rdy_max_wait`).
    pub low_rdy_timeout: Duration,
    /// With fewer `max_in_flight` than connections: the starvation bound turns are sized for
    /// (default 10 s; not in go-nsq). A round of turns is to take half of it, so every
    /// connection with messages gets a turn within it, as far as the handlers' speed allows;
    /// with every nsqd busy a turn lasts `low_rdy_max_wait / 2 x max_in_flight / connections`,
    /// capped at `low_rdy_timeout`, at least 10 ms and one message (see the
    /// [`Consumer`](super::Consumer) docs). Longer: longer turns, fewer RDY commands per
    /// message, longer waits.
    pub low_rdy_max_wait: Duration,
    /// First reconnect delay for directly configured nsqd (default 1 s), doubling per failure.
    pub reconnect_initial_delay: Duration,
    /// Longest reconnect delay (default 60 s).
    pub reconnect_max_delay: Duration,
    /// A connection up for this long resets the reconnect schedule (default 30 s).
    pub reconnect_reset_after: Duration,
    /// After `close`, connections still draining are dropped after this long (default 30 s).
    pub close_timeout: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            connection: ConnectionConfig::default(),
            max_in_flight: 1,
            max_in_flight_mode: InFlightMode::Static,
            min_in_flight: 1,
            max_attempts: 5,
            default_requeue_delay: Duration::from_secs(90),
            max_requeue_delay: Duration::from_secs(15 * 60),
            backoff_enabled: true,
            backoff_strategy: BackoffStrategy::Exponential,
            backoff_multiplier: Duration::from_secs(1),
            max_backoff_duration: Duration::from_secs(120),
            lookupd_poll_interval: Duration::from_secs(60),
            lookupd_poll_jitter: 0.3,
            lookupd_timeout: Duration::from_secs(30),
            max_lookupd_response_size: super::lookupd::DEFAULT_MAX_BODY_SIZE,
            rdy_redistribute_interval: Duration::from_secs(5),
            low_rdy_idle_timeout: Duration::from_secs(1),
            low_rdy_timeout: Duration::from_secs(2),
            low_rdy_max_wait: Duration::from_secs(10),
            reconnect_initial_delay: Duration::from_secs(1),
            reconnect_max_delay: Duration::from_secs(60),
            reconnect_reset_after: Duration::from_secs(30),
            close_timeout: Duration::from_secs(30),
        }
    }
}
