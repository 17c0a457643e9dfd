//! The client layer's metrics, through the `metrics` facade (the `metrics` cargo feature):
//! what an operator scrapes, with Prometheus names. Without the feature every type here is
//! empty and every call an inlined no-op: nothing is recorded and nothing is paid.
//!
//! Counters that the core already counts (received, finished, requeued, given up,
//! reconnects) follow its [`ConsumerStats`] once per round of the driver, so they equal
//! what happened; gauges are set from the same snapshot; the histograms are observed where
//! their event happens: a message's receipt (on the driver), the application taking it and
//! answering it (on the application's task: [`Timing`]), a publish's result.
//!
//! A message's time in the application is split in two: the wait
//! (`nsq_consumer_handler_wait_seconds`, from its hand-out by the driver to a handler
//! starting on it, or `recv` returning it) and the handler's own duration
//! (`nsq_consumer_handler_duration_seconds`, from then to its answer: the handler's
//! return, or for a message taken with `recv`, its `finish`/`requeue`, or its drop). A
//! queue in front of busy handlers shows in the first, a slow handler in the second. Both
//! are read with the system's clock (two reads per message and one per hand-out, only when
//! the histograms record), not the runtime's: a paused tokio clock does not stop them.

use nsq_proto::consumer::ConsumerStats;
#[cfg(feature = "metrics")]
use std::time::Instant;

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

/// Bucket bounds for each histogram the client records (the `metrics` feature), by metric
/// name: give them to the recorder so that it renders real histograms, which Prometheus can
/// aggregate across instances (metrics-exporter-prometheus renders summaries unless told
/// buckets):
///
/// ```ignore
/// let mut builder = metrics_exporter_prometheus::PrometheusBuilder::new();
/// for (name, buckets) in HISTOGRAM_BUCKETS {
///     builder = builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)?;
/// }
/// let handle = builder.install_recorder()?;
/// ```
///
/// Handler and publish durations span 100 µs to a minute, the wait for a handler 10 µs to
/// a minute (with no queue it is the hand-off between two tasks), a message's age (from
/// nsqd's timestamp to its receipt) 1 ms to a day, a batch's size 1 to 5,000 messages.
pub const HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[
    (
        "nsq_consumer_handler_duration_seconds",
        &[
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0, 30.0, 60.0,
        ],
    ),
    (
        "nsq_consumer_handler_wait_seconds",
        &[
            0.000_01, 0.000_025, 0.000_05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
            0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ],
    ),
    (
        "nsq_consumer_message_age_seconds",
        &[
            0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
            21600.0, 86400.0,
        ],
    ),
    (
        "nsq_producer_publish_duration_seconds",
        &[
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0, 30.0, 60.0,
        ],
    ),
    (
        "nsq_producer_batch_size",
        &[
            1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
        ],
    ),
];

/// The label value of an error kind (bounded: no error text).
#[cfg_attr(
    not(feature = "metrics"),
    allow(dead_code, reason = "used with the feature")
)]
pub(crate) fn error_kind(e: &super::Error) -> &'static str {
    use super::Error;
    match e {
        Error::InvalidTopic { .. } | Error::InvalidChannel { .. } | Error::InvalidInput(_) => {
            "invalid_input"
        }
        Error::Server(_) => "server",
        Error::ConnectionLost(_) => "connection_lost",
        Error::Timeout => "timeout",
        Error::NoServerAvailable(_) => "no_server",
        Error::Misconfigured { .. } => "misconfigured",
        Error::Backpressure(_) => "backpressure",
        Error::Closed => "closed",
        _ => "other",
    }
}

#[cfg(feature = "metrics")]
mod on {
    use super::{ConsumerStats, Instant};
    use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;

    /// What the application's side of a consumer records, on the application's tasks:
    /// handlers that failed, the wait for a handler and the handler's duration.
    #[derive(Debug, Clone)]
    pub(crate) struct AnswerMetrics {
        errors: Counter,
        wait: Histogram,
        duration: Histogram,
    }

    impl AnswerMetrics {
        /// A handler returned an error or panicked.
        pub(crate) fn handler_failed(&self) {
            self.errors.increment(1);
        }
    }

    /// What a consumer's batches record: batches handed over (by why), their sizes and
    /// lingers, and batches that failed as a whole.
    #[derive(Debug, Clone)]
    pub(crate) struct BatchMetrics {
        ended: [Counter; 5],
        failed: Counter,
        size: Histogram,
        linger: Histogram,
    }

    impl BatchMetrics {
        /// A batch of `size` messages was handed over for `end`, `lingered` after its first
        /// message.
        pub(crate) fn handed_over(
            &self,
            end: crate::BatchEnd,
            size: u64,
            lingered: std::time::Duration,
        ) {
            if let Some(i) = crate::BatchEnd::ALL.iter().position(|e| *e == end) {
                if let Some(c) = self.ended.get(i) {
                    c.increment(1);
                }
            }
            #[allow(clippy::cast_precision_loss, reason = "a batch size in a histogram")]
            self.size.record(size as f64);
            self.linger.record(lingered.as_secs_f64());
        }

        /// A batch failed as a whole.
        pub(crate) fn failed(&self) {
            self.failed.increment(1);
        }
    }

    /// The system's clock, for the times of the application's side (see the module's docs).
    #[allow(
        clippy::disallowed_methods,
        reason = "a message's wait and handling as the application sees them, on its tasks"
    )]
    fn clock() -> Instant {
        Instant::now()
    }

    /// Where a message stands for its wait and handler duration: handed out at an instant,
    /// then taken by the application at an instant. `Copy`, 24 bytes, no allocation.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Timing(Stage);

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Stage {
        /// Not timed (the histograms are off, it was never handed out, or it is answered).
        Untimed,
        HandedOut(Instant),
        Taken(Instant),
    }

    /// When the driver hands out the messages of a round (see
    /// [`ConsumerMetrics::hand_out_time`]).
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct HandOut(Instant);

    impl Timing {
        /// Not timed.
        pub(crate) fn none() -> Timing {
            Timing(Stage::Untimed)
        }

        /// Handed out at `at`.
        pub(crate) fn handed_out(at: HandOut) -> Timing {
            Timing(Stage::HandedOut(at.0))
        }

        /// The application takes the message now (a handler starts on it, or `recv` returns
        /// it): its wait since the hand-out is recorded.
        pub(crate) fn taken(&mut self, metrics: &AnswerMetrics) {
            if let Stage::HandedOut(at) = self.0 {
                let now = clock();
                metrics
                    .wait
                    .record(now.saturating_duration_since(at).as_secs_f64());
                self.0 = Stage::Taken(now);
            }
        }

        /// The application gives the message its last answer now: the time since it took it
        /// is recorded, once.
        pub(crate) fn answered(&mut self, metrics: &AnswerMetrics) {
            if let Stage::Taken(at) = self.0 {
                metrics
                    .duration
                    .record(clock().saturating_duration_since(at).as_secs_f64());
            }
            self.0 = Stage::Untimed;
        }
    }

    /// One consumer's metrics (labels `topic`, `channel`; `nsqd` for RDY).
    #[derive(Debug)]
    pub(crate) struct ConsumerMetrics {
        topic: String,
        channel: String,
        received: Counter,
        finished: Counter,
        requeued: Counter,
        given_up: Counter,
        reconnects: Counter,
        backoffs: Counter,
        in_flight: Gauge,
        connections: Gauge,
        backoff_level: Gauge,
        in_flight_limit: Gauge,
        message_age: Histogram,
        answers: AnswerMetrics,
        /// Whether the histograms record (`metrics_histograms`).
        histograms: bool,
        /// The wall clock read once per round (`(round, nanoseconds since the epoch)`).
        wall: Option<(Instant, i64)>,
        rdy: BTreeMap<String, (Gauge, u32)>,
        last: Last,
    }

    impl ConsumerMetrics {
        /// The metrics of a consumer of `topic`/`channel`; its histograms record nothing
        /// unless `histograms`.
        pub(crate) fn new(topic: &str, channel: &str, histograms: bool) -> ConsumerMetrics {
            let labels = [("topic", topic.to_owned()), ("channel", channel.to_owned())];
            let histogram = |name: &'static str| {
                if histograms {
                    histogram!(name, &labels)
                } else {
                    Histogram::noop()
                }
            };
            ConsumerMetrics {
                topic: topic.to_owned(),
                channel: channel.to_owned(),
                received: counter!("nsq_consumer_messages_received_total", &labels),
                finished: counter!("nsq_consumer_messages_finished_total", &labels),
                requeued: counter!("nsq_consumer_messages_requeued_total", &labels),
                given_up: counter!("nsq_consumer_messages_given_up_total", &labels),
                reconnects: counter!("nsq_consumer_reconnects_total", &labels),
                backoffs: counter!("nsq_consumer_backoffs_total", &labels),
                in_flight: gauge!("nsq_consumer_in_flight", &labels),
                connections: gauge!("nsq_consumer_connections", &labels),
                backoff_level: gauge!("nsq_consumer_backoff_level", &labels),
                in_flight_limit: gauge!("nsq_consumer_in_flight_limit", &labels),
                message_age: histogram("nsq_consumer_message_age_seconds"),
                answers: AnswerMetrics {
                    errors: counter!("nsq_consumer_handler_errors_total", &labels),
                    wait: histogram("nsq_consumer_handler_wait_seconds"),
                    duration: histogram("nsq_consumer_handler_duration_seconds"),
                },
                histograms,
                wall: None,
                rdy: BTreeMap::new(),
                last: Last::default(),
            }
        }

        /// What the messages of this consumer record their answers into.
        pub(crate) fn answers(&self) -> AnswerMetrics {
            self.answers.clone()
        }

        /// What this consumer's batches record into.
        pub(crate) fn batches(&self) -> BatchMetrics {
            let labels = [
                ("topic", self.topic.clone()),
                ("channel", self.channel.clone()),
            ];
            let histogram = |name: &'static str| {
                if self.histograms {
                    histogram!(name, &labels)
                } else {
                    Histogram::noop()
                }
            };
            BatchMetrics {
                ended: crate::BatchEnd::ALL.map(|end| {
                    counter!(
                        "nsq_consumer_batches_total",
                        "topic" => self.topic.clone(),
                        "channel" => self.channel.clone(),
                        "end" => end.as_str()
                    )
                }),
                failed: counter!("nsq_consumer_batches_failed_total", &labels),
                size: histogram("nsq_consumer_batch_messages"),
                linger: histogram("nsq_consumer_batch_linger_seconds"),
            }
        }

        /// A message arrived during the round of `now`, published at `timestamp`
        /// (nanoseconds since the Unix epoch, by nsqd's clock). The wall clock is read once
        /// per round.
        pub(crate) fn message_received(&mut self, now: Instant, timestamp: i64) {
            let wall = match self.wall {
                Some((round, wall)) if round == now => wall,
                _ => {
                    #[allow(
                        clippy::disallowed_methods,
                        reason = "a message's age is nsqd's wall-clock timestamp against ours"
                    )]
                    let wall = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
                    self.wall = Some((now, wall));
                    wall
                }
            };
            let age = wall.saturating_sub(timestamp).max(0);
            #[allow(
                clippy::cast_precision_loss,
                reason = "seconds as f64: ns precision not needed"
            )]
            self.message_age.record(age as f64 / 1e9);
        }

        /// The instant the driver hands out messages now (one clock read per hand-out,
        /// for every message of it), or none when the histograms do not record.
        pub(crate) fn hand_out_time(&self) -> Option<HandOut> {
            self.histograms.then(|| HandOut(clock()))
        }

        /// A round of the driver ended with `stats`: counters follow the core's, gauges are
        /// set.
        /// `rows`: the per-nsqd rows of `stats` were written this round (otherwise they
        /// are older, and looked at only when they are next written).
        pub(crate) fn update(&mut self, stats: &ConsumerStats, rows: bool) {
            let last = &self.last;
            self.received
                .increment(stats.received.saturating_sub(last.received));
            self.finished
                .increment(stats.finished.saturating_sub(last.finished));
            self.requeued
                .increment(stats.requeued.saturating_sub(last.requeued));
            self.given_up
                .increment(stats.gave_up.saturating_sub(last.gave_up));
            self.reconnects
                .increment(stats.reconnects.saturating_sub(last.reconnects));
            if last.backoff_level == 0 && stats.backoff_level > 0 {
                self.backoffs.increment(1);
            }
            if stats.in_flight != last.in_flight {
                self.in_flight.set(count(stats.in_flight));
            }
            if stats.connections != last.connections {
                self.connections.set(count(stats.connections));
            }
            if stats.backoff_level != last.backoff_level {
                self.backoff_level.set(f64::from(stats.backoff_level));
            }
            if stats.in_flight_limit != last.in_flight_limit || !last.set {
                self.in_flight_limit.set(f64::from(stats.in_flight_limit));
            }
            for n in stats.nsqd.iter().filter(|_| rows) {
                if !self.rdy.contains_key(&n.address) {
                    let labels = [
                        ("topic", self.topic.clone()),
                        ("channel", self.channel.clone()),
                        ("nsqd", n.address.clone()),
                    ];
                    self.rdy.insert(
                        n.address.clone(),
                        (gauge!("nsq_consumer_rdy", &labels), u32::MAX),
                    );
                }
                let Some((gauge, last)) = self.rdy.get_mut(&n.address) else {
                    continue;
                };
                if *last != n.rdy {
                    *last = n.rdy;
                    gauge.set(f64::from(n.rdy));
                }
            }
            self.last = Last {
                received: stats.received,
                finished: stats.finished,
                requeued: stats.requeued,
                gave_up: stats.gave_up,
                reconnects: stats.reconnects,
                backoff_level: stats.backoff_level,
                in_flight: stats.in_flight,
                connections: stats.connections,
                in_flight_limit: stats.in_flight_limit,
                set: true,
            };
        }

        /// The consumer stopped: its gauges go back to 0.
        pub(crate) fn stopped(&mut self) {
            self.in_flight.set(0.0);
            self.connections.set(0.0);
            self.backoff_level.set(0.0);
            self.in_flight_limit.set(0.0);
            for (gauge, _) in self.rdy.values() {
                gauge.set(0.0);
            }
        }
    }

    /// The figures of the previous round that the counters and gauges follow.
    #[derive(Debug, Default)]
    struct Last {
        received: u64,
        finished: u64,
        requeued: u64,
        gave_up: u64,
        reconnects: u64,
        backoff_level: u32,
        in_flight: usize,
        connections: usize,
        in_flight_limit: u32,
        /// The gauges were set once.
        set: bool,
    }

    #[allow(clippy::cast_precision_loss, reason = "a count as a gauge value")]
    fn count(n: usize) -> f64 {
        n as f64
    }

    /// One topic's producer metrics.
    #[derive(Debug)]
    struct TopicMetrics {
        messages: Counter,
        ok: Counter,
        errors: HashMap<&'static str, Counter>,
        duration: Histogram,
        batch_size: Histogram,
    }

    /// What a publish carries to its result: its topic's metrics, its message count, when it
    /// was called.
    #[derive(Debug, Clone)]
    pub(crate) struct PublishMeta {
        started: Instant,
        topic: Option<(Arc<str>, u32)>,
    }

    impl PublishMeta {
        /// A publish called now.
        #[allow(
            clippy::disallowed_methods,
            reason = "a publish's duration as its caller sees it, from the call on"
        )]
        pub(crate) fn now() -> PublishMeta {
            PublishMeta {
                started: Instant::now(),
                topic: None,
            }
        }
    }

    /// One producer's metrics (labels `topic`, `result`, `error`, `nsqd` where they apply).
    #[derive(Debug)]
    pub(crate) struct ProducerMetrics {
        topics: HashMap<Arc<str>, TopicMetrics>,
        reconnects: HashMap<String, (Counter, bool)>,
        pending: Gauge,
        /// Whether the histograms record.
        histograms: bool,
    }

    impl ProducerMetrics {
        /// A producer's metrics; its histograms record nothing unless `histograms`.
        pub(crate) fn new(histograms: bool) -> ProducerMetrics {
            ProducerMetrics {
                topics: HashMap::new(),
                reconnects: HashMap::new(),
                pending: gauge!("nsq_producer_pending"),
                histograms,
            }
        }

        /// The histogram `name` with `labels`, or one that records nothing.
        fn histogram(&self, name: &'static str, labels: &[(&'static str, String)]) -> Histogram {
            if self.histograms {
                histogram!(name, labels)
            } else {
                Histogram::noop()
            }
        }

        /// The driver took a publish of `messages` messages to `topic`.
        pub(crate) fn submitted(&mut self, meta: &mut PublishMeta, topic: &str, messages: u32) {
            let key: Arc<str> = if let Some((k, _)) = self.topics.get_key_value(topic) {
                k.clone()
            } else {
                let k: Arc<str> = Arc::from(topic);
                let labels = [("topic", topic.to_owned())];
                self.topics.insert(
                    k.clone(),
                    TopicMetrics {
                        messages: counter!("nsq_producer_messages_total", &labels),
                        ok: counter!(
                            "nsq_producer_publishes_total",
                            &[("topic", topic.to_owned()), ("result", "ok".to_owned())]
                        ),
                        errors: HashMap::new(),
                        duration: self.histogram("nsq_producer_publish_duration_seconds", &labels),
                        batch_size: self.histogram("nsq_producer_batch_size", &labels),
                    },
                );
                k
            };
            meta.topic = Some((key, messages));
        }

        /// A publish ended with `result`.
        pub(crate) fn resolved(
            &mut self,
            meta: &PublishMeta,
            result: &Result<(), super::super::Error>,
        ) {
            let Some((topic, messages)) = &meta.topic else {
                return; // a ping
            };
            let Some(m) = self.topics.get_mut(topic) else {
                return;
            };
            m.duration.record(meta.started.elapsed().as_secs_f64());
            m.batch_size.record(f64::from(*messages));
            match result {
                Ok(()) => {
                    m.ok.increment(1);
                    m.messages.increment(u64::from(*messages));
                }
                Err(e) => {
                    let kind = super::error_kind(e);
                    m.errors
                        .entry(kind)
                        .or_insert_with(|| {
                            counter!(
                                "nsq_producer_publishes_total",
                                &[
                                    ("topic", topic.to_string()),
                                    ("result", "error".to_owned()),
                                    ("error", kind.to_owned()),
                                ]
                            )
                        })
                        .increment(1);
                }
            }
        }

        /// A connection to `nsqd` became ready: after the first, a reconnect.
        pub(crate) fn connected(&mut self, nsqd: &str) {
            let (counter, seen) = self.reconnects.entry(nsqd.to_owned()).or_insert_with(|| {
                (
                    counter!(
                        "nsq_producer_reconnects_total",
                        &[("nsqd", nsqd.to_owned())]
                    ),
                    false,
                )
            });
            if *seen {
                counter.increment(1);
            }
            *seen = true;
        }

        /// Publishes waiting for their result.
        pub(crate) fn pending(&self, n: usize) {
            self.pending.set(count(n));
        }
    }
}

#[cfg(not(feature = "metrics"))]
#[allow(
    clippy::unused_self,
    clippy::trivially_copy_pass_by_ref,
    clippy::needless_pass_by_ref_mut,
    reason = "the no-op twins keep the signatures of the metrics types"
)]
mod off {
    use super::ConsumerStats;
    use std::time::Instant;

    /// Without the `metrics` feature: nothing.
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct AnswerMetrics;

    impl AnswerMetrics {
        #[inline]
        pub(crate) fn handler_failed(&self) {}
    }

    /// Without the `metrics` feature: nothing.
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct BatchMetrics;

    impl BatchMetrics {
        #[inline]
        pub(crate) fn handed_over(&self, _: crate::BatchEnd, _: u64, _: std::time::Duration) {}
        #[inline]
        pub(crate) fn failed(&self) {}
    }

    /// Without the feature no time is kept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Timing;

    /// Without the feature no time is kept (never made).
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct HandOut;

    impl Timing {
        #[inline]
        pub(crate) fn none() -> Timing {
            Timing
        }
        #[inline]
        pub(crate) fn handed_out(_: HandOut) -> Timing {
            Timing
        }
        #[inline]
        pub(crate) fn taken(&mut self, _: &AnswerMetrics) {}
        #[inline]
        pub(crate) fn answered(&mut self, _: &AnswerMetrics) {}
    }

    /// Without the `metrics` feature: nothing.
    #[derive(Debug, Default)]
    pub(crate) struct ConsumerMetrics;

    impl ConsumerMetrics {
        #[inline]
        pub(crate) fn new(_: &str, _: &str, _: bool) -> ConsumerMetrics {
            ConsumerMetrics
        }
        #[inline]
        pub(crate) fn answers(&self) -> AnswerMetrics {
            AnswerMetrics
        }
        #[inline]
        pub(crate) fn batches(&self) -> BatchMetrics {
            BatchMetrics
        }
        #[inline]
        pub(crate) fn message_received(&mut self, _: Instant, _: i64) {}
        #[inline]
        pub(crate) fn hand_out_time(&self) -> Option<HandOut> {
            None
        }
        #[inline]
        pub(crate) fn update(&mut self, _: &ConsumerStats, _: bool) {}
        #[inline]
        pub(crate) fn stopped(&mut self) {}
    }

    /// Without the feature: nothing.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct PublishMeta;

    impl PublishMeta {
        #[inline]
        pub(crate) fn now() -> PublishMeta {
            PublishMeta
        }
    }

    /// Without the `metrics` feature: nothing.
    #[derive(Debug, Default)]
    pub(crate) struct ProducerMetrics;

    impl ProducerMetrics {
        #[inline]
        pub(crate) fn new(_: bool) -> ProducerMetrics {
            ProducerMetrics
        }
        #[inline]
        pub(crate) fn submitted(&mut self, _: &mut PublishMeta, _: &str, _: u32) {}
        #[inline]
        pub(crate) fn resolved(&mut self, _: &PublishMeta, _: &Result<(), super::super::Error>) {}
        #[inline]
        pub(crate) fn connected(&mut self, _: &str) {}
        #[inline]
        pub(crate) fn pending(&self, _: usize) {}
    }
}
