//! What the semantics tests share: a POST, a topic's or a channel's `/stats` entry, a
//! subscriber, and a check that nothing is delivered.

use std::net::SocketAddr;
use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{RawClient, http_get_json, http_request};
use serde_json::Value;

pub(crate) fn post(http: SocketAddr, target: &str) -> (u16, String) {
    let (status, body) = http_request(http, "POST", target, b"").expect("HTTP");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// One channel's `/stats` entry (`Null` if it is not listed).
pub(crate) fn channel_stats(http: SocketAddr, topic: &str, channel: &str) -> Value {
    http_get_json(
        http,
        &format!("/stats?format=json&topic={topic}&channel={channel}"),
    )
    .map_or(Value::Null, |(_, v)| v["topics"][0]["channels"][0].clone())
}

pub(crate) fn topic_stats(http: SocketAddr, topic: &str) -> Value {
    http_get_json(http, &format!("/stats?format=json&topic={topic}"))
        .map_or(Value::Null, |(_, v)| v["topics"][0].clone())
}

/// A subscriber of `topic`/`channel` with `RDY rdy`.
pub(crate) fn subscriber(env: &Env, topic: &str, channel: &str, rdy: u32) -> RawClient {
    let mut c = env.raw();
    c.subscribe(topic, channel).unwrap();
    c.cmd(&format!("RDY {rdy}")).unwrap();
    c
}

/// No message frame arrives for a while (heartbeats are answered and skipped).
pub(crate) fn no_message_for(c: &mut RawClient, d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        if c.quiet_for(left).unwrap() {
            return true;
        }
        match c.read_frame().unwrap() {
            f if f.is_heartbeat() => c.cmd("NOP").unwrap(),
            f => panic!("expected nothing, got {f:?}"),
        }
    }
    true
}
