//! No call hangs when a client's driver ends abnormally: it panicked (a socket that panics
//! stands in for any bug), or the runtime it ran on was dropped. Every pending and later
//! call returns (`Error::Closed`, `None`, a report).

#[path = "support/exec.rs"]
mod exec;
#[path = "support/no_driver.rs"]
mod no_driver;

use nsq_client::Error;
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use nsq_test_support::driver_end::{WAIT, every_call_returns_when_the_driver_panics};
use nsq_test_support::exec::Exec;

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f)
        .await
        .expect("returned in time")
}

/// One test: the trigger is process-wide.
#[test]
fn every_call_returns_when_the_driver_panics_or_its_runtime_is_dropped() {
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    let rt = exec::tokio();
    // Sockets that panic (nsq-test-support's `Panicky` runtime around tokio's).
    every_call_returns_when_the_driver_panics(&rt, &nsqd);

    // A runtime dropped under its clients (the producer's driver after it ran, the
    // consumer's before it was ever polled: a current-thread runtime runs spawned tasks only
    // while it waits): used from another runtime, they say so.
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (producer, mut consumer) = first.block_on(async {
        let p = within(nsq_tokio::Producer::connect(&addr, &Config::default()))
            .await
            .unwrap();
        let c = nsq_tokio::Consumer::builder("t2", "ch")
            .nsqd(addr.as_str())
            .build()
            .unwrap();
        (p, c)
    });
    drop(first);
    rt.block_on(async {
        assert!(matches!(
            within(producer.publish("t2", "x")).await,
            Err(Error::Closed)
        ));
        assert!(within(consumer.recv()).await.is_none());
        let _ = within(consumer.stop()).await;
    });
}

/// On a runtime without its time or IO driver, the driver cannot run: building and
/// connecting return `Error::NoRuntime` naming the `enable_*` call that is missing, instead of
/// hanging.
#[test]
fn a_runtime_without_timers_or_io_is_an_error_naming_what_to_enable() {
    let nsqd = Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    for (missing, rt) in no_driver::runtimes_missing_a_driver() {
        let (tx, rx) = std::sync::mpsc::channel();
        let addr = addr.clone();
        let t = std::thread::spawn(move || {
            let result = rt.block_on(async {
                let producer = nsq_tokio::Producer::connect(&addr, &Config::default()).await;
                let consumer = nsq_tokio::Consumer::builder("t", "c").nsqd(&addr).build();
                (producer.map(drop), consumer.map(drop))
            });
            let _ = tx.send(result);
        });
        let (producer, consumer) = rx.recv_timeout(WAIT).expect("connect returned");
        for result in [producer, consumer] {
            match result {
                Err(Error::NoRuntime(why)) => assert!(why.contains(missing), "{why}"),
                other => panic!("expected NoRuntime naming {missing}, got {other:?}"),
            }
        }
        t.join().unwrap();
    }
}
