//! Faults, drawn from the seed: what happens to the world during a run, and when.

use std::time::Duration;

use super::SimConfig;
use super::rng::Rng;

/// One fault. Those with a duration heal by themselves at `at + for_`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Every connection to the nsqd is reset (both sides see it at once; data in transit is
    /// lost).
    Reset {
        /// Which nsqd.
        nsqd: usize,
    },
    /// Every connection to the nsqd goes silent (half-open): nothing arrives either way until
    /// the fault heals, then everything held arrives in order (TCP retransmits), unless a
    /// side gave up on the connection first.
    HalfOpen {
        /// Which nsqd.
        nsqd: usize,
        /// For how long.
        for_: Duration,
    },
    /// The nsqd restarts gracefully: connections close, in-flight messages go back to the
    /// queue, it refuses connections for `down`, then comes back with its messages.
    Restart {
        /// Which nsqd.
        nsqd: usize,
        /// How long it is down.
        down: Duration,
    },
    /// The nsqd processes what clients send late (FINs among them), so for a moment it sees
    /// more in flight than the consumer's limit.
    SlowAnswers {
        /// Which nsqd.
        nsqd: usize,
        /// Extra delay on what it receives.
        extra: Duration,
        /// For how long.
        for_: Duration,
    },
    /// A lookupd does not answer (connections refused); several in a row make it flap.
    LookupdDown {
        /// Which lookupd.
        lookupd: usize,
        /// For how long.
        for_: Duration,
    },
    /// The nsqd leaves the topic (no lookupd lists it) and joins again after `for_`. From
    /// `at` 0, it is an nsqd that joins late.
    Leave {
        /// Which nsqd.
        nsqd: usize,
        /// For how long.
        for_: Duration,
    },
    /// Handlers take seconds, some longer than nsqd's msg_timeout.
    SlowHandlers {
        /// For how long.
        for_: Duration,
    },
    /// Handlers fail (the message is requeued with backoff).
    FailingHandlers {
        /// For how long.
        for_: Duration,
    },
    /// Handlers panic (the client layer catches it: requeued with backoff, like a failure,
    /// and counted apart).
    PanickingHandlers {
        /// For how long.
        for_: Duration,
    },
    /// `set_max_in_flight(to)`, restored after `for_`.
    MaxInFlight {
        /// The new limit (0 pauses).
        to: u32,
        /// For how long.
        for_: Duration,
    },
    /// A graceful stop of the consumer; a new consumer takes over once it has closed.
    Stop,
}

/// A fault and when it starts (virtual time since the run began).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// When.
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
}

impl Fault {
    /// When it heals (its start for the instant ones).
    pub fn end(&self) -> Duration {
        self.at
            + match self.kind {
                FaultKind::HalfOpen { for_, .. }
                | FaultKind::SlowAnswers { for_, .. }
                | FaultKind::LookupdDown { for_, .. }
                | FaultKind::Leave { for_, .. }
                | FaultKind::SlowHandlers { for_ }
                | FaultKind::FailingHandlers { for_ }
                | FaultKind::PanickingHandlers { for_ }
                | FaultKind::MaxInFlight { for_, .. } => for_,
                FaultKind::Restart { down, .. } => down,
                FaultKind::Reset { .. } | FaultKind::Stop => Duration::ZERO,
            }
    }
}

fn ms(r: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(r.range(lo, hi))
}

/// The kinds a batch world draws in turn (by their numbers in [`schedule`]): graceful stops,
/// max_in_flight changes, lookupd outages, nsqd leaving the topic, resets, restarts. Not the
/// silent or slowed links (a TOUCH that cannot arrive lets a message time out, whatever the
/// consumer does) nor the handler faults (the batch application has its own failures).
const BATCH_KINDS: [u64; 6] = [10, 9, 4, 5, 0, 2];

/// The faults of a run: `config.faults` of them, every kind drawn in turn (in a batch world,
/// those of `BATCH_KINDS`), all healed before the fault phase ends.
pub fn schedule(config: &SimConfig) -> Vec<Fault> {
    let mut r = Rng::new(config.seed, 1);
    let phase = config.fault_phase.as_millis() as u64;
    let n = config.nsqd.max(1) as u64;
    let l = config.lookupds.max(1) as u64;
    let mut out = Vec::new();
    // Some nsqd join the topic late (in a batch world, at most a quarter of its faults).
    let most = if config.batch.is_some() {
        config.faults / 4
    } else {
        config.faults
    };
    let late = (config.nsqd / 20).min(most);
    for _ in 0..late {
        let for_ = ms(&mut r, 1_000, phase / 2);
        out.push(Fault {
            at: Duration::ZERO,
            kind: FaultKind::Leave {
                nsqd: r.below(n) as usize,
                for_,
            },
        });
    }
    for k in 0..config.faults.saturating_sub(late) {
        let at_ms = r.range(500, phase.saturating_sub(20_000).max(600));
        let at = Duration::from_millis(at_ms);
        let room = phase.saturating_sub(at_ms).max(1);
        let nsqd = r.below(n) as usize;
        let kind_no = if config.batch.is_some() {
            BATCH_KINDS[k % BATCH_KINDS.len()]
        } else {
            k as u64 % 12
        };
        let kind = match kind_no {
            1 => FaultKind::HalfOpen {
                nsqd,
                // Some outlast two heartbeats (the connection is given up), most do not.
                for_: {
                    let hi = if r.chance(0.2) { 75_000 } else { 20_000 };
                    ms(&mut r, 200, hi.min(room))
                },
            },
            2 => FaultKind::Restart {
                nsqd,
                down: ms(&mut r, 100, 10_000.min(room)),
            },
            3 => FaultKind::SlowAnswers {
                nsqd,
                extra: ms(&mut r, 50, 3_000),
                for_: ms(&mut r, 500, 10_000.min(room)),
            },
            4 => {
                // Flapping: a few short outages in a row.
                let lookupd = r.below(l) as usize;
                let mut t = at_ms;
                for _ in 0..r.range(1, 4) {
                    let for_ = r.range(200, 3_000);
                    if t + for_ >= phase {
                        break;
                    }
                    out.push(Fault {
                        at: Duration::from_millis(t),
                        kind: FaultKind::LookupdDown {
                            lookupd,
                            for_: Duration::from_millis(for_),
                        },
                    });
                    t += for_ + r.range(100, 2_000);
                }
                continue;
            }
            5 => FaultKind::Leave {
                nsqd,
                for_: ms(&mut r, 1_000, 30_000.min(room)),
            },
            6 => FaultKind::SlowHandlers {
                for_: ms(&mut r, 1_000, 10_000.min(room)),
            },
            7 => FaultKind::FailingHandlers {
                for_: ms(&mut r, 500, 5_000.min(room)),
            },
            8 => FaultKind::PanickingHandlers {
                for_: ms(&mut r, 200, 3_000.min(room)),
            },
            9 => FaultKind::MaxInFlight {
                to: match r.below(3) {
                    0 => 0,
                    1 => (config.max_in_flight / 4).max(1),
                    _ => config.max_in_flight.saturating_mul(2),
                },
                for_: ms(&mut r, 500, 10_000.min(room)),
            },
            10 => FaultKind::Stop,
            _ => FaultKind::Reset { nsqd },
        };
        let f = Fault { at, kind };
        if f.end() <= config.fault_phase {
            out.push(f);
        }
    }
    out.sort_by_key(|f| f.at);
    out
}
