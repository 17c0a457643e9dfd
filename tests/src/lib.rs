//! `nsq-test-broker`: a strict in-process stand-in for nsqd v1.3.0 and nsqlookupd, and the
//! cross-adapter conformance suite and scenarios.
//!
//! This is a library crate (it lives in the repository's `tests/` folder, but it is not a
//! folder of test files): the adapters' test suites depend on it, and so can yours, to test
//! an NSQ client or a message handler without a server.
//!
//! | module | what it holds |
//! |---|---|
//! | `nsqd` ([`Nsqd`], [`NsqdBuilder`]) | the nsqd stand-in: TCP protocol V2, queues and timers, IDENTIFY and upgrades, the HTTP API, stats, fault injection |
//! | `lookupd` ([`Lookupd`]) | the nsqlookupd stand-in: its HTTP API and producer registrations |
//! | [`model`] | nsqd without IO: the queue rules (shared by the socket nsqd and the simulator) and one nsqd's protocol over plain connections, fed with bytes and instants |
//! | [`sim`] | a simulated NSQ world in virtual time (many nsqd, nsqlookupd, links, faults from a seed) driving a sans-IO client, with NSQ's client duties checked as invariants after every step |
//! | `options` ([`Options`], [`AuthTable`]) | nsqd's flags and the AUTH table |
//! | [`raw`] | a hand-written raw client and HTTP helpers for byte-level tests |
//! | [`conformance`] | the conformance harness, runnable against a real nsqd too |
//! | `scenarios` | (feature `scenarios`, internal) the adapter scenarios, written once and run by every adapter |
//! | `tls` ([`TestPki`]) | a throwaway certificate authority and server identities |
//! | `transport` ([`Throttle`]) | the socket layer: TLS, snappy and deflate streams, read throttling |
//! | `http`, `util` | a minimal HTTP/1.1 server side; name checks and [`wait_until`] |
//!
//! The broker is the *other side* of the protocol: it parses client commands itself (it does
//! not use `nsq-proto`, so the two can disagree and the tests catch it), enforces nsqd's
//! rules with nsqd's error codes and texts, and closes the connection after fatal errors.
//! It runs on its own std threads, so tests of any runtime (tokio, async-std, smol,
//! blocking) can use it. Everything listens on `127.0.0.1` with ephemeral ports; dropping a
//! server closes its sockets and joins its threads.
//!
//! # Starting a broker
//!
//! ```
//! use std::time::Duration;
//! use nsq_test_broker::{Lookupd, Nsqd, RawClient, wait_until};
//!
//! let lookupd = Lookupd::start().unwrap();
//! let nsqd = Nsqd::builder()
//!     .max_rdy_count(100)                   // any nsqd flag the tests need
//!     .msg_timeout(Duration::from_secs(1))
//!     .tls(true)                            // certificate from TestPki::global()
//!     .lookupd(&lookupd)                    // registers itself and its topics
//!     .start()
//!     .unwrap();
//!
//! // Point the client under test at nsqd.tcp_address() or lookupd.http_address().
//! // Here a hand-written raw client stands in for it:
//! let mut client = RawClient::connect_v2(nsqd.tcp_address()).unwrap();
//! client.subscribe("orders", "billing").unwrap();
//! client.cmd("RDY 1").unwrap();
//! nsqd.publish("orders", b"hello"); // server-side publish
//! let msg = client.expect_message().unwrap();
//! assert_eq!((msg.body.as_slice(), msg.attempts), (&b"hello"[..], 1));
//! client.cmd(&format!("FIN {}", msg.id_str())).unwrap();
//!
//! // Introspection: counters, per-client RDY/in-flight, the ordered command log.
//! assert!(nsqd.wait_for(Duration::from_secs(1), |s| {
//!     s.topics.iter().any(|t| t.channels.iter().any(|c| c.finished == 1))
//! }));
//! assert_eq!(nsqd.commands().last().unwrap().name(), "FIN");
//! assert_eq!(lookupd.producers("orders")[0].tcp_port, nsqd.tcp_address().port());
//!
//! // Fault injection.
//! nsqd.drop_connections();
//! assert!(client.expect_closed().is_ok());
//! ```
//!
//! # What it implements
//!
//! - Protocol V2: magic, IDENTIFY (every range check, feature negotiation, TLS → snappy or
//!   deflate upgrades in nsqd's order, each answered `OK` through the new layer), AUTH
//!   against an [`AuthTable`], SUB, PUB, MPUB, DPUB, RDY, FIN, REQ, TOUCH, CLS, NOP, with
//!   nsqd's state rules and error texts; fatal errors are sent, then the connection closes.
//! - Topics fan out to every channel; a channel spreads its messages over subscribers with
//!   `in_flight < rdy`; in-flight messages time out after the client's msg_timeout and are
//!   redelivered with attempts + 1; REQ delays (clamped to max_req_timeout) and DPUB defer;
//!   TOUCH extends up to max_msg_timeout; `#ephemeral` topics and channels vanish with
//!   their last subscriber; messages published before any channel wait in the topic.
//! - Heartbeats at the negotiated interval; a client silent for two intervals is dropped,
//!   and one that stops reading has its writes given up after one interval, as nsqd's
//!   write deadline does. A connection ends as nsqd's does: closed right after a fatal
//!   error, what the client sent beyond it unread, so the kernel resets it. The module docs
//!   of `nsqd` list what was checked against nsqd's source.
//! - [`Lookupd`]: nsqlookupd v1.3.0's HTTP API (`/ping`, `/info`, `/debug`, `/lookup`,
//!   `/topics`, `/channels`, `/nodes`, `/topic/{create,delete,tombstone}`,
//!   `/channel/{create,delete}`) over its registration database: topics and channels stay
//!   listed after their producers leave (until deleted; ephemeral ones go with their last
//!   producer), a tombstone hides a producer from `/lookup` for
//!   [`Lookupd::set_tombstone_lifetime`] (45 s); producers registered in-process or by hand;
//!   injectable failures.
//! - nsqd's HTTP API ([`NsqdBuilder::http`]): `/ping`, `/info`, `/pub` (with `defer`),
//!   `/mpub` (text and `binary`), `/stats` (every field of nsqd's JSON, the text form too,
//!   `topic`/`channel`/`include_clients`/`include_mem` filters),
//!   `/topic/{create,delete,empty,pause,unpause}`,
//!   `/channel/{create,delete,empty,pause,unpause}`, `GET|PUT /config/:opt`. A paused channel
//!   delivers nothing until unpaused; a paused topic keeps its messages; empty drops queued
//!   (and, for a channel, deferred and in-flight) messages; delete closes the subscribers.
//! - Both HTTP servers answer like Go's `net/http` behind nsq's router: the same status
//!   codes, error texts, JSON field order (`null` for Go's nil slices, omitempty fields),
//!   headers, 405 with `Allow`, `OPTIONS`, redirects of a trailing slash or of the path's
//!   case, replies over 2048 bytes chunked. The tests replay the capture session of
//!   `nsq-proto/tests/fixtures/http` against the broker and compare every reply.
//! - Introspection ([`Nsqd::stats`], [`Nsqd::commands`], [`Nsqd::warnings`]) and faults
//!   ([`Nsqd::drop_connections`], [`Nsqd::drop_client`], [`Nsqd::stop_accepting`],
//!   [`Nsqd::hold_accepts`],
//!   [`Nsqd::pause`], [`Nsqd::restart`], [`Nsqd::set_read_throttle`],
//!   [`Nsqd::fail_publishes`], [`Nsqd::lose_size_refusals`]).
//!
//! # Known differences from nsqd
//!
//! - `sample_rate` is validated and echoed but not applied (messages are not sampled). The
//!   output buffer is applied like nsqd's: message frames wait in a buffer of
//!   `output_buffer_size` bytes until it fills, the `output_buffer_timeout` ticker fires,
//!   the client is no longer ready for more (in-flight = RDY), or another frame is sent.
//! - Authorization patterns are [`Pattern`]s (any, exact, prefix), not regular expressions,
//!   and there is no auth server round trip or TTL.
//! - IDENTIFY's JSON is decoded like Go does (keys case-insensitive, later keys win, invalid
//!   UTF-8 replaced), except that `-0` for an integer field is refused (Go accepts it).
//! - A second IDENTIFY does not redo upgrades that are already in place. Otherwise it acts
//!   like nsqd's: it is allowed until SUB, its reply and TOUCH use its values, the read
//!   deadline follows its heartbeat interval, but heartbeats and the timeout of deliveries
//!   keep the first IDENTIFY's values (nsqd's message pump only takes the first).
//! - Client behaviour nsqd tolerates but that is almost certainly a bug (an MPUB whose body
//!   size disagrees with its messages, bytes sent after IDENTIFY before reading its reply when
//!   an upgrade follows) is accepted like nsqd does and recorded in [`Nsqd::warnings`].
//! - Only the in-memory queue exists; [`Nsqd::restart`] decides whether messages survive.
//!   `/stats` reports `backend_depth` 0 and a `memory` section of zeros (there is no Go
//!   runtime); its text form says `built w/rust`.
//! - HTTP details: a producer's `pub_counts` lists the first topic it published to where
//!   nsqd picks one from a Go map at random; lists that come from Go maps (lookupd's topics
//!   and channels, a channel's clients) are in a stable order; e2e latency quantiles are
//!   exact quantiles of the window's samples rather than nsqd's streaming estimate;
//!   `PUT /config/nsqlookupd_tcp_addresses` is stored and reported but connects nowhere
//!   (registration goes through [`NsqdBuilder::lookupd`]); with `tls_required` every HTTP
//!   request gets nsqd's 403 `TLS_REQUIRED` (no HTTPS port is served, so it says 0); the
//!   pprof and other `/debug` routes of nsqd are not served; lookupd's inactive-producer
//!   timeout does not apply (in-process registrations never go stale).
//! - Timeouts and deferred messages are handled on nsqd's 100 ms queue scan tick
//!   ([`Options::queue_scan_interval`]), so they come up to one tick late and in batches,
//!   but every channel is checked on every tick: nsqd only checks 20 random channels per
//!   tick from a list refreshed every 5 s, so on a real server a new channel's first timeout
//!   can come seconds late (see [`conformance::external_queue_scan_allowance`]).
//!
//! See [`conformance`] for the scenario harness and the `NSQD_TCP_ADDRESS` override.
//! The adapter scenarios of nsq-rs (`scenarios`, written once, run by every adapter's
//! `tests/scenarios.rs` through `adapter_scenario_tests!`) are this repository's own harness,
//! shaped by its adapters' API: they are behind the `scenarios` feature, off by default, and
//! not part of the stable API.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod conformance;
mod http;
mod lookupd;
pub mod model;
mod nsqd;
mod options;
pub mod raw;
#[cfg(feature = "scenarios")]
#[cfg_attr(docsrs, doc(cfg(feature = "scenarios")))]
pub mod scenarios;
pub mod sim;
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
