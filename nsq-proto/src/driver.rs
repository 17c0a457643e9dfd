//! The driver contract and its vocabulary, stated once for the whole crate.
//!
//! Every state machine of this crate ([`Connection`], [`Consumer`], [`Producer`]) is sans-IO:
//! it never touches a socket, a clock or a thread. A *driver* (an adapter such as `nsq-tokio`,
//! or your own for another runtime) moves bytes and time between the sockets and the machine,
//! always in the same way:
//!
//! * **Inputs** (`handle_*`): what the world did. Socket connected or failed to connect, bytes
//!   read, EOF or a read error, the timer fired; each takes `now`. Time never moves backwards
//!   inside a machine (an earlier `now` counts as the latest one seen).
//! * **Commands**: what the application wants (publish, finish, requeue, touch, set RDY or
//!   max in flight, close, ...). They only queue work; nothing is written until drained.
//! * **Outputs** (`poll_*`), drained after **every** input and every command (or once after a
//!   batch of them handled together: outputs queue up, and the answers of one wake-up then
//!   leave as one write per connection):
//!   1. the actions, in order: [`Action`]s from [`Consumer`] and [`Producer`]
//!      ([`Driven::poll_action`]), the bytes to write from a lone [`Connection`]
//!      ([`Connection::poll_transmit`]);
//!   2. the events, handed to the application ([`Driven::poll_event`],
//!      [`Connection::poll_event`]);
//!   3. the one timer, re-armed at `poll_timeout`; when it fires, call `handle_timeout`.
//!
//! | [`Action`] | the driver |
//! |---|---|
//! | `Connect { conn, addr }` | opens TCP to `addr`; then `handle_connected(conn)` or `handle_connect_failed(conn, why)` |
//! | `Transmit { conn, data }` | writes `data` to `conn`'s socket (already encrypted / compressed as negotiated) |
//! | `Disconnect { conn }` | closes `conn`'s socket after the earlier writes |
//! | `LookupdRequest { request, addr, data }` | consumer only: opens TCP to `addr`, writes `data`, feeds reads to `handle_lookupd_input` and EOF to `handle_lookupd_eof` (or reports `handle_lookupd_failed`) |
//! | `LookupdClose { request }` | closes that lookupd socket |
//!
//! Bytes read from an nsqd socket go to `handle_input` (all of them are consumed), EOF or a
//! read error to `handle_eof`. A [`ConnId`] names one nsqd connection of a consumer or a
//! producer and a [`LookupdRequestId`] one lookupd exchange of a consumer; neither is reused.
//! [`Consumer`] and [`Producer`] share this vocabulary and the [`Driven`] trait, so one driver
//! loop (per runtime) serves both.
//!
//! Two runnable drivers over plain blocking `std::net` sockets, a few dozen lines each plus a
//! shared [driver loop](https://github.com/nsq-rs/nsq-rs/blob/main/nsq-proto/examples/std_driver/mod.rs),
//! with nothing from the adapters:
//! [`std_producer`](https://github.com/nsq-rs/nsq-rs/blob/main/nsq-proto/examples/std_producer.rs)
//! publishes, and
//! [`std_consumer`](https://github.com/nsq-rs/nsq-rs/blob/main/nsq-proto/examples/std_consumer.rs)
//! subscribes, receives, finishes and closes cleanly. `cargo run -p nsq-proto --example
//! std_consumer` runs one against an in-process test broker; add
//! `-- --nsqd-tcp-address=127.0.0.1:4150` for a real nsqd. They are what to read first when
//! writing an adapter for another runtime.
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

#[cfg(doc)]
use crate::{Connection, Consumer, Producer};
use bytes::{Bytes, BytesMut};
use std::fmt;
use std::time::Instant;

/// Identifies one nsqd connection of a [`Consumer`] or [`Producer`]. Never reused within one
/// state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(u64);

impl ConnId {
    /// The raw number, for logs.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A handle with the raw number `raw` (the state machines number their connections).
    pub(crate) const fn from_raw(raw: u64) -> ConnId {
        ConnId(raw)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Identifies one HTTP exchange of a [`Consumer`] with an nsqlookupd. Never reused within a
/// consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LookupdRequestId(u64);

impl LookupdRequestId {
    /// The raw number, for logs.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A handle with the raw number `raw` (the consumer numbers its exchanges).
    pub(crate) const fn from_raw(raw: u64) -> LookupdRequestId {
        LookupdRequestId(raw)
    }
}

impl fmt::Display for LookupdRequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lookup#{}", self.0)
    }
}

/// Something the driver must do on a state machine's behalf, in the order given (see the
/// [module docs](self) for the whole contract).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Open a TCP connection to `addr` (`host:port`), then report
    /// [`Driven::handle_connected`] or [`Driven::handle_connect_failed`].
    Connect {
        /// The handle of the new connection.
        conn: ConnId,
        /// The nsqd TCP address.
        addr: String,
    },
    /// Write `data` to the connection.
    Transmit {
        /// The connection.
        conn: ConnId,
        /// The bytes, already encrypted/compressed as negotiated.
        data: Bytes,
    },
    /// Close the connection's socket (after writing any earlier `Transmit`); the state
    /// machine has forgotten it.
    Disconnect {
        /// The connection.
        conn: ConnId,
    },
    /// Open a TCP connection to the lookupd `addr` (`host:port`), write `data`, and feed what is
    /// read to [`Driven::handle_lookupd_input`] / [`Driven::handle_lookupd_eof`]
    /// (or report [`Driven::handle_lookupd_failed`]). Consumer only.
    LookupdRequest {
        /// The exchange's handle.
        request: LookupdRequestId,
        /// The lookupd address to connect to.
        addr: String,
        /// The complete HTTP request.
        data: Bytes,
    },
    /// The exchange is over (answered, failed or timed out): close its socket.
    LookupdClose {
        /// The exchange's handle.
        request: LookupdRequestId,
    },
}

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

/// Implements [`Driven`] for a machine by its inherent methods of the same names (with the
/// lookupd inputs for a machine that has them): the trait is written once, here.
macro_rules! impl_driven {
    ($machine:ident, $event:ty) => {
        impl $crate::driver::Driven for $machine {
            type Event = $event;
            $crate::driver::impl_driven!(@common $machine, $event);
        }
    };
    ($machine:ident, $event:ty, lookupd) => {
        impl $crate::driver::Driven for $machine {
            type Event = $event;
            $crate::driver::impl_driven!(@common $machine, $event);

            #[inline]
            fn handle_lookupd_input(
                &mut self,
                now: ::std::time::Instant,
                request: $crate::driver::LookupdRequestId,
                data: &[u8],
            ) {
                $machine::handle_lookupd_input(self, now, request, data);
            }
            #[inline]
            fn handle_lookupd_eof(
                &mut self,
                now: ::std::time::Instant,
                request: $crate::driver::LookupdRequestId,
            ) {
                $machine::handle_lookupd_eof(self, now, request);
            }
            #[inline]
            fn handle_lookupd_failed(
                &mut self,
                now: ::std::time::Instant,
                request: $crate::driver::LookupdRequestId,
                reason: &str,
            ) {
                $machine::handle_lookupd_failed(self, now, request, reason);
            }
        }
    };
    (@common $machine:ident, $event:ty) => {
        #[inline]
        fn handle_connected(&mut self, now: ::std::time::Instant, conn: $crate::driver::ConnId) {
            $machine::handle_connected(self, now, conn);
        }
        #[inline]
        fn handle_connect_failed(
            &mut self,
            now: ::std::time::Instant,
            conn: $crate::driver::ConnId,
            reason: &str,
        ) {
            $machine::handle_connect_failed(self, now, conn, reason);
        }
        #[inline]
        fn handle_input(
            &mut self,
            now: ::std::time::Instant,
            conn: $crate::driver::ConnId,
            data: &mut ::bytes::BytesMut,
        ) {
            $machine::handle_input(self, now, conn, data);
        }
        #[inline]
        fn handle_eof(&mut self, now: ::std::time::Instant, conn: $crate::driver::ConnId) {
            $machine::handle_eof(self, now, conn);
        }
        #[inline]
        fn handle_timeout(&mut self, now: ::std::time::Instant) {
            $machine::handle_timeout(self, now);
        }
        #[inline]
        fn poll_action(&mut self) -> Option<$crate::driver::Action> {
            $machine::poll_action(self)
        }
        #[inline]
        fn poll_event(&mut self) -> Option<$event> {
            $machine::poll_event(self)
        }
        #[inline]
        fn poll_timeout(&self) -> Option<::std::time::Instant> {
            $machine::poll_timeout(self)
        }
    };
}
pub(crate) use impl_driven;
