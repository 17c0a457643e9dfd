//! The nsqd stand-in: TCP protocol V2, topics/channels, timers, faults and introspection.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::http::{HttpServer, Request, Response};
use crate::lookupd::{LookupShared, Lookupd, PeerInfo, ProducerId};
use crate::options::{AuthGrant, AuthTable, Options};
use crate::tls::{TestPki, server_config};
use crate::transport::{
    CmdReader, ConnCtl, Faults, LineError, RawRead, RawWrite, Throttle, TlsRead, TlsShared,
    TlsWrite,
};
use crate::util::{go_quote, is_ephemeral, is_valid_name, wait_until};

/// Identifies a client connection of a test nsqd (1, 2, 3 ... in connection order).
pub type ClientId = u64;

/// A client's protocol state, as nsqd tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientState {
    /// Connected, not subscribed (publishers stay here).
    Init,
    /// After SUB.
    Subscribed,
    /// After CLS: RDY forced to 0, FIN/REQ/TOUCH still accepted.
    Closing,
}

/// Counters of a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelStats {
    /// Topic name.
    pub topic: String,
    /// Channel name.
    pub name: String,
    /// Messages that entered the channel (from the topic).
    pub message_count: u64,
    /// Messages waiting to be sent.
    pub depth: usize,
    /// Messages deferred (DPUB or REQ with delay).
    pub deferred: usize,
    /// Messages in flight.
    pub in_flight: usize,
    /// Messages finished (FIN).
    pub finished: u64,
    /// Messages requeued (REQ).
    pub requeued: u64,
    /// Messages that timed out in flight.
    pub timed_out: u64,
    /// Subscribed clients.
    pub clients: Vec<ClientId>,
}

/// Counters of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicStats {
    /// Topic name.
    pub name: String,
    /// Messages published to it.
    pub message_count: u64,
    /// Messages held by the topic because it has no channel yet.
    pub depth: usize,
    /// Its channels.
    pub channels: Vec<ChannelStats>,
}

/// A client connection's state.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientStats {
    /// Its id.
    pub id: ClientId,
    /// The client's address.
    pub remote_address: SocketAddr,
    /// Protocol state.
    pub state: ClientState,
    /// Current RDY.
    pub rdy: i64,
    /// Messages in flight to it.
    pub in_flight: i64,
    /// `(topic, channel)` after SUB.
    pub subscription: Option<(String, String)>,
    /// Negotiated message timeout.
    pub msg_timeout: Duration,
    /// Negotiated heartbeat interval (`None` = disabled).
    pub heartbeat_interval: Option<Duration>,
    /// TLS is on.
    pub tls: bool,
    /// Snappy is on.
    pub snappy: bool,
    /// Deflate is on (with this level).
    pub deflate: Option<u32>,
    /// AUTH identity.
    pub identity: Option<String>,
    /// The IDENTIFY body, as JSON.
    pub identify: Option<Value>,
    /// Messages sent to it.
    pub delivered: u64,
    /// FIN received.
    pub finished: u64,
    /// REQ received.
    pub requeued: u64,
    /// Its messages that timed out.
    pub timed_out: u64,
}

/// A snapshot of the whole broker.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Topics, by name.
    pub topics: Vec<TopicStats>,
    /// Connected clients, by id.
    pub clients: Vec<ClientStats>,
}

/// One command received, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    /// Global sequence number (0, 1, 2 ...).
    pub seq: u64,
    /// Which client sent it.
    pub client: ClientId,
    /// When it was handled.
    pub at: Instant,
    /// The command line without its newline (lossy UTF-8).
    pub line: String,
    /// The body, when the command had one and it was read (at most
    /// [`Options::command_log_body_limit`] bytes of it).
    pub body: Option<Vec<u8>>,
    /// The body's full length.
    pub body_len: usize,
    /// The error sent back, if any (`E_CODE description`).
    pub error: Option<String>,
}

impl CommandRecord {
    /// The command name (`PUB`, `RDY` ...).
    pub fn name(&self) -> &str {
        self.line.split(' ').next().unwrap_or("")
    }
}

#[derive(Clone, Debug)]
struct Msg {
    id: [u8; 16],
    body: Arc<[u8]>,
    timestamp: i64,
    attempts: u16,
}

static NEXT_MSG: AtomicU64 = AtomicU64::new(0);

impl Msg {
    fn new(body: Vec<u8>) -> Self {
        static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let base = *BASE.get_or_init(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                << 8
        });
        let n = base.wrapping_add(NEXT_MSG.fetch_add(1, Ordering::Relaxed));
        let mut id = [0u8; 16];
        id.copy_from_slice(format!("{n:016x}").as_bytes());
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        Self {
            id,
            body: body.into(),
            timestamp,
            attempts: 0,
        }
    }

    fn frame(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(26 + self.body.len());
        data.extend_from_slice(&self.timestamp.to_be_bytes());
        data.extend_from_slice(&self.attempts.to_be_bytes());
        data.extend_from_slice(&self.id);
        data.extend_from_slice(&self.body);
        frame(2, &data)
    }
}

fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(data.len() as u32 + 4).to_be_bytes());
    f.extend_from_slice(&kind.to_be_bytes());
    f.extend_from_slice(data);
    f
}

struct InFlight {
    msg: Msg,
    client: ClientId,
    deadline: Instant,
    delivered: Instant,
}

#[derive(Default)]
struct Channel {
    queue: VecDeque<Msg>,
    deferred: Vec<(Instant, Msg)>,
    in_flight: HashMap<[u8; 16], InFlight>,
    clients: Vec<ClientId>,
    rr: usize,
    message_count: u64,
    finished: u64,
    requeued: u64,
    timed_out: u64,
    /// `(instant, messages in flight)` after every change, oldest first (bounded).
    in_flight_log: VecDeque<(Instant, usize)>,
}

/// How many changes of a channel's in-flight count [`Nsqd::in_flight_log`] keeps.
pub(crate) const IN_FLIGHT_LOG_LEN: usize = 100_000;

impl Channel {
    /// Records the in-flight count if it changed.
    fn note_in_flight(&mut self) {
        let n = self.in_flight.len();
        if self.in_flight_log.back().map_or(0, |(_, last)| *last) != n {
            if self.in_flight_log.len() == IN_FLIGHT_LOG_LEN {
                self.in_flight_log.pop_front();
            }
            self.in_flight_log.push_back((Instant::now(), n));
        }
    }

    fn put(&mut self, msg: Msg, defer: Duration, now: Instant) {
        if defer.is_zero() {
            self.queue.push_back(msg);
        } else {
            self.deferred.push((now + defer, msg));
        }
    }
}

#[derive(Default)]
struct Topic {
    channels: BTreeMap<String, Channel>,
    backlog: VecDeque<(Msg, Duration)>,
    message_count: u64,
}

enum Layer {
    Tls(Arc<TlsShared>),
    Snappy,
    Deflate(u32),
}

enum Out {
    /// A response or error frame: written, then everything buffered is flushed.
    Frame(Vec<u8>),
    /// A message frame: buffered like nsqd's `bufio.Writer` (flushed when full, on the
    /// output buffer ticker, with the next other frame, or on [`Out::Flush`]).
    Message(Vec<u8>),
    /// Flush buffered messages (nsqd does when the client is not ready for more).
    Flush,
    /// A new output buffer size (nsqd flushes and makes a new writer on IDENTIFY).
    BufferSize(usize),
    /// (Re)starts the output buffer flush ticker; `None` stops it.
    FlushTicker(Option<Duration>),
    Heartbeat(Option<Duration>),
    /// Write the frame on the current layer, flush, then switch layers, with no heartbeat in
    /// between (nsqd holds its write lock across the upgrade).
    Upgrade(Vec<u8>, Layer),
    Close,
}

struct Client {
    remote: SocketAddr,
    out: Sender<Out>,
    stream: TcpStream,
    ctl: Arc<ConnCtl>,
    state: ClientState,
    rdy: i64,
    in_flight: i64,
    /// The client's msg_timeout (IDENTIFY reply, TOUCH), as of its latest IDENTIFY.
    msg_timeout: Duration,
    /// The timeout deliveries get: nsqd's message pump takes it from the first IDENTIFY only.
    pump_msg_timeout: Duration,
    heartbeat: Option<Duration>,
    output_buffer_size: i64,
    output_buffer_timeout: Duration,
    sample_rate: i64,
    sub: Option<(String, String)>,
    auth: Option<AuthGrant>,
    identify: Option<Value>,
    tls: bool,
    snappy: bool,
    deflate: Option<u32>,
    delivered: u64,
    finished: u64,
    requeued: u64,
    timed_out: u64,
}

impl Client {
    fn kill(&self) {
        self.ctl.killed.store(true, Ordering::SeqCst);
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

#[derive(Default)]
struct State {
    topics: BTreeMap<String, Topic>,
    clients: BTreeMap<ClientId, Client>,
    next_client: ClientId,
    log: VecDeque<CommandRecord>,
    next_seq: u64,
    /// Commands being executed and not logged yet (their effects may already show).
    executing: usize,
    warnings: Vec<String>,
}

struct Inner {
    opts: Options,
    tls: Option<Arc<rustls::ServerConfig>>,
    addr: SocketAddr,
    listener: Mutex<Option<TcpListener>>,
    ignore_accepts: AtomicBool,
    state: Mutex<State>,
    wake: Condvar,
    shutdown: AtomicBool,
    faults: Arc<Faults>,
    conn_threads: Mutex<Vec<JoinHandle<()>>>,
    lookup: Mutex<Vec<(Arc<LookupShared>, ProducerId)>>,
    fail_publishes: AtomicBool,
    /// Unix seconds at start (`/info`'s `start_time`).
    start_time: u64,
    /// The HTTP port (0 without HTTP), set once the HTTP server listens.
    http_port: AtomicU16,
}

/// nsqd's `/info` answer, fields in Go's order (durations in nanoseconds, as Go encodes them).
#[derive(Serialize)]
struct InfoReply<'a> {
    version: &'a str,
    broadcast_address: &'a str,
    hostname: &'a str,
    http_port: u16,
    tcp_port: u16,
    start_time: u64,
    max_heartbeat_interval: u64,
    max_output_buffer_size: i64,
    max_output_buffer_timeout: u64,
    max_deflate_level: i64,
}

/// Builder of a [`Nsqd`]; every setter mirrors an nsqd flag.
#[derive(Debug, Default)]
pub struct NsqdBuilder {
    opts: Options,
    lookupd: Vec<Arc<LookupShared>>,
    http: bool,
}

macro_rules! setter {
    ($(#[$doc:meta] $name:ident: $ty:ty),* $(,)?) => {
        $(#[$doc] pub fn $name(mut self, value: $ty) -> Self { self.opts.$name = value; self })*
    };
}

impl NsqdBuilder {
    setter! {
        /// `--max-rdy-count`.
        max_rdy_count: i64,
        /// `--max-channel-consumers` (0 = unlimited).
        max_channel_consumers: usize,
        /// `--msg-timeout` (default per-client message timeout).
        msg_timeout: Duration,
        /// `--max-msg-timeout`.
        max_msg_timeout: Duration,
        /// `--max-msg-size`.
        max_msg_size: i64,
        /// `--max-body-size`.
        max_body_size: i64,
        /// `--max-req-timeout` (also bounds DPUB).
        max_req_timeout: Duration,
        /// nsqd's queue scan tick (100ms) for timeouts and deferred messages ([`Options::queue_scan_interval`]).
        queue_scan_interval: Duration,
        /// Default heartbeat interval of clients that do not ask for one (nsqd: half its client timeout, 30s, not a flag).
        heartbeat_interval: Duration,
        /// `--output-buffer-timeout` (default output buffer timeout of a client).
        output_buffer_timeout: Duration,
        /// `--max-heartbeat-interval`.
        max_heartbeat_interval: Duration,
        /// `--max-output-buffer-size`.
        max_output_buffer_size: i64,
        /// `--min-output-buffer-timeout`.
        min_output_buffer_timeout: Duration,
        /// `--max-output-buffer-timeout`.
        max_output_buffer_timeout: Duration,
        /// `--max-deflate-level`.
        max_deflate_level: i64,
        /// `--snappy`.
        snappy: bool,
        /// `--deflate`.
        deflate: bool,
        /// Serve TLS with a certificate from [`TestPki::global`].
        tls: bool,
        /// `--tls-required` (implies `tls`).
        tls_required: bool,
        /// Version reported by IDENTIFY and to lookupd.
        version: String,
        /// How many commands the command log keeps (0 = none).
        command_log_limit: usize,
        /// How many bytes of each body the command log keeps.
        command_log_body_limit: usize,
    }

    /// Replaces all options.
    pub fn options(mut self, opts: Options) -> Self {
        self.opts = opts;
        self
    }

    /// Names in the server certificate (default `localhost`, `127.0.0.1`); give a wrong name
    /// to test hostname verification. Implies `tls`.
    pub fn tls_server_names(mut self, names: &[&str]) -> Self {
        self.opts.tls = true;
        self.opts.tls_server_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Enables AUTH with this table.
    pub fn auth(mut self, table: AuthTable) -> Self {
        self.opts.auth = Some(table);
        self
    }

    /// Registers with this lookupd (in-process): the producer appears on start, topics and
    /// channels as they are created, and it disappears on shutdown. Call again to register
    /// with several lookupds.
    pub fn lookupd(mut self, lookupd: &Lookupd) -> Self {
        self.lookupd.push(lookupd.shared());
        self
    }

    /// Also serve nsqd's HTTP API subset (`/ping`, `/info`, `/pub`, `/mpub`, `/topic/create`,
    /// `/topic/delete`, `/channel/create`, `/channel/delete`, `/stats`).
    pub fn http(mut self, on: bool) -> Self {
        self.http = on;
        self
    }

    /// Starts the broker on `127.0.0.1` with an ephemeral port.
    pub fn start(self) -> io::Result<Nsqd> {
        let mut opts = self.opts;
        if opts.tls_required {
            opts.tls = true;
        }
        let tls = if opts.tls {
            let names: Vec<&str> = opts.tls_server_names.iter().map(String::as_str).collect();
            let identity = TestPki::global().issue(&names).map_err(io::Error::other)?;
            Some(server_config(&identity).map_err(io::Error::other)?)
        } else {
            None
        };
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            opts,
            tls,
            addr,
            listener: Mutex::new(Some(listener)),
            ignore_accepts: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            faults: Arc::default(),
            conn_threads: Mutex::default(),
            lookup: Mutex::new(Vec::new()),
            fail_publishes: AtomicBool::new(false),
            start_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            http_port: AtomicU16::new(0),
        });
        let http = if self.http {
            let h = inner.clone();
            Some(HttpServer::start(
                "nsqd",
                Arc::new(move |req: &Request| h.handle_http(req)),
            )?)
        } else {
            None
        };
        if let Some(h) = &http {
            inner.http_port.store(h.addr().port(), Ordering::SeqCst);
        }
        for shared in self.lookupd {
            let http_port = http.as_ref().map_or(0, |h| h.addr().port());
            let mut info = PeerInfo::local(addr.port(), http_port);
            info.hostname.clone_from(&inner.opts.hostname);
            info.broadcast_address
                .clone_from(&inner.opts.broadcast_address);
            info.version.clone_from(&inner.opts.version);
            let id = shared.add_producer(info);
            inner
                .lookup
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((shared, id));
        }
        let acceptor = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("nsqd-accept".into())
                .spawn(move || inner.accept_loop())?
        };
        let scanner = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("nsqd-scan".into())
                .spawn(move || inner.scan_loop())?
        };
        Ok(Nsqd {
            inner,
            acceptor: Some(acceptor),
            scanner: Some(scanner),
            http,
        })
    }
}

/// A strict in-process nsqd v1.3.0 stand-in on `127.0.0.1` (ephemeral port).
///
/// Each connection runs on its own threads (a reader that parses and executes commands and a
/// writer that owns the outgoing byte stream and the heartbeat ticker); one more thread
/// handles in-flight timeouts and deferred messages. Dropping it (or [`Nsqd::shutdown`])
/// closes every socket and joins every thread.
pub struct Nsqd {
    inner: Arc<Inner>,
    acceptor: Option<JoinHandle<()>>,
    scanner: Option<JoinHandle<()>>,
    http: Option<HttpServer>,
}

impl std::fmt::Debug for Nsqd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nsqd")
            .field("tcp_address", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

/// What [`Nsqd::restart`] does with the messages the broker holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Keep topics, channels and messages (in-flight ones go back to their queue), like an nsqd
    /// that persisted its queues.
    KeepMessages,
    /// Start empty.
    DropMessages,
}

impl Nsqd {
    /// A builder with nsqd's default options.
    pub fn builder() -> NsqdBuilder {
        NsqdBuilder::default()
    }

    /// Starts a broker with default options.
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// The TCP address (`127.0.0.1:port`).
    pub fn tcp_address(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The HTTP address, when started with [`NsqdBuilder::http`].
    pub fn http_address(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(HttpServer::addr)
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    // ---- introspection ----

    /// A snapshot of topics, channels and clients.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// One topic's counters.
    pub fn topic(&self, name: &str) -> Option<TopicStats> {
        self.stats().topics.into_iter().find(|t| t.name == name)
    }

    /// Every change of a channel's count of messages in flight, as `(when, count)`, oldest
    /// first (the last 100 000), recorded under the broker's lock as each
    /// delivery, answer, timeout or restart happened; empty for an unknown channel. Several
    /// brokers' logs merged by time give the in-flight total across them at every instant.
    pub fn in_flight_log(&self, topic: &str, channel: &str) -> Vec<(Instant, usize)> {
        let st = self.inner.lock();
        st.topics
            .get(topic)
            .and_then(|t| t.channels.get(channel))
            .map(|ch| ch.in_flight_log.iter().copied().collect())
            .unwrap_or_default()
    }

    /// One channel's counters.
    pub fn channel(&self, topic: &str, channel: &str) -> Option<ChannelStats> {
        self.topic(topic)?
            .channels
            .into_iter()
            .find(|c| c.name == channel)
    }

    /// Connected clients.
    pub fn clients(&self) -> Vec<ClientStats> {
        self.stats().clients
    }

    /// One client.
    pub fn client(&self, id: ClientId) -> Option<ClientStats> {
        self.clients().into_iter().find(|c| c.id == id)
    }

    /// Every command received so far, in order (the most recent
    /// [`Options::command_log_limit`] of them).
    pub fn commands(&self) -> Vec<CommandRecord> {
        self.logged().log.iter().cloned().collect()
    }

    /// The commands of one client, in order.
    pub fn commands_of(&self, client: ClientId) -> Vec<CommandRecord> {
        self.logged()
            .log
            .iter()
            .filter(|r| r.client == client)
            .cloned()
            .collect()
    }

    /// The state once every command whose effects may show in [`Nsqd::stats`] is logged: a
    /// command is logged just after it ran, so without this a test that saw a FIN's effect
    /// could miss the FIN in the log. Waits at most 500 ms (a command still reading its body
    /// has no effects yet).
    fn logged(&self) -> MutexGuard<'_, State> {
        let end = Instant::now() + Duration::from_millis(500);
        loop {
            let st = self.inner.lock();
            if st.executing == 0 || Instant::now() >= end {
                return st;
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Client behaviour that real nsqd tolerates but that is almost certainly a bug (for
    /// example an MPUB whose body size does not match its messages). Strict tests assert this
    /// is empty.
    pub fn warnings(&self) -> Vec<String> {
        self.inner.lock().warnings.clone()
    }

    /// Polls `pred` with a fresh [`Stats`] until it holds or `timeout` passes.
    pub fn wait_for(&self, timeout: Duration, mut pred: impl FnMut(&Stats) -> bool) -> bool {
        wait_until(timeout, || pred(&self.stats()))
    }

    // ---- server-side actions ----

    /// Publishes a message as if a client had sent PUB.
    pub fn publish(&self, topic: &str, body: &[u8]) {
        self.publish_deferred(topic, body, Duration::ZERO);
    }

    /// Publishes a message as if a client had sent DPUB.
    pub fn publish_deferred(&self, topic: &str, body: &[u8], delay: Duration) {
        let mut st = self.inner.lock();
        self.inner
            .publish(&mut st, topic, vec![body.to_vec()], delay, Instant::now());
    }

    // ---- fault injection ----

    /// Makes every message in flight time out now, as if its msg_timeout had passed (answers
    /// to them then fail with `E_FIN_FAILED` / `E_REQ_FAILED` / `E_TOUCH_FAILED`, and they
    /// are redelivered).
    pub fn time_out_in_flight(&self) {
        let now = Instant::now();
        {
            let mut st = self.inner.lock();
            for topic in st.topics.values_mut() {
                for ch in topic.channels.values_mut() {
                    for f in ch.in_flight.values_mut() {
                        f.deadline = f.deadline.min(now);
                    }
                }
            }
            Inner::process_timers(&mut st, now);
            Inner::dispatch(&mut st, now);
        }
        self.inner.wake.notify_all();
    }

    /// Closes every client connection now (clients see EOF; in-flight messages time out and
    /// are redelivered later, as with nsqd).
    pub fn drop_connections(&self) {
        let ids: Vec<ClientId> = {
            let st = self.inner.lock();
            for c in st.clients.values() {
                c.kill();
            }
            st.clients.keys().copied().collect()
        };
        // Return once they are really gone, so nothing is dispatched to them afterwards.
        wait_until(Duration::from_secs(2), || {
            let st = self.inner.lock();
            ids.iter().all(|id| !st.clients.contains_key(id))
        });
    }

    /// Closes one client connection; false if there is no such client. Returns once the
    /// broker has forgotten it.
    pub fn drop_client(&self, id: ClientId) -> bool {
        {
            let st = self.inner.lock();
            let Some(c) = st.clients.get(&id) else {
                return false;
            };
            c.kill();
        }
        wait_until(Duration::from_secs(2), || {
            !self.inner.lock().clients.contains_key(&id)
        })
    }

    /// Closes the listening socket: new connections are refused until
    /// [`Nsqd::start_accepting`].
    pub fn stop_accepting(&self) {
        self.inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Listens again on the same port.
    pub fn start_accepting(&self) -> io::Result<()> {
        let mut l = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if l.is_none() {
            let listener = TcpListener::bind(self.inner.addr)?;
            listener.set_nonblocking(true)?;
            *l = Some(listener);
        }
        self.inner.ignore_accepts.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Keeps listening but stops accepting: new connections hang in the kernel's backlog
    /// (they are served once accepting resumes).
    pub fn hold_accepts(&self, hold: bool) {
        self.inner.ignore_accepts.store(hold, Ordering::SeqCst);
    }

    /// Half-open: every connection stops reading and writing (sockets stay open, no
    /// heartbeats, no replies) until [`Nsqd::resume`]. Timers keep running.
    pub fn pause(&self) {
        self.inner.faults.paused.store(true, Ordering::SeqCst);
    }

    /// Ends [`Nsqd::pause`]. Read deadlines are pushed back so paused clients are not dropped
    /// for the silence the pause caused.
    pub fn resume(&self) {
        let st = self.inner.lock();
        for c in st.clients.values() {
            c.ctl
                .set_deadline(c.heartbeat.map(|h| Instant::now() + 2 * h));
        }
        self.inner.faults.paused.store(false, Ordering::SeqCst);
    }

    /// Slow reads: every connection reads at most `bytes_per_read` bytes after sleeping
    /// `pause`; `None` restores full speed.
    pub fn set_read_throttle(&self, throttle: Option<Throttle>) {
        *self
            .inner
            .faults
            .throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = throttle;
    }

    /// While on, PUB/MPUB/DPUB fail like on an exiting nsqd (`E_PUB_FAILED PUB failed
    /// exiting`, fatal) after their input was validated.
    pub fn fail_publishes(&self, on: bool) {
        self.inner.fail_publishes.store(on, Ordering::SeqCst);
    }

    /// Simulates an nsqd restart on the same port: stop listening, drop every connection,
    /// optionally forget every message, listen again.
    pub fn restart(&self, what: Restart) -> io::Result<()> {
        self.stop_accepting();
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            self.drop_connections();
            self.inner.reap_conn_threads(false);
            let empty = self.inner.lock().clients.is_empty()
                && self
                    .inner
                    .conn_threads
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_empty();
            if empty {
                break;
            }
            if Instant::now() > end {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connections did not close",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        {
            let mut st = self.inner.lock();
            match what {
                Restart::KeepMessages => {
                    for topic in st.topics.values_mut() {
                        for ch in topic.channels.values_mut() {
                            let mut flying: Vec<InFlight> =
                                ch.in_flight.drain().map(|(_, f)| f).collect();
                            flying.sort_by_key(|f| f.delivered);
                            for f in flying.into_iter().rev() {
                                ch.queue.push_front(f.msg);
                            }
                            ch.note_in_flight();
                        }
                    }
                }
                Restart::DropMessages => {
                    let names: Vec<String> = st.topics.keys().cloned().collect();
                    st.topics.clear();
                    for n in names {
                        self.inner.lookup_register(&n, None, false);
                    }
                }
            }
        }
        self.start_accepting()
    }

    /// Stops everything: closes every socket and joins every thread. Also done on drop.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.inner.shutdown.store(true, Ordering::SeqCst);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        self.stop_accepting();
        {
            let st = self.inner.lock();
            for c in st.clients.values() {
                c.kill();
            }
            self.inner.wake.notify_all();
        }
        if let Some(h) = self.scanner.take() {
            let _ = h.join();
        }
        self.inner.reap_conn_threads(true);
        self.http.take();
        let registrations = std::mem::take(
            &mut *self
                .inner
                .lookup
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (lookup, id) in registrations {
            lookup.remove_producer(id);
        }
    }
}

impl Drop for Nsqd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A command's failure: the error frame's text, and whether nsqd closes the connection.
enum CmdErr {
    Fatal(String),
    NonFatal(String),
}

fn fatal(code: &str, desc: impl std::fmt::Display) -> CmdErr {
    CmdErr::Fatal(format!("{code} {desc}"))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// nsqd's `ByteToBase10`: digits only (empty is 0), wrapping on overflow.
fn base10(b: &[u8]) -> Option<u64> {
    let mut n: u64 = 0;
    for &d in b {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
    }
    Some(n)
}

fn millis(d: Duration) -> i64 {
    d.as_millis() as i64
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lookup_register(&self, topic: &str, channel: Option<&str>, add: bool) {
        for (lookup, id) in &*self.lookup.lock().unwrap_or_else(PoisonError::into_inner) {
            if add {
                lookup.register(*id, topic, channel);
            } else {
                lookup.unregister(*id, topic, channel);
            }
        }
    }

    fn reap_conn_threads(&self, all: bool) {
        let handles = {
            let mut t = self
                .conn_threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if all {
                std::mem::take(&mut *t)
            } else {
                let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *t)
                    .into_iter()
                    .partition(JoinHandle::is_finished);
                *t = running;
                done
            }
        };
        for h in handles {
            let _ = h.join();
        }
    }

    fn accept_loop(self: Arc<Self>) {
        while !self.shutdown.load(Ordering::SeqCst) {
            let accepted = {
                let l = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
                match &*l {
                    Some(l) if !self.ignore_accepts.load(Ordering::SeqCst) => match l.accept() {
                        Ok((s, _)) => Some(s),
                        Err(e) => {
                            if e.kind() != io::ErrorKind::WouldBlock {
                                tracing::warn!(error = %e, "accept failed");
                            }
                            None
                        }
                    },
                    _ => None,
                }
            };
            match accepted {
                Some(stream) => {
                    let inner = self.clone();
                    let spawned = std::thread::Builder::new()
                        .name("nsqd-conn".into())
                        .spawn(move || inner.conn_main(&stream));
                    match spawned {
                        Ok(h) => {
                            let mut t = self
                                .conn_threads
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner);
                            t.retain(|h| !h.is_finished());
                            t.push(h);
                        }
                        Err(e) => tracing::warn!(error = %e, "spawning a connection thread failed"),
                    }
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    /// Handles in-flight timeouts and deferred messages. Like nsqd's `queueScanLoop`, it only
    /// looks at them on a ticker (`queue_scan_interval`), so a message is redelivered up to one
    /// tick after its deadline, together with every other message due by then; until then a
    /// FIN or TOUCH of an expired message still succeeds, as on nsqd.
    fn scan_loop(self: Arc<Self>) {
        let interval = self.opts.queue_scan_interval;
        let mut next_tick = Instant::now() + interval;
        let mut st = self.lock();
        while !self.shutdown.load(Ordering::SeqCst) {
            let now = Instant::now();
            let wait = if interval.is_zero() {
                let next = Self::process_timers(&mut st, now);
                next.map_or(Duration::from_millis(50), |t| {
                    t.saturating_duration_since(now)
                })
            } else {
                if now >= next_tick {
                    Self::process_timers(&mut st, now);
                    // A Go ticker drops ticks it could not deliver.
                    next_tick += interval;
                    if next_tick <= now {
                        next_tick = now + interval;
                    }
                }
                next_tick.saturating_duration_since(now)
            };
            Self::dispatch(&mut st, now);
            let wait = wait.clamp(Duration::from_millis(1), Duration::from_millis(50));
            st = self
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Times out in-flight messages and releases due deferred ones; returns the next deadline.
    fn process_timers(st: &mut State, now: Instant) -> Option<Instant> {
        let State {
            topics, clients, ..
        } = st;
        let mut next: Option<Instant> = None;
        let mut upd = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for topic in topics.values_mut() {
            for ch in topic.channels.values_mut() {
                let mut expired: Vec<[u8; 16]> = ch
                    .in_flight
                    .iter()
                    .filter(|(_, f)| f.deadline <= now)
                    .map(|(id, _)| *id)
                    .collect();
                // Oldest first, so redelivery order is stable.
                expired.sort_by_key(|id| ch.in_flight[id].deadline);
                for id in expired {
                    if let Some(f) = ch.in_flight.remove(&id) {
                        ch.timed_out += 1;
                        if let Some(c) = clients.get_mut(&f.client) {
                            c.in_flight -= 1;
                            c.timed_out += 1;
                        }
                        ch.queue.push_back(f.msg);
                    }
                }
                ch.note_in_flight();
                for f in ch.in_flight.values() {
                    upd(f.deadline);
                }
                ch.deferred.sort_by_key(|(t, _)| *t);
                while ch.deferred.first().is_some_and(|(t, _)| *t <= now) {
                    let (_, m) = ch.deferred.remove(0);
                    ch.queue.push_back(m);
                }
                if let Some((t, _)) = ch.deferred.first() {
                    upd(*t);
                }
            }
        }
        next
    }

    /// Sends queued messages to subscribers with `in_flight < rdy`, round robin.
    fn dispatch(st: &mut State, now: Instant) {
        let State {
            topics, clients, ..
        } = st;
        for topic in topics.values_mut() {
            for ch in topic.channels.values_mut() {
                while !ch.queue.is_empty() {
                    let n = ch.clients.len();
                    let chosen = (0..n).map(|k| (ch.rr + k) % n).find(|&i| {
                        clients.get(&ch.clients[i]).is_some_and(|c| {
                            c.state == ClientState::Subscribed && c.in_flight < c.rdy
                        })
                    });
                    let Some(i) = chosen else { break };
                    ch.rr = (i + 1) % n;
                    let cid = ch.clients[i];
                    let Some(c) = clients.get_mut(&cid) else {
                        break;
                    };
                    let Some(mut msg) = ch.queue.pop_front() else {
                        break;
                    };
                    msg.attempts = msg.attempts.saturating_add(1);
                    c.in_flight += 1;
                    c.delivered += 1;
                    let _ = c.out.send(Out::Message(msg.frame()));
                    if c.in_flight >= c.rdy {
                        // nsqd's message pump flushes once the client is not ready.
                        let _ = c.out.send(Out::Flush);
                    }
                    let deadline = now + c.pump_msg_timeout;
                    ch.in_flight.insert(
                        msg.id,
                        InFlight {
                            msg,
                            client: cid,
                            deadline,
                            delivered: now,
                        },
                    );
                    ch.note_in_flight();
                }
            }
        }
    }

    fn ensure_topic(&self, st: &mut State, topic: &str) {
        if !st.topics.contains_key(topic) {
            st.topics.insert(topic.to_owned(), Topic::default());
            self.lookup_register(topic, None, true);
        }
    }

    fn publish(
        &self,
        st: &mut State,
        topic: &str,
        bodies: Vec<Vec<u8>>,
        defer: Duration,
        now: Instant,
    ) {
        self.ensure_topic(st, topic);
        if let Some(t) = st.topics.get_mut(topic) {
            for body in bodies {
                let msg = Msg::new(body);
                t.message_count += 1;
                if t.channels.is_empty() {
                    t.backlog.push_back((msg, defer));
                } else {
                    for ch in t.channels.values_mut() {
                        ch.message_count += 1;
                        ch.put(msg.clone(), defer, now);
                    }
                }
            }
        }
        Self::dispatch(st, now);
        self.wake.notify_all();
    }

    fn ensure_channel(&self, st: &mut State, topic: &str, channel: &str, now: Instant) {
        self.ensure_topic(st, topic);
        let Some(t) = st.topics.get_mut(topic) else {
            return;
        };
        if !t.channels.contains_key(channel) {
            let mut ch = Channel::default();
            for (m, d) in t.backlog.drain(..) {
                ch.message_count += 1;
                ch.put(m, d, now);
            }
            t.channels.insert(channel.to_owned(), ch);
            self.lookup_register(topic, Some(channel), true);
        }
    }

    fn remove_client(&self, id: ClientId) {
        let mut st = self.lock();
        let Some(c) = st.clients.remove(&id) else {
            return;
        };
        let Some((topic, channel)) = c.sub else {
            return;
        };
        let mut drop_channel = false;
        let mut drop_topic = false;
        if let Some(t) = st.topics.get_mut(&topic) {
            if let Some(ch) = t.channels.get_mut(&channel) {
                ch.clients.retain(|&x| x != id);
                if ch.clients.is_empty() && is_ephemeral(&channel) {
                    drop_channel = true;
                }
            }
            if drop_channel {
                t.channels.remove(&channel);
                drop_topic = t.channels.is_empty() && is_ephemeral(&topic);
            }
        }
        if drop_channel {
            self.lookup_register(&topic, Some(&channel), false);
        }
        if drop_topic {
            st.topics.remove(&topic);
            self.lookup_register(&topic, None, false);
        }
    }

    fn stats(&self) -> Stats {
        let st = self.lock();
        let topics = st
            .topics
            .iter()
            .map(|(name, t)| TopicStats {
                name: name.clone(),
                message_count: t.message_count,
                depth: t.backlog.len(),
                channels: t
                    .channels
                    .iter()
                    .map(|(cname, ch)| ChannelStats {
                        topic: name.clone(),
                        name: cname.clone(),
                        message_count: ch.message_count,
                        depth: ch.queue.len(),
                        deferred: ch.deferred.len(),
                        in_flight: ch.in_flight.len(),
                        finished: ch.finished,
                        requeued: ch.requeued,
                        timed_out: ch.timed_out,
                        clients: ch.clients.clone(),
                    })
                    .collect(),
            })
            .collect();
        let clients = st
            .clients
            .iter()
            .map(|(&id, c)| ClientStats {
                id,
                remote_address: c.remote,
                state: c.state,
                rdy: c.rdy,
                in_flight: c.in_flight,
                subscription: c.sub.clone(),
                msg_timeout: c.msg_timeout,
                heartbeat_interval: c.heartbeat,
                tls: c.tls,
                snappy: c.snappy,
                deflate: c.deflate,
                identity: c.auth.as_ref().map(|a| a.identity.clone()),
                identify: c.identify.clone(),
                delivered: c.delivered,
                finished: c.finished,
                requeued: c.requeued,
                timed_out: c.timed_out,
            })
            .collect();
        Stats { topics, clients }
    }

    /// Deletes a topic or one of its channels like nsqd's `/topic/delete` and
    /// `/channel/delete`: their messages are dropped and their subscribers disconnected.
    /// Returns whether it existed.
    fn delete(&self, topic: &str, channel: Option<&str>) -> bool {
        let mut st = self.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return false;
        };
        let removed: Vec<(String, Channel)> = match channel {
            Some(c) => match t.channels.remove(c) {
                Some(ch) => vec![(c.to_owned(), ch)],
                None => return false,
            },
            None => std::mem::take(&mut t.channels).into_iter().collect(),
        };
        if channel.is_none() {
            st.topics.remove(topic);
        }
        for (name, ch) in &removed {
            for id in &ch.clients {
                if let Some(c) = st.clients.get(id) {
                    c.kill();
                }
            }
            self.lookup_register(topic, Some(name), false);
        }
        if channel.is_none() {
            self.lookup_register(topic, None, false);
        }
        true
    }

    /// nsqd's HTTP API subset, with nsqd's methods, checks in nsqd's order and error texts.
    fn handle_http(&self, req: &Request) -> Response {
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
    fn read_binary_mpub(&self, mut body: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
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
    fn http_stats(&self, req: &Request) -> Response {
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

    // ---- connections ----

    fn conn_main(self: Arc<Self>, stream: &TcpStream) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        let remote = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let ctl = Arc::new(ConnCtl::new(self.faults.clone()));
        let clones = (
            stream.try_clone(),
            stream.try_clone(),
            stream.try_clone(),
            stream.try_clone(),
        );
        let (Ok(read_s), Ok(write_s), Ok(reg_s), Ok(tls_s)) = clones else {
            return;
        };
        let (tx, rx) = mpsc::channel();
        let heartbeat = Some(self.opts.heartbeat_interval);
        let id = {
            let mut st = self.lock();
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            st.next_client += 1;
            let id = st.next_client;
            st.clients.insert(
                id,
                Client {
                    remote,
                    out: tx.clone(),
                    stream: reg_s,
                    ctl: ctl.clone(),
                    state: ClientState::Init,
                    rdy: 0,
                    in_flight: 0,
                    msg_timeout: self.opts.msg_timeout,
                    pump_msg_timeout: self.opts.msg_timeout,
                    heartbeat,
                    output_buffer_size: self.opts.output_buffer_size,
                    output_buffer_timeout: self.opts.output_buffer_timeout,
                    sample_rate: 0,
                    sub: None,
                    auth: None,
                    identify: None,
                    tls: false,
                    snappy: false,
                    deflate: None,
                    delivered: 0,
                    finished: 0,
                    requeued: 0,
                    timed_out: 0,
                },
            );
            id
        };
        tracing::debug!(client = id, %remote, "client connected");
        let obuf_size = usize::try_from(self.opts.output_buffer_size).unwrap_or(1);
        let writer = {
            let raw = RawWrite {
                stream: write_s,
                ctl: ctl.clone(),
            };
            let ctl = ctl.clone();
            std::thread::Builder::new()
                .name("nsqd-conn-writer".into())
                .spawn(move || writer_main(&rx, raw, &ctl, obuf_size))
        };
        let mut conn = Conn {
            inner: self.clone(),
            id,
            rd: CmdReader::new(Box::new(RawRead {
                stream: read_s,
                ctl: ctl.clone(),
            })),
            out: tx,
            ctl: ctl.clone(),
            stream: tls_s,
            heartbeat,
            tls: false,
            compressed: false,
            handshake_until: None,
            identified: false,
            body: None,
        };
        if writer.is_ok() {
            conn.run();
        }
        self.remove_client(id);
        let _ = conn.out.send(Out::Close);
        drop(conn);
        if let Ok(w) = writer {
            let _ = w.join();
        }
        // Drain what the client still sends for a moment, so closing does not turn into a
        // reset that could destroy the error frame we just sent.
        let _ = stream.set_read_timeout(Some(Duration::from_millis(10)));
        let end = Instant::now() + Duration::from_millis(200);
        let mut scratch = [0u8; 4096];
        let mut s = stream;
        while Instant::now() < end && !ctl.killed() && !self.shutdown.load(Ordering::SeqCst) {
            match s.read(&mut scratch) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = stream.shutdown(Shutdown::Both);
        tracing::debug!(client = id, "client gone");
    }
}

/// nsqd's `bufio.Writer` in front of the connection, for message frames.
struct OutputBuffer {
    buf: Vec<u8>,
    size: usize,
}

impl OutputBuffer {
    /// `bufio.Writer.Write`: fill the buffer, writing it out whenever it is full; a write
    /// larger than the free space into an empty buffer goes straight through.
    fn write(&mut self, w: &mut dyn Write, mut p: &[u8]) -> io::Result<()> {
        while p.len() > self.size - self.buf.len() {
            if self.buf.is_empty() {
                return w.write_all(p);
            }
            let n = self.size - self.buf.len();
            self.buf.extend_from_slice(&p[..n]);
            p = &p[n..];
            self.flush(w)?;
        }
        self.buf.extend_from_slice(p);
        Ok(())
    }

    fn flush(&mut self, w: &mut dyn Write) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = w.write_all(&self.buf);
        self.buf.clear();
        r
    }
}

fn writer_main(rx: &Receiver<Out>, raw: RawWrite, ctl: &ConnCtl, obuf_size: usize) {
    let stream = raw.stream.try_clone();
    let mut w: Box<dyn Write + Send> = Box::new(raw);
    let mut tls: Option<Arc<TlsShared>> = None;
    let mut hb: Option<Duration> = None;
    let mut next_hb: Option<Instant> = None;
    let mut obuf = OutputBuffer {
        buf: Vec::new(),
        size: obuf_size.max(1),
    };
    let mut flush_every: Option<Duration> = None;
    let mut next_flush: Option<Instant> = None;
    let heartbeat_frame = frame(0, b"_heartbeat_");
    'outer: loop {
        let wake = match (next_hb, next_flush) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let first = match wake {
            Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
                Ok(o) => o,
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    if let (Some(t), Some(d)) = (next_flush, flush_every) {
                        if t <= now {
                            // A Go ticker drops the ticks it could not deliver.
                            next_flush = Some((t + d).max(now));
                            if obuf.flush(&mut *w).is_err() || w.flush().is_err() {
                                break 'outer;
                            }
                        }
                    }
                    match next_hb {
                        Some(t) if t <= now => {
                            let d = hb.unwrap_or(Duration::from_secs(30));
                            next_hb = Some((t + d).max(now));
                            if ctl.faults.paused.load(Ordering::SeqCst) {
                                continue;
                            }
                            Out::Frame(heartbeat_frame.clone())
                        }
                        _ => continue,
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(o) => o,
                Err(_) => break,
            },
        };
        let mut item = Some(first);
        let mut batch = 0;
        while let Some(o) = item.take() {
            match o {
                Out::Frame(f) => {
                    if obuf.write(&mut *w, &f).is_err() || obuf.flush(&mut *w).is_err() {
                        break 'outer;
                    }
                }
                Out::Message(f) => {
                    if obuf.write(&mut *w, &f).is_err() {
                        break 'outer;
                    }
                }
                Out::Flush => {
                    if obuf.flush(&mut *w).is_err() {
                        break 'outer;
                    }
                }
                Out::BufferSize(size) => {
                    if obuf.flush(&mut *w).is_err() {
                        break 'outer;
                    }
                    obuf.size = size.max(1);
                }
                Out::FlushTicker(d) => {
                    flush_every = d;
                    next_flush = d.map(|d| Instant::now() + d);
                }
                Out::Heartbeat(d) => {
                    hb = d;
                    next_hb = d.map(|d| Instant::now() + d);
                }
                Out::Upgrade(before, layer) => {
                    if obuf.write(&mut *w, &before).is_err()
                        || obuf.flush(&mut *w).is_err()
                        || w.flush().is_err()
                    {
                        break 'outer;
                    }
                    w = match layer {
                        Layer::Tls(shared) => {
                            tls = Some(shared.clone());
                            Box::new(TlsWrite { shared })
                        }
                        Layer::Snappy => Box::new(snap::write::FrameEncoder::new(w)),
                        Layer::Deflate(level) => Box::new(flate2::write::DeflateEncoder::new(
                            w,
                            flate2::Compression::new(level),
                        )),
                    };
                }
                Out::Close => {
                    let _ = obuf.flush(&mut *w);
                    let _ = w.flush();
                    drop(w);
                    if let Some(t) = &tls {
                        t.close();
                    }
                    if let Ok(s) = &stream {
                        let _ = s.shutdown(Shutdown::Write);
                    }
                    return;
                }
            }
            batch += 1;
            if batch < 256 {
                item = rx.try_recv().ok();
            }
        }
        if w.flush().is_err() {
            break;
        }
    }
    if let Ok(s) = &stream {
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// The reader side of one connection: parses and executes commands.
struct Conn {
    inner: Arc<Inner>,
    id: ClientId,
    rd: CmdReader,
    out: Sender<Out>,
    ctl: Arc<ConnCtl>,
    stream: TcpStream,
    heartbeat: Option<Duration>,
    tls: bool,
    compressed: bool,
    handshake_until: Option<Instant>,
    body: Option<Vec<u8>>,
    /// Whether an IDENTIFY succeeded already: nsqd's message pump only listens to the first.
    identified: bool,
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

/// The IDENTIFY fields nsqd decodes, checked with Go's `encoding/json` typing rules.
#[derive(Default)]
struct IdentifyData {
    heartbeat_interval: i64,
    output_buffer_size: i64,
    output_buffer_timeout: i64,
    feature_negotiation: bool,
    tls_v1: bool,
    deflate: bool,
    deflate_level: i64,
    snappy: bool,
    sample_rate: i64,
    msg_timeout: i64,
}

/// A JSON document's top-level object entries in document order (`None` for `null`), which
/// is what Go's decoder walks: later keys override earlier ones, `null` leaves a field alone.
struct JsonEntries(Option<Vec<(String, Value)>>);

impl<'de> serde::Deserialize<'de> for JsonEntries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = JsonEntries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object or null")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<JsonEntries, E> {
                Ok(JsonEntries(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<JsonEntries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(JsonEntries(Some(entries)))
            }
        }
        d.deserialize_any(Entries)
    }
}

/// The struct field a JSON key decodes into under Go's rules for ASCII field names: an
/// exact or case-insensitive match, where `ſ` (U+017F) folds to `s` and the Kelvin sign
/// (U+212A) to `k`.
fn go_field_key(key: &str) -> Option<String> {
    key.chars()
        .map(|c| match c {
            '\u{17f}' => Some('s'),
            '\u{212a}' => Some('k'),
            c if c.is_ascii() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

impl IdentifyData {
    /// Decodes like Go's `json.Unmarshal` into nsqd's `identifyDataV2`: invalid UTF-8 becomes
    /// U+FFFD, keys match case-insensitively, unknown keys are ignored, a value of the wrong
    /// type (or out of the Go type's range) fails the whole body.
    fn parse(body: &[u8]) -> Option<(Self, Value)> {
        let text = String::from_utf8_lossy(body);
        let JsonEntries(entries) = serde_json::from_str(&text).ok()?;
        let mut d = IdentifyData::default();
        let Some(entries) = entries else {
            return Some((d, Value::Null));
        };
        let int = |v: &Value, min: i64, max: i64| v.as_i64().filter(|n| (min..=max).contains(n));
        for (key, value) in &entries {
            if value.is_null() {
                continue;
            }
            let Some(field) = go_field_key(key) else {
                continue;
            };
            match field.as_str() {
                "client_id" | "hostname" | "user_agent" if !value.is_string() => return None,
                "heartbeat_interval" => d.heartbeat_interval = int(value, i64::MIN, i64::MAX)?,
                "output_buffer_size" => d.output_buffer_size = int(value, i64::MIN, i64::MAX)?,
                "output_buffer_timeout" => {
                    d.output_buffer_timeout = int(value, i64::MIN, i64::MAX)?;
                }
                "deflate_level" => d.deflate_level = int(value, i64::MIN, i64::MAX)?,
                "sample_rate" => {
                    d.sample_rate = int(value, i64::from(i32::MIN), i64::from(i32::MAX))?;
                }
                "msg_timeout" => d.msg_timeout = int(value, i64::MIN, i64::MAX)?,
                "feature_negotiation" => d.feature_negotiation = value.as_bool()?,
                "tls_v1" => d.tls_v1 = value.as_bool()?,
                "deflate" => d.deflate = value.as_bool()?,
                "snappy" => d.snappy = value.as_bool()?,
                _ => {}
            }
        }
        Some((d, Value::Object(entries.into_iter().collect())))
    }
}

type CmdResult = Result<Option<Vec<u8>>, CmdErr>;

impl Conn {
    fn send(&self, kind: u32, data: &[u8]) {
        let _ = self.out.send(Out::Frame(frame(kind, data)));
    }

    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> T) -> Result<T, CmdErr> {
        let mut st = self.inner.lock();
        st.clients
            .get_mut(&self.id)
            .map(f)
            .ok_or_else(|| fatal("E_INVALID", "client gone"))
    }

    fn run(&mut self) {
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

    fn exec(&mut self, params: &[&[u8]]) -> CmdResult {
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

    fn state(&self) -> Result<ClientState, CmdErr> {
        self.with_client(|c| c.state)
    }

    fn read_body(&mut self, len: i32, code: &str, what: &str) -> Result<Vec<u8>, CmdErr> {
        let body = self
            .rd
            .read_exact_vec(len as usize)
            .map_err(|_| fatal(code, what))?;
        Ok(body)
    }

    fn identify(&mut self) -> CmdResult {
        if self.state()? != ClientState::Init {
            return Err(fatal("E_INVALID", "cannot IDENTIFY in current state"));
        }
        let opts = self.inner.opts.clone();
        let len = self
            .rd
            .read_len()
            .map_err(|_| fatal("E_BAD_BODY", "IDENTIFY failed to read body size"))?;
        if i64::from(len) > opts.max_body_size {
            return Err(fatal(
                "E_BAD_BODY",
                format!("IDENTIFY body too big {len} > {}", opts.max_body_size),
            ));
        }
        if len <= 0 {
            return Err(fatal(
                "E_BAD_BODY",
                format!("IDENTIFY invalid body size {len}"),
            ));
        }
        let body = self.read_body(len, "E_BAD_BODY", "IDENTIFY failed to read body")?;
        self.body = Some(body.clone());
        let (data, json) = IdentifyData::parse(&body)
            .ok_or_else(|| fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body"))?;

        // clientV2.Identify: each setter in nsqd's order.
        let mut heartbeat = self.heartbeat;
        match data.heartbeat_interval {
            -1 => heartbeat = None,
            0 => {}
            n if n >= 1000 && n <= millis(opts.max_heartbeat_interval) => {
                heartbeat = Some(Duration::from_millis(n as u64));
            }
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY heartbeat interval ({n}) is invalid"),
                ));
            }
        }
        let (mut obuf_size, mut obuf_timeout) =
            self.with_client(|c| (c.output_buffer_size, c.output_buffer_timeout))?;
        match data.output_buffer_timeout {
            -1 => obuf_timeout = Duration::ZERO,
            0 => {}
            n if n >= millis(opts.min_output_buffer_timeout)
                && n <= millis(opts.max_output_buffer_timeout) =>
            {
                obuf_timeout = Duration::from_millis(n as u64);
            }
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY output buffer timeout ({n}) is invalid"),
                ));
            }
        }
        match data.output_buffer_size {
            -1 => {
                obuf_size = 1;
                obuf_timeout = Duration::ZERO;
            }
            0 => {}
            n if n >= 64 && n <= opts.max_output_buffer_size => obuf_size = n,
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY output buffer size ({n}) is invalid"),
                ));
            }
        }
        if !(0..=99).contains(&data.sample_rate) {
            return Err(fatal(
                "E_BAD_BODY",
                format!("IDENTIFY sample rate ({}) is invalid", data.sample_rate),
            ));
        }
        let mut msg_timeout = self.with_client(|c| c.msg_timeout)?;
        match data.msg_timeout {
            0 => {}
            n if n >= 1000 && n <= millis(opts.max_msg_timeout) => {
                msg_timeout = Duration::from_millis(n as u64);
            }
            n => {
                return Err(fatal(
                    "E_BAD_BODY",
                    format!("IDENTIFY msg timeout ({n}) is invalid"),
                ));
            }
        }
        // The read deadline (twice the interval) follows every IDENTIFY.
        self.heartbeat = heartbeat;
        let first = !self.identified;
        self.identified = true;
        self.with_client(|c| {
            c.heartbeat = heartbeat;
            c.output_buffer_size = obuf_size;
            c.output_buffer_timeout = obuf_timeout;
            c.sample_rate = data.sample_rate;
            c.msg_timeout = msg_timeout;
            if first {
                c.pump_msg_timeout = msg_timeout;
            }
            c.identify = Some(json);
        })?;
        if data.output_buffer_size != 0 {
            let _ = self
                .out
                .send(Out::BufferSize(usize::try_from(obuf_size).unwrap_or(1)));
        }
        // nsqd's messagePump takes the first identify event (re-arming its heartbeat and
        // output buffer tickers, setting the timeout of deliveries) and ignores later ones.
        if first {
            let _ = self.out.send(Out::Heartbeat(heartbeat));
            let _ = self.out.send(Out::FlushTicker(
                Some(obuf_timeout).filter(|d| !d.is_zero()),
            ));
        }

        if !data.feature_negotiation {
            return Ok(Some(b"OK".to_vec()));
        }
        let tls = self.inner.tls.is_some() && data.tls_v1;
        let deflate = opts.deflate && data.deflate;
        let mut deflate_level = 6;
        if deflate && data.deflate_level > 0 {
            deflate_level = data.deflate_level;
        }
        if opts.max_deflate_level < deflate_level {
            deflate_level = opts.max_deflate_level;
        }
        let snappy = opts.snappy && data.snappy;
        if deflate && snappy {
            return Err(fatal(
                "E_IDENTIFY_FAILED",
                "cannot enable both deflate and snappy compression",
            ));
        }
        let auth_required = opts.auth.is_some();
        let reply = serde_json::to_vec(&IdentifyReply {
            max_rdy_count: opts.max_rdy_count,
            version: &opts.version,
            max_msg_timeout: millis(opts.max_msg_timeout),
            msg_timeout: millis(msg_timeout),
            tls_v1: tls,
            deflate,
            deflate_level,
            max_deflate_level: opts.max_deflate_level,
            snappy,
            sample_rate: data.sample_rate,
            auth_required,
            output_buffer_size: obuf_size,
            output_buffer_timeout: millis(obuf_timeout),
        })
        .map_err(|e| fatal("E_IDENTIFY_FAILED", format!("IDENTIFY failed {e}")))?;
        // The frame that precedes the next upgrade (or goes out last).
        let mut pending = frame(0, &reply);
        if tls && !self.tls {
            let config = self
                .inner
                .tls
                .clone()
                .ok_or_else(|| fatal("E_IDENTIFY_FAILED", "IDENTIFY failed no TLS"))?;
            let conn = rustls::ServerConnection::new(config)
                .map_err(|e| fatal("E_IDENTIFY_FAILED", format!("IDENTIFY failed {e}")))?;
            let clone = |s: &TcpStream| {
                s.try_clone()
                    .map_err(|e| fatal("E_IDENTIFY_FAILED", format!("IDENTIFY failed {e}")))
            };
            let raw_w = RawWrite {
                stream: clone(&self.stream)?,
                ctl: self.ctl.clone(),
            };
            let raw_r = RawRead {
                stream: clone(&self.stream)?,
                ctl: self.ctl.clone(),
            };
            let shared = TlsShared::new(conn, raw_w);
            let before = std::mem::replace(&mut pending, frame(0, b"OK"));
            let _ = self
                .out
                .send(Out::Upgrade(before, Layer::Tls(shared.clone())));
            let discarded = self.rd.upgrade(|_| Box::new(TlsRead::new(shared, raw_r)));
            self.discard_check(discarded);
            self.tls = true;
            self.with_client(|c| c.tls = true)?;
            self.handshake_until = Some(Instant::now() + Duration::from_secs(5));
        }
        if snappy && !self.compressed {
            let before = std::mem::replace(&mut pending, frame(0, b"OK"));
            let _ = self.out.send(Out::Upgrade(before, Layer::Snappy));
            let discarded = self
                .rd
                .upgrade(|old| Box::new(snap::read::FrameDecoder::new(old)));
            self.discard_check(discarded);
            self.compressed = true;
            self.with_client(|c| c.snappy = true)?;
        }
        if deflate && !self.compressed {
            let level = deflate_level.clamp(0, 9) as u32;
            let before = std::mem::replace(&mut pending, frame(0, b"OK"));
            let _ = self.out.send(Out::Upgrade(before, Layer::Deflate(level)));
            let discarded = self
                .rd
                .upgrade(|old| Box::new(crate::transport::InflateReader::new(old)));
            self.discard_check(discarded);
            self.compressed = true;
            self.with_client(|c| c.deflate = Some(level))?;
        }
        let _ = self.out.send(Out::Frame(pending));
        Ok(None)
    }

    fn discard_check(&self, discarded: usize) {
        if discarded > 0 {
            let msg = format!(
                "client {} sent {discarded} bytes after IDENTIFY before reading its reply; nsqd discards them at the upgrade",
                self.id
            );
            tracing::warn!("{msg}");
            self.inner.lock().warnings.push(msg);
        }
    }

    fn auth(&mut self, params: &[&[u8]]) -> CmdResult {
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

    fn check_auth(&self, cmd: &str, topic: &[u8], channel: &[u8]) -> Result<(), CmdErr> {
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

    fn sub(&mut self, params: &[&[u8]]) -> CmdResult {
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
        if let Some(ch) = st
            .topics
            .get_mut(&topic)
            .and_then(|t| t.channels.get_mut(&channel))
        {
            if max != 0 && ch.clients.len() >= max {
                return Err(fatal(
                    "E_SUB_FAILED",
                    format!("SUB failed consumers for {topic}:{channel} exceeds limit of {max}"),
                ));
            }
            ch.clients.push(self.id);
        }
        if let Some(c) = st.clients.get_mut(&self.id) {
            c.state = ClientState::Subscribed;
            c.sub = Some((topic, channel));
        }
        Ok(Some(b"OK".to_vec()))
    }

    fn rdy(&mut self, params: &[&[u8]]) -> CmdResult {
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
        if let Some(c) = st.clients.get_mut(&self.id) {
            c.rdy = count;
            if c.in_flight >= c.rdy {
                let _ = c.out.send(Out::Flush);
            }
        }
        Inner::dispatch(&mut st, Instant::now());
        Ok(None)
    }

    /// Common checks of FIN/REQ/TOUCH; returns the id.
    fn msg_cmd_prelude(
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

    /// Removes an in-flight message owned by this client (nsqd's `popInFlightMessage`).
    fn pop_in_flight(
        &self,
        st: &mut State,
        id: &[u8; 16],
    ) -> Result<(String, String, InFlight), String> {
        let sub = st.clients.get(&self.id).and_then(|c| c.sub.clone());
        let Some((topic, channel)) = sub else {
            return Err("ID not in flight".into());
        };
        let ch = st
            .topics
            .get_mut(&topic)
            .and_then(|t| t.channels.get_mut(&channel))
            .ok_or_else(|| "ID not in flight".to_owned())?;
        match ch.in_flight.get(id) {
            None => return Err("ID not in flight".into()),
            Some(f) if f.client != self.id => return Err("client does not own message".into()),
            Some(_) => {}
        }
        let f = ch
            .in_flight
            .remove(id)
            .ok_or_else(|| "ID not in flight".to_owned())?;
        ch.note_in_flight();
        Ok((topic, channel, f))
    }

    fn fin(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = self.msg_cmd_prelude("FIN", params, 2)?;
        let mut st = self.inner.lock();
        match self.pop_in_flight(&mut st, &id) {
            Err(e) => Err(CmdErr::NonFatal(format!(
                "E_FIN_FAILED FIN {} failed {e}",
                lossy(&id)
            ))),
            Ok((topic, channel, _)) => {
                if let Some(ch) = st
                    .topics
                    .get_mut(&topic)
                    .and_then(|t| t.channels.get_mut(&channel))
                {
                    ch.finished += 1;
                }
                if let Some(c) = st.clients.get_mut(&self.id) {
                    c.in_flight -= 1;
                    c.finished += 1;
                }
                Inner::dispatch(&mut st, Instant::now());
                Ok(None)
            }
        }
    }

    fn req(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = self.msg_cmd_prelude("REQ", params, 3)?;
        let ms = base10(params[2]).ok_or_else(|| {
            fatal(
                "E_INVALID",
                format!("REQ could not parse timeout {}", lossy(params[2])),
            )
        })?;
        let max = self.inner.opts.max_req_timeout;
        let delay = Duration::from_millis(ms).min(max);
        let now = Instant::now();
        let mut st = self.inner.lock();
        match self.pop_in_flight(&mut st, &id) {
            Err(e) => Err(CmdErr::NonFatal(format!(
                "E_REQ_FAILED REQ {} failed {e}",
                lossy(&id)
            ))),
            Ok((topic, channel, f)) => {
                if let Some(ch) = st
                    .topics
                    .get_mut(&topic)
                    .and_then(|t| t.channels.get_mut(&channel))
                {
                    ch.requeued += 1;
                    ch.put(f.msg, delay, now);
                }
                if let Some(c) = st.clients.get_mut(&self.id) {
                    c.in_flight -= 1;
                    c.requeued += 1;
                }
                Inner::dispatch(&mut st, now);
                self.inner.wake.notify_all();
                Ok(None)
            }
        }
    }

    fn touch(&mut self, params: &[&[u8]]) -> CmdResult {
        let id = self.msg_cmd_prelude("TOUCH", params, 2)?;
        let now = Instant::now();
        let max = self.inner.opts.max_msg_timeout;
        let mut st = self.inner.lock();
        let timeout = st
            .clients
            .get(&self.id)
            .map_or(self.inner.opts.msg_timeout, |c| c.msg_timeout);
        match self.pop_in_flight(&mut st, &id) {
            Err(e) => Err(CmdErr::NonFatal(format!(
                "E_TOUCH_FAILED TOUCH {} failed {e}",
                lossy(&id)
            ))),
            Ok((topic, channel, mut f)) => {
                let mut deadline = now + timeout;
                if deadline.duration_since(f.delivered) >= max {
                    deadline = f.delivered + max;
                }
                f.deadline = deadline;
                if let Some(ch) = st
                    .topics
                    .get_mut(&topic)
                    .and_then(|t| t.channels.get_mut(&channel))
                {
                    ch.in_flight.insert(id, f);
                    ch.note_in_flight();
                }
                Ok(None)
            }
        }
    }

    fn cls(&mut self) -> CmdResult {
        let mut st = self.inner.lock();
        let c = st
            .clients
            .get_mut(&self.id)
            .ok_or_else(|| fatal("E_INVALID", "client gone"))?;
        if c.state != ClientState::Subscribed {
            return Err(fatal("E_INVALID", "cannot CLS in current state"));
        }
        c.rdy = 0;
        c.state = ClientState::Closing;
        let _ = c.out.send(Out::Flush);
        Ok(Some(b"CLOSE_WAIT".to_vec()))
    }

    fn check_publish_failure(&self, code: &str, cmd: &str) -> Result<(), CmdErr> {
        if self.inner.fail_publishes.load(Ordering::SeqCst) {
            return Err(fatal(code, format!("{cmd} failed exiting")));
        }
        Ok(())
    }

    fn read_message(&mut self, cmd: &str) -> Result<Vec<u8>, CmdErr> {
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

    fn publish(&mut self, params: &[&[u8]]) -> CmdResult {
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
        self.inner.publish(
            &mut st,
            &lossy(topic),
            vec![body],
            Duration::ZERO,
            Instant::now(),
        );
        Ok(Some(b"OK".to_vec()))
    }

    fn dpub(&mut self, params: &[&[u8]]) -> CmdResult {
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
        self.inner.publish(
            &mut st,
            &lossy(topic),
            vec![body],
            Duration::from_millis(ms),
            Instant::now(),
        );
        Ok(Some(b"OK".to_vec()))
    }

    fn mpub(&mut self, params: &[&[u8]]) -> CmdResult {
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
        self.inner.publish(
            &mut st,
            &lossy(topic),
            bodies,
            Duration::ZERO,
            Instant::now(),
        );
        Ok(Some(b"OK".to_vec()))
    }
}
