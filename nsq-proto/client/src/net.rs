//! [`Net`]: every socket of one driver, and the carrying-out of the core's [`Action`]s on
//! them. A connect or a lookupd request opens a [`Link`]; the bytes a connection is sent
//! during one round are gathered ([`Outbox`]) and handed to its link in one piece at the
//! round's end ([`send_gathered`](Net::send_gathered)); a disconnect hands over what was gathered, then
//! moves the link to those still writing their last bytes.

use super::Outbox;
use super::link::{Link, SocketEvent};
use super::runtime::{Runtime, Socket, SocketOptions};
use nsq_proto::driver::{Action, ConnId, Driven, LookupdRequestId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::Context;
use std::time::{Duration, Instant};

/// Every socket of one driver.
pub(crate) struct Net {
    runtime: Arc<dyn Runtime>,
    options: SocketOptions,
    /// nsqd connections, each with the bytes gathered for it this round.
    links: BTreeMap<ConnId, (Link<Box<dyn Socket>>, Outbox)>,
    /// nsqlookupd HTTP exchanges.
    lookups: BTreeMap<LookupdRequestId, Link<Box<dyn Socket>>>,
    /// Disconnected links still writing their last bytes.
    closing: Vec<Link<Box<dyn Socket>>>,
    /// A link was opened or closed since the last [`poll`](Self::poll) (it has not been
    /// polled, so no wake-up of it is registered).
    changed: bool,
}

impl Net {
    pub(crate) fn new(runtime: Arc<dyn Runtime>, options: SocketOptions) -> Self {
        Net {
            runtime,
            options,
            links: BTreeMap::new(),
            lookups: BTreeMap::new(),
            closing: Vec::new(),
            changed: false,
        }
    }

    pub(crate) fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    fn write_timeout(&self) -> Duration {
        self.options.write
    }

    fn link(&self, now: Instant, addr: &str, span: tracing::Span) -> Link<Box<dyn Socket>> {
        let connect = self.runtime.connect(addr, self.options);
        Link::new(connect, now + self.options.dial, span)
    }

    /// Carries out one action of the core, at `now` (dial deadlines count from it).
    pub(crate) fn act(&mut self, now: Instant, action: Action) {
        if !matches!(action, Action::Transmit { .. }) {
            self.changed = true;
        }
        match action {
            Action::Transmit { conn, data } => {
                if let Some((_, outbox)) = self.links.get_mut(&conn) {
                    outbox.push(data);
                }
            }
            Action::Connect { conn, addr } => {
                tracing::info!(%conn, nsqd = %addr, "connecting to nsqd");
                let link = self.link(now, &addr, super::connection_span(conn, &addr));
                self.links.insert(conn, (link, Outbox::default()));
            }
            Action::Disconnect { conn } => {
                if let Some((mut link, mut outbox)) = self.links.remove(&conn) {
                    if let Some(data) = outbox.take() {
                        link.send(data);
                    }
                    self.closing.extend(link.close());
                }
            }
            Action::LookupdRequest {
                request,
                addr,
                data,
            } => {
                tracing::debug!(%request, lookupd = %addr, "querying nsqlookupd");
                let mut link = self.link(now, &addr, super::lookupd_span(request, &addr));
                link.send(data);
                self.lookups.insert(request, link);
            }
            Action::LookupdClose { request } => {
                self.lookups.remove(&request);
            }
            #[allow(unreachable_patterns, reason = "Action is non_exhaustive")]
            other => tracing::debug!(?other, "unknown action ignored"),
        }
    }

    /// Hands each connection the bytes gathered this round, in one piece (one write).
    /// Returns whether any bytes were handed over.
    pub(crate) fn send_gathered(&mut self) -> bool {
        let mut sent = false;
        for (link, outbox) in self.links.values_mut() {
            if let Some(data) = outbox.take() {
                sent |= link.send(data);
            }
        }
        sent
    }

    /// Whether a link was opened or closed since the last [`poll`](Self::poll); clears it.
    pub(crate) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Polls every socket (writes what is queued, reads until it would block), feeding what
    /// happened to the core `m`. Returns whether a socket wants another poll before the
    /// driver waits ([`Polled::again`](super::link::Polled::again)).
    pub(crate) fn poll<M: Driven>(
        &mut self,
        cx: &mut Context<'_>,
        now: Instant,
        m: &mut M,
    ) -> bool {
        self.changed = false;
        let mut again = false;
        let write_timeout = self.write_timeout();
        for (&conn, (link, _)) in &mut self.links {
            if link.is_done() {
                continue;
            }
            let polled = link.poll(cx, now, write_timeout, &mut |event| match event {
                SocketEvent::Connected => m.handle_connected(now, conn),
                SocketEvent::ConnectFailed(reason) => m.handle_connect_failed(now, conn, &reason),
                SocketEvent::Data(mut data) => m.handle_input(now, conn, &mut data),
                SocketEvent::Eof => m.handle_eof(now, conn),
                SocketEvent::Failed(reason) => {
                    tracing::debug!(%conn, %reason, "socket closed");
                    m.handle_eof(now, conn);
                }
            });
            again |= polled.again;
            if polled.finished {
                link.set_done();
            }
        }
        for (&request, link) in &mut self.lookups {
            if link.is_done() {
                continue;
            }
            let mut over = false;
            let polled = link.poll(cx, now, write_timeout, &mut |event| match event {
                SocketEvent::Connected => {}
                SocketEvent::ConnectFailed(reason) | SocketEvent::Failed(reason) => {
                    tracing::debug!(%reason, "lookupd request failed");
                    m.handle_lookupd_failed(now, request, &reason);
                    over = true;
                }
                SocketEvent::Data(data) => m.handle_lookupd_input(now, request, &data),
                SocketEvent::Eof => {
                    m.handle_lookupd_eof(now, request);
                    over = true;
                }
            });
            again |= polled.again;
            if polled.finished || over {
                link.set_done();
            }
        }
        self.closing.retain_mut(|link| {
            let polled = link.poll(cx, now, write_timeout, &mut |_| {});
            again |= polled.again;
            !polled.finished
        });
        again
    }

    /// No disconnected socket is still writing its last bytes.
    pub(crate) fn is_quiet(&self) -> bool {
        self.closing.is_empty()
    }

    /// The earliest dial or write deadline of any socket.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let write_timeout = self.write_timeout();
        let links = self.links.values().map(|(link, _)| link);
        links
            .chain(self.lookups.values())
            .chain(&self.closing)
            .filter_map(|l| l.deadline(write_timeout))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::testing::idle;
    use bytes::Bytes;

    fn transmit(conn: ConnId, data: &'static [u8]) -> Action {
        Action::Transmit {
            conn,
            data: Bytes::from_static(data),
        }
    }

    /// What is queued on `conn`'s link.
    fn queued(net: &Net, conn: ConnId) -> Vec<String> {
        net.links[&conn]
            .0
            .queued()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    #[test]
    fn one_write_per_round_and_nothing_after_a_disconnect() {
        let mut machine =
            nsq_proto::Producer::new(nsq_proto::producer::ProducerConfig::default(), 1)
                .expect("default config");
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        machine.add_nsqd(now, "127.0.0.1:4150").expect("address");
        let Some(Action::Connect { conn, addr }) = machine.poll_action() else {
            panic!("the producer connects first");
        };
        let options = SocketOptions::new(Duration::from_secs(1), Duration::from_secs(1));
        let mut net = Net::new(idle(), options);
        net.act(now, Action::Connect { conn, addr });
        assert_eq!(
            net.next_deadline(),
            Some(now + Duration::from_secs(1)),
            "the dial"
        );
        for part in [b"a" as &[u8], b"b", b"c"] {
            net.act(
                now,
                Action::Transmit {
                    conn,
                    data: Bytes::from_static(part),
                },
            );
        }
        assert!(
            queued(&net, conn).is_empty(),
            "gathered until the round ends"
        );
        assert!(net.send_gathered());
        assert!(!net.send_gathered(), "nothing new");
        assert_eq!(queued(&net, conn), ["abc"]);
        net.act(now, transmit(conn, b"d"));
        net.act(now, Action::Disconnect { conn });
        assert!(!net.links.contains_key(&conn));
        // Bytes for a connection already closed are dropped.
        net.act(now, transmit(conn, b"late"));
        assert!(!net.send_gathered());
        // Never connected: nothing to write its last bytes to.
        assert!(net.is_quiet());
    }
}
