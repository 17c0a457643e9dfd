//! The adapter scenarios: every scenario written once, run against every adapter (and every
//! runtime an adapter supports) through the object-safe, blocking traits below.
//!
//! An adapter's `tests/scenarios.rs` implements [`Factory`] (async adapters block on their
//! runtime inside) and expands [`adapter_scenario_tests!`](crate::adapter_scenario_tests),
//! which generates one `#[test]` per scenario, each under its own time limit. The traits are
//! the seam: this crate knows nothing of nsq-proto or the adapters. The mapping of the
//! harness's settings, errors and messages onto nsq-proto's types is shared by the adapters'
//! test crates through `tests/glue/nsq_proto.rs` (included with `#[path]`).
//!
//! Unlike [`crate::conformance`], these scenarios always use the in-process broker: they
//! need its introspection and fault injection.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::{AuthGrant, AuthTable, Authorization, Lookupd, Nsqd, NsqdBuilder, Restart};

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
    /// Too many publishes outstanding.
    Backpressure,
    /// The consumer refused the command.
    Consumer,
    /// Closed.
    Closed,
    /// Not within the adapter's runtime.
    NoRuntime,
    /// Invalid configuration.
    Config,
    /// Anything else.
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
    /// Reconnect attempts.
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
    /// Reconnect attempts.
    pub reconnects: u64,
}

/// The producer statistics the scenarios look at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Publishes acknowledged.
    pub published: u64,
    /// Connections ready.
    pub connections_ready: usize,
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
    /// Waits for `run` to return; its stop report if it gives one.
    fn join(self: Box<Self>) -> Option<StopReport>;
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
    /// Stops consuming from a configured nsqd.
    fn disconnect_from_nsqd(&self, addr: &str) -> ClientResult<()>;
    /// Stops polling a lookupd.
    fn disconnect_from_lookupd(&self, addr: &str) -> ClientResult<()>;
    /// A control handle.
    fn handle(&self) -> Box<dyn ConsumerHandle>;
    /// Graceful stop.
    fn stop(&mut self) -> StopReport;
    /// Starts `run(concurrency, handler)` in the background (a task or a thread).
    fn run(self: Box<Self>, concurrency: usize, handler: Handler) -> Box<dyn Runner>;
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
    /// Closes (flushing what is outstanding).
    fn close(&self);
    /// A clone (sharing the connections).
    fn clone_producer(&self) -> Box<dyn Producer>;
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
    dropping_the_consumer_stops_it: 20,
    a_panicking_handler_requeues_with_backoff: 30,
    max_in_flight_changes_at_runtime_and_starvation_is_reported: 30,
    dropping_every_handle_stops_the_consumer: 20,
    disconnect_from_nsqd_drains_it_and_never_reconnects: 30,
    disconnect_from_lookupd_stops_discovery_through_it: 30,
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

fn pub_sub_round_trip(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    p.publish("rt", b"hello").unwrap();
    let mut c = consumer(f, &nsqd, "rt", fast_config(1));
    let m = c.next(WAIT).expect("a message");
    assert_eq!(m.body(), b"hello");
    assert_eq!(m.attempts(), 1);
    assert!(m.timestamp() > 0);
    assert_eq!(m.nsqd_address(), addr(&nsqd));
    m.finish();
    assert!(eventually(WAIT, || nsqd
        .channel("rt", "ch")
        .is_some_and(|c| c.finished == 1)));
    assert_eq!(c.stop().unanswered, 0);
    p.close();
}

fn go_nsq_style_config(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let config = GoConfig::with(&[
        ("max_in_flight", "7"),
        ("snappy", "true"),
        ("heartbeat_interval", "2s"),
    ]);
    let p = f.producer_connect(&addr(&nsqd), &config).unwrap();
    p.publish("cfg", b"x").unwrap();
    // `Consumer::new(topic, channel, &config)`: not connected anywhere yet.
    let with_config = ConsumerSetup {
        config: Some(config),
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("cfg", "ch", &with_config).unwrap();
    c.connect_to_nsqd(&addr(&nsqd)).unwrap();
    c.next(WAIT).expect("a message").finish();
    assert!(eventually(WAIT, || c.stats().total_rdy == 7));
    assert!(nsqd.clients().iter().all(|c| c.snappy));
    assert!(f.check_option("max_in_flight", "-1").is_err());
    let bad = ConsumerSetup {
        config: Some(GoConfig {
            unchecked_max_attempts: Some(70_000u32 as u16),
            unchecked_deflate_level: Some(12),
            ..GoConfig::default()
        }),
        ..ConsumerSetup::default()
    };
    assert!(matches!(
        f.consumer("cfg", "ch", &bad),
        Err(ClientError {
            kind: ErrorKind::Config,
            ..
        })
    ));
    assert!(c.connect_to_nsqd("not an address").is_err());
    c.stop();
    p.close();
}

fn topic_arguments_are_validated(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let err = p.publish("bad topic!", b"x").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidName, "{err}");
    assert!(
        err.message
            .starts_with("invalid topic name \"bad topic!\": "),
        "{err}"
    );
    p.publish_typed("typed", b"x").unwrap();
    let Err(err) = f.consumer("ok", "bad channel", &ConsumerSetup::default()) else {
        panic!("a bad channel name was accepted");
    };
    assert_eq!(err.kind, ErrorKind::InvalidName, "{err}");
    assert!(
        err.message
            .starts_with("invalid channel name \"bad channel\": "),
        "{err}"
    );
    p.close();
}

fn multi_publish_delivers_every_body(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let bodies: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    p.multi_publish(
        "mpub",
        bodies.iter().map(|b| b.clone().into_bytes()).collect(),
    )
    .unwrap();
    assert!(p.multi_publish("mpub", Vec::new()).is_err());
    let mut c = consumer(f, &nsqd, "mpub", fast_config(50));
    let mut got = BTreeSet::new();
    while got.len() < 100 {
        let m = c.next(WAIT).expect("all 100 messages");
        got.insert(text(&*m));
        m.finish();
    }
    assert_eq!(got, bodies.into_iter().collect());
    c.stop();
    p.close();
}

fn deferred_publish_honours_the_delay(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let mut c = consumer(f, &nsqd, "dpub", fast_config(1));
    let sent = Instant::now();
    p.deferred_publish("dpub", Duration::from_millis(1200), b"later")
        .unwrap();
    let m = c.next(WAIT).expect("the deferred message");
    assert!(
        sent.elapsed() >= Duration::from_millis(1100),
        "{:?}",
        sent.elapsed()
    );
    m.finish();
    c.stop();
    p.close();
}

fn requeue_increments_attempts(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("req", b"again");
    let mut c = consumer(f, &nsqd, "req", fast_config(1));
    let m = c.next(WAIT).unwrap();
    assert_eq!(m.attempts(), 1);
    m.requeue_without_backoff(Some(Duration::ZERO));
    let m = c.next(WAIT).unwrap();
    assert_eq!(m.attempts(), 2);
    m.finish();
    c.stop();
}

fn dropped_message_is_requeued(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("drop", b"x");
    let mut c = consumer(f, &nsqd, "drop", fast_config(1));
    let m = c.next(WAIT).unwrap();
    drop(m);
    assert!(eventually(WAIT, || nsqd
        .channel("drop", "ch")
        .is_some_and(|c| c.requeued == 1)));
    c.stop();
}

fn gives_up_after_max_attempts(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("giveup", b"poison");
    let gave_up = Arc::new(AtomicU32::new(0));
    let g = gave_up.clone();
    let setup = ConsumerSetup {
        on_give_up: Some(Arc::new(move |attempts, body| {
            assert_eq!(attempts, 3);
            assert_eq!(body, b"poison");
            g.fetch_add(1, Ordering::SeqCst);
        })),
        ..setup(
            &nsqd,
            ConsumerOptions {
                max_attempts: Some(2),
                ..fast_config(1)
            },
        )
    };
    let mut c = f.consumer("giveup", "ch", &setup).unwrap();
    for attempt in 1..=2 {
        let m = c.next(WAIT).unwrap();
        assert_eq!(m.attempts(), attempt);
        m.requeue_without_backoff(Some(Duration::ZERO));
    }
    assert!(eventually(WAIT, || gave_up.load(Ordering::SeqCst) == 1));
    assert!(eventually(WAIT, || nsqd
        .channel("giveup", "ch")
        .is_some_and(|c| c.finished == 1)));
    assert!(c.next(Duration::from_millis(200)).is_none());
    assert_eq!(c.stats().gave_up, 1);
    c.stop();
}

fn backoff_is_rdy_0_then_rdy_1(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("backoff", b"fail once");
    let mut c = consumer(
        f,
        &nsqd,
        "backoff",
        ConsumerOptions {
            backoff_multiplier: Some(Duration::from_millis(100)),
            ..fast_config(5)
        },
    );
    let m = c.next(WAIT).unwrap();
    assert!(eventually(WAIT, || c.stats().total_rdy == 5));
    let failed_at = Instant::now();
    m.requeue(Some(Duration::ZERO));
    // Redelivered through the RDY 1 probe after the backoff window.
    let m = c.next(WAIT).expect("redelivery after the backoff window");
    assert!(failed_at.elapsed() >= Duration::from_millis(100));
    assert_eq!(m.attempts(), 2);
    m.finish();
    let lines = || -> Vec<String> { nsqd.commands().into_iter().map(|r| r.line).collect() };
    assert!(eventually(WAIT, || lines()
        .iter()
        .filter(|l| l.starts_with("FIN"))
        .count()
        == 1));
    let lines = lines();
    let req = lines
        .iter()
        .position(|l| l.starts_with("REQ"))
        .unwrap_or_else(|| panic!("REQ: {lines:?}"));
    let rdy0 = lines
        .iter()
        .position(|l| l == "RDY 0")
        .unwrap_or_else(|| panic!("RDY 0: {lines:?}"));
    assert!(rdy0 < req, "RDY 0 must precede the REQ: {lines:?}");
    let probe = lines[req..]
        .iter()
        .position(|l| l == "RDY 1")
        .unwrap_or_else(|| panic!("RDY 1 after the backoff window: {lines:?}"));
    let fin = lines.iter().position(|l| l.starts_with("FIN")).unwrap();
    assert!(req + probe < fin, "{lines:?}");
    // Success ends the backoff: full RDY again.
    assert!(eventually(WAIT, || c.stats().backoff_level == 0
        && c.stats().total_rdy == 5));
    c.stop();
}

fn rdy_is_spread_over_three_brokers(f: &dyn Factory) {
    let brokers: Vec<Nsqd> = (0..3).map(|_| start(Nsqd::builder())).collect();
    let mut setup = ConsumerSetup {
        options: Some(ConsumerOptions {
            rdy_redistribute_interval: Some(Duration::from_millis(200)),
            ..fast_config(9)
        }),
        ..ConsumerSetup::default()
    };
    for n in &brokers {
        n.publish("spread", b"warm-up");
        setup.nsqd.push(addr(n));
    }
    let mut c = f.consumer("spread", "ch", &setup).unwrap();
    for _ in 0..3 {
        c.next(WAIT).expect("warm-up message").finish();
    }
    let spread = || {
        brokers.iter().all(|n| {
            let clients = n.clients();
            clients.len() == 1 && clients[0].rdy == 3
        })
    };
    assert!(eventually(WAIT, spread), "RDY 3 on each broker");
    assert!(eventually(WAIT, || c.stats().total_rdy == 9));
    c.stop();
}

fn lookupd_discovers_a_broker_added_later(f: &dyn Factory) {
    let lookupd = Lookupd::start().unwrap();
    let setup = ConsumerSetup {
        options: Some(fast_config(1)),
        lookupd: vec![lookupd.http_address().to_string()],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("late", "ch", &setup).unwrap();
    assert!(c.next(Duration::from_millis(300)).is_none());
    let nsqd = start(Nsqd::builder().lookupd(&lookupd));
    nsqd.publish("late", b"found you");
    let m = c.next(WAIT).expect("discovered through lookupd");
    assert_eq!(m.body(), b"found you");
    m.finish();
    c.stop();
}

fn broker_restart_mid_stream_loses_nothing(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let bodies: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
    p.multi_publish(
        "restart",
        bodies.iter().map(|b| b.clone().into_bytes()).collect(),
    )
    .unwrap();
    p.close();
    let mut c = consumer(f, &nsqd, "restart", fast_config(10));
    let mut finished = BTreeSet::new();
    while finished.len() < 100 {
        let m = c.next(WAIT).unwrap();
        finished.insert(text(&*m));
        m.finish();
    }
    nsqd.restart(Restart::KeepMessages).unwrap();
    while finished.len() < 300 {
        let m = c.next(WAIT).expect("messages after the restart");
        finished.insert(text(&*m));
        m.finish();
    }
    assert_eq!(finished, bodies.into_iter().collect());
    c.stop();
}

fn half_open_broker_is_detected_and_reconnected(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let mut config = fast_config(1);
    config.connection.heartbeat_interval = Some(Duration::from_secs(1));
    // A message nsqd hands to the dead connection comes back after msg_timeout.
    config.connection.msg_timeout = Some(Duration::from_secs(1));
    let mut c = consumer(f, &nsqd, "halfopen", config);
    assert!(eventually(WAIT, || c.stats().connections == 1));
    nsqd.pause();
    // No heartbeat for 2 x heartbeat_interval: the connection is presumed dead.
    assert!(eventually(Duration::from_secs(5), || c.stats().connections == 0));
    nsqd.resume();
    assert!(eventually(WAIT, || {
        let clients = nsqd.clients();
        clients.len() == 1 && clients[0].rdy > 0
    }));
    nsqd.publish("halfopen", b"back");
    let Some(m) = c.next(WAIT) else {
        let lines: Vec<String> = nsqd
            .commands()
            .into_iter()
            .map(|r| format!("{:?} {:?} {}", r.at, r.client, r.line))
            .collect();
        panic!(
            "a message after reconnecting {lines:#?} {:?} {:?}",
            nsqd.clients(),
            c.stats()
        );
    };
    assert_eq!(m.body(), b"back");
    m.finish();
    c.stop();
}

fn graceful_stop_with_messages_in_flight_loses_nothing(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..20 {
        nsqd.publish("stop", format!("s{i}").as_bytes());
    }
    let mut c = consumer(f, &nsqd, "stop", fast_config(10));
    let mut held = Vec::new();
    while held.len() < 5 {
        held.push(c.next(WAIT).unwrap());
    }
    let handle = c.handle();
    let stopper = std::thread::spawn(move || handle.stop());
    // The handler finishes its in-flight messages while the stop drains.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !stopper.is_finished(),
        "stop must wait for in-flight messages"
    );
    for m in held {
        m.finish();
    }
    // The stream ends; messages not taken yet are requeued.
    while let Some(m) = c.next(WAIT) {
        m.finish();
    }
    let report = stopper.join().unwrap();
    assert_eq!(report.unanswered, 0);
    // Every message is finished or back in the queue: none lost.
    let settled = || {
        nsqd.channel("stop", "ch").is_some_and(|ch| {
            ch.in_flight == 0 && ch.finished as usize + ch.depth + ch.deferred == 20
        })
    };
    assert!(
        eventually(WAIT, settled),
        "{:?}",
        nsqd.channel("stop", "ch")
    );
    assert!(nsqd.channel("stop", "ch").unwrap().finished >= 5);
}

fn handler_api_runs_with_concurrency(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..50 {
        nsqd.publish("handler", format!("{i}").as_bytes());
    }
    let c = consumer(f, &nsqd, "handler", fast_config(20));
    let handle = c.handle();
    let seen = Arc::new(AtomicU32::new(0));
    let s = seen.clone();
    let runner = c.run(
        4,
        Arc::new(move |m: &dyn Message| {
            if m.attempts() == 1 && m.body()[0] == b'7' {
                return Err(HandlerFailure {
                    message: "retry me".into(),
                    backoff: false,
                    delay: Some(Duration::ZERO),
                });
            }
            s.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }),
    );
    assert!(eventually(Duration::from_secs(10), || seen
        .load(Ordering::SeqCst)
        >= 50));
    let report = handle.stop();
    assert_eq!(report.unanswered, 0);
    if let Some(report) = runner.join() {
        assert_eq!(report.unanswered, 0);
    }
    let done = || {
        nsqd.channel("handler", "ch")
            .is_some_and(|ch| ch.finished == 50 && ch.requeued == 1)
    };
    assert!(
        eventually(WAIT, done),
        "{:?}",
        nsqd.channel("handler", "ch")
    );
}

/// Publishes and consumes one 10 kB message with `connection`; while both are connected,
/// every broker client must satisfy `negotiated`.
fn round_trip_with(
    f: &dyn Factory,
    nsqd: &Nsqd,
    topic: &str,
    connection: &Connection,
    negotiated: impl Fn(&crate::ClientStats) -> bool,
) {
    let options = ProducerOptions {
        connection: connection.clone(),
        ..ProducerOptions::default()
    };
    let p = f.producer(&[addr(nsqd)], Some(&options)).unwrap();
    p.ping().unwrap();
    let body = vec![b'z'; 10_000];
    p.publish(topic, &body).unwrap();
    let mut c = consumer(
        f,
        nsqd,
        topic,
        ConsumerOptions {
            connection: connection.clone(),
            ..fast_config(1)
        },
    );
    let m = c.next(WAIT).expect("a message");
    assert_eq!(m.body(), &body[..]);
    m.finish();
    assert!(eventually(WAIT, || nsqd
        .channel(topic, "ch")
        .is_some_and(|c| c.finished == 1)));
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 2, "{clients:?}");
    assert!(clients.iter().all(negotiated), "{clients:?}");
    c.stop();
    p.close();
}

fn tls(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().tls_server_names(&["127.0.0.1"]));
    let conn = Connection {
        tls: true,
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "tls", &conn, |c| c.tls);
}

fn snappy(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let conn = Connection {
        compression: Compression::Snappy,
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "snappy", &conn, |c| c.snappy);
}

fn deflate(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let conn = Connection {
        compression: Compression::Deflate(3),
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "deflate", &conn, |c| c.deflate == Some(3));
}

fn auth(f: &dyn Factory) {
    let table = AuthTable::new().with(
        "s3cret",
        AuthGrant::new("tester", vec![Authorization::all()]),
    );
    let nsqd = start(Nsqd::builder().auth(table));
    let conn = Connection {
        auth_secret: Some("s3cret".into()),
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "auth", &conn, |c| {
        c.identity.as_deref() == Some("tester")
    });
    // A wrong secret: publishes fail, they do not hang.
    let bad = ProducerOptions {
        publish_timeout: Some(Duration::from_secs(1)),
        connection: Connection {
            auth_secret: Some("wrong".into()),
            ..Connection::default()
        },
    };
    let p = f.producer(&[addr(&nsqd)], Some(&bad)).unwrap();
    assert!(p.publish("auth", b"x").is_err());
    p.close();
}

fn idle_connection_is_kept_alive_by_heartbeats(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let mut config = fast_config(1);
    config.connection.heartbeat_interval = Some(Duration::from_secs(1));
    let mut c = consumer(f, &nsqd, "idle", config);
    assert!(eventually(WAIT, || nsqd.clients().len() == 1));
    let id = nsqd.clients()[0].id;
    std::thread::sleep(Duration::from_millis(3500));
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 1);
    assert_eq!(
        clients[0].id, id,
        "the connection must not have been replaced"
    );
    assert!(
        nsqd.commands_of(id).iter().any(|r| r.line == "NOP"),
        "heartbeats answered"
    );
    nsqd.publish("idle", b"still here");
    c.next(WAIT).expect("a message").finish();
    c.stop();
}

fn ten_thousand_concurrent_publishes_from_100_tasks(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    p.publish_concurrently(&ConcurrentPublishes {
        topic: "many".into(),
        tasks: 100,
        per_task: 100,
        body: |t, i| format!("{t}-{i}"),
    })
    .unwrap();
    assert_eq!(p.stats().published, 10_000);
    assert!(eventually(WAIT, || nsqd
        .topic("many")
        .is_some_and(|t| t.message_count == 10_000)));
    p.close();
}

fn producer_fails_over_when_a_broker_dies(f: &dyn Factory) {
    let a = start(Nsqd::builder());
    let b = start(Nsqd::builder());
    let p = f.producer(&[addr(&a), addr(&b)], None).unwrap();
    p.ping().unwrap();
    assert!(eventually(WAIT, || p.stats().connections_ready == 2));
    p.publish("fo", b"to-a").unwrap();
    assert_eq!(a.topic("fo").map(|t| t.message_count), Some(1));
    a.shutdown();
    // Publishes in the window where the loss is discovered may fail (connection lost);
    // afterwards every publish goes to b.
    let mut ok = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while ok < 20 && Instant::now() < deadline {
        if p.publish("fo", b"to-b").is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 20);
    assert_eq!(b.topic("fo").map(|t| t.message_count), Some(20));
    p.close();
}

fn producer_fails_fast_when_no_broker_is_up(f: &dyn Factory) {
    // A port that was just free: nothing listens there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let p = f.producer(std::slice::from_ref(&addr), None).unwrap();
    let started = Instant::now();
    let err = p.publish("nobody", b"x").unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoServerAvailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Once down, later publishes fail at once.
    let started = Instant::now();
    assert!(p.publish("nobody", b"y").is_err());
    assert!(started.elapsed() < Duration::from_millis(200));
    assert!(matches!(
        f.producer_connect(&addr, &GoConfig::default()),
        Err(ClientError {
            kind: ErrorKind::NoServerAvailable,
            ..
        })
    ));
    p.close();
}

fn server_errors_are_typed(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().max_msg_size(10));
    let p = producer(f, &nsqd);
    let err = p.publish("small", &[b'x'; 100]).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::Server("E_BAD_MESSAGE".into()),
        "expected a server error, got {err}"
    );
    // The producer reconnects after nsqd closed the connection: later publishes work.
    let deadline = Instant::now() + WAIT;
    loop {
        match p.publish("small", b"ok") {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "never recovered: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    p.close();
}

fn dropping_the_consumer_stops_it(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..5 {
        nsqd.publish("dropc", format!("{i}").as_bytes());
    }
    let mut c = consumer(f, &nsqd, "dropc", fast_config(5));
    let handle = c.handle();
    c.next(WAIT).expect("a message").finish();
    drop(c);
    // Where the adapter tells: dropping stopped it (messages received but not taken were
    // released at once).
    assert_ne!(handle.is_stopping(), Some(false));
    // The handle outlives the consumer: the stop still completes and nothing is lost.
    let report = handle.stop();
    assert_eq!(report.unanswered, 0);
    assert!(
        eventually(WAIT, || nsqd.channel("dropc", "ch").is_some_and(|ch| {
            ch.in_flight == 0 && ch.finished == 1 && ch.depth + ch.deferred == 4
        })),
        "{:?}",
        nsqd.channel("dropc", "ch")
    );
}

fn a_panicking_handler_requeues_with_backoff(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("panic", b"boom once");
    let c = consumer(
        f,
        &nsqd,
        "panic",
        ConsumerOptions {
            backoff_multiplier: Some(Duration::from_millis(50)),
            default_requeue_delay: Some(Duration::from_millis(10)),
            ..fast_config(1)
        },
    );
    let handle = c.handle();
    let calls = Arc::new(AtomicU32::new(0));
    let k = calls.clone();
    let runner = c.run(
        1,
        Arc::new(move |m: &dyn Message| {
            k.fetch_add(1, Ordering::SeqCst);
            assert!(m.attempts() > 1, "first attempt panics (on purpose)");
            Ok(())
        }),
    );
    assert!(eventually(WAIT, || nsqd
        .channel("panic", "ch")
        .is_some_and(|c| c.finished == 1)));
    let ch = nsqd.channel("panic", "ch").unwrap();
    assert_eq!(ch.requeued, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(
        nsqd.commands().iter().any(|r| r.line == "RDY 0"),
        "a panic counts as a failure: backoff"
    );
    handle.stop();
    if let Some(report) = runner.join() {
        assert_eq!(report.unanswered, 0);
    }
}

fn max_in_flight_changes_at_runtime_and_starvation_is_reported(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("mif", b"warm-up");
    let mut c = consumer(f, &nsqd, "mif", fast_config(2));
    // The core starts each connection at RDY 1 and raises it after the first message.
    c.next(WAIT).expect("warm-up message").finish();
    let nsqd = &nsqd;
    let rdy = |n: i64| {
        move || {
            let clients = nsqd.clients();
            clients.len() == 1 && clients[0].rdy == n
        }
    };
    assert!(eventually(WAIT, rdy(2)));
    assert!(!c.is_starved());
    c.set_max_in_flight(0);
    assert!(eventually(WAIT, rdy(0)), "max_in_flight 0 pauses");
    nsqd.publish("mif", b"a");
    nsqd.publish("mif", b"b");
    assert!(c.next(Duration::from_millis(200)).is_none());
    c.handle().set_max_in_flight(2);
    assert!(eventually(WAIT, rdy(2)));
    // Both held: 2 in flight of RDY 2, so a batching handler should flush now.
    let a = c.next(WAIT).unwrap();
    let b = c.next(WAIT).unwrap();
    assert!(eventually(WAIT, || c.is_starved()));
    a.finish();
    b.finish();
    assert!(eventually(WAIT, || !c.is_starved()));
    assert_eq!(c.stop().unanswered, 0);
}

fn dropping_every_handle_stops_the_consumer(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let c = consumer(f, &nsqd, "dropped", fast_config(1));
    assert!(eventually(WAIT, || nsqd.clients().len() == 1));
    drop(c);
    // The driver closes the connection gracefully (CLS) and ends.
    assert!(eventually(WAIT, || nsqd.clients().is_empty()));
    let p = producer(f, &nsqd);
    let q = p.clone_producer();
    drop(p);
    q.publish("dropped", b"still works").unwrap();
    drop(q);
    assert!(eventually(WAIT, || nsqd.clients().is_empty()));
}

/// The consumer's stats for `nsqd` agree with what the broker says of its one client.
fn stats_match_broker(c: &dyn Consumer, nsqd: &Nsqd) -> bool {
    let stats = c.stats();
    let Some(e) = stats.nsqd(&addr(nsqd)) else {
        return false;
    };
    let clients = nsqd.clients();
    let [client] = clients.as_slice() else {
        return false;
    };
    e.state == NsqdState::Ready
        && e.configured
        && e.reconnects == 0
        && i64::from(e.rdy) == client.rdy
        && i64::try_from(e.in_flight) == Ok(client.in_flight)
        && (e.received, e.finished, e.requeued)
            == (client.delivered, client.finished, client.requeued)
}

fn disconnect_from_nsqd_drains_it_and_never_reconnects(f: &dyn Factory) {
    let (nsqd_a, nsqd_b) = (start(Nsqd::builder()), start(Nsqd::builder()));
    for i in 0..20 {
        nsqd_a.publish("disc", format!("a{i}").as_bytes());
        nsqd_b.publish("disc", format!("b{i}").as_bytes());
    }
    let setup = ConsumerSetup {
        options: Some(fast_config(4)),
        nsqd: vec![addr(&nsqd_a), addr(&nsqd_b)],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("disc", "ch", &setup).unwrap();
    // From A: one requeued, one held unanswered, the others finished; from B: finished.
    let (mut requeued, mut held, mut finished_a, mut from_b) = (false, None, 0, 0);
    while held.is_none() || from_b < 3 {
        let m = c.next(WAIT).expect("messages from both brokers");
        if m.nsqd_address() != addr(&nsqd_a) {
            from_b += 1;
            m.finish();
        } else if !requeued {
            requeued = true;
            m.requeue_without_backoff(Some(Duration::ZERO));
        } else if held.is_none() {
            held = Some(m);
        } else {
            finished_a += 1;
            m.finish();
        }
    }
    // Nothing is taken for nsqd_a while: both brokers fill their RDY and the numbers settle.
    assert!(
        eventually(WAIT, || stats_match_broker(&*c, &nsqd_a)
            && stats_match_broker(&*c, &nsqd_b)),
        "{:#?}\nA: {:#?}\nB: {:#?}",
        c.stats(),
        nsqd_a.clients(),
        nsqd_b.clients()
    );
    let st = c.stats();
    assert_eq!(
        st.in_flight,
        st.nsqd.iter().map(|n| n.in_flight).sum::<usize>()
    );
    assert_eq!((st.connections, st.total_rdy, st.reconnects), (2, 4, 0));

    let client = nsqd_a.clients()[0].id;
    c.disconnect_from_nsqd(&addr(&nsqd_a)).unwrap();
    // CLS reaches A, which drains: still connected, since the held message is in flight.
    assert!(eventually(WAIT, || nsqd_a
        .commands_of(client)
        .iter()
        .any(|r| r.name() == "CLS")));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_a))
        .is_some_and(|e| {
            e.state == NsqdState::Closing && e.rdy == 0 && !e.configured
        })));
    assert_eq!(nsqd_a.clients().len(), 1, "draining");
    held.expect("a held message").finish();
    finished_a += 1;
    // Everything still queued is answered; A's connection then closes.
    assert!(eventually(WAIT, || {
        while let Some(m) = c.next(Duration::from_millis(20)) {
            if m.nsqd_address() == addr(&nsqd_a) {
                finished_a += 1;
            }
            m.finish();
        }
        nsqd_a.clients().is_empty()
    }));
    // Its in-flight messages were answered after the CLS, none left to time out.
    let log = nsqd_a.commands_of(client);
    let cls = log.iter().position(|r| r.name() == "CLS").unwrap();
    assert!(log[cls..].iter().any(|r| r.name() == "FIN"), "{log:#?}");
    // A's share of max_in_flight is B's now.
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_b))
        .is_some_and(|e| e.rdy == 4)));
    assert!(eventually(WAIT, || nsqd_b
        .clients()
        .first()
        .is_some_and(|cl| cl.rdy == 4)));
    let ch = nsqd_a.channel("disc", "ch").unwrap();
    assert_eq!((ch.in_flight, ch.timed_out), (0, 0));
    assert_eq!((ch.finished, ch.requeued), (finished_a, 1));
    // Never reconnected (the reconnect delay is 50..200 ms), though A has messages.
    for _ in 0..3 {
        nsqd_a.publish("disc", b"late");
    }
    assert!(nsqd_a.channel("disc", "ch").unwrap().depth >= 3);
    assert!(!eventually(Duration::from_secs(1), || !nsqd_a
        .clients()
        .is_empty()));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_a))
        .is_none()));
    assert_eq!(c.stats().connections, 1);
    // Messages keep flowing, all from B.
    nsqd_b.publish("disc", b"after");
    let mut got_after = false;
    while let Some(m) = c.next(Duration::from_millis(300)) {
        assert_eq!(m.nsqd_address(), addr(&nsqd_b));
        got_after |= m.body() == b"after";
        m.finish();
    }
    assert!(got_after);
    // Refusals.
    let err = c.disconnect_from_nsqd(&addr(&nsqd_a)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("not configured"), "{err}");
    let err = c.disconnect_from_nsqd("not an address").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{err}");
    assert_eq!(c.stop().unanswered, 0);
}

fn disconnect_from_lookupd_stops_discovery_through_it(f: &dyn Factory) {
    let (l1, l2) = (Lookupd::start().unwrap(), Lookupd::start().unwrap());
    let nsqd_a = start(Nsqd::builder().lookupd(&l1));
    let nsqd_b = start(Nsqd::builder().lookupd(&l2));
    nsqd_a.publish("dlk", b"a");
    nsqd_b.publish("dlk", b"b");
    let (l1_addr, l2_addr) = (l1.http_address().to_string(), l2.http_address().to_string());
    let setup = ConsumerSetup {
        options: Some(fast_config(4)),
        lookupd: vec![l1_addr.clone(), l2_addr.clone()],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("dlk", "ch", &setup).unwrap();
    for _ in 0..2 {
        c.next(WAIT).expect("a message from each broker").finish();
    }
    assert!(eventually(WAIT, || c.stats().connections == 2));
    c.handle().disconnect_from_lookupd(&l1_addr).unwrap();
    let polls = l1.requests().len();
    // Refusals: the last lookupd, one not configured, nsqd_a discovered nsqd.
    let err = c.disconnect_from_lookupd(&l2_addr).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("only one"), "{err}");
    let err = c.disconnect_from_lookupd(&l1_addr).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("not configured"), "{err}");
    let err = c.disconnect_from_nsqd(&addr(&nsqd_b)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("discovered"), "{err}");
    // A, which only L1 lists, stays connected until its connection ends ...
    assert_eq!(nsqd_a.clients().len(), 1);
    nsqd_a.drop_connections();
    // ... and is never reconnected, over several polls of L2 (every 200 ms).
    assert!(!eventually(Duration::from_secs(1), || !nsqd_a
        .clients()
        .is_empty()));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_a))
        .is_none()));
    assert_eq!(l1.requests().len(), polls, "L1 is not polled any more");
    // B, still listed by L2, comes back when its connection drops.
    nsqd_b.drop_connections();
    assert!(eventually(WAIT, || nsqd_b.clients().len() == 1));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_b))
        .is_some_and(
            |e| e.reconnects == 1 && e.state == NsqdState::Ready
        )));
    nsqd_a.publish("dlk", b"a2");
    nsqd_b.publish("dlk", b"b2");
    let m = c.next(WAIT).expect("B's message");
    assert_eq!(m.body(), b"b2");
    m.finish();
    assert!(c.next(Duration::from_millis(300)).is_none(), "A is gone");
    assert_eq!(c.stop().unanswered, 0);
}

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
