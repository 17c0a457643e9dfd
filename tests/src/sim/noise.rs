//! Client-side delay the downstream does not cause, for the downstream world
//! ([`run_downstream`](super::run_downstream)): what a busy machine or a debug build adds to
//! every handler's latency, which a smaller in-flight limit does not take away.
//!
//! Three kinds ([`NoiseKind`]), each drawn from the run's seed:
//! * **jitter**: every handler answers late by a uniform 0 to 2 ms after its operation (a
//!   runtime's timer rounding up to its next millisecond, wake-up latency);
//! * **bursts**: the client stalls for 10 to 50 ms every 50 to 300 ms (the scheduler gives its
//!   CPU to other processes): nothing it has to do runs until the stall ends. Answers due in a
//!   stall leave at its end, what nsqd sends is read at its end, and handlers waiting for
//!   the service issue their calls at its end (operations already running go on: the
//!   service is elsewhere);
//! * **a slow client**: every handler costs 400 us of CPU (a debug build: several times a
//!   release build's) on 2 client CPUs, taken in hand-out order before its operation, so more
//!   concurrency does not make the client faster than 5,000 handlers a second.
//!
//! The model is self-contained: [`ClientNoise`] answers "when does this happen" for the world.

use std::time::{Duration, Instant};

use super::rng::Rng;

/// A kind of client-side noise (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoiseKind {
    /// Every handler answers 0-2 ms late.
    Jitter,
    /// The client stalls for 10-50 ms every 50-300 ms.
    Bursts,
    /// Every handler costs 400 us of CPU on 2 CPUs.
    SlowClient,
}

impl NoiseKind {
    /// Every kind, in the order the evaluation runs them.
    pub const ALL: [NoiseKind; 3] = [NoiseKind::Jitter, NoiseKind::Bursts, NoiseKind::SlowClient];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            NoiseKind::Jitter => "jitter",
            NoiseKind::Bursts => "bursts",
            NoiseKind::SlowClient => "slow",
        }
    }

    /// The kind of this name.
    pub fn parse(name: &str) -> Option<NoiseKind> {
        NoiseKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Its settings.
    pub fn noise(self) -> Noise {
        match self {
            NoiseKind::Jitter => Noise {
                jitter: Duration::from_millis(2),
                ..Noise::default()
            },
            NoiseKind::Bursts => Noise {
                stall_every: (Duration::from_millis(50), Duration::from_millis(300)),
                stall_len: (Duration::from_millis(10), Duration::from_millis(50)),
                ..Noise::default()
            },
            NoiseKind::SlowClient => Noise {
                cpu: Duration::from_micros(400),
                cpus: 2,
                ..Noise::default()
            },
        }
    }
}

/// Client-side noise settings (all zero: none).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Noise {
    /// Each handler answers late by a uniform `0..=jitter` after its operation.
    pub jitter: Duration,
    /// The time from one stall's end to the next one's start: uniform in this range.
    pub stall_every: (Duration, Duration),
    /// A stall's length: uniform in this range (zero: no stalls).
    pub stall_len: (Duration, Duration),
    /// Each handler's CPU time, before its operation (zero: none).
    pub cpu: Duration,
    /// The client's CPUs.
    pub cpus: u32,
}

impl Noise {
    /// No noise at all.
    pub fn is_quiet(&self) -> bool {
        self.jitter.is_zero() && self.stall_len.1.is_zero() && self.cpu.is_zero()
    }

    /// The most handlers a second the client's CPUs can run (infinite without a CPU cost).
    pub fn cpu_rate(&self) -> f64 {
        if self.cpu.is_zero() {
            f64::INFINITY
        } else {
            f64::from(self.cpus.max(1)) / self.cpu.as_secs_f64()
        }
    }

    /// What the noise adds to a handler's latency on average when nothing waits for a CPU.
    pub fn mean_delay(&self) -> Duration {
        self.jitter / 2 + self.cpu
    }
}

/// The noise of one run: when the client is stalled, when a CPU is free, how late an answer
/// is. Deterministic from the seed.
#[derive(Debug)]
pub struct ClientNoise {
    noise: Noise,
    rng: Rng,
    /// The stalls drawn so far, in order, not overlapping.
    stalls: Vec<(Instant, Instant)>,
    /// Stalls are drawn up to here.
    drawn_to: Instant,
    /// When each CPU is free again.
    cpu_free: Vec<Instant>,
}

impl ClientNoise {
    /// The noise of a run starting at `t0` (its own stream of the seed's draws).
    pub fn new(noise: &Noise, seed: u64, t0: Instant) -> ClientNoise {
        ClientNoise {
            rng: Rng::new(seed, 14),
            stalls: Vec::new(),
            drawn_to: t0,
            cpu_free: vec![t0; noise.cpus.max(1) as usize],
            noise: noise.clone(),
        }
    }

    /// Any noise at all.
    pub fn is_quiet(&self) -> bool {
        self.noise.is_quiet()
    }

    fn uniform(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let (lo, hi) = (lo.as_micros() as u64, hi.as_micros() as u64);
        Duration::from_micros(self.rng.range(lo, hi.max(lo)))
    }

    /// Draws stalls until they cover `t`.
    fn draw_to(&mut self, t: Instant) {
        if self.noise.stall_len.1.is_zero() {
            return;
        }
        while self.drawn_to <= t {
            let start = self.drawn_to + self.uniform(self.noise.stall_every);
            let end = start + self.uniform(self.noise.stall_len);
            self.stalls.push((start, end));
            self.drawn_to = end;
        }
    }

    /// The stall covering `t`, if any.
    fn stall_at(&mut self, t: Instant) -> Option<(Instant, Instant)> {
        self.draw_to(t);
        let i = self.stalls.partition_point(|s| s.1 <= t);
        self.stalls.get(i).copied().filter(|s| s.0 <= t)
    }

    /// When the client runs again at or after `t`: `t`, or the end of the stall covering
    /// it. Monotone in `t`.
    pub fn awake(&mut self, t: Instant) -> Instant {
        self.stall_at(t).map_or(t, |s| s.1)
    }

    /// `work` of CPU time from `start` (awake), stretched by the stalls it runs into.
    fn run_for(&mut self, mut start: Instant, mut work: Duration) -> Instant {
        loop {
            start = self.awake(start);
            let end = start + work;
            self.draw_to(end);
            let i = self.stalls.partition_point(|s| s.0 <= start);
            match self.stalls.get(i).copied().filter(|s| s.0 < end) {
                Some((s0, s1)) => {
                    work -= s0 - start;
                    start = s1;
                }
                None => return end,
            }
        }
    }

    /// A handler handed out at `t` has run its CPU part at the returned instant (`None`: it
    /// has none). The first free CPU takes it.
    pub fn cpu_done(&mut self, t: Instant) -> Option<Instant> {
        if self.noise.cpu.is_zero() {
            return None;
        }
        let (i, free) = self
            .cpu_free
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, f)| f)?;
        let done = self.run_for(free.max(t), self.noise.cpu);
        self.cpu_free[i] = done;
        Some(done)
    }

    /// A handler whose operation ended at `t` answers at the returned instant.
    pub fn answer_at(&mut self, t: Instant) -> Instant {
        let late = if self.noise.jitter.is_zero() {
            Duration::ZERO
        } else {
            self.uniform((Duration::ZERO, self.noise.jitter))
        };
        self.awake(t + late)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_defer_and_stretch() {
        let t0 = Instant::now();
        let bursts = NoiseKind::Bursts.noise();
        let mut n = ClientNoise::new(&bursts, 3, t0);
        n.draw_to(t0 + Duration::from_secs(60));
        let stalls = n.stalls.clone();
        assert!(stalls.len() >= 50, "{}", stalls.len());
        let (every, length) = (bursts.stall_every, bursts.stall_len);
        for w in stalls.windows(2) {
            let gap = w[1].0 - w[0].1;
            assert!(gap >= every.0 && gap <= every.1, "{gap:?}");
        }
        let (s0, s1) = stalls[3];
        let len = s1 - s0;
        assert!(len >= length.0 && len <= length.1, "{len:?}");
        assert_eq!(n.awake(s0), s1);
        assert_eq!(n.awake(s1), s1);
        let before = s0.checked_sub(Duration::from_millis(1)).expect("after t0");
        assert_eq!(n.awake(before), before);
        // 3 ms of work starting 1 ms before the stall: 1 ms, the stall, then 2 ms.
        let end = n.run_for(before, Duration::from_millis(3));
        assert_eq!(end, s1 + Duration::from_millis(2));
    }

    #[test]
    fn cpus_bound_the_rate() {
        let t0 = Instant::now();
        let mut n = ClientNoise::new(&NoiseKind::SlowClient.noise(), 3, t0);
        // 100 handlers at once on 2 CPUs of 400 us each: the last done after 20 ms.
        let last = (0..100).filter_map(|_| n.cpu_done(t0)).max();
        assert_eq!(last, Some(t0 + Duration::from_millis(20)));
        let mut j = ClientNoise::new(&NoiseKind::Jitter.noise(), 3, t0);
        let lates: Vec<Duration> = (0..1000).map(|_| j.answer_at(t0) - t0).collect();
        assert!(lates.iter().all(|l| *l <= Duration::from_millis(2)));
        let mean = lates.iter().sum::<Duration>() / 1000;
        assert!(mean > Duration::from_micros(900) && mean < Duration::from_micros(1_100));
    }
}
