//! Pure consumer policies: backoff durations, the reconnect schedule, requeue delays and the
//! RDY planner (crate-private: the consumer's flow control is its only user). No state machine
//! here, only arithmetic, so each piece is tested on its own.

use crate::rng::Rng;
use std::time::Duration;

/// How the backoff duration grows with the backoff level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackoffStrategy {
    /// `multiplier x 2^level`, capped (go-nsq's `ExponentialStrategy`).
    #[default]
    Exponential,
    /// A uniformly random duration in `[0, multiplier x 2^level]`, capped (go-nsq's
    /// `FullJitterStrategy`): spreads many consumers' retries apart.
    FullJitter,
}

/// `multiplier x 2^level`, saturating, capped at `max`.
pub fn exponential_backoff(multiplier: Duration, level: u32, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(level.min(31)).unwrap_or(u32::MAX);
    multiplier
        .checked_mul(factor)
        .unwrap_or(Duration::MAX)
        .min(max)
}

/// The backoff window for `level` under `strategy`.
pub fn backoff_duration(
    strategy: BackoffStrategy,
    multiplier: Duration,
    level: u32,
    max: Duration,
    rng: &mut Rng,
) -> Duration {
    let ceiling = exponential_backoff(multiplier, level, max);
    match strategy {
        BackoffStrategy::Exponential => ceiling,
        BackoffStrategy::FullJitter => rng.duration_up_to(ceiling),
    }
}

/// The highest useful backoff level: the first level whose exponential duration reaches `max`.
/// Raising the level further would not lengthen the window, only the way back to full speed.
pub fn max_backoff_level(multiplier: Duration, max: Duration) -> u32 {
    if multiplier.is_zero() {
        return 0;
    }
    (0..=31)
        .find(|&l| exponential_backoff(multiplier, l, Duration::MAX) >= max)
        .unwrap_or(31)
}

/// The default REQ delay when the handler names none: `attempts x default_delay`, capped at
/// `max_delay`.
pub fn requeue_delay(attempts: u16, default_delay: Duration, max_delay: Duration) -> Duration {
    default_delay
        .checked_mul(u32::from(attempts.max(1)))
        .unwrap_or(Duration::MAX)
        .min(max_delay)
}

/// Exponential reconnect delays with jitter, capped, reset after a healthy period.
///
/// The n-th consecutive failure waits a uniformly random duration in `[d/2, d]` where
/// `d = min(max, initial x 2^n)` ("equal jitter": never hammers, never synchronised).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconnectSchedule {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl ReconnectSchedule {
    /// A schedule starting at `initial` and doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> ReconnectSchedule {
        ReconnectSchedule {
            initial,
            max,
            failures: 0,
        }
    }

    /// Consecutive failures since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The delay before the next attempt; counts one more failure.
    pub(crate) fn next_delay(&mut self, rng: &mut Rng) -> Duration {
        let d = exponential_backoff(self.initial, self.failures, self.max.max(self.initial));
        self.failures = self.failures.saturating_add(1);
        let half = d / 2;
        half + rng.duration_up_to(d.saturating_sub(half))
    }

    /// Forgets past failures (after a connection stayed healthy long enough).
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// One connection as the RDY planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RdySlot {
    /// The server's max_rdy_count for this connection.
    pub(crate) max_rdy: u32,
    /// Messages it holds whatever its RDY (delivered and not answered yet): they keep a
    /// share of `max_in_flight` each, so a RDY up to them costs nothing more.
    pub(crate) held: u32,
}

/// Splits `max_in_flight` over connections: each connection's share is `max(held, RDY)`, and
/// every RDY is raised to one level (never above its `max_rdy`), the highest the shares allow;
/// what is left is one more RDY each for as many as it covers, round-robin from `offset`. With
/// nothing held that is `max_in_flight / n` each (at least one when `max_in_flight >= n`) and
/// the remainder round-robin, so the total reaches `max_in_flight` whenever the caps allow.
/// What connections hold beyond the level is theirs until answered, and the others share what
/// remains: a connection whose handlers hold many messages does not leave another at RDY 0.
///
/// When `max_in_flight < n` this is not the right tool (most connections must get 0): the
/// consumer's low-RDY mode handles it. Here every slot then gets at most 1 and the total is
/// still bounded by `max_in_flight`.
///
/// Invariants: `sum(max(held, result)) <= max_in_flight` (when `sum(held)` is, else every RDY
/// is 0), `result[i] <= slots[i].max_rdy`.
pub(crate) fn plan_rdy(max_in_flight: u32, slots: &[RdySlot], offset: usize) -> Vec<u32> {
    let n = slots.len();
    let mut out = vec![0u32; n];
    let budget = u64::from(max_in_flight);
    // The shares taken with every RDY at `level` (capped).
    let cost = |level: u32| -> u64 {
        slots
            .iter()
            .map(|s| u64::from(s.held.max(level.min(s.max_rdy))))
            .sum()
    };
    if n == 0 || max_in_flight == 0 || cost(0) > budget {
        return out;
    }
    // The highest level within the budget (the cost grows with the level).
    let (mut lo, mut hi) = (0u32, slots.iter().map(|s| s.max_rdy).max().unwrap_or(0));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if cost(mid) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut left = budget - cost(lo);
    for (o, s) in out.iter_mut().zip(slots) {
        *o = lo.min(s.max_rdy);
    }
    // One level more does not fit: the rest goes one each, round-robin, to connections for
    // which one more RDY takes a share (one pass places all of it).
    for k in 0..n {
        if left == 0 {
            break;
        }
        let i = (offset + k) % n;
        if out[i] < slots[i].max_rdy && out[i] >= slots[i].held {
            out[i] += 1;
            left -= 1;
        }
    }
    out
}

/// True when a connection's RDY should be re-sent ("refilled"): `remaining` (the last RDY minus
/// the messages received since it was sent) is <= 1 or under 25% of the last RDY.
pub fn needs_refill(last_rdy: u32, received_since: u32) -> bool {
    if last_rdy == 0 {
        return false;
    }
    let remaining = last_rdy.saturating_sub(received_since);
    remaining <= 1 || u64::from(remaining) * 4 < u64::from(last_rdy)
}

/// The starvation test of the client guide: in flight and at least 85% of the last RDY.
pub fn is_starved(in_flight: usize, last_rdy: u32) -> bool {
    in_flight > 0 && (in_flight as u64) * 100 >= u64::from(last_rdy) * 85
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn exponential() {
        assert_eq!(exponential_backoff(S, 0, S * 100), S);
        assert_eq!(exponential_backoff(S, 1, S * 100), S * 2);
        assert_eq!(exponential_backoff(S, 3, S * 100), S * 8);
        assert_eq!(exponential_backoff(S, 10, S * 100), S * 100);
        assert_eq!(exponential_backoff(S, 400, S * 100), S * 100);
        assert_eq!(exponential_backoff(Duration::MAX, 5, S), S);
        assert_eq!(max_backoff_level(S, S * 120), 7); // 128 s >= 120 s
        assert_eq!(max_backoff_level(S, S), 0);
        assert_eq!(max_backoff_level(Duration::ZERO, S), 0);
    }

    #[test]
    fn full_jitter_within_ceiling() {
        let mut rng = Rng::new(1);
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d = backoff_duration(BackoffStrategy::FullJitter, S, 3, S * 5, &mut rng);
            assert!(d <= S * 5);
            distinct.insert(d);
        }
        assert!(distinct.len() > 100);
        assert_eq!(
            backoff_duration(BackoffStrategy::Exponential, S, 2, S * 5, &mut rng),
            S * 4
        );
    }

    #[test]
    fn requeue_delays() {
        let d = Duration::from_secs(90);
        let max = Duration::from_secs(15 * 60);
        assert_eq!(requeue_delay(1, d, max), d);
        assert_eq!(requeue_delay(3, d, max), d * 3);
        assert_eq!(requeue_delay(11, d, max), max);
        assert_eq!(requeue_delay(0, d, max), d);
        assert_eq!(requeue_delay(u16::MAX, Duration::MAX, max), max);
    }

    #[test]
    fn reconnect_schedule() {
        let mut rng = Rng::new(3);
        let mut s = ReconnectSchedule::new(S, S * 30);
        let bounds = [1u64, 2, 4, 8, 16, 30, 30];
        for b in bounds {
            let d = s.next_delay(&mut rng);
            let hi = S * b as u32;
            assert!(
                d >= hi / 2 && d <= hi,
                "{d:?} not in [{:?}, {hi:?}]",
                hi / 2
            );
        }
        assert_eq!(s.failures(), 7);
        s.reset();
        assert!(s.next_delay(&mut rng) <= S);
    }

    fn slots(caps: &[u32]) -> Vec<RdySlot> {
        caps.iter()
            .map(|&max_rdy| RdySlot { max_rdy, held: 0 })
            .collect()
    }

    fn held(held: &[u32]) -> Vec<RdySlot> {
        held.iter()
            .map(|&held| RdySlot {
                max_rdy: 2500,
                held,
            })
            .collect()
    }

    #[test]
    fn plan_leaves_held_messages_their_shares() {
        // 10 connections at RDY 1 would need 10 shares; one holds 3, so the level is 0 for
        // none: 9 others at 1 and the holder at 1 take 3 + 9 = 12 > 10... so the level is 0
        // and the 7 shares left go one each, from the offset, to those holding nothing.
        assert_eq!(
            plan_rdy(10, &held(&[3, 0, 0, 0, 0, 0, 0, 0, 0, 0]), 0),
            vec![0, 1, 1, 1, 1, 1, 1, 1, 0, 0]
        );
        // 100 over 4, one holding 40: the others share 60.
        assert_eq!(
            plan_rdy(100, &held(&[40, 0, 0, 0]), 0),
            vec![20, 20, 20, 20]
        );
        // Held beyond the whole budget: nothing more for anyone.
        assert_eq!(plan_rdy(5, &held(&[3, 3]), 0), vec![0, 0]);
        // Held up to the level costs nothing more.
        assert_eq!(plan_rdy(10, &held(&[5, 5]), 0), vec![5, 5]);
    }

    #[test]
    fn plan_even_with_remainder() {
        assert_eq!(plan_rdy(10, &slots(&[2500; 3]), 0), vec![4, 3, 3]);
        assert_eq!(plan_rdy(10, &slots(&[2500; 3]), 1), vec![3, 4, 3]);
        assert_eq!(plan_rdy(2500, &slots(&[2500; 10]), 0), vec![250; 10]);
        assert_eq!(plan_rdy(3, &slots(&[2500; 3]), 0), vec![1, 1, 1]);
        assert_eq!(plan_rdy(0, &slots(&[2500; 3]), 0), vec![0, 0, 0]);
        assert!(plan_rdy(5, &[], 0).is_empty());
    }

    #[test]
    fn plan_respects_caps_and_refills_elsewhere() {
        assert_eq!(
            plan_rdy(100, &slots(&[10, 2500, 2500]), 0),
            vec![10, 45, 45]
        );
        assert_eq!(plan_rdy(10_000, &slots(&[2500, 2500]), 0), vec![2500, 2500]);
        assert_eq!(plan_rdy(7, &slots(&[1, 1, 100]), 2), vec![1, 1, 5]);
    }

    #[test]
    fn plan_invariants_exhaustive_small() {
        for m in 0..40u32 {
            for n in 1..6usize {
                for cap in [1u32, 2, 3, 7, 2500] {
                    let s = slots(&vec![cap; n]);
                    for off in 0..n {
                        let p = plan_rdy(m, &s, off);
                        let sum: u32 = p.iter().sum();
                        assert!(sum <= m);
                        assert!(p.iter().all(|&r| r <= cap));
                        let reachable = m.min(cap * n as u32);
                        assert_eq!(sum, reachable, "m={m} n={n} cap={cap}");
                        let (lo, hi) = (p.iter().min().unwrap(), p.iter().max().unwrap());
                        assert!(hi - lo <= 1 || *hi == cap, "uneven {p:?}");
                    }
                }
            }
        }
    }

    /// With messages held: the shares never exceed max_in_flight, the RDY of every
    /// connection holding less than the others' level is within one of it, and nothing that
    /// fits is left over.
    #[test]
    fn plan_invariants_with_held_messages() {
        let mut rng = crate::rng::Rng::new(3);
        for _ in 0..20_000 {
            let n = 1 + rng.index(6);
            let m = u32::try_from(rng.below(60)).unwrap();
            let s: Vec<RdySlot> = (0..n)
                .map(|_| RdySlot {
                    max_rdy: [1u32, 3, 2500][rng.index(3)],
                    held: u32::try_from(rng.below(12)).unwrap(),
                })
                .collect();
            let p = plan_rdy(m, &s, rng.index(n));
            let shares: u64 = s
                .iter()
                .zip(&p)
                .map(|(s, &r)| u64::from(s.held.max(r)))
                .sum();
            let held: u64 = s.iter().map(|s| u64::from(s.held)).sum();
            assert!(p.iter().zip(&s).all(|(&r, s)| r <= s.max_rdy));
            if held > u64::from(m) {
                assert!(p.iter().all(|&r| r == 0), "{s:?} {p:?}");
                continue;
            }
            assert!(shares <= u64::from(m), "m={m} {s:?} {p:?}");
            // Nothing that fits is left: any connection that could take one more RDY at the
            // price of one share would exceed max_in_flight.
            let open = s.iter().zip(&p).any(|(s, &r)| r < s.max_rdy && r >= s.held);
            assert!(shares == u64::from(m) || !open, "m={m} {s:?} {p:?}");
            // Even: no connection that holds nothing is two or more below another's RDY
            // unless capped.
            let top = p.iter().copied().max().unwrap_or(0);
            for (s, &r) in s.iter().zip(&p) {
                assert!(r + 1 >= top || r == s.max_rdy || s.held > r, "{s:?} {p:?}");
            }
        }
    }

    #[test]
    fn refill_rule() {
        assert!(!needs_refill(0, 0));
        assert!(!needs_refill(100, 10));
        assert!(!needs_refill(100, 75)); // 25 remaining: not under 25%
        assert!(needs_refill(100, 76));
        assert!(needs_refill(1, 0)); // remaining 1
        assert!(needs_refill(4, 3));
        assert!(!needs_refill(4, 2));
    }

    #[test]
    fn starvation() {
        assert!(!is_starved(0, 0));
        assert!(is_starved(1, 1));
        assert!(is_starved(85, 100));
        assert!(!is_starved(84, 100));
        assert!(is_starved(3, 0));
    }
}
