//! One nsqd of a producer ([`Node`]) and its current socket ([`Session`]): the connection
//! attempt, the `Connection`, and the publishes gathered or sent on it.

use crate::connection::{Connection, ConnectionState, Misconfiguration};
use crate::consumer::policy::ReconnectSchedule;
use crate::driver::ConnId;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Instant;

use super::refusal::Accepted;
use super::work::Work;
/// A command written to a connection, awaiting its reply.
#[derive(Debug)]
pub(super) struct Sent {
    pub(super) token: u64,
    pub(super) at: Instant,
    pub(super) work: Work<Bytes>,
}

/// One socket to an nsqd: connecting (`conn: None`), handshaking, ready or closing.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) id: ConnId,
    /// When the connection attempt started.
    pub(super) started: Instant,
    pub(super) conn: Option<Connection>,
    pub(super) ready_at: Option<Instant>,
    /// Publishes gathered since the last write, in order; written by `emit`.
    pub(super) open: Vec<Work<Vec<u8>>>,
    pub(super) sent: VecDeque<Sent>,
    /// nsqd refused one of its commands (its error answered a publish, or it reset the
    /// connection during a body larger than any it accepted: see `refusal`).
    pub(super) refused: bool,
    /// The token of the command taken as refused by a reset, once the reset is read.
    pub(super) reset_refused: Option<u64>,
    /// The connection may have bytes to transmit.
    pub(super) dirty: bool,
}

impl Session {
    pub(super) fn is_ready(&self) -> bool {
        self.ready_at.is_some()
            && self
                .conn
                .as_ref()
                .is_some_and(|c| c.state() == ConnectionState::Ready)
    }
}

#[derive(Debug)]
pub(super) struct Node {
    pub(super) addr: String,
    pub(super) link: Option<Session>,
    pub(super) schedule: ReconnectSchedule,
    pub(super) next_attempt: Option<Instant>,
    /// Its last connection showed a misconfiguration (the wrong port, a TLS mismatch,
    /// refused credentials): not connected to again until it is added again.
    pub(super) parked: Option<Misconfiguration>,
    /// Known to be down: its last connection attempt failed before the connection became
    /// ready. (One that was ready when it ended is not: a publish connects to it again.)
    pub(super) down: bool,
    /// The largest message and MPUB body this nsqd has confirmed.
    pub(super) accepted: Accepted,
    /// Its first connection has ended its start-up, ready (nsqd stated its topology) or
    /// not: it no longer holds topology routing back (see `super::nearest`).
    pub(super) stated: bool,
}
