//! The layer stack between the socket and the frames: TLS, then snappy or DEFLATE
//! compression, as negotiated during the handshake. Incoming bytes are pushed in and
//! plaintext pulled out a bounded chunk at a time; outgoing plaintext goes through
//! compression, then TLS.

use super::events::CloseReason;
use super::tls::{self, TlsError};
use super::{deflate, snappy};
use bytes::BytesMut;

/// Largest amount of plaintext produced by the TLS / decompression layers in one step, so a
/// small compressed input can never expand into an unbounded buffer.
const PULL_CHUNK: usize = 64 * 1024;

#[derive(Debug)]
// Without the `snappy` / `deflate` feature a variant holds an uninhabited stand-in and is
// never built.
#[cfg_attr(not(all(feature = "snappy", feature = "deflate")), allow(dead_code))]
pub(super) enum Codec {
    Snappy(snappy::SnappyDecoder, Box<snappy::SnappyEncoder>),
    Deflate(deflate::DeflateDecoder, deflate::DeflateEncoder),
}

impl Codec {
    pub(super) fn push(&mut self, data: &[u8]) {
        match self {
            Codec::Snappy(d, _) => d.push(data),
            Codec::Deflate(d, _) => d.push(data),
        }
    }

    pub(super) fn pull(&mut self, out: &mut BytesMut) -> Result<usize, CloseReason> {
        match self {
            Codec::Snappy(d, _) => d.pull(out).map_err(CloseReason::Snappy),
            Codec::Deflate(d, _) => d.pull(out, PULL_CHUNK).map_err(CloseReason::Deflate),
        }
    }

    pub(super) fn encode(&mut self, data: &[u8], out: &mut BytesMut) {
        match self {
            Codec::Snappy(_, e) => e.encode(data, out),
            Codec::Deflate(_, e) => e.encode(data, out),
        }
    }

    pub(super) fn buffered(&self) -> usize {
        match self {
            Codec::Snappy(d, _) => d.buffered(),
            Codec::Deflate(d, _) => d.buffered(),
        }
    }
}

/// Outcome of asking the layers for more plaintext.
pub(super) enum Fill {
    More,
    Idle,
    Eof,
}

/// The layers of one connection: none (plain text), TLS, compression, or TLS carrying
/// compression. Started by the handshake, in nsqd's order (TLS first).
#[derive(Default)]
pub(super) struct Layers {
    tls: Option<tls::TlsLayer>,
    codec: Option<Codec>,
    /// Scratch buffers for layer stacking.
    tls_plain: BytesMut,
    stage: BytesMut,
}

impl Layers {
    /// No layer: frames are read straight off the socket's bytes.
    pub(super) fn is_plain(&self) -> bool {
        self.tls.is_none() && self.codec.is_none()
    }

    /// TLS is on.
    pub(super) fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The compression layer, if any (for `Debug`).
    pub(super) fn codec(&self) -> Option<&Codec> {
        self.codec.as_ref()
    }

    /// Turns TLS on; `layer` already holds the bytes that followed the IDENTIFY reply.
    pub(super) fn start_tls(&mut self, layer: tls::TlsLayer) {
        self.tls = Some(layer);
    }

    /// Turns compression on; `codec` already holds the bytes that followed the reply before.
    pub(super) fn start_compression(&mut self, codec: Codec) {
        self.codec = Some(codec);
    }

    /// Socket bytes for the outermost layer (there must be one).
    pub(super) fn push(&mut self, data: &[u8]) {
        if let Some(tls) = &mut self.tls {
            tls.push(data);
        } else if let Some(codec) = &mut self.codec {
            codec.push(data);
        }
    }

    /// Moves up to one chunk of plaintext from the layers into `rbuf` (TLS records the
    /// layer must send, such as alerts, go to `out`).
    pub(super) fn fill(
        &mut self,
        rbuf: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<Fill, CloseReason> {
        match (&mut self.tls, &mut self.codec) {
            (None, None) => Ok(Fill::Idle),
            (Some(tls), None) => {
                match tls.pull(rbuf, PULL_CHUNK, out).map_err(CloseReason::Tls)? {
                    tls::TlsPull::Data => Ok(Fill::More),
                    tls::TlsPull::NeedInput => Ok(Fill::Idle),
                    tls::TlsPull::Closed => Ok(Fill::Eof),
                }
            }
            (None, Some(codec)) => Ok(if codec.pull(rbuf)? > 0 {
                Fill::More
            } else {
                Fill::Idle
            }),
            (Some(tls), Some(codec)) => loop {
                if codec.pull(rbuf)? > 0 {
                    return Ok(Fill::More);
                }
                self.tls_plain.clear();
                match tls
                    .pull(&mut self.tls_plain, PULL_CHUNK, out)
                    .map_err(CloseReason::Tls)?
                {
                    tls::TlsPull::Data => codec.push(&self.tls_plain),
                    tls::TlsPull::NeedInput => return Ok(Fill::Idle),
                    tls::TlsPull::Closed => return Ok(Fill::Eof),
                }
            },
        }
    }

    /// Passes the plaintext commands in `wbuf` through compression and TLS into `out`,
    /// leaving `wbuf` empty.
    pub(super) fn write(
        &mut self,
        wbuf: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<(), TlsError> {
        match (&mut self.tls, &mut self.codec) {
            (None, None) => {
                if out.is_empty() {
                    std::mem::swap(out, wbuf);
                } else {
                    out.extend_from_slice(wbuf);
                    wbuf.clear();
                }
            }
            (None, Some(codec)) => {
                codec.encode(wbuf, out);
                wbuf.clear();
            }
            (Some(tls), None) => {
                tls.write(wbuf, out)?;
                wbuf.clear();
            }
            (Some(tls), Some(codec)) => {
                self.stage.clear();
                codec.encode(wbuf, &mut self.stage);
                tls.write(&self.stage, out)?;
                wbuf.clear();
            }
        }
        Ok(())
    }

    /// Queues TLS close_notify into `out` (nothing without TLS).
    pub(super) fn close_notify(&mut self, out: &mut BytesMut) -> Result<(), TlsError> {
        match &mut self.tls {
            Some(tls) => tls.close_notify(out),
            None => Ok(()),
        }
    }

    /// Bytes held inside the layers, not yet pulled out as plaintext.
    #[cfg_attr(
        not(any(feature = "fuzzing", feature = "test-support")),
        expect(
            dead_code,
            reason = "read only by Connection::buffered_input, a fuzzing and test aid"
        )
    )]
    pub(super) fn buffered(&self) -> usize {
        self.tls.as_ref().map_or(0, tls::TlsLayer::buffered)
            + self.codec.as_ref().map_or(0, Codec::buffered)
    }
}
