//! Broker options (mirroring the nsqd flags tests care about) and the AUTH table.

use std::collections::HashMap;
use std::time::Duration;

/// Options of a test nsqd. Defaults are nsqd v1.3.0's.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--max-rdy-count` (default 2500).
    pub max_rdy_count: i64,
    /// `--max-channel-consumers`: clients a channel accepts (default 0 = unlimited); SUB
    /// beyond it fails with `E_SUB_FAILED`.
    pub max_channel_consumers: usize,
    /// `--msg-timeout` (default 60s): the default per-client message timeout.
    pub msg_timeout: Duration,
    /// `--max-msg-timeout` (default 15m).
    pub max_msg_timeout: Duration,
    /// `--max-msg-size` (default 1 MiB).
    pub max_msg_size: i64,
    /// `--max-body-size` (default 5 MiB).
    pub max_body_size: i64,
    /// `--max-req-timeout` (default 1h).
    pub max_req_timeout: Duration,
    /// nsqd's `QueueScanInterval` (default 100ms, not a command-line flag of nsqd): in-flight
    /// timeouts and due deferred messages (REQ with a delay, DPUB) are only noticed on this
    /// tick, so they are redelivered up to one interval late and in batches, like nsqd's
    /// queue scan loop does. `Duration::ZERO` handles every deadline exactly on time.
    pub queue_scan_interval: Duration,
    /// Default heartbeat interval of a client (default 30s: nsqd v1.3.0 uses half its
    /// `ClientTimeout` of 60s, which is not a command-line flag).
    pub heartbeat_interval: Duration,
    /// `--max-heartbeat-interval` (default 60s).
    pub max_heartbeat_interval: Duration,
    /// Default output buffer size (default 16 KiB; not a flag of nsqd).
    pub output_buffer_size: i64,
    /// `--max-output-buffer-size` (default 64 KiB).
    pub max_output_buffer_size: i64,
    /// `--output-buffer-timeout`: default output buffer timeout (default 250ms).
    pub output_buffer_timeout: Duration,
    /// `--min-output-buffer-timeout` (default 25ms).
    pub min_output_buffer_timeout: Duration,
    /// `--max-output-buffer-timeout` (default 30s).
    pub max_output_buffer_timeout: Duration,
    /// `--max-deflate-level` (default 6).
    pub max_deflate_level: i64,
    /// `--snappy` (default true).
    pub snappy: bool,
    /// `--deflate` (default true).
    pub deflate: bool,
    /// Serve TLS (`--tls-cert`/`--tls-key`) (default false). The certificate comes from
    /// [`crate::TestPki::global`].
    pub tls: bool,
    /// `--tls-required` (default false): every command but IDENTIFY fails until TLS is on.
    pub tls_required: bool,
    /// Names (DNS or IP) in the server certificate (default `localhost`, `127.0.0.1`).
    pub tls_server_names: Vec<String>,
    /// Enables AUTH (`--auth-http-address`) with this table of secrets (default off).
    pub auth: Option<AuthTable>,
    /// Version string reported in IDENTIFY and to lookupd (default `1.3.0`).
    pub version: String,
    /// Hostname reported to lookupd (default `localhost`).
    pub hostname: String,
    /// Broadcast address reported to lookupd (default `127.0.0.1`).
    pub broadcast_address: String,
    /// `--e2e-processing-latency-percentile` (default none): the quantiles of the time from
    /// publish to FIN that `/stats` reports per channel and topic (kept in descending order,
    /// as nsqd sorts them).
    pub e2e_processing_latency_percentiles: Vec<f64>,
    /// `--e2e-processing-latency-window-time` (default 10m): how far back those quantiles
    /// look.
    pub e2e_processing_latency_window_time: Duration,
    /// `--lookupd-tcp-address` (default none): only reported by (and changed through)
    /// `/config/nsqlookupd_tcp_addresses`; registration with a stand-in lookupd goes through
    /// [`crate::NsqdBuilder::lookupd`].
    pub nsqlookupd_tcp_addresses: Vec<String>,
    /// How many commands the command log keeps (oldest dropped first, 0 = no log; default 100 000).
    pub command_log_limit: usize,
    /// How many bytes of each command's body the log keeps (default 64 KiB).
    pub command_log_body_limit: usize,
    /// `--topology-region` (nsqd after v1.3.0; default none).
    pub topology_region: String,
    /// `--topology-zone` (nsqd after v1.3.0; default none).
    pub topology_zone: String,
    /// `--enable-experiment=topology-aware-consumption` (nsqd after v1.3.0): a channel
    /// hands a message to a subscriber in nsqd's own zone when one is ready for it, else to
    /// one in its own region, else to any; and counts zone-local, region-local and global
    /// deliveries.
    pub topology_aware_consumption: bool,
}

impl Options {
    /// Whether the broker behaves as nsqd after v1.3.0 does with topology: a zone, a region or
    /// the experiment set (its IDENTIFY reply, `/info` and `/stats` then carry the topology
    /// fields; otherwise they are v1.3.0's).
    pub fn topology(&self) -> bool {
        self.topology_aware_consumption
            || !self.topology_region.is_empty()
            || !self.topology_zone.is_empty()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_rdy_count: 2500,
            max_channel_consumers: 0,
            msg_timeout: Duration::from_secs(60),
            max_msg_timeout: Duration::from_secs(15 * 60),
            max_msg_size: 1024 * 1024,
            max_body_size: 5 * 1024 * 1024,
            max_req_timeout: Duration::from_secs(3600),
            queue_scan_interval: Duration::from_millis(100),
            heartbeat_interval: Duration::from_secs(30),
            max_heartbeat_interval: Duration::from_secs(60),
            output_buffer_size: 16 * 1024,
            max_output_buffer_size: 64 * 1024,
            output_buffer_timeout: Duration::from_millis(250),
            min_output_buffer_timeout: Duration::from_millis(25),
            max_output_buffer_timeout: Duration::from_secs(30),
            max_deflate_level: 6,
            snappy: true,
            deflate: true,
            tls: false,
            tls_required: false,
            tls_server_names: vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
            auth: None,
            version: "1.3.0".to_owned(),
            hostname: "localhost".to_owned(),
            broadcast_address: "127.0.0.1".to_owned(),
            e2e_processing_latency_percentiles: Vec::new(),
            e2e_processing_latency_window_time: Duration::from_secs(10 * 60),
            nsqlookupd_tcp_addresses: Vec::new(),
            command_log_limit: 100_000,
            command_log_body_limit: 64 * 1024,
            topology_region: String::new(),
            topology_zone: String::new(),
            topology_aware_consumption: false,
        }
    }
}

/// A topic or channel pattern of an authorization. nsqd uses (unanchored) regular expressions;
/// this stand-in offers the forms tests need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Matches everything (`.*`).
    Any,
    /// Matches exactly this name (`^name$`).
    Exact(String),
    /// Matches names starting with this prefix (`^prefix`).
    Prefix(String),
}

impl Pattern {
    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(s) => s == name,
            Pattern::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// A permission of an authorization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// `publish`: PUB, MPUB, DPUB.
    Publish,
    /// `subscribe`: SUB.
    Subscribe,
}

/// One authorization: a topic pattern, channel patterns and permissions, as nsqd's auth server
/// returns them.
#[derive(Clone, Debug)]
pub struct Authorization {
    /// Topic pattern.
    pub topic: Pattern,
    /// Channel patterns (any match suffices). A publish is checked against the empty channel
    /// name, like nsqd does, so use [`Pattern::Any`] for publishers.
    pub channels: Vec<Pattern>,
    /// Granted permissions.
    pub permissions: Vec<Permission>,
}

impl Authorization {
    /// Everything on every topic and channel.
    pub fn all() -> Self {
        Self {
            topic: Pattern::Any,
            channels: vec![Pattern::Any],
            permissions: vec![Permission::Publish, Permission::Subscribe],
        }
    }

    /// nsqd's `IsAllowed`.
    pub(crate) fn allows(&self, topic: &str, channel: &str) -> bool {
        let needed = if channel.is_empty() {
            Permission::Publish
        } else {
            Permission::Subscribe
        };
        self.permissions.contains(&needed)
            && self.topic.matches(topic)
            && self.channels.iter().any(|c| c.matches(channel))
    }
}

/// What a secret grants.
#[derive(Clone, Debug)]
pub struct AuthGrant {
    /// Reported identity.
    pub identity: String,
    /// Reported identity URL.
    pub identity_url: String,
    /// Authorizations; an empty list makes AUTH fail with `E_UNAUTHORIZED`.
    pub authorizations: Vec<Authorization>,
}

impl AuthGrant {
    /// A grant with the given identity and authorizations.
    pub fn new(identity: &str, authorizations: Vec<Authorization>) -> Self {
        Self {
            identity: identity.to_owned(),
            identity_url: String::new(),
            authorizations,
        }
    }

    pub(crate) fn allows(&self, topic: &str, channel: &str) -> bool {
        self.authorizations.iter().any(|a| a.allows(topic, channel))
    }
}

/// Secrets and what they grant. An unknown secret fails AUTH with `E_AUTH_FAILED`.
#[derive(Clone, Debug, Default)]
pub struct AuthTable {
    /// Secret to grant.
    pub secrets: HashMap<String, AuthGrant>,
}

impl AuthTable {
    /// An empty table (every AUTH fails).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a secret.
    pub fn with(mut self, secret: &str, grant: AuthGrant) -> Self {
        self.secrets.insert(secret.to_owned(), grant);
        self
    }
}
