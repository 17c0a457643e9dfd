//! Connection configuration and its validation into an IDENTIFY body.

use super::tls::TlsConfig;
use crate::command::Limits;
use crate::identify::Identify;
use crate::names::{Channel, Topic};
use std::fmt;
use std::time::Duration;

/// What a connection is for. A connection never both publishes and subscribes (nsqd forbids
/// publishing on a subscribed connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Publishes with PUB / MPUB / DPUB.
    Producer,
    /// Subscribes to one topic and channel and receives messages.
    Consumer {
        /// The topic to subscribe to.
        topic: Topic,
        /// The channel to subscribe to.
        channel: Channel,
    },
}

impl Role {
    /// Whether this is [`Role::Consumer`].
    pub fn is_consumer(&self) -> bool {
        matches!(self, Role::Consumer { .. })
    }
}

/// Compression to ask the server for. The server may refuse it (it then runs uncompressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// No compression.
    #[default]
    None,
    /// Snappy framing format.
    Snappy,
    /// Raw DEFLATE at `level` (1..=9), capped by the server's `--max-deflate-level`.
    Deflate {
        /// Compression level, 1 (fast) ..= 9 (small).
        level: u32,
    },
}

/// A secret (the AUTH token). `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<Vec<u8>>) -> Secret {
        Secret(secret.into())
    }

    /// The secret bytes. Do not log them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret::new(s)
    }
}

/// The default user agent: `nsq-rs/<crate version>`.
pub const DEFAULT_USER_AGENT: &str = concat!("nsq-rs/", env!("CARGO_PKG_VERSION"));

/// Settings of one connection. Plain struct with public fields: start from `Default` and
/// change what you need.
///
/// ```
/// use std::time::Duration;
/// use nsq_proto::{Compression, ConnectionConfig};
/// let config = ConnectionConfig {
///     heartbeat_interval: Duration::from_secs(10),
///     compression: Compression::Snappy,
///     ..ConnectionConfig::default()
/// };
/// assert_eq!(config.effective_read_timeout(), Duration::from_secs(20));
/// ```
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Identifier shown in nsqd's stats. Default: the first label of `hostname`, else `nsq-rs`.
    pub client_id: Option<String>,
    /// The client's hostname (drivers fill it in from the OS). Default: empty.
    pub hostname: Option<String>,
    /// Sent as IDENTIFY's `user_agent`. Default [`DEFAULT_USER_AGENT`].
    pub user_agent: String,
    /// Sent as IDENTIFY's `topology_region` (go-nsq's option): the client's region, for
    /// nsqd's `topology-aware-consumption` experiment and the producer's
    /// [`Routing::Topology`](crate::producer::Routing::Topology). Default: none.
    pub topology_region: Option<String>,
    /// Sent as IDENTIFY's `topology_zone` (go-nsq's option): the client's zone. Default:
    /// none.
    pub topology_zone: Option<String>,
    /// How often nsqd sends heartbeats: 1 s ..= 60 s. Default 30 s.
    pub heartbeat_interval: Duration,
    /// Silence after which the connection is declared dead. `None`: 2 x `heartbeat_interval`.
    pub read_timeout: Option<Duration>,
    /// Server-side message timeout for this connection (at least 1 s). `None`: server default.
    pub msg_timeout: Option<Duration>,
    /// nsqd's output buffer size in bytes (64 and up, `-1` disables). `None`: server default.
    pub output_buffer_size: Option<i64>,
    /// nsqd's output buffer flush timeout. `Some(Duration::ZERO)` disables it (`-1` on the
    /// wire). `None`: server default.
    pub output_buffer_timeout: Option<Duration>,
    /// Percentage of the channel's messages to receive (0 = all, 1..=99).
    pub sample_rate: u8,
    /// TLS, if wanted. The connection fails if the server does not grant it.
    pub tls: Option<TlsConfig>,
    /// Compression to negotiate.
    pub compression: Compression,
    /// Secret for AUTH, sent only when the server says auth is required.
    pub auth_secret: Option<Secret>,
    /// Limits checked before encoding commands (mirror the server's flags).
    pub limits: Limits,
    /// Most publishes awaiting a reply at once; beyond it publishing returns
    /// [`crate::ConnectionError::TooManyOutstanding`]. `None`: unbounded.
    pub max_outstanding_publishes: Option<usize>,
    /// How long a graceful close waits for in-flight messages or outstanding publishes.
    pub drain_timeout: Duration,
    /// Consumer: touch every in-flight message on its own, a little before its deadline (a
    /// quarter of msg_timeout, at most 5 s, ahead), until it is answered, for handlers that
    /// can run longer than msg_timeout (go-nsq #204). `Some(limit)`: a message is touched
    /// while it has been in flight less than `limit` (nsqd's max_msg_timeout caps it too);
    /// after that it is left to time out and be redelivered, and a warning is logged.
    /// `None` (default): only explicit touches, the go-nsq semantics.
    pub auto_touch: Option<Duration>,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            client_id: None,
            hostname: None,
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            topology_region: None,
            topology_zone: None,
            heartbeat_interval: Duration::from_secs(30),
            read_timeout: None,
            msg_timeout: None,
            output_buffer_size: None,
            output_buffer_timeout: None,
            sample_rate: 0,
            tls: None,
            compression: Compression::None,
            auth_secret: None,
            limits: Limits::default(),
            max_outstanding_publishes: None,
            drain_timeout: Duration::from_secs(30),
            auto_touch: None,
        }
    }
}

/// A configuration nsqd would reject, or a TLS setup that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// An IDENTIFY field is out of range (the message says which).
    Invalid(&'static str),
    /// The server name for TLS is not a valid DNS name or IP address.
    InvalidServerName(String),
    /// The configuration asks for something this build leaves out: the named cargo feature of
    /// nsq-proto (`snappy`, `deflate`) is off.
    FeatureDisabled(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid(why) => write!(f, "invalid connection config: {why}"),
            ConfigError::InvalidServerName(name) => {
                write!(f, "invalid TLS server name {name:?}")
            }
            ConfigError::FeatureDisabled(feature) => write!(
                f,
                "{feature} was asked for but this build has none (nsq-proto's `{feature}` cargo \
                 feature is off)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl ConnectionConfig {
    /// The liveness timeout in force: `read_timeout`, or 2 x `heartbeat_interval`.
    pub fn effective_read_timeout(&self) -> Duration {
        self.read_timeout
            .unwrap_or(self.heartbeat_interval.saturating_mul(2))
    }

    /// The client_id sent in IDENTIFY.
    pub fn effective_client_id(&self) -> String {
        if let Some(id) = &self.client_id {
            return id.clone();
        }
        match self.hostname.as_deref().and_then(|h| h.split('.').next()) {
            Some(short) if !short.is_empty() => short.to_owned(),
            _ => "nsq-rs".to_owned(),
        }
    }

    /// Builds and validates the IDENTIFY body (feature negotiation always on).
    pub fn identify(&self) -> Result<Identify, ConfigError> {
        let bad = ConfigError::Invalid;
        if self.heartbeat_interval < Duration::from_secs(1)
            || self.heartbeat_interval > Duration::from_secs(60)
        {
            return Err(bad("heartbeat_interval must be within 1 s ..= 60 s"));
        }
        if self.read_timeout == Some(Duration::ZERO) {
            return Err(bad("read_timeout must not be zero"));
        }
        if self.sample_rate > 99 {
            return Err(bad("sample_rate must be within 0..=99"));
        }
        if let Some(t) = self.msg_timeout {
            if t < Duration::from_secs(1) {
                return Err(bad("msg_timeout must be at least 1 s"));
            }
        }
        let (snappy, deflate, deflate_level) = match self.compression {
            Compression::None => (false, false, 0),
            Compression::Snappy if !cfg!(feature = "snappy") => {
                return Err(ConfigError::FeatureDisabled("snappy"));
            }
            Compression::Deflate { .. } if !cfg!(feature = "deflate") => {
                return Err(ConfigError::FeatureDisabled("deflate"));
            }
            Compression::Snappy => (true, false, 0),
            Compression::Deflate { level } => {
                if !(1..=9).contains(&level) {
                    return Err(bad("deflate level must be within 1..=9"));
                }
                (false, true, i64::from(level))
            }
        };
        let identify = Identify {
            client_id: self.effective_client_id(),
            hostname: self.hostname.clone().unwrap_or_default(),
            feature_negotiation: true,
            heartbeat_interval: millis(self.heartbeat_interval),
            output_buffer_size: self.output_buffer_size.unwrap_or(0),
            output_buffer_timeout: match self.output_buffer_timeout {
                None => 0,
                Some(Duration::ZERO) => -1,
                Some(t) => millis(t).max(1),
            },
            tls_v1: self.tls.is_some(),
            snappy,
            deflate,
            deflate_level,
            sample_rate: i64::from(self.sample_rate),
            user_agent: self.user_agent.clone(),
            msg_timeout: self.msg_timeout.map_or(0, millis),
            topology_region: self.topology_region.clone().unwrap_or_default(),
            topology_zone: self.topology_zone.clone().unwrap_or_default(),
        };
        identify.validate().map_err(|e| match e {
            crate::command::CommandError::InvalidIdentify(why) => ConfigError::Invalid(why),
            _ => ConfigError::Invalid("IDENTIFY body rejected"),
        })?;
        Ok(identify)
    }
}

/// The host part of `host:port`, `[v6]:port`, or a bare host.
pub(crate) fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        // A bare IPv6 literal has several colons and no port.
        Some((host, _)) if !host.contains(':') => host,
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_parsing() {
        assert_eq!(host_of("nsqd.example:4150"), "nsqd.example");
        assert_eq!(host_of("127.0.0.1:4150"), "127.0.0.1");
        assert_eq!(host_of("[::1]:4150"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }

    #[test]
    fn identify_defaults_and_validation() {
        let c = ConnectionConfig {
            hostname: Some("box.example.com".into()),
            ..ConnectionConfig::default()
        };
        let i = c.identify().unwrap();
        assert_eq!(i.client_id, "box");
        assert_eq!(i.hostname, "box.example.com");
        assert!(i.feature_negotiation);
        assert_eq!(i.heartbeat_interval, 30_000);
        assert!(i.user_agent.starts_with("nsq-rs/"));
        assert_eq!(ConnectionConfig::default().effective_client_id(), "nsq-rs");
        for bad in [
            ConnectionConfig {
                heartbeat_interval: Duration::from_millis(999),
                ..ConnectionConfig::default()
            },
            ConnectionConfig {
                sample_rate: 100,
                ..ConnectionConfig::default()
            },
            ConnectionConfig {
                compression: Compression::Deflate { level: 0 },
                ..ConnectionConfig::default()
            },
            ConnectionConfig {
                msg_timeout: Some(Duration::from_millis(10)),
                ..ConnectionConfig::default()
            },
            ConnectionConfig {
                output_buffer_size: Some(10),
                ..ConnectionConfig::default()
            },
        ] {
            assert!(bad.identify().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secret_is_redacted() {
        let c = ConnectionConfig {
            auth_secret: Some("hunter2".into()),
            ..ConnectionConfig::default()
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}
