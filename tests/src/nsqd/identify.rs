//! IDENTIFY: decoding the client's JSON like Go does, range checks, feature negotiation and
//! the TLS / snappy / deflate upgrades in nsqd's order.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::model::frame;
use crate::transport::{RawRead, RawWrite, TlsRead, TlsShared};

use super::commands::{CmdResult, fatal, millis};
use super::stats::ClientState;
use super::{Conn, Layer, Out};
use crate::model::commands::IdentifyReply;

/// The IDENTIFY fields nsqd decodes, checked with Go's `encoding/json` typing rules.
#[derive(Default)]
pub(super) struct IdentifyData {
    pub(super) heartbeat_interval: i64,
    pub(super) output_buffer_size: i64,
    pub(super) output_buffer_timeout: i64,
    pub(super) feature_negotiation: bool,
    pub(super) tls_v1: bool,
    pub(super) deflate: bool,
    pub(super) deflate_level: i64,
    pub(super) snappy: bool,
    pub(super) sample_rate: i64,
    pub(super) msg_timeout: i64,
    pub(super) client_id: String,
    pub(super) hostname: String,
    pub(super) user_agent: String,
    pub(super) topology_region: String,
    pub(super) topology_zone: String,
}

/// A JSON document's top-level object entries in document order (`None` for `null`), which
/// is what Go's decoder walks: later keys override earlier ones, `null` leaves a field alone.
pub(super) struct JsonEntries(Option<Vec<(String, Value)>>);

impl<'de> serde::Deserialize<'de> for JsonEntries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = JsonEntries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object or null")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<JsonEntries, E> {
                Ok(JsonEntries(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<JsonEntries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(JsonEntries(Some(entries)))
            }
        }
        d.deserialize_any(Entries)
    }
}

/// The struct field a JSON key decodes into under Go's rules for ASCII field names: an
/// exact or case-insensitive match, where `ſ` (U+017F) folds to `s` and the Kelvin sign
/// (U+212A) to `k`.
pub(super) fn go_field_key(key: &str) -> Option<String> {
    key.chars()
        .map(|c| match c {
            '\u{17f}' => Some('s'),
            '\u{212a}' => Some('k'),
            c if c.is_ascii() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

impl IdentifyData {
    /// Decodes like Go's `json.Unmarshal` into nsqd's `identifyDataV2`: invalid UTF-8 becomes
    /// U+FFFD, keys match case-insensitively, unknown keys are ignored, a value of the wrong
    /// type (or out of the Go type's range) fails the whole body.
    pub(super) fn parse(body: &[u8]) -> Option<(Self, Value)> {
        let text = String::from_utf8_lossy(body);
        let JsonEntries(entries) = serde_json::from_str(&text).ok()?;
        let mut d = IdentifyData::default();
        let Some(entries) = entries else {
            return Some((d, Value::Null));
        };
        let int = |v: &Value, min: i64, max: i64| v.as_i64().filter(|n| (min..=max).contains(n));
        for (key, value) in &entries {
            if value.is_null() {
                continue;
            }
            let Some(field) = go_field_key(key) else {
                continue;
            };
            match field.as_str() {
                "client_id" => value.as_str()?.clone_into(&mut d.client_id),
                "hostname" => value.as_str()?.clone_into(&mut d.hostname),
                "user_agent" => value.as_str()?.clone_into(&mut d.user_agent),
                "topology_region" => value.as_str()?.clone_into(&mut d.topology_region),
                "topology_zone" => value.as_str()?.clone_into(&mut d.topology_zone),
                "heartbeat_interval" => d.heartbeat_interval = int(value, i64::MIN, i64::MAX)?,
                "output_buffer_size" => d.output_buffer_size = int(value, i64::MIN, i64::MAX)?,
                "output_buffer_timeout" => {
                    d.output_buffer_timeout = int(value, i64::MIN, i64::MAX)?;
                }
                "deflate_level" => d.deflate_level = int(value, i64::MIN, i64::MAX)?,
                "sample_rate" => {
                    d.sample_rate = int(value, i64::from(i32::MIN), i64::from(i32::MAX))?;
                }
                "msg_timeout" => d.msg_timeout = int(value, i64::MIN, i64::MAX)?,
                "feature_negotiation" => d.feature_negotiation = value.as_bool()?,
                "tls_v1" => d.tls_v1 = value.as_bool()?,
                "deflate" => d.deflate = value.as_bool()?,
                "snappy" => d.snappy = value.as_bool()?,
                _ => {}
            }
        }
        Some((d, Value::Object(entries.into_iter().collect())))
    }
}

impl Conn {
    pub(super) fn identify(&mut self) -> CmdResult {
        if self.state()? != ClientState::Init {
            return Err(fatal("E_INVALID", "cannot IDENTIFY in current state"));
        }
        let opts = self.inner.opts.clone();
        let len = self
            .rd
            .read_len()
            .map_err(|_| fatal("E_BAD_BODY", "IDENTIFY failed to read body size"))?;
        if i64::from(len) > opts.max_body_size {
            return Err(fatal(
                "E_BAD_BODY",
                format!("IDENTIFY body too big {len} > {}", opts.max_body_size),
            ));
        }
        if len <= 0 {
            return Err(fatal(
                "E_BAD_BODY",
                format!("IDENTIFY invalid body size {len}"),
            ));
        }
        let body = self.read_body(len, "E_BAD_BODY", "IDENTIFY failed to read body")?;
        self.body = Some(body.clone());
        let (data, json) = IdentifyData::parse(&body)
            .ok_or_else(|| fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body"))?;

        // clientV2.Identify: the names first (kept even if a check below fails), then each
        // setter in nsqd's order.
        self.with_client(|c| {
            c.client_id.clone_from(&data.client_id);
            c.hostname.clone_from(&data.hostname);
            c.user_agent.clone_from(&data.user_agent);
        })?;
        let mut heartbeat = self.heartbeat;
        match data.heartbeat_interval {
            -1 => heartbeat = None,
            0 => {}
            n if n >= 1000 && n <= millis(opts.max_heartbeat_interval) => {
                heartbeat = Some(Duration::from_millis(n as u64));
            }
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY heartbeat interval ({n}) is invalid"),
                ));
            }
        }
        let (mut obuf_size, mut obuf_timeout) =
            self.with_client(|c| (c.output_buffer_size, c.output_buffer_timeout))?;
        match data.output_buffer_timeout {
            -1 => obuf_timeout = Duration::ZERO,
            0 => {}
            n if n >= millis(opts.min_output_buffer_timeout)
                && n <= millis(opts.max_output_buffer_timeout) =>
            {
                obuf_timeout = Duration::from_millis(n as u64);
            }
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY output buffer timeout ({n}) is invalid"),
                ));
            }
        }
        match data.output_buffer_size {
            -1 => {
                obuf_size = 1;
                obuf_timeout = Duration::ZERO;
            }
            0 => {}
            n if n >= 64 && n <= opts.max_output_buffer_size => obuf_size = n,
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY output buffer size ({n}) is invalid"),
                ));
            }
        }
        if !(0..=99).contains(&data.sample_rate) {
            return Err(fatal(
                "E_BAD_BODY",
                format!("IDENTIFY sample rate ({}) is invalid", data.sample_rate),
            ));
        }
        let mut msg_timeout = self.with_flow(|f| f.msg_timeout)?;
        match data.msg_timeout {
            0 => {}
            n if n >= 1000 && n <= millis(opts.max_msg_timeout) => {
                msg_timeout = Duration::from_millis(n as u64);
            }
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY msg timeout ({n}) is invalid"),
                ));
            }
        }
        // The read deadline (twice the interval) and the write deadline (the interval)
        // follow every IDENTIFY.
        self.heartbeat = heartbeat;
        self.ctl.set_write_timeout(heartbeat);
        let first = !self.identified;
        self.identified = true;
        self.with_client_flow(|c, f| {
            c.heartbeat = heartbeat;
            c.output_buffer_size = obuf_size;
            c.output_buffer_timeout = obuf_timeout;
            c.sample_rate = data.sample_rate;
            f.msg_timeout = msg_timeout;
            if first {
                f.pump_msg_timeout = msg_timeout;
                // nsqd's message pump compares the client's topology with its own once, with
                // the experiment on (empty equals empty, as in Go).
                if opts.topology_aware_consumption {
                    f.zone_local = data.topology_zone == opts.topology_zone;
                    f.region_local = data.topology_region == opts.topology_region;
                }
            }
            c.identify = Some(json);
        })?;
        if data.output_buffer_size != 0 {
            let _ = self
                .out
                .send(Out::BufferSize(usize::try_from(obuf_size).unwrap_or(1)));
        }
        // nsqd's messagePump takes the first identify event (re-arming its heartbeat and
        // output buffer tickers, setting the timeout of deliveries) and ignores later ones.
        if first {
            let _ = self.out.send(Out::Heartbeat(heartbeat));
            let _ = self.out.send(Out::FlushTicker(
                Some(obuf_timeout).filter(|d| !d.is_zero()),
            ));
        }

        if !data.feature_negotiation {
            return Ok(Some(b"OK".to_vec()));
        }
        let tls = self.inner.tls.is_some() && data.tls_v1;
        let deflate = opts.deflate && data.deflate;
        let mut deflate_level = 6;
        if deflate && data.deflate_level > 0 {
            deflate_level = data.deflate_level;
        }
        if opts.max_deflate_level < deflate_level {
            deflate_level = opts.max_deflate_level;
        }
        let snappy = opts.snappy && data.snappy;
        if deflate && snappy {
            return Err(fatal(
                "E_IDENTIFY_FAILED",
                "cannot enable both deflate and snappy compression",
            ));
        }
        let auth_required = opts.auth.is_some();
        let reply = serde_json::to_vec(&IdentifyReply {
            max_rdy_count: opts.max_rdy_count,
            version: &opts.version,
            max_msg_timeout: millis(opts.max_msg_timeout),
            msg_timeout: millis(msg_timeout),
            tls_v1: tls,
            deflate,
            deflate_level,
            max_deflate_level: opts.max_deflate_level,
            snappy,
            sample_rate: data.sample_rate,
            auth_required,
            output_buffer_size: obuf_size,
            output_buffer_timeout: millis(obuf_timeout),
            topology_region: opts.topology().then_some(opts.topology_region.as_str()),
            topology_zone: opts.topology().then_some(opts.topology_zone.as_str()),
        })
        .map_err(|e| fatal("E_IDENTIFY_FAILED", format!("IDENTIFY failed {e}")))?;
        // The frame that precedes the next upgrade (or goes out last).
        let mut pending = frame(0, &reply);
        if tls && !self.tls {
            let config = self
                .inner
                .tls
                .clone()
                .ok_or_else(|| fatal("E_IDENTIFY_FAILED", "IDENTIFY failed no TLS"))?;
            let conn = rustls::ServerConnection::new(config)
                .map_err(|e| fatal("E_IDENTIFY_FAILED", format!("IDENTIFY failed {e}")))?;
            let clone = |s: &TcpStream| {
                s.try_clone()
                    .map_err(|e| fatal("E_IDENTIFY_FAILED", format!("IDENTIFY failed {e}")))
            };
            let raw_w = RawWrite {
                stream: clone(&self.stream)?,
                ctl: self.ctl.clone(),
            };
            let raw_r = RawRead {
                stream: clone(&self.stream)?,
                ctl: self.ctl.clone(),
            };
            let shared = TlsShared::new(conn, raw_w);
            let before = std::mem::replace(&mut pending, frame(0, b"OK"));
            let _ = self
                .out
                .send(Out::Upgrade(before, Layer::Tls(shared.clone())));
            let session = shared.clone();
            let discarded = self.rd.upgrade(|_| Box::new(TlsRead::new(shared, raw_r)));
            self.discard_check(discarded);
            self.tls = true;
            self.with_client(|c| {
                c.tls = true;
                c.tls_session = Some(session);
            })?;
            self.handshake_until = Some(Instant::now() + Duration::from_secs(5));
        }
        if snappy && !self.compressed {
            let before = std::mem::replace(&mut pending, frame(0, b"OK"));
            let _ = self.out.send(Out::Upgrade(before, Layer::Snappy));
            let discarded = self
                .rd
                .upgrade(|old| Box::new(snap::read::FrameDecoder::new(old)));
            self.discard_check(discarded);
            self.compressed = true;
            self.with_client(|c| c.snappy = true)?;
        }
        if deflate && !self.compressed {
            let level = deflate_level.clamp(0, 9) as u32;
            let before = std::mem::replace(&mut pending, frame(0, b"OK"));
            let _ = self.out.send(Out::Upgrade(before, Layer::Deflate(level)));
            let discarded = self
                .rd
                .upgrade(|old| Box::new(crate::transport::InflateReader::new(old)));
            self.discard_check(discarded);
            self.compressed = true;
            self.with_client(|c| c.deflate = Some(level))?;
        }
        let _ = self.out.send(Out::Frame(pending));
        Ok(None)
    }

    pub(super) fn discard_check(&self, discarded: usize) {
        if discarded > 0 {
            let msg = format!(
                "client {} sent {discarded} bytes after IDENTIFY before reading its reply; nsqd discards them at the upgrade",
                self.id
            );
            tracing::warn!("{msg}");
            self.inner.lock().warnings.push(msg);
        }
    }
}
