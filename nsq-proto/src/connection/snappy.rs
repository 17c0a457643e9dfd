//! The snappy framing format (the "stream" format nsqd speaks), as incremental byte transforms.
//!
//! A stream is a sequence of chunks: `u8 type | u24 little-endian length | data`. The first
//! chunk is the stream identifier `sNaPpY`; data chunks carry a masked CRC-32C of their
//! uncompressed content followed by either a snappy block (type 0) or raw bytes (type 1), each
//! at most 64 KiB uncompressed. Block (de)compression is `snap::raw` and the checksum the
//! `crc32c` crate; the framing is here, not `snap::read` / `snap::write`, because those wrap a
//! blocking `std::io::Read` / `Write`: a sans-IO core is handed whatever bytes arrived, often
//! half a chunk, and must stop there and resume on the next input without a reader to block
//! on. This decoder keeps the partial chunk, bounds every allocation by the chunk header it has
//! checked, and hands out plaintext in bounded pulls.

#[cfg(feature = "snappy")]
use bytes::{Buf, BufMut, BytesMut};
use std::fmt;

#[cfg(not(feature = "snappy"))]
pub(crate) use super::disabled::snappy::{SnappyDecoder, SnappyEncoder};

#[cfg(feature = "snappy")]
const CHUNK_COMPRESSED: u8 = 0x00;
#[cfg(feature = "snappy")]
const CHUNK_UNCOMPRESSED: u8 = 0x01;
#[cfg(feature = "snappy")]
const CHUNK_PADDING: u8 = 0xfe;
#[cfg(feature = "snappy")]
const CHUNK_STREAM_ID: u8 = 0xff;
#[cfg(feature = "snappy")]
const STREAM_ID_BODY: &[u8; 6] = b"sNaPpY";
/// The stream identifier chunk, written once at the start of every stream.
#[cfg(feature = "snappy")]
const STREAM_ID_CHUNK: &[u8; 10] = b"\xff\x06\x00\x00sNaPpY";

/// Largest uncompressed payload of one data chunk (64 KiB).
#[cfg(feature = "snappy")]
pub(crate) const MAX_BLOCK: usize = 65_536;

/// Largest data-chunk length accepted: checksum plus the worst case of a compressed block.
#[cfg(feature = "snappy")]
fn max_chunk_len() -> usize {
    4 + snap::raw::max_compress_len(MAX_BLOCK)
}

/// Why a snappy stream could not be decoded. Fatal for the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnappyError {
    /// The stream did not start with the `sNaPpY` stream identifier chunk.
    MissingStreamIdentifier,
    /// A stream identifier chunk with the wrong content.
    BadStreamIdentifier,
    /// A data chunk is longer than a 64 KiB block can ever need.
    ChunkTooLarge {
        /// The chunk type.
        chunk_type: u8,
        /// Its declared length.
        len: usize,
    },
    /// A data chunk too short to hold its checksum.
    ChunkTooSmall {
        /// Its declared length.
        len: usize,
    },
    /// A reserved chunk type the format says must not be skipped (0x02..=0x7f).
    UnskippableChunk(u8),
    /// A block's masked CRC-32C does not match its content.
    ChecksumMismatch {
        /// Checksum carried by the chunk.
        expected: u32,
        /// Checksum of the decoded data.
        actual: u32,
    },
    /// The compressed block is invalid or decodes to more than 64 KiB.
    Corrupt(String),
}

impl fmt::Display for SnappyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnappyError::MissingStreamIdentifier => {
                f.write_str("snappy stream does not start with a stream identifier")
            }
            SnappyError::BadStreamIdentifier => f.write_str("bad snappy stream identifier"),
            SnappyError::ChunkTooLarge { chunk_type, len } => {
                write!(
                    f,
                    "snappy chunk of type {chunk_type:#04x} is too large ({len} bytes)"
                )
            }
            SnappyError::ChunkTooSmall { len } => {
                write!(
                    f,
                    "snappy data chunk of {len} bytes cannot hold its checksum"
                )
            }
            SnappyError::UnskippableChunk(t) => {
                write!(f, "reserved unskippable snappy chunk type {t:#04x}")
            }
            SnappyError::ChecksumMismatch { expected, actual } => write!(
                f,
                "snappy checksum mismatch: chunk says {expected:#010x}, data has {actual:#010x}"
            ),
            SnappyError::Corrupt(e) => write!(f, "corrupt snappy block: {e}"),
        }
    }
}

impl std::error::Error for SnappyError {}

/// Incremental decoder: push compressed bytes in, pull plaintext out one chunk at a time.
#[cfg(feature = "snappy")]
#[derive(Default)]
pub(crate) struct SnappyDecoder {
    input: BytesMut,
    seen_stream_id: bool,
    /// Bytes of a skippable chunk still to be discarded.
    skipping: usize,
    decoder: snap::raw::Decoder,
}

#[cfg(feature = "snappy")]
impl fmt::Debug for SnappyDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnappyDecoder")
            .field("buffered", &self.input.len())
            .field("seen_stream_id", &self.seen_stream_id)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "snappy")]
impl SnappyDecoder {
    /// Appends compressed bytes.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
    }

    /// Bytes pushed but not decoded yet.
    pub(crate) fn buffered(&self) -> usize {
        self.input.len()
    }

    /// Decodes at most one data chunk into `out`. Returns the number of plaintext bytes
    /// appended (0 when more input is needed).
    pub(crate) fn pull(&mut self, out: &mut BytesMut) -> Result<usize, SnappyError> {
        loop {
            if self.skipping > 0 {
                let n = self.skipping.min(self.input.len());
                self.input.advance(n);
                self.skipping -= n;
                if self.skipping > 0 {
                    return Ok(0);
                }
            }
            if self.input.len() < 4 {
                return Ok(0);
            }
            let chunk_type = self.input[0];
            let len = usize::from(self.input[1])
                | usize::from(self.input[2]) << 8
                | usize::from(self.input[3]) << 16;
            if !self.seen_stream_id && chunk_type != CHUNK_STREAM_ID {
                return Err(SnappyError::MissingStreamIdentifier);
            }
            match chunk_type {
                CHUNK_STREAM_ID => {
                    if len != STREAM_ID_BODY.len() {
                        return Err(SnappyError::BadStreamIdentifier);
                    }
                    if self.input.len() < 4 + len {
                        return Ok(0);
                    }
                    if &self.input[4..10] != STREAM_ID_BODY {
                        return Err(SnappyError::BadStreamIdentifier);
                    }
                    self.input.advance(10);
                    self.seen_stream_id = true;
                }
                CHUNK_COMPRESSED | CHUNK_UNCOMPRESSED => {
                    let max = if chunk_type == CHUNK_COMPRESSED {
                        max_chunk_len()
                    } else {
                        4 + MAX_BLOCK
                    };
                    if len > max {
                        return Err(SnappyError::ChunkTooLarge { chunk_type, len });
                    }
                    if len < 4 {
                        return Err(SnappyError::ChunkTooSmall { len });
                    }
                    if self.input.len() < 4 + len {
                        self.input.reserve(4 + len - self.input.len());
                        return Ok(0);
                    }
                    let expected = u32::from_le_bytes([
                        self.input[4],
                        self.input[5],
                        self.input[6],
                        self.input[7],
                    ]);
                    let payload = &self.input[8..4 + len];
                    let start = out.len();
                    if chunk_type == CHUNK_COMPRESSED {
                        let n = snap::raw::decompress_len(payload)
                            .map_err(|e| SnappyError::Corrupt(e.to_string()))?;
                        if n > MAX_BLOCK {
                            return Err(SnappyError::Corrupt(format!(
                                "block decodes to {n} bytes, more than {MAX_BLOCK}"
                            )));
                        }
                        out.resize(start + n, 0);
                        if let Err(e) = self.decoder.decompress(payload, &mut out[start..]) {
                            out.truncate(start);
                            return Err(SnappyError::Corrupt(e.to_string()));
                        }
                    } else {
                        out.extend_from_slice(payload);
                    }
                    let actual = masked_crc32c(&out[start..]);
                    if actual != expected {
                        out.truncate(start);
                        return Err(SnappyError::ChecksumMismatch { expected, actual });
                    }
                    self.input.advance(4 + len);
                    let n = out.len() - start;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                0x02..=0x7f => return Err(SnappyError::UnskippableChunk(chunk_type)),
                _ => {
                    // 0x80..=0xfd reserved skippable, 0xfe padding: discard without buffering.
                    debug_assert!(chunk_type >= 0x80 || chunk_type == CHUNK_PADDING);
                    self.input.advance(4);
                    self.skipping = len;
                }
            }
        }
    }
}

/// Encoder: every call writes whole chunks, so each batch is decodable on its own.
#[cfg(feature = "snappy")]
pub(crate) struct SnappyEncoder {
    wrote_stream_id: bool,
    encoder: snap::raw::Encoder,
}

#[cfg(feature = "snappy")]
impl Default for SnappyEncoder {
    fn default() -> Self {
        SnappyEncoder {
            wrote_stream_id: false,
            encoder: snap::raw::Encoder::new(),
        }
    }
}

#[cfg(feature = "snappy")]
impl fmt::Debug for SnappyEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnappyEncoder")
            .field("wrote_stream_id", &self.wrote_stream_id)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "snappy")]
impl SnappyEncoder {
    /// Appends the framed encoding of `data` to `out`.
    pub(crate) fn encode(&mut self, data: &[u8], out: &mut BytesMut) {
        if !self.wrote_stream_id {
            out.put_slice(STREAM_ID_CHUNK);
            self.wrote_stream_id = true;
        }
        for block in data.chunks(MAX_BLOCK) {
            let crc = masked_crc32c(block);
            let header_at = out.len();
            out.put_slice(&[0; 8]);
            let body_at = out.len();
            out.resize(body_at + snap::raw::max_compress_len(block.len()), 0);
            let compressed = self.encoder.compress(block, &mut out[body_at..]).ok();
            // Keep the block uncompressed when compression saves less than 1/8 (as the
            // reference implementation does) or failed.
            let (chunk_type, n) = match compressed {
                Some(n) if n < block.len() - block.len() / 8 => (CHUNK_COMPRESSED, n),
                _ => {
                    out.truncate(body_at);
                    out.put_slice(block);
                    (CHUNK_UNCOMPRESSED, block.len())
                }
            };
            out.truncate(body_at + n);
            let len = (n + 4) as u32;
            let header = &mut out[header_at..body_at];
            header[0] = chunk_type;
            header[1..4].copy_from_slice(&len.to_le_bytes()[..3]);
            header[4..8].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// CRC-32C (Castagnoli) of `data`: the `crc32c` crate, which uses the CPU's CRC instructions
/// (SSE 4.2, ARMv8) where present and a table-driven fallback elsewhere.
#[cfg(feature = "snappy")]
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The masked checksum the snappy framing format stores.
#[cfg(feature = "snappy")]
pub(crate) fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(feature = "snappy")]
#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn crc32c_known_values() {
        // RFC 3720 B.4 test vectors.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46dd_794e);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn encoder_output_reads_with_snap() {
        let data: Vec<u8> = (0..200_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 7) as u8)
            .collect();
        let mut enc = SnappyEncoder::default();
        let mut out = BytesMut::new();
        enc.encode(&data[..100], &mut out);
        enc.encode(&data[100..], &mut out);
        let mut decoded = Vec::new();
        snap::read::FrameDecoder::new(&out[..])
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, data);
    }

    #[test]
    fn decoder_reads_snap_output_byte_by_byte() {
        let data: Vec<u8> = (0..150_000u32).map(|i| (i * 31 % 253) as u8).collect();
        let mut w = snap::write::FrameEncoder::new(Vec::new());
        w.write_all(&data).unwrap();
        let wire = w.into_inner().unwrap();
        let mut dec = SnappyDecoder::default();
        let mut out = BytesMut::new();
        for b in &wire {
            dec.push(std::slice::from_ref(b));
            while dec.pull(&mut out).unwrap() > 0 {}
        }
        assert_eq!(&out[..], &data[..]);
        assert_eq!(dec.buffered(), 0);
    }

    #[test]
    fn decoder_rejects_bad_input() {
        let mut dec = SnappyDecoder::default();
        dec.push(b"\x00\x05\x00\x00abcde");
        assert_eq!(
            dec.pull(&mut BytesMut::new()),
            Err(SnappyError::MissingStreamIdentifier)
        );

        let mut dec = SnappyDecoder::default();
        dec.push(STREAM_ID_CHUNK);
        dec.push(b"\x01\x07\x00\x00\x00\x00\x00\x00abc");
        assert!(matches!(
            dec.pull(&mut BytesMut::new()),
            Err(SnappyError::ChecksumMismatch { .. })
        ));

        let mut dec = SnappyDecoder::default();
        dec.push(STREAM_ID_CHUNK);
        dec.push(b"\x00\xff\xff\xff");
        assert!(matches!(
            dec.pull(&mut BytesMut::new()),
            Err(SnappyError::ChunkTooLarge { .. })
        ));

        let mut dec = SnappyDecoder::default();
        dec.push(STREAM_ID_CHUNK);
        dec.push(b"\x05\x01\x00\x00x");
        assert_eq!(
            dec.pull(&mut BytesMut::new()),
            Err(SnappyError::UnskippableChunk(5))
        );

        // Skippable and padding chunks are discarded, even when split.
        let mut dec = SnappyDecoder::default();
        dec.push(STREAM_ID_CHUNK);
        dec.push(b"\x80\x03\x00\x00ab");
        assert_eq!(dec.pull(&mut BytesMut::new()), Ok(0));
        dec.push(b"c\xfe\x00\x00\x00");
        let mut enc = SnappyEncoder {
            wrote_stream_id: true,
            ..SnappyEncoder::default()
        };
        let mut wire = BytesMut::new();
        enc.encode(b"hello", &mut wire);
        dec.push(&wire);
        let mut out = BytesMut::new();
        assert_eq!(dec.pull(&mut out), Ok(5));
        assert_eq!(&out[..], b"hello");
    }
}
