//! The broker crate's conformance scenarios on nsq-async-std: the client factory, every call
//! blocking on the runtime `R`. Used by `conformance` (drivers on threads of their own) and
//! `conformance_on_executor` (drivers on smol's executor).

use crate::common::{Runtime, timeout};
use nsq_async_std::{Config, Consumer, Message, Producer};
use nsq_test_broker::conformance::{ClientConfig, ClientFactory, Delivery, Subscription, run_all};
use std::marker::PhantomData;
use std::time::Duration;

pub(crate) struct Factory<R>(PhantomData<fn() -> R>);

struct AsyncDelivery(Message);

impl Delivery for AsyncDelivery {
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

struct AsyncSubscription<R> {
    consumer: Consumer,
    runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> Subscription for AsyncSubscription<R> {
    fn next(&mut self, within: Duration) -> Option<Box<dyn Delivery>> {
        let m = R::block_on(timeout(within, self.consumer.recv()))??;
        Some(Box::new(AsyncDelivery(m)))
    }
    fn stop(self: Box<Self>, within: Duration) -> Result<(), String> {
        let mut consumer = self.consumer;
        R::block_on(timeout(within, consumer.stop()))
            .map(|_| ())
            .ok_or_else(|| "stop did not finish in time".to_owned())
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

impl<R: Runtime> ClientFactory for Factory<R> {
    fn name(&self) -> &str {
        R::NAME
    }

    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String> {
        let addrs: Vec<String> = config
            .nsqd_tcp_addresses
            .iter()
            .map(ToString::to_string)
            .collect();
        R::block_on(async {
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
        Ok(Box::new(AsyncSubscription::<R> {
            consumer,
            runtime: PhantomData,
        }))
    }
}

pub(crate) fn conformance<R: Runtime>() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        run_all(&Factory::<R>(PhantomData), &[]);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{} conformance scenarios timed out or failed", R::NAME));
}
