//! The client under simulation, as the world sees it: a sans-IO consumer or producer driven
//! with bytes, connection results and instants. The world does not know which client it
//! drives; `nsq_test_support::sim` (`tests/support/src/sim.rs`) binds nsq-proto's `Consumer` and `Producer` to these
//! traits (the test broker does not depend on the client it tests).

use std::time::{Duration, Instant};

/// A connection or lookupd exchange, numbered by the client.
pub type ConnRef = u64;

/// What the client asks the world to do (nsq-proto's `Action`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Open a connection to `addr`.
    Connect {
        /// The client's handle.
        conn: ConnRef,
        /// `host:port`.
        addr: String,
    },
    /// Write bytes.
    Transmit {
        /// The connection.
        conn: ConnRef,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Close the connection after what was written.
    Disconnect {
        /// The connection.
        conn: ConnRef,
    },
    /// An HTTP exchange with a lookupd.
    LookupdRequest {
        /// The exchange's handle.
        req: ConnRef,
        /// `host:port`.
        addr: String,
        /// The request.
        data: Vec<u8>,
    },
    /// The exchange is over.
    LookupdClose {
        /// The exchange's handle.
        req: ConnRef,
    },
}

/// A message the consumer handed to the application, or gave up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The connection it came on.
    pub conn: ConnRef,
    /// Its id.
    pub id: [u8; 16],
    /// Its attempts.
    pub attempts: u16,
    /// Its nsqd timestamp (Unix nanoseconds).
    pub timestamp: i64,
    /// The size of its body, in bytes.
    pub len: u32,
}

/// What the consumer reports to the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumerNote {
    /// A message to handle.
    Message(Delivery),
    /// A message over `max_attempts`: finished by the consumer, handed over for the give-up
    /// hook.
    GaveUp(Delivery),
    /// The consumer is closed (`leftovers`: messages unanswered when their connection
    /// closed).
    Closed {
        /// Unanswered messages.
        leftovers: usize,
    },
    /// Anything else (connections, lookupd answers, errors), as text for the trace.
    Other(String),
}

/// How the application answers a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// FIN.
    Finish,
    /// REQ with the default delay; `backoff`: it counts as a failure.
    Requeue {
        /// Whether the consumer backs off.
        backoff: bool,
    },
    /// TOUCH.
    Touch,
}

/// What the consumer's state is, for the invariants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Messages received and not answered yet.
    pub in_flight: usize,
    /// Open connections.
    pub connections: usize,
    /// nsqd it knows (configured or discovered).
    pub known_nsqd: usize,
}

/// Driving either machine: the inputs and the outputs every sans-IO client has.
pub trait Machine {
    /// The connection is open.
    fn connected(&mut self, now: Instant, conn: ConnRef);
    /// The connection could not be opened.
    fn connect_failed(&mut self, now: Instant, conn: ConnRef, reason: &str);
    /// Bytes arrived.
    fn input(&mut self, now: Instant, conn: ConnRef, data: &[u8]);
    /// The connection ended (EOF, reset).
    fn eof(&mut self, now: Instant, conn: ConnRef);
    /// The timer fired.
    fn timeout(&mut self, now: Instant);
    /// When the timer fires next.
    fn next_timeout(&self) -> Option<Instant>;
    /// The next thing to do.
    fn poll_act(&mut self) -> Option<Act>;
}

/// A consumer under simulation.
pub trait SimConsumer: Machine {
    /// A lookupd's response bytes.
    fn lookupd_input(&mut self, now: Instant, req: ConnRef, data: &[u8]);
    /// The lookupd closed the response.
    fn lookupd_eof(&mut self, now: Instant, req: ConnRef);
    /// The lookupd exchange failed.
    fn lookupd_failed(&mut self, now: Instant, req: ConnRef, reason: &str);
    /// The next note for the application.
    fn poll_note(&mut self) -> Option<ConsumerNote>;
    /// The application answers a message; `Err` with the consumer's refusal.
    fn answer(&mut self, now: Instant, d: &Delivery, how: Answer) -> Result<(), String>;
    /// Changes max_in_flight.
    fn set_max_in_flight(&mut self, now: Instant, max: u32);
    /// Starts a graceful stop.
    fn close(&mut self, now: Instant);
    /// The current backoff level (0: not backing off).
    fn backoff_level(&self) -> u32;
    /// No message can arrive before the application answers one (nsq-proto's
    /// `Consumer::is_full`: the in-flight bound is reached, every ready connection is at its
    /// RDY, a backoff window, or closing). A batch waits for no more once it is.
    fn is_full(&self, now: Instant) -> bool;
    /// Turns auto-touch on (`Some(limit)`: messages touched before msg_timeout, for up to
    /// `limit` since their delivery, those in flight now too) or off, while the consumer runs.
    fn set_auto_touch(&mut self, now: Instant, limit: Option<Duration>);
    /// Answers follow in a row (a batch's): RDY is planned once, after the last
    /// ([`release_replans`](Self::release_replans)), as the client layer's driver does for the
    /// answers of one wake-up.
    fn hold_replans(&mut self) {}
    /// The last answer of a row was given.
    fn release_replans(&mut self, now: Instant) {
        let _ = now;
    }
    /// The in-flight limit in force (below max_in_flight when adaptive), if the consumer
    /// says.
    fn in_flight_limit(&self) -> Option<u32> {
        None
    }
    /// How long after its in-flight limit went down the consumer may still hand out messages
    /// nsqd wrote under the higher RDY, up to the limit before (the world's check of the limit
    /// allows them for that long). None by default.
    fn limit_grace(&self) -> Duration {
        Duration::ZERO
    }
    /// How long a graceful stop may wait for the application's answers before the consumer
    /// closes anyway (its close timeout): the world allows a stop that long and a few round
    /// trips.
    fn close_timeout(&self) -> Duration;
    /// Sizes of the consumer's state.
    fn footprint(&self) -> Footprint;
    /// The consumer's view of one connection, in words, for a violation's report.
    fn describe(&self, conn: ConnRef) -> String {
        let _ = conn;
        String::new()
    }
}

/// The result of one publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishResult {
    /// The id [`SimProducer::publish`] returned.
    pub id: u64,
    /// nsqd confirmed it.
    pub ok: bool,
    /// When not `ok`: it may have been published anyway (connection lost, timed out).
    pub maybe_published: bool,
}

/// A producer under simulation.
pub trait SimProducer: Machine {
    /// Publishes `body` to `topic`; returns an id its result will carry.
    fn publish(&mut self, now: Instant, topic: &str, body: &[u8]) -> Result<u64, String>;
    /// The next publish result.
    fn poll_result(&mut self) -> Option<PublishResult>;
}

/// What consumer a run asks its [`ClientFactory`] for.
#[derive(Clone, Debug)]
pub struct ConsumerSpec<'a> {
    /// Its seed.
    pub seed: u64,
    /// The topic.
    pub topic: &'a str,
    /// The channel.
    pub channel: &'a str,
    /// max_in_flight.
    pub max_in_flight: u32,
    /// max_attempts.
    pub max_attempts: u16,
    /// The lookupds to discover nsqd through (`http://host:port`).
    pub lookupds: &'a [String],
    /// `Some(floor)`: an adaptive in-flight limit between `floor` and `max_in_flight`.
    pub adaptive: Option<u32>,
}

/// Makes the clients a run drives.
pub trait ClientFactory {
    /// A consumer as `spec` says.
    fn consumer(&mut self, now: Instant, spec: &ConsumerSpec<'_>) -> Box<dyn SimConsumer>;
    /// A producer publishing to `nsqds` (`host:port`).
    fn producer(&mut self, now: Instant, seed: u64, nsqds: &[String]) -> Box<dyn SimProducer>;
    /// How long the consumer's low-RDY rotation waits on a RDY holder with nothing to send,
    /// on a connection whose handshake took `handshake`, before it passes on: the world's
    /// starvation bound is derived from it (see
    /// [`SimConfig::effective_starvation_bound`](super::SimConfig::effective_starvation_bound)).
    fn idle_wait(&self, handshake: Duration) -> Duration;
    /// The longest the consumer means an nsqd with messages to wait for a turn while it has
    /// room (its `low_rdy_max_wait`): the world's starvation bound unless the run sets one
    /// ([`SimConfig::starvation_bound`](super::SimConfig::starvation_bound)).
    fn low_rdy_max_wait(&self) -> Duration;
}
