//! Logs a user can read, in the async-std adapter: the same lines and fields as the other
//! adapters (consumer{id topic channel}, nsqd, msg_id, attempts), a handler error at WARN and a
//! producer's lines in producer{id}.

use nsq_async_std::{Consumer, HandlerError, Message, Producer};
use nsq_test_broker::Nsqd;

use nsq_test_support::log_capture::{Capture, field};

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
        tracing::info!("async handler at work");
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
    // The handler's own line is in its message's span, in the consumer's.
    let own = capture.wait_for("async_logs", "the handler's line", |l| {
        l.contains("async handler at work")
    });
    assert!(
        own.contains("consumer{id=") && own.contains(":message{id="),
        "{own}"
    );
    assert_eq!(field(&own, "attempts"), Some("1"), "{own}");
    let failed = capture.wait_for("async_logs", "handler failed", |l| {
        l.contains("handler failed")
    });
    assert!(failed.contains(" WARN "), "{failed}");
    assert_eq!(field(&failed, "msg_id").map(str::len), Some(16), "{failed}");
    assert_eq!(field(&failed, "attempts"), Some("1"), "{failed}");
    assert!(failed.contains("error=no handler for hello"), "{failed}");
    let all = capture.text();
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
