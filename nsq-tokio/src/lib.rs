//! NSQ client for tokio.
//!
//! This crate moves bytes between tokio sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core.
//!
//! # Model
//!
//! * One driver task per [`Consumer`] owns the core state machine. Every nsqd connection has a
//!   reader task (forwarding each read as a `BytesMut` chunk, so message bodies are slices of
//!   the read buffer: zero-copy) and a writer task (writing what the core emits; a blocked write
//!   never stops reading). After every input the driver drains every output of the core; bytes
//!   are written once per wake-up per connection; one timer follows the core's `poll_timeout`.
//! * Messages are answered through small `Copy` commands sent to the driver: no lock and no
//!   allocation per message on a connection's hot path.
//! * Everything is logged with `tracing` (spans per connection); nothing is printed.
//!
//! * One driver task per [`Producer`] (shared by its clones) owns the sans-IO
//!   [`nsq_proto::Producer`]: every request queued since the last wake-up is handed to the core
//!   before its output is polled, so concurrent publishes leave in one write.
//!
//! # Configuration
//!
//! Both take a [`Config`]: one struct with go-nsq's option names and defaults, buildable in
//! code, option by option (`config.set_str("max_in_flight", "100")`, like go-nsq's
//! `Config.Set`), or deserialised from JSON/TOML/... so existing go-nsq configurations port.
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
//! Errors are typed ([`Error`]): `Server` (nsqd's error code), `ConnectionLost`, `Timeout`,
//! `InvalidName`/`InvalidInput`, `NoServerAvailable`.
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
//! The consumer is also a [`Stream`](futures_core::Stream) of messages, for the combinators
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

mod consumer;
mod net;
mod producer;

pub use consumer::AnswerChannel;
pub use consumer::{Consumer, ConsumerBuilder, ConsumerHandle, Message};
pub use nsq_proto as proto;
pub use nsq_proto::adapter::{Error, GiveUpHook, HandlerError, IntoChannel, IntoTopic, StopReport};
pub use nsq_proto::config::OptionError;
pub use nsq_proto::consumer::{ConsumerConfig, ConsumerStats};
pub use nsq_proto::producer::{ProducerConfig, ProducerStats, Routing};
pub use nsq_proto::{Channel, Compression, Config, ConnectionConfig, MessageId, TlsConfig, Topic};
pub use producer::{Producer, ProducerBuilder};

// The per-nsqd part of `ConsumerStats`.
pub use nsq_proto::consumer::{NsqdState, NsqdStats};

/// The tokio adapter's marker for the builders shared by every adapter
/// ([`ConsumerBuilder`] and [`ProducerBuilder`] are [`nsq_proto::adapter::ConsumerBuilder`] /
/// [`nsq_proto::adapter::ProducerBuilder`] of `Tokio`): reads TLS files and the OS hostname
/// with `std`, and starts drivers as tasks on the current tokio runtime.
#[derive(Debug)]
pub enum Tokio {}

impl nsq_proto::adapter::Runtime for Tokio {
    type Consumer = Consumer;
    type Producer = Producer;

    fn os_hostname() -> Option<String> {
        net::os_hostname()
    }

    fn read_file(path: std::path::PathBuf) -> std::io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn start_consumer(setup: nsq_proto::adapter::ConsumerSetup) -> Result<Consumer, Error> {
        consumer::start(setup)
    }

    fn start_producer(setup: nsq_proto::adapter::ProducerSetup) -> Result<Producer, Error> {
        producer::start(setup)
    }
}
