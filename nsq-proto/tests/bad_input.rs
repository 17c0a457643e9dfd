//! One test per class of bad input, each asserting the specific typed error.

use bytes::BytesMut;
use nsq_proto::{
    AuthResponse, Channel, CommandError, DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_MSG_SIZE, DecodeError,
    FrameDecoder, Identify, IdentifyResponse, Limits, LookupResponse, MessageId, NameError,
    ReplyError, Topic, command,
};
use std::error::Error;
use std::time::Duration;

/// Decodes `wire` with `decoder`, asserting the error and that the buffer's bytes are untouched.
fn decode_err(decoder: FrameDecoder, wire: &[u8]) -> DecodeError {
    let mut buf = BytesMut::from(wire);
    let err = decoder.decode(&mut buf).expect_err("must be rejected");
    assert_eq!(
        &buf[..],
        wire,
        "a failed decode leaves the buffer's bytes as they were"
    );
    assert_error_text(&err);
    err
}

/// Every error is a std::error::Error with a non-empty message.
fn assert_error_text(err: &dyn Error) {
    assert!(!err.to_string().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Frames

#[test]
fn frame_too_large_is_rejected_before_allocation() {
    let decoder = FrameDecoder::default();
    // size 0x7fff_ffff (2 GiB), frame type 2: only the header has arrived.
    for wire in [
        &b"\x7f\xff\xff\xff"[..],
        b"\x7f\xff\xff\xff\x00\x00\x00\x02",
        b"\x7f\xff\xff\xff\x00\x00\x00\x02\x00\x01\x02",
    ] {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(wire);
        let err = decoder.decode(&mut buf).unwrap_err();
        assert_eq!(
            err,
            DecodeError::FrameTooLarge {
                size: 0x7fff_ffff,
                max: DEFAULT_MAX_FRAME_SIZE
            }
        );
        assert_eq!(
            buf.capacity(),
            64,
            "nothing was reserved for the claimed size"
        );
        assert_eq!(&buf[..], wire);
    }

    // The limit follows the configured max message size: header (26) + frame type (4) + body.
    let decoder = FrameDecoder::for_max_msg_size(100);
    assert_eq!(decoder.max_frame_size(), 130);
    assert_eq!(
        decode_err(decoder, b"\x00\x00\x00\x83\x00\x00\x00\x02"),
        DecodeError::FrameTooLarge {
            size: 131,
            max: 130
        }
    );
    // Exactly at the limit is fine: the decoder waits for the rest.
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x82\x00\x00\x00\x02"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    assert!(buf.capacity() >= 134);

    // The default fits nsqd's default max-msg-size.
    assert_eq!(DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_MSG_SIZE + 30);
}

#[test]
fn http_port_is_recognised() {
    let err = decode_err(
        FrameDecoder::default(),
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(err, DecodeError::HttpPort);
    assert!(err.to_string().contains("HTTP port"), "{err}");
    // Four bytes are enough to tell.
    assert_eq!(
        decode_err(FrameDecoder::default(), b"HTTP"),
        DecodeError::HttpPort
    );
    // Even with a limit large enough to allow a frame of that size.
    assert_eq!(
        decode_err(FrameDecoder::new(u32::MAX), b"HTTP"),
        DecodeError::HttpPort
    );
}

/// nsqlookupd's TCP port answers nsqd's protocol magic with a bare `E_BAD_PROTOCOL` (a size,
/// then the text, no frame type): told apart from any other unknown frame type.
#[test]
fn lookupd_tcp_port_is_recognised() {
    let err = decode_err(FrameDecoder::default(), b"\x00\x00\x00\x0eE_BAD_PROTOCOL");
    assert_eq!(err, DecodeError::LookupdTcpPort);
    assert!(err.to_string().contains("nsqlookupd's TCP port"), "{err}");
    // The frame type field is enough.
    assert_eq!(
        decode_err(FrameDecoder::default(), b"\x00\x00\x00\x0eE_BA"),
        DecodeError::LookupdTcpPort
    );
    // Another size with the same four bytes is just an unknown frame type.
    assert!(matches!(
        decode_err(FrameDecoder::default(), b"\x00\x00\x00\x0fE_BAD_PROTOCOLS"),
        DecodeError::UnknownFrameType(_)
    ));
}

#[test]
fn frame_size_below_four_is_rejected() {
    for size in 0u8..4 {
        let wire = [0, 0, 0, size, 0, 0, 0, 0];
        assert_eq!(
            decode_err(FrameDecoder::default(), &wire),
            DecodeError::FrameTooSmall {
                size: u32::from(size)
            }
        );
        // Detected from the size field alone.
        assert_eq!(
            decode_err(FrameDecoder::default(), &wire[..4]),
            DecodeError::FrameTooSmall {
                size: u32::from(size)
            }
        );
    }
}

#[test]
fn unknown_frame_type_is_rejected() {
    for (wire, frame_type) in [
        (&b"\x00\x00\x00\x06\x00\x00\x00\x03OK"[..], 3),
        (b"\x00\x00\x00\x04\xff\xff\xff\xff", u32::MAX),
    ] {
        assert_eq!(
            decode_err(FrameDecoder::default(), wire),
            DecodeError::UnknownFrameType(frame_type)
        );
    }
    // Detected from the header, before anything is reserved for a 1000-byte frame.
    let mut buf = BytesMut::with_capacity(16);
    buf.extend_from_slice(b"\x00\x00\x03\xe8\x00\x00\x00\x07");
    assert_eq!(
        FrameDecoder::default().decode(&mut buf),
        Err(DecodeError::UnknownFrameType(7))
    );
    assert_eq!(buf.capacity(), 16);
}

#[test]
fn message_shorter_than_header_is_rejected() {
    // size 4 + 25: one byte short of the 26-byte message header.
    let mut wire = b"\x00\x00\x00\x1d\x00\x00\x00\x02".to_vec();
    wire.extend_from_slice(&[0; 25]);
    assert_eq!(
        decode_err(FrameDecoder::default(), &wire),
        DecodeError::MessageTooShort { len: 25 }
    );
    // Known from the header alone.
    assert_eq!(
        decode_err(FrameDecoder::default(), &wire[..8]),
        DecodeError::MessageTooShort { len: 25 }
    );
    assert_eq!(
        decode_err(FrameDecoder::default(), b"\x00\x00\x00\x04\x00\x00\x00\x02"),
        DecodeError::MessageTooShort { len: 0 }
    );
}

#[test]
fn error_after_good_frames_keeps_them() {
    // A good OK frame, then garbage: the OK decodes, then the error, repeatably.
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x06\x00\x00\x00\x00OK\x00\x00\x00\x02"[..]);
    assert!(decoder.decode(&mut buf).unwrap().is_some());
    assert_eq!(
        decoder.decode(&mut buf),
        Err(DecodeError::FrameTooSmall { size: 2 })
    );
    assert_eq!(
        decoder.decode(&mut buf),
        Err(DecodeError::FrameTooSmall { size: 2 })
    );
}

// ---------------------------------------------------------------------------------------------
// Names

#[test]
fn invalid_names_each_error() {
    let cases: [(&str, NameError); 7] = [
        ("", NameError::Empty),
        ("#ephemeral", NameError::Empty),
        (&"x".repeat(65), NameError::TooLong { len: 65 }),
        (
            "events#ephemeral-and-then-some-more-to-go-past-the-limit-of-64-bytes",
            NameError::TooLong { len: 68 },
        ),
        ("has space", NameError::InvalidChar { index: 3, ch: ' ' }),
        ("slash/", NameError::InvalidChar { index: 5, ch: '/' }),
        ("ünicode", NameError::InvalidChar { index: 0, ch: 'ü' }),
    ];
    for (name, expected) in cases {
        assert_eq!(Topic::new(name).unwrap_err(), expected, "topic {name:?}");
        assert_eq!(
            Channel::new(name).unwrap_err(),
            expected,
            "channel {name:?}"
        );
        assert_eq!(name.parse::<Topic>().unwrap_err(), expected);
        assert_eq!(Channel::try_from(name.to_string()).unwrap_err(), expected);
        assert_error_text(&expected);
    }
    // A misplaced ephemeral marker is an invalid character, at its position.
    assert_eq!(
        Topic::new("a#ephemeral.b").unwrap_err(),
        NameError::InvalidChar { index: 1, ch: '#' }
    );
    assert_eq!(
        Topic::new("a#Ephemeral").unwrap_err(),
        NameError::InvalidChar { index: 1, ch: '#' }
    );
}

// ---------------------------------------------------------------------------------------------
// Commands

const SENTINEL: &[u8] = b"queued";

/// Runs an encoder into a buffer holding earlier output; asserts it failed and wrote nothing.
fn encode_err(f: impl FnOnce(&mut Vec<u8>) -> Result<(), CommandError>) -> CommandError {
    let mut out = SENTINEL.to_vec();
    let err = f(&mut out).expect_err("must be rejected");
    assert_eq!(out, SENTINEL, "nothing may be written on error");
    assert_error_text(&err);
    err
}

fn topic() -> Topic {
    Topic::new("events").unwrap()
}

const ID: MessageId = MessageId::new(*b"0123456789abcdef");

#[test]
fn empty_body() {
    let limits = Limits::default();
    assert_eq!(
        encode_err(|b| command::publish(b, &topic(), b"", &limits)),
        CommandError::EmptyBody
    );
    assert_eq!(
        encode_err(|b| command::deferred_publish(b, &topic(), Duration::ZERO, b"", &limits)),
        CommandError::EmptyBody
    );
}

#[test]
fn oversize_body() {
    let limits = Limits::default();
    let body = vec![b'x'; DEFAULT_MAX_MSG_SIZE as usize + 1];
    let expected = CommandError::BodyTooLarge {
        index: 0,
        len: body.len(),
        max: DEFAULT_MAX_MSG_SIZE,
    };
    assert_eq!(
        encode_err(|b| command::publish(b, &topic(), &body, &limits)),
        expected
    );
    assert_eq!(
        encode_err(|b| command::deferred_publish(b, &topic(), Duration::ZERO, &body, &limits)),
        expected
    );
    // Exactly max_msg_size is accepted.
    let mut out = Vec::new();
    command::publish(&mut out, &topic(), &body[1..], &limits).unwrap();
}

#[test]
fn empty_mpub() {
    let limits = Limits::default();
    let none: [&[u8]; 0] = [];
    assert_eq!(
        encode_err(|b| command::multi_publish(b, &topic(), &none, &limits)),
        CommandError::EmptyBatch
    );
    assert_eq!(
        encode_err(|b| command::multi_publish(b, &topic(), &[&b"a"[..], b"", b"c"], &limits)),
        CommandError::EmptyBodyInBatch { index: 1 }
    );
}

#[test]
fn oversize_mpub() {
    let limits = Limits::default();
    // Six 1 MiB messages: each fits max_msg_size, together they exceed max_body_size (5 MiB).
    let body = vec![b'x'; DEFAULT_MAX_MSG_SIZE as usize];
    let batch = vec![&body[..]; 6];
    assert_eq!(
        encode_err(|b| command::multi_publish(b, &topic(), &batch, &limits)),
        CommandError::BatchTooLarge {
            len: 4 + 6 * (4 + 1024 * 1024),
            max: 5 * 1024 * 1024
        }
    );
    // One message over max_msg_size is named by its position.
    let big = vec![b'x'; DEFAULT_MAX_MSG_SIZE as usize + 1];
    assert_eq!(
        encode_err(|b| command::multi_publish(b, &topic(), &[&b"a"[..], &big], &limits)),
        CommandError::BodyTooLarge {
            index: 1,
            len: big.len(),
            max: DEFAULT_MAX_MSG_SIZE
        }
    );
}

#[test]
fn delay_too_long() {
    let limits = Limits::default();
    let hour = Duration::from_secs(3600);
    let delay = Duration::from_millis(3_600_001);
    let expected = CommandError::DelayTooLong { delay, max: hour };
    assert_eq!(
        encode_err(|b| command::deferred_publish(b, &topic(), delay, b"x", &limits)),
        expected
    );
    assert_eq!(
        encode_err(|b| command::req(b, &ID, delay, &limits)),
        expected
    );
    assert_eq!(
        encode_err(|b| command::req(b, &ID, Duration::MAX, &limits)),
        CommandError::DelayTooLong {
            delay: Duration::MAX,
            max: hour
        }
    );
    // Exactly the limit is fine, and so is a sub-millisecond excess (it is sent as the limit).
    let mut out = Vec::new();
    command::req(&mut out, &ID, hour, &limits).unwrap();
    command::req(&mut out, &ID, hour + Duration::from_micros(999), &limits).unwrap();
    assert_eq!(
        out,
        b"REQ 0123456789abcdef 3600000\nREQ 0123456789abcdef 3600000\n"
    );
}

#[test]
fn empty_auth_secret() {
    assert_eq!(
        encode_err(|b| command::auth(b, b"")),
        CommandError::EmptySecret
    );
}

#[test]
fn invalid_identify_fields() {
    let cases = [
        Identify {
            heartbeat_interval: 999,
            ..Identify::default()
        },
        Identify {
            heartbeat_interval: -2,
            ..Identify::default()
        },
        Identify {
            output_buffer_size: 63,
            ..Identify::default()
        },
        Identify {
            output_buffer_size: -5,
            ..Identify::default()
        },
        Identify {
            output_buffer_timeout: -2,
            ..Identify::default()
        },
        Identify {
            sample_rate: 100,
            ..Identify::default()
        },
        Identify {
            sample_rate: -1,
            ..Identify::default()
        },
        Identify {
            msg_timeout: 999,
            ..Identify::default()
        },
        Identify {
            msg_timeout: -1,
            ..Identify::default()
        },
        Identify {
            deflate_level: 10,
            ..Identify::default()
        },
        Identify {
            deflate_level: -1,
            ..Identify::default()
        },
        Identify {
            snappy: true,
            deflate: true,
            ..Identify::default()
        },
    ];
    for identify in cases {
        let err = encode_err(|b| command::identify(b, &identify));
        assert!(
            matches!(err, CommandError::InvalidIdentify(_)),
            "{identify:?}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// JSON replies

fn reply_err(result: Result<impl std::fmt::Debug, ReplyError>, which: &str) {
    let err = result.expect_err("must be rejected");
    assert_eq!(err.reply(), which);
    assert!(
        err.to_string()
            .starts_with(&format!("malformed {which} reply")),
        "{err}"
    );
}

#[test]
fn malformed_identify_reply() {
    for body in [
        &b""[..],
        b"{",
        b"[]",
        b"null",
        b"E_INVALID",
        br#"{"max_rdy_count":"2500"}"#,
        br#"{"max_rdy_count":2500.5}"#,
        br#"{"tls_v1":"yes"}"#,
        b"\xff\xfe",
    ] {
        reply_err(IdentifyResponse::parse(body), "IDENTIFY");
    }
}

#[test]
fn malformed_auth_reply() {
    for body in [
        &b""[..],
        b"OK",
        b"{\"identity\":",
        b"[\"bob\"]",
        br#"{"permission_count":"two"}"#,
    ] {
        reply_err(AuthResponse::parse(body), "AUTH");
    }
}

#[test]
fn malformed_lookup_reply() {
    for body in [&b""[..], b"{", b"[]", b"null", br#"{"producers":{}}"#] {
        reply_err(LookupResponse::parse(200, body), "lookup");
    }
    // Server errors, flat and enveloped.
    reply_err(
        LookupResponse::parse(500, br#"{"message":"INTERNAL_ERROR"}"#),
        "lookup",
    );
    reply_err(
        LookupResponse::parse(
            200,
            br#"{"status_code":500,"status_txt":"INTERNAL_ERROR","data":null}"#,
        ),
        "lookup",
    );
    reply_err(LookupResponse::parse(400, b"<html>bad</html>"), "lookup");
}

#[test]
fn bad_lookup_ports() {
    for producer in [
        r#"{"broadcast_address":"a","tcp_port":70000}"#,
        r#"{"broadcast_address":"a","tcp_port":-1}"#,
        r#"{"broadcast_address":"a","tcp_port":0}"#,
        r#"{"broadcast_address":"a"}"#,
        r#"{"broadcast_address":"a","tcp_port":"4150"}"#,
        r#"{"broadcast_address":"a","tcp_port":4150.5}"#,
        r#"{"broadcast_address":"","tcp_port":4150}"#,
        r#"{"tcp_port":4150}"#,
    ] {
        let flat = format!(r#"{{"channels":[],"producers":[{producer}]}}"#);
        reply_err(LookupResponse::parse(200, flat.as_bytes()), "lookup");
        let enveloped = format!(
            r#"{{"status_code":200,"status_txt":"OK","data":{{"channels":[],"producers":[{producer}]}}}}"#
        );
        reply_err(LookupResponse::parse(200, enveloped.as_bytes()), "lookup");
    }
}
