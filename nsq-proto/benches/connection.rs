//! Connection hot path: a consumer receiving batches of messages and finishing each, in plain
//! text, snappy and deflate; and a producer pipelining publishes.
#![allow(
    missing_docs,
    clippy::disallowed_methods,
    reason = "criterion macros generate undocumented items; a bench needs a real clock"
)]

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{
    Channel, Compression, Connection, ConnectionConfig, ConnectionEvent, Message, MessageId, Role,
    Topic, encode_message_frame,
};
use std::hint::black_box;
use std::time::Instant;

const BATCH: usize = 1000;
const BODY: usize = 100;

fn ready(compression: Compression, role: &Role) -> (Connection, FakeNsqd, Instant) {
    let now = Instant::now();
    let mut peer = FakeNsqd::new(FakeNsqdConfig {
        auto_ack_publishes: false,
        ..FakeNsqdConfig::default()
    });
    let config = ConnectionConfig {
        compression,
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, role.clone(), "nsqd:4150", now).unwrap();
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(matches!(ev[0], ConnectionEvent::Ready(_)));
    if role.is_consumer() {
        conn.set_rdy(now, 2500).unwrap();
        let _ = exchange(&mut conn, &mut peer, now);
    }
    (conn, peer, now)
}

fn consume(c: &mut Criterion) {
    let mut group = c.benchmark_group("connection/consume");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, compression) in [
        ("plain", Compression::None),
        ("snappy", Compression::Snappy),
        ("deflate", Compression::Deflate { level: 1 }),
    ] {
        let role = Role::Consumer {
            topic: Topic::new("t").unwrap(),
            channel: Channel::new("c").unwrap(),
        };
        let (mut conn, mut peer, now) = ready(compression, &role);
        // One batch of message frames, as the server's layers would send it.
        let mut plain = BytesMut::new();
        for i in 0..BATCH {
            let id = format!("{i:016x}");
            encode_message_frame(
                &mut plain,
                &Message {
                    timestamp: 0,
                    attempts: 1,
                    id: MessageId::try_from(id.as_bytes()).unwrap(),
                    body: vec![b'x'; BODY].into(),
                },
            );
        }
        let mut ids = Vec::with_capacity(BATCH);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // The server's compressed stream is stateful (deflate): make fresh bytes for
                // every iteration up front and time only the client side.
                let wires: Vec<BytesMut> = (0..iters)
                    .map(|_| {
                        peer.send_raw(&plain);
                        BytesMut::from(&peer.take_output()[..])
                    })
                    .collect();
                let start = Instant::now();
                for mut buf in wires {
                    conn.handle_input(now, &mut buf);
                    while let Some(e) = conn.poll_event() {
                        if let ConnectionEvent::Message(m) = e {
                            ids.push(m.id);
                        }
                    }
                    assert_eq!(ids.len(), BATCH, "connection failed: {conn:?}");
                    for id in ids.drain(..) {
                        conn.finish(now, &id).unwrap();
                    }
                    black_box(conn.poll_transmit());
                }
                start.elapsed()
            });
        });
    }
    group.finish();
}

fn publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("connection/publish");
    group.throughput(Throughput::Elements(BATCH as u64));
    let (mut conn, _peer, now) = ready(Compression::None, &Role::Producer);
    let topic = Topic::new("t").unwrap();
    let body = vec![b'x'; BODY];
    let mut oks = BytesMut::new();
    for _ in 0..BATCH {
        nsq_proto::encode_frame(&mut oks, 0, b"OK");
    }
    group.bench_function("plain", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                conn.publish(now, &topic, &body).unwrap();
            }
            black_box(conn.poll_transmit());
            let mut buf = oks.clone();
            conn.handle_input(now, &mut buf);
            while let Some(e) = conn.poll_event() {
                black_box(e);
            }
        });
    });
    group.finish();
}

criterion_group!(benches, consume, publish);
criterion_main!(benches);
