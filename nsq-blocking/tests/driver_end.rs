//! No call hangs when a client's driver panics (a socket that panics stands in for any bug):
//! every pending and later call returns (`Error::Closed`, `None`, a report), and the driver
//! thread ends.

use nsq_blocking::{Blocking, Config, Error};
use nsq_client::blocking::{Consumer, Producer};
use nsq_client::{self as client, Adapter, BoxFuture, Runtime, SocketOptions};
use nsq_test_broker::Nsqd;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

static PANIC: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

fn trigger() -> Arc<AtomicBool> {
    PANIC.get_or_init(Arc::default).clone()
}

/// nsq-blocking's runtime, with sockets that panic on their next read once triggered.
#[derive(Debug, Clone)]
struct Panicky(Blocking);

struct Socket(<Blocking as Runtime>::Socket);

impl client::Socket for Socket {
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
    type Socket = Socket;
    type Timer = <Blocking as Runtime>::Timer;

    fn connect(&self, addr: &str, timeouts: SocketOptions) -> BoxFuture<io::Result<Socket>> {
        let connect = self.0.connect(addr, timeouts);
        Box::pin(async move { Ok(Socket(connect.await?)) })
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
        Ok(Panicky(Blocking::current()?))
    }
}

#[test]
fn every_call_returns_when_the_driver_panics() {
    nsq_test_broker::scenarios::run_within(60, || {
        let nsqd = Nsqd::start().unwrap();
        let addr = nsqd.tcp_address().to_string();
        let producer = Producer::<Panicky>::connect(&addr, &Config::default()).unwrap();
        producer.publish("t", "before").unwrap();
        let mut consumer = Consumer::<Panicky>::builder("t", "ch")
            .max_in_flight(10)
            .nsqd(addr.as_str())
            .build()
            .unwrap();
        consumer.recv_timeout(WAIT).unwrap().finish();
        let handle = consumer.handle();
        let waiting = std::thread::spawn(move || (consumer.recv().is_none(), consumer));
        std::thread::sleep(Duration::from_millis(50));
        trigger().store(true, Ordering::SeqCst);
        // The publish's reply is the read the producer's driver panics under.
        assert!(matches!(producer.publish("t", "after"), Err(Error::Closed)));
        nsqd.publish("t", b"wake");
        let (ended, mut consumer) = waiting.join().unwrap();
        assert!(ended, "recv ends");
        assert!(matches!(producer.publish("t", "x"), Err(Error::Closed)));
        assert!(matches!(producer.ping(), Err(Error::Closed)));
        assert!(matches!(
            producer.publish_async("t", "x").map(drop),
            Err(Error::Closed)
        ));
        producer.close();
        assert!(consumer.recv().is_none());
        assert!(matches!(handle.connect_to_nsqd(&addr), Err(Error::Closed)));
        let _ = handle.stop();
        let _ = consumer.stop();
    });
}
