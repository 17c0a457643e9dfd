//! Deadlines that cannot overflow, shared by the consumer and producer state machines: however
//! long a configured duration, `now + d` stays a valid `Instant`.

use std::time::{Duration, Instant};

/// Longest delay a state machine schedules; longer configured durations are treated as this.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + d` that cannot overflow, whatever the configuration says.
pub(crate) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_DELAY))
        .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_durations_do_not_overflow() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        assert!(later(now, Duration::MAX) > now);
        assert_eq!(later(now, Duration::ZERO), now);
        assert_eq!(later(now, MAX_DELAY), later(now, Duration::MAX));
    }
}
