//! The builders of every adapter, written once: [`ConsumerBuilder`] and [`ProducerBuilder`]
//! collect a [`ConsumerSetup`] / [`ProducerSetup`]; `build` validates it and starts what
//! they build ([`BuildConsumer`], [`BuildProducer`]: the async client of a runtime, or the
//! blocking one). `config` reads the TLS files it names and the OS hostname.

use super::{ConsumerSetup, Error, GiveUpHook, IntoChannel, IntoTopic, Message, ProducerSetup};
use nsq_proto::config::Config;
use nsq_proto::consumer::ConsumerConfig;
use nsq_proto::producer::ProducerConfig;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// ----------------------------------------------------------------------------------- consumer

/// Builds a consumer: topic, channel, configuration, addresses. Every setter is infallible;
/// invalid names, options and addresses are reported by [`build`](Self::build).
///
/// `C` is what it builds ([`BuildConsumer`]). Each adapter names it `ConsumerBuilder` and
/// makes one with its `Consumer::builder(topic, channel)`, whose documentation says what
/// `build` requires in that runtime.
pub struct ConsumerBuilder<C> {
    setup: ConsumerSetup,
    // `fn() -> C`: the builder is Send + Sync whatever it builds.
    builds: PhantomData<fn() -> C>,
}

impl<C> fmt::Debug for ConsumerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("setup", &self.setup)
            .finish()
    }
}

impl<C> ConsumerBuilder<C> {
    /// A builder for a consumer of `topic`/`channel` (names validated by
    /// [`build`](Self::build)) with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it).
    pub fn new(topic: impl IntoTopic, channel: impl IntoChannel) -> Self {
        ConsumerBuilder {
            setup: ConsumerSetup::new(topic, channel),
            builds: PhantomData,
        }
        .config(&Config::default())
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(self, config: &Config) -> Self {
        self.config_with(config, super::os_hostname(), std::fs::read)
    }

    /// [`config`](Self::config) with the OS reads given.
    pub(crate) fn config_with(
        mut self,
        config: &Config,
        os_hostname: Option<String>,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Self {
        self.setup.config(config, os_hostname, read_file);
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
    /// It receives the same [`Message`] type the consumer hands out everywhere else
    /// (answering it does nothing: it is already finished).
    pub fn on_give_up(mut self, hook: impl Fn(&Message) + Send + Sync + 'static) -> Self {
        let hook: GiveUpHook = Arc::new(hook);
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

    /// How long a TCP connect may take (default 1 s, like go-nsq's `dial_timeout`). Wins over
    /// [`config`](Self::config)'s, given before it or after.
    pub fn dial_timeout(mut self, timeout: Duration) -> Self {
        self.setup.set.dial_timeout = Some(timeout);
        self
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`). Wins over `config`'s, given before it or after.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.setup.set.write_timeout = Some(timeout);
        self
    }

    /// What was collected.
    #[cfg(test)]
    pub(crate) fn into_setup(self) -> ConsumerSetup {
        self.setup
    }
}

impl<C: BuildConsumer> ConsumerBuilder<C> {
    /// Validates everything and starts the consumer's driver on the runtime (the adapter's
    /// `Consumer::builder` says what this requires, e.g. being within a tokio runtime).
    pub fn build(self) -> Result<C, Error> {
        C::build(sealed::ConsumerParts(self.setup))
    }

    /// [`build`](Self::build), then waits for the first outcome of every nsqd given with
    /// [`nsqd`](Self::nsqd) / [`nsqds`](Self::nsqds) (like go-nsq's `ConnectToNSQDs`) and of
    /// every lookupd given with [`lookupd`](Self::lookupd) / [`lookupds`](Self::lookupds):
    /// `Ok` once each nsqd is connected and subscribed and each lookupd has answered, else
    /// the first error ([`Error::Misconfigured`] for an nsqd that cannot work as configured,
    /// [`Error::Connect`] for one that is unreachable now, [`Error::Lookupd`] for a lookupd),
    /// and the consumer is dropped.
    pub fn connect(self) -> C::Connecting {
        C::connect(sealed::ConsumerParts(self.setup))
    }
}

/// What a [`ConsumerBuilder`] builds: an async runtime's [`Consumer`](super::Consumer), or the
/// blocking API's [`Consumer`](super::blocking::Consumer). Implemented by those two only.
pub trait BuildConsumer: sealed::BuildConsumer {
    /// What [`ConsumerBuilder::connect`] returns: a future on async runtimes, the result
    /// itself on blocking ones.
    type Connecting;
}

/// What a [`ProducerBuilder`] builds: an async runtime's [`Producer`](super::Producer), or the
/// blocking API's [`Producer`](super::blocking::Producer). Implemented by those two only.
pub trait BuildProducer: sealed::BuildProducer {}

/// How the builders start what they build, out of reach of other crates.
pub(crate) mod sealed {
    /// What a consumer builder collected.
    #[derive(Debug)]
    pub struct ConsumerParts(pub(crate) crate::ConsumerSetup);

    /// What a producer builder collected.
    #[derive(Debug)]
    pub struct ProducerParts(pub(crate) crate::ProducerSetup);

    pub trait BuildConsumer: Sized {
        /// Starts the consumer.
        fn build(setup: ConsumerParts) -> Result<Self, crate::Error>;
        /// Starts the consumer and waits for its servers' first outcomes.
        fn connect(setup: ConsumerParts) -> <Self as super::BuildConsumer>::Connecting
        where
            Self: super::BuildConsumer;
    }

    pub trait BuildProducer: Sized {
        /// Starts the producer.
        fn build(setup: ProducerParts) -> Result<Self, crate::Error>;
    }
}

// ----------------------------------------------------------------------------------- producer

/// Builds a producer with several nsqd addresses. Every setter is infallible; invalid
/// options and addresses are reported by [`build`](Self::build).
///
/// `P` is what it builds ([`BuildProducer`]). Each adapter names it `ProducerBuilder` and
/// makes one with its `Producer::builder()`, whose documentation says what `build` requires
/// in that runtime.
pub struct ProducerBuilder<P> {
    setup: ProducerSetup,
    builds: PhantomData<fn() -> P>,
}

impl<P> fmt::Debug for ProducerBuilder<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerBuilder")
            .field("setup", &self.setup)
            .finish()
    }
}

impl<P> Default for ProducerBuilder<P> {
    fn default() -> Self {
        ProducerBuilder {
            setup: ProducerSetup::default(),
            builds: PhantomData,
        }
        .config(&Config::default())
    }
}

impl<P> ProducerBuilder<P> {
    /// A builder with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it) and no nsqd address yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(self, config: &Config) -> Self {
        self.config_with(config, super::os_hostname(), std::fs::read)
    }

    /// [`config`](Self::config) with the OS reads given.
    pub(crate) fn config_with(
        mut self,
        config: &Config,
        os_hostname: Option<String>,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Self {
        self.setup.config(config, os_hostname, read_file);
        self
    }

    /// The core's own configuration struct ([`ProducerConfig`]), for settings [`Config`] does
    /// not expose.
    pub fn core_config(mut self, config: ProducerConfig) -> Self {
        self.setup.config = Ok(config);
        self
    }

    /// How long one socket write may take before the connection is dropped (default 1 s, like
    /// go-nsq's `write_timeout`). Wins over `config`'s, given before it or after.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.setup.set.write_timeout = Some(timeout);
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

    /// What was collected.
    pub(crate) fn into_setup(self) -> ProducerSetup {
        self.setup
    }
}

impl<P: BuildProducer> ProducerBuilder<P> {
    /// Validates the configuration and addresses and starts the producer's driver on the
    /// runtime; it connects in the background (the adapter's `Producer::builder` says what
    /// this requires, e.g. being within a tokio runtime).
    pub fn build(self) -> Result<P, Error> {
        P::build(sealed::ProducerParts(self.setup))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_proto::consumer::ConsumerConfig;

    /// No runtime: the tests look at what the builders collect.
    enum Dry {}

    /// The OS reads of a dry run: a hostname, and no file.
    fn dry_config<B>(
        config: &Config,
        with: impl FnOnce(&Config, Option<String>, fn(PathBuf) -> std::io::Result<Vec<u8>>) -> B,
    ) -> B {
        with(config, Some(" box \n".into()), |path| {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                path.display().to_string(),
            ))
        })
    }

    fn consumer(config: &Config) -> ConsumerBuilder<Dry> {
        dry_config(config, |c, h, r| {
            ConsumerBuilder::<Dry>::new("t", "c").config_with(c, h, r)
        })
    }

    fn producer(config: &Config) -> ProducerBuilder<Dry> {
        dry_config(config, |c, h, r| {
            ProducerBuilder::<Dry>::new().config_with(c, h, r)
        })
    }

    #[test]
    fn consumer_setters_fill_the_setup() {
        let setup = consumer(&Config::default())
            .max_in_flight(7)
            .on_give_up(|m: &Message| assert_eq!(m.attempts(), 9))
            .nsqd("a:1")
            .nsqds(["b:2", "c:3"])
            .lookupd("l:1")
            .lookupds(vec![String::from("m:2")])
            .seed(42)
            .dial_timeout(Duration::from_millis(300))
            .write_timeout(Duration::from_millis(400))
            .into_setup();
        assert_eq!(setup.topic.unwrap().as_str(), "t");
        assert_eq!(setup.channel.unwrap().as_str(), "c");
        assert_eq!(setup.max_in_flight, Some(7));
        assert!(setup.give_up.is_some());
        assert_eq!(setup.nsqd, ["a:1", "b:2", "c:3"]);
        assert_eq!(setup.lookupd, ["l:1", "m:2"]);
        assert_eq!(setup.seed, Some(42));
        assert_eq!(setup.set.dial_timeout, Some(Duration::from_millis(300)));
        assert_eq!(setup.set.write_timeout, Some(Duration::from_millis(400)));
        // The runtime's hostname fills the unset `hostname`.
        let config = setup.config.unwrap();
        assert_eq!(config.connection.hostname.as_deref(), Some("box"));
    }

    #[test]
    fn builders_send_the_os_hostname_without_a_config() {
        let os = crate::os_hostname();
        let consumer = ConsumerBuilder::<Dry>::new("t", "c")
            .nsqd("a:1")
            .into_setup();
        let config = consumer.config.unwrap();
        assert_eq!(config.connection.hostname, os);
        let producer = ProducerBuilder::<Dry>::new().nsqd("a:1").into_setup();
        let config = producer.config.unwrap();
        assert_eq!(config.connection.hostname, os);
    }

    #[test]
    fn consumer_config_errors_wait_for_build() {
        // The TLS file is read with the runtime's `read_file`, which fails here.
        let bad = Config {
            tls_v1: true,
            tls_root_ca_file: Some("/nowhere/ca.pem".into()),
            ..Config::default()
        };
        let built = consumer(&bad).into_setup();
        // The setup keeps the error; `start` reports it.
        let err = built.config.unwrap_err().to_string();
        // Without the `tls` feature, asking for TLS at all is the error.
        let expected = if cfg!(feature = "tls") {
            "/nowhere/ca.pem"
        } else {
            "tls_v1 needs tls"
        };
        assert!(err.contains(expected), "{err}");
        let fixed = consumer(&bad)
            .core_config(ConsumerConfig::default())
            .into_setup();
        assert!(fixed.config.is_ok());
    }

    #[test]
    fn producer_setters_fill_the_setup() {
        let setup = producer(&Config::default())
            .nsqd("a:1")
            .nsqds(["b:2"])
            .seed(9)
            .write_timeout(Duration::from_millis(250))
            .into_setup();
        assert_eq!(setup.nsqd, ["a:1", "b:2"]);
        assert_eq!(setup.seed, Some(9));
        assert_eq!(setup.set.write_timeout, Some(Duration::from_millis(250)));
        assert_eq!(
            setup.config.unwrap().connection.hostname.as_deref(),
            Some("box")
        );
        let debug = format!("{:?}", ProducerBuilder::<Dry>::default());
        assert!(debug.starts_with("ProducerBuilder { setup: ProducerSetup"));
    }
}
