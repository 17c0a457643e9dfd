//! Connection fuzzing: a scripted start-up, then arbitrary server bytes, time and commands.

use crate::connection::deflate::DeflateEncoder;
use crate::connection::snappy::SnappyEncoder;
use crate::{
    Channel, CloseReason, Compression, Connection, ConnectionConfig, ConnectionEvent, Limits,
    MessageId, Role, Secret, Topic, encode_frame,
};
use bytes::BytesMut;
use std::time::Duration;

/// Largest message body the fuzzed connection accepts (keeps the memory bound tight).
const FUZZ_MAX_MSG: u32 = 64 * 1024;

// Without the `snappy` / `deflate` feature the client refuses to ask for that compression
// (`Connection::new` fails), so the variant is never built.
#[cfg_attr(not(all(feature = "snappy", feature = "deflate")), allow(dead_code))]
enum ServerCodec {
    None,
    Snappy(Box<SnappyEncoder>),
    Deflate(DeflateEncoder),
}

impl ServerCodec {
    fn wrap(&mut self, data: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        match self {
            ServerCodec::None => out.extend_from_slice(data),
            ServerCodec::Snappy(e) => e.encode(data, &mut out),
            ServerCodec::Deflate(e) => e.encode(data, &mut out),
        }
        out
    }
}

/// Drives a connection through a start-up chosen by the first byte (role, compression, AUTH),
/// then interprets the rest as a script: server bytes in pieces (fed raw, or compressed
/// first so the frame layer sees arbitrary plaintext), time jumps, and client commands.
/// Checks that nothing panics, memory stays bounded and `Closed` comes at most once.
pub fn connection(data: &[u8]) {
    let _ = connection_summary(data);
}

/// What a fuzz run reached, so corpus replay tests can check their seeds exercise something.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    /// `Ready` was reported.
    pub ready: bool,
    /// Messages delivered.
    pub messages: usize,
    /// Publishes acknowledged.
    pub published: usize,
    /// The close reason, if the connection closed.
    pub closed: Option<CloseReason>,
}

/// [`connection`], returning what the run reached.
pub fn connection_summary(data: &[u8]) -> Summary {
    let mut summary = Summary::default();
    let Some((&mode, mut script)) = data.split_first() else {
        return summary;
    };
    let consumer = mode & 1 == 1;
    let compression = match (mode >> 1) % 3 {
        0 => Compression::None,
        1 => Compression::Snappy,
        _ => Compression::Deflate { level: 1 },
    };
    let auth = mode & 0x08 != 0;
    let wrap = mode & 0x10 != 0;
    let role = if consumer {
        Role::Consumer {
            topic: Topic::new("t").expect("valid"),
            channel: Channel::new("c").expect("valid"),
        }
    } else {
        Role::Producer
    };
    let config = ConnectionConfig {
        compression,
        auth_secret: auth.then(|| Secret::new("secret")),
        limits: Limits {
            max_msg_size: FUZZ_MAX_MSG,
            ..Limits::default()
        },
        max_outstanding_publishes: Some(64),
        ..ConnectionConfig::default()
    };
    let origin = super::virtual_time_origin();
    let mut now = origin;
    let Ok(mut conn) = Connection::new(config, role, "fuzz:4150", now) else {
        return summary;
    };
    let _ = conn.poll_transmit();

    // Canned start-up.
    let mut server = ServerCodec::None;
    let reply = format!(
        r#"{{"max_rdy_count":100,"msg_timeout":5000,"snappy":{},"deflate":{},"deflate_level":1,"auth_required":{auth}}}"#,
        compression == Compression::Snappy,
        matches!(compression, Compression::Deflate { .. }),
    );
    let mut wire = BytesMut::new();
    encode_frame(&mut wire, 0, reply.as_bytes());
    let mut plain = BytesMut::new();
    match compression {
        #[cfg(feature = "snappy")]
        Compression::Snappy => server = ServerCodec::Snappy(Box::default()),
        #[cfg(feature = "deflate")]
        Compression::Deflate { .. } => server = ServerCodec::Deflate(DeflateEncoder::new(1)),
        _ => {}
    }
    if !matches!(server, ServerCodec::None) {
        encode_frame(&mut plain, 0, b"OK");
    }
    if auth {
        encode_frame(&mut plain, 0, br#"{"identity":"fuzz"}"#);
    }
    if consumer {
        encode_frame(&mut plain, 0, b"OK");
    }
    wire.extend_from_slice(&server.wrap(&plain));
    conn.handle_input(now, &mut wire);

    let mut ids: Vec<MessageId> = Vec::new();
    let mut fed = 0usize;
    let drain = |conn: &mut Connection, ids: &mut Vec<MessageId>, summary: &mut Summary| {
        while conn.poll_transmit().is_some() {}
        while let Some(e) = conn.poll_event() {
            assert!(summary.closed.is_none(), "event after Closed: {e:?}");
            match e {
                ConnectionEvent::Ready(_) => summary.ready = true,
                ConnectionEvent::Message(m) => {
                    ids.push(m.id);
                    summary.messages += 1;
                }
                ConnectionEvent::Published(_) => summary.published += 1,
                ConnectionEvent::Closed(reason) => summary.closed = Some(reason),
                _ => {}
            }
        }
    };
    drain(&mut conn, &mut ids, &mut summary);

    while let Some((&op, rest)) = script.split_first() {
        script = rest;
        let arg = script.first().copied().unwrap_or(0);
        match op & 3 {
            0 | 1 => {
                let n = (usize::from(arg) + 1) * if op & 4 != 0 { 64 } else { 1 };
                let n = n.min(script.len().saturating_sub(1));
                let piece = &script.get(1..=n).unwrap_or_default();
                script = &script[(1 + n).min(script.len())..];
                fed += piece.len();
                let mut buf = if wrap {
                    server.wrap(piece)
                } else {
                    BytesMut::from(*piece)
                };
                conn.handle_input(now, &mut buf);
            }
            2 => {
                script = script.get(1..).unwrap_or_default();
                now += Duration::from_millis(u64::from(arg) * 100);
                conn.handle_timeout(now);
            }
            _ => {
                script = script.get(1..).unwrap_or_default();
                let id = ids.get(usize::from(arg) % ids.len().max(1)).copied();
                let _ = match (op >> 2) % 8 {
                    0 => id.map(|id| conn.finish(now, &id)),
                    1 => id.map(|id| conn.requeue(now, &id, Duration::from_millis(u64::from(arg)))),
                    2 => id.map(|id| conn.touch(now, &id)),
                    3 => Some(conn.set_rdy(now, u32::from(arg))),
                    4 => Some(
                        conn.publish(now, &Topic::new("t").expect("valid"), &[arg; 3])
                            .map(|_| ()),
                    ),
                    5 => {
                        conn.close(now);
                        None
                    }
                    6 => {
                        conn.handle_eof(now);
                        None
                    }
                    _ => Some(
                        conn.multi_publish(now, &Topic::new("t").expect("valid"), &[[arg; 2]])
                            .map(|_| ()),
                    ),
                };
            }
        }
        drain(&mut conn, &mut ids, &mut summary);
        // Memory stays bounded: at most one partial frame plus one decompression step plus
        // the compressed bytes fed so far.
        let bound = FUZZ_MAX_MSG as usize + 64 + 2 * 64 * 1024 + 2 * fed;
        assert!(
            conn.buffered_input() <= bound,
            "buffered {} > {bound}",
            conn.buffered_input()
        );
        if let Some(t) = conn.poll_timeout() {
            assert!(t >= origin);
        }
    }
    summary
}
