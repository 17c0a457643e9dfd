//! Logs a user can read, in the async-std adapter: the same lines and fields as the other
//! adapters (consumer{id topic channel}, nsqd, msg_id, attempts), a handler error at WARN and a
//! producer's lines in producer{id}.

use nsq_async_std::{Consumer, HandlerError, Message, Producer};
use nsq_test_broker::Nsqd;

use nsq_test_support::log_capture::{Capture, consumer_lines, field};

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
    // The consumer's lines, its handler's own line and the failure (nsq-test-support).
    let failed = consumer_lines(&capture, "async_logs", &addr, "async handler at work");
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
