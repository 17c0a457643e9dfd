//! The three hand-offs between a client's handles and its driver, each usable from async
//! code and, through any `block_on`, from plain threads:
//!
//! * [`Inbox`]: commands and answers to the driver (a short lock and a push per command, a
//!   wake-up per batch; the driver takes the batch at once);
//! * [`oneshot`]: one reply back (one small allocation, one short lock per side);
//! * [`Mailbox`]: messages to the application, pushed once per wake-up of the driver and
//!   taken one at a time or all at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

/// Locks `m`, through a poisoned lock too (what it guards is left consistent between
/// statements: a panic elsewhere does not make it unusable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Commands from the handles to the driver: a vector under a lock, taken by the driver all at
/// once (swapped for its empty one), and the driver's waker, woken by the command that finds
/// the vector empty (the later ones of a batch need no wake-up: one is under way).
pub(crate) struct Inbox<T> {
    state: Mutex<InboxState<T>>,
    waker: atomic_waker::AtomicWaker,
}

struct InboxState<T> {
    items: Vec<T>,
    closed: bool,
}

impl<T> Inbox<T> {
    pub(crate) fn new() -> Arc<Inbox<T>> {
        Arc::new(Inbox {
            state: Mutex::new(InboxState {
                items: Vec::new(),
                closed: false,
            }),
            waker: atomic_waker::AtomicWaker::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` for the driver; gives it back once the driver has stopped.
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        let first = {
            let mut state = self.lock();
            if state.closed {
                return Err(item);
            }
            state.items.push(item);
            state.items.len() == 1
        };
        if first {
            self.waker.wake();
        }
        Ok(())
    }

    /// For the driver: wake `waker` on the next [`send`](Self::send). Register before
    /// taking the commands, so nothing queued in between is missed.
    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    /// For the driver: every queued command, swapped into `into` (which must be empty, and
    /// keeps its capacity for the next batch).
    pub(crate) fn take_all(&self, into: &mut Vec<T>) {
        std::mem::swap(&mut self.lock().items, into);
    }

    /// For the driver, when it stops: refuse further commands; returns the ones queued.
    pub(crate) fn close(&self) -> Vec<T> {
        let mut state = self.lock();
        state.closed = true;
        std::mem::take(&mut state.items)
    }
}

/// A one-shot reply: the value (or that the sender is gone) and the waiting task's waker,
/// under one short lock. Not a lock-free queue: those are cache-padded (128-byte aligned), so
/// every reply cost an over-aligned allocation, which measured as the costliest `malloc`
/// path of a publisher.
struct Slot<T> {
    state: Mutex<SlotState<T>>,
}

struct SlotState<T> {
    value: Option<T>,
    /// The sender is gone (sent or dropped).
    closed: bool,
    waker: Option<Waker>,
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Updates the state and wakes the receiver.
    fn tell(&self, f: impl FnOnce(&mut SlotState<T>)) {
        let waker = {
            let mut state = self.lock();
            f(&mut state);
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The sending side of a one-shot reply; dropping it unsent makes the receiver see `Err`.
/// (`None` once sent: its drop then has nothing left to tell.)
pub(crate) struct ReplyTx<T>(Option<Arc<Slot<T>>>);

/// The receiving side of a one-shot reply.
pub(crate) struct ReplyRx<T>(Arc<Slot<T>>);

/// The sender is gone without a value (the driver stopped).
#[derive(Debug)]
pub(crate) struct Canceled;

/// A one-shot reply channel.
pub(crate) fn oneshot<T>() -> (ReplyTx<T>, ReplyRx<T>) {
    let slot = Arc::new(Slot {
        state: Mutex::new(SlotState {
            value: None,
            closed: false,
            waker: None,
        }),
    });
    (ReplyTx(Some(slot.clone())), ReplyRx(slot))
}

impl<T> ReplyTx<T> {
    /// Sends the value (once: it takes the sender; the receiver may be gone). One lock: the
    /// sender's drop that follows has nothing left to do.
    pub(crate) fn send(mut self, value: T) {
        if let Some(slot) = self.0.take() {
            slot.tell(|s| {
                s.value = Some(value);
                s.closed = true;
            });
        }
    }
}

impl<T> Drop for ReplyTx<T> {
    fn drop(&mut self) {
        if let Some(slot) = &self.0 {
            slot.tell(|s| s.closed = true);
        }
    }
}

impl<T> ReplyRx<T> {
    /// The value, or `Err` if the sender was dropped without sending.
    pub(crate) async fn recv(mut self) -> Result<T, Canceled> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The value once sent (`Err` if the sender was dropped without sending, or the value
    /// was already taken); `Pending` until then, waking `cx` when it comes.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Canceled>> {
        let mut state = self.0.lock();
        if let Some(v) = state.value.take() {
            return Poll::Ready(Ok(v));
        }
        if state.closed {
            return Poll::Ready(Err(Canceled));
        }
        if !state
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The value if it was sent, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Result<T, Canceled>> {
        let mut state = self.0.lock();
        match state.value.take() {
            Some(v) => Some(Ok(v)),
            None if state.closed => Some(Err(Canceled)),
            None => None,
        }
    }
}

/// Messages from the driver to the application's receivers.
///
/// The driver pushes what one wake-up produced under one lock and wakes the waiting
/// receivers; a receiver takes one item, or swaps the whole queue for its empty one (one
/// lock per batch). Once the last receiver is gone, pushes are refused, so the driver
/// knows nobody will take what it hands out.
pub(crate) struct Mailbox<T> {
    state: Mutex<MailState<T>>,
    /// Receivers alive.
    receivers: AtomicUsize,
}

struct MailState<T> {
    items: VecDeque<T>,
    /// The driver hands out nothing more.
    closed: bool,
    /// Wakers of the receivers waiting for an item.
    waiters: Vec<Waker>,
}

impl<T> Mailbox<T> {
    /// A mailbox with one receiver (count it up with [`add_receiver`](Self::add_receiver)).
    pub(crate) fn new() -> Arc<Mailbox<T>> {
        Arc::new(Mailbox {
            state: Mutex::new(MailState {
                items: VecDeque::new(),
                closed: false,
                waiters: Vec::new(),
            }),
            receivers: AtomicUsize::new(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MailState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// For the driver: hands out `items` (emptying it: swapped with the mailbox's empty queue
    /// when the receivers have taken everything, as they usually have, else appended).
    /// Refused (the items stay) when the mailbox is closed or no receiver is left.
    pub(crate) fn push_all(&self, items: &mut VecDeque<T>) -> Result<(), ()> {
        if items.is_empty() {
            return Ok(());
        }
        let waiters = {
            let mut state = self.lock();
            if state.closed || self.receivers.load(Ordering::Acquire) == 0 {
                return Err(());
            }
            if state.items.is_empty() {
                std::mem::swap(&mut state.items, items);
            } else {
                state.items.append(items);
            }
            std::mem::take(&mut state.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
        Ok(())
    }

    /// For the driver: nothing more is handed out; waiting receivers see the end.
    pub(crate) fn close(&self) {
        let waiters = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
    }

    /// The next item; `Ready(None)` once closed and empty.
    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.lock();
        if let Some(item) = pop_front(&mut state.items) {
            return Poll::Ready(Some(item));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        register(&mut state.waiters, cx.waker());
        Poll::Pending
    }

    /// Moves every queued item into `into` (which must be empty: the queues are swapped).
    /// `Ready(false)` once closed and empty.
    pub(crate) fn poll_take_all(&self, cx: &mut Context<'_>, into: &mut VecDeque<T>) -> Poll<bool> {
        let mut state = self.lock();
        if !state.items.is_empty() {
            std::mem::swap(&mut state.items, into);
            return Poll::Ready(true);
        }
        if state.closed {
            return Poll::Ready(false);
        }
        register(&mut state.waiters, cx.waker());
        Poll::Pending
    }

    /// Takes every queued item at once.
    pub(crate) fn take_all(&self) -> VecDeque<T> {
        std::mem::take(&mut self.lock().items)
    }

    /// Whether the driver closed it.
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// One more receiver (a clone for a worker).
    pub(crate) fn add_receiver(&self) {
        self.receivers.fetch_add(1, Ordering::AcqRel);
    }

    /// A receiver is gone; returns whether it was the last one. The caller then empties
    /// the mailbox: the driver pushes nothing more once the count is zero.
    pub(crate) fn remove_receiver(&self) -> bool {
        // Under the lock, so no push slips in between the count and the caller's drain.
        let _state = self.lock();
        self.receivers.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

/// Adds `waker` to `waiters` unless it is there already.
fn register(waiters: &mut Vec<Waker>, waker: &Waker) {
    if !waiters.iter().any(|w| w.will_wake(waker)) {
        waiters.push(waker.clone());
    }
}

/// `queue.pop_front()`, and once the queue is empty, its next push starts again at the front
/// of its buffer: a queue filled and emptied in bursts (the messages of one wake-up) keeps
/// reusing the same, cache-warm, slots instead of cycling through its whole capacity (the
/// core does the same with its queues).
pub(crate) fn pop_front<T>(queue: &mut VecDeque<T>) -> Option<T> {
    let item = queue.pop_front();
    if queue.is_empty() {
        queue.clear();
    }
    item
}

/// A waker that counts its wake-ups, for this crate's tests.
#[cfg(test)]
pub(crate) mod counting {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    /// How many times its waker was woken (`.0`).
    pub(crate) struct Count(pub(crate) AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A counting waker, and its count.
    pub(crate) fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }
}

#[cfg(test)]
mod tests {
    use super::counting::waker;
    use super::*;

    fn poll_once<F: std::future::Future>(f: F) -> Poll<F::Output> {
        let (_, w) = waker();
        let mut f = std::pin::pin!(f);
        f.as_mut().poll(&mut Context::from_waker(&w))
    }

    #[test]
    fn oneshot_delivers_once_or_reports_cancel() {
        let (tx, rx) = oneshot();
        tx.send(1);
        assert!(matches!(poll_once(rx.recv()), Poll::Ready(Ok(1))));
        let (tx, rx) = oneshot::<u8>();
        drop(tx);
        assert!(matches!(poll_once(rx.recv()), Poll::Ready(Err(Canceled))));
        let (tx, rx) = oneshot::<u8>();
        let mut fut = Box::pin(rx.recv());
        let (count, w) = waker();
        assert!(fut.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
        tx.send(5);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the receiver is woken");
        assert!(matches!(
            fut.as_mut().poll(&mut Context::from_waker(&w)),
            Poll::Ready(Ok(5))
        ));
    }

    #[test]
    fn inbox_wakes_once_per_batch_and_refuses_after_close() {
        let inbox = Inbox::new();
        let (count, w) = waker();
        inbox.register(&w);
        inbox.send(1).unwrap();
        inbox.register(&w);
        inbox.send(2).unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "one wake-up for the batch"
        );
        let mut batch = Vec::new();
        inbox.take_all(&mut batch);
        assert_eq!(batch, [1, 2]);
        batch.clear();
        inbox.send(3).unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "the next batch wakes again"
        );
        assert_eq!(inbox.close(), [3]);
        assert_eq!(inbox.send(4), Err(4));
        inbox.take_all(&mut batch);
        assert!(batch.is_empty());
    }

    #[test]
    fn mailbox_hands_out_batches_and_refuses_without_receivers() {
        let mailbox = Mailbox::new();
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        assert!(mailbox.poll_recv(&mut cx).is_pending());
        assert!(mailbox.poll_recv(&mut cx).is_pending(), "registered once");
        mailbox.push_all(&mut VecDeque::from([1, 2])).unwrap();
        mailbox.push_all(&mut VecDeque::from([3])).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(mailbox.poll_recv(&mut cx), Poll::Ready(Some(1)));
        let mut local = VecDeque::new();
        assert_eq!(
            mailbox.poll_take_all(&mut cx, &mut local),
            Poll::Ready(true)
        );
        assert_eq!(local, [2, 3]);
        mailbox.add_receiver();
        assert!(!mailbox.remove_receiver());
        assert!(mailbox.remove_receiver(), "the last receiver");
        let mut refused = VecDeque::from([4]);
        assert!(mailbox.push_all(&mut refused).is_err());
        assert_eq!(refused, [4], "a refused push keeps its items");
        mailbox.close();
        assert!(mailbox.is_closed());
        assert_eq!(mailbox.poll_recv(&mut cx), Poll::Ready(None));
        assert!(mailbox.take_all().is_empty());
    }
}
