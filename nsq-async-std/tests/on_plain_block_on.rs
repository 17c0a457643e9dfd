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
