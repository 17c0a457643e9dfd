//! The test broker's conformance suite (`nsq_test_broker::conformance`) on the client layer,
//! written once: [`AsyncFactory`] (`nsq_client::Consumer`/`Producer`, every call
//! blocking on an [`Exec`]) and [`BlockingFactory`] (`nsq_client::blocking`), run by
//! [`run_conformance`].

use crate::exec::{Exec, GiveRuntime, timeout};
use crate::glue::ConsumerBuilding;
use nsq_client::Message;
use nsq_proto::Config;
use nsq_test_broker::conformance::{ClientConfig, ClientFactory, Delivery, Subscription, run_all};
use std::time::Duration;

/// Runs every conformance scenario against `factory` on a thread of its own, failing if they
/// take over `secs` seconds.
pub fn run_conformance(factory: impl ClientFactory + Send + 'static, secs: u64) {
    let name = factory.name().to_owned();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        run_all(&factory, &[]);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{name} conformance scenarios timed out or failed"));
}

/// A delivery: the client layer's `Message`.
struct ClientDelivery(Message);

impl Delivery for ClientDelivery {
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

/// `b` configured as the suite asks: the nsqd directly unless there are lookupd.
fn subscription<B: ConsumerBuilding>(b: B, config: &ClientConfig) -> B {
    let b = b.config(&consumer_config(config));
    let nsqd: Vec<String> = if config.lookupd_http_addresses.is_empty() {
        nsqds(config).collect()
    } else {
        Vec::new()
    };
    let lookupd: Vec<String> = config
        .lookupd_http_addresses
        .iter()
        .map(ToString::to_string)
        .collect();
    b.nsqds(&nsqd).lookupds(&lookupd)
}

fn nsqds(config: &ClientConfig) -> impl Iterator<Item = String> + '_ {
    config.nsqd_tcp_addresses.iter().map(ToString::to_string)
}

// ------------------------------------------------------------------------------ async

/// An async adapter, every call blocking on `E` (its clients on the runtime found where they
/// are built, or the one `E` gives).
pub struct AsyncFactory<E> {
    exec: E,
}

impl<E: Exec> AsyncFactory<E> {
    /// The adapter's clients, blocking on `exec`.
    pub fn new(exec: E) -> Self {
        AsyncFactory { exec }
    }
}

struct AsyncSubscription<E> {
    exec: E,
    consumer: nsq_client::Consumer,
}

impl<E: Exec> Subscription for AsyncSubscription<E> {
    fn next(&mut self, within: Duration) -> Option<Box<dyn Delivery>> {
        let m = self
            .exec
            .block_on(timeout(&self.exec, within, self.consumer.recv()))??;
        Some(Box::new(ClientDelivery(m)))
    }
    fn stop(self: Box<Self>, within: Duration) -> Result<(), String> {
        let (exec, mut consumer) = (self.exec, self.consumer);
        exec.block_on(timeout(&exec, within, consumer.stop()))
            .map(|_| ())
            .ok_or_else(|| "stop did not finish in time".to_owned())
    }
}

impl<E: Exec> ClientFactory for AsyncFactory<E> {
    fn name(&self) -> &str {
        self.exec.name()
    }

    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String> {
        let addrs: Vec<String> = nsqds(config).collect();
        self.exec.block_on(async {
            let producer = nsq_client::Producer::builder()
                .nsqds(addrs)
                .given(self.exec.runtime())
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
        let b = subscription(nsq_client::Consumer::builder(topic, channel), config)
            .given(self.exec.runtime());
        let consumer = self.exec.enter(|| b.build()).map_err(|e| e.to_string())?;
        Ok(Box::new(AsyncSubscription {
            exec: self.exec.clone(),
            consumer,
        }))
    }
}

// --------------------------------------------------------------------------- blocking

/// The blocking client layer.
pub struct BlockingFactory {
    name: &'static str,
}

impl BlockingFactory {
    /// The blocking clients, called `name` in messages.
    pub fn new(name: &'static str) -> Self {
        BlockingFactory { name }
    }
}

struct BlockingSubscription {
    consumer: nsq_client::blocking::Consumer,
}

impl Subscription for BlockingSubscription {
    fn next(&mut self, timeout: Duration) -> Option<Box<dyn Delivery>> {
        let m = self.consumer.recv_timeout(timeout).ok()?;
        Some(Box::new(ClientDelivery(m)))
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

impl ClientFactory for BlockingFactory {
    fn name(&self) -> &str {
        self.name
    }

    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String> {
        let producer = nsq_client::blocking::Producer::builder()
            .nsqds(nsqds(config))
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
        let b = nsq_client::blocking::Consumer::builder(topic, channel);
        let consumer = subscription(b, config).build().map_err(|e| e.to_string())?;
        Ok(Box::new(BlockingSubscription { consumer }))
    }
}
