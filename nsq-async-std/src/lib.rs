//! NSQ client for async-std and smol (built on async-io).
//!
//! This crate moves bytes between async-io sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core. Its API is the one of
//! `nsq-tokio` (same types, methods and semantics).
//!
//! # Model
//!
//! * It depends only on the smol family's building blocks (async-io, async-net, futures-lite,
//!   async-channel, concurrent-queue, atomic-waker), not on async-std or smol themselves, so
//!   it behaves identically under both (and under any other executor, or
//!   `futures_lite::future::block_on`).
//! * A runtime-agnostic library cannot spawn tasks on the caller's executor, so each
//!   [`Consumer`] and each [`Producer`] (shared by its clones) has one driver thread running
//!   `async_io::block_on` over a single future that owns the core state machine and every
//!   socket. Readiness and timers come from async-io's reactor (the same one async-std and
//!   smol use). Per wake-up the driver takes every queued command, reads each socket until it
//!   would block (every read is a `BytesMut` chunk handed to the core, so message bodies are
//!   slices of the read buffer: zero-copy), fires its one timer (re-armed from the core's
//!   `poll_timeout`), drains the core's output, and gives each connection at most one
//!   non-blocking write; a blocked write never stops reading. `build()` works from any
//!   thread, inside or outside a runtime.
//! * Commands reach the driver through a lock-free queue (one push, at most one wake-up of
//!   the driver): a message answers itself with a small `Copy` command
//!   ([`nsq_proto::adapter::Answer`]), so answering allocates nothing and takes no lock.
//!   Messages reach the application through an async-channel (MPMC, so [`Consumer::run`]'s
//!   workers share it). Each publish waits on its own one-shot reply (one allocation, no
//!   lock).
//! * [`Consumer::run`] runs the handlers concurrently inside the future it returns: poll it
//!   on the executor of your choice.
//! * Everything is logged with `tracing` (spans per connection); nothing is printed.
//!
//! # Configuration
//!
//! Both take a [`Config`]: one struct with go-nsq's option names and defaults, buildable in
//! code, option by option (`config.set_str("max_in_flight", "100")`, like go-nsq's
//! `Config.Set`), or deserialised from JSON/TOML/... so existing go-nsq configurations port.
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
//! Errors are typed ([`Error`]): `Server` (nsqd's error code), `ConnectionLost`, `Timeout`,
//! `InvalidName`/`InvalidInput`, `NoServerAvailable`, `Backpressure`, `Closed`.
//!
//! Runnable program: `cargo run -p nsq-async-std --example quickstart_async_std` (starts an
//! in-process test broker when no `--nsqd-tcp-address` is given).

mod consumer;
mod driver;
mod producer;

#[doc(hidden)]
pub use consumer::AnswerChannel;
pub use consumer::{Consumer, ConsumerBuilder, ConsumerHandle, Message};
pub use nsq_proto as proto;
pub use nsq_proto::adapter::{Error, GiveUpHook, HandlerError, IntoChannel, IntoTopic, StopReport};
pub use nsq_proto::config::OptionError;
pub use nsq_proto::consumer::{ConsumerConfig, ConsumerStats};
pub use nsq_proto::producer::{ProducerConfig, ProducerStats, Routing};
pub use nsq_proto::{Channel, Compression, Config, ConnectionConfig, MessageId, TlsConfig, Topic};
pub use producer::{Producer, ProducerBuilder};

/// The async-std adapter's marker for the builders shared by every adapter
/// ([`ConsumerBuilder`] and [`ProducerBuilder`] are [`nsq_proto::adapter::ConsumerBuilder`] /
/// [`nsq_proto::adapter::ProducerBuilder`] of `AsyncStd`): reads TLS files and the OS hostname
/// with `std`, and starts each driver on its own thread (this adapter's runtime).
#[derive(Debug)]
pub enum AsyncStd {}

impl nsq_proto::adapter::Runtime for AsyncStd {
    type Consumer = Consumer;
    type Producer = Producer;

    fn os_hostname() -> Option<String> {
        driver::os_hostname()
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
