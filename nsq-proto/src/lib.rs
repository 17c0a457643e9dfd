//! # nsq-proto: the sans-IO core of an NSQ client
//!
//! This crate speaks NSQ's TCP protocol without doing any IO. It never opens a socket, reads a
//! clock or spawns a thread: bytes, events and timestamps go in, bytes and events come out.
//! Runtime adapters (`nsq-tokio`, `nsq-async-std`, `nsq-blocking`) only move bytes between
//! sockets and this core, so every runtime gets identical protocol behaviour, and the whole
//! protocol can be tested deterministically and fuzzed.
//!
//! This is the first of three layers. The second, the client layer (one driver over an
//! object-safe `Runtime`, and the user-facing API on it), is the `nsq-client` package
//! (in `nsq-proto/client/`), built on this crate's public API only; the third is the
//! adapters, `nsq-tokio`, `nsq-async-std` and `nsq-blocking`, each of which picks its runtime
//! and re-exports the client layer's types. A crate that builds its own client on the
//! protocol depends on this crate alone.
//!
//! ## The codec
//!
//! * [`FrameDecoder`] splits server frames off a [`bytes::BytesMut`] read buffer. Whole frames
//!   are split off and frozen, so a [`Message`] body is a slice of the read buffer, not a copy.
//!   Sizes are checked before anything is allocated.
//! * The [`command`] module encodes every client command into any [`bytes::BufMut`], after
//!   validating its input; on error nothing is written.
//! * [`Topic`] and [`Channel`] are validated names; [`Identify`], [`IdentifyResponse`],
//!   [`AuthResponse`] and [`LookupResponse`] are the JSON bodies of the protocol.
//!
//! ```
//! use bytes::BytesMut;
//! use nsq_proto::{command, Frame, FrameDecoder, Limits, Topic};
//!
//! // Client side: encode a PUB.
//! let topic = Topic::new("events")?;
//! let mut out = BytesMut::new();
//! command::publish(&mut out, &topic, b"hello", &Limits::default())?;
//! assert_eq!(&out[..], b"PUB events\n\x00\x00\x00\x05hello");
//!
//! // Server side: a message frame arrives in two pieces.
//! let mut wire = Vec::new();
//! wire.extend_from_slice(&(4u32 + 26 + 5).to_be_bytes()); // size
//! wire.extend_from_slice(&2u32.to_be_bytes()); // frame type: message
//! wire.extend_from_slice(&1_700_000_000_000_000_000i64.to_be_bytes()); // timestamp
//! wire.extend_from_slice(&1u16.to_be_bytes()); // attempts
//! wire.extend_from_slice(b"0123456789abcdef"); // id
//! wire.extend_from_slice(b"hello"); // body
//!
//! let decoder = FrameDecoder::default();
//! let mut read_buf = BytesMut::from(&wire[..10]);
//! assert!(decoder.decode(&mut read_buf)?.is_none()); // needs more bytes
//! read_buf.extend_from_slice(&wire[10..]);
//! match decoder.decode(&mut read_buf)? {
//!     Some(Frame::Message(msg)) => {
//!         assert_eq!(msg.attempts, 1);
//!         assert_eq!(&msg.body[..], b"hello");
//!         assert_eq!(msg.id.to_string(), "0123456789abcdef");
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The state machines
//!
//! * [`Connection`]: one nsqd connection (handshake, upgrades, AUTH, heartbeats, in-flight
//!   messages, pipelined publishes).
//! * [`Consumer`]: many connections for one topic/channel (RDY distribution, backoff,
//!   attempts, lookupd discovery, reconnection, graceful stop).
//! * [`Producer`]: publishing over one connection per nsqd (routing, reconnection, batching).
//!
//! All three follow one rule, stated in [`driver`]: inputs and commands in, then drain every
//! output (actions or bytes to write, events, the one timer). That module also holds the
//! shared vocabulary ([`driver::Action`], [`driver::ConnId`], [`driver::LookupdRequestId`]),
//! the [`driver::Driven`] trait, and links to two runnable `std::net` drivers.
//!
//! ## Where things are
//!
//! | module | what it holds |
//! |---|---|
//! | [`driver`] | the driver contract, stated once, and its vocabulary ([`driver::Action`], [`driver::ConnId`], [`driver::LookupdRequestId`], [`driver::Driven`]) |
//! | [`connection`] | one nsqd connection: [`Connection`] (`mod.rs`), its events and errors (`events.rs`), publishing (`publish.rs`), the handshake (`handshake.rs`), the TLS / compression layer stack (`layers.rs`, `tls.rs`, `snappy.rs`, `deflate.rs`), in-flight messages (`inflight.rs`), its configuration (`config.rs`) |
//! | [`consumer`] | the [`Consumer`] coordinator (`consumer.rs`) and the parts it owns: flow control (`flow.rs`), discovery and reconnection (`discovery.rs`, `lookupd.rs`), the timer table (`timers.rs`), per-connection slots (`slots.rs`), events, stats, policies |
//! | [`producer`] | the [`Producer`] coordinator (`producer.rs`), each nsqd and its socket session (`node.rs`), the publish path and natural batching (`publish.rs`, `work.rs`), connection lifecycle (`lifecycle.rs`), events |
//! | [`command`] | encoders for every client command; [`Limits`] and [`CommandError`] live in `limits.rs` |
//! | [`config`] | [`Config`], the one user-facing configuration, with go-nsq's option names (`parse.rs`, `error.rs`, `convert.rs`) |
//! | crate root | the codec ([`FrameDecoder`], [`Frame`], [`Message`]), names ([`Topic`], [`Channel`]), the JSON bodies, [`ErrorCode`] and [`join_host_port`] |
//!
//! ## Cargo features
//!
//! On by default (the adapters forward them under the same names):
//!
//! * `tls`: TLS through rustls (ring provider, webpki-roots). Without it [`TlsConfig`] has no
//!   value, `ClientCert`, `TlsSetupError` and `webpki_root_store` are absent, and a
//!   [`Config`] asking for `tls_v1` is refused with
//!   [`OptionError::FeatureDisabled`](config::OptionError::FeatureDisabled).
//! * `snappy`: snappy compression (snap, crc32c). Without it asking for it is refused:
//!   `OptionError::FeatureDisabled` from a [`Config`],
//!   [`ConfigError::FeatureDisabled`] from [`ConnectionConfig::identify`] and
//!   [`Connection::new`].
//! * `deflate`: DEFLATE compression (flate2), likewise.
//!
//! A build with none of them (`default-features = false`) compiles no crypto and no
//! compression crate; a server that grants TLS or compression unasked is disconnected, never
//! talked to in a layer the client cannot speak.
//!
//! Off by default, and not part of the stable API: what they expose may change or disappear in
//! any release. They exist for this repository's own tests, benches and fuzzers.
//!
//! * `fuzzing`: the hidden `nsq_proto::fuzzing` module, the entry points of the cargo-fuzz
//!   targets in `fuzz/` and of the corpus-replay tests.
//! * `test-support`: the hidden `nsq_proto::test_support` module, a scripted fake
//!   nsqd (the server side of one connection) for tests and benches.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod addr;
pub mod command;
pub mod config;
pub mod connection;
pub mod consumer;
mod deadline;
pub mod driver;
mod error_code;
mod frame;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
mod identify;
mod limits;
mod lookup;
mod names;
pub mod producer;
mod queue;
mod rng;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support;

pub use addr::join_host_port;
pub use command::{CommandError, Limits, MAGIC_V2};
pub use config::Config;
pub use connection::{
    CloseReason, Compression, ConfigError, Connection, ConnectionConfig, ConnectionError,
    ConnectionEvent, ConnectionState, Misconfiguration, Negotiated, NegotiatedCompression,
    PublishError, PublishToken, Role, Secret, TlsConfig,
};
pub use consumer::{Consumer, ConsumerConfig, ConsumerEvent};
pub use error_code::{ErrorCode, ServerError};
pub use frame::{
    DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_MSG_SIZE, DecodeError, FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, Frame, FrameDecoder, MESSAGE_HEADER_LEN, Message,
    MessageId, Response, encode_frame, encode_message_frame,
};
pub use identify::{AuthResponse, DEFAULT_MAX_RDY_COUNT, Identify, IdentifyResponse, ReplyError};
pub use lookup::{LookupProducer, LookupResponse};
pub use names::{Channel, EPHEMERAL_SUFFIX, MAX_NAME_LEN, NameError, Topic, validate_name};
pub use producer::{Producer, ProducerConfig, ProducerEvent};
/// serde_json, whose `Value` [`Config::set`] takes (so `serde_json::json!` is at hand without
/// a dependency of your own).
pub use serde_json;
