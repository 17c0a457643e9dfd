//! Property tests: random event sequences against a consumer and fake nsqd peers.
//!
//! Invariants checked after every step: the servers never see a total RDY above
//! max_in_flight (checked at every RDY command, in wire order) nor a RDY above their
//! max_rdy_count, nor more messages in flight over all of them than max_in_flight (checked
//! at every command and every delivery; after max_in_flight is lowered below what is in
//! flight, what is in flight never grows until it is back under the limit); the consumer's
//! own book-keeping agrees. The servers' bytes reach the consumer after a latency (0, 1 or
//! 40 ms), so messages nsqd sent before it read a lower RDY arrive after the consumer moved
//! that RDY elsewhere. After the random phase, with steady
//! traffic and only successes: every connection is served within a bounded virtual time and
//! full throttle returns.

mod consumer_common;

use consumer_common::{Handler, World, addr, config};
use nsq_proto::consumer::NsqdState;
use proptest::prelude::*;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Connect(usize),
    Disconnect(usize),
    Messages(usize, usize),
    FinishSome(usize),
    /// Answers the held message at this position (modulo their number), out of order.
    AnswerOne(usize, bool),
    Requeue {
        backoff: bool,
        count: usize,
    },
    Advance(u64),
    SetMaxInFlight(u32),
    Handler(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..5usize).prop_map(Op::Connect),
        (0..5usize).prop_map(Op::Disconnect),
        (0..5usize, 1..6usize).prop_map(|(i, n)| Op::Messages(i, n)),
        (1..6usize).prop_map(Op::FinishSome),
        (0..8usize, any::<bool>()).prop_map(|(i, fin)| Op::AnswerOne(i, fin)),
        (any::<bool>(), 1..4usize).prop_map(|(backoff, count)| Op::Requeue { backoff, count }),
        (0..120_000u64).prop_map(Op::Advance),
        (0..12u32).prop_map(Op::SetMaxInFlight),
        (0..6u8).prop_map(Op::Handler),
    ]
}

const MAX_RDY: [u32; 5] = [2500, 3, 1, 2500, 5];

fn check(w: &World) -> Result<(), TestCaseError> {
    prop_assert!(w.violations.is_empty(), "violations: {:?}", w.violations);
    let m = w.consumer.max_in_flight();
    prop_assert!(
        w.consumer_total_rdy() <= m,
        "consumer total RDY {} > {m}",
        w.consumer_total_rdy()
    );
    for (id, _) in w.consumer.connections() {
        if let Some(c) = w.consumer.connection(id) {
            prop_assert!(c.rdy() <= c.max_rdy());
        }
    }
    // The totals kept as running sums agree with a look at every connection.
    let stats = w.consumer.stats();
    let ids: Vec<_> = w.consumer.connections().map(|(id, _)| id).collect();
    let conns = ids.iter().filter_map(|id| w.consumer.connection(*id));
    let ready: Vec<_> = ids
        .iter()
        .filter(|id| {
            stats
                .nsqd
                .iter()
                .any(|n| n.connection == Some(**id) && n.state == NsqdState::Ready)
        })
        .collect();
    prop_assert_eq!(stats.connections, ready.len());
    let rdy: u64 = ids.iter().map(|id| u64::from(w.consumer.rdy(*id))).sum();
    prop_assert_eq!(stats.total_rdy, rdy);
    let in_flight: usize = conns.map(nsq_proto::Connection::in_flight).sum();
    prop_assert_eq!(stats.in_flight, in_flight);
    let starved = ready.iter().any(|id| {
        w.consumer
            .connection(**id)
            .is_some_and(|c| c.in_flight() > 0 && c.in_flight() * 100 >= c.rdy() as usize * 85)
    });
    prop_assert_eq!(w.consumer.is_starved(), starved);
    Ok(())
}

fn run(max_in_flight: u32, seed: u64, latency_ms: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut w = World::new(config(max_in_flight), seed);
    w.latency = Duration::from_millis(latency_ms);
    for (i, max_rdy) in MAX_RDY.iter().enumerate() {
        w.add_nsqd(&addr(i), *max_rdy);
    }
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    for op in ops {
        match *op {
            Op::Connect(i) => {
                w.revive_nsqd(&addr(i));
                w.consumer.add_nsqd(w.now, &addr(i)).unwrap();
                w.settle();
            }
            Op::Disconnect(i) => {
                w.kill_nsqd(&addr(i));
            }
            Op::Messages(i, n) => {
                w.nsqds.get_mut(&addr(i)).unwrap().push(n, 1);
                w.settle();
            }
            Op::FinishSome(n) => {
                for _ in 0..n.min(w.held.len()) {
                    let (c, m) = w.held.remove(0);
                    let _ = w.consumer.finish(w.now, c, &m.id);
                }
                w.settle();
            }
            Op::AnswerOne(i, fin) => {
                if !w.held.is_empty() {
                    let (c, m) = w.held.remove(i % w.held.len());
                    if fin {
                        let _ = w.consumer.finish(w.now, c, &m.id);
                    } else {
                        let _ = w
                            .consumer
                            .requeue(w.now, c, &m, Some(Duration::ZERO), false);
                    }
                    w.settle();
                }
            }
            Op::Requeue { backoff, count } => {
                for _ in 0..count.min(w.held.len()) {
                    let (c, m) = w.held.remove(0);
                    let _ = w
                        .consumer
                        .requeue(w.now, c, &m, Some(Duration::ZERO), backoff);
                }
                w.settle();
            }
            Op::Advance(ms) => w.run_for(Duration::from_millis(ms)),
            Op::SetMaxInFlight(n) => w.set_max_in_flight(n),
            Op::Handler(h) => {
                w.handler = [
                    Handler::Finish,
                    Handler::Hold,
                    Handler::RequeueBackoff,
                    Handler::RequeueNoBackoff,
                    Handler::FinishAfter(Duration::from_millis(300)),
                    Handler::FinishAfter(Duration::from_secs(70)),
                ][usize::from(h)];
            }
        }
        check(&w)?;
    }

    // Steady phase: every nsqd up and connected, steady traffic, only successes.
    w.handler = Handler::Finish;
    w.finish_held();
    for i in 0..MAX_RDY.len() {
        w.revive_nsqd(&addr(i));
        w.nsqds.get_mut(&addr(i)).unwrap().steady = 3;
        w.consumer.add_nsqd(w.now, &addr(i)).unwrap();
    }
    let m = w.consumer.max_in_flight().max(1);
    w.set_max_in_flight(m);
    // Reconnect delays (<= 60 s) and backoff recovery (windows <= 120 s, level <= 7) fit here.
    w.run_for(Duration::from_secs(1500));
    check(&w)?;
    prop_assert_eq!(
        w.consumer.backoff_level(),
        0,
        "backoff recovers with only successes"
    );
    prop_assert_eq!(w.consumer.stats().connections, MAX_RDY.len());
    let from = w.now;
    w.run_for(Duration::from_secs(600));
    check(&w)?;
    let n = MAX_RDY.len() as u32;
    let reachable: u32 = if m >= n {
        // Full throttle: everything handed out up to the servers' caps.
        MAX_RDY.iter().map(|&c| c.min(m)).sum::<u32>().min(m)
    } else {
        m
    };
    if m >= n {
        prop_assert_eq!(w.server_total_rdy(), reachable, "full throttle");
    }
    // Every nsqd is served within seconds (go-nsq: up to 30 s and more): a turn is 2 s, an
    // idle holder passes after 1 s, and the traffic tick is 1 s.
    for i in 0..MAX_RDY.len() {
        let gap = w.max_service_gap(&addr(i), from);
        prop_assert!(
            gap <= Duration::from_secs(12),
            "{} unserved for {gap:?}",
            addr(i)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        // Deterministic in CI; change the seed locally to explore.
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_c0de),
        ..ProptestConfig::default()
    })]

    #[test]
    fn rdy_invariants_and_liveness(
        max_in_flight in prop_oneof![Just(1u32), Just(2), Just(4), Just(7), Just(50)],
        seed in any::<u64>(),
        latency_ms in prop_oneof![Just(0u64), Just(1), Just(40)],
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run(max_in_flight, seed, latency_ms, &ops)?;
    }
}
