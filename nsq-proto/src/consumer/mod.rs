//! The consumer side: a sans-IO [`Consumer`] owning many nsqd connections for one
//! topic/channel.
//!
//! * [`Consumer`]: RDY distribution, backoff, attempts policy, requeue delays, nsqlookupd
//!   discovery, reconnection and graceful shutdown, as one state machine.
//! * [`ConsumerConfig`]: its knobs, with go-nsq's defaults.
//! * [`lookupd`]: the sans-IO HTTP exchange with nsqlookupd.
//! * [`policy`]: the pure policies (backoff, reconnect schedule, requeue delay).
//!
//! # Driving a consumer
//!
//! One task owns the [`Consumer`] and drives it by the [driver contract](crate::driver): the
//! [`Action`](crate::driver::Action)s it asks for, its events and its one timer, drained after
//! every input and command. The application answers [`ConsumerEvent::Message`]s with
//! [`Consumer::finish`], [`Consumer::requeue`] or [`Consumer::touch`], naming the connection the
//! message came from.
//!
//! ```
//! use bytes::BytesMut;
//! use nsq_proto::consumer::{Consumer, ConsumerConfig};
//! use nsq_proto::driver::Action;
//! use nsq_proto::{Channel, Topic};
//! use std::time::Instant;
//!
//! let now = Instant::now();
//! let config = ConsumerConfig { max_in_flight: 10, ..Default::default() };
//! let mut consumer = Consumer::new(config, Topic::new("events")?, Channel::new("archive")?, 42);
//! consumer.add_nsqd(now, "127.0.0.1:4150")?;
//! consumer.add_lookupd(now, "http://127.0.0.1:4161")?;
//! let actions: Vec<Action> = std::iter::from_fn(|| consumer.poll_action()).collect();
//! for action in actions {
//!     match action {
//!         Action::Connect { conn, addr } => {
//!             // open a TCP stream to `addr`, then:
//!             consumer.handle_connected(now, conn);
//!         }
//!         Action::LookupdRequest { request, addr, data } => {
//!             // connect to `addr`, write `data`, feed the reply to handle_lookupd_input
//!             let _ = (request, addr, data);
//!         }
//!         _ => {}
//!     }
//! }
//! // Now the nsqd connection's magic and IDENTIFY wait to be written:
//! assert!(matches!(consumer.poll_action(), Some(Action::Transmit { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # max_in_flight bounds what the application holds
//! Messages handed out and not yet answered never exceed `max_in_flight`, through joins,
//! leaves, rotation, backoff, [`set_max_in_flight`](Consumer::set_max_in_flight) and reconnects
//! (go-nsq bounds only the sum of RDY). Each connection holds a share, `max(RDY, messages
//! delivered on it and not yet answered)`, and the shares never sum above `max_in_flight`:
//! lowerings go out before raises, RDY is raised only out of budget no connection holds, and
//! a lowered RDY stays committed until the messages nsqd may already have written arrive or a
//! settle time passes. A message whose connection was lost, or which expired, keeps its share
//! until the application answers it (the answer then fails). One case stays uncounted: a
//! message that expired and came back on the same connection, answered twice. What no client
//! controls: a FIN and a RDY sent to two different nsqd may be read in either order, and a
//! message nsqd wrote before it read a lowered RDY may arrive after the settle time, its share
//! given on: it goes back at once, unseen ([`ConsumerStats::returned`] says what it costs).
//!
//! # RDY
//! With `max_in_flight >= connections`, every ready connection gets `max_in_flight / n`
//! (capped at its max_rdy_count), the remainder round-robin, each connection's unanswered
//! messages counting in its share. A new connection starts at RDY 1 and gets its share after
//! its first message or after `rdy_redistribute_interval`, so connections discovered together
//! all get a chance. A connection's RDY is re-sent when its remaining count drops to <= 1 or
//! under 25% of the last value.
//!
//! # Fewer max_in_flight than connections: a rotation
//! Connections hold RDY 1 in turns, round-robin: the line is served in the order of the
//! connections' last turns (granted longest ago first, then released longest ago), and a
//! connection joins it at its head's place. Turns are sized so that every connection with
//! messages gets one within `low_rdy_max_wait` (default 10 s), as far as the handlers allow:
//! a round (each ready connection one turn, over the seats, max_in_flight less the shares
//! held by messages outside turns) is to take half of it, the other half being slack for turn
//! changes. A connection whose last turn found its nsqd empty counts for its idle wait, a busy
//! one for a turn, so a turn lasts `(low_rdy_max_wait / 2 x seats - idle time) / busy` (with
//! every nsqd busy, `low_rdy_max_wait / 2 x seats / connections`), never longer than
//! `low_rdy_timeout` (default 2 s), never shorter than 10 ms; when probing the idle ones
//! takes the whole round, busy turns still get as much seat time as the probes. Turns that
//! are over end one at a time, a turn's length over the seats apart, by exact timers.
//!
//! A turn ends sooner when its holder is idle for `low_rdy_idle_timeout` (less on a short
//! round trip), or, while others wait, once it has delivered its share: as many messages as
//! a busy turn delivers in the turn's length at the pace measured between a holder's
//! messages, at least one, so a holder served faster than the others passes on sooner. A
//! busy turn ends at a message, so it costs at most two RDY commands per message it delivers
//! (RDY 1 and RDY 0, and a RDY 1 re-sent after each answer in between). A turn change looks at the holder and the first in line only, and costs
//! about one round trip of idle budget (the busy holder's last message keeps its share until
//! answered). The bound holds only as far as the handlers allow: a turn cannot be shorter
//! than its first message's round trip and handler, nor an idle one than its idle wait, so
//! with very many nsqd per max_in_flight the handlers' and the round trips' speed set the
//! wait. The same rotation serves the connections when shares held where no RDY can use
//! them leave too few for all.
//!
//! # Backoff
//! A requeue with backoff raises the level and queues RDY 0 on every connection before the
//! REQ; after `multiplier x 2^level` (capped; optionally fully jittered) one connection gets
//! RDY 1 (one that received a message since it last held this probe, the latest first, else
//! the one that held it longest ago; an idle probe moves on). Its next result decides: a
//! success lowers the level, a failure raises it; results inside a window are ignored. A
//! message given up on (attempts above `max_attempts`, finished automatically) counts as a
//! success, as in go-nsq. A burst of answers nsqd rejects as timed out ([`ANSWER_FAILURE_BURST`]
//! within [`ANSWER_FAILURE_WINDOW`]) counts as one failure, logged once.
//!
//! # An adaptive limit
//! With [`InFlightMode::Adaptive`] (go-style option `max_in_flight_mode = adaptive`),
//! `max_in_flight` is a ceiling and `min_in_flight` a floor; between them the consumer finds
//! the limit itself, from each message's handling latency (hand-out to answer: the
//! handler's time, including any wait for what it calls) and outcome. Everything above
//! (the exact bound, RDY, the rotation) then holds against that limit
//! ([`in_flight_limit`](Consumer::in_flight_limit), [`ConsumerStats::in_flight_limit`],
//! [`ConsumerEvent::InFlightLimitChanged`]), with one allowance: for a second after the limit
//! went down, messages nsqd had already written under the higher RDY are handed out up to
//! the limit before, rather than sent back to the end of nsqd's queue (the lowered RDY lets
//! no new ones come). `max_in_flight` itself is never exceeded.
//!
//! * **When to use it**: the handlers call something of limited capacity (a database, a
//!   service, a disk) whose capacity you do not know, or which changes (deploys, noisy
//!   neighbours, time of day). Beyond that capacity more messages in flight only queue in
//!   front of it: latency grows, messages time out on nsqd and come back as duplicates, and
//!   a service that slows down under load collapses.
//! * **What it converges to**: the knee, where the handlers' downstream is kept busy and
//!   nothing queues in front of it (a window's mean latency within 5% of the uncongested
//!   latency): about the capacity, plus what is on the wire to and from nsqd when its round
//!   trip is not small beside the service time. It starts at the floor and doubles until
//!   latency grows, so it gets there within a few latencies; it follows the capacity when
//!   it halves or doubles, and re-measures the uncongested latency now and then (one window
//!   at 85% of the limit; the first a second after start-up when the latency is short). It
//!   holds the mean, not the tail: at the knee up to about 5% of the messages may wait for a
//!   slot, and where the downstream frees its slots in waves (every operation taking the
//!   same time) they wait a whole service time, so p99 can reach twice the uncongested
//!   latency while p50 stays at it (BENCHMARKS.md). Where a p99 bound matters more than the
//!   last few percent of throughput, set `max_in_flight` (the ceiling) at the capacity.
//! * **Backoff** stays as it is and the two do not fight: while the consumer backs off the
//!   limit is frozen and nothing is measured. A message that expires (nsqd's msg_timeout)
//!   halves the limit; a window in which more than 10% of the answers are requeues lowers it
//!   by 10%.
//! * **Below the number of connections** the rotation serves them with the limit as
//!   `max_in_flight`; the limit only moves by what the handlers' latency says.
//! * **Handlers that do not wait on anything** (CPU-bound): latency then grows with the
//!   number of handlers the runtime runs at once, and the limit settles where that begins.
//!   Without such a bound, a static `max_in_flight` is the better choice.
//!
//! The limit's algorithm (a gradient over a re-measured minimum latency, as Envoy's adaptive
//! concurrency filter and Netflix's Gradient2 do, computed on what the application holds by
//! Little's law) is O(1) per answer and deterministic; the simulator's `--downstream` mode
//! measures it (SIMULATION.md).
//!
//! # Discovery
//! Every lookupd is polled each round; the producers they list are unioned and new ones are
//! connected. Directly added nsqd are reconnected on an exponential schedule and never
//! forgotten; a discovered nsqd is reconnected only when a lookupd answer sent after its
//! connection ended still lists it, and forgotten once it has no connection and no lookupd's
//! latest *successful* answer lists it (a lookupd that is down never makes the consumer forget
//! an nsqd). [`ConsumerStats::known_nsqd`] counts what is kept.
//!
//! Figures (flow control on a real nsqd against go-nsq's rules, the reader's cost) are in the
//! repository's BENCHMARKS.md; the invariants above are checked by the simulator
//! (SIMULATION.md).

// Inside: `consumer.rs` is the coordinator (the public API, dispatching each input to the
// connection it names and to the parts below; what it does with a connection's output, in
// `dispatch.rs`); `flow.rs` owns RDY distribution and backoff (`FlowControl`, its plans in
// `flow/plan.rs`), `limit.rs` the in-flight limit in force and `max_in_flight`, static or
// adaptive (`InFlightLimit`, its controller in `limit/adaptive.rs`, its tests in
// `limit/adaptive/tests.rs`), `discovery.rs` the nsqd and lookupd sets and reconnects
// (`Discovery`), `shared.rs` what they share (`Shared`: configuration, rng, connections, timers,
// output queues), `slots.rs` the connections (`Slots`, `Slot`), `beyond.rs` the messages nsqd
// delivers beyond the in-flight bound, `timers.rs` the consumer-wide timer table, `events.rs`
// and `stats.rs` the types the application sees. No part imports the coordinator.
mod beyond;
mod config;
#[expect(
    clippy::module_inception,
    reason = "the coordinator lives in a file named for it, beside the parts it drives"
)]
mod consumer;
mod discovery;
mod events;
mod flow;
mod limit;
pub mod lookupd;
pub mod policy;
mod shared;
mod slots;
mod stats;
mod timers;

pub use config::{ConsumerConfig, InFlightMode};
pub use consumer::Consumer;
pub use events::{ConsumerError, ConsumerEvent};
pub use flow::{ANSWER_FAILURE_BURST, ANSWER_FAILURE_WINDOW};
/// How long after the adaptive in-flight limit went down the consumer still hands out messages
/// already on the wire up to the limit before. Not part of the stable API: the simulator
/// (`nsq_test_broker::sim`) checks the limit against it.
#[doc(hidden)]
pub use limit::GRACE as LIMIT_GRACE;
pub use lookupd::{LookupdAddress, LookupdAddressError, LookupdError, LookupdResponseParser};
pub use policy::{BackoffStrategy, ReconnectSchedule};
pub use stats::{ConsumerStats, NsqdState, NsqdStats};

use std::time::Duration;

/// How long a RDY holder with nothing in flight waits for a message before the low-RDY
/// rotation passes on, on a connection whose handshake took `handshake`, with `cap` the
/// consumer's `low_rdy_idle_timeout`. Not part of the stable API: the simulator
/// (`nsq_test_broker::sim`) derives its starvation bound from it.
#[doc(hidden)]
pub fn idle_wait(handshake: Duration, cap: Duration) -> Duration {
    flow::idle_timeout(handshake, cap)
}

crate::driver::impl_driven!(Consumer, ConsumerEvent, lookupd);
