//! NSQ client for plain threads and `std::net`: no async runtime anywhere.
//!
//! This crate moves bytes between blocking sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision (handshake, TLS, snappy/deflate, AUTH, heartbeats,
//! RDY and backoff, reconnects, lookupd discovery, publish routing and failover) stays in the
//! core, so it behaves exactly like the `nsq-tokio` and `nsq-async-std` adapters. The API is
//! theirs with blocking calls instead of `async fn`s.
//!
//! # Model
//!
//! The client itself (the driver, the handles, the builders, the errors) is written once in
//! [`nsq_proto::client`]; this crate is its runtime shim for plain threads: [`Blocking`]
//! implements [`Runtime`](nsq_proto::client::Runtime), and [`Consumer`], [`ConsumerHandle`]
//! and [`Producer`] run the client layer's calls to completion on the calling thread.
//!
//! * One driver thread per [`Consumer`] / [`Producer`] (`nsqb-consumer`, `nsqb-producer`)
//!   runs the client layer's one driver (the same code as on tokio and async-io, batching
//!   included) under a small executor that parks the thread until a socket, a command or the
//!   driver's timer wakes it.
//! * Every nsqd connection has a reader thread (`nsqb-rd-N`: connects with the dial timeout,
//!   sets `TCP_NODELAY`, then hands each read to the driver as a `BytesMut` chunk, so message
//!   bodies are slices of the read buffer: zero-copy) and a writer thread (`nsqb-wr-N`:
//!   writes what the driver emits, with the write timeout; a blocked write never stops
//!   reading). The bytes the core emits during one wake-up leave in one write per
//!   connection. nsqlookupd queries use the same sockets.
//! * Messages are answered through small `Copy` commands on a lock-free queue: no lock and no
//!   allocation per answer.
//! * Every thread is named and joined by [`ConsumerHandle::stop`] / [`Consumer::stop`] /
//!   [`Producer::close`] and on drop; nothing blocks without a bound.
//! * Everything is logged with `tracing`, nothing is printed (see [Logging](#logging)).
//!
//! # Configuration
//!
//! Both take a [`Config`]: one struct with go-nsq's option names and defaults, buildable in
//! code, option by option (`config.set_str("max_in_flight", "100")`, like go-nsq's
//! `Config.Set`), or deserialised from JSON/TOML/... so existing go-nsq configurations port.
//! [`Config`] is the one configuration type a program needs. [`ConsumerConfig`],
//! [`ProducerConfig`] and [`ConnectionConfig`] are the core's own structs, taken by the
//! builders' `core_config` for settings `Config` does not expose; most programs never name
//! them.
//!
//! # Example
//!
//! A runnable round trip against the in-process test broker (use your nsqd's address instead):
//!
//! ```
//! use nsq_blocking::{Config, Consumer, Producer};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let nsqd = nsq_test_broker::Nsqd::start()?;
//! let addr = nsqd.tcp_address().to_string();
//!
//! // Publish: usable from many threads (Clone + Send + Sync), each call blocks for its answer.
//! let producer = Producer::connect(&addr, &Config::default())?;
//! producer.publish("events", "hello")?;
//! producer.multi_publish("events", ["a", "b"])?;
//! producer.deferred_publish("events", Duration::from_millis(10), "later")?;
//! producer.close(); // flushes what is outstanding, joins its threads
//!
//! // Consume: an iterator of messages that answer themselves.
//! let mut consumer = Consumer::builder("events", "archive")
//!     .config(&Config { max_in_flight: 10, ..Config::default() })
//!     .nsqd(addr.as_str())
//!     .build()?;
//! let mut seen = 0;
//! while seen < 4 {
//!     let msg = consumer.recv_timeout(Duration::from_secs(5))?;
//!     assert!(msg.attempts() >= 1);
//!     msg.finish(); // or requeue(delay), requeue_without_backoff(delay), touch()
//!     seen += 1;
//! }
//! let report = consumer.stop(); // graceful: CLS, drain, join every thread
//! assert_eq!(report.unanswered, 0);
//! # Ok(())
//! # }
//! ```
//!
//! A message dropped without an answer is requeued (and a warning logged). `for msg in
//! consumer.iter()` and `for msg in consumer` iterate until the consumer is stopped.
//!
//! Or with a handler on a pool of threads (`Ok` finishes, `Err` requeues with backoff):
//!
//! ```no_run
//! use nsq_blocking::{Consumer, HandlerError, Message};
//!
//! # fn main() -> Result<(), nsq_blocking::Error> {
//! let consumer = Consumer::builder("events", "archive")
//!     .max_in_flight(100)
//!     .lookupd("http://127.0.0.1:4161")
//!     .build()?;
//! let handle = consumer.handle(); // Clone + Send: stop from another thread
//! std::thread::spawn(move || {
//!     std::thread::sleep(std::time::Duration::from_secs(60));
//!     handle.stop();
//! });
//! let report = consumer.run(8, |msg: Message| {
//!     if msg.body().is_empty() {
//!         return Err(HandlerError::msg("empty body").without_backoff());
//!     }
//!     Ok(())
//! });
//! println!("{} left unanswered", report.unanswered);
//! # Ok(())
//! # }
//! ```
//!
//! # Errors
//!
//! Every fallible call returns [`Error`], whose variants a program can match on: which name
//! was invalid and its value (`InvalidTopic`/`InvalidChannel`), nsqd's refusal with its
//! [`ErrorCode`] (`Server`), input refused before sending ([`InputError`]), `ConnectionLost`
//! and `Timeout` (the message may have been published: [`Error::maybe_published`]),
//! `NoServerAvailable`, [`Backpressure`], `Closed`, `Config`. Its `Display` says everything
//! once, on one line, and no error also returns from `source()` a cause it already shows, so
//! `{}` and anyhow's or eyre's `{:#}` print each cause once.
//!
//! ```
//! use nsq_blocking::{Error, ErrorCode, InputError, IntoTopic, NameError};
//!
//! /// Whether a failed publish is worth retrying later.
//! fn retry_later(e: &Error) -> bool {
//!     match e {
//!         // nsqd refused the message itself: retrying cannot help.
//!         Error::Server(s) if s.code() == ErrorCode::BadMessage => false,
//!         Error::InvalidTopic { .. } | Error::InvalidInput(InputError::Publish(_)) => false,
//!         // Perhaps published already: a retry may deliver it twice (NSQ is at-least-once).
//!         e if e.maybe_published() => true,
//!         Error::NoServerAvailable(_) | Error::Backpressure(_) => true,
//!         _ => false,
//!     }
//! }
//!
//! let e = "bad topic!".into_topic().unwrap_err();
//! assert!(matches!(
//!     &e,
//!     Error::InvalidTopic { name, reason: NameError::InvalidChar { ch: ' ', .. } } if name == "bad topic!"
//! ));
//! assert_eq!(
//!     e.to_string(),
//!     "invalid topic name \"bad topic!\": invalid character ' ' at byte 3: \
//!      names use only [.a-zA-Z0-9_-] with an optional #ephemeral suffix"
//! );
//! assert!(!retry_later(&e));
//! ```
//!
//! A message handler returns `Result<(), HandlerError>`, and `?` works on any error (a
//! `std::error::Error`, a `Box<dyn Error + Send + Sync>`, an `anyhow::Error`): the error and
//! its chain are kept and logged (see below).
//!
//! # Logging
//!
//! Everything goes through `tracing`; install any subscriber (`tracing_subscriber::fmt()` with
//! `RUST_LOG`, as the examples do). Every line of a consumer is inside its span
//! `consumer{id=.. topic=.. channel=..}`, every line of a producer inside `producer{id=..}`
//! (ids unique in the process), and lines about a connection carry `conn` and `nsqd` (its
//! address). Each event is logged once. At INFO a consumer's session reads (targets omitted):
//!
//! ```text
//! INFO consumer{id=2 topic=orders channel=billing}: connecting to nsqd conn=conn#1 nsqd=127.0.0.1:4150
//! INFO consumer{id=2 topic=orders channel=billing}: connected to nsqd conn=conn#1 nsqd=127.0.0.1:4150
//! WARN consumer{id=2 topic=orders channel=billing}: nsqd connection failed; retrying in 508.7ms conn=conn#2 nsqd=127.0.0.1:4151 reason=Connection refused (os error 111) retry_in=508.7ms
//! WARN consumer{id=2 topic=orders channel=billing}: handler failed: requeueing the message msg_id=0eac97ff46d5a930 attempts=1 nsqd=127.0.0.1:4150 error=No such file or directory (os error 2)
//! INFO consumer{id=2 topic=orders channel=billing}: max_in_flight is 0: the consumer is paused (RDY 0) until it is raised max_in_flight=0
//! INFO consumer{id=2 topic=orders channel=billing}: nsqd connection closed conn=conn#1 nsqd=127.0.0.1:4150 reason=connection closed
//! ```
//!
//! A handler error is logged at WARN with the message id, attempts and the error's whole
//! chain; a panicking handler at ERROR; a message dropped unanswered, a message given up on
//! (`max_attempts`) and an nsqlookupd that does not answer (or answers with something other
//! than HTTP: the wrong port) at WARN. DEBUG adds the protocol's details (upgrades, RDY,
//! backoff, each lookupd query) inside `connection{conn=.. nsqd=..}` spans.
//!
//! Runnable program: `cargo run -p nsq-blocking --example quickstart_blocking` (starts the
//! in-process test broker when no `--nsqd-tcp-address` is given).

mod runtime;

/// A consumer of one topic/channel ([`nsq_proto::client::blocking::Consumer`] on
/// [`Blocking`]); [`Consumer::builder`] makes one, and `build` starts its driver thread.
pub type Consumer = nsq_proto::client::blocking::Consumer<Blocking>;

/// A cloneable control handle of a [`Consumer`].
pub type ConsumerHandle = nsq_proto::client::blocking::ConsumerHandle<Blocking>;

/// Publishes to one or more nsqd ([`nsq_proto::client::blocking::Producer`] on [`Blocking`]).
pub type Producer = nsq_proto::client::blocking::Producer<Blocking>;

/// Builds a [`Consumer`] (made by [`Consumer::builder`]).
pub type ConsumerBuilder = nsq_proto::client::ConsumerBuilder<Blocking>;

/// Builds a [`Producer`] with several nsqd addresses (made by [`Producer::builder`]).
pub type ProducerBuilder = nsq_proto::client::ProducerBuilder<Blocking>;

/// The iterator of [`Consumer::iter`].
pub type Iter<'a> = nsq_proto::client::blocking::Iter<'a, Blocking>;

/// The owning iterator of a [`Consumer`] (`for msg in consumer`).
pub type IntoIter = nsq_proto::client::blocking::IntoIter<Blocking>;
pub use nsq_proto as proto;
pub use nsq_proto::client::prelude::*;
pub use runtime::Blocking;
pub use std::sync::mpsc::RecvTimeoutError;
