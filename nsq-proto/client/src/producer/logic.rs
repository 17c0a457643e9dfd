//! The producer's side of the driver: what the handles send it ([`Input`]), and
//! [`ProducerLogic`], which submits publishes to the core [`Producer`](nsq_proto::Producer)
//! and answers each with its result.

use crate::driver::Logic;
use crate::metrics::{ProducerMetrics, PublishMeta};
use crate::sync::ReplyTx;
use crate::{Error, PublishRequest, Replies, log_producer_event};
use nsq_proto::producer::{ProducerEvent, ProducerStats};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Where a publish's result goes. A publish's reply also holds its place in the count of
/// unanswered publishes, given back when the reply is sent or dropped.
pub(super) struct Reply {
    tx: ReplyTx<Result<(), Error>>,
    _place: Option<Place>,
    /// When it was called, and what it publishes (for the metrics; nothing without them).
    meta: PublishMeta,
}

impl Reply {
    pub(super) fn new(tx: ReplyTx<Result<(), Error>>, place: Option<Place>) -> Reply {
        Reply {
            tx,
            _place: place,
            meta: PublishMeta::now(),
        }
    }

    pub(super) fn send(self, result: Result<(), Error>) {
        self.tx.send(result);
    }
}

/// One publish counted in [`Inner::unanswered`](super::Inner::unanswered) until it is dropped.
pub(super) struct Place(pub(super) Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(super) enum Input {
    Request(PublishRequest, Reply),
    AddNsqd(String, Reply),
    Close(Option<ReplyTx<()>>),
    /// Every handle is gone: close gracefully.
    Dropped,
}

// ----------------------------------------------------------------------------------- driver

pub(super) struct ProducerLogic {
    machine: nsq_proto::Producer,
    replies: Replies<Reply>,
    close_waiters: Vec<ReplyTx<()>>,
    stats: Arc<Mutex<ProducerStats>>,
    closed: bool,
    /// What an operator scrapes (nothing without the `metrics` feature).
    metrics: ProducerMetrics,
}

impl ProducerLogic {
    pub(super) fn new(
        machine: nsq_proto::Producer,
        stats: Arc<Mutex<ProducerStats>>,
        histograms: bool,
    ) -> Self {
        ProducerLogic {
            machine,
            replies: Replies::default(),
            close_waiters: Vec::new(),
            stats,
            closed: false,
            metrics: ProducerMetrics::new(histograms),
        }
    }
}

impl Logic for ProducerLogic {
    type Machine = nsq_proto::Producer;
    type Input = Input;
    const LOOK_AGAIN_AFTER_WORK: bool = true;

    fn machine(&mut self) -> &mut nsq_proto::Producer {
        &mut self.machine
    }

    fn input(&mut self, now: Instant, input: Input) {
        match input {
            Input::Request(request, mut reply) => {
                if let Some((topic, messages)) = request.topic_and_count() {
                    self.metrics.submitted(&mut reply.meta, topic, messages);
                }
                if let Err((reply, e)) = self.replies.submit(&mut self.machine, now, request, reply)
                {
                    let result = Err(e);
                    self.metrics.resolved(&reply.meta, &result);
                    reply.send(result);
                }
            }
            Input::AddNsqd(addr, reply) => {
                reply.send(self.machine.add_nsqd(now, &addr).map_err(Error::from));
            }
            Input::Close(waiter) => {
                self.close_waiters.extend(waiter);
                self.machine.close(now);
            }
            Input::Dropped => self.machine.close(now),
        }
    }

    fn event(&mut self, _now: Instant, event: ProducerEvent) {
        log_producer_event(&event);
        if let ProducerEvent::ConnectionReady { addr, .. } = &event {
            self.metrics.connected(addr);
        }
        if !self.replies.resolve(&event) && event == ProducerEvent::Closed {
            self.closed = true;
        }
    }

    fn after_round(&mut self, _now: Instant) {
        let stats = self.machine.stats();
        self.metrics.pending(stats.outstanding + stats.pending);
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner) = stats;
        for (reply, result) in self.replies.take_resolved() {
            self.metrics.resolved(&reply.meta, &result);
            reply.send(result);
        }
    }

    fn done(&self) -> bool {
        self.closed
    }

    fn stopped(mut self) {
        for (reply, result) in self.replies.take_resolved() {
            self.metrics.resolved(&reply.meta, &result);
            reply.send(result);
        }
        for reply in self.replies.take_all() {
            let result = Err(Error::Closed);
            self.metrics.resolved(&reply.meta, &result);
            reply.send(result);
        }
        self.metrics.pending(0);
        for w in self.close_waiters.drain(..) {
            w.send(());
        }
        tracing::debug!("producer closed");
    }
}
