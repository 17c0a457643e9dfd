//! A consumer's event stream ([`Events`], from `Consumer::events`): what happened to its
//! connections and its flow, as it happened, for health checks, dashboards and tests.
//!
//! Each stream has a queue of its own, bounded: a stream that is not read does not hold the
//! consumer back, and loses its oldest events, which it then reports as one
//! [`Event::Lagged`]. Nothing is recorded while no stream exists.

use nsq_proto::{MessageId, Misconfiguration};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::TryRecvError;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Events a stream keeps before it drops its oldest ones.
pub const EVENTS_CAPACITY: usize = 1024;

/// Something that happened to a consumer (see [`Events`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A connection to an nsqd is ready: subscribed, messages can flow.
    Connected {
        /// The nsqd TCP address.
        nsqd: String,
    },
    /// A connection to an nsqd ended, or an attempt to make one failed.
    Disconnected {
        /// The nsqd TCP address.
        nsqd: String,
        /// Why, in words.
        reason: String,
        /// When the consumer tries this nsqd again (`None`: stopping, misconfigured, or an
        /// nsqd found through nsqlookupd, which is tried again when a lookupd lists it).
        retry_in: Option<Duration>,
        /// The configuration cannot work with this nsqd, so it is not retried (see
        /// [`Error::Misconfigured`](super::Error::Misconfigured)).
        misconfigured: Option<Misconfiguration>,
    },
    /// The consumer entered backoff, or its level changed (a failed message raised it, a
    /// success lowered it). RDY is 0 everywhere, then 1 on one connection to test the water.
    Backoff {
        /// The new level (1 or more).
        level: u32,
    },
    /// The consumer left backoff: full speed again.
    BackoffEnded,
    /// A message delivered more than `max_attempts` times was given up on (finished; the
    /// `on_give_up` hook, if any, has seen it).
    GaveUp {
        /// The nsqd it came from.
        nsqd: String,
        /// Its id.
        id: MessageId,
        /// Its delivery attempts.
        attempts: u16,
    },
    /// The consumer became starved (`true`: some connection has at least 85% of its RDY in
    /// flight, so a batching handler should process what it holds now) or stopped being
    /// starved (`false`). See `Consumer::is_starved`.
    Starved(bool),
    /// A query to an nsqlookupd failed (the others, and the next polls, carry on).
    LookupdFailed {
        /// The lookupd address.
        lookupd: String,
        /// Why, in words.
        error: String,
        /// The address is not an nsqlookupd's HTTP port: it is not polled again until it is
        /// added again.
        misconfigured: bool,
    },
    /// The adaptive in-flight limit moved (`max_in_flight_mode = adaptive`): the consumer
    /// now lets at most `limit` messages be in flight.
    InFlightLimit {
        /// The new limit.
        limit: u32,
        /// The median handling latency that moved it (zero when an expired message did).
        latency: Duration,
        /// The uncongested latency it is measured against, once measured.
        uncongested: Option<Duration>,
    },
    /// A batch failed as a whole (its handler returned an error or panicked, or it was
    /// requeued): its messages were requeued, counted once for backoff.
    BatchFailed {
        /// How many messages it held.
        messages: usize,
        /// The handler's error (its whole chain) or panic, in words.
        error: String,
    },
    /// This stream fell behind by more than [`EVENTS_CAPACITY`] events: the oldest `missed`
    /// events were dropped before this one.
    Lagged {
        /// How many were dropped.
        missed: u64,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Connected { nsqd } => write!(f, "connected to nsqd {nsqd}"),
            Event::Disconnected {
                nsqd,
                reason,
                misconfigured: Some(problem),
                ..
            } => write!(
                f,
                "nsqd {nsqd} cannot be used as configured ({reason}): {problem}"
            ),
            Event::Disconnected {
                nsqd,
                reason,
                retry_in: Some(delay),
                ..
            } => write!(
                f,
                "nsqd {nsqd} disconnected ({reason}); retrying {}",
                crate::logging::RetryIn(*delay)
            ),
            Event::Disconnected { nsqd, reason, .. } => {
                write!(f, "nsqd {nsqd} disconnected ({reason})")
            }
            Event::Backoff { level } => write!(f, "backing off (level {level})"),
            Event::BackoffEnded => f.write_str("backoff ended"),
            Event::GaveUp { nsqd, id, attempts } => write!(
                f,
                "gave up on message {id} from nsqd {nsqd} after {attempts} attempts"
            ),
            Event::BatchFailed { messages, error } => {
                write!(f, "a batch of {messages} messages failed: {error}")
            }
            Event::Starved(true) => f.write_str("starved"),
            Event::Starved(false) => f.write_str("no longer starved"),
            Event::LookupdFailed { lookupd, error, .. } => {
                write!(f, "nsqlookupd {lookupd} query failed: {error}")
            }
            Event::InFlightLimit { limit, .. } => write!(f, "in-flight limit now {limit}"),
            Event::Lagged { missed } => write!(f, "{missed} events were dropped (lagging)"),
        }
    }
}

/// One stream's queue.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    events: VecDeque<Event>,
    missed: u64,
    closed: bool,
    waker: Option<Waker>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The consumer's side: where the driver records events for every live stream.
#[derive(Default)]
pub(crate) struct EventHub {
    state: Mutex<HubState>,
    /// Streams alive (an estimate that errs upwards: a dropped stream is removed on the next
    /// emit), so a consumer without streams builds no events at all.
    live: AtomicUsize,
}

#[derive(Default)]
struct HubState {
    streams: Vec<Weak<Queue>>,
    /// The consumer has stopped: new streams end at once.
    closed: bool,
}

impl EventHub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether any stream may want events.
    pub(crate) fn wanted(&self) -> bool {
        self.live.load(Ordering::Acquire) > 0
    }

    /// A new stream, which sees every event from now on (it ends at once when the consumer
    /// has stopped).
    pub(crate) fn subscribe(&self) -> Events {
        let queue = Arc::new(Queue::default());
        let mut hub = self.lock();
        if hub.closed {
            queue.lock().closed = true;
        } else {
            hub.streams.push(Arc::downgrade(&queue));
            self.live.fetch_add(1, Ordering::AcqRel);
        }
        Events { queue }
    }

    /// Records `event` for every live stream (dropping a lagging stream's oldest one).
    pub(crate) fn emit(&self, event: &Event) {
        let mut wake = Vec::new();
        {
            let mut hub = self.lock();
            hub.streams.retain(|w| {
                let Some(q) = w.upgrade() else {
                    self.live.fetch_sub(1, Ordering::AcqRel);
                    return false;
                };
                let mut s = q.lock();
                if s.events.len() >= EVENTS_CAPACITY {
                    s.events.pop_front();
                    s.missed += 1;
                }
                s.events.push_back(event.clone());
                wake.extend(s.waker.take());
                true
            });
        }
        wake.into_iter().for_each(Waker::wake);
    }

    /// The consumer has stopped: every stream ends once it has read what it holds.
    pub(crate) fn close(&self) {
        let mut wake = Vec::new();
        {
            let mut hub = self.lock();
            hub.closed = true;
            for q in hub.streams.drain(..).filter_map(|w| w.upgrade()) {
                let mut s = q.lock();
                s.closed = true;
                wake.extend(s.waker.take());
            }
            self.live.store(0, Ordering::Release);
        }
        wake.into_iter().for_each(Waker::wake);
    }
}

/// A consumer's event stream, from `Consumer::events` (or its handle's): every [`Event`] from
/// the moment it was made, in order, until the consumer has stopped (then `recv` returns
/// `None`). Several streams can exist; each sees every event.
///
/// Bounded: a stream that falls more than [`EVENTS_CAPACITY`] events behind loses its
/// oldest ones and says so with [`Event::Lagged`]. Dropping it costs the consumer nothing.
///
/// ```no_run
/// # use nsq_client::{Consumer, Event};
/// # async fn f(consumer: Consumer) {
/// let mut events = consumer.as_handle().events();
/// while let Some(event) = events.recv().await {
///     match event {
///         Event::Disconnected { misconfigured: Some(problem), nsqd, .. } => {
///             eprintln!("fix the configuration for {nsqd}: {problem}");
///         }
///         other => println!("{other}"),
///     }
/// }
/// # }
/// ```
pub struct Events {
    queue: Arc<Queue>,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.queue.lock();
        f.debug_struct("Events")
            .field("queued", &s.events.len())
            .field("closed", &s.closed)
            .finish()
    }
}

impl Events {
    /// The next event, waiting for it; `None` once the consumer has stopped and every event
    /// was read.
    pub async fn recv(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next event (for hand-written futures and streams): `Ready(None)` once the
    /// consumer has stopped and every event was read.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        let mut s = self.queue.lock();
        match take(&mut s) {
            Some(e) => Poll::Ready(Some(e)),
            None if s.closed => Poll::Ready(None),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// The next event if one is queued, without waiting (`Disconnected`: the consumer has
    /// stopped and every event was read).
    pub fn try_recv(&mut self) -> Result<Event, TryRecvError> {
        let mut s = self.queue.lock();
        match take(&mut s) {
            Some(e) => Ok(e),
            None if s.closed => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }
}

/// The next event of a queue: first the count of dropped ones, if any.
fn take(s: &mut QueueState) -> Option<Event> {
    if s.missed > 0 {
        let missed = std::mem::take(&mut s.missed);
        return Some(Event::Lagged { missed });
    }
    s.events.pop_front()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lagging_stream_keeps_the_newest_and_says_how_many_it_lost() {
        let hub = EventHub::default();
        assert!(!hub.wanted());
        let mut stream = hub.subscribe();
        assert!(hub.wanted());
        for level in 1..=(EVENTS_CAPACITY as u32 + 6) {
            hub.emit(&Event::Backoff { level });
        }
        assert_eq!(stream.try_recv(), Ok(Event::Lagged { missed: 6 }));
        assert_eq!(stream.try_recv(), Ok(Event::Backoff { level: 7 }));
        let rest = std::iter::from_fn(|| stream.try_recv().ok()).count();
        assert_eq!(rest, EVENTS_CAPACITY - 1);
        assert_eq!(stream.try_recv(), Err(TryRecvError::Empty));
        // Dropped streams are forgotten; closing ends the live ones and any made later.
        let other = hub.subscribe();
        drop(other);
        hub.emit(&Event::BackoffEnded);
        assert_eq!(stream.try_recv(), Ok(Event::BackoffEnded));
        hub.close();
        assert!(!hub.wanted());
        assert_eq!(stream.try_recv(), Err(TryRecvError::Disconnected));
        let mut late = hub.subscribe();
        assert_eq!(late.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn events_say_what_happened() {
        let e = Event::Disconnected {
            nsqd: "127.0.0.1:4151".into(),
            reason: "HTTP".into(),
            retry_in: None,
            misconfigured: Some(Misconfiguration::HttpPort),
        };
        assert!(
            e.to_string().contains("cannot be used as configured"),
            "{e}"
        );
        let e = Event::Disconnected {
            nsqd: "127.0.0.1:4150".into(),
            reason: "connection refused".into(),
            retry_in: Some(Duration::from_millis(1500)),
            misconfigured: None,
        };
        assert_eq!(
            e.to_string(),
            "nsqd 127.0.0.1:4150 disconnected (connection refused); retrying in 1.5s"
        );
        // A reconnect without delay (after nsqd refused one publish) says so.
        let e = Event::Disconnected {
            nsqd: "127.0.0.1:4150".into(),
            reason: "E_BAD_MESSAGE".into(),
            retry_in: Some(Duration::ZERO),
            misconfigured: None,
        };
        assert_eq!(
            e.to_string(),
            "nsqd 127.0.0.1:4150 disconnected (E_BAD_MESSAGE); retrying at once"
        );
    }
}
