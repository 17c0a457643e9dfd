//! The async builders, [`ConsumerBuilder`] and [`ProducerBuilder`]: they collect a
//! [`ConsumerSetup`] / [`ProducerSetup`], and `build` validates it and starts the client.
//! `config` reads the TLS files it names and the OS hostname. The blocking API's builders
//! ([`blocking`](crate::blocking)) collect the same setups.

use super::runtime::{Calls, Runtime, RuntimeChoice};
use super::{
    Consumer, ConsumerSetup, Error, GiveUpHook, IntoChannel, IntoTopic, Message, Producer,
    ProducerSetup,
};
use nsq_proto::config::Config;
use nsq_proto::consumer::ConsumerConfig;
use nsq_proto::producer::ProducerConfig;
use std::fmt;
use std::future::Future;
#[cfg(test)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// ----------------------------------------------------------------------------------- consumer

/// Builds a [`Consumer`] (made by [`Consumer::builder`]): topic, channel, configuration,
/// addresses. Every setter is infallible; invalid names, options and addresses are reported
/// by [`build`](Self::build).
pub struct ConsumerBuilder {
    setup: ConsumerSetup,
}

impl fmt::Debug for ConsumerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("setup", &self.setup)
            .finish()
    }
}

impl ConsumerBuilder {
    /// A builder for a consumer of `topic`/`channel` (names validated by
    /// [`build`](Self::build)) with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it); the same as [`Consumer::builder`].
    pub fn new(topic: impl IntoTopic, channel: impl IntoChannel) -> Self {
        ConsumerBuilder {
            setup: ConsumerSetup::new(topic, channel),
        }
        .config(&Config::default())
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(mut self, config: &Config) -> Self {
        self.setup.config_from(config);
        self
    }

    /// [`config`](Self::config) with the OS reads given.
    #[cfg(test)]
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

    /// The runtime the consumer's driver runs on, instead of the one found where
    /// [`build`](Self::build) is called: a runtime of your own (see [`Runtime`]), or one of
    /// the adapter's made for the purpose (nsq-async-std's executor mode).
    pub fn runtime(mut self, runtime: Arc<dyn Runtime>) -> Self {
        self.setup.runtime = RuntimeChoice::given(runtime);
        self
    }

    /// Validates everything and starts the consumer, which connects to its servers in the
    /// background (watch [`ConsumerHandle::events`](crate::ConsumerHandle::events), or use
    /// [`connect`](Self::connect) to wait for them).
    ///
    /// The consumer's driver runs on the runtime of the context this is called in (the
    /// adapter's documentation says what that requires: on tokio, to be called inside a
    /// tokio runtime with its IO and time drivers, else [`Error::NoRuntime`]), or on the one
    /// given with [`runtime`](Self::runtime).
    pub fn build(self) -> Result<Consumer, Error> {
        super::consumer::start(self.setup, Calls::Async)
    }

    /// [`build`](Self::build), then waits for the first outcome of every nsqd given with
    /// [`nsqd`](Self::nsqd) / [`nsqds`](Self::nsqds) (like go-nsq's `ConnectToNSQDs`) and of
    /// every lookupd given with [`lookupd`](Self::lookupd) / [`lookupds`](Self::lookupds):
    /// `Ok` once each nsqd is connected and subscribed and each lookupd has answered, else
    /// the first error ([`Error::Misconfigured`] for an nsqd that cannot work as configured,
    /// [`Error::Connect`] for one that is unreachable now, [`Error::Lookupd`] for a lookupd),
    /// and the consumer is dropped.
    ///
    /// The consumer starts when `connect` is called, not when the future is first polled.
    /// The nsqd a lookupd lists are being connected to when it resolves, not waited for;
    /// watch [`ConsumerHandle::events`](crate::ConsumerHandle::events) for them. To keep a
    /// consumer whose servers are partly down, use `build`, then
    /// [`connect_to_nsqd`](crate::ConsumerHandle::connect_to_nsqd) /
    /// [`connect_to_lookupd`](crate::ConsumerHandle::connect_to_lookupd) per address.
    pub fn connect(self) -> impl Future<Output = Result<Consumer, Error>> + Send + 'static {
        Consumer::connecting(self.setup)
    }

    /// What was collected.
    pub(crate) fn into_setup(self) -> ConsumerSetup {
        self.setup
    }
}

// ----------------------------------------------------------------------------------- producer

/// Builds a [`Producer`] with several nsqd addresses (made by [`Producer::builder`]). Every
/// setter is infallible; invalid options and addresses are reported by
/// [`build`](Self::build).
pub struct ProducerBuilder {
    setup: ProducerSetup,
}

impl fmt::Debug for ProducerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProducerBuilder")
            .field("setup", &self.setup)
            .finish()
    }
}

impl Default for ProducerBuilder {
    fn default() -> Self {
        ProducerBuilder::new()
    }
}

impl ProducerBuilder {
    /// A builder with the default configuration (and the OS hostname, as
    /// [`config`](Self::config) fills it) and no nsqd address yet; the same as
    /// [`Producer::builder`].
    pub fn new() -> Self {
        ProducerBuilder {
            setup: ProducerSetup::default(),
        }
        .config(&Config::default())
    }

    /// The configuration, with go-nsq's option names and defaults ([`Config`]). TLS files it
    /// names are read here (and the OS hostname fills `hostname` when unset, to be sent in
    /// IDENTIFY); errors are reported by [`build`](Self::build).
    pub fn config(mut self, config: &Config) -> Self {
        self.setup.config_from(config);
        self
    }

    /// [`config`](Self::config) with the OS reads given.
    #[cfg(test)]
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

    /// The runtime the producer's driver runs on, instead of the one found where
    /// [`build`](Self::build) is called (see [`ConsumerBuilder::runtime`]).
    pub fn runtime(mut self, runtime: Arc<dyn Runtime>) -> Self {
        self.setup.runtime = RuntimeChoice::given(runtime);
        self
    }

    /// Validates the configuration and addresses and starts the producer; it connects in the
    /// background (publishes wait for a connection, or fail fast with
    /// [`Error::NoServerAvailable`] while no nsqd is reachable). Its driver runs where
    /// [`ConsumerBuilder::build`] says.
    pub fn build(self) -> Result<Producer, Error> {
        super::producer::start(self.setup, Calls::Async)
    }

    /// What was collected.
    pub(crate) fn into_setup(self) -> ProducerSetup {
        self.setup
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_proto::consumer::ConsumerConfig;

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

    fn consumer(config: &Config) -> ConsumerBuilder {
        dry_config(config, |c, h, r| {
            ConsumerBuilder::new("t", "c").config_with(c, h, r)
        })
    }

    fn producer(config: &Config) -> ProducerBuilder {
        dry_config(config, |c, h, r| {
            ProducerBuilder::new().config_with(c, h, r)
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
        let consumer = ConsumerBuilder::new("t", "c").nsqd("a:1").into_setup();
        let config = consumer.config.unwrap();
        assert_eq!(config.connection.hostname, os);
        let producer = ProducerBuilder::new().nsqd("a:1").into_setup();
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
        let debug = format!("{:?}", ProducerBuilder::default());
        assert!(debug.starts_with("ProducerBuilder { setup: ProducerSetup"));
    }
}
