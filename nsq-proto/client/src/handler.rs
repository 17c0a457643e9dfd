//! What a message handler returns ([`HandlerError`]) and what a consumer reports when it stops
//! ([`StopReport`], [`GiveUpHook`](crate::GiveUpHook)).

use super::answer::AnswerKind;
#[cfg(doc)]
use nsq_proto::consumer::ConsumerEvent;
use std::fmt;
use std::time::Duration;

/// The error a message handler returns: the message is requeued, by default with backoff and
/// the configured delay.
///
/// Whatever converts into a `Box<dyn Error + Send + Sync>` converts into it, so `?` works in
/// a handler on any error: an `std::error::Error + Send + Sync + 'static`, a boxed
/// `Box<dyn Error + Send + Sync>`, an `anyhow::Error` or `eyre::Report`, even a `String`.
/// The error is kept as it is, with its chain of sources ([`chain`](Self::chain)).
///
/// Like `anyhow::Error`, it does not implement `std::error::Error` itself (that is what
/// makes the blanket conversion possible). `{}` shows the error, `{:#}` the whole chain
/// (`outer: cause: root cause`), which is what the consumer logs when a handler fails.
///
/// ```
/// # use nsq_client::HandlerError;
/// fn parse(body: &[u8]) -> Result<u64, HandlerError> {
///     let text = std::str::from_utf8(body)?; // Utf8Error
///     Ok(text.trim().parse::<u64>()?) // ParseIntError
/// }
/// assert_eq!(parse(b"42").unwrap(), 42);
/// let e = parse(b"forty-two").unwrap_err();
/// assert_eq!(e.to_string(), "invalid digit found in string");
/// ```
pub struct HandlerError {
    source: Box<dyn std::error::Error + Send + Sync>,
    delay: Option<Duration>,
    backoff: bool,
}

impl HandlerError {
    /// A failure with a message.
    pub fn msg(message: impl fmt::Display) -> HandlerError {
        HandlerError {
            source: message.to_string().into(),
            delay: None,
            backoff: true,
        }
    }

    /// Requeue after exactly `delay` instead of the configured default.
    pub fn with_delay(mut self, delay: Duration) -> HandlerError {
        self.delay = Some(delay);
        self
    }

    /// Requeue without backing off (a failure of this message, not of the system).
    pub fn without_backoff(mut self) -> HandlerError {
        self.backoff = false;
        self
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }

    /// The underlying error, then its sources, outermost first.
    pub fn chain(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        let first: &(dyn std::error::Error + 'static) = &*self.source;
        std::iter::successors(Some(first), |e| e.source())
    }

    /// The underlying error, to downcast or return.
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync> {
        self.source
    }

    /// The explicit requeue delay, if any.
    pub fn delay(&self) -> Option<Duration> {
        self.delay
    }

    /// Whether the requeue counts as a failure for backoff.
    pub fn backoff(&self) -> bool {
        self.backoff
    }

    /// The REQ this error asks for.
    pub fn answer_kind(&self) -> AnswerKind {
        AnswerKind::Requeue {
            delay: self.delay,
            backoff: self.backoff,
        }
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError {
            source: e.into(),
            delay: None,
            backoff: true,
        }
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("source", &self.source)
            .field("delay", &self.delay)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// `{}`: the error; `{:#}`: the error and its sources, joined by `": "`.
impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return fmt::Display::fmt(&self.source, f);
        }
        for (i, e) in self.chain().enumerate() {
            if i > 0 {
                f.write_str(": ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// What a consumer's `stop` reports once every connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StopReport {
    /// Messages still unanswered when their connection closed (nsqd redelivers them).
    pub unanswered: usize,
}

impl StopReport {
    /// A report of `unanswered` leftovers (the core's [`ConsumerEvent::Closed`]).
    pub fn new(unanswered: usize) -> StopReport {
        StopReport { unanswered }
    }
}

/// What a message handler came to; how its message is answered follows
/// ([`answer_kind`](Self::answer_kind)).
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// It returned `Ok`: the message is finished (FIN).
    Done,
    /// It returned this error: the message is requeued as the error says
    /// ([`HandlerError::answer_kind`]).
    Failed(HandlerError),
    /// It panicked, saying this: the message is requeued with backoff.
    Panicked(String),
}

impl Outcome {
    /// The outcome of a handler run under `catch_unwind`.
    pub(crate) fn caught(run: std::thread::Result<Result<(), HandlerError>>) -> Outcome {
        match run {
            Ok(result) => result.into(),
            Err(panic) => Outcome::Panicked(crate::panic_message(&*panic).to_owned()),
        }
    }

    /// How the message is answered: [`Done`](Self::Done) finishes,
    /// [`Failed`](Self::Failed) requeues as its error says,
    /// [`Panicked`](Self::Panicked) requeues with backoff and the default delay.
    pub fn answer_kind(&self) -> AnswerKind {
        match self {
            Outcome::Done => AnswerKind::Finish,
            Outcome::Failed(e) => e.answer_kind(),
            Outcome::Panicked(_) => AnswerKind::Requeue {
                delay: None,
                backoff: true,
            },
        }
    }
}

/// A handler's result: `Ok` is [`Outcome::Done`], `Err` is [`Outcome::Failed`].
impl From<Result<(), HandlerError>> for Outcome {
    fn from(result: Result<(), HandlerError>) -> Outcome {
        match result {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Failed(e),
        }
    }
}
