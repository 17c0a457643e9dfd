//! Helpers of the benchmark examples of nsq-blocking and nsq-async-std (which includes this
//! file): Go-`flag`-style flags, and the Go bench tools' output (`[prefix] date time text`,
//! final line `duration: ... - mb/s - ops/s - us/op`), as nsq-tokio's tools print them.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each example uses a different subset of these helpers"
)]

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `--name=value` or `--name value` (one dash works too) for the flags in `known`.
pub fn parse_flags(known: &[&str]) -> Result<HashMap<String, String>, String> {
    let mut flags = HashMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let Some(name) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let (name, value) = if let Some((n, v)) = name.split_once('=') {
            (n.to_owned(), v.to_owned())
        } else {
            let v = args
                .next()
                .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
            (name.to_owned(), v)
        };
        if !known.contains(&name.as_str()) {
            return Err(format!("flag provided but not defined: -{name}"));
        }
        flags.insert(name, value);
    }
    Ok(flags)
}

/// The value of flag `name`, or `default`.
pub fn flag<'a>(flags: &'a HashMap<String, String>, name: &str, default: &'a str) -> &'a str {
    flags.get(name).map_or(default, String::as_str)
}

/// Formats like Go's `time.Duration.String()` for durations of a second or more (`3.0012s`,
/// `1m0.5s`), and in milliseconds below.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos < 1_000_000_000 {
        return format!("{}ms", frac(nanos, 1_000_000));
    }
    let secs = nanos / 1_000_000_000;
    let (m, s) = (secs / 60, secs % 60);
    let rest = frac(s * 1_000_000_000 + nanos % 1_000_000_000, 1_000_000_000);
    if m > 0 {
        format!("{m}m{rest}s")
    } else {
        format!("{rest}s")
    }
}

/// `value / div` with the fraction's trailing zeros removed (Go's fmtFrac).
fn frac(value: u128, div: u128) -> String {
    let (int, rem) = (value / div, value % div);
    if rem == 0 {
        return int.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{rem:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// The bench tools' final line, computed as nsq's bench tools do (us/op from whole
/// microseconds).
pub fn bench_line(duration: Duration, messages: u64, size: usize) -> String {
    let secs = duration.as_secs_f64();
    format!(
        "duration: {} - {:.3}mb/s - {:.3}ops/s - {:.3}us/op",
        go_duration(duration),
        (messages * size as u64) as f64 / secs / 1024.0 / 1024.0,
        messages as f64 / secs,
        duration.as_micros() as f64 / messages.max(1) as f64,
    )
}

/// Logs like Go's `log.Printf` with a prefix (UTC), to stderr.
#[allow(clippy::print_stderr, reason = "command-line tool output")]
pub fn log(prefix: &str, text: &str) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let tod = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    eprintln!(
        "[{prefix}] {year:04}/{month:02}/{day:02} {:02}:{:02}:{:02} {text}",
        tod / 3600,
        (tod % 3600) / 60,
        tod % 60
    );
}

/// Logs `message` and exits with status 1 (like Go's `log.Fatal`).
pub fn fatal(prefix: &str, message: &str) -> ! {
    log(prefix, message);
    std::process::exit(1)
}
