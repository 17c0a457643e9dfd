//! End-to-end processing latency (publish to FIN) per channel, like nsqd's
//! `internal/quantile`: two half-window sample sets, the older one dropped as time moves on.

use std::time::{Duration, Instant};

use serde::Serialize;

/// A channel's latency samples (nanoseconds).
#[derive(Debug)]
pub(super) struct Latency {
    half_window: Duration,
    streams: [Vec<f64>; 2],
    current: usize,
    last_move: Instant,
}

impl Latency {
    pub(super) fn new(window: Duration, now: Instant) -> Self {
        Self {
            half_window: (window / 2).max(Duration::from_nanos(1)),
            streams: [Vec::new(), Vec::new()],
            current: 0,
            last_move: now,
        }
    }

    /// nsqd's `moveWindow` for every half window that passed.
    fn roll(&mut self, now: Instant) {
        let passed = now.saturating_duration_since(self.last_move);
        let moves = passed.as_nanos() / self.half_window.as_nanos();
        if moves == 0 {
            return;
        }
        if moves >= 2 {
            self.streams[0].clear();
            self.streams[1].clear();
        } else {
            self.current ^= 1;
            self.streams[self.current].clear();
        }
        self.last_move += self.half_window * u32::try_from(moves).unwrap_or(u32::MAX);
    }

    /// Records a message finished `nanos` after it was published.
    pub(super) fn insert(&mut self, now: Instant, nanos: f64) {
        self.roll(now);
        self.streams[self.current].push(nanos);
    }

    /// The samples of the window.
    pub(super) fn samples(&mut self, now: Instant) -> impl Iterator<Item = f64> + '_ {
        self.roll(now);
        self.streams.iter().flatten().copied()
    }
}

/// A float as Go's `encoding/json` writes it: integral values without a fraction.
#[derive(Clone, Copy, Debug)]
pub(super) struct GoFloat(pub(super) f64);

impl Serialize for GoFloat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e21 {
            if v < 0.0 {
                s.serialize_i64(v as i64)
            } else {
                s.serialize_u64(v as u64)
            }
        } else {
            s.serialize_f64(v)
        }
    }
}

/// One quantile of `e2e_processing_latency` (a Go map: keys in sorted order).
#[derive(Debug, Serialize)]
pub(super) struct Percentile {
    pub(super) quantile: GoFloat,
    pub(super) value: GoFloat,
}

/// nsqd's `quantile.Result`.
#[derive(Debug, Serialize)]
pub(super) struct LatencyResult {
    pub(super) count: usize,
    pub(super) percentiles: Option<Vec<Percentile>>,
}

impl LatencyResult {
    /// A nil `*Quantile`'s result (no percentiles configured, or a topic without channels).
    pub(super) fn none() -> Self {
        Self {
            count: 0,
            percentiles: None,
        }
    }

    /// The quantiles of `samples`: the sample at rank ⌈q·n⌉ (nsqd's perks stream estimates
    /// this; with few samples it is the same), 0 without samples.
    pub(super) fn of(mut samples: Vec<f64>, quantiles: &[f64]) -> Self {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let percentiles = quantiles
            .iter()
            .map(|&q| {
                let value = if n == 0 {
                    0.0
                } else {
                    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
                    samples[rank - 1]
                };
                Percentile {
                    quantile: GoFloat(q),
                    value: GoFloat(value),
                }
            })
            .collect();
        Self {
            count: n,
            percentiles: Some(percentiles),
        }
    }

    /// nsqd's text rendering (`e2e%: 122.1ms, 101.7ms`).
    pub(super) fn human(&self) -> String {
        self.percentiles
            .iter()
            .flatten()
            .map(|p| nanos_to_human(p.value.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// nsq's `stringy.NanoSecondToHuman`.
fn nanos_to_human(v: f64) -> String {
    let (v, suffix) = if v > 1e9 {
        (v / 1e9, "s")
    } else if v > 1e6 {
        (v / 1e6, "ms")
    } else if v > 1e3 {
        (v / 1e3, "us")
    } else {
        (v, "ns")
    };
    format!("{v:.1}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_floats_and_quantiles() {
        let r = LatencyResult::of(vec![], &[0.99, 0.5]);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"count":0,"percentiles":[{"quantile":0.99,"value":0},{"quantile":0.5,"value":0}]}"#
        );
        assert_eq!(
            serde_json::to_string(&LatencyResult::none()).unwrap(),
            r#"{"count":0,"percentiles":null}"#
        );
        let r = LatencyResult::of((1..=10).map(|i| f64::from(i) * 1e6).collect(), &[1.0, 0.5]);
        assert_eq!(r.count, 10);
        assert_eq!(
            serde_json::to_string(&r.percentiles).unwrap(),
            r#"[{"quantile":1,"value":10000000},{"quantile":0.5,"value":5000000}]"#
        );
        assert_eq!(r.human(), "10.0ms, 5.0ms");
        assert_eq!(nanos_to_human(122_121_921.0), "122.1ms");
        assert_eq!(nanos_to_human(0.0), "0.0ns");
    }

    #[test]
    fn windows_roll() {
        let t0 = Instant::now();
        let mut l = Latency::new(Duration::from_secs(10), t0);
        l.insert(t0, 1.0);
        l.insert(t0 + Duration::from_secs(6), 2.0);
        assert_eq!(l.samples(t0 + Duration::from_secs(6)).count(), 2);
        assert_eq!(
            l.samples(t0 + Duration::from_secs(11)).collect::<Vec<_>>(),
            [2.0]
        );
        assert_eq!(l.samples(t0 + Duration::from_secs(60)).count(), 0);
    }
}
