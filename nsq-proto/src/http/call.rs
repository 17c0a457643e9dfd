//! [`Call`]: a request and how its response is read, and the errors of the APIs
//! ([`ApiError`], [`ServerMessage`]).

use super::{HttpError, Request, Response};
use serde::de::DeserializeOwned;
use std::fmt;

/// One call of nsqd's or nsqlookupd's HTTP API: the [`Request`] to send and the typed reply
/// read from its [`Response`] ([`decode`](Self::decode)). Made by the functions of
/// [`nsqd`](super::nsqd) and [`lookupd`](super::lookupd).
pub struct Call<T> {
    request: Request,
    decode: fn(&Response) -> Result<T, ApiError>,
}

impl<T> fmt::Debug for Call<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl<T> Call<T> {
    pub(crate) fn new(request: Request, decode: fn(&Response) -> Result<T, ApiError>) -> Self {
        Call { request, decode }
    }

    /// The request to send.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The typed reply in `response`, or why there is none.
    pub fn decode(&self, response: &Response) -> Result<T, ApiError> {
        (self.decode)(response)
    }
}

impl<T: DeserializeOwned> Call<T> {
    /// A call whose `200` reply is `T` as JSON.
    pub(crate) fn json(request: Request) -> Self {
        Call::new(request, decode_json)
    }
}

impl Call<()> {
    /// A call whose `200` reply carries nothing to read (an empty body, or `OK`).
    pub(crate) fn unit(request: Request) -> Self {
        Call::new(request, decode_unit)
    }
}

pub(crate) fn decode_json<T: DeserializeOwned>(response: &Response) -> Result<T, ApiError> {
    check_status(response)?;
    serde_json::from_slice(&response.body).map_err(|e| ApiError::BadReply {
        error: e.to_string(),
        body: excerpt(&response.body),
    })
}

fn decode_unit(response: &Response) -> Result<(), ApiError> {
    check_status(response)
}

/// `Ok` for a `200`; else the server's error (its `{"message": ...}`), or the status with an
/// excerpt of a body that is not one.
pub(crate) fn check_status(response: &Response) -> Result<(), ApiError> {
    if response.status == 200 {
        return Ok(());
    }
    #[derive(serde::Deserialize)]
    struct Message {
        message: String,
    }
    match serde_json::from_slice::<Message>(&response.body) {
        Ok(m) => Err(ApiError::Server {
            status: response.status,
            message: ServerMessage::from(m.message.as_str()),
        }),
        Err(_) => Err(ApiError::Status {
            status: response.status,
            body: excerpt(&response.body),
        }),
    }
}

/// The first 256 bytes of `body`, as text.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let cut = body.len().min(256);
    let mut text = String::from_utf8_lossy(&body[..cut]).into_owned();
    if cut < body.len() {
        text.push_str("...");
    }
    text
}

/// Why an HTTP API call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// The response could not be read as HTTP ([`HttpError::NotHttp`]: the address is not an
    /// HTTP port, most likely nsqd's TCP port).
    Http(HttpError),
    /// The server refused the call with one of its error messages
    /// (`{"message":"TOPIC_NOT_FOUND"}`).
    Server {
        /// The HTTP status.
        status: u16,
        /// What the server said.
        message: ServerMessage,
    },
    /// A status other than `200` whose body is not the server's error message.
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// A `200` whose body is not the reply the call expects (a server of another kind, or
    /// an incompatible version).
    BadReply {
        /// Why it could not be read.
        error: String,
        /// The start of the body.
        body: String,
    },
}

impl From<HttpError> for ApiError {
    fn from(e: HttpError) -> ApiError {
        ApiError::Http(e)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Http(e) => e.fmt(f),
            ApiError::Server { status, message } => write!(f, "HTTP {status}: {message}"),
            ApiError::Status { status, body } => write!(f, "HTTP {status}: {body:?}"),
            ApiError::BadReply { error, body } => {
                write!(f, "unexpected reply ({error}): {body:?}")
            }
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// What the server said, if it refused the call with one of its messages.
    pub fn server_message(&self) -> Option<&ServerMessage> {
        match self {
            ApiError::Server { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Whether the topic or channel named does not exist (`TOPIC_NOT_FOUND`,
    /// `CHANNEL_NOT_FOUND`).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.server_message(),
            Some(ServerMessage::TopicNotFound | ServerMessage::ChannelNotFound)
        )
    }
}

/// The error messages of nsqd's and nsqlookupd's HTTP APIs (v1.3.0), as a matchable enum.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerMessage {
    /// `TOPIC_NOT_FOUND`: no such topic.
    TopicNotFound,
    /// `CHANNEL_NOT_FOUND`: no such channel.
    ChannelNotFound,
    /// `MISSING_ARG_TOPIC`: the call needs a `topic`.
    MissingArgTopic,
    /// `MISSING_ARG_CHANNEL`: the call needs a `channel`.
    MissingArgChannel,
    /// `MISSING_ARG_NODE`: nsqlookupd's tombstone needs a `node`.
    MissingArgNode,
    /// `INVALID_TOPIC` (nsqd's `/pub`, `/topic/*`) / `INVALID_ARG_TOPIC` (nsqd's
    /// `/channel/*`, nsqlookupd): not a valid topic name.
    InvalidTopic,
    /// `INVALID_ARG_CHANNEL`: not a valid channel name.
    InvalidChannel,
    /// `INVALID_REQUEST`: the query could not be parsed.
    InvalidRequest,
    /// `INVALID_DEFER`: `defer` is not a number of milliseconds within nsqd's `max_req_timeout`.
    InvalidDefer,
    /// `INVALID_OPTION`: nsqd has no such `/config` option (or it cannot be changed).
    InvalidOption,
    /// `INVALID_VALUE`: the value given for a `/config` option is not valid.
    InvalidValue,
    /// `MSG_EMPTY`: an empty message.
    MsgEmpty,
    /// `MSG_TOO_BIG`: a message above nsqd's `max_msg_size`.
    MsgTooBig,
    /// `BODY_TOO_BIG`: an `/mpub` body above nsqd's `max_body_size`.
    BodyTooBig,
    /// `BAD_MESSAGE`: a binary `/mpub` body that ends inside a message.
    BadMessage,
    /// `BAD_BODY`: a binary `/mpub` body with no message.
    BadBody,
    /// `EXITING`: nsqd is shutting down.
    Exiting,
    /// `INTERNAL_ERROR`: the server failed.
    InternalError,
    /// `NOT_FOUND`: no such path: the address is most likely the other server's HTTP port
    /// (nsqd's and nsqlookupd's APIs differ).
    NotFound,
    /// `METHOD_NOT_ALLOWED`: the path exists with another method.
    MethodNotAllowed,
    /// Any other message.
    Other(String),
}

impl From<&str> for ServerMessage {
    fn from(message: &str) -> ServerMessage {
        match message {
            "TOPIC_NOT_FOUND" => ServerMessage::TopicNotFound,
            "CHANNEL_NOT_FOUND" => ServerMessage::ChannelNotFound,
            "MISSING_ARG_TOPIC" => ServerMessage::MissingArgTopic,
            "MISSING_ARG_CHANNEL" => ServerMessage::MissingArgChannel,
            "MISSING_ARG_NODE" => ServerMessage::MissingArgNode,
            "INVALID_TOPIC" | "INVALID_ARG_TOPIC" => ServerMessage::InvalidTopic,
            "INVALID_ARG_CHANNEL" => ServerMessage::InvalidChannel,
            "INVALID_REQUEST" => ServerMessage::InvalidRequest,
            "INVALID_DEFER" => ServerMessage::InvalidDefer,
            "INVALID_OPTION" => ServerMessage::InvalidOption,
            "INVALID_VALUE" => ServerMessage::InvalidValue,
            "MSG_EMPTY" => ServerMessage::MsgEmpty,
            "MSG_TOO_BIG" => ServerMessage::MsgTooBig,
            "BODY_TOO_BIG" => ServerMessage::BodyTooBig,
            "BAD_MESSAGE" => ServerMessage::BadMessage,
            "BAD_BODY" => ServerMessage::BadBody,
            "EXITING" => ServerMessage::Exiting,
            "INTERNAL_ERROR" => ServerMessage::InternalError,
            "NOT_FOUND" => ServerMessage::NotFound,
            "METHOD_NOT_ALLOWED" => ServerMessage::MethodNotAllowed,
            other => ServerMessage::Other(other.to_owned()),
        }
    }
}

impl ServerMessage {
    /// The message as the server wrote it (`INVALID_TOPIC` for both of its spellings).
    pub fn as_str(&self) -> &str {
        match self {
            ServerMessage::TopicNotFound => "TOPIC_NOT_FOUND",
            ServerMessage::ChannelNotFound => "CHANNEL_NOT_FOUND",
            ServerMessage::MissingArgTopic => "MISSING_ARG_TOPIC",
            ServerMessage::MissingArgChannel => "MISSING_ARG_CHANNEL",
            ServerMessage::MissingArgNode => "MISSING_ARG_NODE",
            ServerMessage::InvalidTopic => "INVALID_TOPIC",
            ServerMessage::InvalidChannel => "INVALID_ARG_CHANNEL",
            ServerMessage::InvalidRequest => "INVALID_REQUEST",
            ServerMessage::InvalidDefer => "INVALID_DEFER",
            ServerMessage::InvalidOption => "INVALID_OPTION",
            ServerMessage::InvalidValue => "INVALID_VALUE",
            ServerMessage::MsgEmpty => "MSG_EMPTY",
            ServerMessage::MsgTooBig => "MSG_TOO_BIG",
            ServerMessage::BodyTooBig => "BODY_TOO_BIG",
            ServerMessage::BadMessage => "BAD_MESSAGE",
            ServerMessage::BadBody => "BAD_BODY",
            ServerMessage::Exiting => "EXITING",
            ServerMessage::InternalError => "INTERNAL_ERROR",
            ServerMessage::NotFound => "NOT_FOUND",
            ServerMessage::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ServerMessage::Other(m) => m,
        }
    }
}

impl fmt::Display for ServerMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if *self == ServerMessage::NotFound {
            f.write_str(
                " (no such path: is this the right server? nsqd's HTTP API and nsqlookupd's \
                 differ)",
            )?;
        }
        Ok(())
    }
}
