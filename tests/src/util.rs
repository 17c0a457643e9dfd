//! Small helpers: name validation (our own, per nsqd's rules), Go-style quoting, waiting.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// nsqd's `isValidName`: 1..=64 bytes of `[.a-zA-Z0-9_-]`, optionally ending in `#ephemeral`.
pub fn is_valid_name(name: &[u8]) -> bool {
    if name.is_empty() || name.len() > 64 {
        return false;
    }
    let base = name.strip_suffix(b"#ephemeral").unwrap_or(name);
    !base.is_empty()
        && base
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether a (valid) name is ephemeral.
pub(crate) fn is_ephemeral(name: &str) -> bool {
    name.ends_with("#ephemeral")
}

/// Go's `%q` for a byte string (close enough for the names and ids nsqd quotes).
pub(crate) fn go_quote(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\u{b}' => out.push_str("\\v"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if c.is_control() => {
                    if (c as u32) <= 0xffff {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    } else {
                        let _ = write!(out, "\\U{:08x}", c as u32);
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

/// Polls `pred` every 2 ms until it holds or `timeout` passes; returns whether it held.
///
/// This is the adapter-test side: real time is fine, every wait is bounded.
pub fn wait_until(timeout: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_valid_name(b"a"));
        assert!(is_valid_name(b"a.b_c-D9"));
        assert!(is_valid_name(b"t#ephemeral"));
        assert!(is_valid_name(&[b'x'; 64]));
        assert!(!is_valid_name(&[b'x'; 65]));
        assert!(!is_valid_name(b""));
        assert!(!is_valid_name(b"#ephemeral"));
        assert!(!is_valid_name(b"a b"));
        assert!(!is_valid_name(b"a#eph"));
        assert!(!is_valid_name(b"a:b"));
        let mut long = vec![b'x'; 54];
        long.extend_from_slice(b"#ephemeral");
        assert!(is_valid_name(&long));
        long.insert(0, b'y');
        assert!(!is_valid_name(&long));
    }

    #[test]
    fn quoting() {
        assert_eq!(go_quote(b"abc"), "\"abc\"");
        assert_eq!(go_quote(b"a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(go_quote(b"a\x00\xff"), "\"a\\x00\\xff\"");
        assert_eq!(go_quote("é".as_bytes()), "\"é\"");
    }
}
