//! Security and transport layers: TLS, snappy, deflate, AUTH, and nsqd requiring TLS.

use super::{
    Compression, Connection, ConsumerOptions, ErrorKind, Factory, GoConfig, Problem,
    ProducerOptions, WAIT, addr, consumer, eventually, fast_config, start,
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
        ..ProducerOptions::default()
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
    assert_eq!(
        err.kind,
        ErrorKind::Misconfigured(Problem::TlsRequired),
        "{err}"
    );
    assert!(err.message.contains("requires TLS"), "{err}");
}

/// A port that accepts connections, reads what the client sends first, answers `reply` and
/// hangs up, counting the connections: a stand-in for a port of the wrong service.
struct WrongPort {
    addr: String,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl WrongPort {
    fn start(reply: &'static [u8]) -> WrongPort {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = std::sync::Arc::<std::sync::atomic::AtomicUsize>::default();
        let stop = std::sync::Arc::<std::sync::atomic::AtomicBool>::default();
        let (count, done) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if done.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut first = [0u8; 4];
                let _ = stream.read_exact(&mut first);
                let _ = stream.write_all(reply);
            }
        });
        WrongPort {
            addr,
            accepted,
            stop,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for WrongPort {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(&self.addr);
    }
}

/// The wrong port, a TLS mismatch and refused credentials are each a typed error, from
/// `Producer::connect`, a lazily built producer's publishes and a consumer's
/// `connect_to_nsqd`; the consumer shows the nsqd as misconfigured and tries again only when
/// asked.
pub(super) fn misconfigurations_are_typed_errors(f: &dyn Factory) {
    let expect = |r: Result<(), super::ClientError>, problem: Problem| {
        let e = r.expect_err("must fail");
        assert_eq!(e.kind, ErrorKind::Misconfigured(problem), "{e}");
    };
    let connect = |addr: &str| f.producer_connect(addr, &GoConfig::default()).map(drop);
    // The wrong port: nsqd's HTTP port, and nsqlookupd's TCP port (which answers anything
    // but its own protocol with a bare E_BAD_PROTOCOL).
    let nsqd = start(Nsqd::builder().http(true));
    let http = nsqd.http_address().unwrap().to_string();
    expect(connect(&http), Problem::HttpPort);
    let lookupd_tcp = WrongPort::start(b"\x00\x00\x00\x0eE_BAD_PROTOCOL");
    let e = connect(&lookupd_tcp.addr).expect_err("must fail");
    assert_eq!(
        e.kind,
        ErrorKind::Misconfigured(Problem::LookupdTcpPort),
        "{e}"
    );
    assert!(e.message.contains("nsqlookupd's TCP port"), "{e}");
    // TLS configured, not offered.
    let tls = ProducerOptions {
        connection: Connection {
            tls: true,
            ..Connection::default()
        },
        ..ProducerOptions::default()
    };
    let p = f.producer(&[addr(&nsqd)], Some(&tls)).unwrap();
    expect(p.ping(), Problem::TlsNotOffered);
    expect(p.publish("m", b"x"), Problem::TlsNotOffered);
    p.close();
    // A certificate for another name.
    let other = start(Nsqd::builder().tls_server_names(&["nsqd.example"]));
    let p = f.producer(&[addr(&other)], Some(&tls)).unwrap();
    expect(p.ping(), Problem::TlsHandshake);
    p.close();
    // AUTH: no secret, and a secret nsqd refuses.
    let table = AuthTable::new().with(
        "s3cret",
        AuthGrant::new("tester", vec![Authorization::all()]),
    );
    let authed = start(Nsqd::builder().auth(table));
    expect(connect(&addr(&authed)), Problem::AuthSecretMissing);
    let wrong = ProducerOptions {
        connection: Connection {
            auth_secret: Some("wrong".into()),
            ..Connection::default()
        },
        ..ProducerOptions::default()
    };
    let p = f.producer(&[addr(&authed)], Some(&wrong)).unwrap();
    expect(p.ping(), Problem::AuthRefused);
    p.close();

    // A consumer: the first outcome is the typed error, and the nsqd is not retried.
    let http_port = WrongPort::start(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let mut c = f
        .consumer(
            "m",
            "ch",
            &super::ConsumerSetup {
                options: Some(fast_config(1)),
                ..super::ConsumerSetup::default()
            },
        )
        .unwrap();
    let mut events = c.events();
    expect(c.connect_to_nsqd(&http_port.addr), Problem::HttpPort);
    // The event stream says the same, once.
    let said = super::ClientEvent::Disconnected {
        nsqd: http_port.addr.clone(),
        retrying: false,
        misconfigured: Some(Problem::HttpPort),
    };
    assert_eq!(events.next(WAIT), super::NextEvent::Event(said));
    let stats = c.stats();
    let entry = stats
        .nsqd
        .iter()
        .find(|n| n.address == http_port.addr)
        .expect("the address is kept");
    assert_eq!(entry.state, super::NsqdState::Misconfigured);
    assert_eq!(http_port.accepted(), 1);
    // Asked again: tried once more.
    expect(c.connect_to_nsqd(&http_port.addr), Problem::HttpPort);
    assert_eq!(http_port.accepted(), 2);
    c.stop();
}

/// `connect_to_lookupd` resolves with the first query's outcome; an address that is no
/// nsqlookupd's HTTP port is a typed error (and is not polled again), a lookupd that is down
/// is another.
pub(super) fn lookupd_misconfiguration_is_typed(f: &dyn Factory) {
    let nsqd = start(Nsqd::builder().http(true));
    let lookupd = crate::Lookupd::start().unwrap();
    let c = f
        .consumer(
            "lk",
            "ch",
            &super::ConsumerSetup {
                options: Some(fast_config(1)),
                ..super::ConsumerSetup::default()
            },
        )
        .unwrap();
    let mut events = c.events();
    let real = lookupd.http_address().to_string();
    c.connect_to_lookupd(&real).unwrap();
    // Known: its last outcome at once.
    c.connect_to_lookupd(&real).unwrap();
    let lookupd_tcp = WrongPort::start(b"\x00\x00\x00\x0eE_BAD_PROTOCOL");
    let nsqd_http = nsqd.http_address().unwrap().to_string();
    for wrong in [nsqd_http.clone(), addr(&nsqd), lookupd_tcp.addr.clone()] {
        let e = c.connect_to_lookupd(&wrong).expect_err("not a lookupd");
        assert_eq!(
            e.kind,
            ErrorKind::Lookupd {
                misconfigured: true
            },
            "{wrong}: {e}"
        );
    }
    let e = c.connect_to_lookupd(&nsqd_http).unwrap_err();
    assert!(e.message.contains("not an nsqlookupd"), "{e}");
    // The event stream reports each failed query, saying whether the address is no lookupd.
    let failed: Vec<_> = std::iter::from_fn(|| match events.next(WAIT) {
        super::NextEvent::Event(e) => Some(e),
        _ => None,
    })
    .filter(|e| matches!(e, super::ClientEvent::LookupdFailed { .. }))
    .take(4)
    .collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
    assert!(
        failed.iter().all(|e| matches!(
            e,
            super::ClientEvent::LookupdFailed {
                misconfigured: true,
                ..
            }
        )),
        "{failed:?}"
    );
    // Added again: asked once more.
    assert_eq!(lookupd_tcp.accepted(), 1);
    assert!(c.connect_to_lookupd(&lookupd_tcp.addr).is_err());
    assert_eq!(lookupd_tcp.accepted(), 2);
    // Down: an error too, but the consumer keeps polling it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let e = c.connect_to_lookupd(&closed).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Lookupd {
            misconfigured: false
        },
        "{e}"
    );
    drop(c);
}
