//! The nsqd stand-in: TCP protocol V2, topics/channels, timers, faults and introspection.
//!
//! # Checked against nsqd v1.3.0
//!
//! Its protocol handling (`nsqd/protocol_v2.go`, `client_v2.go`, `channel.go`, `tcp.go`)
//! was gone through for the places where a stand-in is tempted to forgive; each point
//! below is done as nsqd does, and checked by `tests/tests/protocol/` (error codes,
//! texts, which errors close), `closing.rs` (how connections end) and `delivery.rs`
//! (delivery, timeouts, heartbeats), which run against a real nsqd too with
//! `NSQD_TCP_ADDRESS` set. Differences that remain are listed
//! in the crate docs ("Known differences from nsqd").
//!
//! - **Ending a connection** (`tcp.go`): after a fatal error the frame is flushed and the
//!   socket closed at once. What the client sent and nsqd did not read (an oversize
//!   PUB/DPUB/MPUB's body, refused right after its size; commands behind a fatal one) is
//!   answered by the kernel with a reset, so a client that writes on without reading meets
//!   the reset. (Until issue 44 the broker read for 200 ms first, and the client always got
//!   a clean close.)
//! - **Write deadline** (`Send`, `Flush`): every write may block for the client's heartbeat
//!   interval at most. A client that stops reading has its writes given up for good: no
//!   more messages or heartbeats, and the connection closes at the next reply the broker
//!   has to send, or when the read deadline passes. (Until issue 44 a blocked write waited
//!   forever.) The deadline is per write call here, per buffered flush in nsqd.
//! - **Read deadline**: twice the heartbeat interval, set before each command line (so it
//!   bounds the body too), following every IDENTIFY; none with heartbeats disabled.
//! - **Command lines**: split on single spaces, `\r` trimmed, longer than 16 KiB (nsqd's
//!   read buffer) closes without an error frame; an unknown or empty command is fatal.
//! - **Order of checks**, each with nsqd's code and text: magic (`E_BAD_PROTOCOL`); IDENTIFY
//!   before the TLS-required check, every other command after it; PUB and DPUB check their
//!   parameters, then the size (sign, then `--max-msg-size`), read the body, then AUTH;
//!   DPUB's delay against `--max-req-timeout` before its size; MPUB checks AUTH and creates
//!   the topic before its body size (sign first), then the count against
//!   `(max-body-size - 4) / 5`, then each message's size, reading message by message, so a
//!   refusal leaves the rest unread; IDENTIFY and AUTH check the maximum body size before
//!   the sign; AUTH's "already set" comes after its body is read.
//! - **States**: SUB only in the initial state and with heartbeats on; RDY ignored after
//!   CLS, fatal before SUB, over `--max-rdy-count` or unparsable; FIN/REQ/TOUCH in the
//!   subscribed or closing state, with a 16-byte id, failing without closing for a message
//!   not in flight or another client's; REQ's delay clamped, DPUB's refused; a second CLS
//!   fatal; IDENTIFY allowed until SUB, AUTH only before SUB and only once.
//! - **Delivery** (`messagePump`, `IsReadyForMessages`, `channel.go`): a client gets messages
//!   while its in-flight count is below its RDY (none at RDY 0 or on a paused channel);
//!   attempts count deliveries; a message times out after the client's msg_timeout and is
//!   redelivered; TOUCH renews to at most max_msg_timeout after delivery; a REQ with a delay
//!   defers; CLS forces RDY 0; heartbeats go out at the interval even before IDENTIFY.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::http::HttpServer;
use crate::lookupd::{LookupShared, ProducerId};
use crate::model::Queues;
use crate::options::{AuthGrant, Options};
use crate::transport::{CmdReader, ConnCtl, Faults, RawRead, RawWrite, Throttle, TlsShared};
use crate::util::wait_until;

mod builder;
mod commands;
mod http_api;
mod identify;
mod latency;
mod queues;
mod stats;
mod writer;

pub use builder::NsqdBuilder;
use latency::Latency;
pub use stats::{
    ChannelStats, ClientId, ClientState, ClientStats, CommandRecord, Stats, TopicStats,
};
use writer::writer_main;

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
    heartbeat: Option<Duration>,
    output_buffer_size: i64,
    output_buffer_timeout: Duration,
    sample_rate: i64,
    auth: Option<AuthGrant>,
    identify: Option<Value>,
    tls: bool,
    snappy: bool,
    deflate: Option<u32>,
    /// IDENTIFY's `client_id` (the remote host until an IDENTIFY, then as sent, even empty).
    #[allow(clippy::struct_field_names, reason = "nsqd's name for it")]
    client_id: String,
    /// IDENTIFY's `hostname` (same default).
    hostname: String,
    /// IDENTIFY's `user_agent`.
    user_agent: String,
    /// Unix seconds of the connection (`connect_ts`).
    connect_ts: u64,
    /// Messages published, per topic, in the order the topics were first published to.
    pub_counts: Vec<(String, u64)>,
    /// The TLS session, once upgraded (for the cipher suite and version in `/stats`).
    tls_session: Option<Arc<TlsShared>>,
}

impl Client {
    /// nsqd's `PublishedMessage`.
    fn published(&mut self, topic: &str, count: u64) {
        match self.pub_counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, n)) => *n += count,
            None => self.pub_counts.push((topic.to_owned(), count)),
        }
    }

    fn kill(&self) {
        self.ctl.killed.store(true, Ordering::SeqCst);
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

struct State {
    /// Topics, channels and messages, and each client's flow control (`state`, `rdy`,
    /// `in_flight`, `sub`, its counters ...).
    queues: Queues,
    /// Each channel's end-to-end latency, by `(topic, channel)` (with
    /// `e2e_processing_latency_percentiles`).
    e2e: BTreeMap<(String, String), Latency>,
    clients: BTreeMap<ClientId, Client>,
    next_client: ClientId,
    log: VecDeque<CommandRecord>,
    next_seq: u64,
    /// Commands being executed and not logged yet (their effects may already show).
    executing: usize,
    warnings: Vec<String>,
}

impl Default for State {
    fn default() -> Self {
        let mut queues = Queues::new(0);
        queues.log_in_flight = true;
        Self {
            queues,
            e2e: BTreeMap::new(),
            clients: BTreeMap::new(),
            next_client: 0,
            log: VecDeque::new(),
            next_seq: 0,
            executing: 0,
            warnings: Vec::new(),
        }
    }
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
    /// See [`Nsqd::lose_size_refusals`].
    lose_size_refusals: AtomicBool,
    /// Unix seconds at start (`/info`'s `start_time`).
    start_time: u64,
    /// The HTTP port (0 without HTTP), set once the HTTP server listens.
    http_port: AtomicU16,
    /// The options `PUT /config/:opt` changes.
    config: Mutex<RuntimeConfig>,
}

/// nsqd's options that can change at run time (`PUT /config/:opt`).
#[derive(Debug)]
struct RuntimeConfig {
    /// `log_level` as nsqd numbers it (1 = debug ... 5 = fatal; 2 = info by default).
    log_level: i64,
    /// `nsqlookupd_tcp_addresses` (`None` after a `PUT` of `null`, as Go keeps a nil slice).
    nsqlookupd_tcp_addresses: Option<Vec<String>>,
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
    /// nsqd after v1.3.0 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    topology_zone: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    topology_region: Option<&'a str>,
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
        st.queues
            .topics
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
            st.queues.expire_in_flight(now);
            st.queues.process_timers(now);
            st.dispatch(now);
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
    /// exiting`, fatal) after their input was validated, and so do the HTTP `/pub` and
    /// `/mpub` (503 `EXITING`).
    pub fn fail_publishes(&self, on: bool) {
        self.inner.fail_publishes.store(on, Ordering::SeqCst);
    }

    /// While on, an oversize PUB, DPUB or MPUB is refused like nsqd does (the body left
    /// unread, so the connection is reset) but without its error frame: what a client sees
    /// when the reset destroys nsqd's `E_BAD_MESSAGE`/`E_BAD_BODY` before it is read (a
    /// segment lost on the way; a client system that drops received data on a reset).
    pub fn lose_size_refusals(&self, on: bool) {
        self.inner.lose_size_refusals.store(on, Ordering::SeqCst);
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
                Restart::KeepMessages => st.queues.requeue_in_flight(Instant::now()),
                Restart::DropMessages => {
                    let names: Vec<String> = st.queues.topics.keys().cloned().collect();
                    st.queues.topics.clear();
                    st.e2e.clear();
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
                let next = st.queues.process_timers(now);
                next.map_or(Duration::from_millis(50), |t| {
                    t.saturating_duration_since(now)
                })
            } else {
                if now >= next_tick {
                    st.queues.process_timers(now);
                    // A Go ticker drops ticks it could not deliver.
                    next_tick += interval;
                    if next_tick <= now {
                        next_tick = now + interval;
                    }
                }
                next_tick.saturating_duration_since(now)
            };
            st.dispatch(now);
            let wait = wait.clamp(Duration::from_millis(1), Duration::from_millis(50));
            st = self
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Inner {
    // ---- connections ----

    fn conn_main(self: Arc<Self>, stream: &TcpStream) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        let remote = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let ctl = Arc::new(ConnCtl::new(self.faults.clone()));
        ctl.set_write_timeout(Some(self.opts.heartbeat_interval));
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
                    heartbeat,
                    output_buffer_size: self.opts.output_buffer_size,
                    output_buffer_timeout: self.opts.output_buffer_timeout,
                    sample_rate: 0,
                    auth: None,
                    identify: None,
                    tls: false,
                    snappy: false,
                    deflate: None,
                    client_id: remote.ip().to_string(),
                    hostname: remote.ip().to_string(),
                    user_agent: String::new(),
                    connect_ts: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs()),
                    pub_counts: Vec::new(),
                    tls_session: None,
                },
            );
            st.queues.add_client(id, self.opts.msg_timeout);
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
        // Closed at once, like nsqd (`client.Close()` right after the error frame is flushed):
        // whatever the client sent that was not read (the body of an oversize PUB, commands
        // pipelined behind a fatal one) makes the kernel reset the connection, and a client
        // that does not read before it writes on meets that reset, as it would with nsqd.
        let _ = stream.shutdown(Shutdown::Both);
        tracing::debug!(client = id, "client gone");
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
