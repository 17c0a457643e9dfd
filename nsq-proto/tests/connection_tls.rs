//! TLS in memory against a rustls server with rcgen-made certificates.
#![cfg(feature = "tls")]

mod common;

use common::{consumer, events, fake, pki, t0, topic};
use nsq_proto::connection::TlsError;
use nsq_proto::test_support::{ClientCommand, FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{
    CloseReason, Compression, Connection, ConnectionConfig, ConnectionEvent, Negotiated,
    NegotiatedCompression, Role, Secret, TlsConfig,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

fn start(
    tls: TlsConfig,
    server: Arc<rustls::ServerConfig>,
    addr: &str,
    compression: Compression,
    role: Role,
) -> (Connection, FakeNsqd, Vec<ConnectionEvent>) {
    let now = t0();
    let mut peer = fake(FakeNsqdConfig {
        tls: Some(server),
        ..FakeNsqdConfig::default()
    });
    let config = ConnectionConfig {
        tls: Some(tls),
        compression,
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, role, addr, now).unwrap();
    let events = exchange(&mut conn, &mut peer, now);
    (conn, peer, events)
}

fn ready(events: &[ConnectionEvent]) -> &Negotiated {
    match events.first() {
        Some(ConnectionEvent::Ready(n)) => n,
        _ => panic!("expected Ready, got {events:?}"),
    }
}

fn tls_failure(events: &[ConnectionEvent]) -> &rustls::Error {
    match events {
        [ConnectionEvent::Closed(CloseReason::Tls(TlsError::Rustls(e)))] => e,
        _ => panic!("expected a TLS failure, got {events:?}"),
    }
}

#[test]
fn trusted_certificate_passes_with_every_compression() {
    let pki = pki(&["nsqd.test"]);
    for compression in [
        Compression::None,
        Compression::Snappy,
        Compression::Deflate { level: 6 },
    ] {
        for role in [Role::Producer, consumer()] {
            let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
            let (mut conn, mut peer, ev) = start(
                tls,
                pki.server_config(),
                "nsqd.test:4150",
                compression,
                role.clone(),
            );
            let n = ready(&ev);
            assert!(n.tls);
            assert!(peer.is_tls());
            assert_eq!(
                n.compression == NegotiatedCompression::None,
                compression == Compression::None
            );
            let now = t0();
            peer.send_heartbeat();
            if role.is_consumer() {
                conn.set_rdy(now, 5).unwrap();
                let _ = exchange(&mut conn, &mut peer, now);
                let big = vec![b'z'; 100_000];
                let id = peer.deliver(&big).unwrap();
                let ev = exchange(&mut conn, &mut peer, now);
                assert!(
                    matches!(&ev[..], [ConnectionEvent::Message(m)] if m.id == id && m.body[..] == big[..])
                );
                conn.finish(now, &id).unwrap();
                let _ = exchange(&mut conn, &mut peer, now);
                assert_eq!(peer.in_flight(), 0);
            } else {
                let token = conn.publish(now, &topic(), &vec![7u8; 70_000]).unwrap();
                let ev = exchange(&mut conn, &mut peer, now);
                assert_eq!(ev, vec![ConnectionEvent::Published(token)]);
                assert!(
                    peer.commands().iter().any(
                        |c| matches!(c, ClientCommand::Pub { body, .. } if body.len() == 70_000)
                    )
                );
            }
            assert!(peer.commands().contains(&ClientCommand::Nop));
            assert!(peer.failure().is_none(), "{:?}", peer.failure());
        }
    }
}

#[test]
fn wrong_hostname_fails() {
    let pki = pki(&["other.test"]);
    let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
    let (conn, _peer, ev) = start(
        tls,
        pki.server_config(),
        "nsqd.test:4150",
        Compression::None,
        Role::Producer,
    );
    let e = tls_failure(&ev);
    assert!(
        matches!(
            e,
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{e:?}"
    );
    assert!(conn.close_reason().unwrap().to_string().contains("TLS"));
}

#[test]
fn untrusted_certificate_fails() {
    let server = pki(&["nsqd.test"]);
    let other = pki(&["nsqd.test"]);
    let tls = TlsConfig::with_root_store(other.roots(), None).unwrap();
    let (_conn, _peer, ev) = start(
        tls,
        server.server_config(),
        "nsqd.test:4150",
        Compression::Snappy,
        consumer(),
    );
    let e = tls_failure(&ev);
    assert!(
        matches!(
            e,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
        ),
        "{e:?}"
    );
    // webpki roots do not trust a private CA either.
    let tls = TlsConfig::webpki_roots().unwrap();
    let (_conn, _peer, ev) = start(
        tls,
        server.server_config(),
        "nsqd.test:4150",
        Compression::None,
        Role::Producer,
    );
    tls_failure(&ev);
}

#[test]
fn server_name_override_and_ip_addresses() {
    let pki = pki(&["nsqd.test"]);
    let tls = TlsConfig::with_root_store(pki.roots(), None)
        .unwrap()
        .with_server_name("nsqd.test");
    assert_eq!(tls.server_name(), Some("nsqd.test"));
    let (_conn, _peer, ev) = start(
        tls,
        pki.server_config(),
        "10.0.0.7:4150",
        Compression::None,
        Role::Producer,
    );
    ready(&ev);

    // Without the override the IP address itself must be in the certificate.
    let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
    let (_conn, _peer, ev) = start(
        tls,
        pki.server_config(),
        "10.0.0.7:4150",
        Compression::None,
        Role::Producer,
    );
    tls_failure(&ev);
}

#[test]
fn skipping_verification_is_explicit_and_works() {
    let pki = pki(&["whatever.invalid"]);
    let tls = TlsConfig::dangerous_skip_verification(None).unwrap();
    assert!(tls.is_verification_skipped());
    assert!(format!("{tls:?}").contains("verification_skipped: true"));
    let (_conn, _peer, ev) = start(
        tls,
        pki.server_config(),
        "nsqd.test:4150",
        Compression::Deflate { level: 1 },
        consumer(),
    );
    assert!(ready(&ev).tls);
    assert!(!TlsConfig::webpki_roots().unwrap().is_verification_skipped());
}

#[test]
fn client_certificate_is_presented() {
    let server_pki = pki(&["nsqd.test"]);
    // A client CA and a client certificate signed by it.
    let client_pki = pki(&["client.test"]);
    let client_verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(client_pki.roots()),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    let server = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(
            server_pki.server_chain.clone(),
            server_pki.server_key.clone_key(),
        )
        .unwrap(),
    );
    let chain: Vec<CertificateDer<'static>> = client_pki.server_chain.clone();
    let key: PrivateKeyDer<'static> = client_pki.server_key.clone_key();
    let tls = TlsConfig::with_root_store(server_pki.roots(), Some((chain, key))).unwrap();
    let (_conn, peer, ev) = start(
        tls,
        server.clone(),
        "nsqd.test:4150",
        Compression::None,
        Role::Producer,
    );
    ready(&ev);
    assert!(peer.failure().is_none());

    // Without a client certificate the server refuses the handshake.
    let tls = TlsConfig::with_root_store(server_pki.roots(), None).unwrap();
    let (_conn, peer, ev) = start(
        tls,
        server,
        "nsqd.test:4150",
        Compression::None,
        Role::Producer,
    );
    assert!(peer.failure().is_some());
    assert!(matches!(
        &ev[..],
        [ConnectionEvent::Closed(CloseReason::Tls(_))]
    ));
}

#[test]
fn auth_runs_inside_tls() {
    let pki = pki(&["nsqd.test"]);
    let now = t0();
    let mut peer = fake(FakeNsqdConfig {
        tls: Some(pki.server_config()),
        auth_secret: Some(b"tok".to_vec()),
        ..FakeNsqdConfig::default()
    });
    let config = ConnectionConfig {
        tls: Some(TlsConfig::with_root_store(pki.roots(), None).unwrap()),
        compression: Compression::Snappy,
        auth_secret: Some(Secret::new("tok")),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, consumer(), "nsqd.test:4150", now).unwrap();
    let ev = exchange(&mut conn, &mut peer, now);
    let n = ready(&ev);
    assert_eq!(n.auth.as_ref().unwrap().identity, "test-user");
    assert!(matches!(
        peer.commands(),
        [
            ClientCommand::Identify(_),
            ClientCommand::Auth(_),
            ClientCommand::Sub { .. }
        ]
    ));
    assert!(events(&mut conn).is_empty());
}

#[test]
fn bytes_after_the_identify_reply_are_tls_records() {
    // A server (or attacker) that grants TLS and then talks plain text in the same read must
    // not get its plain-text OK accepted: those bytes go to rustls and fail there.
    let pki = pki(&["nsqd.test"]);
    let now = t0();
    let config = ConnectionConfig {
        tls: Some(TlsConfig::with_root_store(pki.roots(), None).unwrap()),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, Role::Producer, "nsqd.test:4150", now).unwrap();
    let _ = conn.poll_transmit();
    let mut wire = Vec::new();
    nsq_proto::encode_frame(&mut wire, 0, br#"{"tls_v1":true}"#);
    nsq_proto::encode_frame(&mut wire, 0, b"OK");
    common::feed(&mut conn, now, &wire);
    let ev = events(&mut conn);
    assert!(
        matches!(&ev[..], [ConnectionEvent::Closed(CloseReason::Tls(_))]),
        "{ev:?}"
    );
    // The ClientHello (and an alert) went out; no plain-text command did.
    let out = conn.poll_transmit().unwrap();
    assert_eq!(out[0], 0x16, "TLS handshake record first");
}

#[test]
fn close_notify_from_the_server_is_end_of_stream() {
    let pki = pki(&["nsqd.test"]);
    let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
    let (mut conn, mut peer, ev) = start(
        tls,
        pki.server_config(),
        "nsqd.test:4150",
        Compression::None,
        Role::Producer,
    );
    ready(&ev);
    let now = t0();
    let token = conn.publish(now, &topic(), b"x").unwrap();
    let _ = conn.poll_transmit();
    peer.send_close_notify();
    let ev = exchange(&mut conn, &mut peer, now);
    assert_eq!(
        ev,
        vec![
            ConnectionEvent::PublishFailed(
                token,
                nsq_proto::PublishError::Closed(CloseReason::Eof)
            ),
            ConnectionEvent::Closed(CloseReason::Eof)
        ]
    );
}

#[test]
fn graceful_close_ends_with_close_notify() {
    let pki = pki(&["nsqd.test"]);
    for compression in [Compression::None, Compression::Snappy] {
        // Consumer: CLS, CLOSE_WAIT, the last FIN, then close_notify in the same last transmit.
        let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
        let (mut conn, mut peer, ev) = start(
            tls,
            pki.server_config(),
            "nsqd.test:4150",
            compression,
            consumer(),
        );
        ready(&ev);
        let now = t0();
        conn.set_rdy(now, 1).unwrap();
        let _ = exchange(&mut conn, &mut peer, now);
        let id = peer.deliver(b"body").unwrap();
        let _ = exchange(&mut conn, &mut peer, now);
        assert!(conn.is_in_flight(&id));
        conn.close(now);
        assert!(exchange(&mut conn, &mut peer, now).is_empty());
        assert!(
            !peer.got_close_notify(),
            "not before the connection is done"
        );
        conn.finish(now, &id).unwrap();
        assert_eq!(
            events(&mut conn),
            vec![ConnectionEvent::Closed(CloseReason::Graceful {
                unanswered: 0
            })]
        );
        let last = conn.poll_transmit().unwrap();
        peer.receive(&last);
        assert!(peer.got_close_notify(), "{compression:?}");
        assert!(
            peer.commands().contains(&ClientCommand::Fin(id)),
            "the FIN before it was read: {:?}",
            peer.commands()
        );
        assert_eq!(peer.failure(), None);
        assert_eq!(conn.poll_transmit(), None);

        // Producer: close once the outstanding publish is answered.
        let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
        let (mut conn, mut peer, ev) = start(
            tls,
            pki.server_config(),
            "nsqd.test:4150",
            compression,
            Role::Producer,
        );
        ready(&ev);
        let token = conn.publish(now, &topic(), b"x").unwrap();
        conn.close(now);
        let ev = exchange(&mut conn, &mut peer, now);
        assert_eq!(
            ev,
            vec![
                ConnectionEvent::Published(token),
                ConnectionEvent::Closed(CloseReason::Graceful { unanswered: 0 })
            ]
        );
        assert!(peer.got_close_notify(), "{compression:?}");
    }
}

#[test]
fn failures_send_no_close_notify() {
    let pki = pki(&["nsqd.test"]);
    let tls = TlsConfig::with_root_store(pki.roots(), None).unwrap();
    let (mut conn, mut peer, ev) = start(
        tls,
        pki.server_config(),
        "nsqd.test:4150",
        Compression::None,
        Role::Producer,
    );
    ready(&ev);
    let now = t0();
    conn.handle_eof(now);
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Eof)]
    );
    if let Some(out) = conn.poll_transmit() {
        peer.receive(&out);
    }
    assert!(!peer.got_close_notify());
}
