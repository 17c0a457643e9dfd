//! proptest: the in-flight table against a simple model (deliveries, FIN / REQ / TOUCH,
//! time passing): same in-flight set, same expiries, same accepted answers, and
//! `poll_timeout` is always the earliest deadline.

mod common;

use common::{connect, consumer, events, fake, t0};
use nsq_proto::test_support::{FakeNsqdConfig, exchange};
use nsq_proto::{ConnectionConfig, ConnectionError, ConnectionEvent, MessageId};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
enum Op {
    Deliver,
    Finish(usize),
    Requeue(usize),
    Touch(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Deliver),
        2 => (0usize..40).prop_map(Op::Finish),
        1 => (0usize..40).prop_map(Op::Requeue),
        2 => (0usize..40).prop_map(Op::Touch),
        3 => (0u64..4000).prop_map(Op::Advance),
    ]
}

const MSG_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_MSG_TIMEOUT: Duration = Duration::from_secs(12);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn in_flight_table_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        let start = t0();
        let mut now = start;
        let mut peer = fake(FakeNsqdConfig {
            msg_timeout_ms: MSG_TIMEOUT.as_millis() as i64,
            max_msg_timeout_ms: MAX_MSG_TIMEOUT.as_millis() as i64,
            ..FakeNsqdConfig::default()
        });
        let config = ConnectionConfig {
            read_timeout: Some(Duration::from_secs(3600)),
            ..ConnectionConfig::default()
        };
        let (mut conn, _) = connect(config, consumer(), &mut peer, now);
        conn.set_rdy(now, 2500).unwrap();
        let _ = exchange(&mut conn, &mut peer, now);

        // id -> (deadline, delivered at)
        let mut model: BTreeMap<MessageId, (Instant, Instant)> = BTreeMap::new();
        let mut all: Vec<MessageId> = Vec::new();
        for op in ops {
            match op {
                Op::Deliver => {
                    let id = peer.next_message_id();
                    peer.send_message(id, 1, b"m");
                    let ev = exchange(&mut conn, &mut peer, now);
                    prop_assert!(matches!(&ev[..], [ConnectionEvent::Message(m)] if m.id == id));
                    model.insert(id, (now + MSG_TIMEOUT, now));
                    all.push(id);
                }
                Op::Finish(i) | Op::Requeue(i) | Op::Touch(i) if all.is_empty() => {
                    let _ = i;
                }
                Op::Finish(i) => {
                    let id = all[i % all.len()];
                    let r = conn.finish(now, &id);
                    prop_assert_eq!(r.is_ok(), model.remove(&id).is_some());
                    if r.is_err() {
                        prop_assert_eq!(r, Err(ConnectionError::NotInFlight(id)));
                    }
                }
                Op::Requeue(i) => {
                    let id = all[i % all.len()];
                    let r = conn.requeue(now, &id, Duration::from_secs(1));
                    prop_assert_eq!(r.is_ok(), model.remove(&id).is_some());
                }
                Op::Touch(i) => {
                    let id = all[i % all.len()];
                    let r = conn.touch(now, &id);
                    match model.get_mut(&id) {
                        Some((deadline, delivered)) => {
                            prop_assert!(r.is_ok());
                            *deadline = (now + MSG_TIMEOUT).min(*delivered + MAX_MSG_TIMEOUT).max(*deadline);
                        }
                        None => prop_assert!(r.is_err()),
                    }
                }
                Op::Advance(ms) => {
                    now += Duration::from_millis(ms);
                    conn.handle_timeout(now);
                    let mut expired: Vec<MessageId> = events(&mut conn)
                        .into_iter()
                        .map(|e| match e {
                            ConnectionEvent::MessageExpired(id) => id,
                            other => panic!("unexpected {other:?}"),
                        })
                        .collect();
                    expired.sort();
                    let mut want: Vec<MessageId> = model
                        .iter()
                        .filter(|(_, (d, _))| *d <= now)
                        .map(|(id, _)| *id)
                        .collect();
                    want.sort();
                    model.retain(|_, (d, _)| *d > now);
                    prop_assert_eq!(expired, want);
                }
            }
            prop_assert_eq!(conn.in_flight(), model.len());
            let earliest = model.values().map(|(d, _)| *d).min();
            let timeout = conn.poll_timeout().unwrap();
            match earliest {
                Some(d) => prop_assert_eq!(timeout, d),
                None => prop_assert!(timeout > now),
            }
            // Answers sent to the server are exactly the accepted ones (no E_*_FAILED).
            let ev = exchange(&mut conn, &mut peer, now);
            prop_assert!(ev.is_empty(), "{:?}", ev);
        }
        prop_assert!(peer.failure().is_none());
    }
}
