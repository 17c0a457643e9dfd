//! No call hangs when a client's driver ends abnormally: it panicked (a socket that panics
//! stands in for any bug), or the runtime it ran on was dropped. Every pending and later
//! call returns (`Error::Closed`, `None`, a report).

use nsq_client::{self as client, Adapter, BoxFuture, Runtime, SocketOptions};
use nsq_test_broker::Nsqd;
use nsq_tokio::{Config, Error, Tokio};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

/// Tokio, with sockets that panic on their next read once `PANIC` is set.
#[derive(Debug, Clone)]
struct Panicky(Tokio, Arc<AtomicBool>);

static PANIC: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

fn trigger() -> Arc<AtomicBool> {
    PANIC.get_or_init(Arc::default).clone()
}

struct Socket(<Tokio as Runtime>::Socket, Arc<AtomicBool>);

impl client::Socket for Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bytes::BytesMut>> {
        let polled = self.0.poll_read(cx);
        assert!(
            !(polled.is_ready() && self.1.load(Ordering::SeqCst)),
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
    type Socket = Socket;
    type Timer = <Tokio as Runtime>::Timer;

    fn now(&self) -> Instant {
        self.0.now()
    }
    fn connect(&self, addr: &str, timeouts: SocketOptions) -> BoxFuture<io::Result<Socket>> {
        let (connect, flag) = (self.0.connect(addr, timeouts), self.1.clone());
        Box::pin(async move { Ok(Socket(connect.await?, flag)) })
    }
    fn timer(&self, at: std::time::Instant) -> Self::Timer {
        self.0.timer(at)
    }
    fn spawn(&self, name: &str, driver: BoxFuture<()>) -> io::Result<()> {
        self.0.spawn(name, driver)
    }
}

impl Adapter for Panicky {
    type Waiter = client::Direct;

    fn waiter(&self) -> client::Direct {
        client::Direct
    }

    fn current() -> Result<Self, Error> {
        Ok(Panicky(Tokio::current()?, trigger()))
    }
}

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let producer = within(client::Producer::<Panicky>::connect(
            &addr,
            &Config::default(),
        ))
        .await
        .unwrap();
        producer.publish("t", "before").await.unwrap();
        let mut consumer = client::Consumer::<Panicky>::builder("t", "ch")
            .max_in_flight(10)
            .nsqd(addr.as_str())
            .build()
            .unwrap();
        let m = within(consumer.recv()).await.expect("a message");
        m.finish();
        let handle = consumer.handle();
        // A receiver waits; then the next read of each driver panics.
        let waiting = tokio::spawn(async move { (consumer.recv().await.is_none(), consumer) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger().store(true, Ordering::SeqCst);
        // The publish's reply is that read: the producer's driver panics under it.
        assert!(matches!(
            within(producer.publish("t", "after")).await,
            Err(Error::Closed)
        ));
        // The consumer's driver panics on the message that publish delivered... or, if the
        // publish never reached nsqd, on the next one.
        nsqd.publish("t", b"wake");
        let (ended, mut consumer) = within(waiting).await.unwrap();
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
        within(producer.close()).await;
        assert!(consumer.recv().await.is_none());
        assert!(matches!(
            handle.connect_to_nsqd(&addr).await,
            Err(Error::Closed)
        ));
        let _ = within(handle.stop()).await;
        let _ = within(consumer.stop()).await;
    });
    trigger().store(false, Ordering::SeqCst);

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
    for (missing, build) in [
        (
            "enable_time()",
            tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build(),
        ),
        (
            "enable_io()",
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build(),
        ),
    ] {
        let rt = build.unwrap();
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
