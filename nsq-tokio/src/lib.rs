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
//! # Consuming
//!
//! ```no_run
//! use nsq_tokio::{Consumer, ConsumerConfig};
//!
//! # async fn example() -> Result<(), nsq_tokio::Error> {
//! let mut consumer = Consumer::builder("events", "archive")
//!     .config(ConsumerConfig { max_in_flight: 100, ..Default::default() })
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

mod consumer;
mod error;
mod net;
mod producer;

pub use consumer::{
    Consumer, ConsumerBuilder, ConsumerHandle, GiveUpHook, HandlerError, Message, StopReport,
};
pub use error::{Error, IntoChannel, IntoTopic};
pub use nsq_proto as proto;
pub use nsq_proto::consumer::{ConsumerConfig, ConsumerStats};
pub use nsq_proto::producer::{ProducerConfig, ProducerStats, Routing};
pub use nsq_proto::{Channel, Compression, ConnectionConfig, MessageId, TlsConfig, Topic};
pub use producer::{Producer, ProducerBuilder};
