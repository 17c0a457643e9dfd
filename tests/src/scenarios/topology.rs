//! Topology (go-nsq's `topology_zone` / `topology_region`, nsqd after v1.3.0): nsqd's
//! `topology-aware-consumption` experiment hands a channel's messages to the subscriber in its
//! own zone, and counts the deliveries by locality; a producer routing by topology publishes
//! to the nearest nsqd, from its first publish on (it waits for the nearest's IDENTIFY reply,
//! which states its zone, at most `connect_timeout`), and fails over to the next nearest.

use super::{
    Connection, ConsumerSetup, Factory, GoConfig, ProducerOptions, WAIT, addr, eventually, start,
};
use crate::Nsqd;
use std::time::Duration;

/// A consumer of `topo`/`ch` on `nsqd` in `zone` and `region`, RDY 100.
fn located(f: &dyn Factory, nsqd: &Nsqd, zone: &str, region: &str) -> Box<dyn super::Consumer> {
    let setup = ConsumerSetup {
        config: Some(GoConfig::with(&[
            ("max_in_flight", "100"),
            ("topology_zone", zone),
            ("topology_region", region),
        ])),
        nsqd: vec![addr(nsqd)],
        ..ConsumerSetup::default()
    };
    f.consumer("topo", "ch", &setup).unwrap()
}

pub(super) fn topology_aware_consumption_prefers_the_same_zone(f: &dyn Factory) {
    let nsqd = start(
        Nsqd::builder()
            .topology_zone("zone-a")
            .topology_region("region-1")
            .topology_aware_consumption(true),
    );
    let mut near = located(f, &nsqd, "zone-a", "region-1");
    let mut far = located(f, &nsqd, "zone-b", "region-1");
    // Both subscribed and ready for a message before anything is published.
    let ready = || {
        let clients = nsqd.clients();
        clients.len() == 2 && clients.iter().all(|c| c.rdy >= 1 && c.in_flight == 0)
    };
    assert!(eventually(WAIT, ready), "{:?}", nsqd.clients());
    // One at a time, each once the last one's FIN was read: the same zone's consumer is
    // ready for every message, and gets each.
    for i in 0..50 {
        nsqd.publish("topo", format!("{i}").as_bytes());
        near.next(WAIT)
            .expect("the same-zone consumer gets it")
            .finish();
        let finished = || {
            nsqd.channel("topo", "ch")
                .is_some_and(|c| c.finished == i + 1)
        };
        assert!(
            eventually(WAIT, finished),
            "{:?}",
            nsqd.channel("topo", "ch")
        );
    }
    assert!(
        far.next(Duration::from_millis(200)).is_none(),
        "the other zone's consumer got one"
    );
    let counted = || {
        nsqd.channel("topo", "ch").is_some_and(|c| {
            (
                c.zone_local_msg_count,
                c.region_local_msg_count,
                c.global_msg_count,
            ) == (50, 0, 0)
                && c.finished == 50
        })
    };
    assert!(
        eventually(WAIT, counted),
        "{:?}",
        nsqd.channel("topo", "ch")
    );
    // The consumer shows the nsqd's zone, from its IDENTIFY reply.
    assert_eq!(near.stats().nsqd[0].topology_zone, "zone-a");
    near.stop();
    far.stop();
}

pub(super) fn producer_routing_by_topology_prefers_the_nearest_nsqd(f: &dyn Factory) {
    let other_region = start(Nsqd::builder().topology_zone("z9").topology_region("r2"));
    let same_region = start(Nsqd::builder().topology_zone("z2").topology_region("r1"));
    let same_zone = start(Nsqd::builder().topology_zone("z1").topology_region("r1"));
    let options = ProducerOptions {
        routing_topology: true,
        connection: Connection {
            topology: Some(("z1".into(), "r1".into())),
            ..Connection::default()
        },
        ..ProducerOptions::default()
    };
    // Listed farthest first: the order does not decide, the topology does.
    let nsqd = [&other_region, &same_region, &same_zone].map(addr);
    let p = f.producer(&nsqd, Some(&options)).unwrap();
    let count = |n: &Nsqd| n.topic("route").map_or(0, |t| t.message_count);
    // Every connection up (a publish waits for the first ready one only).
    p.ping().unwrap();
    assert!(eventually(WAIT, || {
        p.publish("route", b"x").unwrap();
        count(&same_zone) > 0
    }));
    let before = [count(&other_region), count(&same_region)];
    for _ in 0..20 {
        p.publish("route", b"x").unwrap();
    }
    assert_eq!([count(&other_region), count(&same_region)], before);
    // The same zone gone: the same region next.
    same_zone.shutdown();
    assert!(eventually(WAIT, || p.publish("route", b"y").is_ok()
        && count(&same_region) > 0));
    let far = count(&other_region);
    for _ in 0..20 {
        p.publish("route", b"y").unwrap();
    }
    assert_eq!(count(&other_region), far);
    p.close();
}

/// The producer's zone, z1, is the nearest nsqd's, which accepts connections only after a
/// while (its IDENTIFY reply comes late): the first publish, made at once, waits for it
/// rather than going to the nsqd that answered first. When it never answers, publishes go
/// to the next nearest once `connect_timeout` has passed.
pub(super) fn topology_routing_waits_for_the_nearest_nsqd_to_answer(f: &dyn Factory) {
    let other_region = start(Nsqd::builder().topology_zone("z9").topology_region("r2"));
    let same_region = start(Nsqd::builder().topology_zone("z2").topology_region("r1"));
    let same_zone = start(Nsqd::builder().topology_zone("z1").topology_region("r1"));
    let options = |connect_timeout: Duration| ProducerOptions {
        routing_topology: true,
        connect_timeout: Some(connect_timeout),
        connection: Connection {
            topology: Some(("z1".into(), "r1".into())),
            ..Connection::default()
        },
        ..ProducerOptions::default()
    };
    let nsqd = [&other_region, &same_region, &same_zone].map(addr);
    let count = |n: &Nsqd| n.topic("first").map_or(0, |t| t.message_count);

    // Its accepts held for 300 ms: the publish waits for its answer (connect_timeout 10 s,
    // so a busy machine cannot end the wait first).
    same_zone.hold_accepts(true);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            same_zone.hold_accepts(false);
        });
        let p = f
            .producer(&nsqd, Some(&options(Duration::from_secs(10))))
            .unwrap();
        p.publish("first", b"first").unwrap();
        assert_eq!(
            [count(&other_region), count(&same_region), count(&same_zone)],
            [0, 0, 1]
        );
        p.close();
    });

    // It never answers: the next nearest (the same region) after connect_timeout.
    same_zone.hold_accepts(true);
    let started = std::time::Instant::now();
    let p = f
        .producer(&nsqd, Some(&options(Duration::from_millis(500))))
        .unwrap();
    p.publish("first", b"second").unwrap();
    // Its connection began after `started`: the wait lasted at least connect_timeout.
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        [count(&other_region), count(&same_region), count(&same_zone)],
        [0, 1, 1]
    );
    p.close();
    same_zone.hold_accepts(false);
}
