//! What a [`Producer`] learns of nsqd's size limits, and from what.
//!
//! nsqd v1.3.0 refuses a PUB or DPUB over its `--max-msg-size`, and an MPUB over its
//! `--max-body-size` (or holding a message over `--max-msg-size`), right after it reads the
//! size: it writes `E_BAD_MESSAGE` or `E_BAD_BODY` (`... too big N > MAX`) and closes the
//! connection with the body unread. Its IDENTIFY reply states neither limit. So a producer
//! learns them from refusals, in two ways:
//!
//! * **nsqd's words.** The error states the limit, which is kept
//!   ([`learn_limits`](Producer::learn_limits)).
//! * **nsqd's reset.** The unread body makes nsqd's kernel reset the connection, and a reset
//!   can destroy the error before the client reads it (a segment lost on the way; systems
//!   that drop received data when a reset arrives). A connection that ends (EOF or reset)
//!   while the first command awaiting nsqd's reply carries a message larger than any this
//!   nsqd has confirmed, and larger than nsqd's default `--max-msg-size` (1 MiB), is taken
//!   as refused by that limit; so is an MPUB whose body is larger than any confirmed and
//!   than the default `--max-body-size` (5 MiB), when its messages are not (when both are,
//!   either limit could have refused it, and nothing is learned). The limit is lowered to
//!   one byte below that size, so a publish of that size or more fails before it is sent;
//!   the connection is replaced at once, without backoff, and the commands pipelined behind
//!   the refused one (which nsqd never read) are sent again. Sizes within nsqd's defaults
//!   are never taken as refused: a crash while an ordinary body is in flight must not teach
//!   a limit. A crash during a large one could, so the inferred limit is withdrawn when the
//!   replacement connection cannot be made (nsqd really is down), and kept once it is ready.
//!
//! The refused publish itself fails with [`PublishFailure::ConnectionLost`]: without nsqd's
//! words, the client cannot be sure it was not published.

use super::events::{PublishFailure, PublishId};
use super::producer::Producer;
use super::work::{Pending, PendingKind, Shape, Work};
use crate::connection::{CloseReason, ConnectionState};
use crate::deadline::later;
use crate::error_code::{ErrorCode, ServerError};
use crate::frame::DEFAULT_MAX_MSG_SIZE;
use crate::limits::DEFAULT_MAX_BODY_SIZE;
use bytes::Bytes;
use std::time::Instant;

/// The largest MPUB body and the largest message one nsqd has confirmed (messages are only
/// measured beyond nsqd's default `--max-msg-size`: smaller ones never decide anything).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Accepted {
    pub(super) message: usize,
    pub(super) body: usize,
}

/// One of nsqd's size limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Limit {
    /// `--max-msg-size`.
    MaxMsgSize,
    /// `--max-body-size`.
    MaxBodySize,
}

impl Limit {
    fn name(self) -> &'static str {
        match self {
            Limit::MaxMsgSize => "max-msg-size",
            Limit::MaxBodySize => "max-body-size",
        }
    }
}

/// A limit lowered on the evidence of a reset alone, until the nsqd is known to be up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Inferred {
    node: usize,
    limit: Limit,
    value: u32,
    previous: u32,
}

/// Whether a connection that ended while `work` was the first command awaiting nsqd's reply
/// was refused for its size, given what that nsqd `accepted`: the limit concerned and the
/// size it refused.
pub(super) fn reset_refusal(work: &Work<Bytes>, accepted: Accepted) -> Option<(Limit, usize)> {
    let message_floor = accepted.message.max(DEFAULT_MAX_MSG_SIZE as usize);
    let body_floor = accepted.body.max(DEFAULT_MAX_BODY_SIZE as usize);
    // No message can be larger than the data: only a large command is walked.
    let largest = if work.data.len() > message_floor {
        work.largest_message()
    } else {
        0
    };
    let message = (largest > message_floor).then_some((Limit::MaxMsgSize, largest));
    let body = work
        .mpub_body()
        .filter(|&b| b > body_floor)
        .map(|b| (Limit::MaxBodySize, b));
    match (message, body) {
        (Some(m), None) => Some(m),
        (None, Some(b)) => Some(b),
        // Neither is beyond what nsqd took; or both are, and either could have refused it.
        _ => None,
    }
}

impl Producer {
    /// Node `i`'s nsqd confirmed `work`: it takes messages (and MPUB bodies) that large.
    pub(super) fn note_accepted(&mut self, i: usize, work: &Work<Bytes>) {
        let accepted = &mut self.nodes[i].accepted;
        let floor = accepted.message.max(DEFAULT_MAX_MSG_SIZE as usize);
        if work.data.len() > floor {
            accepted.message = accepted.message.max(work.largest_message());
        }
        if let Some(body) = work.mpub_body() {
            accepted.body = accepted.body.max(body);
        }
    }

    /// Node `i`'s connection is about to be told of its EOF (or reset): when its first
    /// command awaiting a reply is one nsqd would refuse for its size as far as this
    /// producer knows ([`reset_refusal`]), the end is taken as that refusal.
    pub(super) fn note_reset(&mut self, i: usize) {
        let accepted = self.nodes[i].accepted;
        let Some(link) = self.nodes[i].link.as_mut() else {
            return;
        };
        let ready = link.ready_at.is_some()
            && link
                .conn
                .as_ref()
                .is_some_and(|c| c.state() == ConnectionState::Ready);
        let Some(front) = link.sent.front().filter(|_| ready) else {
            return;
        };
        let Some((limit, size)) = reset_refusal(&front.work, accepted) else {
            return;
        };
        link.refused = true;
        link.reset_refused = Some(front.token);
        let value = u32::try_from(size.saturating_sub(1)).unwrap_or(u32::MAX);
        let learned = match limit {
            Limit::MaxMsgSize => &mut self.learned.max_msg_size,
            Limit::MaxBodySize => &mut self.learned.max_body_size,
        };
        if value < *learned {
            self.inferred = Some(Inferred {
                node: i,
                limit,
                value,
                previous: *learned,
            });
            *learned = value;
        }
        tracing::warn!(
            nsqd = self.nodes[i].addr,
            size,
            "nsqd closed the connection while reading a publish larger than any it accepted: \
             taken as its {} refusing it; publishes of {size} bytes or more now fail before \
             they are sent",
            limit.name()
        );
    }

    /// The command nsqd was taken to refuse by resetting node `i`'s connection: its
    /// publishes fail as lost with the connection, except, in a batch of single publishes
    /// (which nsqd refuses whole), those within the limits now known, which are sent again
    /// one by one.
    pub(super) fn refused_by_reset(&mut self, now: Instant, work: &Work<Bytes>) {
        let lost = PublishFailure::ConnectionLost(CloseReason::Eof);
        if matches!(work.shape, Shape::Batch { .. }) && work.count > 1 {
            self.split_refused(now, work, &lost);
        } else {
            for id in work.ids.as_slice() {
                self.resolve(*id, Err(lost.clone()));
            }
        }
    }

    /// A batch of single publishes that nsqd refused whole (it was never published): those
    /// over the limits now known fail with `failure`, sending nothing more; the others are
    /// sent again, each alone.
    pub(super) fn split_refused(
        &mut self,
        now: Instant,
        work: &Work<Bytes>,
        failure: &PublishFailure,
    ) {
        let max = self.learned.max_msg_size as usize;
        let deadline = later(now, self.config.publish_timeout);
        let each: Vec<(PublishId, Bytes)> = work
            .ids
            .as_slice()
            .iter()
            .copied()
            .zip(work.bodies())
            .collect();
        for (id, body) in each {
            if body.len() > max {
                self.resolve(id, Err(failure.clone()));
            } else {
                self.pending.push_back(Pending {
                    id: id.get(),
                    since: now,
                    deadline,
                    kind: PendingKind::Publish {
                        topic: work.topic.clone(),
                        body,
                        solo: true,
                    },
                });
            }
        }
    }

    /// Node `i`'s connection became ready: a limit inferred from its reset stays.
    pub(super) fn confirm_inferred(&mut self, i: usize) {
        if self.inferred.is_some_and(|x| x.node == i) {
            self.inferred = None;
        }
    }

    /// A connection attempt to node `i` failed: a limit inferred from its last connection's
    /// reset is withdrawn (the reset was nsqd going down, not a refusal).
    pub(super) fn withdraw_inferred(&mut self, i: usize) {
        let Some(x) = self.inferred.filter(|x| x.node == i) else {
            return;
        };
        self.inferred = None;
        let learned = match x.limit {
            Limit::MaxMsgSize => &mut self.learned.max_msg_size,
            Limit::MaxBodySize => &mut self.learned.max_body_size,
        };
        if *learned == x.value {
            *learned = x.previous;
            tracing::info!(
                nsqd = self.nodes[i].addr,
                "nsqd cannot be reached: its reset was no refusal, and the {} taken from it \
                 is withdrawn",
                x.limit.name()
            );
        }
    }

    /// Lowers the producer's size limits to what nsqd `i` said in a refusal
    /// (`... too big N > MAX`).
    pub(super) fn learn_limits(&mut self, i: usize, e: &ServerError) {
        let description = e.description();
        let Some((_, max)) = description.split_once(" too big ") else {
            return;
        };
        let Some(max) = max
            .rsplit('>')
            .next()
            .and_then(|m| m.trim().parse::<u32>().ok())
        else {
            return;
        };
        let (limit, learned) = match e.code() {
            ErrorCode::BadMessage => (Limit::MaxMsgSize, &mut self.learned.max_msg_size),
            ErrorCode::BadBody => (Limit::MaxBodySize, &mut self.learned.max_body_size),
            _ => return,
        };
        // nsqd's words outweigh a guess from a reset: withdrawn, that guess gives back no
        // more than this.
        if let Some(x) = self.inferred.as_mut().filter(|x| x.limit == limit) {
            x.previous = x.previous.min(max);
        }
        if max < *learned {
            *learned = max;
            tracing::info!(
                nsqd = self.nodes[i].addr,
                max,
                "nsqd's {} is lower than configured",
                limit.name()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::work::Ids;
    use super::*;
    use crate::command;
    use crate::names::Topic;
    use std::time::Duration;

    const MIB: usize = 1024 * 1024;

    fn work(shape: Shape, bodies: &[usize]) -> Work<Bytes> {
        let data = if let Shape::Deferred(_) = shape {
            vec![b'x'; bodies[0]]
        } else {
            let mut data = Vec::new();
            for &len in bodies {
                command::put_entry(&mut data, &vec![b'x'; len]);
            }
            data
        };
        Work {
            topic: Topic::new("t").expect("a valid topic"),
            shape,
            data: Bytes::from(data),
            room: 0,
            count: bodies.len() as u32,
            ids: Ids::One(PublishId(1)),
        }
    }

    const PUB: Shape = Shape::Batch { solo: false };
    const NOTHING: Accepted = Accepted {
        message: 0,
        body: 0,
    };

    #[test]
    fn a_message_beyond_nsqds_default_and_what_it_accepted_is_refused() {
        let message = Some((Limit::MaxMsgSize, 2 * MIB));
        assert_eq!(reset_refusal(&work(PUB, &[2 * MIB]), NOTHING), message);
        let dpub = Shape::Deferred(Duration::from_secs(1));
        assert_eq!(reset_refusal(&work(dpub, &[2 * MIB]), NOTHING), message);
        // Within nsqd's default: a crash, not a refusal.
        assert_eq!(reset_refusal(&work(PUB, &[MIB]), NOTHING), None);
        // nsqd took that much before.
        let took = Accepted {
            message: 2 * MIB,
            body: 0,
        };
        assert_eq!(reset_refusal(&work(PUB, &[2 * MIB]), took), None);
        assert_eq!(
            reset_refusal(&work(PUB, &[2 * MIB + 1]), took),
            Some((Limit::MaxMsgSize, 2 * MIB + 1))
        );
        // A batch of single publishes holding one: the message decides.
        assert_eq!(
            reset_refusal(&work(PUB, &[10, 2 * MIB, 10]), NOTHING),
            message
        );
    }

    #[test]
    fn an_mpub_body_beyond_nsqds_default_and_what_it_accepted_is_refused() {
        let bodies = vec![1024; 6 * 1024];
        let size = 4 + 6 * 1024 * (4 + 1024);
        assert_eq!(
            reset_refusal(&work(Shape::Multi, &bodies), NOTHING),
            Some((Limit::MaxBodySize, size))
        );
        let took = Accepted {
            message: 0,
            body: size,
        };
        assert_eq!(reset_refusal(&work(Shape::Multi, &bodies), took), None);
        // Both limits could have refused it: nothing is learned.
        let mut both = bodies;
        both.push(2 * MIB);
        assert_eq!(reset_refusal(&work(Shape::Multi, &both), NOTHING), None);
    }

    #[test]
    fn what_nsqd_confirmed_is_measured_beyond_its_defaults_only() {
        let mut p = Producer::new(super::super::ProducerConfig::default(), 1).expect("config");
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        p.add_nsqd(now, "127.0.0.1:4150").expect("address");
        p.note_accepted(0, &work(PUB, &[MIB / 2]));
        assert_eq!(p.nodes[0].accepted, NOTHING);
        p.note_accepted(0, &work(PUB, &[1000, 1000]));
        assert_eq!(p.nodes[0].accepted.body, 4 + 2 * 1004);
        p.note_accepted(0, &work(Shape::Multi, &[10, 3 * MIB, 10]));
        assert_eq!(p.nodes[0].accepted.message, 3 * MIB);
        assert_eq!(p.nodes[0].accepted.body, 4 + 3 * 4 + 3 * MIB + 20);
        p.note_accepted(0, &work(PUB, &[2 * MIB]));
        assert_eq!(p.nodes[0].accepted.message, 3 * MIB);
    }
}
