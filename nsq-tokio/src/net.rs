//! Socket plumbing shared by the consumer and producer drivers: it only moves bytes.
//!
//! Per nsqd connection there is one task that connects and then reads (forwarding every read as
//! a `BytesMut` chunk to the driver), and one writer task that writes the `Bytes` the driver
//! hands it. Reading never waits for writing, so a peer that stops reading cannot stop us from
//! reading (no write/write deadlock).

use bytes::{Bytes, BytesMut};
use nsq_proto::client::{SocketTable, Transport};
use nsq_proto::driver::{Action, ConnId, Driven, LookupdRequestId};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tracing::Instrument;

/// Bytes reserved per read; a read never uses less than [`MIN_READ`] free bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;

/// What a connection's tasks report to the driver.
#[derive(Debug)]
pub(crate) enum NetEvent<K> {
    /// The socket is connected; bytes for it go to `writer`.
    Connected {
        key: K,
        writer: mpsc::UnboundedSender<Bytes>,
    },
    /// The connection attempt failed.
    ConnectFailed { key: K, reason: String },
    /// Bytes were read.
    Data { key: K, data: BytesMut },
    /// The socket reached EOF or failed (read or write side).
    Closed { key: K, reason: String },
}

/// The driver's handle on one connection's tasks.
#[derive(Debug)]
pub(crate) struct ConnTasks {
    reader: AbortHandle,
    writer: Option<mpsc::UnboundedSender<Bytes>>,
    /// The connection's span: the core's events about it (upgrades, heartbeats, errors) are
    /// recorded inside it.
    span: tracing::Span,
}

impl ConnTasks {
    /// Queues bytes for the writer task (dropped if the socket is not connected yet, which the
    /// core never asks for).
    pub(crate) fn send(&self, data: Bytes) {
        if let Some(w) = &self.writer {
            let _ = w.send(data);
        }
    }

    /// Records the writer once connected.
    pub(crate) fn set_writer(&mut self, writer: mpsc::UnboundedSender<Bytes>) {
        self.writer = Some(writer);
    }

    /// Closes the connection: the writer writes what it was given, then shuts the socket down;
    /// reading stops at once.
    pub(crate) fn close(self) {
        self.reader.abort();
        drop(self.writer);
    }
}

/// Starts connecting to `addr`; events arrive on `tx`, mapped by `wrap`.
pub(crate) fn connect<K, T>(
    key: K,
    addr: &str,
    dial_timeout: Duration,
    write_timeout: Duration,
    tx: mpsc::UnboundedSender<T>,
    wrap: fn(NetEvent<K>) -> T,
) -> ConnTasks
where
    K: Copy + Send + std::fmt::Display + 'static,
    T: Send + 'static,
{
    let span = nsq_proto::client::connection_span(key, addr);
    let link_span = span.clone();
    let addr = addr.to_owned();
    let task = tokio::spawn(
        async move {
            let stream = match tokio::time::timeout(dial_timeout, TcpStream::connect(&addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "connect failed");
                    let _ = tx.send(wrap(NetEvent::ConnectFailed {
                        key,
                        reason: e.to_string(),
                    }));
                    return;
                }
                Err(_) => {
                    tracing::debug!(?dial_timeout, "connect timed out");
                    let _ = tx.send(wrap(NetEvent::ConnectFailed {
                        key,
                        reason: format!("connect timed out after {dial_timeout:?}"),
                    }));
                    return;
                }
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY");
            }
            tracing::debug!("connected");
            let (mut rd, wr) = stream.into_split();
            let (wtx, wrx) = mpsc::unbounded_channel();
            tokio::spawn(
                write_loop(key, wr, wrx, write_timeout, tx.clone(), wrap).in_current_span(),
            );
            if tx
                .send(wrap(NetEvent::Connected { key, writer: wtx }))
                .is_err()
            {
                return;
            }
            let mut buf = BytesMut::with_capacity(READ_CHUNK);
            loop {
                if buf.capacity() - buf.len() < MIN_READ {
                    buf.reserve(READ_CHUNK);
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) => {
                        tracing::debug!("EOF from nsqd");
                        let _ = tx.send(wrap(NetEvent::Closed {
                            key,
                            reason: "EOF".to_owned(),
                        }));
                        return;
                    }
                    Ok(_) => {
                        if tx
                            .send(wrap(NetEvent::Data {
                                key,
                                data: buf.split(),
                            }))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "read failed");
                        let _ = tx.send(wrap(NetEvent::Closed {
                            key,
                            reason: e.to_string(),
                        }));
                        return;
                    }
                }
            }
        }
        .instrument(span),
    );
    ConnTasks {
        reader: task.abort_handle(),
        writer: None,
        span: link_span,
    }
}

async fn write_loop<K, T>(
    key: K,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    write_timeout: Duration,
    tx: mpsc::UnboundedSender<T>,
    wrap: fn(NetEvent<K>) -> T,
) where
    K: Copy,
{
    while let Some(data) = rx.recv().await {
        let reason = match tokio::time::timeout(write_timeout, wr.write_all(&data)).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("write timed out after {write_timeout:?}"),
        };
        tracing::warn!(%reason, "write failed");
        let _ = tx.send(wrap(NetEvent::Closed { key, reason }));
        return;
    }
    let _ = wr.shutdown().await;
    tracing::debug!("connection closed");
}

/// What a lookupd exchange reports to the driver.
#[derive(Debug)]
pub(crate) enum LookupEvent<K> {
    /// Response bytes.
    Data { key: K, data: Bytes },
    /// The server closed the response stream.
    Eof { key: K },
    /// Connecting, writing or reading failed.
    Failed { key: K, reason: String },
}

/// Runs one HTTP exchange with nsqlookupd: connect, write `request`, forward the response.
/// Timeouts are the core's; abort the returned handle when the core says the exchange is over.
pub(crate) fn lookup<K, T>(
    key: K,
    addr: &str,
    request: Bytes,
    tx: mpsc::UnboundedSender<T>,
    wrap: fn(LookupEvent<K>) -> T,
) -> AbortHandle
where
    K: Copy + Send + std::fmt::Display + 'static,
    T: Send + 'static,
{
    let span = nsq_proto::client::lookupd_span(key, addr);
    let addr = addr.to_owned();
    tokio::spawn(
        async move {
            let fail = move |reason: String| {
                tracing::debug!(%reason, "lookupd request failed");
                wrap(LookupEvent::Failed { key, reason })
            };
            let mut stream = match TcpStream::connect(&addr).await {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(fail(e.to_string()));
                    return;
                }
            };
            if let Err(e) = stream.write_all(&request).await {
                let _ = tx.send(fail(e.to_string()));
                return;
            }
            let mut buf = BytesMut::with_capacity(16 * 1024);
            loop {
                buf.reserve(16 * 1024);
                match stream.read_buf(&mut buf).await {
                    Ok(0) => {
                        let _ = tx.send(wrap(LookupEvent::Eof { key }));
                        return;
                    }
                    Ok(_) => {
                        let data = buf.split().freeze();
                        if tx.send(wrap(LookupEvent::Data { key, data })).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(fail(e.to_string()));
                        return;
                    }
                }
            }
        }
        .instrument(span),
    )
    .abort_handle()
}

/// A random seed for a state machine's RNG (jitter, random connection choice), from the OS.
pub(crate) fn random_seed() -> u64 {
    nsq_proto::client::seed_or_fallback(
        getrandom::u64(),
        &std::collections::hash_map::RandomState::new(),
        u64::from(std::process::id()),
    )
}

/// The OS hostname, sent in IDENTIFY when the configuration names none (go-nsq sends
/// `os.Hostname()`).
pub(crate) fn os_hostname() -> Option<String> {
    nsq_proto::client::hostname_from_os(&gethostname::gethostname())
}

/// The tokio half of performing the core's actions: connection and lookupd tasks.
pub(crate) struct Sockets<I> {
    tx: mpsc::UnboundedSender<I>,
    wrap_net: fn(NetEvent<ConnId>) -> I,
    wrap_lookup: fn(LookupEvent<LookupdRequestId>) -> I,
    dial_timeout: Duration,
    write_timeout: Duration,
}

impl<I: Send + 'static> Transport for Sockets<I> {
    type Socket = ConnTasks;
    type Lookup = AbortHandle;

    fn connect(&mut self, conn: ConnId, addr: &str) -> ConnTasks {
        connect(
            conn,
            addr,
            self.dial_timeout,
            self.write_timeout,
            self.tx.clone(),
            self.wrap_net,
        )
    }

    fn send(&mut self, link: &mut ConnTasks, data: Bytes) {
        link.send(data);
    }

    fn close(&mut self, link: ConnTasks) {
        link.close();
    }

    fn lookup(&mut self, request: LookupdRequestId, addr: &str, data: Bytes) -> AbortHandle {
        lookup(request, addr, data, self.tx.clone(), self.wrap_lookup)
    }

    fn close_lookup(&mut self, lookup: AbortHandle) {
        lookup.abort();
    }
}

/// The socket side of a driver, shared by the consumer and producer drivers: it performs the
/// core's [`Action`]s (through the shared [`SocketTable`]) and feeds socket events back through the
/// [`Driven`] contract.
pub(crate) struct Net<I: Send + 'static> {
    net: Sockets<I>,
    links: SocketTable<Sockets<I>>,
}

impl<I: Send + 'static> Net<I> {
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<I>,
        wrap_net: fn(NetEvent<ConnId>) -> I,
        wrap_lookup: fn(LookupEvent<LookupdRequestId>) -> I,
        dial_timeout: Duration,
        write_timeout: Duration,
    ) -> Self {
        Net {
            net: Sockets {
                tx,
                wrap_net,
                wrap_lookup,
                dial_timeout,
                write_timeout,
            },
            links: SocketTable::default(),
        }
    }

    /// Feeds a socket event to the state machine.
    pub(crate) fn net<M: Driven>(&mut self, machine: &mut M, now: Instant, ev: NetEvent<ConnId>) {
        let key = match &ev {
            NetEvent::Connected { key, .. }
            | NetEvent::ConnectFailed { key, .. }
            | NetEvent::Data { key, .. }
            | NetEvent::Closed { key, .. } => *key,
        };
        let span = self.links.link(key).map(|l| l.span.clone());
        let _entered = span.as_ref().map(tracing::Span::enter);
        match ev {
            NetEvent::Data { key, mut data } => machine.handle_input(now, key, &mut data),
            NetEvent::Connected { key, writer } => {
                if let Some(link) = self.links.link_mut(key) {
                    link.set_writer(writer);
                    machine.handle_connected(now, key);
                }
            }
            NetEvent::ConnectFailed { key, reason } => {
                if self.links.link(key).is_some() {
                    machine.handle_connect_failed(now, key, &reason);
                }
            }
            NetEvent::Closed { key, reason } => {
                if self.links.link(key).is_some() {
                    tracing::debug!(conn = %key, %reason, "socket closed");
                    machine.handle_eof(now, key);
                }
            }
        }
    }

    /// Feeds a lookupd exchange event to the state machine.
    pub(crate) fn lookup<M: Driven>(
        &mut self,
        machine: &mut M,
        now: Instant,
        ev: LookupEvent<LookupdRequestId>,
    ) {
        // Late events of an exchange the core already closed are dropped.
        match ev {
            LookupEvent::Data { key, data } if self.links.has_lookup(key) => {
                machine.handle_lookupd_input(now, key, &data);
            }
            LookupEvent::Eof { key } if self.links.has_lookup(key) => {
                machine.handle_lookupd_eof(now, key);
            }
            LookupEvent::Failed { key, reason } if self.links.has_lookup(key) => {
                machine.handle_lookupd_failed(now, key, &reason);
            }
            _ => {}
        }
    }

    /// Performs one action of the core. Bytes are gathered until [`flush`](Self::flush).
    pub(crate) fn act(&mut self, action: Action) {
        self.links.act(&mut self.net, action);
    }

    /// One write per connection per wake-up.
    pub(crate) fn flush(&mut self) {
        self.links.flush(&mut self.net);
    }

    /// Closes every socket and lookupd exchange.
    pub(crate) fn close_all(&mut self) {
        self.links.close_all(&mut self.net);
    }
}

/// A driver's one timer, re-armed only when the core's deadline changes.
pub(crate) struct Timer {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: Option<Instant>,
}

impl Timer {
    pub(crate) fn new() -> Self {
        Timer {
            sleep: Box::pin(tokio::time::sleep(Duration::from_secs(3600))),
            armed: None,
        }
    }

    /// Waits for inputs (up to `limit`, appended to `batch`) or the deadline. Returns false
    /// when the input channel is closed.
    pub(crate) async fn wait<I>(
        &mut self,
        deadline: Option<Instant>,
        rx: &mut mpsc::UnboundedReceiver<I>,
        batch: &mut Vec<I>,
        limit: usize,
    ) -> bool {
        if deadline != self.armed {
            self.armed = deadline;
            if let Some(t) = deadline {
                self.sleep.as_mut().reset(tokio::time::Instant::from_std(t));
            }
        }
        let armed = self.armed.is_some();
        tokio::select! {
            biased;
            n = rx.recv_many(batch, limit) => n > 0,
            () = &mut self.sleep, if armed => true,
        }
    }
}
