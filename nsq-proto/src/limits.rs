//! What a command may carry: nsqd's limits ([`Limits`], with nsqd's defaults) and
//! [`CommandError`], why a command was refused before anything was written. A leaf module:
//! the encoders in `command` and the IDENTIFY checks in `identify` both use it.

use crate::frame::DEFAULT_MAX_MSG_SIZE;
use std::fmt;
use std::time::Duration;

/// nsqd's default `--max-body-size` (5 MiB): the limit on an MPUB body.
pub const DEFAULT_MAX_BODY_SIZE: u32 = 5 * 1024 * 1024;

/// nsqd's default `--max-req-timeout` (1 hour): the longest REQ and DPUB delay.
pub const DEFAULT_MAX_REQ_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The server limits the encoders check before writing.
///
/// They mirror nsqd's `--max-msg-size`, `--max-body-size` and `--max-req-timeout`; the defaults
/// are nsqd's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single message body, in bytes.
    pub max_msg_size: u32,
    /// Largest MPUB body (count field plus every length-prefixed message), in bytes.
    pub max_body_size: u32,
    /// Longest DPUB / REQ delay.
    pub max_req_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_msg_size: DEFAULT_MAX_MSG_SIZE,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            max_req_timeout: DEFAULT_MAX_REQ_TIMEOUT,
        }
    }
}

/// Why a command was not encoded. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandError {
    /// A message body is empty (nsqd answers `E_BAD_MESSAGE`).
    EmptyBody,
    /// A message body exceeds `max_msg_size`.
    BodyTooLarge {
        /// Position of the message in an MPUB batch (0 for PUB and DPUB).
        index: usize,
        /// Its length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// An MPUB batch holds no messages.
    EmptyBatch,
    /// An empty message inside an MPUB batch.
    EmptyBodyInBatch {
        /// Position of the empty message.
        index: usize,
    },
    /// An MPUB body exceeds `max_body_size`.
    BatchTooLarge {
        /// The size of the MPUB body.
        len: u64,
        /// The limit.
        max: u32,
    },
    /// A DPUB or REQ delay exceeds `max_req_timeout`.
    DelayTooLong {
        /// The requested delay.
        delay: Duration,
        /// The limit.
        max: Duration,
    },
    /// The AUTH secret is empty.
    EmptySecret,
    /// An IDENTIFY field is outside the range nsqd accepts.
    InvalidIdentify(&'static str),
    /// The IDENTIFY body could not be serialised.
    Serialize(String),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::EmptyBody => f.write_str("message body is empty"),
            CommandError::BodyTooLarge { index, len, max } => write!(
                f,
                "message {index} is {len} bytes, larger than max_msg_size {max}"
            ),
            CommandError::EmptyBatch => f.write_str("MPUB needs at least one message"),
            CommandError::EmptyBodyInBatch { index } => {
                write!(f, "message {index} of the MPUB batch is empty")
            }
            CommandError::BatchTooLarge { len, max } => write!(
                f,
                "MPUB body is {len} bytes, larger than max_body_size {max}"
            ),
            CommandError::DelayTooLong { delay, max } => {
                write!(f, "delay {delay:?} exceeds max_req_timeout {max:?}")
            }
            CommandError::EmptySecret => f.write_str("AUTH secret is empty"),
            CommandError::InvalidIdentify(why) => write!(f, "invalid IDENTIFY: {why}"),
            CommandError::Serialize(e) => write!(f, "cannot serialise IDENTIFY: {e}"),
        }
    }
}

impl std::error::Error for CommandError {}
