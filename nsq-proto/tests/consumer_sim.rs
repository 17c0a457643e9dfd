//! Deterministic simulations of a Consumer against fake nsqd peers and fake lookupds, in
//! virtual time.

mod consumer_common;

use consumer_common::{Cmd, Handler, LookupdMode, World, addr, config};
use nsq_proto::consumer::{ConsumerConfig, ConsumerEvent};
use nsq_proto::driver::Action;
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

fn world_with(n: usize, max_in_flight: u32, steady: usize) -> World {
    let mut w = World::new(config(max_in_flight), 7);
    for i in 0..n {
        w.add_nsqd(&addr(i), 2500);
        w.nsqds.get_mut(&addr(i)).unwrap().steady = steady;
    }
    for i in 0..n {
        w.consumer.add_nsqd(w.now, &addr(i)).unwrap();
    }
    // Past the RDY 1 bootstrap of new connections.
    w.run_for(SEC * 6);
    w
}

fn server_rdys(w: &World) -> Vec<u32> {
    let mut v: Vec<(String, u32)> = w
        .conns
        .values()
        .filter(|c| !c.dead && !c.closing)
        .map(|c| (c.addr.clone(), c.rdy()))
        .collect();
    v.sort();
    v.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn rdy_spread_for_every_size() {
    for n in [1usize, 3, 10] {
        for m in [1u32, 3, 100, 2500] {
            let steady = (m as usize).min(5);
            let mut w = world_with(n, m, steady);
            w.run_for(SEC * 600);
            w.assert_clean();
            assert_eq!(w.consumer.stats().connections, n, "n={n} m={m}");
            let rdys = server_rdys(&w);
            let total: u32 = rdys.iter().sum();
            assert!(
                w.max_total_rdy_seen <= m,
                "n={n} m={m}: saw {}",
                w.max_total_rdy_seen
            );
            if m as usize >= n {
                // Everything handed out, evenly (remainder spread round-robin).
                assert_eq!(total, m, "n={n} m={m} rdys={rdys:?}");
                let lo = *rdys.iter().min().unwrap();
                let hi = *rdys.iter().max().unwrap();
                assert!(hi - lo <= 1, "n={n} m={m} rdys={rdys:?}");
                assert!(lo >= 1);
            } else {
                assert!(total <= m, "n={n} m={m} rdys={rdys:?}");
                assert!(rdys.iter().all(|&r| r <= 1));
            }
            // Every nsqd was served.
            for i in 0..n {
                assert!(
                    w.received_per_addr.get(&addr(i)).copied().unwrap_or(0) > 0,
                    "n={n} m={m}: {} never served",
                    addr(i)
                );
            }
            let stats = w.consumer.stats();
            assert_eq!(stats.received, stats.finished);
            assert!(stats.received > 0);
        }
    }
}

#[test]
fn new_connection_bootstraps_with_rdy_1_after_lowering_others() {
    let mut w = world_with(2, 10, 0);
    assert_eq!(server_rdys(&w), vec![5, 5]);
    w.add_nsqd(&addr(2), 2500);
    w.consumer.add_nsqd(w.now, &addr(2)).unwrap();
    w.settle();
    // The others' lowered RDY frees budget only once what nsqd may have sent under the old
    // one had time to arrive (output_buffer_timeout, 250 ms, plus the handshake).
    let c = w.conn_of(&addr(2)).unwrap();
    assert_eq!(w.conns[&c].rdy(), 0);
    w.run_for(Duration::from_millis(250));
    w.assert_clean();
    let rdys: Vec<u32> = w.conns[&c]
        .log
        .iter()
        .filter_map(|c| if let Cmd::Rdy(n) = c { Some(*n) } else { None })
        .collect();
    assert_eq!(rdys, vec![1], "a new connection starts at RDY 1");
    // The others were lowered to their new share (10 / 3 -> 4 + 3), leaving room.
    assert!(w.server_total_rdy() <= 10);
    // Its first message brings it to its full share.
    w.nsqds.get_mut(&addr(2)).unwrap().push(1, 1);
    w.run_for(Duration::from_millis(250));
    assert_eq!(w.server_total_rdy(), 10);
    // So does the end of the bootstrap period, without messages.
    w.add_nsqd(&addr(3), 2500);
    w.consumer.add_nsqd(w.now, &addr(3)).unwrap();
    w.run_for(Duration::from_millis(250));
    assert_eq!(w.conns[&w.conn_of(&addr(3)).unwrap()].rdy(), 1);
    assert!(w.server_total_rdy() < 10);
    w.run_for(SEC * 6);
    assert_eq!(w.server_total_rdy(), 10);
    let mut rdys = server_rdys(&w);
    rdys.sort_unstable();
    assert_eq!(rdys, vec![2, 2, 3, 3]);
    w.assert_clean();
}

#[test]
fn connections_joining_and_leaving() {
    let mut w = world_with(3, 100, 20);
    w.run_for(SEC * 10);
    let mut rdys = server_rdys(&w);
    rdys.sort_unstable();
    assert_eq!(rdys, vec![33, 33, 34]);
    w.kill_nsqd(&addr(1));
    w.run_for(SEC / 2);
    assert_eq!(server_rdys(&w), vec![50, 50]);
    w.revive_nsqd(&addr(1));
    w.run_for(SEC * 120);
    let mut rdys = server_rdys(&w);
    rdys.sort_unstable();
    assert_eq!(rdys, vec![33, 33, 34]);
    assert_eq!(w.consumer.stats().connections, 3);
    w.assert_clean();
    assert!(w.max_total_rdy_seen <= 100);
}

#[test]
fn max_in_flight_changes_and_pause() {
    let mut w = world_with(3, 30, 10);
    w.run_for(SEC * 5);
    assert_eq!(w.server_total_rdy(), 30);
    w.set_max_in_flight(6);
    assert_eq!(server_rdys(&w), vec![2, 2, 2]);
    w.set_max_in_flight(0);
    assert_eq!(server_rdys(&w), vec![0, 0, 0]);
    let before = w.consumer.stats().received;
    w.run_for(SEC * 20);
    assert_eq!(
        w.consumer.stats().received,
        before,
        "paused consumer receives nothing"
    );
    w.set_max_in_flight(2);
    w.run_for(SEC * 120);
    assert!(w.server_total_rdy() <= 2);
    assert!(w.consumer.stats().received > before);
    w.set_max_in_flight(3000);
    w.run_for(SEC);
    assert_eq!(w.server_total_rdy(), 3000);
    w.assert_clean();
}

#[test]
fn low_rdy_redistribution_serves_everyone() {
    let mut w = world_with(10, 3, 5);
    let from = w.now;
    w.run_for(SEC * 900);
    w.assert_clean();
    assert!(w.max_total_rdy_seen <= 3);
    for i in 0..10 {
        let gap = w.max_service_gap(&addr(i), from);
        assert!(gap <= SEC * 200, "{} waited {gap:?}", addr(i));
    }
}

#[test]
fn starvation_flag() {
    let mut w = world_with(1, 4, 0);
    w.handler = Handler::Hold;
    assert!(!w.consumer.is_starved());
    w.nsqds.get_mut(&addr(0)).unwrap().push(4, 1);
    w.settle();
    assert_eq!(w.held.len(), 4);
    assert!(w.consumer.is_starved());
    w.finish_held();
    assert!(!w.consumer.is_starved());
}

fn rdy_log(w: &World, a: &str) -> Vec<Cmd> {
    let c = w.conn_of(a).unwrap();
    w.conns[&c].log.clone()
}

#[test]
fn backoff_enter_probe_recover() {
    let mut w = world_with(2, 10, 0);
    assert_eq!(w.server_total_rdy(), 10);
    w.handler = Handler::RequeueBackoff;
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.settle();
    assert_eq!(w.consumer.backoff_level(), 1);
    assert!(w.consumer.in_backoff_window());
    assert_eq!(server_rdys(&w), vec![0, 0]);
    // RDY 0 was queued before the REQ that caused it.
    let log = rdy_log(&w, &addr(0));
    let req = log.iter().position(|c| matches!(c, Cmd::Req(..))).unwrap();
    let zero = log.iter().position(|c| *c == Cmd::Rdy(0)).unwrap();
    assert!(zero < req, "{log:?}");
    // Window 1 x 2^1 = 2 s: nothing before, RDY 1 on exactly one connection after: the one
    // whose nsqd last delivered (its requeued message is there), not a random one.
    w.handler = Handler::Hold;
    w.run_for(SEC * 19 / 10);
    assert_eq!(server_rdys(&w), vec![0, 0]);
    w.run_for(SEC / 5);
    assert!(!w.consumer.in_backoff_window());
    assert_eq!(server_rdys(&w), vec![1, 0]);
    assert_eq!(w.held.len(), 1, "the probe found the message at once");
    // The probe fails again: level 2, window 4 s.
    let held = std::mem::take(&mut w.held);
    for (c, m) in &held {
        w.consumer.requeue(w.now, *c, m, None, true).unwrap();
    }
    w.handler = Handler::RequeueBackoff;
    w.settle();
    assert_eq!(w.consumer.backoff_level(), 2);
    assert_eq!(server_rdys(&w), vec![0, 0]);
    w.run_for(SEC * 4);
    // Now successes: each lowers the level by one; level 0 restores full RDY.
    w.handler = Handler::Finish;
    let mut guard = 0;
    while w.consumer.backoff_level() > 0 {
        guard += 1;
        assert!(guard < 20);
        for i in 0..2 {
            let q = &mut w.nsqds.get_mut(&addr(i)).unwrap().queue;
            if q.is_empty() {
                w.nsqds.get_mut(&addr(i)).unwrap().push(1, 1);
            }
        }
        w.run_for(SEC * 10);
    }
    w.run_for(SEC);
    assert_eq!(w.server_total_rdy(), 10);
    assert_eq!(server_rdys(&w), vec![5, 5]);
    w.assert_clean();
}

#[test]
fn one_result_per_backoff_window() {
    let mut w = world_with(1, 10, 0);
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(5, 1);
    w.settle();
    assert_eq!(w.held.len(), 5);
    let held = std::mem::take(&mut w.held);
    for (c, m) in &held {
        w.consumer
            .requeue(w.now, *c, m, Some(Duration::ZERO), true)
            .unwrap();
    }
    w.settle();
    assert_eq!(
        w.consumer.backoff_level(),
        1,
        "failures inside the window are ignored"
    );
    assert_eq!(w.consumer.stats().requeued, 5);
    w.assert_clean();
}

#[test]
fn requeue_without_backoff_and_default_delay() {
    let mut w = world_with(1, 10, 0);
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 3);
    w.settle();
    let (c, m) = w.held.pop().unwrap();
    assert_eq!(m.attempts, 3);
    w.consumer.requeue(w.now, c, &m, None, false).unwrap();
    w.settle();
    assert_eq!(w.consumer.backoff_level(), 0);
    assert_eq!(w.server_total_rdy(), 10);
    let log = rdy_log(&w, &addr(0));
    // 3 x 90 s = 270 s.
    assert!(log.contains(&Cmd::Req(m.id, 270_000)), "{log:?}");
    // An unknown message is refused and nothing is sent.
    let sent = rdy_log(&w, &addr(0)).len();
    assert!(w.consumer.requeue(w.now, c, &m, None, true).is_err());
    assert!(w.consumer.finish(w.now, c, &m.id).is_err());
    w.settle();
    assert_eq!(rdy_log(&w, &addr(0)).len(), sent);
    assert_eq!(w.consumer.backoff_level(), 0);
}

#[test]
fn backoff_disabled() {
    let cfg = ConsumerConfig {
        max_in_flight: 4,
        backoff_enabled: false,
        ..ConsumerConfig::default()
    };
    let mut w = World::new(cfg, 1);
    w.add_nsqd(&addr(0), 2500);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.handler = Handler::RequeueBackoff;
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 1);
    w.settle();
    assert_eq!(w.consumer.backoff_level(), 0);
    assert_eq!(w.server_total_rdy(), 4);
}

#[test]
fn attempts_give_up() {
    let mut w = world_with(1, 10, 0);
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 6);
    w.nsqds.get_mut(&addr(0)).unwrap().push(2, 5);
    w.settle();
    let gave_up = w.count_events(|e| matches!(e, ConsumerEvent::GaveUp { .. }));
    let delivered = w.count_events(|e| matches!(e, ConsumerEvent::Message { .. }));
    assert_eq!((gave_up, delivered), (3, 2));
    let stats = w.consumer.stats();
    assert_eq!((stats.gave_up, stats.finished, stats.received), (3, 2, 5));
    let fins = rdy_log(&w, &addr(0))
        .iter()
        .filter(|c| matches!(c, Cmd::Fin(_)))
        .count();
    assert_eq!(fins, 5);
    assert!(w.conns.values().all(|c| c.in_flight.is_empty()));
    // max_attempts 0 = unlimited.
    let cfg = ConsumerConfig {
        max_in_flight: 10,
        max_attempts: 0,
        ..ConsumerConfig::default()
    };
    let mut w = World::new(cfg, 1);
    w.add_nsqd(&addr(0), 2500);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 60_000);
    w.settle();
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::GaveUp { .. })),
        0
    );
    assert_eq!(w.consumer.stats().finished, 1);
}

fn lookupd_world(max_in_flight: u32) -> World {
    let mut w = World::new(config(max_in_flight), 3);
    for i in 0..4 {
        w.add_nsqd(&addr(i), 2500);
    }
    w
}

#[test]
fn lookupd_union_across_disagreeing_lookupds() {
    let mut w = lookupd_world(12);
    w.add_fake_lookupd("10.1.0.1:4161", &[&addr(0), &addr(1)]);
    w.add_fake_lookupd("10.1.0.2:4161", &[&addr(1), &addr(2)]);
    w.consumer.add_lookupd(w.now, "10.1.0.1:4161").unwrap();
    w.consumer
        .add_lookupd(w.now, "http://10.1.0.2:4161/")
        .unwrap();
    w.run_for(SEC * 6);
    // First poll immediately, to every lookupd; union of producers, each connected once.
    assert_eq!(w.lookupds["10.1.0.1:4161"].queries, 1);
    assert_eq!(w.lookupds["10.1.0.2:4161"].queries, 1);
    assert_eq!(w.consumer.stats().connections, 3);
    for i in 0..3 {
        assert_eq!(w.nsqds[&addr(i)].connects.len(), 1, "{}", addr(i));
    }
    assert!(w.nsqds[&addr(3)].connects.is_empty());
    assert_eq!(w.server_total_rdy(), 12);
    // Later rounds query every lookupd again (interval 60 s + up to 30% jitter).
    w.run_for(SEC * 79);
    assert_eq!(w.lookupds["10.1.0.1:4161"].queries, 2);
    assert_eq!(w.lookupds["10.1.0.2:4161"].queries, 2);
    // A new producer on one lookupd is picked up on the next poll.
    w.lookupds
        .get_mut("10.1.0.2:4161")
        .unwrap()
        .producers
        .push(addr(3));
    w.run_for(SEC * 80);
    assert_eq!(w.consumer.stats().connections, 4);
    assert_eq!(w.nsqds[&addr(1)].connects.len(), 1);
    w.assert_clean();
}

#[test]
fn lookupd_poll_interval_has_jitter() {
    let mut w = lookupd_world(1);
    w.add_fake_lookupd("10.1.0.1:4161", &[]);
    w.lookupds.get_mut("10.1.0.1:4161").unwrap().mode = LookupdMode::NotFound;
    w.consumer.add_lookupd(w.now, "10.1.0.1:4161").unwrap();
    w.run_for(SEC * 3600);
    let q = w.lookupds["10.1.0.1:4161"].queries;
    // Between 3600/78 and 3600/60 polls.
    assert!((46..=61).contains(&q), "{q} polls in an hour");
    // 404 TOPIC_NOT_FOUND is "no producers yet", not a failure.
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::LookupdFailed { .. })),
        0
    );
    assert_eq!(w.consumer.stats().connections, 0);
}

#[test]
fn a_lookupd_down_or_hanging_does_not_stop_the_others() {
    let mut w = lookupd_world(4);
    w.add_fake_lookupd("10.1.0.1:4161", &[&addr(0)]);
    w.add_fake_lookupd("10.1.0.2:4161", &[&addr(1)]);
    w.add_fake_lookupd("10.1.0.3:4161", &[&addr(2)]);
    w.lookupds.get_mut("10.1.0.1:4161").unwrap().mode = LookupdMode::Down;
    w.lookupds.get_mut("10.1.0.2:4161").unwrap().mode = LookupdMode::Hang;
    w.lookupds.get_mut("10.1.0.3:4161").unwrap().mode = LookupdMode::Chunked;
    for l in [
        "10.1.0.1:4161",
        "10.1.0.2:4161",
        "10.1.0.3:4161",
        "10.1.0.9:4161",
    ] {
        w.consumer.add_lookupd(w.now, l).unwrap();
    }
    w.run_for(SEC);
    assert_eq!(w.consumer.stats().connections, 1);
    assert_eq!(w.conns.values().next().unwrap().addr, addr(2));
    // The refused one and the unknown one failed at once; the hanging one times out.
    let failed = |w: &World| w.count_events(|e| matches!(e, ConsumerEvent::LookupdFailed { .. }));
    assert_eq!(failed(&w), 2);
    w.run_for(SEC * 30);
    assert_eq!(failed(&w), 3);
    // Recovery: the next round reaches it.
    w.lookupds.get_mut("10.1.0.1:4161").unwrap().mode = LookupdMode::Up;
    w.lookupds.get_mut("10.1.0.2:4161").unwrap().mode = LookupdMode::Up;
    w.run_for(SEC * 80);
    assert_eq!(w.consumer.stats().connections, 3);
    w.assert_clean();
}

#[test]
fn producer_vanishing_from_lookupd_is_not_reconnected() {
    let mut w = lookupd_world(2);
    w.add_fake_lookupd("10.1.0.1:4161", &[&addr(0), &addr(1)]);
    w.consumer.add_lookupd(w.now, "10.1.0.1:4161").unwrap();
    w.run_for(SEC);
    assert_eq!(w.consumer.stats().connections, 2);
    // addr(0) leaves lookupd and its connection drops.
    w.lookupds.get_mut("10.1.0.1:4161").unwrap().producers = vec![addr(1)];
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    w.run_for(SEC * 200);
    assert_eq!(
        w.nsqds[&addr(0)].connects.len(),
        1,
        "not listed: not reconnected"
    );
    assert_eq!(w.consumer.stats().connections, 1);
    assert_eq!(server_rdys(&w), vec![2]);
    // Listed again: reconnected on the next poll.
    w.lookupds.get_mut("10.1.0.1:4161").unwrap().producers = vec![addr(0), addr(1)];
    w.run_for(SEC * 80);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 2);
    assert_eq!(w.consumer.stats().connections, 2);
    w.assert_clean();
}

#[test]
fn direct_address_reconnect_schedule() {
    let mut w = World::new(config(1), 11);
    w.add_nsqd(&addr(0), 2500);
    w.nsqds.get_mut(&addr(0)).unwrap().up = false;
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::ConnectionClosed { .. })),
        1
    );
    // Attempts are made by the schedule even though nothing connects.
    let mut attempts = vec![w.now];
    let mut last_failures = 1;
    while attempts.len() < 9 {
        let next = w.consumer.poll_timeout().expect("a reconnect is scheduled");
        w.run_until(next);
        let failures = w.count_events(|e| matches!(e, ConsumerEvent::ConnectionClosed { .. }));
        if failures > last_failures {
            last_failures = failures;
            attempts.push(w.now);
        }
    }
    let gaps: Vec<Duration> = attempts.windows(2).map(|p| p[1] - p[0]).collect();
    let caps = [1u64, 2, 4, 8, 16, 32, 60, 60];
    for (gap, cap) in gaps.iter().zip(caps) {
        let hi = SEC * cap as u32;
        assert!(
            *gap >= hi / 2 && *gap <= hi,
            "gap {gap:?} outside [{:?}, {hi:?}]: {gaps:?}",
            hi / 2
        );
    }
    // It comes back: connected on the next attempt, and a healthy period resets the schedule.
    w.revive_nsqd(&addr(0));
    w.run_for(SEC * 61);
    assert_eq!(w.consumer.stats().connections, 1);
    w.run_for(SEC * 40);
    w.kill_nsqd(&addr(0));
    let down_at = w.now;
    w.revive_nsqd(&addr(0));
    w.run_for(SEC * 2);
    assert_eq!(
        w.consumer.stats().connections,
        1,
        "reconnected within the first step"
    );
    assert!(
        w.nsqds[&addr(0)]
            .connects
            .last()
            .unwrap()
            .duration_since(down_at)
            <= SEC
    );
    w.assert_clean();
}

#[test]
fn graceful_close_drains_and_reports_leftovers() {
    let mut w = world_with(3, 9, 0);
    w.handler = Handler::Hold;
    for i in 0..3 {
        w.nsqds.get_mut(&addr(i)).unwrap().push(2, 1);
    }
    w.settle();
    assert_eq!(w.held.len(), 6);
    w.consumer.close(w.now);
    w.settle();
    assert!(w.conns.values().all(|c| c.log.contains(&Cmd::Cls)));
    assert_eq!(w.server_total_rdy(), 0);
    assert!(w.consumer.add_nsqd(w.now, &addr(5)).is_err());
    // Answer 4 of the 6; the rest are left to the drain deadline.
    let mut held = std::mem::take(&mut w.held);
    let rest = held.split_off(4);
    for (c, m) in held {
        w.consumer.finish(w.now, c, &m.id).unwrap();
    }
    w.settle();
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::Closed { .. })),
        0
    );
    w.run_for(SEC * 120);
    let closed: Vec<&ConsumerEvent> = w
        .events
        .iter()
        .filter(|e| matches!(e, ConsumerEvent::Closed { .. }))
        .collect();
    assert_eq!(
        closed,
        vec![&ConsumerEvent::Closed {
            leftovers: rest.len()
        }]
    );
    assert!(w.consumer.is_closed());
    assert!(w.conns.is_empty(), "every socket was closed");
    assert_eq!(w.consumer.poll_timeout(), None);
    w.assert_clean();
}

#[test]
fn close_with_nothing_in_flight_finishes_promptly() {
    let mut w = world_with(2, 4, 0);
    w.consumer.close(w.now);
    w.run_for(SEC);
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::Closed { leftovers: 0 })),
        1
    );
    // No reconnects after close.
    w.run_for(SEC * 300);
    assert!(w.nsqds.values().all(|n| n.connects.len() == 1));
}

#[test]
fn rdy_refilled_only_when_running_low() {
    let mut w = world_with(1, 8, 0);
    w.handler = Handler::Hold;
    let rdy_count = |w: &World| {
        rdy_log(w, &addr(0))
            .iter()
            .filter(|c| matches!(c, Cmd::Rdy(_)))
            .count()
    };
    let before = rdy_count(&w);
    w.nsqds.get_mut(&addr(0)).unwrap().push(8, 1);
    w.settle();
    assert_eq!(w.held.len(), 8);
    let mut held = std::mem::take(&mut w.held);
    // Answering 6 of 8: remaining 8 - 8 = 0 counted since the last RDY, so the first answer
    // already finds it low and refills once; no RDY per message after that.
    for (c, m) in held.drain(..6) {
        w.consumer.finish(w.now, c, &m.id).unwrap();
    }
    w.settle();
    assert_eq!(rdy_count(&w), before + 1);
    // Fresh window: 2 more received, 2 more answered -> remaining 6 of 8, no refill.
    w.handler = Handler::Finish;
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.settle();
    assert_eq!(rdy_count(&w), before + 1);
    // Enough traffic to cross the 25% mark refills again.
    w.nsqds.get_mut(&addr(0)).unwrap().push(6, 1);
    w.settle();
    assert_eq!(rdy_count(&w), before + 2);
    for (c, m) in held {
        w.consumer.finish(w.now, c, &m.id).unwrap();
    }
    w.settle();
    w.assert_clean();
    assert_eq!(w.server_total_rdy(), 8);
}

#[test]
fn full_jitter_backoff_window_is_within_the_ceiling() {
    let cfg = ConsumerConfig {
        max_in_flight: 2,
        backoff_strategy: nsq_proto::consumer::BackoffStrategy::FullJitter,
        ..ConsumerConfig::default()
    };
    let mut w = World::new(cfg, 5);
    w.add_nsqd(&addr(0), 2500);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.run_for(SEC * 6);
    w.handler = Handler::RequeueBackoff;
    let start = rdy_log(&w, &addr(0)).len();
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.settle();
    assert!(w.consumer.in_backoff_window());
    let until = w.consumer.poll_timeout().unwrap();
    assert!(until - w.now <= SEC * 2);
    // The requeued message comes back to the probe and succeeds: full speed again.
    w.handler = Handler::Finish;
    w.run_for(SEC * 2);
    assert!(!w.consumer.in_backoff_window());
    assert_eq!(w.consumer.backoff_level(), 0);
    assert_eq!(w.server_total_rdy(), 2);
    let rdys: Vec<Cmd> = rdy_log(&w, &addr(0))[start..]
        .iter()
        .filter(|c| matches!(c, Cmd::Rdy(_)))
        .cloned()
        .collect();
    assert_eq!(rdys, vec![Cmd::Rdy(0), Cmd::Rdy(1), Cmd::Rdy(2)]);
}

#[test]
fn stats_snapshot() {
    let mut w = world_with(2, 6, 0);
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 1);
    w.settle();
    let s = w.consumer.stats();
    assert_eq!(
        (s.received, s.finished, s.requeued, s.gave_up),
        (3, 3, 0, 0)
    );
    assert_eq!((s.connections, s.backoff_level, s.total_rdy), (2, 0, 6));
}

#[test]
fn answers_between_polls_coalesce_into_one_write() {
    let mut w = world_with(1, 200, 0);
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(150, 1);
    w.settle();
    assert_eq!(w.held.len(), 150);
    let conn = w.held[0].0;
    for (c, m) in std::mem::take(&mut w.held) {
        w.consumer.finish(w.now, c, &m.id).unwrap();
    }
    let actions: Vec<Action> = std::iter::from_fn(|| w.consumer.poll_action()).collect();
    assert_eq!(actions.len(), 1, "{actions:?}");
    let Action::Transmit { conn: c, data } = &actions[0] else {
        panic!("{actions:?}");
    };
    assert_eq!(*c, conn);
    let text = String::from_utf8_lossy(data);
    assert_eq!(text.matches("FIN ").count(), 150);
    assert!(text.ends_with('\n'));
}

#[test]
fn lookupd_producers_with_bad_addresses_are_ignored() {
    let mut w = lookupd_world(2);
    w.add_fake_lookupd("10.1.0.1:4161", &["bad host:4150", "[::1:4150", &addr(0)]);
    w.consumer.add_lookupd(w.now, "10.1.0.1:4161").unwrap();
    w.run_for(SEC);
    assert_eq!(w.consumer.stats().connections, 1);
    assert_eq!(w.consumer.connections().count(), 1);
    w.assert_clean();
}

/// Found by the simulator (`cargo run --release -p nsq-test-broker --example simulate --
/// --seed 1 --nsqd 1000 --faults 0`: 348 messages never delivered): with many more
/// connections than busy nsqd, a backoff probe placed at random (one new pick per
/// redistribution, as go-nsq does) sat on nsqd with nothing to send, so the consumer stayed
/// in backoff for minutes while one nsqd held every message.
#[test]
fn backoff_probe_goes_where_the_messages_are() {
    let mut w = world_with(100, 10, 0);
    w.handler = Handler::RequeueBackoff;
    w.nsqds.get_mut(&addr(7)).unwrap().push(20, 1);
    let mut guard = 0;
    while w.consumer.backoff_level() == 0 {
        guard += 1;
        assert!(guard < 60, "the busy nsqd was never served");
        w.run_for(SEC);
    }
    // The window is 2 s; the probe must then go straight to the nsqd that delivered.
    w.handler = Handler::Finish;
    w.run_for(SEC * 3);
    assert_eq!(w.consumer.backoff_level(), 0, "still backing off");
    assert!(w.nsqds[&addr(7)].queue.is_empty(), "messages left behind");
    w.assert_clean();
}
