//! Captured `tracing` output for the adapters' log tests (each adapter's `tests/logging.rs`),
//! written once. The lines are formatted by tracing-subscriber's `fmt` layer, as an
//! application would print them.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Bytes logged through a subscriber whose writer is this capture.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// Every line logged in this test binary at INFO and above, through the global default
    /// subscriber (for drivers that run on threads of their own; each test then uses its own
    /// topic, and reads its lines with [`Capture::lines_of`]).
    pub fn global() -> Capture {
        Capture::global_with("info")
    }

    /// Every line logged in this test binary through the global default subscriber, which
    /// the first call installs with `filter` (`"warn"`: a binary of its own, since a test
    /// binary has one global subscriber).
    ///
    /// # Panics
    ///
    /// When an earlier call installed it with another filter.
    pub fn global_with(filter: &str) -> Capture {
        static CAPTURE: OnceLock<(String, Capture)> = OnceLock::new();
        let (installed, capture) = CAPTURE.get_or_init(|| {
            let capture = Capture::default();
            tracing_subscriber::fmt()
                .with_writer(capture.clone())
                .with_ansi(false)
                .with_env_filter(filter)
                .init();
            (filter.to_owned(), capture)
        });
        assert_eq!(installed, filter, "the global subscriber's filter");
        capture.clone()
    }

    /// Waits (bounded, about 10 s) until a captured line satisfies `pred`; returns it.
    pub fn wait_for_line(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        for _ in 0..1000 {
            if let Some(l) = self.lines().into_iter().find(|l| pred(l)) {
                return l;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no log line {what}; got:\n{}", self.lines().join("\n"));
    }

    /// A subscriber writing into this capture, filtered by `filter` (`"info"`, ...).
    pub fn subscriber(&self, filter: &str) -> impl tracing::Subscriber + Send + Sync + use<> {
        tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .with_env_filter(filter)
            .finish()
    }

    /// Every captured line.
    pub fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The captured lines of the consumer of `topic`.
    pub fn lines_of(&self, topic: &str) -> Vec<String> {
        let needle = format!("topic={topic} ");
        self.lines()
            .into_iter()
            .filter(|l| l.contains(&needle))
            .collect()
    }

    /// Waits (bounded, about 10 s) until a line of the consumer of `topic` satisfies `pred`;
    /// returns it.
    pub fn wait_for(&self, topic: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
        for _ in 0..1000 {
            if let Some(l) = self.lines_of(topic).into_iter().find(|l| pred(l)) {
                return l;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "no log line {what}; got:\n{}",
            self.lines_of(topic).join("\n")
        );
    }

    /// Everything captured, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

/// The value of field `name` in a formatted line (`name=value`, up to a space or `}`).
pub fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}="))? + name.len() + 1;
    let rest = &line[start..];
    let end = rest.find([' ', '}']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The lines of a consumer of `topic`/`ch` on nsqd `addr` whose handler logs `handler_line`
/// and fails its first message: the consumer connects at INFO in `consumer{id topic
/// channel}` naming the nsqd, the handler's own line is in its message's span (attempts 1),
/// and the failure comes at WARN with the message's id and attempts. Returns that line.
pub fn consumer_lines(capture: &Capture, topic: &str, addr: &str, handler_line: &str) -> String {
    let ready = capture.wait_for(topic, "connected", |l| l.contains("connected to nsqd"));
    assert!(
        ready.contains(" INFO ") && ready.contains("consumer{id="),
        "{ready}"
    );
    assert!(
        ready.contains(&format!("topic={topic} channel=ch}}")),
        "{ready}"
    );
    assert_eq!(field(&ready, "nsqd"), Some(addr), "{ready}");
    // The handler's own line is in its message's span, in the consumer's.
    let own = capture.wait_for(topic, "the handler's line", |l| l.contains(handler_line));
    assert!(
        own.contains("consumer{id=") && own.contains(":message{id="),
        "{own}"
    );
    assert_eq!(field(&own, "attempts"), Some("1"), "{own}");
    let failed = capture.wait_for(topic, "handler failed", |l| l.contains("handler failed"));
    assert!(failed.contains(" WARN "), "{failed}");
    assert_eq!(field(&failed, "msg_id").map(str::len), Some(16), "{failed}");
    assert_eq!(field(&failed, "attempts"), Some("1"), "{failed}");
    failed
}

/// What a WARN-only subscriber (`RUST_LOG=warn`) captured of a consumer of `topic`/`ch` whose
/// handler logs `handler_warns` at WARN and fails, with a second nsqd at `closed` that
/// refuses connections, and of a producer of that closed nsqd alone: every line names its
/// client (`consumer{id=.. topic=.. channel=ch}` or `producer{id=..}`) although INFO spans
/// are off under this filter, and each line about an nsqd names it. `nsqd` is the consumer's
/// live nsqd. Checks the lines captured so far, waiting for the ones it expects.
///
/// # Panics
///
/// When a line is missing or does not name its client.
pub fn check_warn_only(
    capture: &Capture,
    topic: &str,
    nsqd: &str,
    closed: &str,
    handler_warns: &str,
) {
    let consumer = format!("topic={topic} channel=ch}}");
    let failed = capture.wait_for_line("handler failed", |l| {
        l.contains("handler failed") && l.contains(&consumer)
    });
    assert!(
        failed.contains(" WARN ") && failed.contains("consumer{id="),
        "{failed}"
    );
    assert_eq!(field(&failed, "nsqd"), Some(nsqd), "{failed}");
    assert_eq!(field(&failed, "msg_id").map(str::len), Some(16), "{failed}");
    assert_eq!(field(&failed, "attempts"), Some("1"), "{failed}");
    // The handler's own line: its message's span (INFO) is off, its consumer's is not.
    let own = capture.wait_for_line("the handler's line", |l| l.contains(handler_warns));
    assert!(own.contains(&consumer), "{own}");
    // Backoff is consumer-wide: no nsqd.
    let backoff = capture.wait_for_line("backing off", |l| {
        l.contains("backing off") && l.contains(&consumer)
    });
    assert!(backoff.contains(" WARN "), "{backoff}");
    let refused = capture.wait_for_line("the consumer's failed connect", |l| {
        l.contains("nsqd connection failed") && l.contains(&consumer)
    });
    assert_eq!(field(&refused, "nsqd"), Some(closed), "{refused}");
    let producer = capture.wait_for_line("the producer's failed connect", |l| {
        l.contains("nsqd connection failed") && l.contains("producer{id=")
    });
    assert!(producer.contains(" WARN "), "{producer}");
    assert_eq!(field(&producer, "nsqd"), Some(closed), "{producer}");
    for l in capture.lines() {
        assert!(
            l.contains(" WARN ") || l.contains(" ERROR "),
            "below WARN: {l}"
        );
        assert!(
            l.contains(&consumer) || l.contains("producer{id="),
            "a line that names no client: {l}"
        );
        if l.contains("conn=") || l.contains("msg_id=") {
            assert!(
                field(&l, "nsqd").is_some_and(|n| !n.is_empty()),
                "no nsqd: {l}"
            );
        }
    }
}

/// An address on 127.0.0.1 nothing listens on (a port just bound and released): the log tests'
/// nsqd that refuses connections.
pub fn closed_address() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}
