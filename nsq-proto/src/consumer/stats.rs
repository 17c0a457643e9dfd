//! A consumer's stats snapshot ([`ConsumerStats`]), its per-nsqd part ([`NsqdStats`]), and the
//! message counters behind them.

use crate::driver::ConnId;
use std::fmt;
use std::time::{Duration, Instant};

/// A snapshot of a consumer's counters, in total and per nsqd.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ConsumerStats {
    /// Messages delivered by nsqd (including ones given up on).
    pub received: u64,
    /// Messages finished by the application.
    pub finished: u64,
    /// Messages requeued by the application.
    pub requeued: u64,
    /// Messages finished automatically because they exceeded `max_attempts`.
    pub gave_up: u64,
    /// Messages nsqd delivered beyond what max_in_flight allowed at the time, sent back at
    /// once (REQ 0, no backoff) without reaching the application. Counted in `received`.
    ///
    /// A RDY the consumer lowers (a low-RDY turn that ends while its holder waits for its
    /// next message, a plan that caps the budget, a connection closing) cannot take back a
    /// message nsqd has already written: that message keeps its share of max_in_flight for
    /// the connection's settle time (the handshake's round trips, plus nsqd's output buffer
    /// timeout above RDY 1). One that arrives later (nsqd or this client descheduled on a
    /// busy machine, a half-open link) may find its share given to another nsqd's message, so
    /// nsqd and the client's sockets count one message more than max_in_flight for a
    /// moment, while the application never holds more. That connection's settle time (and
    /// its idle wait in the low-RDY rotation) then grows to what the late one took (up to a
    /// second), so its next lowered RDY waits for it. Rare: none in 288,000 messages from
    /// 40 busy nsqd at max_in_flight 4, on a loaded 2-core machine (BENCHMARKS.md).
    ///
    /// nsqd counts every delivery as an attempt, and no command takes that back; this
    /// consumer does not count the deliveries it sent back: when such a message comes back
    /// on the same connection, its `attempts` (what the application sees, and what
    /// `max_attempts` and the default requeue delay go by) are nsqd's less those deliveries
    /// (the last 16 sent back are remembered per connection). So a message is never given
    /// up on for deliveries no handler saw. One that comes back on another connection (after
    /// a reconnect), or to another consumer of the channel, carries nsqd's count.
    pub returned: u64,
    /// Messages the application still holds whose connection was lost, or which nsqd timed
    /// out, and which it has not answered yet: nsqd requeued them, but they keep their share
    /// of max_in_flight until the application answers (not counted in `in_flight`).
    pub unanswered_elsewhere: usize,
    /// Connections that are ready (handshake and SUB done).
    pub connections: usize,
    /// The current backoff level (0 = full speed).
    pub backoff_level: u32,
    /// The in-flight limit in force: `max_in_flight`, or the adaptive limit below it.
    pub in_flight_limit: u32,
    /// Sum of the RDY counts last sent on ready connections.
    pub total_rdy: u64,
    /// nsqd addresses the consumer keeps track of, connected or not: every directly added
    /// address, and each lookupd-discovered address while it is connected (or connecting) or
    /// still listed by some lookupd's latest successful answer. Discovered addresses that are
    /// neither are forgotten, so this stays bounded however many nsqd come and go.
    pub known_nsqd: usize,
    /// Messages delivered and not answered yet, over every connection (closing ones
    /// included).
    pub in_flight: usize,
    /// Reconnects: connections that became ready (handshake and SUB done) to an nsqd this
    /// consumer had been connected to before, over every nsqd ever known; how often a
    /// connection was lost and made again. Counted whether the nsqd was given directly or
    /// listed by an nsqlookupd, also when a discovered nsqd was forgotten (no lookupd listed
    /// it: an nsqd leaves nsqlookupd while it restarts) and is listed again; the last 4,096
    /// forgotten addresses are remembered. Attempts that fail are not counted (each is a
    /// `ConnectionClosed` event; [`NsqdStats::reconnect_at`] says when the next is due).
    pub reconnects: u64,
    /// Every nsqd the consumer keeps track of (the `known_nsqd` of them), by address.
    pub nsqd: Vec<NsqdStats>,
}

/// Where one nsqd of a consumer stands, in [`NsqdStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NsqdState {
    /// The TCP connection is being opened.
    Connecting,
    /// Start-up in progress (IDENTIFY, upgrades, AUTH, SUB).
    Handshaking,
    /// Subscribed: messages flow as its RDY allows.
    Ready,
    /// CLS sent (the nsqd was disconnected from, or the consumer is closing): its messages
    /// in flight can still be answered, then the connection closes.
    Closing,
    /// No connection: a reconnect is due at [`NsqdStats::reconnect_at`], or (discovered
    /// nsqd) waits for a lookupd to list it again.
    Disconnected,
    /// No connection, and none is attempted: the last one showed a misconfiguration (the
    /// wrong port, a TLS mismatch, refused credentials; see
    /// [`CloseReason::misconfiguration`](crate::CloseReason::misconfiguration)). Adding the
    /// address again tries once more.
    Misconfigured,
}

/// One nsqd address of a consumer, in [`ConsumerStats::nsqd`]:
/// its connection's state and flow control, and counters over every connection the consumer
/// made to it while it kept track of the address (`reconnects`: while it remembers it, see
/// [`ConsumerStats::reconnects`]).
///
/// Its `Debug` shows [`reconnect_at`](Self::reconnect_at) as `scheduled` (an `Instant` reads
/// as an opaque clock value); [`reconnect_in`](Self::reconnect_in) gives the time left.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NsqdStats {
    /// The nsqd TCP address (`host:port`).
    pub address: String,
    /// Added directly (`add_nsqd`) rather than discovered through nsqlookupd. An nsqd that
    /// was disconnected from is no longer configured.
    pub configured: bool,
    /// Where its connection stands.
    pub state: NsqdState,
    /// The current connection, if any (connecting, handshaking, ready or closing).
    pub connection: Option<ConnId>,
    /// The RDY count last sent on the connection (0 unless ready).
    pub rdy: u32,
    /// Messages delivered on the connection and not answered yet.
    pub in_flight: usize,
    /// Messages delivered by this nsqd (including ones given up on).
    pub received: u64,
    /// Messages from this nsqd finished by the application.
    pub finished: u64,
    /// Messages from this nsqd requeued by the application.
    pub requeued: u64,
    /// Messages from this nsqd finished automatically for exceeding `max_attempts`.
    pub gave_up: u64,
    /// Connections to this nsqd that became ready after the first one (see
    /// [`ConsumerStats::reconnects`]).
    pub reconnects: u64,
    /// When the next reconnect attempt is due (directly added nsqd whose connection ended).
    pub reconnect_at: Option<Instant>,
    /// nsqd's `--topology-zone`, as its IDENTIFY reply last said (nsqd after v1.3.0; empty
    /// for older ones, or before the first connection was ready).
    pub topology_zone: String,
    /// nsqd's `--topology-region`, likewise.
    pub topology_region: String,
}

impl NsqdStats {
    /// How long until the next reconnect attempt, seen from `now` (zero when it is due).
    pub fn reconnect_in(&self, now: Instant) -> Option<Duration> {
        self.reconnect_at
            .map(|at| at.saturating_duration_since(now))
    }
}

impl fmt::Debug for NsqdStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// `reconnect_at` without its meaningless clock reading.
        struct Scheduled;
        impl fmt::Debug for Scheduled {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("scheduled")
            }
        }
        f.debug_struct("NsqdStats")
            .field("address", &self.address)
            .field("configured", &self.configured)
            .field("state", &self.state)
            .field("connection", &self.connection)
            .field("rdy", &self.rdy)
            .field("in_flight", &self.in_flight)
            .field("received", &self.received)
            .field("finished", &self.finished)
            .field("requeued", &self.requeued)
            .field("gave_up", &self.gave_up)
            .field("reconnects", &self.reconnects)
            .field("reconnect_at", &self.reconnect_at.map(|_| Scheduled))
            .field("topology_zone", &self.topology_zone)
            .field("topology_region", &self.topology_region)
            .finish()
    }
}

/// Message counters of one connection, or of every finished connection to one address.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub(crate) received: u64,
    pub(crate) finished: u64,
    pub(crate) requeued: u64,
    pub(crate) gave_up: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, other: &Counts) {
        self.received += other.received;
        self.finished += other.finished;
        self.requeued += other.requeued;
        self.gave_up += other.gave_up;
    }
}
