//! The example of `tests/README.md` (nsq-test-broker's page on crates.io), kept compiling and
//! passing here: a user testing their own handler against the in-process broker, no nsqd
//! needed.

use nsq_test_broker::{Nsqd, Stats};
use nsq_tokio::{Config, Consumer, HandlerError, Message, Producer};
use std::time::Duration;

/// The code under test: bills an order, refuses anything else.
fn bill(msg: &Message) -> Result<u32, HandlerError> {
    let body = std::str::from_utf8(msg.body()).map_err(HandlerError::msg)?;
    let id = body
        .strip_prefix("order:")
        .ok_or(HandlerError::msg("not an order"))?;
    id.parse().map_err(HandlerError::msg)
}

// Multi-threaded: the broker's `wait_for` blocks its thread while the client's tasks run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bill_finishes_orders_and_requeues_the_rest() {
    let nsqd = Nsqd::start().unwrap(); // 127.0.0.1, ephemeral port, stops when dropped
    let addr = nsqd.tcp_address().to_string();

    let producer = Producer::connect(&addr, &Config::default()).await.unwrap();
    producer
        .multi_publish("orders", ["order:42", "garbage"])
        .await
        .unwrap();

    let mut consumer = Consumer::builder("orders", "billing")
        .nsqd(&addr)
        .build()
        .unwrap();
    let mut billed = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(5), consumer.recv())
            .await
            .expect("a message within 5 s")
            .expect("consumer running");
        match bill(&msg) {
            Ok(id) => {
                billed.push(id);
                msg.finish();
            }
            Err(_) => msg.requeue(Some(Duration::from_secs(60))),
        }
    }
    assert_eq!(billed, [42]);

    // The broker's side: one FIN and one REQ on the `billing` channel.
    let settled = |s: &Stats| {
        s.topics
            .iter()
            .flat_map(|t| &t.channels)
            .any(|c| c.finished == 1 && c.requeued == 1)
    };
    assert!(nsqd.wait_for(Duration::from_secs(5), settled));
    consumer.stop().await;
    producer.close().await;
}
