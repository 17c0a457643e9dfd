//! nsq-proto's sans-IO `Consumer` and `Producer` as the simulator's client under test
//! (`nsq_test_broker::sim`), for the test broker's `simulate` example and simulation tests
//! and nsq-proto's `simulated_world` tests (the test broker itself does not depend on
//! nsq-proto).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use nsq_proto::consumer::{Consumer, ConsumerConfig, ConsumerEvent, ConsumerStats, InFlightMode};
use nsq_proto::driver::{Action, ConnId, LookupdRequestId};
use nsq_proto::producer::{Producer, ProducerConfig, ProducerEvent, PublishFailure};
use nsq_proto::{Channel, Message, MessageId, Topic};
use nsq_test_broker::sim::{
    Act, Answer, ClientFactory, ConnRef, ConsumerNote, ConsumerSpec, Delivery, Footprint, Machine,
    PublishResult, SimConsumer, SimProducer,
};

fn act(a: Action) -> Act {
    match a {
        Action::Connect { conn, addr } => Act::Connect {
            conn: conn.get(),
            addr,
        },
        Action::Transmit { conn, data } => Act::Transmit {
            conn: conn.get(),
            data: data.to_vec(),
        },
        Action::Disconnect { conn } => Act::Disconnect { conn: conn.get() },
        Action::LookupdRequest {
            request,
            addr,
            data,
        } => Act::LookupdRequest {
            req: request.get(),
            addr,
            data: data.to_vec(),
        },
        Action::LookupdClose { request } => Act::LookupdClose { req: request.get() },
        other => unreachable!("an action the simulator does not know: {other:?}"),
    }
}

/// The consumer, with the connection handles the world knows by number.
pub struct SimNsqConsumer {
    consumer: Consumer,
    buf: BytesMut,
    handles: Handles,
    /// With `NsqProtoFactory::client_rounds`: the snapshot the client layer's driver takes
    /// at the end of each round (its `after_round`), taken here at the end of each drain.
    round_stats: Option<ConsumerStats>,
    /// The latest instant the consumer was given, and when the snapshot's per-nsqd rows were
    /// last written.
    now: Option<Instant>,
    rows_at: Option<Instant>,
}

fn delivery(conn: ConnId, m: &Message) -> Delivery {
    Delivery {
        conn: conn.get(),
        id: *m.id.as_bytes(),
        attempts: m.attempts,
        timestamp: m.timestamp,
        len: u32::try_from(m.body.len()).unwrap_or(u32::MAX),
    }
}

impl Machine for SimNsqConsumer {
    fn connected(&mut self, now: Instant, conn: ConnRef) {
        self.now = Some(now);
        self.consumer.handle_connected(now, self.handles.conn(conn));
    }
    fn connect_failed(&mut self, now: Instant, conn: ConnRef, reason: &str) {
        self.now = Some(now);
        self.consumer
            .handle_connect_failed(now, self.handles.conn(conn), reason);
    }
    fn input(&mut self, now: Instant, conn: ConnRef, data: &[u8]) {
        self.now = Some(now);
        self.buf.clear();
        self.buf.extend_from_slice(data);
        self.consumer
            .handle_input(now, self.handles.conn(conn), &mut self.buf);
    }
    fn eof(&mut self, now: Instant, conn: ConnRef) {
        self.now = Some(now);
        self.consumer.handle_eof(now, self.handles.conn(conn));
    }
    fn timeout(&mut self, now: Instant) {
        self.now = Some(now);
        self.consumer.handle_timeout(now);
    }
    fn next_timeout(&self) -> Option<Instant> {
        self.consumer.poll_timeout()
    }
    fn poll_act(&mut self) -> Option<Act> {
        let Some(a) = self.consumer.poll_action() else {
            if let Some(stats) = &mut self.round_stats {
                // What nsq-client's driver does after every round (`after_round`), for the
                // metrics, the starvation flag and `stats()`: the totals every round, the
                // per-nsqd rows every round up to 16 nsqd, otherwise when the set changes or
                // 100 ms have passed.
                std::hint::black_box(self.consumer.is_starved());
                std::hint::black_box(self.consumer.backoff_level());
                let set = (stats.known_nsqd, stats.connections, stats.reconnects);
                self.consumer.counters_into(stats);
                let now = self.now;
                let rows = stats.known_nsqd <= 16
                    || set != (stats.known_nsqd, stats.connections, stats.reconnects)
                    || self.rows_at.zip(now).is_none_or(|(t, now)| {
                        now.saturating_duration_since(t) >= std::time::Duration::from_millis(100)
                    });
                if rows {
                    self.consumer.stats_into(stats);
                    self.rows_at = now;
                }
                std::hint::black_box(&*stats);
            }
            return None;
        };
        Some(self.handles.act(a))
    }
}

/// The machines' handles by number (the world names them by `ConnId::get`).
#[derive(Default)]
struct Handles {
    conns: HashMap<ConnRef, ConnId>,
    requests: HashMap<ConnRef, LookupdRequestId>,
}

impl Handles {
    fn act(&mut self, a: Action) -> Act {
        match &a {
            Action::Connect { conn, .. } => {
                self.conns.insert(conn.get(), *conn);
            }
            Action::LookupdRequest { request, .. } => {
                self.requests.insert(request.get(), *request);
            }
            // Kept after LookupdClose: a reply the world delivers late (the consumer timed the
            // exchange out first) still reaches the consumer, which must ignore it.
            _ => {}
        }
        act(a)
    }

    fn conn(&self, raw: ConnRef) -> ConnId {
        self.conns[&raw]
    }

    fn request(&self, raw: ConnRef) -> LookupdRequestId {
        self.requests[&raw]
    }
}

impl SimConsumer for SimNsqConsumer {
    fn lookupd_input(&mut self, now: Instant, req: ConnRef, data: &[u8]) {
        self.consumer
            .handle_lookupd_input(now, self.handles.request(req), data);
    }
    fn lookupd_eof(&mut self, now: Instant, req: ConnRef) {
        self.consumer
            .handle_lookupd_eof(now, self.handles.request(req));
    }
    fn lookupd_failed(&mut self, now: Instant, req: ConnRef, reason: &str) {
        self.consumer
            .handle_lookupd_failed(now, self.handles.request(req), reason);
    }
    fn poll_note(&mut self) -> Option<ConsumerNote> {
        let e = self.consumer.poll_event()?;
        Some(match e {
            ConsumerEvent::Message { conn, message } => {
                ConsumerNote::Message(delivery(conn, &message))
            }
            ConsumerEvent::GaveUp { conn, message } => {
                ConsumerNote::GaveUp(delivery(conn, &message))
            }
            ConsumerEvent::Closed { leftovers } => ConsumerNote::Closed { leftovers },
            other => ConsumerNote::Other(format!("{other:?}")),
        })
    }
    fn answer(&mut self, now: Instant, d: &Delivery, how: Answer) -> Result<(), String> {
        let conn = self.handles.conn(d.conn);
        let id = MessageId::new(d.id);
        match how {
            Answer::Finish => self.consumer.finish(now, conn, &id),
            Answer::Requeue { backoff } => self
                .consumer
                .requeue_id(now, conn, &id, d.attempts, None, backoff),
            Answer::Touch => self.consumer.touch(now, conn, &id),
        }
        .map_err(|e| e.to_string())
    }
    fn set_max_in_flight(&mut self, now: Instant, max: u32) {
        self.consumer.set_max_in_flight(now, max);
    }
    fn close(&mut self, now: Instant) {
        self.consumer.close(now);
    }
    fn backoff_level(&self) -> u32 {
        self.consumer.backoff_level()
    }
    fn is_full(&self, now: Instant) -> bool {
        self.consumer.is_full(now)
    }
    fn set_auto_touch(&mut self, now: Instant, limit: Option<Duration>) {
        self.consumer.set_auto_touch(now, limit);
    }
    fn hold_replans(&mut self) {
        self.consumer.hold_replans();
    }
    fn release_replans(&mut self, now: Instant) {
        self.consumer.release_replans(now);
    }
    fn in_flight_limit(&self) -> Option<u32> {
        Some(self.consumer.in_flight_limit())
    }
    fn limit_grace(&self) -> Duration {
        nsq_proto::consumer::LIMIT_GRACE
    }
    fn close_timeout(&self) -> Duration {
        self.consumer.config().close_timeout
    }
    fn describe(&self, conn: ConnRef) -> String {
        let id = self.handles.conns.get(&conn).copied();
        let s = self.consumer.stats();
        let backoff = (s.backoff_level, s.total_rdy, s.in_flight, s.connections);
        match s
            .nsqd
            .into_iter()
            .find(|n| n.connection.is_some() && n.connection == id)
        {
            Some(n) => format!(
                "{:?} rdy {} in flight {} received {} (consumer: backoff, total rdy, in flight, connections = {backoff:?})",
                n.state, n.rdy, n.in_flight, n.received
            ),
            None => format!("not a connection of the consumer ({backoff:?})"),
        }
    }
    fn footprint(&self) -> Footprint {
        let s = self.consumer.stats();
        Footprint {
            in_flight: s.in_flight,
            connections: s.connections,
            known_nsqd: s.known_nsqd,
        }
    }
}

/// The producer.
pub struct SimNsqProducer {
    producer: Producer,
    buf: BytesMut,
    handles: Handles,
}

impl Machine for SimNsqProducer {
    fn connected(&mut self, now: Instant, conn: ConnRef) {
        self.producer.handle_connected(now, self.handles.conn(conn));
    }
    fn connect_failed(&mut self, now: Instant, conn: ConnRef, reason: &str) {
        self.producer
            .handle_connect_failed(now, self.handles.conn(conn), reason);
    }
    fn input(&mut self, now: Instant, conn: ConnRef, data: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(data);
        self.producer
            .handle_input(now, self.handles.conn(conn), &mut self.buf);
    }
    fn eof(&mut self, now: Instant, conn: ConnRef) {
        self.producer.handle_eof(now, self.handles.conn(conn));
    }
    fn timeout(&mut self, now: Instant) {
        self.producer.handle_timeout(now);
    }
    fn next_timeout(&self) -> Option<Instant> {
        self.producer.poll_timeout()
    }
    fn poll_act(&mut self) -> Option<Act> {
        let a = self.producer.poll_action()?;
        Some(self.handles.act(a))
    }
}

impl SimProducer for SimNsqProducer {
    fn publish(&mut self, now: Instant, topic: &str, body: &[u8]) -> Result<u64, String> {
        let topic = Topic::new(topic).map_err(|e| e.to_string())?;
        self.producer
            .publish(now, &topic, body)
            .map(nsq_proto::producer::PublishId::get)
            .map_err(|e| e.to_string())
    }
    fn poll_result(&mut self) -> Option<PublishResult> {
        loop {
            match self.producer.poll_event()? {
                ProducerEvent::Published(id) => {
                    return Some(PublishResult {
                        id: id.get(),
                        ok: true,
                        maybe_published: false,
                    });
                }
                ProducerEvent::PublishFailed(id, why) => {
                    let maybe = matches!(
                        why,
                        PublishFailure::ConnectionLost(_) | PublishFailure::TimedOut { .. }
                    );
                    return Some(PublishResult {
                        id: id.get(),
                        ok: false,
                        maybe_published: maybe,
                    });
                }
                _ => {}
            }
        }
    }
}

/// Makes nsq-proto clients with their default settings (TLS and compression off).
#[derive(Default)]
pub struct NsqProtoFactory {
    /// Also do, at the end of every drain of the consumer, what the client layer's driver
    /// does after every round (a stats snapshot and the starvation check), so its cost counts
    /// in the core's time.
    pub client_rounds: bool,
}

impl ClientFactory for NsqProtoFactory {
    fn low_rdy_max_wait(&self) -> Duration {
        ConsumerConfig::default().low_rdy_max_wait
    }
    fn idle_wait(&self, handshake: Duration) -> Duration {
        let cap = ConsumerConfig::default().low_rdy_idle_timeout;
        nsq_proto::consumer::idle_wait(handshake, cap)
    }
    fn consumer(&mut self, now: Instant, spec: &ConsumerSpec<'_>) -> Box<dyn SimConsumer> {
        let config = ConsumerConfig {
            max_in_flight: spec.max_in_flight,
            max_attempts: spec.max_attempts,
            max_in_flight_mode: if spec.adaptive.is_some() {
                InFlightMode::Adaptive
            } else {
                InFlightMode::Static
            },
            min_in_flight: spec.adaptive.unwrap_or(1),
            ..ConsumerConfig::default()
        };
        let mut consumer = Consumer::new(
            config,
            Topic::new(spec.topic).expect("valid topic"),
            Channel::new(spec.channel).expect("valid channel"),
            spec.seed,
        );
        for l in spec.lookupds {
            consumer.add_lookupd(now, l).expect("valid lookupd address");
        }
        Box::new(SimNsqConsumer {
            consumer,
            buf: BytesMut::new(),
            handles: Handles::default(),
            round_stats: self.client_rounds.then(ConsumerStats::default),
            now: None,
            rows_at: None,
        })
    }

    fn producer(&mut self, now: Instant, seed: u64, nsqds: &[String]) -> Box<dyn SimProducer> {
        let mut producer = Producer::new(ProducerConfig::default(), seed).expect("valid config");
        for a in nsqds {
            producer.add_nsqd(now, a).expect("valid nsqd address");
        }
        Box::new(SimNsqProducer {
            producer,
            buf: BytesMut::new(),
            handles: Handles::default(),
        })
    }
}
