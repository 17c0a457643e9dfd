//! Publishing over nsqd's size limits as nsqd v1.3.0 answers it (the refusal, then a reset,
//! because nsqd closes with the body unread), and publishing while the producer replaces a
//! connection (issue 44).

use super::{ErrorKind, Factory, GoConfig, WAIT, addr, eventually, start};
use crate::Nsqd;
use crate::conformance::Env;
use std::time::{Duration, Instant};

/// A 4 MB body: over nsqd's default `--max-msg-size` (1 MiB), within the producer's 8 MiB.
const BIG: usize = 4_000_000;

/// A producer whose own limit (8 MiB) is above nsqd's, as a user who raised it has.
fn roomy() -> GoConfig {
    GoConfig::with(&[("max_msg_size", "8388608")])
}

/// Ten rounds of a 4 MB publish then a valid one on `addr`: the first oversize publish
/// fails as `first` says, the nine others before they are sent with the limit `learned`
/// in their error, and every valid publish succeeds.
fn ten_rounds(
    f: &dyn Factory,
    addr: &str,
    topic: &str,
    first: &dyn Fn(&ErrorKind) -> bool,
    learned: &str,
) {
    let p = f.producer_connect(addr, &roomy()).unwrap();
    let big = vec![b'x'; BIG];
    for round in 0..10 {
        let started = Instant::now();
        let err = p.publish(topic, &big).unwrap_err();
        if round == 0 {
            assert!(first(&err.kind), "the first oversize publish: {err}");
        } else {
            assert_eq!(err.kind, ErrorKind::InvalidInput, "round {round}: {err}");
            assert!(err.message.contains(learned), "round {round}: {err}");
        }
        if let Err(e) = p.publish(topic, b"valid") {
            panic!("round {round}: the valid publish after the oversize one failed: {e}");
        }
        assert!(
            started.elapsed() < WAIT,
            "round {round}: {:?}",
            started.elapsed()
        );
    }
    let s = p.stats();
    assert_eq!((s.published, s.failed), (10, 10));
    p.close();
}

/// The IDENTIFYs `nsqd` read: one per connection made.
fn identifies(nsqd: &Nsqd) -> usize {
    nsqd.commands()
        .iter()
        .filter(|c| c.name() == "IDENTIFY")
        .count()
}

/// nsqd at its default limit, a producer allowing 8 MiB: ten 4 MB publishes, each followed
/// by a valid one. nsqd refuses the first after reading its size and resets the connection
/// while the body is still being written; the client still reads nsqd's `E_BAD_MESSAGE`,
/// learns the limit, and replaces the connection at once. The nine others fail before they
/// are sent, and every valid publish succeeds: one connection lost in all. Against the real
/// nsqd named by `NSQD_TCP_ADDRESS` when it is set.
pub(super) fn oversize_publishes_cost_one_connection(f: &dyn Factory) {
    let refused = |k: &ErrorKind| *k == ErrorKind::Server("E_BAD_MESSAGE".into());
    if let Some(env) = Env::external() {
        let topic = env.topic("oversize");
        ten_rounds(
            f,
            &env.tcp_address().to_string(),
            &topic,
            &refused,
            "1048576",
        );
        return;
    }
    let nsqd = start(Nsqd::builder());
    ten_rounds(f, &addr(&nsqd), "oversize", &refused, "1048576");
    assert_eq!(identifies(&nsqd), 2, "one connection replaced, once");
    assert!(eventually(WAIT, || nsqd
        .topic("oversize")
        .is_some_and(|t| t.message_count == 10)));
}

/// The same when the reset destroys nsqd's `E_BAD_MESSAGE` before the client reads it: the
/// connection ended during a body larger than nsqd ever took (and than its default limit),
/// which is taken as its refusal, with the limit just below that body's size.
pub(super) fn an_oversize_publish_answered_only_by_a_reset_costs_one_connection(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.lose_size_refusals(true);
    let lost = |k: &ErrorKind| *k == ErrorKind::ConnectionLost;
    ten_rounds(f, &addr(&nsqd), "reset", &lost, "3999999");
    assert_eq!(identifies(&nsqd), 2, "one connection replaced, once");
}

/// nsqd closes the producer's connection (it stays up): a publish made at once waits for the
/// replacement connection instead of failing with `NoServerAvailable`, as go-nsq's does.
pub(super) fn a_publish_waits_while_its_producer_reconnects(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = f
        .producer_connect(&addr(&nsqd), &GoConfig::default())
        .unwrap();
    p.publish("wait", b"before").unwrap();
    for round in 0..5 {
        nsqd.drop_connections();
        // Once the producer has seen the connection end (a publish before that is lost
        // with it), and long before its reconnect timer fires.
        assert!(eventually(WAIT, || p.stats().connections_ready == 0));
        let started = Instant::now();
        if let Err(e) = p.publish("wait", b"during") {
            panic!("round {round}: a publish while reconnecting failed: {e}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    assert!(eventually(WAIT, || nsqd
        .topic("wait")
        .is_some_and(|t| t.message_count == 6)));
    p.close();
}
