//! The producer side of a [`Connection`]: PUB, MPUB and DPUB, queued before `Ready` or sent
//! at once, each resolved by exactly one `Published` or `PublishFailed` event.

use super::handshake::Phase;
use super::{Connection, ConnectionError, PublishToken};
use crate::command::{self, CommandError};
use crate::names::Topic;
use bytes::{Bytes, BytesMut};
use std::time::{Duration, Instant};

impl Connection {
    /// Publishes one message. Before `Ready` it is queued and sent when the start-up ends.
    pub fn publish(
        &mut self,
        now: Instant,
        topic: &Topic,
        body: &[u8],
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        let limits = self.config.limits;
        self.publish_with(|buf| command::publish(buf, topic, body, &limits))
    }

    /// Publishes several messages atomically with MPUB (one reply for the batch).
    pub fn multi_publish<B: AsRef<[u8]>>(
        &mut self,
        now: Instant,
        topic: &Topic,
        bodies: &[B],
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        let limits = self.config.limits;
        self.publish_with(|buf| command::multi_publish(buf, topic, bodies, &limits))
    }

    /// Publishes one message delivered after `delay` (DPUB).
    pub fn deferred_publish(
        &mut self,
        now: Instant,
        topic: &Topic,
        delay: Duration,
        body: &[u8],
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        let limits = self.config.limits;
        self.publish_with(|buf| command::deferred_publish(buf, topic, delay, body, &limits))
    }

    pub(super) fn publish_with(
        &mut self,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), CommandError>,
    ) -> Result<PublishToken, ConnectionError> {
        self.admit_publish()?;
        let buf = if self.phase == Phase::Ready {
            &mut self.wbuf
        } else {
            &mut self.pre_ready
        };
        encode(buf).map_err(ConnectionError::Command)?;
        Ok(self.next_publish_token())
    }

    /// Whether a publish can be queued now.
    fn admit_publish(&self) -> Result<(), ConnectionError> {
        self.check_open()?;
        if self.role.is_consumer() {
            return Err(ConnectionError::WrongRole);
        }
        if self.phase == Phase::Closing {
            return Err(ConnectionError::Closing);
        }
        if let Some(limit) = self.config.max_outstanding_publishes {
            if self.outstanding_publishes() >= limit {
                return Err(ConnectionError::TooManyOutstanding { limit });
            }
        }
        Ok(())
    }

    fn next_publish_token(&mut self) -> PublishToken {
        let token = PublishToken(self.next_token);
        self.next_token += 1;
        token
    }

    /// Queues a publish already encoded whole (a producer's PUB or MPUB, checked when it was
    /// made). Without TLS or compression it goes to the socket as it is, a buffer of its own
    /// in [`poll_transmit`](Self::poll_transmit)'s sequence: its bodies are not copied again.
    pub(crate) fn publish_encoded(
        &mut self,
        now: Instant,
        command: Bytes,
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        self.admit_publish()?;
        if self.phase != Phase::Ready {
            self.pre_ready.extend_from_slice(&command);
        } else if self.layers.is_plain() {
            self.queue_whole(command);
        } else {
            self.wbuf.extend_from_slice(&command);
        }
        Ok(self.next_publish_token())
    }

    /// Queues a publish written by `encode` (a producer's prepared command; on error it
    /// must write nothing).
    pub(crate) fn publish_prepared(
        &mut self,
        now: Instant,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), CommandError>,
    ) -> Result<PublishToken, ConnectionError> {
        let _ = self.clock(now);
        self.publish_with(encode)
    }
}
