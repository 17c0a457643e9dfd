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
//! * One driver thread per [`Consumer`] / [`Producer`] (`nsqb-consumer`, `nsqb-producer`) owns
//!   the core state machine. It waits on ONE `std::sync::mpsc` channel carrying socket data,
//!   message answers and commands, with `recv_timeout` computed from the core's
//!   `poll_timeout`; after every wake-up it drains every output of the core.
//! * Every nsqd connection has a reader thread (`nsqb-rd-N`: connects with the dial timeout,
//!   sets `TCP_NODELAY`, then hands each read to the driver as a `BytesMut` chunk, so message
//!   bodies are slices of the read buffer: zero-copy) and a writer thread (`nsqb-wr-N`: writes
//!   what the core emits, with the write timeout; a blocked write never stops reading). The
//!   bytes the core emits during one wake-up leave in one write per connection.
//! * nsqlookupd queries run on short-lived threads (`nsqb-lookup-N`) with connect/read/write
//!   timeouts; the HTTP request and response parsing are the core's.
//! * Messages are answered through small `Copy` commands sent to the driver
//!   ([`nsq_proto::adapter::Answer`]): no lock and no allocation per answer.
//! * Every thread is named and joined by [`ConsumerHandle::stop`] / [`Consumer::stop`] /
//!   [`Producer::close`] and on drop; nothing blocks without a bound.
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
//! Errors are typed ([`Error`]): `Server` (nsqd's error code), `ConnectionLost`, `Timeout`,
//! `InvalidName`/`InvalidInput`, `NoServerAvailable`, `Backpressure`, `Closed`, `Config`.
//!
//! Runnable program: `cargo run -p nsq-blocking --example quickstart_blocking` (starts the
//! in-process test broker when no `--nsqd-tcp-address` is given).

mod consumer;
mod driver;
mod net;
mod producer;

pub use consumer::{
    AnswerChannel, Consumer, ConsumerBuilder, ConsumerHandle, IntoIter, Iter, Message,
};
pub use nsq_proto as proto;
pub use nsq_proto::adapter::{
    Delivery, Error, GiveUpHook, HandlerError, IntoChannel, IntoTopic, StopReport,
};
pub use nsq_proto::config::OptionError;
pub use nsq_proto::consumer::{ConsumerConfig, ConsumerStats};
pub use nsq_proto::producer::{ProducerConfig, ProducerStats, Routing};
pub use nsq_proto::{Channel, Compression, Config, ConnectionConfig, MessageId, TlsConfig, Topic};
pub use producer::{Producer, ProducerBuilder};

/// The blocking adapter's marker for the builders shared by every adapter
/// ([`ConsumerBuilder`] and [`ProducerBuilder`] are [`nsq_proto::adapter::ConsumerBuilder`] /
/// [`nsq_proto::adapter::ProducerBuilder`] of `Blocking`): reads TLS files and the OS hostname
/// with `std`, and starts each driver on its own thread.
#[derive(Debug)]
pub enum Blocking {}

impl nsq_proto::adapter::Runtime for Blocking {
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
pub use std::sync::mpsc::RecvTimeoutError;
