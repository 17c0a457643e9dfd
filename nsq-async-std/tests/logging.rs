//! Logs a user can read, in the async-std adapter: the same lines and fields as the other
//! adapters (consumer{id topic channel}, nsqd, msg_id, attempts), a handler error at WARN and a
//! producer's lines in producer{id}.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nsq_async_std::{Consumer, HandlerError, Message, Producer};
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

#[test]
fn consumer_and_producer_lines() {
    let capture = Capture::global();
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let consumer = Consumer::builder("async_logs", "ch")
        .nsqd(&addr)
        .build()
        .unwrap();
    let handle = consumer.handle();
    let runner = async_std::task::spawn(consumer.run(1, |m: Message| async move {
        let text = std::str::from_utf8(m.body())?;
        Err(HandlerError::msg(format!("no handler for {text}")))
    }));
    async_std::task::block_on(async {
        let producer = Producer::builder().nsqd(&addr).build().unwrap();
        producer.publish("async_logs", "hello").await.unwrap();
        producer.close().await;
    });
    let ready = capture.wait_for("async_logs", "connected", |l| {
        l.contains("connected to nsqd")
    });
    assert!(
        ready.contains(" INFO ") && ready.contains("consumer{id="),
        "{ready}"
    );
    assert!(ready.contains("topic=async_logs channel=ch}"), "{ready}");
    assert_eq!(field(&ready, "nsqd"), Some(addr.as_str()), "{ready}");
    let failed = capture.wait_for("async_logs", "handler failed", |l| {
        l.contains("handler failed")
    });
    assert!(failed.contains(" WARN "), "{failed}");
    assert_eq!(field(&failed, "msg_id").map(str::len), Some(16), "{failed}");
    assert_eq!(field(&failed, "attempts"), Some("1"), "{failed}");
    assert!(failed.contains("error=no handler for hello"), "{failed}");
    let all = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    let producer = all
        .lines()
        .find(|l| l.contains("producer{id=") && l.contains("connected to nsqd"))
        .unwrap_or_else(|| panic!("no producer line in:\n{all}"));
    assert_eq!(field(producer, "nsqd"), Some(addr.as_str()), "{producer}");
    async_std::task::block_on(async {
        handle.stop().await;
        runner.await;
    });
}
