//! nsqd addresses: checking a `host:port` before connecting to it, and joining one from a
//! lookupd reply's host and port.

use std::fmt::Write as _;

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

/// Joins a host and port, bracketing IPv6 literals (`::1` -> `[::1]:4150`).
pub fn join_host_port(host: &str, port: u16) -> String {
    let mut out = String::with_capacity(host.len() + 8);
    if host.contains(':') && !host.starts_with('[') {
        out.push('[');
        out.push_str(host);
        out.push(']');
    } else {
        out.push_str(host);
    }
    let _ = write!(out, ":{port}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
