//! Golden bytes for every command and every frame kind.
//!
//! Every expected byte string below is written by hand from the protocol notes
//! (shared/PROTOCOL.md), never produced by this crate's encoders.

use bytes::BytesMut;
use nsq_proto::{
    Channel, ErrorCode, Frame, FrameDecoder, Identify, IdentifyResponse, Limits, MessageId,
    Response, Topic, command,
};
use std::time::Duration;

const ID: &[u8; 16] = b"0123456789abcdef";

fn id() -> MessageId {
    MessageId::new(*ID)
}

fn topic(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

fn channel(name: &str) -> Channel {
    Channel::new(name).unwrap()
}

/// Runs an encoder into a fresh buffer.
fn encode(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Commands

#[test]
fn magic() {
    assert_eq!(encode(command::magic), b"  V2");
    assert_eq!(nsq_proto::MAGIC_V2, b"  V2");
}

#[test]
fn identify_header_length_and_fields() {
    let identify = Identify {
        client_id: "worker-1".into(),
        hostname: "worker-1.example".into(),
        feature_negotiation: true,
        heartbeat_interval: 30_000,
        output_buffer_size: 16_384,
        output_buffer_timeout: 250,
        tls_v1: true,
        snappy: false,
        deflate: true,
        deflate_level: 6,
        sample_rate: 10,
        user_agent: "nsq-rs/0.1.0".into(),
        msg_timeout: 60_000,
        // Empty: not sent (nsqd v1.3.0 has no such fields).
        topology_region: String::new(),
        topology_zone: String::new(),
    };
    let out = encode(|b| command::identify(b, &identify).unwrap());
    assert_eq!(&out[..9], b"IDENTIFY\n");
    let len = u32::from_be_bytes([out[9], out[10], out[11], out[12]]) as usize;
    assert_eq!(
        len,
        out.len() - 13,
        "length prefix must cover exactly the JSON"
    );
    let json: serde_json::Value = serde_json::from_slice(&out[13..]).unwrap();
    let expected = serde_json::json!({
        "client_id": "worker-1",
        "hostname": "worker-1.example",
        "feature_negotiation": true,
        "heartbeat_interval": 30000,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
        "tls_v1": true,
        "snappy": false,
        "deflate": true,
        "deflate_level": 6,
        "sample_rate": 10,
        "user_agent": "nsq-rs/0.1.0",
        "msg_timeout": 60000,
    });
    assert_eq!(json, expected);
}

#[test]
fn identify_defaults_use_server_defaults() {
    // 0 means "server default" for every integer field nsqd reads.
    let out = encode(|b| command::identify(b, &Identify::default()).unwrap());
    assert_eq!(&out[..9], b"IDENTIFY\n");
    let json: serde_json::Value = serde_json::from_slice(&out[13..]).unwrap();
    for field in [
        "heartbeat_interval",
        "output_buffer_size",
        "output_buffer_timeout",
        "deflate_level",
        "sample_rate",
        "msg_timeout",
    ] {
        assert_eq!(json[field], 0, "{field}");
    }
    assert_eq!(json["feature_negotiation"], false);
}

#[test]
fn auth() {
    assert_eq!(
        encode(|b| command::auth(b, b"s3cr3t").unwrap()),
        b"AUTH\n\x00\x00\x00\x06s3cr3t"
    );
}

#[test]
fn sub() {
    assert_eq!(
        encode(|b| command::sub(b, &topic("events"), &channel("archive"))),
        b"SUB events archive\n"
    );
    assert_eq!(
        encode(|b| command::sub(b, &topic("t#ephemeral"), &channel("c.1_x-y#ephemeral"))),
        b"SUB t#ephemeral c.1_x-y#ephemeral\n"
    );
}

#[test]
fn publish() {
    let limits = Limits::default();
    assert_eq!(
        encode(|b| command::publish(b, &topic("events"), b"hello", &limits).unwrap()),
        b"PUB events\n\x00\x00\x00\x05hello"
    );
    // A binary body is sent verbatim, newlines and zeros included.
    assert_eq!(
        encode(|b| command::publish(b, &topic("t"), b"\n\x00\xff", &limits).unwrap()),
        b"PUB t\n\x00\x00\x00\x03\n\x00\xff"
    );
}

#[test]
fn multi_publish() {
    let limits = Limits::default();
    // Body: count (4) + [4 + 2] + [4 + 3] = 17 = 0x11 bytes.
    assert_eq!(
        encode(
            |b| command::multi_publish(b, &topic("events"), &[&b"ab"[..], b"cde"], &limits)
                .unwrap()
        ),
        b"MPUB events\n\x00\x00\x00\x11\x00\x00\x00\x02\x00\x00\x00\x02ab\x00\x00\x00\x03cde"
    );
    // One message: 4 + 4 + 1 = 9.
    assert_eq!(
        encode(|b| command::multi_publish(b, &topic("t"), &[b"x"], &limits).unwrap()),
        b"MPUB t\n\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00\x00\x01x"
    );
}

#[test]
fn deferred_publish() {
    let limits = Limits::default();
    assert_eq!(
        encode(|b| command::deferred_publish(
            b,
            &topic("events"),
            Duration::from_millis(1500),
            b"hello",
            &limits
        )
        .unwrap()),
        b"DPUB events 1500\n\x00\x00\x00\x05hello"
    );
    assert_eq!(
        encode(
            |b| command::deferred_publish(b, &topic("t"), Duration::ZERO, b"x", &limits).unwrap()
        ),
        b"DPUB t 0\n\x00\x00\x00\x01x"
    );
    // The largest delay nsqd accepts by default: one hour.
    assert_eq!(
        encode(|b| command::deferred_publish(
            b,
            &topic("t"),
            Duration::from_secs(3600),
            b"x",
            &limits
        )
        .unwrap()),
        b"DPUB t 3600000\n\x00\x00\x00\x01x"
    );
}

#[test]
fn rdy() {
    assert_eq!(encode(|b| command::rdy(b, 0)), b"RDY 0\n");
    assert_eq!(encode(|b| command::rdy(b, 1)), b"RDY 1\n");
    assert_eq!(encode(|b| command::rdy(b, 2500)), b"RDY 2500\n");
    assert_eq!(encode(|b| command::rdy(b, u32::MAX)), b"RDY 4294967295\n");
}

#[test]
fn fin() {
    assert_eq!(
        encode(|b| command::fin(b, &id())),
        b"FIN 0123456789abcdef\n"
    );
}

#[test]
fn req() {
    let limits = Limits::default();
    assert_eq!(
        encode(|b| command::req(b, &id(), Duration::ZERO, &limits).unwrap()),
        b"REQ 0123456789abcdef 0\n"
    );
    assert_eq!(
        encode(|b| command::req(b, &id(), Duration::from_secs(90), &limits).unwrap()),
        b"REQ 0123456789abcdef 90000\n"
    );
    // Sub-millisecond parts are truncated.
    assert_eq!(
        encode(|b| command::req(b, &id(), Duration::from_micros(2_999), &limits).unwrap()),
        b"REQ 0123456789abcdef 2\n"
    );
}

#[test]
fn touch() {
    assert_eq!(
        encode(|b| command::touch(b, &id())),
        b"TOUCH 0123456789abcdef\n"
    );
}

#[test]
fn cls_and_nop() {
    assert_eq!(encode(command::cls), b"CLS\n");
    assert_eq!(encode(command::nop), b"NOP\n");
}

#[test]
fn commands_append_to_existing_buffer() {
    // Encoders append: a driver coalesces several commands into one write.
    let mut out = BytesMut::from(&b"NOP\n"[..]);
    command::fin(&mut out, &id());
    command::rdy(&mut out, 7);
    assert_eq!(&out[..], b"NOP\nFIN 0123456789abcdef\nRDY 7\n");
}

// ---------------------------------------------------------------------------------------------
// Frames

/// Decodes exactly one frame from `wire`, asserting nothing is left over.
fn decode_one(wire: &[u8]) -> Frame {
    let mut buf = BytesMut::from(wire);
    let frame = FrameDecoder::default()
        .decode(&mut buf)
        .unwrap()
        .expect("a whole frame");
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    frame
}

#[test]
fn response_ok() {
    let wire = b"\x00\x00\x00\x06\x00\x00\x00\x00OK";
    assert_eq!(decode_one(wire), Frame::Response(Response::Ok));
}

#[test]
fn response_heartbeat() {
    // size = 4 + 11
    let wire = b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_";
    assert_eq!(decode_one(wire), Frame::Response(Response::Heartbeat));
}

#[test]
fn response_close_wait() {
    // size = 4 + 10
    let wire = b"\x00\x00\x00\x0e\x00\x00\x00\x00CLOSE_WAIT";
    assert_eq!(decode_one(wire), Frame::Response(Response::CloseWait));
}

#[test]
fn response_json() {
    // size = 4 + 22
    let wire = b"\x00\x00\x00\x1a\x00\x00\x00\x00{\"max_rdy_count\":2500}";
    let Frame::Response(Response::Other(data)) = decode_one(wire) else {
        panic!("expected a JSON response");
    };
    assert_eq!(&data[..], b"{\"max_rdy_count\":2500}");
    let reply = IdentifyResponse::parse(&data).unwrap();
    assert_eq!(reply.max_rdy_count, 2500);
    assert_eq!(reply.max_rdy(), 2500);
}

#[test]
fn response_similar_to_special_is_other() {
    // "OK " and "ok" are not OK.
    let wire = b"\x00\x00\x00\x07\x00\x00\x00\x00OK ";
    assert!(matches!(decode_one(wire), Frame::Response(Response::Other(d)) if &d[..] == b"OK "));
    let wire = b"\x00\x00\x00\x06\x00\x00\x00\x00ok";
    assert!(matches!(decode_one(wire), Frame::Response(Response::Other(d)) if &d[..] == b"ok"));
    // An empty response body.
    let wire = b"\x00\x00\x00\x04\x00\x00\x00\x00";
    assert!(matches!(decode_one(wire), Frame::Response(Response::Other(d)) if d.is_empty()));
}

#[test]
fn error_known_fatal() {
    // size = 4 + 25 ("E_INVALID invalid command")
    let wire = b"\x00\x00\x00\x1d\x00\x00\x00\x01E_INVALID invalid command";
    let Frame::Error(e) = decode_one(wire) else {
        panic!("expected an error frame");
    };
    assert_eq!(e.code(), ErrorCode::Invalid);
    assert_eq!(e.code_str(), "E_INVALID");
    assert_eq!(e.description(), "invalid command");
    assert!(e.is_fatal());
    assert_eq!(&e.raw()[..], b"E_INVALID invalid command");
}

#[test]
fn error_known_non_fatal() {
    // size = 4 + 33 ("E_FIN_FAILED FIN 0123456789abcdef" is 12 + 1 + 3 + 1 + 16 = 33)
    let wire = b"\x00\x00\x00\x25\x00\x00\x00\x01E_FIN_FAILED FIN 0123456789abcdef";
    let Frame::Error(e) = decode_one(wire) else {
        panic!("expected an error frame");
    };
    assert_eq!(e.code(), ErrorCode::FinFailed);
    assert_eq!(e.description(), "FIN 0123456789abcdef");
    assert!(!e.is_fatal());
}

#[test]
fn error_unknown_code() {
    // size = 4 + 20 ("E_SOMETHING_NEW oops")
    let wire = b"\x00\x00\x00\x18\x00\x00\x00\x01E_SOMETHING_NEW oops";
    let Frame::Error(e) = decode_one(wire) else {
        panic!("expected an error frame");
    };
    assert_eq!(e.code(), ErrorCode::Unknown);
    assert_eq!(e.code_str(), "E_SOMETHING_NEW");
    assert_eq!(e.description(), "oops");
    assert!(e.is_fatal(), "unknown codes are treated as fatal");
}

#[test]
fn error_every_code() {
    // (token, code, fatal) straight from the protocol notes.
    let table: [(&[u8], ErrorCode, bool); 18] = [
        (b"E_INVALID", ErrorCode::Invalid, true),
        (b"E_BAD_BODY", ErrorCode::BadBody, true),
        (b"E_BAD_TOPIC", ErrorCode::BadTopic, true),
        (b"E_BAD_CHANNEL", ErrorCode::BadChannel, true),
        (b"E_BAD_MESSAGE", ErrorCode::BadMessage, true),
        (b"E_PUB_FAILED", ErrorCode::PubFailed, true),
        (b"E_MPUB_FAILED", ErrorCode::MpubFailed, true),
        (b"E_DPUB_FAILED", ErrorCode::DpubFailed, true),
        (b"E_SUB_FAILED", ErrorCode::SubFailed, true),
        (b"E_IDENTIFY_FAILED", ErrorCode::IdentifyFailed, true),
        (b"E_AUTH_FAILED", ErrorCode::AuthFailed, true),
        (b"E_AUTH_ERROR", ErrorCode::AuthError, true),
        (b"E_AUTH_FIRST", ErrorCode::AuthFirst, true),
        (b"E_AUTH_DISABLED", ErrorCode::AuthDisabled, true),
        (b"E_UNAUTHORIZED", ErrorCode::Unauthorized, true),
        (b"E_FIN_FAILED", ErrorCode::FinFailed, false),
        (b"E_REQ_FAILED", ErrorCode::ReqFailed, false),
        (b"E_TOUCH_FAILED", ErrorCode::TouchFailed, false),
    ];
    for (token, code, fatal) in table {
        // A bare code with no description.
        let mut wire = Vec::new();
        wire.extend_from_slice(&(4 + token.len() as u32).to_be_bytes());
        wire.extend_from_slice(&[0, 0, 0, 1]);
        wire.extend_from_slice(token);
        let Frame::Error(e) = decode_one(&wire) else {
            panic!("expected an error frame");
        };
        assert_eq!(e.code(), code);
        assert_eq!(e.is_fatal(), fatal, "{code}");
        assert_eq!(e.code_str().as_bytes(), token);
        assert_eq!(code.as_str().as_bytes(), token);
        assert_eq!(e.description(), "");
    }
}

#[test]
fn message() {
    // size = 4 + 26 + 5 = 35; timestamp 0x0102030405060708; attempts 3.
    let wire: &[u8] = b"\x00\x00\x00\x23\x00\x00\x00\x02\
        \x01\x02\x03\x04\x05\x06\x07\x08\
        \x00\x03\
        0123456789abcdef\
        hello";
    let mut buf = BytesMut::from(wire);
    let start = buf.as_ptr() as usize;
    let Some(Frame::Message(msg)) = FrameDecoder::default().decode(&mut buf).unwrap() else {
        panic!("expected a message frame");
    };
    assert!(buf.is_empty());
    assert_eq!(msg.timestamp, 0x0102_0304_0506_0708);
    assert_eq!(msg.attempts, 3);
    assert_eq!(msg.id, id());
    assert_eq!(msg.id.as_bytes(), ID);
    assert_eq!(msg.id.to_string(), "0123456789abcdef");
    assert_eq!(&msg.body[..], b"hello");
    // Zero copy: the body is the read buffer's bytes 34..39.
    assert_eq!(msg.body.as_ptr() as usize, start + 34);
}

#[test]
fn message_negative_timestamp_max_attempts_empty_body() {
    // size = 4 + 26 = 30: a message frame with no body is well-formed on the wire.
    let wire: &[u8] = b"\x00\x00\x00\x1e\x00\x00\x00\x02\
        \xff\xff\xff\xff\xff\xff\xff\xff\
        \xff\xff\
        fedcba9876543210";
    let Frame::Message(msg) = decode_one(wire) else {
        panic!("expected a message frame");
    };
    assert_eq!(msg.timestamp, -1);
    assert_eq!(msg.attempts, u16::MAX);
    assert_eq!(msg.id.as_bytes(), b"fedcba9876543210");
    assert!(msg.body.is_empty());
}

#[test]
fn stream_of_every_kind() {
    let wire: &[u8] = b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_\
        \x00\x00\x00\x23\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01\
        0123456789abcdefhello\
        \x00\x00\x00\x06\x00\x00\x00\x00OK\
        \x00\x00\x00\x18\x00\x00\x00\x01E_SOMETHING_NEW oops\
        \x00\x00\x00\x0e\x00\x00\x00\x00CLOSE_WAIT\
        \x00\x00";
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(wire);
    let mut kinds = Vec::new();
    while let Some(frame) = decoder.decode(&mut buf).unwrap() {
        kinds.push(match frame {
            Frame::Response(Response::Heartbeat) => "heartbeat",
            Frame::Response(Response::Ok) => "ok",
            Frame::Response(Response::CloseWait) => "close_wait",
            Frame::Message(m) if m.timestamp == 1 && m.attempts == 1 => "message",
            Frame::Error(e) if e.code() == ErrorCode::Unknown => "error",
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(kinds, ["heartbeat", "message", "ok", "error", "close_wait"]);
    // The trailing two bytes of the next size field wait for more input.
    assert_eq!(&buf[..], b"\x00\x00");
}

#[test]
fn partial_frame_reserves_the_rest() {
    // The header of a 1000-byte response frame: the decoder waits, with room for all of it,
    // so the next read fills the buffer without reallocating.
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(&b"\x00\x00\x03\xe8\x00\x00\x00\x00abc"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    assert!(buf.capacity() >= 1004, "capacity {}", buf.capacity());
    assert_eq!(&buf[..], b"\x00\x00\x03\xe8\x00\x00\x00\x00abc");
    // Fewer than 4 bytes: room for at least the 8-byte header.
    let mut buf = BytesMut::from(&b"\x00"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    assert!(buf.capacity() >= 8);
    // The rest arrives: one frame, nothing left.
    let mut buf = BytesMut::from(&b"\x00\x00\x03\xe8\x00\x00\x00\x00"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    buf.extend_from_slice(&[b'x'; 996]);
    let Some(Frame::Response(Response::Other(data))) = decoder.decode(&mut buf).unwrap() else {
        panic!("expected a response");
    };
    assert_eq!(data.len(), 996);
    assert!(buf.is_empty());
}
