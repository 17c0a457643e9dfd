//! The life of a [`Producer`]'s connections: opening one to an nsqd, writing what it has
//! gathered, feeding its events back, and dropping it (with what becomes of its publishes).

use super::events::{ProducerEvent, PublishFailure};
use super::node::Session;
use super::producer::{Producer, Queued};
use super::work::Fate;
use crate::connection::{CloseReason, Connection, ConnectionEvent, PublishError};
use crate::deadline::later;
use crate::driver::{Action, ConnId};
use bytes::BytesMut;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

impl Producer {
    pub(super) fn connect(&mut self, now: Instant, i: usize) {
        if self.closing {
            return;
        }
        let node = &mut self.nodes[i];
        if node.link.is_some() || node.parked.is_some() {
            return;
        }
        let id = ConnId::from_raw(self.next_conn);
        self.next_conn += 1;
        node.next_attempt = None;
        node.link = Some(Session {
            id,
            started: now,
            conn: None,
            ready_at: None,
            open: Vec::new(),
            sent: VecDeque::new(),
            refused: false,
            reset_refused: None,
            dirty: false,
        });
        self.actions.push_back(Queued::Action(Action::Connect {
            conn: id,
            addr: node.addr.clone(),
        }));
    }

    /// Connects at once to every nsqd without a connection that is not known to be down
    /// (its last connection was ready when it ended: it was lost, not refused, and no
    /// attempt failed since), as go-nsq connects inside `Publish`: a publish made while the
    /// producer reconnects waits for the connection instead of failing. Returns whether a
    /// connection is being made.
    pub(super) fn connect_on_demand(&mut self, now: Instant) -> bool {
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            if node.link.is_none() && !node.down && node.parked.is_none() {
                self.connect(now, i);
            }
        }
        self.any_in_progress()
    }

    /// Moves node `i`'s queued bytes to the action queue, gathering them with a `Transmit`
    /// for the same connection at the tail.
    pub(super) fn queue_transmit(&mut self, i: usize) {
        self.emit(i, false);
        let Some(link) = self.nodes[i].link.as_mut() else {
            return;
        };
        link.dirty = false;
        let id = link.id;
        let Some(c) = link.conn.as_mut() else {
            return;
        };
        while let Some(data) = c.poll_transmit() {
            if data.is_empty() {
                continue;
            }
            if let Some(Queued::Transmit { conn, first, more }) = self.actions.back_mut() {
                if *conn == id {
                    let buf = more.get_or_insert_with(|| {
                        let mut b = BytesMut::with_capacity(2 * (first.len() + data.len()));
                        b.extend_from_slice(first);
                        b
                    });
                    buf.extend_from_slice(&data);
                    continue;
                }
            }
            self.actions.push_back(Queued::Transmit {
                conn: id,
                first: data,
                more: None,
            });
        }
    }

    /// Drains node `i`'s connection events into producer events.
    pub(super) fn pump(&mut self, now: Instant, i: usize) {
        loop {
            let Some(link) = self.nodes[i].link.as_mut() else {
                return;
            };
            let Some(c) = link.conn.as_mut() else {
                return;
            };
            let Some(event) = c.poll_event() else {
                return;
            };
            match event {
                ConnectionEvent::Ready(_) => {
                    link.ready_at = Some(now);
                    self.misconfigured = None;
                    link.dirty = true;
                    self.any_dirty = true;
                    let conn = link.id;
                    self.nodes[i].down = false;
                    self.confirm_inferred(i);
                    let addr = self.nodes[i].addr.clone();
                    // Its zone is known (nsqd states it in the IDENTIFY reply).
                    self.nodes[i].stated = true;
                    self.events
                        .push_back(ProducerEvent::ConnectionReady { conn, addr });
                    self.drain_pending(now);
                }
                ConnectionEvent::Published(token) => {
                    if let Some(work) = self.take_sent(i, token) {
                        self.note_accepted(i, &work);
                        for id in work.ids.as_slice() {
                            self.resolve(*id, Ok(()));
                        }
                    }
                }
                ConnectionEvent::PublishFailed(token, error) => {
                    if matches!(error, PublishError::Server(_)) {
                        link.refused = true;
                    }
                    let reset_refused = link.reset_refused;
                    if let Some(work) = self.take_sent(i, token) {
                        match reset_refused {
                            Some(t) if t == token.sequence() => self.refused_by_reset(now, &work),
                            // Behind the refused command: nsqd never read it.
                            Some(_) => self.retry(now, work),
                            None => self.publish_failed(now, i, work, error),
                        }
                    }
                }
                ConnectionEvent::Closed(reason) => {
                    self.drop_link(now, i, &reason.to_string(), Fate::Lost);
                    return;
                }
                ConnectionEvent::ServerError(error) => {
                    tracing::debug!(%error, "non-fatal nsqd error on a producer connection");
                }
                other => {
                    tracing::debug!(?other, "unexpected event on a producer connection");
                }
            }
        }
    }

    /// Forgets node `i`'s connection: flushes its last bytes, `Disconnect`, event, fails what
    /// it still holds as `fate` says (publishes gathered but never written wait for a
    /// connection again), and reconnects: at once when nsqd closed it after refusing a
    /// command (a rejection is not a server failure), else on the backoff schedule.
    pub(super) fn drop_link(&mut self, now: Instant, i: usize, reason: &str, fate: Fate) {
        let open = self.nodes[i]
            .link
            .as_mut()
            .map(|l| std::mem::take(&mut l.open))
            .unwrap_or_default();
        self.queue_transmit(i);
        let Some(mut link) = self.nodes[i].link.take() else {
            return;
        };
        // Its first connection is over: it no longer holds topology routing back.
        self.nodes[i].stated = true;
        let addr = self.nodes[i].addr.clone();
        self.actions
            .push_back(Queued::Action(Action::Disconnect { conn: link.id }));
        let close_reason = link.conn.as_ref().and_then(Connection::close_reason);
        let graceful = matches!(close_reason, Some(CloseReason::Graceful { .. }));
        // nsqd answered a publish with an error and closed (or reset the connection in a way
        // taken as such a refusal: see `refusal`): a refusal, not a failure. (A server that
        // errs on its own, with nothing to refuse, backs off like any failure.)
        let rejected = link.ready_at.is_some()
            && link.refused
            && (matches!(close_reason, Some(CloseReason::Server(_)))
                || link.reset_refused.is_some());
        if !graceful && !rejected {
            self.last_error = Some(format!("{addr}: {reason}"));
        }
        // Known down when the attempt failed; a connection lost once ready is not: a publish
        // connects to it again at once.
        self.nodes[i].down = link.ready_at.is_none();
        if link.ready_at.is_none() {
            self.withdraw_inferred(i);
        }
        // A connection that never became ready may say the configuration cannot work.
        let misconfigured = link
            .ready_at
            .is_none()
            .then_some(close_reason)
            .flatten()
            .and_then(CloseReason::misconfiguration);
        if misconfigured.is_some() {
            self.misconfigured = Some(i);
        }
        let lost = close_reason.cloned().unwrap_or(CloseReason::Eof);
        for s in std::mem::take(&mut link.sent) {
            let failure = if fate == Fate::TimedOut {
                PublishFailure::TimedOut {
                    waited: now.saturating_duration_since(s.at),
                }
            } else {
                PublishFailure::ConnectionLost(lost.clone())
            };
            for id in s.work.ids.as_slice() {
                self.resolve(*id, Err(failure.clone()));
            }
        }
        for work in open {
            self.retry(now, work.freeze());
        }
        // A refusal reconnects at once (`Some(ZERO)`), without touching the backoff schedule.
        let retry_in = (!self.closing && misconfigured.is_none()).then(|| {
            if rejected {
                return Duration::ZERO;
            }
            let node = &mut self.nodes[i];
            let healthy = link.ready_at.is_some_and(|t| {
                now.saturating_duration_since(t) >= self.config.reconnect_reset_after
            });
            if healthy {
                node.schedule.reset();
            }
            let delay = node.schedule.next_delay(&mut self.rng);
            node.next_attempt = Some(later(now, delay));
            delay
        });
        self.events.push_back(ProducerEvent::ConnectionClosed {
            conn: link.id,
            addr,
            reason: reason.to_string(),
            retry_in,
            misconfigured: misconfigured.clone(),
        });
        self.nodes[i].parked = misconfigured;
        if rejected && !self.closing {
            self.connect(now, i);
        }
    }
}
