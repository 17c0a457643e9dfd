//! NSQ client for async-std and smol (built on async-io).
//!
//! This crate moves bytes between async-io sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core. Its API is the one of
//! `nsq-tokio` (same types, methods and semantics).
//!
//! # Model
//!
//! The client itself (the driver, the handles, the builders, the errors) is written once in
//! [`nsq_proto::client`]; this crate is its runtime shim: [`AsyncStd`] implements
//! [`Runtime`](nsq_proto::client::Runtime) with async-io's sockets and timer, and the types
//! below are the client's types on it.
//!
//! * It depends only on the smol family's building blocks (async-io, async-net,
//!   futures-lite), not on async-std or smol themselves, so it behaves identically under both
//!   (and under any other executor, or `futures_lite::future::block_on`).
//! * A runtime-agnostic library cannot spawn tasks on the caller's executor, so each
//!   [`Consumer`] and each [`Producer`] (shared by its clones) has one driver thread running
//!   `async_io::block_on` over the one future that owns the core state machine and every
//!   socket. Readiness and timers come from async-io's reactor (the same one async-std and
//!   smol use). Per wake-up the driver takes every queued command, reads each socket until it
//!   would block (message bodies are slices of the read buffer: zero-copy), fires its one
//!   timer, drains the core's output, hands the wake-up's messages to the application at
//!   once, and gives each connection at most one non-blocking write; a blocked write never
//!   stops reading. `build()` works from any thread, inside or outside a runtime.
//! * A message answers itself with a small `Copy` command on a lock-free queue: answering
//!   allocates nothing and takes no lock. Each publish waits on its own one-shot reply.
//! * [`Consumer::run`] runs the handlers concurrently inside the future it returns: poll it
//!   on the executor of your choice.
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
//! Runs as is under `async_std::task::block_on` or `smol::block_on` (here: the in-process
//! test broker of the workspace stands in for nsqd).
//!
//! ```
//! use nsq_async_std::{Config, Consumer, Producer};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let nsqd = nsq_test_broker::Nsqd::start()?;
//! # let addr = nsqd.tcp_address().to_string();
//! smol::block_on(async {
//!     // Publish (the producer is cheap to clone and shareable across tasks).
//!     let producer = Producer::connect(&addr, &Config::default()).await?;
//!     producer.publish("events", "hello").await?;
//!     producer.multi_publish("events", ["a", "b"]).await?;
//!     producer.close().await; // flushes what is outstanding
//!
//!     // Consume: `recv().await`, or use the consumer as a `Stream`.
//!     let mut consumer = Consumer::builder("events", "archive")
//!         .config(&Config { max_in_flight: 10, ..Config::default() })
//!         .nsqd(addr.as_str())
//!         .build()?;
//!     for _ in 0..3 {
//!         let msg = consumer.recv().await.expect("a message");
//!         println!("{}", String::from_utf8_lossy(msg.body()));
//!         msg.finish(); // or requeue(..), requeue_without_backoff(..); touch() for more time
//!     }
//!     let report = consumer.stop().await; // graceful: CLS, drained
//!     assert_eq!(report.unanswered, 0);
//!     Ok::<(), nsq_async_std::Error>(())
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! A message dropped without an answer is requeued (and a warning logged).
//!
//! Or with a handler, `concurrency` messages at a time (`Ok` finishes, `Err` requeues with
//! backoff; [`HandlerError::with_delay`], [`HandlerError::without_backoff`]):
//!
//! ```no_run
//! use nsq_async_std::{Consumer, HandlerError, Message};
//!
//! # async fn example() -> Result<(), nsq_async_std::Error> {
//! let consumer = Consumer::builder("events", "archive")
//!     .max_in_flight(100)
//!     .lookupd("http://127.0.0.1:4161")
//!     .build()?;
//! let handle = consumer.handle(); // handle.stop().await from elsewhere ends `run`
//! consumer
//!     .run(8, |msg: Message| async move {
//!         if msg.body().is_empty() {
//!             return Err(HandlerError::msg("empty body").without_backoff());
//!         }
//!         Ok(())
//!     })
//!     .await;
//! # drop(handle);
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
//! use nsq_async_std::{Error, ErrorCode, InputError, IntoTopic, NameError};
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
//! Runnable program: `cargo run -p nsq-async-std --example quickstart_async_std` (starts an
//! in-process test broker when no `--nsqd-tcp-address` is given).

mod runtime;

pub use nsq_proto as proto;
pub use nsq_proto::client::prelude::*;
pub use runtime::AsyncStd;

/// A consumer of one topic/channel ([`nsq_proto::client::Consumer`] on [`AsyncStd`]).
/// [`Consumer::builder`] makes one; `build` starts its driver thread, from any thread, inside
/// or outside an async runtime.
pub type Consumer = nsq_proto::client::Consumer<AsyncStd>;

/// A cloneable control handle of a [`Consumer`] ([`nsq_proto::client::ConsumerHandle`]).
pub type ConsumerHandle = nsq_proto::client::ConsumerHandle<AsyncStd>;

/// Publishes to one or more nsqd ([`nsq_proto::client::Producer`] on [`AsyncStd`]); `build`
/// and `connect` start its driver thread, from any thread.
pub type Producer = nsq_proto::client::Producer<AsyncStd>;

/// Builds a [`Consumer`] (made by [`Consumer::builder`]).
pub type ConsumerBuilder = nsq_proto::client::ConsumerBuilder<AsyncStd>;

/// Builds a [`Producer`] with several nsqd addresses (made by [`Producer::builder`]).
pub type ProducerBuilder = nsq_proto::client::ProducerBuilder<AsyncStd>;
