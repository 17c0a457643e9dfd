//! How a Consumer hands out the bytes of its connections: every command queued on one
//! connection between two polls leaves as one `Transmit`, and the order of the bytes across
//! connections is the order they were queued in.
#![allow(
    clippy::disallowed_methods,
    reason = "tests: one Instant::now as the origin of virtual time"
)]

use bytes::BytesMut;
use nsq_proto::driver::{Action, ConnId};
use nsq_proto::{
    Channel, Consumer, ConsumerConfig, ConsumerEvent, Message, MessageId, Topic, encode_frame,
    encode_message_frame,
};
use std::time::Instant;

/// A consumer with `n` connections, each through start-up (IDENTIFY reply, SUB OK) and
/// given its RDY; every action and event so far drained.
fn started(n: usize, now: Instant) -> (Consumer, Vec<ConnId>) {
    let mut consumer = Consumer::new(
        ConsumerConfig {
            max_in_flight: 1000,
            ..ConsumerConfig::default()
        },
        Topic::new("t").unwrap(),
        Channel::new("c").unwrap(),
        7,
    );
    for i in 0..n {
        consumer
            .add_nsqd(now, &format!("127.0.0.{}:4150", i + 1))
            .unwrap();
    }
    let mut conns = Vec::new();
    while let Some(a) = consumer.poll_action() {
        if let Action::Connect { conn, .. } = a {
            conns.push(conn);
        }
    }
    assert_eq!(conns.len(), n);
    for &conn in &conns {
        consumer.handle_connected(now, conn);
        let mut handshake = BytesMut::new();
        encode_frame(
            &mut handshake,
            0,
            br#"{"max_rdy_count":2500,"version":"1.3.0","msg_timeout":60000,"max_msg_timeout":900000}"#,
        );
        encode_frame(&mut handshake, 0, b"OK");
        consumer.handle_input(now, conn, &mut handshake);
    }
    while consumer.poll_action().is_some() {}
    while consumer.poll_event().is_some() {}
    (consumer, conns)
}

/// Delivers `count` messages on `conn`; returns their ids.
fn deliver(consumer: &mut Consumer, now: Instant, conn: ConnId, count: usize) -> Vec<MessageId> {
    let mut buf = BytesMut::new();
    for i in 0..count {
        let id = format!("{:08x}{:08x}", conn.get(), i);
        encode_message_frame(
            &mut buf,
            &Message {
                timestamp: 1,
                attempts: 1,
                id: MessageId::try_from(id.as_bytes()).unwrap(),
                body: bytes::Bytes::from_static(b"body"),
            },
        );
    }
    consumer.handle_input(now, conn, &mut buf);
    let mut ids = Vec::new();
    while let Some(e) = consumer.poll_event() {
        if let ConsumerEvent::Message { message, .. } = e {
            ids.push(message.id);
        }
    }
    assert_eq!(ids.len(), count);
    // RDY raised after the first message: sent, so only answers are queued from here on.
    while consumer.poll_action().is_some() {}
    ids
}

fn fin(id: &MessageId) -> String {
    format!("FIN {id}\n")
}

/// Every transmit queued so far, as (connection, commands other than RDY); other actions
/// are an error here.
fn transmits(consumer: &mut Consumer) -> Vec<(ConnId, String)> {
    std::iter::from_fn(|| consumer.poll_action())
        .map(|a| match a {
            Action::Transmit { conn, data } => {
                let text = String::from_utf8(data.to_vec()).expect("text commands");
                let answers: String = text
                    .split_inclusive('\n')
                    .filter(|line| !line.starts_with("RDY "))
                    .collect();
                (conn, answers)
            }
            other => panic!("unexpected action {other:?}"),
        })
        .collect()
}

#[test]
fn answers_between_two_polls_leave_as_one_transmit() {
    let now = Instant::now();
    let (mut consumer, conns) = started(1, now);
    let ids = deliver(&mut consumer, now, conns[0], 100);
    for id in &ids {
        consumer.finish(now, conns[0], id).unwrap();
    }
    let sent = transmits(&mut consumer);
    assert_eq!(sent.len(), 1, "one transmit for 100 answers");
    let expected: String = ids.iter().map(fin).collect();
    assert_eq!(sent[0], (conns[0], expected));
    // Nothing left behind, and the next answer is a transmit of its own.
    let next = deliver(&mut consumer, now, conns[0], 1);
    consumer.finish(now, conns[0], &next[0]).unwrap();
    assert_eq!(transmits(&mut consumer).len(), 1);
}

#[test]
fn bytes_of_several_connections_keep_their_order() {
    let now = Instant::now();
    let (mut consumer, conns) = started(2, now);
    let (a, b) = (conns[0], conns[1]);
    let on_a = deliver(&mut consumer, now, a, 3);
    let on_b = deliver(&mut consumer, now, b, 2);
    consumer.finish(now, a, &on_a[0]).unwrap();
    consumer.finish(now, a, &on_a[1]).unwrap();
    consumer.finish(now, b, &on_b[0]).unwrap();
    consumer.finish(now, a, &on_a[2]).unwrap();
    consumer.finish(now, b, &on_b[1]).unwrap();
    assert_eq!(
        transmits(&mut consumer),
        [
            (a, fin(&on_a[0]) + &fin(&on_a[1])),
            (b, fin(&on_b[0])),
            (a, fin(&on_a[2])),
            (b, fin(&on_b[1])),
        ]
    );
}

#[test]
fn a_connection_closing_sends_its_last_bytes_before_the_disconnect() {
    let now = Instant::now();
    let (mut consumer, conns) = started(2, now);
    let (a, b) = (conns[0], conns[1]);
    let on_a = deliver(&mut consumer, now, a, 1);
    let on_b = deliver(&mut consumer, now, b, 1);
    consumer.finish(now, a, &on_a[0]).unwrap();
    consumer.finish(now, b, &on_b[0]).unwrap();
    // Graceful close: CLS on both; nsqd answers CLOSE_WAIT and, nothing being in flight,
    // the connections are done.
    consumer.close(now);
    for conn in [a, b] {
        let mut buf = BytesMut::new();
        encode_frame(&mut buf, 0, b"CLOSE_WAIT");
        consumer.handle_input(now, conn, &mut buf);
    }
    let actions: Vec<Action> = std::iter::from_fn(|| consumer.poll_action()).collect();
    for conn in [a, b] {
        let sent: Vec<u8> = actions
            .iter()
            .filter_map(|x| match x {
                Action::Transmit { conn: c, data } if *c == conn => Some(data.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        let fin_at = sent.windows(4).position(|w| w == b"FIN ");
        let cls_at = sent.windows(4).position(|w| w == b"CLS\n");
        assert!(fin_at < cls_at && fin_at.is_some(), "{conn}: FIN then CLS");
        let last_transmit = actions
            .iter()
            .rposition(|x| matches!(x, Action::Transmit { conn: c, .. } if *c == conn));
        let disconnect = actions
            .iter()
            .position(|x| matches!(x, Action::Disconnect { conn: c } if *c == conn));
        assert!(disconnect.is_some(), "{conn} disconnected: {actions:?}");
        assert!(
            last_transmit < disconnect,
            "{conn}: bytes before the disconnect"
        );
    }
}
