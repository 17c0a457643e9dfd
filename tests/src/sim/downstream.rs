//! A modelled downstream: the consumer under test against nsqd that always have messages,
//! with handlers that call a service of limited capacity, in virtual time.
//!
//! The service ([`DownstreamConfig`]) serves `capacity` operations at once, each for the
//! service time; above that, operations wait in a FIFO queue. With `collapse`, an operation
//! that starts while others wait takes longer: `service x (1 + collapse x waiting /
//! capacity)` (lock contention, thrashing). The capacity can change at given times.
//!
//! Each handler is one operation: the message is handed out, waits for the service, is served,
//! and is finished. The world keeps every nsqd stocked, so the consumer's limit (static, or
//! adaptive) and the service decide the throughput. A run reports the throughput and the
//! handling latencies (hand-out to answer) of a measurement window, and the trace of the
//! consumer's in-flight limit; it checks after every step that no message is handed out while
//! the application holds the limit in force or more (for a second after the limit went down,
//! the limit before: messages nsqd wrote under the higher RDY), and that the limit stays
//! between its floor and `max_in_flight`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::client::{Act, Answer, ClientFactory, ConnRef, ConsumerNote, ConsumerSpec, Delivery};
use super::noise::{ClientNoise, Noise, NoiseKind};
use super::rng::Rng;
use super::world::lookup_reply;
use crate::model::{ClientId, Nsqd, NsqdOptions};

const TOPIC: &str = "sim";
const CHANNEL: &str = "c";

/// How long after the limit went down the consumer may still hand out messages nsqd wrote
/// under the higher RDY, up to the limit before (nsq-proto's consumer: 1 s).
const GRACE: Duration = Duration::from_secs(1);

/// One downstream run.
#[derive(Clone, Debug)]
pub struct DownstreamConfig {
    /// Link latencies and the consumer's seed.
    pub seed: u64,
    /// nsqd (each one way 0.1-2 ms from the consumer, in its region).
    pub nsqd: usize,
    /// Operations the service runs at once.
    pub capacity: u32,
    /// One operation's service time.
    pub service: Duration,
    /// Slow-down per waiting operation, relative to the capacity (0: none).
    pub collapse: f64,
    /// Capacity changes: at this time since the start, the capacity becomes this.
    pub changes: Vec<(Duration, u32)>,
    /// The static limit, or the adaptive limit's ceiling.
    pub max_in_flight: u32,
    /// `Some(floor)`: the adaptive mode.
    pub adaptive: Option<u32>,
    /// How long the run lasts.
    pub duration: Duration,
    /// Throughput and latencies are measured from here to the end (or the first change).
    pub measure_from: Duration,
    /// ... until here (`None`: the end).
    pub measure_until: Option<Duration>,
    /// Client-side delay the downstream does not cause (see [`Noise`]).
    pub noise: Noise,
}

/// What a downstream run measured.
#[derive(Clone, Debug, Default)]
pub struct DownstreamReport {
    /// Messages finished in the measurement window, per second.
    pub throughput: f64,
    /// Handling latency percentiles of the messages handed out in the window.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// How many latencies the percentiles are of.
    pub samples: usize,
    /// The in-flight limit over time: `(since the start, limit)` at each change.
    pub limits: Vec<(Duration, u32)>,
    /// Messages finished in the whole run.
    pub finished: u64,
    /// The first broken invariant.
    pub violation: Option<String>,
}

impl DownstreamReport {
    /// The limit in force at `at`.
    pub fn limit_at(&self, at: Duration) -> u32 {
        self.limits
            .iter()
            .take_while(|(t, _)| *t <= at)
            .last()
            .map_or(0, |(_, l)| *l)
    }

    /// The first time in `from..until` after which the limit stays within `lo..=hi` until
    /// `until` (`None`: it does not settle there).
    pub fn settled(&self, from: Duration, until: Duration, lo: f64, hi: f64) -> Option<Duration> {
        let inside = |l: u32| f64::from(l) >= lo && f64::from(l) <= hi;
        let mut since = inside(self.limit_at(from)).then_some(from);
        for &(t, l) in &self.limits {
            if t <= from || t > until {
                continue;
            }
            match (inside(l), since) {
                (true, None) => since = Some(t),
                (false, Some(_)) => since = None,
                _ => {}
            }
        }
        since.map(|s| s.saturating_sub(from))
    }
}

#[derive(Debug)]
enum Ev {
    ConnectDone(usize),
    ToServer(usize, Vec<u8>),
    ToClient(usize, Vec<u8>),
    Lookupd(ConnRef, Vec<u8>),
    OpDone(Delivery),
    /// A handler's CPU part is done (noise): its operation waits for the service.
    CpuDone(Delivery),
    /// A handler answers, late (noise).
    Answer(Delivery),
    /// A stall is over: the handlers waiting for the service may start their operations.
    Wake,
    Tick,
    Capacity(u32),
}

struct Node {
    model: Nsqd,
    latency: Duration,
}

struct Conn {
    node: usize,
    server: ClientId,
    /// The client's handle.
    handle: ConnRef,
    c2s_last: Instant,
    s2c_last: Instant,
}

/// Runs one downstream world.
pub fn run_downstream(cfg: &DownstreamConfig, factory: &mut dyn ClientFactory) -> DownstreamReport {
    let mut w = World::new(cfg, factory);
    w.run();
    w.finish()
}

struct World<'f> {
    cfg: DownstreamConfig,
    t0: Instant,
    now: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    events: HashMap<u64, Ev>,
    nodes: Vec<Node>,
    conns: Vec<Conn>,
    by_handle: HashMap<ConnRef, usize>,
    consumer: Box<dyn super::client::SimConsumer>,
    _factory: std::marker::PhantomData<&'f ()>,
    /// The service: capacity, operations running, operations waiting (with their hand-out).
    capacity: u32,
    running: u32,
    waiting: VecDeque<(Delivery, Instant)>,
    /// Held messages' hand-out instants, by (connection, id).
    held: HashMap<(ConnRef, [u8; 16]), Instant>,
    limit: u32,
    /// After the limit went down: the limit before, until then.
    grace: Option<(u32, Instant)>,
    floor: u32,
    stock: usize,
    published: u64,
    measure: (Instant, Instant),
    latencies: Vec<u32>,
    finished_in_window: u64,
    report: DownstreamReport,
    r_app: Rng,
    noise: ClientNoise,
    /// A [`Ev::Wake`] is queued for then.
    wake_at: Option<Instant>,
    notes: Vec<ConsumerNote>,
    acts: Vec<Act>,
}

impl<'f> World<'f> {
    fn new(cfg: &DownstreamConfig, factory: &'f mut dyn ClientFactory) -> Self {
        let t0 = Instant::now();
        let mut r_net = Rng::new(cfg.seed, 12);
        let opts = NsqdOptions {
            max_rdy_count: 1_000_000,
            ..NsqdOptions::default()
        };
        let unix0: i64 = 1_767_225_600_000_000_000;
        let nodes = (0..cfg.nsqd.max(1))
            .map(|i| {
                let mut model = Nsqd::new(opts.clone(), (i as u64) << 40, t0, unix0);
                model.create_channel(t0, TOPIC, CHANNEL);
                Node {
                    model,
                    latency: Duration::from_micros(r_net.range(100, 2_000)),
                }
            })
            .collect();
        let lookupds = vec!["http://lookupd0.sim:4161".to_owned()];
        let spec = ConsumerSpec {
            seed: cfg.seed,
            topic: TOPIC,
            channel: CHANNEL,
            max_in_flight: cfg.max_in_flight,
            max_attempts: 0,
            lookupds: &lookupds,
            adaptive: cfg.adaptive,
        };
        let consumer = factory.consumer(t0, &spec);
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
        let stock = stock.div_ceil(cfg.nsqd.max(1));
        let end = t0 + cfg.duration;
        let measure = (
            t0 + cfg.measure_from,
            cfg.measure_until.map_or(end, |u| t0 + u),
        );
        World {
            cfg: cfg.clone(),
            t0,
            now: t0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            nodes,
            conns: Vec::new(),
            by_handle: HashMap::new(),
            consumer,
            _factory: std::marker::PhantomData,
            capacity: cfg.capacity,
            running: 0,
            waiting: VecDeque::new(),
            held: HashMap::new(),
            limit: 0,
            grace: None,
            floor: cfg.adaptive.unwrap_or(0).min(cfg.max_in_flight),
            stock,
            published: 0,
            measure,
            latencies: Vec::new(),
            finished_in_window: 0,
            report: DownstreamReport::default(),
            r_app: Rng::new(cfg.seed, 13),
            noise: ClientNoise::new(&cfg.noise, cfg.seed, t0),
            wake_at: None,
            notes: Vec::new(),
            acts: Vec::new(),
        }
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.events.insert(self.seq, ev);
        self.queue.push(Reverse((at, self.seq)));
    }

    fn run(&mut self) {
        for i in 0..self.nodes.len() {
            self.refill(i);
        }
        for (at, c) in self.cfg.changes.clone() {
            self.push(self.t0 + at, Ev::Capacity(c));
        }
        self.push(self.t0, Ev::Tick);
        self.drain();
        let end = self.t0 + self.cfg.duration;
        while self.report.violation.is_none() {
            let ev_at = self.queue.peek().map(|Reverse((t, _))| *t);
            let c_at = self.consumer.next_timeout();
            let Some(next) = [ev_at, c_at].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = next.max(self.now);
            if c_at == Some(next) {
                let now = self.now;
                self.consumer.timeout(now);
            } else if let Some(Reverse((_, seq))) = self.queue.pop() {
                if let Some(ev) = self.events.remove(&seq) {
                    self.handle(ev);
                }
            }
            self.drain();
        }
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::ConnectDone(i) => {
                let h = self.conns[i].handle;
                self.consumer.connected(now, h);
            }
            Ev::ToServer(i, data) => {
                let (node, server) = (self.conns[i].node, self.conns[i].server);
                self.nodes[node].model.input(now, server, &data);
                self.after_node(node);
            }
            Ev::ToClient(i, data) => {
                let h = self.conns[i].handle;
                self.consumer.input(now, h, &data);
            }
            Ev::Lookupd(req, reply) => {
                self.consumer.lookupd_input(now, req, &reply);
                self.consumer.lookupd_eof(now, req);
            }
            Ev::OpDone(d) => {
                self.running -= 1;
                let at = self.noise.answer_at(now);
                if at > now {
                    self.push(at, Ev::Answer(d));
                } else {
                    self.answer(d);
                }
                self.start_ops();
            }
            Ev::CpuDone(d) => {
                self.waiting.push_back((d, now));
                self.start_ops();
            }
            Ev::Answer(d) => self.answer(d),
            Ev::Wake => self.start_ops(),
            Ev::Tick => {
                for i in 0..self.nodes.len() {
                    self.nodes[i].model.tick(now);
                    self.refill(i);
                    self.after_node(i);
                }
                self.push(now + Duration::from_millis(10), Ev::Tick);
            }
            Ev::Capacity(c) => {
                self.capacity = c;
                self.start_ops();
            }
        }
    }

    /// Keeps nsqd `i` stocked.
    fn refill(&mut self, i: usize) {
        let depth = self.nodes[i].model.depth(TOPIC, CHANNEL);
        if depth < self.stock {
            let n = self.stock * 2 - depth;
            let bodies = (0..n).map(|k| format!("d{}", self.published + k as u64).into_bytes());
            let now = self.now;
            self.nodes[i].model.publish(now, TOPIC, bodies.collect());
            self.published += n as u64;
            let _ = self.nodes[i].model.take_published();
        }
    }

    /// Sends what nsqd `i` has written.
    fn after_node(&mut self, i: usize) {
        let pending: Vec<ClientId> = self.nodes[i].model.pending_output().collect();
        for server in pending {
            let data = self.nodes[i].model.take_output(server);
            let Some(k) = self
                .conns
                .iter()
                .position(|c| c.node == i && c.server == server)
            else {
                continue;
            };
            let at = (self.now + self.nodes[i].latency).max(self.conns[k].s2c_last);
            // A stalled client reads nothing until the stall ends.
            let at = self.noise.awake(at);
            self.conns[k].s2c_last = at;
            self.push(at, Ev::ToClient(k, data));
        }
    }

    /// Drains the consumer's actions and notes.
    fn drain(&mut self) {
        loop {
            let mut any = false;
            while let Some(a) = self.consumer.poll_act() {
                self.acts.push(a);
            }
            for a in std::mem::take(&mut self.acts) {
                any = true;
                self.act(a);
            }
            while let Some(n) = self.consumer.poll_note() {
                self.notes.push(n);
            }
            for n in std::mem::take(&mut self.notes) {
                any = true;
                self.note(&n);
            }
            if !any {
                break;
            }
        }
        self.check_limit();
    }

    fn check_limit(&mut self) {
        let Some(limit) = self.consumer.in_flight_limit() else {
            return;
        };
        if limit != self.limit || self.report.limits.is_empty() {
            if limit < self.limit {
                let high = self.grace.filter(|g| self.now < g.1).map_or(0, |g| g.0);
                self.grace = Some((self.limit.max(high), self.now + GRACE));
            }
            self.limit = limit;
            let at = self.now - self.t0;
            self.report.limits.push((at, limit));
            if self.cfg.max_in_flight > 0
                && (limit > self.cfg.max_in_flight || limit < self.floor.max(1))
            {
                self.report.violation = Some(format!(
                    "at {at:?}: the limit {limit} left {}..={}",
                    self.floor.max(1),
                    self.cfg.max_in_flight
                ));
            }
        }
    }

    fn act(&mut self, a: Act) {
        match a {
            Act::Connect { conn, addr } => {
                let Some(node) = addr
                    .strip_prefix("nsqd")
                    .and_then(|s| s.split('.').next())
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|&n| n < self.nodes.len())
                else {
                    let now = self.now;
                    self.consumer.connect_failed(now, conn, "unknown host");
                    return;
                };
                let now = self.now;
                let server = self.nodes[node].model.connect(now);
                self.conns.push(Conn {
                    node,
                    server,
                    handle: conn,
                    c2s_last: now,
                    s2c_last: now,
                });
                let k = self.conns.len() - 1;
                self.by_handle.insert(conn, k);
                let at = now + self.nodes[node].latency * 2;
                self.push(at, Ev::ConnectDone(k));
            }
            Act::Transmit { conn, data } => {
                let Some(&k) = self.by_handle.get(&conn) else {
                    return;
                };
                let lat = self.nodes[self.conns[k].node].latency;
                let at = (self.now + lat).max(self.conns[k].c2s_last);
                self.conns[k].c2s_last = at;
                self.push(at, Ev::ToServer(k, data));
            }
            Act::Disconnect { conn } => {
                if let Some(&k) = self.by_handle.get(&conn) {
                    let (node, server) = (self.conns[k].node, self.conns[k].server);
                    self.nodes[node].model.disconnect(server);
                }
            }
            Act::LookupdRequest { req, .. } => {
                let reply = self.lookupd_answer();
                let at = self.now + Duration::from_millis(1);
                self.push(at, Ev::Lookupd(req, reply));
            }
            Act::LookupdClose { .. } => {}
        }
    }

    fn lookupd_answer(&self) -> Vec<u8> {
        lookup_reply(
            CHANNEL,
            (0..self.nodes.len()).map(|i| format!("nsqd{i}.sim")),
        )
    }

    fn note(&mut self, n: &ConsumerNote) {
        let ConsumerNote::Message(d) = *n else {
            return;
        };
        let held = self.held.len() as u64;
        // The limit as the consumer had it when it handed the message out, or for a second
        // after it went down, the limit before (messages nsqd wrote under the higher RDY).
        if let Some(limit) = self.consumer.in_flight_limit() {
            let grace = self.grace.filter(|g| self.now < g.1).map_or(0, |g| g.0);
            let bound = u64::from(limit.max(self.limit).max(grace));
            if held >= bound {
                self.report.violation = Some(format!(
                    "at {:?}: a message was handed out while the application held {held} (limit {limit})",
                    self.now - self.t0
                ));
            }
        }
        self.held.insert((d.conn, d.id), self.now);
        if let Some(at) = self.noise.cpu_done(self.now) {
            self.push(at, Ev::CpuDone(d));
            return;
        }
        self.waiting.push_back((d, self.now));
        self.start_ops();
    }

    /// Starts waiting operations while the service has room.
    fn start_ops(&mut self) {
        // A stalled client issues no call (its handlers do not run): they start at the end.
        let awake = self.noise.awake(self.now);
        if awake > self.now {
            if self.wake_at != Some(awake) && !self.waiting.is_empty() {
                self.wake_at = Some(awake);
                self.push(awake, Ev::Wake);
            }
            return;
        }
        while self.running < self.capacity {
            let Some((d, _)) = self.waiting.pop_front() else {
                return;
            };
            let excess = self.waiting.len() as f64;
            let slow = 1.0 + self.cfg.collapse * excess / f64::from(self.capacity.max(1));
            // Service times vary by +-5% around the mean.
            let jitter = 0.95 + 0.1 * (self.r_app.below(1_000) as f64 / 1_000.0);
            let took = self.cfg.service.mul_f64(slow * jitter);
            self.running += 1;
            let at = self.now + took;
            self.push(at, Ev::OpDone(d));
        }
    }

    fn answer(&mut self, d: Delivery) {
        let now = self.now;
        let Some(handed) = self.held.remove(&(d.conn, d.id)) else {
            return;
        };
        if let Err(e) = self.consumer.answer(now, &d, Answer::Finish) {
            // Only possible if nsqd timed it out: a bug in a world that never does.
            self.report.violation = Some(format!("a FIN was refused: {e}"));
            return;
        }
        self.report.finished += 1;
        if now >= self.measure.0 && now < self.measure.1 {
            self.finished_in_window += 1;
        }
        if handed >= self.measure.0 && now < self.measure.1 {
            let us = (now - handed).as_micros();
            self.latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
        }
    }

    fn finish(mut self) -> DownstreamReport {
        let window = self.measure.1.saturating_duration_since(self.measure.0);
        self.report.throughput = self.finished_in_window as f64 / window.as_secs_f64().max(1e-9);
        self.report.samples = self.latencies.len();
        if !self.latencies.is_empty() {
            self.latencies.sort_unstable();
            let at = |q: f64| {
                let i = ((self.latencies.len() as f64 * q).ceil() as usize)
                    .clamp(1, self.latencies.len())
                    - 1;
                Duration::from_micros(u64::from(self.latencies[i]))
            };
            self.report.p50 = at(0.5);
            self.report.p99 = at(0.99);
        }
        self.report
    }
}

/// One world of the `--downstream` evaluation: a service and where it goes.
#[derive(Clone, Copy, Debug)]
pub struct DownstreamWorld {
    /// The service's capacity.
    pub capacity: u32,
    /// Its service time.
    pub service: Duration,
}

/// What the evaluation of one world and seed found (see [`evaluate_downstream`]).
#[derive(Clone, Debug, Default)]
pub struct DownstreamVerdict {
    /// The best static max_in_flight of the sweep, and its throughput (messages/s).
    pub best: u32,
    /// Its throughput.
    pub best_throughput: f64,
    /// From the start, until the adaptive limit stayed within 25% of `best` (`None`: never).
    pub converge: Option<Duration>,
    /// The bound it had: 10 s or 20 service times.
    pub converge_bound: Duration,
    /// The limit the adaptive consumer held at the end of the measurement.
    pub limit: u32,
    /// Its throughput over the best static one's.
    pub throughput_vs_best: f64,
    /// Its p50 and p99 handling latency over the uncongested latency (the service time).
    pub p50_vs_uncongested: f64,
    /// p99.
    pub p99_vs_uncongested: f64,
    /// A static setting 4x the best: its p99 over the uncongested latency.
    pub static4x_p99_vs_uncongested: f64,
    /// After the capacity halved, then doubled back: the time until the limit was within
    /// 25% of that capacity's best static setting again (`None`: never, or no change for a
    /// capacity of 1).
    pub reconverge: Vec<Option<Duration>>,
    /// With collapse: the adaptive consumer's and the static 4x setting's throughput over the
    /// best static one's.
    pub collapse_vs_best: f64,
    /// Static 4x with collapse.
    pub static4x_collapse_vs_best: f64,
    /// Violations of the invariants in any of the runs.
    pub violations: Vec<String>,
    /// The adaptive run's limit over time (see [`DownstreamReport::limits`]), and the times
    /// the capacity changed.
    pub limits: Vec<(Duration, u32)>,
    /// When the capacity halved and doubled back.
    pub changes: Vec<Duration>,
    /// Virtual seconds simulated, in every run together.
    pub virtual_s: f64,
}

/// The best static setting of a sweep: the smallest within 1% of the most throughput.
#[derive(Clone, Copy, Debug, Default)]
struct Best {
    limit: u32,
    throughput: f64,
}

/// The sweep of static settings around the capacity (around what the client's noise lets
/// through, with noise: see [`sweep_center`]), and the best of them.
fn sweep(
    base: &DownstreamConfig,
    capacity: u32,
    collapse: f64,
    factory: &mut dyn ClientFactory,
    verdict: &mut DownstreamVerdict,
) -> Best {
    let factors = [
        0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0,
    ];
    let center = sweep_center(capacity, base.service, &base.noise);
    let mut limits: Vec<u32> = factors
        .iter()
        .map(|f| ((center * f).round() as u32).max(1))
        .collect();
    limits.dedup();
    let mut results = Vec::new();
    for l in limits {
        let cfg = DownstreamConfig {
            capacity,
            collapse,
            changes: Vec::new(),
            max_in_flight: l,
            adaptive: None,
            ..base.clone()
        };
        let r = run_downstream(&cfg, factory);
        verdict.virtual_s += cfg.duration.as_secs_f64();
        if let Some(v) = r.violation {
            verdict.violations.push(format!("static {l}: {v}"));
        }
        results.push(Best {
            limit: l,
            throughput: r.throughput,
        });
    }
    let most = results.iter().map(|r| r.throughput).fold(0.0, f64::max);
    results
        .into_iter()
        .find(|r| r.throughput >= 0.99 * most)
        .unwrap_or(Best {
            limit: 1,
            ..Best::default()
        })
}

/// Where the sweep centres: the capacity, or with noise what keeps the service (or the
/// client's CPUs, if they are slower) busy through the noise's mean delay.
fn sweep_center(capacity: u32, service: Duration, noise: &Noise) -> f64 {
    if noise.is_quiet() {
        return f64::from(capacity);
    }
    let s = service.as_secs_f64().max(1e-6);
    let rate = (f64::from(capacity) / s).min(noise.cpu_rate());
    (rate * (s + noise.mean_delay().as_secs_f64())).max(1.0)
}

/// Evaluates the adaptive limit in one world and seed: the best static setting by a sweep,
/// the adaptive consumer from start-up (convergence, throughput, latency), the capacity
/// halved and doubled back (re-convergence), a static setting 4x too high, and the same with
/// collapse past the capacity (`collapse`, e.g. 0.5).
pub fn evaluate_downstream(
    world: DownstreamWorld,
    seed: u64,
    nsqd: usize,
    collapse: f64,
    factory: &mut dyn ClientFactory,
) -> DownstreamVerdict {
    let s = world.service;
    let c = world.capacity.max(1);
    let mut v = DownstreamVerdict::default();
    // Static runs: a warm-up, then the measurement.
    let warm = Duration::from_millis(300).max(s * 10);
    let measure = Duration::from_secs(1).max(s * 40);
    let base = DownstreamConfig {
        seed,
        nsqd,
        capacity: c,
        service: s,
        collapse: 0.0,
        changes: Vec::new(),
        max_in_flight: c,
        adaptive: None,
        duration: warm + measure,
        measure_from: warm,
        measure_until: None,
        noise: Noise::default(),
    };
    let Best {
        limit: best,
        throughput: best_tp,
        ..
    } = sweep(&base, c, 0.0, factory, &mut v);
    v.best = best;
    v.best_throughput = best_tp;
    let half = (c / 2).max(1);
    let best_half = if half < c {
        sweep(&base, half, 0.0, factory, &mut v).limit
    } else {
        best
    };

    // Static 4x too high.
    let four = DownstreamConfig {
        max_in_flight: best.saturating_mul(4),
        ..base.clone()
    };
    let r4 = run_downstream(&four, factory);
    v.virtual_s += four.duration.as_secs_f64();
    if let Some(x) = r4.violation {
        v.violations.push(format!("static 4x: {x}"));
    }
    v.static4x_p99_vs_uncongested = r4.p99.as_secs_f64() / s.as_secs_f64();

    // Adaptive: start-up, measurement, the capacity halved, then doubled back.
    let ceiling = 10_000;
    let bound = Duration::from_secs(10).max(s * 20);
    let steady = Duration::from_secs(10).max(s * 100);
    let phase = Duration::from_secs(20).max(s * 40);
    let t1 = bound + steady;
    let t2 = t1 + phase;
    let changes = if half < c {
        vec![(t1, half), (t2, c)]
    } else {
        Vec::new()
    };
    let adaptive = DownstreamConfig {
        max_in_flight: ceiling,
        adaptive: Some(1),
        duration: if half < c { t2 + phase } else { t1 },
        measure_from: bound,
        measure_until: Some(t1),
        changes,
        ..base.clone()
    };
    let r = run_downstream(&adaptive, factory);
    v.virtual_s += adaptive.duration.as_secs_f64();
    if let Some(x) = &r.violation {
        v.violations.push(format!("adaptive: {x}"));
    }
    v.converge_bound = bound;
    v.limits.clone_from(&r.limits);
    v.changes = adaptive.changes.iter().map(|c| c.0).collect();
    let band = |b: u32| (f64::from(b) * 0.75, f64::from(b) * 1.25);
    let (lo, hi) = band(best);
    v.converge = r.settled(Duration::ZERO, t1, lo, hi);
    v.limit = r.limit_at(t1);
    v.throughput_vs_best = r.throughput / best_tp.max(1e-9);
    v.p50_vs_uncongested = r.p50.as_secs_f64() / s.as_secs_f64();
    v.p99_vs_uncongested = r.p99.as_secs_f64() / s.as_secs_f64();
    if half < c {
        let (lo, hi) = band(best_half);
        v.reconverge.push(r.settled(t1, t2, lo, hi));
        let (lo, hi) = band(best);
        v.reconverge.push(r.settled(t2, t2 + phase, lo, hi));
    }

    // Collapse past the capacity.
    if collapse > 0.0 {
        let cbase = DownstreamConfig {
            collapse,
            ..base.clone()
        };
        let Best {
            limit: cbest,
            throughput: cbest_tp,
            ..
        } = sweep(&cbase, c, collapse, factory, &mut v);
        let c4 = DownstreamConfig {
            max_in_flight: cbest.saturating_mul(4),
            ..cbase.clone()
        };
        let r4 = run_downstream(&c4, factory);
        v.virtual_s += c4.duration.as_secs_f64();
        v.static4x_collapse_vs_best = r4.throughput / cbest_tp.max(1e-9);
        let ca = DownstreamConfig {
            collapse,
            changes: Vec::new(),
            duration: t1,
            ..adaptive.clone()
        };
        let r = run_downstream(&ca, factory);
        v.virtual_s += ca.duration.as_secs_f64();
        if let Some(x) = &r.violation {
            v.violations.push(format!("adaptive with collapse: {x}"));
        }
        v.collapse_vs_best = r.throughput / cbest_tp.max(1e-9);
    }
    v
}

/// What the evaluation of one world, seed and kind of client noise found (see
/// [`evaluate_noise`]).
#[derive(Clone, Debug)]
pub struct NoiseVerdict {
    /// The noise.
    pub kind: NoiseKind,
    /// The best static max_in_flight under this noise.
    pub best: u32,
    /// Its throughput (messages/s) and p99 over the adaptive run's measurement window.
    pub best_throughput: f64,
    /// Its p99.
    pub best_p99: Duration,
    /// The limit the adaptive consumer held at the end of the measurement.
    pub limit: u32,
    /// Its throughput over the best static one's.
    pub throughput_vs_best: f64,
    /// Its p99.
    pub p99: Duration,
    /// Its p99 over the best static one's.
    pub p99_vs_best: f64,
    /// Violations of the invariants in any of the runs.
    pub violations: Vec<String>,
    /// The adaptive run's limit over time.
    pub limits: Vec<(Duration, u32)>,
    /// Virtual seconds simulated, in every run together.
    pub virtual_s: f64,
}

/// Evaluates the adaptive limit in one world and seed under one kind of client-side noise
/// (see [`Noise`]): the best static setting by a sweep under the same noise, then that
/// setting and the adaptive consumer (from start-up) over the same measurement window as the
/// quiet world's (from 10 s or 20 service times, for 10 s or 100 service times). The noise is
/// drawn from the seed alone, so every run of the seed meets the same stalls at the same
/// times.
pub fn evaluate_noise(
    world: DownstreamWorld,
    seed: u64,
    nsqd: usize,
    kind: NoiseKind,
    factory: &mut dyn ClientFactory,
) -> NoiseVerdict {
    let s = world.service;
    let c = world.capacity.max(1);
    let mut v = DownstreamVerdict::default();
    let warm = Duration::from_millis(300).max(s * 10);
    let measure = Duration::from_secs(1).max(s * 40);
    let base = DownstreamConfig {
        seed,
        nsqd,
        capacity: c,
        service: s,
        collapse: 0.0,
        changes: Vec::new(),
        max_in_flight: c,
        adaptive: None,
        duration: warm + measure,
        measure_from: warm,
        measure_until: None,
        noise: kind.noise(),
    };
    let best = sweep(&base, c, 0.0, factory, &mut v).limit;
    let bound = Duration::from_secs(10).max(s * 20);
    let steady = Duration::from_secs(10).max(s * 100);
    let long = DownstreamConfig {
        max_in_flight: best,
        duration: bound + steady,
        measure_from: bound,
        ..base
    };
    let rs = run_downstream(&long, factory);
    if let Some(x) = rs.violation {
        v.violations.push(format!("static {best}: {x}"));
    }
    let adaptive = DownstreamConfig {
        max_in_flight: 10_000,
        adaptive: Some(1),
        ..long.clone()
    };
    let r = run_downstream(&adaptive, factory);
    if let Some(x) = &r.violation {
        v.violations.push(format!("adaptive: {x}"));
    }
    NoiseVerdict {
        kind,
        best,
        best_throughput: rs.throughput,
        best_p99: rs.p99,
        limit: r.limit_at(bound + steady),
        throughput_vs_best: r.throughput / rs.throughput.max(1e-9),
        p99: r.p99,
        p99_vs_best: r.p99.as_secs_f64() / rs.p99.as_secs_f64().max(1e-9),
        violations: v.violations,
        limits: r.limits,
        virtual_s: v.virtual_s + 2.0 * long.duration.as_secs_f64(),
    }
}
