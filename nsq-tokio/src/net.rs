//! Socket plumbing shared by the consumer and producer drivers: it only moves bytes.
//!
//! Per nsqd connection there is one task that connects and then reads (forwarding every read as
//! a `BytesMut` chunk to the driver), and one writer task that writes the `Bytes` the driver
//! hands it. Reading never waits for writing, so a peer that stops reading cannot stop us from
//! reading (no write/write deadlock).

use bytes::{Bytes, BytesMut};
use std::time::Duration;
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
pub(crate) struct Link {
    reader: AbortHandle,
    writer: Option<mpsc::UnboundedSender<Bytes>>,
}

impl Link {
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
) -> Link
where
    K: Copy + Send + std::fmt::Display + 'static,
    T: Send + 'static,
{
    let span = tracing::info_span!("nsqd", conn = %key, addr = %addr);
    let addr = addr.to_owned();
    let task = tokio::spawn(
        async move {
            let stream = match tokio::time::timeout(dial_timeout, TcpStream::connect(&addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "connect failed");
                    let _ = tx.send(wrap(NetEvent::ConnectFailed {
                        key,
                        reason: e.to_string(),
                    }));
                    return;
                }
                Err(_) => {
                    tracing::warn!(?dial_timeout, "connect timed out");
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
    Link {
        reader: task.abort_handle(),
        writer: None,
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
    let span = tracing::debug_span!("nsqlookupd", request = %key, addr = %addr);
    let addr = addr.to_owned();
    tokio::spawn(
        async move {
            let fail = move |reason: String| {
                tracing::warn!(%reason, "lookupd request failed");
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

/// Gathers the bytes the core emits for one connection during one wake-up, so each connection
/// gets at most one write per wake-up.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    first: Option<Bytes>,
    more: BytesMut,
}

impl Outbox {
    /// Adds bytes (no copy for the first chunk of a wake-up).
    pub(crate) fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match &self.first {
            None if self.more.is_empty() => self.first = Some(data),
            _ => {
                if let Some(first) = self.first.take() {
                    self.more.extend_from_slice(&first);
                }
                self.more.extend_from_slice(&data);
            }
        }
    }

    /// Takes everything gathered, if anything.
    pub(crate) fn take(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.more.is_empty() {
            None
        } else {
            Some(self.more.split().freeze())
        }
    }
}

/// A random seed for a state machine's RNG (jitter, random connection choice).
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}
