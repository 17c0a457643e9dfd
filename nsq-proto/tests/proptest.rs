//! Property tests: frame and command round trips, arbitrary chunking, name validation rules
//! and the encoders' limit checks.

use bytes::{Bytes, BytesMut};
use nsq_proto::{
    Channel, CommandError, ErrorCode, Frame, FrameDecoder, Identify, Limits, MAX_NAME_LEN, Message,
    MessageId, NameError, Response, ServerError, Topic, command, encode_frame,
    encode_message_frame, fuzzing, validate_name,
};
use proptest::prelude::*;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Frames

fn message_strategy() -> impl Strategy<Value = Message> {
    (
        any::<i64>(),
        any::<u16>(),
        any::<[u8; 16]>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(timestamp, attempts, id, body)| Message {
            timestamp,
            attempts,
            id: MessageId::new(id),
            body: Bytes::from(body),
        })
}

fn response_data_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"OK".to_vec()),
        Just(b"_heartbeat_".to_vec()),
        Just(b"CLOSE_WAIT".to_vec()),
        Just(br#"{"max_rdy_count":2500,"version":"1.3.0"}"#.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..100),
    ]
}

fn error_data_strategy() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        proptest::sample::select(ErrorCode::ALL.to_vec()).prop_map(|c| c.as_str().to_string()),
        "E_[A-Z_]{1,20}",
    ];
    (token, proptest::option::of("[ -~]{0,60}")).prop_map(|(token, desc)| match desc {
        Some(desc) => format!("{token} {desc}").into_bytes(),
        None => token.into_bytes(),
    })
}

/// A frame as it should decode, plus its wire bytes written with the encode helpers.
fn frame_strategy() -> impl Strategy<Value = (Frame, Vec<u8>)> {
    prop_oneof![
        response_data_strategy().prop_map(|data| {
            let mut wire = Vec::new();
            encode_frame(&mut wire, 0, &data);
            (
                Frame::Response(Response::from_data(Bytes::from(data))),
                wire,
            )
        }),
        error_data_strategy().prop_map(|data| {
            let mut wire = Vec::new();
            encode_frame(&mut wire, 1, &data);
            (
                Frame::Error(ServerError::from_frame_data(Bytes::from(data))),
                wire,
            )
        }),
        message_strategy().prop_map(|msg| {
            let mut wire = Vec::new();
            encode_message_frame(&mut wire, &msg);
            (Frame::Message(msg), wire)
        }),
    ]
}

/// Decodes `stream` fed in chunks of the given sizes (cycled), asserting no error.
fn decode_chunked(stream: &[u8], sizes: &[usize]) -> (Vec<Frame>, usize) {
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut offset = 0;
    for &size in sizes.iter().cycle() {
        if offset == stream.len() {
            break;
        }
        let next = (offset + size).min(stream.len());
        buf.extend_from_slice(&stream[offset..next]);
        offset = next;
        while let Some(frame) = decoder.decode(&mut buf).unwrap() {
            frames.push(frame);
        }
    }
    (frames, buf.len())
}

proptest! {
    #[test]
    fn message_round_trip(msg in message_strategy()) {
        let mut wire = BytesMut::new();
        encode_message_frame(&mut wire, &msg);
        prop_assert_eq!(wire.len(), 4 + 4 + 26 + msg.body.len());
        let frame = FrameDecoder::default().decode(&mut wire).unwrap();
        prop_assert_eq!(frame, Some(Frame::Message(msg)));
        prop_assert!(wire.is_empty());
    }

    #[test]
    fn response_round_trip(data in response_data_strategy()) {
        let mut wire = BytesMut::new();
        encode_frame(&mut wire, 0, &data);
        let Some(Frame::Response(response)) = FrameDecoder::default().decode(&mut wire).unwrap()
        else {
            return Err(TestCaseError::fail("expected a response"));
        };
        prop_assert_eq!(response.as_bytes(), &data[..]);
        let expected_special = match &data[..] {
            b"OK" => Some(Response::Ok),
            b"_heartbeat_" => Some(Response::Heartbeat),
            b"CLOSE_WAIT" => Some(Response::CloseWait),
            _ => None,
        };
        match expected_special {
            Some(special) => prop_assert_eq!(response, special),
            None => prop_assert!(matches!(response, Response::Other(_))),
        }
    }

    #[test]
    fn error_round_trip(data in error_data_strategy()) {
        let mut wire = BytesMut::new();
        encode_frame(&mut wire, 1, &data);
        let Some(Frame::Error(e)) = FrameDecoder::default().decode(&mut wire).unwrap() else {
            return Err(TestCaseError::fail("expected an error frame"));
        };
        let text = String::from_utf8(data.clone()).unwrap();
        let (token, desc) = text.split_once(' ').unwrap_or((&text, ""));
        prop_assert_eq!(e.code_str(), token);
        prop_assert_eq!(e.description(), desc);
        let known = ErrorCode::ALL.iter().find(|c| c.as_str() == token).copied();
        prop_assert_eq!(e.code(), known.unwrap_or(ErrorCode::Unknown));
        prop_assert_eq!(&e.raw()[..], &data[..]);
    }

    #[test]
    fn chunking_does_not_change_frames(
        frames in proptest::collection::vec(frame_strategy(), 1..20),
        sizes in proptest::collection::vec(1usize..80, 1..10),
        tail in 0usize..8,
    ) {
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for (frame, wire) in frames {
            stream.extend_from_slice(&wire);
            expected.push(frame);
        }
        // A partial frame at the end is held back, not decoded or rejected.
        let partial = [0, 0, 0, 30, 0, 0, 0, 2];
        stream.extend_from_slice(&partial[..tail]);

        let (one_shot, left) = decode_chunked(&stream, &[stream.len()]);
        prop_assert_eq!(&one_shot, &expected);
        prop_assert_eq!(left, tail);
        let (chunked, left) = decode_chunked(&stream, &sizes);
        prop_assert_eq!(&chunked, &expected);
        prop_assert_eq!(left, tail);
        let (bytewise, left) = decode_chunked(&stream, &[1]);
        prop_assert_eq!(&bytewise, &expected);
        prop_assert_eq!(left, tail);

        // The fuzzing entry point agrees on valid streams with any chunking.
        let mut input = vec![sizes.len().min(15) as u8];
        input.extend(sizes.iter().take(15).map(|&s| s as u8));
        input.extend_from_slice(&stream);
        fuzzing::frame_stream(&input);
    }

    #[test]
    fn arbitrary_bytes_decode_the_same_in_any_chunking(
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        // frame_stream asserts one-shot == chunked and that frames re-encode to their bytes.
        fuzzing::frame_stream(&data);
    }
}

// ---------------------------------------------------------------------------------------------
// Commands, checked against a small independent parser

#[derive(Debug, Clone, PartialEq)]
enum Cmd {
    Magic,
    Identify(serde_json::Value),
    Auth(Vec<u8>),
    Sub(String, String),
    Pub(String, Vec<u8>),
    Mpub(String, Vec<Vec<u8>>),
    Dpub(String, u64, Vec<u8>),
    Rdy(u32),
    Fin(String),
    Req(String, u64),
    Touch(String),
    Cls,
    Nop,
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = input.split_at(n);
    *input = rest;
    head
}

fn take_u32(input: &mut &[u8]) -> u32 {
    let b = take(input, 4);
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn take_sized<'a>(input: &mut &'a [u8]) -> &'a [u8] {
    let len = take_u32(input) as usize;
    take(input, len)
}

/// Parses one command off the front of `input`, the way nsqd reads them.
fn parse_command(input: &mut &[u8]) -> Cmd {
    if input.starts_with(b"  V2") {
        take(input, 4);
        return Cmd::Magic;
    }
    let nl = input.iter().position(|&b| b == b'\n').expect("newline");
    let line = std::str::from_utf8(take(input, nl)).unwrap().to_string();
    take(input, 1);
    let params: Vec<&str> = line.split(' ').collect();
    match params[..] {
        ["IDENTIFY"] => Cmd::Identify(serde_json::from_slice(take_sized(input)).unwrap()),
        ["AUTH"] => Cmd::Auth(take_sized(input).to_vec()),
        ["SUB", t, c] => Cmd::Sub(t.into(), c.into()),
        ["PUB", t] => Cmd::Pub(t.into(), take_sized(input).to_vec()),
        ["MPUB", t] => {
            let mut body = take_sized(input);
            let count = take_u32(&mut body);
            let bodies = (0..count).map(|_| take_sized(&mut body).to_vec()).collect();
            assert!(
                body.is_empty(),
                "MPUB body length covers exactly the messages"
            );
            Cmd::Mpub(t.into(), bodies)
        }
        ["DPUB", t, ms] => Cmd::Dpub(t.into(), ms.parse().unwrap(), take_sized(input).to_vec()),
        ["RDY", n] => Cmd::Rdy(n.parse().unwrap()),
        ["FIN", id] => Cmd::Fin(id.into()),
        ["REQ", id, ms] => Cmd::Req(id.into(), ms.parse().unwrap()),
        ["TOUCH", id] => Cmd::Touch(id.into()),
        ["CLS"] => Cmd::Cls,
        ["NOP"] => Cmd::Nop,
        _ => panic!("unparseable command line {line:?}"),
    }
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[.a-zA-Z0-9_-]{1,64}",
        "[.a-zA-Z0-9_-]{1,54}".prop_map(|s| format!("{s}#ephemeral")),
    ]
}

fn id_strategy() -> impl Strategy<Value = String> {
    "[0-9a-f]{16}"
}

fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..200)
}

fn identify_strategy() -> impl Strategy<Value = Identify> {
    (
        ".{0,20}",
        any::<bool>(),
        prop_oneof![Just(-1i64), Just(0), 1000i64..=60_000],
        0i64..=99,
        prop_oneof![Just(0i64), 1000i64..=900_000],
        any::<bool>(),
    )
        .prop_map(
            |(
                client_id,
                feature_negotiation,
                heartbeat_interval,
                sample_rate,
                msg_timeout,
                tls,
            )| {
                Identify {
                    client_id,
                    feature_negotiation,
                    heartbeat_interval,
                    sample_rate,
                    msg_timeout,
                    tls_v1: tls,
                    user_agent: "nsq-rs/test".into(),
                    ..Identify::default()
                }
            },
        )
}

fn cmd_strategy() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        Just(Cmd::Magic),
        identify_strategy().prop_map(|i| Cmd::Identify(serde_json::to_value(i).unwrap())),
        body_strategy().prop_map(Cmd::Auth),
        (name_strategy(), name_strategy()).prop_map(|(t, c)| Cmd::Sub(t, c)),
        (name_strategy(), body_strategy()).prop_map(|(t, b)| Cmd::Pub(t, b)),
        (
            name_strategy(),
            proptest::collection::vec(body_strategy(), 1..10)
        )
            .prop_map(|(t, b)| Cmd::Mpub(t, b)),
        (name_strategy(), 0u64..=3_600_000, body_strategy())
            .prop_map(|(t, ms, b)| Cmd::Dpub(t, ms, b)),
        any::<u32>().prop_map(Cmd::Rdy),
        id_strategy().prop_map(Cmd::Fin),
        (id_strategy(), 0u64..=3_600_000).prop_map(|(id, ms)| Cmd::Req(id, ms)),
        id_strategy().prop_map(Cmd::Touch),
        Just(Cmd::Cls),
        Just(Cmd::Nop),
    ]
}

fn msg_id(id: &str) -> MessageId {
    MessageId::try_from(id.as_bytes()).unwrap()
}

/// Encodes `cmd` with the crate's encoders.
fn encode_cmd(out: &mut Vec<u8>, cmd: &Cmd) {
    let limits = Limits::default();
    let topic = |t: &str| Topic::new(t).unwrap();
    match cmd {
        Cmd::Magic => command::magic(out),
        Cmd::Identify(json) => {
            let identify: Identify = serde_json::from_value(json.clone()).unwrap();
            command::identify(out, &identify).unwrap();
        }
        Cmd::Auth(secret) => command::auth(out, secret).unwrap(),
        Cmd::Sub(t, c) => command::sub(out, &topic(t), &Channel::new(c).unwrap()),
        Cmd::Pub(t, b) => command::publish(out, &topic(t), b, &limits).unwrap(),
        Cmd::Mpub(t, b) => command::multi_publish(out, &topic(t), b, &limits).unwrap(),
        Cmd::Dpub(t, ms, b) => {
            command::deferred_publish(out, &topic(t), Duration::from_millis(*ms), b, &limits)
                .unwrap();
        }
        Cmd::Rdy(n) => command::rdy(out, *n),
        Cmd::Fin(id) => command::fin(out, &msg_id(id)),
        Cmd::Req(id, ms) => {
            command::req(out, &msg_id(id), Duration::from_millis(*ms), &limits).unwrap();
        }
        Cmd::Touch(id) => command::touch(out, &msg_id(id)),
        Cmd::Cls => command::cls(out),
        Cmd::Nop => command::nop(out),
    }
}

proptest! {
    #[test]
    fn commands_parse_back(cmds in proptest::collection::vec(cmd_strategy(), 1..12)) {
        let mut wire = Vec::new();
        for cmd in &cmds {
            encode_cmd(&mut wire, cmd);
        }
        let mut input = &wire[..];
        let mut parsed = Vec::new();
        while !input.is_empty() {
            parsed.push(parse_command(&mut input));
        }
        prop_assert_eq!(parsed, cmds);
    }
}

// ---------------------------------------------------------------------------------------------
// Name validation

/// Any char outside `[.a-zA-Z0-9_-]`.
fn invalid_char() -> impl Strategy<Value = char> {
    any::<char>().prop_filter("must be invalid in a name", |c| {
        !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    })
}

proptest! {
    #[test]
    fn valid_names_accepted(name in name_strategy()) {
        prop_assert_eq!(validate_name(&name), Ok(()));
        let topic = Topic::new(&name).unwrap();
        prop_assert_eq!(topic.as_str(), &name[..]);
        prop_assert_eq!(topic.is_ephemeral(), name.ends_with("#ephemeral"));
        let channel = Channel::new(&name).unwrap();
        prop_assert_eq!(channel.as_str(), &name[..]);
        prop_assert_eq!(name.parse::<Topic>().unwrap(), topic);
    }

    #[test]
    fn too_long_names_rejected(
        name in prop_oneof![
            "[.a-zA-Z0-9_-]{65,200}",
            "[.a-zA-Z0-9_-]{55,100}".prop_map(|s| format!("{s}#ephemeral")),
        ],
    ) {
        let expected = Err(NameError::TooLong { len: name.len() });
        prop_assert_eq!(validate_name(&name), expected.clone());
        prop_assert_eq!(Topic::new(&name).map(|_| ()), expected.clone());
        prop_assert_eq!(Channel::new(&name).map(|_| ()), expected);
    }

    #[test]
    fn invalid_chars_rejected(
        prefix in "[.a-zA-Z0-9_-]{0,30}",
        bad in invalid_char(),
        suffix in "[.a-zA-Z0-9_-]{0,20}",
        ephemeral in any::<bool>(),
    ) {
        let mut name = format!("{prefix}{bad}{suffix}");
        if ephemeral {
            name.push_str("#ephemeral");
        }
        prop_assume!(name.len() <= MAX_NAME_LEN);
        // "a" + '#' + "ephemeral" is a valid ephemeral name, not an invalid one.
        prop_assume!(bad != '#' || suffix != "ephemeral" || prefix.is_empty() || ephemeral);
        let expected = if bad == '#' && suffix == "ephemeral" && prefix.is_empty() && !ephemeral {
            Err(NameError::Empty)
        } else {
            Err(NameError::InvalidChar { index: prefix.len(), ch: bad })
        };
        prop_assert_eq!(validate_name(&name), expected.clone());
        prop_assert_eq!(Topic::new(&name).map(|_| ()), expected.clone());
        prop_assert_eq!(Channel::new(&name).map(|_| ()), expected);
    }
}

#[test]
fn empty_names_rejected() {
    for name in ["", "#ephemeral"] {
        assert_eq!(validate_name(name), Err(NameError::Empty));
        assert_eq!(Topic::new(name).map(|_| ()), Err(NameError::Empty));
        assert_eq!(Channel::new(name).map(|_| ()), Err(NameError::Empty));
    }
}

// ---------------------------------------------------------------------------------------------
// Encoder limits: the right error, and nothing written

const SENTINEL: &[u8] = b"already queued";

fn small_limits(max_msg_size: u32, max_body_size: u32, max_req_ms: u64) -> Limits {
    Limits {
        max_msg_size,
        max_body_size,
        max_req_timeout: Duration::from_millis(max_req_ms),
    }
}

/// Checks an encoder's result: on error nothing was appended, on success something was.
fn check_written(out: &[u8], result: &Result<(), CommandError>) -> Result<(), TestCaseError> {
    prop_assert!(out.starts_with(SENTINEL));
    if result.is_err() {
        prop_assert_eq!(out.len(), SENTINEL.len(), "nothing may be written on error");
    } else {
        prop_assert!(out.len() > SENTINEL.len());
    }
    Ok(())
}

proptest! {
    #[test]
    fn publish_limits(len in 0usize..600, max in 1u32..500) {
        let limits = small_limits(max, 10_000, 1000);
        let mut out = SENTINEL.to_vec();
        let result = command::publish(&mut out, &Topic::new("t").unwrap(), &vec![b'x'; len], &limits);
        let expected = if len == 0 {
            Err(CommandError::EmptyBody)
        } else if len > max as usize {
            Err(CommandError::BodyTooLarge { index: 0, len, max })
        } else {
            Ok(())
        };
        prop_assert_eq!(&result, &expected);
        check_written(&out, &result)?;
    }

    #[test]
    fn deferred_publish_limits(
        len in 0usize..300,
        max in 1u32..200,
        delay_ms in 0u64..2000,
        max_ms in 0u64..1000,
    ) {
        let limits = small_limits(max, 10_000, max_ms);
        let mut out = SENTINEL.to_vec();
        let delay = Duration::from_millis(delay_ms);
        let result = command::deferred_publish(
            &mut out,
            &Topic::new("t").unwrap(),
            delay,
            &vec![b'x'; len],
            &limits,
        );
        let expected = if delay_ms > max_ms {
            Err(CommandError::DelayTooLong { delay, max: limits.max_req_timeout })
        } else if len == 0 {
            Err(CommandError::EmptyBody)
        } else if len > max as usize {
            Err(CommandError::BodyTooLarge { index: 0, len, max })
        } else {
            Ok(())
        };
        prop_assert_eq!(&result, &expected);
        check_written(&out, &result)?;
    }

    #[test]
    fn req_limits(delay_ms in 0u64..2000, max_ms in 0u64..1000) {
        let limits = small_limits(100, 1000, max_ms);
        let mut out = SENTINEL.to_vec();
        let delay = Duration::from_millis(delay_ms);
        let result = command::req(&mut out, &MessageId::new(*b"0123456789abcdef"), delay, &limits);
        let expected = if delay_ms > max_ms {
            Err(CommandError::DelayTooLong { delay, max: limits.max_req_timeout })
        } else {
            Ok(())
        };
        prop_assert_eq!(&result, &expected);
        check_written(&out, &result)?;
    }

    #[test]
    fn multi_publish_limits(
        lens in proptest::collection::vec(0usize..120, 0..12),
        max in 1u32..100,
        max_body in 1u32..800,
    ) {
        let limits = small_limits(max, max_body, 1000);
        let bodies: Vec<Vec<u8>> = lens.iter().map(|&len| vec![b'y'; len]).collect();
        let mut out = SENTINEL.to_vec();
        let result = command::multi_publish(&mut out, &Topic::new("t").unwrap(), &bodies, &limits);
        // The model: an empty batch, then each message in order, then the total size.
        let expected = (|| {
            if lens.is_empty() {
                return Err(CommandError::EmptyBatch);
            }
            for (index, &len) in lens.iter().enumerate() {
                if len == 0 {
                    return Err(CommandError::EmptyBodyInBatch { index });
                }
                if len > max as usize {
                    return Err(CommandError::BodyTooLarge { index, len, max });
                }
            }
            let total = 4 + lens.iter().map(|&len| 4 + len as u64).sum::<u64>();
            if total > u64::from(max_body) {
                return Err(CommandError::BatchTooLarge { len: total, max: max_body });
            }
            Ok(())
        })();
        prop_assert_eq!(&result, &expected);
        check_written(&out, &result)?;
    }

    /// A producer's `Batch` (bodies encoded once, where they are made, given as an iterator)
    /// refuses exactly what `command::multi_publish` refuses.
    #[test]
    fn a_batch_is_checked_like_multi_publish(
        lens in proptest::collection::vec(0usize..120, 0..12),
        max in 1u32..100,
        max_body in 1u32..800,
    ) {
        let limits = small_limits(max, max_body, 1000);
        let topic = Topic::new("t").unwrap();
        let bodies: Vec<Vec<u8>> = lens.iter().map(|&len| vec![b'y'; len]).collect();
        let encoded = command::multi_publish(&mut BytesMut::new(), &topic, &bodies, &limits);
        let batch = nsq_proto::producer::Batch::new(&topic, bodies.iter(), &limits);
        prop_assert_eq!(batch.as_ref().err(), encoded.as_ref().err());
        if let Ok(batch) = batch {
            prop_assert_eq!(batch.len(), bodies.len());
            prop_assert_eq!(batch.topic(), &topic);
        }
    }

    #[test]
    fn auth_and_identify_write_nothing_on_error(
        secret in proptest::collection::vec(any::<u8>(), 0..4),
        sample_rate in 90i64..110,
    ) {
        let mut out = SENTINEL.to_vec();
        let result = command::auth(&mut out, &secret);
        prop_assert_eq!(result.is_err(), secret.is_empty());
        check_written(&out, &result)?;

        let mut out = SENTINEL.to_vec();
        let identify = Identify { sample_rate, ..Identify::default() };
        let result = command::identify(&mut out, &identify);
        prop_assert_eq!(result.is_err(), sample_rate > 99);
        check_written(&out, &result)?;
    }
}
