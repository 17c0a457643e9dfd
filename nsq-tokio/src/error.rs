//! The crate's error type and name arguments.

use nsq_proto::config::OptionError;
use nsq_proto::consumer::ConsumerError;
use nsq_proto::{Channel, NameError, ServerError, Topic};
use std::fmt;

/// Why an operation of this crate failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// A topic or channel name that nsqd would refuse.
    InvalidName(NameError),
    /// Other input that was refused before anything was sent (address, empty batch, body too
    /// large, ...).
    InvalidInput(String),
    /// nsqd answered with an error (for example `E_BAD_MESSAGE`, `E_PUB_FAILED`).
    Server(ServerError),
    /// The connection carrying the request was lost before the answer arrived.
    ConnectionLost(String),
    /// No answer within the configured timeout.
    Timeout,
    /// No nsqd connection is up (every configured nsqd is down, or none became ready within
    /// `publish_timeout`); the message was not sent. Carries the last connection error.
    NoServerAvailable(Option<String>),
    /// Too many publishes are outstanding (`max_outstanding` / `max_pending`); retry later.
    Backpressure(String),
    /// The consumer refused the command.
    Consumer(ConsumerError),
    /// The producer or consumer has been closed.
    Closed,
    /// Not called from within a tokio runtime.
    NoRuntime,
    /// A configuration option is unknown, malformed or out of range.
    Config(OptionError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidName(e) => write!(f, "invalid name: {e}"),
            Error::InvalidInput(e) => write!(f, "invalid input: {e}"),
            Error::Server(e) => write!(f, "nsqd error: {e}"),
            Error::ConnectionLost(r) => write!(f, "connection lost: {r}"),
            Error::Timeout => f.write_str("timed out"),
            Error::NoServerAvailable(None) => f.write_str("no nsqd available"),
            Error::NoServerAvailable(Some(e)) => {
                write!(f, "no nsqd available (last error: {e})")
            }
            Error::Backpressure(e) => write!(f, "{e}"),
            Error::Consumer(e) => write!(f, "{e}"),
            Error::Closed => f.write_str("closed"),
            Error::NoRuntime => f.write_str("must be called from within a tokio runtime"),
            Error::Config(e) => write!(f, "invalid configuration: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidName(e) => Some(e),
            Error::Server(e) => Some(e),
            Error::Consumer(e) => Some(e),
            Error::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<OptionError> for Error {
    fn from(e: OptionError) -> Self {
        Error::Config(e)
    }
}

impl From<NameError> for Error {
    fn from(e: NameError) -> Self {
        Error::InvalidName(e)
    }
}

impl From<ConsumerError> for Error {
    fn from(e: ConsumerError) -> Self {
        match e {
            ConsumerError::InvalidAddress(a) => {
                Error::InvalidInput(format!("invalid nsqd address {a:?}: expected host:port"))
            }
            ConsumerError::InvalidLookupd(e) => Error::InvalidInput(e.to_string()),
            ConsumerError::Closing => Error::Closed,
            e => Error::Consumer(e),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
    impl Sealed for nsq_proto::Topic {}
    impl Sealed for &nsq_proto::Topic {}
    impl Sealed for nsq_proto::Channel {}
    impl Sealed for &nsq_proto::Channel {}
}

/// A topic argument: a validated [`Topic`] or a string, validated on use.
pub trait IntoTopic: sealed::Sealed {
    /// The validated topic.
    fn into_topic(self) -> Result<Topic, NameError>;
}

impl IntoTopic for &str {
    fn into_topic(self) -> Result<Topic, NameError> {
        Topic::new(self)
    }
}
impl IntoTopic for String {
    fn into_topic(self) -> Result<Topic, NameError> {
        Topic::new(self)
    }
}
impl IntoTopic for &String {
    fn into_topic(self) -> Result<Topic, NameError> {
        Topic::new(self)
    }
}
impl IntoTopic for Topic {
    fn into_topic(self) -> Result<Topic, NameError> {
        Ok(self)
    }
}
impl IntoTopic for &Topic {
    fn into_topic(self) -> Result<Topic, NameError> {
        Ok(self.clone())
    }
}

/// A channel argument: a validated [`Channel`] or a string, validated on use.
pub trait IntoChannel: sealed::Sealed {
    /// The validated channel.
    fn into_channel(self) -> Result<Channel, NameError>;
}

impl IntoChannel for &str {
    fn into_channel(self) -> Result<Channel, NameError> {
        Channel::new(self)
    }
}
impl IntoChannel for String {
    fn into_channel(self) -> Result<Channel, NameError> {
        Channel::new(self)
    }
}
impl IntoChannel for &String {
    fn into_channel(self) -> Result<Channel, NameError> {
        Channel::new(self)
    }
}
impl IntoChannel for Channel {
    fn into_channel(self) -> Result<Channel, NameError> {
        Ok(self)
    }
}
impl IntoChannel for &Channel {
    fn into_channel(self) -> Result<Channel, NameError> {
        Ok(self.clone())
    }
}
