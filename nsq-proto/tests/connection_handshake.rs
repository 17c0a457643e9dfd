//! Start-up paths of a connection against the fake nsqd.
// Without every optional layer some tests are compiled out, and their imports unused.
#![cfg_attr(
    not(all(feature = "tls", feature = "snappy", feature = "deflate")),
    allow(unused_imports)
)]

mod common;

use common::{connect, consumer, events, fake, feed};
use nsq_proto::test_support::{ClientCommand, FakeNsqdConfig, exchange};
use nsq_proto::{
    CloseReason, Compression, ConnectionConfig, ConnectionError, ConnectionEvent, ConnectionState,
    DecodeError, ErrorCode, NegotiatedCompression, Role, Secret, encode_frame,
};
use nsq_proto::{Connection, command};
use std::time::Duration;

#[test]
#[cfg(feature = "deflate")]
fn identify_is_built_from_config() {
    let now = common::t0();
    let config = ConnectionConfig {
        hostname: Some("worker-7.example.com".into()),
        heartbeat_interval: Duration::from_secs(5),
        msg_timeout: Some(Duration::from_secs(90)),
        output_buffer_size: Some(4096),
        output_buffer_timeout: Some(Duration::from_millis(50)),
        sample_rate: 10,
        compression: Compression::Deflate { level: 3 },
        ..ConnectionConfig::default()
    };
    let mut peer = fake(FakeNsqdConfig {
        deflate: false,
        ..FakeNsqdConfig::default()
    });
    let (_conn, negotiated) = connect(config, consumer(), &mut peer, now);
    let ClientCommand::Identify(identify) = &peer.commands()[0] else {
        panic!("{:?}", peer.commands());
    };
    assert_eq!(identify.client_id, "worker-7");
    assert_eq!(identify.hostname, "worker-7.example.com");
    assert!(identify.feature_negotiation);
    assert_eq!(identify.heartbeat_interval, 5000);
    assert_eq!(identify.msg_timeout, 90_000);
    assert_eq!(identify.output_buffer_size, 4096);
    assert_eq!(identify.output_buffer_timeout, 50);
    assert_eq!(identify.sample_rate, 10);
    assert!(identify.deflate && !identify.snappy && !identify.tls_v1);
    assert_eq!(identify.deflate_level, 3);
    assert_eq!(
        identify.user_agent,
        concat!("nsq-rs/", env!("CARGO_PKG_VERSION"))
    );
    // The server declined deflate: the connection runs uncompressed.
    assert_eq!(negotiated.compression, NegotiatedCompression::None);
    assert_eq!(negotiated.msg_timeout, Duration::from_secs(90));
}

#[test]
fn plain_ok_reply_from_old_server_means_defaults() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        feature_negotiation: false,
        ..FakeNsqdConfig::default()
    });
    let (conn, n) = connect(ConnectionConfig::default(), Role::Producer, &mut peer, now);
    assert_eq!(n.max_rdy_count, 2500);
    assert_eq!(n.msg_timeout, Duration::from_secs(60));
    assert_eq!(n.version, "");
    assert!(!n.tls);
    assert_eq!(conn.state(), ConnectionState::Ready);
    // The TLS probe (NOP) and IDENTIFY.
    assert_eq!(peer.commands().len(), 2);
}

#[test]
fn negotiated_settings_are_reported() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        max_rdy_count: 100,
        msg_timeout_ms: 30_000,
        max_msg_timeout_ms: 600_000,
        version: "1.3.0".into(),
        ..FakeNsqdConfig::default()
    });
    let (mut conn, n) = connect(ConnectionConfig::default(), consumer(), &mut peer, now);
    assert_eq!(n.max_rdy_count, 100);
    assert_eq!(conn.max_rdy(), 100);
    assert_eq!(n.msg_timeout, Duration::from_secs(30));
    assert_eq!(n.max_msg_timeout, Duration::from_secs(600));
    assert_eq!(n.version, "1.3.0");
    assert_eq!(n.compression, NegotiatedCompression::None);
    assert!(n.auth.is_none());
    assert_eq!(conn.negotiated(), Some(&n));
    // Consumer start-up: IDENTIFY, then SUB (and nothing else: RDY is the caller's call).
    assert!(matches!(
        peer.commands(),
        [ClientCommand::Identify(_), ClientCommand::Sub { topic, channel }]
            if topic == "events" && channel == "workers"
    ));
    assert_eq!(conn.rdy(), 0);
    assert_eq!(
        conn.set_rdy(now, 101),
        Err(ConnectionError::RdyTooHigh {
            requested: 101,
            max: 100
        })
    );
    assert_eq!(conn.poll_transmit(), None);
    conn.set_rdy(now, 100).unwrap();
    assert_eq!(&conn.poll_transmit().unwrap()[..], b"RDY 100\n");
    assert_eq!(conn.rdy(), 100);
}

#[test]
#[cfg(all(feature = "snappy", feature = "deflate"))]
fn snappy_and_deflate_start_ups() {
    for (compression, expected) in [
        (Compression::Snappy, NegotiatedCompression::Snappy),
        (
            Compression::Deflate { level: 9 },
            NegotiatedCompression::Deflate { level: 6 },
        ),
        (
            Compression::Deflate { level: 2 },
            NegotiatedCompression::Deflate { level: 2 },
        ),
    ] {
        for role in [Role::Producer, consumer()] {
            let now = common::t0();
            let mut peer = fake(FakeNsqdConfig::default());
            let config = ConnectionConfig {
                compression,
                ..ConnectionConfig::default()
            };
            let (mut conn, n) = connect(config, role.clone(), &mut peer, now);
            assert_eq!(n.compression, expected);
            // Traffic after the upgrade runs through the compressed stream both ways.
            peer.send_heartbeat();
            assert!(exchange(&mut conn, &mut peer, now).is_empty());
            assert_eq!(peer.commands().last(), Some(&ClientCommand::Nop));
            assert!(peer.failure().is_none(), "{:?}", peer.failure());
            if role.is_consumer() {
                assert!(peer.is_subscribed());
            }
        }
    }
}

#[test]
#[cfg(feature = "snappy")]
fn auth_required_sends_secret_before_sub() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        auth_secret: Some(b"s3cret".to_vec()),
        ..FakeNsqdConfig::default()
    });
    let config = ConnectionConfig {
        auth_secret: Some(Secret::new("s3cret")),
        compression: Compression::Snappy,
        ..ConnectionConfig::default()
    };
    let (conn, n) = connect(config, consumer(), &mut peer, now);
    assert!(matches!(
        peer.commands(),
        [ClientCommand::Identify(_), ClientCommand::Auth(s), ClientCommand::Sub { .. }] if s == b"s3cret"
    ));
    let auth = n.auth.expect("auth reply");
    assert_eq!(auth.identity, "test-user");
    assert_eq!(auth.permission_count, 1);
    assert!(!format!("{conn:?}").contains("s3cret"));
}

#[test]
fn auth_not_required_never_sends_the_secret() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig::default());
    let config = ConnectionConfig {
        auth_secret: Some(Secret::new("s3cret")),
        ..ConnectionConfig::default()
    };
    let (_conn, n) = connect(config, Role::Producer, &mut peer, now);
    assert!(n.auth.is_none());
    assert!(matches!(
        peer.commands(),
        [ClientCommand::Nop, ClientCommand::Identify(_)]
    ));
}

#[test]
fn auth_required_without_secret_fails_clearly() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        auth_secret: Some(b"s3cret".to_vec()),
        ..FakeNsqdConfig::default()
    });
    let mut conn = Connection::new(
        ConnectionConfig::default(),
        consumer(),
        "nsqd.test:4150",
        now,
    )
    .unwrap();
    let token_err = conn.set_rdy(now, 1);
    assert_eq!(token_err, Err(ConnectionError::NotReady));
    let events = exchange(&mut conn, &mut peer, now);
    assert_eq!(
        events,
        vec![ConnectionEvent::Closed(CloseReason::AuthSecretMissing)]
    );
    assert!(
        CloseReason::AuthSecretMissing
            .to_string()
            .contains("no auth_secret")
    );
    assert!(matches!(peer.commands(), [ClientCommand::Identify(_)]));
    assert_eq!(conn.state(), ConnectionState::Closed);
    assert_eq!(
        conn.set_rdy(now, 1),
        Err(ConnectionError::Closed(CloseReason::AuthSecretMissing))
    );
}

#[test]
fn wrong_secret_is_a_fatal_server_error() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        auth_secret: Some(b"right".to_vec()),
        ..FakeNsqdConfig::default()
    });
    let config = ConnectionConfig {
        auth_secret: Some(Secret::new("wrong")),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, Role::Producer, "nsqd.test:4150", now).unwrap();
    let token = conn.publish(now, &common::topic(), b"queued").unwrap();
    let events = exchange(&mut conn, &mut peer, now);
    let [
        ConnectionEvent::PublishFailed(t, _),
        ConnectionEvent::Closed(CloseReason::Server(e)),
    ] = events.as_slice()
    else {
        panic!("{events:?}");
    };
    assert_eq!(*t, token);
    assert_eq!(e.code(), ErrorCode::AuthFailed);
    // The queued publish never went out (NOP probe, IDENTIFY, AUTH).
    assert_eq!(peer.commands().len(), 3);
}

#[test]
#[cfg(feature = "deflate")]
fn publishes_before_ready_are_sent_after_start_up() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig {
        auth_secret: Some(b"k".to_vec()),
        ..FakeNsqdConfig::default()
    });
    let config = ConnectionConfig {
        auth_secret: Some(Secret::new("k")),
        compression: Compression::Deflate { level: 1 },
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, Role::Producer, "nsqd.test:4150", now).unwrap();
    let a = conn.publish(now, &common::topic(), b"a").unwrap();
    let b = conn
        .multi_publish(now, &common::topic(), &[b"b1", b"b2"])
        .unwrap();
    assert_eq!(conn.outstanding_publishes(), 2);
    let events = exchange(&mut conn, &mut peer, now);
    assert!(matches!(events[0], ConnectionEvent::Ready(_)));
    assert_eq!(
        events[1..],
        [ConnectionEvent::Published(a), ConnectionEvent::Published(b)]
    );
    assert!(matches!(
        peer.commands(),
        [
            ClientCommand::Nop,
            ClientCommand::Identify(_),
            ClientCommand::Auth(_),
            ClientCommand::Pub { .. },
            ClientCommand::Mpub { .. }
        ]
    ));
}

#[test]
fn bad_identify_replies_close_the_connection() {
    let now = common::t0();
    let mut conn = Connection::new(
        ConnectionConfig::default(),
        Role::Producer,
        "nsqd.test:4150",
        now,
    )
    .unwrap();
    let hello = conn.poll_transmit().unwrap();
    assert!(hello.starts_with(command::MAGIC_V2));
    let mut reply = Vec::new();
    encode_frame(&mut reply, 0, b"{not json");
    feed(&mut conn, now, &reply);
    assert!(matches!(
        &events(&mut conn)[..],
        [ConnectionEvent::Closed(CloseReason::IdentifyReply(_))]
    ));

    // Talking to the HTTP port.
    let mut conn = Connection::new(
        ConnectionConfig::default(),
        Role::Producer,
        "nsqd.test:4151",
        now,
    )
    .unwrap();
    feed(&mut conn, now, b"HTTP/1.1 400 Bad Request\r\n");
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Decode(
            DecodeError::HttpPort
        ))]
    );

    // A server that grants features nobody asked for is broken.
    for reply in [
        &br#"{"snappy":true}"#[..],
        br#"{"tls_v1":true}"#,
        br#"{"snappy":true,"deflate":true}"#,
    ] {
        let mut conn = Connection::new(
            ConnectionConfig::default(),
            Role::Producer,
            "nsqd.test:4150",
            now,
        )
        .unwrap();
        let mut frame = Vec::new();
        encode_frame(&mut frame, 0, reply);
        feed(&mut conn, now, &frame);
        assert!(
            matches!(
                &events(&mut conn)[..],
                [ConnectionEvent::Closed(CloseReason::Protocol(_))]
            ),
            "{}",
            String::from_utf8_lossy(reply)
        );
    }

    // An error instead of a reply.
    let mut conn = Connection::new(
        ConnectionConfig::default(),
        Role::Producer,
        "nsqd.test:4150",
        now,
    )
    .unwrap();
    let mut frame = Vec::new();
    encode_frame(&mut frame, 1, b"E_BAD_BODY IDENTIFY heartbeat too large");
    feed(&mut conn, now, &frame);
    let ev = events(&mut conn);
    assert!(
        matches!(&ev[..], [ConnectionEvent::Closed(CloseReason::Server(e))] if e.code() == ErrorCode::BadBody),
        "{ev:?}"
    );
}

#[test]
fn sub_rejected_is_fatal() {
    let now = common::t0();
    let mut conn = Connection::new(
        ConnectionConfig::default(),
        consumer(),
        "nsqd.test:4150",
        now,
    )
    .unwrap();
    let _ = conn.poll_transmit();
    let mut frames = Vec::new();
    encode_frame(&mut frames, 0, br#"{"max_rdy_count":2500}"#);
    feed(&mut conn, now, &frames);
    assert_eq!(&conn.poll_transmit().unwrap()[..], b"SUB events workers\n");
    let mut frames = Vec::new();
    encode_frame(&mut frames, 1, b"E_BAD_TOPIC SUB topic name is not valid");
    feed(&mut conn, now, &frames);
    assert!(matches!(
        &events(&mut conn)[..],
        [ConnectionEvent::Closed(CloseReason::Server(e))] if e.code() == ErrorCode::BadTopic
    ));
}

#[test]
#[cfg(feature = "tls")]
fn tls_requested_but_not_granted_refuses_plaintext() {
    let now = common::t0();
    let mut peer = fake(FakeNsqdConfig::default()); // no TLS configured on the server
    let config = ConnectionConfig {
        tls: Some(nsq_proto::TlsConfig::webpki_roots().unwrap()),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::new(config, Role::Producer, "nsqd.test:4150", now).unwrap();
    let events = exchange(&mut conn, &mut peer, now);
    assert_eq!(
        events,
        vec![ConnectionEvent::Closed(CloseReason::TlsNotGranted)]
    );
}

#[test]
fn invalid_configs_are_rejected() {
    let now = common::t0();
    let bad = ConnectionConfig {
        auth_secret: Some(Secret::new("")),
        ..ConnectionConfig::default()
    };
    assert!(Connection::new(bad, Role::Producer, "h:1", now).is_err());
    #[cfg(feature = "tls")]
    {
        let bad = ConnectionConfig {
            tls: Some(nsq_proto::TlsConfig::webpki_roots().unwrap()),
            ..ConnectionConfig::default()
        };
        assert!(Connection::new(bad, Role::Producer, "not a hostname!:4150", now).is_err());
    }
    let bad = ConnectionConfig {
        heartbeat_interval: Duration::from_secs(61),
        ..ConnectionConfig::default()
    };
    assert!(Connection::new(bad, Role::Producer, "h:1", now).is_err());
}

#[test]
fn heartbeat_during_start_up_is_answered_in_plain_text() {
    let now = common::t0();
    let mut conn = Connection::new(
        ConnectionConfig::default(),
        consumer(),
        "nsqd.test:4150",
        now,
    )
    .unwrap();
    let _ = conn.poll_transmit();
    let mut wire = Vec::new();
    encode_frame(&mut wire, 0, b"_heartbeat_");
    feed(&mut conn, now, &wire);
    assert_eq!(&conn.poll_transmit().unwrap()[..], b"NOP\n");
    assert!(events(&mut conn).is_empty());
    assert_eq!(conn.state(), ConnectionState::Handshaking);
}
