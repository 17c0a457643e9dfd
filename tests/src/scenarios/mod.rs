//! The adapter scenarios: every scenario written once, run against every adapter (and every
//! runtime an adapter supports) through the object-safe, blocking traits below.
//!
//! An adapter's `tests/scenarios.rs` implements [`Factory`] (async adapters block on their
//! runtime inside) and expands [`adapter_scenario_tests!`](crate::adapter_scenario_tests),
//! which generates one `#[test]` per scenario, each under its own time limit. The traits are
//! the seam: this crate knows nothing of nsq-proto or the adapters. The mapping of the
//! harness's settings, errors and messages onto nsq-proto's types, and the implementations of
//! these traits over nsq-client's generic clients, are written once in the repository-only
//! `nsq-test-support` package (`tests/support/`), which the adapters' test crates depend on.
//!
//! Unlike [`crate::conformance`], these scenarios use the in-process broker: they need its
//! introspection and fault injection. One, `oversize_publishes_cost_one_connection`, needs
//! neither to prove its point, and runs against the real nsqd named by `NSQD_TCP_ADDRESS`
//! when it is set (see [`crate::conformance::Env`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Nsqd, NsqdBuilder};

// ----------------------------------------------------------------------------- settings

/// Compression negotiated on every connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// None.
    #[default]
    None,
    /// Snappy.
    Snappy,
    /// Deflate at this level.
    Deflate(u32),
}

/// Connection settings (a part of nsq-proto's `ConnectionConfig`; `None` = its default).
#[derive(Clone, Debug, Default)]
pub struct Connection {
    /// TLS trusting [`crate::TestPki::global`]'s CA.
    pub tls: bool,
    /// Compression.
    pub compression: Compression,
    /// AUTH secret.
    pub auth_secret: Option<String>,
    /// Heartbeat interval.
    pub heartbeat_interval: Option<Duration>,
    /// Message timeout.
    pub msg_timeout: Option<Duration>,
    /// Touch unanswered messages on their own, for at most this long (`auto_touch`).
    pub auto_touch: Option<Duration>,
    /// The client's zone and region, sent in IDENTIFY (`topology_zone`, `topology_region`).
    pub topology: Option<(String, String)>,
}

/// Consumer settings (a part of nsq-proto's `ConsumerConfig`, given to the builder's
/// `core_config`; `None` = its default).
#[derive(Clone, Debug, Default)]
pub struct ConsumerOptions {
    /// Max in flight.
    pub max_in_flight: Option<u32>,
    /// Attempts before giving up.
    pub max_attempts: Option<u16>,
    /// Backoff multiplier.
    pub backoff_multiplier: Option<Duration>,
    /// Requeue delay when the handler names none.
    pub default_requeue_delay: Option<Duration>,
    /// How often RDY is redistributed.
    pub rdy_redistribute_interval: Option<Duration>,
    /// First reconnect delay.
    pub reconnect_initial_delay: Option<Duration>,
    /// Longest reconnect delay.
    pub reconnect_max_delay: Option<Duration>,
    /// How often nsqlookupd is polled.
    pub lookupd_poll_interval: Option<Duration>,
    /// Connection settings.
    pub connection: Connection,
}

/// Producer settings (a part of nsq-proto's `ProducerConfig`, given to the builder's
/// `core_config`; `None` = its default).
#[derive(Clone, Debug, Default)]
pub struct ProducerOptions {
    /// How long a publish waits for a connection.
    pub publish_timeout: Option<Duration>,
    /// Route to the nearest nsqd by topology (nsq-proto's `Routing::Topology`).
    pub routing_topology: bool,
    /// The longest TCP connect (`connect_timeout`, go-nsq's `dial_timeout`).
    pub connect_timeout: Option<Duration>,
    /// Connection settings.
    pub connection: Connection,
}

/// A go-nsq style configuration: `Config::default()` with `options` set by name and text
/// (`Config::set_str`), then the `unchecked_*` fields assigned directly, bypassing
/// `set_str`'s checks (to prove that building validates the whole configuration).
#[derive(Clone, Debug, Default)]
pub struct GoConfig {
    /// `(option name, textual value)`, set in order.
    pub options: Vec<(String, String)>,
    /// Assigned to `max_attempts` without checks.
    pub unchecked_max_attempts: Option<u16>,
    /// Assigned to `deflate_level` without checks.
    pub unchecked_deflate_level: Option<u32>,
}

impl GoConfig {
    /// The configuration with `options` set.
    pub fn with(options: &[(&str, &str)]) -> GoConfig {
        GoConfig {
            options: options
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..GoConfig::default()
        }
    }
}

/// Called with the attempts and body of a message the consumer gave up on.
pub type GiveUp = Arc<dyn Fn(u16, &[u8]) + Send + Sync>;

/// How to build a consumer.
#[derive(Clone, Default)]
pub struct ConsumerSetup {
    /// Given to the builder's `config` (go-nsq style), if set.
    pub config: Option<GoConfig>,
    /// Given to the builder's `core_config`, if set.
    pub options: Option<ConsumerOptions>,
    /// nsqd TCP addresses.
    pub nsqd: Vec<String>,
    /// nsqlookupd HTTP addresses.
    pub lookupd: Vec<String>,
    /// The give-up hook.
    pub on_give_up: Option<GiveUp>,
}

impl fmt::Debug for ConsumerSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerSetup")
            .field("config", &self.config)
            .field("options", &self.options)
            .field("nsqd", &self.nsqd)
            .field("lookupd", &self.lookupd)
            .field("on_give_up", &self.on_give_up.is_some())
            .finish()
    }
}

// ------------------------------------------------------------------------- observations

/// What kind of error an adapter returned (nsq-proto's `adapter::Error` variants).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An invalid topic or channel name.
    InvalidName,
    /// Other input refused before anything was sent.
    InvalidInput,
    /// nsqd answered with this error code (`E_BAD_MESSAGE` ...).
    Server(String),
    /// The connection was lost before the answer.
    ConnectionLost,
    /// No answer in time.
    Timeout,
    /// No nsqd connection is up.
    NoServerAvailable,
    /// The nsqd cannot work as configured (nsq-proto's `Misconfiguration`).
    Misconfigured(Problem),
    /// Too many publishes outstanding.
    Backpressure,
    /// The consumer refused the command.
    Consumer,
    /// Closed.
    Closed,
    /// Not within the adapter's runtime.
    NoRuntime,
    /// A consumer's first connection to an nsqd it was asked to connect to failed.
    Connect,
    /// A consumer was asked to connect to an nsqd it is already connected or connecting to
    /// (go-nsq's `ErrAlreadyConnected`).
    AlreadyConnected,
    /// A consumer's first query to a lookupd it was asked to poll failed; `misconfigured`:
    /// the address is no nsqlookupd's HTTP port.
    Lookupd {
        /// Whether the address is not a lookupd at all.
        misconfigured: bool,
    },
    /// Invalid configuration.
    Config,
    /// Anything else.
    Other,
}

/// What is wrong with an nsqd that cannot work as configured (nsq-proto's
/// `Misconfiguration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// An HTTP port, not nsqd's TCP port.
    HttpPort,
    /// nsqlookupd's TCP port, not nsqd's.
    LookupdTcpPort,
    /// nsqd requires TLS and none is configured.
    TlsRequired,
    /// TLS is configured and nsqd does not offer it.
    TlsNotOffered,
    /// The TLS handshake failed (an untrusted certificate...).
    TlsHandshake,
    /// nsqd requires AUTH and no secret is configured.
    AuthSecretMissing,
    /// nsqd refused the secret.
    AuthRefused,
    /// A problem this harness does not know.
    Other,
}

/// An adapter's error: its kind and its `Display` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientError {
    /// The kind.
    pub kind: ErrorKind,
    /// The adapter's message.
    pub message: String,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ClientError {}

/// An adapter result.
pub type ClientResult<T> = Result<T, ClientError>;

/// The consumer statistics the scenarios look at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Messages delivered by nsqd.
    pub received: u64,
    /// Messages given up on.
    pub gave_up: u64,
    /// Connections up.
    pub connections: usize,
    /// Backoff level.
    pub backoff_level: u32,
    /// Sum of RDY over the connections.
    pub total_rdy: u64,
    /// Messages in flight over every connection.
    pub in_flight: usize,
    /// Reconnects (connections made again to an nsqd it was connected to before).
    pub reconnects: u64,
    /// Every nsqd the consumer keeps track of.
    pub nsqd: Vec<NsqdStats>,
}

impl ConsumerStats {
    /// The entry of the nsqd at `addr`.
    pub fn nsqd(&self, addr: &str) -> Option<&NsqdStats> {
        self.nsqd.iter().find(|n| n.address == addr)
    }
}

/// Where one nsqd of a consumer stands (nsq-proto's `NsqdState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NsqdState {
    /// TCP connect in progress.
    Connecting,
    /// Handshake in progress.
    Handshaking,
    /// Subscribed.
    Ready,
    /// CLS sent, draining.
    Closing,
    /// No connection.
    Disconnected,
    /// No connection, none attempted: the last one showed a misconfiguration.
    Misconfigured,
    /// A state this harness does not know.
    Other,
}

/// One nsqd in [`ConsumerStats::nsqd`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NsqdStats {
    /// Its TCP address.
    pub address: String,
    /// Added directly rather than discovered.
    pub configured: bool,
    /// Its connection's state.
    pub state: NsqdState,
    /// RDY last sent.
    pub rdy: u32,
    /// Messages in flight.
    pub in_flight: usize,
    /// Messages received from it.
    pub received: u64,
    /// Of those, finished.
    pub finished: u64,
    /// Of those, requeued.
    pub requeued: u64,
    /// Reconnects (connections made again to an nsqd it was connected to before).
    pub reconnects: u64,
    /// The nsqd's zone, as its IDENTIFY reply said (empty if it said none).
    pub topology_zone: String,
}

/// The producer statistics the scenarios look at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Publishes acknowledged.
    pub published: u64,
    /// Publishes that failed.
    pub failed: u64,
    /// Connections ready.
    pub connections_ready: usize,
    /// Natural batches sent (MPUBs of concurrent single publishes).
    pub batches: u64,
    /// Publishes that left in those batches.
    pub batched_messages: u64,
}

/// What a consumer's stop reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Messages handed out and never answered.
    pub unanswered: usize,
}

// ------------------------------------------------------------------------------- traits

/// A received message.
pub trait Message: Send {
    /// Body.
    fn body(&self) -> &[u8];
    /// Attempts (1 on first delivery).
    fn attempts(&self) -> u16;
    /// nsqd's timestamp.
    fn timestamp(&self) -> i64;
    /// The address of the nsqd it came from.
    fn nsqd_address(&self) -> String;
    /// FIN.
    fn finish(self: Box<Self>);
    /// REQ, with backoff.
    fn requeue(self: Box<Self>, delay: Option<Duration>);
    /// REQ, without backoff.
    fn requeue_without_backoff(self: Box<Self>, delay: Option<Duration>);
}

/// How a handler failed (maps onto nsq-proto's `HandlerError`).
#[derive(Clone, Debug)]
pub struct HandlerFailure {
    /// The message.
    pub message: String,
    /// Whether the failure counts for backoff.
    pub backoff: bool,
    /// The requeue delay (`None` = the consumer's default).
    pub delay: Option<Duration>,
}

/// A message handler for [`Consumer::run`]; the message is answered from its result.
pub type Handler = Arc<dyn Fn(&dyn Message) -> Result<(), HandlerFailure> + Send + Sync>;

/// A consumer's `run` going on in the background.
pub trait Runner: Send {
    /// Waits for `run` to return: its stop report (every adapter's `run` returns one).
    fn join(self: Box<Self>) -> StopReport;
}

/// A consumer's control handle.
pub trait ConsumerHandle: Send + Sync {
    /// Stops the consumer, waiting for it.
    fn stop(&self) -> StopReport;
    /// Whether it is stopping, if the adapter says.
    fn is_stopping(&self) -> Option<bool>;
    /// Changes max in flight.
    fn set_max_in_flight(&self, n: u32);
    /// Stops polling a lookupd.
    fn disconnect_from_lookupd(&self, addr: &str) -> ClientResult<()>;
}

/// A consumer.
pub trait Consumer: Send {
    /// The next message, or `None` if none comes within `within` (or it is stopped).
    fn next(&mut self, within: Duration) -> Option<Box<dyn Message>>;
    /// Statistics.
    fn stats(&self) -> ConsumerStats;
    /// Changes max in flight.
    fn set_max_in_flight(&self, n: u32);
    /// Whether every connection has as many messages in flight as its RDY.
    fn is_starved(&self) -> bool;
    /// Adds an nsqd.
    fn connect_to_nsqd(&self, addr: &str) -> ClientResult<()>;
    /// Adds a lookupd, waiting for its first answer.
    fn connect_to_lookupd(&self, addr: &str) -> ClientResult<()>;
    /// Stops consuming from a configured nsqd.
    fn disconnect_from_nsqd(&self, addr: &str) -> ClientResult<()>;
    /// Stops polling a lookupd.
    fn disconnect_from_lookupd(&self, addr: &str) -> ClientResult<()>;
    /// A control handle.
    fn handle(&self) -> Box<dyn ConsumerHandle>;
    /// `events()`: a stream of what happens from now on.
    fn events(&self) -> Box<dyn EventStream>;
    /// Graceful stop.
    fn stop(&mut self) -> StopReport;
    /// Starts `run(concurrency, handler)` in the background (a task or a thread).
    fn run(self: Box<Self>, concurrency: usize, handler: Handler) -> Box<dyn Runner>;
}

/// A consumer's event stream (`Consumer::events`).
pub trait EventStream: Send {
    /// The next event, waiting at most `within`.
    fn next(&mut self, within: Duration) -> NextEvent;
}

/// What [`EventStream::next`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextEvent {
    /// An event.
    Event(ClientEvent),
    /// None within the time given.
    Timeout,
    /// The consumer has stopped and every event was read.
    Ended,
}

/// An event of a consumer (nsq-proto's `client::Event`), as the harness sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// Connected and subscribed.
    Connected {
        /// The nsqd.
        nsqd: String,
    },
    /// A connection ended or an attempt failed.
    Disconnected {
        /// The nsqd.
        nsqd: String,
        /// Whether it is retried on its own.
        retrying: bool,
        /// The misconfiguration, if that is why.
        misconfigured: Option<Problem>,
    },
    /// Backoff entered, or its level changed.
    Backoff {
        /// The level.
        level: u32,
    },
    /// Backoff left.
    BackoffEnded,
    /// A message given up on.
    GaveUp {
        /// Its nsqd.
        nsqd: String,
        /// Its attempts.
        attempts: u16,
    },
    /// Starvation began (`true`) or ended.
    Starved(bool),
    /// A lookupd query failed.
    LookupdFailed {
        /// The lookupd.
        lookupd: String,
        /// The address is not a lookupd at all.
        misconfigured: bool,
    },
    /// Events were dropped.
    Lagged {
        /// How many.
        missed: u64,
    },
    /// An event the harness does not know.
    Other,
}

/// A producer.
pub trait Producer: Send + Sync {
    /// PUB.
    fn publish(&self, topic: &str, body: &[u8]) -> ClientResult<()>;
    /// PUB to a topic given as the adapter's validated topic type.
    fn publish_typed(&self, topic: &str, body: &[u8]) -> ClientResult<()>;
    /// MPUB.
    fn multi_publish(&self, topic: &str, bodies: Vec<Vec<u8>>) -> ClientResult<()>;
    /// DPUB.
    fn deferred_publish(&self, topic: &str, delay: Duration, body: &[u8]) -> ClientResult<()>;
    /// Waits until a connection answers.
    fn ping(&self) -> ClientResult<()>;
    /// Statistics.
    fn stats(&self) -> ProducerStats;
    /// Runs `load` on concurrent tasks (or threads) of this producer's clones; the first
    /// error.
    fn publish_concurrently(&self, load: &ConcurrentPublishes) -> ClientResult<()>;
    /// `publish_async` of every body of `bodies` to `topic`, in order, from one task (or
    /// thread): at most `window` under way, the oldest waited for first; every
    /// `drop_every`-th handle (0: none) is dropped instead of waited for. The first error.
    fn publish_async_window(
        &self,
        topic: &str,
        bodies: Vec<Vec<u8>>,
        window: usize,
        drop_every: usize,
    ) -> ClientResult<()>;
    /// Up to `count` `publish_async` of `body` to `topic` without waiting for any result,
    /// stopping at the first refusal; then `between()`; then every accepted publish's
    /// result, waited for in order.
    fn publish_async_burst(
        &self,
        topic: &str,
        body: &[u8],
        count: usize,
        between: &dyn Fn(),
    ) -> AsyncBurst;
    /// Closes (flushing what is outstanding).
    fn close(&self);
    /// A clone (sharing the connections).
    fn clone_producer(&self) -> Box<dyn Producer>;
}

/// What [`Producer::publish_async_burst`] saw.
#[derive(Debug)]
pub struct AsyncBurst {
    /// The publish that was refused at once, if one was.
    pub refused: Option<ClientError>,
    /// Whether the first accepted publish had its result before `between` was called.
    pub first_known_early: bool,
    /// The result of each accepted publish, in publish order.
    pub results: Vec<ClientResult<()>>,
}

/// Publishes from concurrent tasks: each task `t` of `tasks` publishes `body(t, i)` to
/// `topic` for `i` in `0..per_task`, one after the other.
#[derive(Clone, Debug)]
pub struct ConcurrentPublishes {
    /// The topic.
    pub topic: String,
    /// How many tasks.
    pub tasks: usize,
    /// How many publishes each.
    pub per_task: usize,
    /// The body of publish `i` of task `t`.
    pub body: fn(usize, usize) -> String,
}

/// What an adapter provides to run the scenarios.
pub trait Factory {
    /// `Producer::connect(addr, &config)`.
    fn producer_connect(&self, addr: &str, config: &GoConfig) -> ClientResult<Box<dyn Producer>>;
    /// `Producer::builder()` with `nsqd`, and `core_config` if `options` is set.
    fn producer(
        &self,
        nsqd: &[String],
        options: Option<&ProducerOptions>,
    ) -> ClientResult<Box<dyn Producer>>;
    /// `Consumer::builder(topic, channel)` set up as `setup` says.
    fn consumer(
        &self,
        topic: &str,
        channel: &str,
        setup: &ConsumerSetup,
    ) -> ClientResult<Box<dyn Consumer>>;
    /// `Consumer::builder(topic, channel)` set up as `setup` says, then `connect()`: waits
    /// for the first outcome of each of `setup.nsqd`.
    fn consumer_connect(
        &self,
        topic: &str,
        channel: &str,
        setup: &ConsumerSetup,
    ) -> ClientResult<Box<dyn Consumer>>;
    /// Whether `Config::set_str(option, value)` accepts the value.
    fn check_option(&self, option: &str, value: &str) -> ClientResult<()>;
}

// ------------------------------------------------------------------------------ running

/// One scenario.
#[derive(Clone, Copy)]
pub struct Scenario {
    /// Its name (the generated test's name).
    pub name: &'static str,
    /// Its time limit.
    pub secs: u64,
    /// Its body: panics on failure.
    pub run: fn(&dyn Factory),
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("secs", &self.secs)
            .finish_non_exhaustive()
    }
}

macro_rules! scenario_list {
    ($($name:ident: $secs:expr),* $(,)?) => {
        /// Every scenario.
        pub const SCENARIOS: &[Scenario] = &[
            $(Scenario { name: stringify!($name), secs: $secs, run: $name }),*
        ];

        /// One `#[test]` per scenario of [`SCENARIOS`] (by name), each running the scenario
        /// against the factory `$make()` builds (on a thread of its own, under the
        /// scenario's time limit).
        #[macro_export]
        macro_rules! adapter_scenario_tests {
            ($make:expr) => {
                $(
                    #[test]
                    fn $name() {
                        $crate::scenarios::run(stringify!($name), $make);
                    }
                )*
            };
        }
    };
}

scenario_list! {
    pub_sub_round_trip: 20,
    go_nsq_style_config: 20,
    topic_arguments_are_validated: 20,
    multi_publish_delivers_every_body: 20,
    deferred_publish_honours_the_delay: 20,
    requeue_increments_attempts: 20,
    dropped_message_is_requeued: 20,
    gives_up_after_max_attempts: 20,
    backoff_is_rdy_0_then_rdy_1: 20,
    rdy_is_spread_over_three_brokers: 30,
    lookupd_discovers_a_broker_added_later: 30,
    broker_restart_mid_stream_loses_nothing: 40,
    half_open_broker_is_detected_and_reconnected: 30,
    graceful_stop_with_messages_in_flight_loses_nothing: 30,
    handler_api_runs_with_concurrency: 30,
    tls: 30,
    snappy: 30,
    deflate: 30,
    auth: 30,
    idle_connection_is_kept_alive_by_heartbeats: 30,
    ten_thousand_concurrent_publishes_from_100_tasks: 60,
    producer_fails_over_when_a_broker_dies: 30,
    producer_fails_fast_when_no_broker_is_up: 20,
    server_errors_are_typed: 20,
    a_refused_message_costs_no_outage: 60,
    a_limit_nsqd_stated_applies_at_once: 20,
    topology_aware_consumption_prefers_the_same_zone: 20,
    producer_routing_by_topology_prefers_the_nearest_nsqd: 30,
    topology_routing_waits_for_the_nearest_nsqd_to_answer: 30,
    concurrent_publishes_leave_in_batches: 60,
    publish_async_keeps_thousands_under_way: 60,
    publish_async_is_refused_beyond_max_pending_publishes: 30,
    tls_required_is_reported_by_connect: 20,
    misconfigurations_are_typed_errors: 30,
    events_tell_connections_backoff_and_give_ups: 30,
    builder_connect_waits_for_every_nsqd: 30,
    local_addr_is_bound: 20,
    lookupd_misconfiguration_is_typed: 30,
    dropping_the_consumer_stops_it: 20,
    a_panicking_handler_requeues_with_backoff: 30,
    max_in_flight_changes_at_runtime_and_starvation_is_reported: 30,
    dropping_every_handle_stops_the_consumer: 20,
    disconnect_from_nsqd_drains_it_and_never_reconnects: 30,
    disconnect_from_lookupd_stops_discovery_through_it: 30,
    in_flight_stays_within_max_in_flight_across_three_brokers: 40,
    give_up_counts_as_success_for_backoff: 20,
    connect_to_nsqd_says_whether_it_connected: 20,
    auto_touch_keeps_a_slow_handler_s_message: 30,
    a_burst_of_rejected_answers_backs_off: 20,
    stats_rows_catch_up_over_many_brokers: 30,
    oversize_publishes_cost_one_connection: 30,
    an_oversize_publish_answered_only_by_a_reset_costs_one_connection: 30,
    a_publish_waits_while_its_producer_reconnects: 30,
    a_message_is_counted_before_recv_returns_it: 30,
    a_restart_found_through_lookupd_counts_as_a_reconnect: 30,
}

/// Runs the scenario `name` against the factory `make` builds, on a thread of its own with
/// the scenario's time limit; a failure (panic) or a timeout fails the calling test.
///
/// # Panics
///
/// When the scenario fails, times out, or is unknown.
pub fn run<F: Factory + 'static>(name: &str, make: impl FnOnce() -> F + Send + 'static) {
    let scenario = *SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no scenario named {name}"));
    run_within(scenario.secs, move || (scenario.run)(&make()));
}

/// Runs `f` on a thread of its own and waits at most `secs` seconds for it; a panic inside
/// (its message kept) or a timeout panics here.
///
/// # Panics
///
/// When `f` panics or times out.
pub fn run_within(secs: u64, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().expect("the test thread"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(t.join().expect_err("the test thread panicked"))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {secs} s"),
    }
}

// ------------------------------------------------------------------------------ helpers

/// How long the scenarios wait for something that should happen.
pub const WAIT: Duration = Duration::from_secs(5);

/// Polls `pred` every 10 ms until it holds or `within` passes.
pub fn eventually(within: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts the test nsqd `b` describes.
///
/// # Panics
///
/// If it does not start.
pub fn start(b: NsqdBuilder) -> Nsqd {
    b.start().expect("starting the test nsqd")
}

fn addr(nsqd: &Nsqd) -> String {
    nsqd.tcp_address().to_string()
}

/// Consumer options with `max_in_flight` and quick reconnects and lookupd polls.
pub fn fast_config(max_in_flight: u32) -> ConsumerOptions {
    ConsumerOptions {
        max_in_flight: Some(max_in_flight),
        reconnect_initial_delay: Some(Duration::from_millis(50)),
        reconnect_max_delay: Some(Duration::from_millis(200)),
        lookupd_poll_interval: Some(Duration::from_millis(200)),
        ..ConsumerOptions::default()
    }
}

fn setup(nsqd: &Nsqd, options: ConsumerOptions) -> ConsumerSetup {
    ConsumerSetup {
        options: Some(options),
        nsqd: vec![addr(nsqd)],
        ..ConsumerSetup::default()
    }
}

fn consumer(
    f: &dyn Factory,
    nsqd: &Nsqd,
    topic: &str,
    options: ConsumerOptions,
) -> Box<dyn Consumer> {
    f.consumer(topic, "ch", &setup(nsqd, options)).unwrap()
}

fn producer(f: &dyn Factory, nsqd: &Nsqd) -> Box<dyn Producer> {
    f.producer_connect(&addr(nsqd), &GoConfig::default())
        .unwrap()
}

fn text(m: &dyn Message) -> String {
    String::from_utf8(m.body().to_vec()).unwrap()
}

// ---------------------------------------------------------------------------- scenarios

mod consume;
mod faults;
mod flow;
mod limits;
mod publish;
mod security;
mod topology;

use consume::{
    a_message_is_counted_before_recv_returns_it, a_panicking_handler_requeues_with_backoff,
    dropped_message_is_requeued, dropping_every_handle_stops_the_consumer,
    dropping_the_consumer_stops_it, gives_up_after_max_attempts,
    graceful_stop_with_messages_in_flight_loses_nothing, handler_api_runs_with_concurrency,
    lookupd_discovers_a_broker_added_later, requeue_increments_attempts,
};
use faults::{
    a_restart_found_through_lookupd_counts_as_a_reconnect, broker_restart_mid_stream_loses_nothing,
    disconnect_from_lookupd_stops_discovery_through_it,
    disconnect_from_nsqd_drains_it_and_never_reconnects,
    half_open_broker_is_detected_and_reconnected, idle_connection_is_kept_alive_by_heartbeats,
};
use flow::{
    a_burst_of_rejected_answers_backs_off, auto_touch_keeps_a_slow_handler_s_message,
    backoff_is_rdy_0_then_rdy_1, builder_connect_waits_for_every_nsqd,
    connect_to_nsqd_says_whether_it_connected, events_tell_connections_backoff_and_give_ups,
    give_up_counts_as_success_for_backoff,
    in_flight_stays_within_max_in_flight_across_three_brokers,
    max_in_flight_changes_at_runtime_and_starvation_is_reported, rdy_is_spread_over_three_brokers,
    stats_rows_catch_up_over_many_brokers,
};
use limits::{
    a_publish_waits_while_its_producer_reconnects,
    an_oversize_publish_answered_only_by_a_reset_costs_one_connection,
    oversize_publishes_cost_one_connection,
};
use publish::{
    a_limit_nsqd_stated_applies_at_once, a_refused_message_costs_no_outage,
    concurrent_publishes_leave_in_batches, deferred_publish_honours_the_delay, go_nsq_style_config,
    local_addr_is_bound, multi_publish_delivers_every_body,
    producer_fails_fast_when_no_broker_is_up, producer_fails_over_when_a_broker_dies,
    pub_sub_round_trip, publish_async_is_refused_beyond_max_pending_publishes,
    publish_async_keeps_thousands_under_way, server_errors_are_typed,
    ten_thousand_concurrent_publishes_from_100_tasks, topic_arguments_are_validated,
};
use security::{
    auth, deflate, lookupd_misconfiguration_is_typed, misconfigurations_are_typed_errors, snappy,
    tls, tls_required_is_reported_by_connect,
};
use topology::{
    producer_routing_by_topology_prefers_the_nearest_nsqd,
    topology_aware_consumption_prefers_the_same_zone,
    topology_routing_waits_for_the_nearest_nsqd_to_answer,
};

#[cfg(test)]
mod tests {
    use super::SCENARIOS;

    #[test]
    fn scenario_names_are_unique() {
        let mut names: Vec<_> = SCENARIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len());
    }
}
