//! Producer hot path: a batch of publishes routed over two ready connections, gathered into
//! one write per connection, then acknowledged (one read per connection holding every OK).
#![allow(
    missing_docs,
    clippy::disallowed_methods,
    reason = "criterion macros generate undocumented items; a bench needs a real clock"
)]

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nsq_proto::driver::{Action, ConnId};
use nsq_proto::producer::{Producer, ProducerConfig, ProducerEvent, Routing};
use nsq_proto::{FRAME_TYPE_RESPONSE, Topic, encode_frame};
use std::hint::black_box;
use std::time::Instant;

const BATCH: usize = 1000;
const BODY: usize = 200;

const IDENTIFY_REPLY: &[u8] = br#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":0,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#;

fn ready(routing: Routing) -> (Producer, Vec<ConnId>, Instant) {
    let now = Instant::now();
    let mut p = Producer::new(
        ProducerConfig {
            routing,
            ..ProducerConfig::default()
        },
        1,
    )
    .unwrap();
    p.add_nsqd(now, "10.0.0.1:4150").unwrap();
    p.add_nsqd(now, "10.0.0.2:4150").unwrap();
    let mut conns = Vec::new();
    while let Some(a) = p.poll_action() {
        if let Action::Connect { conn, .. } = a {
            conns.push(conn);
        }
    }
    for &c in &conns {
        p.handle_connected(now, c);
        let mut reply = BytesMut::new();
        encode_frame(&mut reply, FRAME_TYPE_RESPONSE, IDENTIFY_REPLY);
        p.handle_input(now, c, &mut reply);
    }
    while p.poll_action().is_some() {}
    while p.poll_event().is_some() {}
    assert_eq!(p.healthy_connections(), 2);
    (p, conns, now)
}

fn publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("producer/publish");
    group.throughput(Throughput::Elements(BATCH as u64));
    let topic = Topic::new("bench").unwrap();
    let body = vec![b'x'; BODY];
    for (name, routing) in [
        ("failover", Routing::Failover),
        ("round_robin", Routing::RoundRobin),
    ] {
        let (mut p, conns, now) = ready(routing);
        let mut oks = Vec::new();
        group.bench_function(name, |b| {
            b.iter(|| {
                for _ in 0..BATCH {
                    black_box(p.publish(now, &topic, &body).unwrap());
                }
                let mut per_conn = [0usize; 2];
                while let Some(a) = p.poll_action() {
                    if let Action::Transmit { conn, data } = a {
                        let i = usize::from(conn != conns[0]);
                        per_conn[i] += data.len() / (b"PUB bench\n".len() + 4 + BODY);
                    }
                }
                for (i, &n) in per_conn.iter().enumerate() {
                    if n == 0 {
                        continue;
                    }
                    oks.clear();
                    for _ in 0..n {
                        encode_frame(&mut oks, FRAME_TYPE_RESPONSE, b"OK");
                    }
                    let mut buf = BytesMut::from(&oks[..]);
                    p.handle_input(now, conns[i], &mut buf);
                }
                let mut done = 0;
                while let Some(e) = p.poll_event() {
                    if matches!(e, ProducerEvent::Published(_)) {
                        done += 1;
                    }
                }
                assert_eq!(done, BATCH);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, publish);
criterion_main!(benches);
