//! The part of a driver thread shared by the consumer and the producer: it owns the sockets'
//! threads and feeds the core ([`Driven`]) what they report, and performs the core's
//! [`Action`]s.

use crate::net::{self, ConnThreads, LookupEvent, LookupThread, NetEvent, Threads};
use bytes::Bytes;
use nsq_proto::client::{SocketTable, Transport};
use nsq_proto::driver::{Action, ConnId, Driven, LookupdRequestId};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

/// At most this many inputs are handled per wake-up before the outputs are drained.
pub(crate) const BATCH: usize = 1024;

/// Everything a driver thread waits for, on one channel.
pub(crate) enum Input<C> {
    /// A socket thread's report.
    Net(NetEvent<ConnId>),
    /// A lookupd exchange's report.
    Lookup(LookupEvent<LookupdRequestId>),
    /// A command or answer from the user side.
    Cmd(C),
}

/// The thread half of performing the core's actions (the shared [`SocketTable`] does the rest):
/// reader, writer and lookupd threads reporting on the driver's channel.
pub(crate) struct Sockets<C> {
    tx: Sender<Input<C>>,
    threads: Threads,
    dial_timeout: Duration,
    write_timeout: Duration,
    lookupd_timeout: Duration,
}

impl<C: Send + 'static> Transport for Sockets<C> {
    type Socket = ConnThreads;
    type Lookup = LookupThread;

    fn connect(&mut self, conn: ConnId, addr: &str) -> ConnThreads {
        net::connect(
            conn,
            addr,
            self.dial_timeout,
            &mut self.threads,
            self.tx.clone(),
            Input::Net,
        )
    }

    fn send(&mut self, link: &mut ConnThreads, data: Bytes) {
        link.send(data);
    }

    fn close(&mut self, link: ConnThreads) {
        link.close();
    }

    fn lookup(&mut self, request: LookupdRequestId, addr: &str, data: Bytes) -> LookupThread {
        net::lookup(
            request,
            addr,
            data,
            (self.dial_timeout, self.lookupd_timeout),
            &mut self.threads,
            self.tx.clone(),
            Input::Lookup,
        )
    }

    fn close_lookup(&mut self, lookup: LookupThread) {
        lookup.close();
    }
}

/// The sockets of one driver.
pub(crate) struct Net<C: Send + 'static> {
    net: Sockets<C>,
    links: SocketTable<Sockets<C>>,
}

impl<C: Send + 'static> Net<C> {
    pub(crate) fn new(
        tx: Sender<Input<C>>,
        dial_timeout: Duration,
        write_timeout: Duration,
        lookupd_timeout: Duration,
    ) -> Self {
        Net {
            net: Sockets {
                tx,
                threads: Threads::default(),
                dial_timeout,
                write_timeout,
                lookupd_timeout,
            },
            links: SocketTable::default(),
        }
    }

    /// Waits for inputs until `deadline` (forever if `None`), then takes every input already
    /// queued (up to [`BATCH`]). False once every sender is gone.
    pub(crate) fn wait(
        rx: &Receiver<Input<C>>,
        deadline: Option<Instant>,
        batch: &mut Vec<Input<C>>,
    ) -> bool {
        let first = match deadline {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
        };
        match first {
            Ok(i) => batch.push(i),
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(i) => batch.push(i),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        true
    }

    /// Hands a socket thread's report to the core.
    pub(crate) fn net_input<M: Driven>(
        &mut self,
        core: &mut M,
        now: Instant,
        ev: NetEvent<ConnId>,
    ) {
        let key = match &ev {
            NetEvent::Data { key, .. }
            | NetEvent::Connected { key, .. }
            | NetEvent::ConnectFailed { key, .. }
            | NetEvent::Closed { key, .. } => *key,
        };
        let Some(link) = self.links.link_mut(key) else {
            if let NetEvent::Connected { stream, .. } = ev {
                // Closed while it was connecting.
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            return;
        };
        // The core handles the connection's socket events inside the connection's span.
        let span = link.span().clone();
        let _enter = span.enter();
        match ev {
            NetEvent::Data { mut data, .. } => core.handle_input(now, key, &mut data),
            NetEvent::Connected { stream, .. } => {
                link.start_writer(
                    key,
                    stream,
                    self.net.write_timeout,
                    &mut self.net.threads,
                    self.net.tx.clone(),
                    Input::Net,
                );
                core.handle_connected(now, key);
            }
            NetEvent::ConnectFailed { reason, .. } => {
                core.handle_connect_failed(now, key, &reason);
            }
            NetEvent::Closed { reason, .. } => {
                if link.is_connected() {
                    tracing::debug!(%reason, "socket closed");
                    core.handle_eof(now, key);
                }
            }
        }
    }

    /// Hands a lookupd exchange's report to the core.
    pub(crate) fn lookup_input<M: Driven>(
        &mut self,
        core: &mut M,
        now: Instant,
        ev: LookupEvent<LookupdRequestId>,
    ) {
        match ev {
            LookupEvent::Data { key, data } => {
                if self.links.has_lookup(key) {
                    core.handle_lookupd_input(now, key, &data);
                }
            }
            LookupEvent::Eof { key } => {
                if self.links.has_lookup(key) {
                    core.handle_lookupd_eof(now, key);
                }
            }
            LookupEvent::Failed { key, reason } => {
                if self.links.has_lookup(key) {
                    core.handle_lookupd_failed(now, key, &reason);
                }
            }
        }
    }

    /// Performs one action of the core (bytes are gathered until [`flush`](Self::flush)).
    pub(crate) fn act(&mut self, action: Action) {
        self.links.act(&mut self.net, action);
    }

    /// One write per connection per wake-up.
    pub(crate) fn flush(&mut self) {
        self.links.flush(&mut self.net);
    }

    /// Closes every socket (after the bytes already handed to the writers) and joins every
    /// thread.
    pub(crate) fn shutdown(&mut self) {
        self.links.close_all(&mut self.net);
        self.net.threads.join_all();
    }
}

impl<C: Send + 'static> Drop for Net<C> {
    fn drop(&mut self) {
        // A driver that panicked still closes its sockets, so its threads end.
        let (links, lookups) = self.links.take_all();
        for link in links {
            link.abort();
        }
        for l in lookups {
            l.close();
        }
    }
}
