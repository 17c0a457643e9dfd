//! The consumer's side of the driver: what the handles send it ([`Input`]), what they share
//! with it ([`Bridge`]), and [`ConsumerLogic`], which feeds the core [`Consumer`](nsq_proto::Consumer)
//! the application's commands and answers and turns its events into messages, stats, events
//! and replies.

use crate::batch::BatchShared;
use crate::driver::Logic;
use crate::events::{Event, EventHub};
use crate::message::{AnswerChannel, Message};
use crate::metrics::{BatchMetrics, ConsumerMetrics};
use crate::sync::{Inbox, Mailbox, ReplyTx};
use crate::{
    Answer, AnswerKind, AnswerSink, Delivery, Error, GiveUpHook, Origin, StopReport,
    log_consumer_event, log_max_in_flight,
};
use bytes::Bytes;
use nsq_proto::consumer::{ConsumerError, ConsumerEvent, ConsumerStats};
use nsq_proto::driver::ConnId;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------ inputs

pub(super) type Reply<T> = ReplyTx<T>;

/// Where a `connect_to_nsqd` call waits for its nsqd's first connection outcome.
pub(super) type ConnectReply = Reply<Result<(), Error>>;

pub(super) enum Control {
    /// Replied to once the nsqd's first connection is ready or has failed.
    /// `true`: refused with [`Error::AlreadyConnected`] when
    /// a connection to the address is open or being opened (`connect_to_nsqd`); `false`: the
    /// outcome of an address the builder added is waited for.
    AddNsqd(String, bool, ConnectReply),
    /// Replied to once the lookupd has answered a query, or failed to (at once when its
    /// last outcome is known).
    AddLookupd(String, ConnectReply),
    DisconnectNsqd(String, Reply<Result<(), ConsumerError>>),
    DisconnectLookupd(String, Reply<Result<(), ConsumerError>>),
    SetMaxInFlight(u32),
    /// The application gathers batches: auto-touch on, and the driver publishes
    /// `full`.
    Batching,
    Stop(Option<Reply<StopReport>>),
    /// Every handle is gone: shut down gracefully.
    Dropped,
}

pub(super) enum Input {
    /// An answer, with the body of the message it ends (dropped by the driver).
    Answer(Answer, Bytes),
    Control(Control),
}

/// What the driver, the handles and the messages share: the bridge between the application
/// and the driver.
pub(super) struct Bridge {
    pub(super) inbox: Arc<Inbox<Input>>,
    pub(super) stopping: AtomicBool,
    pub(super) starved: AtomicBool,
    /// The consumer's max_in_flight, as last set.
    pub(super) max_in_flight: std::sync::atomic::AtomicU32,
    pub(super) stats: Mutex<ConsumerStats>,
    /// The driver's report, once it has stopped.
    pub(super) report: Mutex<Option<StopReport>>,
    /// The event streams (shared with the batches, which report their failures).
    pub(super) events: Arc<EventHub>,
    /// The consumer's span, for what its handles log on the application's tasks.
    pub(super) span: tracing::Span,
    /// Someone gathers batches (the driver then keeps `full` up to date).
    pub(super) batching: AtomicBool,
    /// The batches' counters, metrics and span.
    pub(super) batches: Arc<BatchShared>,
}

impl Bridge {
    pub(super) fn new(
        inbox: Arc<Inbox<Input>>,
        max_in_flight: u32,
        span: tracing::Span,
        batch_metrics: BatchMetrics,
    ) -> Bridge {
        let events = Arc::new(EventHub::default());
        Bridge {
            batching: AtomicBool::new(false),
            batches: Arc::new(BatchShared::new(
                batch_metrics,
                span.clone(),
                events.clone(),
            )),
            span,
            inbox,
            stopping: AtomicBool::new(false),
            starved: AtomicBool::new(false),
            max_in_flight: std::sync::atomic::AtomicU32::new(max_in_flight),
            stats: Mutex::new(ConsumerStats::default()),
            report: Mutex::new(None),
            events,
        }
    }
}

// ----------------------------------------------------------------------------------- message

/// A message's answers go to its consumer's driver: a push on its command queue.
impl AnswerSink for Bridge {
    fn send_answer(&self, answer: Answer, body: Bytes) {
        // If the driver is gone every connection is closed: nsqd redelivers the message.
        let _ = self.inbox.send(Input::Answer(answer, body));
    }
}

/// Moves the calls in `waiting` that wait for `key` to `answered`, each with `outcome` (sent
/// once the round's stats are published).
pub(super) fn answer_waiting(
    waiting: &mut Vec<(String, ConnectReply)>,
    key: &str,
    outcome: &Result<(), Error>,
    answered: &mut Vec<(ConnectReply, Result<(), Error>)>,
) {
    if waiting.iter().any(|(k, _)| k == key) {
        let (done, rest) = std::mem::take(waiting)
            .into_iter()
            .partition(|(k, _)| k == key);
        *waiting = rest;
        answered.extend(done.into_iter().map(|(_, reply)| (reply, outcome.clone())));
    }
}

/// A lookupd address as the core names it in its events (`http://host:port/path`).
pub(super) fn lookupd_key(addr: &str) -> String {
    nsq_proto::consumer::LookupdAddress::parse(addr)
        .map_or_else(|_| addr.to_owned(), |a| a.to_string())
}

// ----------------------------------------------------------------------------------- driver

pub(super) struct ConsumerLogic {
    machine: nsq_proto::Consumer,
    shared: Arc<Bridge>,
    mailbox: Arc<Mailbox<Message>>,
    /// Messages are handed out (false once stopping).
    handing_out: bool,
    /// Messages of this round, handed out at once by `deliver`.
    outgoing: VecDeque<Message>,
    origins: BTreeMap<ConnId, Arc<Origin<AnswerChannel>>>,
    stop_waiters: Vec<Reply<StopReport>>,
    /// `connect_to_nsqd` calls waiting for their nsqd's first connection outcome.
    connecting_to: Vec<(String, ConnectReply)>,
    /// Those resolved this round, answered once the round's stats are published (a caller
    /// told "connected" then sees the connection in `stats()`).
    connected_now: Vec<(ConnectReply, Result<(), Error>)>,
    /// `connect_to_lookupd` calls waiting for their lookupd's next answer (by its
    /// `http://..` form).
    lookupd_waiting: Vec<(String, ConnectReply)>,
    /// Each lookupd's last outcome.
    lookupd_outcome: BTreeMap<String, Result<(), Error>>,
    give_up: Option<GiveUpHook>,
    report: Option<StopReport>,
    /// The backoff level and starvation last seen (their changes are events).
    backoff_level: u32,
    starved: bool,
    /// What an operator scrapes (nothing without the `metrics` feature).
    metrics: ConsumerMetrics,
    /// When the per-nsqd rows of the published stats were last written.
    rows_at: Option<Instant>,
    /// How long batches keep their messages auto-touched (`auto_touch_limit`).
    auto_touch_limit: Duration,
    /// A round changed the counters since then (the rows may be behind).
    rows_behind: bool,
    /// The published totals as they were before this round first published them (when it
    /// handed out messages), for [`after_round`](Logic::after_round)'s comparisons.
    round_before: Option<Totals>,
}

/// What [`ConsumerLogic::after_round`] compares of the published stats to tell whether the
/// per-nsqd rows fell behind (`counts`) or must be written at once (`set`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Totals {
    counts: (u64, u64, u64, u64, usize),
    set: (usize, usize, u64),
}

impl Totals {
    fn of(stats: &ConsumerStats) -> Totals {
        Totals {
            counts: (
                stats.received,
                stats.finished,
                stats.requeued,
                stats.total_rdy,
                stats.in_flight,
            ),
            set: (stats.known_nsqd, stats.connections, stats.reconnects),
        }
    }
}

/// Up to this many known nsqd, the published stats' per-nsqd rows are written after every
/// round; above it, at most every [`ROWS_INTERVAL`] (and at once when the set of nsqd or
/// connections changes): writing them is O(nsqd), and a consumer of 1,000 nsqd has
/// thousands of rounds a second.
const ROWS_EVERY_ROUND: usize = 16;

/// How stale the per-nsqd rows may get above [`ROWS_EVERY_ROUND`] nsqd.
const ROWS_INTERVAL: Duration = Duration::from_millis(100);

impl ConsumerLogic {
    pub(super) fn new(
        machine: nsq_proto::Consumer,
        shared: Arc<Bridge>,
        mailbox: Arc<Mailbox<Message>>,
        give_up: Option<GiveUpHook>,
        metrics: ConsumerMetrics,
        auto_touch_limit: Duration,
    ) -> ConsumerLogic {
        ConsumerLogic {
            machine,
            shared,
            mailbox,
            handing_out: true,
            auto_touch_limit,
            outgoing: VecDeque::new(),
            origins: BTreeMap::new(),
            stop_waiters: Vec::new(),
            connecting_to: Vec::new(),
            connected_now: Vec::new(),
            lookupd_waiting: Vec::new(),
            lookupd_outcome: BTreeMap::new(),
            give_up,
            report: None,
            backoff_level: 0,
            starved: false,
            metrics,
            rows_at: None,
            rows_behind: false,
            round_before: None,
        }
    }

    /// Publishes the core's totals now, before the round's messages are handed out: a
    /// message is counted in `stats().received` before `recv` can return it. O(1) (the
    /// core's running sums) and one lock per round that hands out messages.
    fn publish_totals(&mut self) {
        let mut stats = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.round_before.is_none() {
            self.round_before = Some(Totals::of(&stats));
        }
        self.machine.counters_into(&mut stats);
    }

    /// Records a lookupd's outcome and resolves the `connect_to_lookupd` calls waiting for it.
    fn lookupd_answered(
        &mut self,
        key: &str,
        outcome: Result<(), nsq_proto::consumer::LookupdError>,
    ) {
        let outcome = outcome.map_err(|error| Error::Lookupd {
            lookupd: key.to_owned(),
            error,
        });
        answer_waiting(
            &mut self.lookupd_waiting,
            key,
            &outcome,
            &mut self.connected_now,
        );
        self.lookupd_outcome.insert(key.to_owned(), outcome);
    }

    /// The event stream's view of a core event, if it has one.
    fn stream_event(&self, event: &ConsumerEvent) -> Option<Event> {
        Some(match event {
            ConsumerEvent::ConnectionReady { addr, .. } => Event::Connected { nsqd: addr.clone() },
            ConsumerEvent::ConnectionClosed {
                addr,
                reason,
                retry_in,
                misconfigured,
                ..
            } => Event::Disconnected {
                nsqd: addr.clone(),
                reason: reason.clone(),
                retry_in: *retry_in,
                misconfigured: misconfigured.clone(),
            },
            ConsumerEvent::GaveUp { conn, message } => Event::GaveUp {
                nsqd: self
                    .origins
                    .get(conn)
                    .map(|o| o.addr().to_owned())
                    .unwrap_or_default(),
                id: message.id,
                attempts: message.attempts,
            },
            ConsumerEvent::LookupdFailed { addr, error } => Event::LookupdFailed {
                lookupd: addr.clone(),
                error: error.to_string(),
                misconfigured: error.is_misconfiguration(),
            },
            ConsumerEvent::InFlightLimitChanged {
                limit,
                latency,
                uncongested,
            } => Event::InFlightLimit {
                limit: *limit,
                latency: *latency,
                uncongested: *uncongested,
            },
            _ => return None,
        })
    }

    fn begin_stop(&mut self, now: Instant) {
        if self.machine.is_closing() {
            return;
        }
        tracing::info!("stopping consumer");
        self.shared.stopping.store(true, Ordering::Release);
        self.handing_out = false;
        // Closing the mailbox wakes a reader waiting in recv(); it then sees `stopping`.
        self.mailbox.close();
        // CLS first, then the REQs of what was never handed out: nsqd then does not hand the
        // freed slots to more messages.
        self.machine.close(now);
        for m in std::mem::take(&mut self.outgoing) {
            self.requeue_now(now, m);
        }
    }

    /// Keeps `full` up to date while the application gathers batches.
    fn publish_full(&self, now: Instant) {
        if self.shared.batching.load(Ordering::Relaxed) {
            self.shared.batches.set_full(self.machine.is_full(now));
        }
    }

    /// Resolves the `connect_to_nsqd` calls waiting for `addr` with its first outcome.
    fn connected(&mut self, addr: &str, outcome: &Result<(), Error>) {
        answer_waiting(
            &mut self.connecting_to,
            addr,
            outcome,
            &mut self.connected_now,
        );
    }

    /// Requeues a message the application never received: at once, without backoff.
    fn requeue_now(&mut self, now: Instant, m: Message) {
        let _ = m
            .into_answer(AnswerKind::UNTAKEN)
            .apply(&mut self.machine, now);
    }

    /// Shows a message given up on to the give-up hook. Rare: kept out of line, off the
    /// path of the messages handed out.
    #[cold]
    #[inline(never)]
    fn gave_up(&self, conn: ConnId, message: nsq_proto::Message) {
        if let Some(hook) = &self.give_up {
            let message = Message(Delivery::given_up(conn, message, self.origin(conn)));
            // The hook runs on the driver: its panic must not take the consumer down.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                hook(&message);
            }));
            if let Err(panic) = ran {
                tracing::error!(
                    msg_id = %message.id(),
                    nsqd = %message.nsqd_address(),
                    panic = %crate::panic_message(&*panic),
                    "the give-up hook panicked"
                );
            }
        }
    }

    fn origin(&self, conn: ConnId) -> Arc<Origin<AnswerChannel>> {
        match self.origins.get(&conn) {
            Some(o) => o.clone(),
            None => Origin::new(
                "",
                AnswerChannel(self.shared.clone()),
                self.metrics.answers(),
            ),
        }
    }
}

impl Logic for ConsumerLogic {
    type Machine = nsq_proto::Consumer;
    type Input = Input;

    fn machine(&mut self) -> &mut nsq_proto::Consumer {
        &mut self.machine
    }

    fn input(&mut self, now: Instant, input: Input) {
        match input {
            // A refusal (typically: the connection closed, so nsqd redelivers) is logged by
            // `apply`.
            Input::Answer(a, _body) => {
                let _ = a.apply(&mut self.machine, now);
            }
            Input::Control(c) => match c {
                Control::AddNsqd(a, strict, reply) => {
                    let addr = a.trim();
                    let open = |conn| {
                        self.machine.connection(conn).is_none_or(|c| {
                            matches!(
                                c.state(),
                                nsq_proto::connection::ConnectionState::Handshaking
                                    | nsq_proto::connection::ConnectionState::Ready
                            )
                        })
                    };
                    if strict
                        && self
                            .machine
                            .connections()
                            .any(|(conn, at)| at == addr && open(conn))
                    {
                        reply.send(Err(crate::Error::AlreadyConnected(addr.to_owned())));
                        return;
                    }
                    if let Err(e) = self.machine.add_nsqd(now, &a) {
                        reply.send(Err(e.into()));
                        return;
                    }
                    let ready = self.machine.connections().any(|(conn, at)| {
                        at == addr
                            && self.machine.connection(conn).is_some_and(|c| {
                                c.state() == nsq_proto::connection::ConnectionState::Ready
                            })
                    });
                    if ready {
                        reply.send(Ok(()));
                    } else {
                        self.connecting_to.push((addr.to_owned(), reply));
                    }
                }
                Control::DisconnectNsqd(a, reply) => {
                    reply.send(self.machine.disconnect_from_nsqd(now, &a));
                }
                Control::DisconnectLookupd(a, reply) => {
                    let done = self.machine.disconnect_from_lookupd(now, &a);
                    if done.is_ok() {
                        let gone = Err(nsq_proto::consumer::LookupdError::Transport(
                            "disconnected from before it answered".into(),
                        ));
                        self.lookupd_answered(&lookupd_key(&a), gone);
                        self.lookupd_outcome.remove(&lookupd_key(&a));
                    }
                    reply.send(done);
                }
                Control::AddLookupd(a, reply) => {
                    if let Err(e) = self.machine.add_lookupd(now, &a) {
                        reply.send(Err(e.into()));
                        return;
                    }
                    let key = lookupd_key(&a);
                    match self.lookupd_outcome.get(&key) {
                        // Polled again now (it was parked), or never answered yet: wait.
                        Some(Err(Error::Lookupd { error, .. })) if error.is_misconfiguration() => {
                            self.lookupd_waiting.push((key, reply));
                        }
                        Some(last) => reply.send(last.clone()),
                        None => self.lookupd_waiting.push((key, reply)),
                    }
                }
                Control::SetMaxInFlight(n) => {
                    log_max_in_flight(n);
                    self.machine.set_max_in_flight(now, n);
                    self.shared.max_in_flight.store(n, Ordering::Relaxed);
                }
                Control::Batching => {
                    if self.machine.config().connection.auto_touch.is_none() {
                        let limit = self.auto_touch_limit;
                        tracing::debug!(
                            ?limit,
                            "batches: auto-touch on (messages wait for their batch to fill)"
                        );
                        self.machine.set_auto_touch(now, Some(limit));
                    }
                    self.publish_full(now);
                }
                Control::Stop(reply) => {
                    self.stop_waiters.extend(reply);
                    self.begin_stop(now);
                }
                // The guard is shared by every handle: this is the last one.
                Control::Dropped => self.begin_stop(now),
            },
        }
    }

    /// A batch's answers (every answer of a wake-up) plan RDY once, after the last.
    fn inputs_begin(&mut self) {
        self.machine.hold_replans();
    }

    fn inputs_end(&mut self, now: Instant) {
        self.machine.release_replans(now);
    }

    fn connecting(&mut self, conn: ConnId, addr: &str) {
        self.origins.insert(
            conn,
            Origin::new(
                addr,
                AnswerChannel(self.shared.clone()),
                self.metrics.answers(),
            ),
        );
    }

    fn disconnected(&mut self, conn: ConnId) {
        self.origins.remove(&conn);
    }

    fn event(&mut self, now: Instant, event: ConsumerEvent) {
        log_consumer_event(&event, |c| self.origins.get(&c).map(|o| o.addr()));
        if self.shared.events.wanted() {
            if let Some(e) = self.stream_event(&event) {
                self.shared.events.emit(&e);
            }
        }
        match event {
            ConsumerEvent::Message { conn, message } => {
                self.metrics.message_received(now, message.timestamp);
                let msg = Message(Delivery::new(conn, message, self.origin(conn)));
                if self.handing_out {
                    self.outgoing.push_back(msg);
                } else {
                    // Stopping: no new messages are handed out; requeue at once.
                    self.requeue_now(now, msg);
                }
            }
            ConsumerEvent::GaveUp { conn, message } => self.gave_up(conn, message),
            ConsumerEvent::ConnectionReady { addr, .. } => self.connected(&addr, &Ok(())),
            ConsumerEvent::ConnectionClosed {
                addr,
                reason,
                misconfigured,
                ..
            } => {
                let failed = Err(match misconfigured {
                    Some(problem) => Error::Misconfigured {
                        nsqd: addr.clone(),
                        problem,
                    },
                    None => Error::Connect {
                        nsqd: addr.clone(),
                        reason,
                    },
                });
                self.connected(&addr, &failed);
            }
            ConsumerEvent::LookupdAnswered { addr, .. } => self.lookupd_answered(&addr, Ok(())),
            ConsumerEvent::LookupdFailed { addr, error } => {
                self.lookupd_answered(&addr, Err(error));
            }
            ConsumerEvent::Closed { leftovers } => {
                self.report = Some(StopReport::new(leftovers));
            }
            _ => {}
        }
    }

    fn deliver(&mut self, now: Instant) -> bool {
        if self.outgoing.is_empty() {
            return false;
        }
        // Before the messages: a batch that takes them then sees whether more can come.
        self.publish_full(now);
        self.publish_totals();
        if let Some(at) = self.metrics.hand_out_time() {
            for m in &mut self.outgoing {
                m.0.handed_out(at);
            }
        }
        if self.mailbox.push_all(&mut self.outgoing).is_ok() {
            return false;
        }
        // Nobody can receive messages any more: stop rather than loop redeliveries. CLS goes
        // out before the REQs, so nsqd does not hand the freed slots to more messages.
        if self.handing_out {
            tracing::info!("the consumer's message receiver was dropped");
        }
        self.begin_stop(now);
        for m in std::mem::take(&mut self.outgoing) {
            self.requeue_now(now, m);
        }
        true
    }

    fn after_round(&mut self, now: Instant) {
        self.publish_full(now);
        let starved = self.machine.is_starved();
        self.shared.starved.store(starved, Ordering::Relaxed);
        let level = self.machine.backoff_level();
        let wanted = self.shared.events.wanted();
        if level != self.backoff_level {
            self.backoff_level = level;
            if wanted {
                self.shared.events.emit(&match level {
                    0 => Event::BackoffEnded,
                    level => Event::Backoff { level },
                });
            }
        }
        if starved != self.starved {
            self.starved = starved;
            if wanted {
                self.shared.events.emit(&Event::Starved(starved));
            }
        }
        // Written in place: no allocation once the snapshot has room for every nsqd. The
        // totals every round (running sums in the core); the per-nsqd rows every round with
        // few nsqd, otherwise when the set of nsqd or connections changed, a connect call
        // resolves, or ROWS_INTERVAL has passed (`wake_at` brings that round if nothing else
        // does).
        let mut stats = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // As they were before this round published anything (`deliver` may have).
        let before = self
            .round_before
            .take()
            .unwrap_or_else(|| Totals::of(&stats));
        if stats.known_nsqd > ROWS_EVERY_ROUND {
            self.machine.counters_into(&mut stats);
        }
        let rows = stats.known_nsqd <= ROWS_EVERY_ROUND
            || before.set != Totals::of(&stats).set
            || !self.connected_now.is_empty()
            || self
                .rows_at
                .is_none_or(|t| now.saturating_duration_since(t) >= ROWS_INTERVAL);
        if rows {
            self.machine.stats_into(&mut stats);
            self.rows_at = Some(now);
            self.rows_behind = false;
        } else {
            self.rows_behind |= before.counts != Totals::of(&stats).counts;
        }
        self.metrics.update(&stats, rows);
        drop(stats);
        for (reply, outcome) in self.connected_now.drain(..) {
            reply.send(outcome);
        }
    }

    fn wake_at(&self) -> Option<Instant> {
        self.rows_at
            .filter(|_| self.rows_behind)
            .map(|t| t + ROWS_INTERVAL)
    }

    fn done(&self) -> bool {
        self.report.is_some()
    }

    fn stopped(mut self) {
        self.metrics.stopped();
        self.shared.stopping.store(true, Ordering::Release);
        self.mailbox.close();
        self.shared.events.close();
        let report = self.report.unwrap_or_default();
        *self
            .shared
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(report);
        for w in self.stop_waiters.drain(..) {
            w.send(report);
        }
        tracing::debug!(unanswered = report.unanswered, "consumer stopped");
    }
}
