//! The part of a driver thread shared by the consumer and the producer: it owns the sockets'
//! threads and feeds the core ([`Driven`]) what they report, and performs the core's
//! [`Action`]s.

use crate::net::{self, Link, LookupEvent, LookupLink, NetEvent, Threads};
use nsq_proto::adapter::Outbox;
use nsq_proto::consumer::LookupdRequestId;
use nsq_proto::driver::{Action, ConnId, Driven};
use std::collections::BTreeMap;
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

/// The sockets of one driver.
pub(crate) struct Io<C> {
    tx: Sender<Input<C>>,
    links: BTreeMap<ConnId, Link>,
    outboxes: BTreeMap<ConnId, Outbox>,
    lookups: BTreeMap<LookupdRequestId, LookupLink>,
    threads: Threads,
    dial_timeout: Duration,
    write_timeout: Duration,
    lookupd_timeout: Duration,
}

impl<C: Send + 'static> Io<C> {
    pub(crate) fn new(
        tx: Sender<Input<C>>,
        dial_timeout: Duration,
        write_timeout: Duration,
        lookupd_timeout: Duration,
    ) -> Self {
        Io {
            tx,
            links: BTreeMap::new(),
            outboxes: BTreeMap::new(),
            lookups: BTreeMap::new(),
            threads: Threads::default(),
            dial_timeout,
            write_timeout,
            lookupd_timeout,
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
        let Some(link) = self.links.get_mut(&key) else {
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
                    self.write_timeout,
                    &mut self.threads,
                    self.tx.clone(),
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
                if self.lookups.contains_key(&key) {
                    core.handle_lookupd_input(now, key, &data);
                }
            }
            LookupEvent::Eof { key } => {
                if self.lookups.contains_key(&key) {
                    core.handle_lookupd_eof(now, key);
                }
            }
            LookupEvent::Failed { key, reason } => {
                if self.lookups.contains_key(&key) {
                    core.handle_lookupd_failed(now, key, &reason);
                }
            }
        }
    }

    /// Performs one action of the core (bytes are gathered until [`flush`](Self::flush)).
    pub(crate) fn act(&mut self, action: Action) {
        match action {
            Action::Transmit { conn, data } => {
                self.outboxes.entry(conn).or_default().push(data);
            }
            Action::Connect { conn, addr } => {
                tracing::info!(%conn, %addr, "connecting to nsqd");
                let link = net::connect(
                    conn,
                    &addr,
                    self.dial_timeout,
                    &mut self.threads,
                    self.tx.clone(),
                    Input::Net,
                );
                self.links.insert(conn, link);
            }
            Action::Disconnect { conn } => {
                let pending = self.outboxes.remove(&conn).and_then(|mut o| o.take());
                if let Some(link) = self.links.remove(&conn) {
                    if let Some(data) = pending {
                        link.send(data);
                    }
                    link.close();
                }
            }
            Action::LookupdRequest {
                request,
                addr,
                data,
            } => {
                tracing::debug!(%request, %addr, "querying nsqlookupd");
                let l = net::lookup(
                    request,
                    &addr,
                    data,
                    (self.dial_timeout, self.lookupd_timeout),
                    &mut self.threads,
                    self.tx.clone(),
                    Input::Lookup,
                );
                self.lookups.insert(request, l);
            }
            Action::LookupdClose { request } => {
                if let Some(l) = self.lookups.remove(&request) {
                    l.close();
                }
            }
            other => tracing::debug!(?other, "unknown action ignored"),
        }
    }

    /// One write per connection per wake-up.
    pub(crate) fn flush(&mut self) {
        for (conn, outbox) in &mut self.outboxes {
            if let Some(data) = outbox.take() {
                if let Some(link) = self.links.get(conn) {
                    link.send(data);
                }
            }
        }
    }

    /// Closes every socket (after the bytes already handed to the writers) and joins every
    /// thread.
    pub(crate) fn shutdown(&mut self) {
        self.flush();
        for (_, link) in std::mem::take(&mut self.links) {
            link.close();
        }
        for (_, l) in std::mem::take(&mut self.lookups) {
            l.close();
        }
        self.threads.join_all();
    }
}

impl<C> Drop for Io<C> {
    fn drop(&mut self) {
        // A driver that panicked still closes its sockets, so its threads end.
        for (_, link) in std::mem::take(&mut self.links) {
            link.abort();
        }
        for (_, l) in std::mem::take(&mut self.lookups) {
            l.close();
        }
    }
}
