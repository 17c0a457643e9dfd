//! What the adapters' `driver_end` tests share: [`Panicky`], an adapter's runtime whose
//! sockets panic on their next read once [`trigger`] is set (a bug in the driver), and the
//! async adapters' test that no call hangs when a client's driver panics.

use crate::exec::{Exec, timeout};
use nsq_client::{self as client, BoxFuture, Error, Runtime, SocketOptions};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a call may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

static PANIC: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

/// The process-wide switch: once set, every [`Panicky`] socket panics on its next read.
pub fn trigger() -> Arc<AtomicBool> {
    PANIC.get_or_init(Arc::default).clone()
}

/// A runtime whose sockets panic on their next read once [`trigger`] is set. Its calls wait
/// without driving (the inner runtime's driver task or thread alone drives).
#[derive(Debug)]
pub struct Panicky(Arc<dyn Runtime>);

impl Panicky {
    /// `inner`, with sockets that panic.
    pub fn around(inner: Arc<dyn Runtime>) -> Arc<dyn Runtime> {
        Arc::new(Panicky(inner))
    }
}

/// A socket of [`Panicky`].
struct PanickySocket(Box<dyn client::Socket>);

impl client::Socket for PanickySocket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bytes::BytesMut>> {
        let polled = self.0.poll_read(cx);
        assert!(
            !(polled.is_ready() && trigger().load(Ordering::SeqCst)),
            "a bug in the driver"
        );
        polled
    }
    fn poll_write(&mut self, cx: &mut Context<'_>, data: &bytes::Bytes) -> Poll<io::Result<usize>> {
        self.0.poll_write(cx, data)
    }
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.poll_close(cx)
    }
}

impl Runtime for Panicky {
    fn now(&self) -> Instant {
        self.0.now()
    }
    fn connect(
        &self,
        addr: &str,
        timeouts: SocketOptions,
    ) -> BoxFuture<io::Result<Box<dyn client::Socket>>> {
        let connect = self.0.connect(addr, timeouts);
        Box::pin(
            async move { Ok(Box::new(PanickySocket(connect.await?)) as Box<dyn client::Socket>) },
        )
    }
    fn timer(&self, at: Instant) -> Box<dyn client::Timer> {
        self.0.timer(at)
    }
    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        self.0.spawn(name, driver)
    }
    fn run_workers(&self, workers: Vec<BoxFuture<()>>) -> BoxFuture<()> {
        self.0.run_workers(workers)
    }
}

/// `f`'s output, failing the test after [`WAIT`].
async fn within<E: Exec, F: std::future::Future>(exec: &E, f: F) -> F::Output {
    timeout(exec, WAIT, f).await.expect("returned in time")
}

/// No call hangs when the drivers of a producer and a consumer on [`Panicky`] (around the
/// runtime found inside `exec`) panic, with every call awaited inside `exec`'s `block_on`:
/// every pending and later call returns (`Error::Closed`, `None`, a report). Resets the
/// trigger at the end.
pub fn every_call_returns_when_the_driver_panics<E: Exec>(exec: &E, nsqd: &Nsqd) {
    let addr = nsqd.tcp_address().to_string();
    let panicky = || Panicky::around(exec.enter(client::runtime_here).expect("a runtime"));
    let (for_producer, for_consumer) = (panicky(), panicky());
    exec.block_on(async {
        let producer = client::Producer::builder()
            .config(&Config::default())
            .nsqd(addr.as_str())
            .runtime(for_producer)
            .build()
            .unwrap();
        within(exec, producer.ping()).await.unwrap();
        producer.publish("t", "before").await.unwrap();
        let mut consumer = client::Consumer::builder("t", "ch")
            .max_in_flight(10)
            .nsqd(addr.as_str())
            .runtime(for_consumer)
            .build()
            .unwrap();
        let m = within(exec, consumer.recv()).await.expect("a message");
        m.finish();
        let handle = consumer.handle();
        // A receiver waits; then the next read of each driver panics.
        let waiting = exec.spawn(async move { (consumer.recv().await.is_none(), consumer) });
        exec.sleep(Duration::from_millis(50)).await;
        trigger().store(true, Ordering::SeqCst);
        // The publish's reply is that read: the producer's driver panics under it.
        assert!(matches!(
            within(exec, producer.publish("t", "after")).await,
            Err(Error::Closed)
        ));
        // The consumer's driver panics on the message that publish delivered... or, if the
        // publish never reached nsqd, on the next one.
        nsqd.publish("t", b"wake");
        let (ended, mut consumer) = within(exec, waiting).await;
        assert!(ended, "recv ends");
        // Every later call returns at once.
        assert!(matches!(
            producer.publish("t", "x").await,
            Err(Error::Closed)
        ));
        assert!(matches!(producer.ping().await, Err(Error::Closed)));
        assert!(matches!(
            producer.publish_async("t", "x").map(drop),
            Err(Error::Closed)
        ));
        within(exec, producer.close()).await;
        assert!(consumer.recv().await.is_none());
        assert!(matches!(
            handle.connect_to_nsqd(&addr).await,
            Err(Error::Closed)
        ));
        let _ = within(exec, handle.stop()).await;
        let _ = within(exec, consumer.stop()).await;
    });
    trigger().store(false, Ordering::SeqCst);
}
