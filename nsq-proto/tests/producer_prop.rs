//! Property tests: random operation sequences (publishes, gathered into batches or not, server
//! deaths and revivals, held connects, rejections, messages too big for one nsqd, time jumps,
//! close) against a producer and fake nsqd peers.
//!
//! Invariants: no publish or ping id ever resolves twice; the producer's outstanding count
//! equals the accepted-but-unresolved ids; after close and enough virtual time every accepted
//! id has resolved exactly once and `Closed` came exactly once.

mod producer_common;

use nsq_proto::producer::{PingId, ProducerConfig, ProducerEvent, PublishId, Routing};
use producer_common::{World, topic};
use proptest::prelude::*;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Publish(u8),
    /// A message larger than server 1 takes (it refuses it like nsqd, with E_BAD_MESSAGE).
    Big,
    Multi(u8),
    Deferred,
    Ping,
    Kill(usize),
    Revive(usize),
    Ack(usize, usize),
    Reject(usize),
    AutoAck(usize, bool),
    Hold(usize, bool),
    CompleteConnects,
    Advance(u64),
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..20u8).prop_map(Op::Publish),
        1 => Just(Op::Big),
        1 => (1..5u8).prop_map(Op::Multi),
        1 => Just(Op::Deferred),
        1 => Just(Op::Ping),
        1 => (0..3usize).prop_map(Op::Kill),
        1 => (0..3usize).prop_map(Op::Revive),
        2 => (0..3usize, 1..8usize).prop_map(|(i, n)| Op::Ack(i, n)),
        1 => (0..3usize).prop_map(Op::Reject),
        1 => (0..3usize, any::<bool>()).prop_map(|(i, b)| Op::AutoAck(i, b)),
        1 => (0..3usize, any::<bool>()).prop_map(|(i, b)| Op::Hold(i, b)),
        1 => Just(Op::CompleteConnects),
        2 => (0..40_000u64).prop_map(Op::Advance),
        1 => Just(Op::Close),
    ]
}

fn check(w: &World, accepted: &[PublishId], pings: &[PingId]) {
    for (id, r) in &w.resolved {
        assert!(r.len() <= 1, "{id} resolved twice: {r:?}");
    }
    for (id, r) in &w.pings {
        assert!(r.len() <= 1, "{id} resolved twice: {r:?}");
    }
    let unresolved = accepted.iter().filter(|id| !w.is_resolved(**id)).count();
    assert_eq!(w.producer.stats().outstanding, unresolved);
    assert!(pings.len() >= w.pings.len());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        // Deterministic in CI; change the seed locally to explore.
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x9b0d_5eed),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_publish_resolves_exactly_once(
        ops in proptest::collection::vec(op(), 1..60),
        round_robin in any::<bool>(),
        max_outstanding in prop_oneof![Just(None), (1..30usize).prop_map(Some)],
        long_wait in any::<bool>(),
        batching in any::<bool>(),
        max_body in 40..400u32,
    ) {
        let config = ProducerConfig {
            routing: if round_robin { Routing::RoundRobin } else { Routing::Failover },
            max_outstanding,
            max_pending: 25,
            // Longer than close_timeout: pending publishes can meet the close deadline.
            publish_timeout: Duration::from_secs(if long_wait { 30 } else { 3 }),
            reply_timeout: Some(Duration::from_secs(20)),
            close_timeout: Duration::from_secs(10),
            batching,
            ..ProducerConfig::default()
        };
        let mut config = config;
        config.connection.limits.max_body_size = max_body;
        let mut w = World::new(config, 3);
        w.server(1).max_msg_size = Some(64);
        w.add_all();
        let mut accepted: Vec<PublishId> = Vec::new();
        let mut pings: Vec<PingId> = Vec::new();
        let mut n = 0u32;
        for op in ops {
            n += 1;
            let now = w.now;
            match op {
                Op::Publish(k) => {
                    for _ in 0..k {
                        if let Ok(id) = w.producer.publish(now, &topic(), &n.to_be_bytes()) {
                            accepted.push(id);
                        }
                    }
                }
                Op::Big => {
                    if let Ok(id) = w.producer.publish(now, &topic(), &[7; 100]) {
                        accepted.push(id);
                    }
                }
                Op::Multi(k) => {
                    let bodies: Vec<Vec<u8>> = (0..k).map(|j| vec![j + 1; 3]).collect();
                    if let Ok(id) = w.producer.multi_publish(now, &topic(), &bodies) {
                        accepted.push(id);
                    }
                }
                Op::Deferred => {
                    if let Ok(id) =
                        w.producer.deferred_publish(now, &topic(), Duration::from_secs(1), b"d")
                    {
                        accepted.push(id);
                    }
                }
                Op::Ping => {
                    if let Ok(id) = w.producer.ping(now) {
                        pings.push(id);
                    }
                }
                Op::Kill(i) => w.kill(i),
                Op::Revive(i) => w.revive(i),
                Op::Ack(i, k) => {
                    if w.conn_of(i).is_some() {
                        w.ack(i, k);
                    }
                }
                Op::Reject(i) => {
                    if w.conn_of(i).is_some() {
                        w.reject(i);
                    }
                }
                Op::AutoAck(i, b) => w.server(i).auto_ack = b,
                Op::Hold(i, b) => w.server(i).hold_connects = b,
                Op::CompleteConnects => w.complete_connects(),
                Op::Advance(ms) => w.advance(Duration::from_millis(ms)),
                Op::Close => w.producer.close(now),
            }
            w.settle();
            check(&w, &accepted, &pings);
        }
        // Wind down: close, and let every timer run out.
        w.producer.close(w.now);
        w.settle();
        w.advance(Duration::from_secs(120));
        check(&w, &accepted, &pings);
        w.assert_resolved_once(&accepted);
        for id in &pings {
            prop_assert_eq!(w.pings.get(id).map(Vec::len), Some(1), "{} unresolved", id);
        }
        prop_assert!(w.producer.is_closed());
        prop_assert_eq!(w.events.iter().filter(|e| **e == ProducerEvent::Closed).count(), 1);
        prop_assert_eq!(w.producer.poll_timeout(), None);
        prop_assert!(w.peers.is_empty());
        // Only accepted ids ever resolved.
        prop_assert_eq!(w.resolved.len(), accepted.len());
    }
}
