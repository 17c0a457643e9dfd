//! Security and transport layers: TLS, snappy, deflate, AUTH, and nsqd requiring TLS.

use super::{
    Compression, Connection, ConsumerOptions, ErrorKind, Factory, GoConfig, ProducerOptions, WAIT,
    addr, consumer, eventually, fast_config, start,
};
use crate::{AuthGrant, AuthTable, Authorization, Nsqd};
use std::time::Duration;

/// Publishes and consumes one 10 kB message with `connection`; while both are connected,
/// every broker client must satisfy `negotiated`.
fn round_trip_with(
    f: &dyn Factory,
    nsqd: &Nsqd,
    topic: &str,
    connection: &Connection,
    negotiated: impl Fn(&crate::ClientStats) -> bool,
) {
    let options = ProducerOptions {
        connection: connection.clone(),
        ..ProducerOptions::default()
    };
    let p = f.producer(&[addr(nsqd)], Some(&options)).unwrap();
    p.ping().unwrap();
    let body = vec![b'z'; 10_000];
    p.publish(topic, &body).unwrap();
    let mut c = consumer(
        f,
        nsqd,
        topic,
        ConsumerOptions {
            connection: connection.clone(),
            ..fast_config(1)
        },
    );
    let m = c.next(WAIT).expect("a message");
    assert_eq!(m.body(), &body[..]);
    m.finish();
    assert!(eventually(WAIT, || nsqd
        .channel(topic, "ch")
        .is_some_and(|c| c.finished == 1)));
    let clients = nsqd.clients();
    assert_eq!(clients.len(), 2, "{clients:?}");
    assert!(clients.iter().all(negotiated), "{clients:?}");
    c.stop();
    p.close();
}

pub(super) fn tls(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().tls_server_names(&["127.0.0.1"]));
    let conn = Connection {
        tls: true,
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "tls", &conn, |c| c.tls);
}

pub(super) fn snappy(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let conn = Connection {
        compression: Compression::Snappy,
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "snappy", &conn, |c| c.snappy);
}

pub(super) fn deflate(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder());
    let conn = Connection {
        compression: Compression::Deflate(3),
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "deflate", &conn, |c| c.deflate == Some(3));
}

pub(super) fn auth(f: &dyn Factory) {
    let table = AuthTable::new().with(
        "s3cret",
        AuthGrant::new("tester", vec![Authorization::all()]),
    );
    let nsqd = start(Nsqd::builder().auth(table));
    let conn = Connection {
        auth_secret: Some("s3cret".into()),
        ..Connection::default()
    };
    round_trip_with(f, &nsqd, "auth", &conn, |c| {
        c.identity.as_deref() == Some("tester")
    });
    // A wrong secret: publishes fail, they do not hang.
    let bad = ProducerOptions {
        publish_timeout: Some(Duration::from_secs(1)),
        connection: Connection {
            auth_secret: Some("wrong".into()),
            ..Connection::default()
        },
    };
    let p = f.producer(&[addr(&nsqd)], Some(&bad)).unwrap();
    assert!(p.publish("auth", b"x").is_err());
    p.close();
}

pub(super) fn tls_required_is_reported_by_connect(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().tls_required(true));
    let err = f
        .producer_connect(&addr(&nsqd), &GoConfig::default())
        .err()
        .expect("connect must fail without TLS");
    assert_eq!(err.kind, ErrorKind::TlsRequired, "{err}");
    assert!(err.message.contains("requires TLS"), "{err}");
}
