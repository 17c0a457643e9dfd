//! Every thread nsq-blocking starts ends on stop / close / drop. Its own test binary
//! (one test) so no other test's threads are counted.

use nsq_blocking::proto::ConsumerConfig;
use nsq_blocking::{Config, Consumer, HandlerError, Message, Producer};
use nsq_test_broker::{Lookupd, Nsqd};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// Names of this process's threads started by nsq-blocking (`nsqb-*`).
#[cfg(target_os = "linux")]
fn our_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("nsqb-"))
        .collect()
}

#[cfg(not(target_os = "linux"))]
fn our_threads() -> Vec<String> {
    Vec::new()
}

/// Asserts that no nsq-blocking thread is left. A joined thread can stay listed in
/// /proc for a moment after the join returns (the kernel wakes the joiner before it has
/// finished tearing the thread down), so a short grace period is allowed; a thread that
/// was not joined stays for good and fails.
fn assert_no_threads() {
    let until = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let left = our_threads();
        if left.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < until, "threads left: {left:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn fast() -> ConsumerConfig {
    ConsumerConfig {
        max_in_flight: 5,
        lookupd_poll_interval: Duration::from_millis(100),
        reconnect_initial_delay: Duration::from_millis(50),
        ..ConsumerConfig::default()
    }
}

#[test]
fn no_thread_is_left_after_stop_close_or_drop() {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        scenario();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => t.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(t.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("test timed out"),
    }
}

fn scenario() {
    let lookupd = Lookupd::start().unwrap();
    let nsqd = Nsqd::builder().lookupd(&lookupd).start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    assert_no_threads();

    // Producer: close() waits for its driver thread to end.
    let p = Producer::connect(&addr, &Config::default()).unwrap();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || p.publish("threads", format!("m{i}")).unwrap())
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(!our_threads().is_empty());
    p.close();
    assert_no_threads();
    assert!(p.publish("threads", "after close").is_err());
    drop(p);

    // Producer: dropping the last clone closes it and joins.
    let p = Producer::connect(&addr, &Config::default()).unwrap();
    let p2 = p.clone();
    drop(p);
    p2.publish("threads", "m4").unwrap();
    drop(p2);
    assert_no_threads();

    // Producer to a port where nothing listens (connect attempts in flight).
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let p = Producer::builder().nsqd(dead.to_string()).build().unwrap();
    assert!(p.publish("threads", "x").is_err());
    drop(p);
    assert_no_threads();

    // Consumer over lookupd: iterate, then stop().
    let mut c = Consumer::builder("threads", "ch")
        .core_config(fast())
        .lookupd(lookupd.http_address().to_string())
        .build()
        .unwrap();
    for m in c.iter().take(2) {
        m.finish();
    }
    let report = c.stop();
    assert_eq!(report.unanswered, 0);
    assert_no_threads();
    assert!(c.recv().is_none());
    drop(c);

    // Consumer: dropped while a message is queued and one is held (requeued on drop).
    let mut c = Consumer::builder("threads", "ch")
        .core_config(fast())
        .nsqd(addr.clone())
        .build()
        .unwrap();
    let held = c.recv_timeout(WAIT).unwrap();
    drop(held);
    drop(c);
    assert_no_threads();

    // Consumer: run() on a pool, stopped from another thread.
    let c = Consumer::builder("threads", "ch")
        .core_config(fast())
        .nsqd(addr.clone())
        .build()
        .unwrap();
    let handle = c.handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        handle.stop()
    });
    let report = c.run(3, |m: Message| {
        if m.body().is_empty() {
            return Err(HandlerError::msg("empty"));
        }
        Ok(())
    });
    assert_eq!(report.unanswered, 0);
    assert_eq!(stopper.join().unwrap(), report);
    assert_no_threads();

    // Consumer: `for msg in consumer` (owning iterator), dropped after the loop.
    nsqd.publish("threads", b"last");
    let c = Consumer::builder("threads", "ch")
        .core_config(fast())
        .nsqd(addr)
        .build()
        .unwrap();
    let h = c.handle();
    for m in c {
        m.finish();
        h.stop();
    }
    assert_no_threads();
    assert_eq!(nsqd.channel("threads", "ch").map(|c| c.in_flight), Some(0));

    // A consumer of twelve nsqd runs as many threads as a consumer of one: its driver.
    let brokers: Vec<Nsqd> = (0..12).map(|_| Nsqd::start().unwrap()).collect();
    for b in &brokers {
        b.publish("many", b"m");
    }
    let mut c = Consumer::builder("many", "ch")
        .core_config(fast())
        .nsqds(brokers.iter().map(|b| b.tcp_address().to_string()))
        .build()
        .unwrap();
    for _ in 0..12 {
        c.recv_timeout(WAIT).unwrap().finish();
    }
    let stats = c.as_handle().stats();
    assert_eq!(stats.connections, 12, "{stats:?}");
    if cfg!(target_os = "linux") {
        assert_eq!(our_threads(), ["nsqb-consumer"]);
    }
    c.stop();
    assert_no_threads();
}
