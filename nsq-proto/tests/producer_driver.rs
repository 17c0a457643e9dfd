//! One generic driver loop (over `nsq_proto::driver::Driven`) runs both a producer and a
//! consumer against fake nsqd peers.

use bytes::BytesMut;
use nsq_proto::consumer::{ConsumerConfig, ConsumerEvent};
use nsq_proto::driver::{Action, ConnId, Driven};
use nsq_proto::producer::{ProducerConfig, ProducerEvent};
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig};
use nsq_proto::{Channel, Consumer, Producer, Topic};
use std::collections::BTreeMap;
use std::time::Instant;

/// Moves bytes between `machine` and one fake nsqd per connection until nothing moves;
/// returns the events.
fn drive<M: Driven>(
    machine: &mut M,
    peers: &mut BTreeMap<ConnId, FakeNsqd>,
    now: Instant,
) -> Vec<M::Event> {
    let mut events = Vec::new();
    loop {
        let mut progressed = false;
        while let Some(action) = machine.poll_action() {
            progressed = true;
            match action {
                Action::Connect { conn, .. } => {
                    peers.insert(conn, FakeNsqd::new(FakeNsqdConfig::default()));
                    machine.handle_connected(now, conn);
                }
                Action::Transmit { conn, data } => {
                    if let Some(peer) = peers.get_mut(&conn) {
                        peer.receive(&data);
                    }
                }
                Action::Disconnect { conn } => {
                    peers.remove(&conn);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let ids: Vec<ConnId> = peers.keys().copied().collect();
        for id in ids {
            let out = peers.get_mut(&id).unwrap().take_output();
            if !out.is_empty() {
                progressed = true;
                machine.handle_input(now, id, &mut BytesMut::from(&out[..]));
            }
        }
        while let Some(e) = machine.poll_event() {
            progressed = true;
            events.push(e);
        }
        if !progressed {
            return events;
        }
    }
}

#[test]
fn one_generic_loop_drives_producer_and_consumer() {
    #[allow(
        clippy::disallowed_methods,
        reason = "origin of virtual time in a test"
    )]
    let now = Instant::now();
    let topic = Topic::new("t").unwrap();

    let mut producer = Producer::new(ProducerConfig::default(), 1).unwrap();
    let mut producer_peers = BTreeMap::new();
    producer.add_nsqd(now, "10.0.0.1:4150").unwrap();
    let id = producer.publish(now, &topic, b"hello").unwrap();
    let events = drive(&mut producer, &mut producer_peers, now);
    assert!(events.contains(&ProducerEvent::Published(id)), "{events:?}");

    let mut consumer = Consumer::new(
        ConsumerConfig::default(),
        topic,
        Channel::new("c").unwrap(),
        1,
    );
    let mut consumer_peers = BTreeMap::new();
    consumer.add_nsqd(now, "10.0.0.1:4150").unwrap();
    let events = drive(&mut consumer, &mut consumer_peers, now);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ConsumerEvent::ConnectionReady { .. })),
        "{events:?}"
    );
    let peer = consumer_peers.values_mut().next().unwrap();
    assert!(peer.is_subscribed());
    assert_eq!(peer.rdy(), 1);
    // Timers through the trait: the producer's connection watches heartbeats.
    assert!(Driven::poll_timeout(&producer).is_some());
}
