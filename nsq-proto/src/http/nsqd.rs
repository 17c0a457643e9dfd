//! nsqd's HTTP API (v1.3.0, `nsqd/http.go`): each function is one endpoint, as a [`Call`]
//! whose reply is typed. Send [`Call::request`] to nsqd's HTTP address (`--http-address`,
//! 4151 by default) and read the answer with [`Call::decode`].
//!
//! ```
//! # use nsq_proto::http::{nsqd, Response};
//! # use nsq_proto::{Channel, Topic};
//! let topic = Topic::new("orders")?;
//! let call = nsqd::create_channel(&topic, &Channel::new("billing")?);
//! assert_eq!(call.request().target(), "/channel/create?topic=orders&channel=billing");
//! let bytes = call.request().encode("127.0.0.1:4151"); // write these, read the answer
//! let refused = Response {
//!     status: 404,
//!     content_type: None,
//!     body: br#"{"message":"TOPIC_NOT_FOUND"}"#.to_vec(),
//! };
//! assert!(call.decode(&refused).unwrap_err().is_not_found());
//! # let _ = bytes;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{ApiError, Call, Method, Request, Response, check_status};
use crate::names::{Channel, Topic};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `GET /ping`: `OK` while nsqd is healthy (an error status with its health message else).
pub fn ping() -> Call<()> {
    Call::unit(Request::new(Method::Get, "/ping", &[]))
}

/// `GET /info`: version, addresses and limits.
pub fn info() -> Call<Info> {
    Call::json(Request::new(Method::Get, "/info", &[]))
}

/// `POST /pub?topic=`: publishes one message.
pub fn publish(topic: &Topic, body: impl Into<Vec<u8>>) -> Call<()> {
    Call::unit(Request::new(Method::Post, "/pub", &[("topic", topic.as_str())]).with_body(body))
}

/// `POST /pub?topic=&defer=`: publishes one message delivered after `delay` (whole
/// milliseconds).
pub fn deferred_publish(topic: &Topic, delay: Duration, body: impl Into<Vec<u8>>) -> Call<()> {
    let ms = delay.as_millis().to_string();
    let query = [("topic", topic.as_str()), ("defer", ms.as_str())];
    Call::unit(Request::new(Method::Post, "/pub", &query).with_body(body))
}

/// `POST /mpub?topic=&binary=true`: publishes several messages atomically, in the binary
/// form (a message count, then each message's size and bytes: bodies may hold newlines).
pub fn multi_publish<I, B>(topic: &Topic, bodies: I) -> Call<()>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let mut body = vec![0; 4];
    let mut count: u32 = 0;
    for b in bodies {
        let b = b.as_ref();
        body.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
        body.extend_from_slice(b);
        count = count.saturating_add(1);
    }
    body[..4].copy_from_slice(&count.to_be_bytes());
    let query = [("topic", topic.as_str()), ("binary", "true")];
    Call::unit(Request::new(Method::Post, "/mpub", &query).with_body(body))
}

/// What `GET /stats` covers: everything by default; one topic, one channel, without the
/// clients or the memory figures when asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsQuery {
    topic: Option<Topic>,
    channel: Option<Channel>,
    include_clients: Option<bool>,
    include_mem: Option<bool>,
}

impl StatsQuery {
    /// Everything: every topic and channel, their clients, the producers and memory.
    pub fn new() -> StatsQuery {
        StatsQuery::default()
    }

    /// Only `topic`.
    #[must_use]
    pub fn topic(mut self, topic: &Topic) -> StatsQuery {
        self.topic = Some(topic.clone());
        self
    }

    /// Only `channel` (of the [`topic`](Self::topic), or of every topic that has one of
    /// that name).
    #[must_use]
    pub fn channel(mut self, channel: &Channel) -> StatsQuery {
        self.channel = Some(channel.clone());
        self
    }

    /// With each channel's clients and the producers (nsqd's default: yes).
    #[must_use]
    pub fn include_clients(mut self, yes: bool) -> StatsQuery {
        self.include_clients = Some(yes);
        self
    }

    /// With nsqd's memory figures (nsqd's default: yes).
    #[must_use]
    pub fn include_mem(mut self, yes: bool) -> StatsQuery {
        self.include_mem = Some(yes);
        self
    }
}

/// `GET /stats?format=json`: topics, channels, clients, producers, memory.
pub fn stats(query: &StatsQuery) -> Call<Stats> {
    let mut params: Vec<(&str, &str)> = vec![("format", "json")];
    if let Some(t) = &query.topic {
        params.push(("topic", t.as_str()));
    }
    if let Some(c) = &query.channel {
        params.push(("channel", c.as_str()));
    }
    let flag = |b: bool| if b { "true" } else { "false" };
    if let Some(b) = query.include_clients {
        params.push(("include_clients", flag(b)));
    }
    if let Some(b) = query.include_mem {
        params.push(("include_mem", flag(b)));
    }
    Call::json(Request::new(Method::Get, "/stats", &params))
}

fn topic_call(path: &str, topic: &Topic) -> Call<()> {
    Call::unit(Request::new(
        Method::Post,
        path,
        &[("topic", topic.as_str())],
    ))
}

fn channel_call(path: &str, topic: &Topic, channel: &Channel) -> Call<()> {
    let query = [("topic", topic.as_str()), ("channel", channel.as_str())];
    Call::unit(Request::new(Method::Post, path, &query))
}

/// `POST /topic/create`: creates the topic (nothing if it exists).
pub fn create_topic(topic: &Topic) -> Call<()> {
    topic_call("/topic/create", topic)
}

/// `POST /topic/delete`: deletes the topic, its channels and their messages.
pub fn delete_topic(topic: &Topic) -> Call<()> {
    topic_call("/topic/delete", topic)
}

/// `POST /topic/empty`: drops the topic's queued messages (not its channels').
pub fn empty_topic(topic: &Topic) -> Call<()> {
    topic_call("/topic/empty", topic)
}

/// `POST /topic/pause`: messages stay in the topic, none reach its channels.
pub fn pause_topic(topic: &Topic) -> Call<()> {
    topic_call("/topic/pause", topic)
}

/// `POST /topic/unpause`.
pub fn unpause_topic(topic: &Topic) -> Call<()> {
    topic_call("/topic/unpause", topic)
}

/// `POST /channel/create`: creates the channel (`TOPIC_NOT_FOUND` without its topic).
pub fn create_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    channel_call("/channel/create", topic, channel)
}

/// `POST /channel/delete`.
pub fn delete_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    channel_call("/channel/delete", topic, channel)
}

/// `POST /channel/empty`: drops the channel's queued and in-flight messages.
pub fn empty_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    channel_call("/channel/empty", topic, channel)
}

/// `POST /channel/pause`: the channel delivers nothing until unpaused.
pub fn pause_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    channel_call("/channel/pause", topic, channel)
}

/// `POST /channel/unpause`.
pub fn unpause_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    channel_call("/channel/unpause", topic, channel)
}

/// `GET /config/:opt`: an option's current value. nsqd answers a string option in plain
/// text (read as a JSON string here) and every other one in JSON (`log_level` is a number:
/// 1 debug ... 5 fatal).
pub fn get_config(option: &str) -> Call<serde_json::Value> {
    Call::new(
        Request::new(Method::Get, &config_path(option), &[]),
        decode_config,
    )
}

/// A `/config` reply: JSON when nsqd says so (`Content-Type: application/json`), else the
/// option's text.
fn decode_config(response: &Response) -> Result<serde_json::Value, ApiError> {
    check_status(response)?;
    let is_json = response
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/json"));
    if is_json {
        return super::call::decode_json(response);
    }
    match std::str::from_utf8(&response.body) {
        Ok(text) => Ok(serde_json::Value::String(text.to_owned())),
        Err(e) => Err(ApiError::BadReply {
            error: e.to_string(),
            body: String::new(),
        }),
    }
}

/// `PUT /config/:opt`: changes an option at run time and returns its new value. nsqd
/// v1.3.0 takes two: `nsqlookupd_tcp_addresses` (a JSON array of `host:port`,
/// [`set_lookupd_tcp_addresses`]) and `log_level` (a level name, [`set_log_level`]).
pub fn set_config(option: &str, body: impl Into<Vec<u8>>) -> Call<serde_json::Value> {
    Call::new(
        Request::new(Method::Put, &config_path(option), &[]).with_body(body),
        decode_config,
    )
}

/// `PUT /config/nsqlookupd_tcp_addresses`: the nsqlookupd nsqd registers with.
pub fn set_lookupd_tcp_addresses<S: AsRef<str>>(addresses: &[S]) -> Call<serde_json::Value> {
    let list: Vec<&str> = addresses.iter().map(AsRef::as_ref).collect();
    set_config(
        "nsqlookupd_tcp_addresses",
        serde_json::to_vec(&list).unwrap_or_default(),
    )
}

/// `PUT /config/log_level`: `debug`, `info`, `warn`, `error` or `fatal`.
pub fn set_log_level(level: &str) -> Call<serde_json::Value> {
    set_config("log_level", level)
}

fn config_path(option: &str) -> String {
    let mut path = String::from("/config/");
    super::request::percent_encode(&mut path, option);
    path
}

/// `GET /info`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Info {
    /// nsqd's version (`1.3.0`).
    pub version: String,
    /// The address nsqd asks clients to use.
    pub broadcast_address: String,
    /// nsqd's hostname.
    pub hostname: String,
    /// The HTTP port (-1 on a unix socket).
    pub http_port: i32,
    /// The TCP port (-1 on a unix socket).
    pub tcp_port: i32,
    /// When nsqd started, in seconds since the Unix epoch.
    pub start_time: i64,
    /// The largest heartbeat interval a client may ask for, in nanoseconds.
    #[serde(rename = "max_heartbeat_interval")]
    pub max_heartbeat_interval_ns: i64,
    /// The largest output buffer a client may ask for, in bytes.
    pub max_output_buffer_size: i64,
    /// The largest output buffer timeout a client may ask for, in nanoseconds.
    #[serde(rename = "max_output_buffer_timeout")]
    pub max_output_buffer_timeout_ns: i64,
    /// The largest deflate level a client may ask for.
    pub max_deflate_level: i32,
}

/// `GET /stats?format=json`: every field of nsqd v1.3.0's reply (fields a newer nsqd adds
/// are ignored).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Stats {
    /// nsqd's version.
    pub version: String,
    /// `OK`, or why nsqd is unhealthy.
    pub health: String,
    /// When nsqd started, in seconds since the Unix epoch.
    pub start_time: i64,
    /// The topics asked for, by name.
    #[serde(deserialize_with = "super::null_as_default")]
    pub topics: Vec<TopicStats>,
    /// nsqd's memory figures (absent with `include_mem=false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The clients connected as producers (empty with `include_clients=false`).
    #[serde(deserialize_with = "super::null_as_default")]
    pub producers: Vec<ClientStats>,
}

/// One topic of [`Stats`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct TopicStats {
    /// The topic.
    pub topic_name: String,
    /// Its channels, by name.
    #[serde(deserialize_with = "super::null_as_default")]
    pub channels: Vec<ChannelStats>,
    /// Messages queued (memory and disk).
    pub depth: i64,
    /// Messages queued on disk.
    pub backend_depth: i64,
    /// Messages published to it since nsqd started.
    pub message_count: u64,
    /// Bytes published to it since nsqd started.
    pub message_bytes: u64,
    /// Whether it is paused.
    pub paused: bool,
    /// End-to-end processing latency over its channels.
    pub e2e_processing_latency: E2eLatency,
}

/// One channel of a [`TopicStats`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ChannelStats {
    /// The channel.
    pub channel_name: String,
    /// Messages queued (memory and disk).
    pub depth: i64,
    /// Messages queued on disk.
    pub backend_depth: i64,
    /// Messages sent to a client and not yet answered.
    pub in_flight_count: i64,
    /// Messages deferred (published with a delay, or requeued with one).
    pub deferred_count: i64,
    /// Messages that reached the channel since nsqd started.
    pub message_count: u64,
    /// Requeues.
    pub requeue_count: u64,
    /// Messages that timed out in flight.
    pub timeout_count: u64,
    /// Clients subscribed.
    pub client_count: i64,
    /// Those clients (empty with `include_clients=false`).
    #[serde(deserialize_with = "super::null_as_default")]
    pub clients: Vec<ClientStats>,
    /// Whether it is paused.
    pub paused: bool,
    /// End-to-end processing latency.
    pub e2e_processing_latency: E2eLatency,
}

/// One client connection: a consumer in [`ChannelStats::clients`], a producer in
/// [`Stats::producers`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ClientStats {
    /// The client's `client_id` (IDENTIFY).
    pub client_id: String,
    /// The client's `hostname` (IDENTIFY).
    pub hostname: String,
    /// The protocol version (`V2`).
    pub version: String,
    /// The client's address as nsqd sees it.
    pub remote_address: String,
    /// The connection's state (nsqd's `stateInit` 0 ... `stateClosing` 4; 3 subscribed).
    pub state: i32,
    /// Its RDY count.
    pub ready_count: i64,
    /// Messages in flight to it.
    pub in_flight_count: i64,
    /// Messages sent to it.
    pub message_count: u64,
    /// FINs received from it.
    pub finish_count: u64,
    /// REQs received from it.
    pub requeue_count: u64,
    /// When it connected, in seconds since the Unix epoch.
    #[serde(rename = "connect_ts")]
    pub connect_time: i64,
    /// Its sample rate (IDENTIFY), 0 for none.
    pub sample_rate: i32,
    /// Whether it negotiated deflate.
    pub deflate: bool,
    /// Whether it negotiated snappy.
    pub snappy: bool,
    /// Its `user_agent` (IDENTIFY).
    pub user_agent: String,
    /// Whether it authenticated (with `--auth-http-address`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub authed: bool,
    /// The identity the auth server gave it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub auth_identity: String,
    /// The URL of that identity.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub auth_identity_url: String,
    /// Messages it published, per topic (producers only).
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "super::null_as_default"
    )]
    pub pub_counts: Vec<PubCount>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The TLS cipher suite.
    pub tls_cipher_suite: String,
    /// The TLS version.
    pub tls_version: String,
    /// The negotiated application protocol (ALPN).
    pub tls_negotiated_protocol: String,
    /// Whether that protocol was mutually agreed.
    pub tls_negotiated_protocol_is_mutual: bool,
}

/// Messages a producer published to one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PubCount {
    /// The topic.
    pub topic: String,
    /// Messages published to it.
    pub count: u64,
}

/// End-to-end processing latency (publish to FIN) at nsqd's configured percentiles
/// (`--e2e-processing-latency-percentile`; none by default).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct E2eLatency {
    /// Messages measured.
    pub count: u64,
    /// One value per configured percentile.
    #[serde(deserialize_with = "super::null_as_default")]
    pub percentiles: Vec<Percentile>,
}

/// One percentile of an [`E2eLatency`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Percentile {
    /// The percentile, as a fraction (`0.99`).
    pub quantile: f64,
    /// The latency at it, in nanoseconds.
    pub value: f64,
}

/// nsqd's memory figures (Go's runtime).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct MemoryStats {
    /// Objects on the heap.
    pub heap_objects: u64,
    /// Heap bytes idle.
    pub heap_idle_bytes: u64,
    /// Heap bytes in use.
    pub heap_in_use_bytes: u64,
    /// Heap bytes returned to the OS.
    pub heap_released_bytes: u64,
    /// The longest GC pause, in microseconds.
    pub gc_pause_usec_100: u64,
    /// The 99th percentile GC pause, in microseconds.
    pub gc_pause_usec_99: u64,
    /// The 95th percentile GC pause, in microseconds.
    pub gc_pause_usec_95: u64,
    /// The heap size of the next GC.
    pub next_gc_bytes: u64,
    /// GC runs.
    pub gc_total_runs: u32,
}
