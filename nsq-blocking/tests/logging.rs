//! Logs a user can read, in the blocking adapter: the same lines and fields as the other
//! adapters (consumer{id topic channel}, nsqd, msg_id, attempts), and a handler error at WARN.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nsq_blocking::{Consumer, HandlerError, Message};
use nsq_test_broker::Nsqd;
use tracing_subscriber::fmt::MakeWriter;

/// Every line logged in this test binary (the drivers run on their own threads, so the
/// subscriber is the global default; each test uses its own topic).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn global() -> Capture {
        static CAPTURE: OnceLock<Capture> = OnceLock::new();
        CAPTURE
            .get_or_init(|| {
                let capture = Capture::default();
                tracing_subscriber::fmt()
                    .with_writer(capture.clone())
                    .with_ansi(false)
                    .with_env_filter("info")
                    .init();
                capture
            })
            .clone()
    }

    fn lines(&self, topic: &str) -> Vec<String> {
        let needle = format!("topic={topic} ");
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(&needle))
            .map(str::to_owned)
            .collect()
    }

    /// Waits (bounded) until a line of `topic` satisfies `pred`; returns it.
    fn wait_for(&self, topic: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
        for _ in 0..1000 {
            if let Some(l) = self.lines(topic).into_iter().find(|l| pred(l)) {
                return l;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no log line {what}; got:\n{}", self.lines(topic).join("\n"));
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

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}="))? + name.len() + 1;
    let rest = &line[start..];
    let end = rest.find([' ', '}']).unwrap_or(rest.len());
    Some(&rest[..end])
}

fn store(body: &[u8]) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!(
        "cannot store {} bytes",
        body.len()
    )))
}

#[test]
fn consumer_lines_name_topic_channel_and_nsqd() {
    let capture = Capture::global();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    nsqd.publish("blocking_logs", b"body");
    let consumer = Consumer::builder("blocking_logs", "ch")
        .nsqd(&addr)
        .on_give_up(|m: &Message| assert!(m.attempts() > 1))
        .build()
        .unwrap();
    let handle = consumer.handle();
    let runner = std::thread::spawn(move || {
        consumer.run(1, |m: Message| -> Result<(), HandlerError> {
            store(m.body())?;
            Ok(())
        })
    });
    let ready = capture.wait_for("blocking_logs", "connected", |l| {
        l.contains("connected to nsqd")
    });
    assert!(
        ready.contains(" INFO ") && ready.contains("consumer{id="),
        "{ready}"
    );
    assert!(ready.contains("topic=blocking_logs channel=ch}"), "{ready}");
    assert_eq!(field(&ready, "nsqd"), Some(addr.as_str()), "{ready}");
    let failed = capture.wait_for("blocking_logs", "handler failed", |l| {
        l.contains("handler failed")
    });
    assert!(failed.contains(" WARN "), "{failed}");
    assert_eq!(field(&failed, "msg_id").map(str::len), Some(16), "{failed}");
    assert_eq!(field(&failed, "attempts"), Some("1"), "{failed}");
    assert_eq!(field(&failed, "nsqd"), Some(addr.as_str()), "{failed}");
    assert!(failed.contains("error=cannot store 4 bytes"), "{failed}");
    handle.stop();
    runner.join().unwrap();
}
