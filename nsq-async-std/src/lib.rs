//! NSQ client for async-std, smol and any other executor.
//!
//! This crate moves bytes between sockets and the sans-IO state machines of [`nsq_proto`];
//! every protocol decision stays in the core. Its API is the one of `nsq-tokio` (same types,
//! methods and semantics), with futures that run on any executor.
//!
//! # Model
//!
//! The client is written once in `nsq-client`; this crate is its face over async-io's
//! reactor (the one async-std and smol share): it turns on the [`AsyncStd`] runtime
//! (sockets and timers there) and re-exports the client's types. It depends on no
//! executor, so it behaves identically under async-std, smol,
//! `futures_lite::future::block_on` or anything else that polls futures (async-std itself
//! is discontinued upstream in favour of smol; this crate serves both); `build()` works from
//! any thread, inside or outside a runtime. (Inside a tokio runtime, in a program that also
//! depends on `nsq-tokio`, a client runs on tokio's instead.) Who polls a client's driver is
//! the application's choice:
//!
//! * **by default, the tasks that wait for the client**: a publish writes its own command
//!   and reads its own reply, and a `recv` that finds no message reads the socket itself, on
//!   the task's own thread; the reactor wakes the task that waits, not another thread.
//!   Tasks that publish at the same moment still leave as one write (the first lets the
//!   others queue before it drives). A thread of the client's own drives what no task does
//!   (heartbeats, reconnections, an idle client): it looks every 2 ms while tasks are at
//!   work (less often, up to 16 ms, while they keep driving) and sleeps until woken once
//!   they leave the client alone. It needs nothing from the application;
//! * **with [`AsyncStd::on_executor`], a task on the application's executor**, for each
//!   client built with that runtime: no thread of the client's own, and a task that waits
//!   for a reply or a message is woken on the executor's thread. The driver then runs only
//!   while that executor runs.
//!
//! ```no_run
//! use nsq_async_std::{AsyncStd, Producer};
//!
//! # fn main() -> Result<(), nsq_async_std::Error> {
//! // One runtime value for every client that should be driven by smol's executor.
//! let on_smol = AsyncStd::on_executor(|driver| smol::spawn(driver).detach());
//! let producer = Producer::builder()
//!     .nsqd("127.0.0.1:4150")
//!     .runtime(on_smol.clone())
//!     .build()?;
//! # drop(producer);
//! # Ok(())
//! # }
//! ```
//!
//! On smol both cost about the same CPU per message; async-std's multi-threaded executor
//! costs more in either mode (BENCHMARKS.md; `ASYNC_STD_THREAD_COUNT=1` removes that).
//! [`Consumer::run`] runs the handlers concurrently inside the future it returns: poll it on
//! the executor of your choice.
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
//! * **The runtime**: [`AsyncStd`], what the types above run on;
//!   [`AsyncStd::on_executor`] for drivers that are tasks on the application's executor.
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
//! let report = consumer
//!     .run(8, |msg: Message| async move {
//!         if msg.body().is_empty() {
//!             return Err(HandlerError::msg("empty body").without_backoff());
//!         }
//!         Ok(())
//!     })
//!     .await;
//! println!("stopped, {} messages left unanswered", report.unanswered);
//! # drop(handle);
//! # Ok(())
//! # }
//! ```
//!
//! # Administering a cluster
//!
//! The typed HTTP calls of nsqd and nsqlookupd ([`http::nsqd`], [`http::lookupd`]) through
//! an [`HttpClient`], and nsqadmin's operations over a whole cluster through a [`Cluster`]
//! (the [`guide`] says more); here against the in-process test broker and its nsqlookupd:
//!
//! ```
//! use nsq_async_std::http::nsqd::{self, StatsQuery};
//! use nsq_async_std::{Channel, Cluster, HttpClient, Topic};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> { smol::block_on(async {
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
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use nsq_client::prelude::*;
#[doc(inline)]
pub use nsq_client::{
    AsyncStd, Batches, Cluster, Consumer, ConsumerBuilder, ConsumerHandle, Events, HttpClient,
    PendingCall, PendingPublish, Producer, ProducerBuilder, guide,
};
pub use nsq_proto as proto;
