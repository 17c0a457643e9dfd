//! NSQ client for tokio.
//!
//! This crate moves bytes between tokio sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core.
//!
//! # Model
//!
//! The client itself (the driver, the handles, the builders, the errors) is written once in
//! [`nsq_proto::client`]; this crate is its runtime shim: [`Tokio`] implements
//! [`Runtime`](nsq_proto::client::Runtime) with tokio's sockets, timer and tasks, and the
//! types below are the client's types on it.
//!
//! * One driver task per [`Consumer`] and per [`Producer`] (shared by its clones) owns the
//!   core state machine and reads and writes every socket of its client itself: bytes read
//!   from a socket are decoded, delivered and answered without a hop between tasks other
//!   than the hand-off to the application (no reader or writer task per connection). Per
//!   wake-up the driver takes every queued command (concurrent publishes leave in one
//!   write), reads each socket until it would block (message bodies are slices of the read
//!   buffer: zero-copy), drains the core, hands the wake-up's messages to the application at
//!   once, and gives each connection at most one write; a blocked write never stops
//!   reading; one timer follows the core's `poll_timeout`.
//! * Messages are answered through small `Copy` commands on a lock-free queue: no lock and no
//!   allocation per answer.
//! * `build()` (and `Producer::connect`) must be called within a tokio runtime with its time
//!   driver enabled (`#[tokio::main]` has it); otherwise it fails with [`Error::NoRuntime`].
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
//! # Publishing
//!
//! ```no_run
//! use nsq_tokio::{Config, Producer};
//! use std::time::Duration;
//!
//! # async fn example() -> Result<(), nsq_tokio::Error> {
//! let producer = Producer::connect("127.0.0.1:4150", &Config::default()).await?;
//! producer.publish("events", "hello").await?;
//! producer.multi_publish("events", ["a", "b", "c"]).await?;
//! producer.deferred_publish("events", Duration::from_secs(5), "later").await?;
//!
//! // Several nsqd: publishes go to a healthy one and fail over; with none up they fail fast.
//! let ha = Producer::builder()
//!     .nsqd("10.0.0.1:4150")
//!     .nsqd("10.0.0.2:4150")
//!     .build()?;
//! let worker = ha.clone(); // cheap; Send + Sync
//! tokio::spawn(async move { worker.publish("events", "from a task").await });
//! ha.close().await; // flushes what is outstanding
//! producer.close().await;
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
//! use nsq_tokio::{Error, ErrorCode, InputError, IntoTopic, NameError};
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
//! # Consuming
//!
//! ```no_run
//! use nsq_tokio::{Config, Consumer};
//!
//! # async fn example() -> Result<(), nsq_tokio::Error> {
//! let mut consumer = Consumer::builder("events", "archive")
//!     .config(&Config { max_in_flight: 100, ..Config::default() })
//!     .nsqd("127.0.0.1:4150")
//!     .build()?;
//! let handle = consumer.handle();
//! while let Some(msg) = consumer.recv().await {
//!     println!("{} ({} attempts)", String::from_utf8_lossy(msg.body()), msg.attempts());
//!     msg.finish();
//!     # break;
//! }
//! let report = handle.stop().await;
//! assert_eq!(report.unanswered, 0);
//! # Ok(())
//! # }
//! ```
//!
//! A message dropped without an answer is requeued (and a warning logged).
//!
//! The consumer is also a `Stream` (`futures_core::Stream`) of messages, for the combinators
//! of `futures`/`futures-lite`/`tokio-stream`:
//!
//! ```no_run
//! use futures_lite::StreamExt;
//! use nsq_tokio::Consumer;
//!
//! # async fn example() -> Result<(), nsq_tokio::Error> {
//! let consumer = Consumer::builder("events", "archive").nsqd("127.0.0.1:4150").build()?;
//! let handle = consumer.handle();
//! let mut bodies = consumer.map(|msg| {
//!     let body = msg.body().clone();
//!     msg.finish();
//!     body
//! });
//! while let Some(body) = bodies.next().await {
//!     println!("{} bytes", body.len());
//!     # break;
//! }
//! handle.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! Or with a handler on several tasks (`Ok` finishes, `Err` requeues with backoff):
//!
//! ```no_run
//! use nsq_tokio::{Consumer, HandlerError, Message};
//!
//! # async fn example() -> Result<(), nsq_tokio::Error> {
//! let consumer = Consumer::builder("events", "archive")
//!     .max_in_flight(100)
//!     .lookupd("http://127.0.0.1:4161")
//!     .build()?;
//! let handle = consumer.handle();
//! tokio::spawn(async move {
//!     let _ = tokio::signal::ctrl_c().await;
//!     handle.stop().await;
//! });
//! consumer
//!     .run(8, |msg: Message| async move {
//!         if msg.body().is_empty() {
//!             return Err(HandlerError::msg("empty body").without_backoff());
//!         }
//!         Ok(())
//!     })
//!     .await;
//! # Ok(())
//! # }
//! ```
//!
//! Runnable programs are in `examples/`: `quickstart` (starts an in-process test broker when
//! no `--nsqd-tcp-address` is given: `cargo run -p nsq-tokio --example quickstart`),
//! `nsq_tail`, `to_nsq`, `bench_writer`, `bench_reader`.

mod runtime;

pub use nsq_proto as proto;
pub use nsq_proto::client::prelude::*;
pub use runtime::Tokio;

/// A consumer of one topic/channel ([`nsq_proto::client::Consumer`] on [`Tokio`]).
/// [`Consumer::builder`] makes one; `build` starts its driver task on the current tokio
/// runtime (else [`Error::NoRuntime`]).
pub type Consumer = nsq_proto::client::Consumer<Tokio>;

/// A cloneable control handle of a [`Consumer`] ([`nsq_proto::client::ConsumerHandle`]).
pub type ConsumerHandle = nsq_proto::client::ConsumerHandle<Tokio>;

/// Publishes to one or more nsqd ([`nsq_proto::client::Producer`] on [`Tokio`]); `build` and
/// `connect` start its driver task on the current tokio runtime (else [`Error::NoRuntime`]).
pub type Producer = nsq_proto::client::Producer<Tokio>;

/// Builds a [`Consumer`] (made by [`Consumer::builder`]).
pub type ConsumerBuilder = nsq_proto::client::ConsumerBuilder<Tokio>;

/// Builds a [`Producer`] with several nsqd addresses (made by [`Producer::builder`]).
pub type ProducerBuilder = nsq_proto::client::ProducerBuilder<Tokio>;
