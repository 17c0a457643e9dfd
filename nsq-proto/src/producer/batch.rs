//! [`Batch`]: the bodies of one MPUB, encoded once where they are made.

use crate::command::{self, CommandError};
use crate::limits::Limits;
use crate::names::Topic;

/// The bodies of one MPUB, encoded once, as the wire wants them, with room in front for the
/// command line: a [`Producer`](super::Producer) writes them without copying them again.
/// Build it where the bodies are (the caller's thread, say) and hand it to
/// [`Producer::multi_publish_batch`](super::Producer::multi_publish_batch).
#[derive(Debug, Clone)]
pub struct Batch {
    topic: Topic,
    /// [`command::publish_room`] bytes, then the MPUB entries.
    data: Vec<u8>,
    count: u32,
    /// The size of the MPUB body (the count field and every entry).
    body_len: u64,
    /// The largest message and its position.
    largest: (usize, usize),
}

impl Batch {
    /// Encodes `bodies` for an MPUB to `topic`, checked against `limits` like
    /// [`command::multi_publish`]: the first empty or oversized body (by position), then the
    /// whole batch's size. Nothing beyond `limits.max_body_size` is ever buffered: the rest
    /// of an oversized batch is only measured.
    pub fn new<I, B>(topic: &Topic, bodies: I, limits: &Limits) -> Result<Batch, CommandError>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let room = command::publish_room(topic);
        let bodies = bodies.into_iter();
        let mut data = vec![0; room];
        let max_body = u64::from(limits.max_body_size);
        let (mut body_len, mut count, mut largest) = (4u64, 0usize, (0, 0));
        let expected = bodies.size_hint().0;
        for (index, body) in bodies.enumerate() {
            let body = body.as_ref();
            if body.is_empty() {
                return Err(CommandError::EmptyBodyInBatch { index });
            }
            command::check_body(index, body, limits)?;
            body_len += 4 + body.len() as u64;
            count += 1;
            if body.len() > largest.1 {
                largest = (index, body.len());
            }
            if body_len <= max_body {
                if index == 0 {
                    // Room for a batch of bodies like the first (within the limit).
                    let guess = (expected as u64).saturating_mul(4 + body.len() as u64);
                    data.reserve(guess.min(max_body) as usize);
                }
                command::put_entry(&mut data, body);
            }
        }
        if count == 0 {
            return Err(CommandError::EmptyBatch);
        }
        if body_len > max_body {
            return Err(CommandError::BatchTooLarge {
                len: body_len,
                max: limits.max_body_size,
            });
        }
        Ok(Batch {
            topic: topic.clone(),
            data,
            count: count as u32,
            body_len,
            largest,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// How many messages it holds (at least one).
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Always false: a batch holds at least one message.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Checks the batch against `limits` (a producer's own, which may be lower than those
    /// it was built with).
    pub(crate) fn check(&self, limits: &Limits) -> Result<(), CommandError> {
        let (index, len) = self.largest;
        if len > limits.max_msg_size as usize {
            return Err(CommandError::BodyTooLarge {
                index,
                len,
                max: limits.max_msg_size,
            });
        }
        if self.body_len > u64::from(limits.max_body_size) {
            return Err(CommandError::BatchTooLarge {
                len: self.body_len,
                max: limits.max_body_size,
            });
        }
        Ok(())
    }

    /// The encoded entries behind their room, and how many.
    pub(crate) fn into_parts(self) -> (Topic, Vec<u8>, u32) {
        (self.topic, self.data, self.count)
    }
}
