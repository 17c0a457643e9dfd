//! Deterministic simulations of the Producer's natural batching and of how it treats a
//! publish nsqd refuses (issue: a rejected message is not a dead nsqd).

mod producer_common;

use nsq_proto::producer::{
    Batch, ProducerConfig, ProducerError, ProducerEvent, PublishFailure, PublishId,
};
use nsq_proto::{CloseReason, CommandError, ConnectionConfig, ErrorCode, Limits, Topic};
use producer_common::{World, addr, topic};
use std::time::Duration;

fn bodies(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|k| format!("{tag}{k:04}").into_bytes())
        .collect()
}

fn refs(b: &[Vec<u8>]) -> Vec<&[u8]> {
    b.iter().map(Vec::as_slice).collect()
}

fn published_order(w: &World) -> Vec<PublishId> {
    w.events
        .iter()
        .filter_map(|e| match e {
            ProducerEvent::Published(id) => Some(*id),
            _ => None,
        })
        .collect()
}

#[test]
fn concurrent_publishes_to_one_topic_leave_as_one_mpub_each_with_its_own_result() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let b = bodies(50, "m");
    let ids = w.publish_together(&refs(&b));
    assert_eq!(w.servers[&addr(0)].commands, vec![("MPUB", 50)]);
    assert_eq!(w.servers[&addr(0)].received, b);
    assert!(ids.iter().all(|id| !w.is_resolved(*id)));
    assert_eq!(w.producer.stats().outstanding, 50);
    // One OK resolves the fifty, in order.
    w.ack(0, 1);
    assert_eq!(w.assert_resolved_once(&ids), 0);
    assert_eq!(published_order(&w), ids);
    let s = w.producer.stats();
    assert_eq!(
        (s.batches, s.batched_messages, s.published, s.outstanding),
        (1, 50, 50, 0)
    );
}

#[test]
fn publishes_made_behind_outstanding_batches_form_the_next_one() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let first = w.publish_together(&refs(&bodies(10, "a")));
    // One command outstanding: the next batch is pipelined behind it.
    let second = w.publish_together(&refs(&bodies(7, "b")));
    assert_eq!(
        w.servers[&addr(0)].commands,
        vec![("MPUB", 10), ("MPUB", 7)]
    );
    // Two outstanding: what is made now gathers, and leaves together when a reply arrives
    // (its own replies could not come before those anyway).
    let third = w.publish_together(&refs(&bodies(5, "c")));
    let lone = w.publish(b"d");
    assert_eq!(w.servers[&addr(0)].commands.len(), 2);
    assert_eq!(w.producer.stats().outstanding, 23);
    w.ack(0, 1);
    assert_eq!(w.assert_resolved_once(&first), 0);
    assert_eq!(w.servers[&addr(0)].commands.last(), Some(&("MPUB", 6)));
    w.ack(0, 2);
    let all: Vec<PublishId> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .copied()
        .chain([lone])
        .collect();
    assert_eq!(w.assert_resolved_once(&all), 0);
    assert_eq!(published_order(&w), all);
    assert_eq!(w.producer.stats().batches, 3);
    // A lone publish on an idle connection leaves at once, as a PUB.
    let alone = w.publish(b"e");
    assert_eq!(w.servers[&addr(0)].commands.last(), Some(&("PUB", 1)));
    w.ack(0, 1);
    assert_eq!(w.outcome(alone), &Ok(()));
}

#[test]
fn batching_off_sends_every_publish_as_its_own_pub() {
    let config = ProducerConfig {
        batching: false,
        ..ProducerConfig::default()
    };
    let mut w = World::new(config, 1);
    w.add_all();
    let ids = w.publish_together(&refs(&bodies(5, "x")));
    assert_eq!(w.servers[&addr(0)].commands, vec![("PUB", 1); 5]);
    assert_eq!(w.assert_resolved_once(&ids), 0);
    assert_eq!(w.producer.stats().batches, 0);
}

#[test]
fn other_topics_dpub_and_explicit_mpub_keep_their_own_commands_and_topic_order() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.add_all();
    let (t, u) = (topic(), Topic::new("u").unwrap());
    let now = w.now;
    let p = &mut w.producer;
    let ids = vec![
        p.publish(now, &t, b"a1").unwrap(),
        p.publish(now, &u, b"b1").unwrap(),
        p.deferred_publish(now, &t, Duration::from_secs(1), b"d")
            .unwrap(),
        p.publish(now, &t, b"a2").unwrap(),
        p.multi_publish(now, &t, &[b"x", b"y"]).unwrap(),
        p.publish(now, &t, b"a3").unwrap(),
        p.publish(now, &u, b"b2").unwrap(),
    ];
    w.settle();
    // `b2` joins `b1` (nothing else for topic u in between); topic t keeps its order
    // around the DPUB and the explicit MPUB.
    assert_eq!(
        w.servers[&addr(0)].commands,
        vec![
            ("PUB", 1),
            ("MPUB", 2),
            ("DPUB", 1),
            ("PUB", 1),
            ("MPUB", 2),
            ("PUB", 1)
        ]
    );
    let received: Vec<&[u8]> = w.servers[&addr(0)]
        .received
        .iter()
        .map(Vec::as_slice)
        .collect();
    assert_eq!(
        received,
        [&b"a1"[..], b"b1", b"b2", b"d", b"a2", b"x", b"y", b"a3"]
    );
    assert_eq!(w.assert_resolved_once(&ids), 0);
}

#[test]
fn batches_stay_within_the_mpub_body_limit() {
    let mut config = ProducerConfig::default();
    // Entries of 4 + 9 bytes: 4 + 4 x 13 = 56 <= 60 < 4 + 5 x 13.
    config.connection.limits.max_body_size = 60;
    let mut w = World::new(config, 1);
    w.add_all();
    let ids = w.publish_together(&refs(&bodies(10, "limit")));
    assert_eq!(
        w.servers[&addr(0)].commands,
        vec![("MPUB", 4), ("MPUB", 4), ("MPUB", 2)]
    );
    assert_eq!(w.assert_resolved_once(&ids), 0);
}

#[test]
fn a_refused_message_fails_alone_and_costs_no_outage() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).max_msg_size = Some(100);
    w.add_all();
    let start = w.now;
    let mut b = bodies(10, "good");
    b.push(vec![b'!'; 150]);
    b.extend(bodies(10, "more"));
    let ids = w.publish_together(&refs(&b));
    // Only the big one fails, with nsqd's error.
    assert_eq!(w.assert_resolved_once(&ids), 1);
    match w.outcome(ids[10]) {
        Err(PublishFailure::Server(e)) => assert_eq!(e.code(), ErrorCode::BadMessage),
        other => panic!("{other:?}"),
    }
    // Reconnected at once: a tight loop of good publishes all succeed.
    assert_eq!(w.producer.healthy_connections(), 1);
    let ids = w.publish_together(&refs(&bodies(1000, "loop")));
    assert_eq!(w.assert_resolved_once(&ids), 0);
    // nsqd said its max-msg-size: a PUB, DPUB or MPUB over it now fails before it is sent,
    // with that limit, and costs no connection.
    let topic = topic();
    let too_big = ProducerError::Invalid(CommandError::BodyTooLarge {
        index: 0,
        len: 150,
        max: 100,
    });
    for _ in 0..4 {
        let big = [b'!'; 150];
        assert_eq!(
            w.producer.publish(w.now, &topic, &big),
            Err(too_big.clone())
        );
        let delay = Duration::from_secs(1);
        assert_eq!(
            w.producer.deferred_publish(w.now, &topic, delay, &big),
            Err(too_big.clone())
        );
        assert_eq!(
            w.producer.multi_publish(w.now, &topic, &[&big[..]]),
            Err(too_big.clone())
        );
        let ids = w.publish_together(&refs(&bodies(10, "fine")));
        assert_eq!(w.assert_resolved_once(&ids), 0);
    }
    // No time passed: every reconnect was immediate, none waited for a backoff.
    assert_eq!(w.now, start);
    let connects = &w.servers[&addr(0)].connects;
    assert!(connects.iter().all(|t| *t == start), "{connects:?}");
    // The batch was refused (1 reconnect), and nsqd's words named the big one: it failed
    // with them, sending nothing more, while the others went again; then nothing more.
    assert_eq!(connects.len(), 1 + 1);
    // The 12 refused before they were sent count as failed too.
    let s = w.producer.stats();
    assert_eq!((s.failed, s.published), (1 + 12, 1020 + 4 * 10));
}

#[test]
fn publishes_wait_while_a_rejected_connection_is_replaced() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).max_msg_size = Some(100);
    w.add_all();
    w.server(0).hold_connects = true;
    let bad = w.publish(&[0; 200]);
    assert!(matches!(w.outcome(bad), Err(PublishFailure::Server(_))));
    // The limit nsqd stated applies at once, before the replacement connection is ready: a
    // second oversize publish fails before it is sent, and costs no connection.
    let topic = topic();
    assert!(matches!(
        w.producer.publish(w.now, &topic, &[0; 200]),
        Err(ProducerError::Invalid(CommandError::BodyTooLarge {
            max: 100,
            ..
        }))
    ));
    // The replacement connection is being made: publishes wait for it instead of failing.
    let ids = w.publish_together(&refs(&bodies(20, "w")));
    assert!(ids.iter().all(|id| !w.is_resolved(*id)));
    assert_eq!(w.producer.stats().pending, 20);
    w.complete_connects();
    assert_eq!(w.assert_resolved_once(&ids), 0);
    assert_eq!(w.servers[&addr(0)].commands.last(), Some(&("MPUB", 20)));
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    assert_eq!(w.producer.stats().failed, 2);
}

#[test]
fn publishes_pipelined_behind_a_refused_one_are_sent_again() {
    // One PUB each, all in one write: nsqd answers the first, refuses the second and closes
    // without reading the rest.
    let config = ProducerConfig {
        batching: false,
        ..ProducerConfig::default()
    };
    let mut w = World::new(config, 1);
    w.server(0).max_msg_size = Some(100);
    w.add_all();
    let big = vec![0; 200];
    let ids = w.publish_together(&[b"before", &big, b"after1", b"after2", b"after3"]);
    assert_eq!(w.outcome(ids[0]), &Ok(()));
    assert!(matches!(w.outcome(ids[1]), Err(PublishFailure::Server(_))));
    assert_eq!(w.assert_resolved_once(&ids[2..]), 0);
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    // Read: two on the first connection (it stopped at the refusal), three on the second.
    assert_eq!(w.servers[&addr(0)].commands.len(), 2 + 3);
}

#[test]
fn a_batch_refused_for_its_topic_fails_every_publish_with_the_error() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let ids = w.publish_together(&refs(&bodies(3, "t")));
    w.reject(0);
    for id in &ids {
        match w.outcome(*id) {
            Err(PublishFailure::Server(e)) => assert_eq!(e.code(), ErrorCode::BadTopic),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_connection_lost_with_a_batch_outstanding_fails_each_of_its_publishes() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let ids = w.publish_together(&refs(&bodies(4, "l")));
    w.kill(0);
    for id in &ids {
        assert!(matches!(
            w.outcome(*id),
            Err(PublishFailure::ConnectionLost(CloseReason::Eof))
        ));
    }
}

#[test]
fn an_nsqd_requiring_tls_fails_ping_and_publishes_with_a_typed_error() {
    use nsq_proto::Misconfiguration;
    let mut w = World::new(ProducerConfig::default(), 1);
    w.server(0).tls_required = true;
    w.add_all();
    assert_eq!(w.producer.healthy_connections(), 0);
    let ping = w.producer.ping(w.now).unwrap();
    w.settle();
    let misconfigured = PublishFailure::Misconfigured {
        addr: addr(0),
        problem: Misconfiguration::TlsRequired,
    };
    assert_eq!(w.pings[&ping], vec![Err(misconfigured.clone())]);
    let id = w.publish(b"x");
    assert_eq!(w.outcome(id), &Err(misconfigured.clone()));
    assert!(misconfigured.to_string().contains("requires TLS"));
    // A misconfiguration is not retried on its own, however long.
    assert_eq!(w.servers[&addr(0)].connects.len(), 1);
    w.advance(Duration::from_secs(600));
    assert_eq!(w.servers[&addr(0)].connects.len(), 1);
    // Added again: one more attempt.
    w.producer.add_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
}

/// With one nsqd misconfigured and another merely down, publishes fail as
/// `NoServerAvailable` (the other one may come back), and the misconfigured one is never
/// tried again while the other reconnects on its schedule.
#[test]
fn a_misconfigured_nsqd_beside_one_that_is_down_is_not_an_outage_of_both() {
    let mut w = World::new(ProducerConfig::default(), 2);
    w.server(0).tls_required = true;
    w.add_all();
    w.kill(1);
    let id = w.publish(b"x");
    assert!(matches!(
        w.outcome(id),
        Err(PublishFailure::NoServerAvailable { .. })
    ));
    w.advance(Duration::from_secs(600));
    assert_eq!(w.servers[&addr(0)].connects.len(), 1);
    assert!(w.servers[&addr(1)].connects.len() > 2);
}

#[test]
fn an_error_that_refused_nothing_backs_off_like_a_failure() {
    let mut w = World::new(ProducerConfig::default(), 1);
    w.add_all();
    // nsqd errs and closes with no publish to refuse: no instant reconnect (that could loop).
    w.reject(0);
    assert_eq!(w.producer.healthy_connections(), 0);
    assert_eq!(w.servers[&addr(0)].connects.len(), 1);
    w.advance(Duration::from_secs(3));
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    assert_eq!(w.producer.healthy_connections(), 1);
}

/// A batch encoded where its bodies are (another thread, say) is written as it is, in order
/// with the publishes around it; one made under limits higher than the producer's is refused
/// and sends nothing.
#[test]
fn a_batch_made_elsewhere_is_written_as_it_is() {
    let limits = Limits {
        max_msg_size: 100,
        ..Limits::default()
    };
    let config = ProducerConfig {
        connection: ConnectionConfig {
            limits,
            ..ConnectionConfig::default()
        },
        ..ProducerConfig::default()
    };
    let mut w = World::new(config, 1);
    w.add_all();
    let b = bodies(50, "m");
    let batch = Batch::new(&topic(), &b, &limits).unwrap();
    assert_eq!(batch.len(), 50);
    let before = w.producer.publish(w.now, &topic(), b"before").unwrap();
    let id = w.producer.multi_publish_batch(w.now, batch).unwrap();
    let after = w.producer.publish(w.now, &topic(), b"after").unwrap();
    w.settle();
    let mut expected = vec![b"before".to_vec()];
    expected.extend(b.iter().cloned());
    expected.push(b"after".to_vec());
    assert_eq!(w.server(0).received, expected);
    assert_eq!(w.server(0).commands, [("PUB", 1), ("MPUB", 50), ("PUB", 1)]);
    for i in [before, id, after] {
        assert_eq!(w.outcome(i), &Ok(()));
    }

    let roomy = Limits {
        max_msg_size: 1000,
        ..Limits::default()
    };
    let big = Batch::new(&topic(), [vec![b'x'; 10], vec![b'y'; 200]], &roomy).unwrap();
    assert_eq!(
        w.producer.multi_publish_batch(w.now, big),
        Err(ProducerError::Invalid(CommandError::BodyTooLarge {
            index: 1,
            len: 200,
            max: 100
        }))
    );
    w.settle();
    assert_eq!(w.server(0).commands.len(), 3, "nothing sent");
}
