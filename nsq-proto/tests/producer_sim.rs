//! Deterministic simulations of the sans-IO Producer against fake nsqd peers in virtual time.

mod producer_common;

use nsq_proto::driver::Action;
use nsq_proto::producer::{
    ProducerConfig, ProducerError, ProducerEvent, PublishFailure, PublishId, Routing,
};
use nsq_proto::{CloseReason, CommandError, ErrorCode};
use producer_common::{World, addr, topic};
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

/// These simulations follow single publishes one PUB and one reply each: batching off.
/// `producer_batching.rs` simulates batching, and the proptest runs both ways.
fn config() -> ProducerConfig {
    ProducerConfig {
        batching: false,
        ..ProducerConfig::default()
    }
}

#[test]
fn publishes_resolve_in_order_on_the_primary() {
    let mut w = World::new(config(), 2);
    w.server(0).auto_ack = false;
    w.add_all();
    assert_eq!(w.producer.healthy_connections(), 2);
    let ids: Vec<PublishId> = (0..5)
        .map(|k| w.publish(format!("m{k}").as_bytes()))
        .collect();
    assert!(ids.iter().all(|id| !w.is_resolved(*id)));
    assert_eq!(w.producer.stats().outstanding, 5);
    // Failover routing: everything went to the first address.
    assert_eq!(w.servers[&addr(0)].received.len(), 5);
    assert!(w.servers[&addr(1)].received.is_empty());
    w.ack(0, 2);
    let order: Vec<PublishId> = w
        .events
        .iter()
        .filter_map(|e| match e {
            ProducerEvent::Published(id) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(order, ids[..2]);
    w.ack(0, 3);
    assert_eq!(w.assert_resolved_once(&ids), 0);
    let s = w.producer.stats();
    assert_eq!(
        (s.published, s.failed, s.outstanding, s.connections_ready),
        (5, 0, 0, 2)
    );
}

#[test]
fn round_robin_spreads_over_healthy_connections() {
    let mut w = World::new(
        ProducerConfig {
            routing: Routing::RoundRobin,
            ..config()
        },
        3,
    );
    w.add_all();
    let ids: Vec<PublishId> = (0..9).map(|_| w.publish(b"x")).collect();
    for i in 0..3 {
        assert_eq!(w.servers[&addr(i)].received.len(), 3);
    }
    assert_eq!(w.assert_resolved_once(&ids), 0);
}

#[test]
fn a_dying_connection_fails_its_publishes_and_new_ones_fail_over() {
    let mut w = World::new(config(), 2);
    w.server(0).auto_ack = false;
    w.add_all();
    let first: Vec<PublishId> = (0..3).map(|_| w.publish(b"a")).collect();
    w.kill(0);
    for id in &first {
        assert!(
            matches!(
                w.outcome(*id),
                Err(PublishFailure::ConnectionLost(CloseReason::Eof))
            ),
            "{:?}",
            w.outcome(*id)
        );
    }
    assert_eq!(w.producer.healthy_connections(), 1);
    let later = w.publish(b"b");
    assert_eq!(w.outcome(later), &Ok(()));
    assert_eq!(w.servers[&addr(1)].received, vec![b"b".to_vec()]);
    assert!(w.events.iter().any(|e| matches!(
        e,
        ProducerEvent::ConnectionClosed { addr: a, .. } if *a == addr(0)
    )));
    // The primary comes back: failover routing returns to it.
    w.revive(0);
    w.advance(3 * SEC);
    assert_eq!(w.producer.healthy_connections(), 2);
    w.server(0).auto_ack = true;
    let back = w.publish(b"c");
    // auto_ack was off when the new peer was created: acknowledge by hand.
    w.ack(0, 1);
    assert_eq!(w.outcome(back), &Ok(()));
    assert_eq!(w.servers[&addr(0)].received.last().unwrap(), b"c");
}

#[test]
fn server_rejection_is_typed_and_the_connection_reconnects() {
    let mut w = World::new(config(), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let a = w.publish(b"a");
    let b = w.publish(b"b");
    w.reject(0);
    match w.outcome(a) {
        Err(PublishFailure::Server(e)) => assert_eq!(e.code(), ErrorCode::BadTopic),
        other => panic!("{other:?}"),
    }
    // nsqd never read `b` (it stops at a fatal error): it waits for the new connection,
    // which is made at once (a rejection is no server failure), and goes out there.
    assert!(!w.is_resolved(b));
    assert_eq!(w.producer.healthy_connections(), 1);
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    assert_eq!(
        w.servers[&addr(0)].received,
        vec![b"a".to_vec(), b"b".to_vec(), b"b".to_vec()]
    );
    w.ack(0, 1);
    assert_eq!(w.outcome(b), &Ok(()));
}

#[test]
fn reconnect_schedule_backs_off_with_jitter_and_resets_after_a_healthy_period() {
    let mut w = World::new(config(), 1);
    w.server(0).up = false;
    w.add_all();
    w.advance(200 * SEC);
    let connects = w.servers[&addr(0)].connects.clone();
    let gaps: Vec<Duration> = connects.windows(2).map(|p| p[1] - p[0]).collect();
    assert!(gaps.len() >= 6, "{gaps:?}");
    // n-th failure waits within [d/2, d], d = min(60 s, 1 s x 2^n).
    for (n, gap) in gaps.iter().enumerate() {
        let d = SEC * 2u32.pow(n as u32).min(60);
        assert!(*gap >= d / 2 && *gap <= d, "gap {n} = {gap:?}, d = {d:?}");
    }
    assert!(gaps.iter().any(|g| *g >= 30 * SEC));
    // Up again: connects at the next attempt, stays healthy, then a failure starts small.
    w.revive(0);
    w.advance(61 * SEC);
    assert_eq!(w.producer.healthy_connections(), 1);
    w.advance(40 * SEC);
    let before = w.servers[&addr(0)].connects.len();
    w.kill(0);
    w.revive(0);
    let t0 = w.now;
    w.advance(2 * SEC);
    let connects = &w.servers[&addr(0)].connects;
    assert_eq!(connects.len(), before + 1);
    assert!(connects[before] - t0 <= SEC);
}

#[test]
fn every_server_down_fails_fast() {
    let mut w = World::new(config(), 2);
    w.server(0).up = false;
    w.server(1).up = false;
    w.add_all();
    // Both attempts failed: nothing is under way, so a publish fails at once.
    let id = w.publish(b"x");
    match w.outcome(id) {
        Err(PublishFailure::NoServerAvailable {
            last_error: Some(e),
        }) => {
            assert!(e.contains("connection refused"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let ping = w.producer.ping(w.now).unwrap();
    w.settle();
    assert!(matches!(
        w.pings[&ping][..],
        [Err(PublishFailure::NoServerAvailable { .. })]
    ));
    // No producer configured at all: the same.
    let mut empty = World::new(config(), 0);
    let id = empty.publish(b"x");
    assert_eq!(
        empty.outcome(id),
        &Err(PublishFailure::NoServerAvailable { last_error: None })
    );
}

#[test]
fn pending_publishes_are_sent_when_the_first_connection_becomes_ready() {
    let mut w = World::new(config(), 2);
    w.server(0).hold_connects = true;
    w.server(1).hold_connects = true;
    w.add_all();
    let ids: Vec<PublishId> = (0..4)
        .map(|k| w.publish(format!("p{k}").as_bytes()))
        .collect();
    let multi = w
        .producer
        .multi_publish(w.now, &topic(), &[b"m1".as_slice(), b"m2"])
        .unwrap();
    let deferred = w
        .producer
        .deferred_publish(w.now, &topic(), SEC, b"d")
        .unwrap();
    let ping = w.producer.ping(w.now).unwrap();
    w.settle();
    assert_eq!(w.producer.stats().pending, 6);
    assert!(w.resolved.is_empty() && w.pings.is_empty());
    w.advance(SEC / 2);
    w.complete_connects();
    let mut all = ids.clone();
    all.extend([multi, deferred]);
    assert_eq!(w.assert_resolved_once(&all), 0);
    assert_eq!(w.pings[&ping], vec![Ok(())]);
    let received = &w.servers[&addr(0)].received;
    let expected: Vec<Vec<u8>> = ["p0", "p1", "p2", "p3", "m1", "m2", "d"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(received, &expected);
    assert_eq!(w.producer.stats().pending, 0);
}

#[test]
fn pending_publishes_time_out_with_the_last_error() {
    let mut w = World::new(
        ProducerConfig {
            publish_timeout: 2 * SEC,
            connect_timeout: 10 * SEC,
            ..config()
        },
        2,
    );
    w.server(0).up = false;
    w.server(1).hold_connects = true;
    w.add_all();
    // Server 0 refused; server 1's connect hangs: publishes wait.
    let id = w.publish(b"x");
    w.advance(SEC);
    assert!(!w.is_resolved(id));
    w.advance(SEC);
    match w.outcome(id) {
        Err(PublishFailure::NoServerAvailable {
            last_error: Some(e),
        }) => {
            assert!(e.contains(&addr(0)) && e.contains("refused"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // The hanging connect is abandoned after connect_timeout; then everything is down.
    w.advance(8 * SEC);
    assert!(w.events.iter().any(|e| matches!(
        e,
        ProducerEvent::ConnectionClosed { reason, .. } if reason == "connect timed out"
    )));
}

#[test]
fn the_last_attempt_failing_fails_pending_publishes_at_once() {
    let mut w = World::new(config(), 1);
    w.server(0).hold_connects = true;
    w.add_all();
    let id = w.publish(b"x");
    w.server(0).up = false;
    w.complete_connects();
    assert!(matches!(
        w.outcome(id),
        Err(PublishFailure::NoServerAvailable { .. })
    ));
}

#[test]
fn close_flushes_outstanding_publishes_then_closes() {
    let mut w = World::new(config(), 2);
    w.server(0).auto_ack = false;
    w.add_all();
    let ids: Vec<PublishId> = (0..3).map(|_| w.publish(b"x")).collect();
    w.producer.close(w.now);
    w.settle();
    assert_eq!(
        w.producer.publish(w.now, &topic(), b"late"),
        Err(ProducerError::Closed)
    );
    assert!(!w.producer.is_closed());
    assert!(!w.events.contains(&ProducerEvent::Closed));
    w.ack(0, 3);
    assert_eq!(w.assert_resolved_once(&ids), 0);
    assert!(w.producer.is_closed());
    assert_eq!(
        w.events
            .iter()
            .filter(|e| **e == ProducerEvent::Closed)
            .count(),
        1
    );
    assert!(w.peers.is_empty());
    assert_eq!(w.producer.poll_timeout(), None);
}

#[test]
fn close_times_out_unanswered_publishes() {
    let mut w = World::new(
        ProducerConfig {
            close_timeout: 3 * SEC,
            reply_timeout: None,
            ..config()
        },
        1,
    );
    w.server(0).auto_ack = false;
    w.add_all();
    let id = w.publish(b"x");
    w.producer.close(w.now);
    w.advance(5 * SEC);
    assert!(w.producer.is_closed());
    assert!(matches!(
        w.outcome(id),
        Err(PublishFailure::ConnectionLost(_) | PublishFailure::TimedOut { .. })
    ));
}

#[test]
fn close_waits_for_a_connection_attempt_with_pending_publishes() {
    let mut w = World::new(config(), 1);
    w.server(0).hold_connects = true;
    w.add_all();
    let id = w.publish(b"x");
    w.producer.close(w.now);
    w.settle();
    assert!(!w.producer.is_closed());
    w.complete_connects();
    assert_eq!(w.outcome(id), &Ok(()));
    assert!(w.producer.is_closed());
}

#[test]
fn a_stuck_connection_times_out_and_is_replaced() {
    let mut w = World::new(
        ProducerConfig {
            reply_timeout: Some(5 * SEC),
            ..config()
        },
        1,
    );
    w.server(0).auto_ack = false;
    w.add_all();
    let id = w.publish(b"x");
    w.advance(6 * SEC);
    assert!(matches!(
        w.outcome(id),
        Err(PublishFailure::TimedOut { waited }) if *waited >= 5 * SEC
    ));
    w.advance(2 * SEC);
    assert_eq!(w.producer.healthy_connections(), 1);
}

#[test]
fn ten_thousand_publishes_with_heartbeats_resolve_exactly_once() {
    let mut w = World::new(
        ProducerConfig {
            routing: Routing::RoundRobin,
            ..config()
        },
        2,
    );
    w.add_all();
    let mut ids = Vec::with_capacity(10_000);
    for k in 0..10_000u32 {
        ids.push(
            w.producer
                .publish(w.now, &topic(), &k.to_be_bytes())
                .unwrap(),
        );
        if k % 100 == 99 {
            w.settle();
            w.advance(SEC);
        }
    }
    w.settle();
    assert_eq!(w.assert_resolved_once(&ids), 0);
    assert_eq!(w.producer.stats().published, 10_000);
    assert_eq!(w.producer.healthy_connections(), 2);
    // Each batch of 100 between polls left as one write per connection.
    let writes: usize = w.transmits.values().sum();
    assert!(writes <= 2 * 100 + 2 * 10 + 2 * 20, "{writes} writes");
}

#[test]
fn back_pressure_bounds_outstanding_publishes() {
    let mut w = World::new(
        ProducerConfig {
            max_outstanding: Some(3),
            ..config()
        },
        1,
    );
    w.server(0).auto_ack = false;
    w.add_all();
    let ids: Vec<PublishId> = (0..3).map(|_| w.publish(b"x")).collect();
    assert_eq!(
        w.producer.publish(w.now, &topic(), b"y"),
        Err(ProducerError::TooManyOutstanding { limit: 3 })
    );
    w.ack(0, 1);
    let more = w.publish(b"z");
    w.ack(0, 3);
    let mut all = ids;
    all.push(more);
    assert_eq!(w.assert_resolved_once(&all), 0);
    // Pending queue bound.
    let mut w = World::new(
        ProducerConfig {
            max_pending: 2,
            ..config()
        },
        1,
    );
    w.server(0).hold_connects = true;
    w.add_all();
    w.publish(b"1");
    w.publish(b"2");
    assert_eq!(
        w.producer.publish(w.now, &topic(), b"3"),
        Err(ProducerError::PendingQueueFull { limit: 2 })
    );
}

#[test]
fn invalid_publishes_are_refused_and_nothing_is_queued() {
    let mut w = World::new(config(), 1);
    w.server(0).hold_connects = true;
    w.add_all();
    // Pending path.
    assert_eq!(
        w.producer.publish(w.now, &topic(), b""),
        Err(ProducerError::Invalid(CommandError::EmptyBody))
    );
    let none: [&[u8]; 0] = [];
    assert_eq!(
        w.producer.multi_publish(w.now, &topic(), &none),
        Err(ProducerError::Invalid(CommandError::EmptyBatch))
    );
    assert_eq!(w.producer.stats().outstanding, 0);
    w.complete_connects();
    // Hot path.
    assert!(matches!(
        w.producer
            .deferred_publish(w.now, &topic(), Duration::from_secs(7200), b"x"),
        Err(ProducerError::Invalid(CommandError::DelayTooLong { .. }))
    ));
    assert_eq!(w.producer.stats().outstanding, 0);
    assert_eq!(w.producer.poll_action(), None);
    assert!(matches!(
        w.producer.add_nsqd(w.now, "nope"),
        Err(ProducerError::InvalidAddress(_))
    ));
}

#[test]
fn publishes_between_polls_leave_as_one_write() {
    // Without batching: fifty PUBs, in one write.
    let unbatched = ProducerConfig {
        batching: false,
        ..config()
    };
    let mut w = World::new(unbatched, 1);
    w.add_all();
    for _ in 0..50 {
        w.producer.publish(w.now, &topic(), b"x").unwrap();
    }
    let actions: Vec<Action> = std::iter::from_fn(|| w.producer.poll_action()).collect();
    assert_eq!(actions.len(), 1, "{actions:?}");
    let Action::Transmit { data, .. } = &actions[0] else {
        panic!("{actions:?}");
    };
    assert_eq!(data.len(), 50 * b"PUB t\n\0\0\0\x01x".len());
}

#[test]
fn ping_resolves_when_ready() {
    let mut w = World::new(config(), 1);
    w.add_all();
    let id = w.producer.ping(w.now).unwrap();
    w.settle();
    assert_eq!(w.pings[&id], vec![Ok(())]);
    // Like go-nsq's Ping, it writes a NOP to the server.
    let nops: usize = w.servers.values().map(|s| s.nops).sum();
    assert_eq!(nops, 1);
    w.producer.close(w.now);
    w.settle();
    assert_eq!(w.producer.ping(w.now), Err(ProducerError::Closed));
    assert!(w.producer.is_closed());
}

#[test]
fn extreme_durations_cannot_panic() {
    let config = ProducerConfig {
        publish_timeout: Duration::MAX,
        reply_timeout: Some(Duration::MAX),
        close_timeout: Duration::MAX,
        connect_timeout: Duration::MAX,
        reconnect_initial_delay: Duration::MAX,
        reconnect_max_delay: Duration::MAX,
        ..config()
    };
    let mut w = World::new(config, 2);
    w.server(0).hold_connects = true;
    w.server(1).up = false;
    w.add_all();
    let id = w.publish(b"x");
    assert!(w.producer.poll_timeout().is_some());
    w.advance(3600 * SEC);
    assert!(!w.is_resolved(id));
    w.complete_connects();
    assert_eq!(w.outcome(id), &Ok(()));
    w.producer.close(w.now);
    w.settle();
    assert!(w.producer.is_closed());
}

#[test]
fn heartbeats_between_publish_replies_are_not_mistaken_for_them() {
    // One reply per publish: batching off.
    let unbatched = ProducerConfig {
        batching: false,
        ..config()
    };
    let mut w = World::new(unbatched, 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let mut ids = Vec::with_capacity(10_000);
    for _ in 0..40 {
        for k in 0..250u32 {
            ids.push(
                w.producer
                    .publish(w.now, &topic(), &k.to_be_bytes())
                    .unwrap(),
            );
        }
        w.settle();
        // Half now, interleaved with heartbeats; the rest after more publishes went out.
        w.ack_with_heartbeats(0, 125, 10);
        assert_eq!(w.producer.stats().outstanding, 125);
        w.ack_with_heartbeats(0, 125, 7);
    }
    assert_eq!(w.assert_resolved_once(&ids), 0);
    // Every publish resolved in order.
    let order: Vec<PublishId> = w
        .events
        .iter()
        .filter_map(|e| match e {
            ProducerEvent::Published(id) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(order, ids);
    assert_eq!(w.servers[&addr(0)].received.len(), 10_000);
    assert_eq!(w.servers[&addr(0)].nops, 40 * (13 + 18));
    assert_eq!(w.producer.healthy_connections(), 1);
}
