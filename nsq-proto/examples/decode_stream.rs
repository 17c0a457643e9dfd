//! The codec at work on a consumer session, without a network.
//!
//! Encodes what a consumer sends to nsqd (magic, IDENTIFY, SUB, RDY, then FIN/REQ/NOP as it
//! answers), builds the byte stream nsqd 1.3.0 would answer with (IDENTIFY reply, OK, messages,
//! a heartbeat, a non-fatal error), and feeds that stream to a `FrameDecoder` in odd-sized
//! chunks, the way reads from a socket arrive, printing every frame it decodes.
//!
//! Run: `cargo run -p nsq-proto --example decode_stream`
#![allow(
    clippy::print_stdout,
    reason = "an example shows its results on stdout"
)]

use bytes::{Bytes, BytesMut};
use nsq_proto::{
    Channel, Frame, FrameDecoder, Identify, IdentifyResponse, Limits, Message, MessageId, Response,
    Topic, command, encode_frame, encode_message_frame,
};
use std::time::Duration;

/// Shows bytes as printable ASCII with escapes, shortened when long.
fn show(bytes: &[u8]) -> String {
    let shown: String = bytes
        .iter()
        .take(72)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if bytes.len() > 72 {
        format!("\"{shown}\"... ({} bytes)", bytes.len())
    } else {
        format!("\"{shown}\"")
    }
}

/// What nsqd would send on a fresh consumer connection, as one byte stream.
fn server_stream() -> Vec<u8> {
    let mut wire = Vec::new();
    // IDENTIFY with feature_negotiation: a JSON reply.
    encode_frame(
        &mut wire,
        0,
        br#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":0,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#,
    );
    // SUB: OK.
    encode_frame(&mut wire, 0, b"OK");
    // After RDY, messages.
    let bodies: [&[u8]; 3] = [
        br#"{"event":"signup","user":42}"#,
        br#"{"event":"login","user":42}"#,
        b"binary \x00\x01\x02 payload",
    ];
    for (i, body) in bodies.iter().enumerate() {
        let id = format!("0a1b2c3d4e5f60{i:02}");
        encode_message_frame(
            &mut wire,
            &Message {
                timestamp: 1_763_700_000_000_000_000 + i as i64 * 1_000_000,
                attempts: 1 + i as u16,
                id: MessageId::try_from(id.as_bytes()).expect("16 bytes"),
                body: Bytes::copy_from_slice(body),
            },
        );
    }
    encode_frame(&mut wire, 0, b"_heartbeat_");
    // A FIN for a message that had already timed out: non-fatal.
    encode_frame(&mut wire, 1, b"E_FIN_FAILED FIN 0a1b2c3d4e5f6000 failed");
    wire
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topic = Topic::new("events")?;
    let channel = Channel::new("archive")?;
    let limits = Limits::default();

    println!("client -> nsqd");
    let mut out = BytesMut::new();
    command::magic(&mut out);
    println!("  {}", show(&out.split()));
    let identify = Identify {
        client_id: "example".into(),
        hostname: "example.local".into(),
        feature_negotiation: true,
        heartbeat_interval: 30_000,
        user_agent: concat!("nsq-proto/", env!("CARGO_PKG_VERSION")).into(),
        ..Identify::default()
    };
    command::identify(&mut out, &identify)?;
    println!("  {}", show(&out.split()));
    command::sub(&mut out, &topic, &channel);
    println!("  {}", show(&out.split()));
    command::rdy(&mut out, 1);
    println!("  {}", show(&out.split()));

    let wire = server_stream();
    println!(
        "\nnsqd -> client: {} bytes, fed in odd-sized chunks",
        wire.len()
    );
    let decoder = FrameDecoder::default();
    let mut read_buf = BytesMut::new();
    let mut answers = BytesMut::new();
    let chunk_sizes = [1, 3, 7, 13, 29, 61, 2, 5];
    let (mut offset, mut reads) = (0, 0);
    while offset < wire.len() {
        let end = (offset + chunk_sizes[reads % chunk_sizes.len()]).min(wire.len());
        read_buf.extend_from_slice(&wire[offset..end]);
        offset = end;
        reads += 1;
        while let Some(frame) = decoder.decode(&mut read_buf)? {
            match frame {
                Frame::Response(Response::Heartbeat) => {
                    println!("  [read {reads:2}] heartbeat -> answer NOP");
                    command::nop(&mut answers);
                }
                Frame::Response(Response::Other(json)) => {
                    let reply = IdentifyResponse::parse(&json)?;
                    println!(
                        "  [read {reads:2}] IDENTIFY reply: nsqd {}, max_rdy_count {}, msg_timeout {:?}",
                        reply.version,
                        reply.max_rdy_count,
                        reply.msg_timeout()
                    );
                }
                Frame::Response(other) => {
                    println!("  [read {reads:2}] response {}", show(other.as_bytes()));
                }
                Frame::Message(msg) => {
                    println!(
                        "  [read {reads:2}] message {} attempts={} body={}",
                        msg.id,
                        msg.attempts,
                        show(&msg.body)
                    );
                    if msg.attempts < 3 {
                        command::fin(&mut answers, &msg.id);
                    } else {
                        command::req(&mut answers, &msg.id, Duration::from_secs(10), &limits)?;
                    }
                }
                Frame::Error(e) => println!(
                    "  [read {reads:2}] error {} ({}): {}",
                    e.code(),
                    if e.is_fatal() { "fatal" } else { "non-fatal" },
                    e.description()
                ),
                other => println!("  [read {reads:2}] {other:?}"),
            }
        }
    }
    println!(
        "decoded everything in {reads} reads; {} bytes left over",
        read_buf.len()
    );

    println!("\nclient -> nsqd: the answers, coalesced into one write");
    for line in answers.split_inclusive(|&b| b == b'\n') {
        println!("  {}", show(line));
    }
    Ok(())
}
