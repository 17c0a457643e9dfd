//! The adapters' error type [`Error`] (with [`InputError`], [`Backpressure`]), the conversions
//! from the core's errors, and [`IntoTopic`] / [`IntoChannel`] for name arguments.

use nsq_proto::command::CommandError;
use nsq_proto::config::OptionError;
use nsq_proto::connection::{CloseReason, ConfigError, ConnectionError, Misconfiguration};
use nsq_proto::consumer::ConsumerError;
use nsq_proto::consumer::{LookupdAddressError, LookupdError};
use nsq_proto::http::{ApiError, ExchangeError};
use nsq_proto::producer::{ProducerError, PublishFailure};
use nsq_proto::{Channel, NameError, Topic};
use nsq_proto::{ErrorCode, ServerError};
use std::fmt;
use std::time::Duration;

/// Why an operation of an adapter failed.
///
/// `Display` says everything once, on one line; no variant also returns the text it shows from
/// [`source`](std::error::Error::source), so `{:#}` (anyhow/eyre) and error reporters print
/// each cause once.
///
/// ```
/// # use nsq_client::{Error, IntoTopic};
/// # use nsq_proto::{ErrorCode, NameError, ServerError};
/// let err = "bad topic!".into_topic().unwrap_err();
/// match &err {
///     Error::InvalidTopic { name, reason: NameError::InvalidChar { ch, .. } } => {
///         assert_eq!(name, "bad topic!");
///         assert_eq!(*ch, ' ');
///     }
///     other => panic!("{other}"),
/// }
/// assert_eq!(
///     err.to_string(),
///     "invalid topic name \"bad topic!\": invalid character ' ' at byte 3: \
///      names use only [.a-zA-Z0-9_-] with an optional #ephemeral suffix"
/// );
///
/// // nsqd's refusals carry their code.
/// let refused = Error::Server(ServerError::new(
///     ErrorCode::BadMessage,
///     "PUB invalid message body size 0",
/// ));
/// if refused.server_code() == Some(ErrorCode::BadMessage) {
///     // a bad message is not worth retrying
/// }
/// assert_eq!(
///     refused.to_string(),
///     "nsqd error E_BAD_MESSAGE: PUB invalid message body size 0"
/// );
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// A topic name that nsqd would refuse.
    InvalidTopic {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// A channel name that nsqd would refuse.
    InvalidChannel {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// Other input that was refused before anything was sent (address, empty batch, body too
    /// large, ...).
    InvalidInput(InputError),
    /// nsqd answered with an error; [`ServerError::code`] (or [`Error::server_code`]) says
    /// which (`E_BAD_MESSAGE`, `E_PUB_FAILED`, ...).
    Server(ServerError),
    /// The connection carrying the request was lost before the answer arrived (the message
    /// may or may not have been published).
    ConnectionLost(CloseReason),
    /// No answer within the configured timeout (may or may not have been published).
    Timeout,
    /// No nsqd is reachable now (every configured nsqd is down, or none became ready within
    /// `publish_timeout`), and the client keeps trying; the message was not sent. Carries the
    /// last connection error. (An nsqd that cannot work as configured is
    /// [`Error::Misconfigured`] instead.)
    NoServerAvailable(Option<String>),
    /// The nsqd at this address cannot be used as configured: it is not nsqd's TCP port
    /// (an HTTP port, or nsqlookupd's TCP port), TLS does not match, or nsqd refused the
    /// credentials. [`Misconfiguration`] says which. Unlike [`Error::NoServerAvailable`],
    /// waiting does not help: the client does not retry this nsqd on its own (it is logged
    /// once, at ERROR), until it is added again. Nothing was sent.
    Misconfigured {
        /// The nsqd address.
        nsqd: String,
        /// What is wrong.
        problem: Misconfiguration,
    },
    /// Too many publishes are outstanding (`max_outstanding_publishes` /
    /// `max_pending_publishes`); retry later.
    Backpressure(Backpressure),
    /// The consumer refused the command.
    Consumer(ConsumerError),
    /// The producer refused the command for a reason without a variant of its own here (a
    /// newer nsq-proto's).
    Producer(ProducerError),
    /// A publish failed for a reason without a variant of its own here (a newer
    /// nsq-proto's).
    Publish(PublishFailure),
    /// The producer or consumer has been closed (stopped, closed, every handle dropped, or its
    /// driver ended).
    Closed,
    /// `connect_to_nsqd` named an nsqd the consumer is already connected or connecting to
    /// (go-nsq's `ErrAlreadyConnected`): nothing changed.
    AlreadyConnected(String),
    /// Not called from within the runtime the adapter needs, or that runtime lacks a driver
    /// the client needs (nsq-tokio: a tokio runtime with its IO and time drivers). The text
    /// says which, naming the `enable_*` call that is missing.
    NoRuntime(&'static str),
    /// The driver (thread or task) could not be started.
    Spawn(String),
    /// A consumer's first attempt to connect to an nsqd added with `connect_to_nsqd` failed
    /// (it keeps trying in the background, with backoff).
    Connect {
        /// The nsqd address.
        nsqd: String,
        /// Why (the connection's close reason, or the socket's error).
        reason: String,
    },
    /// A consumer's first query to an nsqlookupd added with `connect_to_lookupd` failed.
    /// When [`LookupdError::is_misconfiguration`] (the address is not an nsqlookupd's HTTP
    /// port) the consumer stops polling it (logged once, at ERROR) until it is added again;
    /// otherwise it keeps polling.
    Lookupd {
        /// The lookupd (as `http://host:port/path`).
        lookupd: String,
        /// Why.
        error: LookupdError,
    },
    /// A configuration option is unknown, malformed or out of range.
    Config(OptionError),
    /// A cluster operation failed on these nodes ([`ClusterReport::into_result`](super::ClusterReport::into_result)).
    Cluster(Vec<NodeFailure>),
    /// A call of an nsqd's or nsqlookupd's HTTP API failed.
    Http {
        /// The server's HTTP address (`host:port`).
        server: String,
        /// Why.
        failure: HttpFailure,
    },
}

impl Error {
    /// The HTTP API's error, for an [`Error::Http`] the server answered
    /// (`TOPIC_NOT_FOUND`, ...).
    pub fn api_error(&self) -> Option<&nsq_proto::http::ApiError> {
        match self {
            Error::Http { failure, .. } => failure.api_error(),
            _ => None,
        }
    }

    /// nsqd's error code, for [`Error::Server`].
    pub fn server_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server(e) => Some(e.code()),
            _ => None,
        }
    }

    /// Whether the request may have reached nsqd although it failed (a connection lost or a
    /// timeout while waiting for the reply): retrying may publish a message twice.
    pub fn maybe_published(&self) -> bool {
        matches!(self, Error::ConnectionLost(_) | Error::Timeout)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidTopic { name, reason } => {
                write!(f, "invalid topic name {name:?}: {reason}")
            }
            Error::InvalidChannel { name, reason } => {
                write!(f, "invalid channel name {name:?}: {reason}")
            }
            Error::InvalidInput(e) => fmt::Display::fmt(e, f),
            Error::Server(e) => fmt::Display::fmt(e, f),
            Error::ConnectionLost(r) => {
                write!(f, "connection lost before nsqd answered: {r}")
            }
            Error::Timeout => f.write_str("no answer from nsqd in time"),
            Error::NoServerAvailable(None) => f.write_str("no nsqd available"),
            Error::NoServerAvailable(Some(e)) => {
                write!(f, "no nsqd available (last error: {e})")
            }
            Error::Misconfigured { nsqd, problem } => {
                write!(f, "cannot use nsqd {nsqd} as configured: {problem}")
            }
            Error::Backpressure(e) => fmt::Display::fmt(e, f),
            Error::Consumer(e) => fmt::Display::fmt(e, f),
            Error::Producer(e) => fmt::Display::fmt(e, f),
            Error::Publish(e) => fmt::Display::fmt(e, f),
            Error::Closed => f.write_str(
                "the client is closed (it was stopped or closed, or its driver ended: see the log)",
            ),
            Error::AlreadyConnected(nsqd) => {
                write!(f, "already connected or connecting to nsqd {nsqd}")
            }
            Error::NoRuntime(why) => f.write_str(why),
            Error::Spawn(e) => write!(f, "could not start the driver: {e}"),
            Error::Connect { nsqd, reason } => write!(
                f,
                "could not connect to nsqd {nsqd}: {reason} (the consumer keeps trying, with \
                 backoff)"
            ),
            Error::Lookupd { lookupd, error } if error.is_misconfiguration() => {
                write!(f, "cannot use nsqlookupd {lookupd} as configured: {error}")
            }
            Error::Lookupd { lookupd, error } => write!(
                f,
                "nsqlookupd {lookupd} query failed: {error} (the consumer keeps polling it)"
            ),
            Error::Config(e) => fmt::Display::fmt(e, f),
            Error::Cluster(failures) => {
                write!(f, "{} node(s) failed:", failures.len())?;
                for (i, failure) in failures.iter().enumerate() {
                    write!(f, "{} {failure}", if i == 0 { "" } else { ";" })?;
                }
                Ok(())
            }
            Error::Http { server, failure } => write!(f, "HTTP call to {server} failed: {failure}"),
        }
    }
}

/// Every cause is in the `Display` text, so there is no separate source.
impl std::error::Error for Error {}

/// Input refused before anything was sent ([`Error::InvalidInput`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InputError {
    /// An nsqd address that is not `host:port`.
    NsqdAddress(String),
    /// An nsqlookupd address that cannot be used.
    LookupdAddress(LookupdAddressError),
    /// A publish nsqd would refuse (empty body or batch, too large, delay too long, ...).
    Publish(CommandError),
    /// A connection setting nsqd would refuse, or a TLS server name that is not valid.
    Connection(ConfigError),
    /// The connection refused the command (its negotiated limits differ from the check made
    /// when the publish was accepted).
    Refused(ConnectionError),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::NsqdAddress(a) => {
                write!(f, "invalid nsqd address {a:?}: expected host:port")
            }
            InputError::LookupdAddress(e) => fmt::Display::fmt(e, f),
            InputError::Publish(e) => write!(f, "invalid publish: {e}"),
            InputError::Connection(e) => fmt::Display::fmt(e, f),
            InputError::Refused(e) => write!(f, "publish refused: {e}"),
        }
    }
}

impl std::error::Error for InputError {}

/// Which bound of the producer was reached ([`Error::Backpressure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backpressure {
    /// `max_outstanding_publishes` publishes are unresolved.
    TooManyOutstanding {
        /// The configured bound.
        limit: usize,
    },
    /// `max_pending_publishes` publishes already wait for a connection.
    PendingQueueFull {
        /// The configured bound.
        limit: usize,
    },
    /// `max_pending_publishes` publishes of this producer await their result (queued, waiting
    /// for a connection or for nsqd's reply): a publish that returns at once
    /// ([`Producer::publish_async`](super::Producer::publish_async)) is refused.
    Unanswered {
        /// The configured bound.
        limit: usize,
    },
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backpressure::TooManyOutstanding { limit } => {
                write!(f, "{limit} publishes are already outstanding")
            }
            Backpressure::PendingQueueFull { limit } => {
                write!(f, "{limit} publishes already wait for a connection")
            }
            Backpressure::Unanswered { limit } => {
                write!(f, "{limit} publishes already await their result")
            }
        }
    }
}

impl std::error::Error for Backpressure {}

impl From<OptionError> for Error {
    fn from(e: OptionError) -> Self {
        Error::Config(e)
    }
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Self {
        Error::InvalidInput(e)
    }
}

impl From<ConsumerError> for Error {
    fn from(e: ConsumerError) -> Self {
        match e {
            ConsumerError::InvalidAddress(a) => InputError::NsqdAddress(a).into(),
            ConsumerError::InvalidLookupd(e) => InputError::LookupdAddress(e).into(),
            ConsumerError::Closing => Error::Closed,
            e => Error::Consumer(e),
        }
    }
}

impl From<ProducerError> for Error {
    fn from(e: ProducerError) -> Self {
        match e {
            ProducerError::Closed => Error::Closed,
            ProducerError::TooManyOutstanding { limit } => {
                Error::Backpressure(Backpressure::TooManyOutstanding { limit })
            }
            ProducerError::PendingQueueFull { limit } => {
                Error::Backpressure(Backpressure::PendingQueueFull { limit })
            }
            ProducerError::Invalid(e) => InputError::Publish(e).into(),
            ProducerError::InvalidAddress(a) => InputError::NsqdAddress(a).into(),
            ProducerError::Config(e) => InputError::Connection(e).into(),
            e => Error::Producer(e),
        }
    }
}

impl From<PublishFailure> for Error {
    fn from(f: PublishFailure) -> Self {
        match f {
            PublishFailure::Server(e) => Error::Server(e),
            PublishFailure::ConnectionLost(r) => Error::ConnectionLost(r),
            PublishFailure::TimedOut { .. } => Error::Timeout,
            PublishFailure::NoServerAvailable { last_error } => {
                Error::NoServerAvailable(last_error)
            }
            PublishFailure::Refused(e) => InputError::Refused(e).into(),
            PublishFailure::Misconfigured { addr, problem } => Error::Misconfigured {
                nsqd: addr,
                problem,
            },
            f => Error::Publish(f),
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
    /// The validated topic ([`Error::InvalidTopic`] names the rejected name).
    fn into_topic(self) -> Result<Topic, Error>;
}

pub(super) fn topic(name: &str) -> Result<Topic, Error> {
    Topic::new(name).map_err(|reason| Error::InvalidTopic {
        name: name.to_owned(),
        reason,
    })
}

pub(super) fn channel(name: &str) -> Result<Channel, Error> {
    Channel::new(name).map_err(|reason| Error::InvalidChannel {
        name: name.to_owned(),
        reason,
    })
}

impl IntoTopic for &str {
    fn into_topic(self) -> Result<Topic, Error> {
        topic(self)
    }
}
impl IntoTopic for String {
    fn into_topic(self) -> Result<Topic, Error> {
        topic(&self)
    }
}
impl IntoTopic for &String {
    fn into_topic(self) -> Result<Topic, Error> {
        topic(self)
    }
}
impl IntoTopic for Topic {
    fn into_topic(self) -> Result<Topic, Error> {
        Ok(self)
    }
}
impl IntoTopic for &Topic {
    fn into_topic(self) -> Result<Topic, Error> {
        Ok(self.clone())
    }
}

/// A channel argument: a validated [`Channel`] or a string, validated on use.
pub trait IntoChannel: sealed::Sealed {
    /// The validated channel ([`Error::InvalidChannel`] names the rejected name).
    fn into_channel(self) -> Result<Channel, Error>;
}

impl IntoChannel for &str {
    fn into_channel(self) -> Result<Channel, Error> {
        channel(self)
    }
}
impl IntoChannel for String {
    fn into_channel(self) -> Result<Channel, Error> {
        channel(&self)
    }
}
impl IntoChannel for &String {
    fn into_channel(self) -> Result<Channel, Error> {
        channel(self)
    }
}
impl IntoChannel for Channel {
    fn into_channel(self) -> Result<Channel, Error> {
        Ok(self)
    }
}
impl IntoChannel for &Channel {
    fn into_channel(self) -> Result<Channel, Error> {
        Ok(self.clone())
    }
}

/// Why an HTTP API call failed ([`Error::Http`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HttpFailure {
    /// No TCP connection (refused, unreachable, no such host), or none within the connect
    /// timeout.
    Connect(String),
    /// No complete answer within the timeout.
    Timeout(Duration),
    /// The connection failed during the exchange.
    Io(String),
    /// TLS failed (a certificate refused, a handshake failure, an invalid server name).
    Tls(String),
    /// The server answered, but not with the reply: not HTTP (the wrong port), an error
    /// message of the server (`TOPIC_NOT_FOUND`, ...), another status, or an unexpected body.
    Api(ApiError),
}

impl fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpFailure::Connect(e) => write!(f, "could not connect: {e}"),
            HttpFailure::Timeout(t) => write!(f, "no complete answer within {t:?}"),
            HttpFailure::Io(e) => write!(f, "connection failed: {e}"),
            HttpFailure::Tls(e) => e.fmt(f),
            HttpFailure::Api(e) => e.fmt(f),
        }
    }
}

impl HttpFailure {
    /// The API error, when the server answered.
    pub fn api_error(&self) -> Option<&ApiError> {
        match self {
            HttpFailure::Api(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ExchangeError> for HttpFailure {
    fn from(e: ExchangeError) -> HttpFailure {
        match e {
            ExchangeError::Http(e) => HttpFailure::Api(ApiError::Http(e)),
            other => HttpFailure::Tls(other.to_string()),
        }
    }
}

/// One node of a [`ClusterReport`](crate::ClusterReport) that failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeFailure {
    /// The node's HTTP address.
    pub node: String,
    /// Why it failed.
    pub error: Error,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.error)
    }
}
