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
//! The client is written once in `nsq-client`; this crate is its face for plain threads:
//! it turns on the [`Blocking`] runtime (non-blocking sockets on a readiness poller of each
//! client's own: epoll, kqueue or IOCP, through mio) and re-exports the client's blocking
//! types, which run the client's calls to completion on the calling thread.
//!
//! * **A blocking call drives its client while it waits.** A `publish` waiting for nsqd's
//!   reply, or a `recv` waiting for a message, polls the driver and waits in the poller on
//!   its own thread, so a round trip to nsqd wakes no other thread (go-nsq's own goroutines
//!   hop twice per publish). When no call waits, the client's driver thread (`nsqb-consumer`,
//!   `nsqb-producer`) drives: it takes over once callers have left the client alone for 2 ms
//!   (up to 16 ms while they keep driving), or when a deadline of the driver is due
//!   (heartbeats, timeouts, reconnects), and hands the poller back to the next call that
//!   waits. Several threads waiting at once take turns: one drives, the others sleep until
//!   their own reply or message is ready.
//! * There is no thread per connection: a consumer of twelve nsqd runs as many threads as a
//!   consumer of one. A host name is resolved on a short-lived thread (the system resolver
//!   blocks); IP addresses need none.
//! * The driver is waited for (and driven to its end) by [`ConsumerHandle::stop`] /
//!   [`Consumer::stop`] / [`Producer::close`] and on drop; nothing blocks without a bound.
//!
//! # What is here
//!
//! * **Clients**: [`Producer`] ([`ProducerBuilder`], [`PendingPublish`]), [`Consumer`]
//!   ([`ConsumerBuilder`], [`ConsumerHandle`], [`Message`] with its [`MessageId`], [`Events`]
//!   of [`Event`]s, [`StopReport`], [`Iter`], [`IntoIter`]).
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
//!   [`http::lookupd`]), [`Cluster`] ([`ClusterReport`], [`NodeFailure`],
//!   [`TopicStatsReport`], [`ChannelStatsReport`]), [`HttpConfig`].
//! * **Names**: [`Topic`], [`Channel`] ([`IntoTopic`], [`IntoChannel`], [`NameError`]).
//! * **The runtime**: [`Blocking`], what the types above run on (a thread and a poller of
//!   each client's own).
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
//! producer.close(); // flushes what is outstanding, waits for its driver thread to end
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
//! let report = consumer.stop(); // graceful: CLS, drain, wait for the driver thread to end
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
//! # Administering a cluster
//!
//! The typed HTTP calls of nsqd and nsqlookupd ([`http::nsqd`], [`http::lookupd`]) through
//! an [`HttpClient`], and nsqadmin's operations over a whole cluster through a [`Cluster`]
//! (the [`guide`] says more); here against the in-process test broker and its nsqlookupd:
//!
//! ```
//! use nsq_blocking::http::nsqd::{self, StatsQuery};
//! use nsq_blocking::{Channel, Cluster, HttpClient, Topic};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let lookupd = nsq_test_broker::Lookupd::start()?;
//! # let broker = nsq_test_broker::Nsqd::builder().http(true).lookupd(&lookupd).start()?;
//! # let nsqd_http = broker.http_address().expect("an HTTP address").to_string();
//! # let lookupd_http = lookupd.http_address().to_string();
//! let (orders, billing) = (Topic::new("orders")?, Channel::new("billing")?);
//!
//! // One nsqd: create a topic and a channel before consumers start, read its stats.
//! let node = HttpClient::new(&nsqd_http)?;
//! node.call(nsqd::create_topic(&orders))?;
//! node.call(nsqd::create_channel(&orders, &billing))?;
//! let stats = node.call(nsqd::stats(&StatsQuery::new().topic(&orders)))?;
//! assert_eq!(stats.topics[0].topic_name, "orders");
//!
//! // The whole cluster, through its nsqlookupd: a node that fails is reported, not hidden.
//! let cluster = Cluster::new([lookupd_http.as_str()])?;
//! let topics = cluster.topics();
//! println!("topics {:?}, failures {:?}", topics.value, topics.failures);
//! cluster.pause_channel(&orders, &billing); // during an incident
//! cluster.unpause_channel(&orders, &billing);
//! let deleted = cluster.delete_topic(&orders); // tombstone, delete on each nsqd, then at lookupds
//! for failure in &deleted.failures {
//!     eprintln!("{failure}");
//! }
//! # Ok(())
//! # }
//! ```
//!
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use nsq_client::blocking::{
    Cluster, Consumer, ConsumerBuilder, ConsumerHandle, Events, HttpClient, IntoIter, Iter,
    PendingPublish, Producer, ProducerBuilder,
};
#[doc(inline)]
pub use nsq_client::prelude::*;
#[doc(inline)]
pub use nsq_client::{Blocking, guide};
pub use nsq_proto as proto;
