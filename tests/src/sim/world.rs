//! The world's event loop, its links, nsqlookupd, and the invariants.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::SimConfig;
use super::client::{
    Act, Answer, ClientFactory, ConnRef, ConsumerNote, Delivery, SimConsumer, SimProducer,
};
use super::faults::{Fault, FaultKind, schedule};
use super::rng::Rng;
use crate::model::{ClientId, ClientState, Nsqd, NsqdOptions};

const TOPIC: &str = "sim";
const CHANNEL: &str = "c";
/// In a busy world, what every nsqd is topped up to (messages ready) whenever it falls
/// under half of it, during the fault phase.
const BUSY_DEPTH: usize = 20;
/// A graceful stop completes within the consumer's close_timeout (30 s) and a few round trips.
const CLOSE_BOUND: Duration = Duration::from_secs(35);

/// The first invariant a run broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The run's seed.
    pub seed: u64,
    /// The step (event) it happened at.
    pub step: u64,
    /// Virtual time since the run began.
    pub at: Duration,
    /// What was violated, with the figures.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {} at {:.3}s: {}",
            self.seed,
            self.step,
            self.at.as_secs_f64(),
            self.what
        )
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// nsqd in the world.
    pub nsqd: usize,
    /// Messages the nsqd accepted (from other producers and from the producer under test).
    pub published: u64,
    /// Messages handed to the application (redeliveries included).
    pub delivered: u64,
    /// Distinct messages finished by the application.
    pub finished: u64,
    /// Messages given up (the hook ran).
    pub gave_up: u64,
    /// Publishes of the producer under test confirmed.
    pub producer_ok: u64,
    /// Publishes of the producer under test failed.
    pub producer_failed: u64,
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// The longest an nsqd with messages waited while the consumer had room.
    pub worst_starvation: Duration,
    /// The starvation bound the run checked ([`SimConfig::effective_starvation_bound`] of
    /// its links).
    pub starvation_bound: Duration,
    /// Real time spent inside the client under test.
    pub core_time: Duration,
    /// Events processed.
    pub steps: u64,
    /// Virtual time the run took.
    pub virtual_time: Duration,
    /// A hash of everything that happened, in order: the same seed gives the same hash.
    pub trace_hash: u64,
    /// The faults of the run.
    pub faults: Vec<Fault>,
    /// Consumers started (1 plus one per graceful stop).
    pub consumers: u32,
    /// RDY commands the consumers sent (two per low-RDY turn: the grant and the release).
    pub rdy_commands: u64,
    /// Of [`Report::rdy_commands`] and [`Report::delivered`], those during the fault phase
    /// (in a busy world, while every nsqd has messages; the drain after it is the sparse
    /// world's probing of mostly empty nsqd).
    pub fault_phase_rdy_commands: u64,
    /// See [`Report::fault_phase_rdy_commands`].
    pub fault_phase_delivered: u64,
}

/// Who owns a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Who {
    Consumer(u32),
    Producer,
}

type Key = (Who, ConnRef);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Finish,
    Fail,
    Panic,
    Touch,
}

#[derive(Debug)]
enum Ev {
    ConnectDone(Key, u64),
    ToServer(Key, u64, Vec<u8>),
    ServerEof(Key, u64),
    ToClient(Key, u64, Vec<u8>),
    ClientEof(Key, u64),
    Lookupd(u32, ConnRef, Option<Vec<u8>>),
    Handler(u32, Delivery, Outcome),
    NsqdTimer(usize),
    Fault(usize),
    Heal(usize),
    Publish(u64),
    ProducerPublish(u64),
    /// Tops nsqd `i` up in a busy world ([`SimConfig::busy`]).
    Refill(usize),
    Tick,
    StartConsumer,
}

/// One direction of a link.
#[derive(Clone, Copy, Debug)]
struct Dir {
    free_at: Instant,
    last_arrival: Instant,
}

#[derive(Debug)]
struct Conn {
    nsqd: usize,
    /// Connection generation (events of an older one are dropped).
    epoch: u64,
    server: Option<ClientId>,
    c2s: Dir,
    s2c: Dir,
    /// The last RDY the client sent on it.
    rdy: u64,
    /// Unparsed client bytes (for RDY).
    scan: Vec<u8>,
    /// The client closed it (what the server sends is dropped).
    client_closed: bool,
}

#[derive(Debug)]
struct Node {
    model: Nsqd,
    addr: String,
    down: u32,
    unlisted: u32,
    silent_until: Option<Instant>,
    slow: u32,
    slow_extra: Duration,
    latency: Duration,
    bytes_per_sec: u64,
    timer_at: Option<Instant>,
    by_server: HashMap<ClientId, Key>,
    /// Since when (on the eligible clock) it has waited with messages and a subscriber.
    waiting_since: Option<Duration>,
    /// A busy world's top-up of it is scheduled.
    refill_pending: bool,
}

struct ConsumerSlot {
    epoch: u32,
    machine: Box<dyn SimConsumer>,
    held: HashMap<(ConnRef, [u8; 16]), Delivery>,
    closing: bool,
    closed: bool,
    rdy_sum: u64,
}

struct World<'f> {
    cfg: SimConfig,
    faults: Vec<Fault>,
    factory: &'f mut dyn ClientFactory,
    t0: Instant,
    now: Instant,
    step: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    events: HashMap<usize, Ev>,
    next_ev: usize,
    nodes: Vec<Node>,
    addr_index: HashMap<String, usize>,
    lookupd_up: Vec<u32>,
    conns: HashMap<Key, Conn>,
    next_epoch: u64,
    consumer: Option<ConsumerSlot>,
    old_consumers: Vec<ConsumerSlot>,
    producer: Option<Box<dyn SimProducer>>,
    producer_bodies: HashMap<u64, Vec<u8>>,
    max_in_flight: u32,
    max_in_flight_ever: u32,

    /// When the current consumer was asked to close.
    closing_since: Option<Instant>,
    /// The starvation bound checked ([`SimConfig::effective_starvation_bound`] of the
    /// world's links).
    bound: Duration,
    /// Lookupd exchanges the consumer closed before their reply arrived.
    closed_requests: HashSet<(u32, ConnRef)>,
    mif_faults: u32,
    slow_handlers: u32,
    failing_handlers: u32,
    panicking_handlers: u32,
    r_net: Rng,
    r_app: Rng,
    r_pub: Rng,
    /// Messages the nsqd accepted: (nsqd, id) -> body.
    accepted: HashMap<(usize, [u8; 16]), Arc<[u8]>>,
    accepted_bodies: HashSet<Vec<u8>>,
    handed: HashSet<(usize, [u8; 16])>,
    finished: HashSet<(usize, [u8; 16])>,
    /// Eligible clock: virtual time during which the consumer had room.
    eligible: Duration,
    eligible_mark: Instant,
    report: Report,
    hash: u64,
    violation: Option<Violation>,
    publishes_left: u64,
    producer_left: u64,
    /// Messages a busy world's top-ups published.
    refills: u64,
    end_of_faults: Instant,
    drained: bool,
    final_close: bool,
    /// Reused buffers for a consumer's actions and notes, taken in one timed call each (a
    /// clock read per call would weigh as much as the calls themselves).
    act_buf: Vec<Act>,
    note_buf: Vec<ConsumerNote>,
}

fn fnv(h: &mut u64, data: &[u8]) {
    for b in data {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Runs `config` with the faults its seed draws.
pub fn run(config: &SimConfig, factory: &mut dyn ClientFactory) -> Report {
    let faults = schedule(config);
    run_with_faults(config, &faults, factory)
}

/// Runs `config` with the given faults.
pub fn run_with_faults(
    config: &SimConfig,
    faults: &[Fault],
    factory: &mut dyn ClientFactory,
) -> Report {
    let mut world = World::new(config.clone(), faults.to_vec(), factory);
    let result = catch_unwind(AssertUnwindSafe(|| world.run()));
    if let Err(p) = result {
        let text = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".into());
        world.violate(format!("panic: {text}"));
    }
    world.finish_report()
}

/// A shorter fault schedule of `config`'s run that still violates an invariant (the one
/// given if none shorter does): whole halves first, then one fault at a time.
pub fn shrink(config: &SimConfig, faults: &[Fault], factory: &mut dyn ClientFactory) -> Vec<Fault> {
    let mut cur = faults.to_vec();
    let fails = |f: &[Fault], factory: &mut dyn ClientFactory| {
        run_with_faults(config, f, factory).violation.is_some()
    };
    let mut chunk = cur.len().div_ceil(2);
    while chunk >= 1 && !cur.is_empty() {
        let mut i = 0;
        let mut removed = false;
        while i < cur.len() {
            let mut cand = cur.clone();
            cand.drain(i..(i + chunk).min(cur.len()));
            if fails(&cand, factory) {
                cur = cand;
                removed = true;
            } else {
                i += chunk;
            }
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    cur
}

impl<'f> World<'f> {
    fn new(cfg: SimConfig, faults: Vec<Fault>, factory: &'f mut dyn ClientFactory) -> Self {
        let t0 = Instant::now();
        let mut r_net = Rng::new(cfg.seed, 2);
        let opts = NsqdOptions {
            msg_timeout: cfg.msg_timeout,
            ..NsqdOptions::default()
        };
        // 2026-01-01T00:00:00Z, so message timestamps do not depend on the clock.
        let unix0: i64 = 1_767_225_600_000_000_000;
        let mut nodes = Vec::with_capacity(cfg.nsqd);
        let mut addr_index = HashMap::new();
        for i in 0..cfg.nsqd {
            let addr = format!("nsqd{i}.sim:4150");
            addr_index.insert(addr.clone(), i);
            let mut model = Nsqd::new(opts.clone(), (i as u64) << 40, t0, unix0);
            model.create_channel(t0, TOPIC, CHANNEL);
            // Links one way: 70% in the consumer's region (0.1-2 ms), 25% in another region
            // (5-40 ms), 5% on another continent (60-120 ms); 1 to 100 MB/s.
            let latency = Duration::from_micros(match r_net.below(100) {
                0..70 => r_net.range(100, 2_000),
                70..95 => r_net.range(5_000, 40_000),
                _ => r_net.range(60_000, 120_000),
            });
            let bytes_per_sec = r_net.range(1, 100) * 1_000_000;
            nodes.push(Node {
                model,
                addr,
                down: 0,
                unlisted: 0,
                silent_until: None,
                slow: 0,
                slow_extra: Duration::ZERO,
                latency,
                bytes_per_sec,
                timer_at: None,
                by_server: HashMap::new(),
                waiting_since: None,
                refill_pending: false,
            });
        }
        let end_of_faults = t0 + cfg.fault_phase;
        // An idle low-RDY turn's seat time per nsqd: its idle wait (twice the handshake of
        // two round trips, within 100 ms ..= 1 s) and the settle time of its RDY 0 (the
        // handshake), over max_in_flight seats.
        let probes: Duration = nodes
            .iter()
            .map(|n| {
                let handshake = n.latency * 4;
                (handshake * 2).clamp(Duration::from_millis(100), Duration::from_secs(1))
                    + handshake
            })
            .sum();
        let probe_round = probes / cfg.max_in_flight.max(1);
        let report = Report {
            starvation_bound: cfg.effective_starvation_bound(probe_round),
            seed: cfg.seed,
            nsqd: cfg.nsqd,
            faults: faults.clone(),
            ..Report::default()
        };
        Self {
            max_in_flight: cfg.max_in_flight,
            max_in_flight_ever: cfg.max_in_flight,

            closing_since: None,
            bound: cfg.effective_starvation_bound(probe_round),
            closed_requests: HashSet::new(),
            publishes_left: cfg.messages as u64,
            producer_left: cfg.producer_messages as u64,
            refills: 0,
            lookupd_up: vec![0; cfg.lookupds.max(1)],
            r_app: Rng::new(cfg.seed, 3),
            r_pub: Rng::new(cfg.seed, 4),
            cfg,
            faults,
            factory,
            t0,
            now: t0,
            step: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            next_ev: 0,
            nodes,
            addr_index,
            conns: HashMap::new(),
            next_epoch: 0,
            consumer: None,
            old_consumers: Vec::new(),
            producer: None,
            producer_bodies: HashMap::new(),
            mif_faults: 0,
            slow_handlers: 0,
            failing_handlers: 0,
            panicking_handlers: 0,
            r_net,
            accepted: HashMap::new(),
            accepted_bodies: HashSet::new(),
            handed: HashSet::new(),
            finished: HashSet::new(),
            eligible: Duration::ZERO,
            eligible_mark: t0,
            report,
            hash: 0xcbf2_9ce4_8422_2325,
            violation: None,
            end_of_faults,
            drained: false,
            final_close: false,
            act_buf: Vec::new(),
            note_buf: Vec::new(),
        }
    }

    fn at(&self) -> Duration {
        self.now.saturating_duration_since(self.t0)
    }

    fn trace(&mut self, tag: u8, a: u64, b: &[u8]) {
        let t = self.at().as_nanos() as u64;
        fnv(&mut self.hash, &t.to_le_bytes());
        fnv(&mut self.hash, &[tag]);
        fnv(&mut self.hash, &a.to_le_bytes());
        fnv(&mut self.hash, b);
    }

    fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                seed: self.cfg.seed,
                step: self.step,
                at: self.at(),
                what,
            });
        }
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        let id = self.next_ev;
        self.next_ev += 1;
        self.events.insert(id, ev);
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.now), self.seq, id)));
    }

    // ------------------------------------------------------------------ the loop

    fn run(&mut self) {
        self.start_consumer();
        let nsqds: Vec<String> = self
            .nodes
            .iter()
            .take(self.cfg.producer_nsqd.min(self.nodes.len()))
            .map(|n| n.addr.clone())
            .collect();
        if self.cfg.producer_messages > 0 && !nsqds.is_empty() {
            let (now, seed) = (self.now, self.cfg.seed ^ 0x5eed);
            let factory = &mut *self.factory;
            let p = timed(&mut self.report.core_time, || {
                factory.producer(now, seed, &nsqds)
            });
            self.producer = Some(p);
            self.drive_producer();
        }
        for (i, f) in self.faults.clone().iter().enumerate() {
            self.push(self.t0 + f.at, Ev::Fault(i));
            if f.end() > f.at {
                self.push(self.t0 + f.end(), Ev::Heal(i));
            }
        }
        // Publications spread over the fault phase.
        let phase = self.cfg.fault_phase.as_micros() as u64;
        for n in 0..self.cfg.messages as u64 {
            let at = self.t0 + Duration::from_micros(self.r_pub.below(phase.max(1)));
            self.push(at, Ev::Publish(n));
        }
        for n in 0..self.cfg.producer_messages as u64 {
            let at = self.t0 + Duration::from_micros(self.r_pub.below(phase.max(1)));
            self.push(at, Ev::ProducerPublish(n));
        }
        if self.cfg.busy {
            for i in 0..self.nodes.len() {
                self.nodes[i].refill_pending = true;
                self.push(self.t0, Ev::Refill(i));
            }
        }
        self.push(self.t0 + Duration::from_secs(1), Ev::Tick);
        let limit = self.end_of_faults + self.cfg.drain_limit;
        while self.violation.is_none() {
            // The next instant: an event, or a client's timer.
            let ev_at = self.queue.peek().map(|Reverse((t, _, _))| *t);
            let c_at = self
                .consumer
                .as_ref()
                .and_then(|c| c.machine.next_timeout());
            let p_at = self.producer.as_ref().and_then(|p| p.next_timeout());
            let old_at = self
                .old_consumers
                .iter()
                .filter_map(|c| c.machine.next_timeout())
                .min();
            let next = [ev_at, c_at, p_at, old_at].into_iter().flatten().min();
            let Some(next) = next else { break };
            if next > limit {
                let stuck = self.stuck();
                self.violate(format!(
                    "not done {}s after the fault phase: {} of {} messages still in the nsqd; {stuck}",
                    self.cfg.drain_limit.as_secs(),
                    self.total_depth(),
                    self.report.published
                ));
                break;
            }
            self.advance(next.max(self.now));
            self.step += 1;
            if c_at == Some(next) {
                self.consumer_call(|c, now| c.timeout(now));
            } else if p_at == Some(next) {
                self.producer_call(|p, now| p.timeout(now));
            } else if old_at == Some(next) {
                let now = self.now;
                for i in 0..self.old_consumers.len() {
                    if self.old_consumers[i].machine.next_timeout() == Some(next) {
                        let m = self.old_consumers[i].machine.as_mut();
                        timed(&mut self.report.core_time, || m.timeout(now));
                        self.drain_old(i);
                    }
                }
            } else if let Some(Reverse((_, _, id))) = self.queue.pop() {
                if let Some(ev) = self.events.remove(&id) {
                    self.handle(ev);
                }
            }
            if self.final_close && self.consumer.as_ref().is_some_and(|c| c.closed) {
                break;
            }
        }
    }

    /// Moves virtual time, keeping the eligible clock.
    fn advance(&mut self, to: Instant) {
        if self.has_room() {
            let dt = to.saturating_duration_since(self.eligible_mark);
            self.eligible += self.at_rotation_speed(dt);
        }
        self.eligible_mark = to;
        self.now = to;
    }

    /// `dt` at the speed the low-RDY rotation can go (with more nsqd than max_in_flight):
    /// in proportion to its seats, the shares of max_in_flight not held by messages outside
    /// turns (the application still handling a message of a connection whose turn is over:
    /// a slow handler). With one seat of four, a round takes four times as long, whatever
    /// the consumer does; the starvation bound is judged in rotation time. Messages of the
    /// connections holding turns are the rotation's own work and slow nothing down.
    fn at_rotation_speed(&self, dt: Duration) -> Duration {
        let m = self.max_in_flight;
        let Some(c) = &self.consumer else {
            return dt;
        };
        if self.nodes.len() as u64 <= u64::from(m) || c.held.is_empty() {
            return dt;
        }
        let epoch = c.epoch;
        let outside = c
            .held
            .keys()
            .filter(|(conn, _)| {
                self.conns
                    .get(&(Who::Consumer(epoch), *conn))
                    .is_none_or(|k| k.rdy == 0)
            })
            .count();
        let seats = u64::from(m).saturating_sub(outside as u64);
        let nanos = dt.as_nanos() * u128::from(seats) / u128::from(m.max(1));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The consumer has room for more messages: starvation counts now.
    fn has_room(&self) -> bool {
        let Some(c) = &self.consumer else {
            return false;
        };
        // Judged under the configured max_in_flight only (not while a fault changed it), and
        // the adaptive limit in force below it.
        let limit = c
            .machine
            .in_flight_limit()
            .map_or(self.max_in_flight, |l| l.min(self.max_in_flight));
        !c.closing
            && self.mif_faults == 0
            && limit > 0
            && (c.held.len() as u64) < u64::from(limit)
            && c.machine.backoff_level() == 0
            && self.lookupd_up.contains(&0)
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::ConnectDone(key, epoch) => self.connect_done(key, epoch),
            Ev::ToServer(key, epoch, data) => {
                let Some(c) = self.conns.get(&key) else {
                    return;
                };
                if c.epoch != epoch {
                    return;
                }
                let (i, server) = (c.nsqd, c.server);
                if let Some(sid) = server {
                    let now = self.now;
                    self.nodes[i].model.input(now, sid, &data);
                    self.after_node(i);
                }
            }
            Ev::ServerEof(key, epoch) => {
                let Some(c) = self.conns.get(&key) else {
                    return;
                };
                if c.epoch != epoch {
                    return;
                }
                let c = self.conns.remove(&key).expect("present");
                if let Some(sid) = c.server {
                    self.nodes[c.nsqd].model.disconnect(sid);
                    self.nodes[c.nsqd].by_server.remove(&sid);
                    self.after_node(c.nsqd);
                }
            }
            Ev::ToClient(key, epoch, data) => {
                if self
                    .conns
                    .get(&key)
                    .is_none_or(|c| c.epoch != epoch || c.client_closed)
                {
                    return;
                }
                self.trace(b'i', key.1, &(data.len() as u64).to_le_bytes());
                self.client_input(key, &data);
            }
            Ev::ClientEof(key, epoch) => {
                if self.conns.get(&key).is_none_or(|c| c.epoch != epoch) {
                    return;
                }
                if self.conns.get(&key).is_some_and(|c| c.client_closed) {
                    self.conns.remove(&key);
                    return;
                }
                self.drop_conn(key);
                self.trace(b'e', key.1, &[]);
                self.client_call(key.0, |m, now| m.eof(now, key.1));
            }
            Ev::Lookupd(epoch, req, reply) => self.lookupd_reply(epoch, req, reply.as_deref()),
            Ev::Handler(epoch, d, outcome) => self.handler_done(epoch, d, outcome),
            Ev::NsqdTimer(i) => {
                if self.nodes[i].timer_at.is_some_and(|t| t <= self.now) {
                    self.nodes[i].timer_at = None;
                    let now = self.now;
                    self.nodes[i].model.tick(now);
                    self.after_node(i);
                }
            }
            Ev::Fault(k) => self.fault(k, true),
            Ev::Heal(k) => self.fault(k, false),
            Ev::Publish(n) => self.publish(n),
            Ev::ProducerPublish(n) => self.producer_publish(n),
            Ev::Refill(i) => self.refill(i),
            Ev::Tick => self.tick(),
            Ev::StartConsumer => self.start_consumer(),
        }
    }

    // ------------------------------------------------------------------ clients

    fn start_consumer(&mut self) {
        let epoch = self.report.consumers;
        self.report.consumers += 1;
        let lookupds: Vec<String> = (0..self.lookupd_up.len())
            .map(|k| format!("http://lookupd{k}.sim:4161"))
            .collect();
        let spec = super::client::ConsumerSpec {
            seed: self.cfg.seed.wrapping_add(u64::from(epoch)),
            topic: TOPIC,
            channel: CHANNEL,
            max_in_flight: self.max_in_flight,
            max_attempts: self.cfg.max_attempts,
            lookupds: &lookupds,
            adaptive: self.cfg.adaptive,
        };
        let (now, factory) = (self.now, &mut *self.factory);
        let machine = timed(&mut self.report.core_time, || factory.consumer(now, &spec));
        if let Some(old) = self.consumer.take() {
            self.old_consumers.push(old);
        }
        self.consumer = Some(ConsumerSlot {
            epoch,
            machine,
            held: HashMap::new(),
            closing: false,
            closed: false,
            rdy_sum: 0,
        });
        self.drain_consumer();
    }

    fn client_call(&mut self, who: Who, f: impl FnOnce(&mut dyn super::client::Machine, Instant)) {
        match who {
            Who::Producer => self.producer_call(|p, now| f(p, now)),
            Who::Consumer(epoch) => self.epoch_call(epoch, |c, now| f(c, now)),
        }
    }

    /// Calls consumer `epoch`, the current one or a closed one, then drains it.
    fn epoch_call(&mut self, epoch: u32, f: impl FnOnce(&mut dyn SimConsumer, Instant)) {
        if self.consumer.as_ref().is_some_and(|c| c.epoch == epoch) {
            self.consumer_call(f);
        } else if let Some(i) = self.old_consumers.iter().position(|c| c.epoch == epoch) {
            let now = self.now;
            let m = self.old_consumers[i].machine.as_mut();
            timed(&mut self.report.core_time, || f(m, now));
            self.drain_old(i);
        }
    }

    fn consumer_call(&mut self, f: impl FnOnce(&mut dyn SimConsumer, Instant)) {
        let now = self.now;
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        timed(&mut self.report.core_time, || f(c.machine.as_mut(), now));
        self.drain_consumer();
    }

    fn producer_call(&mut self, f: impl FnOnce(&mut dyn SimProducer, Instant)) {
        let now = self.now;
        let Some(p) = self.producer.as_mut() else {
            return;
        };
        timed(&mut self.report.core_time, || f(p.as_mut(), now));
        self.drive_producer();
    }

    fn client_input(&mut self, key: Key, data: &[u8]) {
        self.client_call(key.0, |m, now| m.input(now, key.1, data));
    }

    /// Drains the current consumer's actions and notes, then checks the invariants. Each
    /// drain is one timed call: handling an action or a note never calls the consumer back
    /// before the next is taken, except answers, whose notes the next round takes; so the
    /// order is the same as taking them one at a time.
    fn drain_consumer(&mut self) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        let epoch = c.epoch;
        let mut acts = std::mem::take(&mut self.act_buf);
        timed(&mut self.report.core_time, || {
            while let Some(act) = c.machine.poll_act() {
                acts.push(act);
            }
        });
        for act in acts.drain(..) {
            self.act(Who::Consumer(epoch), act);
        }
        self.act_buf = acts;
        loop {
            let Some(c) = self.consumer.as_mut() else {
                return;
            };
            let mut notes = std::mem::take(&mut self.note_buf);
            timed(&mut self.report.core_time, || {
                while let Some(note) = c.machine.poll_note() {
                    notes.push(note);
                }
            });
            let done = notes.is_empty();
            for note in notes.drain(..) {
                self.consumer_note(&note);
            }
            self.note_buf = notes;
            if done {
                break;
            }
        }
        self.check_flow();
    }

    /// Drains a consumer that has closed (only closed consumers are kept as old ones): its
    /// last actions go to the world; it may hand nothing out any more.
    fn drain_old(&mut self, i: usize) {
        let mut acts = std::mem::take(&mut self.act_buf);
        let m = &mut self.old_consumers[i].machine;
        timed(&mut self.report.core_time, || {
            while let Some(act) = m.poll_act() {
                acts.push(act);
            }
        });
        let epoch = self.old_consumers[i].epoch;
        for act in acts.drain(..) {
            self.act(Who::Consumer(epoch), act);
        }
        self.act_buf = acts;
        loop {
            let note = timed(&mut self.report.core_time, || {
                self.old_consumers[i].machine.poll_note()
            });
            let Some(note) = note else { break };
            if let ConsumerNote::Message(d) | ConsumerNote::GaveUp(d) = note {
                let epoch = self.old_consumers[i].epoch;
                self.violate(format!(
                    "consumer {epoch} handed out message {} after Closed",
                    String::from_utf8_lossy(&d.id)
                ));
            }
        }
    }

    fn conn_node(&self, who: Who, conn: ConnRef) -> Option<usize> {
        self.conns.get(&(who, conn)).map(|c| c.nsqd)
    }

    fn closed_check(&mut self, epoch: u32, leftovers: usize, held: usize) {
        self.trace(b'C', u64::from(epoch), &(leftovers as u64).to_le_bytes());
        self.trace(b'H', u64::from(epoch), &(held as u64).to_le_bytes());
        if let Some(since) = self.closing_since.take() {
            let took = self.now.saturating_duration_since(since);
            if took > CLOSE_BOUND {
                self.violate(format!(
                    "consumer {epoch} took {:.1}s to close (bound {}s)",
                    took.as_secs_f64(),
                    CLOSE_BOUND.as_secs()
                ));
            }
        }
    }

    fn consumer_note(&mut self, note: &ConsumerNote) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        let epoch = c.epoch;
        match note {
            ConsumerNote::Message(d) => {
                let d = *d;
                if c.closed {
                    self.violate(format!(
                        "consumer {epoch} handed out message {} after Closed",
                        String::from_utf8_lossy(&d.id)
                    ));
                    return;
                }
                let held = c.held.len() as u64;
                // Strict: not even messages on the wire under a RDY that a lowered
                // max_in_flight took back may reach the application beyond it.
                let bound = self.max_in_flight;
                if held >= u64::from(bound) {
                    let view = self
                        .conn_node(Who::Consumer(epoch), d.conn)
                        .map(|n| format!("nsqd{n}: {}", self.node_view(n)))
                        .unwrap_or_default();
                    self.violate(format!(
                        "the application already holds {held} messages and max_in_flight is {}, \
                         yet message {} (attempt {}) was handed out; {view}",
                        self.max_in_flight,
                        String::from_utf8_lossy(&d.id),
                        d.attempts
                    ));
                    return;
                }
                c.held.insert((d.conn, d.id), d);
                self.report.delivered += 1;
                if self.now < self.end_of_faults {
                    self.report.fault_phase_delivered += 1;
                }
                if let Some(n) = self.conn_node(Who::Consumer(epoch), d.conn) {
                    self.handed.insert((n, d.id));
                }
                self.trace(b'm', d.conn, &d.id);
                self.schedule_handler(epoch, d);
            }
            ConsumerNote::GaveUp(d) => {
                let d = *d;
                if let Some(n) = self.conn_node(Who::Consumer(epoch), d.conn) {
                    self.handed.insert((n, d.id));
                    self.finished.insert((n, d.id));
                }
                self.report.gave_up += 1;
                self.trace(b'g', d.conn, &d.id);
            }
            ConsumerNote::Closed { leftovers } => {
                let leftovers = *leftovers;
                let held = c.held.len();
                c.closed = true;
                self.closed_check(epoch, leftovers, held);
                if !self.final_close {
                    let at = self.now + Duration::from_millis(500);
                    self.push(at, Ev::StartConsumer);
                }
            }
            ConsumerNote::Other(_) => {}
        }
    }

    fn schedule_handler(&mut self, epoch: u32, d: Delivery) {
        let r = &mut self.r_app;
        let (outcome, took) = if self.panicking_handlers > 0 && r.chance(0.3) {
            (Outcome::Panic, Duration::from_micros(r.range(10, 5_000)))
        } else if self.failing_handlers > 0 && r.chance(0.5) || r.chance(0.002) {
            (Outcome::Fail, Duration::from_micros(r.range(10, 20_000)))
        } else if self.slow_handlers > 0 && r.chance(0.3) {
            // Some outlast msg_timeout: the application touches them first, or not.
            let ms = r.range(1_000, 90_000);
            if ms > 30_000 && r.chance(0.5) {
                (Outcome::Touch, Duration::from_millis(ms / 3))
            } else {
                (Outcome::Finish, Duration::from_millis(ms))
            }
        } else {
            (Outcome::Finish, Duration::from_micros(r.range(20, 20_000)))
        };
        let at = self.now + took;
        self.push(at, Ev::Handler(epoch, d, outcome));
    }

    fn handler_done(&mut self, epoch: u32, d: Delivery, outcome: Outcome) {
        let how = match outcome {
            Outcome::Finish => Answer::Finish,
            Outcome::Fail | Outcome::Panic => Answer::Requeue { backoff: true },
            Outcome::Touch => Answer::Touch,
        };
        self.trace(b'a', d.conn, &d.id);
        let who = Who::Consumer(epoch);
        let node = self.conn_node(who, d.conn);
        let is_current = self.consumer.as_ref().is_some_and(|c| c.epoch == epoch);
        let now = self.now;
        let done = |slot: &mut ConsumerSlot, t: &mut Duration| {
            if how != Answer::Touch {
                slot.held.remove(&(d.conn, d.id));
            }
            timed(t, || slot.machine.answer(now, &d, how))
        };
        let result = if is_current {
            let c = self.consumer.as_mut().expect("current");
            let r = done(c, &mut self.report.core_time);
            self.drain_consumer();
            r
        } else if let Some(i) = self.old_consumers.iter().position(|c| c.epoch == epoch) {
            let r = done(&mut self.old_consumers[i], &mut self.report.core_time);
            self.drain_old(i);
            r
        } else {
            return;
        };
        match (how, result) {
            (Answer::Finish, Ok(())) => {
                if let Some(n) = node {
                    self.finished.insert((n, d.id));
                }
            }
            (Answer::Touch, _) => {
                // The handler goes on and finishes it later (within msg_timeout again if the
                // TOUCH got through; its FIN fails otherwise, and nsqd redelivers it).
                let at = self.now + Duration::from_millis(self.r_app.range(1, 20_000));
                self.push(at, Ev::Handler(epoch, d, Outcome::Finish));
            }
            _ => {}
        }
    }

    fn drive_producer(&mut self) {
        loop {
            let Some(p) = self.producer.as_mut() else {
                return;
            };
            let act = timed(&mut self.report.core_time, || p.poll_act());
            let Some(act) = act else { break };
            self.act(Who::Producer, act);
        }
        loop {
            let Some(p) = self.producer.as_mut() else {
                return;
            };
            let r = timed(&mut self.report.core_time, || p.poll_result());
            let Some(r) = r else { break };
            let body = self.producer_bodies.remove(&r.id).unwrap_or_default();
            let there = self.accepted_bodies.contains(&body);
            self.trace(b'p', r.id, &[u8::from(r.ok), u8::from(r.maybe_published)]);
            if r.ok {
                self.report.producer_ok += 1;
                if !there {
                    self.violate(format!(
                        "publish {} of {:?} got OK but no nsqd has it",
                        r.id,
                        String::from_utf8_lossy(&body)
                    ));
                }
            } else {
                self.report.producer_failed += 1;
                if there && !r.maybe_published {
                    self.violate(format!(
                        "publish {} of {:?} failed as not published, but an nsqd has it",
                        r.id,
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
        }
    }

    fn producer_publish(&mut self, n: u64) {
        self.producer_left = self.producer_left.saturating_sub(1);
        let body = format!("p{n}").into_bytes();
        let now = self.now;
        let Some(p) = self.producer.as_mut() else {
            return;
        };
        let r = timed(&mut self.report.core_time, || p.publish(now, TOPIC, &body));
        match r {
            Ok(id) => {
                self.producer_bodies.insert(id, body);
            }
            Err(_) => self.report.producer_failed += 1,
        }
        self.drive_producer();
    }

    // ------------------------------------------------------------------ the network

    fn act(&mut self, who: Who, act: Act) {
        match act {
            Act::Connect { conn, addr } => {
                let key = (who, conn);
                self.trace(b'c', conn, addr.as_bytes());
                let Some(&i) = self.addr_index.get(&addr) else {
                    let at = self.now + Duration::from_millis(1);
                    self.next_epoch += 1;
                    let epoch = self.next_epoch;
                    // Unknown host: the connection fails.
                    self.conns.insert(key, self.new_conn(usize::MAX, epoch));
                    self.push(at, Ev::ConnectDone(key, epoch));
                    return;
                };
                self.next_epoch += 1;
                let epoch = self.next_epoch;
                let conn_state = self.new_conn(i, epoch);
                self.conns.insert(key, conn_state);
                let node = &self.nodes[i];
                let mut at = self.now + node.latency * 2;
                if let Some(s) = node.silent_until {
                    at = at.max(s);
                }
                self.push(at, Ev::ConnectDone(key, epoch));
            }
            Act::Transmit { conn, data } => {
                let key = (who, conn);
                if let Who::Consumer(epoch) = who {
                    self.scan_rdy(epoch, key, &data);
                }
                let Some(c) = self.conns.get_mut(&key) else {
                    return;
                };
                if c.nsqd == usize::MAX {
                    return;
                }
                let node = &self.nodes[c.nsqd];
                let mut at = send(&mut c.c2s, self.now, data.len(), node);
                if node.slow > 0 {
                    at += node.slow_extra;
                }
                at = at.max(c.c2s.last_arrival);
                c.c2s.last_arrival = at;
                let epoch = c.epoch;
                self.push(at, Ev::ToServer(key, epoch, data));
            }
            Act::Disconnect { conn } => {
                let key = (who, conn);
                self.trace(b'd', conn, &[]);
                self.forget_rdy(key);
                let Some(c) = self.conns.get(&key) else {
                    return;
                };
                let at = c
                    .c2s
                    .last_arrival
                    .max(self.now + self.nodes.get(c.nsqd).map_or(Duration::ZERO, |n| n.latency));
                let epoch = c.epoch;
                // The client is done with it: what the server still sends is dropped.
                if let Some(c) = self.conns.get_mut(&key) {
                    c.client_closed = true;
                }
                self.push(at, Ev::ServerEof(key, epoch));
            }
            Act::LookupdRequest { req, addr, data } => {
                let Who::Consumer(epoch) = who else { return };
                let k = addr
                    .strip_prefix("lookupd")
                    .and_then(|s| s.split('.').next())
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|k| *k < self.lookupd_up.len());
                let rtt = Duration::from_micros(self.r_net.range(200, 40_000));
                let reply = match k {
                    Some(k) if self.lookupd_up[k] == 0 => Some(self.lookupd_answer(&data)),
                    _ => None,
                };
                let at = self.now + rtt;
                self.push(at, Ev::Lookupd(epoch, req, reply));
            }
            Act::LookupdClose { req } => {
                // Its socket is closed: a reply still on its way is never read.
                if let Who::Consumer(epoch) = who {
                    self.closed_requests.insert((epoch, req));
                }
            }
        }
    }

    fn new_conn(&self, nsqd: usize, epoch: u64) -> Conn {
        let dir = Dir {
            free_at: self.now,
            last_arrival: self.now,
        };
        Conn {
            nsqd,
            epoch,
            server: None,
            c2s: dir,
            s2c: dir,
            rdy: 0,
            scan: Vec::new(),
            client_closed: false,
        }
    }

    fn connect_done(&mut self, key: Key, epoch: u64) {
        let Some(c) = self.conns.get(&key) else {
            return;
        };
        if c.epoch != epoch {
            return;
        }
        let i = c.nsqd;
        if i == usize::MAX || self.nodes[i].down > 0 {
            self.conns.remove(&key);
            self.trace(b'f', key.1, &[]);
            self.client_call(key.0, |m, now| {
                m.connect_failed(now, key.1, "connection refused");
            });
            return;
        }
        let now = self.now;
        let sid = self.nodes[i].model.connect(now);
        self.nodes[i].by_server.insert(sid, key);
        if let Some(c) = self.conns.get_mut(&key) {
            c.server = Some(sid);
        }
        self.after_node(i);
        self.trace(b'o', key.1, &[]);
        self.client_call(key.0, |m, now| m.connected(now, key.1));
    }

    /// Forgets a connection on the client's side (EOF seen, or it disconnected).
    fn drop_conn(&mut self, key: Key) {
        self.forget_rdy(key);
        self.conns.remove(&key);
    }

    fn forget_rdy(&mut self, key: Key) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let rdy = std::mem::take(&mut c.rdy);
        if let Who::Consumer(epoch) = key.0 {
            if let Some(slot) = self.consumer.as_mut().filter(|s| s.epoch == epoch) {
                slot.rdy_sum -= rdy;
            }
        }
    }

    /// Follows the RDY counts the consumer sends.
    fn scan_rdy(&mut self, epoch: u32, key: Key, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        c.scan.extend_from_slice(data);
        let mut at = 0;
        let buf = std::mem::take(&mut c.scan);
        let mut new_rdy = None;
        if c.epoch > 0 {
            loop {
                let rest = &buf[at..];
                if rest.starts_with(b"  V2") {
                    at += 4;
                    continue;
                }
                let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                    break;
                };
                let line = &rest[..nl];
                let has_body = [&b"IDENTIFY"[..], b"PUB ", b"MPUB ", b"DPUB ", b"AUTH"]
                    .iter()
                    .any(|p| line.starts_with(p));
                if has_body {
                    if rest.len() < nl + 5 {
                        break;
                    }
                    let n = u32::from_be_bytes([
                        rest[nl + 1],
                        rest[nl + 2],
                        rest[nl + 3],
                        rest[nl + 4],
                    ]) as usize;
                    if rest.len() < nl + 5 + n {
                        break;
                    }
                    at += nl + 5 + n;
                    continue;
                }
                if let Some(n) = line.strip_prefix(b"RDY ") {
                    self.report.rdy_commands += 1;
                    if self.now < self.end_of_faults {
                        self.report.fault_phase_rdy_commands += 1;
                    }
                    new_rdy = std::str::from_utf8(n)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok());
                }
                at += nl + 1;
            }
        }
        c.scan = buf[at..].to_vec();
        if let Some(n) = new_rdy {
            tracing::trace!(
                at = self.now.duration_since(self.t0).as_secs_f64(),
                nsqd = c.nsqd,
                from = c.rdy,
                to = n,
                "RDY"
            );
            let old = std::mem::replace(&mut c.rdy, n);
            if let Some(slot) = self.consumer.as_mut().filter(|s| s.epoch == epoch) {
                slot.rdy_sum = slot.rdy_sum - old + n;
            }
        }
    }

    fn check_flow(&mut self) {
        let Some(c) = &self.consumer else { return };
        if c.closing || c.closed {
            return;
        }
        let sum = c.rdy_sum;
        if sum > u64::from(self.max_in_flight) {
            self.violate(format!(
                "the RDY counts sent add up to {sum}, above max_in_flight {}",
                self.max_in_flight
            ));
        } else if c.machine.backoff_level() > 0 && sum > 1 {
            let level = c.machine.backoff_level();
            self.violate(format!(
                "backing off (level {level}) with RDY counts adding up to {sum}"
            ));
        }
    }

    /// Sends what node `i` wrote, closes what it closed, re-arms its timer, and follows
    /// starvation.
    fn after_node(&mut self, i: usize) {
        self.collect_published(i);
        let ids: Vec<ClientId> = self.nodes[i].model.clients().collect();
        for sid in ids {
            let out = self.nodes[i].model.take_output(sid);
            let closing = self.nodes[i].model.closing(sid).is_some();
            if out.is_empty() && !closing {
                continue;
            }
            let Some(&key) = self.nodes[i].by_server.get(&sid) else {
                continue;
            };
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            let epoch = c.epoch;
            let node = &self.nodes[i];
            let mut sends = Vec::new();
            if !out.is_empty() {
                let at = send(&mut c.s2c, self.now, out.len(), node).max(c.s2c.last_arrival);
                c.s2c.last_arrival = at;
                sends.push((at, Ev::ToClient(key, epoch, out)));
            }
            if closing {
                let at = c.s2c.last_arrival.max(self.now + node.latency);
                c.server = None;
                sends.push((at, Ev::ClientEof(key, epoch)));
            }
            for (at, ev) in sends {
                self.push(at, ev);
            }
            if closing {
                self.nodes[i].model.disconnect(sid);
                self.nodes[i].by_server.remove(&sid);
            }
        }
        let next = self.nodes[i].model.next_deadline();
        if next.is_some() && next != self.nodes[i].timer_at {
            self.nodes[i].timer_at = next;
            if let Some(at) = next {
                self.push(at, Ev::NsqdTimer(i));
            }
        }
        self.refill_soon(i);
        // Starvation: messages ready and a subscriber, since when?
        let waiting = self.node_waiting(i);
        let node = &mut self.nodes[i];
        match (waiting, node.waiting_since) {
            (true, None) => node.waiting_since = Some(self.eligible),
            (false, Some(_)) => node.waiting_since = None,
            _ => {}
        }
    }

    fn node_waiting(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        if node.down > 0 || node.silent_until.is_some() || node.slow > 0 || node.unlisted > 0 {
            return false;
        }
        let q = &node.model.queues;
        let ready = q
            .topics
            .get(TOPIC)
            .and_then(|t| t.channels.get(CHANNEL))
            .is_some_and(|ch| !ch.queue.is_empty() && !ch.paused);
        ready
            && q.flows.iter().any(|(sid, f)| {
                f.state == ClientState::Subscribed
                    && f.in_flight == 0
                    && node
                        .by_server
                        .get(sid)
                        .is_some_and(|k| matches!(k.0, Who::Consumer(g) if self.consumer.as_ref().is_some_and(|c| c.epoch == g)))
            })
    }

    fn lookupd_answer(&self, request: &[u8]) -> Vec<u8> {
        let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        if !(line.contains("/lookup") && line.contains(&format!("topic={TOPIC}"))) {
            let body = r#"{"message":"TOPIC_NOT_FOUND"}"#;
            return format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes();
        }
        lookup_reply(
            CHANNEL,
            self.nodes
                .iter()
                .filter(|n| n.unlisted == 0)
                .map(|n| n.addr.trim_end_matches(":4150")),
        )
    }

    fn lookupd_reply(&mut self, epoch: u32, req: ConnRef, reply: Option<&[u8]>) {
        if self.closed_requests.remove(&(epoch, req)) {
            return;
        }
        let f = |m: &mut dyn SimConsumer, now: Instant| match reply {
            Some(data) => {
                m.lookupd_input(now, req, data);
                m.lookupd_eof(now, req);
            }
            None => m.lookupd_failed(now, req, "connection refused"),
        };
        self.epoch_call(epoch, f);
    }

    // ------------------------------------------------------------------ the world's doings

    fn publish(&mut self, n: u64) {
        self.publishes_left = self.publishes_left.saturating_sub(1);
        let len = self.nodes.len() as u64;
        let mut i = self.r_pub.below(len) as usize;
        if self.nodes[i].down > 0 {
            // Its producer publishes to the next nsqd that is up.
            match (0..self.nodes.len())
                .map(|k| (i + k) % self.nodes.len())
                .find(|&k| self.nodes[k].down == 0)
            {
                Some(k) => i = k,
                None => return,
            }
        }
        let now = self.now;
        self.nodes[i]
            .model
            .publish(now, TOPIC, vec![format!("w{n}").into_bytes()]);
        self.after_node(i);
        self.collect_published(i);
    }

    /// In a busy world, during the fault phase: once nsqd `i` (up) has fewer than half of
    /// [`BUSY_DEPTH`] messages ready, a top-up is scheduled (now, as an event of its own).
    fn refill_soon(&mut self, i: usize) {
        if !self.cfg.busy || self.now >= self.end_of_faults {
            return;
        }
        let queued = self.queued(i);
        let node = &mut self.nodes[i];
        if node.refill_pending || node.down > 0 || queued >= BUSY_DEPTH / 2 {
            return;
        }
        node.refill_pending = true;
        let now = self.now;
        self.push(now, Ev::Refill(i));
    }

    /// Publishes to nsqd `i` (if it is up) what it takes to have [`BUSY_DEPTH`] messages ready.
    fn refill(&mut self, i: usize) {
        self.nodes[i].refill_pending = false;
        if self.nodes[i].down > 0 || self.now >= self.end_of_faults {
            return;
        }
        let want = BUSY_DEPTH.saturating_sub(self.queued(i));
        if want == 0 {
            return;
        }
        let bodies: Vec<Vec<u8>> = (0..want)
            .map(|k| format!("b{}", self.refills + k as u64).into_bytes())
            .collect();
        self.refills += want as u64;
        let now = self.now;
        self.nodes[i].model.publish(now, TOPIC, bodies);
        self.collect_published(i);
        self.after_node(i);
    }

    /// Messages ready on nsqd `i`'s channel (not in flight, not deferred).
    fn queued(&self, i: usize) -> usize {
        self.nodes[i]
            .model
            .queues
            .topics
            .get(TOPIC)
            .and_then(|t| t.channels.get(CHANNEL))
            .map_or(0, |ch| ch.queue.len())
    }

    fn collect_published(&mut self, i: usize) {
        for (id, body) in self.nodes[i].model.take_published() {
            self.accepted_bodies.insert(body.to_vec());
            self.accepted.insert((i, id), body);
            self.report.published += 1;
        }
    }

    /// The first nsqd still holding messages, and how its connections look from both sides.
    fn stuck(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.model.depth(TOPIC, CHANNEL) == 0 {
                continue;
            }
            let ch = &n.model.queues.topics[TOPIC].channels[CHANNEL];
            let _ = write!(
                out,
                "nsqd{i}: queued {} deferred {} in flight {}; ",
                ch.queue.len(),
                ch.deferred.len(),
                ch.in_flight.len()
            );
            for (sid, f) in &n.model.queues.flows {
                let key = n.by_server.get(sid);
                let rdy_sent = key.and_then(|k| self.conns.get(k)).map(|c| c.rdy);
                let _ = write!(
                    out,
                    "client {sid} {key:?} {:?} rdy {} in flight {} (rdy sent {rdy_sent:?}); ",
                    f.state, f.rdy, f.in_flight
                );
            }
            if out.len() > 600 {
                break;
            }
        }
        out
    }

    /// Node `i`'s consumer connections, from nsqd's side and the consumer's.
    fn node_view(&self, i: usize) -> String {
        let n = &self.nodes[i];
        let mut out = String::new();
        for (sid, f) in &n.model.queues.flows {
            let Some(key) = n.by_server.get(sid) else {
                continue;
            };
            let core = match (key.0, &self.consumer) {
                (Who::Consumer(e), Some(c)) if c.epoch == e => c.machine.describe(key.1),
                _ => "an older consumer".into(),
            };
            let _ = write!(
                out,
                "nsqd sees {:?} rdy {} in flight {}; consumer sees conn {} {core}. ",
                f.state, f.rdy, f.in_flight, key.1
            );
        }
        out
    }

    fn total_depth(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.model.depth(TOPIC, CHANNEL))
            .sum()
    }

    /// Once a virtual second: starvation, footprint, and the end of the run.
    fn tick(&mut self) {
        for i in 0..self.nodes.len() {
            self.collect_published(i);
        }
        let worst = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                n.waiting_since
                    .map(|s| (self.eligible.saturating_sub(s), i))
            })
            .max();
        if let Some((wait, i)) = worst {
            if wait > self.bound {
                let view = self.node_view(i);
                self.violate(format!(
                    "nsqd{i} with messages and a subscribed connection waited {:.1}s for a \
                     delivery while the consumer had room (bound {}s): {view}",
                    wait.as_secs_f64(),
                    self.bound.as_secs()
                ));
            }
            self.note_wait(wait);
        }
        if let Some(c) = &self.consumer {
            let fp = c.machine.footprint();
            tracing::debug!(
                at = self.at().as_secs_f64(),
                ?fp,
                held = c.held.len(),
                rdy_sum = c.rdy_sum,
                backoff = c.machine.backoff_level(),
                depth = self.total_depth(),
                "tick"
            );
            let bound = self.max_in_flight_ever as usize;
            if fp.in_flight > bound
                || fp.connections > self.nodes.len()
                || fp.known_nsqd > self.nodes.len()
            {
                self.violate(format!(
                    "consumer state out of bounds: {fp:?} with {} nsqd and max_in_flight up to {bound}",
                    self.nodes.len()
                ));
            }
        }
        if self.now >= self.end_of_faults
            && !self.final_close
            && self.publishes_left == 0
            && self.producer_left == 0
            && self.producer_bodies.is_empty()
            && self.total_depth() == 0
        {
            self.drained = true;
            self.final_close = true;
            self.end_checks();
            self.closing_since = Some(self.now);
            self.consumer_call(|c, now| c.close(now));
            if let Some(c) = self.consumer.as_mut() {
                c.closing = true;
            }
        }
        let at = self.now + Duration::from_secs(1);
        self.push(at, Ev::Tick);
    }

    fn note_wait(&mut self, wait: Duration) {
        if wait > self.report.worst_starvation {
            self.report.worst_starvation = wait;
        }
        if wait > self.bound {
            self.violate(format!(
                "an nsqd with messages and a subscribed connection waited {:.1}s for a delivery \
                 while the consumer had room (bound {}s)",
                wait.as_secs_f64(),
                self.bound.as_secs()
            ));
        }
    }

    /// At least once: every accepted message was handed out and the nsqd are empty.
    fn end_checks(&mut self) {
        let mut missing = self
            .accepted
            .keys()
            .filter(|k| !self.handed.contains(k))
            .map(|(i, id)| format!("nsqd{i}:{}", String::from_utf8_lossy(id)))
            .collect::<Vec<_>>();
        if !missing.is_empty() {
            missing.sort();
            missing.truncate(5);
            self.violate(format!("accepted messages never handed out: {missing:?}"));
        }
    }

    fn fault(&mut self, k: usize, start: bool) {
        let f = self.faults[k].clone();
        self.trace(b'F', k as u64, &[u8::from(start)]);
        let now = self.now;
        match f.kind {
            FaultKind::Reset { nsqd } => self.reset(nsqd),
            FaultKind::HalfOpen { nsqd, for_ } => {
                if start {
                    let until = now + for_;
                    let node = &mut self.nodes[nsqd];
                    node.silent_until = Some(node.silent_until.map_or(until, |u| u.max(until)));
                    // Everything in transit arrives after the silence.
                    let keys: Vec<Key> = node.by_server.values().copied().collect();
                    for key in keys {
                        if let Some(c) = self.conns.get_mut(&key) {
                            c.c2s.last_arrival = c.c2s.last_arrival.max(until);
                            c.s2c.last_arrival = c.s2c.last_arrival.max(until);
                            c.c2s.free_at = c.c2s.free_at.max(until);
                            c.s2c.free_at = c.s2c.free_at.max(until);
                        }
                    }
                    self.reschedule_transit(nsqd, until);
                    // A silent nsqd does not count as waiting (its wait so far ends here).
                    self.after_node(nsqd);
                } else if self.nodes[nsqd].silent_until.is_some_and(|u| u <= now) {
                    self.nodes[nsqd].silent_until = None;
                    self.after_node(nsqd);
                }
            }
            FaultKind::Restart { nsqd, .. } => {
                if start {
                    self.nodes[nsqd].down += 1;
                    self.reset(nsqd);
                    self.nodes[nsqd].model.restart(now);
                } else {
                    self.nodes[nsqd].down -= 1;
                }
                self.after_node(nsqd);
            }
            FaultKind::SlowAnswers { nsqd, extra, .. } => {
                let node = &mut self.nodes[nsqd];
                if start {
                    node.slow += 1;
                    node.slow_extra = node.slow_extra.max(extra);
                } else {
                    node.slow -= 1;
                    if node.slow == 0 {
                        node.slow_extra = Duration::ZERO;
                    }
                }
                self.after_node(nsqd);
            }
            FaultKind::LookupdDown { lookupd, .. } => {
                let l = &mut self.lookupd_up[lookupd];
                if start {
                    *l += 1;
                } else {
                    *l -= 1;
                }
            }
            FaultKind::Leave { nsqd, .. } => {
                let node = &mut self.nodes[nsqd];
                if start {
                    node.unlisted += 1;
                } else {
                    node.unlisted -= 1;
                }
                self.after_node(nsqd);
            }
            FaultKind::SlowHandlers { .. } => bump(&mut self.slow_handlers, start),
            FaultKind::FailingHandlers { .. } => bump(&mut self.failing_handlers, start),
            FaultKind::PanickingHandlers { .. } => bump(&mut self.panicking_handlers, start),
            FaultKind::MaxInFlight { to, .. } => {
                bump(&mut self.mif_faults, start);
                let n = if start {
                    to
                } else if self.mif_faults == 0 {
                    self.cfg.max_in_flight
                } else {
                    return;
                };
                self.max_in_flight = n;
                self.max_in_flight_ever = self.max_in_flight_ever.max(n);
                self.consumer_call(|c, now| c.set_max_in_flight(now, n));
            }
            FaultKind::Stop => {
                if let Some(c) = self.consumer.as_mut() {
                    if !c.closing {
                        c.closing = true;
                        self.closing_since = Some(now);
                        self.consumer_call(|c, now| c.close(now));
                    }
                }
            }
        }
    }

    /// Re-times what is in transit to or from node `i` so it arrives at `until` at the
    /// earliest (a half-open link holds it).
    fn reschedule_transit(&mut self, i: usize, until: Instant) {
        let keys: HashSet<Key> = self.nodes[i].by_server.values().copied().collect();
        let mut moved = Vec::new();
        let mut rest = BinaryHeap::new();
        while let Some(Reverse((at, seq, id))) = self.queue.pop() {
            let key = match self.events.get(&id) {
                Some(
                    Ev::ToServer(k, _, _)
                    | Ev::ToClient(k, _, _)
                    | Ev::ServerEof(k, _)
                    | Ev::ClientEof(k, _),
                ) => Some(*k),
                _ => None,
            };
            if key.is_some_and(|k| keys.contains(&k)) && at < until {
                moved.push((seq, id));
            } else {
                rest.push(Reverse((at, seq, id)));
            }
        }
        self.queue = rest;
        for (seq, id) in moved {
            self.queue.push(Reverse((until, seq, id)));
        }
    }

    /// Resets every connection of node `i`: the server forgets them at once, the clients see
    /// EOF after the link's latency, and what was in transit is lost.
    fn reset(&mut self, i: usize) {
        let mut ids: Vec<(ClientId, Key)> = self.nodes[i].by_server.drain().collect();
        // In the order nsqd accepted them: a map's order differs from one process to the
        // next, and the clients see the EOFs in this order (at the same instant).
        ids.sort_unstable_by_key(|(sid, _)| *sid);
        for (sid, key) in ids {
            self.nodes[i].model.disconnect(sid);
            self.next_epoch += 1;
            let epoch = self.next_epoch;
            if self.conns.get(&key).is_some_and(|c| c.client_closed) {
                self.conns.remove(&key);
                continue;
            }
            if let Some(c) = self.conns.get_mut(&key) {
                c.epoch = epoch;
                c.server = None;
            }
            let at = self.now + self.nodes[i].latency;
            self.push(at, Ev::ClientEof(key, epoch));
        }
        self.after_node(i);
    }

    fn finish_report(mut self) -> Report {
        if self.violation.is_none() && !self.drained {
            self.violate("the run ended before every message was delivered".into());
        }
        if self.violation.is_none() {
            let c = self.consumer.as_ref();
            if !c.is_some_and(|c| c.closed) {
                self.violate("the final graceful stop did not complete".into());
            }
        }
        self.report.violation = self.violation.take();
        self.report.finished = self.finished.len() as u64;
        self.report.steps = self.step;
        self.report.virtual_time = self.at();
        self.report.trace_hash = self.hash;
        self.report
    }
}

/// Runs `f` (a call into the client under test), adding its real time to `total`.
fn timed<R>(total: &mut Duration, f: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = f();
    *total += t.elapsed();
    r
}

fn bump(n: &mut u32, start: bool) {
    if start {
        *n += 1;
    } else {
        *n = n.saturating_sub(1);
    }
}

/// When `len` bytes sent now on `dir` arrive.
fn send(dir: &mut Dir, now: Instant, len: usize, node: &Node) -> Instant {
    let start = dir.free_at.max(now);
    let wire = Duration::from_nanos(
        (len as u64).saturating_mul(1_000_000_000) / node.bytes_per_sec.max(1),
    );
    dir.free_at = start + wire;
    let mut at = start + wire + node.latency;
    if let Some(s) = node.silent_until {
        at = at.max(s);
    }
    at
}

/// nsqlookupd's `200 OK` answer to `/lookup` listing `channel` and an nsqd (TCP port 4150,
/// HTTP 4151) on each of `hosts`.
pub(super) fn lookup_reply(
    channel: &str,
    hosts: impl IntoIterator<Item = impl AsRef<str>>,
) -> Vec<u8> {
    let producers: Vec<serde_json::Value> = hosts
        .into_iter()
        .map(|host| {
            let host = host.as_ref();
            serde_json::json!({
                "remote_address": format!("{host}:40000"),
                "hostname": host,
                "broadcast_address": host,
                "tcp_port": 4150,
                "http_port": 4151,
                "version": "1.3.0",
            })
        })
        .collect();
    let body = serde_json::json!({ "channels": [channel], "producers": producers }).to_string();
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}
