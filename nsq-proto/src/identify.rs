//! IDENTIFY and AUTH bodies and replies.

use crate::limits::CommandError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// nsqd's default `--max-rdy-count`, also assumed when IDENTIFY is answered with a plain `OK`.
pub const DEFAULT_MAX_RDY_COUNT: i64 = 2500;

/// The IDENTIFY body, field for field as nsqd v1.3.0 reads it.
///
/// Integer fields use nsqd's conventions: `0` means "server default", `-1` disables (where
/// nsqd allows it). Server-configurable upper bounds (`--max-heartbeat-interval`,
/// `--max-output-buffer-size`, `--max-msg-timeout`, ...) are enforced by the server with
/// `E_BAD_BODY`; [`Identify::validate`] checks everything that does not depend on them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Identify {
    /// Identifier shown in nsqd's stats (go-nsq uses the short hostname).
    pub client_id: String,
    /// The client's hostname.
    pub hostname: String,
    /// Ask for a JSON reply describing the negotiated settings.
    pub feature_negotiation: bool,
    /// Milliseconds between heartbeats: 1000 and up, `0` for the default (30 s), `-1` to disable.
    pub heartbeat_interval: i64,
    /// Bytes nsqd buffers before writing to this client: 64 and up, `0` default, `-1` disables.
    pub output_buffer_size: i64,
    /// Milliseconds nsqd waits before flushing its buffer: `0` default, `-1` disables.
    pub output_buffer_timeout: i64,
    /// Ask for TLS.
    pub tls_v1: bool,
    /// Ask for snappy compression (framing format).
    pub snappy: bool,
    /// Ask for raw DEFLATE compression.
    pub deflate: bool,
    /// Requested DEFLATE level, 1..=9 (capped by the server's `--max-deflate-level`), `0` default.
    pub deflate_level: i64,
    /// Percentage of messages to receive, 0..=99 (`0` = all).
    pub sample_rate: i64,
    /// Client library name and version, e.g. `nsq-rs/0.1.0`.
    pub user_agent: String,
    /// Server-side message timeout in milliseconds: `0` default, else at least 1000.
    pub msg_timeout: i64,
    /// The client's region (go-nsq's `topology_region`; nsqd after v1.3.0): with nsqd's
    /// `topology-aware-consumption` experiment, a consumer in nsqd's own region is preferred
    /// over others. Not sent when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_region: String,
    /// The client's zone (go-nsq's `topology_zone`): a consumer in nsqd's own zone is
    /// preferred over any other. Not sent when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_zone: String,
}

impl Identify {
    /// Checks every field against the ranges nsqd accepts regardless of its flags.
    pub fn validate(&self) -> Result<(), CommandError> {
        let bad = CommandError::InvalidIdentify;
        if !matches!(self.heartbeat_interval, -1 | 0) && self.heartbeat_interval < 1000 {
            return Err(bad("heartbeat_interval must be -1, 0 or at least 1000 ms"));
        }
        if !matches!(self.output_buffer_size, -1 | 0) && self.output_buffer_size < 64 {
            return Err(bad("output_buffer_size must be -1, 0 or at least 64 bytes"));
        }
        if self.output_buffer_timeout < -1 {
            return Err(bad("output_buffer_timeout must be -1, 0 or positive"));
        }
        if !(0..=99).contains(&self.sample_rate) {
            return Err(bad("sample_rate must be within 0..=99"));
        }
        if self.msg_timeout != 0 && self.msg_timeout < 1000 {
            return Err(bad("msg_timeout must be 0 or at least 1000 ms"));
        }
        if !(0..=9).contains(&self.deflate_level) {
            return Err(bad("deflate_level must be within 0..=9"));
        }
        if self.snappy && self.deflate {
            return Err(bad("snappy and deflate cannot both be enabled"));
        }
        Ok(())
    }
}

/// A JSON reply from nsqd or nsqlookupd that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError {
    what: &'static str,
    detail: String,
}

impl ReplyError {
    pub(crate) fn new(what: &'static str, detail: impl fmt::Display) -> ReplyError {
        ReplyError {
            what,
            detail: detail.to_string(),
        }
    }

    /// Which reply was being parsed (`"IDENTIFY"`, `"AUTH"`, `"lookup"`).
    pub fn reply(&self) -> &'static str {
        self.what
    }
}

/// Checks that a reply body is a JSON object (serde would also accept an array for a struct).
pub(crate) fn expect_json_object(what: &'static str, data: &[u8]) -> Result<(), ReplyError> {
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(ReplyError::new(what, "expected a JSON object")),
    }
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed {} reply: {}", self.what, self.detail)
    }
}

impl std::error::Error for ReplyError {}

/// nsqd's reply to IDENTIFY, parsed leniently: unknown fields are ignored and missing ones take
/// nsqd's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct IdentifyResponse {
    /// Largest RDY count the server accepts.
    pub max_rdy_count: i64,
    /// Server version string.
    pub version: String,
    /// Largest msg_timeout the server accepts, in milliseconds.
    pub max_msg_timeout: i64,
    /// The message timeout in force for this connection, in milliseconds.
    pub msg_timeout: i64,
    /// TLS was granted: the handshake starts right after this reply.
    pub tls_v1: bool,
    /// DEFLATE was granted.
    pub deflate: bool,
    /// The DEFLATE level in force.
    pub deflate_level: i64,
    /// The server's cap on DEFLATE levels.
    pub max_deflate_level: i64,
    /// Snappy was granted.
    pub snappy: bool,
    /// The sample rate in force.
    pub sample_rate: i64,
    /// AUTH must be sent before SUB or PUB.
    pub auth_required: bool,
    /// The output buffer size in force, in bytes.
    pub output_buffer_size: i64,
    /// The output buffer timeout in force, in milliseconds.
    pub output_buffer_timeout: i64,
    /// nsqd's `--topology-region` (nsqd after v1.3.0; empty otherwise).
    pub topology_region: String,
    /// nsqd's `--topology-zone` (nsqd after v1.3.0; empty otherwise).
    pub topology_zone: String,
}

impl Default for IdentifyResponse {
    fn default() -> Self {
        IdentifyResponse {
            max_rdy_count: DEFAULT_MAX_RDY_COUNT,
            version: String::new(),
            max_msg_timeout: 15 * 60 * 1000,
            msg_timeout: 60 * 1000,
            tls_v1: false,
            deflate: false,
            deflate_level: 0,
            max_deflate_level: 6,
            snappy: false,
            sample_rate: 0,
            auth_required: false,
            output_buffer_size: 16 * 1024,
            output_buffer_timeout: 250,
            topology_region: String::new(),
            topology_zone: String::new(),
        }
    }
}

impl IdentifyResponse {
    /// Parses the data of the response frame that answered IDENTIFY: JSON when feature
    /// negotiation was on, or a plain `OK` (meaning nsqd's defaults, no features).
    pub fn parse(data: &[u8]) -> Result<IdentifyResponse, ReplyError> {
        if data == b"OK" {
            return Ok(IdentifyResponse::default());
        }
        expect_json_object("IDENTIFY", data)?;
        serde_json::from_slice(data).map_err(|e| ReplyError::new("IDENTIFY", e))
    }

    /// The negotiated message timeout.
    pub fn msg_timeout(&self) -> Duration {
        Duration::from_millis(self.msg_timeout.max(0) as u64)
    }

    /// The server's largest message timeout.
    pub fn max_msg_timeout(&self) -> Duration {
        Duration::from_millis(self.max_msg_timeout.max(0) as u64)
    }

    /// `max_rdy_count` clamped into `u32` (a nonsensical negative value reads as 0).
    pub fn max_rdy(&self) -> u32 {
        self.max_rdy_count.clamp(0, i64::from(u32::MAX)) as u32
    }
}

/// nsqd's reply to AUTH.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AuthResponse {
    /// The identity the auth server assigned.
    pub identity: String,
    /// A URL describing the identity, if any.
    pub identity_url: String,
    /// How many permissions the identity holds.
    pub permission_count: i64,
}

impl AuthResponse {
    /// Parses the JSON data of the response frame that answered AUTH.
    pub fn parse(data: &[u8]) -> Result<AuthResponse, ReplyError> {
        expect_json_object("AUTH", data)?;
        serde_json::from_slice(data).map_err(|e| ReplyError::new("AUTH", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ok_means_defaults() {
        let r = IdentifyResponse::parse(b"OK").unwrap();
        assert_eq!(r.max_rdy_count, 2500);
        assert!(!r.tls_v1 && !r.snappy && !r.deflate && !r.auth_required);
    }

    #[test]
    fn lenient_reply() {
        let r = IdentifyResponse::parse(
            br#"{"max_rdy_count":100,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":true,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250,"future_field":[1,2]}"#,
        )
        .unwrap();
        assert_eq!(r.max_rdy_count, 100);
        assert!(r.snappy);
        assert_eq!(r.version, "1.3.0");
        assert_eq!(r.msg_timeout(), Duration::from_secs(60));
        let r = IdentifyResponse::parse(br#"{"max_rdy_count":5000000000}"#).unwrap();
        assert_eq!(r.max_rdy_count, 5_000_000_000);
        assert_eq!(r.max_msg_timeout, 900_000);
        assert!(IdentifyResponse::parse(b"{").is_err());
        assert!(IdentifyResponse::parse(br#"{"max_rdy_count":"x"}"#).is_err());
    }

    #[test]
    fn validation() {
        assert!(Identify::default().validate().is_ok());
        let bad = [
            Identify {
                heartbeat_interval: 999,
                ..Identify::default()
            },
            Identify {
                heartbeat_interval: -2,
                ..Identify::default()
            },
            Identify {
                output_buffer_size: 63,
                ..Identify::default()
            },
            Identify {
                output_buffer_timeout: -2,
                ..Identify::default()
            },
            Identify {
                sample_rate: 100,
                ..Identify::default()
            },
            Identify {
                sample_rate: -1,
                ..Identify::default()
            },
            Identify {
                msg_timeout: 999,
                ..Identify::default()
            },
            Identify {
                deflate_level: 10,
                ..Identify::default()
            },
            Identify {
                snappy: true,
                deflate: true,
                ..Identify::default()
            },
        ];
        for i in bad {
            assert!(
                matches!(i.validate(), Err(CommandError::InvalidIdentify(_))),
                "{i:?}"
            );
        }
        let good = Identify {
            heartbeat_interval: -1,
            output_buffer_size: -1,
            output_buffer_timeout: -1,
            sample_rate: 99,
            msg_timeout: 1000,
            deflate: true,
            deflate_level: 9,
            ..Identify::default()
        };
        assert!(good.validate().is_ok());
    }

    #[test]
    fn auth_reply() {
        let a = AuthResponse::parse(
            br#"{"identity":"bob","identity_url":"","permission_count":2,"x":1}"#,
        )
        .unwrap();
        assert_eq!(a.identity, "bob");
        assert_eq!(a.permission_count, 2);
        assert!(AuthResponse::parse(b"OK").is_err());
    }
}
