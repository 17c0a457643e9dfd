//! Deterministic simulations (virtual time, fake nsqd and lookupds) of how the Consumer
//! forgets lookupd-discovered nsqd that no lookupd lists any more, so that its memory stays
//! bounded when nsqd addresses churn, without ever forgetting an nsqd because a lookupd was
//! down or one that was configured directly.

mod consumer_common;

use consumer_common::{LookupdMode, World, addr, config};
use nsq_proto::consumer::{ConsumerConfig, ConsumerEvent};
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);
/// Longer than one lookupd poll period (60 s + up to 30% jitter): at least one poll happens.
const ROUND: Duration = Duration::from_secs(80);
const L1: &str = "10.1.0.1:4161";
const L2: &str = "10.1.0.2:4161";

fn lookupd_world(max_in_flight: u32) -> World {
    let mut w = World::new(config(max_in_flight), 5);
    for i in 0..4 {
        w.add_nsqd(&addr(i), 2500);
    }
    w
}

fn known(w: &World) -> usize {
    w.consumer.stats().known_nsqd
}

fn list(w: &mut World, lookupd: &str, producers: &[String]) {
    w.lookupds.get_mut(lookupd).unwrap().producers = producers.to_vec();
}

fn dials(w: &World, a: &str) -> usize {
    w.nsqds[a].connects.len()
}

#[test]
fn unlisted_producer_is_kept_while_connected_then_forgotten() {
    let mut w = lookupd_world(2);
    w.add_fake_lookupd(L1, &[&addr(0), &addr(1)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC);
    assert_eq!((w.consumer.stats().connections, known(&w)), (2, 2));

    // addr(0) disappears from lookupd but its connection lives on: kept.
    list(&mut w, L1, &[addr(1)]);
    w.run_for(ROUND);
    assert_eq!((w.consumer.stats().connections, known(&w)), (2, 2));

    // Its connection ends: forgotten at once, and never dialed again.
    w.kill_nsqd(&addr(0));
    assert_eq!(known(&w), 1);
    w.revive_nsqd(&addr(0));
    w.run_for(ROUND * 5);
    assert_eq!(dials(&w, &addr(0)), 1);
    assert_eq!((w.consumer.stats().connections, known(&w)), (1, 1));

    // Listed again: rediscovered like any new producer.
    list(&mut w, L1, &[addr(0), addr(1)]);
    w.run_for(ROUND);
    assert_eq!(dials(&w, &addr(0)), 2);
    assert_eq!((w.consumer.stats().connections, known(&w)), (2, 2));
    assert_eq!(w.server_total_rdy(), 2);
    w.assert_clean();
}

#[test]
fn disconnected_producer_is_forgotten_when_the_next_answer_omits_it() {
    let mut w = lookupd_world(2);
    w.add_fake_lookupd(L1, &[&addr(0), &addr(1)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC);
    // The connection drops first, while lookupd still lists it: kept, waiting for the next
    // answer to decide.
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    assert_eq!(known(&w), 2);
    list(&mut w, L1, &[addr(1)]);
    w.run_for(ROUND);
    assert_eq!(known(&w), 1);
    w.run_for(ROUND * 5);
    assert_eq!(dials(&w, &addr(0)), 1);
    // Topic deleted (404 TOPIC_NOT_FOUND, an empty answer): addr(1) stays while connected.
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::NotFound;
    w.run_for(ROUND);
    assert_eq!((w.consumer.stats().connections, known(&w)), (1, 1));
    w.kill_nsqd(&addr(1));
    assert_eq!(known(&w), 0);
    w.assert_clean();
}

/// Address `i` of a long run of nsqd that each live for one lookupd round.
fn churned(i: usize) -> String {
    format!("10.2.{}.{}:4150", i / 250, i % 250 + 1)
}

#[test]
fn churning_addresses_do_not_accumulate() {
    let mut w = World::new(config(4), 9);
    w.add_fake_lookupd(L1, &[]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    let rounds = 1_000;
    let mut most = 0;
    for i in 0..rounds {
        let fresh = churned(i);
        // Every third nsqd is gone before we reach it (the dial is refused).
        if i % 3 != 2 {
            w.add_nsqd(&fresh, 2500);
        }
        list(&mut w, L1, std::slice::from_ref(&fresh));
        w.run_for(ROUND);
        most = most.max(known(&w));
        // The previous container goes away after the new one is listed.
        if i > 0 && (i - 1) % 3 != 2 {
            w.kill_nsqd(&churned(i - 1));
        }
        most = most.max(known(&w));
        assert!(known(&w) <= 2, "round {i}: {} known", known(&w));
    }
    assert_eq!(most, 2);
    assert_eq!(known(&w), 1, "only the address listed last");
    // Reachable nsqd were dialed once. An unreachable one is redialed only while still
    // listed (by a second poll within its round), never after it was forgotten.
    for i in 0..rounds {
        let a = churned(i);
        if i % 3 == 2 {
            let refused = w.count_events(|e| {
                matches!(e, ConsumerEvent::ConnectionClosed { addr, reason, .. }
                    if *addr == a && reason == "connection refused")
            });
            assert!((1..=2).contains(&refused), "{a}: {refused} dials");
        } else {
            assert_eq!(dials(&w, &a), 1, "{a}");
        }
    }
    w.assert_clean();
}

#[test]
fn a_failed_lookupd_does_not_make_the_consumer_forget() {
    let mut w = lookupd_world(4);
    w.add_fake_lookupd(L1, &[&addr(0), &addr(2)]);
    w.add_fake_lookupd(L2, &[&addr(1), &addr(2)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.consumer.add_lookupd(w.now, L2).unwrap();
    w.run_for(SEC);
    assert_eq!((w.consumer.stats().connections, known(&w)), (3, 3));

    // L1 goes down (refused, then hanging until the query times out) and addr(0), which
    // only L1 listed, loses its connection. Rounds in which L1 failed decide nothing about
    // what L1 listed: addr(0) is kept (not reconnected either: no answer lists it again).
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::Down;
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    // addr(2) is listed by both; L2 stops listing it and its connection ends: L1's last
    // successful answer still lists it, so it is kept too.
    list(&mut w, L2, &[addr(1)]);
    w.run_for(ROUND * 2);
    w.kill_nsqd(&addr(2));
    w.revive_nsqd(&addr(2));
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::Hang;
    w.run_for(ROUND * 3);
    assert!(w.count_events(|e| matches!(e, ConsumerEvent::LookupdFailed { .. })) >= 4);
    assert!(w.lookupds[L2].queries >= 5);
    assert_eq!(known(&w), 3);
    assert_eq!(w.consumer.stats().connections, 1);
    assert_eq!((dials(&w, &addr(0)), dials(&w, &addr(2))), (1, 1));

    // L1 answers again, still listing both: both reconnect.
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::Up;
    w.run_for(ROUND);
    assert_eq!((dials(&w, &addr(0)), dials(&w, &addr(2))), (2, 2));
    assert_eq!((w.consumer.stats().connections, known(&w)), (3, 3));

    // Now L1 answers without addr(2): the connection is kept; when it ends, addr(2) is
    // forgotten, since every lookupd that listed it has answered without it.
    list(&mut w, L1, &[addr(0)]);
    w.run_for(ROUND);
    assert_eq!(known(&w), 3);
    w.kill_nsqd(&addr(2));
    w.revive_nsqd(&addr(2));
    assert_eq!(known(&w), 2);
    w.run_for(ROUND * 3);
    assert_eq!(dials(&w, &addr(2)), 2);
    w.assert_clean();
}

#[test]
fn directly_added_nsqd_are_never_forgotten() {
    let mut w = lookupd_world(4);
    w.add_fake_lookupd(L1, &[&addr(1), &addr(2)]);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC);
    // addr(1) was discovered first, then also configured directly: direct from then on.
    w.consumer.add_nsqd(w.now, &addr(1)).unwrap();
    assert_eq!((w.consumer.stats().connections, known(&w)), (3, 3));

    // All three go down for a long time and lookupd stops listing them.
    list(&mut w, L1, &[]);
    for i in 0..3 {
        w.kill_nsqd(&addr(i));
    }
    // addr(2) (lookupd only) is forgotten at the next answer; the direct ones are not, and
    // their reconnect schedule keeps trying.
    w.run_for(ROUND);
    assert_eq!(known(&w), 2);
    let closed_before = w.count_events(|e| matches!(e, ConsumerEvent::ConnectionClosed { .. }));
    w.run_for(ROUND * 10);
    assert_eq!(known(&w), 2);
    let closed_after = w.count_events(|e| matches!(e, ConsumerEvent::ConnectionClosed { .. }));
    assert!(
        closed_after >= closed_before + 2 * 10,
        "refused reconnects: {closed_before} -> {closed_after}"
    );

    // They come back and are reconnected by the schedule (within its 60 s cap); addr(2),
    // still unlisted, is not.
    for i in 0..3 {
        w.revive_nsqd(&addr(i));
    }
    w.run_for(SEC * 61);
    assert_eq!((dials(&w, &addr(0)), dials(&w, &addr(1))), (2, 2));
    assert_eq!(dials(&w, &addr(2)), 1);
    assert_eq!((w.consumer.stats().connections, known(&w)), (2, 2));
    w.assert_clean();
}

#[test]
fn a_stale_answer_does_not_bring_back_a_forgotten_producer() {
    // A generous lookupd timeout, so an answer can arrive long after its request.
    let cfg = ConsumerConfig {
        lookupd_timeout: SEC * 3600,
        ..config(2)
    };
    let mut w = World::new(cfg, 13);
    w.add_nsqd(&addr(0), 2500);
    w.add_nsqd(&addr(1), 2500);
    w.add_fake_lookupd(L1, &[&addr(0), &addr(1)]);
    w.add_fake_lookupd(L2, &[]);
    w.lookupds.get_mut(L2).unwrap().mode = LookupdMode::Hang;
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.consumer.add_lookupd(w.now, L2).unwrap();
    w.run_for(SEC);
    let (stale, _) = w
        .lookupd_requests
        .iter()
        .find(|(_, a)| a == L2)
        .cloned()
        .unwrap();
    // addr(0) leaves L1's answers, then its connection ends: forgotten.
    list(&mut w, L1, &[addr(1)]);
    w.run_for(ROUND);
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    assert_eq!(known(&w), 1);
    // L2's answer to the request sent before that disconnect finally arrives, listing
    // addr(0): old news, so addr(0) is not dialed.
    let body = r#"{"channels":[],"producers":[{"broadcast_address":"10.0.0.1","hostname":"h","tcp_port":4150,"http_port":4151,"version":"1.3.0"}]}"#;
    assert_eq!(addr(0), "10.0.0.1:4150");
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    w.consumer
        .handle_lookupd_input(w.now, stale, resp.as_bytes());
    w.settle();
    assert_eq!(dials(&w, &addr(0)), 1);
    assert_eq!(known(&w), 1);
    // A fresh answer from L2 listing it is news: dialed.
    w.lookupds.get_mut(L2).unwrap().mode = LookupdMode::Up;
    list(&mut w, L2, &[addr(0)]);
    w.run_for(ROUND);
    assert_eq!(dials(&w, &addr(0)), 2);
    assert_eq!((w.consumer.stats().connections, known(&w)), (2, 2));
    w.assert_clean();
}

/// `ConnectionClosed` events of `a` (a lost connection, or a failed attempt).
fn closed(w: &World, a: &str) -> usize {
    w.count_events(|e| matches!(e, ConsumerEvent::ConnectionClosed { addr, .. } if addr == a))
}

fn row_reconnects(w: &World, a: &str) -> u64 {
    let stats = w.consumer.stats();
    stats
        .nsqd
        .iter()
        .find(|n| n.address == a)
        .map_or_else(|| panic!("no row for {a}: {stats:?}"), |n| n.reconnects)
}

/// A reconnect is a connection that became ready to an nsqd the consumer had been connected
/// to before, in lookupd mode as with nsqd given directly: an nsqd that restarts between two
/// polls (still listed), and one that restarts as nsqd does it (it leaves nsqlookupd while
/// down, so a poll forgets it) and is listed again. Attempts that fail are not reconnects.
#[test]
fn a_restarted_nsqd_counts_one_reconnect_whether_or_not_it_was_forgotten() {
    let mut w = lookupd_world(2);
    w.add_fake_lookupd(L1, &[&addr(0), &addr(1)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC);
    let s = w.consumer.stats();
    assert_eq!((s.connections, s.reconnects), (2, 0));

    // Between two polls: still listed, reconnected on the next answer.
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    w.run_for(ROUND);
    let s = w.consumer.stats();
    assert_eq!((s.connections, s.reconnects), (2, 1));
    assert_eq!(row_reconnects(&w, &addr(0)), 1);

    // As nsqd restarts: unlisted while down, forgotten by the next poll, listed again.
    list(&mut w, L1, &[addr(1)]);
    w.kill_nsqd(&addr(0));
    w.run_for(ROUND);
    assert_eq!(known(&w), 1, "forgotten");
    w.revive_nsqd(&addr(0));
    list(&mut w, L1, &[addr(0), addr(1)]);
    w.run_for(ROUND);
    let s = w.consumer.stats();
    assert_eq!((s.connections, s.reconnects), (2, 2));
    assert_eq!(
        row_reconnects(&w, &addr(0)),
        2,
        "remembered while forgotten"
    );

    // Listed while it is down: the attempts fail, and are not reconnects.
    let closed_before = closed(&w, &addr(1));
    w.kill_nsqd(&addr(1));
    w.run_for(ROUND * 3);
    let failed = closed(&w, &addr(1)) - closed_before;
    assert!(
        failed >= 3,
        "the connection lost, then failed attempts: {failed}"
    );
    assert_eq!(w.consumer.stats().reconnects, 2);
    w.revive_nsqd(&addr(1));
    w.run_for(ROUND);
    let s = w.consumer.stats();
    assert_eq!((s.connections, s.reconnects), (2, 3));
    w.assert_clean();
}

/// Directly given nsqd: the attempts made while it is down are not reconnects; the
/// connection made when it is back is one.
#[test]
fn a_direct_nsqd_down_for_a_while_counts_one_reconnect() {
    let mut w = lookupd_world(2);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.run_for(SEC);
    assert_eq!(w.consumer.stats().connections, 1);
    w.kill_nsqd(&addr(0));
    w.run_for(SEC * 30);
    let failed = closed(&w, &addr(0));
    assert!(
        failed >= 4,
        "the connection lost, then failed attempts: {failed}"
    );
    assert_eq!(w.consumer.stats().reconnects, 0);
    w.revive_nsqd(&addr(0));
    w.run_for(SEC * 30);
    let s = w.consumer.stats();
    assert_eq!((s.connections, s.reconnects), (1, 1));
    assert_eq!(row_reconnects(&w, &addr(0)), 1);
    w.assert_clean();
}
