//! A scripted, sans-IO fake nsqd for deterministic tests of connections and consumers.
//!
//! [`FakeNsqd`] is the server side of one connection: it parses the client's commands, answers
//! the start-up the way nsqd v1.3.0 does (IDENTIFY with feature negotiation, TLS via a rustls
//! `ServerConnection`, snappy via the `snap` crate's frame encoder/decoder, raw deflate via
//! flate2, AUTH, SUB), acknowledges publishes, answers CLS, enforces RDY / in-flight rules like
//! nsqd (RDY above max is fatal, FIN of an unknown id is `E_FIN_FAILED`, ...), and lets the test
//! script anything else (heartbeats, messages, errors, raw bytes). Its compression and TLS are
//! independent implementations, so a client that talks to it talks to the real thing.
//!
//! [`exchange`] moves bytes both ways between a [`Connection`] and a peer until both are
//! quiet and returns the client's events.
//!
//! Not part of the stable API (hidden from the docs); for this workspace's tests.

use crate::command::MAGIC_V2;
use crate::connection::{Connection, ConnectionEvent};
use crate::error_code::{ErrorCode, ServerError};
use crate::frame::{
    FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Message, MessageId, encode_frame, encode_message_frame,
};
use crate::identify::Identify;
use bytes::{Buf, Bytes, BytesMut};
use std::collections::{HashSet, VecDeque};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

/// How the fake server behaves.
#[derive(Debug, Clone)]
pub struct FakeNsqdConfig {
    /// Answer IDENTIFY with JSON when the client asks for feature negotiation (else `OK`, as
    /// very old servers do).
    pub feature_negotiation: bool,
    /// `--max-rdy-count`.
    pub max_rdy_count: i64,
    /// Message timeout reported in the IDENTIFY reply, in milliseconds.
    pub msg_timeout_ms: i64,
    /// `--max-msg-timeout`, in milliseconds.
    pub max_msg_timeout_ms: i64,
    /// Version reported in the IDENTIFY reply.
    pub version: String,
    /// TLS is granted when the client asks and this is set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Snappy is granted when the client asks and this is true.
    pub snappy: bool,
    /// Deflate is granted when the client asks and this is true.
    pub deflate: bool,
    /// `--max-deflate-level`.
    pub max_deflate_level: i64,
    /// When set, auth is required and this is the only accepted secret.
    pub auth_secret: Option<Vec<u8>>,
    /// Answer every PUB / MPUB / DPUB with `OK` right away.
    pub auto_ack_publishes: bool,
    /// Answer CLS with `CLOSE_WAIT` right away.
    pub auto_close_wait: bool,
    /// `--max-msg-size`: a larger PUB / MPUB / DPUB message is refused with a fatal
    /// `E_BAD_MESSAGE ... too big N > MAX`, as nsqd does.
    pub max_msg_size: Option<usize>,
    /// `--tls-required`: every command but IDENTIFY before TLS is refused with a fatal
    /// `E_INVALID cannot <CMD> in current state (TLS required)`.
    pub tls_required: bool,
    /// `--topology-zone` and `--topology-region` (nsqd after v1.3.0), stated in the IDENTIFY
    /// reply when set (v1.3.0 states neither: empty).
    pub topology: Option<(String, String)>,
}

impl Default for FakeNsqdConfig {
    fn default() -> Self {
        FakeNsqdConfig {
            feature_negotiation: true,
            max_rdy_count: 2500,
            msg_timeout_ms: 60_000,
            max_msg_timeout_ms: 900_000,
            version: "1.3.0".into(),
            tls: None,
            snappy: true,
            deflate: true,
            max_deflate_level: 6,
            auth_secret: None,
            auto_ack_publishes: true,
            auto_close_wait: true,
            max_msg_size: None,
            tls_required: false,
            topology: None,
        }
    }
}

/// A command as the server parsed it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientCommand {
    /// `IDENTIFY` with its JSON body.
    Identify(Identify),
    /// `AUTH` with the secret.
    Auth(Vec<u8>),
    /// `SUB topic channel`.
    Sub {
        /// Topic.
        topic: String,
        /// Channel.
        channel: String,
    },
    /// `PUB topic` + body.
    Pub {
        /// Topic.
        topic: String,
        /// Body.
        body: Bytes,
    },
    /// `MPUB topic` + bodies.
    Mpub {
        /// Topic.
        topic: String,
        /// Bodies.
        bodies: Vec<Bytes>,
    },
    /// `DPUB topic delay_ms` + body.
    Dpub {
        /// Topic.
        topic: String,
        /// Delay in milliseconds.
        delay_ms: u64,
        /// Body.
        body: Bytes,
    },
    /// `RDY n`.
    Rdy(u32),
    /// `FIN id`.
    Fin(MessageId),
    /// `REQ id delay_ms`.
    Req(MessageId, u64),
    /// `TOUCH id`.
    Touch(MessageId),
    /// `CLS`.
    Cls,
    /// `NOP`.
    Nop,
    /// Anything the fake did not understand (it answers `E_INVALID` and closes).
    Invalid(String),
}

enum ServerCodec {
    Snappy {
        pending: Vec<u8>,
        dec: snap::read::FrameDecoder<VecDeque<u8>>,
        enc: Box<snap::write::FrameEncoder<Vec<u8>>>,
    },
    Deflate {
        dec: flate2::Decompress,
        enc: flate2::Compress,
    },
}

impl ServerCodec {
    fn decode(&mut self, data: &[u8], out: &mut BytesMut) -> Result<(), String> {
        match self {
            ServerCodec::Snappy { pending, dec, .. } => {
                pending.extend_from_slice(data);
                let mut complete = 0;
                while pending.len() >= complete + 4 {
                    let h = &pending[complete..];
                    let len = usize::from(h[1]) | usize::from(h[2]) << 8 | usize::from(h[3]) << 16;
                    if pending.len() < complete + 4 + len {
                        break;
                    }
                    complete += 4 + len;
                }
                dec.get_mut().extend(pending.drain(..complete));
                let mut plain = Vec::new();
                dec.read_to_end(&mut plain).map_err(|e| e.to_string())?;
                out.extend_from_slice(&plain);
                Ok(())
            }
            ServerCodec::Deflate { dec, .. } => {
                let mut input = data;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let (i0, o0) = (dec.total_in(), dec.total_out());
                    dec.decompress(input, &mut buf, flate2::FlushDecompress::Sync)
                        .map_err(|e| e.to_string())?;
                    let used = (dec.total_in() - i0) as usize;
                    let made = (dec.total_out() - o0) as usize;
                    out.extend_from_slice(&buf[..made]);
                    input = &input[used..];
                    if made < buf.len() && input.is_empty() || used == 0 && made == 0 {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn encode(&mut self, data: &[u8]) -> Vec<u8> {
        match self {
            ServerCodec::Snappy { enc, .. } => {
                enc.write_all(data).expect("in-memory write");
                enc.flush().expect("in-memory flush");
                std::mem::take(enc.get_mut())
            }
            ServerCodec::Deflate { enc, .. } => {
                let mut out = Vec::with_capacity(data.len() + 64);
                let mut input = data;
                loop {
                    out.reserve(input.len() + 64);
                    let (i0, o0) = (enc.total_in(), enc.total_out());
                    enc.compress_vec(input, &mut out, flate2::FlushCompress::Sync)
                        .expect("in-memory deflate");
                    input = &input[(enc.total_in() - i0) as usize..];
                    let made = (enc.total_out() - o0) as usize;
                    if input.is_empty() && out.len() < out.capacity() && made > 0 {
                        return out;
                    }
                }
            }
        }
    }
}

/// The fake server side of one nsqd connection. See the [module documentation](self).
pub struct FakeNsqd {
    /// The behaviour; may be changed between steps.
    pub config: FakeNsqdConfig,
    raw_in: BytesMut,
    cmd_in: BytesMut,
    got_magic: bool,
    tls: Option<rustls::ServerConnection>,
    codec: Option<ServerCodec>,
    wire_out: BytesMut,
    commands: Vec<ClientCommand>,
    authenticated: bool,
    auth_required: bool,
    subscribed: bool,
    closing: bool,
    closed: bool,
    got_close_notify: bool,
    rdy: u32,
    in_flight: HashSet<MessageId>,
    next_id: u64,
    failure: Option<String>,
}

impl std::fmt::Debug for FakeNsqd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNsqd")
            .field("commands", &self.commands.len())
            .field("subscribed", &self.subscribed)
            .field("rdy", &self.rdy)
            .field("in_flight", &self.in_flight.len())
            .field("closed", &self.closed)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl FakeNsqd {
    /// A fake server with the given behaviour.
    pub fn new(config: FakeNsqdConfig) -> FakeNsqd {
        FakeNsqd {
            config,
            raw_in: BytesMut::new(),
            cmd_in: BytesMut::new(),
            got_magic: false,
            tls: None,
            codec: None,
            wire_out: BytesMut::new(),
            commands: Vec::new(),
            authenticated: false,
            auth_required: false,
            subscribed: false,
            closing: false,
            closed: false,
            got_close_notify: false,
            rdy: 0,
            in_flight: HashSet::new(),
            next_id: 0,
            failure: None,
        }
    }

    /// Every command received so far, in order.
    pub fn commands(&self) -> &[ClientCommand] {
        &self.commands
    }

    /// Takes the commands received so far.
    pub fn take_commands(&mut self) -> Vec<ClientCommand> {
        std::mem::take(&mut self.commands)
    }

    /// The last RDY received.
    pub fn rdy(&self) -> u32 {
        self.rdy
    }

    /// Ids delivered with [`FakeNsqd::deliver`] / [`FakeNsqd::send_message`] and not yet
    /// answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether SUB succeeded.
    pub fn is_subscribed(&self) -> bool {
        self.subscribed
    }

    /// Whether the server closed the connection (after a fatal error it sent).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Why the server side broke (bad TLS, corrupt compression, unparsable command).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Whether TLS is active on the server side.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Bytes the server wants to send (after its compression and TLS).
    pub fn take_output(&mut self) -> Bytes {
        self.wire_out.split().freeze()
    }

    /// Feeds bytes the client sent.
    pub fn receive(&mut self, data: &[u8]) {
        if self.closed {
            return;
        }
        self.raw_in.extend_from_slice(data);
        self.pump();
    }

    fn pump(&mut self) {
        loop {
            if self.closed || self.failure.is_some() {
                return;
            }
            // Move bytes through the server's layers into `cmd_in`.
            let mut plain = BytesMut::new();
            if let Some(tls) = &mut self.tls {
                while !self.raw_in.is_empty() {
                    let mut src: &[u8] = &self.raw_in;
                    let before = src.len();
                    if let Err(e) = tls.read_tls(&mut src) {
                        self.failure = Some(format!("TLS read: {e}"));
                        return;
                    }
                    let used = before - src.len();
                    self.raw_in.advance(used);
                    let processed = tls.process_new_packets();
                    if let Ok(state) = &processed {
                        self.got_close_notify |= state.peer_has_closed();
                    }
                    let mut w = Vec::new();
                    while tls.wants_write() {
                        let _ = tls.write_tls(&mut w);
                    }
                    self.wire_out.extend_from_slice(&w);
                    if let Err(e) = processed {
                        self.failure = Some(format!("TLS: {e}"));
                        return;
                    }
                    let mut buf = Vec::new();
                    match tls.reader().read_to_end(&mut buf) {
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            self.failure = Some(format!("TLS read: {e}"));
                            return;
                        }
                    }
                    plain.extend_from_slice(&buf);
                    if used == 0 {
                        break;
                    }
                }
            } else {
                plain = self.raw_in.split();
            }
            if let Some(codec) = &mut self.codec {
                if let Err(e) = codec.decode(&plain, &mut self.cmd_in) {
                    self.failure = Some(format!("decompression: {e}"));
                    return;
                }
            } else {
                self.cmd_in.extend_from_slice(&plain);
            }
            if !self.got_magic {
                if self.cmd_in.len() < 4 {
                    return;
                }
                if &self.cmd_in[..4] != MAGIC_V2 {
                    self.failure = Some("bad magic".into());
                    self.closed = true;
                    return;
                }
                self.cmd_in.advance(4);
                self.got_magic = true;
            }
            let Some(cmd) = parse_command(&mut self.cmd_in) else {
                return;
            };
            let layers_before = (self.tls.is_some(), self.codec.is_some());
            self.handle(cmd);
            if layers_before != (self.tls.is_some(), self.codec.is_some()) {
                // Whatever followed the command belongs to the new layer.
                let rest = self.cmd_in.split();
                if self.tls.is_some() && !layers_before.0 {
                    let mut raw = rest;
                    raw.unsplit(self.raw_in.split());
                    self.raw_in = raw;
                } else if let Some(codec) = &mut self.codec {
                    let mut decoded = BytesMut::new();
                    if let Err(e) = codec.decode(&rest, &mut decoded) {
                        self.failure = Some(format!("decompression: {e}"));
                        return;
                    }
                    self.cmd_in = decoded;
                }
            }
        }
    }

    fn handle(&mut self, cmd: ClientCommand) {
        self.commands.push(cmd.clone());
        if self.config.tls_required && self.tls.is_none() {
            let name = match &cmd {
                ClientCommand::Identify(_) => None,
                ClientCommand::Nop => Some("NOP"),
                ClientCommand::Pub { .. } => Some("PUB"),
                ClientCommand::Mpub { .. } => Some("MPUB"),
                ClientCommand::Dpub { .. } => Some("DPUB"),
                ClientCommand::Sub { .. } => Some("SUB"),
                _ => Some("command"),
            };
            if let Some(name) = name {
                let text = format!("cannot {name} in current state (TLS required)");
                return self.fatal(ErrorCode::Invalid, &text);
            }
        }
        if let Some(max) = self.config.max_msg_size {
            let (verb, largest) = match &cmd {
                ClientCommand::Pub { body, .. } => ("PUB", body.len()),
                ClientCommand::Dpub { body, .. } => ("DPUB", body.len()),
                ClientCommand::Mpub { bodies, .. } => {
                    ("MPUB", bodies.iter().map(Bytes::len).max().unwrap_or(0))
                }
                _ => ("", 0),
            };
            if largest > max {
                let text = format!("{verb} message too big {largest} > {max}");
                return self.fatal(ErrorCode::BadMessage, &text);
            }
        }
        match cmd {
            ClientCommand::Identify(identify) => self.on_identify(&identify),
            ClientCommand::Auth(secret) => match &self.config.auth_secret {
                None => self.fatal(ErrorCode::AuthDisabled, "AUTH disabled"),
                Some(s) if *s == secret => {
                    self.authenticated = true;
                    self.send_response(
                        br#"{"identity":"test-user","identity_url":"https://auth.example/u","permission_count":1}"#,
                    );
                }
                Some(_) => self.fatal(ErrorCode::AuthFailed, "AUTH failed"),
            },
            ClientCommand::Sub { .. } => {
                if self.auth_required && !self.authenticated {
                    self.fatal(ErrorCode::AuthFirst, "AUTH required before SUB");
                } else if self.subscribed {
                    self.fatal(ErrorCode::Invalid, "cannot SUB in current state");
                } else {
                    self.subscribed = true;
                    self.send_ok();
                }
            }
            ClientCommand::Pub { .. } | ClientCommand::Mpub { .. } | ClientCommand::Dpub { .. } => {
                if self.auth_required && !self.authenticated {
                    self.fatal(ErrorCode::AuthFirst, "AUTH required before PUB");
                } else if self.config.auto_ack_publishes {
                    self.send_ok();
                }
            }
            ClientCommand::Rdy(n) => {
                if i64::from(n) > self.config.max_rdy_count {
                    self.fatal(ErrorCode::Invalid, "RDY count out of range");
                } else if !self.closing {
                    self.rdy = n;
                }
            }
            ClientCommand::Fin(id) => {
                if !self.in_flight.remove(&id) {
                    self.send_error(ErrorCode::FinFailed, &format!("FIN {id} failed"));
                }
            }
            ClientCommand::Req(id, _) => {
                if !self.in_flight.remove(&id) {
                    self.send_error(ErrorCode::ReqFailed, &format!("REQ {id} failed"));
                }
            }
            ClientCommand::Touch(id) => {
                if !self.in_flight.contains(&id) {
                    self.send_error(ErrorCode::TouchFailed, &format!("TOUCH {id} failed"));
                }
            }
            ClientCommand::Cls => {
                if self.subscribed {
                    self.closing = true;
                    self.rdy = 0;
                    if self.config.auto_close_wait {
                        self.send_response(b"CLOSE_WAIT");
                    }
                } else {
                    self.fatal(ErrorCode::Invalid, "cannot CLS in current state");
                }
            }
            ClientCommand::Nop => {}
            ClientCommand::Invalid(line) => {
                self.fatal(ErrorCode::Invalid, &format!("invalid command {line}"));
            }
        }
    }

    fn on_identify(&mut self, identify: &Identify) {
        let c = &self.config;
        let tls = identify.tls_v1 && c.tls.is_some();
        let snappy = identify.snappy && c.snappy;
        let deflate = identify.deflate && c.deflate && !snappy;
        let deflate_level = if identify.deflate_level > 0 {
            identify.deflate_level.min(c.max_deflate_level)
        } else {
            6.min(c.max_deflate_level)
        };
        self.auth_required = c.auth_secret.is_some();
        if c.feature_negotiation && identify.feature_negotiation {
            let reply = serde_json::json!({
                "max_rdy_count": c.max_rdy_count,
                "version": c.version,
                "max_msg_timeout": c.max_msg_timeout_ms,
                "msg_timeout": if identify.msg_timeout > 0 { identify.msg_timeout } else { c.msg_timeout_ms },
                "tls_v1": tls,
                "deflate": deflate,
                "deflate_level": deflate_level,
                "max_deflate_level": c.max_deflate_level,
                "snappy": snappy,
                "sample_rate": identify.sample_rate,
                "auth_required": self.auth_required,
                "output_buffer_size": 16384,
                "output_buffer_timeout": 250,
            });
            let mut reply = reply;
            if let (Some((zone, region)), Some(map)) = (&c.topology, reply.as_object_mut()) {
                map.insert("topology_zone".into(), zone.clone().into());
                map.insert("topology_region".into(), region.clone().into());
            }
            self.send_response(reply.to_string().as_bytes());
        } else {
            self.send_ok();
            return;
        }
        if tls {
            let config = self.config.tls.clone().expect("checked above");
            match rustls::ServerConnection::new(config) {
                Ok(conn) => self.tls = Some(conn),
                Err(e) => {
                    self.failure = Some(format!("TLS setup: {e}"));
                    return;
                }
            }
            self.send_ok();
        }
        if snappy {
            self.codec = Some(ServerCodec::Snappy {
                pending: Vec::new(),
                dec: snap::read::FrameDecoder::new(VecDeque::new()),
                enc: Box::new(snap::write::FrameEncoder::new(Vec::new())),
            });
            self.send_ok();
        } else if deflate {
            self.codec = Some(ServerCodec::Deflate {
                dec: flate2::Decompress::new(false),
                enc: flate2::Compress::new(
                    flate2::Compression::new(deflate_level.clamp(0, 9) as u32),
                    false,
                ),
            });
            self.send_ok();
        }
    }

    fn fatal(&mut self, code: ErrorCode, text: &str) {
        self.send_error(code, text);
        self.closed = true;
    }

    /// Sends raw bytes through the server's layers (compression, then TLS).
    pub fn send_raw(&mut self, data: &[u8]) {
        let data = match &mut self.codec {
            Some(codec) => codec.encode(data),
            None => data.to_vec(),
        };
        match &mut self.tls {
            Some(tls) => {
                let mut rest = &data[..];
                let mut w = Vec::new();
                loop {
                    let n = tls.writer().write(rest).expect("in-memory TLS write");
                    rest = &rest[n..];
                    while tls.wants_write() {
                        let _ = tls.write_tls(&mut w);
                    }
                    if rest.is_empty() || n == 0 {
                        break;
                    }
                }
                self.wire_out.extend_from_slice(&w);
            }
            None => self.wire_out.extend_from_slice(&data),
        }
    }

    /// Whether the client sent a TLS `close_notify` alert.
    pub fn got_close_notify(&self) -> bool {
        self.got_close_notify
    }

    /// Sends a TLS `close_notify` alert (when TLS is active).
    pub fn send_close_notify(&mut self) {
        if let Some(tls) = &mut self.tls {
            tls.send_close_notify();
            let mut w = Vec::new();
            while tls.wants_write() {
                let _ = tls.write_tls(&mut w);
            }
            self.wire_out.extend_from_slice(&w);
        }
    }

    /// Sends bytes straight to the wire, bypassing TLS and compression.
    pub fn send_wire(&mut self, data: &[u8]) {
        self.wire_out.extend_from_slice(data);
    }

    /// Sends a response frame.
    pub fn send_response(&mut self, data: &[u8]) {
        let mut f = BytesMut::new();
        encode_frame(&mut f, FRAME_TYPE_RESPONSE, data);
        self.send_raw(&f);
    }

    /// Sends `OK`.
    pub fn send_ok(&mut self) {
        self.send_response(b"OK");
    }

    /// Sends `_heartbeat_`.
    pub fn send_heartbeat(&mut self) {
        self.send_response(b"_heartbeat_");
    }

    /// Sends an error frame (does not close; see [`FakeNsqd::close_with_error`]).
    pub fn send_error(&mut self, code: ErrorCode, text: &str) {
        let e = ServerError::new(code, text);
        let mut f = BytesMut::new();
        encode_frame(&mut f, FRAME_TYPE_ERROR, e.raw());
        self.send_raw(&f);
    }

    /// Sends a fatal error and marks the server side closed, as nsqd does.
    pub fn close_with_error(&mut self, code: ErrorCode, text: &str) {
        self.fatal(code, text);
    }

    /// Sends a message frame without checking RDY, and tracks it as in flight.
    pub fn send_message(&mut self, id: MessageId, attempts: u16, body: &[u8]) {
        self.in_flight.insert(id);
        let msg = Message {
            timestamp: 1_700_000_000_000_000_000,
            attempts,
            id,
            body: Bytes::copy_from_slice(body),
        };
        let mut f = BytesMut::new();
        encode_message_frame(&mut f, &msg);
        self.send_raw(&f);
    }

    /// Delivers a message the way nsqd would: only when subscribed, not closing and
    /// `in_flight < rdy`. Returns its (generated) id.
    pub fn deliver(&mut self, body: &[u8]) -> Option<MessageId> {
        if !self.subscribed
            || self.closing
            || self.closed
            || self.in_flight.len() >= self.rdy as usize
        {
            return None;
        }
        let id = self.next_message_id();
        self.send_message(id, 1, body);
        Some(id)
    }

    /// Forgets an in-flight message, as nsqd does when its msg_timeout passes.
    pub fn time_out(&mut self, id: &MessageId) -> bool {
        self.in_flight.remove(id)
    }

    /// A fresh message id (16 hex digits).
    pub fn next_message_id(&mut self) -> MessageId {
        let n = self.next_id;
        self.next_id += 1;
        let hex = format!("{n:016x}");
        let mut id = [0u8; 16];
        id.copy_from_slice(hex.as_bytes());
        MessageId::new(id)
    }
}

/// Parses one client command off `buf` (after the magic); `None` when incomplete.
pub fn parse_command(buf: &mut BytesMut) -> Option<ClientCommand> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let line = String::from_utf8_lossy(&buf[..nl]).into_owned();
    let parts: Vec<&str> = line.split(' ').collect();
    let body_at = nl + 1;
    let sized_body = |buf: &BytesMut| -> Option<(usize, Bytes)> {
        if buf.len() < body_at + 4 {
            return None;
        }
        let len = u32::from_be_bytes([
            buf[body_at],
            buf[body_at + 1],
            buf[body_at + 2],
            buf[body_at + 3],
        ]) as usize;
        if buf.len() < body_at + 4 + len {
            return None;
        }
        Some((
            body_at + 4 + len,
            Bytes::copy_from_slice(&buf[body_at + 4..body_at + 4 + len]),
        ))
    };
    let id = |s: &str| MessageId::try_from(s.as_bytes()).ok();
    let (consumed, cmd) = match parts.as_slice() {
        ["IDENTIFY"] => {
            let (n, body) = sized_body(buf)?;
            match serde_json::from_slice::<Identify>(&body) {
                Ok(i) => (n, ClientCommand::Identify(i)),
                Err(e) => (n, ClientCommand::Invalid(format!("IDENTIFY body: {e}"))),
            }
        }
        ["AUTH"] => {
            let (n, body) = sized_body(buf)?;
            (n, ClientCommand::Auth(body.to_vec()))
        }
        ["SUB", topic, channel] => (
            body_at,
            ClientCommand::Sub {
                topic: (*topic).to_owned(),
                channel: (*channel).to_owned(),
            },
        ),
        ["PUB", topic] => {
            let (n, body) = sized_body(buf)?;
            (
                n,
                ClientCommand::Pub {
                    topic: (*topic).to_owned(),
                    body,
                },
            )
        }
        ["DPUB", topic, delay] => {
            let (n, body) = sized_body(buf)?;
            match delay.parse() {
                Ok(delay_ms) => (
                    n,
                    ClientCommand::Dpub {
                        topic: (*topic).to_owned(),
                        delay_ms,
                        body,
                    },
                ),
                Err(_) => (n, ClientCommand::Invalid(line.clone())),
            }
        }
        ["MPUB", topic] => {
            let (n, mut body) = sized_body(buf)?;
            let mut bodies = Vec::new();
            let ok = (|| {
                if body.len() < 4 {
                    return false;
                }
                let count = body.get_u32();
                for _ in 0..count {
                    if body.len() < 4 {
                        return false;
                    }
                    let len = body.get_u32() as usize;
                    if body.len() < len {
                        return false;
                    }
                    bodies.push(body.split_to(len));
                }
                body.is_empty()
            })();
            if ok {
                (
                    n,
                    ClientCommand::Mpub {
                        topic: (*topic).to_owned(),
                        bodies,
                    },
                )
            } else {
                (n, ClientCommand::Invalid(line.clone()))
            }
        }
        ["RDY", n] => match n.parse() {
            Ok(n) => (body_at, ClientCommand::Rdy(n)),
            Err(_) => (body_at, ClientCommand::Invalid(line.clone())),
        },
        ["FIN", i] => match id(i) {
            Some(i) => (body_at, ClientCommand::Fin(i)),
            None => (body_at, ClientCommand::Invalid(line.clone())),
        },
        ["REQ", i, d] => match (id(i), d.parse()) {
            (Some(i), Ok(d)) => (body_at, ClientCommand::Req(i, d)),
            _ => (body_at, ClientCommand::Invalid(line.clone())),
        },
        ["TOUCH", i] => match id(i) {
            Some(i) => (body_at, ClientCommand::Touch(i)),
            None => (body_at, ClientCommand::Invalid(line.clone())),
        },
        ["CLS"] => (body_at, ClientCommand::Cls),
        ["NOP"] => (body_at, ClientCommand::Nop),
        _ => (body_at, ClientCommand::Invalid(line.clone())),
    };
    buf.advance(consumed);
    Some(cmd)
}

/// Moves bytes between `conn` and `peer` until neither has anything to send, feeding the
/// server's bytes to the client in pieces of at most `chunk` bytes (`usize::MAX` for whole
/// writes), and returns the client's events in order.
pub fn exchange_chunked(
    conn: &mut Connection,
    peer: &mut FakeNsqd,
    now: Instant,
    chunk: usize,
) -> Vec<ConnectionEvent> {
    let mut events = Vec::new();
    loop {
        let mut progressed = false;
        while let Some(bytes) = conn.poll_transmit() {
            peer.receive(&bytes);
            progressed = true;
        }
        let out = peer.take_output();
        for piece in out.chunks(chunk.max(1)) {
            let mut buf = BytesMut::from(piece);
            conn.handle_input(now, &mut buf);
            progressed = true;
        }
        while let Some(e) = conn.poll_event() {
            events.push(e);
        }
        if !progressed {
            return events;
        }
    }
}

/// [`exchange_chunked`] with whole writes.
pub fn exchange(conn: &mut Connection, peer: &mut FakeNsqd, now: Instant) -> Vec<ConnectionEvent> {
    exchange_chunked(conn, peer, now, usize::MAX)
}
