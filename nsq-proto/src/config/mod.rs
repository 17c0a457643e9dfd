//! [`Config`]: the one user-facing configuration shared by every adapter, with go-nsq's option
//! names so existing configurations port unchanged. Its documentation says how it is filled
//! in and what values it takes.

use crate::command::Limits;
use crate::connection::{Secret, TlsConfig};
use crate::consumer::{BackoffStrategy, ConsumerConfig, InFlightMode};
use crate::producer::{ProducerConfig, Routing};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod convert;
mod error;
mod parse;

pub use error::OptionError;
pub use parse::parse_go_duration;
use parse::{MIN, MS, SEC, Setter, check_duration, show, show_duration};

/// The configuration of producers and consumers, shared by every adapter. Field names are the
/// option names (go-nsq's where go-nsq has the option).
///
/// A `Config` is a plain struct with public fields and go-nsq's defaults. It can be filled in
/// four ways, all checked the same way (ranges as go-nsq's, errors naming the option):
///
/// * in code: `Config { max_in_flight: 100, ..Config::default() }`, then
///   [`Config::validate`] (the derive methods validate too);
/// * option by option, like go-nsq's `Config.Set` or the `--consumer-opt` flags of the official
///   tools: [`Config::set`] / [`Config::set_str`];
/// * from any self-describing serde format (JSON, TOML, YAML...) holding a map of option names
///   to values, or [`Config::from_json`];
/// * from a go-nsq `Config` marshalled by Go's `encoding/json`, as Go wrote it: Go field names
///   (`MaxInFlight`, `RDYRedistributeInterval`), durations in nanoseconds, `""` for unset
///   strings, `TlsConfig`'s `InsecureSkipVerify`, `ServerName` and `MinVersion` read. A field
///   name starting with a capital letter is read this way, by [`Config::set`] too.
///   (`BackoffStrategy` marshals to `{}` whichever strategy it is: set `backoff_strategy`
///   yourself if it is not exponential. `LocalAddr`, a `*net.TCPAddr`, is read as
///   `{"IP": .., "Port": ..}`.)
///
/// # Values
/// * **Durations** are Go duration strings (`"90s"`, `"1m30s"`, `"250ms"`, `"1h"`, `"1.5s"`,
///   `"0"`) or non-negative integers meaning **milliseconds**, as in go-nsq's `Config.Set`, in
///   JSON and in text alike (`"100"` is 100 ms); nanoseconds under Go field names.
/// * **Booleans** are `true`/`false`, the strings Go's `strconv.ParseBool` accepts (`"1"`,
///   `"t"`, `"true"`, `"0"`, `"f"`, `"false"`, ...) or integers (non-zero is true).
/// * **Numbers** may also be given as strings (`"100"`), as on a command line.
/// * `null` resets an optional option (`client_id`, `auth_secret`, TLS files...) to unset.
///
/// ```
/// # use nsq_proto::Config;
/// # use std::time::Duration;
/// let config = Config::from_json(r#"{
///     "max_in_flight": 200,
///     "lookupd_poll_interval": "15s",
///     "default_requeue_delay": 30000,
///     "backoff_strategy": "full_jitter",
///     "snappy": true,
///     "producer_routing": "round_robin"
/// }"#)?;
/// assert_eq!(config.max_in_flight, 200);
/// assert_eq!(config.default_requeue_delay, Duration::from_secs(30));
/// let consumer = config.consumer_config(std::fs::read)?;
/// assert_eq!(consumer.lookupd_poll_interval, Duration::from_secs(15));
///
/// let err = Config::from_json(r#"{"max_in_flight": -1}"#).unwrap_err();
/// assert_eq!(err.option(), "max_in_flight");
/// # Ok::<(), nsq_proto::config::OptionError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    // ----- go-nsq options -----
    /// Longest TCP connect (go-nsq `dial_timeout`, default 1 s).
    pub dial_timeout: Duration,
    /// The local address connections are made from (go-nsq `local_addr`): an IP address,
    /// with a port or not (`"10.0.0.5"`, `"10.0.0.5:0"`, `"[fe80::1]:7000"`; no port means
    /// any). Unset (the default): the system chooses. Used for nsqd connections and
    /// nsqlookupd queries alike.
    pub local_addr: Option<SocketAddr>,
    /// Silence after which a connection is declared dead (go-nsq `read_timeout`, 100 ms ..=
    /// 5 min, at least `heartbeat_interval`). Unset (`None`, the default): twice
    /// `heartbeat_interval`, the interval nsqd agreed to in IDENTIFY, so a silent nsqd (a
    /// stopped process, a half-open TCP connection) is found within two heartbeat intervals
    /// of its last sign of life, a full interval of margin for a late heartbeat. With the
    /// default heartbeat that is 60 s, go-nsq's default. `null` resets it to unset.
    pub read_timeout: Option<Duration>,
    /// Longest socket write, enforced by the adapters (go-nsq `write_timeout`, default 1 s,
    /// 100 ms ..= 5 min).
    pub write_timeout: Duration,
    /// Time between nsqlookupd polls (go-nsq `lookupd_poll_interval`, default 60 s,
    /// 10 ms ..= 5 min).
    pub lookupd_poll_interval: Duration,
    /// Random extra delay per poll, as a fraction of the interval (go-nsq
    /// `lookupd_poll_jitter`, default 0.3, 0 ..= 1).
    pub lookupd_poll_jitter: f64,
    /// Cap on computed requeue delays (go-nsq `max_requeue_delay`, default 15 min, ..= 60 min).
    pub max_requeue_delay: Duration,
    /// Requeue delay per attempt when the handler names none (go-nsq
    /// `default_requeue_delay`, default 90 s, ..= 60 min).
    pub default_requeue_delay: Duration,
    /// `exponential` or `full_jitter` (go-nsq `backoff_strategy`, default exponential).
    pub backoff_strategy: BackoffStrategy,
    /// Longest backoff window; 0 disables backoff (go-nsq `max_backoff_duration`, default
    /// 2 min, ..= 60 min).
    pub max_backoff_duration: Duration,
    /// Unit of the backoff window (go-nsq `backoff_multiplier`, default 1 s, ..= 60 min).
    pub backoff_multiplier: Duration,
    /// Deliveries after which a message is given up on; 0 = unlimited (go-nsq
    /// `max_attempts`, default 5).
    pub max_attempts: u16,
    /// With fewer max_in_flight than connections: a connection idle this long gives its RDY
    /// up (go-nsq `low_rdy_idle_timeout`, default 1 s (go-nsq: 10 s), 1 s ..= 5 min); sooner
    /// on a connection with a short round trip (twice its handshake, at least 100 ms).
    pub low_rdy_idle_timeout: Duration,
    /// ... and one holding RDY this long (the longest turn; shorter when many nsqd wait, see
    /// `low_rdy_max_wait`) passes it on anyway (go-nsq `low_rdy_timeout`, default 2 s
    /// (go-nsq: 30 s, which let an nsqd wait half a minute), 1 s ..= 5 min).
    pub low_rdy_timeout: Duration,
    /// With more nsqd waiting for a turn than max_in_flight holds: the starvation bound turns
    /// are sized for, so every nsqd with messages gets a turn within it as far as the
    /// handlers' speed allows (not in go-nsq; default 10 s, 1 s ..= 1 h).
    pub low_rdy_max_wait: Duration,
    /// How often RDY is redistributed (go-nsq `rdy_redistribute_interval`, default 5 s,
    /// 1 ms ..= 5 s).
    pub rdy_redistribute_interval: Duration,
    /// Sent in IDENTIFY (go-nsq `client_id`; default the short hostname).
    pub client_id: Option<String>,
    /// Sent in IDENTIFY (go-nsq `hostname`; adapters fill in the OS hostname when unset).
    pub hostname: Option<String>,
    /// Sent in IDENTIFY (go-nsq `user_agent`; default `nsq-rs/<version>`). go-nsq's own
    /// default (`go-nsq/<version>`), which a configuration marshalled by go-nsq carries, counts
    /// as unset: a ported configuration sends this client's name.
    pub user_agent: Option<String>,
    /// The client's region, sent in IDENTIFY (go-nsq `topology_region`, nsqd after v1.3.0):
    /// with nsqd's `topology-aware-consumption` experiment, consumers in nsqd's own region are
    /// preferred; with [`Routing::Topology`], a producer
    /// prefers nsqd in its own region. Default: none.
    pub topology_region: Option<String>,
    /// The client's zone, sent in IDENTIFY (go-nsq `topology_zone`): as `topology_region`,
    /// one level closer (same zone first, then same region, then any). Default: none.
    pub topology_zone: Option<String>,
    /// Server heartbeat interval (go-nsq `heartbeat_interval`, default 30 s; nsqd accepts
    /// 1 s ..= 60 s).
    pub heartbeat_interval: Duration,
    /// Percentage of the channel's messages to receive, 0 = all (go-nsq `sample_rate`, 0 ..= 99).
    pub sample_rate: u8,
    /// Negotiate TLS (go-nsq `tls_v1`). The connection fails if nsqd does not grant it.
    pub tls_v1: bool,
    /// PEM file of root certificates to verify nsqd against (go-nsq `tls_root_ca_file`;
    /// default: the Mozilla roots of webpki-roots).
    pub tls_root_ca_file: Option<PathBuf>,
    /// PEM file of the client certificate chain (go-nsq `tls_cert`; needs `tls_key`).
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the client private key (go-nsq `tls_key`; needs `tls_cert`).
    pub tls_key: Option<PathBuf>,
    /// **Insecure**: accept any server certificate (go-nsq `tls_insecure_skip_verify`; also
    /// accepted as `dangerous_skip_tls_verification`). The connection is then encrypted but
    /// anyone on the path can impersonate nsqd. Default false.
    pub tls_insecure_skip_verify: bool,
    /// The name to verify nsqd's certificate against (default: the host of the address).
    pub tls_server_name: Option<String>,
    /// go-nsq `tls_min_version` (`ssl3.0`, `tls1.0`, `tls1.1`, `tls1.2`), accepted so go-nsq
    /// configurations port: rustls never negotiates below TLS 1.2, so every accepted value has
    /// the same effect (TLS 1.2 or 1.3).
    pub tls_min_version: Option<String>,
    /// A complete TLS configuration set in code; when present it replaces `tls_root_ca_file`,
    /// `tls_cert`, `tls_key` and `tls_insecure_skip_verify`, and switches TLS on. Not
    /// settable from a file.
    pub tls_config: Option<TlsConfig>,
    /// Negotiate DEFLATE (go-nsq `deflate`).
    pub deflate: bool,
    /// DEFLATE level (go-nsq `deflate_level`, default 6, 1 ..= 9).
    pub deflate_level: u32,
    /// Negotiate snappy (go-nsq `snappy`; not together with `deflate`).
    pub snappy: bool,
    /// nsqd's output buffer for this connection in bytes (go-nsq `output_buffer_size`,
    /// default 16384; -1 disables buffering, 0 leaves nsqd's default, else at least 64).
    pub output_buffer_size: i64,
    /// nsqd's output buffer flush timeout (go-nsq `output_buffer_timeout`, default 250 ms;
    /// 0 disables the buffering timeout, as go-nsq documents).
    pub output_buffer_timeout: Duration,
    /// Most messages in flight over all connections (go-nsq `max_in_flight`, default 1):
    /// the application never holds more (handed out and not answered, however many nsqd);
    /// go-nsq bounds only the sum of RDY. A message nsqd wrote before it read a lowered RDY
    /// may arrive too late to fit: it goes back unseen
    /// ([`ConsumerStats::returned`](crate::consumer::ConsumerStats::returned)).
    pub max_in_flight: u32,
    /// `static` (the default: `max_in_flight` is the limit) or `adaptive` (`max_in_flight`
    /// is the ceiling of a limit that follows the handlers' latencies).
    pub max_in_flight_mode: InFlightMode,
    /// The adaptive limit's floor (default 1).
    pub min_in_flight: u32,
    /// Server-side message timeout for this client; 0 leaves nsqd's default (go-nsq
    /// `msg_timeout`; nsqd needs at least 1 s).
    pub msg_timeout: Duration,
    /// Consumer: touch every message still unanswered a little before its msg_timeout runs
    /// out, so handlers may run longer than msg_timeout (default false: only explicit
    /// `touch()`, as in go-nsq).
    pub auto_touch: bool,
    /// With `auto_touch`: how long a message is kept alive at most (counted from its
    /// delivery; nsqd's max_msg_timeout caps it too); after that it is left to time out and
    /// be redelivered, with a warning logged (default 15 min, 1 s ..= 24 h).
    pub auto_touch_limit: Duration,
    /// Secret for AUTH, sent only when nsqd requires it (go-nsq `auth_secret`).
    pub auth_secret: Option<Secret>,

    // ----- options of our own -----
    /// nsqd's `--max-msg-size`, checked before publishing (default 1 MiB).
    pub max_msg_size: u32,
    /// nsqd's `--max-body-size`, checked before MPUB (default 5 MiB).
    pub max_body_size: u32,
    /// nsqd's `--max-req-timeout`, the longest REQ/DPUB delay (default 1 h).
    pub max_req_timeout: Duration,
    /// First reconnect delay after a failure, doubling with jitter (default 1 s).
    pub reconnect_initial_delay: Duration,
    /// Longest reconnect delay (default 60 s).
    pub reconnect_max_delay: Duration,
    /// A connection up this long resets its reconnect schedule (default 30 s).
    pub reconnect_reset_after: Duration,
    /// How long a consumer's lookupd query may take (default 30 s; also accepted as
    /// `lookupd_poll_timeout`).
    pub lookupd_timeout: Duration,
    /// Producer routing, `failover` (first healthy nsqd in the given order, default),
    /// `round_robin`, or `topology` (the nearest healthy nsqd: same zone, then same region,
    /// then any; until the nearest has stated its zone, at most `dial_timeout`, publishes
    /// wait for it) (option name `producer_routing`).
    pub producer_routing: Routing,
    /// Longest wait of a publish for a ready connection, while one is being made (default
    /// 5 s). A producer whose connection was lost connects again inside the publish; a
    /// publish fails at once only when every nsqd's last connection attempt failed.
    pub publish_timeout: Duration,
    /// Longest wait for nsqd's reply to a publish before the connection is dropped as stuck;
    /// 0 disables (default 30 s).
    pub reply_timeout: Duration,
    /// Most unresolved publishes per producer, 0 = unbounded (default 0).
    pub max_outstanding_publishes: usize,
    /// Most publishes waiting for a connection (default 10 000).
    pub max_pending_publishes: usize,
    /// Natural batching of concurrent single publishes into MPUBs (default `true`; see
    /// [`ProducerConfig::batching`]).
    pub producer_batching: bool,
    /// How long a graceful stop/close waits for in-flight messages or publishes (default 30 s).
    pub drain_timeout: Duration,
    /// With the client's `metrics` feature: whether its histograms (handler duration,
    /// message age, publish duration, batch size) are recorded too, or only its counters and
    /// gauges, the cheaper setting for very hot consumers (default `true`).
    pub metrics_histograms: bool,
}

impl Default for Config {
    fn default() -> Self {
        let limits = Limits::default();
        let producer = ProducerConfig::default();
        let consumer = ConsumerConfig::default();
        Config {
            dial_timeout: Duration::from_secs(1),
            local_addr: None,
            read_timeout: None,
            write_timeout: Duration::from_secs(1),
            lookupd_poll_interval: Duration::from_secs(60),
            lookupd_poll_jitter: 0.3,
            max_requeue_delay: Duration::from_secs(15 * 60),
            default_requeue_delay: Duration::from_secs(90),
            backoff_strategy: BackoffStrategy::Exponential,
            max_backoff_duration: Duration::from_secs(120),
            backoff_multiplier: Duration::from_secs(1),
            max_attempts: 5,
            low_rdy_idle_timeout: Duration::from_secs(1),
            low_rdy_timeout: Duration::from_secs(2),
            low_rdy_max_wait: consumer.low_rdy_max_wait,
            rdy_redistribute_interval: Duration::from_secs(5),
            client_id: None,
            hostname: None,
            user_agent: None,
            topology_region: None,
            topology_zone: None,
            heartbeat_interval: Duration::from_secs(30),
            sample_rate: 0,
            tls_v1: false,
            tls_root_ca_file: None,
            tls_cert: None,
            tls_key: None,
            tls_insecure_skip_verify: false,
            tls_server_name: None,
            tls_min_version: None,
            tls_config: None,
            deflate: false,
            deflate_level: 6,
            snappy: false,
            output_buffer_size: 16384,
            output_buffer_timeout: Duration::from_millis(250),
            max_in_flight: 1,
            max_in_flight_mode: InFlightMode::Static,
            min_in_flight: 1,
            msg_timeout: Duration::ZERO,
            auto_touch: false,
            auto_touch_limit: Duration::from_secs(15 * 60),
            auth_secret: None,
            max_msg_size: limits.max_msg_size,
            max_body_size: limits.max_body_size,
            max_req_timeout: limits.max_req_timeout,
            reconnect_initial_delay: consumer.reconnect_initial_delay,
            reconnect_max_delay: consumer.reconnect_max_delay,
            reconnect_reset_after: consumer.reconnect_reset_after,
            lookupd_timeout: consumer.lookupd_timeout,
            producer_routing: producer.routing,
            publish_timeout: producer.publish_timeout,
            reply_timeout: producer.reply_timeout.unwrap_or(Duration::ZERO),
            max_outstanding_publishes: 0,
            max_pending_publishes: producer.max_pending,
            producer_batching: producer.batching,
            drain_timeout: Duration::from_secs(30),
            metrics_histograms: true,
        }
    }
}

/// Every option name [`Config::set`] accepts (aliases included).
pub const OPTION_NAMES: &[&str] = &[
    "dial_timeout",
    "local_addr",
    "read_timeout",
    "write_timeout",
    "lookupd_poll_interval",
    "lookupd_poll_jitter",
    "max_requeue_delay",
    "default_requeue_delay",
    "backoff_strategy",
    "max_backoff_duration",
    "backoff_multiplier",
    "max_attempts",
    "low_rdy_idle_timeout",
    "low_rdy_timeout",
    "low_rdy_max_wait",
    "rdy_redistribute_interval",
    "client_id",
    "hostname",
    "user_agent",
    "topology_region",
    "topology_zone",
    "heartbeat_interval",
    "sample_rate",
    "tls_v1",
    "tls_root_ca_file",
    "tls_cert",
    "tls_key",
    "tls_insecure_skip_verify",
    "dangerous_skip_tls_verification",
    "tls_server_name",
    "tls_min_version",
    "deflate",
    "deflate_level",
    "snappy",
    "output_buffer_size",
    "output_buffer_timeout",
    "max_in_flight",
    "max_in_flight_mode",
    "min_in_flight",
    "msg_timeout",
    "auto_touch",
    "auto_touch_limit",
    "auth_secret",
    "max_msg_size",
    "max_body_size",
    "max_req_timeout",
    "reconnect_initial_delay",
    "reconnect_max_delay",
    "reconnect_reset_after",
    "lookupd_timeout",
    "lookupd_poll_timeout",
    "producer_routing",
    "publish_timeout",
    "reply_timeout",
    "max_outstanding_publishes",
    "max_pending_publishes",
    "producer_batching",
    "lookupd_authorization",
    "drain_timeout",
    "metrics_histograms",
];

impl Config {
    /// Parses a JSON object of option names to values, then [`validate`](Self::validate)s.
    pub fn from_json(json: &str) -> Result<Config, OptionError> {
        let value: Value = serde_json::from_str(json).map_err(|e| OptionError::Invalid {
            option: "<document>".into(),
            value: e.to_string(),
            expected: "a JSON object of option names to values",
        })?;
        Config::from_value(&value)
    }

    fn from_value(value: &Value) -> Result<Config, OptionError> {
        let Value::Object(map) = value else {
            return Err(OptionError::Invalid {
                option: "<document>".into(),
                value: show(value),
                expected: "an object of option names to values",
            });
        };
        let mut config = Config::default();
        for (option, value) in map {
            config.set(option, value)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets one option by name (`-` is accepted for `_`, as go-nsq does), checking the value's
    /// syntax and range.
    pub fn set(&mut self, option: &str, value: &Value) -> Result<(), OptionError> {
        let option = option.trim();
        if option.starts_with(|c: char| c.is_ascii_uppercase()) {
            return self.set_go_field(option, value);
        }
        self.set_option(&option.replace('-', "_"), value, false)
    }

    /// One field of go-nsq's `Config` as Go's `encoding/json` writes it: the Go field name,
    /// durations in nanoseconds, `""` for an unset string, and the interface fields as
    /// objects (`TlsConfig`'s `InsecureSkipVerify`, `ServerName` and `MinVersion` are read;
    /// `BackoffStrategy` and `BehaviorDelegate` marshal to nothing usable and are skipped).
    fn set_go_field(&mut self, field: &str, value: &Value) -> Result<(), OptionError> {
        let name = parse::go_field_option(field);
        let unset = Value::Null;
        match (name.as_str(), value) {
            ("backoff_strategy" | "behavior_delegate", Value::Object(_) | Value::Null)
            | ("tls_config", Value::Null) => Ok(()),
            ("backoff_strategy", _) => self.set_option(&name, value, true),
            // A `*net.TCPAddr`: `{"IP": "10.0.0.2", "Port": 0, "Zone": ""}`.
            ("local_addr", Value::Object(addr)) => {
                let ip = addr.get("IP").and_then(Value::as_str).unwrap_or_default();
                let port = addr.get("Port").and_then(Value::as_u64).unwrap_or(0);
                let zone = addr.get("Zone").and_then(Value::as_str).unwrap_or_default();
                let ip = if zone.is_empty() {
                    ip.to_owned()
                } else {
                    format!("{ip}%{zone}")
                };
                let text = match ip.parse::<std::net::IpAddr>() {
                    Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{port}"),
                    _ => format!("{ip}:{port}"),
                };
                self.set_option(&name, &Value::String(text), true)
                    .map_err(|_| OptionError::Invalid {
                        option: field.into(),
                        value: show(value),
                        expected: "a *net.TCPAddr with an IP address",
                    })
            }
            ("tls_config", Value::Object(tls)) => {
                if let Some(v) = tls.get("InsecureSkipVerify") {
                    self.set_option("tls_insecure_skip_verify", v, true)?;
                }
                if let Some(v) = tls.get("ServerName").filter(|v| *v != "") {
                    self.set_option("tls_server_name", v, true)?;
                }
                match tls.get("MinVersion").and_then(Value::as_u64) {
                    None | Some(0) => Ok(()),
                    Some(v) => {
                        let version = match v {
                            0x0300 => "ssl3.0",
                            0x0301 => "tls1.0",
                            0x0302 => "tls1.1",
                            _ => "tls1.2",
                        };
                        self.set_option("tls_min_version", &Value::from(version), true)
                    }
                }
            }
            (_, Value::String(text)) if text.is_empty() => self.set_option(&name, &unset, true),
            _ => self.set_option(&name, value, true).map_err(|e| match e {
                OptionError::Unknown { .. } => OptionError::Unknown {
                    option: field.into(),
                },
                e => e,
            }),
        }
    }

    /// [`set`](Self::set) by option name; `nanos`: a number given for a duration counts
    /// nanoseconds (Go's JSON), not milliseconds.
    fn set_option(&mut self, name: &str, value: &Value, nanos: bool) -> Result<(), OptionError> {
        let name = name.to_owned();
        let s = Setter {
            option: &name,
            value,
            nanos,
        };
        match name.as_str() {
            "dial_timeout" => self.dial_timeout = s.duration()?,
            "local_addr" => self.local_addr = s.socket_addr()?,
            "read_timeout" => {
                self.read_timeout = if value.is_null() {
                    None
                } else {
                    Some(s.duration()?)
                };
            }
            "write_timeout" => self.write_timeout = s.duration()?,
            "lookupd_poll_interval" => self.lookupd_poll_interval = s.duration()?,
            "lookupd_poll_jitter" => self.lookupd_poll_jitter = s.float()?,
            "max_requeue_delay" => self.max_requeue_delay = s.duration()?,
            "default_requeue_delay" => self.default_requeue_delay = s.duration()?,
            "backoff_strategy" => {
                self.backoff_strategy = s.named("\"exponential\" or \"full_jitter\"")?;
            }
            "max_backoff_duration" => self.max_backoff_duration = s.duration()?,
            "backoff_multiplier" => self.backoff_multiplier = s.duration()?,
            "max_attempts" => self.max_attempts = s.int_in("within 0..=65535")?,
            "low_rdy_idle_timeout" => self.low_rdy_idle_timeout = s.duration()?,
            "low_rdy_timeout" => self.low_rdy_timeout = s.duration()?,
            "low_rdy_max_wait" => self.low_rdy_max_wait = s.duration()?,
            "rdy_redistribute_interval" => self.rdy_redistribute_interval = s.duration()?,
            "client_id" => self.client_id = s.string()?,
            "hostname" => self.hostname = s.string()?,
            "user_agent" => self.user_agent = s.string()?,
            "topology_region" => self.topology_region = s.string()?,
            "topology_zone" => self.topology_zone = s.string()?,
            "heartbeat_interval" => self.heartbeat_interval = s.duration()?,
            "sample_rate" => self.sample_rate = s.int_in("within 0..=99")?,
            "tls_v1" => self.tls_v1 = s.boolean()?,
            "tls_root_ca_file" => self.tls_root_ca_file = s.path()?,
            "tls_cert" => self.tls_cert = s.path()?,
            "tls_key" => self.tls_key = s.path()?,
            "tls_insecure_skip_verify" | "dangerous_skip_tls_verification" => {
                self.tls_insecure_skip_verify = s.boolean()?;
            }
            "tls_server_name" => self.tls_server_name = s.string()?,
            "tls_min_version" => self.tls_min_version = s.string()?,
            "deflate" => self.deflate = s.boolean()?,
            "deflate_level" => self.deflate_level = s.int_in("within 1..=9")?,
            "snappy" => self.snappy = s.boolean()?,
            "output_buffer_size" => self.output_buffer_size = s.int_in("-1, 0 or at least 64")?,
            "output_buffer_timeout" => self.output_buffer_timeout = s.duration()?,
            "max_in_flight" => self.max_in_flight = s.int_in("within 0..=4294967295")?,
            "max_in_flight_mode" => {
                self.max_in_flight_mode = s.named("\"static\" or \"adaptive\"")?;
            }
            "min_in_flight" => self.min_in_flight = s.int_in("within 1..=4294967295")?,
            "msg_timeout" => self.msg_timeout = s.duration()?,
            "auto_touch" => self.auto_touch = s.boolean()?,
            "auto_touch_limit" => self.auto_touch_limit = s.duration()?,
            "auth_secret" => self.auth_secret = s.string()?.map(Secret::from),
            "max_msg_size" => self.max_msg_size = s.int_in("within 1..=4294967295")?,
            "max_body_size" => self.max_body_size = s.int_in("within 1..=4294967295")?,
            "max_req_timeout" => self.max_req_timeout = s.duration()?,
            "reconnect_initial_delay" => self.reconnect_initial_delay = s.duration()?,
            "reconnect_max_delay" => self.reconnect_max_delay = s.duration()?,
            "reconnect_reset_after" => self.reconnect_reset_after = s.duration()?,
            "lookupd_timeout" | "lookupd_poll_timeout" => self.lookupd_timeout = s.duration()?,
            "producer_routing" => {
                self.producer_routing = s.named("\"failover\", \"round_robin\" or \"topology\"")?;
            }
            "publish_timeout" => self.publish_timeout = s.duration()?,
            "reply_timeout" => self.reply_timeout = s.duration()?,
            "max_outstanding_publishes" => {
                self.max_outstanding_publishes = s.int_in("a non-negative integer")?;
            }
            "max_pending_publishes" => {
                self.max_pending_publishes = s.int_in("a non-negative integer")?;
            }
            "drain_timeout" => self.drain_timeout = s.duration()?,
            // go-nsq 1.1 sends its auth secret to nsqlookupd when this is on (its default);
            // accepted so go-nsq configurations load. This client sends none: a lookupd that
            // requires one answers 401, which its log line shows.
            "lookupd_authorization" => {
                let _ = s.boolean()?;
            }
            "producer_batching" => self.producer_batching = s.boolean()?,
            "metrics_histograms" => self.metrics_histograms = s.boolean()?,
            _ => return Err(OptionError::Unknown { option: name }),
        }
        self.check(&name)
    }

    /// [`set`](Self::set) with a textual value, as from a command line
    /// (`--consumer-opt=max_in_flight,100` style): numbers, booleans and durations are parsed
    /// from the text.
    pub fn set_str(&mut self, option: &str, value: &str) -> Result<(), OptionError> {
        self.set(option, &Value::String(value.to_string()))
    }

    /// Checks every option's range and the rules between options (`heartbeat_interval` at
    /// most `read_timeout`, not both `snappy` and `deflate`, `tls_cert` with `tls_key`).
    pub fn validate(&self) -> Result<(), OptionError> {
        for name in OPTION_NAMES {
            self.check(name)?;
        }
        if let Some(read_timeout) = self.read_timeout {
            if self.heartbeat_interval > read_timeout {
                return Err(OptionError::Conflict {
                    option: "heartbeat_interval".into(),
                    reason: format!(
                        "{:?} must not exceed read_timeout {read_timeout:?}",
                        self.heartbeat_interval
                    ),
                });
            }
        }
        for (option, on, feature, built) in [
            ("tls_v1", self.tls_v1, "tls", cfg!(feature = "tls")),
            ("snappy", self.snappy, "snappy", cfg!(feature = "snappy")),
            (
                "deflate",
                self.deflate,
                "deflate",
                cfg!(feature = "deflate"),
            ),
        ] {
            if on && !built {
                return Err(OptionError::FeatureDisabled {
                    option: option.into(),
                    feature,
                });
            }
        }
        if self.snappy && self.deflate {
            return Err(OptionError::Conflict {
                option: "snappy".into(),
                reason: "snappy and deflate cannot both be enabled".into(),
            });
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(OptionError::Conflict {
                option: if self.tls_cert.is_some() {
                    "tls_key"
                } else {
                    "tls_cert"
                }
                .into(),
                reason: "tls_cert and tls_key must be given together".into(),
            });
        }
        if self.reconnect_max_delay < self.reconnect_initial_delay {
            return Err(OptionError::Conflict {
                option: "reconnect_max_delay".into(),
                reason: "must be at least reconnect_initial_delay".into(),
            });
        }
        Ok(())
    }

    /// The range check of one option.
    fn check(&self, name: &str) -> Result<(), OptionError> {
        let out = |value: String, range: &'static str| {
            Err(OptionError::OutOfRange {
                option: name.to_string(),
                value,
                range,
            })
        };
        match name {
            "dial_timeout" => check_duration(name, self.dial_timeout, MS, 60 * MIN, "1ms ..= 1h"),
            "read_timeout" => self.read_timeout.map_or(Ok(()), |t| {
                check_duration(name, t, 100 * MS, 5 * MIN, "100ms ..= 5m")
            }),
            "write_timeout" => {
                check_duration(name, self.write_timeout, 100 * MS, 5 * MIN, "100ms ..= 5m")
            }
            "lookupd_poll_interval" => check_duration(
                name,
                self.lookupd_poll_interval,
                10 * MS,
                5 * MIN,
                "10ms ..= 5m",
            ),
            "lookupd_poll_jitter" => {
                if (0.0..=1.0).contains(&self.lookupd_poll_jitter) {
                    Ok(())
                } else {
                    out(self.lookupd_poll_jitter.to_string(), "within 0 ..= 1")
                }
            }
            "max_requeue_delay" => check_duration(
                name,
                self.max_requeue_delay,
                Duration::ZERO,
                60 * MIN,
                "0 ..= 60m",
            ),
            "default_requeue_delay" => check_duration(
                name,
                self.default_requeue_delay,
                Duration::ZERO,
                60 * MIN,
                "0 ..= 60m",
            ),
            "max_backoff_duration" => check_duration(
                name,
                self.max_backoff_duration,
                Duration::ZERO,
                60 * MIN,
                "0 ..= 60m",
            ),
            "backoff_multiplier" => check_duration(
                name,
                self.backoff_multiplier,
                Duration::ZERO,
                60 * MIN,
                "0 ..= 60m",
            ),
            "low_rdy_idle_timeout" => {
                check_duration(name, self.low_rdy_idle_timeout, SEC, 5 * MIN, "1s ..= 5m")
            }
            "low_rdy_timeout" => {
                check_duration(name, self.low_rdy_timeout, SEC, 5 * MIN, "1s ..= 5m")
            }
            "low_rdy_max_wait" => {
                check_duration(name, self.low_rdy_max_wait, SEC, 60 * MIN, "1s ..= 1h")
            }
            "rdy_redistribute_interval" => check_duration(
                name,
                self.rdy_redistribute_interval,
                MS,
                5 * SEC,
                "1ms ..= 5s",
            ),
            "heartbeat_interval" => {
                check_duration(name, self.heartbeat_interval, SEC, MIN, "1s ..= 60s")
            }
            "auto_touch_limit" => check_duration(
                name,
                self.auto_touch_limit,
                SEC,
                24 * 60 * MIN,
                "1s ..= 24h",
            ),
            "sample_rate" if self.sample_rate > 99 => {
                out(self.sample_rate.to_string(), "within 0..=99")
            }
            "deflate_level" if !(1..=9).contains(&self.deflate_level) => {
                out(self.deflate_level.to_string(), "within 1..=9")
            }
            "output_buffer_size"
                if !(self.output_buffer_size == -1
                    || self.output_buffer_size == 0
                    || self.output_buffer_size >= 64) =>
            {
                out(self.output_buffer_size.to_string(), "-1, 0 or at least 64")
            }
            "msg_timeout" if !self.msg_timeout.is_zero() && self.msg_timeout < SEC => out(
                show_duration(self.msg_timeout),
                "0 (server default) or at least 1s",
            ),
            "max_msg_size" if self.max_msg_size == 0 => out("0".into(), "at least 1"),
            "max_body_size" if self.max_body_size == 0 => out("0".into(), "at least 1"),
            "reconnect_initial_delay" if self.reconnect_initial_delay < MS => {
                out(show_duration(self.reconnect_initial_delay), "at least 1ms")
            }
            "client_id" | "hostname" | "user_agent" | "tls_server_name" => {
                let v = match name {
                    "client_id" => &self.client_id,
                    "hostname" => &self.hostname,
                    "user_agent" => &self.user_agent,
                    _ => &self.tls_server_name,
                };
                match v {
                    Some(s) if s.is_empty() => out("\"\"".into(), "not empty (use null to unset)"),
                    _ => Ok(()),
                }
            }
            "tls_min_version"
                if self
                    .tls_min_version
                    .as_deref()
                    .is_some_and(|v| !matches!(v, "ssl3.0" | "tls1.0" | "tls1.1" | "tls1.2")) =>
            {
                out(
                    format!("{:?}", self.tls_min_version.as_deref().unwrap_or_default()),
                    "one of ssl3.0, tls1.0, tls1.1, tls1.2 (TLS 1.2 is always the floor)",
                )
            }
            "auth_secret"
                if self
                    .auth_secret
                    .as_ref()
                    .is_some_and(|s| s.expose().is_empty()) =>
            {
                out("\"\"".into(), "not empty (use null to unset)")
            }
            _ => Ok(()),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Config {
    /// Reads a map of option names to values (any self-describing format), with the same
    /// checks and errors as [`Config::set`] and [`Config::validate`].
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, Value>::deserialize(deserializer)?;
        Config::from_value(&Value::Object(map)).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ok = [
            ("0", Duration::ZERO),
            ("90s", 90 * SEC),
            ("1m30s", 90 * SEC),
            ("250ms", 250 * MS),
            ("1h", 60 * MIN),
            ("1.5s", 1500 * MS),
            (".5s", 500 * MS),
            ("2h45m", 165 * MIN),
            ("1us", Duration::from_micros(1)),
            ("1µs", Duration::from_micros(1)),
            ("3ns", Duration::from_nanos(3)),
            ("+5s", 5 * SEC),
            ("1.000000001s", Duration::new(1, 1)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "5",
            "-1s",
            "1x",
            "s",
            "1..5s",
            ".s",
            "1s5",
            "99999999999999999999h",
            // The largest whole number of hours that fits, plus a fraction that does not.
            "94522879700260684295381835.99999h",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
