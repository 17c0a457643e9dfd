//! A user's publish handed to the core [`nsq_proto::Producer`] ([`PublishRequest`]) and
//! which reply waits for which publish or ping ([`Replies`]).

use super::error::{Error, InputError, IntoTopic};
use bytes::Bytes;
use nsq_proto::Limits;
use nsq_proto::Topic;
use nsq_proto::producer::{Batch, PingId, Producer, ProducerEvent, PublishId};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A publish (or ping) a user asked for, on its way to the core [`Producer`].
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum PublishRequest {
    /// PUB.
    Publish {
        /// The topic.
        topic: Topic,
        /// The body.
        body: Bytes,
    },
    /// MPUB, its bodies encoded by the caller.
    MultiPublish(Batch),
    /// DPUB.
    DeferredPublish {
        /// The topic.
        topic: Topic,
        /// The delay.
        delay: Duration,
        /// The body.
        body: Bytes,
    },
    /// Resolves once a connection is ready.
    Ping,
}

impl PublishRequest {
    /// The topic it publishes to and how many messages, unless it is a ping.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(dead_code, reason = "read by the metrics")
    )]
    pub(crate) fn topic_and_count(&self) -> Option<(&str, u32)> {
        match self {
            PublishRequest::Publish { topic, .. }
            | PublishRequest::DeferredPublish { topic, .. } => Some((topic.as_str(), 1)),
            PublishRequest::MultiPublish(batch) => Some((
                batch.topic().as_str(),
                u32::try_from(batch.len()).unwrap_or(u32::MAX),
            )),
            PublishRequest::Ping => None,
        }
    }
    /// PUB of `body` to `topic` (the name validated here).
    pub(crate) fn publish(topic: impl IntoTopic, body: impl Into<Bytes>) -> Result<Self, Error> {
        Ok(PublishRequest::Publish {
            topic: topic.into_topic()?,
            body: body.into(),
        })
    }

    /// MPUB of `bodies` to `topic`, encoded here (on the caller's thread, once: the driver
    /// writes them as they are), checked against `limits`.
    pub(crate) fn multi_publish<I, B>(
        topic: impl IntoTopic,
        bodies: I,
        limits: &Limits,
    ) -> Result<Self, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let batch = Batch::new(&topic.into_topic()?, bodies, limits)
            .map_err(|e| Error::InvalidInput(InputError::Publish(e)))?;
        Ok(PublishRequest::MultiPublish(batch))
    }

    /// DPUB of `body` to `topic`, delivered after `delay`.
    pub(crate) fn deferred_publish(
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<Self, Error> {
        Ok(PublishRequest::DeferredPublish {
            topic: topic.into_topic()?,
            delay,
            body: body.into(),
        })
    }
}

/// Which reply (`R`: a one-shot sender of the adapter) waits for which publish or ping of a
/// core [`Producer`].
///
/// Resolved replies are held back until the driver takes them with
/// [`take_resolved`](Self::take_resolved), after it has published the producer's stats for
/// the wake-up: a caller whose publish resolved then sees it counted.
#[derive(Debug)]
pub(crate) struct Replies<R> {
    publishes: BTreeMap<PublishId, R>,
    pings: BTreeMap<PingId, R>,
    resolved: Vec<(R, Result<(), Error>)>,
}

impl<R> Default for Replies<R> {
    fn default() -> Self {
        Replies {
            publishes: BTreeMap::new(),
            pings: BTreeMap::new(),
            resolved: Vec::new(),
        }
    }
}

impl<R> Replies<R> {
    /// Hands `request` to the core; `reply` waits for its result. When the core refuses it
    /// (nothing was queued), the reply comes back with the error.
    pub(crate) fn submit(
        &mut self,
        machine: &mut Producer,
        now: Instant,
        request: PublishRequest,
        reply: R,
    ) -> Result<(), (R, Error)> {
        let result = match request {
            PublishRequest::Publish { topic, body } => machine.publish(now, &topic, &body),
            PublishRequest::MultiPublish(batch) => machine.multi_publish_batch(now, batch),
            PublishRequest::DeferredPublish { topic, delay, body } => {
                machine.deferred_publish(now, &topic, delay, &body)
            }
            PublishRequest::Ping => {
                return match machine.ping(now) {
                    Ok(id) => {
                        self.pings.insert(id, reply);
                        Ok(())
                    }
                    Err(e) => Err((reply, e.into())),
                };
            }
        };
        match result {
            Ok(id) => {
                self.publishes.insert(id, reply);
                Ok(())
            }
            Err(e) => Err((reply, e.into())),
        }
    }

    /// Records the result of the reply `event` resolves, for
    /// [`take_resolved`](Self::take_resolved); `false` for events that resolve no reply.
    pub(crate) fn resolve(&mut self, event: &ProducerEvent) -> bool {
        let resolved = self.resolution(event);
        let found = resolved.is_some();
        self.resolved.extend(resolved);
        found
    }

    /// The replies resolved since the last call, with their results, in resolution order.
    pub(crate) fn take_resolved(&mut self) -> std::vec::Drain<'_, (R, Result<(), Error>)> {
        self.resolved.drain(..)
    }

    fn resolution(&mut self, event: &ProducerEvent) -> Option<(R, Result<(), Error>)> {
        match event {
            ProducerEvent::Published(id) => self.publishes.remove(id).map(|r| (r, Ok(()))),
            ProducerEvent::PublishFailed(id, failure) => self
                .publishes
                .remove(id)
                .map(|r| (r, Err(failure.clone().into()))),
            ProducerEvent::PingOk(id) => self.pings.remove(id).map(|r| (r, Ok(()))),
            ProducerEvent::PingFailed(id, failure) => self
                .pings
                .remove(id)
                .map(|r| (r, Err(failure.clone().into()))),
            _ => None,
        }
    }

    /// How many replies wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.publishes.len() + self.pings.len()
    }

    /// Nothing waits.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every waiting reply (when the driver stops; answer them with [`Error::Closed`]).
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = R> + use<R> {
        let publishes = std::mem::take(&mut self.publishes);
        let pings = std::mem::take(&mut self.pings);
        publishes.into_values().chain(pings.into_values())
    }
}
