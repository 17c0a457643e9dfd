//! The builders of every adapter, written once: [`ConsumerBuilder`] and [`ProducerBuilder`]
//! collect a [`ConsumerSetup`] / [`ProducerSetup`]; `build` hands it to the adapter's
//! [`Runtime`], which starts the driver. The builders only hold configuration (sans-IO): the
//! reads `config` needs (TLS files, the OS hostname) are the runtime's functions.

use super::{ConsumerSetup, Error, GiveUpHook, IntoChannel, IntoTopic, ProducerSetup};
use crate::config::Config;
use crate::consumer::ConsumerConfig;
use crate::producer::ProducerConfig;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What an adapter supplies to the shared builders: its OS reads and how it starts a driver.
/// Implemented by a zero-sized marker type of each adapter (`nsq_tokio::Tokio`, ...); the
/// builders are generic over it ([`ConsumerBuilder<R>`], [`ProducerBuilder<R>`]).
///
/// ```
/// use nsq_proto::client::{ConsumerBuilder, ConsumerSetup, Error, ProducerSetup, Runtime};
/// use std::path::PathBuf;
///
/// /// A "runtime" that starts nothing: it returns what the builder collected.
/// enum DryRun {}
///
/// impl Runtime for DryRun {
///     type Consumer = ConsumerSetup<Self::Message>;
///     type Producer = ProducerSetup;
///     type Message = nsq_proto::Message;
///     fn os_hostname() -> Option<String> {
///         Some("box".into())
///     }
///     fn read_file(path: PathBuf) -> std::io::Result<Vec<u8>> {
///         Err(std::io::Error::new(std::io::ErrorKind::NotFound, path.display().to_string()))
///     }
///     fn start_consumer(setup: ConsumerSetup<Self::Message>) -> Result<Self::Consumer, Error> {
///         Ok(setup)
///     }
///     fn start_producer(setup: ProducerSetup) -> Result<ProducerSetup, Error> {
///         Ok(setup)
///     }
/// }
///
/// let setup = ConsumerBuilder::<DryRun>::new("events", "archive")
///     .nsqd("127.0.0.1:4150")
///     .max_in_flight(10)
///     .build()?;
/// assert_eq!(setup.nsqd, ["127.0.0.1:4150"]);
/// assert_eq!(setup.max_in_flight, Some(10));
/// # Ok::<(), Error>(())
/// ```
pub trait Runtime {
    /// The adapter's consumer, which [`ConsumerBuilder::build`] returns.
    type Consumer;
    /// The adapter's producer, which [`ProducerBuilder::build`] returns.
    type Producer;
    /// The adapter's message type (a [`Delivery`](super::Delivery)), which the give-up hook
    /// receives ([`ConsumerBuilder::on_give_up`]).
    type Message;

    /// The OS hostname, sent in IDENTIFY when the configuration names none (the adapter reads
    /// it, typically `gethostname::gethostname()` through [`hostname_from_os`](super::hostname_from_os)).
    fn os_hostname() -> Option<String>;

    /// Reads a file the configuration names (TLS certificates and keys): `std::fs::read`.
    fn read_file(path: PathBuf) -> std::io::Result<Vec<u8>>;

    /// Validates `setup` ([`ConsumerSetup::start`]) and starts the consumer's driver.
    fn start_consumer(setup: ConsumerSetup<Self::Message>) -> Result<Self::Consumer, Error>;

    /// Validates `setup` ([`ProducerSetup::start`]) and starts the producer's driver.
    fn start_producer(setup: ProducerSetup) -> Result<Self::Producer, Error>;
}

// ----------------------------------------------------------------------------------- consumer

/// Builds a consumer: topic, channel, configuration, addresses. Every setter is infallible;
/// invalid names, options and addresses are reported by [`build`](Self::build).
///
/// Each adapter names it `ConsumerBuilder` (this type with its runtime marker) and makes one
/// with its `Consumer::builder(topic, channel)`, whose documentation says what `build`
/// requires in that runtime.
pub struct ConsumerBuilder<R: Runtime> {
    setup: ConsumerSetup<R::Message>,
    // `fn() -> R`: the builder is Send + Sync whatever the marker.
    runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> fmt::Debug for ConsumerBuilder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("setup", &self.setup)
            .finish()
    }
}

impl<R: Runtime> ConsumerBuilder<R> {
    /// A builder for a consumer of `topic`/`channel` (names validated by
    /// [`build`](Self::build)) with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it).
    pub fn new(topic: impl IntoTopic, channel: impl IntoChannel) -> Self {
        ConsumerBuilder {
            setup: ConsumerSetup::new(topic, channel),
            runtime: PhantomData,
        }
        .config(&Config::default())
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(mut self, config: &Config) -> Self {
        self.setup.config(config, R::os_hostname(), R::read_file);
        self
    }

    /// The core's own configuration struct ([`ConsumerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(mut self, config: ConsumerConfig) -> Self {
        self.setup.config = Ok(config);
        self
    }

    /// Shorthand for `config.max_in_flight`.
    pub fn max_in_flight(mut self, n: u32) -> Self {
        self.setup.max_in_flight = Some(n);
        self
    }

    /// Called for each message delivered more than `max_attempts` times; the message has
    /// already been finished. It runs on the driver (its task or thread), so keep it short.
    /// It receives the adapter's `Message`, the type the consumer hands out everywhere else
    /// (answering it does nothing: it is already finished).
    pub fn on_give_up(mut self, hook: impl Fn(&R::Message) + Send + Sync + 'static) -> Self {
        let hook: GiveUpHook<R::Message> = Arc::new(hook);
        self.setup.give_up = Some(hook);
        self
    }

    /// An nsqd TCP address (`host:port`) to connect to directly.
    pub fn nsqd(mut self, addr: impl Into<String>) -> Self {
        self.setup.nsqd.push(addr.into());
        self
    }

    /// An nsqlookupd HTTP address (`host:port` or `http://host:port`) to discover nsqd with.
    pub fn lookupd(mut self, addr: impl Into<String>) -> Self {
        self.setup.lookupd.push(addr.into());
        self
    }

    /// Several nsqd TCP addresses.
    pub fn nsqds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.setup.nsqd.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Several nsqlookupd HTTP addresses.
    pub fn lookupds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.setup.lookupd.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Seed of the core's RNG (jitter, random choices); random by default.
    pub fn seed(mut self, seed: u64) -> Self {
        self.setup.seed = Some(seed);
        self
    }

    /// How long a TCP connect may take (default 1 s, like go-nsq's `dial_timeout`).
    pub fn dial_timeout(mut self, timeout: Duration) -> Self {
        self.setup.dial_timeout = timeout;
        self
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.setup.write_timeout = timeout;
        self
    }

    /// Validates everything and starts the consumer's driver
    /// ([`Runtime::start_consumer`]; the adapter's `Consumer::builder` says what this
    /// requires, e.g. being within a tokio runtime).
    pub fn build(self) -> Result<R::Consumer, Error> {
        R::start_consumer(self.setup)
    }
}

// ----------------------------------------------------------------------------------- producer

/// Builds a producer with several nsqd addresses. Every setter is infallible; invalid
/// options and addresses are reported by [`build`](Self::build).
///
/// Each adapter names it `ProducerBuilder` (this type with its runtime marker) and makes one
/// with its `Producer::builder()`, whose documentation says what `build` requires in that
/// runtime.
pub struct ProducerBuilder<R> {
    setup: ProducerSetup,
    runtime: PhantomData<fn() -> R>,
}

impl<R> fmt::Debug for ProducerBuilder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerBuilder")
            .field("setup", &self.setup)
            .finish()
    }
}

impl<R: Runtime> Default for ProducerBuilder<R> {
    fn default() -> Self {
        ProducerBuilder {
            setup: ProducerSetup::default(),
            runtime: PhantomData,
        }
        .config(&Config::default())
    }
}

impl<R: Runtime> ProducerBuilder<R> {
    /// A builder with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it) and no nsqd address yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(mut self, config: &Config) -> Self {
        self.setup.config(config, R::os_hostname(), R::read_file);
        self
    }

    /// The core's own configuration struct ([`ProducerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(mut self, config: ProducerConfig) -> Self {
        self.setup.config = Ok(config);
        self
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.setup.write_timeout = timeout;
        self
    }

    /// An nsqd TCP address (`host:port`); the order of addition is the failover order.
    pub fn nsqd(mut self, addr: impl Into<String>) -> Self {
        self.setup.nsqd.push(addr.into());
        self
    }

    /// Several nsqd TCP addresses.
    pub fn nsqds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.setup.nsqd.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Seed of the core's RNG (reconnect jitter); random by default.
    pub fn seed(mut self, seed: u64) -> Self {
        self.setup.seed = Some(seed);
        self
    }

    /// Validates the configuration and addresses and starts the producer's driver
    /// ([`Runtime::start_producer`]; it connects in the background; the adapter's
    /// `Producer::builder` says what this requires, e.g. being within a tokio runtime).
    pub fn build(self) -> Result<R::Producer, Error> {
        R::start_producer(self.setup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::ConsumerConfig;

    /// Records what `build` received; reads no file.
    enum Dry {}

    impl Runtime for Dry {
        type Consumer = ConsumerSetup<Self::Message>;
        type Producer = ProducerSetup;
        type Message = crate::Message;
        fn os_hostname() -> Option<String> {
            Some(" box \n".into())
        }
        fn read_file(path: PathBuf) -> std::io::Result<Vec<u8>> {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                path.display().to_string(),
            ))
        }
        fn start_consumer(setup: ConsumerSetup<crate::Message>) -> Result<Self::Consumer, Error> {
            Ok(setup)
        }
        fn start_producer(setup: ProducerSetup) -> Result<ProducerSetup, Error> {
            Ok(setup)
        }
    }

    #[test]
    fn consumer_setters_fill_the_setup() {
        let setup = ConsumerBuilder::<Dry>::new("t", "c")
            .config(&Config::default())
            .max_in_flight(7)
            .on_give_up(|m: &crate::Message| assert_eq!(m.attempts, 9))
            .nsqd("a:1")
            .nsqds(["b:2", "c:3"])
            .lookupd("l:1")
            .lookupds(vec![String::from("m:2")])
            .seed(42)
            .dial_timeout(Duration::from_millis(300))
            .write_timeout(Duration::from_millis(400))
            .build()
            .unwrap();
        assert_eq!(setup.topic.unwrap().as_str(), "t");
        assert_eq!(setup.channel.unwrap().as_str(), "c");
        assert_eq!(setup.max_in_flight, Some(7));
        assert!(setup.give_up.is_some());
        assert_eq!(setup.nsqd, ["a:1", "b:2", "c:3"]);
        assert_eq!(setup.lookupd, ["l:1", "m:2"]);
        assert_eq!(setup.seed, Some(42));
        assert_eq!(setup.dial_timeout, Duration::from_millis(300));
        assert_eq!(setup.write_timeout, Duration::from_millis(400));
        // The runtime's hostname fills the unset `hostname`.
        let config = setup.config.unwrap();
        assert_eq!(config.connection.hostname.as_deref(), Some("box"));
    }

    #[test]
    fn builders_send_the_os_hostname_without_a_config() {
        let consumer = ConsumerBuilder::<Dry>::new("t", "c")
            .nsqd("a:1")
            .build()
            .unwrap();
        let config = consumer.config.unwrap();
        assert_eq!(config.connection.hostname.as_deref(), Some("box"));
        let producer = ProducerBuilder::<Dry>::new().nsqd("a:1").build().unwrap();
        let config = producer.config.unwrap();
        assert_eq!(config.connection.hostname.as_deref(), Some("box"));
    }

    #[test]
    fn consumer_config_errors_wait_for_build() {
        // The TLS file is read with the runtime's `read_file`, which fails here.
        let bad = Config {
            tls_v1: true,
            tls_root_ca_file: Some("/nowhere/ca.pem".into()),
            ..Config::default()
        };
        let built = ConsumerBuilder::<Dry>::new("t", "c").config(&bad).build();
        // The setup keeps the error; `start` reports it.
        let err = built.unwrap().config.unwrap_err().to_string();
        // Without the `tls` feature, asking for TLS at all is the error.
        let expected = if cfg!(feature = "tls") {
            "/nowhere/ca.pem"
        } else {
            "tls_v1 needs tls"
        };
        assert!(err.contains(expected), "{err}");
        let fixed = ConsumerBuilder::<Dry>::new("t", "c")
            .config(&bad)
            .core_config(ConsumerConfig::default())
            .build()
            .unwrap();
        assert!(fixed.config.is_ok());
    }

    #[test]
    fn producer_setters_fill_the_setup() {
        let setup = ProducerBuilder::<Dry>::new()
            .config(&Config::default())
            .nsqd("a:1")
            .nsqds(["b:2"])
            .seed(9)
            .write_timeout(Duration::from_millis(250))
            .build()
            .unwrap();
        assert_eq!(setup.nsqd, ["a:1", "b:2"]);
        assert_eq!(setup.seed, Some(9));
        assert_eq!(setup.write_timeout, Duration::from_millis(250));
        assert_eq!(
            setup.config.unwrap().connection.hostname.as_deref(),
            Some("box")
        );
        let debug = format!("{:?}", ProducerBuilder::<Dry>::default());
        assert!(debug.starts_with("ProducerBuilder { setup: ProducerSetup"));
    }
}
