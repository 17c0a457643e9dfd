//! What the parts of a consumer share ([`Shared`]): the configuration, the random generator,
//! the connections, the timer table, whether it is closing, and the output queues in the
//! order the driver must see them.

use super::config::ConsumerConfig;
use super::events::ConsumerEvent;
use super::slots::{Slot, Slots};
use super::timers::TimerTable;
use crate::driver::{Action, ConnId};
use crate::frame::MessageId;
use crate::rng::Rng;
use bytes::Bytes;
use std::collections::{HashSet, VecDeque};

/// An action waiting in the output queue.
#[derive(Debug)]
enum Queued {
    Action(Action),
    /// The bytes a connection has queued, taken from it only when this is polled: every
    /// command queued on it until then (a wake-up's worth of FINs, say) leaves as one
    /// transmit, with no copy and, under TLS or compression, one record or chunk. Only ever
    /// the last entry of the queue: anything queued behind it freezes it into a `Transmit`
    /// first, so the order of the bytes across connections is the order they were queued in.
    Pending(ConnId),
}

/// The state every part of the consumer (flow control, discovery, the coordinator) reads or
/// writes: owned by the [`Consumer`](super::Consumer) and lent to its parts call by call.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: ConsumerConfig,
    /// Jitter and random choices, drawn in one sequence by every part.
    pub(super) rng: Rng,
    pub(super) slots: Slots<Slot>,
    pub(super) timers: TimerTable,
    /// `close` was called: no new connections, lookupd queries or RDY.
    pub(super) closing: bool,
    actions: VecDeque<Queued>,
    pub(super) events: VecDeque<ConsumerEvent>,
    /// Messages handed to the application that no connection counts any more (their
    /// connection was lost, or nsqd timed them out) and that the application has not
    /// answered yet: they still hold a share of max_in_flight until it does (see
    /// [`Consumer`](super::Consumer), "max_in_flight bounds messages in the application").
    pub(super) ghosts: HashSet<(ConnId, MessageId)>,
    /// How many of `ghosts` the application holds: the shares they keep (a lost
    /// connection's ids include none it did not hand out, short of a corner case; this
    /// counts what was handed out).
    pub(super) ghost_shares: u64,
    /// Messages handed to the application and not answered, over every connection (the sum
    /// of the slots' `handed`).
    pub(super) handed_total: u64,
    /// Spare id lists for the work of one call (due connections, turns ending, grants), so
    /// a timer or a turn of the rotation allocates nothing.
    spare_ids: Vec<Vec<ConnId>>,
}

impl Shared {
    pub(super) fn new(config: ConsumerConfig, seed: u64) -> Shared {
        Shared {
            config,
            rng: Rng::new(seed),
            slots: Slots::default(),
            timers: TimerTable::default(),
            closing: false,
            actions: VecDeque::new(),
            events: VecDeque::new(),
            ghosts: HashSet::new(),
            ghost_shares: 0,
            handed_total: 0,
            spare_ids: Vec::new(),
        }
    }

    /// An empty id list (from the spares if there is one).
    pub(super) fn take_ids(&mut self) -> Vec<ConnId> {
        self.spare_ids.pop().unwrap_or_default()
    }

    /// Gives an id list back to the spares (a few are kept).
    pub(super) fn give_ids(&mut self, mut ids: Vec<ConnId>) {
        if self.spare_ids.len() < 4 {
            ids.clear();
            self.spare_ids.push(ids);
        }
    }

    pub(super) fn push_action(&mut self, action: Action) {
        self.freeze_back();
        self.actions.push_back(Queued::Action(action));
    }

    /// Queues the connection's bytes for sending (see [`Queued::Pending`]).
    pub(super) fn queue_transmit(&mut self, id: ConnId) {
        let Some(c) = self.slots.get(id).and_then(|s| s.conn.as_ref()) else {
            return;
        };
        if !c.has_transmit() || matches!(self.actions.back(), Some(Queued::Pending(b)) if *b == id)
        {
            return;
        }
        self.freeze_back();
        self.actions.push_back(Queued::Pending(id));
    }

    /// Turns a `Pending` at the back of the queue into the bytes it stands for, so what is
    /// queued next goes after them.
    pub(super) fn freeze_back(&mut self) {
        if let Some(&Queued::Pending(conn)) = self.actions.back() {
            self.actions.pop_back();
            if let Some(data) = self.take_transmit(conn) {
                self.actions
                    .push_back(Queued::Action(Action::Transmit { conn, data }));
            }
        }
    }

    /// The next action for the driver, in order.
    pub(super) fn poll_action(&mut self) -> Option<Action> {
        loop {
            let Some(next) = self.actions.pop_front() else {
                // Drained: the connections changed since are indexed by deadline again, so
                // `poll_timeout` stays a look at the index's front.
                self.slots.sync();
                return None;
            };
            match next {
                Queued::Action(a) => return Some(a),
                Queued::Pending(conn) => {
                    if let Some(data) = self.take_transmit(conn) {
                        return Some(Action::Transmit { conn, data });
                    }
                }
            }
        }
    }

    /// Everything the connection has to send (`None` if nothing, or if it is gone).
    fn take_transmit(&mut self, conn: ConnId) -> Option<Bytes> {
        // One call returns everything the connection has (its buffer is split off whole).
        let c = self.slots.get_mut(conn)?.conn.as_mut()?;
        c.poll_transmit().filter(|data| !data.is_empty())
    }
}
