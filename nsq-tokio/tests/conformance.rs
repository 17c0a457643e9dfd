//! The broker crate's conformance scenarios, run against nsq-tokio.

use nsq_test_broker::conformance::{ClientConfig, ClientFactory, Delivery, Subscription, run_all};
use nsq_tokio::{Config, Consumer, Message, Producer};
use std::time::Duration;
use tokio::runtime::Runtime;

struct Tokio {
    rt: Runtime,
}

struct TokioDelivery(Message);

impl Delivery for TokioDelivery {
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

struct TokioSubscription {
    rt: tokio::runtime::Handle,
    consumer: Consumer,
}

impl Subscription for TokioSubscription {
    fn next(&mut self, timeout: Duration) -> Option<Box<dyn Delivery>> {
        let m = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, self.consumer.recv()).await })
            .ok()??;
        Some(Box::new(TokioDelivery(m)))
    }
    fn stop(self: Box<Self>, timeout: Duration) -> Result<(), String> {
        let mut consumer = self.consumer;
        self.rt
            .block_on(async { tokio::time::timeout(timeout, consumer.stop()).await })
            .map(|_| ())
            .map_err(|_| "stop did not finish in time".to_owned())
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

impl ClientFactory for Tokio {
    fn name(&self) -> &'static str {
        "nsq-tokio"
    }

    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String> {
        let addrs: Vec<String> = config
            .nsqd_tcp_addresses
            .iter()
            .map(ToString::to_string)
            .collect();
        self.rt.block_on(async {
            let producer = Producer::builder()
                .nsqds(addrs)
                .build()
                .map_err(|e| e.to_string())?;
            let result = producer.publish(topic, body.to_vec()).await;
            producer.close().await;
            result.map_err(|e| e.to_string())
        })
    }

    fn subscribe(
        &self,
        config: &ClientConfig,
        topic: &str,
        channel: &str,
    ) -> Result<Box<dyn Subscription>, String> {
        let _guard = self.rt.enter();
        let mut b = Consumer::builder(topic, channel).config(&consumer_config(config));
        for a in &config.nsqd_tcp_addresses {
            if config.lookupd_http_addresses.is_empty() {
                b = b.nsqd(a.to_string());
            }
        }
        for a in &config.lookupd_http_addresses {
            b = b.lookupd(a.to_string());
        }
        let consumer = b.build().map_err(|e| e.to_string())?;
        Ok(Box::new(TokioSubscription {
            rt: self.rt.handle().clone(),
            consumer,
        }))
    }
}

#[test]
fn conformance() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let factory = Tokio { rt };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        run_all(&factory, &[]);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("conformance scenarios timed out or failed");
}
