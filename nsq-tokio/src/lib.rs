//! NSQ client for tokio.
//!
//! This crate moves bytes between tokio sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core.
//!
//! # Model
//!
//! The client itself (the driver, the handles, the builders, the errors) is written once in
//! [`nsq_client`]; this crate is its runtime shim: [`Tokio`] implements
//! [`Runtime`](nsq_client::Runtime) with tokio's sockets, timer and tasks, and the
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
//! * Messages are answered through small `Copy` commands queued for the driver (a push under a
//!   short lock; no allocation per answer); publishes likewise, each with its own reply, or
//!   returning at once with [`Producer::publish_async`].
//! * `build()` (and `Producer::connect`) must be called within a tokio runtime with its time
//!   driver enabled (`#[tokio::main]` has it); otherwise it fails with [`Error::NoRuntime`].
//! * Everything is logged with `tracing`, nothing is printed.
//!
//! # What is here
//!
//! * **Clients**: [`Producer`] ([`ProducerBuilder`], [`PendingPublish`]), [`Consumer`]
//!   ([`ConsumerBuilder`], [`ConsumerHandle`], [`Message`], [`Events`] of [`Event`]s,
//!   [`StopReport`]).
//! * **Configuration**: [`Config`] (go-nsq's options), [`TlsConfig`], [`Compression`],
//!   [`BackoffStrategy`], [`Routing`]; [`ConsumerConfig`] and [`ProducerConfig`] for the
//!   core's own settings.
//! * **Errors**: [`Error`] and what it carries ([`InputError`], [`Backpressure`],
//!   [`Misconfiguration`], [`ServerError`] with its [`ErrorCode`], [`CloseReason`], ...);
//!   [`HandlerError`] for message handlers.
//! * **Stats**: [`ConsumerStats`] ([`NsqdStats`], [`NsqdState`]), [`ProducerStats`]; with the
//!   `metrics` feature, the client's metrics through the `metrics` facade.
//! * **Administration**: [`HttpClient`] (the typed calls of [`http::nsqd`] and
//!   [`http::lookupd`]), [`Cluster`] ([`ClusterReport`], [`TopicStatsReport`],
//!   [`ChannelStatsReport`]), [`HttpConfig`], [`HttpFailure`].
//! * **Names**: [`Topic`], [`Channel`] ([`IntoTopic`], [`IntoChannel`], [`NameError`]).
//! * **The protocol core**, for what a program rarely needs: [`proto`] (`nsq_proto`).
//!
//! # Configuration, errors, logging
//!
//! The same in every adapter, and documented once with the client layer:
//! [configuration](nsq_client#configuration) ([`Config`], go-nsq's option names),
//! [errors](nsq_client#errors) ([`Error`], one line each, variants to match on) and
//! [logging](nsq_client#logging) (`tracing` spans per client and connection).
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
//! let report = consumer
//!     .run(8, |msg: Message| async move {
//!         if msg.body().is_empty() {
//!             return Err(HandlerError::msg("empty body").without_backoff());
//!         }
//!         Ok(())
//!     })
//!     .await;
//! println!("stopped, {} messages left unanswered", report.unanswered);
//! # Ok(())
//! # }
//! ```
//!
//! Runnable programs are in `examples/`: `quickstart` (starts an in-process test broker when
//! no `--nsqd-tcp-address` is given: `cargo run -p nsq-tokio --example quickstart`),
//! `nsq_tail`, `to_nsq`, `bench_writer`, `bench_reader`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod runtime;

pub use nsq_client::prelude::*;
pub use nsq_client::{Events, PendingCall, PendingPublish};
pub use nsq_proto as proto;
pub use runtime::Tokio;

nsq_client::async_api! {
    runtime: Tokio,
    starts: "Must be called within a tokio runtime with its time and IO drivers enabled \
             (`#[tokio::main]` has them; the client's driver is a task on it), else it fails \
             with [`Error::NoRuntime`].",
    run: "Each of the `concurrency` workers is a tokio task of its own, so handlers run in \
          parallel on a multi-threaded runtime.",
}
