//! The `std_producer` and `std_consumer` examples run against the test broker: the producer
//! publishes to a broker the test owns and the consumer receives exactly those messages, then
//! the consumer on its own (seeded) broker. Each run is bounded by the examples' 10 s limit.
#![allow(
    clippy::duplicate_mod,
    reason = "each example includes the shared driver, as it does in its own binary"
)]

#[allow(dead_code, reason = "the examples' `main` is not called here")]
#[path = "../examples/std_consumer.rs"]
mod std_consumer;
#[allow(dead_code, reason = "the examples' `main` is not called here")]
#[path = "../examples/std_producer.rs"]
mod std_producer;

use std::time::Duration;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn producer_then_consumer_on_one_broker() {
    let nsqd = nsq_test_broker::Nsqd::start().unwrap();
    let flag = format!("--nsqd-tcp-address={}", nsqd.tcp_address());
    std_producer::run(&args(&[&flag, "--topic", "handover", "--count", "5"])).unwrap();
    assert!(nsqd.wait_for(Duration::from_secs(5), |s| {
        s.topics
            .iter()
            .any(|t| t.name == "handover" && t.message_count == 5)
    }));
    std_consumer::run(&args(&[&flag, "--topic=handover", "--count=5"])).unwrap();
    // Every message finished, none left in flight, the subscriber gone after CLS.
    assert!(nsqd.wait_for(Duration::from_secs(5), |s| {
        s.topics
            .iter()
            .flat_map(|t| &t.channels)
            .any(|c| c.finished == 5 && c.in_flight == 0 && c.depth == 0)
    }));
    let names: Vec<String> = nsqd
        .commands()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    assert_eq!(names.iter().filter(|n| *n == "FIN").count(), 5);
    assert!(names.iter().any(|n| n == "CLS"), "{names:?}");
}

#[test]
fn consumer_alone_uses_its_own_seeded_broker() {
    std_consumer::run(&[]).unwrap();
}
