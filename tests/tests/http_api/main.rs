//! nsqd's and nsqlookupd's HTTP APIs, checked against the responses captured from the real
//! v1.3.0 servers (`nsq-proto/tests/fixtures/http`, see its README): the capture session is
//! replayed request by request, and each answer must have the fixture's status, headers, error
//! text and JSON shape (keys in Go's order, `null` where Go has a nil slice, omitempty fields)
//! with the same deterministic values. Then the semantics behind the endpoints: pause, empty,
//! delete, config, tombstones.
//!
//! The replay runs against the local broker, or against real servers when
//! `NSQD_TCP_ADDRESS`, `NSQD_HTTP_ADDRESS`, `NSQLOOKUPD_HTTP_ADDRESS` are set (fresh ones,
//! started like the README says; `NSQLOOKUPD_TCP_ADDRESS` names the lookupd address nsqd was
//! given), which is how the test itself was checked.
//!
//! The modules: [`raw`] sends and reads HTTP as the capture client did, [`checker`] compares a
//! reply with its fixture and [`replay`] replays the capture session. The semantics tests are
//! in [`queues`] (pause, empty, delete), [`stats`], [`server`] (`/config`, routing,
//! `--tls-required`) and [`lookupd`] (tombstones), with what they share in [`support`].

use std::time::Duration;

mod checker;
mod lookupd;
mod queues;
mod raw;
mod replay;
mod server;
mod stats;
mod support;

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(5);
