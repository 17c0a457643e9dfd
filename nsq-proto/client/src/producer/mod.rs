//! The [`Producer`] of every runtime and its [`PendingPublish`]. The logic of its driver
//! around the core [`Producer`](nsq_proto::Producer) is in `logic`.

mod logic;

use logic::{Input, Place, ProducerLogic, Reply};

use super::driver::{self, Net};
use super::runtime::{CallWaiter, Calls, Ended, Runtime, SocketOptions};
use super::sync::{Inbox, ReplyRx, oneshot};
use super::{Backpressure, Error, IntoTopic, ProducerSetup, PublishRequest};
use bytes::Bytes;
use nsq_proto::Config;
use nsq_proto::Limits;
use nsq_proto::producer::ProducerStats;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

struct Inner {
    inbox: Arc<Inbox<Input>>,
    stats: Arc<Mutex<ProducerStats>>,
    /// Publishes sent to the driver whose result is not known yet.
    unanswered: Arc<AtomicUsize>,
    /// The bound on `unanswered` for publishes that return at once.
    max_unanswered: usize,
    /// The core's limits, which an MPUB's bodies are checked against where they are encoded.
    limits: Limits,
    ended: Arc<Ended>,
    runtime: Arc<dyn Runtime>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.inbox.send(Input::Dropped);
    }
}

/// Publishes to one or more nsqd.
///
/// Cheap to clone (`Send + Sync`): clones share one driver and its connections. Each call
/// resolves with its own result; publishes issued concurrently from many tasks are
/// pipelined and leave in one write per wake-up of the driver. Single publishes to one topic
/// that wait at the same moment (made concurrently, or while the connection awaits replies)
/// leave as one MPUB, each still with its own result (natural batching; `producer_batching`
/// turns it off). A publish nsqd refuses (too big, say) fails alone: the connection nsqd then
/// closes is replaced at once, and publishes made meanwhile wait for it (at most
/// `publish_timeout`). A size limit nsqd states in such a refusal is kept: a later PUB, DPUB
/// or MPUB over it fails before it is sent ([`Error::InvalidInput`], with the limit), costing
/// no connection. With several nsqd addresses, publishes go to a healthy one (failover by
/// default, round-robin with [`Routing::RoundRobin`](nsq_proto::producer::Routing)); while
/// no nsqd is reachable they fail fast with [`Error::NoServerAvailable`].
///
/// [`Producer::connect`] connects to one nsqd; [`Producer::builder`] takes several.
/// [`close`](Self::close) flushes what is outstanding.
pub struct Producer {
    inner: Arc<Inner>,
}

impl Clone for Producer {
    fn clone(&self) -> Self {
        Producer {
            inner: self.inner.clone(),
        }
    }
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Validates `setup` and starts the driver on its runtime (found for a client whose calls
/// are `calls`, unless the builder was given one), connecting in the background
/// ([`ProducerBuilder::build`](super::ProducerBuilder::build)).
pub(crate) fn start(setup: ProducerSetup, calls: Calls) -> Result<Producer, Error> {
    let runtime = setup.runtime.runtime(calls)?;
    let start = setup.start(runtime.now(), super::random_seed)?;
    let inbox = Inbox::new();
    let stats = Arc::new(Mutex::new(start.machine.stats()));
    let logic = ProducerLogic::new(start.machine, stats.clone(), start.histograms);
    let net = Net::new(
        runtime.clone(),
        SocketOptions::new(start.dial_timeout, start.write_timeout)
            .with_local_addr(start.local_addr),
    );
    let ended = driver::spawn("nsq-producer", logic, inbox.clone(), net, start.span)
        .map_err(|e| Error::Spawn(e.to_string()))?;
    Ok(Producer {
        inner: Arc::new(Inner {
            inbox,
            stats,
            unanswered: Arc::new(AtomicUsize::new(0)),
            max_unanswered: start.max_unanswered,
            limits: start.limits,
            ended,
            runtime,
        }),
    })
}

/// A publish under way, made by [`Producer::publish_async`] (or its `multi_` and `deferred_`
/// variants): a future of the publish's result. Dropping it does not cancel the publish,
/// whose result is then not known.
#[must_use = "a publish's result is only known through its PendingPublish"]
pub struct PendingPublish {
    rx: ReplyRx<Result<(), Error>>,
    /// The result, once received (`try_result` may look before the future is polled).
    result: Option<Result<(), Error>>,
    /// How the result is awaited (driving the client meanwhile where the runtime does).
    waiter: CallWaiter,
}

impl fmt::Debug for PendingPublish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingPublish")
            .field("result", &self.result)
            .finish_non_exhaustive()
    }
}

impl PendingPublish {
    fn new(rx: ReplyRx<Result<(), Error>>, waiter: CallWaiter) -> Self {
        PendingPublish {
            rx,
            result: None,
            waiter,
        }
    }

    /// The result if it is known, without waiting (the future still resolves with it).
    pub fn try_result(&mut self) -> Option<Result<(), Error>> {
        if self.result.is_none() {
            self.result = self
                .rx
                .try_recv()
                .map(|r| r.unwrap_or_else(|_| Err(Error::Closed)));
        }
        self.result.clone()
    }
}

impl Future for PendingPublish {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        if let Some(result) = this.result.take() {
            return Poll::Ready(result);
        }
        let rx = &mut this.rx;
        this.waiter
            .poll(cx, |cx| rx.poll_recv(cx))
            .map(|r| r.unwrap_or_else(|_| Err(Error::Closed)))
    }
}

impl Producer {
    /// A builder (several nsqd addresses, configuration); its
    /// [`build`](super::ProducerBuilder::build) starts the producer, which connects in the
    /// background.
    pub fn builder() -> super::ProducerBuilder {
        super::ProducerBuilder::new()
    }

    /// Connects to one nsqd and waits until the connection is ready, or fails like a publish
    /// would: [`Error::Misconfigured`] when the address cannot work as configured (not nsqd's
    /// TCP port, a TLS mismatch, refused credentials), else [`Error::NoServerAvailable`].
    /// Starts it as [`build`](super::ProducerBuilder::build) does.
    pub async fn connect(addr: &str, config: &Config) -> Result<Producer, Error> {
        let producer = Self::start_one(addr, config, Calls::Async)?;
        producer.ping().await?;
        Ok(producer)
    }

    /// The producer of [`connect`](Self::connect) (and the blocking one), not yet pinged.
    pub(crate) fn start_one(addr: &str, config: &Config, calls: Calls) -> Result<Producer, Error> {
        start(
            super::ProducerBuilder::new()
                .config(config)
                .nsqd(addr)
                .into_setup(),
            calls,
        )
    }

    /// Hands `input` to the driver; its reply comes through the returned future, awaited
    /// through `waiter`.
    fn start_input(
        &self,
        place: Option<Place>,
        input: impl FnOnce(Reply) -> Input,
        waiter: CallWaiter,
    ) -> Result<PendingPublish, Error> {
        let (tx, rx) = oneshot();
        let reply = Reply::new(tx, place);
        self.inner
            .inbox
            .send(input(reply))
            .map_err(|_| Error::Closed)?;
        Ok(PendingPublish::new(rx, waiter))
    }

    /// Hands `input` to the driver and waits for its reply. The waiter holds the driver (where
    /// the runtime lets calls drive) before the command is handed over, so the command's
    /// wake-up is kept for this task's own turn.
    async fn send(&self, input: impl FnOnce(Reply) -> Input) -> Result<(), Error> {
        let mut waiter = CallWaiter::of(&*self.inner.runtime);
        waiter.hold();
        self.start_input(None, input, waiter)?.await
    }

    /// Counts a publish as unanswered; `bounded`: refused when `max_pending_publishes`
    /// already are.
    fn place(&self, bounded: bool) -> Result<Place, Error> {
        let count = &self.inner.unanswered;
        let before = count.fetch_add(1, Ordering::AcqRel);
        let place = Place(count.clone());
        if bounded && before >= self.inner.max_unanswered {
            return Err(Error::Backpressure(Backpressure::Unanswered {
                limit: self.inner.max_unanswered,
            }));
        }
        Ok(place)
    }

    /// Hands a publish to the driver; `bounded` as for [`place`](Self::place).
    fn start_request(
        &self,
        request: PublishRequest,
        bounded: bool,
        waiter: CallWaiter,
    ) -> Result<PendingPublish, Error> {
        let place = self.place(bounded)?;
        self.start_input(Some(place), |reply| Input::Request(request, reply), waiter)
    }

    /// Hands a publish to the driver and returns at once.
    fn start_async(&self, request: PublishRequest) -> Result<PendingPublish, Error> {
        self.start_request(request, true, CallWaiter::of(&*self.inner.runtime))
    }

    /// Publishes and waits for the result (the waiter holds the driver first, as in
    /// [`send`](Self::send)).
    async fn request(&self, request: PublishRequest) -> Result<(), Error> {
        let mut waiter = CallWaiter::of(&*self.inner.runtime);
        waiter.hold();
        self.start_request(request, false, waiter)?.await
    }

    /// Publishes one message (PUB) and waits for nsqd's answer.
    ///
    /// With no connection ready, it waits for one being made, at most `publish_timeout`
    /// (default 5 s): when nsqd closed the last one (after refusing a publish, say) or it was
    /// lost, the producer connects again at once. It fails at once with
    /// [`Error::NoServerAvailable`] only when every nsqd's last connection attempt failed.
    /// The same holds for every publish and for [`ping`](Self::ping).
    pub async fn publish(
        &self,
        topic: impl IntoTopic,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        self.request(PublishRequest::publish(topic, body)?).await
    }

    /// Publishes several messages atomically (MPUB) and waits for nsqd's answer.
    pub async fn multi_publish<I, B>(&self, topic: impl IntoTopic, bodies: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        self.request(PublishRequest::multi_publish(
            topic,
            bodies,
            &self.inner.limits,
        )?)
        .await
    }

    /// Publishes one message delivered after `delay` (DPUB) and waits for nsqd's answer.
    pub async fn deferred_publish(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<(), Error> {
        self.request(PublishRequest::deferred_publish(topic, delay, body)?)
            .await
    }

    /// Publishes one message (PUB) and returns at once, without waiting for nsqd's answer:
    /// the returned [`PendingPublish`] resolves with it (go-nsq's `PublishAsync`). One task
    /// can keep thousands of publishes under way this way, and concurrent ones leave
    /// together, as with [`publish`](Self::publish). Results come in publish order per nsqd.
    /// Dropping the [`PendingPublish`] does not cancel the publish.
    ///
    /// Refused at once with [`Backpressure::Unanswered`] while `max_pending_publishes`
    /// publishes of this producer await their result (and with the errors of the name or
    /// [`Error::Closed`]); every other error comes through the [`PendingPublish`].
    pub fn publish_async(
        &self,
        topic: impl IntoTopic,
        body: impl Into<Bytes>,
    ) -> Result<PendingPublish, Error> {
        self.start_async(PublishRequest::publish(topic, body)?)
    }

    /// Publishes several messages atomically (MPUB) and returns at once (see
    /// [`publish_async`](Self::publish_async); go-nsq's `MultiPublishAsync`).
    pub fn multi_publish_async<I, B>(
        &self,
        topic: impl IntoTopic,
        bodies: I,
    ) -> Result<PendingPublish, Error>
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        self.start_async(PublishRequest::multi_publish(
            topic,
            bodies,
            &self.inner.limits,
        )?)
    }

    /// Publishes one message delivered after `delay` (DPUB) and returns at once (see
    /// [`publish_async`](Self::publish_async); go-nsq's `DeferredPublishAsync`).
    pub fn deferred_publish_async(
        &self,
        topic: impl IntoTopic,
        delay: Duration,
        body: impl Into<Bytes>,
    ) -> Result<PendingPublish, Error> {
        self.start_async(PublishRequest::deferred_publish(topic, delay, body)?)
    }

    /// Resolves once a connection is ready (at once if one is); fails fast with
    /// [`Error::NoServerAvailable`] when every nsqd is down.
    pub async fn ping(&self) -> Result<(), Error> {
        self.send(|reply| Input::Request(PublishRequest::Ping, reply))
            .await
    }

    /// Adds an nsqd TCP address at runtime (connected at once; last in failover order).
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), Error> {
        self.send(|reply| Input::AddNsqd(addr.to_owned(), reply))
            .await
    }

    /// A snapshot of the counters ([`ProducerStats`], updated after every wake-up of the
    /// driver).
    pub fn stats(&self) -> ProducerStats {
        *self
            .inner
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Graceful close for every clone: no new publishes; outstanding ones are sent and
    /// answered (bounded by `drain_timeout`); then every connection is closed.
    pub async fn close(&self) {
        let (tx, rx) = oneshot();
        if self.inner.inbox.send(Input::Close(Some(tx))).is_ok() {
            let _ = rx.recv().await;
        }
    }

    /// Starts a graceful close without waiting for it.
    pub(crate) fn request_close(&self) {
        let _ = self.inner.inbox.send(Input::Close(None));
    }

    /// The runtime the driver runs on (a blocking call waits through it).
    pub(crate) fn runtime(&self) -> &dyn Runtime {
        &*self.inner.runtime
    }

    /// When the driver has ended.
    pub(crate) fn ended(&self) -> &Ended {
        &self.inner.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn poll_now(p: &mut PendingPublish) -> Poll<Result<(), Error>> {
        Pin::new(p).poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_result_looked_at_early_is_still_the_future_s() {
        let (tx, rx) = oneshot();
        let mut p = PendingPublish::new(rx, CallWaiter::default());
        assert!(p.try_result().is_none());
        assert!(poll_now(&mut p).is_pending());
        tx.send(Err(Error::Backpressure(Backpressure::Unanswered {
            limit: 1,
        })));
        assert!(matches!(p.try_result(), Some(Err(Error::Backpressure(_)))));
        assert!(matches!(p.try_result(), Some(Err(Error::Backpressure(_)))));
        assert!(matches!(
            poll_now(&mut p),
            Poll::Ready(Err(Error::Backpressure(_)))
        ));
        // A driver that stopped without answering: the client is closed.
        let (tx, rx) = oneshot::<Result<(), Error>>();
        drop(tx);
        let mut p = PendingPublish::new(rx, CallWaiter::default());
        assert!(matches!(poll_now(&mut p), Poll::Ready(Err(Error::Closed))));
    }
}
