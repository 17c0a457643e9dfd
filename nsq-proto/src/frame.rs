//! Server-to-client frames: `u32 size | u32 frame_type | data`, decoded zero-copy.

use crate::error_code::ServerError;
use bytes::{Buf, Bytes, BytesMut};
use std::fmt;

/// Frame type of a response frame.
pub const FRAME_TYPE_RESPONSE: u32 = 0;
/// Frame type of an error frame.
pub const FRAME_TYPE_ERROR: u32 = 1;
/// Frame type of a message frame.
pub const FRAME_TYPE_MESSAGE: u32 = 2;

/// Bytes of a message frame's data before the body: timestamp (8), attempts (2), id (16).
pub const MESSAGE_HEADER_LEN: usize = 26;

/// nsqd's default `--max-msg-size` (1 MiB).
pub const DEFAULT_MAX_MSG_SIZE: u32 = 1024 * 1024;

/// The default limit on a frame's `size` field: a 1 MiB body plus the message header and the
/// frame type field.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = DEFAULT_MAX_MSG_SIZE + MESSAGE_HEADER_LEN as u32 + 4;

/// `"HTTP"` read as a big-endian u32: the first bytes an HTTP server answers with.
const HTTP_MAGIC: u32 = u32::from_be_bytes(*b"HTTP");
/// What nsqlookupd's TCP port answers to any protocol but its own `  V1`: a size field and
/// `E_BAD_PROTOCOL` with no frame type, so the frame type field reads `E_BA`.
const BAD_PROTOCOL: &[u8] = b"E_BAD_PROTOCOL";

/// The 16-byte id nsqd gives every message, echoed verbatim in FIN, REQ and TOUCH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId([u8; 16]);

impl MessageId {
    /// Wraps raw id bytes.
    pub const fn new(bytes: [u8; 16]) -> MessageId {
        MessageId(bytes)
    }

    /// The raw id bytes (normally 16 ASCII hex digits).
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl From<[u8; 16]> for MessageId {
    fn from(bytes: [u8; 16]) -> MessageId {
        MessageId(bytes)
    }
}

impl TryFrom<&[u8]> for MessageId {
    type Error = std::array::TryFromSliceError;
    fn try_from(bytes: &[u8]) -> Result<MessageId, Self::Error> {
        Ok(MessageId(bytes.try_into()?))
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0 {
            if b.is_ascii_graphic() {
                fmt::Write::write_char(f, char::from(b))?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageId({self})")
    }
}

/// A message delivered by nsqd.
///
/// `body` is a slice of the read buffer the frame was decoded from: no copy was made.
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    /// When the message was published, in nanoseconds since the Unix epoch (server clock).
    pub timestamp: i64,
    /// How many times nsqd has delivered this message, this delivery included.
    pub attempts: u16,
    /// The id to echo in FIN, REQ and TOUCH.
    pub id: MessageId,
    /// The message payload.
    pub body: Bytes,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("attempts", &self.attempts)
            .field("timestamp", &self.timestamp)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// The data of a response frame (frame type 0).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response {
    /// `OK`.
    Ok,
    /// `_heartbeat_`: must be answered with NOP, and is never a reply to a command.
    Heartbeat,
    /// `CLOSE_WAIT`: the reply to CLS.
    CloseWait,
    /// Any other response body (JSON replies to IDENTIFY and AUTH).
    Other(Bytes),
}

impl Response {
    /// Classifies response data.
    pub fn from_data(data: Bytes) -> Response {
        match &data[..] {
            b"OK" => Response::Ok,
            b"_heartbeat_" => Response::Heartbeat,
            b"CLOSE_WAIT" => Response::CloseWait,
            _ => Response::Other(data),
        }
    }

    /// The response body as it was on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Response::Ok => b"OK",
            Response::Heartbeat => b"_heartbeat_",
            Response::CloseWait => b"CLOSE_WAIT",
            Response::Other(data) => data,
        }
    }
}

/// One decoded server frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// A response (type 0).
    Response(Response),
    /// An error (type 1).
    Error(ServerError),
    /// A message (type 2).
    Message(Message),
}

/// Why a byte stream could not be decoded into frames. Every variant is fatal for the
/// connection: the stream cannot be resynchronised.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The first four bytes read `HTTP`: the address is an HTTP port, not nsqd's TCP port.
    HttpPort,
    /// The server answered `E_BAD_PROTOCOL` outside any frame: nsqlookupd's TCP port (4160 by
    /// default), which speaks only its own protocol, not nsqd's TCP port.
    LookupdTcpPort,
    /// The size field is smaller than the 4-byte frame type it must contain.
    FrameTooSmall {
        /// The size field as received.
        size: u32,
    },
    /// The size field exceeds the configured limit; nothing was allocated for it.
    FrameTooLarge {
        /// The size field as received.
        size: u32,
        /// The configured limit.
        max: u32,
    },
    /// A frame type other than 0, 1 or 2.
    UnknownFrameType(u32),
    /// A message frame whose data is shorter than the 26-byte message header.
    MessageTooShort {
        /// The length of the frame's data.
        len: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::HttpPort => f.write_str(
                "the server answered with HTTP: this looks like nsqd's HTTP port, not its TCP port (4150 by default)",
            ),
            DecodeError::LookupdTcpPort => f.write_str(
                "the server refused the protocol with E_BAD_PROTOCOL: this looks like \
                 nsqlookupd's TCP port (4160 by default), not nsqd's TCP port (4150 by default)",
            ),
            DecodeError::FrameTooSmall { size } => {
                write!(f, "frame size {size} is smaller than the 4-byte frame type")
            }
            DecodeError::FrameTooLarge { size, max } => {
                write!(f, "frame size {size} exceeds the limit of {max} bytes")
            }
            DecodeError::UnknownFrameType(t) => write!(f, "unknown frame type {t}"),
            DecodeError::MessageTooShort { len } => write!(
                f,
                "message frame data is {len} bytes, shorter than the {MESSAGE_HEADER_LEN}-byte header"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Splits frames off a read buffer.
///
/// ```
/// use bytes::BytesMut;
/// use nsq_proto::{Frame, FrameDecoder, Response};
///
/// let mut buf = BytesMut::from(&b"\x00\x00\x00\x06\x00\x00\x00\x00OK"[..]);
/// let decoder = FrameDecoder::default();
/// assert_eq!(decoder.decode(&mut buf).unwrap(), Some(Frame::Response(Response::Ok)));
/// assert_eq!(decoder.decode(&mut buf).unwrap(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDecoder {
    max_frame_size: u32,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameDecoder {
    /// A decoder that rejects frames whose size field exceeds `max_frame_size`.
    ///
    /// The size field counts the 4-byte frame type plus the data; for messages the data holds
    /// the 26-byte header and the body. Use [`FrameDecoder::for_max_msg_size`] to derive it.
    pub const fn new(max_frame_size: u32) -> FrameDecoder {
        FrameDecoder { max_frame_size }
    }

    /// A decoder sized for message bodies up to `max_msg_size` bytes (nsqd's `--max-msg-size`).
    pub const fn for_max_msg_size(max_msg_size: u32) -> FrameDecoder {
        FrameDecoder::new(max_msg_size.saturating_add(MESSAGE_HEADER_LEN as u32 + 4))
    }

    /// The limit on a frame's size field.
    pub const fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// Splits the next whole frame off the front of `buf`.
    ///
    /// Returns `Ok(None)` when more bytes are needed; `buf` is then reserved for the rest of the
    /// frame, so the next read fills it without reallocating. The size field is checked as soon
    /// as its 4 bytes are here and the frame type as soon as its 4 bytes are, both before
    /// anything is reserved for the frame's data. On error `buf` is left as it was (apart from
    /// spare capacity); the stream cannot be resynchronised, so drop the connection.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, DecodeError> {
        let len = buf.len();
        if len < 4 {
            buf.reserve(8 - len);
            return Ok(None);
        }
        let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        self.check_size(size)?;
        if len < 8 {
            // Validate the frame type as soon as it is here, before reserving for the data.
            buf.reserve(8 - len);
            return Ok(None);
        }
        let frame_type = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        if size as usize == BAD_PROTOCOL.len() && buf[4..8] == BAD_PROTOCOL[..4] {
            return Err(DecodeError::LookupdTcpPort);
        }
        check_frame_type(frame_type, size)?;
        let total = 4 + size as usize;
        if len < total {
            buf.reserve(total - len);
            return Ok(None);
        }
        let mut frame = buf.split_to(total).freeze();
        if frame_type == FRAME_TYPE_MESSAGE {
            return Ok(Some(Frame::Message(decode_message(frame))));
        }
        frame.advance(8);
        Ok(Some(if frame_type == FRAME_TYPE_RESPONSE {
            Frame::Response(Response::from_data(frame))
        } else {
            Frame::Error(ServerError::from_frame_data(frame))
        }))
    }

    /// Checks a frame's size field: not `HTTP`, at least 4, at most the limit.
    fn check_size(self, size: u32) -> Result<(), DecodeError> {
        if size == HTTP_MAGIC {
            return Err(DecodeError::HttpPort);
        }
        if size < 4 {
            return Err(DecodeError::FrameTooSmall { size });
        }
        if size > self.max_frame_size {
            return Err(DecodeError::FrameTooLarge {
                size,
                max: self.max_frame_size,
            });
        }
        Ok(())
    }
}

/// Checks a frame type, and that a message frame (of `size`) can hold the message header.
fn check_frame_type(frame_type: u32, size: u32) -> Result<(), DecodeError> {
    match frame_type {
        FRAME_TYPE_MESSAGE if (size as usize - 4) < MESSAGE_HEADER_LEN => {
            Err(DecodeError::MessageTooShort {
                len: size as usize - 4,
            })
        }
        FRAME_TYPE_RESPONSE | FRAME_TYPE_ERROR | FRAME_TYPE_MESSAGE => Ok(()),
        other => Err(DecodeError::UnknownFrameType(other)),
    }
}

/// Decodes a whole message frame (size and type included) already known to hold at least the
/// 26-byte message header; the body is the rest of it, one `advance` and no copy.
fn decode_message(mut frame: Bytes) -> Message {
    const BODY_START: usize = 8 + MESSAGE_HEADER_LEN;
    let h = &frame[8..BODY_START];
    let timestamp = i64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    let attempts = u16::from_be_bytes([h[8], h[9]]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&h[10..26]);
    frame.advance(BODY_START);
    Message {
        timestamp,
        attempts,
        id: MessageId(id),
        body: frame,
    }
}

/// Writes a frame as nsqd would: `size | frame_type | data`. For tests, fakes and tools.
pub fn encode_frame(buf: &mut impl bytes::BufMut, frame_type: u32, data: &[u8]) {
    buf.put_u32(data.len() as u32 + 4);
    buf.put_u32(frame_type);
    buf.put_slice(data);
}

/// Writes a message frame as nsqd would. For tests, fakes and tools.
pub fn encode_message_frame(buf: &mut impl bytes::BufMut, message: &Message) {
    buf.put_u32((MESSAGE_HEADER_LEN + message.body.len()) as u32 + 4);
    buf.put_u32(FRAME_TYPE_MESSAGE);
    buf.put_i64(message.timestamp);
    buf.put_u16(message.attempts);
    buf.put_slice(message.id.as_bytes());
    buf.put_slice(&message.body);
}
