//! Flow control ([`FlowControl`]): how much each connection may receive. RDY distribution
//! (a share per connection, or the low-RDY rotation when `max_in_flight` is below the number
//! of connections), the `max_in_flight` budget held by unanswered messages, and backoff (its
//! level, its window and the probe connection). The formulas are in [`super::policy`]; the
//! plans themselves (the share per connection, the rotation's turns) are in `plan.rs`.

use super::policy;
use super::shared::Shared;
use super::slots::Slot;
use super::timers::Deadline;
use crate::deadline::later;
use crate::driver::ConnId;
use crate::error_code::{ErrorCode, ServerError};
use crate::frame::MessageId;
use std::time::{Duration, Instant};

mod plan;

/// The longest a lowered RDY's possible deliveries are waited for (see `Slot::transit`).
const MAX_SETTLE: Duration = Duration::from_secs(5);

/// The shortest idle wait of a RDY holder (see `FlowControl::idle_timeout`).
const MIN_IDLE: Duration = Duration::from_millis(100);

/// The shortest low-RDY turn (see [`FlowControl::turn_shape`]). A turn still lasts until its
/// first message whatever its length, so this only keeps turn ends (and the timers that make
/// them) from crowding together.
const MIN_TURN: Duration = Duration::from_millis(10);

/// The longest interval between two messages of one turn taken as a sample of how long a
/// busy turn takes per message (a handler slower than this says nothing about the others).
const MAX_PACE_SAMPLE: Duration = Duration::from_secs(1);

/// Above this many ready connections, the plans that a connection's arrival or the end of its
/// bootstrap calls for are gathered into one, [`COALESCE`] later (see
/// [`FlowControl::replan_soon`]).
const COALESCE_ABOVE: u64 = 16;

/// How long such a plan waits for others to join it.
const COALESCE: Duration = Duration::from_millis(50);

/// How many E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED within [`ANSWER_FAILURE_WINDOW`]
/// count as one handler failure for backoff.
pub const ANSWER_FAILURE_BURST: u32 = 3;

/// The window in which [`ANSWER_FAILURE_BURST`] rejected answers make a burst, counted from
/// the first of them.
pub const ANSWER_FAILURE_WINDOW: Duration = Duration::from_secs(1);

/// The consumer's flow-control state: the RDY plan's memory between calls and the backoff
/// state. Its deadlines are the [`Deadline::Backoff`] and [`Deadline::Redistribute`] entries of the
/// timer table; the per-connection state it works on is in each [`Slot`].
#[derive(Debug)]
pub(super) struct FlowControl {
    /// The in-flight limit in force (`max_in_flight`, or the adaptive limit below it): what
    /// the plans distribute.
    limit: u32,
    /// Where the round-robin remainder of the RDY plan starts (moves at each redistribution).
    rr_offset: usize,
    /// A planned RDY raise was cut short because the budget was held by unanswered
    /// messages: the next answer re-plans.
    owed: bool,
    /// Answers come in a row ([`FlowControl::hold_replans`]): the plan an answer owes waits
    /// for the last of them.
    holding: bool,
    /// An answer owed a plan while holding.
    replan_held: bool,
    /// When a low-RDY turn last ended for its length (not idleness): turns end one at a
    /// time, a turn's length divided by the rotation's seats apart (see
    /// [`FlowControl::turn_shape`]), so they stay staggered.
    last_turn_end: Option<Instant>,
    /// How many turns the rotation has granted: the next turn's ticket is one more (see
    /// [`Slot::ticket`]).
    tickets: u64,
    /// How long a busy low-RDY turn takes per message (handler and round trip), from the
    /// intervals between consecutive messages of a turn (following a faster one at once, a
    /// slower one by a sixteenth per sample): what a turn's share of messages is counted
    /// from.
    pace: Option<Duration>,
    /// The last plan over every connection was the low-RDY rotation (more connections than
    /// max_in_flight, no backoff): while that holds, turns end and start one connection at a
    /// time ([`FlowControl::rotate`], [`FlowControl::fill`]), with no look at the others.
    low_mode: bool,
    /// More messages are unanswered than max_in_flight (after it was lowered): answers lower
    /// RDY before they go out (see `before_answer`).
    over_budget: bool,
    /// The last plan cut a raise because what is committed filled max_in_flight: any
    /// answer may make room.
    cut_by_full: bool,
    /// The last plan was made with max_in_flight filled by what is committed (so every RDY
    /// is at most its connection's unanswered messages).
    full_at_plan: bool,
    /// E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED burst: (start of the window, count).
    answer_failures: Option<(Instant, u32)>,
    /// The backoff level (0 = full speed).
    backoff_level: u32,
    /// The connection holding RDY 1 while backing off, between windows.
    probe: Option<ConnId>,
}

/// What a message's arrival means for the RDY plan ([`FlowControl::on_message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AfterMessage {
    /// It was the first since the connection became ready: its bootstrap is over.
    pub(super) bootstrap_over: bool,
    /// The connection's low-RDY turn is over: it gives its RDY up now.
    pub(super) turn_over: bool,
}

impl AfterMessage {
    /// Either calls for a re-plan.
    pub(super) fn replan(self) -> bool {
        self.bootstrap_over || self.turn_over
    }
}

impl FlowControl {
    pub(super) fn new(limit: u32) -> FlowControl {
        FlowControl {
            limit,
            rr_offset: 0,
            owed: false,
            holding: false,
            replan_held: false,
            last_turn_end: None,
            tickets: 0,
            pace: None,
            low_mode: false,
            over_budget: false,
            cut_by_full: false,
            full_at_plan: false,
            answer_failures: None,
            backoff_level: 0,
            probe: None,
        }
    }

    pub(super) fn backoff_level(&self) -> u32 {
        self.backoff_level
    }

    /// Changes the in-flight limit in force and re-plans.
    pub(super) fn set_limit(&mut self, now: Instant, limit: u32, sh: &mut Shared) {
        self.limit = limit;
        self.replan(now, false, sh);
    }

    /// `id` is closing or gone: it is no longer the backoff probe.
    pub(super) fn forget(&mut self, id: ConnId) {
        if self.probe == Some(id) {
            self.probe = None;
        }
    }

    /// Connection `id` finished its handshake: it is bootstrapped with RDY 1 (until its first
    /// message or `rdy_redistribute_interval`) and joins the rotation's line with the ticket
    /// of the first in line, or with nobody in line (every connection holding RDY: the
    /// rotation is not running) the latest ticket, so it neither waits for nor overtakes a
    /// whole round. The caller re-plans.
    pub(super) fn connection_ready(
        &self,
        now: Instant,
        id: ConnId,
        output_buffer_timeout: i64,
        sh: &mut Shared,
    ) {
        // The line as it is, without this connection (not ready yet, so not in it).
        sh.slots.sync();
        let first = sh
            .slots
            .ordered()
            .next()
            .map_or(self.tickets, |((ticket, _, _), _)| ticket);
        let salt = sh.rng.next_u64();
        let idle_cap = sh.config.low_rdy_idle_timeout;
        let bootstrap = later(now, sh.config.rdy_redistribute_interval);
        let Some(slot) = sh.slots.get_mut(id) else {
            return;
        };
        let buffered =
            u64::try_from(output_buffer_timeout).map_or(Duration::ZERO, Duration::from_millis);
        let handshake = now.saturating_duration_since(slot.connected_at.unwrap_or(now));
        slot.settle = buffered.saturating_add(handshake).min(MAX_SETTLE);
        slot.handshake = handshake.min(MAX_SETTLE);
        slot.idle_wait = idle_timeout(slot.handshake, idle_cap);
        slot.salt = salt;
        slot.ready_at = Some(now);
        slot.ticket = first;
        slot.fresh_until = Some(bootstrap);
    }

    /// A message arrived on `slot`'s connection at `now`: its RDY count and transit are
    /// updated, the pace of busy turns is sampled, and a low-RDY turn that has delivered its
    /// share ends here. Says whether that calls for a re-plan.
    pub(super) fn on_message(&mut self, now: Instant, slot: &mut Slot) -> AfterMessage {
        slot.received_since_rdy = slot.received_since_rdy.saturating_add(1);
        // One of the messages that may have been on the wire arrived.
        slot.transit = slot.transit.saturating_sub(1);
        // Its nsqd has messages: its next turn counts as a whole one.
        slot.idle_last = false;
        if slot.turn_until.is_some() {
            if let Some(last) = slot.turn_msg_at {
                let sample = now.saturating_duration_since(last).min(MAX_PACE_SAMPLE);
                // Quick down, slow up: a share counted from a pace slower than the usual
                // one (after slow handlers, say) would end turns after a message or two
                // while few turns bring samples to correct it; one counted from a faster
                // pace only leaves the turn to end at its length.
                self.pace = Some(match self.pace {
                    Some(p) if sample < p => sample,
                    Some(p) => p.saturating_mul(15).saturating_add(sample) / 16,
                    None => sample,
                });
            }
            if slot.turn_quota > 0 {
                slot.turn_quota -= 1;
                if slot.turn_quota == 0 {
                    // Its share is delivered and others wait: the turn ends at this message
                    // (it gives RDY up before the answer goes out).
                    slot.turn_until = None;
                    slot.yield_pending = true;
                }
            }
        }
        if slot.holds_turn() {
            slot.turn_msg_at = Some(now);
        }
        AfterMessage {
            bootstrap_over: slot.fresh_until.take().is_some(),
            turn_over: slot.yield_pending,
        }
    }

    /// After a FIN/REQ on `id`: refill its RDY if the remaining count ran low, hand out the
    /// share the answer freed if a raise is owed. The caller drains the connection.
    pub(super) fn after_answer(&mut self, now: Instant, id: ConnId, sh: &mut Shared) {
        // Did the answer free budget? A connection reserves max(RDY, committed): only an
        // answer that brought committed down from above its RDY frees a share, unless the
        // last plan was cut because everything committed filled max_in_flight (then every
        // answer counts). Re-planning otherwise would find nothing to grant, at the price of
        // a look at every connection.
        let mut freed = self.cut_by_full || self.over_budget;
        if let Some(slot) = sh.slots.get_mut(id) {
            freed |= slot.committed() >= u64::from(slot.rdy());
            slot.answered_at = Some(now);
            if slot.is_ready() && !sh.closing {
                let rdy = slot.rdy();
                if policy::needs_refill(rdy, slot.received_since_rdy) {
                    if let Some(c) = slot.conn.as_mut() {
                        if c.set_rdy(now, rdy).is_ok() {
                            slot.received_since_rdy = 0;
                        }
                    }
                }
            }
        }
        if self.owed && freed {
            // This connection's bytes (a lowered RDY, the answer) go out before any raise
            // the re-plan queues elsewhere.
            sh.queue_transmit(id);
            if self.holding {
                self.replan_held = true;
            } else {
                self.replan_if_owed(now, sh);
            }
        }
    }

    /// Answers come in a row: the plan an answer owes (a look at every connection) is made
    /// once, by [`release_replans`](Self::release_replans), instead of after each answer.
    pub(super) fn hold_replans(&mut self) {
        self.holding = true;
    }

    /// The last answer of a row: the plan one of them owed, if any, now.
    pub(super) fn release_replans(&mut self, now: Instant, sh: &mut Shared) {
        self.holding = false;
        if std::mem::take(&mut self.replan_held) {
            self.replan_if_owed(now, sh);
        }
    }

    /// Messages arrived (or were answered). If what is committed now fills max_in_flight
    /// while a RDY somewhere is above its connection's committed messages, that RDY would let
    /// in more than max_in_flight (the arrivals were on the wire under a RDY lowered since,
    /// or came back on a refill): plan again, which caps every RDY at what its connection
    /// holds. The running sums make the check cheap.
    pub(super) fn after_deliveries(&mut self, now: Instant, sh: &mut Shared) {
        if sh.closing {
            return;
        }
        let (committed, reserved) = sh.slots.budget_totals();
        let committed = committed + sh.ghost_shares;
        // Room left open somewhere (a RDY above its connection's committed messages) while
        // the committed messages alone fill max_in_flight: close it.
        if committed >= u64::from(self.limit) && reserved > committed - sh.ghost_shares {
            self.replan(now, false, sh);
        }
    }

    /// A share of max_in_flight was freed (an answer, an expiry): if a raise is waiting for
    /// budget, plan again.
    pub(super) fn replan_if_owed(&mut self, now: Instant, sh: &mut Shared) {
        if self.owed && !sh.closing {
            self.rebalance(now, false, sh);
        }
    }

    /// The flow-control deadlines due at `now`: the end of a backoff window, bootstraps and
    /// settle times of the connections in `due` (those with a deadline due), the ends of
    /// their low-RDY turns, and the next redistribution.
    pub(super) fn handle_timeout(&mut self, now: Instant, due: &[ConnId], sh: &mut Shared) {
        if sh.timers.is_expired(Deadline::Backoff, now) {
            sh.timers.stop(Deadline::Backoff);
            self.probe = None;
            self.replan(now, false, sh);
        }
        let mut bootstrapped = false;
        let mut settled = false;
        let mut turns = sh.take_ids();
        for &id in due {
            let Some(slot) = sh.slots.get(id) else {
                continue;
            };
            let fresh = slot.fresh_until.is_some_and(|t| t <= now);
            let settles = slot.transit_until.is_some_and(|t| t <= now);
            if slot.holds_turn() {
                turns.push(id);
            }
            if !(fresh || settles) {
                continue;
            }
            let Some(slot) = sh.slots.get_mut(id) else {
                continue;
            };
            if fresh {
                slot.fresh_until = None;
                bootstrapped = true;
            }
            if settles {
                slot.transit_until = None;
                slot.transit = 0;
                settled = true;
            }
        }
        let redistribute = sh.timers.is_expired(Deadline::Redistribute, now);
        if redistribute {
            sh.timers.stop(Deadline::Redistribute);
        }
        if self.rotating(sh) {
            // Turns end and start one connection at a time.
            if !turns.is_empty() || redistribute || bootstrapped || settled {
                self.rotate(now, &turns, sh);
            }
        } else if redistribute || !turns.is_empty() {
            // Holders of turns left from a rotation that no longer applies are planned again
            // with the others.
            self.rebalance(now, redistribute, sh);
        } else if bootstrapped {
            self.replan_soon(now, sh);
        } else if settled {
            self.replan_if_owed(now, sh);
        }
        sh.give_ids(turns);
    }

    /// A message arrived on `id` and [`FlowControl::on_message`] says it calls for a re-plan.
    pub(super) fn after_message(
        &mut self,
        now: Instant,
        id: ConnId,
        after: AfterMessage,
        sh: &mut Shared,
    ) {
        if self.rotating(sh) {
            // Its turn ended at this message (or its bootstrap did, which the rotation
            // does not use): it gives RDY up, and the turn passes on.
            self.rotate(now, &[id], sh);
        } else if after.turn_over {
            self.rebalance(now, true, sh);
        } else {
            // Its bootstrap is over: it gets its full share.
            self.replan_soon(now, sh);
        }
    }

    /// A connection became ready, or its bootstrap ended: a plan is due. With many
    /// connections, each arriving or ending its bootstrap at its own instant (1,000 nsqd at
    /// start-up: a plan over every connection for each, O(connections²)), the plans of the
    /// next [`COALESCE`] are one; with few, or during the rotation, it is made now.
    pub(super) fn replan_soon(&mut self, now: Instant, sh: &mut Shared) {
        if self.rotating(sh) || sh.closing || sh.slots.ready_counts().0 <= COALESCE_ABOVE {
            self.rebalance(now, false, sh);
            return;
        }
        let at = later(now, COALESCE);
        if sh.timers.get(Deadline::Redistribute).is_none_or(|t| t > at) {
            sh.timers.set(Deadline::Redistribute, at);
        }
    }

    /// E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED mean answers arrived after nsqd had
    /// already timed the messages out: the handler is slower than msg_timeout. A burst of
    /// [`ANSWER_FAILURE_BURST`] of them within [`ANSWER_FAILURE_WINDOW`] counts as one
    /// handler failure for backoff, so a consumer that cannot keep up slows its intake.
    pub(super) fn on_answer_failed(
        &mut self,
        now: Instant,
        id: ConnId,
        error: &ServerError,
        sh: &mut Shared,
    ) {
        if !matches!(
            error.code(),
            ErrorCode::FinFailed | ErrorCode::ReqFailed | ErrorCode::TouchFailed
        ) {
            return;
        }
        let (start, count) = match self.answer_failures {
            Some((start, count))
                if now.saturating_duration_since(start) < ANSWER_FAILURE_WINDOW =>
            {
                (start, count.saturating_add(1))
            }
            _ => (now, 1),
        };
        self.answer_failures = Some((start, count));
        if count == ANSWER_FAILURE_BURST {
            tracing::warn!(
                conn = %id,
                nsqd = sh.slots.get(id).map_or("", |s| s.addr.as_str()),
                count,
                window = ?ANSWER_FAILURE_WINDOW,
                "answers rejected by nsqd (messages already timed out): the handler is slower \
                 than msg_timeout; backing off"
            );
            self.on_failure(now, sh);
        }
    }

    fn backoff_max_level(sh: &Shared) -> u32 {
        policy::max_backoff_level(sh.config.backoff_multiplier, sh.config.max_backoff_duration)
            .max(1)
    }

    pub(super) fn on_success(&mut self, now: Instant, sh: &mut Shared) {
        if !sh.config.backoff_enabled
            || sh.timers.is_set(Deadline::Backoff)
            || self.backoff_level == 0
        {
            return;
        }
        self.backoff_level -= 1;
        if self.backoff_level == 0 {
            self.probe = None;
            tracing::info!("backoff over: full RDY restored");
            self.rebalance(now, false, sh);
        } else {
            let window = self.start_window(now, sh);
            tracing::debug!(level = self.backoff_level, ?window, "backing off less");
        }
    }

    pub(super) fn on_failure(&mut self, now: Instant, sh: &mut Shared) {
        if !sh.config.backoff_enabled || sh.timers.is_set(Deadline::Backoff) || sh.closing {
            return;
        }
        self.backoff_level = (self.backoff_level + 1).min(Self::backoff_max_level(sh));
        let window = self.start_window(now, sh);
        // go-nsq says it at WARN too: messages wait meanwhile, which a program should see.
        tracing::warn!(
            level = self.backoff_level,
            ?window,
            "a message failed: backing off (RDY 0 everywhere, then RDY 1 to test the water)"
        );
    }

    /// Starts a backoff window at the current level and returns its length.
    fn start_window(&mut self, now: Instant, sh: &mut Shared) -> Duration {
        let d = policy::backoff_duration(
            sh.config.backoff_strategy,
            sh.config.backoff_multiplier,
            self.backoff_level,
            sh.config.max_backoff_duration,
            &mut sh.rng,
        );
        sh.timers.set(Deadline::Backoff, later(now, d));
        self.probe = None;
        self.rebalance(now, false, sh);
        d
    }

    /// Re-plans RDY after a change (an answer freed budget, a connection came or went, a
    /// bootstrap ended, a redistribution is due). While the low-RDY rotation runs and still
    /// applies, that is [`FlowControl::fill`] (the free shares go to the next in line),
    /// otherwise a plan over every connection ([`FlowControl::replan`]).
    pub(super) fn rebalance(&mut self, now: Instant, redistribute: bool, sh: &mut Shared) {
        if self.rotating(sh) {
            self.fill(now, sh);
        } else {
            self.replan(now, redistribute, sh);
        }
    }

    /// Before an answer to message `id` on `conn` goes out: while more messages are
    /// unanswered than `max_in_flight` allows (it was lowered, or RDY moved), an answer must
    /// not open room for a delivery, so RDY on `conn` is lowered first, on the wire ahead of
    /// the FIN/REQ.
    pub(super) fn before_answer(
        &mut self,
        now: Instant,
        conn: ConnId,
        id: &MessageId,
        sh: &mut Shared,
    ) {
        if !self.over_budget {
            return;
        }
        let committed = sh.slots.budget_totals().0 + sh.ghost_shares;
        if committed <= u64::from(self.limit) {
            return;
        }
        let Some(slot) = sh.slots.get_mut(conn) else {
            return;
        };
        let rdy = slot.rdy();
        let Some(c) = slot.conn.as_ref() else {
            return;
        };
        let f = c.in_flight();
        if !c.is_in_flight(id) || rdy == 0 || (rdy as usize) < f {
            return;
        }
        let lower = u32::try_from(f - 1).unwrap_or(0).min(rdy);
        slot.lower_rdy(now, conn, lower);
    }
}

/// How long a RDY holder with nothing in flight waits for a message before it counts as
/// idle (`Slot::idle_wait`): `low_rdy_idle_timeout`, or less on a connection whose round
/// trip is short. A message nsqd has ready arrives one round trip after the RDY; waiting
/// twice its handshake (four round trips), at least [`MIN_IDLE`], tells an nsqd with
/// nothing to send, and the rotation passes on. With many more connections than
/// `max_in_flight`, the idle turns are most of a rotation's length, so this is how long
/// an nsqd waits for its turn.
pub(super) fn idle_timeout(handshake: Duration, cap: Duration) -> Duration {
    handshake.saturating_mul(2).max(MIN_IDLE).min(cap)
}
