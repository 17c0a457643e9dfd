//! Logs a user can read, in the blocking adapter: the same lines and fields as the other
//! adapters (consumer{id topic channel}, nsqd, msg_id, attempts), and a handler error at WARN.

use nsq_blocking::{Consumer, HandlerError, Message};
use nsq_test_broker::Nsqd;

use nsq_test_support::log_capture::{Capture, consumer_lines, field};

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
    // The consumer's lines, its handler's own line and the failure (nsq-test-support).
    let failed = consumer_lines(&capture, "blocking_logs", &addr, "blocking handler at work");
    assert_eq!(field(&failed, "nsqd"), Some(addr.as_str()), "{failed}");
    assert!(failed.contains("error=cannot store 4 bytes"), "{failed}");
    handle.stop();
    runner.join().unwrap();
}
