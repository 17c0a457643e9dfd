//! One nsqd with no IO: the TCP protocol V2 of plain connections (no TLS, snappy, deflate or
//! AUTH), fed with bytes and instants, over the shared [`Queues`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::queues::{AnswerError, ClientId, ClientState, Msg, Push, Queues, frame};
use crate::util::is_valid_name;

/// The nsqd flags the model follows (nsqd v1.3.0's defaults).
#[derive(Clone, Debug)]
pub struct NsqdOptions {
    /// `--msg-timeout`.
    pub msg_timeout: Duration,
    /// `--max-msg-timeout`.
    pub max_msg_timeout: Duration,
    /// `--max-req-timeout`.
    pub max_req_timeout: Duration,
    /// `--max-rdy-count`.
    pub max_rdy_count: i64,
    /// `--max-heartbeat-interval`.
    pub max_heartbeat_interval: Duration,
    /// The default heartbeat interval (30 s).
    pub heartbeat_interval: Duration,
    /// `--max-msg-size`.
    pub max_msg_size: usize,
    /// `--max-body-size`.
    pub max_body_size: usize,
    /// `--max-channel-consumers` (0: no limit).
    pub max_channel_consumers: usize,
}

impl Default for NsqdOptions {
    fn default() -> Self {
        Self {
            msg_timeout: Duration::from_secs(60),
            max_msg_timeout: Duration::from_secs(15 * 60),
            max_req_timeout: Duration::from_secs(60 * 60),
            max_rdy_count: 2500,
            max_heartbeat_interval: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(30),
            max_msg_size: 1024 * 1024,
            max_body_size: 5 * 1024 * 1024,
            max_channel_consumers: 0,
        }
    }
}

/// nsqd's IDENTIFY feature negotiation reply, fields in Go's order.
#[derive(Serialize)]
struct IdentifyReply<'a> {
    max_rdy_count: i64,
    version: &'a str,
    max_msg_timeout: i64,
    msg_timeout: i64,
    tls_v1: bool,
    deflate: bool,
    deflate_level: i64,
    max_deflate_level: i64,
    snappy: bool,
    sample_rate: i64,
    auth_required: bool,
    output_buffer_size: i64,
    output_buffer_timeout: i64,
}

/// One connection's protocol state.
#[derive(Debug)]
struct Session {
    input: Vec<u8>,
    magic: bool,
    identified: bool,
    heartbeat: Option<Duration>,
    next_heartbeat: Option<Instant>,
    last_read: Instant,
    out: Vec<u8>,
    /// Set once nsqd closes the connection (after writing `out`), with why.
    closing: Option<String>,
}

/// A fatal error: the frame is written and the connection closed.
struct Fatal(String);

fn fatal(code: &str, text: impl std::fmt::Display) -> Fatal {
    Fatal(format!("{code} {text}"))
}

fn base10(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a command left to do once parsed.
enum Step {
    /// More bytes are needed.
    Incomplete,
    /// Consumed `n` bytes.
    Done(usize),
}

/// One nsqd, IO-free: connections are fed bytes ([`Nsqd::input`]) and instants
/// ([`Nsqd::tick`]); what each connection must write is taken with [`Nsqd::take_output`].
#[derive(Debug)]
pub struct Nsqd {
    /// The flags.
    pub opts: NsqdOptions,
    /// Topics, channels and flow control.
    pub queues: Queues,
    sessions: BTreeMap<ClientId, Session>,
    next_client: ClientId,
    pushes: Vec<Push>,
    /// Unix nanoseconds at `epoch` (message timestamps are this plus the time since).
    unix_nanos_at_epoch: i64,
    epoch: Instant,
    /// Messages accepted since the last [`Nsqd::take_published`].
    published: Vec<([u8; 16], Arc<[u8]>)>,
}

impl Nsqd {
    /// An nsqd whose message ids count from `first_msg_id`; `epoch` is the instant whose Unix
    /// time is `unix_nanos_at_epoch` (message timestamps).
    pub fn new(
        opts: NsqdOptions,
        first_msg_id: u64,
        epoch: Instant,
        unix_nanos_at_epoch: i64,
    ) -> Self {
        Self {
            opts,
            queues: Queues::new(first_msg_id),
            sessions: BTreeMap::new(),
            next_client: 0,
            pushes: Vec::new(),
            unix_nanos_at_epoch,
            epoch,
            published: Vec::new(),
        }
    }

    fn unix_nanos(&self, now: Instant) -> i64 {
        let since = now.saturating_duration_since(self.epoch).as_nanos();
        self.unix_nanos_at_epoch
            .saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
    }

    /// A new connection.
    pub fn connect(&mut self, now: Instant) -> ClientId {
        self.next_client += 1;
        let id = self.next_client;
        self.queues.add_client(id, self.opts.msg_timeout);
        let hb = self.opts.heartbeat_interval;
        self.sessions.insert(
            id,
            Session {
                input: Vec::new(),
                magic: false,
                identified: false,
                heartbeat: Some(hb),
                next_heartbeat: Some(now + hb),
                last_read: now,
                out: Vec::new(),
                closing: None,
            },
        );
        id
    }

    /// The connections.
    pub fn clients(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.sessions.keys().copied()
    }

    /// The connection went away (EOF, reset): nsqd forgets the client; its in-flight
    /// messages time out later.
    pub fn disconnect(&mut self, id: ClientId) {
        self.sessions.remove(&id);
        self.queues.remove_client(id);
    }

    /// Bytes written to nsqd by client `id`.
    pub fn input(&mut self, now: Instant, id: ClientId, data: &[u8]) {
        let Some(s) = self.sessions.get_mut(&id) else {
            return;
        };
        if s.closing.is_some() {
            return;
        }
        s.last_read = now;
        s.input.extend_from_slice(data);
        let mut input = std::mem::take(&mut s.input);
        let mut at = 0;
        loop {
            match self.step(now, id, &input[at..]) {
                Ok(Step::Incomplete) => break,
                Ok(Step::Done(n)) => at += n,
                Err(Fatal(text)) => {
                    if let Some(s) = self.sessions.get_mut(&id) {
                        s.out.extend_from_slice(&frame(1, text.as_bytes()));
                        s.closing = Some(text);
                    }
                    at = input.len();
                    break;
                }
            }
            if self.sessions.get(&id).is_none_or(|s| s.closing.is_some()) {
                at = input.len();
                break;
            }
        }
        input.drain(..at);
        if let Some(s) = self.sessions.get_mut(&id) {
            s.input = input;
        }
        self.route();
    }

    /// Appends the queues' pushes to their connections' output.
    fn route(&mut self) {
        for p in self.pushes.drain(..) {
            if let Push::Message(c, m) = p {
                if let Some(s) = self.sessions.get_mut(&c) {
                    m.write_frame(&mut s.out);
                }
            }
        }
    }

    fn respond(&mut self, id: ClientId, data: &[u8]) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.out.extend_from_slice(&frame(0, data));
        }
    }

    fn error(&mut self, id: ClientId, text: &str) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.out.extend_from_slice(&frame(1, text.as_bytes()));
        }
    }

    /// Parses and runs one command from the front of `buf`.
    fn step(&mut self, now: Instant, id: ClientId, buf: &[u8]) -> Result<Step, Fatal> {
        let s = self
            .sessions
            .get_mut(&id)
            .ok_or_else(|| fatal("E_INVALID", "gone"))?;
        if !s.magic {
            if buf.len() < 4 {
                return Ok(Step::Incomplete);
            }
            if &buf[..4] != b"  V2" {
                return Err(Fatal(format!(
                    "E_BAD_PROTOCOL bad protocol magic '{}'",
                    lossy(&buf[..4])
                )));
            }
            s.magic = true;
            return Ok(Step::Done(4));
        }
        let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
            if buf.len() > 4096 {
                return Err(fatal("E_INVALID", "command line too long"));
            }
            return Ok(Step::Incomplete);
        };
        let mut line = &buf[..nl];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        let params: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let rest = &buf[nl + 1..];
        let body = |max: usize, what: &str| -> Result<Option<(&[u8], usize)>, Fatal> {
            if rest.len() < 4 {
                return Ok(None);
            }
            let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            if size <= 0 {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("{what} invalid body size {size}"),
                ));
            }
            let size = size as usize;
            if size > max {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("{what} body too big {size} > {max}"),
                ));
            }
            if rest.len() < 4 + size {
                return Ok(None);
            }
            Ok(Some((&rest[4..4 + size], nl + 1 + 4 + size)))
        };
        let line_only = nl + 1;
        match params[0] {
            b"NOP" => Ok(Step::Done(line_only)),
            b"IDENTIFY" => {
                let Some((b, used)) = body(self.opts.max_body_size, "IDENTIFY")? else {
                    return Ok(Step::Incomplete);
                };
                let b = b.to_vec();
                self.identify(id, &b)?;
                Ok(Step::Done(used))
            }
            b"SUB" => {
                self.sub(now, id, &params)?;
                Ok(Step::Done(line_only))
            }
            b"RDY" => {
                self.rdy(now, id, &params)?;
                Ok(Step::Done(line_only))
            }
            b"FIN" | b"REQ" | b"TOUCH" => {
                self.answer(now, id, &params)?;
                Ok(Step::Done(line_only))
            }
            b"CLS" => {
                if !self.queues.close_wait(id, &mut self.pushes) {
                    return Err(fatal("E_INVALID", "cannot CLS in current state"));
                }
                self.pushes.clear();
                self.respond(id, b"CLOSE_WAIT");
                Ok(Step::Done(line_only))
            }
            b"PUB" | b"DPUB" => {
                let dpub = params[0] == b"DPUB";
                let cmd = if dpub { "DPUB" } else { "PUB" };
                let Some((b, used)) = body(self.opts.max_msg_size, cmd)? else {
                    return Ok(Step::Incomplete);
                };
                let b = b.to_vec();
                self.publish_cmd(now, id, &params, vec![b], dpub)?;
                Ok(Step::Done(used))
            }
            b"MPUB" => {
                let Some((b, used)) = body(self.opts.max_body_size, "MPUB")? else {
                    return Ok(Step::Incomplete);
                };
                let bodies = self.mpub_bodies(b)?;
                self.publish_cmd(now, id, &params, bodies, false)?;
                Ok(Step::Done(used))
            }
            b"AUTH" => Err(fatal("E_AUTH_DISABLED", "AUTH disabled")),
            other => Err(fatal(
                "E_INVALID",
                format!("invalid command {}", lossy(other)),
            )),
        }
    }

    fn identify(&mut self, id: ClientId, body: &[u8]) -> Result<(), Fatal> {
        let opts = self.opts.clone();
        let s = self
            .sessions
            .get_mut(&id)
            .ok_or_else(|| fatal("E_INVALID", "gone"))?;
        if s.identified {
            return Err(fatal("E_INVALID", "cannot IDENTIFY in current state"));
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|_| fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body"))?;
        let int = |k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
        match int("heartbeat_interval") {
            -1 => {
                s.heartbeat = None;
                s.next_heartbeat = None;
            }
            0 => {}
            ms if ms >= 1000 && ms as u128 <= opts.max_heartbeat_interval.as_millis() => {
                let hb = Duration::from_millis(ms as u64);
                s.heartbeat = Some(hb);
                s.next_heartbeat = Some(s.last_read + hb);
            }
            ms => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY heartbeat interval ({ms}) is invalid"),
                ));
            }
        }
        let mut msg_timeout = opts.msg_timeout;
        match int("msg_timeout") {
            0 => {}
            ms if ms >= 1000 && ms as u128 <= opts.max_msg_timeout.as_millis() => {
                msg_timeout = Duration::from_millis(ms as u64);
            }
            ms => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY msg timeout ({ms}) is invalid"),
                ));
            }
        }
        s.identified = true;
        if let Some(f) = self.queues.flows.get_mut(&id) {
            f.msg_timeout = msg_timeout;
            f.pump_msg_timeout = msg_timeout;
        }
        let negotiate = v.get("feature_negotiation").and_then(Value::as_bool) == Some(true);
        if negotiate {
            let reply = IdentifyReply {
                max_rdy_count: opts.max_rdy_count,
                version: "1.3.0",
                max_msg_timeout: opts.max_msg_timeout.as_millis() as i64,
                msg_timeout: msg_timeout.as_millis() as i64,
                tls_v1: false,
                deflate: false,
                deflate_level: 0,
                max_deflate_level: 6,
                snappy: false,
                sample_rate: 0,
                auth_required: false,
                output_buffer_size: 16384,
                output_buffer_timeout: 250,
            };
            let json = serde_json::to_vec(&reply).unwrap_or_default();
            self.respond(id, &json);
        } else {
            self.respond(id, b"OK");
        }
        Ok(())
    }

    fn state(&self, id: ClientId) -> Result<ClientState, Fatal> {
        self.queues
            .flows
            .get(&id)
            .map(|f| f.state)
            .ok_or_else(|| fatal("E_INVALID", "client gone"))
    }

    fn sub(&mut self, now: Instant, id: ClientId, params: &[&[u8]]) -> Result<(), Fatal> {
        if self.state(id)? != ClientState::Init {
            return Err(fatal("E_INVALID", "cannot SUB in current state"));
        }
        if self
            .sessions
            .get(&id)
            .is_some_and(|s| s.heartbeat.is_none())
        {
            return Err(fatal("E_INVALID", "cannot SUB with heartbeats disabled"));
        }
        if params.len() < 3 {
            return Err(fatal("E_INVALID", "SUB insufficient number of parameters"));
        }
        if !is_valid_name(params[1]) {
            return Err(fatal(
                "E_BAD_TOPIC",
                format!("SUB topic name {:?} is not valid", lossy(params[1])),
            ));
        }
        if !is_valid_name(params[2]) {
            return Err(fatal(
                "E_BAD_CHANNEL",
                format!("SUB channel name {:?} is not valid", lossy(params[2])),
            ));
        }
        let (topic, channel) = (lossy(params[1]), lossy(params[2]));
        let max = self.opts.max_channel_consumers;
        self.queues
            .subscribe(id, &topic, &channel, max, now)
            .map_err(|max| {
                fatal(
                    "E_SUB_FAILED",
                    format!("SUB failed consumers for {topic}:{channel} exceeds limit of {max}"),
                )
            })?;
        self.respond(id, b"OK");
        Ok(())
    }

    fn rdy(&mut self, now: Instant, id: ClientId, params: &[&[u8]]) -> Result<(), Fatal> {
        let state = self.state(id)?;
        if state == ClientState::Closing {
            return Ok(());
        }
        if state != ClientState::Subscribed {
            return Err(fatal("E_INVALID", "cannot RDY in current state"));
        }
        let mut count: i64 = 1;
        if params.len() > 1 {
            let n = base10(params[1]).ok_or_else(|| {
                fatal(
                    "E_INVALID",
                    format!("RDY could not parse count {}", lossy(params[1])),
                )
            })?;
            count = n as i64;
        }
        let max = self.opts.max_rdy_count;
        if count > max {
            return Err(fatal(
                "E_INVALID",
                format!("RDY count {count} out of range 0-{max}"),
            ));
        }
        self.queues.set_rdy(id, count, now, &mut self.pushes);
        Ok(())
    }

    fn answer(&mut self, now: Instant, id: ClientId, params: &[&[u8]]) -> Result<(), Fatal> {
        let cmd = lossy(params[0]);
        let state = self.state(id)?;
        if state != ClientState::Subscribed && state != ClientState::Closing {
            return Err(fatal("E_INVALID", format!("cannot {cmd} in current state")));
        }
        let min = if cmd == "REQ" { 3 } else { 2 };
        if params.len() < min {
            return Err(fatal(
                "E_INVALID",
                format!("{cmd} insufficient number of params"),
            ));
        }
        let msg = <[u8; 16]>::try_from(params[1])
            .map_err(|_| fatal("E_INVALID", "invalid message ID"))?;
        let result = match cmd.as_str() {
            "FIN" => self
                .queues
                .finish(id, &msg, now, &mut self.pushes)
                .map(drop),
            "REQ" => {
                let ms = base10(params[2]).ok_or_else(|| {
                    fatal(
                        "E_INVALID",
                        format!("REQ could not parse timeout {}", lossy(params[2])),
                    )
                })?;
                let delay = Duration::from_millis(ms).min(self.opts.max_req_timeout);
                self.queues.requeue(id, &msg, delay, now, &mut self.pushes)
            }
            _ => self.queues.touch(
                id,
                &msg,
                self.opts.max_msg_timeout,
                self.opts.msg_timeout,
                now,
            ),
        };
        if let Err(e) = result {
            let e: AnswerError = e;
            let text = format!("E_{cmd}_FAILED {cmd} {} failed {}", lossy(&msg), e.text());
            self.error(id, &text);
        }
        Ok(())
    }

    fn mpub_bodies(&self, b: &[u8]) -> Result<Vec<Vec<u8>>, Fatal> {
        if b.len() < 4 {
            return Err(fatal("E_BAD_BODY", "MPUB failed to read message count"));
        }
        let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if n == 0 {
            return Err(fatal("E_BAD_BODY", "MPUB invalid message count 0"));
        }
        let mut at = 4;
        let mut bodies = Vec::with_capacity(n.min(b.len() / 4));
        for _ in 0..n {
            if b.len() < at + 4 {
                return Err(fatal(
                    "E_BAD_MESSAGE",
                    "MPUB failed to read message body size",
                ));
            }
            let size = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
            at += 4;
            if size == 0 || size > self.opts.max_msg_size {
                return Err(fatal(
                    "E_BAD_MESSAGE",
                    format!("MPUB invalid message body size {size}"),
                ));
            }
            if b.len() < at + size {
                return Err(fatal("E_BAD_MESSAGE", "MPUB failed to read message body"));
            }
            bodies.push(b[at..at + size].to_vec());
            at += size;
        }
        Ok(bodies)
    }

    fn publish_cmd(
        &mut self,
        now: Instant,
        id: ClientId,
        params: &[&[u8]],
        bodies: Vec<Vec<u8>>,
        dpub: bool,
    ) -> Result<(), Fatal> {
        let cmd = lossy(params[0]);
        if params.len() < 2 + usize::from(dpub) {
            return Err(fatal(
                "E_INVALID",
                format!("{cmd} insufficient number of parameters"),
            ));
        }
        if !is_valid_name(params[1]) {
            return Err(fatal(
                "E_BAD_TOPIC",
                format!("{cmd} topic name {:?} is not valid", lossy(params[1])),
            ));
        }
        let mut defer = Duration::ZERO;
        if dpub {
            let ms = base10(params[2]).ok_or_else(|| {
                fatal(
                    "E_INVALID",
                    format!("DPUB could not parse timeout {}", lossy(params[2])),
                )
            })?;
            let d = Duration::from_millis(ms);
            if d > self.opts.max_req_timeout {
                return Err(fatal(
                    "E_INVALID",
                    format!(
                        "DPUB timeout {ms} out of range 0-{}",
                        self.opts.max_req_timeout.as_millis()
                    ),
                ));
            }
            defer = d;
        }
        if bodies.iter().any(Vec::is_empty) {
            return Err(fatal(
                "E_BAD_MESSAGE",
                format!("{cmd} invalid message body size 0"),
            ));
        }
        let topic = lossy(params[1]);
        let ts = self.unix_nanos(now);
        let msgs: Vec<Msg> = bodies
            .into_iter()
            .map(|b| self.queues.new_msg(b, ts))
            .collect();
        self.published
            .extend(msgs.iter().map(|m| (m.id, m.body.clone())));
        self.queues
            .publish(&topic, msgs, defer, now, &mut self.pushes);
        self.respond(id, b"OK");
        Ok(())
    }

    /// Publishes as if a client had: returns the messages' ids.
    pub fn publish(&mut self, now: Instant, topic: &str, bodies: Vec<Vec<u8>>) -> Vec<[u8; 16]> {
        let ts = self.unix_nanos(now);
        let msgs: Vec<Msg> = bodies
            .into_iter()
            .map(|b| self.queues.new_msg(b, ts))
            .collect();
        let ids = msgs.iter().map(|m| m.id).collect();
        self.published
            .extend(msgs.iter().map(|m| (m.id, m.body.clone())));
        self.queues
            .publish(topic, msgs, Duration::ZERO, now, &mut self.pushes);
        self.route();
        ids
    }

    /// The messages accepted (by PUB, MPUB, DPUB or [`Nsqd::publish`]) since the last call:
    /// `(id, body)`.
    pub fn take_published(&mut self) -> Vec<([u8; 16], Arc<[u8]>)> {
        std::mem::take(&mut self.published)
    }

    /// Creates a topic's channel (so messages published before a subscriber are kept).
    pub fn create_channel(&mut self, now: Instant, topic: &str, channel: &str) {
        self.queues.ensure_channel(topic, channel, now);
    }

    /// Times out in-flight messages, releases deferred ones, sends heartbeats and drops
    /// connections silent for two heartbeat intervals.
    pub fn tick(&mut self, now: Instant) {
        self.queues.process_timers(now);
        self.queues.dispatch(now, &mut self.pushes);
        self.route();
        for s in self.sessions.values_mut() {
            if s.closing.is_some() {
                continue;
            }
            let Some(hb) = s.heartbeat else { continue };
            if now >= s.last_read + 2 * hb {
                s.closing = Some("read timeout".into());
                continue;
            }
            if let Some(at) = s.next_heartbeat {
                if now >= at {
                    s.out.extend_from_slice(&frame(0, b"_heartbeat_"));
                    s.next_heartbeat = Some(now + hb);
                }
            }
        }
    }

    /// When [`Nsqd::tick`] has something to do next.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut upd = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for t in self.queues.topics.values() {
            for ch in t.channels.values() {
                for f in ch.in_flight.values() {
                    upd(f.deadline);
                }
                for (at, _) in &ch.deferred {
                    upd(*at);
                }
            }
        }
        for s in self.sessions.values() {
            if s.closing.is_some() {
                continue;
            }
            if let Some(hb) = s.heartbeat {
                upd(s.last_read + 2 * hb);
                if let Some(at) = s.next_heartbeat {
                    upd(at);
                }
            }
        }
        next
    }

    /// What connection `id` must write now (empty if nothing).
    pub fn take_output(&mut self, id: ClientId) -> Vec<u8> {
        self.sessions
            .get_mut(&id)
            .map(|s| std::mem::take(&mut s.out))
            .unwrap_or_default()
    }

    /// Connections with something to write.
    pub fn pending_output(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.sessions
            .iter()
            .filter(|(_, s)| !s.out.is_empty())
            .map(|(id, _)| *id)
    }

    /// Why nsqd is closing connection `id` (after its output is written), if it is.
    pub fn closing(&self, id: ClientId) -> Option<&str> {
        self.sessions.get(&id).and_then(|s| s.closing.as_deref())
    }

    /// A restart that keeps the queues: every connection is dropped (their ids are returned)
    /// and every in-flight message goes back to its queue.
    pub fn restart(&mut self, now: Instant) -> Vec<ClientId> {
        let ids: Vec<ClientId> = self.sessions.keys().copied().collect();
        for id in &ids {
            self.disconnect(*id);
        }
        self.queues.requeue_in_flight(now);
        ids
    }

    /// Messages a channel holds (queued, deferred, in flight).
    pub fn depth(&self, topic: &str, channel: &str) -> usize {
        self.queues
            .topics
            .get(topic)
            .and_then(|t| t.channels.get(channel))
            .map_or(0, super::queues::Channel::depth)
    }
}
