//! Configuration and start-up: a [`Config`] turned into the core's configuration plus socket
//! settings ([`AdapterConfig`]), and what the builders collect ([`ConsumerSetup`],
//! [`ProducerSetup`]) turned into a started core.

use super::error::{Error, IntoChannel, IntoTopic};
use super::logging::{consumer_span, log_max_in_flight, producer_span};
use super::message::GiveUpHook;
use nsq_proto::config::{Config, OptionError};
use nsq_proto::consumer::{Consumer, ConsumerConfig};
use nsq_proto::producer::{Producer, ProducerConfig};
use nsq_proto::{Channel, Topic};
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A core configuration plus the socket-level settings an adapter applies itself.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub(crate) struct AdapterConfig<C> {
    /// The core's configuration ([`ConsumerConfig`] or [`ProducerConfig`]).
    pub machine: C,
    /// How long a TCP connect may take (go-nsq `dial_timeout`).
    pub dial_timeout: Duration,
    /// How long one socket write may take before the connection is dropped (go-nsq
    /// `write_timeout`).
    pub write_timeout: Duration,
    /// The local address to connect from (go-nsq `local_addr`).
    pub local_addr: Option<std::net::SocketAddr>,
    /// Whether the client's metrics include its histograms (`metrics_histograms`).
    pub histograms: bool,
    /// How long a consumer's messages are auto-touched at most (`auto_touch_limit`), kept
    /// whether `auto_touch` is on or not: batches turn auto-touch on.
    pub auto_touch_limit: Duration,
}

impl<C: Default> Default for AdapterConfig<C> {
    fn default() -> Self {
        let defaults = Config::default();
        AdapterConfig {
            machine: C::default(),
            dial_timeout: defaults.dial_timeout,
            write_timeout: defaults.write_timeout,
            local_addr: defaults.local_addr,
            histograms: defaults.metrics_histograms,
            auto_touch_limit: defaults.auto_touch_limit,
        }
    }
}

fn with_hostname(config: &Config, os_hostname: Option<String>) -> Option<Config> {
    match (&config.hostname, os_hostname) {
        (None, Some(h)) if !h.trim().is_empty() => Some(Config {
            hostname: Some(h.trim().to_owned()),
            ..config.clone()
        }),
        _ => None,
    }
}

/// The consumer's configuration from `config`. `os_hostname` (read by the adapter) fills
/// `hostname` when `config` names none; TLS files are read with `read_file` (`std::fs::read`).
pub(crate) fn consumer_config(
    config: &Config,
    os_hostname: Option<String>,
    read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
) -> Result<AdapterConfig<ConsumerConfig>, OptionError> {
    let filled = with_hostname(config, os_hostname);
    let config = filled.as_ref().unwrap_or(config);
    Ok(AdapterConfig {
        machine: config.consumer_config(read_file)?,
        dial_timeout: config.dial_timeout,
        write_timeout: config.write_timeout,
        local_addr: config.local_addr,
        histograms: config.metrics_histograms,
        auto_touch_limit: config.auto_touch_limit,
    })
}

/// The producer's configuration from `config` (see [`consumer_config`]). The core also
/// applies `dial_timeout` as its connect timeout.
pub(crate) fn producer_config(
    config: &Config,
    os_hostname: Option<String>,
    read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
) -> Result<AdapterConfig<ProducerConfig>, OptionError> {
    let filled = with_hostname(config, os_hostname);
    let config = filled.as_ref().unwrap_or(config);
    Ok(AdapterConfig {
        machine: config.producer_config(read_file)?,
        dial_timeout: config.dial_timeout,
        write_timeout: config.write_timeout,
        local_addr: config.local_addr,
        histograms: config.metrics_histograms,
        auto_touch_limit: config.auto_touch_limit,
    })
}

/// What a consumer builder collects before it starts: [`ConsumerBuilder`](crate::ConsumerBuilder) stores one and
/// fills its public fields; [`start`](Self::start) does the
/// validation and creates the core. Errors of the name and configuration arguments are kept
/// until then, so the builder methods stay infallible.
#[non_exhaustive]
pub(crate) struct ConsumerSetup {
    /// The topic (validated by [`new`](Self::new)).
    pub topic: Result<Topic, Error>,
    /// The channel.
    pub channel: Result<Channel, Error>,
    /// The core's configuration.
    pub config: Result<ConsumerConfig, Error>,
    /// Overrides `config.max_in_flight`.
    pub max_in_flight: Option<u32>,
    /// Called for messages given up on.
    pub give_up: Option<GiveUpHook>,
    /// nsqd TCP addresses to connect to directly.
    pub nsqd: Vec<String>,
    /// nsqlookupd HTTP addresses.
    pub lookupd: Vec<String>,
    /// Seed of the core's RNG (random when `None`).
    pub seed: Option<u64>,
    /// TCP connect timeout (from the configuration).
    pub dial_timeout: Duration,
    /// Socket write timeout (from the configuration).
    pub write_timeout: Duration,
    /// The local address to connect from (go-nsq `local_addr`).
    pub local_addr: Option<std::net::SocketAddr>,
    /// How long batches keep their messages auto-touched (`auto_touch_limit`).
    pub auto_touch_limit: Duration,
    /// Whether its metrics include histograms (`metrics_histograms`).
    pub histograms: bool,
    /// The builder's own settings, which win over the configuration's whatever the order
    /// they were given in.
    pub set: SetByBuilder,
    /// The runtime to start on (found where it starts unless the builder was given one).
    pub runtime: crate::runtime::RuntimeChoice,
    /// The consumer's span ([`consumer_span`]), made with the builder so that what taking
    /// its configuration logs (TLS verification turned off) names it too; none when the
    /// topic or channel is invalid (it will not start).
    pub span: tracing::Span,
}

/// Settings a builder took by name (`.dial_timeout(..)`), kept apart so that a later
/// `.config(..)` does not undo them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SetByBuilder {
    pub dial_timeout: Option<Duration>,
    pub write_timeout: Option<Duration>,
}

impl fmt::Debug for ConsumerSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerSetup")
            .field("topic", &self.topic)
            .field("channel", &self.channel)
            .field("config", &self.config)
            .field("max_in_flight", &self.max_in_flight)
            .field("give_up", &self.give_up.is_some())
            .field("nsqd", &self.nsqd)
            .field("lookupd", &self.lookupd)
            .field("dial_timeout", &self.dial_timeout)
            .field("write_timeout", &self.write_timeout)
            .finish_non_exhaustive()
    }
}

/// A core consumer ready to be driven, with what its driver needs.
#[non_exhaustive]
pub(crate) struct ConsumerStart {
    /// The core, with its nsqd and lookupd addresses added.
    pub machine: Consumer,
    /// The give-up hook.
    pub give_up: Option<GiveUpHook>,
    /// TCP connect timeout.
    pub dial_timeout: Duration,
    /// Socket write timeout.
    pub write_timeout: Duration,
    /// The local address to connect from (go-nsq `local_addr`).
    pub local_addr: Option<std::net::SocketAddr>,
    /// The consumer's span ([`consumer_span`]): its driver enters it for everything it does.
    pub span: tracing::Span,
    /// Its metrics (labelled with its topic and channel).
    pub metrics: crate::metrics::ConsumerMetrics,
    /// How long batches keep their messages auto-touched (`auto_touch_limit`).
    pub auto_touch_limit: Duration,
}

impl ConsumerSetup {
    /// A setup for `topic`/`channel` with the default configuration.
    pub(crate) fn new(topic: impl IntoTopic, channel: impl IntoChannel) -> ConsumerSetup {
        let defaults = AdapterConfig::<ConsumerConfig>::default();
        let (topic, channel) = (topic.into_topic(), channel.into_channel());
        let span = match (&topic, &channel) {
            (Ok(t), Ok(c)) => consumer_span(t, c),
            _ => tracing::Span::none(),
        };
        ConsumerSetup {
            span,
            topic,
            channel,
            config: Ok(defaults.machine),
            max_in_flight: None,
            give_up: None,
            nsqd: Vec::new(),
            lookupd: Vec::new(),
            seed: None,
            dial_timeout: defaults.dial_timeout,
            write_timeout: defaults.write_timeout,
            local_addr: defaults.local_addr,
            histograms: defaults.histograms,
            auto_touch_limit: defaults.auto_touch_limit,
            set: SetByBuilder::default(),
            runtime: crate::runtime::RuntimeChoice::default(),
        }
    }

    /// Takes `config`, reading the TLS files it names and the OS hostname.
    pub(crate) fn config_from(&mut self, config: &Config) {
        self.config(config, crate::os_hostname(), std::fs::read);
    }

    /// Takes `config` (see [`consumer_config`]).
    pub(crate) fn config(
        &mut self,
        config: &Config,
        os_hostname: Option<String>,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) {
        let config = self
            .span
            .in_scope(|| consumer_config(config, os_hostname, read_file));
        match config {
            Ok(c) => {
                self.config = Ok(c.machine);
                self.dial_timeout = c.dial_timeout;
                self.write_timeout = c.write_timeout;
                self.local_addr = c.local_addr;
                self.histograms = c.histograms;
                self.auto_touch_limit = c.auto_touch_limit;
            }
            Err(e) => self.config = Err(e.into()),
        }
    }

    /// Validates everything and creates the core (`seed` is called when no seed was set).
    pub(crate) fn start(
        self,
        now: Instant,
        seed: impl FnOnce() -> u64,
    ) -> Result<ConsumerStart, Error> {
        let topic = self.topic?;
        let channel = self.channel?;
        let mut config = self.config?;
        if let Some(n) = self.max_in_flight {
            config.max_in_flight = n;
        }
        let span = self.span;
        let entered = span.enter();
        let metrics =
            crate::metrics::ConsumerMetrics::new(topic.as_str(), channel.as_str(), self.histograms);
        if config.max_in_flight == 0 {
            log_max_in_flight(0);
        }
        let mut machine = Consumer::new(config, topic, channel, self.seed.unwrap_or_else(seed));
        for a in &self.nsqd {
            machine.add_nsqd(now, a)?;
        }
        for a in &self.lookupd {
            machine.add_lookupd(now, a)?;
        }
        drop(entered);
        Ok(ConsumerStart {
            machine,
            give_up: self.give_up,
            dial_timeout: self.set.dial_timeout.unwrap_or(self.dial_timeout),
            write_timeout: self.set.write_timeout.unwrap_or(self.write_timeout),
            local_addr: self.local_addr,
            span,
            metrics,
            auto_touch_limit: self.auto_touch_limit,
        })
    }
}

/// What a producer builder collects before it starts (see [`ConsumerSetup`]).
#[derive(Debug)]
#[non_exhaustive]
pub(crate) struct ProducerSetup {
    /// The core's configuration.
    pub config: Result<ProducerConfig, Error>,
    /// nsqd TCP addresses, in failover order.
    pub nsqd: Vec<String>,
    /// Seed of the core's RNG (random when `None`).
    pub seed: Option<u64>,
    /// Socket write timeout (from the configuration).
    pub write_timeout: Duration,
    /// The local address to connect from (go-nsq `local_addr`).
    pub local_addr: Option<std::net::SocketAddr>,
    /// Whether its metrics include histograms (`metrics_histograms`).
    pub histograms: bool,
    /// The builder's own settings (see [`ConsumerSetup::set`]).
    pub set: SetByBuilder,
    /// The runtime to start on (see [`ConsumerSetup::runtime`]).
    pub runtime: crate::runtime::RuntimeChoice,
    /// The producer's span ([`producer_span`]; see [`ConsumerSetup::span`]).
    pub span: tracing::Span,
}

impl Default for ProducerSetup {
    fn default() -> Self {
        let defaults = AdapterConfig::<ProducerConfig>::default();
        ProducerSetup {
            config: Ok(defaults.machine),
            nsqd: Vec::new(),
            seed: None,
            write_timeout: defaults.write_timeout,
            local_addr: defaults.local_addr,
            histograms: defaults.histograms,
            set: SetByBuilder::default(),
            runtime: crate::runtime::RuntimeChoice::default(),
            span: producer_span(),
        }
    }
}

/// A core producer ready to be driven, with what its driver needs.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) struct ProducerStart {
    /// The core, with its nsqd addresses added (connecting).
    pub machine: Producer,
    /// TCP connect timeout for the sockets: the core's own connect timeout plus a second
    /// (the core abandons a slow attempt itself; this only bounds the socket's).
    pub dial_timeout: Duration,
    /// Socket write timeout.
    pub write_timeout: Duration,
    /// The local address to connect from (go-nsq `local_addr`).
    pub local_addr: Option<std::net::SocketAddr>,
    /// The producer's span ([`producer_span`]): its driver enters it for everything it does.
    pub span: tracing::Span,
    /// The most publishes awaiting their result before a publish that returns at once is
    /// refused (the core's `max_pending`).
    pub max_unanswered: usize,
    /// The core's limits (MPUB bodies are checked against them where they are encoded).
    pub limits: nsq_proto::Limits,
    /// Whether its metrics include histograms (`metrics_histograms`).
    pub histograms: bool,
}

impl ProducerSetup {
    /// Takes `config`, reading the TLS files it names and the OS hostname.
    pub(crate) fn config_from(&mut self, config: &Config) {
        self.config(config, crate::os_hostname(), std::fs::read);
    }

    /// Takes `config` (see [`producer_config`]).
    pub(crate) fn config(
        &mut self,
        config: &Config,
        os_hostname: Option<String>,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) {
        let config = self
            .span
            .in_scope(|| producer_config(config, os_hostname, read_file));
        match config {
            Ok(c) => {
                self.config = Ok(c.machine);
                self.write_timeout = c.write_timeout;
                self.local_addr = c.local_addr;
                self.histograms = c.histograms;
            }
            Err(e) => self.config = Err(e.into()),
        }
    }

    /// Validates everything and creates the core (`seed` is called when no seed was set).
    pub(crate) fn start(
        self,
        now: Instant,
        seed: impl FnOnce() -> u64,
    ) -> Result<ProducerStart, Error> {
        let config = self.config?;
        let span = self.span;
        let entered = span.enter();
        let dial_timeout = config.connect_timeout + Duration::from_secs(1);
        let max_unanswered = config.max_pending;
        let limits = config.connection.limits;
        let mut machine = Producer::new(config, self.seed.unwrap_or_else(seed))?;
        for a in &self.nsqd {
            machine.add_nsqd(now, a)?;
        }
        drop(entered);
        Ok(ProducerStart {
            machine,
            dial_timeout,
            write_timeout: self.set.write_timeout.unwrap_or(self.write_timeout),
            local_addr: self.local_addr,
            span,
            max_unanswered,
            limits,
            histograms: self.histograms,
        })
    }
}
