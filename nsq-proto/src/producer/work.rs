//! The units of publishing work: a publish or batch on its way ([`Work`]), publishes waiting
//! for a connection ([`Pending`]), and what happens to them when a connection goes ([`Fate`]).

use crate::names::Topic;
use bytes::{Bytes, BytesMut};
use std::time::{Duration, Instant};

use super::events::{PingId, PublishId};
/// With batching on, the most commands awaiting their reply on a connection; publishes made
/// meanwhile gather into the next batch. Two keep nsqd busy with one batch while the reply to
/// the other travels back and its publishers make their next publishes.
pub(super) const MAX_SENT_WHILE_BATCHING: usize = 2;

/// The publish ids a command carries: one per message of a batch, one for an explicit MPUB
/// or a DPUB.
#[derive(Debug, Clone)]
pub(super) enum Ids {
    One(PublishId),
    Many(Vec<PublishId>),
}

impl Ids {
    pub(super) fn push(&mut self, id: PublishId) {
        match self {
            Ids::One(first) => *self = Ids::Many(vec![*first, id]),
            Ids::Many(v) => v.push(id),
        }
    }

    pub(super) fn as_slice(&self) -> &[PublishId] {
        match self {
            Ids::One(id) => std::slice::from_ref(id),
            Ids::Many(v) => v,
        }
    }
}

/// What kind of command a [`Work`] becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Single publishes: one PUB, or one MPUB when several were merged (natural batching).
    /// `solo`: never merged with others (a retry after the batch holding it was refused).
    Batch { solo: bool },
    /// An explicit MPUB: atomic, one id.
    Multi,
    /// A DPUB.
    Deferred(Duration),
}

/// One command for a connection: being gathered (`D = BytesMut`, until the next
/// [`Producer::poll_action`]) or sent and awaiting its reply (`D = Bytes`). Its data is kept
/// until the reply, so the command can be sent again when nsqd never processed it.
#[derive(Debug)]
pub(super) struct Work<D> {
    pub(super) topic: Topic,
    pub(super) shape: Shape,
    /// `Batch` and `Multi`: the MPUB entries (u32 length + body, per message); `Deferred`:
    /// the body.
    pub(super) data: D,
    /// Messages in `data`.
    pub(super) count: u32,
    pub(super) ids: Ids,
}

impl Work<BytesMut> {
    pub(super) fn freeze(self) -> Work<Bytes> {
        Work {
            topic: self.topic,
            shape: self.shape,
            data: self.data.freeze(),
            count: self.count,
            ids: self.ids,
        }
    }
}

#[derive(Debug)]
pub(super) enum PendingKind {
    Publish {
        topic: Topic,
        body: Bytes,
        solo: bool,
    },
    Multi {
        topic: Topic,
        entries: Bytes,
        count: u32,
    },
    Deferred {
        topic: Topic,
        delay: Duration,
        body: Bytes,
    },
    Ping(PingId),
}

#[derive(Debug)]
pub(super) struct Pending {
    /// The publish or ping id.
    pub(super) id: u64,
    pub(super) since: Instant,
    pub(super) deadline: Instant,
    pub(super) kind: PendingKind,
}

/// How a publish is given, borrowed from the caller (hot path) or from the pending queue.
#[derive(Clone, Copy)]
pub(super) enum Item<'a> {
    One {
        body: &'a [u8],
        solo: bool,
    },
    /// An explicit MPUB, already encoded as entries.
    Multi {
        entries: &'a [u8],
        count: u32,
    },
    Deferred(Duration, &'a [u8]),
}

/// How publishes still held by a dropped connection fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Lost,
    TimedOut,
}
