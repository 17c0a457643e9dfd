//! Logs a user can read, in the blocking adapter: the same lines and fields as the other
//! adapters (consumer{id topic channel}, nsqd, msg_id, attempts), and a handler error at WARN.

use nsq_blocking::{Consumer, HandlerError, Message};
use nsq_test_broker::Nsqd;

use nsq_test_support::log_capture::{Capture, field};

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
            tracing::info!("blocking handler at work");
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
    // The handler's own line is in its message's span, in the consumer's.
    let own = capture.wait_for("blocking_logs", "the handler's line", |l| {
        l.contains("blocking handler at work")
    });
    assert!(
        own.contains("consumer{id=") && own.contains(":message{id="),
        "{own}"
    );
    assert_eq!(field(&own, "attempts"), Some("1"), "{own}");
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
