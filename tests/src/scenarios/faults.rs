//! Faults: broker restarts, half-open brokers, heartbeats, disconnecting from an nsqd or a
//! lookupd (with stats checked against the broker).

use super::{
    Consumer, ConsumerSetup, ErrorKind, Factory, NsqdState, WAIT, addr, consumer, eventually,
    fast_config, producer, start, text,
};
use crate::{Lookupd, Nsqd, PeerInfo, Restart};
use std::collections::BTreeSet;
use std::time::Duration;

pub(super) fn broker_restart_mid_stream_loses_nothing(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    let bodies: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
    p.multi_publish(
        "restart",
        bodies.iter().map(|b| b.clone().into_bytes()).collect(),
    )
    .unwrap();
    p.close();
    let mut c = consumer(f, &nsqd, "restart", fast_config(10));
    let mut finished = BTreeSet::new();
    while finished.len() < 100 {
        let m = c.next(WAIT).unwrap();
        finished.insert(text(&*m));
        m.finish();
    }
    nsqd.restart(Restart::KeepMessages).unwrap();
    while finished.len() < 300 {
        let m = c.next(WAIT).expect("messages after the restart");
        finished.insert(text(&*m));
        m.finish();
    }
    assert_eq!(finished, bodies.into_iter().collect());
    c.stop();
}

pub(super) fn half_open_broker_is_detected_and_reconnected(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let mut config = fast_config(1);
    config.connection.heartbeat_interval = Some(Duration::from_secs(1));
    // A message nsqd hands to the dead connection comes back after msg_timeout.
    config.connection.msg_timeout = Some(Duration::from_secs(1));
    let mut c = consumer(f, &nsqd, "halfopen", config);
    assert!(eventually(WAIT, || c.stats().connections == 1));
    nsqd.pause();
    // No heartbeat for 2 x heartbeat_interval: the connection is presumed dead.
    assert!(eventually(Duration::from_secs(5), || c.stats().connections == 0));
    nsqd.resume();
    assert!(eventually(WAIT, || {
        let clients = nsqd.clients();
        clients.len() == 1 && clients[0].rdy > 0
    }));
    nsqd.publish("halfopen", b"back");
    let Some(m) = c.next(WAIT) else {
        let lines: Vec<String> = nsqd
            .commands()
            .into_iter()
            .map(|r| format!("{:?} {:?} {}", r.at, r.client, r.line))
            .collect();
        panic!(
            "a message after reconnecting {lines:#?} {:?} {:?}",
            nsqd.clients(),
            c.stats()
        );
    };
    assert_eq!(m.body(), b"back");
    m.finish();
    c.stop();
}

pub(super) fn idle_connection_is_kept_alive_by_heartbeats(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let mut config = fast_config(1);
    config.connection.heartbeat_interval = Some(Duration::from_secs(1));
    let mut c = consumer(f, &nsqd, "idle", config);
    assert!(eventually(WAIT, || nsqd.clients().len() == 1));
    let id = nsqd.clients()[0].id;
    std::thread::sleep(Duration::from_millis(3500));
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 1);
    assert_eq!(
        clients[0].id, id,
        "the connection must not have been replaced"
    );
    assert!(
        nsqd.commands_of(id).iter().any(|r| r.line == "NOP"),
        "heartbeats answered"
    );
    nsqd.publish("idle", b"still here");
    c.next(WAIT).expect("a message").finish();
    c.stop();
}

/// The consumer's stats for `nsqd` agree with what the broker says of its one client.
fn stats_match_broker(c: &dyn Consumer, nsqd: &Nsqd) -> bool {
    let stats = c.stats();
    let Some(e) = stats.nsqd(&addr(nsqd)) else {
        return false;
    };
    let clients = nsqd.clients();
    let [client] = clients.as_slice() else {
        return false;
    };
    e.state == NsqdState::Ready
        && e.configured
        && e.reconnects == 0
        && i64::from(e.rdy) == client.rdy
        && i64::try_from(e.in_flight) == Ok(client.in_flight)
        && (e.received, e.finished, e.requeued)
            == (client.delivered, client.finished, client.requeued)
}

pub(super) fn disconnect_from_nsqd_drains_it_and_never_reconnects(f: &dyn Factory) {
    let (nsqd_a, nsqd_b) = (start(Nsqd::builder()), start(Nsqd::builder()));
    for i in 0..20 {
        nsqd_a.publish("disc", format!("a{i}").as_bytes());
        nsqd_b.publish("disc", format!("b{i}").as_bytes());
    }
    let setup = ConsumerSetup {
        options: Some(fast_config(4)),
        nsqd: vec![addr(&nsqd_a), addr(&nsqd_b)],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("disc", "ch", &setup).unwrap();
    // From A: one requeued, one held unanswered, the others finished; from B: finished.
    let (mut requeued, mut held, mut finished_a, mut from_b) = (false, None, 0, 0);
    while held.is_none() || from_b < 3 {
        let m = c.next(WAIT).expect("messages from both brokers");
        if m.nsqd_address() != addr(&nsqd_a) {
            from_b += 1;
            m.finish();
        } else if !requeued {
            requeued = true;
            m.requeue_without_backoff(Some(Duration::ZERO));
        } else if held.is_none() {
            held = Some(m);
        } else {
            finished_a += 1;
            m.finish();
        }
    }
    // Nothing is taken for nsqd_a while: both brokers fill their RDY and the numbers settle.
    assert!(
        eventually(WAIT, || stats_match_broker(&*c, &nsqd_a)
            && stats_match_broker(&*c, &nsqd_b)),
        "{:#?}\nA: {:#?}\nB: {:#?}",
        c.stats(),
        nsqd_a.clients(),
        nsqd_b.clients()
    );
    let st = c.stats();
    assert_eq!(
        st.in_flight,
        st.nsqd.iter().map(|n| n.in_flight).sum::<usize>()
    );
    assert_eq!((st.connections, st.total_rdy, st.reconnects), (2, 4, 0));

    let client = nsqd_a.clients()[0].id;
    c.disconnect_from_nsqd(&addr(&nsqd_a)).unwrap();
    // CLS reaches A, which drains: still connected, since the held message is in flight.
    assert!(eventually(WAIT, || nsqd_a
        .commands_of(client)
        .iter()
        .any(|r| r.name() == "CLS")));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_a))
        .is_some_and(|e| {
            e.state == NsqdState::Closing && e.rdy == 0 && !e.configured
        })));
    assert_eq!(nsqd_a.clients().len(), 1, "draining");
    held.expect("a held message").finish();
    finished_a += 1;
    // Everything still queued is answered; A's connection then closes.
    assert!(eventually(WAIT, || {
        while let Some(m) = c.next(Duration::from_millis(20)) {
            if m.nsqd_address() == addr(&nsqd_a) {
                finished_a += 1;
            }
            m.finish();
        }
        nsqd_a.clients().is_empty()
    }));
    // Its in-flight messages were answered after the CLS, none left to time out.
    let log = nsqd_a.commands_of(client);
    let cls = log.iter().position(|r| r.name() == "CLS").unwrap();
    assert!(log[cls..].iter().any(|r| r.name() == "FIN"), "{log:#?}");
    // A's share of max_in_flight is B's now.
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_b))
        .is_some_and(|e| e.rdy == 4)));
    assert!(eventually(WAIT, || nsqd_b
        .clients()
        .first()
        .is_some_and(|cl| cl.rdy == 4)));
    let ch = nsqd_a.channel("disc", "ch").unwrap();
    assert_eq!((ch.in_flight, ch.timed_out), (0, 0));
    assert_eq!((ch.finished, ch.requeued), (finished_a, 1));
    // Never reconnected (the reconnect delay is 50..200 ms), though A has messages.
    for _ in 0..3 {
        nsqd_a.publish("disc", b"late");
    }
    assert!(nsqd_a.channel("disc", "ch").unwrap().depth >= 3);
    assert!(!eventually(Duration::from_secs(1), || !nsqd_a
        .clients()
        .is_empty()));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_a))
        .is_none()));
    assert_eq!(c.stats().connections, 1);
    // Messages keep flowing, all from B, until the one published last (however long the
    // machine takes to bring it), and after it.
    nsqd_b.publish("disc", b"after");
    let mut got_after = false;
    while let Some(m) = c.next(if got_after {
        Duration::from_millis(300)
    } else {
        WAIT
    }) {
        assert_eq!(m.nsqd_address(), addr(&nsqd_b));
        got_after |= m.body() == b"after";
        m.finish();
    }
    assert!(got_after);
    // Refusals.
    let err = c.disconnect_from_nsqd(&addr(&nsqd_a)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("not configured"), "{err}");
    let err = c.disconnect_from_nsqd("not an address").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{err}");
    assert_eq!(c.stop().unanswered, 0);
}

pub(super) fn disconnect_from_lookupd_stops_discovery_through_it(f: &dyn Factory) {
    let (l1, l2) = (Lookupd::start().unwrap(), Lookupd::start().unwrap());
    let nsqd_a = start(Nsqd::builder().lookupd(&l1));
    let nsqd_b = start(Nsqd::builder().lookupd(&l2));
    nsqd_a.publish("dlk", b"a");
    nsqd_b.publish("dlk", b"b");
    let (l1_addr, l2_addr) = (l1.http_address().to_string(), l2.http_address().to_string());
    let setup = ConsumerSetup {
        options: Some(fast_config(4)),
        lookupd: vec![l1_addr.clone(), l2_addr.clone()],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("dlk", "ch", &setup).unwrap();
    for _ in 0..2 {
        c.next(WAIT).expect("a message from each broker").finish();
    }
    assert!(eventually(WAIT, || c.stats().connections == 2));
    c.handle().disconnect_from_lookupd(&l1_addr).unwrap();
    // Refusals: the last lookupd, one not configured, nsqd_a discovered nsqd.
    let err = c.disconnect_from_lookupd(&l2_addr).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("only one"), "{err}");
    let err = c.disconnect_from_lookupd(&l1_addr).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("not configured"), "{err}");
    let err = c.disconnect_from_nsqd(&addr(&nsqd_b)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Consumer, "{err}");
    assert!(err.message.contains("discovered"), "{err}");
    // A, which only L1 lists, stays connected until its connection ends ...
    assert_eq!(nsqd_a.clients().len(), 1);
    nsqd_a.drop_connections();
    // ... and is never reconnected, over several polls of L2 (every 200 ms).
    assert!(!eventually(Duration::from_secs(1), || !nsqd_a
        .clients()
        .is_empty()));
    // A poll of L1 already on its way when it was disconnected may have landed since; none
    // after this.
    let polls = l1.requests().len();
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_a))
        .is_none()));
    // B, still listed by L2, comes back when its connection drops.
    nsqd_b.drop_connections();
    assert!(eventually(WAIT, || nsqd_b.clients().len() == 1));
    assert!(eventually(WAIT, || c
        .stats()
        .nsqd(&addr(&nsqd_b))
        .is_some_and(
            |e| e.reconnects == 1 && e.state == NsqdState::Ready
        )));
    nsqd_a.publish("dlk", b"a2");
    nsqd_b.publish("dlk", b"b2");
    let m = c.next(WAIT).expect("B's message");
    assert_eq!(m.body(), b"b2");
    m.finish();
    assert!(c.next(Duration::from_millis(300)).is_none(), "A is gone");
    // Over all of the above (well over two poll intervals), L1 was not polled.
    assert_eq!(l1.requests().len(), polls, "L1 is not polled any more");
    assert_eq!(c.stop().unanswered, 0);
}

// ------------------------------------------------------------------ flow control (issue 12)

/// A reconnect is a connection made again to an nsqd the consumer was connected to before,
/// in lookupd mode too: an nsqd restarted between two lookupd polls (still listed), and one
/// restarted as nsqd does it (it leaves nsqlookupd while it is down, so a poll forgets it)
/// and listed again, each count one.
pub(super) fn a_restart_found_through_lookupd_counts_as_a_reconnect(f: &dyn Factory) {
    let lookupd = Lookupd::start().unwrap();
    // Registered by hand, so the test can take it out of lookupd while it is down.
    let nsqd = start(Nsqd::builder());
    let info = PeerInfo::local(nsqd.tcp_address().port(), 0);
    let register = || {
        let id = lookupd.add_producer(info.clone());
        lookupd.register(id, "relisted", None);
        id
    };
    let id = register();
    nsqd.publish("relisted", b"first");
    let setup = ConsumerSetup {
        options: Some(fast_config(1)),
        lookupd: vec![lookupd.http_address().to_string()],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("relisted", "ch", &setup).unwrap();
    c.next(WAIT).expect("discovered through lookupd").finish();
    assert_eq!(c.stats().reconnects, 0);

    // Between two polls: still listed, so the next poll reconnects.
    nsqd.restart(Restart::KeepMessages).unwrap();
    assert!(
        eventually(WAIT, || {
            let s = c.stats();
            s.reconnects == 1 && s.connections == 1
        }),
        "{:?}",
        c.stats()
    );

    // As nsqd: out of lookupd first, then down; forgotten; then back and listed again.
    assert!(lookupd.remove_producer(id));
    nsqd.stop_accepting();
    nsqd.drop_connections();
    assert!(
        eventually(WAIT, || c.stats().nsqd.is_empty()),
        "forgotten: {:?}; the broker's clients: {:?}",
        c.stats(),
        nsqd.clients()
    );
    nsqd.start_accepting().unwrap();
    register();
    assert!(
        eventually(WAIT, || {
            let s = c.stats();
            s.reconnects == 2 && s.connections == 1
        }),
        "{:?}",
        c.stats()
    );
    assert_eq!(
        c.stats().nsqd[0].reconnects,
        2,
        "remembered while forgotten"
    );
    nsqd.publish("relisted", b"after");
    // "first" again before it, if its FIN had not reached the broker when it restarted.
    loop {
        let m = c.next(WAIT).expect("consumed after the restart");
        let after = m.body() == b"after";
        m.finish();
        if after {
            break;
        }
    }
    c.stop();
}
