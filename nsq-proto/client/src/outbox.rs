//! [`Outbox`]: the bytes for one connection during one wake-up, gathered into one write.

use bytes::{Bytes, BytesMut};

/// Gathers the bytes the core emits for one connection during one wake-up, so each
/// connection gets at most one write per wake-up.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    first: Option<Bytes>,
    more: BytesMut,
}

impl Outbox {
    /// Adds bytes (no copy for the first chunk of a wake-up).
    pub(crate) fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match &self.first {
            None if self.more.is_empty() => self.first = Some(data),
            _ => {
                if let Some(first) = self.first.take() {
                    self.more.extend_from_slice(&first);
                }
                self.more.extend_from_slice(&data);
            }
        }
    }

    /// Takes everything gathered, if anything.
    pub(crate) fn take(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.more.is_empty() {
            None
        } else {
            Some(self.more.split().freeze())
        }
    }
}
