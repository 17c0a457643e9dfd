//! One nsqd TCP connection as a sans-IO state machine, for producers and consumers alike.
//!
//! A [`Connection`] owns everything between the socket and the frames: the start-up sequence
//! (magic, IDENTIFY with feature negotiation, TLS, snappy or deflate, AUTH, SUB), heartbeats
//! and liveness, the consumer's in-flight table and RDY bookkeeping, and the producer's
//! pipelined publishes. It does no IO: a driver moves bytes and time in and out.
//!
//! # Driving a connection
//!
//! A connection follows the crate's [driver contract](crate::driver): after creating it and
//! after **every** input or command, drain [`Connection::poll_transmit`] (bytes to write, in
//! one buffer), [`Connection::poll_event`] and [`Connection::poll_timeout`].
//!
//! ```
//! use std::time::Instant;
//! use bytes::BytesMut;
//! use nsq_proto::{Connection, ConnectionConfig, ConnectionEvent, Role, Topic};
//!
//! let now = Instant::now();
//! let mut conn = Connection::new(ConnectionConfig::default(), Role::Producer, "127.0.0.1:4150", now)?;
//! // Publishing before the handshake finished is fine: it is queued until `Ready`.
//! let token = conn.publish(now, &Topic::new("events")?, b"hello")?;
//! // magic, NOP (a producer's probe for nsqd requiring TLS) and IDENTIFY, for the socket
//! let hello = conn.poll_transmit().unwrap();
//! assert!(hello.starts_with(b"  V2NOP\nIDENTIFY\n"));
//!
//! // nsqd answers IDENTIFY with its negotiated settings ...
//! let mut read_buf = BytesMut::new();
//! nsq_proto::encode_frame(&mut read_buf, 0, br#"{"max_rdy_count":2500,"version":"1.3.0"}"#);
//! conn.handle_input(now, &mut read_buf);
//! assert!(matches!(conn.poll_event(), Some(ConnectionEvent::Ready(_))));
//! assert_eq!(&conn.poll_transmit().unwrap()[..], b"PUB events\n\x00\x00\x00\x05hello");
//!
//! // ... and the PUB with OK.
//! nsq_proto::encode_frame(&mut read_buf, 0, b"OK");
//! conn.handle_input(now, &mut read_buf);
//! assert_eq!(conn.poll_event(), Some(ConnectionEvent::Published(token)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
pub(crate) mod deflate;
mod disabled;
mod events;
mod handshake;
mod inflight;
mod layers;
mod publish;
pub(crate) mod snappy;
#[cfg(feature = "tls")]
mod tls;
#[cfg(not(feature = "tls"))]
use disabled::tls;

/// For the HTTP exchange's TLS (nsqd's `--https-address`).
pub(crate) use config::host_of;
pub use config::{Compression, ConfigError, ConnectionConfig, DEFAULT_USER_AGENT, Role, Secret};
pub use deflate::DeflateError;
pub use events::{
    CloseReason, ConnectionError, ConnectionEvent, ConnectionState, Misconfiguration, Negotiated,
    NegotiatedCompression, PublishError, PublishToken,
};
use handshake::Phase;
use layers::{Fill, Layers};
pub use snappy::SnappyError;
#[cfg(feature = "tls")]
pub use tls::{ClientCert, TlsSetupError, webpki_root_store};
pub use tls::{TlsConfig, TlsError};
pub(crate) use tls::{TlsLayer, TlsPull};

use crate::command::{self};
use crate::error_code::ErrorCode;
use crate::frame::{Frame, FrameDecoder, Message, MessageId, Response};
use crate::identify::{AuthResponse, IdentifyResponse};
use bytes::{Bytes, BytesMut};
#[cfg(feature = "tls")]
pub(crate) use rustls::pki_types::ServerName;
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};
#[cfg(not(feature = "tls"))]
pub(crate) use tls::ServerName;

/// The least room for a frame's data a connection accepts, whatever `max_msg_size` says:
/// nsqd's responses (IDENTIFY's JSON is some 300 bytes) must fit.
const MIN_FRAME_ROOM: u32 = 4096;

/// One nsqd connection. See the [module documentation](self) for how to drive it.
///
/// Methods come in four groups: queries (`&self`), inputs (`handle_*`), commands (misuse
/// returns an error and sends nothing) and outputs (`poll_*`).
pub struct Connection {
    config: ConnectionConfig,
    role: Role,
    /// The server's address, for the log lines the connection writes outside the handling of
    /// its own input (timeouts), where no span of the driver names it.
    addr: Box<str>,
    server_name: Option<ServerName<'static>>,
    phase: Phase,
    decoder: FrameDecoder,
    /// Plaintext received, not yet decoded into frames.
    rbuf: BytesMut,
    /// Plaintext commands not yet passed through the layers.
    wbuf: BytesMut,
    /// Publishes made before `Ready`.
    pre_ready: BytesMut,
    /// Wire bytes ready for the socket, after `whole`.
    out: BytesMut,
    /// Wire bytes ready for the socket, before `out`: commands queued whole, without a copy
    /// (a producer's publishes, plaintext only), and what `out` held before them.
    whole: VecDeque<Bytes>,
    /// The TLS and compression layers between `out`/`rbuf` and the socket.
    layers: Layers,
    pending_tls: bool,
    pending_codec: NegotiatedCompression,
    auth_done: bool,
    negotiated: Option<Negotiated>,
    read_timeout: Duration,
    msg_timeout: Duration,
    now: Instant,
    last_rx: Instant,
    rdy: u32,
    /// In-flight messages with their deadlines.
    inflight: inflight::InFlight,
    /// The ids that were in flight when the connection failed (the table is cleared then):
    /// its owner may still account for them.
    lost_in_flight: Vec<MessageId>,
    last_message_at: Option<Instant>,
    next_token: u64,
    first_outstanding: u64,
    close_wait: bool,
    drain_deadline: Option<Instant>,
    closed: Option<CloseReason>,
    events: VecDeque<ConnectionEvent>,
}

impl fmt::Debug for Connection {
    // Hand-written: buffers are not shown (a pending AUTH command holds the secret).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.role)
            .field("state", &self.state())
            .field("tls", &self.layers.has_tls())
            .field("codec", &self.layers.codec())
            .field("rdy", &self.rdy)
            .field("in_flight", &self.inflight.len())
            .field("outstanding_publishes", &self.outstanding_publishes())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Creates a connection to `server_addr` (`host:port`; the host names the server for TLS
    /// unless `TlsConfig::with_server_name` did) and queues the magic and IDENTIFY.
    pub fn new(
        config: ConnectionConfig,
        role: Role,
        server_addr: &str,
        now: Instant,
    ) -> Result<Connection, ConfigError> {
        let identify = config.identify()?;
        if config
            .auth_secret
            .as_ref()
            .is_some_and(|s| s.expose().is_empty())
        {
            return Err(ConfigError::Invalid("auth_secret is empty"));
        }
        let server_name = match &config.tls {
            Some(tls) => {
                let name = tls
                    .server_name()
                    .unwrap_or_else(|| config::host_of(server_addr))
                    .to_owned();
                Some(
                    ServerName::try_from(name.clone())
                        .map_err(|_| ConfigError::InvalidServerName(name))?,
                )
            }
            None => None,
        };
        let mut wbuf = BytesMut::with_capacity(256);
        command::magic(&mut wbuf);
        if !role.is_consumer() && config.tls.is_none() {
            // A probe: nsqd answers every command but IDENTIFY with a fatal
            // `E_INVALID ... (TLS required)` when it requires TLS and the client has not
            // started it, and says nothing otherwise (a NOP has no reply). Sent before
            // IDENTIFY, its error is the first frame, so a producer finds out during the
            // handshake instead of on its first publish (no other producer command is
            // both harmless and answered).
            command::nop(&mut wbuf);
        }
        command::identify(&mut wbuf, &identify)
            .map_err(|_| ConfigError::Invalid("IDENTIFY body rejected"))?;
        let read_timeout = config.effective_read_timeout();
        // Responses (IDENTIFY's JSON, errors) need room whatever the largest message is.
        let decoder =
            FrameDecoder::for_max_msg_size(config.limits.max_msg_size.max(MIN_FRAME_ROOM));
        Ok(Connection {
            role,
            addr: server_addr.into(),
            server_name,
            phase: Phase::Identify,
            decoder,
            rbuf: BytesMut::new(),
            wbuf,
            pre_ready: BytesMut::new(),
            out: BytesMut::new(),
            whole: VecDeque::new(),
            layers: Layers::default(),
            pending_tls: false,
            pending_codec: NegotiatedCompression::None,
            auth_done: false,
            negotiated: None,
            read_timeout,
            msg_timeout: Duration::from_secs(60),
            now,
            last_rx: now,
            rdy: 0,
            inflight: inflight::InFlight::default(),
            lost_in_flight: Vec::new(),
            last_message_at: None,
            next_token: 0,
            first_outstanding: 0,
            close_wait: false,
            drain_deadline: None,
            closed: None,
            events: VecDeque::new(),
            config,
        })
    }

    // ----- queries -----

    /// The coarse state.
    #[must_use]
    pub fn state(&self) -> ConnectionState {
        match self.phase {
            Phase::Identify | Phase::TlsOk | Phase::CompressionOk | Phase::Auth | Phase::Sub => {
                ConnectionState::Handshaking
            }
            Phase::Ready => ConnectionState::Ready,
            Phase::Closing => ConnectionState::Closing,
            Phase::Closed => ConnectionState::Closed,
        }
    }

    /// The role given at creation.
    #[must_use]
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// Negotiated settings, once IDENTIFY has been answered (`auth` is filled in when AUTH
    /// has been answered).
    #[must_use]
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// The server's max_rdy_count (2500 until IDENTIFY is answered).
    #[must_use]
    pub fn max_rdy(&self) -> u32 {
        self.negotiated
            .as_ref()
            .map_or(crate::identify::DEFAULT_MAX_RDY_COUNT as u32, |n| {
                n.max_rdy_count
            })
    }

    /// The last RDY count sent (0 initially and after [`Connection::close`]).
    #[must_use]
    pub fn rdy(&self) -> u32 {
        self.rdy
    }

    /// Messages delivered and not yet finished, requeued or expired.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// The ids of the messages in flight, in no particular order.
    /// After a failure, the ids that were in flight when it failed.
    pub(crate) fn in_flight_ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        self.inflight
            .ids()
            .chain(self.lost_in_flight.iter().copied())
    }

    /// Whether `id` is in flight on this connection.
    #[must_use]
    pub fn is_in_flight(&self, id: &MessageId) -> bool {
        self.inflight.contains(id)
    }

    /// When an in-flight message was delivered (`None` if it is not in flight).
    #[must_use]
    pub fn delivered_at(&self, id: &MessageId) -> Option<Instant> {
        self.inflight.get(id).map(|(_, delivered)| delivered)
    }

    /// When the last message was delivered.
    #[must_use]
    pub fn last_message_at(&self) -> Option<Instant> {
        self.last_message_at
    }

    /// Publishes awaiting a reply (including those queued before `Ready`).
    #[must_use]
    pub fn outstanding_publishes(&self) -> usize {
        (self.next_token - self.first_outstanding) as usize
    }

    /// The close reason, once closed.
    #[must_use]
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    // ----- inputs -----

    /// Feeds bytes read from the socket. All of `data` is consumed (it is left empty, keeping
    /// its spare capacity); in the plain-text path the bytes are taken without copying and
    /// message bodies are slices of them.
    pub fn handle_input(&mut self, now: Instant, data: &mut BytesMut) {
        let now = self.clock(now);
        if self.closed.is_some() {
            data.clear();
            return;
        }
        if data.is_empty() {
            return;
        }
        self.last_rx = now;
        if self.layers.is_plain() {
            self.plain_input(now, data);
            return;
        }
        self.layers.push(data);
        data.clear();
        self.process(now);
    }

    /// The plain-text path: frames are split off the caller's buffer itself. Only a frame
    /// straddling two reads is copied (just that frame), so message bodies are slices of the
    /// buffers the driver read into.
    fn plain_input(&mut self, now: Instant, data: &mut BytesMut) {
        while !data.is_empty() {
            if self.rbuf.is_empty() {
                self.rbuf = data.split();
            } else {
                let n = self.bytes_to_complete_frame().min(data.len());
                self.rbuf.extend_from_slice(&data[..n]);
                bytes::Buf::advance(data, n);
            }
            self.process(now);
            if self.closed.is_some() {
                data.clear();
                return;
            }
            if !self.layers.is_plain() {
                // An upgrade happened: the rest belongs to the new layer.
                self.handle_input(now, data);
                return;
            }
        }
    }

    /// How many more bytes the partial frame at the front of `rbuf` needs (at least 1).
    fn bytes_to_complete_frame(&self) -> usize {
        let have = self.rbuf.len();
        if have < 4 {
            return 4 - have;
        }
        let size = u32::from_be_bytes([self.rbuf[0], self.rbuf[1], self.rbuf[2], self.rbuf[3]]);
        (4 + size as usize).saturating_sub(have).max(1)
    }

    /// The server closed its side of the socket.
    pub fn handle_eof(&mut self, now: Instant) {
        let _ = self.clock(now);
        self.on_eof();
    }

    /// Time has reached (at least) the last [`Connection::poll_timeout`]: checks liveness,
    /// message deadlines and the drain deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.closed.is_some() {
            return;
        }
        let idle = now.saturating_duration_since(self.last_rx);
        if idle >= self.read_timeout {
            tracing::debug!(?idle, nsqd = %self.addr, "nsqd connection timed out");
            self.fail(CloseReason::Timeout { idle });
            return;
        }
        self.auto_touch(now);
        self.expire(now);
        self.check_close_done();
        if let Some(deadline) = self.drain_deadline {
            if now >= deadline && self.closed.is_none() {
                let unanswered = self.unanswered();
                self.fail(CloseReason::Graceful { unanswered });
            }
        }
    }

    // ----- commands -----

    /// Sends `RDY count` (consumer, after `Ready`). `count` must not exceed
    /// [`Connection::max_rdy`].
    pub fn set_rdy(&mut self, now: Instant, count: u32) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if !self.role.is_consumer() {
            return Err(ConnectionError::WrongRole);
        }
        match self.phase {
            Phase::Ready => {}
            Phase::Closing => return Err(ConnectionError::Closing),
            _ => return Err(ConnectionError::NotReady),
        }
        let max = self.max_rdy();
        if count > max {
            return Err(ConnectionError::RdyTooHigh {
                requested: count,
                max,
            });
        }
        command::rdy(&mut self.wbuf, count);
        self.rdy = count;
        Ok(())
    }

    /// Sends FIN for an in-flight message.
    pub fn finish(&mut self, now: Instant, id: &MessageId) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if !self.inflight.remove(id) {
            return Err(ConnectionError::NotInFlight(*id));
        }
        // `command::fin` in one copy: this is once per message.
        let mut fin = *b"FIN 0123456789abcdef\n";
        fin[4..20].copy_from_slice(id.as_bytes());
        self.wbuf.extend_from_slice(&fin);
        self.after_answer();
        Ok(())
    }

    /// Sends REQ for an in-flight message; the server redelivers it after `delay`.
    pub fn requeue(
        &mut self,
        now: Instant,
        id: &MessageId,
        delay: Duration,
    ) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if !self.inflight.contains(id) {
            return Err(ConnectionError::NotInFlight(*id));
        }
        command::req(&mut self.wbuf, id, delay, &self.config.limits)
            .map_err(ConnectionError::Command)?;
        self.inflight.remove(id);
        self.after_answer();
        Ok(())
    }

    /// Sends TOUCH for an in-flight message: its deadline becomes now + msg_timeout.
    pub fn touch(&mut self, now: Instant, id: &MessageId) -> Result<(), ConnectionError> {
        let now = self.clock(now);
        self.check_open()?;
        let Some((current, delivered)) = self.inflight.get(id) else {
            return Err(ConnectionError::NotInFlight(*id));
        };
        let deadline = self.touched_deadline(now, current, delivered);
        self.inflight.reschedule(id, deadline);
        command::touch(&mut self.wbuf, id);
        Ok(())
    }

    /// Turns auto-touch on (`Some(limit)`: see the consumer's `auto_touch_limit`) or off
    /// while the connection runs. Turned on, the messages already in flight are touched too,
    /// a little before their deadline, as every later delivery is.
    pub fn set_auto_touch(&mut self, now: Instant, limit: Option<Duration>) {
        let _ = self.clock(now);
        if self.config.auto_touch.is_some() == limit.is_some() {
            self.config.auto_touch = limit;
            return;
        }
        self.config.auto_touch = limit;
        self.inflight.set_touch_all(limit.is_some());
    }

    /// How long the connection keeps touching its messages on its own (`auto_touch`), or
    /// `None` when it does not.
    #[must_use]
    pub fn auto_touch_limit(&self) -> Option<Duration> {
        self.config.auto_touch
    }

    /// The deadline a TOUCH at `now` gives a message: now + msg_timeout, but nsqd never
    /// extends a message beyond delivery + max_msg_timeout, and never shortens it.
    fn touched_deadline(&self, now: Instant, current: Instant, delivered: Instant) -> Instant {
        let max_msg_timeout = self
            .negotiated
            .as_ref()
            .map_or(Duration::from_secs(15 * 60), |n| n.max_msg_timeout);
        (now + self.msg_timeout)
            .min(delivered + max_msg_timeout)
            .max(current)
    }

    /// How long before a message's deadline `auto_touch` touches it: a quarter of
    /// msg_timeout, at most 5 s (nsqd must read the TOUCH before the deadline passes).
    fn auto_touch_lead(&self) -> Duration {
        (self.msg_timeout / 4).min(Duration::from_secs(5))
    }

    /// `auto_touch`: touches the messages whose deadline is within the lead, as long as they
    /// have been in flight less than the configured limit and nsqd's max_msg_timeout still
    /// allows an extension; past that a message is left to time out (logged once).
    fn auto_touch(&mut self, now: Instant) {
        let Some(limit) = self.config.auto_touch else {
            return;
        };
        let lead = self.auto_touch_lead();
        while let Some((id, deadline, delivered)) = self.inflight.pop_touch_due(now + lead) {
            if deadline <= now {
                continue; // too late: it expires now
            }
            let held = now.saturating_duration_since(delivered);
            let extended = self.touched_deadline(now, deadline, delivered);
            if held >= limit || extended <= deadline {
                tracing::warn!(
                    msg_id = %id,
                    nsqd = %self.addr,
                    ?held,
                    ?limit,
                    "auto-touch stops (its limit or nsqd's max_msg_timeout reached): the \
                     message will time out and be redelivered"
                );
                continue;
            }
            self.inflight.reschedule(&id, extended);
            self.inflight.rearm_touch(&id);
            command::touch(&mut self.wbuf, &id);
        }
    }

    /// Queues a NOP, which nsqd reads and never answers. Useful to exercise the write path of an
    /// idle connection (a producer's `ping`); heartbeats are answered without it.
    pub fn nop(&mut self, now: Instant) -> Result<(), ConnectionError> {
        let _ = self.clock(now);
        self.check_open()?;
        if self.state() != ConnectionState::Ready {
            return Err(ConnectionError::NotReady);
        }
        command::nop(&mut self.wbuf);
        Ok(())
    }

    /// Starts a graceful close.
    ///
    /// Consumer: sends CLS, stops RDY, keeps accepting answers for in-flight messages, and
    /// closes once the server answered `CLOSE_WAIT` and nothing is in flight, or when
    /// `drain_timeout` passes. Producer: sends nothing (CLS is fatal on a publishing
    /// connection) and closes once every outstanding publish is resolved or `drain_timeout`
    /// passes. During start-up the connection closes at once (publishes queued for after the
    /// start-up fail). Calling it again does nothing.
    pub fn close(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.closed.is_some() || self.phase == Phase::Closing {
            return;
        }
        if self.phase != Phase::Ready {
            // Publishes queued during start-up were never sent: they fail and count as
            // unanswered.
            let unanswered = self.unanswered();
            self.fail(CloseReason::Graceful { unanswered });
            return;
        }
        self.phase = Phase::Closing;
        self.drain_deadline = Some(now + self.config.drain_timeout);
        if self.role.is_consumer() {
            command::cls(&mut self.wbuf);
            self.rdy = 0;
        }
        self.check_close_done();
    }

    // ----- outputs -----

    /// The bytes to send next, compressed and encrypted as negotiated; `None` when there is
    /// nothing to send. Call it until `None`: what was queued since the last call comes in
    /// one buffer, except a producer's publishes, each of which comes as the buffer it was
    /// encoded in (so its bodies are not copied again).
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if let Err(e) = self.flush_wbuf() {
            self.fail(CloseReason::Tls(e));
        }
        if let Some(data) = self.whole.pop_front() {
            return Some(data);
        }
        if self.out.is_empty() {
            None
        } else {
            Some(self.out.split().freeze())
        }
    }

    /// Whether [`Connection::poll_transmit`] may have bytes to return.
    pub(crate) fn has_transmit(&self) -> bool {
        !self.wbuf.is_empty() || !self.out.is_empty() || !self.whole.is_empty()
    }

    /// Queues `data` to go to the socket as it is, after everything queued before it
    /// (plaintext only: nothing may stand between the commands and the socket).
    fn queue_whole(&mut self, data: Bytes) {
        if let Err(e) = self.flush_wbuf() {
            self.fail(CloseReason::Tls(e));
            return;
        }
        if !self.out.is_empty() {
            self.whole.push_back(self.out.split().freeze());
        }
        self.whole.push_back(data);
    }

    /// The earliest instant at which [`Connection::handle_timeout`] must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            // A close that happened outside an input (a failed TLS write in poll_transmit,
            // say) and is not reported yet: due at once, so a driver that only waits on
            // timers still gets to it. Nothing once the events are drained.
            return (!self.events.is_empty()).then_some(self.last_rx);
        }
        let mut t = self.last_rx + self.read_timeout;
        if let Some(deadline) = self.inflight.next_deadline() {
            t = t.min(deadline);
        }
        if let Some(deadline) = self.inflight.next_touch_deadline() {
            let lead = self.auto_touch_lead();
            t = t.min(deadline.checked_sub(lead).unwrap_or(deadline));
        }
        if let Some(deadline) = self.drain_deadline {
            t = t.min(deadline);
        }
        Some(t)
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ConnectionEvent> {
        crate::queue::pop_front(&mut self.events)
    }

    /// The next event if it is a delivery that `accept`s (the consumer's path for a run of
    /// messages, which needs no `match` on every other kind of event).
    pub(crate) fn poll_message(&mut self, accept: impl Fn(&Message) -> bool) -> Option<Message> {
        if !matches!(self.events.front(), Some(ConnectionEvent::Message(m)) if accept(m)) {
            return None;
        }
        match crate::queue::pop_front(&mut self.events) {
            Some(ConnectionEvent::Message(m)) => Some(m),
            _ => None,
        }
    }

    // ----- internals -----

    fn clock(&mut self, now: Instant) -> Instant {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    fn check_open(&self) -> Result<(), ConnectionError> {
        match &self.closed {
            Some(reason) => Err(ConnectionError::Closed(reason.clone())),
            None => Ok(()),
        }
    }

    fn unanswered(&self) -> usize {
        if self.role.is_consumer() {
            self.inflight.len()
        } else {
            self.outstanding_publishes()
        }
    }

    fn after_answer(&mut self) {
        self.check_close_done();
    }

    fn expire(&mut self, now: Instant) {
        while let Some(id) = self.inflight.pop_expired(now) {
            tracing::debug!(msg_id = %id, nsqd = %self.addr, "message expired unanswered");
            self.events.push_back(ConnectionEvent::MessageExpired(id));
        }
    }

    fn check_close_done(&mut self) {
        if self.phase != Phase::Closing || self.closed.is_some() {
            return;
        }
        let done = if self.role.is_consumer() {
            self.close_wait && self.inflight.is_empty()
        } else {
            self.outstanding_publishes() == 0
        };
        if done {
            self.fail(CloseReason::Graceful { unanswered: 0 });
        }
    }

    fn on_eof(&mut self) {
        if self.closed.is_some() {
            return;
        }
        if self.phase == Phase::Closing {
            let unanswered = self.unanswered();
            self.fail(CloseReason::Graceful { unanswered });
        } else {
            self.fail(CloseReason::Eof);
        }
    }

    /// Ends the connection with `reason` (once): fails outstanding publishes and forgets
    /// in-flight messages.
    fn fail(&mut self, reason: CloseReason) {
        if self.closed.is_some() {
            return;
        }
        if let CloseReason::Graceful { .. } = &reason {
            tracing::debug!(%reason, nsqd = %self.addr, "nsqd connection closed");
            // The last commands, then TLS close_notify, go out with the last poll_transmit.
            let flushed = self.flush_wbuf();
            if let (Ok(()), Err(e)) = (flushed, self.layers.close_notify(&mut self.out)) {
                tracing::debug!(error = %e, "could not queue TLS close_notify");
            }
        } else {
            tracing::debug!(%reason, nsqd = %self.addr, "nsqd connection failed");
        }
        for t in self.first_outstanding..self.next_token {
            self.events.push_back(ConnectionEvent::PublishFailed(
                PublishToken(t),
                PublishError::Closed(reason.clone()),
            ));
        }
        self.first_outstanding = self.next_token;
        self.lost_in_flight = self.inflight.ids().collect();
        self.inflight.clear();
        self.pre_ready.clear();
        self.drain_deadline = None;
        self.phase = Phase::Closed;
        self.closed = Some(reason.clone());
        self.events.push_back(ConnectionEvent::Closed(reason));
    }

    fn violation(&mut self, what: impl Into<String>) {
        self.fail(CloseReason::Protocol(what.into()));
    }

    /// Decodes frames and pulls plaintext from the layers until both are exhausted.
    fn process(&mut self, now: Instant) {
        loop {
            loop {
                if self.closed.is_some() {
                    return;
                }
                match self.decoder.decode(&mut self.rbuf) {
                    Ok(Some(frame)) => self.handle_frame(now, frame),
                    Ok(None) => break,
                    Err(e) => {
                        self.fail(CloseReason::Decode(e));
                        return;
                    }
                }
            }
            match self.layers.fill(&mut self.rbuf, &mut self.out) {
                Ok(Fill::More) => {}
                Ok(Fill::Idle) => return,
                Ok(Fill::Eof) => {
                    self.on_eof();
                    return;
                }
                Err(reason) => {
                    self.fail(reason);
                    return;
                }
            }
        }
    }

    /// Passes queued plaintext through compression and TLS into `out`.
    fn flush_wbuf(&mut self) -> Result<(), TlsError> {
        if self.closed.is_some() && !matches!(self.closed, Some(CloseReason::Graceful { .. })) {
            // The stream is broken; nothing more can be sent meaningfully.
            self.wbuf.clear();
            self.whole.clear();
            return Ok(());
        }
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.layers.write(&mut self.wbuf, &mut self.out)
    }

    fn handle_frame(&mut self, now: Instant, frame: Frame) {
        match frame {
            Frame::Response(Response::Heartbeat) => {
                tracing::trace!("heartbeat");
                command::nop(&mut self.wbuf);
            }
            Frame::Response(response) => self.handle_response(response),
            Frame::Error(err) if !err.is_fatal() => {
                tracing::debug!(%err, "non-fatal nsqd error");
                self.events.push_back(ConnectionEvent::ServerError(err));
            }
            Frame::Error(err) => {
                if matches!(self.phase, Phase::Ready | Phase::Closing)
                    && !self.role.is_consumer()
                    && self.outstanding_publishes() > 0
                {
                    let token = PublishToken(self.first_outstanding);
                    self.first_outstanding += 1;
                    self.events.push_back(ConnectionEvent::PublishFailed(
                        token,
                        PublishError::Server(err.clone()),
                    ));
                }
                let reason = if err.code() == ErrorCode::Invalid
                    && err.description().contains("(TLS required)")
                {
                    CloseReason::TlsRequired(err)
                } else {
                    CloseReason::Server(err)
                };
                self.fail(reason);
            }
            Frame::Message(message) => self.handle_message(now, message),
        }
    }

    fn handle_message(&mut self, now: Instant, message: Message) {
        if !self.role.is_consumer() {
            return self.violation("message delivered on a producer connection");
        }
        if !matches!(self.phase, Phase::Ready | Phase::Closing) {
            return self.violation("message delivered before the subscription was confirmed");
        }
        let deadline = now + self.msg_timeout;
        let again =
            self.inflight
                .insert(message.id, deadline, now, self.config.auto_touch.is_some());
        self.last_message_at = Some(now);
        if again {
            self.events.push_back(ConnectionEvent::Redelivered(message));
        } else {
            self.events.push_back(ConnectionEvent::Message(message));
        }
    }

    fn handle_response(&mut self, response: Response) {
        match self.phase {
            Phase::Identify => match IdentifyResponse::parse(response.as_bytes()) {
                Ok(reply) => self.on_identify(reply),
                Err(e) => self.fail(CloseReason::IdentifyReply(e)),
            },
            Phase::TlsOk => {
                if response == Response::Ok {
                    tracing::debug!("TLS established");
                    self.advance_handshake();
                } else {
                    self.violation("expected OK after the TLS upgrade");
                }
            }
            Phase::CompressionOk => {
                if response == Response::Ok {
                    self.advance_handshake();
                } else {
                    self.violation("expected OK after the compression upgrade");
                }
            }
            Phase::Auth => match response {
                Response::Other(data) => match AuthResponse::parse(&data) {
                    Ok(auth) => {
                        tracing::debug!(identity = %auth.identity, "authenticated");
                        if let Some(n) = &mut self.negotiated {
                            n.auth = Some(auth);
                        }
                        self.advance_handshake();
                    }
                    Err(e) => self.fail(CloseReason::AuthReply(e)),
                },
                _ => self.violation("expected a JSON reply to AUTH"),
            },
            Phase::Sub => {
                if response == Response::Ok {
                    self.ready();
                } else {
                    self.violation("expected OK after SUB");
                }
            }
            Phase::Ready | Phase::Closing => match response {
                Response::Ok if !self.role.is_consumer() && self.outstanding_publishes() > 0 => {
                    let token = PublishToken(self.first_outstanding);
                    self.first_outstanding += 1;
                    self.events.push_back(ConnectionEvent::Published(token));
                    self.check_close_done();
                }
                Response::CloseWait if self.role.is_consumer() && self.phase == Phase::Closing => {
                    self.close_wait = true;
                    self.check_close_done();
                }
                other => self.violation(format!(
                    "unexpected response {:?}",
                    String::from_utf8_lossy(&other.as_bytes()[..other.as_bytes().len().min(64)])
                )),
            },
            Phase::Closed => {}
        }
    }

    /// Bytes buffered inside the layers: the fuzzers and tests check that a small input never
    /// makes them grow without bound. Not part of the API (only built with the `fuzzing` or
    /// `test-support` feature).
    #[cfg(any(feature = "fuzzing", feature = "test-support"))]
    #[doc(hidden)]
    #[must_use]
    pub fn buffered_input(&self) -> usize {
        self.rbuf.len() + self.layers.buffered()
    }
}
