//! Performing a driver's [`Action`]s: which nsqd connection and which lookupd exchange has
//! which runtime handle, with the bytes of one wake-up gathered per connection ([`Outbox`]).
//! The runtime half (opening sockets, spawning tasks or threads) is a [`Transport`].

use super::Outbox;
use bytes::Bytes;
use nsq_proto::driver::{Action, ConnId, LookupdRequestId};
use std::collections::BTreeMap;

/// What an adapter does with sockets: the runtime-specific half of performing [`Action`]s.
pub(crate) trait Transport {
    /// The handle on one nsqd connection (its tasks or threads).
    type Socket;
    /// The handle on one nsqlookupd HTTP exchange.
    type Lookup;

    /// Starts connecting `conn` to the nsqd at `addr`; the result is reported to the core
    /// later (`handle_connected` / `handle_connect_failed`).
    fn connect(&mut self, conn: ConnId, addr: &str) -> Self::Socket;
    /// Hands the bytes of one wake-up to the connection's writer.
    fn send(&mut self, link: &mut Self::Socket, data: Bytes);
    /// Closes the connection after the bytes already handed to it.
    fn close(&mut self, link: Self::Socket);
    /// Starts the HTTP exchange `request` (the complete request `data`) with the lookupd at
    /// `addr`.
    fn lookup(&mut self, request: LookupdRequestId, addr: &str, data: Bytes) -> Self::Lookup;
    /// Abandons a lookupd exchange.
    fn close_lookup(&mut self, lookup: Self::Lookup);
}

/// The connections and lookupd exchanges a driver has open, performing the core's actions
/// through a [`Transport`]: bytes are gathered until [`flush`](Self::flush) (one write per
/// connection per wake-up), a `Disconnect` writes what was gathered before closing.
pub(crate) struct SocketTable<T: Transport> {
    links: BTreeMap<ConnId, (T::Socket, Outbox)>,
    lookups: BTreeMap<LookupdRequestId, T::Lookup>,
}

impl<T: Transport> Default for SocketTable<T> {
    fn default() -> Self {
        SocketTable {
            links: BTreeMap::new(),
            lookups: BTreeMap::new(),
        }
    }
}

impl<T: Transport> std::fmt::Debug for SocketTable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketTable")
            .field("links", &self.links.keys().collect::<Vec<_>>())
            .field("lookups", &self.lookups.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<T: Transport> SocketTable<T> {
    /// Performs one action of the core.
    pub(crate) fn act(&mut self, transport: &mut T, action: Action) {
        match action {
            Action::Transmit { conn, data } => {
                if let Some((_, outbox)) = self.links.get_mut(&conn) {
                    outbox.push(data);
                }
            }
            Action::Connect { conn, addr } => {
                tracing::info!(%conn, nsqd = %addr, "connecting to nsqd");
                let link = transport.connect(conn, &addr);
                self.links.insert(conn, (link, Outbox::default()));
            }
            Action::Disconnect { conn } => {
                if let Some((mut link, mut outbox)) = self.links.remove(&conn) {
                    if let Some(data) = outbox.take() {
                        transport.send(&mut link, data);
                    }
                    transport.close(link);
                }
            }
            Action::LookupdRequest {
                request,
                addr,
                data,
            } => {
                tracing::debug!(%request, lookupd = %addr, "querying nsqlookupd");
                let lookup = transport.lookup(request, &addr, data);
                self.lookups.insert(request, lookup);
            }
            Action::LookupdClose { request } => {
                if let Some(lookup) = self.lookups.remove(&request) {
                    transport.close_lookup(lookup);
                }
            }
            #[allow(unreachable_patterns, reason = "Action is non_exhaustive")]
            other => tracing::debug!(?other, "unknown action ignored"),
        }
    }

    /// Hands every connection the bytes gathered since the last flush, in one piece.
    pub(crate) fn flush(&mut self, transport: &mut T) {
        for (link, outbox) in self.links.values_mut() {
            if let Some(data) = outbox.take() {
                transport.send(link, data);
            }
        }
    }

    /// The open connection `conn`.
    #[cfg(test)]
    fn link(&self, conn: ConnId) -> Option<&T::Socket> {
        self.links.get(&conn).map(|(link, _)| link)
    }

    /// Every open connection, mutably (the driver polls its sockets itself).
    pub(crate) fn links_mut(&mut self) -> impl Iterator<Item = (ConnId, &mut T::Socket)> {
        self.links.iter_mut().map(|(&conn, (link, _))| (conn, link))
    }

    /// Every open lookupd exchange, mutably.
    pub(crate) fn lookups_mut(
        &mut self,
    ) -> impl Iterator<Item = (LookupdRequestId, &mut T::Lookup)> {
        self.lookups
            .iter_mut()
            .map(|(&request, lookup)| (request, lookup))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what the links ask of the transport.
    #[derive(Default)]
    struct Log(Vec<String>);

    impl Transport for Log {
        type Socket = ConnId;
        type Lookup = LookupdRequestId;
        fn connect(&mut self, conn: ConnId, addr: &str) -> ConnId {
            self.0.push(format!("connect {conn} {addr}"));
            conn
        }
        fn send(&mut self, link: &mut ConnId, data: Bytes) {
            self.0
                .push(format!("send {link} {}", String::from_utf8_lossy(&data)));
        }
        fn close(&mut self, link: ConnId) {
            self.0.push(format!("close {link}"));
        }
        fn lookup(&mut self, request: LookupdRequestId, addr: &str, _: Bytes) -> Self::Lookup {
            self.0.push(format!("lookup {request} {addr}"));
            request
        }
        fn close_lookup(&mut self, lookup: LookupdRequestId) {
            self.0.push(format!("close lookup {lookup}"));
        }
    }

    /// SocketTable with one connection, opened as a core asks for it.
    fn connected() -> (Log, SocketTable<Log>, ConnId) {
        let mut core = nsq_proto::Producer::new(nsq_proto::producer::ProducerConfig::default(), 1)
            .expect("default config");
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = std::time::Instant::now();
        core.add_nsqd(now, "127.0.0.1:4150").expect("address");
        let Some(Action::Connect { conn, addr }) = core.poll_action() else {
            panic!("the producer connects first");
        };
        let mut t = Log::default();
        let mut links = SocketTable::<Log>::default();
        links.act(&mut t, Action::Connect { conn, addr });
        (t, links, conn)
    }

    #[test]
    fn one_write_per_flush_and_pending_bytes_before_close() {
        let (mut t, mut links, conn) = connected();
        assert!(links.link(conn).is_some());
        for part in ["a", "b", "c"] {
            links.act(
                &mut t,
                Action::Transmit {
                    conn,
                    data: Bytes::from_static(part.as_bytes()),
                },
            );
        }
        links.flush(&mut t);
        links.flush(&mut t);
        links.act(
            &mut t,
            Action::Transmit {
                conn,
                data: Bytes::from_static(b"d"),
            },
        );
        links.act(&mut t, Action::Disconnect { conn });
        assert!(links.link(conn).is_none());
        // Bytes for a connection already closed are dropped.
        links.act(
            &mut t,
            Action::Transmit {
                conn,
                data: Bytes::from_static(b"late"),
            },
        );
        links.flush(&mut t);
        assert_eq!(
            t.0,
            [
                format!("connect {conn} 127.0.0.1:4150"),
                format!("send {conn} abc"),
                format!("send {conn} d"),
                format!("close {conn}"),
            ]
        );
    }
}
