//! nsqd v1.3.0's HTTP API: `/ping`, `/info`, `/pub`, `/mpub`, `/stats`,
//! `/topic/{create,delete,empty,pause,unpause}`, `/channel/{create,delete,empty,pause,unpause}`
//! and `/config/:opt`, with nsqd's routes, checks in nsqd's order, error texts and JSON shapes.
//!
//! Here: the routes, the query checks the endpoints share, `/ping` and `/info`; the endpoint
//! families are in [`publish`], [`topics`] (topics and channels), [`stats`] and [`config`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::http::{Query, Request, Response, Routes, route};
use crate::util::is_valid_name;

use super::{InfoReply, Inner};

mod config;
mod publish;
mod stats;
mod topics;

/// nsqd's routes (pprof and the other debug routes left out).
const ROUTES: &Routes = &[
    ("GET", "/ping"),
    ("GET", "/info"),
    ("POST", "/pub"),
    ("POST", "/mpub"),
    ("GET", "/stats"),
    ("POST", "/topic/create"),
    ("POST", "/topic/delete"),
    ("POST", "/topic/empty"),
    ("POST", "/topic/pause"),
    ("POST", "/topic/unpause"),
    ("POST", "/channel/create"),
    ("POST", "/channel/delete"),
    ("POST", "/channel/empty"),
    ("POST", "/channel/pause"),
    ("POST", "/channel/unpause"),
    ("GET", "/config/:opt"),
    ("PUT", "/config/:opt"),
];

/// nsqd's `boolParams`.
fn bool_param(v: Option<&str>) -> Option<bool> {
    match v? {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

type HttpResult = Result<Response, Response>;

fn err(status: u16, msg: &str) -> Response {
    Response::v1_err(status, msg)
}

/// `NewReqParams`: the query, or 400 `INVALID_REQUEST`.
fn params(req: &Request) -> Result<Query, Response> {
    req.query().map_err(|_| err(400, "INVALID_REQUEST"))
}

/// `GetTopicChannelArgs`.
fn topic_channel_args(q: &Query) -> Result<(String, String), Response> {
    let t = q
        .get("topic")
        .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
    if !is_valid_name(t.as_bytes()) {
        return Err(err(400, "INVALID_ARG_TOPIC"));
    }
    let c = q
        .get("channel")
        .ok_or_else(|| err(400, "MISSING_ARG_CHANNEL"))?;
    if !is_valid_name(c.as_bytes()) {
        return Err(err(400, "INVALID_ARG_CHANNEL"));
    }
    Ok((t.to_owned(), c.to_owned()))
}

impl Inner {
    /// nsqd's HTTP API, with nsqd's routes, checks in nsqd's order and error texts.
    pub(super) fn handle_http(&self, req: &mut Request) -> Response {
        if self.opts.tls_required {
            // `--tls-required=true` makes the plain HTTP server refuse everything; this
            // stand-in serves no HTTPS, hence the port 0.
            return Response::v1_raw_json(
                403,
                br#"{"message": "TLS_REQUIRED", "https_port": 0}"#.to_vec(),
            );
        }
        let path = match route(ROUTES, req) {
            Ok(i) => ROUTES[i].1,
            Err(resp) => return resp,
        };
        let result = match path {
            "/ping" => Ok(Response::plain(200, "OK")),
            "/info" => Ok(self.http_info()),
            "/pub" => self.http_pub(req),
            "/mpub" => self.http_mpub(req),
            "/stats" => self.http_stats(req),
            "/topic/create" => self.http_topic_create(req),
            "/topic/delete" => self.http_topic_delete(req),
            "/topic/empty" => self.http_topic_empty(req),
            "/topic/pause" => self.http_topic_pause(req, true),
            "/topic/unpause" => self.http_topic_pause(req, false),
            "/channel/create" => self.http_channel(req, |_, _, _| Ok(())),
            "/channel/delete" => self.http_channel(req, |inner, t, c| {
                inner.delete(t, Some(c)).then_some(()).ok_or(())
            }),
            "/channel/empty" => self.http_channel(req, |inner, t, c| {
                inner.empty_channel(t, c).then_some(()).ok_or(())
            }),
            "/channel/pause" => self.http_channel(req, |inner, t, c| {
                inner.pause_channel(t, c, true).then_some(()).ok_or(())
            }),
            "/channel/unpause" => self.http_channel(req, |inner, t, c| {
                inner.pause_channel(t, c, false).then_some(()).ok_or(())
            }),
            _ => self.http_config(req),
        };
        result.unwrap_or_else(|e| e)
    }

    fn http_info(&self) -> Response {
        let o = &self.opts;
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Response::v1_json(
            200,
            &InfoReply {
                version: &o.version,
                broadcast_address: &o.broadcast_address,
                hostname: &o.hostname,
                http_port: self.http_port.load(Ordering::SeqCst),
                tcp_port: self.addr.port(),
                start_time: self.start_time,
                max_heartbeat_interval: nanos(o.max_heartbeat_interval),
                max_output_buffer_size: o.max_output_buffer_size,
                max_output_buffer_timeout: nanos(o.max_output_buffer_timeout),
                max_deflate_level: o.max_deflate_level,
                topology_zone: o.topology().then_some(o.topology_zone.as_str()),
                topology_region: o.topology().then_some(o.topology_region.as_str()),
            },
        )
    }

    /// `getTopicFromQuery`: checks the topic and gets (so creates) it.
    fn topic_from_query(&self, req: &Request) -> Result<(Query, String), Response> {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?
            .to_owned();
        if !is_valid_name(topic.as_bytes()) {
            return Err(err(400, "INVALID_TOPIC"));
        }
        self.ensure_topic(&mut self.lock(), &topic);
        Ok((q, topic))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::stats::{cipher_suite_name, go_duration, rfc3339, tls_version_name};

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(
            go_duration(Duration::from_nanos(28_013_376_138)),
            "28.013376138s"
        );
        assert_eq!(go_duration(ms(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(62)), "1m2s");
        assert_eq!(go_duration(Duration::from_secs(3605)), "1h0m5s");
        assert_eq!(go_duration(ms(12)), "12ms");
        assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(go_duration(Duration::from_nanos(1500)), "1.5µs");
        assert_eq!(go_duration(Duration::from_nanos(15)), "15ns");
        assert_eq!(rfc3339(1_795_677_285), "2026-11-26T07:14:45Z");
    }

    #[test]
    fn tls_names_are_gos() {
        assert_eq!(
            cipher_suite_name(0xc02f),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        );
        assert_eq!(cipher_suite_name(0x1301), "Unknown 4865");
        assert_eq!(tls_version_name(0x0304), "TLS1.3");
    }
}
