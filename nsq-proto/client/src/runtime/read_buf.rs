//! A socket's read buffer, written once for the runtimes the workspace ships: what is read
//! is split off its front as the chunk the driver decodes (a message's body is a slice of
//! it: zero-copy), and the next read goes into what is left, until less than [`MIN_READ`]
//! bytes are, when a new [`READ_CHUNK`] is taken.
//!
//! Two ways to read, as the runtime's socket wants: tokio reads into spare capacity, which
//! needs no initialising ([`ReadBuf::spare`]); std's `Read` (async-io's and the poller's
//! sockets) wants initialised memory, so each chunk is zeroed once
//! ([`ReadBuf::read_zeroed`]).

use bytes::BytesMut;
#[cfg(any(feature = "async-io", feature = "blocking"))]
use std::io;

/// Bytes a read buffer takes at a time.
const READ_CHUNK: usize = 64 * 1024;

/// The least room a read is offered: with less left, a new [`READ_CHUNK`] is taken.
const MIN_READ: usize = 8 * 1024;

/// A socket's read buffer. One socket reads through one of its two ways only.
#[derive(Debug, Default)]
pub(crate) struct ReadBuf(BytesMut);

impl ReadBuf {
    /// For a read into spare capacity (tokio's `read_buf`, which appends): the buffer, with
    /// at least [`MIN_READ`] bytes of spare capacity ([`READ_CHUNK`] more reserved, nothing
    /// zeroed, when it has less). What the read appended is taken with
    /// [`split`](Self::split).
    #[cfg(feature = "tokio")]
    pub(crate) fn spare(&mut self) -> &mut BytesMut {
        if self.0.capacity() - self.0.len() < MIN_READ {
            self.0.reserve(READ_CHUNK);
        }
        &mut self.0
    }

    /// What reads into [`spare`](Self::spare) appended, split off.
    #[cfg(feature = "tokio")]
    pub(crate) fn split(&mut self) -> BytesMut {
        self.0.split()
    }

    /// For std's `Read`: reads once with `read` into the zeroed space at the buffer's front
    /// (a new zeroed [`READ_CHUNK`] when less than [`MIN_READ`] bytes are left), and splits
    /// off what it read. With it, whether the read came back short: it took something, but
    /// less than it was offered, so it drained the socket (or, at its end, found it).
    #[cfg(any(feature = "async-io", feature = "blocking"))]
    pub(crate) fn read_zeroed(
        &mut self,
        read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<(BytesMut, bool)> {
        if self.0.len() < MIN_READ {
            self.0 = BytesMut::zeroed(READ_CHUNK);
        }
        let offered = self.0.len();
        let n = read(&mut self.0[..])?;
        Ok((self.0.split_to(n), n > 0 && n < offered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(feature = "async-io", feature = "blocking"))]
    fn zeroed_reads_split_what_they_read_and_take_a_new_chunk_when_little_is_left() {
        let mut buf = ReadBuf::default();
        let (chunk, short) = buf
            .read_zeroed(|space| {
                assert_eq!(space.len(), READ_CHUNK);
                assert!(space.iter().all(|&b| b == 0), "zeroed");
                space[..3].copy_from_slice(b"abc");
                Ok(3)
            })
            .unwrap();
        assert_eq!((&chunk[..], short), (&b"abc"[..], true));
        // A read that fills what it is offered is not short; the rest is read into next.
        let (chunk, short) = buf.read_zeroed(|space| Ok(space.len())).unwrap();
        assert_eq!((chunk.len(), short), (READ_CHUNK - 3, false));
        // Nothing left: a new chunk. End of stream (0) is not short.
        let (chunk, short) = buf
            .read_zeroed(|space| {
                assert_eq!(space.len(), READ_CHUNK);
                Ok(0)
            })
            .unwrap();
        assert!(chunk.is_empty() && !short);
        // An error leaves the buffer as it was.
        buf.read_zeroed(|_| Ok(1000)).unwrap();
        let failed = buf.read_zeroed(|_| Err(io::ErrorKind::WouldBlock.into()));
        assert_eq!(failed.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        buf.read_zeroed(|space| {
            assert_eq!(space.len(), READ_CHUNK - 1000, "the same chunk");
            Ok(0)
        })
        .unwrap();
    }

    #[test]
    #[cfg(feature = "tokio")]
    fn spare_capacity_is_reserved_a_chunk_at_a_time_and_split_off_once_read() {
        let mut buf = ReadBuf::default();
        let spare = buf.spare();
        assert!(spare.capacity() >= READ_CHUNK);
        spare.extend_from_slice(&[1; 100]);
        assert_eq!(buf.split().len(), 100);
        // Enough left: nothing reserved.
        let before = buf.spare().capacity();
        assert!(before >= MIN_READ);
        assert_eq!(buf.spare().capacity(), before);
    }
}
