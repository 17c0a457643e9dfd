//! nsqlookupd's HTTP API (v1.3.0, `nsqlookupd/http.go`): each function is one endpoint, as a
//! [`Call`] whose reply is typed. Send [`Call::request`] to nsqlookupd's HTTP address
//! (`--http-address`, 4161 by default) and read the answer with [`Call::decode`].

use super::{ApiError, Call, Method, Request, Response, check_status};
use crate::lookup::LookupResponse;
use crate::names::{Channel, Topic};
use serde::{Deserialize, Serialize};

/// `GET /ping`: `OK`.
pub fn ping() -> Call<()> {
    Call::unit(Request::new(Method::Get, "/ping", &[]))
}

/// `GET /info`: nsqlookupd's version.
pub fn info() -> Call<LookupdInfo> {
    Call::json(Request::new(Method::Get, "/info", &[]))
}

/// `GET /lookup?topic=`: the topic's channels and the nsqd that carry it
/// (`TOPIC_NOT_FOUND` when nsqlookupd does not know it).
pub fn lookup(topic: &Topic) -> Call<LookupResponse> {
    fn decode(response: &Response) -> Result<LookupResponse, ApiError> {
        check_status(response)?;
        LookupResponse::parse(200, &response.body).map_err(|e| ApiError::BadReply {
            error: e.to_string(),
            body: super::call::excerpt(&response.body),
        })
    }
    Call::new(lookup_at("/lookup", topic), decode)
}

/// `GET {path}?topic=`: a lookup under a path prefix (a lookupd behind a proxy).
pub(crate) fn lookup_at(path: &str, topic: &Topic) -> Request {
    Request::new(Method::Get, path, &[("topic", topic.as_str())])
}

#[derive(Deserialize)]
struct TopicsReply {
    #[serde(default)]
    topics: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ChannelsReply {
    #[serde(default)]
    channels: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct NodesReply {
    #[serde(default)]
    producers: Option<Vec<Node>>,
}

/// `GET /topics`: every topic nsqlookupd knows.
pub fn topics() -> Call<Vec<String>> {
    fn decode(response: &Response) -> Result<Vec<String>, ApiError> {
        let reply: TopicsReply = super::call::decode_json(response)?;
        Ok(reply.topics.unwrap_or_default())
    }
    Call::new(Request::new(Method::Get, "/topics", &[]), decode)
}

/// `GET /channels?topic=`: the topic's channels nsqlookupd knows.
pub fn channels(topic: &Topic) -> Call<Vec<String>> {
    fn decode(response: &Response) -> Result<Vec<String>, ApiError> {
        let reply: ChannelsReply = super::call::decode_json(response)?;
        Ok(reply.channels.unwrap_or_default())
    }
    Call::new(
        Request::new(Method::Get, "/channels", &[("topic", topic.as_str())]),
        decode,
    )
}

/// `GET /nodes`: every nsqd registered with nsqlookupd, with its topics.
pub fn nodes() -> Call<Vec<Node>> {
    fn decode(response: &Response) -> Result<Vec<Node>, ApiError> {
        let reply: NodesReply = super::call::decode_json(response)?;
        Ok(reply.producers.unwrap_or_default())
    }
    Call::new(Request::new(Method::Get, "/nodes", &[]), decode)
}

/// `POST /topic/create`: registers the topic (consumers of it then find no nsqd rather than
/// `TOPIC_NOT_FOUND`).
pub fn create_topic(topic: &Topic) -> Call<()> {
    Call::unit(Request::new(
        Method::Post,
        "/topic/create",
        &[("topic", topic.as_str())],
    ))
}

/// `POST /topic/delete`: forgets the topic and its channels.
pub fn delete_topic(topic: &Topic) -> Call<()> {
    Call::unit(Request::new(
        Method::Post,
        "/topic/delete",
        &[("topic", topic.as_str())],
    ))
}

/// `POST /topic/tombstone?topic=&node=`: hides one nsqd (`node` is its
/// `broadcast_address:http_port`, as [`Node::http_address`] gives it) from the topic's
/// lookups for nsqlookupd's `tombstone_lifetime`, so it can be deleted there without
/// consumers reconnecting to it.
pub fn tombstone_topic(topic: &Topic, node: &str) -> Call<()> {
    Call::unit(Request::new(
        Method::Post,
        "/topic/tombstone",
        &[("topic", topic.as_str()), ("node", node)],
    ))
}

/// `POST /channel/create`: registers the channel (and its topic).
pub fn create_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    Call::unit(Request::new(
        Method::Post,
        "/channel/create",
        &[("topic", topic.as_str()), ("channel", channel.as_str())],
    ))
}

/// `POST /channel/delete`: forgets the channel (`CHANNEL_NOT_FOUND` if unknown).
pub fn delete_channel(topic: &Topic, channel: &Channel) -> Call<()> {
    Call::unit(Request::new(
        Method::Post,
        "/channel/delete",
        &[("topic", topic.as_str()), ("channel", channel.as_str())],
    ))
}

/// `GET /info` of nsqlookupd.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LookupdInfo {
    /// nsqlookupd's version.
    pub version: String,
}

/// One nsqd of `GET /nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Node {
    /// The address nsqlookupd saw the nsqd connect from.
    pub remote_address: String,
    /// The nsqd's hostname.
    pub hostname: String,
    /// The address the nsqd asks clients to use.
    pub broadcast_address: String,
    /// The nsqd's TCP port.
    pub tcp_port: u16,
    /// The nsqd's HTTP port.
    pub http_port: u16,
    /// The nsqd's version.
    pub version: String,
    /// Per topic of [`topics`](Self::topics): whether this nsqd is tombstoned for it.
    #[serde(deserialize_with = "super::null_as_default")]
    pub tombstones: Vec<bool>,
    /// The topics it carries.
    #[serde(deserialize_with = "super::null_as_default")]
    pub topics: Vec<String>,
}

impl Node {
    /// Its TCP address, `broadcast_address:tcp_port` (IPv6 literals bracketed).
    pub fn tcp_address(&self) -> String {
        crate::join_host_port(&self.broadcast_address, self.tcp_port)
    }

    /// Its HTTP address, `broadcast_address:http_port`: the `node` of
    /// [`tombstone_topic`], and where its own HTTP API answers.
    pub fn http_address(&self) -> String {
        crate::join_host_port(&self.broadcast_address, self.http_port)
    }
}
