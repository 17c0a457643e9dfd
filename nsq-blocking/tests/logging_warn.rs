//! Logs under a WARN-only filter (`RUST_LOG=warn`), in the blocking adapter: every line still
//! names its client and its nsqd (a binary of its own: the drivers run on threads of their
//! own, so the capture is the global subscriber, installed here at WARN).

use nsq_blocking::{Consumer, HandlerError, Message, Producer};
use nsq_test_broker::Nsqd;
use nsq_test_support::log_capture::{Capture, check_warn_only, closed_address};

#[test]
fn under_a_warn_filter_every_line_names_its_client_and_nsqd() {
    let capture = Capture::global_with("warn");
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let closed = closed_address();
    nsqd.publish("blocking_warn_only", b"fails");
    let consumer = Consumer::builder("blocking_warn_only", "ch")
        .nsqd(&addr)
        .nsqd(&closed)
        .build()
        .unwrap();
    let handle = consumer.handle();
    let runner = std::thread::spawn(move || {
        consumer.run(1, |_m: Message| -> Result<(), HandlerError> {
            tracing::warn!("the blocking handler warns");
            Err(HandlerError::msg("database down"))
        })
    });
    let producer = Producer::builder().nsqd(&closed).build().unwrap();
    check_warn_only(
        &capture,
        "blocking_warn_only",
        &addr,
        &closed,
        "the blocking handler warns",
    );
    handle.stop();
    runner.join().unwrap();
    producer.close();
}
