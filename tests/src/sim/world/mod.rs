//! The one simulated world: nsqd (the shared [`crate::model`]) behind links, nsqlookupd, the
//! client under test, the application under the consumer, and the event loop that drives
//! them in virtual time.
//!
//! Two setups use it: the faulty world ([`run`], [`SimConfig`]: many nsqd across regions,
//! publishers, faults, handlers of every kind) and the downstream world
//! ([`run_downstream`](super::run_downstream): nsqd in the consumer's region kept stocked,
//! handlers that call a service of limited capacity, client-side noise). Both run the same
//! loop, nsqd, links and invariants; what differs is set in [`Links`], [`Timers`], [`Load`],
//! the application ([`app::App`]) and when the run ends.
//!
//! By concern: this file holds the world's state, its setups and the event loop; [`net`] the
//! links, connections and nsqlookupd; [`nodes`] the nsqd and what is published to them;
//! [`clients`] the consumer and producer under test; [`app`] the application (and [`batch`]
//! the batch application); [`inject`] the faults; [`checks`] the invariants and the report.

mod app;
mod batch;
mod checks;
mod clients;
mod inject;
mod net;
mod nodes;

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::SimConfig;
use super::client::{Act, ClientFactory, ConnRef, ConsumerNote, SimProducer};
use super::downstream::{DownstreamConfig, DownstreamReport};
use super::faults::{Fault, schedule};
use super::rng::Rng;
use crate::model::NsqdOptions;

use app::{App, AppEv};
use checks::{LimitWatch, fnv_init};
pub use checks::{Report, Violation};
use clients::ConsumerSlot;
use net::{Conn, Key};
use nodes::Node;

const TOPIC: &str = "sim";
const CHANNEL: &str = "c";

/// How the links between the consumer and the nsqd behave; the latencies are drawn from the
/// seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Links {
    /// One way: 70% in the consumer's region (0.1-2 ms), 25% in another region (5-40 ms), 5%
    /// on another continent (60-120 ms); 1 to 100 MB/s. A lookupd answers after a round trip
    /// of 0.2-40 ms, drawn for each request.
    Regions,
    /// Every nsqd in the consumer's region (0.1-2 ms one way), bandwidth no limit; the lookupd
    /// answers after 1 ms.
    OneRegion,
}

/// When nsqd runs its timers (messages timing out, deferred messages, heartbeats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timers {
    /// At each deadline: an event per nsqd.
    Deadlines,
    /// At a scan every period, as nsqd's own queue scan does: with thousands of messages in
    /// flight, finding the next deadline after every step would cost more than the run.
    Scan(Duration),
}

/// What is published to the nsqd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// The faulty world's: [`SimConfig::messages`] spread over the fault phase, the
    /// producer under test's, and a busy world's top-ups. Every message is followed (at
    /// least once) and the run ends once all of them were delivered and the consumer closed.
    Published,
    /// Every nsqd topped up at each scan of [`Timers::Scan`]: under this many messages, to
    /// twice as many. The run ends at a fixed time, with the nsqd still stocked.
    Stocked(usize),
}

/// An event, at its instant.
#[derive(Debug)]
enum Ev {
    ConnectDone(Key, u64),
    ToServer(Key, u64, Vec<u8>),
    ServerEof(Key, u64),
    ToClient(Key, u64, Vec<u8>),
    ClientEof(Key, u64),
    Lookupd(u32, ConnRef, Option<Vec<u8>>),
    /// Something of the application (see [`app`]).
    App(AppEv),
    NsqdTimer(usize),
    /// nsqd's timer scan ([`Timers::Scan`]), and a stocked world's top-ups.
    Scan,
    Fault(usize),
    Heal(usize),
    Publish(u64),
    ProducerPublish(u64),
    /// Tops nsqd `i` up in a busy world ([`SimConfig::busy`]).
    Refill(usize),
    /// The checks of every virtual second.
    Tick,
    StartConsumer,
}

/// The queue of events, earliest first; events of one instant in the order they were pushed.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Queue {
    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        let seq = self.seq;
        self.heap.push(Reverse(Entry { at, seq, ev }));
    }

    fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    fn pop(&mut self) -> Option<Ev> {
        self.heap.pop().map(|Reverse(e)| e.ev)
    }

    /// Delays to `until` the events before it that `hold` picks, keeping their order.
    fn hold_until(&mut self, until: Instant, hold: impl Fn(&Ev) -> bool) {
        let entries = std::mem::take(&mut self.heap).into_vec();
        self.heap = entries
            .into_iter()
            .map(|Reverse(mut e)| {
                if e.at < until && hold(&e.ev) {
                    e.at = until;
                }
                Reverse(e)
            })
            .collect();
    }
}

struct World<'f> {
    cfg: SimConfig,
    links: Links,
    timers: Timers,
    load: Load,
    /// The run ends at this instant (`None`: once drained, see [`Load::Published`]).
    end: Option<Instant>,
    faults: Vec<Fault>,
    factory: &'f mut dyn ClientFactory,
    t0: Instant,
    now: Instant,
    step: u64,
    queue: Queue,
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
    /// The application under the consumer.
    app: App,
    /// Time in the client under test, and whether the trace is hashed: only where the run
    /// reports them ([`Load::Published`]).
    core: CoreClock,
    /// The consumer's in-flight limit as it reports it, and its trace.
    limit: LimitWatch,

    /// When the current consumer was asked to close.
    closing_since: Option<Instant>,
    /// The starvation bound checked ([`SimConfig::effective_starvation_bound`] of the
    /// world's links).
    bound: Duration,
    /// Lookupd exchanges the consumer closed before their reply arrived.
    closed_requests: HashSet<(u32, ConnRef)>,
    mif_faults: u32,
    r_net: Rng,
    r_pub: Rng,
    /// Messages the nsqd accepted: (nsqd, id) -> body ([`Load::Published`] only).
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
    /// Messages a busy world's top-ups published, or a stocked world's.
    refills: u64,
    end_of_faults: Instant,
    drained: bool,
    final_close: bool,
    /// Reused buffers for a consumer's actions and notes, taken in one timed call each (a
    /// clock read per call would weigh as much as the calls themselves).
    act_buf: Vec<Act>,
    note_buf: Vec<ConsumerNote>,
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
    let opts = NsqdOptions {
        msg_timeout: config.msg_timeout,
        ..NsqdOptions::default()
    };
    let t0 = Instant::now();
    let app = match &config.batch {
        Some(b) => App::batches(b, config.seed, t0, config.nsqd),
        None => App::handlers(config.seed),
    };
    let mut world = World::new(
        config.clone(),
        faults.to_vec(),
        (Links::Regions, Timers::Deadlines, Load::Published, opts),
        (t0, app),
        factory,
    );
    world.run_caught();
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

/// Runs one downstream world: the consumer against nsqd in its region (0.1-2 ms one way)
/// that are kept stocked (checked every 10 ms), with handlers that call `cfg`'s service.
pub(super) fn run_downstream(
    cfg: &DownstreamConfig,
    factory: &mut dyn ClientFactory,
) -> DownstreamReport {
    let nsqd = cfg.nsqd.max(1);
    let sim = SimConfig {
        lookupds: 1,
        max_attempts: 0,
        messages: 0,
        producer_messages: 0,
        producer_nsqd: 0,
        faults: 0,
        fault_phase: Duration::ZERO,
        drain_limit: cfg.duration,
        msg_timeout: NsqdOptions::default().msg_timeout,
        adaptive: cfg.adaptive,
        ..SimConfig::new(cfg.seed, nsqd, cfg.max_in_flight)
    };
    // The adaptive limit's ceiling may be above nsqd's default --max-rdy-count (2,500).
    let opts = NsqdOptions {
        max_rdy_count: 1_000_000,
        ..NsqdOptions::default()
    };
    // Enough messages for 50 ms at the most the service can take, and the whole limit.
    let peak = cfg
        .changes
        .iter()
        .map(|c| c.1)
        .chain([cfg.capacity])
        .max()
        .unwrap_or(1);
    let per_sec = f64::from(peak) / cfg.service.as_secs_f64().max(1e-6);
    let stock = (per_sec * 0.05) as usize + 2 * cfg.max_in_flight as usize + 100;
    let stock = stock.div_ceil(nsqd);
    let setup = (
        Links::OneRegion,
        Timers::Scan(Duration::from_millis(10)),
        Load::Stocked(stock),
        opts,
    );
    let t0 = Instant::now();
    let app = App::service(cfg, t0);
    let mut world = World::new(sim, Vec::new(), setup, (t0, app), factory);
    world.end = Some(world.t0 + cfg.duration);
    world.run_caught();
    world.finish_downstream()
}

impl<'f> World<'f> {
    fn new(
        cfg: SimConfig,
        faults: Vec<Fault>,
        (links, timers, load, opts): (Links, Timers, Load, NsqdOptions),
        (t0, app): (Instant, App),
        factory: &'f mut dyn ClientFactory,
    ) -> Self {
        let mut r_net = Rng::new(cfg.seed, links.stream());
        let nodes = nodes::build(&cfg, links, &opts, &mut r_net, t0);
        let addr_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.addr.clone(), i))
            .collect();
        let end_of_faults = t0 + cfg.fault_phase;
        let round = nodes::probe_round(&nodes, &cfg, |h| factory.idle_wait(h));
        let bound = cfg.effective_starvation_bound(factory.low_rdy_max_wait(), round);
        let report = Report {
            starvation_bound: bound,
            seed: cfg.seed,
            nsqd: cfg.nsqd,
            faults: faults.clone(),
            ..Report::default()
        };
        let floor = cfg.adaptive.unwrap_or(0).min(cfg.max_in_flight);
        Self {
            links,
            timers,
            load,
            end: None,
            max_in_flight: cfg.max_in_flight,
            max_in_flight_ever: cfg.max_in_flight,
            app,
            core: CoreClock {
                on: load == Load::Published,
                total: Duration::ZERO,
            },
            limit: LimitWatch::new(floor),
            closing_since: None,
            bound,
            closed_requests: HashSet::new(),
            publishes_left: cfg.messages as u64,
            producer_left: cfg.producer_messages as u64,
            refills: 0,
            lookupd_up: vec![0; cfg.lookupds.max(1)],
            r_pub: Rng::new(cfg.seed, 4),
            cfg,
            faults,
            factory,
            t0,
            now: t0,
            step: 0,
            queue: Queue::default(),
            nodes,
            addr_index,
            conns: HashMap::new(),
            next_epoch: 0,
            consumer: None,
            old_consumers: Vec::new(),
            producer: None,
            producer_bodies: HashMap::new(),
            mif_faults: 0,
            r_net,
            accepted: HashMap::new(),
            accepted_bodies: HashSet::new(),
            handed: HashSet::new(),
            finished: HashSet::new(),
            eligible: Duration::ZERO,
            eligible_mark: t0,
            report,
            hash: fnv_init(),
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

    fn push(&mut self, at: Instant, ev: Ev) {
        self.queue.push(at.max(self.now), ev);
    }

    /// Runs the world; a panic (in the client under test or the world) is a violation.
    fn run_caught(&mut self) {
        let result = catch_unwind(AssertUnwindSafe(|| self.run()));
        if let Err(p) = result {
            let text = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".into());
            self.violate(format!("panic: {text}"));
        }
    }

    // ------------------------------------------------------------------ the loop

    fn run(&mut self) {
        match self.load {
            Load::Published => self.start_published(),
            Load::Stocked(_) => self.start_stocked(),
        }
        let limit = self.end_of_faults + self.cfg.drain_limit;
        while self.violation.is_none() {
            // The next instant: an event, or a client's timer.
            let ev_at = self.queue.next_at();
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
            if self.end.is_some_and(|end| next > end) {
                break;
            }
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
                self.old_timeouts(next);
            } else if let Some(ev) = self.queue.pop() {
                self.handle(ev);
            }
            if self.final_close && self.consumer.as_ref().is_some_and(|c| c.closed) {
                break;
            }
        }
    }

    /// The faulty world's start: the consumer, the producer under test, the faults, the
    /// publications over the fault phase, a busy world's first top-ups, the checks.
    fn start_published(&mut self) {
        self.start_consumer();
        self.start_producer();
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
    }

    /// A stocked world's start: the nsqd stocked, the application's schedule (capacity
    /// changes), nsqd's scans, then the consumer; the checks every second.
    fn start_stocked(&mut self) {
        for i in 0..self.nodes.len() {
            self.top_up(i);
        }
        self.start_app();
        self.push(self.t0, Ev::Scan);
        self.start_consumer();
        self.push(self.t0 + Duration::from_secs(1), Ev::Tick);
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

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::ConnectDone(key, epoch) => self.connect_done(key, epoch),
            Ev::ToServer(key, epoch, data) => self.arrive_at_server(key, epoch, &data),
            Ev::ServerEof(key, epoch) => self.server_eof(key, epoch),
            Ev::ToClient(key, epoch, data) => self.arrive_at_client(key, epoch, &data),
            Ev::ClientEof(key, epoch) => self.client_eof(key, epoch),
            Ev::Lookupd(epoch, req, reply) => self.lookupd_reply(epoch, req, reply.as_deref()),
            Ev::App(ev) => self.app_event(ev),
            Ev::NsqdTimer(i) => {
                if self.nodes[i].timer_at.is_some_and(|t| t <= self.now) {
                    self.nodes[i].timer_at = None;
                    let now = self.now;
                    let before = self.live_timeouts(i);
                    self.nodes[i].model.tick(now);
                    let live = self.live_timeouts(i).saturating_sub(before);
                    self.after_node(i);
                    self.check_timeouts(i, live);
                }
            }
            Ev::Scan => self.scan(),
            Ev::Fault(k) => self.fault(k, true),
            Ev::Heal(k) => self.fault(k, false),
            Ev::Publish(n) => self.publish(n),
            Ev::ProducerPublish(n) => self.producer_publish(n),
            Ev::Refill(i) => self.refill(i),
            Ev::Tick => self.tick(),
            Ev::StartConsumer => self.start_consumer(),
        }
    }
}

/// Real time spent in the client under test, where the run reports it
/// ([`Report::core_time`]): two clock reads a call weigh a sixth of a downstream run, whose
/// report has no use for them.
struct CoreClock {
    on: bool,
    total: Duration,
}

/// Runs `f` (a call into the client under test), adding its real time to `clock`'s.
fn timed<R>(clock: &mut CoreClock, f: impl FnOnce() -> R) -> R {
    if !clock.on {
        return f();
    }
    let t = Instant::now();
    let r = f();
    clock.total += t.elapsed();
    r
}
