//! The publish path of a [`Producer`]: admission, routing a publish to a connection, natural
//! batching, writing, and the retries after a refused batch or a lost connection.

use crate::command::{self};
use crate::connection::{CloseReason, ConnectionError, ConnectionState, PublishError};
use crate::deadline::later;
use crate::error_code::ErrorCode;
use crate::names::Topic;
use bytes::Bytes;
use std::time::Instant;

use super::events::{ProducerError, ProducerEvent, PublishFailure, PublishId};
use super::node::Sent;
use super::producer::Producer;
use super::work::{Ids, Item, MAX_SENT_WHILE_BATCHING, Pending, PendingKind, Shape, Work, entries};

/// Bytes of entries a batch of single publishes starts with room for (it grows beyond).
const BATCH_START: usize = 4096;

impl Producer {
    pub(super) fn submit(
        &mut self,
        now: Instant,
        topic: &Topic,
        item: Item<'_>,
    ) -> Result<PublishId, ProducerError> {
        if let Some(i) = self.route() {
            // Hot path: gathered for the next write of that connection.
            let id = PublishId(self.take_id());
            self.outstanding += 1;
            self.enqueue(i, id, topic, item);
            return Ok(id);
        }
        if self.any_in_progress() || self.connect_on_demand(now) {
            if self.pending.len() >= self.config.max_pending {
                return Err(ProducerError::PendingQueueFull {
                    limit: self.config.max_pending,
                });
            }
            let kind = match item {
                Item::One { body, solo } => PendingKind::Publish {
                    topic: topic.clone(),
                    body: Bytes::copy_from_slice(body),
                    solo,
                },
                Item::Multi { entries, count } => PendingKind::Multi {
                    topic: topic.clone(),
                    entries: Bytes::copy_from_slice(entries),
                    count,
                },
                Item::Entries { data, count } => PendingKind::Multi {
                    topic: topic.clone(),
                    entries: Bytes::from(data).slice(command::publish_room(topic)..),
                    count,
                },
                Item::Deferred(delay, body) => PendingKind::Deferred {
                    topic: topic.clone(),
                    delay,
                    body: Bytes::copy_from_slice(body),
                },
            };
            let id = PublishId(self.take_id());
            self.outstanding += 1;
            self.pending.push_back(Pending {
                id: id.0,
                since: now,
                deadline: later(now, self.config.publish_timeout),
                kind,
            });
            return Ok(id);
        }
        // Every nsqd is known to be down: fail fast.
        let id = PublishId(self.take_id());
        self.failed += 1;
        let failure = self.unavailable();
        self.events
            .push_back(ProducerEvent::PublishFailed(id, failure));
        Ok(id)
    }

    /// Gathers a publish for node `i`'s next write (`i` is ready). A single publish joins the
    /// batch of its topic gathered last, when batching is on, the batch is not closed to
    /// merging and the MPUB body stays within the limit nsqd stated (or the configured one).
    pub(super) fn enqueue(&mut self, i: usize, id: PublishId, topic: &Topic, item: Item<'_>) {
        let batching = self.config.batching;
        let (max_msg, max_body) = (
            self.learned.max_msg_size as usize,
            self.learned.max_body_size as usize,
        );
        let node = &mut self.nodes[i];
        let Some(link) = node.link.as_mut() else {
            // Not reached: `route` only returns ready nodes.
            let failure = self.unavailable();
            self.resolve(id, Err(failure));
            return;
        };
        match item {
            Item::One { body, solo } => {
                let solo = solo || !batching || body.len() > max_msg;
                let joined = !solo
                    && link
                        .open
                        .iter_mut()
                        .rev()
                        .find(|w| w.topic == *topic)
                        .filter(|w| {
                            w.shape == (Shape::Batch { solo: false })
                                && 8 + w.entries_len() + body.len() <= max_body
                        })
                        .map(|w| {
                            command::put_entry(&mut w.data, body);
                            w.count += 1;
                            w.ids.push(id);
                        })
                        .is_some();
                if !joined {
                    // A batch others may join gets room for some of them at once.
                    let capacity = if solo { 4 } else { BATCH_START } + body.len();
                    let shape = Shape::Batch { solo };
                    let mut work = Work::gather(topic, shape, Ids::One(id), capacity);
                    command::put_entry(&mut work.data, body);
                    work.count = 1;
                    link.open.push(work);
                }
            }
            Item::Multi { entries, count } => {
                let mut work = Work::gather(topic, Shape::Multi, Ids::One(id), entries.len());
                work.data.extend_from_slice(entries);
                work.count = count;
                link.open.push(work);
            }
            Item::Entries { data, count } => link.open.push(Work {
                topic: topic.clone(),
                shape: Shape::Multi,
                data,
                room: command::publish_room(topic),
                count,
                ids: Ids::One(id),
            }),
            Item::Deferred(delay, body) => link.open.push(Work {
                topic: topic.clone(),
                shape: Shape::Deferred(delay),
                data: body.to_vec(),
                room: 0,
                count: 1,
                ids: Ids::One(id),
            }),
        }
        if !link.dirty {
            link.dirty = true;
            self.any_dirty = true;
        }
    }

    /// Writes node `i`'s gathered publishes to its connection, in the order they were
    /// gathered, and records them as awaiting a reply.
    ///
    /// With batching on, they are held while [`MAX_SENT_WHILE_BATCHING`] commands are
    /// outstanding on the connection (their replies come first anyway): what gathers meanwhile
    /// leaves as one MPUB when a reply arrives. `force`: write them now (the producer is closing).
    pub(super) fn emit(&mut self, i: usize, force: bool) {
        let Some(now) = self.clock else {
            return;
        };
        let limits = self.config.connection.limits;
        let Some(link) = self.nodes[i].link.as_mut() else {
            return;
        };
        if link.open.is_empty()
            || (!force && self.config.batching && link.sent.len() >= MAX_SENT_WHILE_BATCHING)
        {
            return;
        }
        let Some(c) = link
            .conn
            .as_mut()
            .filter(|c| c.state() == ConnectionState::Ready)
        else {
            // Left for `drop_link`, which puts them back to wait for a connection.
            return;
        };
        let mut refused = Vec::new();
        for work in link.open.drain(..) {
            let (result, work) = match work.shape {
                Shape::Deferred(delay) => {
                    let result = c.publish_prepared(now, |buf| {
                        command::deferred_publish(buf, &work.topic, delay, &work.data, &limits)
                    });
                    (result, work.freeze())
                }
                // The command line goes in front of the entries: the command is handed to
                // the connection whole, without another copy of the bodies.
                Shape::Batch { .. } | Shape::Multi => {
                    let (command, sent) = work.into_command();
                    (c.publish_encoded(now, command), sent)
                }
            };
            match result {
                Ok(token) => {
                    if matches!(work.shape, Shape::Batch { .. }) && work.count > 1 {
                        self.batches += 1;
                        self.batched_messages += u64::from(work.count);
                    }
                    link.sent.push_back(Sent {
                        token: token.sequence(),
                        at: now,
                        work,
                    });
                }
                Err(e) => refused.push((work.ids, e)),
            }
        }
        for (ids, e) in refused {
            for id in ids.as_slice() {
                self.resolve(*id, Err(PublishFailure::Refused(e.clone())));
            }
        }
    }

    /// Sends the publishes waiting for a connection (a connection just became ready).
    /// Publishes over a limit nsqd stated (or was taken to have) since they were accepted
    /// fail here, sending nothing ([`PublishFailure::Refused`]): sent, nsqd would refuse
    /// them and close the connection again.
    pub(super) fn drain_pending(&mut self, now: Instant) {
        while let Some(p) = self.pending.pop_front() {
            let id = PublishId(p.id);
            if let Err(e) = p.kind.check(&self.learned) {
                let refused = PublishFailure::Refused(ConnectionError::Command(e));
                self.resolve(id, Err(refused));
                continue;
            }
            let Some(i) = self.route() else {
                self.pending.push_front(p);
                return;
            };
            match &p.kind {
                PendingKind::Ping(ping) => self.ping_on(now, i, *ping),
                PendingKind::Publish { topic, body, solo } => {
                    self.enqueue(i, id, topic, Item::One { body, solo: *solo });
                }
                PendingKind::Multi {
                    topic,
                    entries,
                    count,
                } => self.enqueue(
                    i,
                    id,
                    topic,
                    Item::Multi {
                        entries,
                        count: *count,
                    },
                ),
                PendingKind::Deferred { topic, delay, body } => {
                    self.enqueue(i, id, topic, Item::Deferred(*delay, body));
                }
            }
        }
    }

    /// A command on node `i` failed: resolves its publishes, or puts them back to be sent
    /// again when nsqd never processed them, or one by one when nsqd refused their batch
    /// because of one message.
    pub(super) fn publish_failed(
        &mut self,
        now: Instant,
        i: usize,
        work: Work<Bytes>,
        error: PublishError,
    ) {
        match error {
            PublishError::Server(e) => {
                self.learn_limits(i, &e);
                let per_message = matches!(e.code(), ErrorCode::BadMessage | ErrorCode::BadBody);
                if per_message && work.count > 1 && work.shape == (Shape::Batch { solo: false }) {
                    tracing::debug!(
                        nsqd = self.nodes[i].addr,
                        messages = work.count,
                        error = %e,
                        "nsqd refused a batch: sending its publishes one by one"
                    );
                    self.split_refused(now, &work, &PublishFailure::Server(e));
                } else {
                    for id in work.ids.as_slice() {
                        self.resolve(*id, Err(PublishFailure::Server(e.clone())));
                    }
                }
            }
            // nsqd stops reading at a fatal error: what was sent after the refused command
            // was never processed, and goes again on the next connection.
            PublishError::Closed(CloseReason::Server(_) | CloseReason::TlsRequired(_)) => {
                self.retry(now, work);
            }
            PublishError::Closed(reason) => {
                for id in work.ids.as_slice() {
                    self.resolve(*id, Err(PublishFailure::ConnectionLost(reason.clone())));
                }
            }
        }
    }

    /// Puts the publishes of `work` (never processed by nsqd) back in the pending queue.
    pub(super) fn retry(&mut self, now: Instant, work: Work<Bytes>) {
        let deadline = later(now, self.config.publish_timeout);
        let Work {
            topic,
            shape,
            data,
            room: _,
            count,
            ids,
        } = work;
        let mut push = |id: PublishId, kind: PendingKind| {
            self.pending.push_back(Pending {
                id: id.get(),
                since: now,
                deadline,
                kind,
            });
        };
        match shape {
            Shape::Batch { solo } => {
                let mut bodies = entries(&data);
                for id in ids.as_slice() {
                    push(
                        *id,
                        PendingKind::Publish {
                            topic: topic.clone(),
                            body: bodies.next().unwrap_or_default(),
                            solo,
                        },
                    );
                }
            }
            Shape::Multi => push(
                ids.as_slice()[0],
                PendingKind::Multi {
                    topic,
                    entries: data,
                    count,
                },
            ),
            Shape::Deferred(delay) => push(
                ids.as_slice()[0],
                PendingKind::Deferred {
                    topic,
                    delay,
                    body: data,
                },
            ),
        }
    }
}
