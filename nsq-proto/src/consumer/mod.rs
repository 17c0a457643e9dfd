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

// Inside: `consumer.rs` is the coordinator (the public API, dispatching each input to the
// connection it names and to the parts below); `flow.rs` owns RDY distribution and backoff
// (`FlowControl`, its plans in `flow/plan.rs`), `discovery.rs` the nsqd and lookupd sets and
// reconnects (`Discovery`), `shared.rs` what they share (`Shared`: configuration, rng,
// connections, timers, output queues), `slots.rs` the connections (`Slots`, `Slot`),
// `beyond.rs` the messages nsqd delivers beyond the in-flight bound, `timers.rs` the
// consumer-wide timer table, `events.rs` and `stats.rs` the types the application sees. No
// part imports the coordinator.
mod adaptive;
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
pub mod lookupd;
pub mod policy;
mod shared;
mod slots;
mod stats;
mod timers;

pub use config::{ConsumerConfig, InFlightMode};
pub use consumer::Consumer;
/// How long after the adaptive in-flight limit went down the consumer still hands out messages
/// already on the wire up to the limit before. Not part of the stable API: the simulator
/// (`nsq_test_broker::sim`) checks the limit against it.
#[doc(hidden)]
pub use consumer::GRACE as LIMIT_GRACE;
pub use events::{ConsumerError, ConsumerEvent};
pub use flow::{ANSWER_FAILURE_BURST, ANSWER_FAILURE_WINDOW};
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
