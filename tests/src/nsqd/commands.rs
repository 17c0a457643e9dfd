//! The TCP protocol V2 commands of one connection: reading and executing SUB, PUB, MPUB,
//! DPUB, RDY, FIN, REQ, TOUCH, CLS, NOP and AUTH. nsqd's per-command checks and error texts
//! are in [`crate::model::commands`], shared with the model nsqd.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::model::commands::{
    self as rules, Answer, MpubSource, Publish, invalid_command, invalid_state, lossy,
};
use crate::model::{Flow, frame};
use crate::transport::{CmdReader, LineError};
use crate::util::go_quote;

use super::stats::{ClientState, CommandRecord};
use super::{Client, Conn, Out, State};

pub(super) use crate::model::commands::{CmdErr, fatal};

pub(super) fn millis(d: Duration) -> i64 {
    d.as_millis() as i64
}

pub(super) type CmdResult = Result<Option<Vec<u8>>, CmdErr>;

impl Conn {
    /// Hands a response or error frame to the writer; false when the writer has given up
    /// (a write failed), as nsqd's `Send` fails then.
    pub(super) fn send(&self, kind: u32, data: &[u8]) -> bool {
        self.out.send(Out::Frame(frame(kind, data))).is_ok()
            && !self.ctl.write_failed.load(Ordering::SeqCst)
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
                let _ = self.send(1, b"E_BAD_PROTOCOL");
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
            let sent = match result {
                Ok(Some(resp)) => self.send(0, &resp),
                Ok(None) => true,
                Err(CmdErr::NonFatal(e)) => self.send(1, e.as_bytes()),
                Err(CmdErr::Fatal(e)) => {
                    tracing::debug!(client = self.id, error = %e, "fatal client error");
                    let size_refusal = e.contains(" too big ")
                        && (e.starts_with("E_BAD_MESSAGE ") || e.starts_with("E_BAD_BODY "));
                    if !(size_refusal && self.inner.lose_size_refusals.load(Ordering::SeqCst)) {
                        let _ = self.send(1, e.as_bytes());
                    }
                    return;
                }
            };
            if !sent {
                tracing::debug!(client = self.id, "a reply could not be written: closing");
                return;
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
            _ => Err(invalid_command(cmd)),
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
            return Err(invalid_state("AUTH"));
        }
        if params.len() != 1 {
            return Err(fatal("E_INVALID", "AUTH invalid number of parameters"));
        }
        let max = self.inner.opts.max_body_size;
        let len = self
            .rd
            .read_len()
            .map_err(|_| fatal("E_BAD_BODY", "AUTH failed to read body size"))?;
        rules::body_size("AUTH", len, max)?;
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
        let (topic, channel) = rules::sub(self.state()?, self.heartbeat.is_some(), params)?;
        self.check_auth("SUB", topic, channel)?;
        let (topic, channel) = (lossy(topic), lossy(channel));
        let now = Instant::now();
        let mut st = self.inner.lock();
        // nsqd creates the topic and channel before it adds the client, which may fail.
        self.inner.ensure_channel(&mut st, &topic, &channel, now);
        let max = self.inner.opts.max_channel_consumers;
        st.queues
            .subscribe(self.id, &topic, &channel, max, now)
            .map_err(|max| rules::sub_failed(&topic, &channel, max))?;
        Ok(Some(b"OK".to_vec()))
    }

    pub(super) fn rdy(&mut self, params: &[&[u8]]) -> CmdResult {
        let Some(count) = rules::rdy(self.state()?, params, self.inner.opts.max_rdy_count)? else {
            return Ok(None);
        };
        let mut st = self.inner.lock();
        let mut out = Vec::new();
        st.queues.set_rdy(self.id, count, Instant::now(), &mut out);
        st.send(out);
        Ok(None)
    }

    pub(super) fn fin(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = rules::answer_prelude(Answer::Fin, self.state()?, params)?;
        let mut st = self.inner.lock();
        let now = Instant::now();
        let mut out = Vec::new();
        let f = st
            .queues
            .finish(self.id, &id, now, &mut out)
            .map_err(|e| rules::answer_failed(Answer::Fin, &id, e))?;
        st.note_finished(self.id, &f.msg, now);
        st.send(out);
        Ok(None)
    }

    pub(super) fn req(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = rules::answer_prelude(Answer::Req, self.state()?, params)?;
        let delay = rules::req_delay(params, self.inner.opts.max_req_timeout)?;
        let mut st = self.inner.lock();
        let mut out = Vec::new();
        st.queues
            .requeue(self.id, &id, delay, Instant::now(), &mut out)
            .map_err(|e| rules::answer_failed(Answer::Req, &id, e))?;
        st.send(out);
        self.inner.wake.notify_all();
        Ok(None)
    }

    pub(super) fn touch(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = rules::answer_prelude(Answer::Touch, self.state()?, params)?;
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
            .map_err(|e| rules::answer_failed(Answer::Touch, &id, e))?;
        Ok(None)
    }

    pub(super) fn cls(&mut self) -> CmdResult {
        let mut st = self.inner.lock();
        if !st.queues.flows.contains_key(&self.id) {
            return Err(fatal("E_INVALID", "client gone"));
        }
        let mut out = Vec::new();
        if !st.queues.close_wait(self.id, &mut out) {
            return Err(invalid_state("CLS"));
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

    pub(super) fn read_message(&mut self, cmd: Publish) -> Result<Vec<u8>, CmdErr> {
        let name = cmd.name();
        let len = self.rd.read_len().map_err(|_| {
            fatal(
                "E_BAD_MESSAGE",
                format!("{name} failed to read message body size"),
            )
        })?;
        rules::message_size(cmd, len, self.inner.opts.max_msg_size)?;
        let body = self.read_body(
            len,
            "E_BAD_MESSAGE",
            &format!("{name} failed to read message body"),
        )?;
        self.body = Some(body.clone());
        Ok(body)
    }

    pub(super) fn publish(&mut self, params: &[&[u8]]) -> CmdResult {
        let max_req = self.inner.opts.max_req_timeout;
        let (topic, _) = rules::publish_params(Publish::Pub, params, max_req)?;
        let body = self.read_message(Publish::Pub)?;
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
        let max_req = self.inner.opts.max_req_timeout;
        let (topic, delay) = rules::publish_params(Publish::Dpub, params, max_req)?;
        let body = self.read_message(Publish::Dpub)?;
        self.check_auth("DPUB", topic, b"")?;
        self.check_publish_failure("E_DPUB_FAILED", "DPUB")?;
        let mut st = self.inner.lock();
        let topic = lossy(topic);
        self.inner
            .publish(&mut st, &topic, vec![body], delay, Instant::now());
        if let Some(c) = st.clients.get_mut(&self.id) {
            c.published(&topic, 1);
        }
        Ok(Some(b"OK".to_vec()))
    }

    pub(super) fn mpub(&mut self, params: &[&[u8]]) -> CmdResult {
        let max_req = self.inner.opts.max_req_timeout;
        let (topic, _) = rules::publish_params(Publish::Mpub, params, max_req)?;
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
        let len = rules::body_size("MPUB", len, max_body)?;
        // readMPUB reads from the stream, not from a body-sized buffer.
        let mut src = LoggedReader {
            rd: &mut self.rd,
            logged: Vec::new(),
        };
        let bodies = rules::read_mpub(&mut src, max_body, max_msg)?;
        let LoggedReader { logged, .. } = src;
        if logged.len() != len {
            let msg = format!(
                "client {}: MPUB body size {len} does not match its {} messages ({} bytes); nsqd accepts this but it is a client bug",
                self.id,
                bodies.len(),
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

/// MPUB's source on a connection: what is read is kept for the command log.
struct LoggedReader<'a> {
    rd: &'a mut CmdReader,
    logged: Vec<u8>,
}

impl MpubSource for LoggedReader<'_> {
    fn read_len(&mut self) -> Option<i32> {
        let n = self.rd.read_len().ok()?;
        self.logged.extend_from_slice(&n.to_be_bytes());
        Some(n)
    }

    fn read_vec(&mut self, n: usize) -> Option<Vec<u8>> {
        let b = self.rd.read_exact_vec(n).ok()?;
        self.logged.extend_from_slice(&b);
        Some(b)
    }
}
