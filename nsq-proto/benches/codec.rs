//! Codec benchmarks: decoding message frames from one large read buffer, and encoding FIN, PUB
//! and MPUB. See BENCHMARKS.md for the numbers and how to run them.

use bytes::BytesMut;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use nsq_proto::{
    Frame, FrameDecoder, Limits, Message, MessageId, Topic, command, encode_message_frame,
};
use std::hint::black_box;
use std::time::Duration;

/// Body sizes to decode, and how many frames of each one buffer holds (about 1-4 MiB each).
const DECODE_CASES: [(usize, usize); 3] = [(100, 10_000), (1024, 4_000), (64 * 1024, 64)];

/// A read buffer's worth of message frames, as nsqd would send them.
fn message_stream(body_len: usize, frames: usize) -> Vec<u8> {
    let mut wire = Vec::with_capacity(frames * (body_len + 34));
    for i in 0..frames {
        let msg = Message {
            timestamp: 1_700_000_000_000_000_000 + i as i64,
            attempts: 1,
            id: MessageId::new(*b"0123456789abcdef"),
            body: vec![b'x'; body_len].into(),
        };
        encode_message_frame(&mut wire, &msg);
    }
    wire
}

/// Decodes every frame in `buf`, touching each message so nothing is optimised away.
fn decode_all(decoder: FrameDecoder, buf: &mut BytesMut) -> usize {
    let mut n = 0;
    while let Some(frame) = decoder.decode(buf).expect("valid stream") {
        if let Frame::Message(msg) = frame {
            black_box(&msg);
            n += 1;
        }
    }
    n
}

fn decode(c: &mut Criterion) {
    let decoder = FrameDecoder::default();
    // The same measurement twice: throughput in frames, then in bytes.
    for (group_name, in_bytes) in [("decode_frames", false), ("decode_bytes", true)] {
        let mut group = c.benchmark_group(group_name);
        for (body_len, frames) in DECODE_CASES {
            let wire = message_stream(body_len, frames);
            group.throughput(if in_bytes {
                Throughput::Bytes(wire.len() as u64)
            } else {
                Throughput::Elements(frames as u64)
            });
            group.bench_with_input(BenchmarkId::from_parameter(body_len), &wire, |b, wire| {
                b.iter_batched(
                    || BytesMut::from(&wire[..]),
                    |mut buf| {
                        assert_eq!(decode_all(decoder, &mut buf), frames);
                        buf
                    },
                    BatchSize::LargeInput,
                );
            });
        }
        group.finish();
    }
}

fn encode(c: &mut Criterion) {
    let limits = Limits::default();
    let topic = Topic::new("events").unwrap();
    let id = MessageId::new(*b"0123456789abcdef");
    let body = vec![b'x'; 200];
    let batch = vec![body.clone(); 200];
    let mut out = BytesMut::with_capacity(64 * 1024);

    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("fin", |b| {
        b.iter(|| {
            out.clear();
            command::fin(&mut out, black_box(&id));
            black_box(&out);
        });
    });
    group.bench_function("pub_200B", |b| {
        b.iter(|| {
            out.clear();
            command::publish(&mut out, &topic, black_box(&body), &limits).unwrap();
            black_box(&out);
        });
    });
    group.throughput(Throughput::Elements(200));
    group.bench_function("mpub_200x200B", |b| {
        b.iter(|| {
            out.clear();
            command::multi_publish(&mut out, &topic, black_box(&batch), &limits).unwrap();
            black_box(&out);
        });
    });
    group.finish();
}

fn config() -> Criterion {
    // Short runs: the machine is small and shared; see BENCHMARKS.md.
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

fn main() {
    // criterion_group!/criterion_main! expanded by hand: the macro's function has no docs.
    let mut c = config().configure_from_args();
    decode(&mut c);
    encode(&mut c);
    c.final_summary();
}
