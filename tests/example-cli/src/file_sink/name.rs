//! File names of `nsq_to_file`: the `--filename-format` template with its placeholders, and
//! `--datetime-format`, strftime as the official tool has it (its `strftime.go`).

use super::SinkOptions;
use std::time::{SystemTime, UNIX_EPOCH};

/// The template of one topic's file names, as the official tool's `computeFilenameFormat`:
/// `<TOPIC>`, `<HOST>` (`host_identifier` with its `<SHORT_HOST>` and `<HOSTNAME>`, else the
/// short host name) and `<PID>` replaced; `<REV>` kept for the sink when gzip, rotation or a
/// work dir is on (an error if the format lacks it), else removed; `.gz` added with gzip.
/// `<DATETIME>` is left for each file.
pub fn filename_template(
    opts: &SinkOptions,
    topic: &str,
    hostname: &str,
    pid: u32,
) -> Result<String, String> {
    let short = hostname.split('.').next().unwrap_or(hostname);
    let identifier = if opts.host_identifier.is_empty() {
        short.to_owned()
    } else {
        opts.host_identifier
            .replace("<SHORT_HOST>", short)
            .replace("<HOSTNAME>", hostname)
    };
    let mut template = opts.filename_format.clone();
    if opts.needs_rev() {
        if !template.contains("<REV>") {
            return Err(
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
                    .to_owned(),
            );
        }
    } else {
        template = template.replace("<REV>", "");
    }
    template = template
        .replace("<TOPIC>", topic)
        .replace("<HOST>", &identifier)
        .replace("<PID>", &pid.to_string());
    #[allow(
        clippy::case_sensitive_file_extension_comparisons,
        reason = "the Go tool's strings.HasSuffix(cff, \".gz\")"
    )]
    let has_gz = template.ends_with(".gz");
    if opts.gzip_level.is_some() && !has_gz {
        template.push_str(".gz");
    }
    Ok(template)
}

/// A moment's civil date and time (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year.
    pub year: i64,
    /// 1-12.
    pub month: u32,
    /// 1-31.
    pub day: u32,
    /// 0-23.
    pub hour: u32,
    /// 0-59.
    pub minute: u32,
    /// 0-59.
    pub second: u32,
    /// 0 = Sunday.
    pub weekday: u32,
}

impl Civil {
    /// The civil time of `t` in UTC (times before 1970 count as 1970).
    pub fn utc(t: SystemTime) -> Civil {
        let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let days = (secs / 86_400) as i64;
        let tod = (secs % 86_400) as u32;
        // Civil-from-days (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Civil {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: tod / 3600,
            minute: tod % 3600 / 60,
            second: tod % 60,
            // 1970-01-01 was a Thursday.
            weekday: ((days + 4).rem_euclid(7)) as u32,
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `format` with the official tool's strftime directives replaced (`%Y %y %m %B %b %d %A %a
/// %H %I %M %S %p %Z %z %%`); any other `%x` is kept as it is, like the Go tool. The time is
/// UTC: the official tool uses the local zone, so the names agree where that zone is UTC
/// (`TZ=UTC`).
pub fn strftime(format: &str, t: SystemTime) -> String {
    let c = Civil::utc(t);
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let month = MONTHS[(c.month - 1) as usize];
        let day = DAYS[c.weekday as usize];
        let hour12 = match c.hour % 12 {
            0 => 12,
            h => h,
        };
        let piece = match chars.peek() {
            Some('B') => month.to_owned(),
            Some('b') => month[..3].to_owned(),
            Some('m') => format!("{:02}", c.month),
            Some('A') => day.to_owned(),
            Some('a') => day[..3].to_owned(),
            Some('d') => format!("{:02}", c.day),
            Some('H') => format!("{:02}", c.hour),
            Some('I') => format!("{hour12:02}"),
            Some('M') => format!("{:02}", c.minute),
            Some('S') => format!("{:02}", c.second),
            Some('Y') => format!("{:04}", c.year),
            Some('y') => format!("{:02}", c.year.rem_euclid(100)),
            Some('p') => if c.hour < 12 { "AM" } else { "PM" }.to_owned(),
            Some('Z') => "UTC".to_owned(),
            Some('z') => "+0000".to_owned(),
            Some('%') => "%".to_owned(),
            _ => {
                out.push('%');
                continue;
            }
        };
        chars.next();
        out.push_str(&piece);
    }
    out
}
