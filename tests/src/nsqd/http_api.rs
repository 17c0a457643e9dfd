//! nsqd v1.3.0's HTTP API: `/ping`, `/info`, `/pub`, `/mpub`, `/stats`,
//! `/topic/{create,delete,empty,pause,unpause}`, `/channel/{create,delete,empty,pause,unpause}`
//! and `/config/:opt`, with nsqd's routes, checks in nsqd's order, error texts and JSON shapes.

use std::fmt::Write as _;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::http::{Query, Request, Response, Routes, civil_from_days, route};
use crate::model::Flow;
use crate::util::{default_node_id, is_valid_name};

use super::latency::{GoFloat, LatencyResult};
use super::stats::{ClientId, ClientState};
use super::{Client, InfoReply, Inner, State};

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

// ---- /stats, in Go's field order ----

/// The `/stats` answer (`format=json`).
#[derive(Serialize)]
struct StatsReply<'a> {
    version: &'a str,
    health: &'a str,
    start_time: u64,
    topics: Option<Vec<TopicJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemStats>,
    producers: Option<Vec<ClientJson>>,
}

/// nsqd's `TopicStats`.
#[derive(Serialize)]
struct TopicJson {
    topic_name: String,
    channels: Vec<ChannelJson>,
    depth: i64,
    backend_depth: i64,
    message_count: u64,
    message_bytes: u64,
    paused: bool,
    e2e_processing_latency: LatencyResult,
}

/// nsqd's `ChannelStats`.
#[derive(Serialize)]
struct ChannelJson {
    channel_name: String,
    depth: i64,
    backend_depth: i64,
    in_flight_count: usize,
    deferred_count: usize,
    message_count: u64,
    requeue_count: u64,
    timeout_count: u64,
    client_count: usize,
    clients: Option<Vec<ClientJson>>,
    paused: bool,
    e2e_processing_latency: LatencyResult,
    /// nsqd after v1.3.0 (`omitempty`): deliveries by the consumer's topology.
    #[serde(skip_serializing_if = "is_zero")]
    zone_local_msg_count: u64,
    #[serde(skip_serializing_if = "is_zero")]
    region_local_msg_count: u64,
    #[serde(skip_serializing_if = "is_zero")]
    global_msg_count: u64,
}

/// Go's `omitempty` for a count.
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// nsqd's `PubCount`.
#[derive(Serialize)]
struct PubCount {
    topic: String,
    count: u64,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_false(b: &bool) -> bool {
    !*b
}

/// nsqd's `ClientV2Stats`.
#[derive(Serialize)]
struct ClientJson {
    client_id: String,
    hostname: String,
    version: &'static str,
    remote_address: String,
    state: i32,
    ready_count: i64,
    in_flight_count: i64,
    message_count: u64,
    finish_count: u64,
    requeue_count: u64,
    connect_ts: u64,
    sample_rate: i64,
    deflate: bool,
    snappy: bool,
    user_agent: String,
    #[serde(skip_serializing_if = "is_false")]
    authed: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    auth_identity: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    auth_identity_url: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub_counts: Vec<PubCount>,
    tls: bool,
    tls_cipher_suite: String,
    tls_version: String,
    tls_negotiated_protocol: String,
    tls_negotiated_protocol_is_mutual: bool,
}

/// nsqd's `memStats` (there is no Go runtime here: all zero).
#[derive(Serialize, Default)]
struct MemStats {
    heap_objects: u64,
    heap_idle_bytes: u64,
    heap_in_use_bytes: u64,
    heap_released_bytes: u64,
    gc_pause_usec_100: u64,
    gc_pause_usec_99: u64,
    gc_pause_usec_95: u64,
    next_gc_bytes: u64,
    gc_total_runs: u32,
}

/// Go's `prettyConnectionState.GetCipherSuite` (it only names a few suites).
fn cipher_suite_name(suite: u16) -> String {
    match suite {
        0x0005 => "TLS_RSA_WITH_RC4_128_SHA".to_owned(),
        0x000a => "TLS_RSA_WITH_3DES_EDE_CBC_SHA".to_owned(),
        0x002f => "TLS_RSA_WITH_AES_128_CBC_SHA".to_owned(),
        0x0035 => "TLS_RSA_WITH_AES_256_CBC_SHA".to_owned(),
        0xc007 => "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA".to_owned(),
        0xc009 => "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA".to_owned(),
        0xc00a => "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA".to_owned(),
        0xc011 => "TLS_ECDHE_RSA_WITH_RC4_128_SHA".to_owned(),
        0xc012 => "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA".to_owned(),
        0xc013 => "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA".to_owned(),
        0xc014 => "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA".to_owned(),
        0xc02f => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned(),
        0xc02b => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".to_owned(),
        n => format!("Unknown {n}"),
    }
}

/// Go's `prettyConnectionState.GetVersion`.
fn tls_version_name(v: u16) -> String {
    match v {
        0x0301 => "TLS1.0".to_owned(),
        0x0302 => "TLS1.1".to_owned(),
        0x0303 => "TLS1.2".to_owned(),
        0x0304 => "TLS1.3".to_owned(),
        n => format!("Unknown {n}"),
    }
}

/// `clientV2.Stats(topicName)`.
fn client_json(c: &Client, f: &Flow, topic_filter: &str) -> ClientJson {
    // nsqd's loop over its pub_counts map stops after the first entry it keeps.
    let pub_counts = c
        .pub_counts
        .iter()
        .find(|(t, _)| topic_filter.is_empty() || t == topic_filter)
        .map(|(topic, count)| PubCount {
            topic: topic.clone(),
            count: *count,
        })
        .into_iter()
        .collect();
    let (mut cipher, mut version) = (String::new(), String::new());
    if let Some(session) = c.tls_session.as_ref().filter(|_| c.tls) {
        let (suite, v) = session.negotiated();
        cipher = cipher_suite_name(suite.unwrap_or(0));
        version = tls_version_name(v.unwrap_or(0));
    }
    ClientJson {
        client_id: c.client_id.clone(),
        hostname: c.hostname.clone(),
        version: "V2",
        remote_address: c.remote.to_string(),
        state: match f.state {
            ClientState::Init => 0,
            ClientState::Subscribed => 3,
            ClientState::Closing => 4,
        },
        ready_count: f.rdy,
        in_flight_count: f.in_flight,
        message_count: f.delivered,
        finish_count: f.finished,
        requeue_count: f.requeued,
        connect_ts: c.connect_ts,
        sample_rate: c.sample_rate,
        deflate: c.deflate.is_some(),
        snappy: c.snappy,
        user_agent: c.user_agent.clone(),
        authed: c
            .auth
            .as_ref()
            .is_some_and(|a| !a.authorizations.is_empty()),
        auth_identity: c
            .auth
            .as_ref()
            .map(|a| a.identity.clone())
            .unwrap_or_default(),
        auth_identity_url: c
            .auth
            .as_ref()
            .map(|a| a.identity_url.clone())
            .unwrap_or_default(),
        pub_counts,
        tls: c.tls,
        tls_cipher_suite: cipher,
        tls_version: version,
        tls_negotiated_protocol: String::new(),
        // Go has reported true for every TLS connection since 1.17.
        tls_negotiated_protocol_is_mutual: c.tls,
    }
}

/// Go's `time.Duration.String`.
fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_owned();
    }
    let frac = |value: u128, unit: u128, digits: usize| -> String {
        let mut s = format!("{}", value / unit);
        let rest = value % unit;
        if rest > 0 {
            let f = format!("{rest:0digits$}");
            s.push('.');
            s.push_str(f.trim_end_matches('0'));
        }
        s
    };
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns, 1_000, 3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns, 1_000_000, 6));
    }
    let secs = ns / 1_000_000_000;
    let (h, m) = (secs / 3600, secs / 60 % 60);
    let mut out = String::new();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(out, "{m}m");
    }
    let s = frac(ns % 60_000_000_000, 1_000_000_000, 9);
    let _ = write!(out, "{s}s");
    out
}

/// RFC 3339 in UTC, as Go formats `start_time` on a UTC host.
fn rfc3339(unix: u64) -> String {
    let (y, m, d) = civil_from_days((unix / 86_400) as i64);
    let tod = unix % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        tod / 3600,
        tod / 60 % 60,
        tod % 60
    )
}

/// `ClientV2Stats.String`.
fn client_line(c: &ClientJson, now: u64) -> String {
    let connected = go_duration(Duration::from_secs(now.saturating_sub(c.connect_ts)));
    let port = c.remote_address.rsplit(':').next().unwrap_or("");
    let id = format!("{}:{port} {}", c.hostname, c.user_agent);
    if !c.pub_counts.is_empty() {
        let total: u64 = c.pub_counts.iter().map(|p| p.count).sum();
        let topics: Vec<String> = c
            .pub_counts
            .iter()
            .map(|p| format!("{}={}", p.topic, p.count))
            .collect();
        return format!(
            "[{} {id:<21}] msgs: {total:<8} topics: {} connected: {connected}",
            c.version,
            topics.join(",")
        );
    }
    format!(
        "[{} {id:<21}] state: {} inflt: {:<4} rdy: {:<4} fin: {:<8} re-q: {:<8} msgs: {:<8} connected: {connected}",
        c.version,
        c.state,
        c.in_flight_count,
        c.ready_count,
        c.finish_count,
        c.requeue_count,
        c.message_count,
    )
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

    fn check_exiting(&self) -> Result<(), Response> {
        if self.fail_publishes.load(Ordering::SeqCst) {
            return Err(err(503, "EXITING"));
        }
        Ok(())
    }

    fn http_pub(&self, req: &Request) -> HttpResult {
        let max = self.opts.max_msg_size;
        if req.content_length.is_some_and(|n| n > max as u64) {
            return Err(err(413, "MSG_TOO_BIG"));
        }
        if req.body.len() as i64 > max {
            return Err(err(413, "MSG_TOO_BIG"));
        }
        if req.body.is_empty() {
            return Err(err(400, "MSG_EMPTY"));
        }
        let (q, topic) = self.topic_from_query(req)?;
        let mut defer = Duration::ZERO;
        if let Some(ds) = q.get("defer") {
            let ms: i64 = ds.parse().map_err(|_| err(400, "INVALID_DEFER"))?;
            // time.Duration(di) * time.Millisecond, overflow and all.
            let ns = ms.wrapping_mul(1_000_000);
            if ns < 0 || ns > nanos(self.opts.max_req_timeout) {
                return Err(err(400, "INVALID_DEFER"));
            }
            defer = Duration::from_nanos(ns.unsigned_abs());
        }
        self.check_exiting()?;
        let mut st = self.lock();
        self.publish(
            &mut st,
            &topic,
            vec![req.body.clone()],
            defer,
            Instant::now(),
        );
        Ok(Response::v1_text("OK"))
    }

    fn http_mpub(&self, req: &Request) -> HttpResult {
        let max_body = self.opts.max_body_size;
        if req.content_length.is_some_and(|n| n > max_body as u64) {
            return Err(err(413, "BODY_TOO_BIG"));
        }
        let (q, topic) = self.topic_from_query(req)?;
        // Text mode is the default; a value other than true/1/false/0 means binary.
        let binary = q
            .get("binary")
            .is_some_and(|v| bool_param(Some(v)) != Some(false));
        let bodies = if binary {
            self.read_binary_mpub(&req.body)
                .map_err(|code| err(413, code))?
        } else {
            if req.body.len() as i64 > max_body {
                return Err(err(413, "BODY_TOO_BIG"));
            }
            let mut bodies = Vec::new();
            // Empty lines are silently discarded.
            for line in req.body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if line.len() as i64 > self.opts.max_msg_size {
                    return Err(err(413, "MSG_TOO_BIG"));
                }
                bodies.push(line.to_vec());
            }
            bodies
        };
        self.check_exiting()?;
        let mut st = self.lock();
        self.publish(&mut st, &topic, bodies, Duration::ZERO, Instant::now());
        Ok(Response::v1_text("OK"))
    }

    /// nsqd's `readMPUB` over an HTTP body; the error is the code without `E_`.
    pub(super) fn read_binary_mpub(&self, mut body: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, rest) = body.split_at_checked(n)?;
            body = rest;
            Some(head)
        };
        let len = |b: &[u8]| i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let count = take(4).map(len).ok_or("BAD_BODY")?;
        if count <= 0 || i64::from(count) > (self.opts.max_body_size - 4) / 5 {
            return Err("BAD_BODY");
        }
        let mut bodies = Vec::new();
        for _ in 0..count {
            let size = take(4).map(len).ok_or("BAD_MESSAGE")?;
            if size <= 0 || i64::from(size) > self.opts.max_msg_size {
                return Err("BAD_MESSAGE");
            }
            let size = usize::try_from(size).map_err(|_| "BAD_MESSAGE")?;
            bodies.push(take(size).ok_or("BAD_MESSAGE")?.to_vec());
        }
        Ok(bodies)
    }

    fn http_topic_create(&self, req: &Request) -> HttpResult {
        self.topic_from_query(req)?;
        Ok(Response::v1_empty())
    }

    fn http_topic_delete(&self, req: &Request) -> HttpResult {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
        if !self.delete(topic, None) {
            return Err(err(404, "TOPIC_NOT_FOUND"));
        }
        Ok(Response::v1_empty())
    }

    fn http_topic_empty(&self, req: &Request) -> HttpResult {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
        if !is_valid_name(topic.as_bytes()) {
            return Err(err(400, "INVALID_TOPIC"));
        }
        if !self.empty_topic(topic) {
            return Err(err(404, "TOPIC_NOT_FOUND"));
        }
        Ok(Response::v1_empty())
    }

    fn http_topic_pause(&self, req: &Request, pause: bool) -> HttpResult {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
        if !self.pause_topic(topic, pause) {
            return Err(err(404, "TOPIC_NOT_FOUND"));
        }
        Ok(Response::v1_empty())
    }

    /// The channel endpoints: `getExistingTopicFromQuery`, then `action` on the channel
    /// (`Err` = 404 `CHANNEL_NOT_FOUND`); `/channel/create` gets (creates) the channel.
    fn http_channel(
        &self,
        req: &Request,
        action: impl FnOnce(&Self, &str, &str) -> Result<(), ()>,
    ) -> HttpResult {
        let q = params(req)?;
        let (topic, channel) = topic_channel_args(&q)?;
        {
            let mut st = self.lock();
            if !st.queues.topics.contains_key(&topic) {
                return Err(err(404, "TOPIC_NOT_FOUND"));
            }
            if req.path == "/channel/create" {
                self.ensure_channel(&mut st, &topic, &channel, Instant::now());
            }
        }
        action(self, &topic, &channel).map_err(|()| err(404, "CHANNEL_NOT_FOUND"))?;
        Ok(Response::v1_empty())
    }

    /// `/stats`: `format=json` gives nsqd's JSON, anything else its text rendering.
    fn http_stats(&self, req: &Request) -> HttpResult {
        let q = params(req)?;
        let json_format = q.get("format") == Some("json");
        let topic = q.get("topic").unwrap_or("");
        let channel = q.get("channel").unwrap_or("");
        let include_clients = bool_param(q.get("include_clients")).unwrap_or(true);
        let include_mem = bool_param(q.get("include_mem")).unwrap_or(true);
        let (topics, producers) = self.stats_json(topic, channel, include_clients);
        let memory = include_mem.then(MemStats::default);
        if json_format {
            return Ok(Response::v1_json(
                200,
                &StatsReply {
                    version: &self.opts.version,
                    health: "OK",
                    start_time: self.start_time,
                    topics,
                    memory,
                    producers,
                },
            ));
        }
        Ok(Response::v1_text(self.stats_text(
            topics.as_deref().unwrap_or_default(),
            producers.as_deref().unwrap_or_default(),
            memory.as_ref(),
        )))
    }

    /// `NSQD.GetStats(topic, channel, includeClients)` in JSON form: `(None, None)` for an
    /// unknown topic, as nsqd returns before it looks at producers.
    fn stats_json(
        &self,
        topic_filter: &str,
        channel_filter: &str,
        include_clients: bool,
    ) -> (Option<Vec<TopicJson>>, Option<Vec<ClientJson>>) {
        let now = Instant::now();
        let mut st = self.lock();
        let State {
            queues,
            clients,
            e2e,
            ..
        } = &mut *st;
        let (topics, flows) = (&queues.topics, &queues.flows);
        // Both a client's connection and its flow control.
        let client = |id: &ClientId| Some((clients.get(id)?, flows.get(id)?));
        if !topic_filter.is_empty() && !topics.contains_key(topic_filter) {
            return (None, None);
        }
        let quantiles = &self.opts.e2e_processing_latency_percentiles;
        let mut out = Vec::new();
        for (name, t) in topics {
            if !topic_filter.is_empty() && name != topic_filter {
                continue;
            }
            if !channel_filter.is_empty() && !t.channels.contains_key(channel_filter) {
                continue;
            }
            let mut all_samples = Vec::new();
            let mut channels = Vec::new();
            for (cname, ch) in &t.channels {
                let e2e = match e2e.get_mut(&(name.clone(), cname.clone())) {
                    Some(l) => {
                        let samples: Vec<f64> = l.samples(now).collect();
                        all_samples.extend_from_slice(&samples);
                        LatencyResult::of(samples, quantiles)
                    }
                    None => LatencyResult::none(),
                };
                if !channel_filter.is_empty() && cname != channel_filter {
                    continue;
                }
                let client_list = include_clients.then(|| {
                    ch.clients
                        .iter()
                        .filter_map(client)
                        .map(|(c, f)| client_json(c, f, topic_filter))
                        .collect()
                });
                channels.push(ChannelJson {
                    channel_name: cname.clone(),
                    depth: ch.queue.len() as i64,
                    backend_depth: 0,
                    in_flight_count: ch.in_flight.len(),
                    deferred_count: ch.deferred.len(),
                    message_count: ch.message_count,
                    requeue_count: ch.requeued,
                    timeout_count: ch.timed_out,
                    client_count: ch.clients.len(),
                    clients: client_list,
                    paused: ch.paused,
                    e2e_processing_latency: e2e,
                    zone_local_msg_count: ch.zone_local_msg_count,
                    region_local_msg_count: ch.region_local_msg_count,
                    global_msg_count: ch.global_msg_count,
                });
            }
            // The topic's quantiles merge all its channels' (nil without channels).
            let e2e = if quantiles.is_empty() || t.channels.is_empty() {
                LatencyResult::none()
            } else {
                LatencyResult::of(all_samples, quantiles)
            };
            out.push(TopicJson {
                topic_name: name.clone(),
                channels,
                depth: t.backlog.len() as i64,
                backend_depth: 0,
                message_count: t.message_count,
                message_bytes: t.message_bytes,
                paused: t.paused,
                e2e_processing_latency: e2e,
            });
        }
        let producers = include_clients
            .then(|| {
                let list: Vec<ClientJson> = clients
                    .keys()
                    .filter_map(client)
                    .filter(|(c, _)| !c.pub_counts.is_empty())
                    .map(|(c, f)| client_json(c, f, topic_filter))
                    .collect();
                // A nil slice in Go when there are none.
                (!list.is_empty()).then_some(list)
            })
            .flatten();
        (Some(out), producers)
    }

    /// nsqd's `printStats`.
    fn stats_text(
        &self,
        topics: &[TopicJson],
        producers: &[ClientJson],
        memory: Option<&MemStats>,
    ) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let uptime = now.saturating_sub(Duration::from_secs(self.start_time));
        let now = now.as_secs();
        let mut w = format!(
            "nsqd v{} (built w/rust)\nstart_time {}\nuptime {}\n\nHealth: OK\n",
            self.opts.version,
            rfc3339(self.start_time),
            go_duration(uptime)
        );
        if let Some(m) = memory {
            w.push_str("\nMemory:\n");
            for (k, v) in [
                ("heap_objects", m.heap_objects),
                ("heap_idle_bytes", m.heap_idle_bytes),
                ("heap_in_use_bytes", m.heap_in_use_bytes),
                ("heap_released_bytes", m.heap_released_bytes),
                ("gc_pause_usec_100", m.gc_pause_usec_100),
                ("gc_pause_usec_99", m.gc_pause_usec_99),
                ("gc_pause_usec_95", m.gc_pause_usec_95),
                ("next_gc_bytes", m.next_gc_bytes),
                ("gc_total_runs", u64::from(m.gc_total_runs)),
            ] {
                let _ = writeln!(w, "   {k:<25}\t{v}");
            }
        }
        if topics.is_empty() {
            w.push_str("\nTopics: None\n");
        } else {
            w.push_str("\nTopics:");
        }
        for t in topics {
            let _ = writeln!(
                w,
                "\n{}[{:<15}] depth: {:<5} be-depth: {:<5} msgs: {:<8} e2e%: {}",
                if t.paused { "*P " } else { "   " },
                t.topic_name,
                t.depth,
                t.backend_depth,
                t.message_count,
                t.e2e_processing_latency.human()
            );
            for c in &t.channels {
                let _ = writeln!(
                    w,
                    "{}[{:<25}] depth: {:<5} be-depth: {:<5} inflt: {:<4} def: {:<4} re-q: {:<5} timeout: {:<5} msgs: {:<8} e2e%: {}",
                    if c.paused { "   *P " } else { "      " },
                    c.channel_name,
                    c.depth,
                    c.backend_depth,
                    c.in_flight_count,
                    c.deferred_count,
                    c.requeue_count,
                    c.timeout_count,
                    c.message_count,
                    c.e2e_processing_latency.human()
                );
                for client in c.clients.iter().flatten() {
                    let _ = writeln!(w, "        {}", client_line(client, now));
                }
            }
        }
        if producers.is_empty() {
            w.push_str("\nProducers: None\n");
        } else {
            w.push_str("\nProducers:\n");
            for p in producers {
                let _ = writeln!(w, "   {}", client_line(p, now));
            }
        }
        w
    }

    /// `GET|PUT /config/:opt`.
    fn http_config(&self, req: &Request) -> HttpResult {
        let opt = req.param("opt").unwrap_or("");
        if req.method == "PUT" {
            let max = self.opts.max_msg_size;
            let too_big =
                req.content_length.is_some_and(|n| n > max as u64) || req.body.len() as i64 > max;
            if too_big || req.body.is_empty() {
                return Err(err(413, "INVALID_VALUE"));
            }
            let mut config = self.config.lock().unwrap_or_else(PoisonError::into_inner);
            match opt {
                "nsqlookupd_tcp_addresses" => {
                    // json.Unmarshal into a []string (null makes it nil).
                    let text = String::from_utf8_lossy(&req.body);
                    let v: Option<Vec<String>> =
                        serde_json::from_str(&text).map_err(|_| err(400, "INVALID_VALUE"))?;
                    config.nsqlookupd_tcp_addresses = v;
                }
                "log_level" => {
                    let level = match String::from_utf8_lossy(&req.body).to_lowercase().as_str() {
                        "debug" => 1,
                        "info" => 2,
                        "warn" => 3,
                        "error" => 4,
                        "fatal" => 5,
                        _ => return Err(err(400, "INVALID_VALUE")),
                    };
                    config.log_level = level;
                }
                _ => return Err(err(400, "INVALID_OPTION")),
            }
        }
        match self.config_value(opt) {
            Some(Value::String(s)) => Ok(Response::v1_text(s)),
            Some(v) => Ok(Response::v1_raw_json(200, v.to_string().into_bytes())),
            None => Err(err(400, "INVALID_OPTION")),
        }
    }

    /// `getOptByCfgName`: the value of an nsqd option by its config name (strings are
    /// answered as text, everything else as JSON, like nsqd does).
    fn config_value(&self, name: &str) -> Option<Value> {
        let o = &self.opts;
        let config = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        let http_port = self.http_port.load(Ordering::SeqCst);
        let d = |d: Duration| json!(nanos(d));
        let statsd_host = format!("{}_{http_port}", o.broadcast_address).replace(['.', ':'], "_");
        Some(match name {
            "id" => json!(default_node_id(&o.hostname)),
            "log_level" => json!(config.log_level),
            "log_prefix" => json!("[nsqd] "),
            "tcp_address" => json!(self.addr.to_string()),
            "http_address" => json!(format!("127.0.0.1:{http_port}")),
            "https_address" => json!("0.0.0.0:4152"),
            "broadcast_address" => json!(o.broadcast_address),
            "broadcast_tcp_port" => json!(self.addr.port()),
            "broadcast_http_port" => json!(http_port),
            "nsqlookupd_tcp_addresses" => json!(config.nsqlookupd_tcp_addresses),
            "auth_http_addresses" => json!([]),
            "http_client_connect_timeout" | "sync_timeout" => d(Duration::from_secs(2)),
            "http_client_request_timeout" => d(Duration::from_secs(5)),
            "data_path"
            | "statsd_address"
            | "tls_cert"
            | "tls_key"
            | "tls_client_auth_policy"
            | "tls_root_ca_file" => json!(""),
            "mem_queue_size" => json!(10_000),
            "max_bytes_per_file" => json!(104_857_600),
            "sync_every" => json!(2500),
            "queue_scan_selection_count" => json!(20),
            "queue_scan_worker_pool_max" => json!(4),
            "msg_timeout" => d(o.msg_timeout),
            "max_msg_timeout" => d(o.max_msg_timeout),
            "max_msg_size" => json!(o.max_msg_size),
            "max_body_size" => json!(o.max_body_size),
            "max_req_timeout" => d(o.max_req_timeout),
            "max_heartbeat_interval" => d(o.max_heartbeat_interval),
            "max_rdy_count" => json!(o.max_rdy_count),
            "max_output_buffer_size" => json!(o.max_output_buffer_size),
            "max_output_buffer_timeout" => d(o.max_output_buffer_timeout),
            "min_output_buffer_timeout" => d(o.min_output_buffer_timeout),
            "output_buffer_timeout" => d(o.output_buffer_timeout),
            "max_channel_consumers" => json!(o.max_channel_consumers),
            "statsd_prefix" => json!(format!("nsq.{statsd_host}.")),
            "statsd_interval" => d(Duration::from_secs(60)),
            "statsd_mem_stats" => json!(true),
            "statsd_udp_packet_size" => json!(508),
            "statsd_exclude_ephemeral" => json!(false),
            "e2e_processing_latency_window_time" => d(o.e2e_processing_latency_window_time),
            "e2e_processing_latency_percentiles" => serde_json::to_value(
                o.e2e_processing_latency_percentiles
                    .iter()
                    .map(|&f| GoFloat(f))
                    .collect::<Vec<_>>(),
            )
            .ok()?,
            "tls_required" => json!(if o.tls_required { 2 } else { 0 }),
            "tls_min_version" => json!(0x0301),
            "deflate" => json!(o.deflate),
            "max_deflate_level" => json!(o.max_deflate_level),
            "snappy" => json!(o.snappy),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
