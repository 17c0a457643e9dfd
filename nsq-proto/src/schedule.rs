//! Small helpers shared by the consumer and producer state machines: deadlines that cannot
//! overflow, and nsqd address validation.

use std::time::{Duration, Instant};

/// Longest delay a state machine schedules; longer configured durations are treated as this.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + d` that cannot overflow, whatever the configuration says.
pub(crate) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_DELAY))
        .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}

/// Whether `addr` is an nsqd TCP address: `host:port` or `[ipv6]:port`, port 1..=65535, no
/// scheme, user or path.
pub(crate) fn valid_host_port(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    let host = match host.strip_prefix('[') {
        Some(inner) => match inner.strip_suffix(']') {
            Some(h) => h,
            None => return false,
        },
        // An IPv6 literal must be bracketed to carry a port.
        None if host.contains(':') => return false,
        None => host,
    };
    !host.is_empty()
        && !host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || matches!(b, b'/' | b'[' | b']' | b'@'))
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0)
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

    #[test]
    fn nsqd_addresses() {
        for ok in [
            "127.0.0.1:4150",
            "nsqd.local:4150",
            "[::1]:4150",
            "[fe80::1%eth0]:1",
            "h:65535",
        ] {
            assert!(valid_host_port(ok), "{ok}");
        }
        for bad in [
            "",
            "nsqd",
            "nsqd:",
            ":4150",
            "::1:4150",
            "[::1]",
            "h:0",
            "h:65536",
            "h:+1",
            "h o:1",
            "http://h:1",
            "[::1:4150",
            "u@h:1",
        ] {
            assert!(!valid_host_port(bad), "{bad}");
        }
    }
}
