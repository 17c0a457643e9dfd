//! Producer duties: pipelined publishes matched FIFO, failures, back-pressure, close.

mod common;

use common::{connect, events, fake, topic};
use nsq_proto::test_support::{ClientCommand, FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{
    CloseReason, Connection, ConnectionConfig, ConnectionError, ConnectionEvent, ConnectionState,
    ErrorCode, PublishError, PublishToken, Role,
};
use std::time::{Duration, Instant};

fn ready_producer(config: ConnectionConfig, auto_ack: bool) -> (Connection, FakeNsqd, Instant) {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        auto_ack_publishes: auto_ack,
        ..FakeNsqdConfig::default()
    });
    let (conn, _) = connect(config, Role::Producer, &mut peer, now);
    peer.take_commands();
    (conn, peer, now)
}

#[test]
fn thousand_pipelined_publishes_match_fifo_with_heartbeats() {
    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), false);
    let t = topic();
    let mut tokens = Vec::new();
    for i in 0..1000u32 {
        let body = format!("msg-{i}");
        let token = match i % 3 {
            0 => conn.publish(now, &t, body.as_bytes()),
            1 => conn.multi_publish(now, &t, &[body.as_bytes(), b"second"]),
            _ => conn.deferred_publish(
                now,
                &t,
                Duration::from_millis(u64::from(i)),
                body.as_bytes(),
            ),
        }
        .unwrap();
        tokens.push(token);
    }
    assert_eq!(conn.outstanding_publishes(), 1000);
    // All of it goes out in one buffer.
    let wire = conn.poll_transmit().unwrap();
    assert_eq!(conn.poll_transmit(), None);
    peer.receive(&wire);
    let cmds = peer.take_commands();
    assert_eq!(cmds.len(), 1000);
    assert!(matches!(&cmds[1], ClientCommand::Mpub { bodies, .. } if bodies.len() == 2));
    assert!(matches!(&cmds[2], ClientCommand::Dpub { delay_ms: 2, .. }));

    // Replies trickle in with heartbeats between them.
    let mut published = Vec::new();
    for i in 0..1000 {
        if i % 7 == 0 {
            peer.send_heartbeat();
        }
        peer.send_ok();
        if i % 50 == 49 {
            for e in exchange(&mut conn, &mut peer, now) {
                match e {
                    ConnectionEvent::Published(t) => published.push(t),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
    assert_eq!(published, tokens);
    assert_eq!(conn.outstanding_publishes(), 0);
    let nops = peer
        .take_commands()
        .iter()
        .filter(|c| **c == ClientCommand::Nop)
        .count();
    assert_eq!(nops, 143);
    assert_eq!(tokens[999].sequence(), 999);
}

#[test]
fn fatal_error_fails_the_head_and_every_other_publish() {
    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), false);
    let t = topic();
    let tokens: Vec<PublishToken> = (0..4)
        .map(|_| conn.publish(now, &t, b"x").unwrap())
        .collect();
    let _ = exchange(&mut conn, &mut peer, now);
    peer.send_ok();
    peer.close_with_error(ErrorCode::PubFailed, "PUB failed exiting");
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(ev.len(), 5, "{ev:?}");
    assert_eq!(ev[0], ConnectionEvent::Published(tokens[0]));
    let ConnectionEvent::PublishFailed(t1, PublishError::Server(e)) = &ev[1] else {
        panic!("{ev:?}")
    };
    assert_eq!(*t1, tokens[1]);
    assert_eq!(e.code(), ErrorCode::PubFailed);
    let ConnectionEvent::Closed(reason) = &ev[4] else {
        panic!("{ev:?}")
    };
    assert!(matches!(reason, CloseReason::Server(e) if e.code() == ErrorCode::PubFailed));
    for (i, e) in ev[2..4].iter().enumerate() {
        assert_eq!(
            *e,
            ConnectionEvent::PublishFailed(tokens[i + 2], PublishError::Closed(reason.clone()))
        );
    }
    assert_eq!(
        conn.publish(now, &t, b"y"),
        Err(ConnectionError::Closed(reason.clone()))
    );
}

#[test]
fn eof_fails_outstanding_publishes() {
    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), false);
    let a = conn.publish(now, &topic(), b"x").unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    conn.handle_eof(now);
    assert_eq!(
        events(&mut conn),
        vec![
            ConnectionEvent::PublishFailed(a, PublishError::Closed(CloseReason::Eof)),
            ConnectionEvent::Closed(CloseReason::Eof)
        ]
    );
}

#[test]
fn outstanding_bound_gives_back_pressure() {
    let config = ConnectionConfig {
        max_outstanding_publishes: Some(2),
        ..ConnectionConfig::default()
    };
    let (mut conn, mut peer, now) = ready_producer(config, false);
    let t = topic();
    conn.publish(now, &t, b"1").unwrap();
    conn.publish(now, &t, b"2").unwrap();
    assert_eq!(
        conn.publish(now, &t, b"3"),
        Err(ConnectionError::TooManyOutstanding { limit: 2 })
    );
    let _ = exchange(&mut conn, &mut peer, now);
    assert_eq!(peer.take_commands().len(), 2);
    peer.send_ok();
    let _ = exchange(&mut conn, &mut peer, now);
    // Invalid publishes are refused without consuming a token or sending anything.
    assert!(matches!(
        conn.publish(now, &t, b""),
        Err(ConnectionError::Command(_))
    ));
    assert_eq!(conn.publish(now, &t, b"3").unwrap().sequence(), 2);
    let next = conn.publish(now, &t, b"4");
    assert_eq!(next, Err(ConnectionError::TooManyOutstanding { limit: 2 }));
}

#[test]
fn close_flushes_outstanding_publishes_without_cls() {
    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), false);
    let t = topic();
    let a = conn.publish(now, &t, b"a").unwrap();
    let b = conn.publish(now, &t, b"b").unwrap();
    conn.close(now);
    assert_eq!(conn.state(), ConnectionState::Closing);
    assert_eq!(conn.publish(now, &t, b"c"), Err(ConnectionError::Closing));
    let _ = exchange(&mut conn, &mut peer, now);
    assert!(!peer.commands().contains(&ClientCommand::Cls));
    assert!(!peer.is_closed());
    peer.send_ok();
    peer.send_heartbeat();
    peer.send_ok();
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(
        ev,
        vec![
            ConnectionEvent::Published(a),
            ConnectionEvent::Published(b),
            ConnectionEvent::Closed(CloseReason::Graceful { unanswered: 0 })
        ]
    );
}

#[test]
fn close_with_nothing_outstanding_is_immediate_and_deadline_fails_the_rest() {
    let (mut conn, _peer, now) = ready_producer(ConnectionConfig::default(), false);
    conn.close(now);
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Graceful {
            unanswered: 0
        })]
    );
    assert_eq!(conn.poll_transmit(), None);

    let config = ConnectionConfig {
        drain_timeout: Duration::from_secs(2),
        ..ConnectionConfig::default()
    };
    let (mut conn, mut peer, now) = ready_producer(config, false);
    let a = conn.publish(now, &topic(), b"a").unwrap();
    conn.close(now);
    let _ = exchange(&mut conn, &mut peer, now);
    conn.handle_timeout(now + Duration::from_secs(2));
    let reason = CloseReason::Graceful { unanswered: 1 };
    assert_eq!(
        events(&mut conn),
        vec![
            ConnectionEvent::PublishFailed(a, PublishError::Closed(reason.clone())),
            ConnectionEvent::Closed(reason)
        ]
    );
}

#[test]
fn consumer_only_frames_on_a_producer_are_violations() {
    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), false);
    assert_eq!(conn.set_rdy(now, 1), Err(ConnectionError::WrongRole));
    let id = peer.next_message_id();
    peer.send_message(id, 1, b"x");
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(matches!(
        &ev[..],
        [ConnectionEvent::Closed(CloseReason::Protocol(_))]
    ));

    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), false);
    peer.send_ok(); // nothing outstanding
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(matches!(
        &ev[..],
        [ConnectionEvent::Closed(CloseReason::Protocol(_))]
    ));
}

#[test]
fn close_during_start_up_fails_queued_publishes() {
    let now = common::t0();
    let mut conn =
        Connection::new(ConnectionConfig::default(), Role::Producer, "h:4150", now).unwrap();
    let a = conn.publish(now, &topic(), b"a").unwrap();
    conn.close(now);
    let reason = CloseReason::Graceful { unanswered: 1 };
    assert_eq!(
        events(&mut conn),
        vec![
            ConnectionEvent::PublishFailed(a, PublishError::Closed(reason.clone())),
            ConnectionEvent::Closed(reason)
        ]
    );
}

#[test]
fn nop_only_on_a_ready_connection_and_never_answered() {
    let now = common::t0();
    let mut early = Connection::new(
        ConnectionConfig::default(),
        Role::Producer,
        "127.0.0.1:4150",
        now,
    )
    .unwrap();
    assert_eq!(early.nop(now), Err(ConnectionError::NotReady));

    let (mut conn, mut peer, now) = ready_producer(ConnectionConfig::default(), true);
    conn.nop(now).unwrap();
    let wire = conn.poll_transmit().unwrap();
    assert_eq!(&wire[..], b"NOP\n");
    peer.receive(&wire);
    let got = exchange(&mut conn, &mut peer, now);
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(peer.take_commands(), vec![ClientCommand::Nop]);
    assert_eq!(conn.state(), ConnectionState::Ready);
}
