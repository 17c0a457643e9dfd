//! Deterministic simulations of how a Producer meets nsqd's size limits when nsqd's refusal
//! is destroyed by the reset that follows it (nsqd closes with the body unread), and of
//! publishes made while a lost connection is replaced (issue 44).

mod producer_common;

use nsq_proto::producer::{ProducerConfig, ProducerError, PublishFailure};
use nsq_proto::{CloseReason, CommandError, ConnectionConfig, ErrorCode, Limits};
use producer_common::{World, addr, topic};
use std::time::Duration;

const MIB: usize = 1024 * 1024;

/// A producer that allows 8 MiB messages (and MPUB bodies), as a user raising the client's
/// limits above nsqd's defaults does; `batching` as given.
fn config(batching: bool) -> ProducerConfig {
    ProducerConfig {
        connection: ConnectionConfig {
            limits: Limits {
                max_msg_size: 8 * MIB as u32,
                max_body_size: 8 * MIB as u32,
                ..Limits::default()
            },
            ..ConnectionConfig::default()
        },
        batching,
        ..ProducerConfig::default()
    }
}

/// One nsqd at its default limit (1 MiB) that refuses like nsqd v1.3.0 and whose refusal
/// never reaches the client: the reset destroys it.
fn resetting_world(batching: bool) -> World {
    let mut w = World::new(config(batching), 1);
    w.server(0).max_msg_size = Some(MIB);
    w.server(0).reset_refusals = true;
    w.add_all();
    w
}

fn too_big(len: usize, max: usize) -> ProducerError {
    ProducerError::Invalid(CommandError::BodyTooLarge {
        index: 0,
        len,
        max: max as u32,
    })
}

#[test]
fn ten_oversize_publishes_answered_by_resets_cost_one_connection() {
    let mut w = resetting_world(false);
    let start = w.now;
    let big = vec![b'x'; 4_000_000];
    for round in 0..10 {
        if round == 0 {
            // Only the reset answers it: taken as nsqd's refusal.
            let id = w.publish(&big);
            assert_eq!(
                w.outcome(id),
                &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
            );
        } else {
            // Over the limit learned from that reset: refused before it is sent.
            assert_eq!(
                w.producer.publish(w.now, &topic(), &big),
                Err(too_big(4_000_000, 3_999_999))
            );
        }
        // A valid publish right after succeeds: the connection was replaced at once.
        let ok = w.publish(b"fine");
        assert_eq!(w.outcome(ok), &Ok(()), "round {round}");
    }
    // One connection replaced, at once (no backoff: no time passed).
    let connects = &w.servers[&addr(0)].connects;
    assert_eq!(connects.len(), 2);
    assert!(connects.iter().all(|t| *t == start));
    // nsqd read the first 4 MB body only (the fake reads it whole before refusing).
    let received = &w.servers[&addr(0)].received;
    assert_eq!(received.len(), 1 + 10);
    assert_eq!(received.iter().filter(|b| b.len() == 4_000_000).count(), 1);
    let s = w.producer.stats();
    assert_eq!((s.published, s.failed), (10, 10));
}

#[test]
fn a_size_between_the_accepted_and_the_refused_costs_one_more_connection() {
    let mut w = resetting_world(false);
    let id = w.publish(&vec![b'x'; 4_000_000]);
    assert!(w.outcome(id).is_err());
    // 3 MB is under the bound the reset taught (4 MB - 1), so it is sent: nsqd resets again,
    // and the bound falls to 3 MB - 1.
    let id = w.publish(&vec![b'x'; 3_000_000]);
    assert_eq!(
        w.outcome(id),
        &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
    );
    assert_eq!(
        w.producer.publish(w.now, &topic(), &vec![b'x'; 3_000_000]),
        Err(too_big(3_000_000, 2_999_999))
    );
    assert_eq!(w.servers[&addr(0)].connects.len(), 3);
    // Within nsqd's limit: published.
    let id = w.publish(&vec![b'x'; MIB]);
    assert_eq!(w.outcome(id), &Ok(()));
}

#[test]
fn publishes_pipelined_behind_the_reset_one_are_sent_again() {
    let mut w = resetting_world(false);
    let big = vec![b'x'; 2 * MIB];
    let ids = w.publish_together(&[b"before", &big, b"after1", b"after2"]);
    assert_eq!(w.outcome(ids[0]), &Ok(()));
    assert_eq!(
        w.outcome(ids[1]),
        &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
    );
    // nsqd never read them: they went again on the new connection.
    assert_eq!(w.assert_resolved_once(&ids[2..]), 0);
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    assert_eq!(
        w.servers[&addr(0)].received.last().map(Vec::as_slice),
        Some(&b"after2"[..])
    );
}

#[test]
fn a_natural_batch_answered_by_a_reset_fails_only_its_oversize_message() {
    let mut w = resetting_world(true);
    let big = vec![b'x'; 2 * MIB];
    let ids = w.publish_together(&[b"a", b"b", &big, b"c"]);
    // One MPUB, reset: the small ones go again one by one, the big one fails.
    assert_eq!(w.servers[&addr(0)].commands[0], ("MPUB", 4));
    assert_eq!(w.assert_resolved_once(&ids), 1);
    assert_eq!(
        w.outcome(ids[2]),
        &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
    );
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    assert_eq!(
        w.producer.publish(w.now, &topic(), &big),
        Err(too_big(2 * MIB, 2 * MIB - 1))
    );
}

#[test]
fn a_reset_during_a_message_within_nsqds_default_limit_is_a_plain_loss() {
    // A crash while an ordinary body is in flight teaches no limit.
    let mut w = World::new(config(false), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let body = vec![b'x'; MIB];
    let id = w.publish(&body);
    w.drop_connections(0);
    assert_eq!(
        w.outcome(id),
        &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
    );
    w.server(0).auto_ack = true;
    let again = w.publish(&body);
    assert_eq!(w.outcome(again), &Ok(()));
}

#[test]
fn a_reset_during_a_size_nsqd_accepted_before_is_a_plain_loss() {
    let mut w = World::new(config(false), 1);
    w.add_all();
    let body = vec![b'x'; 4_000_000];
    let first = w.publish(&body);
    assert_eq!(w.outcome(first), &Ok(()));
    w.server(0).auto_ack = false;
    w.drop_connections(0);
    // A new connection (its fake peer holds replies), the same size, then a crash.
    let held = w.publish(&body);
    w.drop_connections(0);
    assert_eq!(
        w.outcome(held),
        &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
    );
    w.server(0).auto_ack = true;
    let again = w.publish(&body);
    assert_eq!(w.outcome(again), &Ok(()));
}

#[test]
fn a_limit_inferred_from_a_reset_is_withdrawn_when_nsqd_turns_out_to_be_down() {
    let mut w = World::new(config(false), 1);
    w.server(0).auto_ack = false;
    w.add_all();
    let body = vec![b'x'; 4_000_000];
    let id = w.publish(&body);
    // nsqd dies while the body is in flight: taken as a refusal at first, but the
    // replacement connection is refused, so the limit is given back.
    w.kill(0);
    assert_eq!(
        w.outcome(id),
        &Err(PublishFailure::ConnectionLost(CloseReason::Eof))
    );
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    w.revive(0);
    w.server(0).auto_ack = true;
    w.advance(Duration::from_secs(3));
    assert_eq!(w.producer.healthy_connections(), 1);
    let again = w.publish(&body);
    assert_eq!(w.outcome(again), &Ok(()));
}

#[test]
fn publishes_waiting_when_nsqd_states_its_limit_fail_before_they_are_sent() {
    // Ten 4 MB publishes at once, each its own PUB: nsqd refuses the first in words and
    // never reads the others; they would each cost a connection if sent again.
    let mut w = World::new(config(false), 1);
    w.server(0).max_msg_size = Some(MIB);
    w.add_all();
    let big = vec![b'x'; 4_000_000];
    let bodies: Vec<&[u8]> = (0..10).map(|_| &big[..]).collect();
    let ids = w.publish_together(&bodies);
    assert!(matches!(
        w.outcome(ids[0]),
        Err(PublishFailure::Server(e)) if e.code() == ErrorCode::BadMessage
    ));
    for id in &ids[1..] {
        assert!(
            matches!(
                w.outcome(*id),
                Err(PublishFailure::Refused(nsq_proto::ConnectionError::Command(
                    CommandError::BodyTooLarge { max, .. }
                ))) if *max == MIB as u32
            ),
            "{:?}",
            w.outcome(*id)
        );
    }
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
}

#[test]
fn a_publish_made_while_a_lost_connection_is_replaced_waits_for_it() {
    let mut w = World::new(config(false), 1);
    w.add_all();
    w.server(0).hold_connects = true;
    // nsqd closed the connection (it stays up): not known down.
    w.drop_connections(0);
    let id = w.publish(b"x");
    assert!(!w.is_resolved(id), "it waits for the connection");
    assert_eq!(w.servers[&addr(0)].connects.len(), 2, "connected on demand");
    w.complete_connects();
    assert_eq!(w.outcome(id), &Ok(()));
}

#[test]
fn publishes_fail_at_once_only_when_every_nsqd_is_known_down() {
    let mut w = World::new(config(false), 2);
    w.add_all();
    w.server(0).up = false;
    w.server(1).up = false;
    w.drop_connections(0);
    w.drop_connections(1);
    // Both were up when their connections ended: the publish tries them, and fails once
    // both attempts have.
    let id = w.publish(b"x");
    assert!(matches!(
        w.outcome(id),
        Err(PublishFailure::NoServerAvailable {
            last_error: Some(_)
        })
    ));
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    assert_eq!(w.servers[&addr(1)].connects.len(), 2);
    // Now both are known down: the next publish fails at once, trying nothing.
    let id = w.publish(b"y");
    assert!(matches!(
        w.outcome(id),
        Err(PublishFailure::NoServerAvailable { .. })
    ));
    assert_eq!(w.servers[&addr(0)].connects.len(), 2);
    // ... until a scheduled reconnect finds one up again.
    w.revive(1);
    w.advance(Duration::from_secs(3));
    let id = w.publish(b"z");
    assert_eq!(w.outcome(id), &Ok(()));
}
