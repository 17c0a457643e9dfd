//! Raw DEFLATE (no zlib header) as incremental byte transforms, with a sync flush after every
//! write batch so the server can decode each batch as soon as it arrives.

#[cfg(feature = "deflate")]
use bytes::{Buf, BytesMut};
#[cfg(feature = "deflate")]
use flate2::{Compress, Decompress, FlushCompress, FlushDecompress, Status};
use std::fmt;

#[cfg(not(feature = "deflate"))]
pub(crate) use super::disabled::deflate::{DeflateDecoder, DeflateEncoder};

/// Why a DEFLATE stream could not be decoded. Fatal for the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeflateError {
    /// The compressed data is invalid.
    Corrupt(String),
    /// Data arrived after the end of the DEFLATE stream.
    DataAfterEnd,
}

impl fmt::Display for DeflateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeflateError::Corrupt(e) => write!(f, "corrupt deflate stream: {e}"),
            DeflateError::DataAfterEnd => f.write_str("data after the end of the deflate stream"),
        }
    }
}

impl std::error::Error for DeflateError {}

/// Incremental inflater with a bounded output per call.
#[cfg(feature = "deflate")]
pub(crate) struct DeflateDecoder {
    input: BytesMut,
    inflate: Decompress,
    ended: bool,
    /// The last pull filled its output: the inflater may hold more output without input.
    maybe_pending: bool,
}

#[cfg(feature = "deflate")]
impl fmt::Debug for DeflateDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeflateDecoder")
            .field("buffered", &self.input.len())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "deflate")]
impl Default for DeflateDecoder {
    fn default() -> Self {
        DeflateDecoder {
            input: BytesMut::new(),
            inflate: Decompress::new(false),
            ended: false,
            maybe_pending: false,
        }
    }
}

#[cfg(feature = "deflate")]
impl DeflateDecoder {
    /// Appends compressed bytes.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
    }

    /// Bytes pushed but not consumed yet.
    pub(crate) fn buffered(&self) -> usize {
        self.input.len()
    }

    /// Inflates at most `max` bytes into `out`; returns how many were appended (0 when more
    /// input is needed).
    pub(crate) fn pull(&mut self, out: &mut BytesMut, max: usize) -> Result<usize, DeflateError> {
        if self.input.is_empty() && !self.maybe_pending {
            return Ok(0);
        }
        if self.ended {
            if self.input.is_empty() {
                return Ok(0);
            }
            return Err(DeflateError::DataAfterEnd);
        }
        // Size the output window to the input (deflate rarely expands more than ~8x in
        // practice; more output just takes further calls), so small reads stay cheap.
        let max = max.min(self.input.len().saturating_mul(8).max(4096));
        let start = out.len();
        out.resize(start + max, 0);
        let mut produced = 0;
        loop {
            let (in0, out0) = (self.inflate.total_in(), self.inflate.total_out());
            let status = self.inflate.decompress(
                &self.input,
                &mut out[start + produced..],
                FlushDecompress::None,
            );
            let consumed = (self.inflate.total_in() - in0) as usize;
            let made = (self.inflate.total_out() - out0) as usize;
            self.input.advance(consumed);
            produced += made;
            match status {
                Ok(Status::StreamEnd) => {
                    self.ended = true;
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    out.truncate(start);
                    return Err(DeflateError::Corrupt(e.to_string()));
                }
            }
            if produced == max || (consumed == 0 && made == 0) || self.input.is_empty() {
                break;
            }
        }
        self.maybe_pending = produced == max;
        out.truncate(start + produced);
        Ok(produced)
    }
}

/// Deflater: each `encode` call ends in a sync flush.
#[cfg(feature = "deflate")]
pub(crate) struct DeflateEncoder {
    deflate: Compress,
}

#[cfg(feature = "deflate")]
impl fmt::Debug for DeflateEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeflateEncoder").finish_non_exhaustive()
    }
}

#[cfg(feature = "deflate")]
impl DeflateEncoder {
    /// A raw deflater at `level` (0..=9).
    pub(crate) fn new(level: u32) -> DeflateEncoder {
        DeflateEncoder {
            deflate: Compress::new(flate2::Compression::new(level.min(9)), false),
        }
    }

    /// Appends the compressed form of `data`, sync-flushed, to `out`.
    pub(crate) fn encode(&mut self, mut data: &[u8], out: &mut BytesMut) {
        loop {
            let start = out.len();
            let room = data.len() + data.len() / 8 + 64;
            out.resize(start + room, 0);
            let (in0, out0) = (self.deflate.total_in(), self.deflate.total_out());
            // Compressing into memory with a sync flush cannot fail: errors only come from a
            // misuse of the zlib state, which this wrapper never does.
            let _ = self
                .deflate
                .compress(data, &mut out[start..], FlushCompress::Sync);
            let consumed = (self.deflate.total_in() - in0) as usize;
            let made = (self.deflate.total_out() - out0) as usize;
            out.truncate(start + made);
            data = &data[consumed..];
            if data.is_empty() && made < room {
                return;
            }
        }
    }
}

#[cfg(feature = "deflate")]
#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn encoder_batches_inflate_with_flate2() {
        let mut enc = DeflateEncoder::new(6);
        let mut wire = BytesMut::new();
        let mut inflater = flate2::write::DeflateDecoder::new(Vec::new());
        let mut expected = Vec::new();
        for i in 0..50u32 {
            let batch: Vec<u8> = (0..i * 997).map(|j| (j % 13) as u8 + b'a').collect();
            expected.extend_from_slice(&batch);
            let before = wire.len();
            enc.encode(&batch, &mut wire);
            // Each batch is decodable on its own thanks to the sync flush.
            inflater.write_all(&wire[before..]).unwrap();
            inflater.flush().unwrap();
            assert_eq!(inflater.get_ref().len(), expected.len());
        }
        assert_eq!(inflater.get_ref(), &expected);
    }

    #[test]
    fn decoder_reads_flate2_output_with_bounded_pulls() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 7) as u8).collect();
        let mut w = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(9));
        w.write_all(&data).unwrap();
        w.flush().unwrap();
        let wire = w.get_ref().clone();
        let mut dec = DeflateDecoder::default();
        let mut out = BytesMut::new();
        for piece in wire.chunks(100) {
            dec.push(piece);
            loop {
                let n = dec.pull(&mut out, 4096).unwrap();
                assert!(n <= 4096);
                if n == 0 {
                    break;
                }
            }
        }
        assert_eq!(&out[..], &data[..]);
        let mut garbage = DeflateDecoder::default();
        garbage.push(&[0xff; 16]);
        assert!(garbage.pull(&mut BytesMut::new(), 100).is_err());
    }
}
