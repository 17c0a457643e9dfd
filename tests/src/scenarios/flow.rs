//! Flow control: backoff (RDY 0 then 1), RDY spread over brokers, max_in_flight at runtime
//! and starvation, in-flight bounds across brokers, give-up as backoff success,
//! auto-touch, bursts of rejected answers.

use super::{
    ClientEvent, ConsumerOptions, ConsumerSetup, ErrorKind, EventStream, Factory, Message,
    NextEvent, NsqdState, WAIT, addr, consumer, eventually, fast_config, setup, start,
};
use crate::Nsqd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub(super) fn backoff_is_rdy_0_then_rdy_1(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("backoff", b"fail once");
    let mut c = consumer(
        f,
        &nsqd,
        "backoff",
        ConsumerOptions {
            backoff_multiplier: Some(Duration::from_millis(100)),
            ..fast_config(5)
        },
    );
    let m = c.next(WAIT).unwrap();
    assert!(eventually(WAIT, || c.stats().total_rdy == 5));
    let failed_at = Instant::now();
    m.requeue(Some(Duration::ZERO));
    // Redelivered through the RDY 1 probe after the backoff window.
    let m = c.next(WAIT).expect("redelivery after the backoff window");
    assert!(failed_at.elapsed() >= Duration::from_millis(100));
    assert_eq!(m.attempts(), 2);
    m.finish();
    let lines = || -> Vec<String> { nsqd.commands().into_iter().map(|r| r.line).collect() };
    assert!(eventually(WAIT, || lines()
        .iter()
        .filter(|l| l.starts_with("FIN"))
        .count()
        == 1));
    let lines = lines();
    let req = lines
        .iter()
        .position(|l| l.starts_with("REQ"))
        .unwrap_or_else(|| panic!("REQ: {lines:?}"));
    let rdy0 = lines
        .iter()
        .position(|l| l == "RDY 0")
        .unwrap_or_else(|| panic!("RDY 0: {lines:?}"));
    assert!(rdy0 < req, "RDY 0 must precede the REQ: {lines:?}");
    let probe = lines[req..]
        .iter()
        .position(|l| l == "RDY 1")
        .unwrap_or_else(|| panic!("RDY 1 after the backoff window: {lines:?}"));
    let fin = lines.iter().position(|l| l.starts_with("FIN")).unwrap();
    assert!(req + probe < fin, "{lines:?}");
    // Success ends the backoff: full RDY again.
    assert!(eventually(WAIT, || c.stats().backoff_level == 0
        && c.stats().total_rdy == 5));
    c.stop();
}

pub(super) fn rdy_is_spread_over_three_brokers(f: &dyn Factory) {
    let brokers: Vec<Nsqd> = (0..3).map(|_| start(Nsqd::builder())).collect();
    let mut setup = ConsumerSetup {
        options: Some(ConsumerOptions {
            rdy_redistribute_interval: Some(Duration::from_millis(200)),
            ..fast_config(9)
        }),
        ..ConsumerSetup::default()
    };
    for n in &brokers {
        n.publish("spread", b"warm-up");
        setup.nsqd.push(addr(n));
    }
    let mut c = f.consumer("spread", "ch", &setup).unwrap();
    for _ in 0..3 {
        c.next(WAIT).expect("warm-up message").finish();
    }
    let spread = || {
        brokers.iter().all(|n| {
            let clients = n.clients();
            clients.len() == 1 && clients[0].rdy == 3
        })
    };
    assert!(eventually(WAIT, spread), "RDY 3 on each broker");
    assert!(eventually(WAIT, || c.stats().total_rdy == 9));
    c.stop();
}

/// Above 16 nsqd the driver writes the per-nsqd rows of `stats()` at most every 100 ms (the
/// totals every round): after the last message of a burst the rows still catch up, without
/// waiting for other traffic.
pub(super) fn stats_rows_catch_up_over_many_brokers(f: &dyn Factory) {
    let brokers: Vec<Nsqd> = (0..20).map(|_| start(Nsqd::builder())).collect();
    let mut setup = ConsumerSetup {
        options: Some(fast_config(40)),
        ..ConsumerSetup::default()
    };
    for n in &brokers {
        n.publish("rows", b"one");
        setup.nsqd.push(addr(n));
    }
    let mut c = f.consumer("rows", "ch", &setup).unwrap();
    for _ in 0..brokers.len() {
        c.next(WAIT).expect("one message from each broker").finish();
    }
    // The rows catch up within a fraction of a second, with no other traffic.
    let caught_up = || {
        let stats = c.stats();
        stats.nsqd.len() == 20
            && brokers.iter().all(|n| {
                let clients = n.clients();
                stats.nsqd(&addr(n)).is_some_and(|row| {
                    row.state == NsqdState::Ready
                        && row.received == 1
                        && row.finished == 1
                        && clients.len() == 1
                        && i64::from(row.rdy) == clients[0].rdy
                })
            })
    };
    assert!(
        eventually(Duration::from_millis(900), caught_up),
        "rows: {:?}",
        c.stats().nsqd
    );
    assert_eq!(c.stop().unanswered, 0);
}

pub(super) fn max_in_flight_changes_at_runtime_and_starvation_is_reported(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("mif", b"warm-up");
    let mut c = consumer(f, &nsqd, "mif", fast_config(2));
    // The core starts each connection at RDY 1 and raises it after the first message.
    c.next(WAIT).expect("warm-up message").finish();
    let nsqd = &nsqd;
    let rdy = |n: i64| {
        move || {
            let clients = nsqd.clients();
            clients.len() == 1 && clients[0].rdy == n
        }
    };
    assert!(eventually(WAIT, rdy(2)));
    assert!(!c.is_starved());
    c.set_max_in_flight(0);
    assert!(eventually(WAIT, rdy(0)), "max_in_flight 0 pauses");
    nsqd.publish("mif", b"a");
    nsqd.publish("mif", b"b");
    assert!(c.next(Duration::from_millis(200)).is_none());
    c.handle().set_max_in_flight(2);
    assert!(eventually(WAIT, rdy(2)));
    // Both held: 2 in flight of RDY 2, so a batching handler should flush now.
    let a = c.next(WAIT).unwrap();
    let b = c.next(WAIT).unwrap();
    assert!(eventually(WAIT, || c.is_starved()));
    a.finish();
    b.finish();
    assert!(eventually(WAIT, || !c.is_starved()));
    assert_eq!(c.stop().unanswered, 0);
}

/// The largest total of messages in flight over `logs` (one broker's
/// [`Nsqd::in_flight_log`] each), merged by time, ignoring excursions above `limit` shorter
/// than `grace`: brokers are separate servers, so an answer read by one broker's thread a
/// little after another broker read a RDY the client sent later makes a brief, meaningless
/// overlap; a client that hands RDY on while a message is in its handler overlaps for the
/// rest of that handler.
fn peak_in_flight(logs: &[Vec<(Instant, usize)>], limit: usize, grace: Duration) -> usize {
    let mut events: Vec<(Instant, usize, usize)> = logs
        .iter()
        .enumerate()
        .flat_map(|(b, log)| log.iter().map(move |&(t, n)| (t, b, n)))
        .collect();
    events.sort_by_key(|&(t, b, _)| (t, b));
    let mut current = vec![0usize; logs.len()];
    let mut peak = 0;
    let mut above_since: Option<(Instant, usize)> = None;
    for (t, b, n) in events {
        current[b] = n;
        let total: usize = current.iter().sum();
        match above_since {
            Some((since, high)) if total <= limit => {
                if t.duration_since(since) >= grace {
                    peak = peak.max(high);
                }
                above_since = None;
            }
            Some((since, high)) => above_since = Some((since, high.max(total))),
            None if total > limit => above_since = Some((t, total)),
            None => peak = peak.max(total),
        }
    }
    if let Some((_, high)) = above_since {
        peak = peak.max(high);
    }
    peak
}

/// max_in_flight 2 over three busy brokers, every message held 1 s by the application:
/// the brokers never have more than 2 in flight together (go-nsq: 3, whenever RDY rotates
/// away from a message still in its handler), the application never holds more than 2, and
/// every broker is served within seconds with the default rotation (go-nsq: the third waits
/// 30 s).
///
/// The brokers are three servers whose threads read what the client sent when they are
/// scheduled: on a busy machine one may read a FIN 100 ms or more after another read the
/// RDY the client sent after it. Overlaps up to 250 ms are taken for that; a client that
/// hands RDY on while a message is held overlaps for the rest of the hold (up to 1 s, held
/// long enough that such overlaps are not mistaken for noise: with 300 ms held and 50 ms of
/// grace, noise failed the test at load averages of 4-6).
pub(super) fn in_flight_stays_within_max_in_flight_across_three_brokers(f: &dyn Factory) {
    let brokers: Vec<Nsqd> = (0..3).map(|_| start(Nsqd::builder())).collect();
    for n in &brokers {
        for i in 0..40 {
            n.publish("bound", format!("{i}").as_bytes());
        }
    }
    let setup = ConsumerSetup {
        options: Some(fast_config(2)),
        nsqd: brokers.iter().map(addr).collect(),
        ..ConsumerSetup::default()
    };
    let started = Instant::now();
    let mut c = f.consumer("bound", "ch", &setup).unwrap();
    let hold = Duration::from_secs(1);
    let mut held: Vec<(Instant, Box<dyn Message>)> = Vec::new();
    let mut most_held = 0;
    let mut first_served: std::collections::BTreeMap<String, Duration> =
        std::collections::BTreeMap::new();
    let until = started + Duration::from_secs(9);
    while Instant::now() < until {
        let now = Instant::now();
        let (due, keep): (Vec<_>, Vec<_>) = held.into_iter().partition(|(t, _)| *t <= now);
        held = keep;
        for (_, m) in due {
            m.finish();
        }
        if let Some(m) = c.next(Duration::from_millis(5)) {
            first_served
                .entry(m.nsqd_address())
                .or_insert_with(|| started.elapsed());
            held.push((Instant::now() + hold, m));
            most_held = most_held.max(held.len());
        }
    }
    for (_, m) in held {
        m.finish();
    }
    c.stop();
    assert!(
        most_held <= 2,
        "the application held {most_held} messages at once"
    );
    let logs: Vec<Vec<(Instant, usize)>> = brokers
        .iter()
        .map(|n| n.in_flight_log("bound", "ch"))
        .collect();
    let peak = peak_in_flight(&logs, 2, Duration::from_millis(250));
    assert_eq!(peak, 2, "messages in flight across the brokers");
    assert_eq!(
        first_served.len(),
        3,
        "every broker served: {first_served:?}"
    );
    for (a, t) in &first_served {
        // The default turn is 2 s; the goal of issue 12 is 10 s.
        assert!(*t <= Duration::from_secs(8), "{a} first served after {t:?}");
    }
}

/// max_attempts 2, every delivery failed with backoff: two failures raise the level to 2,
/// the third delivery is given up on, and that counts as a success (level 1), as in go-nsq.
pub(super) fn give_up_counts_as_success_for_backoff(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("giveup-backoff", b"always fails");
    let gave_up = Arc::new(AtomicU32::new(0));
    let g = gave_up.clone();
    let setup = ConsumerSetup {
        on_give_up: Some(Arc::new(move |_, _| {
            g.fetch_add(1, Ordering::SeqCst);
        })),
        ..setup(
            &nsqd,
            ConsumerOptions {
                max_attempts: Some(2),
                backoff_multiplier: Some(Duration::from_millis(50)),
                ..fast_config(3)
            },
        )
    };
    let mut c = f.consumer("giveup-backoff", "ch", &setup).unwrap();
    for attempt in 1..=2 {
        let m = c.next(WAIT).expect("a delivery");
        assert_eq!(m.attempts(), attempt);
        m.requeue(Some(Duration::ZERO));
    }
    assert!(eventually(WAIT, || gave_up.load(Ordering::SeqCst) == 1));
    assert!(
        eventually(WAIT, || c.stats().backoff_level == 1),
        "the give-up lowers the level: {:?}",
        c.stats()
    );
    // A success brings full speed back. One that lands inside the backoff window does not
    // count (as in go-nsq): the give-up's FIN can free the RDY 1 slot for the next message
    // before the new window's RDY 0 reaches nsqd. A few successes are enough.
    let mut full_speed = false;
    for _ in 0..10 {
        nsqd.publish("giveup-backoff", b"fine");
        c.next(WAIT).expect("a delivery").finish();
        if eventually(Duration::from_secs(1), || {
            c.stats().backoff_level == 0 && c.stats().total_rdy == 3
        }) {
            full_speed = true;
            break;
        }
    }
    assert!(full_speed, "successes end the backoff: {:?}", c.stats());
    c.stop();
}

/// msg_timeout 1 s, a message held 3.5 s, auto_touch on: delivered once, never timed out,
/// finished once, without the application touching it.
pub(super) fn auto_touch_keeps_a_slow_handler_s_message(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("slow", b"take your time");
    let mut options = fast_config(1);
    // The client touches a quarter of msg_timeout before its deadline: at 1 s, 250 ms were
    // not always enough on a busy machine for the TOUCH to reach the broker in time (its
    // deadline runs from the delivery, the client's from the read). At 3 s: 750 ms.
    options.connection.msg_timeout = Some(Duration::from_secs(3));
    options.connection.auto_touch = Some(Duration::from_secs(60));
    let mut c = consumer(f, &nsqd, "slow", options);
    let m = c.next(WAIT).expect("a message");
    // Over three timeouts: touched at about 2.25, 4.5, 6.75 and 9 s.
    std::thread::sleep(Duration::from_secs(10));
    m.finish();
    assert!(eventually(WAIT, || nsqd
        .channel("slow", "ch")
        .is_some_and(|ch| ch.finished == 1)));
    let ch = nsqd.channel("slow", "ch").unwrap();
    assert_eq!(
        (ch.timed_out, ch.requeued, ch.in_flight),
        (0, 0, 0),
        "{ch:?}"
    );
    assert!(
        c.next(Duration::from_millis(300)).is_none(),
        "no redelivery"
    );
    let touches = nsqd
        .commands()
        .iter()
        .filter(|r| r.line.starts_with("TOUCH"))
        .count();
    assert!((3..=6).contains(&touches), "{touches} TOUCH");
    c.stop();
}

/// Three answers nsqd rejects (the messages had timed out) make a burst: the consumer backs
/// off as if its handler had failed.
pub(super) fn a_burst_of_rejected_answers_backs_off(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..3 {
        nsqd.publish("rejected", format!("{i}").as_bytes());
    }
    let mut c = consumer(f, &nsqd, "rejected", fast_config(3));
    let held: Vec<Box<dyn Message>> = (0..3).map(|_| c.next(WAIT).expect("a message")).collect();
    assert_eq!(c.stats().backoff_level, 0);
    // No RDY, so the broker cannot hand them out again (nsqd keeps a message's id across
    // redeliveries, so a FIN would finish the new delivery).
    c.set_max_in_flight(0);
    assert!(eventually(WAIT, || nsqd
        .clients()
        .iter()
        .all(|c| c.rdy == 0)));
    // The broker times them out early (the client still counts them as in flight).
    nsqd.time_out_in_flight();
    assert!(eventually(WAIT, || nsqd
        .channel("rejected", "ch")
        .is_some_and(|ch| ch.timed_out == 3)));
    for m in held {
        m.finish();
    }
    assert!(
        eventually(WAIT, || c.stats().backoff_level == 1),
        "{:?}",
        c.stats()
    );
    let fin_failed = || {
        nsqd.commands()
            .iter()
            .filter(|r| r.line.starts_with("FIN") && r.error.is_some())
            .count()
    };
    assert_eq!(fin_failed(), 3);
    c.stop();
}

/// `connect_to_nsqd` resolves with the first connection's outcome, as go-nsq's
/// `ConnectToNSQD` returns the dial's error: a closed port and nsqd's HTTP port are errors
/// that say what they are; a live nsqd is `Ok` once subscribed.
pub(super) fn connect_to_nsqd_says_whether_it_connected(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().http(true));
    let options = fast_config(1);
    let setup = ConsumerSetup {
        options: Some(options),
        ..ConsumerSetup::default()
    };
    let c = f.consumer("cn", "ch", &setup).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let e = c.connect_to_nsqd(&closed).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connect, "{e}");
    assert!(e.message.contains(&closed), "{e}");
    let http = nsqd.http_address().unwrap().to_string();
    let e = c.connect_to_nsqd(&http).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Misconfigured(super::Problem::HttpPort),
        "{e}"
    );
    assert!(e.message.contains("HTTP"), "{e}");
    c.connect_to_nsqd(&addr(&nsqd)).unwrap();
    assert_eq!(c.stats().connections, 1, "subscribed when it returns");
    // Already connected: refused at once, as go-nsq's ErrAlreadyConnected, nothing changed.
    let e = c.connect_to_nsqd(&addr(&nsqd)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::AlreadyConnected, "{e}");
    assert!(e.message.contains(&addr(&nsqd)), "{e}");
    assert_eq!(c.stats().connections, 1);
    nsqd.publish("cn", b"hi");
    let mut c = c;
    let m = c.next(WAIT).expect("a message");
    m.finish();
    c.stop();
}

/// Reads `events` until one satisfies `want` (returned with everything read before it), or
/// panics after [`WAIT`] with what was read.
fn wait_event(
    events: &mut dyn EventStream,
    want: impl Fn(&ClientEvent) -> bool,
) -> (ClientEvent, Vec<ClientEvent>) {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.next(left) {
            NextEvent::Event(e) if want(&e) => return (e, seen),
            NextEvent::Event(e) => seen.push(e),
            other => panic!("{other:?} before the event wanted; read: {seen:?}"),
        }
    }
}

/// The event stream tells connections made and failed, backoff entered and left, messages
/// given up on and starvation, and ends when the consumer stops.
pub(super) fn events_tell_connections_backoff_and_give_ups(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let options = ConsumerOptions {
        max_attempts: Some(2),
        backoff_multiplier: Some(Duration::from_millis(20)),
        ..fast_config(1)
    };
    let mut c = f
        .consumer(
            "ev",
            "ch",
            &ConsumerSetup {
                options: Some(options),
                ..ConsumerSetup::default()
            },
        )
        .unwrap();
    let mut events = c.events();
    let a = addr(&nsqd);
    c.connect_to_nsqd(&a).unwrap();
    wait_event(&mut *events, |e| {
        *e == ClientEvent::Connected { nsqd: a.clone() }
    });
    // An nsqd that is down: a disconnect that is retried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    assert!(c.connect_to_nsqd(&closed).is_err());
    wait_event(&mut *events, |e| {
        *e == ClientEvent::Disconnected {
            nsqd: closed.clone(),
            retrying: true,
            misconfigured: None,
        }
    });
    c.disconnect_from_nsqd(&closed).unwrap();
    // A message held: starved (all of RDY 1 in flight). Failed twice: backoff up to level 2,
    // then given up on (a success for backoff), then a success: full speed.
    nsqd.publish("ev", b"poison");
    let m = c.next(WAIT).expect("a message");
    wait_event(&mut *events, |e| *e == ClientEvent::Starved(true));
    m.requeue(Some(Duration::ZERO));
    wait_event(&mut *events, |e| *e == ClientEvent::Backoff { level: 1 });
    let m = c.next(WAIT).expect("redelivered");
    assert_eq!(m.attempts(), 2);
    m.requeue(Some(Duration::ZERO));
    wait_event(&mut *events, |e| *e == ClientEvent::Backoff { level: 2 });
    let (_, seen) = wait_event(&mut *events, |e| matches!(e, ClientEvent::GaveUp { .. }));
    assert!(!seen.contains(&ClientEvent::BackoffEnded), "{seen:?}");
    // Successes lower the level once the backoff window is over (one that lands inside a
    // window does not count, as in go-nsq): a few are enough.
    let mut ended = false;
    for _ in 0..20 {
        nsqd.publish("ev", b"fine");
        let m = c.next(WAIT).expect("a message after the give-up");
        m.finish();
        let deadline = Instant::now() + Duration::from_millis(500);
        while let NextEvent::Event(e) =
            events.next(deadline.saturating_duration_since(Instant::now()))
        {
            ended |= e == ClientEvent::BackoffEnded;
        }
        if ended {
            break;
        }
    }
    assert!(ended, "backoff must end after successes");
    // A second stream sees what happens after it was made; both end with the consumer.
    let mut late = c.events();
    c.stop();
    for stream in [&mut events, &mut late] {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match stream.next(left) {
                NextEvent::Ended => break,
                NextEvent::Event(_) => {}
                NextEvent::Timeout => panic!("the stream must end with the consumer"),
            }
        }
    }
}

/// The builder's `connect` resolves once every nsqd given is connected, or with the first
/// error: unreachable (`Connect`) or misconfigured.
pub(super) fn builder_connect_waits_for_every_nsqd(f: &dyn Factory) {
    let one = start(Nsqd::builder().http(true));
    let two = start(Nsqd::builder());
    let setup = |nsqd: Vec<String>| ConsumerSetup {
        options: Some(fast_config(2)),
        nsqd,
        ..ConsumerSetup::default()
    };
    let mut c = f
        .consumer_connect("bc", "ch", &setup(vec![addr(&one), addr(&two)]))
        .unwrap();
    assert_eq!(c.stats().connections, 2, "both subscribed when it returns");
    c.stop();
    let http = one.http_address().unwrap().to_string();
    let e = f
        .consumer_connect("bc", "ch", &setup(vec![addr(&two), http]))
        .err()
        .expect("an HTTP port must fail");
    assert_eq!(
        e.kind,
        ErrorKind::Misconfigured(super::Problem::HttpPort),
        "{e}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let e = f
        .consumer_connect("bc", "ch", &setup(vec![closed]))
        .err()
        .expect("a closed port must fail");
    assert_eq!(e.kind, ErrorKind::Connect, "{e}");
    // Invalid input is the same error as build's.
    let e = f
        .consumer_connect("bad topic!", "ch", &setup(vec![addr(&two)]))
        .err()
        .expect("an invalid topic must fail");
    assert_eq!(e.kind, ErrorKind::InvalidName, "{e}");
}
