//! nsq-async-std's default mode under an executor that does not run async-io's reactor
//! (`futures_lite::future::block_on`: the calls drive their client, and async-io's own
//! thread waits in the reactor): publishes, PublishAsync handles, a consumer and a stop.

use nsq_async_std::{Config, Consumer, Producer};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn publishes_and_messages_flow_under_a_plain_block_on() {
    let nsqd = nsq_test_broker::Nsqd::start().expect("test nsqd");
    let addr = nsqd.tcp_address().to_string();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = futures_lite::future::block_on(async {
            let p = Producer::connect(&addr, &Config::default()).await?;
            for i in 0..500 {
                p.publish("plain", format!("p{i}")).await?;
            }
            let handles: Vec<_> = (0..1000)
                .map(|i| p.publish_async("plain", format!("a{i}")))
                .collect::<Result<_, _>>()?;
            for h in handles {
                h.await?;
            }
            let mut c = Consumer::builder("plain", "c")
                .max_in_flight(100)
                .nsqd(addr.as_str())
                .build()?;
            let mut bodies = std::collections::HashSet::new();
            while bodies.len() < 1500 {
                let m = c.recv().await.expect("a message");
                bodies.insert(m.body().clone());
                m.finish();
            }
            let report = c.stop().await;
            p.close().await;
            Ok::<_, nsq_async_std::Error>((bodies.len(), report.unanswered))
        });
        let _ = done.send(outcome);
    });
    let outcome = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("done within 60 s");
    assert_eq!(outcome.expect("no error"), (1500, 0));
}

/// A `recv` polled once and then left pending while its task waits for something else:
/// the heartbeats its client is woken for are told to that task, which does not poll the
/// `recv`; the client's own thread answers them (nsqd would close a connection that
/// misses two), and the `recv`, polled again, gets its message.
#[test]
fn a_call_left_pending_while_its_task_waits_elsewhere_does_not_stall_its_client() {
    let nsqd = nsq_test_broker::Nsqd::start().expect("test nsqd");
    let addr = nsqd.tcp_address().to_string();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = smol::block_on(async {
            let config = Config {
                heartbeat_interval: Duration::from_secs(1),
                ..Config::default()
            };
            let mut c = Consumer::builder("idle", "c")
                .config(&config)
                .nsqd(addr.as_str())
                .build()?;
            let handle = c.handle();
            let mut next = Box::pin(c.recv());
            assert!(futures_lite::future::poll_once(&mut next).await.is_none());
            // Four heartbeats while the task waits on a timer, not on the `recv`.
            smol::Timer::after(Duration::from_secs(4)).await;
            let p = Producer::connect(&addr, &config).await?;
            p.publish("idle", "late").await?;
            let m = next.await.expect("a message");
            assert_eq!(&m.body()[..], b"late");
            m.finish();
            let stats = handle.stats();
            p.close().await;
            handle.stop().await;
            Ok::<_, nsq_async_std::Error>((stats.reconnects, stats.connections))
        });
        let _ = done.send(outcome);
    });
    let outcome = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("done within 60 s");
    assert_eq!(outcome.expect("no error"), (0, 1), "no connection lost");
}
