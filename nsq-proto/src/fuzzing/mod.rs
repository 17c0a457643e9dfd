//! Fuzzing entry points, shared by the cargo-fuzz targets in `fuzz/` and by the corpus replay
//! test (`tests/fuzz_corpus.rs`), so the code CI runs on stable is exactly what the fuzzers run.
//!
//! Each entry point takes arbitrary bytes, must never panic on its own account, and asserts the
//! properties that must hold for every input (a failed assertion is a bug the fuzzer found).
//! Not part of the public API.

use crate::addr::join_host_port;
use crate::frame::{
    DecodeError, FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Frame, FrameDecoder, encode_frame,
    encode_message_frame,
};
use crate::identify::{AuthResponse, IdentifyResponse};
use crate::lookup::LookupResponse;
use bytes::BytesMut;

/// Reads fuzz input as a stream of small numbers; zeros once exhausted. Shared by the
/// operation-sequence targets (`consumer_ops`, `producer_ops`).
pub(crate) struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    pub(crate) fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    pub(crate) fn slice(&mut self, max: usize) -> &[u8] {
        let n = usize::from(self.byte()).min(max).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// nsqd's IDENTIFY reply (feature negotiation, nothing upgraded) with `max_rdy_count`.
pub(crate) fn identify_reply_with(max_rdy_count: u32) -> String {
    format!(
        r#"{{"max_rdy_count":{max_rdy_count},"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":0,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}}"#
    )
}

/// One frame as nsqd writes it.
pub(crate) fn frame(kind: u32, data: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    encode_frame(&mut b, kind, data);
    b
}

/// How a decode run ended: the frames it produced, then either the error that stopped it or
/// the number of bytes left waiting for more input.
#[derive(Debug, PartialEq, Eq)]
struct DecodeRun {
    frames: Vec<Frame>,
    end: Result<usize, DecodeError>,
}

/// Decodes `buf` until it needs more bytes or fails, appending frames to `frames`.
fn drain(
    decoder: FrameDecoder,
    buf: &mut BytesMut,
    frames: &mut Vec<Frame>,
) -> Result<(), DecodeError> {
    while let Some(frame) = decoder.decode(buf)? {
        frames.push(frame);
    }
    Ok(())
}

/// Frame stream decoding under arbitrary chunking.
///
/// Input layout: byte 0 is a control byte: its low 4 bits give `n`, the number of chunk-size
/// bytes that follow, and bit 4 selects a small frame size limit (256) instead of the default,
/// so the too-large path is reachable with small inputs. The next `n` bytes are chunk sizes,
/// used cyclically (0 counts as 1); everything after them is the server byte stream.
///
/// Asserts that decoding the stream in one piece and fed chunk by chunk give the same frames
/// and the same outcome, and that re-encoding the frames reproduces the bytes they came from.
pub fn frame_stream(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(control & 0x0f).min(rest.len());
    let (sizes, stream) = rest.split_at(n);
    let decoder = if control & 0x10 == 0 {
        FrameDecoder::default()
    } else {
        FrameDecoder::new(256)
    };

    // One shot.
    let mut buf = BytesMut::from(stream);
    let mut frames = Vec::new();
    let end = drain(decoder, &mut buf, &mut frames).map(|()| buf.len());
    let whole = DecodeRun { frames, end };

    // Chunked.
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut offset = 0;
    let mut chunk = 0;
    let mut end = Ok(());
    while offset < stream.len() {
        let size = sizes
            .get(chunk % sizes.len().max(1))
            .map_or(1, |&s| usize::from(s).max(1));
        chunk += 1;
        let next = (offset + size).min(stream.len());
        buf.extend_from_slice(&stream[offset..next]);
        offset = next;
        if let Err(e) = drain(decoder, &mut buf, &mut frames) {
            end = Err(e);
            break;
        }
    }
    let chunked = DecodeRun {
        frames,
        end: end.map(|()| buf.len()),
    };
    assert_eq!(
        whole, chunked,
        "chunked decoding differs from one-shot decoding"
    );

    // The frames are exactly the bytes they were decoded from.
    let mut reencoded = BytesMut::new();
    for frame in &whole.frames {
        match frame {
            Frame::Response(r) => encode_frame(&mut reencoded, FRAME_TYPE_RESPONSE, r.as_bytes()),
            Frame::Error(e) => encode_frame(&mut reencoded, FRAME_TYPE_ERROR, e.raw()),
            Frame::Message(m) => encode_message_frame(&mut reencoded, m),
        }
    }
    assert_eq!(
        &reencoded[..],
        &stream[..reencoded.len()],
        "re-encoded frames differ from the input"
    );
    if let Ok(left) = whole.end {
        assert_eq!(reencoded.len() + left, stream.len());
    }
}

/// IDENTIFY (and AUTH) reply parsing: never panics; a parsed IDENTIFY reply survives a trip
/// through JSON unchanged, and its derived values are in range.
pub fn identify_reply(data: &[u8]) {
    if let Ok(reply) = IdentifyResponse::parse(data) {
        let _ = reply.msg_timeout();
        let _ = reply.max_msg_timeout();
        assert_eq!(
            i64::from(reply.max_rdy()),
            reply.max_rdy_count.clamp(0, i64::from(u32::MAX))
        );
        let json = serde_json::to_vec(&reply).expect("an IdentifyResponse serialises");
        assert_eq!(IdentifyResponse::parse(&json), Ok(reply));
    }
    if let Ok(reply) = AuthResponse::parse(data) {
        let json = serde_json::to_vec(&reply).expect("an AuthResponse serialises");
        assert_eq!(AuthResponse::parse(&json), Ok(reply));
    }
}

/// nsqlookupd reply parsing. Input layout: a big-endian u16 HTTP status, then the body.
///
/// Never panics; every producer of a parsed reply has a usable address, and a parsed reply
/// survives a trip through the flat v1 JSON form unchanged.
pub fn lookup_reply(data: &[u8]) {
    let Some((status, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let status = u16::from_be_bytes(*status);
    if let Ok(reply) = LookupResponse::parse(status, body) {
        for producer in &reply.producers {
            let address = producer.tcp_address();
            assert!(!producer.broadcast_address.is_empty());
            assert_ne!(producer.tcp_port, 0);
            assert!(address.ends_with(&format!(":{}", producer.tcp_port)));
            assert_eq!(
                address,
                join_host_port(&producer.broadcast_address, producer.tcp_port)
            );
        }
        let json = serde_json::to_vec(&reply).expect("a LookupResponse serialises");
        assert_eq!(LookupResponse::parse(200, &json), Ok(reply));
    }
}

/// One HTTP exchange's response, read by the shared HTTP machine and decoded by every typed
/// call of nsqd's and nsqlookupd's APIs. Input layout: one byte choosing the size of the
/// pieces the rest is fed in (1 to 64 bytes), then the response bytes.
///
/// Never panics; memory stays bounded by the parser's caps; feeding the bytes in pieces or
/// at once gives the same outcome; a decoded `/stats` survives a trip through JSON.
pub fn http_exchange(data: &[u8]) {
    use crate::http::{Response, ResponseParser, lookupd, nsqd};
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece % 64) + 1;
    let read = |piece: usize| -> Result<Response, crate::http::HttpError> {
        let mut parser = ResponseParser::new(64 * 1024);
        for chunk in bytes.chunks(piece) {
            if let Some(done) = parser.feed(chunk)? {
                return Ok(done);
            }
        }
        parser.eof()
    };
    let response = read(piece);
    assert_eq!(
        response,
        read(bytes.len().max(1)),
        "pieces change the outcome"
    );
    let Ok(response) = response else {
        return;
    };
    assert!(response.body.len() <= 64 * 1024);
    let topic = crate::Topic::new("t").expect("a valid name");
    let _ = nsqd::ping().decode(&response);
    let _ = nsqd::info().decode(&response);
    let _ = nsqd::get_config("log_level").decode(&response);
    let _ = lookupd::lookup(&topic).decode(&response);
    let _ = lookupd::topics().decode(&response);
    let _ = lookupd::nodes().decode(&response);
    if let Ok(stats) = nsqd::stats(&nsqd::StatsQuery::new()).decode(&response) {
        let json = serde_json::to_vec(&stats).expect("Stats serialises");
        let again: nsqd::Stats = serde_json::from_slice(&json).expect("and reads back");
        assert_eq!(again.topics.len(), stats.topics.len());
        assert_eq!(again.producers.len(), stats.producers.len());
    }
}

mod connection;
mod consumer_ops;
mod producer_ops;

/// The origin of virtual time for the fuzz harnesses: the one place in the crate that reads the
/// clock. Only offsets from it matter; the state machines themselves never read it.
#[allow(
    clippy::disallowed_methods,
    reason = "fuzz harness: `Instant` has no constructor other than `now`"
)]
pub(crate) fn virtual_time_origin() -> std::time::Instant {
    std::time::Instant::now()
}

pub use connection::{Summary, connection, connection_summary};
/// Arbitrary operation sequences against a [`Consumer`](crate::consumer::Consumer); panics if
/// an RDY invariant breaks. See `consumer_ops.rs`.
pub use consumer_ops::consumer_ops;

/// Arbitrary operation sequences against a [`Producer`](crate::producer::Producer); panics if
/// a publish resolves twice or never. See `producer_ops.rs`.
pub use producer_ops::{OpsSummary, producer_ops, producer_ops_summary};

/// Parses arbitrary bytes as a JSON configuration document and, when it is accepted, derives
/// every core configuration from it; panics if an accepted configuration cannot be derived.
pub fn config_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = crate::config::parse_go_duration(text);
    if let Ok(config) = crate::Config::from_json(text) {
        let no_files = |_: std::path::PathBuf| Err(std::io::ErrorKind::NotFound.into());
        let tls_files = config.tls_v1
            && config.tls_config.is_none()
            && !config.tls_insecure_skip_verify
            && (config.tls_root_ca_file.is_some() || config.tls_cert.is_some());
        for result in [
            config.connection_config(no_files).map(|_| ()),
            config.consumer_config(no_files).map(|_| ()),
            config.producer_config(no_files).map(|_| ()),
        ] {
            if let Err(e) = result {
                assert!(tls_files, "validated config failed to derive: {e}");
            }
        }
    }
}
