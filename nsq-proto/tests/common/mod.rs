//! Shared helpers for the connection tests: configs, a driver loop around the fake nsqd
//! (`nsq_proto::test_support`), and rcgen-made TLS certificates.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "shared by several test binaries, each using a different subset"
)]

use bytes::BytesMut;
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{Channel, Connection, ConnectionConfig, ConnectionEvent, Negotiated, Role, Topic};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use std::time::Instant;

pub fn topic() -> Topic {
    Topic::new("events").unwrap()
}

pub fn consumer() -> Role {
    Role::Consumer {
        topic: topic(),
        channel: Channel::new("workers").unwrap(),
    }
}

/// Creates a connection and runs the start-up against `peer`; returns the `Ready` settings.
pub fn connect(
    config: ConnectionConfig,
    role: Role,
    peer: &mut FakeNsqd,
    now: Instant,
) -> (Connection, Negotiated) {
    let mut conn = Connection::new(config, role, "nsqd.test:4150", now).unwrap();
    let events = exchange(&mut conn, peer, now);
    let Some(ConnectionEvent::Ready(n)) = events.first() else {
        panic!("expected Ready, got {events:?}; peer {peer:?}");
    };
    (conn, (**n).clone())
}

/// Feeds raw bytes to the client.
pub fn feed(conn: &mut Connection, now: Instant, bytes: &[u8]) {
    let mut buf = BytesMut::from(bytes);
    conn.handle_input(now, &mut buf);
    assert!(buf.is_empty());
}

pub fn events(conn: &mut Connection) -> Vec<ConnectionEvent> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

pub fn fake(config: FakeNsqdConfig) -> FakeNsqd {
    FakeNsqd::new(config)
}

fn next_ca() -> usize {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A CA, and a server certificate for `names` signed by it.
pub struct TestPki {
    pub ca_der: CertificateDer<'static>,
    pub server_chain: Vec<CertificateDer<'static>>,
    pub server_key: PrivateKeyDer<'static>,
}

pub fn pki(names: &[&str]) -> TestPki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("nsq-rs test CA {}", next_ca()),
    );
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    TestPki {
        ca_der: ca.der().clone(),
        server_chain: vec![cert.der().clone()],
        server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    }
}

impl TestPki {
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(self.server_chain.clone(), self.server_key.clone_key())
            .unwrap(),
        )
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        roots
    }
}

/// The origin of virtual time for a test. Only ever moved forward by adding durations.
#[allow(
    clippy::disallowed_methods,
    reason = "tests need one real Instant as the origin of virtual time"
)]
pub fn t0() -> Instant {
    Instant::now()
}
