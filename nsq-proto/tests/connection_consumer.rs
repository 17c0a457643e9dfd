//! Consumer duties: heartbeats, liveness, in-flight table, RDY, errors, graceful close.

mod common;

use bytes::BytesMut;
use common::{connect, consumer, events, fake};
use nsq_proto::test_support::{ClientCommand, FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{
    CloseReason, Connection, ConnectionConfig, ConnectionError, ConnectionEvent, ConnectionState,
    ErrorCode, Message, MessageId, encode_message_frame,
};
use std::time::{Duration, Instant};

fn ready_consumer(config: ConnectionConfig) -> (Connection, FakeNsqd, Instant) {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        msg_timeout_ms: 10_000,
        ..FakeNsqdConfig::default()
    });
    let (mut conn, n) = connect(config, consumer(), &mut peer, now);
    assert_eq!(n.msg_timeout, Duration::from_secs(10));
    conn.set_rdy(now, 10).unwrap();
    assert!(exchange(&mut conn, &mut peer, now).is_empty());
    assert_eq!(peer.rdy(), 10);
    peer.take_commands();
    (conn, peer, now)
}

fn messages(events: &[ConnectionEvent]) -> Vec<Message> {
    events
        .iter()
        .filter_map(|e| match e {
            ConnectionEvent::Message(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn heartbeats_are_answered_and_never_surfaced() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    for _ in 0..3 {
        peer.send_heartbeat();
    }
    assert!(exchange(&mut conn, &mut peer, now).is_empty());
    assert_eq!(
        peer.take_commands(),
        vec![ClientCommand::Nop, ClientCommand::Nop, ClientCommand::Nop]
    );
}

#[test]
fn liveness_timeout_closes_a_silent_connection() {
    let config = ConnectionConfig {
        heartbeat_interval: Duration::from_secs(5),
        ..ConnectionConfig::default()
    };
    let (mut conn, mut peer, start) = ready_consumer(config);
    // Heartbeats keep it alive.
    let mut now = start;
    for _ in 0..5 {
        now += Duration::from_secs(5);
        let deadline = conn.poll_timeout().unwrap();
        assert!(
            deadline > now,
            "deadline {deadline:?} should be after {now:?}"
        );
        conn.handle_timeout(now);
        peer.send_heartbeat();
        assert!(exchange(&mut conn, &mut peer, now).is_empty());
    }
    // Then silence: the deadline is 2 x heartbeat after the last bytes.
    let deadline = conn.poll_timeout().unwrap();
    assert_eq!(deadline, now + Duration::from_secs(10));
    conn.handle_timeout(deadline.checked_sub(Duration::from_millis(1)).unwrap());
    assert!(events(&mut conn).is_empty());
    conn.handle_timeout(deadline);
    // Closed, with the event not drained yet: the timer says "now" (not "never"), so a
    // driver that only watches timers reports it.
    assert!(conn.poll_timeout().is_some_and(|t| t <= deadline));
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Timeout {
            idle: Duration::from_secs(10)
        })]
    );
    assert_eq!(conn.poll_timeout(), None);
    assert_eq!(conn.state(), ConnectionState::Closed);
}

#[test]
fn explicit_read_timeout_is_used() {
    let config = ConnectionConfig {
        read_timeout: Some(Duration::from_secs(3)),
        ..ConnectionConfig::default()
    };
    let (conn, _peer, now) = ready_consumer(config);
    assert_eq!(conn.poll_timeout(), Some(now + Duration::from_secs(3)));
}

#[test]
fn in_flight_answers_and_misuse() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    let ids: Vec<MessageId> = (0..4)
        .map(|i| peer.deliver(format!("m{i}").as_bytes()).unwrap())
        .collect();
    let ev = exchange(&mut conn, &mut peer, now);
    let msgs = messages(&ev);
    assert_eq!(msgs.len(), 4);
    assert_eq!(&msgs[2].body[..], b"m2");
    assert_eq!(conn.in_flight(), 4);
    assert_eq!(conn.last_message_at(), Some(now));

    conn.finish(now, &ids[0]).unwrap();
    conn.requeue(now, &ids[1], Duration::from_secs(5)).unwrap();
    conn.touch(now, &ids[2]).unwrap();
    assert_eq!(
        &conn.poll_transmit().unwrap()[..],
        format!("FIN {}\nREQ {} 5000\nTOUCH {}\n", ids[0], ids[1], ids[2]).as_bytes()
    );
    assert_eq!(conn.in_flight(), 2);

    // Answers for ids not in flight are refused locally, and nothing is sent.
    let unknown = MessageId::new(*b"ffffffffffffffff");
    assert_eq!(
        conn.finish(now, &ids[0]),
        Err(ConnectionError::NotInFlight(ids[0]))
    );
    assert_eq!(
        conn.requeue(now, &unknown, Duration::ZERO),
        Err(ConnectionError::NotInFlight(unknown))
    );
    assert_eq!(
        conn.touch(now, &unknown),
        Err(ConnectionError::NotInFlight(unknown))
    );
    // A REQ delay above the limit is a command error; the message stays in flight.
    assert!(matches!(
        conn.requeue(now, &ids[3], Duration::from_secs(7200)),
        Err(ConnectionError::Command(_))
    ));
    assert!(conn.is_in_flight(&ids[3]));
    assert_eq!(conn.poll_transmit(), None);
    // Publishing on a consumer connection is refused.
    assert_eq!(
        conn.publish(now, &common::topic(), b"x"),
        Err(ConnectionError::WrongRole)
    );
}

#[test]
fn expiry_touch_and_late_answers() {
    let (mut conn, mut peer, t0) = ready_consumer(ConnectionConfig {
        heartbeat_interval: Duration::from_secs(60),
        ..ConnectionConfig::default()
    });
    let a = peer.deliver(b"a").unwrap();
    let _ = exchange(&mut conn, &mut peer, t0);
    let t1 = t0 + Duration::from_secs(4);
    let b = peer.deliver(b"b").unwrap();
    let _ = exchange(&mut conn, &mut peer, t1);
    assert_eq!(conn.poll_timeout(), Some(t0 + Duration::from_secs(10)));

    // Touching `a` at t0+6 moves its deadline to t0+16: `b` (t1+10 = t0+14) is next.
    let t2 = t0 + Duration::from_secs(6);
    conn.touch(t2, &a).unwrap();
    assert_eq!(conn.poll_timeout(), Some(t1 + Duration::from_secs(10)));
    conn.handle_timeout(t0 + Duration::from_secs(10));
    assert!(events(&mut conn).is_empty());

    conn.handle_timeout(t1 + Duration::from_secs(10));
    assert_eq!(events(&mut conn), vec![ConnectionEvent::MessageExpired(b)]);
    assert_eq!(conn.finish(t1, &b), Err(ConnectionError::NotInFlight(b)));
    assert_eq!(conn.poll_timeout(), Some(t2 + Duration::from_secs(10)));
    conn.handle_timeout(t2 + Duration::from_secs(10));
    assert_eq!(events(&mut conn), vec![ConnectionEvent::MessageExpired(a)]);
    assert_eq!(conn.in_flight(), 0);
    assert_eq!(conn.state(), ConnectionState::Ready);
}

#[test]
fn non_fatal_errors_are_events() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    let id = peer.deliver(b"x").unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    // The server already timed the message out and gave it to someone else.
    assert!(peer.time_out(&id));
    conn.finish(now, &id).unwrap();
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(
        matches!(&ev[..], [ConnectionEvent::ServerError(e)] if e.code() == ErrorCode::FinFailed),
        "{ev:?}"
    );
    for code in [ErrorCode::ReqFailed, ErrorCode::TouchFailed] {
        peer.send_error(code, "whatever");
    }
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(ev.len(), 2);
    assert_eq!(conn.state(), ConnectionState::Ready);
    conn.set_rdy(now, 1).unwrap();
}

#[test]
fn fatal_errors_are_sticky() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    let id = peer.deliver(b"x").unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    peer.close_with_error(ErrorCode::Invalid, "IDENTIFY cannot be changed");
    let ev = exchange(&mut conn, &mut peer, now);
    let [ConnectionEvent::Closed(reason)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert!(matches!(reason, CloseReason::Server(e) if e.code() == ErrorCode::Invalid));
    assert_eq!(
        conn.finish(now, &id),
        Err(ConnectionError::Closed(reason.clone()))
    );
    assert_eq!(
        conn.set_rdy(now, 1),
        Err(ConnectionError::Closed(reason.clone()))
    );
    conn.close(now);
    conn.handle_eof(now);
    conn.handle_timeout(now + Duration::from_secs(3600));
    common::feed(&mut conn, now, b"garbage after close");
    assert!(events(&mut conn).is_empty());
    assert_eq!(conn.in_flight(), 0);
}

#[test]
fn protocol_violations_close() {
    // A message before RDY/SUB finished, an unexpected OK, a bad frame type.
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    peer.send_ok();
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(matches!(
        &ev[..],
        [ConnectionEvent::Closed(CloseReason::Protocol(_))]
    ));

    let (mut conn, _peer, now) = ready_consumer(ConnectionConfig::default());
    common::feed(&mut conn, now, b"\x00\x00\x00\x05\x00\x00\x00\x07x");
    assert!(matches!(
        &events(&mut conn)[..],
        [ConnectionEvent::Closed(CloseReason::Decode(_))]
    ));

    let (mut conn, _peer, now) = ready_consumer(ConnectionConfig::default());
    conn.handle_eof(now);
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Eof)]
    );
}

#[test]
fn message_body_is_a_slice_of_the_read_buffer() {
    let (mut conn, _peer, now) = ready_consumer(ConnectionConfig::default());
    let mut buf = BytesMut::with_capacity(4096);
    for i in 0..3u8 {
        let msg = Message {
            timestamp: 1,
            attempts: 1,
            id: MessageId::new([b'0' + i; 16]),
            body: vec![i; 100].into(),
        };
        encode_message_frame(&mut buf, &msg);
    }
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    conn.handle_input(now, &mut buf);
    assert!(buf.is_empty());
    let ev = events(&mut conn);
    let msgs = messages(&ev);
    assert_eq!(msgs.len(), 3);
    for m in msgs {
        assert!(
            range.contains(&(m.body.as_ptr() as usize)),
            "body was copied"
        );
    }
}

#[test]
fn split_frames_are_reassembled() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    let id = peer.deliver(&[7u8; 1000]).unwrap();
    let wire = peer.take_output();
    for b in &wire {
        common::feed(&mut conn, now, std::slice::from_ref(b));
    }
    let ev = events(&mut conn);
    assert!(matches!(&ev[..], [ConnectionEvent::Message(m)] if m.id == id && m.body.len() == 1000));
}

#[test]
fn close_drains_without_leftovers() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    conn.close(now);
    assert_eq!(conn.state(), ConnectionState::Closing);
    assert_eq!(conn.rdy(), 0);
    assert_eq!(conn.set_rdy(now, 1), Err(ConnectionError::Closing));
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(
        ev,
        vec![ConnectionEvent::Closed(CloseReason::Graceful {
            unanswered: 0
        })]
    );
    assert_eq!(peer.take_commands(), vec![ClientCommand::Cls]);
    conn.close(now); // idempotent
    assert!(events(&mut conn).is_empty());
}

#[test]
fn close_waits_for_in_flight_answers() {
    let (mut conn, mut peer, now) = ready_consumer(ConnectionConfig::default());
    let a = peer.deliver(b"a").unwrap();
    let b = peer.deliver(b"b").unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    conn.close(now);
    // A message already on the wire when CLS was sent is still delivered and accepted.
    let c = peer.next_message_id();
    peer.send_message(c, 1, b"c");
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(messages(&ev).len(), 1);
    assert_eq!(conn.in_flight(), 3);
    assert_eq!(conn.state(), ConnectionState::Closing);
    conn.finish(now, &a).unwrap();
    conn.requeue(now, &b, Duration::ZERO).unwrap();
    assert!(exchange(&mut conn, &mut peer, now).is_empty());
    conn.finish(now, &c).unwrap();
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(
        ev,
        vec![ConnectionEvent::Closed(CloseReason::Graceful {
            unanswered: 0
        })]
    );
    // The final FIN still goes out.
    assert!(matches!(peer.commands().last(), Some(ClientCommand::Fin(id)) if *id == c));
}

#[test]
fn close_gives_up_at_the_drain_deadline() {
    let config = ConnectionConfig {
        drain_timeout: Duration::from_secs(5),
        heartbeat_interval: Duration::from_secs(60),
        ..ConnectionConfig::default()
    };
    let (mut conn, mut peer, now) = ready_consumer(config);
    let a = peer.deliver(b"a").unwrap();
    peer.deliver(b"b").unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    conn.close(now);
    assert!(exchange(&mut conn, &mut peer, now).is_empty());
    conn.finish(now, &a).unwrap();
    assert_eq!(conn.poll_timeout(), Some(now + Duration::from_secs(5)));
    conn.handle_timeout(now + Duration::from_secs(5));
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Graceful {
            unanswered: 1
        })]
    );
}

#[test]
fn close_during_start_up_is_immediate() {
    let now = common::t0();
    let mut conn = Connection::new(ConnectionConfig::default(), consumer(), "h:4150", now).unwrap();
    conn.close(now);
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Graceful {
            unanswered: 0
        })]
    );
}

#[test]
fn only_a_frame_straddling_two_reads_is_copied() {
    let (mut conn, _peer, now) = ready_consumer(ConnectionConfig::default());
    let mut wire = BytesMut::new();
    for i in 0..4u8 {
        let msg = Message {
            timestamp: 1,
            attempts: 1,
            id: MessageId::new([b'a' + i; 16]),
            body: vec![i; 500].into(),
        };
        encode_message_frame(&mut wire, &msg);
    }
    // First read ends in the middle of the second frame.
    let mut first = BytesMut::from(&wire[..800]);
    let mut second = BytesMut::with_capacity(4096);
    second.extend_from_slice(&wire[800..]);
    let second_range = second.as_ptr() as usize..second.as_ptr() as usize + second.len();
    conn.handle_input(now, &mut first);
    conn.handle_input(now, &mut second);
    let msgs = messages(&events(&mut conn));
    assert_eq!(msgs.len(), 4);
    assert!(!second_range.contains(&(msgs[1].body.as_ptr() as usize)));
    for m in &msgs[2..] {
        assert!(second_range.contains(&(m.body.as_ptr() as usize)));
        assert_eq!(m.body.len(), 500);
    }
}

#[test]
fn touch_never_extends_past_max_msg_timeout() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        msg_timeout_ms: 10_000,
        max_msg_timeout_ms: 25_000,
        ..FakeNsqdConfig::default()
    });
    let (mut conn, _) = connect(ConnectionConfig::default(), consumer(), &mut peer, now);
    conn.set_rdy(now, 1).unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    let id = peer.deliver(b"slow").unwrap();
    let _ = exchange(&mut conn, &mut peer, now);
    let t = now + Duration::from_secs(9);
    conn.touch(t, &id).unwrap();
    assert_eq!(conn.poll_timeout(), Some(now + Duration::from_secs(19)));
    let t = now + Duration::from_secs(18);
    conn.touch(t, &id).unwrap();
    // Capped at delivery + 25 s, not 28 s.
    assert_eq!(conn.poll_timeout(), Some(now + Duration::from_secs(25)));
    conn.handle_timeout(now + Duration::from_secs(25));
    assert_eq!(events(&mut conn), vec![ConnectionEvent::MessageExpired(id)]);
}

#[test]
fn debug_output_never_shows_a_pending_secret() {
    let now = common::t0();
    let config = ConnectionConfig {
        auth_secret: Some(nsq_proto::Secret::new("hunter2")),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, consumer(), "h:4150", now).unwrap();
    let _ = conn.poll_transmit();
    let mut reply = Vec::new();
    nsq_proto::encode_frame(&mut reply, 0, br#"{"auth_required":true}"#);
    common::feed(&mut conn, now, &reply);
    // AUTH (with the secret) is queued but not yet transmitted.
    let shown = format!("{conn:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(conn.poll_transmit().unwrap().ends_with(b"hunter2"));
}
