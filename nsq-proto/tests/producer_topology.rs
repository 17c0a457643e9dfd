//! Routing by topology from the first publish, in virtual time: nsqd states its zone and
//! region in its IDENTIFY reply, so a producer routed by topology waits for the replies of
//! the nsqd it was given (at most `connect_timeout` after each connection began) before it
//! picks one, unless one that answered is already as near as any can be.

mod producer_common;

use nsq_proto::ConnectionConfig;
use nsq_proto::producer::{ProducerConfig, Routing};
use producer_common::{World, addr};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

/// Three nsqd: 0 in z1/r1, 1 in z2/r1, 2 in z3/r2; the producer is in z2/r1 (nsqd 1 is the
/// nearest, nsqd 0 the next nearest).
fn world(routing: Routing, tweak: impl FnOnce(&mut ProducerConfig)) -> World {
    let mut config = ProducerConfig {
        routing,
        connection: ConnectionConfig {
            topology_zone: Some("z2".into()),
            topology_region: Some("r1".into()),
            ..ConnectionConfig::default()
        },
        ..ProducerConfig::default()
    };
    tweak(&mut config);
    let mut w = World::new(config, 3);
    for (i, (zone, region)) in [("z1", "r1"), ("z2", "r1"), ("z3", "r2")]
        .iter()
        .enumerate()
    {
        w.server(i).topology = Some(((*zone).into(), (*region).into()));
    }
    w
}

fn received(w: &World) -> [usize; 3] {
    [0, 1, 2].map(|i| w.servers[&addr(i)].received.len())
}

#[test]
fn the_first_publish_waits_for_the_nearest_nsqd_to_state_its_zone() {
    let mut w = world(Routing::Topology, |_| {});
    w.server(1).hold_replies = true;
    w.add_all();
    // nsqd 0 and 2 answered; the nearest has not: the publish waits for it.
    let id = w.publish(b"first");
    w.advance(MS * 200);
    assert_eq!(received(&w), [0, 0, 0]);
    assert!(!w.is_resolved(id));
    w.release_replies(1);
    assert_eq!(received(&w), [0, 1, 0]);
    assert!(w.outcome(id).is_ok());
    // And every later one.
    for _ in 0..5 {
        w.publish(b"later");
    }
    assert_eq!(received(&w), [0, 6, 0]);
}

#[test]
fn the_wait_ends_at_connect_timeout_with_the_next_nearest() {
    let mut w = world(Routing::Topology, |c| c.connect_timeout = MS * 800);
    w.server(1).hold_replies = true;
    w.add_all();
    let id = w.publish(b"first");
    w.advance(MS * 799);
    assert_eq!(received(&w), [0, 0, 0]);
    // The nearest's connection began 800 ms ago and has not answered: the next nearest (the
    // same region) takes it.
    w.advance(MS);
    assert_eq!(received(&w), [1, 0, 0]);
    assert!(w.outcome(id).is_ok());
    // It no longer holds publishes back; once it answers it is the nearest again.
    w.publish(b"second");
    assert_eq!(received(&w), [2, 0, 0]);
    w.release_replies(1);
    w.publish(b"third");
    assert_eq!(received(&w), [2, 1, 0]);
}

#[test]
fn no_publish_fails_for_the_wait() {
    // publish_timeout shorter than connect_timeout: the wait ends with it, and the publish
    // goes to the nearest that answered rather than failing.
    let mut w = world(Routing::Topology, |c| {
        c.connect_timeout = MS * 2000;
        c.publish_timeout = MS * 300;
    });
    w.server(1).hold_replies = true;
    w.add_all();
    let id = w.publish(b"first");
    w.advance(MS * 300);
    assert!(w.outcome(id).is_ok());
    assert_eq!(received(&w), [1, 0, 0]);
}

#[test]
fn an_nsqd_whose_connect_fails_no_longer_holds_publishes_back() {
    let mut w = world(Routing::Topology, |_| {});
    w.server(1).up = false;
    w.add_all();
    let id = w.publish(b"first");
    assert!(w.outcome(id).is_ok());
    assert_eq!(received(&w), [1, 0, 0]);
    // A TCP connect that hangs holds them back until it times out (connect_timeout).
    let mut w = world(Routing::Topology, |c| c.connect_timeout = MS * 500);
    w.server(1).hold_connects = true;
    w.add_all();
    let id = w.publish(b"first");
    w.advance(MS * 499);
    assert_eq!(received(&w), [0, 0, 0]);
    w.advance(MS);
    assert!(w.outcome(id).is_ok());
    assert_eq!(received(&w), [1, 0, 0]);
}

#[test]
fn nothing_waits_once_the_nearest_possible_has_answered() {
    // The nearest answered; the others have not: no wait for them.
    let mut w = world(Routing::Topology, |_| {});
    w.server(0).hold_replies = true;
    w.server(2).hold_replies = true;
    w.add_all();
    w.publish(b"first");
    assert_eq!(received(&w), [0, 1, 0]);
    // A producer in no zone or region has no nearest to wait for.
    let mut w = world(Routing::Topology, |c| {
        c.connection.topology_zone = None;
        c.connection.topology_region = None;
    });
    w.server(0).hold_replies = true;
    w.add_all();
    w.publish(b"first");
    assert_eq!(received(&w), [0, 1, 0]);
    // Nor does failover routing (the first ready in the order given).
    let mut w = world(Routing::Failover, |_| {});
    w.server(0).hold_replies = true;
    w.add_all();
    w.publish(b"first");
    assert_eq!(received(&w), [0, 1, 0]);
}

#[test]
fn a_producer_in_a_region_only_waits_for_the_region() {
    // No zone: an nsqd in the producer's region is as near as any can be.
    let mut w = world(Routing::Topology, |c| c.connection.topology_zone = None);
    w.server(1).hold_replies = true;
    w.add_all();
    w.publish(b"first");
    assert_eq!(received(&w), [1, 0, 0]);
    // With only the other region's nsqd ready, it waits for the region's.
    let mut w = world(Routing::Topology, |c| c.connection.topology_zone = None);
    w.server(0).hold_replies = true;
    w.server(1).hold_replies = true;
    w.add_all();
    let id = w.publish(b"first");
    assert!(!w.is_resolved(id));
    w.release_replies(1);
    assert_eq!(received(&w), [0, 1, 0]);
}

#[test]
fn every_order_of_replies_sends_the_first_publish_to_the_nearest() {
    // The three replies in every order, the publish made before any, after the first and
    // after the second: it always lands in the producer's zone.
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        for before in 0..3 {
            let mut w = world(Routing::Topology, |_| {});
            for i in 0..3 {
                w.server(i).hold_replies = true;
            }
            w.add_all();
            let mut id = None;
            for (k, &i) in order.iter().enumerate() {
                if k == before {
                    id = Some(w.publish(b"first"));
                }
                w.advance(MS * 10);
                w.release_replies(i);
            }
            assert!(w.outcome(id.unwrap()).is_ok(), "{order:?} {before}");
            assert_eq!(received(&w), [0, 1, 0], "{order:?} {before}");
        }
    }
}
