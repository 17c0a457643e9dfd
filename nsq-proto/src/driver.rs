//! The driver contract shared by [`Consumer`] and [`Producer`], so an adapter writes ONE
//! driver loop (per runtime) for both.
//!
//! Both state machines take the same inputs (socket connected / failed / bytes / EOF, timer
//! fired) and produce the same [`Action`]s tagged with a [`ConnId`]; only their events
//! differ ([`Driven::Event`]). A driver:
//!
//! 1. performs every [`Driven::poll_action`] in order (`Connect`: open a TCP stream, then
//!    report [`Driven::handle_connected`] or [`Driven::handle_connect_failed`]; `Transmit`:
//!    write the bytes; `Disconnect`: close the socket after the earlier writes;
//!    `LookupdRequest` / `LookupdClose`: the consumer's HTTP exchanges with nsqlookupd);
//! 2. hands every [`Driven::poll_event`] to the application;
//! 3. re-arms its one timer at [`Driven::poll_timeout`] and calls [`Driven::handle_timeout`]
//!    when it fires;
//!
//! after every input and every command (or once after a batch of them handled together: the
//! state machines queue their outputs, and the answers of one wake-up then leave as one
//! `Transmit` per connection), and feeds socket reads to [`Driven::handle_input`] and EOF /
//! read errors to [`Driven::handle_eof`].
//!
//! Two runnable drivers over plain blocking `std::net` sockets, a few dozen lines each plus a
//! shared [driver loop](https://github.com/nsq-rs/nsq-rs/blob/main/nsq-proto/examples/std_driver/mod.rs),
//! with nothing from the adapters:
//! [`std_producer`](https://github.com/nsq-rs/nsq-rs/blob/main/nsq-proto/examples/std_producer.rs)
//! publishes, and
//! [`std_consumer`](https://github.com/nsq-rs/nsq-rs/blob/main/nsq-proto/examples/std_consumer.rs)
//! subscribes, receives, finishes and closes cleanly. `cargo run -p nsq-proto --example
//! std_consumer` runs one against an in-process test broker; add
//! `-- --nsqd-tcp-address=127.0.0.1:4150` for a real nsqd.
//!
//! ```
//! use nsq_proto::driver::{Action, Driven};
//! use std::time::Instant;
//!
//! /// One pass of the output side of a driver, generic over consumer and producer.
//! fn drain<M: Driven>(machine: &mut M, now: Instant, events: &mut Vec<M::Event>) {
//!     while let Some(action) = machine.poll_action() {
//!         match action {
//!             Action::Connect { conn, addr: _ } => {
//!                 // a real driver starts connecting here and reports the result later
//!                 machine.handle_connect_failed(now, conn, "no network in this example");
//!             }
//!             _ => {}
//!         }
//!     }
//!     events.extend(std::iter::from_fn(|| machine.poll_event()));
//! }
//!
//! let now = Instant::now();
//! let mut producer = nsq_proto::Producer::new(Default::default(), 1)?;
//! producer.add_nsqd(now, "127.0.0.1:4150")?;
//! let mut events = Vec::new();
//! drain(&mut producer, now, &mut events);
//! assert_eq!(producer.healthy_connections(), 0);
//! assert!(producer.poll_timeout().is_some()); // the reconnect attempt
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::consumer::{Consumer, ConsumerEvent, LookupdRequestId};
use crate::producer::{Producer, ProducerEvent};
use bytes::BytesMut;
use std::time::Instant;

pub use crate::consumer::{Action, ConnId};

/// A sans-IO state machine an adapter drives: [`Consumer`] or [`Producer`].
///
/// Every method forwards to the inherent method of the same name; see those for details.
pub trait Driven {
    /// What the machine reports to the application.
    type Event;

    /// The socket of `conn` is connected.
    fn handle_connected(&mut self, now: Instant, conn: ConnId);
    /// The socket of `conn` could not be connected.
    fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str);
    /// Bytes read from `conn`'s socket (all of `data` is consumed).
    fn handle_input(&mut self, now: Instant, conn: ConnId, data: &mut BytesMut);
    /// `conn`'s socket reached EOF or failed.
    fn handle_eof(&mut self, now: Instant, conn: ConnId);
    /// Bytes of a lookupd response (consumer only; the producer never asks for one).
    fn handle_lookupd_input(&mut self, now: Instant, request: LookupdRequestId, data: &[u8]) {
        let _ = (now, request, data);
    }
    /// The lookupd closed the response stream (consumer only).
    fn handle_lookupd_eof(&mut self, now: Instant, request: LookupdRequestId) {
        let _ = (now, request);
    }
    /// The lookupd exchange failed (consumer only).
    fn handle_lookupd_failed(&mut self, now: Instant, request: LookupdRequestId, reason: &str) {
        let _ = (now, request, reason);
    }
    /// The timer set from [`poll_timeout`](Self::poll_timeout) fired.
    fn handle_timeout(&mut self, now: Instant);
    /// The next action, in order.
    fn poll_action(&mut self) -> Option<Action>;
    /// The next event for the application.
    fn poll_event(&mut self) -> Option<Self::Event>;
    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    fn poll_timeout(&self) -> Option<Instant>;
}

impl Driven for Consumer {
    type Event = ConsumerEvent;

    fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        Consumer::handle_connected(self, now, conn);
    }
    fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        Consumer::handle_connect_failed(self, now, conn, reason);
    }
    fn handle_input(&mut self, now: Instant, conn: ConnId, data: &mut BytesMut) {
        Consumer::handle_input(self, now, conn, data);
    }
    fn handle_eof(&mut self, now: Instant, conn: ConnId) {
        Consumer::handle_eof(self, now, conn);
    }
    fn handle_lookupd_input(&mut self, now: Instant, request: LookupdRequestId, data: &[u8]) {
        Consumer::handle_lookupd_input(self, now, request, data);
    }
    fn handle_lookupd_eof(&mut self, now: Instant, request: LookupdRequestId) {
        Consumer::handle_lookupd_eof(self, now, request);
    }
    fn handle_lookupd_failed(&mut self, now: Instant, request: LookupdRequestId, reason: &str) {
        Consumer::handle_lookupd_failed(self, now, request, reason);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Consumer::handle_timeout(self, now);
    }
    fn poll_action(&mut self) -> Option<Action> {
        Consumer::poll_action(self)
    }
    fn poll_event(&mut self) -> Option<ConsumerEvent> {
        Consumer::poll_event(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Consumer::poll_timeout(self)
    }
}

impl Driven for Producer {
    type Event = ProducerEvent;

    fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        Producer::handle_connected(self, now, conn);
    }
    fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        Producer::handle_connect_failed(self, now, conn, reason);
    }
    fn handle_input(&mut self, now: Instant, conn: ConnId, data: &mut BytesMut) {
        Producer::handle_input(self, now, conn, data);
    }
    fn handle_eof(&mut self, now: Instant, conn: ConnId) {
        Producer::handle_eof(self, now, conn);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Producer::handle_timeout(self, now);
    }
    fn poll_action(&mut self) -> Option<Action> {
        Producer::poll_action(self)
    }
    fn poll_event(&mut self) -> Option<ProducerEvent> {
        Producer::poll_event(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Producer::poll_timeout(self)
    }
}
