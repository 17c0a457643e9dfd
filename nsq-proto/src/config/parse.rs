//! Reading option values: Go-style durations ([`parse_go_duration`]), the typed setters
//! behind [`Config::set`](super::Config::set), and how values are shown in errors.

use super::OptionError;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

pub(super) const MS: Duration = Duration::from_millis(1);
pub(super) const SEC: Duration = Duration::from_secs(1);
pub(super) const MIN: Duration = Duration::from_secs(60);

/// Parses a Go duration string (`time.ParseDuration` syntax, non-negative): a sequence of
/// decimal numbers with optional fraction and a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`,
/// `h`), or `0`.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let s = text.strip_prefix('+').unwrap_or(text);
    if s.starts_with('-') {
        return Err("durations cannot be negative".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut rest = s;
    let mut total: u128 = 0; // nanoseconds
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after) = rest.strip_prefix('.') {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &after[..n];
            rest = &after[n..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err("expected a number".into());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err("missing unit (ns, us, ms, s, m, h)".into()),
            other => return Err(format!("unknown unit {other:?}")),
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| "number too large".to_string())?
        };
        let mut value = int.checked_mul(scale).ok_or("duration too large")?;
        let mut unit_frac = scale;
        for d in frac_part.bytes().take(18) {
            unit_frac /= 10;
            value = value
                .checked_add(u128::from(d - b'0') * unit_frac)
                .ok_or("duration too large")?;
        }
        total = total.checked_add(value).ok_or("duration too large")?;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| "duration too large")?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

pub(super) fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

pub(super) fn show_duration(d: Duration) -> String {
    format!("{d:?}")
}

pub(super) struct Setter<'a> {
    pub(super) option: &'a str,
    pub(super) value: &'a Value,
    /// A number given for a duration counts nanoseconds (Go's `encoding/json` writes a
    /// `time.Duration` so), not milliseconds (go-nsq's `Config.Set`).
    pub(super) nanos: bool,
}

impl Setter<'_> {
    pub(super) fn invalid(&self, expected: &'static str) -> OptionError {
        OptionError::Invalid {
            option: self.option.to_string(),
            value: show(self.value),
            expected,
        }
    }

    pub(super) fn duration(&self) -> Result<Duration, OptionError> {
        const EXPECTED: &str = "a Go duration (\"90s\", \"250ms\") or a number of milliseconds";
        const EXPECTED_NANOS: &str = "a Go duration (\"90s\") or a number of nanoseconds";
        let expected = if self.nanos { EXPECTED_NANOS } else { EXPECTED };
        let count = |n: u64| {
            if self.nanos {
                Duration::from_nanos(n)
            } else {
                Duration::from_millis(n)
            }
        };
        match self.value {
            // A bare number in text counts like a number (so `set_str` and JSON agree).
            Value::String(s) => match s.trim().parse::<u64>() {
                Ok(n) => Ok(count(n)),
                Err(_) => parse_go_duration(s.trim()).map_err(|_| self.invalid(expected)),
            },
            Value::Number(n) => n.as_u64().map(count).ok_or_else(|| self.invalid(expected)),
            _ => Err(self.invalid(expected)),
        }
    }

    pub(super) fn boolean(&self) -> Result<bool, OptionError> {
        const EXPECTED: &str = "a boolean";
        match self.value {
            Value::Bool(b) => Ok(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Ok(i != 0),
                (None, Some(u)) => Ok(u != 0),
                _ => Err(self.invalid(EXPECTED)),
            },
            Value::String(s) => match s.trim() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
                _ => Err(self.invalid(EXPECTED)),
            },
            _ => Err(self.invalid(EXPECTED)),
        }
    }

    pub(super) fn integer(&self) -> Result<i128, OptionError> {
        const EXPECTED: &str = "an integer";
        match self.value {
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .ok_or_else(|| self.invalid(EXPECTED)),
            Value::String(s) => s.trim().parse().map_err(|_| self.invalid(EXPECTED)),
            _ => Err(self.invalid(EXPECTED)),
        }
    }

    pub(super) fn int_in<T: TryFrom<i128>>(&self, range: &'static str) -> Result<T, OptionError> {
        let i = self.integer()?;
        T::try_from(i).map_err(|_| OptionError::OutOfRange {
            option: self.option.to_string(),
            value: i.to_string(),
            range,
        })
    }

    pub(super) fn float(&self) -> Result<f64, OptionError> {
        const EXPECTED: &str = "a number";
        match self.value {
            Value::Number(n) => n.as_f64().ok_or_else(|| self.invalid(EXPECTED)),
            Value::String(s) => s.trim().parse().map_err(|_| self.invalid(EXPECTED)),
            _ => Err(self.invalid(EXPECTED)),
        }
    }

    pub(super) fn string(&self) -> Result<Option<String>, OptionError> {
        match self.value {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            Value::Number(n) => Ok(Some(n.to_string())),
            Value::Bool(b) => Ok(Some(b.to_string())),
            _ => Err(self.invalid("a string")),
        }
    }

    /// An IP address with a port or not (`"10.0.0.5"`, `"10.0.0.5:0"`, `"::1"`,
    /// `"[::1]:0"`); `null` or `""` for none.
    pub(super) fn socket_addr(&self) -> Result<Option<std::net::SocketAddr>, OptionError> {
        const EXPECTED: &str = "an IP address, with a port or not (\"10.0.0.5\", \"[::1]:0\")";
        match self.value {
            Value::Null => Ok(None),
            Value::String(s) if s.trim().is_empty() => Ok(None),
            Value::String(s) => {
                let s = s.trim();
                s.parse::<std::net::SocketAddr>()
                    .or_else(|_| {
                        s.parse::<std::net::IpAddr>()
                            .map(|ip| std::net::SocketAddr::new(ip, 0))
                    })
                    .map(Some)
                    .map_err(|_| self.invalid(EXPECTED))
            }
            _ => Err(self.invalid(EXPECTED)),
        }
    }

    pub(super) fn path(&self) -> Result<Option<PathBuf>, OptionError> {
        match self.value {
            Value::Null => Ok(None),
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => Ok(Some(PathBuf::from(s))),
            _ => Err(self.invalid("a file path")),
        }
    }

    pub(super) fn named<T: serde::de::DeserializeOwned>(
        &self,
        expected: &'static str,
    ) -> Result<T, OptionError> {
        match self.value {
            Value::String(s) => serde_json::from_value(Value::String(s.trim().to_string()))
                .map_err(|_| self.invalid(expected)),
            _ => Err(self.invalid(expected)),
        }
    }
}

pub(super) fn check_duration(
    option: &str,
    d: Duration,
    min: Duration,
    max: Duration,
    range: &'static str,
) -> Result<(), OptionError> {
    if d < min || d > max {
        return Err(OptionError::OutOfRange {
            option: option.to_string(),
            value: show_duration(d),
            range,
        });
    }
    Ok(())
}

/// The option a field of go-nsq's `Config` marshalled by Go's `encoding/json` stands for
/// (`MaxInFlight` -> `max_in_flight`, `RDYRedistributeInterval` -> `rdy_redistribute_interval`,
/// `TlsV1` -> `tls_v1`, `ClientID` -> `client_id`): words split at each capital that follows a
/// small letter or a digit, or that starts a word after a run of capitals.
pub(super) fn go_field_option(field: &str) -> String {
    let chars: Vec<char> = field.chars().collect();
    let mut out = String::with_capacity(field.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_small = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_small)
            {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}
