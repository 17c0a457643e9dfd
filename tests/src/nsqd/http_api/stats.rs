//! `/stats`: nsqd's JSON (in Go's field order) and its text rendering.

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::http::{Request, Response, civil_from_days};
use crate::model::Flow;
use crate::nsqd::latency::LatencyResult;
use crate::nsqd::stats::{ClientId, ClientState};
use crate::nsqd::{Client, Inner, State};

use super::{HttpResult, bool_param, params};

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
pub(super) fn cipher_suite_name(suite: u16) -> String {
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
pub(super) fn tls_version_name(v: u16) -> String {
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
pub(super) fn go_duration(d: Duration) -> String {
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
pub(super) fn rfc3339(unix: u64) -> String {
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
    /// `/stats`: `format=json` gives nsqd's JSON, anything else its text rendering.
    pub(super) fn http_stats(&self, req: &Request) -> HttpResult {
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
}
