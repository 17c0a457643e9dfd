//! The broker crate's conformance scenarios, run against nsq-blocking.

use nsq_blocking::{Config, Consumer, Message, Producer};
use nsq_test_broker::conformance::{ClientConfig, ClientFactory, Delivery, Subscription, run_all};
use std::time::Duration;

struct Blocking;

struct BlockingDelivery(Message);

impl Delivery for BlockingDelivery {
    fn body(&self) -> &[u8] {
        self.0.body()
    }
    fn attempts(&self) -> u16 {
        self.0.attempts()
    }
    fn finish(self: Box<Self>) -> Result<(), String> {
        self.0.finish();
        Ok(())
    }
    fn requeue(self: Box<Self>, delay: Duration) -> Result<(), String> {
        self.0.requeue_without_backoff(Some(delay));
        Ok(())
    }
    fn touch(&self) -> Result<(), String> {
        self.0.touch();
        Ok(())
    }
}

struct BlockingSubscription {
    consumer: Consumer,
}

impl Subscription for BlockingSubscription {
    fn next(&mut self, timeout: Duration) -> Option<Box<dyn Delivery>> {
        let m = self.consumer.recv_timeout(timeout).ok()?;
        Some(Box::new(BlockingDelivery(m)))
    }
    fn stop(self: Box<Self>, timeout: Duration) -> Result<(), String> {
        let mut consumer = self.consumer;
        let (tx, rx) = std::sync::mpsc::channel();
        let stopper = std::thread::spawn(move || {
            let report = consumer.stop();
            let _ = tx.send(report);
        });
        let result = rx
            .recv_timeout(timeout)
            .map(|_| ())
            .map_err(|_| "stop did not finish in time".to_owned());
        if result.is_ok() {
            let _ = stopper.join();
        }
        result
    }
}

fn consumer_config(config: &ClientConfig) -> Config {
    let mut c = Config {
        max_in_flight: config.max_in_flight,
        lookupd_poll_interval: config.lookupd_poll_interval,
        ..Config::default()
    };
    if let Some(t) = config.msg_timeout {
        c.msg_timeout = t;
    }
    if let Some(h) = config.heartbeat_interval {
        c.heartbeat_interval = h;
    }
    c
}

impl ClientFactory for Blocking {
    fn name(&self) -> &'static str {
        "nsq-blocking"
    }

    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String> {
        let producer = Producer::builder()
            .nsqds(config.nsqd_tcp_addresses.iter().map(ToString::to_string))
            .build()
            .map_err(|e| e.to_string())?;
        let result = producer.publish(topic, body.to_vec());
        producer.close();
        result.map_err(|e| e.to_string())
    }

    fn subscribe(
        &self,
        config: &ClientConfig,
        topic: &str,
        channel: &str,
    ) -> Result<Box<dyn Subscription>, String> {
        let mut b = Consumer::builder(topic, channel).config(&consumer_config(config));
        if config.lookupd_http_addresses.is_empty() {
            for a in &config.nsqd_tcp_addresses {
                b = b.nsqd(a.to_string());
            }
        }
        for a in &config.lookupd_http_addresses {
            b = b.lookupd(a.to_string());
        }
        let consumer = b.build().map_err(|e| e.to_string())?;
        Ok(Box::new(BlockingSubscription { consumer }))
    }
}

#[test]
fn conformance() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        run_all(&Blocking, &[]);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(90))
        .expect("conformance scenarios timed out or failed");
}
