//! nsqd's HTTP API subset (`/ping`, `/info`, `/pub`, `/mpub`, topic and channel
//! create/delete, `/stats`), with nsqd's methods, checks and error texts.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::{Request, Response};
use crate::util::is_valid_name;

use super::{InfoReply, Inner};

impl Inner {
    /// nsqd's HTTP API subset, with nsqd's methods, checks in nsqd's order and error texts.
    pub(super) fn handle_http(&self, req: &Request) -> Response {
        // getTopicFromQuery (gets, so creates, the topic).
        let topic_param = |req: &Request| -> Result<String, Response> {
            let t = req
                .param("topic")
                .ok_or_else(|| Response::message(400, "MISSING_ARG_TOPIC"))?;
            if !is_valid_name(t.as_bytes()) {
                return Err(Response::message(400, "INVALID_TOPIC"));
            }
            Ok(t.to_owned())
        };
        // GetTopicChannelArgs, then GetExistingTopic.
        let existing_topic_channel = |req: &Request| -> Result<(String, String), Response> {
            let t = req
                .param("topic")
                .ok_or_else(|| Response::message(400, "MISSING_ARG_TOPIC"))?;
            if !is_valid_name(t.as_bytes()) {
                return Err(Response::message(400, "INVALID_ARG_TOPIC"));
            }
            let c = req
                .param("channel")
                .ok_or_else(|| Response::message(400, "MISSING_ARG_CHANNEL"))?;
            if !is_valid_name(c.as_bytes()) {
                return Err(Response::message(400, "INVALID_ARG_CHANNEL"));
            }
            if !self.lock().topics.contains_key(t) {
                return Err(Response::message(404, "TOPIC_NOT_FOUND"));
            }
            Ok((t.to_owned(), c.to_owned()))
        };
        let route = match req.path.as_str() {
            p @ ("/ping" | "/info" | "/stats") => Some(("GET", p)),
            p @ ("/pub" | "/mpub" | "/topic/create" | "/topic/delete" | "/channel/create"
            | "/channel/delete") => Some(("POST", p)),
            _ => None,
        };
        let path = match route {
            None => return Response::message(404, "NOT_FOUND"),
            Some((method, _)) if method != req.method => {
                return Response::message(405, "METHOD_NOT_ALLOWED");
            }
            Some((_, path)) => path,
        };
        match path {
            "/ping" => Response::text(200, "OK"),
            "/info" => {
                let o = &self.opts;
                let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                Response::json(
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
                    },
                )
            }
            "/pub" => {
                if req.body.len() as i64 > self.opts.max_msg_size {
                    return Response::message(413, "MSG_TOO_BIG");
                }
                if req.body.is_empty() {
                    return Response::message(400, "MSG_EMPTY");
                }
                let topic = match topic_param(req) {
                    Ok(t) => t,
                    Err(r) => return r,
                };
                let mut st = self.lock();
                self.ensure_topic(&mut st, &topic);
                let defer = match req.param("defer").map(str::parse::<i64>) {
                    None => Duration::ZERO,
                    Some(Ok(ms))
                        if ms >= 0
                            && Duration::from_millis(ms.unsigned_abs())
                                <= self.opts.max_req_timeout =>
                    {
                        Duration::from_millis(ms.unsigned_abs())
                    }
                    Some(_) => return Response::message(400, "INVALID_DEFER"),
                };
                self.publish(
                    &mut st,
                    &topic,
                    vec![req.body.clone()],
                    defer,
                    Instant::now(),
                );
                Response::text(200, "OK")
            }
            "/mpub" => {
                if req.body.len() as i64 > self.opts.max_body_size {
                    return Response::message(413, "BODY_TOO_BIG");
                }
                let topic = match topic_param(req) {
                    Ok(t) => t,
                    Err(r) => return r,
                };
                let mut st = self.lock();
                self.ensure_topic(&mut st, &topic);
                // Text mode is the default; a value other than true/1/false/0 means binary.
                let binary = req
                    .param("binary")
                    .is_some_and(|v| !matches!(v, "false" | "0"));
                let bodies = if binary {
                    match self.read_binary_mpub(&req.body) {
                        Ok(b) => b,
                        Err(code) => return Response::message(413, code),
                    }
                } else {
                    // Empty lines are silently discarded.
                    let bodies: Vec<Vec<u8>> = req
                        .body
                        .split(|&b| b == b'\n')
                        .filter(|l| !l.is_empty())
                        .map(<[u8]>::to_vec)
                        .collect();
                    if bodies
                        .iter()
                        .any(|b| b.len() as i64 > self.opts.max_msg_size)
                    {
                        return Response::message(413, "MSG_TOO_BIG");
                    }
                    bodies
                };
                self.publish(&mut st, &topic, bodies, Duration::ZERO, Instant::now());
                Response::text(200, "OK")
            }
            "/topic/create" => {
                let topic = match topic_param(req) {
                    Ok(t) => t,
                    Err(r) => return r,
                };
                let mut st = self.lock();
                self.ensure_topic(&mut st, &topic);
                Response::text(200, "")
            }
            "/topic/delete" => {
                let Some(topic) = req.param("topic") else {
                    return Response::message(400, "MISSING_ARG_TOPIC");
                };
                if self.delete(topic, None) {
                    Response::text(200, "")
                } else {
                    Response::message(404, "TOPIC_NOT_FOUND")
                }
            }
            "/channel/create" => {
                let (topic, channel) = match existing_topic_channel(req) {
                    Ok(tc) => tc,
                    Err(r) => return r,
                };
                let mut st = self.lock();
                self.ensure_channel(&mut st, &topic, &channel, Instant::now());
                Response::text(200, "")
            }
            "/channel/delete" => {
                let (topic, channel) = match existing_topic_channel(req) {
                    Ok(tc) => tc,
                    Err(r) => return r,
                };
                if self.delete(&topic, Some(&channel)) {
                    Response::text(200, "")
                } else {
                    Response::message(404, "CHANNEL_NOT_FOUND")
                }
            }
            _ => self.http_stats(req),
        }
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

    /// `/stats`: JSON with `format=json` (a subset of nsqd's fields), otherwise a short text
    /// rendering (nsqd's text format is for humans).
    pub(super) fn http_stats(&self, req: &Request) -> Response {
        let stats = self.stats();
        if req.param("format") != Some("json") {
            let mut text = format!("nsqd v{}\n\nHealth: OK\n", self.opts.version);
            for t in &stats.topics {
                let _ = write!(
                    text,
                    "\n[{:<25}] depth: {:<5} msgs: {:<8}\n",
                    t.name, t.depth, t.message_count
                );
                for c in &t.channels {
                    let _ = writeln!(
                        text,
                        "    [{:<25}] depth: {:<5} inflt: {:<4} def: {:<4} re-q: {:<5} timeout: {:<5} msgs: {:<8}",
                        c.name,
                        c.depth,
                        c.in_flight,
                        c.deferred,
                        c.requeued,
                        c.timed_out,
                        c.message_count
                    );
                }
            }
            return Response::text(200, &text);
        }
        let topics: Vec<Value> = stats
            .topics
            .iter()
            .map(|t| {
                json!({
                    "topic_name": t.name,
                    "depth": t.depth,
                    "message_count": t.message_count,
                    "channels": t.channels.iter().map(|c| json!({
                        "channel_name": c.name,
                        "depth": c.depth,
                        "in_flight_count": c.in_flight,
                        "deferred_count": c.deferred,
                        "message_count": c.message_count,
                        "requeue_count": c.requeued,
                        "timeout_count": c.timed_out,
                        "client_count": c.clients.len(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        Response::json(
            200,
            &json!({ "version": self.opts.version, "health": "OK", "topics": topics }),
        )
    }
}
