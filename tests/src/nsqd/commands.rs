//! The TCP protocol V2 commands of one connection: parsing and executing SUB, PUB, MPUB,
//! DPUB, RDY, FIN, REQ, TOUCH, CLS, NOP and AUTH with nsqd's state rules and error texts.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::model::{Flow, frame};
use crate::transport::LineError;
use crate::util::{go_quote, is_valid_name};

use super::stats::{ClientState, CommandRecord};
use super::{Client, Conn, Out, State};

/// A command's failure: the error frame's text, and whether nsqd closes the connection.
pub(super) enum CmdErr {
    Fatal(String),
    NonFatal(String),
}

pub(super) fn fatal(code: &str, desc: impl std::fmt::Display) -> CmdErr {
    CmdErr::Fatal(format!("{code} {desc}"))
}

pub(super) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// nsqd's `ByteToBase10`: digits only (empty is 0), wrapping on overflow.
pub(super) fn base10(b: &[u8]) -> Option<u64> {
    let mut n: u64 = 0;
    for &d in b {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
    }
    Some(n)
}

pub(super) fn millis(d: Duration) -> i64 {
    d.as_millis() as i64
}

pub(super) type CmdResult = Result<Option<Vec<u8>>, CmdErr>;

impl Conn {
    pub(super) fn send(&self, kind: u32, data: &[u8]) {
        let _ = self.out.send(Out::Frame(frame(kind, data)));
    }

    pub(super) fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> T) -> Result<T, CmdErr> {
        let mut st = self.inner.lock();
        st.clients
            .get_mut(&self.id)
            .map(f)
            .ok_or_else(|| fatal("E_INVALID", "client gone"))
    }

    /// Like [`Conn::with_client`], with the client's flow control.
    pub(super) fn with_flow<T>(&self, f: impl FnOnce(&mut Flow) -> T) -> Result<T, CmdErr> {
        self.with_client_flow(|_, flow| f(flow))
    }

    /// Like [`Conn::with_client`], with both the client and its flow control.
    pub(super) fn with_client_flow<T>(
        &self,
        f: impl FnOnce(&mut Client, &mut Flow) -> T,
    ) -> Result<T, CmdErr> {
        let mut st = self.inner.lock();
        let State {
            clients, queues, ..
        } = &mut *st;
        match (clients.get_mut(&self.id), queues.flows.get_mut(&self.id)) {
            (Some(c), Some(flow)) => Ok(f(c, flow)),
            _ => Err(fatal("E_INVALID", "client gone")),
        }
    }

    pub(super) fn run(&mut self) {
        // The magic: like nsqd, no deadline, and the heartbeat ticker starts after it.
        match self.rd.read_exact_vec(4) {
            Ok(m) if m == b"  V2" => {
                let _ = self.out.send(Out::Heartbeat(self.heartbeat));
                let flush_every = self.inner.opts.output_buffer_timeout;
                let _ = self
                    .out
                    .send(Out::FlushTicker(Some(flush_every).filter(|d| !d.is_zero())));
            }
            Ok(m) => {
                tracing::debug!(client = self.id, magic = ?m, "bad protocol magic");
                self.send(1, b"E_BAD_PROTOCOL");
                return;
            }
            Err(_) => return,
        }
        loop {
            let mut deadline = self.heartbeat.map(|h| Instant::now() + 2 * h);
            if let Some(h) = self.handshake_until.take() {
                // nsqd gives the TLS handshake 5 seconds.
                deadline = Some(deadline.map_or(h, |d| d.min(h)));
            }
            self.ctl.set_deadline(deadline);
            let mut line = match self.rd.read_line() {
                Ok(Some(l)) => l,
                Ok(None) => return,
                Err(LineError::TooLong) => {
                    tracing::debug!(client = self.id, "command line too long");
                    return;
                }
                Err(LineError::Io(e)) => {
                    tracing::debug!(client = self.id, error = %e, "read failed");
                    return;
                }
            };
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.body = None;
            let params: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            self.inner.lock().executing += 1;
            let result = self.exec(&params);
            let error = match &result {
                Err(CmdErr::Fatal(e) | CmdErr::NonFatal(e)) => Some(e.clone()),
                Ok(_) => None,
            };
            {
                let opts = &self.inner.opts;
                let mut body = self.body.take();
                let body_len = body.as_ref().map_or(0, Vec::len);
                if let Some(b) = &mut body {
                    b.truncate(opts.command_log_body_limit);
                }
                let mut st = self.inner.lock();
                st.executing = st.executing.saturating_sub(1);
                let seq = st.next_seq;
                st.next_seq += 1;
                if opts.command_log_limit > 0 {
                    if st.log.len() >= opts.command_log_limit {
                        st.log.pop_front();
                    }
                    st.log.push_back(CommandRecord {
                        seq,
                        client: self.id,
                        at: Instant::now(),
                        line: lossy(&line),
                        body,
                        body_len,
                        error,
                    });
                }
            }
            match result {
                Ok(Some(resp)) => self.send(0, &resp),
                Ok(None) => {}
                Err(CmdErr::NonFatal(e)) => self.send(1, e.as_bytes()),
                Err(CmdErr::Fatal(e)) => {
                    tracing::debug!(client = self.id, error = %e, "fatal client error");
                    self.send(1, e.as_bytes());
                    return;
                }
            }
        }
    }

    pub(super) fn exec(&mut self, params: &[&[u8]]) -> CmdResult {
        let cmd = params[0];
        if cmd == b"IDENTIFY" {
            return self.identify();
        }
        if self.inner.opts.tls_required && !self.tls {
            return Err(fatal(
                "E_INVALID",
                format!("cannot {} in current state (TLS required)", lossy(cmd)),
            ));
        }
        match cmd {
            b"FIN" => self.fin(params),
            b"RDY" => self.rdy(params),
            b"REQ" => self.req(params),
            b"PUB" => self.publish(params),
            b"MPUB" => self.mpub(params),
            b"DPUB" => self.dpub(params),
            b"NOP" => Ok(None),
            b"TOUCH" => self.touch(params),
            b"SUB" => self.sub(params),
            b"CLS" => self.cls(),
            b"AUTH" => self.auth(params),
            _ => Err(fatal(
                "E_INVALID",
                format!("invalid command {}", lossy(cmd)),
            )),
        }
    }

    pub(super) fn state(&self) -> Result<ClientState, CmdErr> {
        self.with_flow(|f| f.state)
    }

    pub(super) fn read_body(
        &mut self,
        len: i32,
        code: &str,
        what: &str,
    ) -> Result<Vec<u8>, CmdErr> {
        let body = self
            .rd
            .read_exact_vec(len as usize)
            .map_err(|_| fatal(code, what))?;
        Ok(body)
    }
}

impl Conn {
    pub(super) fn auth(&mut self, params: &[&[u8]]) -> CmdResult {
        if self.state()? != ClientState::Init {
            return Err(fatal("E_INVALID", "cannot AUTH in current state"));
        }
        if params.len() != 1 {
            return Err(fatal("E_INVALID", "AUTH invalid number of parameters"));
        }
        let max = self.inner.opts.max_body_size;
        let len = self
            .rd
            .read_len()
            .map_err(|_| fatal("E_BAD_BODY", "AUTH failed to read body size"))?;
        if i64::from(len) > max {
            return Err(fatal(
                "E_BAD_BODY",
                format!("AUTH body too big {len} > {max}"),
            ));
        }
        if len <= 0 {
            return Err(fatal("E_BAD_BODY", format!("AUTH invalid body size {len}")));
        }
        let body = self.read_body(len, "E_BAD_BODY", "AUTH failed to read body")?;
        self.body = Some(body.clone());
        if self.with_client(|c| c.auth.is_some())? {
            return Err(fatal("E_INVALID", "AUTH already set"));
        }
        let Some(table) = &self.inner.opts.auth else {
            return Err(fatal("E_AUTH_DISABLED", "AUTH disabled"));
        };
        let Some(grant) = table.secrets.get(&lossy(&body)).cloned() else {
            return Err(fatal("E_AUTH_FAILED", "AUTH failed"));
        };
        if grant.authorizations.is_empty() {
            return Err(fatal("E_UNAUTHORIZED", "AUTH no authorizations found"));
        }
        let reply = json!({
            "identity": grant.identity,
            "identity_url": grant.identity_url,
            "permission_count": grant.authorizations.len(),
        });
        self.with_client(|c| c.auth = Some(grant))?;
        Ok(Some(reply.to_string().into_bytes()))
    }

    pub(super) fn check_auth(&self, cmd: &str, topic: &[u8], channel: &[u8]) -> Result<(), CmdErr> {
        if self.inner.opts.auth.is_none() {
            return Ok(());
        }
        let grant = self.with_client(|c| c.auth.clone())?;
        let Some(grant) = grant else {
            return Err(fatal("E_AUTH_FIRST", format!("AUTH required before {cmd}")));
        };
        if !grant.allows(&lossy(topic), &lossy(channel)) {
            return Err(fatal(
                "E_UNAUTHORIZED",
                format!(
                    "AUTH failed for {cmd} on {} {}",
                    go_quote(topic),
                    go_quote(channel)
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn sub(&mut self, params: &[&[u8]]) -> CmdResult {
        if self.state()? != ClientState::Init {
            return Err(fatal("E_INVALID", "cannot SUB in current state"));
        }
        if self.heartbeat.is_none() {
            return Err(fatal("E_INVALID", "cannot SUB with heartbeats disabled"));
        }
        if params.len() < 3 {
            return Err(fatal("E_INVALID", "SUB insufficient number of parameters"));
        }
        let (topic, channel) = (params[1], params[2]);
        if !is_valid_name(topic) {
            return Err(fatal(
                "E_BAD_TOPIC",
                format!("SUB topic name {} is not valid", go_quote(topic)),
            ));
        }
        if !is_valid_name(channel) {
            return Err(fatal(
                "E_BAD_CHANNEL",
                format!("SUB channel name {} is not valid", go_quote(channel)),
            ));
        }
        self.check_auth("SUB", topic, channel)?;
        let (topic, channel) = (lossy(topic), lossy(channel));
        let now = Instant::now();
        let mut st = self.inner.lock();
        // nsqd creates the topic and channel before it adds the client, which may fail.
        self.inner.ensure_channel(&mut st, &topic, &channel, now);
        let max = self.inner.opts.max_channel_consumers;
        st.queues
            .subscribe(self.id, &topic, &channel, max, now)
            .map_err(|max| {
                fatal(
                    "E_SUB_FAILED",
                    format!("SUB failed consumers for {topic}:{channel} exceeds limit of {max}"),
                )
            })?;
        Ok(Some(b"OK".to_vec()))
    }

    pub(super) fn rdy(&mut self, params: &[&[u8]]) -> CmdResult {
        let state = self.state()?;
        if state == ClientState::Closing {
            return Ok(None);
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
        let max = self.inner.opts.max_rdy_count;
        if count < 0 || count > max {
            return Err(fatal(
                "E_INVALID",
                format!("RDY count {count} out of range 0-{max}"),
            ));
        }
        let mut st = self.inner.lock();
        let mut out = Vec::new();
        st.queues.set_rdy(self.id, count, Instant::now(), &mut out);
        st.send(out);
        Ok(None)
    }

    /// Common checks of FIN/REQ/TOUCH; returns the id.
    pub(super) fn msg_cmd_prelude(
        &self,
        cmd: &str,
        params: &[&[u8]],
        min_params: usize,
    ) -> Result<[u8; 16], CmdErr> {
        let state = self.state()?;
        if state != ClientState::Subscribed && state != ClientState::Closing {
            return Err(fatal("E_INVALID", format!("cannot {cmd} in current state")));
        }
        if params.len() < min_params {
            return Err(fatal(
                "E_INVALID",
                format!("{cmd} insufficient number of params"),
            ));
        }
        <[u8; 16]>::try_from(params[1]).map_err(|_| fatal("E_INVALID", "invalid message ID"))
    }

    pub(super) fn fin(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = self.msg_cmd_prelude("FIN", params, 2)?;
        let mut st = self.inner.lock();
        let now = Instant::now();
        let mut out = Vec::new();
        let f = st.queues.finish(self.id, &id, now, &mut out).map_err(|e| {
            CmdErr::NonFatal(format!(
                "E_FIN_FAILED FIN {} failed {}",
                lossy(&id),
                e.text()
            ))
        })?;
        st.note_finished(self.id, &f.msg, now);
        st.send(out);
        Ok(None)
    }

    pub(super) fn req(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = self.msg_cmd_prelude("REQ", params, 3)?;
        let ms = base10(params[2]).ok_or_else(|| {
            fatal(
                "E_INVALID",
                format!("REQ could not parse timeout {}", lossy(params[2])),
            )
        })?;
        let max = self.inner.opts.max_req_timeout;
        let delay = Duration::from_millis(ms).min(max);
        let mut st = self.inner.lock();
        let mut out = Vec::new();
        st.queues
            .requeue(self.id, &id, delay, Instant::now(), &mut out)
            .map_err(|e| {
                CmdErr::NonFatal(format!(
                    "E_REQ_FAILED REQ {} failed {}",
                    lossy(&id),
                    e.text()
                ))
            })?;
        st.send(out);
        self.inner.wake.notify_all();
        Ok(None)
    }

    pub(super) fn touch(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = self.msg_cmd_prelude("TOUCH", params, 2)?;
        let opts = &self.inner.opts;
        let mut st = self.inner.lock();
        st.queues
            .touch(
                self.id,
                &id,
                opts.max_msg_timeout,
                opts.msg_timeout,
                Instant::now(),
            )
            .map_err(|e| {
                CmdErr::NonFatal(format!(
                    "E_TOUCH_FAILED TOUCH {} failed {}",
                    lossy(&id),
                    e.text()
                ))
            })?;
        Ok(None)
    }

    pub(super) fn cls(&mut self) -> CmdResult {
        let mut st = self.inner.lock();
        if !st.queues.flows.contains_key(&self.id) {
            return Err(fatal("E_INVALID", "client gone"));
        }
        let mut out = Vec::new();
        if !st.queues.close_wait(self.id, &mut out) {
            return Err(fatal("E_INVALID", "cannot CLS in current state"));
        }
        st.send(out);
        Ok(Some(b"CLOSE_WAIT".to_vec()))
    }

    pub(super) fn check_publish_failure(&self, code: &str, cmd: &str) -> Result<(), CmdErr> {
        if self.inner.fail_publishes.load(Ordering::SeqCst) {
            return Err(fatal(code, format!("{cmd} failed exiting")));
        }
        Ok(())
    }

    pub(super) fn read_message(&mut self, cmd: &str) -> Result<Vec<u8>, CmdErr> {
        let max = self.inner.opts.max_msg_size;
        let len = self.rd.read_len().map_err(|_| {
            fatal(
                "E_BAD_MESSAGE",
                format!("{cmd} failed to read message body size"),
            )
        })?;
        if len <= 0 {
            return Err(fatal(
                "E_BAD_MESSAGE",
                format!("{cmd} invalid message body size {len}"),
            ));
        }
        if i64::from(len) > max {
            return Err(fatal(
                "E_BAD_MESSAGE",
                format!("{cmd} message too big {len} > {max}"),
            ));
        }
        let body = self.read_body(
            len,
            "E_BAD_MESSAGE",
            &format!("{cmd} failed to read message body"),
        )?;
        self.body = Some(body.clone());
        Ok(body)
    }

    pub(super) fn publish(&mut self, params: &[&[u8]]) -> CmdResult {
        if params.len() < 2 {
            return Err(fatal("E_INVALID", "PUB insufficient number of parameters"));
        }
        let topic = params[1];
        if !is_valid_name(topic) {
            return Err(fatal(
                "E_BAD_TOPIC",
                format!("PUB topic name {} is not valid", go_quote(topic)),
            ));
        }
        let body = self.read_message("PUB")?;
        self.check_auth("PUB", topic, b"")?;
        self.check_publish_failure("E_PUB_FAILED", "PUB")?;
        let mut st = self.inner.lock();
        let topic = lossy(topic);
        self.inner
            .publish(&mut st, &topic, vec![body], Duration::ZERO, Instant::now());
        if let Some(c) = st.clients.get_mut(&self.id) {
            c.published(&topic, 1);
        }
        Ok(Some(b"OK".to_vec()))
    }

    pub(super) fn dpub(&mut self, params: &[&[u8]]) -> CmdResult {
        if params.len() < 3 {
            return Err(fatal("E_INVALID", "DPUB insufficient number of parameters"));
        }
        let topic = params[1];
        if !is_valid_name(topic) {
            return Err(fatal(
                "E_BAD_TOPIC",
                format!("DPUB topic name {} is not valid", go_quote(topic)),
            ));
        }
        let ms = base10(params[2]).ok_or_else(|| {
            fatal(
                "E_INVALID",
                format!("DPUB could not parse timeout {}", lossy(params[2])),
            )
        })?;
        let max = self.inner.opts.max_req_timeout;
        if u128::from(ms) > max.as_millis() {
            return Err(fatal(
                "E_INVALID",
                format!("DPUB timeout {ms} out of range 0-{}", max.as_millis()),
            ));
        }
        let body = self.read_message("DPUB")?;
        self.check_auth("DPUB", topic, b"")?;
        self.check_publish_failure("E_DPUB_FAILED", "DPUB")?;
        let mut st = self.inner.lock();
        let topic = lossy(topic);
        self.inner.publish(
            &mut st,
            &topic,
            vec![body],
            Duration::from_millis(ms),
            Instant::now(),
        );
        if let Some(c) = st.clients.get_mut(&self.id) {
            c.published(&topic, 1);
        }
        Ok(Some(b"OK".to_vec()))
    }

    pub(super) fn mpub(&mut self, params: &[&[u8]]) -> CmdResult {
        if params.len() < 2 {
            return Err(fatal("E_INVALID", "MPUB insufficient number of parameters"));
        }
        let topic = params[1];
        if !is_valid_name(topic) {
            // nsqd repeats the code in the description here.
            return Err(fatal(
                "E_BAD_TOPIC",
                format!(
                    "E_BAD_TOPIC MPUB topic name {} is not valid",
                    go_quote(topic)
                ),
            ));
        }
        self.check_auth("MPUB", topic, b"")?;
        // nsqd gets (creates) the topic before it reads the body, so even an MPUB that
        // fails below leaves the topic behind (and registered with lookupd).
        {
            let mut st = self.inner.lock();
            self.inner.ensure_topic(&mut st, &lossy(topic));
        }
        let max_body = self.inner.opts.max_body_size;
        let max_msg = self.inner.opts.max_msg_size;
        let len = self
            .rd
            .read_len()
            .map_err(|_| fatal("E_BAD_BODY", "MPUB failed to read body size"))?;
        if len <= 0 {
            return Err(fatal("E_BAD_BODY", format!("MPUB invalid body size {len}")));
        }
        if i64::from(len) > max_body {
            return Err(fatal(
                "E_BAD_BODY",
                format!("MPUB body too big {len} > {max_body}"),
            ));
        }
        // readMPUB reads from the stream, not from a body-sized buffer.
        let count = self
            .rd
            .read_len()
            .map_err(|_| fatal("E_BAD_BODY", "MPUB failed to read message count"))?;
        let max_messages = (max_body - 4) / 5;
        if count <= 0 || i64::from(count) > max_messages {
            return Err(fatal(
                "E_BAD_BODY",
                format!("MPUB invalid message count {count}"),
            ));
        }
        let mut bodies = Vec::with_capacity((count as usize).min(1024));
        let mut logged = Vec::new();
        logged.extend_from_slice(&count.to_be_bytes());
        for i in 0..count {
            let size = self.rd.read_len().map_err(|_| {
                fatal(
                    "E_BAD_MESSAGE",
                    format!("MPUB failed to read message({i}) body size"),
                )
            })?;
            if size <= 0 {
                return Err(fatal(
                    "E_BAD_MESSAGE",
                    format!("MPUB invalid message({i}) body size {size}"),
                ));
            }
            if i64::from(size) > max_msg {
                return Err(fatal(
                    "E_BAD_MESSAGE",
                    format!("MPUB message too big {size} > {max_msg}"),
                ));
            }
            let body = self.read_body(size, "E_BAD_MESSAGE", "MPUB failed to read message body")?;
            logged.extend_from_slice(&size.to_be_bytes());
            logged.extend_from_slice(&body);
            bodies.push(body);
        }
        if logged.len() != len as usize {
            let msg = format!(
                "client {}: MPUB body size {len} does not match its {count} messages ({} bytes); nsqd accepts this but it is a client bug",
                self.id,
                logged.len()
            );
            tracing::warn!("{msg}");
            self.inner.lock().warnings.push(msg);
        }
        self.body = Some(logged);
        self.check_publish_failure("E_MPUB_FAILED", "MPUB")?;
        let mut st = self.inner.lock();
        let topic = lossy(topic);
        let count = bodies.len() as u64;
        self.inner
            .publish(&mut st, &topic, bodies, Duration::ZERO, Instant::now());
        if let Some(c) = st.clients.get_mut(&self.id) {
            c.published(&topic, count);
        }
        Ok(Some(b"OK".to_vec()))
    }
}
