//! The producer side: a sans-IO [`Producer`] publishing over one connection per nsqd.
//!
//! * [`Producer`]: routing (failover or round-robin), reconnection with backoff, a bounded
//!   wait for a connection, fast failure when every nsqd is down, graceful close.
//! * [`ProducerConfig`]: its knobs.
//!
//! It is driven by the [driver contract](crate::driver) and speaks the consumer's driver
//! vocabulary ([`Action`](crate::driver::Action), [`ConnId`](crate::driver::ConnId)), so one
//! driver loop serves both.
//!
//! # Driving a producer
//!
//! ```
//! use bytes::BytesMut;
//! use nsq_proto::driver::Action;
//! use nsq_proto::producer::{Producer, ProducerConfig, ProducerEvent};
//! use nsq_proto::Topic;
//! use std::time::Instant;
//!
//! let now = Instant::now();
//! let mut producer = Producer::new(ProducerConfig::default(), 42)?;
//! producer.add_nsqd(now, "127.0.0.1:4150")?;
//! let Some(Action::Connect { conn, addr }) = producer.poll_action() else { unreachable!() };
//! // open a TCP stream to `addr`, then:
//! producer.handle_connected(now, conn);
//! // The publish waits (at most `publish_timeout`) for the handshake to finish.
//! let id = producer.publish(now, &Topic::new("events")?, b"hello")?;
//! // magic + IDENTIFY, to be written to the socket:
//! assert!(matches!(producer.poll_action(), Some(Action::Transmit { .. })));
//! // nsqd answers IDENTIFY; the publish goes out.
//! let mut read_buf = BytesMut::new();
//! nsq_proto::encode_frame(&mut read_buf, 0, br#"{"max_rdy_count":2500,"version":"1.3.0"}"#);
//! producer.handle_input(now, conn, &mut read_buf);
//! let Some(Action::Transmit { data, .. }) = producer.poll_action() else { unreachable!() };
//! assert_eq!(&data[..], b"PUB events\n\x00\x00\x00\x05hello");
//! // ... and acknowledges it.
//! nsq_proto::encode_frame(&mut read_buf, 0, b"OK");
//! producer.handle_input(now, conn, &mut read_buf);
//! let events: Vec<ProducerEvent> = std::iter::from_fn(|| producer.poll_event()).collect();
//! assert!(events.contains(&ProducerEvent::Published(id)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod config;
mod events;
mod lifecycle;
mod nearest;
mod node;
#[expect(
    clippy::module_inception,
    reason = "the file of the Producer coordinator, named for it"
)]
mod producer;
mod publish;
mod refusal;
mod work;

pub use batch::Batch;
pub use config::{ProducerConfig, Routing};
pub use events::{PingId, ProducerError, ProducerEvent, ProducerStats, PublishFailure, PublishId};
pub use producer::Producer;

crate::driver::impl_driven!(Producer, ProducerEvent);
