//! Server error frames: `E_CODE description`.

use bytes::Bytes;
use std::borrow::Cow;
use std::fmt;

/// The error codes nsqd sends in error frames.
///
/// Only [`ErrorCode::FinFailed`], [`ErrorCode::ReqFailed`] and [`ErrorCode::TouchFailed`] leave
/// the connection open; nsqd closes the connection after every other error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `E_INVALID`: malformed or out-of-range command, or a command in the wrong state.
    Invalid,
    /// `E_BAD_BODY`: the body of a command is malformed or too large.
    BadBody,
    /// `E_BAD_TOPIC`: invalid topic name.
    BadTopic,
    /// `E_BAD_CHANNEL`: invalid channel name.
    BadChannel,
    /// `E_BAD_MESSAGE`: a message is empty or too large.
    BadMessage,
    /// `E_PUB_FAILED`: the server failed to publish.
    PubFailed,
    /// `E_MPUB_FAILED`: the server failed to multi-publish.
    MpubFailed,
    /// `E_DPUB_FAILED`: the server failed to deferred-publish.
    DpubFailed,
    /// `E_SUB_FAILED`: the server failed to subscribe.
    SubFailed,
    /// `E_IDENTIFY_FAILED`: IDENTIFY was rejected.
    IdentifyFailed,
    /// `E_AUTH_FAILED`: the auth server could not be reached or answered badly.
    AuthFailed,
    /// `E_AUTH_ERROR`: authentication failed.
    AuthError,
    /// `E_AUTH_FIRST`: the server requires AUTH before this command.
    AuthFirst,
    /// `E_AUTH_DISABLED`: AUTH sent to a server that does not require it.
    AuthDisabled,
    /// `E_UNAUTHORIZED`: the identity lacks the permission for this command.
    Unauthorized,
    /// `E_FIN_FAILED`: FIN for a message not in flight (non-fatal).
    FinFailed,
    /// `E_REQ_FAILED`: REQ for a message not in flight (non-fatal).
    ReqFailed,
    /// `E_TOUCH_FAILED`: TOUCH for a message not in flight (non-fatal).
    TouchFailed,
    /// A code this library does not know; treated as fatal.
    Unknown,
}

impl ErrorCode {
    /// Every known code, in declaration order (without [`ErrorCode::Unknown`]).
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::Invalid,
        ErrorCode::BadBody,
        ErrorCode::BadTopic,
        ErrorCode::BadChannel,
        ErrorCode::BadMessage,
        ErrorCode::PubFailed,
        ErrorCode::MpubFailed,
        ErrorCode::DpubFailed,
        ErrorCode::SubFailed,
        ErrorCode::IdentifyFailed,
        ErrorCode::AuthFailed,
        ErrorCode::AuthError,
        ErrorCode::AuthFirst,
        ErrorCode::AuthDisabled,
        ErrorCode::Unauthorized,
        ErrorCode::FinFailed,
        ErrorCode::ReqFailed,
        ErrorCode::TouchFailed,
    ];

    /// Parses the code token of an error frame (`E_INVALID`, ...).
    pub fn from_bytes(code: &[u8]) -> ErrorCode {
        match code {
            b"E_INVALID" => ErrorCode::Invalid,
            b"E_BAD_BODY" => ErrorCode::BadBody,
            b"E_BAD_TOPIC" => ErrorCode::BadTopic,
            b"E_BAD_CHANNEL" => ErrorCode::BadChannel,
            b"E_BAD_MESSAGE" => ErrorCode::BadMessage,
            b"E_PUB_FAILED" => ErrorCode::PubFailed,
            b"E_MPUB_FAILED" => ErrorCode::MpubFailed,
            b"E_DPUB_FAILED" => ErrorCode::DpubFailed,
            b"E_SUB_FAILED" => ErrorCode::SubFailed,
            b"E_IDENTIFY_FAILED" => ErrorCode::IdentifyFailed,
            b"E_AUTH_FAILED" => ErrorCode::AuthFailed,
            b"E_AUTH_ERROR" => ErrorCode::AuthError,
            b"E_AUTH_FIRST" => ErrorCode::AuthFirst,
            b"E_AUTH_DISABLED" => ErrorCode::AuthDisabled,
            b"E_UNAUTHORIZED" => ErrorCode::Unauthorized,
            b"E_FIN_FAILED" => ErrorCode::FinFailed,
            b"E_REQ_FAILED" => ErrorCode::ReqFailed,
            b"E_TOUCH_FAILED" => ErrorCode::TouchFailed,
            _ => ErrorCode::Unknown,
        }
    }

    /// The wire token of this code (`"E_UNKNOWN"` for [`ErrorCode::Unknown`]).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "E_INVALID",
            ErrorCode::BadBody => "E_BAD_BODY",
            ErrorCode::BadTopic => "E_BAD_TOPIC",
            ErrorCode::BadChannel => "E_BAD_CHANNEL",
            ErrorCode::BadMessage => "E_BAD_MESSAGE",
            ErrorCode::PubFailed => "E_PUB_FAILED",
            ErrorCode::MpubFailed => "E_MPUB_FAILED",
            ErrorCode::DpubFailed => "E_DPUB_FAILED",
            ErrorCode::SubFailed => "E_SUB_FAILED",
            ErrorCode::IdentifyFailed => "E_IDENTIFY_FAILED",
            ErrorCode::AuthFailed => "E_AUTH_FAILED",
            ErrorCode::AuthError => "E_AUTH_ERROR",
            ErrorCode::AuthFirst => "E_AUTH_FIRST",
            ErrorCode::AuthDisabled => "E_AUTH_DISABLED",
            ErrorCode::Unauthorized => "E_UNAUTHORIZED",
            ErrorCode::FinFailed => "E_FIN_FAILED",
            ErrorCode::ReqFailed => "E_REQ_FAILED",
            ErrorCode::TouchFailed => "E_TOUCH_FAILED",
            ErrorCode::Unknown => "E_UNKNOWN",
        }
    }

    /// Whether nsqd closes the connection after sending this error.
    ///
    /// Everything but `E_FIN_FAILED`, `E_REQ_FAILED` and `E_TOUCH_FAILED` is fatal, including
    /// unknown codes (assuming the worst keeps publish replies from being mismatched).
    pub fn is_fatal(self) -> bool {
        !matches!(
            self,
            ErrorCode::FinFailed | ErrorCode::ReqFailed | ErrorCode::TouchFailed
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error frame received from nsqd.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerError {
    code: ErrorCode,
    raw: Bytes,
}

impl ServerError {
    /// Parses the data of an error frame (`E_CODE description`). Never fails: an unknown code
    /// becomes [`ErrorCode::Unknown`] and the raw text stays available.
    pub fn from_frame_data(raw: Bytes) -> ServerError {
        let token_end = raw.iter().position(|&b| b == b' ').unwrap_or(raw.len());
        let code = ErrorCode::from_bytes(&raw[..token_end]);
        ServerError { code, raw }
    }

    /// Builds an error with the given code and description, as nsqd would send it.
    pub fn new(code: ErrorCode, description: &str) -> ServerError {
        let mut raw = Vec::with_capacity(code.as_str().len() + 1 + description.len());
        raw.extend_from_slice(code.as_str().as_bytes());
        if !description.is_empty() {
            raw.push(b' ');
            raw.extend_from_slice(description.as_bytes());
        }
        ServerError {
            code,
            raw: raw.into(),
        }
    }

    /// The parsed code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The code token exactly as sent (useful for [`ErrorCode::Unknown`]).
    pub fn code_str(&self) -> Cow<'_, str> {
        let end = self
            .raw
            .iter()
            .position(|&b| b == b' ')
            .unwrap_or(self.raw.len());
        String::from_utf8_lossy(&self.raw[..end])
    }

    /// The human-readable text after the code (may be empty).
    pub fn description(&self) -> Cow<'_, str> {
        match self.raw.iter().position(|&b| b == b' ') {
            Some(i) => String::from_utf8_lossy(&self.raw[i + 1..]),
            None => Cow::Borrowed(""),
        }
    }

    /// The whole error frame data as received.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// Whether the server closes the connection after this error.
    pub fn is_fatal(&self) -> bool {
        self.code.is_fatal()
    }
}

impl fmt::Debug for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerError")
            .field("code", &self.code)
            .field("text", &String::from_utf8_lossy(&self.raw))
            .finish()
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let description = self.description();
        if description.is_empty() {
            write!(f, "nsqd error {}", self.code_str())
        } else {
            write!(f, "nsqd error {}: {description}", self.code_str())
        }
    }
}

impl std::error::Error for ServerError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_code() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_bytes(code.as_str().as_bytes()), code);
        }
        assert_eq!(ErrorCode::from_bytes(b"E_WHATEVER"), ErrorCode::Unknown);
    }

    #[test]
    fn fatality() {
        let non_fatal = [
            ErrorCode::FinFailed,
            ErrorCode::ReqFailed,
            ErrorCode::TouchFailed,
        ];
        for code in ErrorCode::ALL {
            assert_eq!(code.is_fatal(), !non_fatal.contains(&code), "{code}");
        }
        assert!(ErrorCode::Unknown.is_fatal());
    }

    #[test]
    fn parses_text() {
        let e = ServerError::from_frame_data(Bytes::from_static(b"E_FIN_FAILED FIN 0a failed"));
        assert_eq!(e.code(), ErrorCode::FinFailed);
        assert_eq!(e.code_str(), "E_FIN_FAILED");
        assert_eq!(e.description(), "FIN 0a failed");
        let e = ServerError::from_frame_data(Bytes::from_static(b"E_NEW_THING"));
        assert_eq!(e.code(), ErrorCode::Unknown);
        assert_eq!(e.code_str(), "E_NEW_THING");
        assert_eq!(e.description(), "");
    }
}
