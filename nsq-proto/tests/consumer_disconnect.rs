//! Deterministic simulations (virtual time, fake nsqd and lookupds) of go-nsq's
//! `DisconnectFromNSQD` / `DisconnectFromNSQLookupd` on the Consumer
//! (`disconnect_from_nsqd`, `disconnect_from_lookupd`) and of the per-nsqd stats.

mod consumer_common;

use consumer_common::{Cmd, Handler, LookupdMode, World, addr, config};
use nsq_proto::consumer::{
    Consumer, ConsumerConfig, ConsumerError, ConsumerEvent, ConsumerStats, NsqdState, NsqdStats,
};
use nsq_proto::driver::Action;
use nsq_proto::{Channel, Topic};
use std::time::{Duration, Instant};

const SEC: Duration = Duration::from_secs(1);
/// Longer than one lookupd poll period (60 s + up to 30% jitter): at least one poll happens.
const ROUND: Duration = Duration::from_secs(80);
const L1: &str = "10.1.0.1:4161";
const L2: &str = "10.1.0.2:4161";
const L3: &str = "10.1.0.3:4161";

/// `n` directly added nsqd, all connected and ready.
fn direct_world(n: usize, max_in_flight: u32) -> World {
    let mut w = World::new(config(max_in_flight), 7);
    for i in 0..n {
        w.add_nsqd(&addr(i), 2500);
        w.consumer.add_nsqd(w.now, &addr(i)).unwrap();
    }
    // Past the RDY 1 bootstrap of new connections.
    w.run_for(SEC * 10);
    w
}

fn nsqd<'a>(s: &'a ConsumerStats, a: &str) -> Option<&'a NsqdStats> {
    s.nsqd.iter().find(|n| n.address == a)
}

fn server_rdy(w: &World, a: &str) -> u32 {
    w.conn_of(a).map_or(0, |id| w.conns[&id].rdy())
}

fn closed_events(w: &World, a: &str) -> usize {
    w.count_events(|e| matches!(e, ConsumerEvent::ConnectionClosed { addr, .. } if addr == a))
}

#[test]
fn disconnect_from_nsqd_sends_cls_moves_rdy_drains_and_never_reconnects() {
    let mut w = direct_world(2, 10);
    assert_eq!((server_rdy(&w, &addr(0)), server_rdy(&w, &addr(1))), (5, 5));
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 1);
    w.settle();
    assert_eq!(w.held.len(), 3);
    let gone = w.conn_of(&addr(0)).unwrap();

    w.consumer.disconnect_from_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    // CLS went out, and the server stopped delivering to it. Its share moves to addr(1) (as
    // far as the messages still unanswered on addr(0) leave room in max_in_flight) once what
    // the server may have sent before reading the CLS has had time to arrive.
    assert_eq!(w.conns[&gone].log.last(), Some(&Cmd::Cls));
    assert_eq!(server_rdy(&w, &addr(1)), 5);
    w.run_for(SEC);
    assert!(server_rdy(&w, &addr(1)) > 5);
    assert_eq!(w.consumer.rdy(gone), 0);
    // Still open: three messages are in flight on it, and they can be answered.
    assert!(w.conns.contains_key(&gone));
    let s = w.consumer.stats();
    let entry = nsqd(&s, &addr(0)).unwrap();
    assert_eq!(
        (entry.state, entry.in_flight, entry.rdy, entry.configured),
        (NsqdState::Closing, 3, 0, false)
    );
    assert_eq!((s.connections, s.in_flight), (1, 3));
    assert_eq!(s.total_rdy, u64::from(server_rdy(&w, &addr(1))));
    assert_eq!(closed_events(&w, &addr(0)), 0);

    // Answering them closes the connection (the server said CLOSE_WAIT and nothing is left).
    let held = std::mem::take(&mut w.held);
    let (last, first) = held.split_last().unwrap();
    for (c, m) in first {
        w.consumer.finish(w.now, *c, &m.id).unwrap();
    }
    w.consumer
        .requeue(w.now, last.0, &last.1, None, false)
        .unwrap();
    w.settle();
    assert!(!w.conns.contains_key(&gone), "the socket was closed");
    assert_eq!(closed_events(&w, &addr(0)), 1);
    assert_eq!(server_rdy(&w, &addr(1)), 10, "all of max_in_flight");
    // Two FINs and one REQ reached the server before the close: only the REQ'd message is
    // back in the queue.
    assert_eq!(w.nsqds[&addr(0)].queue.len(), 1);
    assert_eq!(w.consumer.stats().known_nsqd, 1);

    // Never reconnected, however long we wait; the other nsqd keeps delivering.
    w.handler = Handler::Finish;
    w.nsqds.get_mut(&addr(1)).unwrap().push(20, 1);
    w.run_for(SEC * 3600);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 1);
    assert_eq!(w.received_per_addr[&addr(1)], 20);
    let s = w.consumer.stats();
    assert_eq!(s.nsqd.len(), 1);
    assert_eq!((s.connections, s.total_rdy, s.reconnects), (1, 10, 0));
    w.assert_clean();

    // It can be added again.
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.run_for(SEC * 10);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 2);
    assert_eq!((server_rdy(&w, &addr(0)), server_rdy(&w, &addr(1))), (5, 5));
    w.assert_clean();
}

#[test]
fn disconnect_with_nothing_in_flight_closes_after_close_wait() {
    let mut w = direct_world(3, 9);
    let gone = w.conn_of(&addr(2)).unwrap();
    w.consumer.disconnect_from_nsqd(w.now, &addr(2)).unwrap();
    w.settle();
    assert!(!w.conns.contains_key(&gone));
    assert_eq!(w.server_total_rdy(), 9);
    assert_eq!(
        (server_rdy(&w, &addr(0)), server_rdy(&w, &addr(1))),
        (5, 4),
        "the remainder is handed out round-robin"
    );
    w.run_for(SEC * 600);
    assert_eq!(w.nsqds[&addr(2)].connects.len(), 1);
    assert_eq!(w.consumer.stats().known_nsqd, 2);
    w.assert_clean();
}

#[test]
fn unanswered_messages_are_left_to_nsqd_after_the_drain_timeout() {
    let mut w = direct_world(2, 4);
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(2, 1);
    w.settle();
    let gone = w.conn_of(&addr(0)).unwrap();
    w.consumer.disconnect_from_nsqd(w.now, &addr(0)).unwrap();
    w.run_for(SEC * 120);
    assert!(!w.conns.contains_key(&gone));
    // The server requeued both when the socket closed; nothing was lost, nothing reconnects.
    assert_eq!(w.nsqds[&addr(0)].queue.len(), 2);
    assert!(w.events.iter().any(|e| matches!(
        e,
        ConsumerEvent::ConnectionClosed { addr: a, reason, .. }
            if *a == addr(0) && reason.contains("2 left unanswered")
    )));
    // Answers for them now are refused (the connection is gone).
    let (c, m) = w.held.remove(0);
    assert_eq!(
        w.consumer.finish(w.now, c, &m.id),
        Err(ConsumerError::UnknownConnection(c))
    );
    w.run_for(SEC * 600);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 1);
    w.assert_clean();
}

#[test]
fn disconnect_cancels_a_pending_reconnect() {
    let mut w = direct_world(2, 4);
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    let s = w.consumer.stats();
    let entry = nsqd(&s, &addr(0)).unwrap();
    assert_eq!(entry.state, NsqdState::Disconnected);
    assert!(entry.reconnect_at.is_some_and(|t| t > w.now));
    w.consumer.disconnect_from_nsqd(w.now, &addr(0)).unwrap();
    assert_eq!(w.consumer.stats().known_nsqd, 1);
    w.run_for(SEC * 600);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 1);
    assert_eq!(w.server_total_rdy(), 4);
    w.assert_clean();
}

#[test]
fn disconnect_while_connecting_or_handshaking() {
    #[allow(
        clippy::disallowed_methods,
        reason = "origin of virtual time in a test"
    )]
    let now = Instant::now();
    let mut c = Consumer::new(
        ConsumerConfig::default(),
        Topic::new("t").unwrap(),
        Channel::new("c").unwrap(),
        1,
    );
    // TCP connect in progress: abandoned at once.
    c.add_nsqd(now, "h:4150").unwrap();
    let Some(Action::Connect { conn, .. }) = c.poll_action() else {
        panic!("expected Connect");
    };
    c.disconnect_from_nsqd(now, "h:4150").unwrap();
    assert_eq!(c.poll_action(), Some(Action::Disconnect { conn }));
    assert_eq!(c.poll_action(), None);
    assert!(matches!(
        c.poll_event(),
        Some(ConsumerEvent::ConnectionClosed { conn: closed, .. }) if closed == conn
    ));
    assert_eq!(c.stats().known_nsqd, 0);
    assert_eq!(c.poll_timeout(), None, "no reconnect is scheduled");

    // Handshake in progress (magic and IDENTIFY queued): closed at once as well, no CLS.
    c.add_nsqd(now, "h:4151").unwrap();
    let Some(Action::Connect { conn, .. }) = c.poll_action() else {
        panic!("expected Connect");
    };
    c.handle_connected(now, conn);
    let actions: Vec<Action> = std::iter::from_fn(|| c.poll_action()).collect();
    assert!(matches!(actions.as_slice(), [Action::Transmit { .. }]));
    c.disconnect_from_nsqd(now, "h:4151").unwrap();
    let actions: Vec<Action> = std::iter::from_fn(|| c.poll_action()).collect();
    assert_eq!(actions, vec![Action::Disconnect { conn }]);
    assert_eq!(c.stats().known_nsqd, 0);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn disconnect_from_nsqd_errors_change_nothing() {
    let mut w = direct_world(1, 4);
    w.add_nsqd(&addr(1), 2500);
    w.add_fake_lookupd(L1, &[&addr(1)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC * 10);
    let before = w.consumer.stats();
    assert_eq!(before.connections, 2);
    let now = w.now;
    let c = &mut w.consumer;
    assert_eq!(
        c.disconnect_from_nsqd(now, "nope"),
        Err(ConsumerError::InvalidAddress("nope".into()))
    );
    assert_eq!(
        c.disconnect_from_nsqd(now, "10.9.9.9:4150"),
        Err(ConsumerError::NsqdNotConfigured("10.9.9.9:4150".into()))
    );
    assert_eq!(
        c.disconnect_from_nsqd(now, &addr(1)),
        Err(ConsumerError::NsqdDiscovered(addr(1)))
    );
    assert_eq!(c.poll_action(), None);
    assert_eq!(c.stats(), before);
    assert_eq!(
        ConsumerError::NsqdDiscovered(addr(1)).to_string(),
        "nsqd 10.0.0.2:4150 was discovered through nsqlookupd, not added directly"
    );

    // The address may carry spaces, like add_nsqd's; disconnecting twice is refused.
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.settle();
    w.consumer
        .disconnect_from_nsqd(w.now, &format!(" {} ", addr(0)))
        .unwrap();
    w.settle();
    assert_eq!(
        w.consumer.disconnect_from_nsqd(w.now, &addr(0)),
        Err(ConsumerError::NsqdNotConfigured(addr(0))),
        "draining, and no longer configured"
    );
    w.finish_held();
    assert_eq!(
        w.consumer.disconnect_from_nsqd(w.now, &addr(0)),
        Err(ConsumerError::NsqdNotConfigured(addr(0)))
    );
    w.consumer.close(w.now);
    assert_eq!(
        w.consumer.disconnect_from_nsqd(w.now, &addr(1)),
        Err(ConsumerError::Closing)
    );
    assert_eq!(
        w.consumer.disconnect_from_lookupd(w.now, L1),
        Err(ConsumerError::Closing)
    );
    w.assert_clean();
}

#[test]
fn disconnected_nsqd_also_listed_by_a_lookupd_comes_back_through_it() {
    let mut w = direct_world(1, 4);
    w.add_fake_lookupd(L1, &[&addr(0)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC * 10);
    w.consumer.disconnect_from_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    assert_eq!(w.consumer.stats().connections, 0);
    // The next lookupd answer lists it: connected again, now as a discovered nsqd.
    w.run_for(ROUND);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 2);
    let s = w.consumer.stats();
    let entry = nsqd(&s, &addr(0)).unwrap();
    assert_eq!((entry.state, entry.configured), (NsqdState::Ready, false));
    assert_eq!(
        w.consumer.disconnect_from_nsqd(w.now, &addr(0)),
        Err(ConsumerError::NsqdDiscovered(addr(0)))
    );
    w.assert_clean();
}

#[test]
fn in_backoff_the_probe_moves_off_a_disconnected_nsqd() {
    let mut w = direct_world(2, 4);
    w.handler = Handler::RequeueBackoff;
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.settle();
    assert_eq!(w.consumer.backoff_level(), 1);
    // Let the window end: one connection gets RDY 1 to test the water (and holds the
    // redelivered message if it is addr(0)).
    w.handler = Handler::Hold;
    w.run_for(SEC * 3);
    assert!(!w.consumer.in_backoff_window());
    assert_eq!(w.server_total_rdy(), 1);
    let probe = usize::from(server_rdy(&w, &addr(0)) != 1);
    w.consumer
        .disconnect_from_nsqd(w.now, &addr(probe))
        .unwrap();
    w.settle();
    assert_eq!(server_rdy(&w, &addr(1 - probe)), 1, "the probe moved");
    w.handler = Handler::Finish;
    w.finish_held();
    w.nsqds.get_mut(&addr(1 - probe)).unwrap().push(5, 1);
    w.run_for(SEC * 30);
    assert_eq!(w.consumer.backoff_level(), 0);
    assert_eq!(w.server_total_rdy(), 4);
    w.assert_clean();
}

fn two_lookupds() -> World {
    let mut w = World::new(config(6), 11);
    for i in 0..4 {
        w.add_nsqd(&addr(i), 2500);
    }
    w.add_fake_lookupd(L1, &[&addr(0), &addr(1)]);
    w.add_fake_lookupd(L2, &[&addr(1), &addr(2)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.consumer
        .add_lookupd(w.now, &format!("http://{L2}"))
        .unwrap();
    w.run_for(SEC * 10);
    assert_eq!(w.consumer.stats().connections, 3);
    w
}

#[test]
fn disconnect_from_lookupd_stops_its_polls_and_forgets_what_only_it_listed() {
    let mut w = two_lookupds();
    let queries = w.lookupds[L1].queries;
    // Any spelling add_lookupd accepts names it.
    w.consumer
        .disconnect_from_lookupd(w.now, &format!("http://{L1}/"))
        .unwrap();
    w.run_for(ROUND * 3);
    assert_eq!(w.lookupds[L1].queries, queries, "no more polls");
    // addr(0), listed only by L1, is kept while its connection lives.
    assert_eq!(w.consumer.stats().connections, 3);
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    let s = w.consumer.stats();
    assert!(nsqd(&s, &addr(0)).is_none(), "forgotten once disconnected");
    w.run_for(ROUND * 3);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 1, "never reconnected");
    // addr(1) is still listed by L2, which lives on (its index moved: it works as before).
    w.kill_nsqd(&addr(1));
    w.revive_nsqd(&addr(1));
    w.run_for(ROUND);
    assert_eq!(w.nsqds[&addr(1)].connects.len(), 2);
    // L2 stops listing addr(2): it goes once its connection ends.
    w.lookupds.get_mut(L2).unwrap().producers = vec![addr(1)];
    w.run_for(ROUND);
    w.kill_nsqd(&addr(2));
    w.revive_nsqd(&addr(2));
    w.run_for(ROUND * 2);
    assert_eq!(w.nsqds[&addr(2)].connects.len(), 1);
    let s = w.consumer.stats();
    assert_eq!((s.connections, s.known_nsqd), (1, 1));
    // A lookupd added afterwards is tracked under its own index.
    w.add_fake_lookupd(L3, &[&addr(3)]);
    w.consumer.add_lookupd(w.now, L3).unwrap();
    w.run_for(SEC);
    assert_eq!(w.consumer.stats().known_nsqd, 2);
    w.consumer.disconnect_from_lookupd(w.now, L2).unwrap();
    w.kill_nsqd(&addr(1));
    w.revive_nsqd(&addr(1));
    w.run_for(ROUND * 2);
    assert_eq!(w.nsqds[&addr(1)].connects.len(), 2, "L2's nsqd is gone");
    w.kill_nsqd(&addr(3));
    w.revive_nsqd(&addr(3));
    w.run_for(ROUND);
    assert_eq!(w.nsqds[&addr(3)].connects.len(), 2, "L3's nsqd comes back");
    w.assert_clean();
}

#[test]
fn disconnect_from_lookupd_forgets_disconnected_nsqd_at_once_and_abandons_its_query() {
    let mut w = two_lookupds();
    // addr(0) drops and waits for L1 to list it again; L1 hangs.
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::Hang;
    w.kill_nsqd(&addr(0));
    w.revive_nsqd(&addr(0));
    w.run_for(ROUND);
    let (request, _) = *w
        .lookupd_requests
        .iter()
        .rev()
        .find(|(_, a)| a == L1)
        .unwrap();
    assert_eq!(w.consumer.stats().known_nsqd, 3);
    w.consumer.disconnect_from_lookupd(w.now, L1).unwrap();
    assert_eq!(
        w.consumer.poll_action(),
        Some(Action::LookupdClose { request })
    );
    assert_eq!(w.consumer.stats().known_nsqd, 2);
    // A late answer to the abandoned query is ignored.
    let body = r#"{"channels":[],"producers":[{"broadcast_address":"10.0.0.1","tcp_port":4150,"http_port":4151}]}"#;
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    w.consumer
        .handle_lookupd_input(w.now, request, resp.as_bytes());
    w.run_for(ROUND * 2);
    assert_eq!(w.nsqds[&addr(0)].connects.len(), 1);
    w.assert_clean();
}

#[test]
fn disconnect_from_lookupd_errors() {
    let mut w = two_lookupds();
    let now = w.now;
    let c = &mut w.consumer;
    assert!(matches!(
        c.disconnect_from_lookupd(now, "https://h:4161"),
        Err(ConsumerError::InvalidLookupd(_))
    ));
    assert_eq!(
        c.disconnect_from_lookupd(now, " 10.1.0.9:4161 "),
        Err(ConsumerError::LookupdNotConfigured("10.1.0.9:4161".into()))
    );
    assert_eq!(
        ConsumerError::LookupdNotConfigured("10.1.0.9:4161".into()).to_string(),
        "nsqlookupd 10.1.0.9:4161 is not configured"
    );
    // Same host and port, another path: another lookupd.
    assert_eq!(
        c.disconnect_from_lookupd(now, &format!("http://{L1}/elsewhere")),
        Err(ConsumerError::LookupdNotConfigured(format!(
            "http://{L1}/elsewhere"
        )))
    );
    c.disconnect_from_lookupd(now, L1).unwrap();
    let last = c.disconnect_from_lookupd(now, L2);
    assert!(
        matches!(last, Err(ConsumerError::LastLookupd(_))),
        "{last:?}"
    );
    assert!(
        last.unwrap_err()
            .to_string()
            .contains("only one configured")
    );
    assert_eq!(
        c.disconnect_from_lookupd(now, L1),
        Err(ConsumerError::LookupdNotConfigured(L1.into()))
    );
    // L2 still polls.
    let queries = w.lookupds[L2].queries;
    w.run_for(ROUND);
    assert!(w.lookupds[L2].queries > queries);
    w.assert_clean();
}

#[test]
fn per_nsqd_stats_match_what_the_servers_saw() {
    let mut w = direct_world(2, 8);
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 1);
    w.nsqds.get_mut(&addr(1)).unwrap().push(2, 1);
    w.settle();
    let held = std::mem::take(&mut w.held);
    // addr(0): finish 1, requeue 1, keep 1 in flight; addr(1): finish 2.
    let mut on0 = held
        .iter()
        .filter(|(conn, _)| w.conns[conn].addr == addr(0));
    let (conn, msg) = on0.next().unwrap();
    w.consumer.finish(w.now, *conn, &msg.id).unwrap();
    let (conn, msg) = on0.next().unwrap();
    w.consumer
        .requeue(w.now, *conn, msg, Some(Duration::from_secs(60)), false)
        .unwrap();
    let kept = on0.next().unwrap().clone();
    for (conn, msg) in held
        .iter()
        .filter(|(conn, _)| w.conns[conn].addr == addr(1))
    {
        w.consumer.finish(w.now, *conn, &msg.id).unwrap();
    }
    w.settle();
    let s = w.consumer.stats();
    assert_eq!(s.nsqd.len(), 2);
    for (i, e) in s.nsqd.iter().enumerate() {
        let id = w.conn_of(&addr(i)).unwrap();
        let fc = &w.conns[&id];
        assert_eq!(e.address, addr(i));
        assert_eq!(e.connection, Some(id));
        assert_eq!((e.state, e.configured), (NsqdState::Ready, true));
        assert_eq!(e.rdy, fc.rdy(), "{}", e.address);
        assert_eq!(e.in_flight, fc.in_flight.len(), "{}", e.address);
        let fins = fc.log.iter().filter(|c| matches!(c, Cmd::Fin(_))).count() as u64;
        let reqs = fc.log.iter().filter(|c| matches!(c, Cmd::Req(..))).count() as u64;
        assert_eq!(
            (e.received, e.finished, e.requeued, e.gave_up),
            (fc.delivered, fins, reqs, 0)
        );
        assert_eq!((e.reconnects, e.reconnect_at), (0, None));
    }
    // The fake nsqd ignores REQ delays: the requeued message came back at once.
    assert_eq!(
        (s.received, s.finished, s.requeued, s.in_flight),
        (6, 3, 1, 2)
    );
    // Counters survive a reconnect; the reconnect is counted.
    w.kill_nsqd(&addr(0));
    assert!(w.consumer.finish(w.now, kept.0, &kept.1.id).is_err());
    w.revive_nsqd(&addr(0));
    // The two it had in flight are redelivered on the new connection, and finished.
    w.handler = Handler::Finish;
    w.held.clear();
    w.run_for(SEC * 10);
    let s = w.consumer.stats();
    let e = nsqd(&s, &addr(0)).unwrap();
    assert_eq!(e.state, NsqdState::Ready);
    assert_eq!((e.received, e.finished, e.requeued), (6, 3, 1));
    assert_eq!((e.reconnects, s.reconnects), (1, 1));
    assert_eq!(s.in_flight, 0);

    // stats_into reuses a snapshot whatever it held before.
    let mut reused = ConsumerStats::default();
    w.consumer.stats_into(&mut reused);
    assert_eq!(reused, s);
    w.consumer.disconnect_from_nsqd(w.now, &addr(1)).unwrap();
    w.settle();
    w.consumer.stats_into(&mut reused);
    assert_eq!(reused, w.consumer.stats());
    assert_eq!(reused.nsqd.len(), 1);
    w.assert_clean();
}

#[test]
fn gave_up_counts_per_nsqd() {
    let mut w = World::new(
        ConsumerConfig {
            max_attempts: 2,
            ..config(4)
        },
        3,
    );
    w.add_nsqd(&addr(0), 2500);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.nsqds.get_mut(&addr(0)).unwrap().push(2, 3);
    w.run_for(SEC);
    let s = w.consumer.stats();
    let e = nsqd(&s, &addr(0)).unwrap();
    assert_eq!((e.received, e.gave_up, e.finished), (2, 2, 0));
    assert_eq!((s.gave_up, s.in_flight), (2, 0));
    w.assert_clean();
}

/// An nsqd whose connection shows a misconfiguration (here: it requires TLS, the consumer has
/// none) is not retried on its own, whether added directly or discovered; its stats say
/// so; the other nsqd get the whole RDY; adding it again tries once more.
#[test]
fn a_misconfigured_nsqd_is_not_retried_until_added_again() {
    use nsq_proto::Misconfiguration;
    let mut w = World::new(config(4), 7);
    w.add_nsqd(&addr(0), 2500);
    w.add_nsqd(&addr(1), 2500);
    w.nsqds.get_mut(&addr(1)).unwrap().tls_required = true;
    w.add_nsqd(&addr(2), 2500);
    w.nsqds.get_mut(&addr(2)).unwrap().tls_required = true;
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.consumer.add_nsqd(w.now, &addr(1)).unwrap();
    // addr(2) is discovered.
    w.add_fake_lookupd(L1, &[&addr(2)]);
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(SEC * 10);
    let closed: Vec<_> = w
        .events
        .iter()
        .filter_map(|e| match e {
            ConsumerEvent::ConnectionClosed {
                addr,
                retry_in,
                misconfigured,
                ..
            } => Some((addr.clone(), *retry_in, misconfigured.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        closed,
        vec![
            (addr(1), None, Some(Misconfiguration::TlsRequired)),
            (addr(2), None, Some(Misconfiguration::TlsRequired)),
        ]
    );
    // Ten minutes, ten lookupd polls that still list addr(2): one attempt each.
    w.run_for(SEC * 600);
    assert_eq!(w.nsqds[&addr(1)].connects.len(), 1);
    assert_eq!(w.nsqds[&addr(2)].connects.len(), 1);
    let s = w.consumer.stats();
    for a in [addr(1), addr(2)] {
        let entry = nsqd(&s, &a).unwrap();
        assert_eq!(entry.state, NsqdState::Misconfigured, "{a}");
        assert_eq!(entry.reconnect_at, None, "{a}");
    }
    assert_eq!(nsqd(&s, &addr(0)).unwrap().state, NsqdState::Ready);
    assert_eq!(w.server_total_rdy(), 4, "the ready nsqd has the whole RDY");
    // Fixed (here: still not), and added again: one more attempt.
    w.consumer.add_nsqd(w.now, &addr(1)).unwrap();
    w.run_for(SEC * 600);
    assert_eq!(w.nsqds[&addr(1)].connects.len(), 2);
    w.nsqds.get_mut(&addr(1)).unwrap().tls_required = false;
    w.consumer.add_nsqd(w.now, &addr(1)).unwrap();
    w.run_for(SEC * 10);
    assert_eq!(w.nsqds[&addr(1)].connects.len(), 3);
    assert_eq!(
        nsqd(&w.consumer.stats(), &addr(1)).unwrap().state,
        NsqdState::Ready
    );
    w.assert_clean();
}

/// A lookupd address that is no nsqlookupd (here: nsqd's HTTP port) is asked once, reported
/// as such, and not polled again until added again; a lookupd that is down is polled on.
#[test]
fn an_address_that_is_no_lookupd_is_not_polled_again_until_added_again() {
    use nsq_proto::consumer::LookupdError;
    let mut w = World::new(config(4), 7);
    w.add_fake_lookupd(L1, &[]);
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::NsqdHttp;
    w.add_fake_lookupd(L2, &[]);
    w.lookupds.get_mut(L2).unwrap().mode = LookupdMode::Down;
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.consumer.add_lookupd(w.now, L2).unwrap();
    w.run_for(ROUND * 5);
    assert_eq!(w.lookupds[L1].queries, 1);
    assert!(w.lookupds[L2].queries >= 5, "{}", w.lookupds[L2].queries);
    let failures: Vec<(String, bool)> = w
        .events
        .iter()
        .filter_map(|e| match e {
            ConsumerEvent::LookupdFailed { addr, error } => {
                Some((addr.clone(), error.is_misconfiguration()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        failures[0],
        (format!("http://{L1}/lookup"), true),
        "{failures:?}"
    );
    assert!(failures[1..].iter().all(|(_, m)| !m), "{failures:?}");
    assert!(w.events.iter().any(|e| matches!(
        e,
        ConsumerEvent::LookupdFailed {
            error: LookupdError::NotLookupd,
            ..
        }
    )));
    // Added again: asked once more (and still not polled after that).
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(ROUND * 3);
    assert_eq!(w.lookupds[L1].queries, 2);
    // Fixed and added again: polled on schedule from then on.
    w.lookupds.get_mut(L1).unwrap().mode = LookupdMode::Up;
    w.consumer.add_lookupd(w.now, L1).unwrap();
    w.run_for(ROUND * 3);
    assert!(w.lookupds[L1].queries >= 5, "{}", w.lookupds[L1].queries);
    w.assert_clean();
}

/// A pending reconnect reads as "scheduled" in `Debug` (an `Instant` is an opaque clock
/// value), and `reconnect_in` says how long is left.
#[test]
fn a_scheduled_reconnect_reads_well() {
    let mut w = direct_world(1, 4);
    w.kill_nsqd(&addr(0));
    let s = w.consumer.stats();
    let entry = nsqd(&s, &addr(0)).unwrap();
    let left = entry.reconnect_in(w.now).expect("a reconnect is scheduled");
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(60),
        "{left:?}"
    );
    let shown = format!("{entry:?}");
    assert!(shown.contains("reconnect_at: Some(scheduled)"), "{shown}");
    assert!(!shown.contains("tv_sec"), "{shown}");
}
