//! Logs under a WARN-only filter (`RUST_LOG=warn`), in the async-std adapter: every line still
//! names its client and its nsqd (a binary of its own: the drivers run on the executor's
//! threads, so the capture is the global subscriber, installed here at WARN).

use nsq_async_std::{Consumer, HandlerError, Message, Producer};
use nsq_test_broker::Nsqd;
use nsq_test_support::log_capture::{Capture, check_warn_only, closed_address};

#[test]
fn under_a_warn_filter_every_line_names_its_client_and_nsqd() {
    let capture = Capture::global_with("warn");
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let closed = closed_address();
    nsqd.publish("async_warn_only", b"fails");
    let consumer = Consumer::builder("async_warn_only", "ch")
        .nsqd(&addr)
        .nsqd(&closed)
        .build()
        .unwrap();
    let handle = consumer.handle();
    let runner = async_std::task::spawn(consumer.run(1, |_m: Message| async move {
        tracing::warn!("the async handler warns");
        Err(HandlerError::msg("database down"))
    }));
    let producer =
        async_std::task::block_on(async { Producer::builder().nsqd(&closed).build().unwrap() });
    check_warn_only(
        &capture,
        "async_warn_only",
        &addr,
        &closed,
        "the async handler warns",
    );
    async_std::task::block_on(async {
        handle.stop().await;
        runner.await;
        producer.close().await;
    });
}
