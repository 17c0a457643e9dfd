//! Messages nsqd delivers beyond the in-flight bound: sent back at once, unseen, and their
//! attempts counted without those deliveries when they come back.
//!
//! A lowered RDY (a low-RDY turn that ends while its holder is idle, a plan that caps the
//! budget, a connection closing) cannot take back a message nsqd has already written: the
//! consumer keeps that message's share of max_in_flight for the connection's settle time
//! (see `Slot::transit`). When it arrives later than that (nsqd or the client descheduled on
//! a busy machine, a half-open link), its share may already be someone else's: handing it
//! out would give the application one message more than max_in_flight. It goes back to nsqd
//! at once instead (REQ with no delay and no backoff, as a message the application never
//! took), and nsqd delivers it again, to this consumer or another of the channel.
//!
//! nsqd counts every delivery as an attempt, so the message comes back with one more; no
//! command takes that back. The application and the `max_attempts` rule count only the
//! deliveries a handler could see: when such a message comes back on the same connection,
//! its attempts are given less the deliveries this consumer sent back. Otherwise a message
//! could be given up on (`max_attempts = 1`: at its first redelivery) without any handler
//! having seen it. Each connection remembers its last [`REMEMBERED`] sent back; one that
//! comes back on another connection (after a reconnect), or to another consumer, carries
//! nsqd's count.

use super::flow::idle_timeout;
use super::slots::Slot;
use crate::driver::ConnId;
use crate::frame::{Message, MessageId};
use std::time::{Duration, Instant};

/// The longest delay after a lowered RDY that a late message teaches its connection to wait
/// for: a round trip on a busy machine or to a far nsqd. One later than that was held up by
/// something else (a half-open link, a paused process), which waiting would not have helped.
const LONGEST_LEARNED: Duration = Duration::from_secs(1);

/// How many messages sent back unseen one connection remembers (the oldest forgotten
/// first): each is one delivery nsqd made beyond a lowered RDY, so more than one at a time
/// is rare.
pub(super) const REMEMBERED: usize = 16;

/// The messages one connection sent back unseen, with how many of their deliveries.
#[derive(Debug, Default)]
pub(super) struct SentBack(Vec<(MessageId, u16)>);

impl SentBack {
    /// Nothing is remembered (the common case: one check per delivery).
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `id` was sent back unseen, `unseen` deliveries in all.
    fn note(&mut self, id: MessageId, unseen: u16) {
        if self.0.len() == REMEMBERED {
            self.0.remove(0);
        }
        self.0.push((id, unseen));
    }

    /// `message` arrived: if it was sent back unseen before, it is forgotten and its
    /// attempts lose those deliveries (at least 1 is left). Returns how many they were (0 if
    /// none), for [`send_back`] should it go back again.
    pub(super) fn correct(&mut self, message: &mut Message) -> u16 {
        let Some(at) = self.0.iter().position(|e| e.0 == message.id) else {
            return 0;
        };
        let (_, unseen) = self.0.remove(at);
        message.attempts = message.attempts.saturating_sub(unseen).max(1);
        unseen
    }
}

/// Sends `message`, delivered on `slot`'s connection beyond what its RDY and possible
/// transit allow, back to nsqd at once (REQ 0, no backoff), and remembers it so that its
/// next delivery here counts none of the `unseen` deliveries before it nor this one.
///
/// It arrived later than the connection's settle time after its RDY went down: that time
/// (and the idle wait of a low-RDY turn, of which it is a part; `idle_cap` is
/// `low_rdy_idle_timeout`) is widened to what this one took, up to [`LONGEST_LEARNED`], so
/// the next lowered RDY waits for what nsqd wrote under it.
pub(super) fn send_back(
    now: Instant,
    id: ConnId,
    slot: &mut Slot,
    message: &Message,
    unseen: u16,
    idle_cap: Duration,
) {
    tracing::debug!(conn = %id, nsqd = %slot.addr, msg_id = %message.id, "message beyond the in-flight budget: requeued at once");
    if let Some(took) = slot.lowered_at.map(|t| now.saturating_duration_since(t)) {
        if took > slot.handshake && took <= LONGEST_LEARNED {
            slot.handshake = took;
            slot.settle = slot.settle.max(slot.handshake);
            slot.idle_wait = idle_timeout(slot.handshake, idle_cap);
        }
    }
    let Some(c) = slot.conn.as_mut() else {
        return;
    };
    match c.requeue(now, &message.id, Duration::ZERO) {
        Ok(()) => slot.sent_back.note(message.id, unseen.saturating_add(1)),
        Err(e) => {
            tracing::debug!(conn = %id, nsqd = %slot.addr, error = %e, "could not requeue a message beyond the budget");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(id: u8, attempts: u16) -> Message {
        Message {
            timestamp: 0,
            attempts,
            id: MessageId::new([id; 16]),
            body: Bytes::new(),
        }
    }

    #[test]
    fn a_message_sent_back_comes_back_with_the_attempts_a_handler_could_see() {
        let mut back = SentBack::default();
        back.note(MessageId::new([1; 16]), 1);
        back.note(MessageId::new([2; 16]), 1);
        // Sent back once, then again when it came back: nsqd's third delivery is the first a
        // handler sees.
        let mut m = message(1, 2);
        assert_eq!(back.correct(&mut m), 1);
        assert_eq!(m.attempts, 1);
        back.note(m.id, 2);
        let mut m = message(1, 3);
        assert_eq!(back.correct(&mut m), 2);
        assert_eq!(m.attempts, 1);
        // Forgotten once corrected: a later delivery carries nsqd's count.
        let mut again = message(1, 4);
        back.correct(&mut again);
        assert_eq!(again.attempts, 4);
        // Never below 1, whatever nsqd says; other messages are left alone.
        let mut low = message(2, 1);
        back.correct(&mut low);
        assert_eq!(low.attempts, 1);
        let mut other = message(3, 7);
        assert_eq!(back.correct(&mut other), 0);
        assert_eq!(other.attempts, 7);
        assert!(back.is_empty());
    }

    #[test]
    fn the_memory_is_bounded_and_forgets_the_oldest() {
        let mut back = SentBack::default();
        for i in 0..=REMEMBERED {
            back.note(MessageId::new([u8::try_from(i).unwrap(); 16]), 1);
        }
        assert_eq!(back.0.len(), REMEMBERED);
        let mut first = message(0, 2);
        back.correct(&mut first);
        assert_eq!(first.attempts, 2, "the oldest was forgotten");
        let mut last = message(u8::try_from(REMEMBERED).unwrap(), 2);
        back.correct(&mut last);
        assert_eq!(last.attempts, 1);
    }
}
