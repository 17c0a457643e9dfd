//! A simulated NSQ world in virtual time: many nsqd (the shared [`crate::model`]), nsqlookupd,
//! links with latency and bandwidth, faults drawn from a seed, and a sans-IO client under test
//! (through [`ClientFactory`]) whose every step is checked against the invariants of NSQ's
//! client duties.
//!
//! The world never reads a clock: time is an [`Instant`](std::time::Instant) taken once when a run starts plus
//! virtual offsets, so the same seed gives the same run ([`Report::trace_hash`]). The first
//! violated invariant stops the run; [`shrink`] then looks for a shorter fault schedule that
//! still fails.
//!
//! One world runs every simulation (the `world` module: its event loop, the network, the
//! nsqd, the clients under test, the application, the faults and the checks, each in a file
//! of its own): the faulty world of [`run`] and the modelled downstream of [`run_downstream`]
//! differ only in their setup and in the application under the consumer. A third
//! application gathers the messages into batches ([`BatchConfig`], [`SimConfig::batch`]).
//!
//! Invariants, checked after every step:
//! * the application never holds more than `max_in_flight` messages, and the RDY counts the
//!   consumer sent add up to at most `max_in_flight` (at most 1 while it backs off);
//! * at least once: every message an nsqd accepted is handed to the application until it is
//!   finished or given up, and at the end every nsqd is empty;
//! * no nsqd with messages and a subscribed connection waits longer than the starvation bound
//!   while the consumer has room (not backing off, not full, not paused);
//! * after a stop, every message the application holds is counted as a leftover, and nothing
//!   is handed out after `Closed`;
//! * every publish that got OK is in an nsqd; a publish error that says "not published" is in
//!   none;
//! * the consumer's state stays within its connections and `max_in_flight`;
//! * nothing panics.

mod batches;
mod client;
mod downstream;
mod faults;
mod noise;
mod rng;
mod world;

pub use batches::{BatchConfig, BatchEnd, BatchReport};
pub use client::{
    Act, Answer, ClientFactory, ConnRef, ConsumerNote, ConsumerSpec, Delivery, Footprint, Machine,
    PublishResult, SimConsumer, SimProducer,
};
pub use downstream::{
    DownstreamConfig, DownstreamReport, DownstreamService, DownstreamVerdict, NoiseVerdict,
    evaluate_downstream, evaluate_noise, run_downstream,
};
pub use faults::{Fault, FaultKind, schedule};
pub use noise::{ClientNoise, Noise, NoiseKind};
pub use rng::Rng;
pub use world::{Report, Violation, run, run_with_faults, shrink};

use std::time::Duration;

/// One run's settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Everything random comes from it.
    pub seed: u64,
    /// How many nsqd.
    pub nsqd: usize,
    /// How many nsqlookupd.
    pub lookupds: usize,
    /// The consumer's max_in_flight.
    pub max_in_flight: u32,
    /// The consumer's max_attempts.
    pub max_attempts: u16,
    /// Messages published straight into the nsqd (by other producers) during the fault
    /// phase.
    pub messages: usize,
    /// Messages published through the producer under test.
    pub producer_messages: usize,
    /// How many nsqd the producer under test publishes to.
    pub producer_nsqd: usize,
    /// Faults to draw (0: a run without faults).
    pub faults: usize,
    /// Virtual time during which messages are published and faults happen.
    pub fault_phase: Duration,
    /// Virtual time allowed after the fault phase to deliver everything.
    pub drain_limit: Duration,
    /// nsqd's msg_timeout (nsqd's default, 60 s).
    pub msg_timeout: Duration,
    /// The longest an nsqd with messages may wait while the consumer has room (`None`: the
    /// consumer's own `low_rdy_max_wait`, [`ClientFactory::low_rdy_max_wait`], 10 s by
    /// default), unless probing every nsqd for messages takes longer than half of it (see
    /// [`SimConfig::effective_starvation_bound`]).
    pub starvation_bound: Option<Duration>,
    /// A busy world: besides [`SimConfig::messages`], publishers keep every nsqd that is up
    /// holding messages during the fault phase (topped up to 20 ready whenever under 10), so
    /// every connection waiting for a low-RDY turn has messages to deliver.
    pub busy: bool,
    /// `Some(floor)`: the consumer's in-flight limit is adaptive, between `floor` and
    /// max_in_flight (the invariants then hold against the limit in force).
    pub adaptive: Option<u32>,
    /// `Some`: the application gathers messages into batches ([`BatchConfig`]) instead of
    /// handling each on its own; see [`SimConfig::with_batches`].
    pub batch: Option<BatchConfig>,
}

impl SimConfig {
    /// A run of `seed` with `nsqd` nsqd and `max_in_flight`, every fault kind, and as many
    /// messages as nsqd times 10 (at least 2,000).
    pub fn new(seed: u64, nsqd: usize, max_in_flight: u32) -> Self {
        Self {
            seed,
            nsqd: nsqd.max(1),
            lookupds: 2,
            max_in_flight,
            max_attempts: 5,
            messages: (nsqd * 10).max(2_000),
            producer_messages: 500,
            producer_nsqd: 3,
            faults: 24,
            fault_phase: Duration::from_secs(120),
            drain_limit: Duration::from_secs(900),
            msg_timeout: crate::model::NsqdOptions::default().msg_timeout,
            starvation_bound: None,
            busy: false,
            adaptive: None,
            batch: None,
        }
    }

    /// The batch world (issue 46): this run with `batch`'s application, nsqd's msg_timeout
    /// 2 s (batches that linger or are handled longer must be auto-touched), and 8 faults of
    /// the kinds that keep every link delivering (graceful stops, max_in_flight changes,
    /// lookupd outages, nsqd leaving the topic, resets and restarts: a message can time out
    /// only if the consumer fails to touch it). Besides the world's invariants, every step
    /// checks that no message times out on nsqd, that the consumer says it is full
    /// (`is_full`) whenever the application holds max_in_flight, that a failed batch raises
    /// the backoff level by one at most, and that a stopped consumer closes with nothing held.
    pub fn with_batches(mut self, batch: BatchConfig) -> Self {
        self.batch = Some(batch);
        self.msg_timeout = Duration::from_secs(2);
        self.faults = 8;
        self
    }

    /// The starvation bound the run checks: [`SimConfig::starvation_bound`] (`None`:
    /// `max_wait`, the consumer's `low_rdy_max_wait`), or, with more nsqd than
    /// max_in_flight, twice `probe_round` if that is longer. The report gives the
    /// worst wait measured, whatever the bound.
    ///
    /// `probe_round` is how long the consumer's low-RDY rotation takes to give every nsqd one
    /// turn when none has a message: the seat time of each nsqd's idle turn, summed and
    /// shared over max_in_flight seats. The consumer learns that an nsqd has messages only by
    /// giving it a turn (nsqd says nothing to a connection at RDY 0), an idle turn lasts its
    /// idle wait (twice the connection's handshake, at least 100 ms, at most
    /// `low_rdy_idle_timeout`, 1 s) and its RDY 0 then settles for a handshake, so no round
    /// can be shorter. The consumer sizes busy turns so a round takes half its
    /// `low_rdy_max_wait`, and when the idle turns alone take more, gives the busy turns as
    /// much seat time as the idle ones: a round of at most twice the probes. Turns
    /// themselves are not shorter than what a message needs (a turn delivers at least one),
    /// and the handlers here (up to 20 ms) with the round trips fit within the idle turn's
    /// floor, so the handlers' speed is covered by it.
    pub fn effective_starvation_bound(
        &self,
        max_wait: Duration,
        probe_round: Duration,
    ) -> Duration {
        let bound = self.starvation_bound.unwrap_or(max_wait);
        let m = u64::from(self.max_in_flight.max(1));
        let n = self.nsqd as u64;
        if n <= m {
            return bound;
        }
        bound.max(probe_round.saturating_mul(2))
    }
}
