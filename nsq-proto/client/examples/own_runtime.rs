#![allow(
    clippy::disallowed_methods,
    clippy::print_stdout,
    reason = "this example is a runtime: it reads the clock, and it prints what it received"
)]
//! A runtime of your own, plugged into the client layer from outside: a thread per client
//! that polls its driver over plain `std` sockets, about a hundred lines for the runtime.
//! Every duty of the client (handshake, RDY, backoff, reconnects, batching, TLS,
//! compression) comes with it, as on the runtimes the workspace ships.
//!
//! `std` sockets report no readiness, so this executor polls its driver whenever it is woken
//! (a command, a reply for a waiting call) and otherwise once a millisecond: a read that
//! would block is tried again at the next tick. Good enough to show the shape and to run
//! anywhere; a real runtime waits on a reactor instead (see nsq-blocking's poller).
//!
//! `cargo run -p nsq-client --example own_runtime` publishes and consumes through an
//! in-process test broker; `-- 127.0.0.1:4150` uses a real nsqd.

use bytes::{Bytes, BytesMut};
use nsq_client::prelude::Config;
use nsq_client::{BoxFuture, Consumer, Producer, Runtime, Socket, SocketOptions, Timer};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// The runtime: each client's driver on a thread of its own, polled when woken and at every
/// tick.
#[derive(Debug, Clone, Copy)]
pub struct Ticking;

/// How often the driver is polled when nothing wakes it.
const TICK: Duration = Duration::from_millis(1);

/// A non-blocking `std` TCP stream and the buffer it reads into.
pub struct StdSocket {
    stream: TcpStream,
    buf: BytesMut,
}

impl Socket for StdSocket {
    fn poll_read(&mut self, _: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
        self.buf.resize(64 * 1024, 0);
        match self.stream.read(&mut self.buf) {
            Ok(n) => Poll::Ready(Ok(self.buf.split_to(n))),
            // Tried again at the next tick.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write(&mut self, _: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
        match self.stream.write(data) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            written => Poll::Ready(written),
        }
    }

    fn poll_close(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.stream.shutdown(Shutdown::Write))
    }
}

/// The driver's timer: a deadline the tick looks at.
pub struct Deadline(Instant);

impl Timer for Deadline {
    fn reset(&mut self, at: Instant) {
        self.0 = at;
    }

    fn poll_expired(&mut self, _: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.0 {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Runtime for Ticking {
    fn connect(
        &self,
        addr: &str,
        options: SocketOptions,
    ) -> BoxFuture<io::Result<Box<dyn Socket>>> {
        let addr = addr.to_owned();
        Box::pin(async move {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for a in nsq_client::dial::resolve(&addr).await? {
                let connected = match options.local_addr {
                    Some(local) => nsq_client::dial::connect_from(local, a, options.dial).await,
                    None => TcpStream::connect_timeout(&a, options.dial),
                };
                match connected {
                    Ok(stream) => {
                        stream.set_nodelay(true)?;
                        stream.set_nonblocking(true)?;
                        let buf = BytesMut::new();
                        return Ok(Box::new(StdSocket { stream, buf }) as Box<dyn Socket>);
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        })
    }

    fn timer(&self, at: Instant) -> Box<dyn Timer> {
        Box::new(Deadline(at))
    }

    fn spawn(&self, name: &str, mut driver: BoxFuture<()>) -> io::Result<()> {
        let thread = std::thread::Builder::new().name(name.to_owned());
        let run = move || {
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            let mut cx = Context::from_waker(&waker);
            while driver.as_mut().poll(&mut cx).is_pending() {
                std::thread::park_timeout(TICK);
            }
        };
        thread.spawn(run).map(drop)
    }
}

/// Wakes the driver's thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    round_trip(std::env::args().nth(1))
}

/// Publishes three messages to nsqd `addr` (an in-process test broker when `None`) on this
/// runtime, then consumes and finishes them.
pub fn round_trip(addr: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    let broker;
    let addr = if let Some(addr) = addr {
        addr
    } else {
        broker = nsq_test_broker::Nsqd::start()?;
        broker.tcp_address().to_string()
    };
    let topic = format!("own_runtime_{}", std::process::id());
    // One value serves every client: each driver gets a thread of its own.
    let runtime: Arc<dyn Runtime> = Arc::new(Ticking);
    nsq_client::blocking::block_on(async {
        let producer = Producer::builder()
            .config(&Config::default())
            .nsqd(addr.as_str())
            .runtime(runtime.clone())
            .build()?;
        producer.ping().await?;
        producer
            .multi_publish(topic.as_str(), ["one", "two", "three"])
            .await?;
        producer.close().await;

        let mut consumer = Consumer::builder(topic.as_str(), "example")
            .nsqd(addr.as_str())
            .runtime(runtime)
            .connect()
            .await?;
        for _ in 0..3 {
            let msg = consumer.recv().await.ok_or("the consumer stopped")?;
            println!("received {:?}", String::from_utf8_lossy(msg.body()));
            msg.finish();
        }
        let report = consumer.stop().await;
        println!("stopped; {} unanswered", report.unanswered);
        Ok(())
    })
}
