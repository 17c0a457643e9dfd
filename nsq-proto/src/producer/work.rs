//! The units of publishing work: a publish or batch on its way ([`Work`]), publishes waiting
//! for a connection ([`Pending`]), and what happens to them when a connection goes ([`Fate`]).

use crate::command::{self, CommandError};
use crate::limits::Limits;
use crate::names::Topic;
use bytes::Bytes;
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

/// One command for a connection: being gathered (`D = Vec<u8>`, until the next
/// [`Producer::poll_action`](super::Producer::poll_action)) or sent and awaiting its reply (`D = Bytes`). Its data is kept
/// until the reply, so the command can be sent again when nsqd never processed it.
#[derive(Debug)]
pub(super) struct Work<D> {
    pub(super) topic: Topic,
    pub(super) shape: Shape,
    /// `Batch` and `Multi`: the MPUB entries (u32 length + body, per message), after `room`
    /// bytes kept for the command line while gathering; `Deferred`: the body.
    pub(super) data: D,
    /// Bytes in front of the entries ([`command::publish_room`] while gathering a batch or
    /// an MPUB, 0 otherwise and once sent).
    pub(super) room: usize,
    /// Messages in `data`.
    pub(super) count: u32,
    pub(super) ids: Ids,
}

impl Work<Vec<u8>> {
    /// A batch or MPUB of `topic` to gather entries into, with room for its command line
    /// and `capacity` bytes of entries.
    pub(super) fn gather(topic: &Topic, shape: Shape, ids: Ids, capacity: usize) -> Self {
        let room = command::publish_room(topic);
        let mut data = Vec::with_capacity(room + capacity);
        data.resize(room, 0);
        Work {
            topic: topic.clone(),
            shape,
            data,
            room,
            count: 0,
            ids,
        }
    }

    /// The size of the entries gathered.
    pub(super) fn entries_len(&self) -> usize {
        self.data.len() - self.room
    }

    /// Writes the command line in front of the entries and returns the whole command, and
    /// the work as sent (its data: the entries alone, a slice of the command). Not for a
    /// DPUB (whose data is a body: the connection encodes it).
    pub(super) fn into_command(mut self) -> (Bytes, Work<Bytes>) {
        let multi = self.shape == Shape::Multi;
        let entries_len = self.entries_len();
        let start = command::put_publish_line(
            &mut self.data[..self.room],
            &self.topic,
            self.count,
            entries_len,
            multi,
        );
        let command = Bytes::from(self.data).slice(start..);
        let entries = command.slice(self.room - start..);
        let sent = Work {
            topic: self.topic,
            shape: self.shape,
            data: entries,
            room: 0,
            count: self.count,
            ids: self.ids,
        };
        (command, sent)
    }

    /// The work never written, as it would have been sent (for a retry).
    pub(super) fn freeze(self) -> Work<Bytes> {
        Work {
            topic: self.topic,
            shape: self.shape,
            data: Bytes::from(self.data).slice(self.room..),
            room: 0,
            count: self.count,
            ids: self.ids,
        }
    }
}

impl Work<Bytes> {
    /// The bodies of its messages, in order (a DPUB's one body; a batch's or an MPUB's
    /// entries).
    pub(super) fn bodies(&self) -> impl Iterator<Item = Bytes> + '_ {
        let single = matches!(self.shape, Shape::Deferred(_)).then(|| self.data.clone());
        let entries = (!matches!(self.shape, Shape::Deferred(_))).then(|| entries(&self.data));
        single.into_iter().chain(entries.into_iter().flatten())
    }

    /// The length of its largest message.
    pub(super) fn largest_message(&self) -> usize {
        self.bodies().map(|b| b.len()).max().unwrap_or(0)
    }

    /// Its MPUB body size (the count field and every entry), when it goes out as an MPUB.
    pub(super) fn mpub_body(&self) -> Option<usize> {
        match self.shape {
            Shape::Multi => Some(4 + self.data.len()),
            Shape::Batch { .. } if self.count > 1 => Some(4 + self.data.len()),
            _ => None,
        }
    }
}

/// The bodies of MPUB entries (u32 length + body, each), as slices of `data`; a truncated
/// entry ends them.
pub(super) fn entries(data: &Bytes) -> impl Iterator<Item = Bytes> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = data
            .get(at..at + 4)
            .and_then(|l| <[u8; 4]>::try_from(l).ok())
            .map(|l| u32::from_be_bytes(l) as usize)?;
        let body = data
            .get(at + 4..at + 4 + len)
            .map(|_| data.slice(at + 4..at + 4 + len))?;
        at += 4 + len;
        Some(body)
    })
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

impl PendingKind {
    /// Checks a waiting publish against `limits` (lowered since it was accepted, perhaps).
    pub(super) fn check(&self, limits: &Limits) -> Result<(), CommandError> {
        match self {
            PendingKind::Publish { body, .. } => command::check_publish(body, None, limits),
            PendingKind::Deferred { body, delay, .. } => {
                command::check_publish(body, Some(*delay), limits)
            }
            PendingKind::Multi { entries: data, .. } => {
                let mut largest = (0, 0);
                for (index, body) in entries(data).enumerate() {
                    if body.len() > largest.1 {
                        largest = (index, body.len());
                    }
                }
                let (index, len) = largest;
                if len > limits.max_msg_size as usize {
                    return Err(CommandError::BodyTooLarge {
                        index,
                        len,
                        max: limits.max_msg_size,
                    });
                }
                let body = 4 + data.len() as u64;
                if body > u64::from(limits.max_body_size) {
                    return Err(CommandError::BatchTooLarge {
                        len: body,
                        max: limits.max_body_size,
                    });
                }
                Ok(())
            }
            PendingKind::Ping(_) => Ok(()),
        }
    }
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
pub(super) enum Item<'a> {
    One {
        body: &'a [u8],
        solo: bool,
    },
    /// An explicit MPUB, already encoded as entries (from the pending queue).
    Multi {
        entries: &'a [u8],
        count: u32,
    },
    /// An explicit MPUB encoded by the caller: [`command::publish_room`] bytes, then the
    /// entries (which become the command as they are).
    Entries {
        data: Vec<u8>,
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
