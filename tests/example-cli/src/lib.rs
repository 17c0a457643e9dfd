//! The runtime-free helpers of the example tools, shared by every package's tools (nsq-proto's
//! `std_*` examples, nsq-tokio's, nsq-async-std's and nsq-blocking's tools, as a
//! dev-dependency): command-line flags (parsed with `lexopt`, accepting the Go tools'
//! `-name value`, `--name=value` forms, with `--help`), the `tracing` subscriber, Go duration
//! parsing/formatting and Go `log`-style output, so the tools behave like the official ones.
//! Not published: a dev-dependency of this repository's packages only.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod downstream;
pub mod file_sink;

/// One command-line flag of a tool.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The name, without dashes (`nsqd-tcp-address`).
    pub name: &'static str,
    /// What the value is (`ADDR`), or `None` for a boolean switch.
    pub arg: Option<&'static str>,
    /// One line of help.
    pub help: &'static str,
}

/// A flag that takes a value.
pub const fn value(name: &'static str, arg: &'static str, help: &'static str) -> Flag {
    Flag {
        name,
        arg: Some(arg),
        help,
    }
}

/// A boolean switch (`--x`, `--x=true`, `--x=false`).
pub const fn switch(name: &'static str, help: &'static str) -> Flag {
    Flag {
        name,
        arg: None,
        help,
    }
}

/// `--nsqd-tcp-address`, as the official tools have it.
pub const NSQD_TCP_ADDRESS_FLAG: Flag = value(
    "nsqd-tcp-address",
    "ADDR",
    "nsqd TCP address (may be given multiple times)",
);

/// `--lookupd-http-address`, as the official tools have it.
pub const LOOKUPD_HTTP_ADDRESS_FLAG: Flag = value(
    "lookupd-http-address",
    "ADDR",
    "nsqlookupd HTTP address (may be given multiple times)",
);

/// `--consumer-opt`, as the official tools have it (read with [`apply_opts`]).
pub const CONSUMER_OPT_FLAG: Flag = value(
    "consumer-opt",
    "NAME,VALUE",
    "option to pass through to the consumer (may be given multiple times)",
);

/// Applies go-nsq style `--consumer-opt` / `--producer-opt` values (`name,value`; a bare
/// `name` means `true`, like go-nsq's `ConfigFlag`) through `set` (a `Config`'s `set_str`).
pub fn apply_opts<E: std::fmt::Display>(
    opts: &[String],
    mut set: impl FnMut(&str, &str) -> Result<(), E>,
) -> Result<(), String> {
    for opt in opts {
        let (name, value) = opt.split_once(',').unwrap_or((opt.as_str(), "true"));
        set(name, value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A tool's name, purpose and flags: what `--help` prints and what the parser accepts.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// The tool's name.
    pub name: &'static str,
    /// What it does, in a line or two.
    pub about: &'static str,
    /// Its flags.
    pub flags: &'static [Flag],
}

impl Usage {
    /// The `--help` text.
    pub fn text(&self) -> String {
        let mut out = format!(
            "{}\n\nUsage: {} [FLAGS]\n\nFlags (also accepted as -name, like the Go tools):\n",
            self.about, self.name
        );
        let rows: Vec<(String, &str)> = self
            .flags
            .iter()
            .map(|f| {
                let dashes = if f.name.len() == 1 { "-" } else { "--" };
                let left = match f.arg {
                    Some(arg) if f.name.len() == 1 => format!("-{} {arg}", f.name),
                    Some(arg) => format!("--{}={arg}", f.name),
                    None => format!("{dashes}{}", f.name),
                };
                (left, f.help)
            })
            .chain([("-h, --help".to_owned(), "print this help and exit")])
            .collect();
        let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        for (left, help) in rows {
            let _ = writeln!(out, "  {left:width$}  {help}");
        }
        out.push_str("\nLog output goes to stderr; RUST_LOG sets its level (default: info).\n");
        out
    }

    fn flag(&self, name: &str) -> Option<&Flag> {
        self.flags.iter().find(|f| f.name == name)
    }
}

/// Why the command line was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagError {
    /// `-h` / `--help`: the usage text.
    Help(String),
    /// A flag that is not defined, a missing value, a stray argument.
    Invalid(String),
}

/// Parsed command-line flags; repeatable flags keep every value.
#[derive(Debug, Default)]
pub struct Flags {
    values: HashMap<String, Vec<String>>,
}

/// Go's `flag` package takes `-name` like `--name`; lexopt reads a single dash as short
/// options. A single-dash argument with a longer name (or `-n=5`) becomes `--name`; parsing
/// stops at `--`.
fn go_style(args: impl IntoIterator<Item = String>) -> Vec<OsString> {
    args.into_iter()
        .take_while(|a| a != "--")
        .map(|a| match a.strip_prefix('-') {
            Some(rest)
                if !rest.starts_with('-')
                    && (rest.chars().count() > 1 || rest.contains('='))
                    && !rest.starts_with(|c: char| c.is_ascii_digit()) =>
            {
                OsString::from(format!("--{rest}"))
            }
            _ => OsString::from(a),
        })
        .collect()
}

impl Flags {
    /// Parses `std::env::args()` for `usage`. `--help` prints the usage text to stdout and
    /// exits with status 0; an error is printed to stderr with a hint, status 2 (like Go's
    /// `flag` package).
    #[allow(
        clippy::print_stdout,
        clippy::print_stderr,
        reason = "command-line tool"
    )]
    pub fn parse(usage: &Usage) -> Flags {
        match Self::parse_from(std::env::args().skip(1), usage) {
            Ok(flags) => flags,
            Err(FlagError::Help(text)) => {
                print!("{text}");
                std::process::exit(0)
            }
            Err(FlagError::Invalid(e)) => {
                eprintln!(
                    "{}: {e}\nRun `{} --help` for the flags.",
                    usage.name, usage.name
                );
                std::process::exit(2)
            }
        }
    }

    /// Parses `args` (see [`Flags::parse`]).
    pub fn parse_from(
        args: impl IntoIterator<Item = String>,
        usage: &Usage,
    ) -> Result<Flags, FlagError> {
        use lexopt::Arg;
        let invalid = |e: lexopt::Error| FlagError::Invalid(e.to_string());
        let mut flags = Flags::default();
        let mut parser = lexopt::Parser::from_args(go_style(args));
        while let Some(arg) = parser.next().map_err(invalid)? {
            let name = match arg {
                Arg::Short('h') | Arg::Long("help") => {
                    return Err(FlagError::Help(usage.text()));
                }
                Arg::Short(c) => c.to_string(),
                Arg::Long(name) => name.to_owned(),
                Arg::Value(v) => {
                    return Err(FlagError::Invalid(format!(
                        "unexpected argument {:?}",
                        v.to_string_lossy()
                    )));
                }
            };
            let Some(flag) = usage.flag(&name) else {
                let mut defined: Vec<&str> = usage.flags.iter().map(|f| f.name).collect();
                defined.sort_unstable();
                return Err(FlagError::Invalid(format!(
                    "flag provided but not defined: -{name} (defined: -{})",
                    defined.join(", -")
                )));
            };
            let value = if flag.arg.is_some() {
                parser
                    .value()
                    .map_err(|_| FlagError::Invalid(format!("flag needs an argument: -{name}")))?
            } else {
                parser
                    .optional_value()
                    .unwrap_or_else(|| OsString::from("true"))
            };
            let value = value.into_string().map_err(|v| {
                FlagError::Invalid(format!("invalid value {v:?} for flag -{name}: not UTF-8"))
            })?;
            flags.values.entry(name).or_default().push(value);
        }
        Ok(flags)
    }

    /// True when `name` was given.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// The last value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.values.get(name).cloned().unwrap_or_default()
    }

    /// The last value of `name` or `default`.
    pub fn string(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or(default).to_owned()
    }

    /// A number flag.
    pub fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("invalid value {v:?} for flag -{name}")),
        }
    }

    /// A boolean flag (`--x`, `--x=true`, `--x=false`).
    pub fn boolean(&self, name: &str) -> Result<bool, String> {
        match self.get(name) {
            Some("true" | "1" | "t" | "T" | "TRUE" | "True") => Ok(true),
            None | Some("false" | "0" | "f" | "F" | "FALSE" | "False") => Ok(false),
            Some(v) => Err(format!("invalid boolean value {v:?} for flag -{name}")),
        }
    }

    /// A Go duration flag (`10s`, `1m30s`, `500ms`).
    pub fn duration(&self, name: &str, default: Duration) -> Result<Duration, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_go_duration(v)
                .ok_or_else(|| format!("invalid value {v:?} for flag -{name}: parse error")),
        }
    }
}

/// Installs the `tracing` subscriber of the tools: human-readable lines on stderr, filtered by
/// `RUST_LOG` (`RUST_LOG=debug`, `RUST_LOG=nsq_client=debug,nsq_proto=trace,info`, ...), `info` when unset.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

/// Parses a Go duration string (`300ms`, `1.5h`, `2h45m`); negative values are refused.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * nanos;
    }
    Some(Duration::from_nanos(total.round() as u64))
}

/// Formats like Go's `time.Duration.String()` (`5.000123456s`, `1m0.5s`, `1.5ms`, `0s`).
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        let (unit, div) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", frac(nanos, div));
    }
    let secs_total = nanos / 1_000_000_000;
    let sub = nanos % 1_000_000_000;
    let h = secs_total / 3600;
    let m = (secs_total % 3600) / 60;
    let s = secs_total % 60;
    let mut out = String::new();
    if h > 0 {
        out = format!("{h}h");
    }
    if h > 0 || m > 0 {
        out = format!("{out}{m}m");
    }
    format!("{out}{}s", frac(s * 1_000_000_000 + sub, 1_000_000_000))
}

/// `value / div` with the fraction's trailing zeros removed (Go's fmtFrac).
fn frac(value: u128, div: u128) -> String {
    let int = value / div;
    let rem = value % div;
    if rem == 0 {
        return int.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{rem:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// The benchmark tools' final line, computed exactly as nsq's bench tools do:
/// `duration: <d> - <x>mb/s - <y>ops/s - <z>us/op`, with us/op from whole microseconds.
pub fn bench_line(duration: Duration, messages: u64, size: usize) -> String {
    let secs = duration.as_secs_f64();
    let micros = duration.as_micros() as f64;
    format!(
        "duration: {} - {}mb/s - {}ops/s - {}us/op",
        go_duration(duration),
        go_float((messages * size as u64) as f64 / secs / 1024.0 / 1024.0),
        go_float(messages as f64 / secs),
        go_float(micros / messages as f64),
    )
}

/// Go's `%.03f`: three decimals, `+Inf`/`-Inf`/`NaN` for the special values.
fn go_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".to_owned()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{x:.3}")
    }
}

/// A line in Go `log` format with a prefix: `[prefix] 2006/01/02 15:04:05 text` (UTC).
pub fn go_log_line(prefix: &str, text: &str) -> String {
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
    format!(
        "[{prefix}] {year:04}/{month:02}/{day:02} {:02}:{:02}:{:02} {text}",
        tod / 3600,
        (tod % 3600) / 60,
        tod % 60
    )
}

/// Logs like Go's `log.Printf` (to stderr).
#[allow(clippy::print_stderr, reason = "command-line tool output")]
pub fn log(prefix: &str, text: &str) {
    eprintln!("{}", go_log_line(prefix, text));
}

/// Prints `message` and exits with status 1 (like Go's `log.Fatal`).
#[allow(clippy::print_stderr, reason = "command-line tool output")]
pub fn fatal(prefix: &str, message: &str) -> ! {
    eprintln!("{}", go_log_line(prefix, message));
    std::process::exit(1)
}

/// How many worker tasks the Go tools would use (GOMAXPROCS = number of CPUs).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The flags of the Go bench tools, shared by every adapter's bench tools: `bench_flags!(reader)`,
/// `bench_flags!(writer)` or `bench_flags!(publish)`, then the tool's own extra flags (its
/// runtime choice, ...), as a `&'static [Flag]` for [`Usage::flags`].
/// `bench_flags!(reader, downstream, ..)` adds the flags of the bench readers' modelled
/// downstream and consumer options ([`downstream`]).
#[macro_export]
macro_rules! bench_flags {
    (@common $what:literal, $runfor:literal, [$($middle:expr),*], [$($extra:expr),*]) => {
        &[
            $crate::value(
                "nsqd-tcp-address",
                "ADDR",
                "nsqd TCP address (default: 127.0.0.1:4150)",
            ),
            $crate::value("topic", "TOPIC", $what),
            $($middle,)*
            $crate::value("runfor", "DURATION", $runfor),
            $($extra),*
        ]
    };
    // The reader's flags, the modelled downstream's and the consumer options'
    // ([`downstream`]).
    (reader, downstream $(, $extra:expr)* $(,)?) => {
        $crate::bench_flags!(reader,
            $crate::value(
                "downstream-capacity",
                "C",
                "model a downstream of C slots in the handler: one consumer, handlers run \
                 max_in_flight (--rdy) at a time; not a Go flag",
            ),
            $crate::value(
                "service-time",
                "DURATION",
                "with --downstream-capacity: how long the downstream holds a slot \
                 (default: 5ms)",
            ),
            $crate::value(
                "collapse",
                "F",
                "with --downstream-capacity: service time s x (1 + F x waiting / C) \
                 (default: 0, no collapse)",
            ),
            $crate::value(
                "max-in-flight-mode",
                "static|adaptive",
                "the consumer option max_in_flight_mode (default: the core's)",
            ),
            $crate::value(
                "min-in-flight",
                "N",
                "the consumer option min_in_flight (default: the core's)",
            ),
            $crate::value(
                "consumer-option",
                "NAME=VALUE",
                "a consumer option by its Config name, as Config::set_str takes it (repeatable)",
            )
            $(, $extra)*)
    };
    (reader $(, $extra:expr)* $(,)?) => {
        $crate::bench_flags!(@common "topic to consume (default: sub_bench)",
            "duration of the run (default: 10s)", [
            $crate::value("channel", "CHANNEL", "channel to consume (default: ch)"),
            $crate::value("size", "BYTES", "size of each message, for the rate (default: 200)"),
            $crate::value("rdy", "N", "RDY count of each consumer (default: 2500)")
        ], [$($extra),*])
    };
    (writer $(, $extra:expr)* $(,)?) => {
        $crate::bench_flags!(@common "topic to publish to (default: sub_bench)",
            "duration of the run (default: 10s)", [
            $crate::value("size", "BYTES", "size of each message (default: 200)"),
            $crate::value("batch-size", "N", "messages per MPUB batch (default: 200)")
        ], [$($extra),*])
    };
    (publish $(, $extra:expr)* $(,)?) => {
        $crate::bench_flags!(@common "topic to publish to (default: sub_bench)",
            "duration of the run (default: 3s)", [
            $crate::value("size", "BYTES", "size of each message (default: 200)"),
            $crate::value("concurrency", "N", "concurrent publishers (default: 100)")
        ], [$($extra),*])
    };
}

/// The values of the Go bench tools' flags (those a tool does not define keep their defaults).
#[derive(Debug, Clone)]
pub struct BenchArgs {
    /// `--nsqd-tcp-address`.
    pub addr: String,
    /// `--topic`.
    pub topic: String,
    /// `--channel` (readers).
    pub channel: String,
    /// `--size`: bytes per message.
    pub size: usize,
    /// `--rdy`: each consumer's max in flight (readers).
    pub rdy: u32,
    /// `--batch-size`: messages per MPUB (writers).
    pub batch_size: usize,
    /// `--concurrency`: concurrent publishers (bench_publish).
    pub concurrency: usize,
    /// `--runfor`.
    pub runfor: Duration,
}

impl BenchArgs {
    /// Reads the bench flags, with the Go tools' defaults (`runfor` defaults to
    /// `default_runfor`).
    pub fn parse(flags: &Flags, default_runfor: Duration) -> Result<BenchArgs, String> {
        Ok(BenchArgs {
            addr: flags.string("nsqd-tcp-address", "127.0.0.1:4150"),
            topic: flags.string("topic", "sub_bench"),
            channel: flags.string("channel", "ch"),
            size: flags.number("size", 200)?,
            rdy: flags.number("rdy", 2500)?,
            batch_size: flags.number("batch-size", 200)?,
            concurrency: flags.number("concurrency", 100)?,
            runfor: flags.duration("runfor", default_runfor)?,
        })
    }
}

/// `--metrics`: the tokio bench tools' switch that records the client's metrics into a
/// Prometheus recorder (nsq-tokio's `metrics` feature). Not in [`bench_flags!`]: the other
/// adapters' tools, which share that macro, do not record.
pub const METRICS_FLAG: Flag = switch(
    "metrics",
    "record the client's metrics into a Prometheus recorder, rendered once at the end; \
     not a Go flag (needs the `metrics` feature)",
);

/// `--no-histograms`, with `--metrics`: the client records its counters and gauges only
/// (`metrics_histograms = false`), the cheaper setting for very hot consumers.
pub const NO_HISTOGRAMS_FLAG: Flag = switch(
    "no-histograms",
    "with --metrics: record counters and gauges only (metrics_histograms = false); not a Go \
     flag",
);

/// What `--metrics` answers in a build without the `metrics` feature.
pub const METRICS_NOT_BUILT: &str =
    "built without the `metrics` feature: rebuild with --features metrics";

/// The flags of the bench_publish tools' PublishAsync mode (after `bench_flags!(publish, ..)`).
#[macro_export]
macro_rules! async_publish_flags {
    () => {
        $crate::switch(
            "async",
            "publish from one task with publish_async, --window under way (go-nsq's PublishAsync)",
        )
    };
}

/// `--window`: publishes under way at once in the PublishAsync mode.
pub const WINDOW_FLAG: Flag = value(
    "window",
    "N",
    "publishes under way at once with --async, not a Go flag (default: 1000)",
);

/// The PublishAsync mode of the async bench_publish tools: `publish` starts one publish and
/// returns its pending result; at most `window` are under way, the oldest awaited first,
/// until `end`, then the rest. Returns how many succeeded (any failure ends the run).
pub async fn publish_window<P, E>(
    window: usize,
    end: std::time::Instant,
    mut publish: impl FnMut() -> Result<P, E>,
) -> Result<u64, String>
where
    P: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut under_way: std::collections::VecDeque<P> =
        std::collections::VecDeque::with_capacity(window);
    let mut done = 0u64;
    while std::time::Instant::now() < end {
        if under_way.len() >= window.max(1) {
            if let Some(p) = under_way.pop_front() {
                p.await.map_err(|e| format!("publish error: {e}"))?;
                done += 1;
            }
        }
        under_way.push_back(publish().map_err(|e| format!("publish error: {e}"))?);
    }
    for p in under_way {
        p.await.map_err(|e| format!("publish error: {e}"))?;
        done += 1;
    }
    Ok(done)
}
