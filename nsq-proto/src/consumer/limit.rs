//! The in-flight limit ([`InFlightLimit`]): how many messages the application may hold at
//! once. In the static mode it is `max_in_flight`; in the adaptive mode
//! ([`InFlightMode::Adaptive`]) the controller of `limit/adaptive.rs` finds it between
//! `min_in_flight` and `max_in_flight`, which is then its ceiling. The consumer asks this one
//! type, in either mode, for the limit in force ([`InFlightLimit::limit`]), the ceiling
//! ([`InFlightLimit::max_in_flight`]) and how many messages may be handed out now
//! ([`InFlightLimit::hand_out_bound`]), and feeds it every answer and expiry.

mod adaptive;

use super::config::{ConsumerConfig, InFlightMode};
use crate::deadline::later;
use crate::rng::Rng;
use adaptive::Adaptive;
pub(super) use adaptive::Change;
use std::time::{Duration, Instant};

/// How long after the adaptive limit went down messages already on the wire are still handed
/// out up to the limit before (a few round trips and nsqd's output buffer timeout).
pub const GRACE: Duration = Duration::from_secs(1);

/// The limit in force and its ceiling, static or adaptive (see the module docs).
#[derive(Debug)]
pub(super) struct InFlightLimit {
    /// `max_in_flight`: the limit itself in the static mode, the ceiling in the adaptive one.
    max_in_flight: u32,
    /// The controller, in the adaptive mode.
    adaptive: Option<Adaptive>,
    /// After the limit went down: the limit before, until this instant. Messages nsqd wrote
    /// under the RDY of the higher limit (on the wire when RDY went down) are still handed
    /// out up to it, rather than sent back to the end of nsqd's queue; the lowered RDY lets
    /// no new ones come.
    grace: Option<(u32, Instant)>,
}

impl InFlightLimit {
    /// The limit `config` asks for. The adaptive controller's jitter draws from a generator
    /// forked from `rng` (in the adaptive mode only, so the static mode's draws are as they
    /// were).
    pub(super) fn new(config: &ConsumerConfig, rng: &mut Rng) -> InFlightLimit {
        let adaptive = (config.max_in_flight_mode == InFlightMode::Adaptive)
            .then(|| Adaptive::new(config.min_in_flight, config.max_in_flight, rng.fork()));
        InFlightLimit {
            max_in_flight: config.max_in_flight,
            adaptive,
            grace: None,
        }
    }

    /// The limit in force: `max_in_flight`, or the adaptive limit (between `min_in_flight`
    /// and `max_in_flight`).
    #[inline]
    pub(super) fn limit(&self) -> u32 {
        self.adaptive
            .as_ref()
            .map_or(self.max_in_flight, Adaptive::limit)
    }

    /// `max_in_flight`: the limit, or the adaptive limit's ceiling.
    #[inline]
    pub(super) fn max_in_flight(&self) -> u32 {
        self.max_in_flight
    }

    /// The handling latency the adaptive limit is measured against, once measured.
    pub(super) fn uncongested_latency(&self) -> Option<Duration> {
        self.adaptive.as_ref().and_then(Adaptive::baseline)
    }

    /// Whether the limit learns from handling latencies (the adaptive mode): the consumer
    /// then looks up when each answered message was handed out.
    #[inline]
    pub(super) fn measures_latency(&self) -> bool {
        self.adaptive.is_some()
    }

    /// `max_in_flight` changed; returns the limit in force (in the adaptive mode it stays
    /// where it was if it is below the new ceiling).
    pub(super) fn set_max_in_flight(&mut self, now: Instant, max_in_flight: u32) -> u32 {
        self.max_in_flight = max_in_flight;
        if let Some(a) = self.adaptive.as_mut() {
            a.set_ceiling(now, max_in_flight);
        }
        self.limit()
    }

    /// The most messages the application may hold when one more is handed out: the limit,
    /// or for a while after it went down, the limit before (see `grace`), never above
    /// `max_in_flight`.
    pub(super) fn hand_out_bound(&self, now: Instant) -> u32 {
        let grace = self
            .grace
            .filter(|g| now < g.1)
            .map_or(0, |g| g.0.min(self.max_in_flight));
        self.limit().max(grace)
    }

    /// A connection's handshake took `handshake` (a few round trips to nsqd).
    pub(super) fn note_handshake(&mut self, handshake: Duration) {
        if let Some(a) = self.adaptive.as_mut() {
            a.note_handshake(handshake);
        }
    }

    /// A message handed out at `handed` was answered at `now` (`ok`: finished; otherwise
    /// requeued) while the application held `held` messages (this one included). `measuring`
    /// is false while the consumer backs off or closes: the adaptive limit then holds still
    /// and measures nothing. Returns the change of the limit in force, if any.
    pub(super) fn on_answer(
        &mut self,
        now: Instant,
        handed: Instant,
        held: u64,
        ok: bool,
        measuring: bool,
    ) -> Option<Change> {
        let before = self.limit();
        let a = self.adaptive.as_mut()?;
        if !measuring {
            a.hold();
            return None;
        }
        a.resume(now);
        let change = a.on_answer(now, handed, held, ok)?;
        self.note_change(now, before, change);
        Some(change)
    }

    /// A message expired (nsqd timed it out while the application held it). Returns the
    /// change of the limit in force, if any.
    pub(super) fn on_expired(&mut self, now: Instant) -> Option<Change> {
        let before = self.limit();
        let change = self.adaptive.as_mut()?.on_expired(now)?;
        self.note_change(now, before, change);
        Some(change)
    }

    /// The limit moved from `before`: a fall opens (or extends) the grace.
    fn note_change(&mut self, now: Instant, before: u32, change: Change) {
        if change.limit < before {
            let bound = self
                .grace
                .filter(|g| now < g.1)
                .map_or(before, |g| g.0.max(before));
            self.grace = Some((bound, later(now, GRACE)));
        }
    }
}
