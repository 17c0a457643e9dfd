//! NSQ client for tokio.
//!
//! This crate moves bytes between tokio sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core.
//!
//! # Model
//!
//! The client is written once in `nsq-client`; this crate is its tokio face: it turns on
//! the [`Tokio`] runtime (tokio's sockets, timer and tasks) and re-exports the client's
//! types, which run on the tokio runtime they are built in.
//!
//! * Each client's driver is a task on the tokio runtime `build()` (or `Producer::connect`)
//!   is called in; that runtime needs its IO and time drivers (`#[tokio::main]` has them),
//!   else the call fails with [`Error::NoRuntime`], naming the `enable_*` call to add.
//!   tokio 1.x cannot be asked whether a runtime has them (tokio-rs/tokio#8361): the call
//!   probes each under `catch_unwind` with the panic hook silenced for its thread, so nothing
//!   is printed; under `panic = "abort"` nothing can be caught, and a runtime without them
//!   aborts the process there, as tokio would at the client's first timer.
//! * [`Consumer::run`]'s workers are tasks of their own, so handlers run in parallel on a
//!   multi-threaded runtime.
//! * On a current-thread runtime a driver that did work looks once more before it parks
//!   (what the tasks it woke send at once leaves in the same wake-up); on a multi-threaded
//!   one it does not (a task that wakes itself is rescheduled through another worker).
//!
//! # What is here
//!
//! * **Clients**: [`Producer`] ([`ProducerBuilder`], [`PendingPublish`]), [`Consumer`]
//!   ([`ConsumerBuilder`], [`ConsumerHandle`], [`Message`] with its [`MessageId`], [`Events`]
//!   of [`Event`]s, [`StopReport`]).
//! * **Configuration**: [`Config`] (go-nsq's options), [`TlsConfig`], [`Compression`],
//!   [`BackoffStrategy`], [`InFlightMode`], [`Routing`], [`Secret`]. The core's own
//!   settings, for the builders' `core_config`: [`proto::ConsumerConfig`],
//!   [`proto::ProducerConfig`], [`proto::ConnectionConfig`].
//! * **Errors**: [`Error`] and what it carries ([`InputError`], [`Backpressure`],
//!   [`Misconfiguration`], [`ServerError`] with its [`ErrorCode`], [`CloseReason`],
//!   [`HttpFailure`]; the core's own error types are in [`proto`]); [`HandlerError`] for
//!   message handlers.
//! * **Stats**: [`ConsumerStats`] ([`NsqdStats`], [`NsqdState`]), [`ProducerStats`]; with the
//!   `metrics` feature, the client's metrics through the `metrics` facade.
//! * **Administration**: [`HttpClient`] (the typed calls of [`http::nsqd`] and
//!   [`http::lookupd`], [`PendingCall`]), [`Cluster`] ([`ClusterReport`], [`NodeFailure`],
//!   [`TopicStatsReport`], [`ChannelStatsReport`]), [`HttpConfig`].
//! * **Names**: [`Topic`], [`Channel`] ([`IntoTopic`], [`IntoChannel`], [`NameError`]).
//! * **The runtime**: [`Tokio`], what the types above run on (found where they are built;
//!   [`Tokio::on`] for a client built outside a runtime that should run on a given one).
//! * **The guide**: [`guide`] (how a client runs, configuration and errors, logs, metrics).
//! * **The protocol core**, for what a program rarely needs: [`proto`] (`nsq_proto`).
//!
//! # How a client runs, logs and records metrics
//!
//! The same in every adapter, and in the [`guide`] of this crate: one driver per client owns
//! its state machine and sockets, the [configuration](guide#configuration-and-errors) takes
//! go-nsq's option names, every error is one [`Error`], and everything is logged through
//! `tracing` with a span per client and connection.
//!
//! # Example
//!
//! A runnable round trip against the in-process test broker (use your nsqd's address
//! instead):
//!
//! ```
//! use nsq_tokio::{Config, Consumer, Producer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let nsqd = nsq_test_broker::Nsqd::start()?;
//! let addr = nsqd.tcp_address().to_string();
//!
//! let producer = Producer::connect(&addr, &Config::default()).await?;
//! producer.publish("events", "hello").await?;
//! producer.multi_publish("events", ["a", "b"]).await?;
//! producer.close().await; // flushes what is outstanding
//!
//! let mut consumer = Consumer::builder("events", "archive")
//!     .config(&Config { max_in_flight: 10, ..Config::default() })
//!     .nsqd(addr.as_str())
//!     .build()?;
//! for _ in 0..3 {
//!     let msg = consumer.recv().await.expect("a message");
//!     println!("{}", String::from_utf8_lossy(msg.body()));
//!     msg.finish(); // or requeue(..), requeue_without_backoff(..); touch() for more time
//! }
//! let report = consumer.stop().await; // graceful: CLS, drained
//! assert_eq!(report.unanswered, 0);
//! # Ok(())
//! # }
//! ```
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
//!
//! # Administering a cluster
//!
//! The typed HTTP calls of nsqd and nsqlookupd ([`http::nsqd`], [`http::lookupd`]) through
//! an [`HttpClient`], and nsqadmin's operations over a whole cluster through a [`Cluster`]
//! (the [`guide`] says more); here against the in-process test broker and its nsqlookupd:
//!
//! ```
//! use nsq_tokio::http::nsqd::{self, StatsQuery};
//! use nsq_tokio::{Channel, Cluster, HttpClient, Topic};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let lookupd = nsq_test_broker::Lookupd::start()?;
//! # let broker = nsq_test_broker::Nsqd::builder().http(true).lookupd(&lookupd).start()?;
//! # let nsqd_http = broker.http_address().expect("an HTTP address").to_string();
//! # let lookupd_http = lookupd.http_address().to_string();
//! let (orders, billing) = (Topic::new("orders")?, Channel::new("billing")?);
//!
//! // One nsqd: create a topic and a channel before consumers start, read its stats.
//! let node = HttpClient::new(&nsqd_http)?;
//! node.call(nsqd::create_topic(&orders)).await?;
//! node.call(nsqd::create_channel(&orders, &billing)).await?;
//! let stats = node.call(nsqd::stats(&StatsQuery::new().topic(&orders))).await?;
//! assert_eq!(stats.topics[0].topic_name, "orders");
//!
//! // The whole cluster, through its nsqlookupd: a node that fails is reported, not hidden.
//! let cluster = Cluster::new([lookupd_http.as_str()])?;
//! let topics = cluster.topics().await;
//! println!("topics {:?}, failures {:?}", topics.value, topics.failures);
//! cluster.pause_channel(&orders, &billing).await; // during an incident
//! cluster.unpause_channel(&orders, &billing).await;
//! let deleted = cluster.delete_topic(&orders).await; // tombstone, delete on each nsqd, then at lookupds
//! for failure in &deleted.failures {
//!     eprintln!("{failure}");
//! }
//! # Ok(())
//! # }
//! ```
//!
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use nsq_client::prelude::*;
#[doc(inline)]
pub use nsq_client::{
    Batches, Cluster, Consumer, ConsumerBuilder, ConsumerHandle, Events, HttpClient, PendingCall,
    PendingPublish, Producer, ProducerBuilder, Tokio, guide,
};
pub use nsq_proto as proto;

/// The workspace README's examples, compiled as this crate's doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
