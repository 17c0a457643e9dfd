//! Batches of messages: [`BatchOptions`] (how many, how many bytes, how long to wait),
//! [`Batch`] (the messages, answered per message or all at once), [`BatchEnd`] (why a batch
//! was handed over) and [`BatchStats`].
//!
//! A batch is filled from the consumer's messages as they arrive and handed over when the
//! first of these happens: it holds `max_messages`; the next message would take it past
//! `max_bytes`; `linger` has passed since its first message; no message can arrive before the
//! application answers one (the in-flight bound is reached, or backoff holds RDY down); the
//! consumer stops. The consumer's `max_in_flight` bounds every batch, with everything else the
//! application holds: a batch never waits for a message that cannot come.
//!
//! While a batch fills and while it is handled, its messages are auto-touched before nsqd's
//! `msg_timeout` (batches turn the consumer's `auto_touch` on, for up to `auto_touch_limit`
//! since each delivery), so a long `linger` or a slow handler does not make them time out.

use crate::answer::AnswerKind;
use crate::events::EventHub;
use crate::handler::Outcome;
use crate::metrics::BatchMetrics;
use crate::sync::lock;
use crate::{Event, HandlerError, Message};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ----------------------------------------------------------------------------------- options

/// How a consumer's messages are gathered into batches: at most `max_messages` and
/// `max_bytes` (bodies) each, handed over at the latest `linger` after their first message.
///
/// ```
/// # use nsq_client::BatchOptions;
/// # use std::time::Duration;
/// let options = BatchOptions::new()
///     .max_messages(1_000)
///     .max_bytes(8 << 20)
///     .linger(Duration::from_millis(500));
/// assert_eq!(options.get_max_messages(), 1_000);
/// ```
///
/// A batch also ends early when nothing more can arrive before the application answers a
/// message ([`BatchEnd::Bound`]): with `max_in_flight` below `max_messages`, batches hold at
/// most `max_in_flight` messages (less when several are held at once) and are handed over as
/// soon as they have what the bound allows, not after `linger`. Raise `max_in_flight` to at
/// least `max_messages` (times the number of batches handled at once) for full batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    max_messages: usize,
    max_bytes: usize,
    linger: Duration,
}

impl Default for BatchOptions {
    /// 100 messages, 16 MiB, a linger of 1 s.
    fn default() -> Self {
        BatchOptions {
            max_messages: 100,
            max_bytes: 16 << 20,
            linger: Duration::from_secs(1),
        }
    }
}

impl BatchOptions {
    /// The defaults: 100 messages, 16 MiB, a linger of 1 s.
    pub fn new() -> BatchOptions {
        BatchOptions::default()
    }

    /// The most messages in a batch (at least 1: 0 counts as 1).
    pub fn max_messages(mut self, n: usize) -> BatchOptions {
        self.max_messages = n.max(1);
        self
    }

    /// The most bytes of message bodies in a batch: a batch is handed over before the
    /// message that would take it past this, which starts the next one. A message larger
    /// than this on its own is a batch of one.
    pub fn max_bytes(mut self, n: usize) -> BatchOptions {
        self.max_bytes = n;
        self
    }

    /// How long a batch waits for more messages after its first one (zero: it takes what
    /// has arrived and goes).
    pub fn linger(mut self, linger: Duration) -> BatchOptions {
        self.linger = linger;
        self
    }

    /// See [`max_messages`](Self::max_messages).
    pub fn get_max_messages(&self) -> usize {
        self.max_messages
    }

    /// See [`max_bytes`](Self::max_bytes).
    pub fn get_max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// See [`linger`](Self::linger).
    pub fn get_linger(&self) -> Duration {
        self.linger
    }
}

/// Why a batch was handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchEnd {
    /// It holds `max_messages`.
    Full,
    /// The next message would take it past `max_bytes` (or it reached it).
    Bytes,
    /// No message could arrive before the application answers one: the in-flight bound was
    /// reached (with what other batches and handlers hold), or backoff held RDY down.
    Bound,
    /// `linger` passed since its first message.
    Linger,
    /// The consumer is stopping: the partial batch, to be answered before the drain ends.
    Stop,
}

impl BatchEnd {
    /// Every kind, in the order of [`BatchStats::ended`].
    pub const ALL: [BatchEnd; 5] = [
        BatchEnd::Full,
        BatchEnd::Bytes,
        BatchEnd::Bound,
        BatchEnd::Linger,
        BatchEnd::Stop,
    ];

    /// Its name in logs and metric labels: `full`, `bytes`, `bound`, `linger`, `stop`.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchEnd::Full => "full",
            BatchEnd::Bytes => "bytes",
            BatchEnd::Bound => "bound",
            BatchEnd::Linger => "linger",
            BatchEnd::Stop => "stop",
        }
    }

    fn index(self) -> usize {
        match self {
            BatchEnd::Full => 0,
            BatchEnd::Bytes => 1,
            BatchEnd::Bound => 2,
            BatchEnd::Linger => 3,
            BatchEnd::Stop => 4,
        }
    }
}

impl fmt::Display for BatchEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ------------------------------------------------------------------------------------- stats

/// A consumer's batch counters, from `ConsumerHandle::batch_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BatchStats {
    /// Batches handed over.
    pub batches: u64,
    /// Messages in them.
    pub messages: u64,
    /// Batches by why they were handed over, in the order of [`BatchEnd::ALL`].
    pub ended: [u64; 5],
    /// Batches that failed as a whole (an error or a panic of the handler, or
    /// [`Batch::requeue`]): all their messages were requeued, counted once for backoff.
    pub failed: u64,
    /// Messages failed or requeued on their own in batches that were otherwise finished.
    pub messages_requeued: u64,
    /// The largest batch.
    pub largest: u64,
}

impl BatchStats {
    /// How many batches were handed over for `end`.
    pub fn ended_by(&self, end: BatchEnd) -> u64 {
        self.ended[end.index()]
    }
}

/// What the batches of one consumer share: counters, metrics, the consumer's span and its
/// event streams.
pub(crate) struct BatchShared {
    batches: AtomicU64,
    messages: AtomicU64,
    ended: [AtomicU64; 5],
    failed: AtomicU64,
    messages_requeued: AtomicU64,
    largest: AtomicU64,
    metrics: BatchMetrics,
    span: tracing::Span,
    events: Arc<EventHub>,
    /// No message can arrive before the application answers one (the core's `is_full`), as
    /// of the driver's last round: a batch being gathered waits for no more. Cleared when a
    /// batch is answered, so the next one does not read the driver's last word from before
    /// the answers freed room.
    full: std::sync::atomic::AtomicBool,
    /// Batches waiting for `full`, woken when it turns true.
    full_waiters: Mutex<Vec<std::task::Waker>>,
}

impl fmt::Debug for BatchShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchShared")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl BatchShared {
    pub(crate) fn new(
        metrics: BatchMetrics,
        span: tracing::Span,
        events: Arc<EventHub>,
    ) -> BatchShared {
        BatchShared {
            batches: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            ended: Default::default(),
            failed: AtomicU64::new(0),
            messages_requeued: AtomicU64::new(0),
            largest: AtomicU64::new(0),
            metrics,
            span,
            events,
            full: std::sync::atomic::AtomicBool::new(false),
            full_waiters: Mutex::new(Vec::new()),
        }
    }

    /// Wakes `waker` when `full` turns true, and says whether it is true now (registered
    /// first, so no change slips in between).
    pub(crate) fn poll_full(&self, waker: &std::task::Waker) -> bool {
        {
            let mut waiters = lock(&self.full_waiters);
            if !waiters.iter().any(|w| w.will_wake(waker)) {
                waiters.push(waker.clone());
            }
        }
        self.full.load(Ordering::Acquire)
    }

    /// Publishes `full` (the driver's); a change to true wakes the batches waiting.
    pub(crate) fn set_full(&self, full: bool) {
        if self.full.swap(full, Ordering::AcqRel) != full && full {
            let waiters = std::mem::take(&mut *lock(&self.full_waiters));
            waiters.into_iter().for_each(std::task::Waker::wake);
        }
    }

    /// The consumer's span.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    pub(crate) fn stats(&self) -> BatchStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BatchStats {
            batches: get(&self.batches),
            messages: get(&self.messages),
            ended: self.ended.each_ref().map(get),
            failed: get(&self.failed),
            messages_requeued: get(&self.messages_requeued),
            largest: get(&self.largest),
        }
    }

    fn handed_over(&self, end: BatchEnd, size: usize, lingered: Duration) {
        let size = size as u64;
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.messages.fetch_add(size, Ordering::Relaxed);
        if let Some(e) = self.ended.get(end.index()) {
            e.fetch_add(1, Ordering::Relaxed);
        }
        self.largest.fetch_max(size, Ordering::Relaxed);
        self.metrics.handed_over(end, size, lingered);
    }
}

// ---------------------------------------------------------------------------------- filling

/// A batch being filled (see `MessageReceiver::poll_fill`).
#[derive(Debug)]
pub(crate) struct Filling {
    pub(crate) messages: Vec<Message>,
    pub(crate) bytes: usize,
    /// When its first message was taken.
    pub(crate) first_at: Option<Instant>,
    pub(crate) options: BatchOptions,
}

/// Gathered, never handed over (a dropped `recv_batch` call or `Batches`): requeued at once.
impl Drop for Filling {
    fn drop(&mut self) {
        self.messages.drain(..).for_each(Message::release);
    }
}

impl Filling {
    /// An empty batch to fill under `options`, with room for what `max_in_flight` lets
    /// arrive (allocated once the first message is in).
    pub(crate) fn new(options: BatchOptions) -> Filling {
        Filling {
            messages: Vec::new(),
            bytes: 0,
            first_at: None,
            options,
        }
    }

    /// When `linger` ends, once the batch has its first message.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.first_at.map(|t| t + self.options.linger)
    }

    /// Whether `len` more bytes would take a non-empty batch past `max_bytes`.
    pub(crate) fn would_overflow(&self, len: usize) -> bool {
        !self.messages.is_empty() && self.bytes.saturating_add(len) > self.options.max_bytes
    }

    /// Adds `message`. The first one asks `first` for the time (the linger starts) and how
    /// many messages can arrive (room is reserved for that many, capped); later ones read
    /// neither.
    pub(crate) fn push(&mut self, message: Message, first: impl FnOnce() -> (Instant, usize)) {
        if self.messages.is_empty() {
            let (now, room) = first();
            self.first_at = Some(now);
            self.messages
                .reserve(self.options.max_messages.min(room.max(1)).min(65_536));
        }
        self.bytes = self.bytes.saturating_add(message.body().len());
        self.messages.push(message);
    }

    /// The batch, handed over at `now` for `end` (counted in `shared`).
    pub(crate) fn into_batch(
        mut self,
        end: BatchEnd,
        now: Instant,
        shared: &Arc<BatchShared>,
    ) -> Batch {
        let lingered = self
            .first_at
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let messages = std::mem::take(&mut self.messages);
        shared.handed_over(end, messages.len(), lingered);
        Batch {
            messages,
            marks: Vec::new(),
            bytes: self.bytes,
            end,
            lingered,
            runner: None,
            shared: shared.clone(),
        }
    }
}

// ------------------------------------------------------------------------------------ batch

/// How one message of a batch is answered when the batch is.
#[derive(Debug)]
enum Mark {
    Finish,
    Requeue {
        delay: Option<Duration>,
        backoff: bool,
    },
    Failed(HandlerError),
}

/// A batch of messages, handed over by `Consumer::run_batch` (to its handler),
/// `Consumer::recv_batch` or `Consumer::batches`.
///
/// Read it as a slice of [`Message`]s (`iter()`, [`messages`](Self::messages),
/// `&batch[i]`); mark single messages to be requeued or failed with
/// [`iter_mut`](Self::iter_mut) or [`get_mut`](Self::get_mut) ([`BatchEntry`]); then answer
/// it: [`finish`](Self::finish) (marked messages as marked, every other FIN),
/// [`requeue`](Self::requeue) (all of it, with backoff counted once), or
/// [`answer`](Self::answer) with a handler's result. In `run_batch` the handler's result
/// answers it: `Ok` finishes, `Err` requeues.
///
/// A batch dropped without an answer (outside `run_batch`) is requeued, without backoff and
/// with the default delay, and a warning is logged: no message is lost silently.
pub struct Batch {
    messages: Vec<Message>,
    /// Empty: every message finishes; else one mark per message.
    marks: Vec<Mark>,
    bytes: usize,
    end: BatchEnd,
    lingered: Duration,
    /// Where a batch dropped unanswered goes when a `run_batch` handler has it: back to its
    /// runner, which answers it with the handler's result.
    runner: Option<Arc<Runner>>,
    shared: Arc<BatchShared>,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.messages.len())
            .field("bytes", &self.bytes)
            .field("end", &self.end)
            .field("lingered", &self.lingered)
            .finish_non_exhaustive()
    }
}

impl Deref for Batch {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        &self.messages
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.iter()
    }
}

impl Batch {
    /// Its messages, in the order they arrived.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The total size of its message bodies.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Why it was handed over.
    pub fn ended_by(&self) -> BatchEnd {
        self.end
    }

    /// How long it waited from its first message to its hand-over.
    pub fn lingered(&self) -> Duration {
        self.lingered
    }

    /// Its messages with their marks, to requeue or fail some of them
    /// ([`BatchEntry`]); the marks apply when the batch is answered.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = BatchEntry<'_>> {
        self.make_marks();
        self.messages
            .iter()
            .zip(self.marks.iter_mut())
            .map(|(message, mark)| BatchEntry { message, mark })
    }

    /// The message at `index` with its mark ([`BatchEntry`]), if there is one.
    pub fn get_mut(&mut self, index: usize) -> Option<BatchEntry<'_>> {
        if index >= self.messages.len() {
            return None;
        }
        self.make_marks();
        let message = self.messages.get(index)?;
        let mark = self.marks.get_mut(index)?;
        Some(BatchEntry { message, mark })
    }

    fn make_marks(&mut self) {
        if self.marks.is_empty() {
            self.marks.resize_with(self.messages.len(), || Mark::Finish);
        }
    }

    /// TOUCH every message (auto-touch already does it before `msg_timeout`; this is for
    /// an application that wants more time at once).
    pub fn touch(&self) {
        self.messages.iter().for_each(Message::touch);
    }

    /// Answers it: the marked messages as marked, every other one FIN.
    pub fn finish(mut self) {
        self.answer_with(&Outcome::Done);
    }

    /// Requeues all of it (`delay`: `None` is the default delay for each message's attempts)
    /// with backoff, counted once for the whole batch; marked messages keep their marks.
    pub fn requeue(mut self, delay: Option<Duration>) {
        let error = HandlerError::msg("the batch was requeued");
        let error = match delay {
            Some(d) => error.with_delay(d),
            None => error,
        };
        self.answer_with(&Outcome::Failed(error));
    }

    /// Answers it as `run_batch` answers a handler's result: `Ok` as
    /// [`finish`](Self::finish); `Err` requeues every message not marked otherwise as the
    /// error says (its delay; backoff unless
    /// [`without_backoff`](HandlerError::without_backoff), counted once), and logs it.
    pub fn answer(mut self, result: Result<(), HandlerError>) {
        self.answer_with(&Outcome::from(result));
    }

    /// Takes the messages out, to answer each one yourself (marks are dropped).
    pub fn into_messages(mut self) -> Vec<Message> {
        self.runner = None;
        std::mem::take(&mut self.messages)
    }

    /// What the consumer's batches share (for `run_batch`'s runner, which outlives the batch).
    pub(crate) fn shared(&self) -> Arc<BatchShared> {
        self.shared.clone()
    }

    /// In `run_batch`: a batch dropped unanswered goes back to `runner`.
    pub(crate) fn run_by(&mut self, runner: Arc<Runner>) {
        self.runner = Some(runner);
    }

    /// Answers every message: by its mark, else by `outcome`. At most one requeue carries
    /// backoff, so a failed batch counts once.
    pub(crate) fn answer_with(&mut self, outcome: &Outcome) {
        self.runner = None;
        let messages = std::mem::take(&mut self.messages);
        if messages.is_empty() {
            return;
        }
        let marks = std::mem::take(&mut self.marks);
        let failed = !matches!(outcome, Outcome::Done);
        if failed {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
            self.log_failure(outcome, messages.len());
        }
        let whole = outcome.answer_kind();
        let mut backoff_sent = false;
        let mut marks = marks.into_iter();
        let mut requeued_alone = 0;
        for message in messages {
            let (kind, failure) = match marks.next() {
                Some(Mark::Requeue { delay, backoff }) => {
                    requeued_alone += 1;
                    (AnswerKind::Requeue { delay, backoff }, false)
                }
                Some(Mark::Failed(e)) => {
                    requeued_alone += 1;
                    self.shared.span.in_scope(|| {
                        tracing::warn!(
                            msg_id = %message.id(),
                            attempts = message.attempts(),
                            nsqd = %message.nsqd_address(),
                            error = format_args!("{e:#}"),
                            "message of a batch failed: requeueing it"
                        );
                    });
                    (e.answer_kind(), true)
                }
                Some(Mark::Finish) | None => (whole, failed),
            };
            let kind = match kind {
                AnswerKind::Requeue { delay, backoff } => {
                    let backoff = backoff && !backoff_sent;
                    backoff_sent |= backoff;
                    AnswerKind::Requeue { delay, backoff }
                }
                other => other,
            };
            message.answer_as(kind, failure);
        }
        // Room was made: until the driver says otherwise, more can come.
        self.shared.full.store(false, Ordering::Release);
        if !failed && requeued_alone > 0 {
            self.shared
                .messages_requeued
                .fetch_add(requeued_alone, Ordering::Relaxed);
        }
    }

    fn log_failure(&self, outcome: &Outcome, size: usize) {
        self.shared.metrics.failed();
        if self.shared.events.wanted() {
            let error = match outcome {
                Outcome::Failed(e) => format!("{e:#}"),
                Outcome::Panicked(panic) => format!("panicked: {panic}"),
                Outcome::Done => String::new(),
            };
            self.shared.events.emit(&Event::BatchFailed {
                messages: size,
                error,
            });
        }
        self.shared.span.in_scope(|| match outcome {
            Outcome::Failed(e) => tracing::warn!(
                messages = size,
                error = format_args!("{e:#}"),
                "batch handler failed: requeueing the batch"
            ),
            Outcome::Panicked(panic) => tracing::error!(
                messages = size,
                panic = panic.as_str(),
                "batch handler panicked: requeueing the batch"
            ),
            Outcome::Done => {}
        });
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.messages.is_empty() {
            return;
        }
        if let Some(runner) = self.runner.take() {
            let rest = Batch {
                messages: std::mem::take(&mut self.messages),
                marks: std::mem::take(&mut self.marks),
                bytes: self.bytes,
                end: self.end,
                lingered: self.lingered,
                runner: None,
                shared: self.shared.clone(),
            };
            // A closed runner (its handler returned and kept the batch) hands it back, to be
            // answered as any batch dropped unanswered.
            if let Some(mut rest) = runner.give_back(rest) {
                rest.dropped();
            }
            return;
        }
        self.dropped();
    }
}

impl Batch {
    /// Dropped without an answer: requeued without backoff, with one warning.
    fn dropped(&mut self) {
        let size = self.messages.len();
        self.shared.span.in_scope(|| {
            tracing::warn!(
                messages = size,
                "batch dropped without an answer: requeueing its messages with the default \
                 delay; answer every batch (finish, requeue or answer)"
            );
        });
        self.marks.clear();
        for m in std::mem::take(&mut self.messages) {
            m.answer_as(AnswerKind::DROPPED, false);
        }
        self.shared.full.store(false, Ordering::Release);
    }
}

/// One message of a batch and its mark (from [`Batch::iter_mut`] or [`Batch::get_mut`]):
/// reads as the [`Message`]; [`fail`](Self::fail), [`requeue`](Self::requeue) or
/// [`requeue_without_backoff`](Self::requeue_without_backoff) change how it is answered
/// when the batch is (the last call counts).
#[derive(Debug)]
pub struct BatchEntry<'a> {
    message: &'a Message,
    mark: &'a mut Mark,
}

impl Deref for BatchEntry<'_> {
    type Target = Message;

    fn deref(&self) -> &Message {
        self.message
    }
}

impl BatchEntry<'_> {
    /// Failed: requeued as `error` says (its delay; backoff unless
    /// [`without_backoff`](HandlerError::without_backoff), counted once per batch), and
    /// logged at WARN with the message's id.
    pub fn fail(&mut self, error: impl Into<HandlerError>) {
        *self.mark = Mark::Failed(error.into());
    }

    /// REQ with backoff (counted once per batch) after `delay` (`None`: the default).
    pub fn requeue(&mut self, delay: Option<Duration>) {
        *self.mark = Mark::Requeue {
            delay,
            backoff: true,
        };
    }

    /// REQ without backoff after `delay` (`None`: the default): a failure of this message,
    /// not of the system.
    pub fn requeue_without_backoff(&mut self, delay: Option<Duration>) {
        *self.mark = Mark::Requeue {
            delay,
            backoff: false,
        };
    }

    /// FIN with the batch, whatever the batch's outcome (undoes a mark).
    pub fn finish(&mut self) {
        *self.mark = Mark::Finish;
    }
}

// ----------------------------------------------------------------------------------- runner

/// Where a `run_batch` handler's batch goes back to when the handler drops it unanswered.
#[derive(Debug, Default)]
pub(crate) struct Runner(Mutex<RunnerState>);

#[derive(Debug, Default)]
enum RunnerState {
    #[default]
    Waiting,
    Back(Box<Batch>),
    Closed,
}

impl Runner {
    /// Keeps `batch` for the runner; returns it when the runner no longer waits.
    fn give_back(&self, batch: Batch) -> Option<Batch> {
        let mut state = lock(&self.0);
        match *state {
            RunnerState::Waiting => {
                *state = RunnerState::Back(Box::new(batch));
                None
            }
            _ => Some(batch),
        }
    }

    /// The handler returned with `outcome`: answers the batch it dropped, if it did; stops
    /// waiting otherwise (a batch the handler kept answers itself).
    pub(crate) fn handler_returned(&self, outcome: &Outcome, shared: &BatchShared) {
        let back = std::mem::replace(&mut *lock(&self.0), RunnerState::Closed);
        match back {
            RunnerState::Back(mut batch) => batch.answer_with(outcome),
            _ if !matches!(outcome, Outcome::Done) => shared.span.in_scope(|| {
                tracing::warn!(
                    outcome = ?outcome,
                    "batch handler failed after answering (or keeping) its batch: the \
                     batch's own answers stand"
                );
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Answer;
    use crate::delivery::{AnswerSink, Delivery, Origin};
    use crate::message::AnswerChannel;
    use bytes::Bytes;
    use nsq_proto::MessageId;

    #[derive(Default)]
    struct Collect(Mutex<Vec<AnswerKind>>);

    impl AnswerSink for Collect {
        fn send_answer(&self, answer: Answer, _: Bytes) {
            self.0.lock().unwrap().push(answer.kind);
        }
    }

    /// A batch of `n` messages answering into the returned sink.
    fn batch(n: usize) -> (Batch, Arc<Collect>) {
        let sink = Arc::new(Collect::default());
        let metrics = crate::metrics::ConsumerMetrics::new("t", "c", false);
        let origin = Origin::new(
            "127.0.0.1:4150",
            AnswerChannel(sink.clone()),
            metrics.answers(),
        );
        let conn = crate::test_conn();
        let mut fill = Filling::new(BatchOptions::new());
        #[allow(clippy::disallowed_methods, reason = "a test's clock")]
        let now = Instant::now();
        for i in 0..n {
            let id = format!("{i:016}");
            let m = nsq_proto::Message {
                timestamp: 1,
                attempts: 1,
                id: MessageId::from(<[u8; 16]>::try_from(id.as_bytes()).unwrap()),
                body: Bytes::from_static(b"body"),
            };
            fill.push(Message(Delivery::new(conn, m, origin.clone())), || (now, n));
        }
        let shared = Arc::new(BatchShared::new(
            metrics.batches(),
            tracing::Span::none(),
            Arc::default(),
        ));
        (fill.into_batch(BatchEnd::Full, now, &shared), sink)
    }

    const REQ_BACKOFF: AnswerKind = AnswerKind::Requeue {
        delay: None,
        backoff: true,
    };
    const REQ: AnswerKind = AnswerKind::Requeue {
        delay: None,
        backoff: false,
    };

    #[test]
    fn options_keep_at_least_one_message() {
        assert_eq!(BatchOptions::new().max_messages(0).get_max_messages(), 1);
        let o = BatchOptions::default();
        assert_eq!(
            (o.get_max_messages(), o.get_max_bytes(), o.get_linger()),
            (100, 16 << 20, Duration::from_secs(1))
        );
    }

    #[test]
    fn finish_answers_the_marks_and_finishes_the_rest() {
        let (mut b, sink) = batch(3);
        assert_eq!((b.len(), b.bytes(), b.ended_by()), (3, 12, BatchEnd::Full));
        b.get_mut(1).unwrap().requeue_without_backoff(None);
        assert!(b.get_mut(3).is_none());
        let shared = b.shared.clone();
        b.finish();
        assert_eq!(
            *sink.0.lock().unwrap(),
            [AnswerKind::Finish, REQ, AnswerKind::Finish]
        );
        let stats = shared.stats();
        assert_eq!((stats.failed, stats.messages_requeued), (0, 1));
        assert_eq!((stats.batches, stats.messages, stats.largest), (1, 3, 3));
    }

    #[test]
    fn a_failed_batch_carries_backoff_on_one_requeue_only() {
        let (mut b, sink) = batch(4);
        for (i, mut e) in b.iter_mut().enumerate() {
            if i == 0 {
                e.fail(HandlerError::msg("bad").without_backoff());
            }
            if i == 2 {
                e.requeue(None);
                e.finish(); // the last mark counts
            }
        }
        let shared = b.shared.clone();
        b.answer(Err(HandlerError::msg("the store is down")));
        // The failed message keeps its own answer; the first requeue with backoff carries
        // it, the others go without: the batch counts once.
        assert_eq!(*sink.0.lock().unwrap(), [REQ, REQ_BACKOFF, REQ, REQ]);
        assert_eq!(shared.stats().failed, 1);
    }

    #[test]
    fn a_dropped_batch_is_requeued_without_backoff() {
        let (b, sink) = batch(2);
        drop(b);
        assert_eq!(*sink.0.lock().unwrap(), [AnswerKind::DROPPED; 2]);
        let (b, sink) = batch(2);
        let messages = b.into_messages();
        assert!(
            sink.0.lock().unwrap().is_empty(),
            "taken out: answered one by one"
        );
        messages.into_iter().for_each(Message::finish);
        assert_eq!(*sink.0.lock().unwrap(), [AnswerKind::Finish; 2]);
    }

    #[test]
    fn run_batch_answers_a_batch_its_handler_dropped() {
        let (mut b, sink) = batch(2);
        let runner = Arc::new(Runner::default());
        b.run_by(runner.clone());
        let shared = b.shared.clone();
        drop(b); // inside the handler
        assert!(sink.0.lock().unwrap().is_empty());
        runner.handler_returned(&Outcome::Panicked("boom".into()), &shared);
        assert_eq!(*sink.0.lock().unwrap(), [REQ_BACKOFF, REQ]);

        // A handler that answered its batch itself: its result changes nothing.
        let (mut b, sink) = batch(1);
        let runner = Arc::new(Runner::default());
        b.run_by(runner.clone());
        b.finish();
        runner.handler_returned(&Outcome::Failed(HandlerError::msg("late")), &shared);
        assert_eq!(*sink.0.lock().unwrap(), [AnswerKind::Finish]);

        // A batch the handler kept past its return answers itself when dropped.
        let (mut b, sink) = batch(1);
        let runner = Arc::new(Runner::default());
        b.run_by(runner.clone());
        runner.handler_returned(&Outcome::Done, &shared);
        assert!(sink.0.lock().unwrap().is_empty());
        drop(b);
        assert_eq!(*sink.0.lock().unwrap(), [AnswerKind::DROPPED]);
    }
}
