//! A strict in-process stand-in for nsqd v1.3.0 and nsqlookupd, and the cross-adapter
//! conformance suite.
//!
//! The broker is the *other side* of the protocol: it parses client commands itself (it does
//! not use `nsq-proto`), enforces nsqd's rules with nsqd's error codes and texts, closes the
//! connection after fatal errors, and runs on its own std threads so tests of any runtime
//! (tokio, async-std, smol, blocking) can use it. Everything listens on `127.0.0.1` with
//! ephemeral ports; dropping a server closes its sockets and joins its threads.
//!
//! ```
//! use std::time::Duration;
//! use nsq_test_broker::{Lookupd, Nsqd, wait_until};
//!
//! let lookupd = Lookupd::start().unwrap();
//! let nsqd = Nsqd::builder()
//!     .msg_timeout(Duration::from_secs(1))
//!     .max_rdy_count(100)
//!     .lookupd(&lookupd)
//!     .start()
//!     .unwrap();
//! // Point the client under test at nsqd.tcp_address() or lookupd.http_address() ...
//! nsqd.publish("orders", b"hello"); // or let the client publish
//! assert!(wait_until(Duration::from_secs(1), || nsqd.topic("orders").is_some()));
//! assert_eq!(lookupd.producers("orders")[0].tcp_port, nsqd.tcp_address().port());
//! // ... then inspect what the client did:
//! let _log = nsqd.commands();
//! let _stats = nsqd.stats();
//! // Fault injection: nsqd.drop_connections(), nsqd.pause(), nsqd.restart(..) ...
//! ```
//!
//! See [`conformance`] for the scenario harness and the `NSQD_TCP_ADDRESS` override.

pub mod conformance;
mod http;
mod lookupd;
mod nsqd;
mod options;
pub mod raw;
mod tls;
mod transport;
mod util;

pub use lookupd::{Lookupd, PeerInfo, ProducerId};
pub use nsqd::{
    ChannelStats, ClientId, ClientState, ClientStats, CommandRecord, Nsqd, NsqdBuilder, Restart,
    Stats, TopicStats,
};
pub use options::{AuthGrant, AuthTable, Authorization, Options, Pattern, Permission};
pub use raw::{RawClient, RawFrame, RawMessage, http_get_json, http_request};
pub use tls::{ServerIdentity, TestPki};
pub use transport::Throttle;
pub use util::{is_valid_name, wait_until};
