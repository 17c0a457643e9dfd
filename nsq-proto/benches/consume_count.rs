//! A fixed amount of consumer work, for counting instructions with callgrind (repeatable on a
//! busy machine, unlike wall-clock time): 100,000 message frames with 200-byte bodies, in
//! reads of 250 frames, are fed to a ready plain-text consumer [`Connection`] and answered
//! with FIN, like a consumer loop (input, events, answers, transmit); then the same through a
//! [`Consumer`] with one connection. Each loop is a non-inlined function so callgrind can
//! count it alone:
//!
//! ```text
//! cargo bench -p nsq-proto --bench consume_count --no-run
//! valgrind --tool=callgrind --toggle-collect='*consume_count::connection_loop*' target/release/deps/consume_count-<hash>
//! valgrind --tool=callgrind --toggle-collect='*consume_count::consumer_loop*' target/release/deps/consume_count-<hash>
//! ```
#![allow(
    missing_docs,
    clippy::disallowed_methods,
    reason = "a bench binary; one Instant::now as the origin of virtual time"
)]

use bytes::BytesMut;
use nsq_proto::driver::{Action, ConnId};
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{
    Channel, Connection, ConnectionConfig, ConnectionEvent, Consumer, ConsumerConfig,
    ConsumerEvent, Message, MessageId, Role, Topic, encode_frame, encode_message_frame,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

const MESSAGES: usize = 100_000;
const PER_READ: usize = 250;
const BODY_LEN: usize = 200;

/// The reads a server would send: `MESSAGES` frames with nsqd-style ids, `PER_READ` per read.
fn reads() -> Vec<BytesMut> {
    let body = bytes::Bytes::from(vec![b'x'; BODY_LEN]);
    (0..MESSAGES / PER_READ)
        .map(|r| {
            let mut buf = BytesMut::with_capacity(PER_READ * (BODY_LEN + 34));
            for i in 0..PER_READ {
                let id = format!("{:016x}", r * PER_READ + i);
                encode_message_frame(
                    &mut buf,
                    &Message {
                        timestamp: 1_700_000_000_000_000_000,
                        attempts: 1,
                        id: MessageId::try_from(id.as_bytes()).expect("16 bytes"),
                        body: body.clone(),
                    },
                );
            }
            buf
        })
        .collect()
}

#[inline(never)]
fn connection_loop(conn: &mut Connection, reads: Vec<BytesMut>, start: Instant) -> usize {
    let mut ids = Vec::with_capacity(PER_READ);
    let mut sent = 0;
    for (i, mut buf) in reads.into_iter().enumerate() {
        let now = start + Duration::from_micros(i as u64);
        conn.handle_input(now, &mut buf);
        while let Some(e) = conn.poll_event() {
            if let ConnectionEvent::Message(m) = e {
                ids.push(m.id);
                black_box(&m.body);
            }
        }
        for id in ids.drain(..) {
            conn.finish(now, &id).expect("in flight");
        }
        if let Some(out) = conn.poll_transmit() {
            sent += out.len();
        }
        black_box(conn.poll_timeout());
    }
    sent
}

#[inline(never)]
fn consumer_loop(
    consumer: &mut Consumer,
    conn: ConnId,
    reads: Vec<BytesMut>,
    start: Instant,
) -> usize {
    let mut msgs = Vec::with_capacity(PER_READ);
    let mut sent = 0;
    for (i, mut buf) in reads.into_iter().enumerate() {
        let now = start + Duration::from_micros(i as u64);
        consumer.handle_input(now, conn, &mut buf);
        while let Some(e) = consumer.poll_event() {
            if let ConsumerEvent::Message { conn, message } = e {
                msgs.push((conn, message));
            }
        }
        for (c, m) in msgs.drain(..) {
            black_box(&m.body);
            consumer.finish(now, c, &m.id).expect("in flight");
        }
        while let Some(a) = consumer.poll_action() {
            if let Action::Transmit { data, .. } = a {
                sent += data.len();
            }
        }
        black_box(consumer.poll_timeout());
    }
    sent
}

fn main() {
    let start = Instant::now();
    let topic = Topic::new("t").expect("valid");
    let channel = Channel::new("c").expect("valid");

    // A bare connection, started against the fake nsqd.
    let mut peer = FakeNsqd::new(FakeNsqdConfig::default());
    let role = Role::Consumer {
        topic: topic.clone(),
        channel: channel.clone(),
    };
    let mut conn = Connection::new(ConnectionConfig::default(), role, "nsqd:4150", start)
        .expect("valid config");
    let ev = exchange(&mut conn, &mut peer, start);
    assert!(matches!(ev[0], ConnectionEvent::Ready(_)));
    conn.set_rdy(start, 2500).expect("ready");
    let _ = exchange(&mut conn, &mut peer, start);
    let sent = connection_loop(&mut conn, reads(), start);
    assert_eq!(sent, MESSAGES * 21);

    // A consumer with one connection, started by hand.
    let mut consumer = Consumer::new(
        ConsumerConfig {
            max_in_flight: 2500,
            ..ConsumerConfig::default()
        },
        topic,
        channel,
        1,
    );
    consumer.add_nsqd(start, "127.0.0.1:4150").expect("valid");
    let mut id = None;
    while let Some(a) = consumer.poll_action() {
        if let Action::Connect { conn, .. } = a {
            id = Some(conn);
        }
    }
    let id = id.expect("a connect action");
    consumer.handle_connected(start, id);
    let mut handshake = BytesMut::new();
    encode_frame(
        &mut handshake,
        0,
        br#"{"max_rdy_count":2500,"version":"1.3.0","msg_timeout":60000,"max_msg_timeout":900000}"#,
    );
    encode_frame(&mut handshake, 0, b"OK");
    consumer.handle_input(start, id, &mut handshake);
    while consumer.poll_action().is_some() {}
    while consumer.poll_event().is_some() {}
    let sent = consumer_loop(&mut consumer, id, reads(), start);
    assert!(sent >= MESSAGES * 21, "sent {sent}");
}
