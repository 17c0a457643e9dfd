//! The coordinator's internals: what it does with each connection's output (the frames
//! pumped out of a connection, each message handed out or sent back, answers and their
//! counts, a connection dropped and the consumer's final close).

use super::Consumer;
use crate::connection::{CloseReason, Connection, ConnectionEvent};
use crate::consumer::beyond;
use crate::consumer::events::{ConsumerError, ConsumerEvent};
use crate::consumer::stats::Counts;
use crate::consumer::timers::Deadline;
use crate::driver::{Action, ConnId};
use crate::frame::{Message, MessageId};
use std::time::Instant;

impl Consumer {
    pub(super) fn connection_mut(
        &mut self,
        conn: ConnId,
    ) -> Result<&mut Connection, ConsumerError> {
        self.shared
            .slots
            .get_mut(conn)
            .ok_or_else(|| ConsumerError::UnknownConnection(conn))?
            .conn
            .as_mut()
            .ok_or_else(|| ConsumerError::NotReady(conn))
    }

    /// Counts a message event on `conn`'s own counters.
    /// The application answered a message of `conn`: counts it (one look-up for both).
    pub(super) fn answered(&mut self, conn: ConnId, f: impl FnOnce(&mut Counts)) {
        if let Some(slot) = self.shared.slots.get_mut(conn) {
            f(&mut slot.counts);
            if slot.handed > 0 {
                slot.handed -= 1;
                self.shared.handed_total -= 1;
            }
        }
    }

    pub(super) fn count(&mut self, conn: ConnId, f: impl FnOnce(&mut Counts)) {
        if let Some(slot) = self.shared.slots.get_mut(conn) {
            f(&mut slot.counts);
        }
    }

    pub(super) fn in_flight(&self, conn: ConnId) -> usize {
        self.shared
            .slots
            .get(conn)
            .and_then(|s| s.conn.as_ref())
            .map_or(0, Connection::in_flight)
    }

    /// Drains a connection's events (turning them into consumer actions) and its bytes.
    pub(super) fn pump(&mut self, now: Instant, id: ConnId) {
        let returned_before = self.returned;
        loop {
            self.pump_deliveries(now, id);
            let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) else {
                return;
            };
            let Some(event) = c.poll_event() else {
                break;
            };
            match event {
                ConnectionEvent::Ready(negotiated) => {
                    let output_buffer_timeout = negotiated.identify.output_buffer_timeout;
                    self.flow
                        .connection_ready(now, id, output_buffer_timeout, &mut self.shared);
                    let Some(slot) = self.shared.slots.get(id) else {
                        return;
                    };
                    self.limit.note_handshake(slot.handshake);
                    let addr = slot.addr.clone();
                    self.discovery.connection_ready(&addr);
                    self.shared
                        .events
                        .push_back(ConsumerEvent::ConnectionReady { conn: id, addr });
                    self.shared.queue_transmit(id);
                    self.flow.replan_soon(now, &mut self.shared);
                }
                ConnectionEvent::Message(message) => self.on_message(now, id, message),
                ConnectionEvent::Redelivered(_) => {
                    // The application still holds it: nothing to hand out, and its answer will
                    // answer this delivery. It took a RDY slot like any delivery.
                    self.received += 1;
                    if let Some(slot) = self.shared.slots.get_mut(id) {
                        slot.counts.received += 1;
                        let after = self.flow.on_message(now, slot);
                        if after.turn_over {
                            self.flow.after_message(now, id, after, &mut self.shared);
                        }
                    }
                }
                ConnectionEvent::MessageExpired(mid) => {
                    if let Some(change) = self.limit.on_expired(now) {
                        self.limit_changed(now, change);
                    }
                    // nsqd has requeued it, but the application still holds it.
                    if self.shared.ghosts.insert((id, mid)) {
                        self.shared.ghost_shares += 1;
                    }
                    self.unhand(id);
                    // Its share stays taken: a RDY left open may now exceed the budget.
                    self.flow.after_deliveries(now, &mut self.shared);
                    self.shared
                        .events
                        .push_back(ConsumerEvent::MessageExpired { conn: id, id: mid });
                    // Its share of max_in_flight is free again.
                    self.flow.replan_if_owed(now, &mut self.shared);
                }
                ConnectionEvent::ServerError(error) => {
                    self.flow
                        .on_answer_failed(now, id, &error, &mut self.shared);
                    self.shared
                        .events
                        .push_back(ConsumerEvent::ServerError { conn: id, error });
                }
                ConnectionEvent::Closed(reason) => {
                    let leftovers = match &reason {
                        CloseReason::Graceful { unanswered } => *unanswered,
                        _ => c.in_flight_ids().count(),
                    };
                    self.shared.queue_transmit(id);
                    self.drop_slot(now, id, &reason.to_string(), leftovers);
                    return;
                }
                _ => {}
            }
        }
        self.shared.queue_transmit(id);
        if self.returned != returned_before {
            // Messages went back because the application is full while a RDY is open: close
            // it now, or nsqd sends them again at once.
            self.flow.replan(now, false, &mut self.shared);
        }
    }

    /// The common case of [`Consumer::pump`] with one look-up for a whole run of messages, not
    /// several per message: moves the deliveries at the front of `id`'s events to the
    /// consumer's events while none of them needs more (a re-plan because the connection's
    /// bootstrap or low-RDY turn ends, or a give-up); `pump` takes the rest one at a time.
    pub(super) fn pump_deliveries(&mut self, now: Instant, id: ConnId) {
        let max_attempts = self.shared.config.max_attempts;
        let max_in_flight = u64::from(self.limit.hand_out_bound(now));
        let idle_cap = self.shared.config.low_rdy_idle_timeout;
        let plain = |m: &Message| !gives_up(max_attempts, m);
        let Some(slot) = self.shared.slots.get_mut(id) else {
            return;
        };
        let mut received = 0;
        // A message that ends the connection's low-RDY turn (its share delivered) takes the
        // way that re-plans; one that may have been sent back before, the way that counts it.
        while slot.fresh_until.is_none()
            && !slot.yield_pending
            && slot.turn_quota != 1
            && slot.sent_back.is_empty()
        {
            let Some(message) = slot.conn.as_mut().and_then(|c| c.poll_message(plain)) else {
                break;
            };
            if !self.shared.ghosts.is_empty() && self.shared.ghosts.remove(&(id, message.id)) {
                // nsqd timed it out and sent it again while the application still holds it:
                // the application's answer will answer this delivery. Nothing to hand out.
                self.shared.ghost_shares = self.shared.ghost_shares.saturating_sub(1);
                let _ = self.flow.on_message(now, slot);
                slot.counts.received += 1;
                received += 1;
                slot.handed += 1;
                self.shared.handed_total += 1;
                continue;
            }
            let covered = slot.covers_next()
                && self.shared.handed_total + self.shared.ghost_shares < max_in_flight;
            // (false, false) under this loop's condition: nothing to re-plan.
            let _ = self.flow.on_message(now, slot);
            slot.counts.received += 1;
            received += 1;
            if covered {
                slot.handed += 1;
                self.shared.handed_total += 1;
                self.shared
                    .events
                    .push_back(ConsumerEvent::Message { conn: id, message });
            } else {
                beyond::send_back(now, id, slot, &message, 0, idle_cap);
                self.returned += 1;
            }
        }
        self.received += received;
    }

    /// The application answered a message of `conn` (or it expired).
    pub(super) fn unhand(&mut self, conn: ConnId) {
        if let Some(slot) = self.shared.slots.get_mut(conn) {
            if slot.handed > 0 {
                slot.handed -= 1;
                self.shared.handed_total -= 1;
            }
        }
    }

    pub(super) fn on_message(&mut self, now: Instant, id: ConnId, mut message: Message) {
        self.received += 1;
        let max_attempts = self.shared.config.max_attempts;
        let bound = u64::from(self.limit.hand_out_bound(now));
        let idle_cap = self.shared.config.low_rdy_idle_timeout;
        let Some(slot) = self.shared.slots.get_mut(id) else {
            return;
        };
        slot.counts.received += 1;
        let unseen = slot.sent_back.correct(&mut message);
        if !self.shared.ghosts.is_empty() && self.shared.ghosts.remove(&(id, message.id)) {
            // As in pump_deliveries: the application still holds it.
            self.shared.ghost_shares = self.shared.ghost_shares.saturating_sub(1);
            let after = self.flow.on_message(now, slot);
            slot.handed += 1;
            self.shared.handed_total += 1;
            if after.replan() {
                self.flow.after_message(now, id, after, &mut self.shared);
            }
            return;
        }
        let covered =
            slot.covers_next() && self.shared.handed_total + self.shared.ghost_shares < bound;
        let after = self.flow.on_message(now, slot);
        if !gives_up(max_attempts, &message) && !covered {
            beyond::send_back(now, id, slot, &message, unseen, idle_cap);
            self.returned += 1;
        } else if gives_up(max_attempts, &message) {
            if let Some(c) = self.shared.slots.get_mut(id).and_then(|s| s.conn.as_mut()) {
                if let Err(e) = c.finish(now, &message.id) {
                    tracing::debug!(conn = %id, error = %e, "could not finish a message given up on");
                }
            }
            self.count(id, |c| c.gave_up += 1);
            self.gave_up += 1;
            self.shared
                .events
                .push_back(ConsumerEvent::GaveUp { conn: id, message });
            // Like go-nsq: the FIN of a message given up on is a success for backoff.
            self.flow.on_success(now, &mut self.shared);
            self.after_answer(now, id);
        } else {
            if let Some(slot) = self.shared.slots.get_mut(id) {
                slot.handed += 1;
                self.shared.handed_total += 1;
            }
            self.shared
                .events
                .push_back(ConsumerEvent::Message { conn: id, message });
        }
        if after.replan() {
            self.flow.after_message(now, id, after, &mut self.shared);
        }
    }

    /// The application answered a message no connection counts any more (its connection was
    /// lost, or it expired): its share of max_in_flight is free. The answer itself then
    /// fails as before (unknown connection, or not in flight).
    pub(super) fn forget_ghost(&mut self, now: Instant, conn: ConnId, id: &MessageId) {
        // No hashing on the hot path: there are almost never any.
        if !self.shared.ghosts.is_empty() && self.shared.ghosts.remove(&(conn, *id)) {
            self.shared.ghost_shares = self.shared.ghost_shares.saturating_sub(1);
            // A share is free again (rare: plan at once).
            if !self.shared.closing {
                self.flow.rebalance(now, false, &mut self.shared);
            }
        }
    }

    /// After a FIN/REQ on `id`: flow control refills its RDY or re-plans, then it is drained.
    pub(super) fn after_answer(&mut self, now: Instant, id: ConnId) {
        self.flow.after_answer(now, id, &mut self.shared);
        self.pump(now, id);
    }

    /// Forgets a connection: Disconnect action, event, reconnect bookkeeping, RDY rebalance.
    /// `leftovers`: its messages still unanswered (nsqd redelivers them).
    pub(super) fn drop_slot(&mut self, now: Instant, id: ConnId, reason: &str, leftovers: usize) {
        // Its last bytes are taken now, while the connection is still here.
        self.shared.queue_transmit(id);
        self.shared.freeze_back();
        let Some(slot) = self.shared.slots.remove(id) else {
            return;
        };
        // nsqd requeues what was in flight, but the application still holds it.
        if let Some(c) = &slot.conn {
            self.shared
                .ghosts
                .extend(c.in_flight_ids().map(|mid| (id, mid)));
        }
        self.shared.handed_total -= slot.handed;
        self.shared.ghost_shares += slot.handed;
        self.discovery.add_counts(&slot.addr, &slot.counts);
        self.shared.push_action(Action::Disconnect { conn: id });
        // A connection that never became ready may say the configuration cannot work.
        let misconfigured = slot
            .ready_at
            .is_none()
            .then(|| slot.conn.as_ref().and_then(Connection::close_reason))
            .flatten()
            .and_then(CloseReason::misconfiguration);
        let parked = misconfigured.is_some();
        let mut closed = ConsumerEvent::ConnectionClosed {
            conn: id,
            addr: slot.addr.clone(),
            reason: reason.to_string(),
            retry_in: None,
            misconfigured,
        };
        self.flow.forget(id);
        if self.shared.closing {
            self.shared.events.push_back(closed);
            self.leftovers += leftovers;
            self.maybe_emit_closed();
            return;
        }
        let healthy = slot.ready_at.is_some_and(|t| {
            now.saturating_duration_since(t) >= self.shared.config.reconnect_reset_after
        });
        let retry =
            self.discovery
                .connection_ended(now, &slot.addr, id, healthy, parked, &mut self.shared);
        if let ConsumerEvent::ConnectionClosed { retry_in, .. } = &mut closed {
            *retry_in = retry;
        }
        self.shared.events.push_back(closed);
        self.discovery.prune(Some(&slot.addr), &self.shared);
        self.flow.rebalance(now, false, &mut self.shared);
    }

    pub(super) fn maybe_emit_closed(&mut self) {
        if self.shared.closing && !self.closed_emitted && self.shared.slots.is_empty() {
            self.closed_emitted = true;
            self.shared.timers.stop(Deadline::Close);
            self.shared.events.push_back(ConsumerEvent::Closed {
                leftovers: self.leftovers,
            });
        }
    }

    pub(super) fn force_close(&mut self, now: Instant) {
        self.shared.timers.stop(Deadline::Close);
        let ids: Vec<ConnId> = self.shared.slots.keys().copied().collect();
        for id in ids {
            let leftovers = self.in_flight(id);
            self.drop_slot(now, id, "close timeout", leftovers);
        }
        self.maybe_emit_closed();
    }
}

fn gives_up(max_attempts: u16, message: &Message) -> bool {
    max_attempts > 0 && message.attempts > max_attempts
}
