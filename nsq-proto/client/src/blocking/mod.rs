//! The blocking API (`nsq-blocking`'s types): [`Consumer`], [`ConsumerHandle`],
//! [`Producer`], [`HttpClient`], [`Cluster`] and their builders, each call blocking the
//! calling thread until its result is known. They run the async client's calls to
//! completion on the calling thread through the client's runtime
//! ([`Runtime::block_on`]): on the blocking runtime a call that
//! waits drives its client itself, over the client's own poller.

mod admin;
mod consumer;
mod producer;

pub use admin::{Cluster, HttpClient};
pub use consumer::{Consumer, ConsumerBuilder, ConsumerHandle, IntoIter, Iter};
pub use producer::{PendingPublish, Producer, ProducerBuilder};

use super::Event;
use super::runtime::{Ended, Runtime, block_on_with, park_on};
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------- executor

/// Runs `future` on this thread to completion.
pub fn block_on<F: Future>(future: F) -> F::Output {
    match block_on_until(future, None) {
        Some(v) => v,
        None => unreachable!("no deadline"),
    }
}

/// Runs `future` on this thread until it completes (`Some`) or `deadline` passes (`None`).
/// The thread parks between polls, until a waker calls or the deadline passes.
pub fn block_on_until<F: Future>(future: F, deadline: Option<Instant>) -> Option<F::Output> {
    park_on(std::pin::pin!(future), deadline)
}

/// Runs `future` on this thread until it completes (`Some`) or `timeout` has passed since
/// it first had to wait (`None`). A future that is ready at once costs no clock read.
pub(crate) fn block_on_for<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Some(v) = poll_now(future.as_mut()) {
        return Some(v);
    }
    park_on(future, Some(now() + timeout))
}

/// The thread's clock, for a deadline of a thread that parks.
#[allow(
    clippy::disallowed_methods,
    reason = "a thread parks for real time; the driver's clock is the runtime's"
)]
fn now() -> Instant {
    Instant::now()
}

/// Polls `future` once with a waker that does nothing: the common case of a blocking call, a
/// reply or message already there, costs no waker and no clock read.
fn poll_now<F: Future>(future: Pin<&mut F>) -> Option<F::Output> {
    match future.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// A blocking call of a client on runtime `rt`: runs `future` to completion on this thread
/// ([`Runtime::block_on`]: driving the client while it waits where the runtime does).
fn call<F: Future>(rt: &dyn Runtime, future: F) -> F::Output {
    match wait_on(rt, future, || None) {
        Some(v) => v,
        None => unreachable!("no deadline"),
    }
}

/// [`call`] for at most `timeout` from when the future first has to wait (`None` after it).
fn call_for<F: Future>(rt: &dyn Runtime, future: F, timeout: Duration) -> Option<F::Output> {
    wait_on(rt, future, || Some(rt.now() + timeout))
}

/// Runs `future` on this thread through `rt` until it completes (`Some`) or the deadline
/// (asked for when it first has to wait) passes.
fn wait_on<F: Future>(
    rt: &dyn Runtime,
    future: F,
    deadline: impl FnOnce() -> Option<Instant>,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Some(v) = poll_now(future.as_mut()) {
        return Some(v);
    }
    block_on_with(rt, future, deadline())
}

/// Waits until the client's driver has ended (driving it meanwhile where the runtime's
/// blocking calls do); at once from inside the driver.
fn wait_ended(rt: &dyn Runtime, ended: &Ended) {
    if ended.is_current() {
        return;
    }
    call(rt, std::future::poll_fn(|cx| ended.poll_ended(cx)));
}

// ------------------------------------------------------------------------------------ events

/// What happens to a consumer from now on ([`ConsumerHandle::events`]): connections made
/// and lost (with why, and whether the configuration is at fault), backoff entered and left,
/// messages given up on, starvation, failed lookupd queries, as [`Event`]s. Also an
/// iterator, blocking in `next`, that ends when the consumer has stopped.
#[derive(Debug)]
pub struct Events(super::Events);

impl Events {
    /// The next event, waiting for it; `None` once the consumer has stopped and every event
    /// was read.
    pub fn recv(&mut self) -> Option<Event> {
        block_on(self.0.recv())
    }

    /// The next event, waiting at most `timeout`: `Err(Timeout)` if none came,
    /// `Err(Disconnected)` once the consumer has stopped and every event was read.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        match block_on_for(self.0.recv(), timeout) {
            Some(Some(e)) => Ok(e),
            Some(None) => Err(RecvTimeoutError::Disconnected),
            None => Err(RecvTimeoutError::Timeout),
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Result<Event, TryRecvError> {
        self.0.try_recv()
    }
}

impl Iterator for Events {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a test of real waits: another thread wakes the parked one"
    )]
    fn block_on_runs_to_completion_or_to_the_deadline() {
        assert_eq!(block_on(async { 7 }), 7);
        let start = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(
            block_on_until(never, Some(start + Duration::from_millis(20))),
            None
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        // A waker from another thread unparks it.
        let (tx, rx) = super::super::sync::oneshot();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(5);
        });
        assert!(matches!(block_on(rx.recv()), Ok(5)));
        t.join().unwrap();
    }
}
