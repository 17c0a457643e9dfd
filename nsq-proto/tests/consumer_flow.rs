//! Flow control beyond go-nsq, in virtual time: max_in_flight bounds the messages in flight
//! (as the servers count them) and not only RDY, no nsqd waits long for RDY, a message given
//! up on counts as a success for backoff, a burst of rejected answers backs off, and
//! `auto_touch` keeps messages of handlers slower than msg_timeout alive.
//!
//! The simulated servers check after every command and every delivery that the messages in
//! flight over all of them never exceed max_in_flight (`World::violations`).

mod consumer_common;

use consumer_common::{Cmd, Handler, World, addr, config};
use nsq_proto::consumer::{ConsumerConfig, ConsumerEvent};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn world(n: usize, config: ConsumerConfig, steady: usize, handler: Handler) -> World {
    let mut w = World::new(config, 11);
    w.handler = handler;
    for i in 0..n {
        w.add_nsqd(&addr(i), 2500);
        w.nsqds.get_mut(&addr(i)).unwrap().steady = steady;
    }
    for i in 0..n {
        w.consumer.add_nsqd(w.now, &addr(i)).unwrap();
    }
    w.settle();
    w
}

/// Every grant of RDY (0 -> more) each server saw, in order, with the address.
fn grants(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    for c in w.conns.values() {
        let mut last = 0;
        for cmd in &c.log {
            if let Cmd::Rdy(n) = cmd {
                if last == 0 && *n > 0 {
                    out.push(c.addr.clone());
                }
                last = *n;
            }
        }
    }
    out
}

fn first_served(w: &World, from: Instant) -> BTreeMap<String, Duration> {
    w.served_at
        .iter()
        .filter_map(|(a, ts)| {
            ts.iter()
                .find(|t| **t >= from)
                .map(|t| (a.clone(), *t - from))
        })
        .collect()
}

#[test]
fn rdy_moves_only_out_of_answered_budget() {
    // The measurement of the issue: 3 nsqd, max_in_flight 2, every nsqd busy, handlers slow
    // enough that RDY rotates while a message is in its handler.
    let mut w = world(3, config(2), 5, Handler::FinishAfter(MS * 700));
    w.run_for(SEC * 120);
    w.assert_clean();
    assert_eq!(w.max_total_in_flight_seen, 2, "the budget is used");
    assert!(grants(&w).len() > 20, "RDY rotated: {:?}", grants(&w).len());
    // The same with one nsqd more than max_in_flight and with several in flight per nsqd.
    for (n, m) in [(4, 3), (2, 5), (5, 1)] {
        let mut w = world(n, config(m), 8, Handler::FinishAfter(MS * 350));
        w.run_for(SEC * 60);
        w.assert_clean();
        assert_eq!(w.max_total_in_flight_seen, m, "n={n} m={m}");
    }
}

#[test]
fn shares_of_held_messages_come_back_when_they_are_answered() {
    // One nsqd alone gets all of max_in_flight 4, and the application holds 3 of its
    // messages when a second nsqd joins: the plan splits what is left (RDY 1 each, A's 3
    // held keep their shares). When A's messages are answered, their shares come back:
    // RDY 2 each again.
    let mut w = World::new(config(4), 11);
    w.handler = Handler::Hold;
    w.add_nsqd(&addr(0), 2500);
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 1);
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    w.run_for(SEC);
    assert_eq!(w.held.len(), 3);
    assert_eq!(w.consumer_total_rdy(), 4);
    w.add_nsqd(&addr(1), 2500);
    w.nsqds.get_mut(&addr(1)).unwrap().steady = 10;
    w.handler = Handler::Finish;
    w.consumer.add_nsqd(w.now, &addr(1)).unwrap();
    w.run_for(SEC * 6);
    assert_eq!(
        w.consumer_total_rdy(),
        2,
        "A's 3 held leave 1 share for each"
    );
    // Two of A's are answered: their shares come back.
    for (conn, m) in w.held.drain(..2).collect::<Vec<_>>() {
        w.consumer.finish(w.now, conn, &m.id).unwrap();
    }
    w.settle();
    w.run_for(SEC);
    assert_eq!(w.consumer_total_rdy(), 4);
    w.finish_held();
    w.run_for(SEC);
    assert_eq!(w.consumer_total_rdy(), 4);
    w.assert_clean();
}

#[test]
fn lowering_max_in_flight_under_load_never_adds_to_what_is_in_flight() {
    let mut w = world(3, config(9), 10, Handler::FinishAfter(SEC * 2));
    w.run_for(SEC * 10);
    assert_eq!(w.server_total_in_flight(), 9);
    // Down to 2 while 9 are in handlers: nothing more is delivered until fewer than 2 are in
    // flight (the World checks it at every step), then the bound is 2.
    w.set_max_in_flight(2);
    w.run_for(SEC * 30);
    w.assert_clean();
    assert!(w.server_total_in_flight() <= 2);
    w.set_max_in_flight(6);
    w.run_for(SEC * 30);
    w.assert_clean();
    assert_eq!(w.server_total_in_flight(), 6);
}

#[test]
fn a_joining_connection_waits_for_answered_budget() {
    // Two nsqd share max_in_flight 4 with every message in a long handler; a third joins:
    // its bootstrap RDY 1 comes out of a share freed by an answer, not on top.
    let mut w = world(2, config(4), 10, Handler::FinishAfter(SEC * 3));
    w.run_for(SEC * 8);
    assert_eq!(w.server_total_in_flight(), 4);
    w.add_nsqd(&addr(2), 2500);
    w.nsqds.get_mut(&addr(2)).unwrap().steady = 10;
    w.consumer.add_nsqd(w.now, &addr(2)).unwrap();
    w.run_for(SEC * 30);
    w.assert_clean();
    assert!(w.received_per_addr.get(&addr(2)).is_some_and(|&n| n > 0));
}

#[test]
fn every_nsqd_is_served_within_seconds_in_a_fair_rotation() {
    // Default config, max_in_flight 2, 3 busy nsqd (go-nsq: the third waits 30 s).
    let handler = MS * 10;
    let mut w = world(3, config(2), 500, Handler::FinishAfter(handler));
    let from = w.now;
    w.run_for(SEC * 300);
    w.assert_clean();
    let first = first_served(&w, from);
    assert_eq!(first.len(), 3, "{first:?}");
    for (a, t) in &first {
        assert!(*t <= SEC * 3, "{a} first served after {t:?}");
    }
    for i in 0..3 {
        let gap = w.max_service_gap(&addr(i), from);
        assert!(gap <= SEC * 3, "{} waited {gap:?}", addr(i));
    }
    // Fair: turns go round, nobody gets two turns while another waits for one.
    let turns = grants(&w);
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for a in &turns {
        *count.entry(a).or_default() += 1;
    }
    let (lo, hi) = (
        count.values().min().copied().unwrap(),
        count.values().max().copied().unwrap(),
    );
    assert!(hi - lo <= 1, "turns {count:?}");
    // Fair in service too: with turns ending one at a time, `low_rdy_timeout / 2` apart,
    // every nsqd holds RDY about as long as the others.
    let served: Vec<u64> = (0..3).map(|i| w.received_per_addr[&addr(i)]).collect();
    let (lo, hi) = (*served.iter().min().unwrap(), *served.iter().max().unwrap());
    assert!(hi * 10 <= lo * 11, "messages per nsqd {served:?}");
    // Busy-handler throughput: the two slots stay busy through the rotation.
    let ideal = 2.0 * 300.0 / handler.as_secs_f64();
    let done = w.consumer.stats().finished as f64;
    assert!(done >= 0.97 * ideal, "{done} of {ideal}");
}

#[test]
fn idle_nsqd_pass_their_turn_quickly() {
    // max_in_flight 1, four nsqd of which only one has messages: the busy one is served
    // again within the idle timeouts of the others.
    let mut w = world(4, config(1), 0, Handler::FinishAfter(MS * 5));
    w.nsqds.get_mut(&addr(2)).unwrap().steady = 20;
    let from = w.now;
    w.run_for(SEC * 120);
    w.assert_clean();
    let gap = w.max_service_gap(&addr(2), from);
    assert!(gap <= SEC * 4, "the busy nsqd waited {gap:?}");
}

#[test]
fn give_up_counts_as_success_for_backoff() {
    let cfg = ConsumerConfig {
        max_attempts: 3,
        ..config(5)
    };
    let mut w = world(1, cfg, 0, Handler::RequeueBackoff);
    w.run_for(SEC * 6);
    // One message failing every attempt: three failures, then it is given up on.
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(SEC * 60);
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::GaveUp { .. })),
        1
    );
    // Three failures raised the level to 3, the give-up lowered it (go-nsq does the same).
    assert_eq!(w.consumer.backoff_level(), 2);
    // Two more messages past max_attempts: two more successes, full speed again.
    w.nsqds.get_mut(&addr(0)).unwrap().push(2, 9);
    w.run_for(SEC * 60);
    assert_eq!(w.consumer.backoff_level(), 0);
    assert_eq!(w.server_total_rdy(), 5);
    w.assert_clean();
}

#[test]
fn a_burst_of_rejected_answers_backs_off() {
    let mut w = world(1, config(10), 0, Handler::Hold);
    w.run_for(SEC * 6);
    assert_eq!(w.server_total_rdy(), 10);
    // The server times messages out sooner than it told the client (a handler slower than
    // msg_timeout, seen from the client as answers rejected with E_FIN_FAILED).
    w.nsqds.get_mut(&addr(0)).unwrap().msg_timeout = SEC;
    w.nsqds.get_mut(&addr(0)).unwrap().push(2, 1);
    w.run_for(MS * 1500);
    w.finish_held();
    // Two rejected answers are not a burst.
    let rejected = |w: &World| w.count_events(|e| matches!(e, ConsumerEvent::ServerError { .. }));
    assert_eq!(rejected(&w), 2);
    assert_eq!(w.consumer.backoff_level(), 0);
    w.run_for(SEC * 2);
    w.nsqds.get_mut(&addr(0)).unwrap().push(3, 1);
    w.run_for(MS * 1500);
    w.finish_held();
    assert_eq!(rejected(&w), 5);
    assert_eq!(
        w.consumer.backoff_level(),
        1,
        "three within a second back off"
    );
    assert!(w.consumer.in_backoff_window());
    assert_eq!(w.server_total_rdy(), 0);
    w.assert_clean();
}

fn auto_touch_world(
    limit: Option<Duration>,
    max_msg_timeout: Duration,
    handler: Duration,
) -> World {
    let mut cfg = config(1);
    cfg.connection.auto_touch = limit;
    let mut w = World::new(cfg, 5);
    w.handler = Handler::FinishAfter(handler);
    w.add_nsqd(&addr(0), 2500);
    let nsqd = w.nsqds.get_mut(&addr(0)).unwrap();
    nsqd.msg_timeout = SEC;
    nsqd.max_msg_timeout = max_msg_timeout;
    w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
    w.settle();
    w
}

fn count(w: &World, f: impl Fn(&Cmd) -> bool) -> usize {
    w.conns
        .values()
        .flat_map(|c| &c.log)
        .filter(|c| f(c))
        .count()
}

#[test]
fn auto_touch_keeps_a_slow_handler_s_message() {
    // msg_timeout 1 s, a 3.5 s handler: one delivery, no redelivery, finished once.
    let mut w = auto_touch_world(Some(SEC * 60), SEC * 900, MS * 3500);
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(SEC * 10);
    w.assert_clean();
    assert_eq!(w.nsqds[&addr(0)].delivered, 1);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Fin(_))), 1);
    // Touched every 750 ms (a quarter of msg_timeout ahead of the deadline) while handled.
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 4);
    assert_eq!(
        w.count_events(|e| matches!(
            e,
            ConsumerEvent::MessageExpired { .. } | ConsumerEvent::ServerError { .. }
        )),
        0
    );
    assert_eq!(w.consumer.stats().finished, 1);
}

#[test]
fn without_auto_touch_an_expired_message_comes_back_once_its_handler_lets_go() {
    let mut w = auto_touch_world(None, SEC * 900, MS * 3500);
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(SEC * 3);
    // nsqd timed it out at 1 s, but the handler still holds it: with max_in_flight 1 nothing
    // more comes (go-nsq would hand the redelivery to a second handler at once).
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::MessageExpired { .. })),
        1
    );
    assert_eq!(w.nsqds[&addr(0)].delivered, 1);
    // The handler answers at 3.5 s (too late: E_FIN_FAILED); then it is redelivered.
    w.run_for(SEC);
    assert!(w.nsqds[&addr(0)].delivered >= 2);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 0);
}

#[test]
fn auto_touch_stops_at_its_limit_and_at_max_msg_timeout() {
    // Limit 2 s: touched while in flight less than 2 s, then left to time out.
    let mut w = auto_touch_world(Some(SEC * 2), SEC * 900, SEC * 30);
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(MS * 2400);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 2);
    assert_eq!(w.nsqds[&addr(0)].delivered, 1);
    // Its deadline (2.5 s) passes: nsqd requeues it, and redelivers it once the handler (30 s)
    // lets it go: until then it holds the one share of max_in_flight.
    w.run_for(MS * 200);
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::MessageExpired { .. })),
        1
    );
    assert_eq!(w.nsqds[&addr(0)].delivered, 1);
    w.run_for(SEC * 28);
    assert_eq!(w.nsqds[&addr(0)].delivered, 2);
    // nsqd's max_msg_timeout 2 s: a touch cannot extend past delivery + 2 s.
    let mut w = auto_touch_world(Some(SEC * 60), SEC * 2, SEC * 30);
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(MS * 2100);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 2);
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::MessageExpired { .. })),
        1
    );
    w.assert_clean();
}

#[test]
fn auto_touch_follows_explicit_touches_and_stops_at_the_answer() {
    let mut w = auto_touch_world(Some(SEC * 60), SEC * 900, SEC * 30);
    w.handler = Handler::Hold;
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.settle();
    let (conn, m) = w.held[0].clone();
    w.run_for(MS * 500);
    // An explicit touch at 0.5 s moves the deadline to 1.5 s: the next auto-touch is at
    // 1.25 s, not 0.75 s.
    w.consumer.touch(w.now, conn, &m.id).unwrap();
    w.run_for(MS * 700);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 1);
    w.run_for(MS * 100);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 2);
    w.finish_held();
    w.run_for(SEC * 10);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 2);
    assert!(w.consumer.poll_timeout().is_some());
    w.assert_clean();
}

#[test]
fn a_lowered_rdy_keeps_what_nsqd_may_still_send() {
    // The servers' bytes take 20 ms to arrive: when a second nsqd joins and the first one's
    // RDY goes from 2 to 1, a message the first sent under RDY 2 may still be on the wire.
    // The joining connection's RDY waits for it (or for the settle time), so the servers
    // never have 3 in flight.
    for seed in 0..20 {
        let mut w = World::new(config(2), seed);
        w.latency = MS * 20;
        w.handler = Handler::FinishAfter(MS * 30);
        for i in 0..2 {
            w.add_nsqd(&addr(i), 2500);
            w.nsqds.get_mut(&addr(i)).unwrap().steady = 10;
        }
        w.consumer.add_nsqd(w.now, &addr(0)).unwrap();
        w.run_for(MS * (1000 + 37 * seed as u32));
        w.consumer.add_nsqd(w.now, &addr(1)).unwrap();
        w.run_for(SEC * 20);
        w.assert_clean();
        assert_eq!(w.max_total_in_flight_seen, 2);
        assert!(w.received_per_addr.get(&addr(1)).is_some_and(|&n| n > 0));
    }
}

/// RDY commands every server read, in total.
fn rdy_commands(w: &World) -> usize {
    w.conns
        .values()
        .map(|c| c.log.iter().filter(|c| matches!(c, Cmd::Rdy(_))).count())
        .sum()
}

#[test]
fn turns_are_sized_so_every_busy_nsqd_is_served_within_the_bound() {
    // Issue 39: 40 nsqd that always have messages, max_in_flight 4, handlers of 20 ms. With
    // 2 s turns ending 0.5 s apart the last nsqd was first served after about 20 s; turns
    // sized to low_rdy_max_wait (10 s) bring every one round within it.
    let mut w = world(40, config(4), 50, Handler::FinishAfter(MS * 20));
    let from = w.now;
    w.run_for(SEC * 60);
    w.assert_clean();
    let first = first_served(&w, from);
    assert_eq!(first.len(), 40, "{first:?}");
    for (a, t) in &first {
        assert!(*t < SEC * 10, "{a} first served after {t:?}");
    }
    for i in 0..40 {
        let gap = w.max_service_gap(&addr(i), from);
        assert!(gap < SEC * 10, "{} waited {gap:?}", addr(i));
    }
    // Every turn delivers at least one message: at most two RDY per message (RDY 1 and 0).
    let received: u64 = w.received_per_addr.values().sum();
    assert!(
        rdy_commands(&w) as u64 <= 2 * received,
        "{} RDY for {received} messages",
        rdy_commands(&w)
    );
    // The handlers stay busy: about 4 x 60 s / 20 ms, less the turn changes.
    assert!(received >= 9_000, "{received} messages");
}

#[test]
fn low_rdy_max_wait_is_the_bound_turns_are_sized_for() {
    // The same world with a bound of 40 s: turns are longer (fewer RDY commands), and the
    // last nsqd is first served later than with 10 s, within 40 s.
    let run = |max_wait: Duration| {
        let cfg = ConsumerConfig {
            low_rdy_max_wait: max_wait,
            ..config(4)
        };
        let mut w = world(40, cfg, 50, Handler::FinishAfter(MS * 20));
        let from = w.now;
        w.run_for(SEC * 60);
        w.assert_clean();
        let first = first_served(&w, from);
        assert_eq!(first.len(), 40, "{first:?}");
        let last = first.values().copied().max().unwrap_or_default();
        (last, rdy_commands(&w))
    };
    let (last_10, rdy_10) = run(SEC * 10);
    let (last_40, rdy_40) = run(SEC * 40);
    assert!(
        last_40 < SEC * 40 && last_40 > last_10,
        "{last_10:?} {last_40:?}"
    );
    assert!(rdy_40 < rdy_10, "{rdy_10} {rdy_40}");
}

#[test]
fn a_message_nsqd_sends_too_late_goes_back_unseen_and_keeps_its_attempts() {
    // Five busy nsqd, max_in_flight 1, max_attempts 1 (a message is tried once). After the
    // handshakes the servers' bytes start taking 300 ms (nsqd descheduled on a busy machine,
    // say): a holder whose next message takes longer than its idle wait gives its RDY up,
    // the settle time (its handshake's round trips) passes, another nsqd gets the seat, and
    // then the message nsqd wrote before it read RDY 0 arrives. It would be the second in
    // the application: it goes back to nsqd at once. nsqd counts that delivery; the consumer
    // does not, so when it comes back it is handed out as a first attempt, not given up on.
    let mut cfg = config(1);
    cfg.max_attempts = 1;
    let mut w = world(5, cfg, 5, Handler::FinishAfter(MS * 20));
    w.latency = MS * 300;
    w.run_for(SEC * 10);
    let early = w.consumer.stats();
    assert!(early.returned >= 1, "{early:?}");
    let late_arrivals = w.violations.len();
    // Each connection that saw one waits that long from then on: no more arrive late.
    w.run_for(SEC * 50);
    let stats = w.consumer.stats();
    assert_eq!(stats.returned, early.returned, "{stats:?}");
    assert_eq!(w.violations.len(), late_arrivals, "{:#?}", w.violations);
    // Each one sent back was delivered again, by nsqd's count a second attempt.
    let reqs = w
        .conns
        .values()
        .flat_map(|c| &c.log)
        .filter(|c| matches!(c, Cmd::Req(_, 0)))
        .count();
    assert_eq!(reqs as u64, stats.returned);
    assert_eq!(stats.gave_up, 0, "{stats:?}");
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::GaveUp { .. })),
        0
    );
    // The application never held two, and saw every message as its first attempt.
    let handed = w.count_events(|e| matches!(e, ConsumerEvent::Message { .. }));
    assert!(handed > 100, "{handed}");
    assert_eq!(
        w.count_events(
            |e| matches!(e, ConsumerEvent::Message { message, .. } if message.attempts != 1)
        ),
        0
    );
    // What the servers counted: a late message is one more in flight while it is on the
    // wire, and nothing else went wrong.
    assert!(
        w.violations
            .iter()
            .all(|v| v.contains("messages in flight")),
        "{:#?}",
        w.violations
    );
}

#[test]
fn auto_touch_turned_on_while_a_message_is_in_flight_keeps_it_too() {
    // A batch turns auto-touch on after its first messages arrived: they are touched as
    // later deliveries are.
    let mut w = auto_touch_world(None, SEC * 900, MS * 3500);
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(MS * 100);
    assert_eq!(w.nsqds[&addr(0)].delivered, 1);
    w.consumer.set_auto_touch(w.now, Some(SEC * 60));
    w.run_for(SEC * 10);
    w.assert_clean();
    assert_eq!(w.nsqds[&addr(0)].delivered, 1);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Fin(_))), 1);
    assert_eq!(count(&w, |c| matches!(c, Cmd::Touch(_))), 4);
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::MessageExpired { .. })),
        0
    );
    // And off again: a new message is left to its msg_timeout.
    w.consumer.set_auto_touch(w.now, None);
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(SEC * 3);
    assert_eq!(
        w.count_events(|e| matches!(e, ConsumerEvent::MessageExpired { .. })),
        1
    );
}

#[test]
fn is_full_once_the_application_holds_what_the_bound_allows() {
    let mut w = world(2, config(4), 0, Handler::Hold);
    assert!(!w.consumer.is_full(w.now), "nothing held, RDY out");
    for i in 0..2 {
        w.nsqds.get_mut(&addr(i)).unwrap().push(1, 1);
    }
    w.run_for(MS * 50);
    assert_eq!(w.held.len(), 2);
    assert!(!w.consumer.is_full(w.now), "2 of 4 held");
    for i in 0..2 {
        w.nsqds.get_mut(&addr(i)).unwrap().push(5, 1);
    }
    w.run_for(MS * 50);
    assert_eq!(w.held.len(), 4);
    assert!(
        w.consumer.is_full(w.now),
        "4 of 4 held: nothing comes before an answer"
    );
    w.finish_held();
    w.run_for(MS * 50);
    // The answers made room: the rest of the pushed messages came and are held again.
    assert_eq!(w.held.len(), 4);
    assert!(w.consumer.is_full(w.now));
    w.finish_held();
    w.run_for(MS * 50);
    // 12 pushed: the last 4.
    assert_eq!(w.held.len(), 4);
    w.finish_held();
    w.run_for(MS * 50);
    assert!(w.held.is_empty());
    assert!(!w.consumer.is_full(w.now));
    w.assert_clean();
}

#[test]
fn is_full_in_a_backoff_window_and_while_closing() {
    let mut w = world(1, config(10), 0, Handler::RequeueBackoff);
    assert!(!w.consumer.is_full(w.now));
    w.nsqds.get_mut(&addr(0)).unwrap().push(1, 1);
    w.run_for(MS * 10);
    assert!(w.consumer.in_backoff_window());
    assert!(w.consumer.is_full(w.now), "RDY 0 everywhere");
    w.consumer.close(w.now);
    assert!(w.consumer.is_full(w.now));
}
