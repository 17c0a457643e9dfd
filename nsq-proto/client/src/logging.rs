//! The `tracing` spans every driver enters and the log lines for the core's events, so every
//! adapter logs the same things at the same levels with the same fields.

use nsq_proto::Misconfiguration;
use nsq_proto::consumer::ConsumerEvent;
use nsq_proto::driver::ConnId;
use nsq_proto::producer::ProducerEvent;
use nsq_proto::{Channel, Topic};
use std::fmt;
use std::time::Duration;
//
// One spelling of each field in every adapter: `nsqd` (an nsqd TCP address), `conn` (the
// connection within its client), `lookupd` (an nsqlookupd address), `msg_id`, `attempts`,
// `error`, `reason`, `retry_in`. Every line of a client is inside its span (`consumer{id=..
// topic=.. channel=..}` or `producer{id=..}`, [`consumer_span`] / [`producer_span`]); the
// lines of one connection's socket are inside `connection{conn=.. nsqd=..}` below it
// ([`connection_span`]).
//
// Those spans are at ERROR, the level of the most severe line they carry. A subscriber's
// level filter disables the spans below it as it does the lines: under `RUST_LOG=warn` an
// INFO span is off, and a WARN line inside it would name no client. There are a few of them
// per client (one per client, connection and lookupd query), so having them always on costs
// nothing per message. The one span per message (`message{..}`, `Origin::message_span`)
// stays at INFO: made for every message, it is only worth its cost where INFO is on; the
// client's own lines about a message carry its `msg_id`, `attempts` and `nsqd` themselves,
// and a handler's lines fall back to its consumer's span when the message's is off.

static NEXT_CLIENT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_client_id() -> u64 {
    NEXT_CLIENT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The span of a consumer: `consumer{id=3 topic=events channel=archive}`, with an id unique in
/// the process (shared with producers), so two clients' lines are never confused. Its driver
/// enters it for everything it does; messages log in it on the application's tasks too. At
/// ERROR, so it is on under any filter that lets a line of the client through.
pub(crate) fn consumer_span(topic: &Topic, channel: &Channel) -> tracing::Span {
    tracing::error_span!(
        "consumer",
        id = next_client_id(),
        topic = %topic,
        channel = %channel
    )
}

/// The span of a producer: `producer{id=4}` (see [`consumer_span`]).
pub(crate) fn producer_span() -> tracing::Span {
    tracing::error_span!("producer", id = next_client_id())
}

/// The span of one nsqd connection's socket, `connection{conn=conn#1 nsqd=host:4150}`, made
/// inside the client's span (the driver's current span) so it nests below it. At ERROR like
/// the client's: a failed write is said at WARN inside it.
pub(crate) fn connection_span(conn: impl fmt::Display, nsqd: &str) -> tracing::Span {
    tracing::error_span!("connection", %conn, nsqd = %nsqd)
}

/// The span of one HTTP exchange with an nsqlookupd (see [`connection_span`]).
pub(crate) fn lookupd_span(request: impl fmt::Display, lookupd: &str) -> tracing::Span {
    tracing::error_span!("lookupd_request", %request, lookupd = %lookupd)
}

fn log_connection_closed(
    conn: ConnId,
    addr: &str,
    reason: &str,
    retry_in: Option<Duration>,
    misconfigured: Option<&Misconfiguration>,
) {
    if let Some(problem) = misconfigured {
        // Once: the address is not tried again on its own.
        tracing::error!(
            %conn,
            nsqd = %addr,
            %problem,
            "cannot use this nsqd as configured; not retrying it (fix the configuration or \
             the address, then add it again)"
        );
    } else if let Some(retry_in) = retry_in {
        let when = RetryIn(retry_in);
        tracing::warn!(
            %conn,
            nsqd = %addr,
            %reason,
            retry_in = format_args!("{retry_in:.1?}"),
            "nsqd connection failed; retrying {when}"
        );
    } else {
        tracing::info!(%conn, nsqd = %addr, %reason, "nsqd connection closed");
    }
}

/// Logs a consumer event with `tracing`, the same way in every adapter, in the consumer's
/// span. Call it for every event; the ones an adapter acts on (`Message`, `Closed`) are not
/// logged here. `nsqd` gives the address of a connection (for the events that only name
/// their connection).
pub(crate) fn log_consumer_event<'a>(
    event: &ConsumerEvent,
    nsqd: impl FnOnce(ConnId) -> Option<&'a str>,
) {
    match event {
        ConsumerEvent::Message { .. } | ConsumerEvent::Closed { .. } => {}
        ConsumerEvent::GaveUp { conn, message } => {
            tracing::warn!(
                %conn,
                nsqd = %nsqd(*conn).unwrap_or_default(),
                msg_id = %message.id,
                attempts = message.attempts,
                "giving up on a message delivered more than max_attempts times: finished it"
            );
        }
        ConsumerEvent::MessageExpired { conn, id } => {
            tracing::warn!(
                %conn,
                nsqd = %nsqd(*conn).unwrap_or_default(),
                msg_id = %id,
                "message timed out before it was answered: nsqd redelivers it"
            );
        }
        ConsumerEvent::ConnectionReady { conn, addr } => {
            tracing::info!(%conn, nsqd = %addr, "connected to nsqd");
        }
        ConsumerEvent::ConnectionClosed {
            conn,
            addr,
            reason,
            retry_in,
            misconfigured,
        } => log_connection_closed(*conn, addr, reason, *retry_in, misconfigured.as_ref()),
        ConsumerEvent::ServerError { conn, error } => {
            tracing::warn!(
                %conn,
                nsqd = %nsqd(*conn).unwrap_or_default(),
                %error,
                "nsqd refused a command"
            );
        }
        ConsumerEvent::LookupdFailed { addr, error } if error.is_misconfiguration() => {
            // Once: the address is not polled again on its own.
            tracing::error!(
                lookupd = %addr,
                %error,
                "cannot use this nsqlookupd as configured; not polling it again (fix the \
                 address, then add it again)"
            );
        }
        ConsumerEvent::LookupdFailed { addr, error } => {
            tracing::warn!(lookupd = %addr, %error, "nsqlookupd query failed");
        }
        ConsumerEvent::LookupdAnswered { addr, producers } => {
            tracing::debug!(lookupd = %addr, producers, "nsqlookupd answered");
        }
        ConsumerEvent::InFlightLimitChanged {
            limit,
            latency,
            uncongested,
        } => {
            tracing::debug!(
                limit,
                latency = ?latency,
                uncongested = ?uncongested.unwrap_or_default(),
                "adaptive in-flight limit changed"
            );
        }
        #[allow(unreachable_patterns, reason = "ConsumerEvent is non_exhaustive")]
        other => tracing::debug!(?other, "consumer event"),
    }
}

/// Logs a new `max_in_flight` of a consumer (the drivers call it for `set_max_in_flight`):
/// 0 pauses the consumer, which is said at INFO so a consumer that receives nothing explains
/// itself.
pub(crate) fn log_max_in_flight(max_in_flight: u32) {
    if max_in_flight == 0 {
        tracing::info!(
            max_in_flight,
            "max_in_flight is 0: the consumer is paused (RDY 0) until it is raised"
        );
    } else {
        tracing::info!(max_in_flight, "max_in_flight changed");
    }
}

/// Logs a producer event with `tracing`, the same way in every adapter, in the producer's
/// span. Call it for every event; successes and `Closed` are not logged (a failed publish is
/// the caller's error; it is logged at DEBUG only).
pub(crate) fn log_producer_event(event: &ProducerEvent) {
    match event {
        ProducerEvent::Published(_) | ProducerEvent::PingOk(_) | ProducerEvent::Closed => {}
        ProducerEvent::PublishFailed(id, failure) => {
            tracing::debug!(publish = %id, error = %failure, "publish failed");
        }
        ProducerEvent::PingFailed(id, failure) => {
            tracing::debug!(ping = %id, error = %failure, "ping failed");
        }
        ProducerEvent::ConnectionReady { conn, addr } => {
            tracing::info!(%conn, nsqd = %addr, "connected to nsqd");
        }
        ProducerEvent::ConnectionClosed {
            conn,
            addr,
            reason,
            retry_in,
            misconfigured,
        } => log_connection_closed(*conn, addr, reason, *retry_in, misconfigured.as_ref()),
        #[allow(unreachable_patterns, reason = "ProducerEvent is non_exhaustive")]
        other => tracing::debug!(?other, "producer event"),
    }
}

/// When a connection is tried again, for a log line or an event: "in 508.7ms", or "at once"
/// (a reconnect with no delay, as after nsqd refused one publish).
pub(crate) struct RetryIn(pub(crate) std::time::Duration);

impl std::fmt::Display for RetryIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_zero() {
            f.write_str("at once")
        } else {
            write!(f, "in {:.1?}", self.0)
        }
    }
}
