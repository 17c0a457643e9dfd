//! A consumer's messages in batches: [`Consumer::recv_batch`], the [`Batches`] stream and
//! [`Consumer::run_batch`]; the blocking API's `recv_batch` waits through the runtime's
//! `block_on` instead ([`Consumer::recv_batch_blocking`]). What a batch is and how it is
//! answered: [`crate::batch`].

use super::{Consumer, ConsumerHandle, MessageReceiver, as_handler_of};
use crate::batch::{Batch, BatchEnd, BatchOptions, Filling, Runner};
use crate::handler::Outcome;
use crate::runtime::{BoxFuture, CallWaiter, Runtime, Timer, wait_for};
use crate::sync::lock;
use crate::{HandlerError, Message, StopReport};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

impl MessageReceiver {
    /// Adds the messages at hand to `fill`: `Ready(Some(end))` once the batch is to be handed
    /// over for `end` (linger aside: the caller's timer), `Ready(None)` once the consumer
    /// has stopped with nothing gathered, `Pending` otherwise (woken by the next message, or
    /// when nothing more can come).
    pub(super) fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        fill: &mut Filling,
        runtime: &dyn Runtime,
    ) -> Poll<Option<BatchEnd>> {
        loop {
            if fill.messages.len() >= fill.options.get_max_messages() {
                return Poll::Ready(Some(BatchEnd::Full));
            }
            if self.shared.stopping.load(Ordering::Acquire) {
                self.gather_leftovers(fill, runtime);
                return Poll::Ready((!fill.messages.is_empty()).then_some(BatchEnd::Stop));
            }
            match self.poll_recv(cx) {
                Poll::Ready(Some(m)) => {
                    if fill.would_overflow(m.body().len()) {
                        self.carried = Some(m);
                        return Poll::Ready(Some(BatchEnd::Bytes));
                    }
                    fill.push(m, || (runtime.now(), self.room()));
                    if fill.bytes >= fill.options.get_max_bytes() {
                        return Poll::Ready(Some(BatchEnd::Bytes));
                    }
                }
                Poll::Ready(None) => {
                    return Poll::Ready((!fill.messages.is_empty()).then_some(BatchEnd::Stop));
                }
                Poll::Pending => {
                    if !fill.messages.is_empty() && self.shared.batches.poll_full(cx.waker()) {
                        return Poll::Ready(Some(BatchEnd::Bound));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl MessageReceiver {
    /// How many messages can arrive at most (the consumer's max_in_flight).
    fn room(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::Relaxed) as usize
    }

    /// The consumer stops: the messages received and not taken yet join the partial batch
    /// as far as it has room (they are in memory, and the handler writes them with the rest
    /// instead of nsqd sending them again); the others are requeued at once.
    fn gather_leftovers(&mut self, fill: &mut Filling, runtime: &dyn Runtime) {
        let mut leftovers: VecDeque<Message> = self.carried.take().into_iter().collect();
        leftovers.append(&mut self.local);
        leftovers.append(&mut self.mailbox.take_all());
        for mut m in leftovers {
            let fits = fill.messages.len() < fill.options.get_max_messages()
                && !fill.would_overflow(m.body().len())
                && fill.bytes < fill.options.get_max_bytes();
            if fits {
                m.taken();
                fill.push(m, || (runtime.now(), self.room()));
            } else {
                m.release();
            }
        }
    }
}

/// A batch an async caller is gathering: its messages and its linger timer.
struct Gathering {
    fill: Filling,
    timer: Option<Box<dyn Timer>>,
}

impl Gathering {
    fn new(options: BatchOptions) -> Gathering {
        Gathering {
            fill: Filling::new(options),
            timer: None,
        }
    }

    /// The next batch from `receiver`; `Ready(None)` once the consumer has stopped.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        receiver: &mut MessageReceiver,
        runtime: &dyn Runtime,
    ) -> Poll<Option<Batch>> {
        let end = match receiver.poll_fill(cx, &mut self.fill, runtime) {
            Poll::Ready(end) => end,
            Poll::Pending => {
                let Some(deadline) = self.fill.deadline() else {
                    return Poll::Pending;
                };
                if runtime.now() < deadline {
                    let timer = self.timer.get_or_insert_with(|| runtime.timer(deadline));
                    if timer.poll_expired(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                Some(BatchEnd::Linger)
            }
        };
        self.timer = None;
        let options = self.fill.options;
        let fill = std::mem::replace(&mut self.fill, Filling::new(options));
        let shared = &receiver.shared.batches;
        Poll::Ready(end.map(|end| fill.into_batch(end, runtime.now(), shared)))
    }
}

impl Consumer {
    /// The next batch of messages ([`BatchOptions`]: at most `max_messages` and
    /// `max_bytes`, handed over `linger` after its first message at the latest, or as soon as
    /// nothing more can arrive before an answer); `None` once the consumer is stopped. After
    /// a stop, the partial batch comes first (with the messages received and not taken yet,
    /// as far as it has room): answer it, the drain waits for it.
    ///
    /// Answer the batch ([`Batch::finish`], [`Batch::requeue`], [`Batch::answer`]); one
    /// dropped unanswered is requeued. A call dropped before it returns (a `select!` that
    /// took another branch) requeues at once what it had gathered.
    ///
    /// Batches turn the consumer's `auto_touch` on: their messages are touched before
    /// `msg_timeout` while they wait for the batch to fill and while it is handled.
    pub async fn recv_batch(&mut self, options: &BatchOptions) -> Option<Batch> {
        self.handle.start_batching();
        let mut gathering = Gathering::new(*options);
        let mut waiter = CallWaiter::of(self.handle.runtime());
        let (receiver, runtime) = (&mut self.receiver, &*self.handle.guard.runtime);
        std::future::poll_fn(|cx| waiter.poll(cx, |cx| gathering.poll(cx, receiver, runtime))).await
    }

    /// The consumer's messages as a `Stream` of batches (`futures_core::Stream<Item =
    /// Batch>`; see [`recv_batch`](Self::recv_batch)). It ends once the consumer is stopped
    /// (through [`Batches::as_handle`]), after the partial batch.
    pub fn batches(self, options: BatchOptions) -> Batches {
        self.handle.start_batching();
        Batches {
            consumer: self,
            gathering: Gathering::new(options),
        }
    }

    /// Runs `handler` on batches of messages ([`BatchOptions`]), up to `workers` batches at
    /// a time, until the consumer is stopped (through a [`ConsumerHandle`]); returns the
    /// stop's report once every handler has returned. Batches are gathered one at a time
    /// (the next while the handlers of the last ones run), so each gets what arrives.
    ///
    /// The handler's result answers its batch: `Ok(())` finishes every message, except those
    /// marked otherwise ([`Batch::iter_mut`], [`BatchEntry`](crate::BatchEntry): failed or
    /// requeued on their own); an `Err` requeues the batch (as [`HandlerError`] says: its
    /// delay, with backoff unless [`HandlerError::without_backoff`]), counted once for
    /// backoff; a panic requeues it with backoff. The handler may also answer the batch
    /// itself ([`Batch::finish`], ...); its result then changes nothing.
    ///
    /// On stop, the partial batch is handed to a handler (with the messages received and not
    /// taken yet, as far as it has room; the rest are requeued at once), and the drain waits
    /// for its answer. `max_in_flight` bounds what all the batches hold together: below
    /// `max_messages x workers`, batches are handed over as soon as the bound is reached
    /// ([`BatchEnd::Bound`]), smaller than `max_messages`.
    pub async fn run_batch<H, Fut>(
        self,
        workers: usize,
        options: BatchOptions,
        handler: H,
    ) -> StopReport
    where
        H: Fn(Batch) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handle.start_batching();
        self.handle.warn_if_batches_capped(workers, &options);
        let Consumer {
            receiver,
            handle,
            waiter,
        } = self;
        let id = handle.id();
        let handler = Arc::new(handler);
        let turns = Arc::new(Turns::new(receiver, options));
        let runtime = handle.guard.runtime.clone();
        let workers: Vec<BoxFuture<()>> = (0..workers.max(1))
            .map(|worker| {
                let (handler, turns, runtime) = (handler.clone(), turns.clone(), runtime.clone());
                Box::pin(async move {
                    while let Some(batch) =
                        std::future::poll_fn(|cx| turns.poll(cx, worker, &*runtime)).await
                    {
                        handle_batch(&*handler, id, batch).await;
                    }
                }) as BoxFuture<()>
            })
            .collect();
        wait_for(waiter, handle.runtime().run_workers(workers)).await;
        drop(turns);
        handle.stop().await
    }

    /// [`recv_batch`](Self::recv_batch) for the blocking API: waits through the runtime's
    /// `block_on`, with linger as its deadline.
    pub(crate) fn recv_batch_blocking(&mut self, options: &BatchOptions) -> Option<Batch> {
        self.handle.start_batching();
        let runtime = &*self.handle.guard.runtime;
        let receiver = &mut self.receiver;
        let mut fill = Filling::new(*options);
        let end = loop {
            let deadline = fill.deadline();
            let mut end = None;
            let done = {
                let mut fut = std::pin::pin!(std::future::poll_fn(|cx| {
                    match receiver.poll_fill(cx, &mut fill, runtime) {
                        Poll::Ready(e) => {
                            end = Some(e);
                            Poll::Ready(())
                        }
                        // The first message came: wait again, with the linger's deadline.
                        Poll::Pending if deadline.is_none() && fill.first_at.is_some() => {
                            Poll::Ready(())
                        }
                        Poll::Pending => Poll::Pending,
                    }
                }));
                runtime.block_on(fut.as_mut(), deadline)
            };
            match end {
                Some(end) if done => break end,
                _ if deadline.is_some_and(|d| runtime.now() >= d) => break Some(BatchEnd::Linger),
                _ => {}
            }
        };
        let shared = &receiver.shared.batches;
        end.map(|end| fill.into_batch(end, runtime.now(), shared))
    }
}

/// Runs `handler` on `batch` (as a handler of the consumer `id`), then answers the batch with
/// its result unless the handler answered it.
async fn handle_batch<H, Fut>(handler: &H, id: usize, mut batch: Batch)
where
    H: Fn(Batch) -> Fut,
    Fut: Future<Output = Result<(), HandlerError>>,
{
    let runner = Arc::new(Runner::default());
    batch.run_by(runner.clone());
    let shared = batch.shared();
    let span = shared.span().clone();
    let made = span.in_scope(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            as_handler_of(id, || handler(batch))
        }))
    });
    let outcome = match made {
        Ok(fut) => {
            let mut fut = std::pin::pin!(fut);
            std::future::poll_fn(|cx| {
                span.in_scope(|| {
                    let poll = || as_handler_of(id, || fut.as_mut().poll(cx));
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(poll))
                        .map_or_else(|panic| Poll::Ready(Err(panic)), |p| p.map(Ok))
                })
            })
            .await
        }
        Err(panic) => Err(panic),
    };
    runner.handler_returned(&Outcome::caught(outcome), &shared);
}

/// `run_batch`'s workers take turns gathering: one gathers (and owns the linger timer) while
/// the others handle their batches or wait for their turn.
struct Turns(Mutex<TurnState>);

struct TurnState {
    receiver: MessageReceiver,
    gathering: Gathering,
    /// The worker gathering now.
    gatherer: Option<usize>,
    /// Workers waiting for their turn.
    waiting: Vec<Waker>,
}

impl Turns {
    fn new(receiver: MessageReceiver, options: BatchOptions) -> Turns {
        Turns(Mutex::new(TurnState {
            receiver,
            gathering: Gathering::new(options),
            gatherer: None,
            waiting: Vec::new(),
        }))
    }

    /// Worker `worker`'s next batch: it gathers when no other worker does.
    fn poll(
        &self,
        cx: &mut Context<'_>,
        worker: usize,
        runtime: &dyn Runtime,
    ) -> Poll<Option<Batch>> {
        let mut state = lock(&self.0);
        if state.gatherer.is_some_and(|g| g != worker) {
            if !state.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                state.waiting.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        state.gatherer = Some(worker);
        let TurnState {
            receiver,
            gathering,
            ..
        } = &mut *state;
        let polled = gathering.poll(cx, receiver, runtime);
        if polled.is_ready() {
            // The next worker's turn (all of them once the consumer stopped: they end).
            state.gatherer = None;
            let waiting = std::mem::take(&mut state.waiting);
            drop(state);
            waiting.into_iter().for_each(Waker::wake);
        }
        polled
    }
}

/// A consumer's messages as a `Stream` of [`Batch`]es, from [`Consumer::batches`]. It ends
/// once the consumer is stopped, after the partial batch.
pub struct Batches {
    consumer: Consumer,
    gathering: Gathering,
}

impl fmt::Debug for Batches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batches")
            .field("consumer", &self.consumer)
            .field("options", &self.gathering.fill.options)
            .finish_non_exhaustive()
    }
}

impl Batches {
    /// The consumer's control handle, borrowed (stop it, change max_in_flight, stats).
    pub fn as_handle(&self) -> &ConsumerHandle {
        &self.consumer.handle
    }

    /// A clone of the consumer's control handle, for another task.
    pub fn handle(&self) -> ConsumerHandle {
        self.consumer.handle.clone()
    }

    /// Polls for the next batch (`Stream::poll_next`): `Ready(None)` once the consumer is
    /// stopped and its partial batch was handed over.
    pub fn poll_next_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Batch>> {
        let Consumer {
            receiver,
            handle,
            waiter,
        } = &mut self.consumer;
        let gathering = &mut self.gathering;
        let runtime = &*handle.guard.runtime;
        waiter.poll(cx, |cx| gathering.poll(cx, receiver, runtime))
    }
}

impl futures_core::Stream for Batches {
    type Item = Batch;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Batch>> {
        self.get_mut().poll_next_batch(cx)
    }
}

impl ConsumerHandle {
    /// Tells the driver once that the application gathers batches (auto-touch on, and
    /// the batches' `full` published).
    pub(crate) fn start_batching(&self) {
        if !self.shared().batching.swap(true, Ordering::AcqRel) {
            let _ = self.control(super::logic::Control::Batching);
        }
    }

    /// Says so (WARN, once per `run_batch`) when `max_in_flight` keeps batches below
    /// `max_messages`.
    pub(crate) fn warn_if_batches_capped(&self, workers: usize, options: &BatchOptions) {
        let max_in_flight = self.shared().max_in_flight.load(Ordering::Relaxed) as usize;
        let wanted = options.get_max_messages().saturating_mul(workers.max(1));
        if max_in_flight > 0 && max_in_flight < wanted {
            self.in_span(|| {
                tracing::warn!(
                    max_in_flight,
                    max_messages = options.get_max_messages(),
                    workers,
                    "max_in_flight is below max_messages x workers: batches are handed over \
                     once the in-flight bound is reached, smaller than max_messages (raise \
                     max_in_flight for full batches)"
                );
            });
        }
    }
}
