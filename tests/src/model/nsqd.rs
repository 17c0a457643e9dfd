//! One nsqd with no IO: the TCP protocol V2 of plain connections (no TLS, snappy, deflate or
//! AUTH), fed with bytes and instants, over the shared [`Queues`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::commands::{
    self as rules, Answer, CmdErr, IdentifyReply, Publish, fatal, invalid_command, invalid_state,
    lossy,
};
use super::queues::{ClientId, ClientState, Msg, Push, Queues, frame};

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

/// A `usize` flag as the shared checks take it.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The body after a command line (`rest`, the line taking `line` bytes): `None` until all of
/// it is buffered, then the body and the bytes the command used. Its size is checked by
/// `check` as soon as it is buffered, as nsqd checks it before it reads the body.
fn body(
    rest: &[u8],
    line: usize,
    check: impl FnOnce(i32) -> Result<usize, CmdErr>,
) -> Result<Option<(&[u8], usize)>, CmdErr> {
    let Some((len, rest)) = rest.split_first_chunk::<4>() else {
        return Ok(None);
    };
    let size = check(i32::from_be_bytes(*len))?;
    Ok(rest.get(..size).map(|b| (b, line + 4 + size)))
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
                // `step` writes non-fatal errors itself: what it returns closes.
                Err(e) => {
                    let text = e.into_text();
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
    fn step(&mut self, now: Instant, id: ClientId, buf: &[u8]) -> Result<Step, CmdErr> {
        let s = self
            .sessions
            .get_mut(&id)
            .ok_or_else(|| fatal("E_INVALID", "gone"))?;
        if !s.magic {
            if buf.len() < 4 {
                return Ok(Step::Incomplete);
            }
            if &buf[..4] != b"  V2" {
                // nsqd answers a bad magic with the bare code.
                return Err(CmdErr::Fatal("E_BAD_PROTOCOL".into()));
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
        let line_only = nl + 1;
        let max_msg = limit(self.opts.max_msg_size);
        let max_body = limit(self.opts.max_body_size);
        match params[0] {
            b"NOP" => Ok(Step::Done(line_only)),
            b"IDENTIFY" => {
                let Some((b, used)) = body(rest, line_only, |n| {
                    rules::body_size("IDENTIFY", n, max_body)
                })?
                else {
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
            cmd @ (b"FIN" | b"REQ" | b"TOUCH") => {
                let cmd = match cmd {
                    b"FIN" => Answer::Fin,
                    b"REQ" => Answer::Req,
                    _ => Answer::Touch,
                };
                match self.answer(now, id, cmd, &params) {
                    Err(CmdErr::NonFatal(text)) => self.error(id, &text),
                    r => r?,
                }
                Ok(Step::Done(line_only))
            }
            b"CLS" => {
                if !self.queues.close_wait(id, &mut self.pushes) {
                    return Err(invalid_state("CLS"));
                }
                self.pushes.clear();
                self.respond(id, b"CLOSE_WAIT");
                Ok(Step::Done(line_only))
            }
            cmd @ (b"PUB" | b"DPUB" | b"MPUB") => {
                let cmd = match cmd {
                    b"PUB" => Publish::Pub,
                    b"DPUB" => Publish::Dpub,
                    _ => Publish::Mpub,
                };
                // nsqd checks the line before it reads the body.
                let (topic, delay) =
                    rules::publish_params(cmd, &params, self.opts.max_req_timeout)?;
                let (bodies, used) = if cmd == Publish::Mpub {
                    let Some((mut b, used)) =
                        body(rest, line_only, |n| rules::body_size("MPUB", n, max_body))?
                    else {
                        return Ok(Step::Incomplete);
                    };
                    (rules::read_mpub(&mut b, max_body, max_msg)?, used)
                } else {
                    let Some((b, used)) =
                        body(rest, line_only, |n| rules::message_size(cmd, n, max_msg))?
                    else {
                        return Ok(Step::Incomplete);
                    };
                    (vec![b.to_vec()], used)
                };
                self.publish_cmd(now, id, &lossy(topic), bodies, delay);
                Ok(Step::Done(used))
            }
            b"AUTH" => Err(fatal("E_AUTH_DISABLED", "AUTH disabled")),
            other => Err(invalid_command(other)),
        }
    }

    fn identify(&mut self, id: ClientId, body: &[u8]) -> Result<(), CmdErr> {
        let opts = self.opts.clone();
        let s = self
            .sessions
            .get_mut(&id)
            .ok_or_else(|| fatal("E_INVALID", "gone"))?;
        if s.identified {
            return Err(invalid_state("IDENTIFY"));
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
                topology_region: None,
                topology_zone: None,
            };
            let json = serde_json::to_vec(&reply).unwrap_or_default();
            self.respond(id, &json);
        } else {
            self.respond(id, b"OK");
        }
        Ok(())
    }

    fn state(&self, id: ClientId) -> Result<ClientState, CmdErr> {
        self.queues
            .flows
            .get(&id)
            .map(|f| f.state)
            .ok_or_else(|| fatal("E_INVALID", "client gone"))
    }

    fn sub(&mut self, now: Instant, id: ClientId, params: &[&[u8]]) -> Result<(), CmdErr> {
        let heartbeats = self.sessions.get(&id).is_none_or(|s| s.heartbeat.is_some());
        let (topic, channel) = rules::sub(self.state(id)?, heartbeats, params)?;
        let (topic, channel) = (lossy(topic), lossy(channel));
        let max = self.opts.max_channel_consumers;
        self.queues
            .subscribe(id, &topic, &channel, max, now)
            .map_err(|max| rules::sub_failed(&topic, &channel, max))?;
        self.respond(id, b"OK");
        Ok(())
    }

    fn rdy(&mut self, now: Instant, id: ClientId, params: &[&[u8]]) -> Result<(), CmdErr> {
        let Some(count) = rules::rdy(self.state(id)?, params, self.opts.max_rdy_count)? else {
            return Ok(());
        };
        self.queues.set_rdy(id, count, now, &mut self.pushes);
        Ok(())
    }

    /// FIN, REQ or TOUCH; the queues' refusal is a non-fatal error.
    fn answer(
        &mut self,
        now: Instant,
        id: ClientId,
        cmd: Answer,
        params: &[&[u8]],
    ) -> Result<(), CmdErr> {
        let msg = rules::answer_prelude(cmd, self.state(id)?, params)?;
        let result = match cmd {
            Answer::Fin => self
                .queues
                .finish(id, &msg, now, &mut self.pushes)
                .map(drop),
            Answer::Req => {
                let delay = rules::req_delay(params, self.opts.max_req_timeout)?;
                self.queues.requeue(id, &msg, delay, now, &mut self.pushes)
            }
            Answer::Touch => self.queues.touch(
                id,
                &msg,
                self.opts.max_msg_timeout,
                self.opts.msg_timeout,
                now,
            ),
        };
        result.map_err(|e| rules::answer_failed(cmd, &msg, e))
    }

    /// PUB, DPUB or MPUB, checked: publishes `bodies` to `topic` after `delay`.
    fn publish_cmd(
        &mut self,
        now: Instant,
        id: ClientId,
        topic: &str,
        bodies: Vec<Vec<u8>>,
        delay: Duration,
    ) {
        let ts = self.unix_nanos(now);
        let msgs: Vec<Msg> = bodies
            .into_iter()
            .map(|b| self.queues.new_msg(b, ts))
            .collect();
        self.published
            .extend(msgs.iter().map(|m| (m.id, m.body.clone())));
        self.queues
            .publish(topic, msgs, delay, now, &mut self.pushes);
        self.respond(id, b"OK");
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
