//! Consuming: requeue and attempts, give-up, graceful stop and dropping, the handler API
//! (concurrency, panics), lookupd discovery.

use super::{
    ConsumerOptions, ConsumerSetup, Factory, HandlerFailure, Message, WAIT, consumer, eventually,
    fast_config, producer, setup, start,
};
use crate::{Lookupd, Nsqd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub(super) fn requeue_increments_attempts(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("req", b"again");
    let mut c = consumer(f, &nsqd, "req", fast_config(1));
    let m = c.next(WAIT).unwrap();
    assert_eq!(m.attempts(), 1);
    m.requeue_without_backoff(Some(Duration::ZERO));
    let m = c.next(WAIT).unwrap();
    assert_eq!(m.attempts(), 2);
    m.finish();
    c.stop();
}

pub(super) fn dropped_message_is_requeued(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("drop", b"x");
    let mut c = consumer(f, &nsqd, "drop", fast_config(1));
    let m = c.next(WAIT).unwrap();
    drop(m);
    assert!(eventually(WAIT, || nsqd
        .channel("drop", "ch")
        .is_some_and(|c| c.requeued == 1)));
    c.stop();
}

pub(super) fn gives_up_after_max_attempts(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("giveup", b"poison");
    let gave_up = Arc::new(AtomicU32::new(0));
    let g = gave_up.clone();
    let setup = ConsumerSetup {
        on_give_up: Some(Arc::new(move |attempts, body| {
            assert_eq!(attempts, 3);
            assert_eq!(body, b"poison");
            g.fetch_add(1, Ordering::SeqCst);
        })),
        ..setup(
            &nsqd,
            ConsumerOptions {
                max_attempts: Some(2),
                ..fast_config(1)
            },
        )
    };
    let mut c = f.consumer("giveup", "ch", &setup).unwrap();
    for attempt in 1..=2 {
        let m = c.next(WAIT).unwrap();
        assert_eq!(m.attempts(), attempt);
        m.requeue_without_backoff(Some(Duration::ZERO));
    }
    assert!(eventually(WAIT, || gave_up.load(Ordering::SeqCst) == 1));
    assert!(eventually(WAIT, || nsqd
        .channel("giveup", "ch")
        .is_some_and(|c| c.finished == 1)));
    assert!(c.next(Duration::from_millis(200)).is_none());
    assert_eq!(c.stats().gave_up, 1);
    c.stop();
}

pub(super) fn graceful_stop_with_messages_in_flight_loses_nothing(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..20 {
        nsqd.publish("stop", format!("s{i}").as_bytes());
    }
    let mut c = consumer(f, &nsqd, "stop", fast_config(10));
    let mut held = Vec::new();
    while held.len() < 5 {
        held.push(c.next(WAIT).unwrap());
    }
    let handle = c.handle();
    let stopper = std::thread::spawn(move || handle.stop());
    // The handler finishes its in-flight messages while the stop drains.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !stopper.is_finished(),
        "stop must wait for in-flight messages"
    );
    for m in held {
        m.finish();
    }
    // The stream ends; messages not taken yet are requeued.
    while let Some(m) = c.next(WAIT) {
        m.finish();
    }
    let report = stopper.join().unwrap();
    assert_eq!(report.unanswered, 0);
    // Every message is finished or back in the queue: none lost.
    let settled = || {
        nsqd.channel("stop", "ch").is_some_and(|ch| {
            ch.in_flight == 0 && ch.finished as usize + ch.depth + ch.deferred == 20
        })
    };
    assert!(
        eventually(WAIT, settled),
        "{:?}",
        nsqd.channel("stop", "ch")
    );
    assert!(nsqd.channel("stop", "ch").unwrap().finished >= 5);
}

pub(super) fn handler_api_runs_with_concurrency(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..50 {
        nsqd.publish("handler", format!("{i}").as_bytes());
    }
    let c = consumer(f, &nsqd, "handler", fast_config(20));
    let handle = c.handle();
    let seen = Arc::new(AtomicU32::new(0));
    let s = seen.clone();
    let runner = c.run(
        4,
        Arc::new(move |m: &dyn Message| {
            if m.attempts() == 1 && m.body()[0] == b'7' {
                return Err(HandlerFailure {
                    message: "retry me".into(),
                    backoff: false,
                    delay: Some(Duration::ZERO),
                });
            }
            s.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }),
    );
    assert!(eventually(Duration::from_secs(10), || seen
        .load(Ordering::SeqCst)
        >= 50));
    let report = handle.stop();
    assert_eq!(report.unanswered, 0);
    assert_eq!(runner.join().unanswered, 0);
    let done = || {
        nsqd.channel("handler", "ch")
            .is_some_and(|ch| ch.finished == 50 && ch.requeued == 1)
    };
    assert!(
        eventually(WAIT, done),
        "{:?}",
        nsqd.channel("handler", "ch")
    );
}

pub(super) fn dropping_the_consumer_stops_it(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    for i in 0..5 {
        nsqd.publish("dropc", format!("{i}").as_bytes());
    }
    let mut c = consumer(f, &nsqd, "dropc", fast_config(5));
    let handle = c.handle();
    c.next(WAIT).expect("a message").finish();
    drop(c);
    // Where the adapter tells: dropping stopped it (messages received but not taken were
    // released at once).
    assert_ne!(handle.is_stopping(), Some(false));
    // The handle outlives the consumer: the stop still completes and nothing is lost.
    let report = handle.stop();
    assert_eq!(report.unanswered, 0);
    assert!(
        eventually(WAIT, || nsqd.channel("dropc", "ch").is_some_and(|ch| {
            ch.in_flight == 0 && ch.finished == 1 && ch.depth + ch.deferred == 4
        })),
        "{:?}",
        nsqd.channel("dropc", "ch")
    );
}

pub(super) fn a_panicking_handler_requeues_with_backoff(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    nsqd.publish("panic", b"boom once");
    let c = consumer(
        f,
        &nsqd,
        "panic",
        ConsumerOptions {
            backoff_multiplier: Some(Duration::from_millis(50)),
            default_requeue_delay: Some(Duration::from_millis(10)),
            ..fast_config(1)
        },
    );
    let handle = c.handle();
    let calls = Arc::new(AtomicU32::new(0));
    let k = calls.clone();
    let runner = c.run(
        1,
        Arc::new(move |m: &dyn Message| {
            k.fetch_add(1, Ordering::SeqCst);
            assert!(m.attempts() > 1, "first attempt panics (on purpose)");
            Ok(())
        }),
    );
    assert!(eventually(WAIT, || nsqd
        .channel("panic", "ch")
        .is_some_and(|c| c.finished == 1)));
    let ch = nsqd.channel("panic", "ch").unwrap();
    assert_eq!(ch.requeued, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(
        nsqd.commands().iter().any(|r| r.line == "RDY 0"),
        "a panic counts as a failure: backoff"
    );
    handle.stop();
    assert_eq!(runner.join().unanswered, 0);
}

pub(super) fn dropping_every_handle_stops_the_consumer(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let c = consumer(f, &nsqd, "dropped", fast_config(1));
    assert!(eventually(WAIT, || nsqd.clients().len() == 1));
    drop(c);
    // The driver closes the connection gracefully (CLS) and ends.
    assert!(eventually(WAIT, || nsqd.clients().is_empty()));
    let p = producer(f, &nsqd);
    let q = p.clone_producer();
    drop(p);
    q.publish("dropped", b"still works").unwrap();
    drop(q);
    assert!(eventually(WAIT, || nsqd.clients().is_empty()));
}

pub(super) fn lookupd_discovers_a_broker_added_later(f: &dyn Factory) {
    let lookupd = Lookupd::start().unwrap();
    let setup = ConsumerSetup {
        options: Some(fast_config(1)),
        lookupd: vec![lookupd.http_address().to_string()],
        ..ConsumerSetup::default()
    };
    let mut c = f.consumer("late", "ch", &setup).unwrap();
    assert!(c.next(Duration::from_millis(300)).is_none());
    let nsqd = start(Nsqd::builder().lookupd(&lookupd));
    nsqd.publish("late", b"found you");
    let m = c.next(WAIT).expect("discovered through lookupd");
    assert_eq!(m.body(), b"found you");
    m.finish();
    c.stop();
}

/// `stats().received` counts a message before `recv` hands it out: right after each message
/// taken, it is at least the number taken so far (it once read 16-19 right after the 20th).
pub(super) fn a_message_is_counted_before_recv_returns_it(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let p = producer(f, &nsqd);
    for batch in 0..4 {
        let bodies = (0..50)
            .map(|i| format!("{batch}-{i}").into_bytes())
            .collect();
        p.multi_publish("counted", bodies).unwrap();
    }
    p.close();
    let mut c = consumer(f, &nsqd, "counted", fast_config(20));
    for taken in 1..=200u64 {
        let m = c.next(WAIT).expect("a message");
        let received = c.stats().received;
        assert!(
            received >= taken,
            "message {taken} taken, stats().received = {received}"
        );
        m.finish();
    }
    c.stop();
}
