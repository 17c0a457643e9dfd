//! The nsq-proto side of the adapter scenarios (`nsq_test_broker::scenarios`): settings,
//! errors, statistics and messages, which every adapter shares through nsq-client and
//! nsq-proto, mapped once (the test broker itself must not depend on nsq-proto, so this is
//! not a module of that crate).

use std::time::Duration;

use nsq_client::{Error, HandlerError, Message, StopReport};
use nsq_proto::consumer::{ConsumerConfig, ConsumerStats, NsqdState};
use nsq_proto::producer::{ProducerConfig, ProducerStats};
use nsq_proto::{Compression, Config, ConnectionConfig, Misconfiguration, TlsConfig};
use nsq_test_broker::TestPki;
use nsq_test_broker::scenarios as s;

/// The harness's view of an adapter error.
pub fn error(e: &Error) -> s::ClientError {
    let kind = match e {
        Error::InvalidTopic { .. } | Error::InvalidChannel { .. } => s::ErrorKind::InvalidName,
        Error::InvalidInput(_) => s::ErrorKind::InvalidInput,
        Error::Server(e) => s::ErrorKind::Server(e.code_str().into_owned()),
        Error::ConnectionLost(_) => s::ErrorKind::ConnectionLost,
        Error::Timeout => s::ErrorKind::Timeout,
        Error::NoServerAvailable(_) => s::ErrorKind::NoServerAvailable,
        Error::Misconfigured { problem: p, .. } => s::ErrorKind::Misconfigured(problem(p)),
        Error::Backpressure(_) => s::ErrorKind::Backpressure,
        Error::Consumer(_) => s::ErrorKind::Consumer,
        Error::Closed => s::ErrorKind::Closed,
        Error::AlreadyConnected(_) => s::ErrorKind::AlreadyConnected,
        Error::NoRuntime(_) => s::ErrorKind::NoRuntime,
        Error::Connect { .. } => s::ErrorKind::Connect,
        Error::Lookupd { error, .. } => s::ErrorKind::Lookupd {
            misconfigured: error.is_misconfiguration(),
        },
        Error::Config(_) => s::ErrorKind::Config,
        _ => s::ErrorKind::Other,
    };
    s::ClientError {
        kind,
        message: e.to_string(),
    }
}

/// The harness's view of a misconfiguration.
pub fn problem(p: &Misconfiguration) -> s::Problem {
    match p {
        Misconfiguration::HttpPort => s::Problem::HttpPort,
        Misconfiguration::LookupdTcpPort => s::Problem::LookupdTcpPort,
        Misconfiguration::TlsRequired => s::Problem::TlsRequired,
        Misconfiguration::TlsNotOffered => s::Problem::TlsNotOffered,
        Misconfiguration::TlsHandshake(_) => s::Problem::TlsHandshake,
        Misconfiguration::AuthSecretMissing => s::Problem::AuthSecretMissing,
        Misconfiguration::AuthRefused(_) => s::Problem::AuthRefused,
        _ => s::Problem::Other,
    }
}

/// The consumer builders (async and blocking), as the glue sets them up.
pub trait ConsumerBuilding: Sized {
    /// `config`.
    fn config(self, config: &Config) -> Self;
    /// `core_config`.
    fn core_config(self, config: ConsumerConfig) -> Self;
    /// `on_give_up`.
    fn on_give_up(self, hook: impl Fn(&Message) + Send + Sync + 'static) -> Self;
    /// `nsqds`.
    fn nsqds(self, addrs: &[String]) -> Self;
    /// `lookupds`.
    fn lookupds(self, addrs: &[String]) -> Self;
}

/// The producer builders (async and blocking), as the glue sets them up.
pub trait ProducerBuilding: Sized {
    /// `nsqds`.
    fn nsqds(self, addrs: &[String]) -> Self;
    /// `core_config`.
    fn core_config(self, config: ProducerConfig) -> Self;
}

macro_rules! building {
    ($consumer:ty, $producer:ty) => {
        impl ConsumerBuilding for $consumer {
            fn config(self, config: &Config) -> Self {
                <$consumer>::config(self, config)
            }
            fn core_config(self, config: ConsumerConfig) -> Self {
                <$consumer>::core_config(self, config)
            }
            fn on_give_up(self, hook: impl Fn(&Message) + Send + Sync + 'static) -> Self {
                <$consumer>::on_give_up(self, hook)
            }
            fn nsqds(self, addrs: &[String]) -> Self {
                <$consumer>::nsqds(self, addrs)
            }
            fn lookupds(self, addrs: &[String]) -> Self {
                <$consumer>::lookupds(self, addrs)
            }
        }

        impl ProducerBuilding for $producer {
            fn nsqds(self, addrs: &[String]) -> Self {
                <$producer>::nsqds(self, addrs)
            }
            fn core_config(self, config: ProducerConfig) -> Self {
                <$producer>::core_config(self, config)
            }
        }
    };
}

building!(nsq_client::ConsumerBuilder, nsq_client::ProducerBuilder);
building!(
    nsq_client::blocking::ConsumerBuilder,
    nsq_client::blocking::ProducerBuilder
);

/// A consumer builder set up as the `&ConsumerSetup` says (its nsqd and lookupd, and the
/// configuration it names). Fails with the error of an invalid go-nsq configuration.
pub fn consumer_builder<B: ConsumerBuilding>(
    mut b: B,
    setup: &s::ConsumerSetup,
) -> s::ClientResult<B> {
    if let Some(c) = &setup.config {
        b = b.config(&go_config(c)?);
    }
    if let Some(o) = &setup.options {
        b = b.core_config(consumer_config(o));
    }
    if let Some(hook) = setup.on_give_up.clone() {
        b = b.on_give_up(move |m: &Message| hook(m.attempts(), m.body()));
    }
    Ok(b.nsqds(&setup.nsqd).lookupds(&setup.lookupd))
}

/// A producer builder with `nsqd`, and `core_config` if `options` are set.
pub fn producer_builder<B: ProducerBuilding>(
    b: B,
    nsqd: &[String],
    options: Option<&s::ProducerOptions>,
) -> B {
    let mut b = b.nsqds(nsqd);
    if let Some(o) = options {
        b = b.core_config(producer_config(o));
    }
    b
}

/// A consumer of `topic`/`ch` on `nsqd` (a `&Nsqd`) with the `ConsumerConfig`, for an
/// adapter's own tests: `consumer!(Consumer, &nsqd, "topic", fast_config(1))`.
#[macro_export]
macro_rules! consumer {
    ($consumer:ty, $nsqd:expr, $topic:expr, $config:expr) => {
        <$consumer>::builder($topic, "ch")
            .core_config($config)
            .nsqd($nsqd.tcp_address().to_string())
            .build()
            .unwrap()
    };
}

/// [`s::fast_config`] as nsq-proto's `ConsumerConfig`.
pub fn fast_config(max_in_flight: u32) -> ConsumerConfig {
    consumer_config(&s::fast_config(max_in_flight))
}

/// `result` with its error mapped.
pub fn map<T>(result: Result<T, Error>) -> s::ClientResult<T> {
    result.map_err(|e| error(&e))
}

/// `Config::default()` with the options set (an invalid one is an `ErrorKind::Config`).
pub fn go_config(c: &s::GoConfig) -> s::ClientResult<Config> {
    let mut config = Config::default();
    for (option, value) in &c.options {
        map(config.set_str(option, value).map_err(Error::Config))?;
    }
    if let Some(n) = c.unchecked_max_attempts {
        config.max_attempts = n;
    }
    if let Some(n) = c.unchecked_deflate_level {
        config.deflate_level = n;
    }
    Ok(config)
}

/// Whether `Config::set_str` accepts `value` for `option`.
pub fn check_option(option: &str, value: &str) -> s::ClientResult<()> {
    map(Config::default()
        .set_str(option, value)
        .map_err(Error::Config))
}

fn connection(config: &mut ConnectionConfig, c: &s::Connection) {
    if c.tls {
        config.tls = Some(TlsConfig::from_client_config(
            TestPki::global().client_config(),
        ));
    }
    config.compression = match c.compression {
        s::Compression::None => Compression::None,
        s::Compression::Snappy => Compression::Snappy,
        s::Compression::Deflate(level) => Compression::Deflate { level },
    };
    if let Some(secret) = &c.auth_secret {
        config.auth_secret = Some(secret.as_str().into());
    }
    if let Some(d) = c.heartbeat_interval {
        config.heartbeat_interval = d;
    }
    if let Some(d) = c.msg_timeout {
        config.msg_timeout = Some(d);
    }
    if let Some(limit) = c.auto_touch {
        config.auto_touch = Some(limit);
    }
    if let Some((zone, region)) = &c.topology {
        config.topology_zone = Some(zone.clone());
        config.topology_region = Some(region.clone());
    }
}

fn set<T: Copy>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// `ConsumerConfig::default()` with the options set.
pub fn consumer_config(o: &s::ConsumerOptions) -> ConsumerConfig {
    let mut c = ConsumerConfig::default();
    set(&mut c.max_in_flight, o.max_in_flight);
    set(&mut c.max_attempts, o.max_attempts);
    set(&mut c.backoff_multiplier, o.backoff_multiplier);
    set(&mut c.default_requeue_delay, o.default_requeue_delay);
    set(
        &mut c.rdy_redistribute_interval,
        o.rdy_redistribute_interval,
    );
    set(&mut c.reconnect_initial_delay, o.reconnect_initial_delay);
    set(&mut c.reconnect_max_delay, o.reconnect_max_delay);
    set(&mut c.lookupd_poll_interval, o.lookupd_poll_interval);
    connection(&mut c.connection, &o.connection);
    c
}

/// `ProducerConfig::default()` with the options set.
pub fn producer_config(o: &s::ProducerOptions) -> ProducerConfig {
    let mut c = ProducerConfig::default();
    set(&mut c.publish_timeout, o.publish_timeout);
    set(&mut c.connect_timeout, o.connect_timeout);
    connection(&mut c.connection, &o.connection);
    if o.routing_topology {
        c.routing = nsq_proto::producer::Routing::Topology;
    }
    c
}

/// The harness's view of a consumer's statistics.
pub fn consumer_stats(st: &ConsumerStats) -> s::ConsumerStats {
    s::ConsumerStats {
        received: st.received,
        gave_up: st.gave_up,
        connections: st.connections,
        backoff_level: st.backoff_level,
        total_rdy: st.total_rdy,
        in_flight: st.in_flight,
        reconnects: st.reconnects,
        nsqd: st
            .nsqd
            .iter()
            .map(|n| s::NsqdStats {
                address: n.address.clone(),
                configured: n.configured,
                state: match n.state {
                    NsqdState::Connecting => s::NsqdState::Connecting,
                    NsqdState::Handshaking => s::NsqdState::Handshaking,
                    NsqdState::Ready => s::NsqdState::Ready,
                    NsqdState::Closing => s::NsqdState::Closing,
                    NsqdState::Disconnected => s::NsqdState::Disconnected,
                    NsqdState::Misconfigured => s::NsqdState::Misconfigured,
                    _ => s::NsqdState::Other,
                },
                rdy: n.rdy,
                in_flight: n.in_flight,
                received: n.received,
                finished: n.finished,
                requeued: n.requeued,
                reconnects: n.reconnects,
                topology_zone: n.topology_zone.clone(),
            })
            .collect(),
    }
}

/// The harness's view of a producer's statistics.
pub fn producer_stats(st: &ProducerStats) -> s::ProducerStats {
    s::ProducerStats {
        published: st.published,
        failed: st.failed,
        connections_ready: st.connections_ready,
        batches: st.batches,
        batched_messages: st.batched_messages,
    }
}

/// The harness's view of a stop report.
pub fn stop_report(r: StopReport) -> s::StopReport {
    s::StopReport {
        unanswered: r.unanswered,
    }
}

/// The handler's result as the adapter's handlers return it.
pub fn handled(result: Result<(), s::HandlerFailure>) -> Result<(), HandlerError> {
    result.map_err(|f| {
        let mut e = HandlerError::msg(f.message);
        if !f.backoff {
            e = e.without_backoff();
        }
        if let Some(d) = f.delay {
            e = e.with_delay(d);
        }
        e
    })
}

/// Runs the harness handler on an adapter message.
pub fn handle(handler: &s::Handler, message: Message) -> Result<(), HandlerError> {
    handled(handler(&Msg(message)))
}

/// Every adapter's message: nsq-client's `Message`.
pub struct Msg(pub Message);

/// The boxed harness message.
pub fn message(m: Message) -> Box<dyn s::Message> {
    Box::new(Msg(m))
}

impl s::Message for Msg {
    fn body(&self) -> &[u8] {
        self.0.body()
    }
    fn attempts(&self) -> u16 {
        self.0.attempts()
    }
    fn timestamp(&self) -> i64 {
        self.0.timestamp()
    }
    fn nsqd_address(&self) -> String {
        self.0.nsqd_address().to_owned()
    }
    fn finish(self: Box<Self>) {
        self.0.finish();
    }
    fn requeue(self: Box<Self>, delay: Option<Duration>) {
        self.0.requeue(delay);
    }
    fn requeue_without_backoff(self: Box<Self>, delay: Option<Duration>) {
        self.0.requeue_without_backoff(delay);
    }
}

/// The scenarios' `Producer::publish_async_window`, for any adapter: `publish` starts one
/// `publish_async`, `wait` waits for a started one's result.
pub fn publish_async_window<P>(
    bodies: Vec<Vec<u8>>,
    window: usize,
    drop_every: usize,
    mut publish: impl FnMut(Vec<u8>) -> Result<P, Error>,
    mut wait: impl FnMut(P) -> Result<(), Error>,
) -> s::ClientResult<()> {
    let mut under_way = std::collections::VecDeque::new();
    for (i, body) in bodies.into_iter().enumerate() {
        if under_way.len() >= window {
            if let Some(p) = under_way.pop_front() {
                map(wait(p))?;
            }
        }
        let pending = map(publish(body))?;
        if drop_every == 0 || (i + 1) % drop_every != 0 {
            under_way.push_back(pending);
        }
    }
    under_way.into_iter().try_for_each(|p| map(wait(p)))
}

/// The scenarios' `Producer::publish_async_burst`, for any adapter: up to `count` calls of
/// `publish`, stopping at the first refusal; `try_result` on the first; `between`; then
/// `wait` on each accepted publish (with its position), in order.
pub fn publish_async_burst<P>(
    count: usize,
    mut publish: impl FnMut() -> Result<P, Error>,
    try_result: impl FnOnce(&mut P) -> bool,
    between: &dyn Fn(),
    mut wait: impl FnMut(usize, P) -> Result<(), Error>,
) -> s::AsyncBurst {
    let mut pending = Vec::new();
    let mut refused = None;
    for _ in 0..count {
        match publish() {
            Ok(p) => pending.push(p),
            Err(e) => {
                refused = Some(error(&e));
                break;
            }
        }
    }
    let first_known_early = pending.first_mut().is_some_and(try_result);
    between();
    let results = pending
        .into_iter()
        .enumerate()
        .map(|(i, p)| map(wait(i, p)))
        .collect();
    s::AsyncBurst {
        refused,
        first_known_early,
        results,
    }
}

/// The harness's view of a consumer event.
pub fn event(e: nsq_client::Event) -> s::ClientEvent {
    use nsq_client::Event;
    match e {
        Event::Connected { nsqd } => s::ClientEvent::Connected { nsqd },
        Event::Disconnected {
            nsqd,
            retry_in,
            misconfigured,
            ..
        } => s::ClientEvent::Disconnected {
            nsqd,
            retrying: retry_in.is_some(),
            misconfigured: misconfigured.map(|m| problem(&m)),
        },
        Event::Backoff { level } => s::ClientEvent::Backoff { level },
        Event::BackoffEnded => s::ClientEvent::BackoffEnded,
        Event::GaveUp { nsqd, attempts, .. } => s::ClientEvent::GaveUp { nsqd, attempts },
        Event::Starved(b) => s::ClientEvent::Starved(b),
        Event::LookupdFailed {
            lookupd,
            misconfigured,
            ..
        } => s::ClientEvent::LookupdFailed {
            lookupd,
            misconfigured,
        },
        Event::Lagged { missed } => s::ClientEvent::Lagged { missed },
        _ => s::ClientEvent::Other,
    }
}
