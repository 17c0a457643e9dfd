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

/// nsqd's default `--node-id`: the CRC-32 (IEEE) of the MD5 of the hostname, mod 1024.
pub(crate) fn default_node_id(hostname: &str) -> i64 {
    i64::from(crc32_ieee(&md5(hostname.as_bytes())) % 1024)
}

/// MD5 (RFC 1321), for [`default_node_id`] only.
#[allow(clippy::many_single_char_names, reason = "the RFC's names")]
fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 16] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
    let k: Vec<u32> = (0..64)
        .map(|i| (f64::from(i + 1).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = input.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((input.len() as u64).wrapping_mul(8)).to_le_bytes());
    let mut h: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    for chunk in msg.chunks_exact(64) {
        let m: Vec<u32> = chunk
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[(i / 16) * 4 + i % 4]));
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 16];
    for (i, w) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// CRC-32 with the IEEE polynomial (Go's `crc32.ChecksumIEEE`).
fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
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
    fn node_ids_are_nsqds() {
        let hex = |b: [u8; 16]| {
            b.iter().fold(String::new(), |mut s, x| {
                let _ = write!(s, "{x:02x}");
                s
            })
        };
        assert_eq!(hex(md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        // What nsqd v1.3.0 reported as /config/id on the host named "vm".
        assert_eq!(default_node_id("vm"), 617);
    }

    #[test]
    fn quoting() {
        assert_eq!(go_quote(b"abc"), "\"abc\"");
        assert_eq!(go_quote(b"a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(go_quote(b"a\x00\xff"), "\"a\\x00\\xff\"");
        assert_eq!(go_quote("é".as_bytes()), "\"é\"");
    }
}
