//! The shared `Config`: go-nsq option names, value syntax, defaults, range checks with the
//! option named in the error, and the derived connection / consumer / producer settings.
// Without every optional layer some tests are compiled out, and their imports unused.
#![cfg_attr(
    not(all(feature = "tls", feature = "snappy", feature = "deflate")),
    allow(unused_imports)
)]

use nsq_proto::config::{OptionError, parse_go_duration};
use nsq_proto::consumer::{BackoffStrategy, ConsumerConfig};
use nsq_proto::producer::{ProducerConfig, Routing};
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig, exchange};
use nsq_proto::{Compression, Config, Connection, ConnectionEvent, Role};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn no_files(path: PathBuf) -> std::io::Result<Vec<u8>> {
    let name = path.into_os_string();
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{name:?} not found"),
    ))
}

#[test]
#[cfg(feature = "deflate")]
fn a_go_nsq_json_document_parses_to_the_expected_values() {
    let json = r#"{
        "dial_timeout": "2s",
        "read_timeout": "1m30s",
        "write_timeout": 2500,
        "lookupd_poll_interval": "15s",
        "lookupd_poll_jitter": 0.5,
        "max_requeue_delay": "30m",
        "default_requeue_delay": "45s",
        "backoff_strategy": "full_jitter",
        "max_backoff_duration": "5m",
        "backoff_multiplier": "500ms",
        "max_attempts": 10,
        "low_rdy_idle_timeout": "20s",
        "low_rdy_timeout": "1m",
        "rdy_redistribute_interval": "2s",
        "client_id": "worker-1",
        "hostname": "worker-1.example.com",
        "user_agent": "my-app/2.0",
        "heartbeat_interval": "20s",
        "sample_rate": 25,
        "tls_v1": false,
        "tls_min_version": "tls1.2",
        "deflate": true,
        "deflate_level": 3,
        "snappy": false,
        "output_buffer_size": 32768,
        "output_buffer_timeout": "100ms",
        "max_in_flight": 250,
        "msg_timeout": "2m",
        "auth_secret": "s3cret"
    }"#;
    let c = Config::from_json(json).unwrap();
    assert_eq!(c.dial_timeout, 2 * SEC);
    assert_eq!(c.read_timeout, Some(90 * SEC));
    assert_eq!(c.write_timeout, 2500 * MS); // integers are milliseconds
    assert_eq!(c.lookupd_poll_interval, 15 * SEC);
    assert!((c.lookupd_poll_jitter - 0.5).abs() < f64::EPSILON);
    assert_eq!(c.max_requeue_delay, 30 * 60 * SEC);
    assert_eq!(c.default_requeue_delay, 45 * SEC);
    assert_eq!(c.backoff_strategy, BackoffStrategy::FullJitter);
    assert_eq!(c.max_backoff_duration, 300 * SEC);
    assert_eq!(c.backoff_multiplier, 500 * MS);
    assert_eq!(c.max_attempts, 10);
    assert_eq!(c.low_rdy_idle_timeout, 20 * SEC);
    assert_eq!(c.low_rdy_timeout, 60 * SEC);
    assert_eq!(c.rdy_redistribute_interval, 2 * SEC);
    assert_eq!(c.client_id.as_deref(), Some("worker-1"));
    assert_eq!(c.hostname.as_deref(), Some("worker-1.example.com"));
    assert_eq!(c.user_agent.as_deref(), Some("my-app/2.0"));
    assert_eq!(c.heartbeat_interval, 20 * SEC);
    assert_eq!(c.sample_rate, 25);
    assert!(!c.tls_v1 && c.deflate && !c.snappy);
    assert_eq!(c.deflate_level, 3);
    assert_eq!(c.output_buffer_size, 32768);
    assert_eq!(c.output_buffer_timeout, 100 * MS);
    assert_eq!(c.max_in_flight, 250);
    assert_eq!(c.msg_timeout, 120 * SEC);
    assert_eq!(c.auth_secret.as_ref().unwrap().expose(), b"s3cret");

    let conn = c.connection_config(no_files).unwrap();
    assert_eq!(conn.client_id.as_deref(), Some("worker-1"));
    assert_eq!(conn.user_agent, "my-app/2.0");
    assert_eq!(conn.heartbeat_interval, 20 * SEC);
    assert_eq!(conn.read_timeout, Some(90 * SEC));
    assert_eq!(conn.msg_timeout, Some(120 * SEC));
    assert_eq!(conn.output_buffer_size, Some(32768));
    assert_eq!(conn.output_buffer_timeout, Some(100 * MS));
    assert_eq!(conn.sample_rate, 25);
    assert_eq!(conn.compression, Compression::Deflate { level: 3 });
    assert!(conn.tls.is_none());
    let identify = conn.identify().unwrap();
    assert_eq!(identify.heartbeat_interval, 20_000);
    assert_eq!(identify.output_buffer_timeout, 100);
    assert_eq!(identify.msg_timeout, 120_000);

    let consumer = c.consumer_config(no_files).unwrap();
    assert_eq!(consumer.max_in_flight, 250);
    assert_eq!(consumer.max_attempts, 10);
    assert_eq!(consumer.backoff_strategy, BackoffStrategy::FullJitter);
    assert_eq!(consumer.backoff_multiplier, 500 * MS);
    assert_eq!(consumer.max_backoff_duration, 300 * SEC);
    assert!(consumer.backoff_enabled);
    assert_eq!(consumer.default_requeue_delay, 45 * SEC);
    assert_eq!(consumer.max_requeue_delay, 30 * 60 * SEC);
    assert_eq!(consumer.lookupd_poll_interval, 15 * SEC);
    assert_eq!(consumer.low_rdy_idle_timeout, 20 * SEC);
    assert_eq!(consumer.low_rdy_timeout, 60 * SEC);
    assert_eq!(consumer.rdy_redistribute_interval, 2 * SEC);

    let producer = c.producer_config(no_files).unwrap();
    assert_eq!(producer.connect_timeout, 2 * SEC);
    assert_eq!(producer.connection.client_id.as_deref(), Some("worker-1"));
}

#[test]
#[cfg(feature = "snappy")]
fn our_own_options_parse_and_derive() {
    let c: Config = serde_json::from_str(
        r#"{
            "producer_routing": "round_robin",
            "publish_timeout": "2s",
            "reply_timeout": 0,
            "max_outstanding_publishes": "1000",
            "max_pending_publishes": 50,
            "drain_timeout": "10s",
            "reconnect_initial_delay": "250ms",
            "reconnect_max_delay": "30s",
            "reconnect_reset_after": "1m",
            "low_rdy_max_wait": "30s",
            "lookupd_poll_timeout": "5s",
            "max_msg_size": 2097152,
            "max_req_timeout": "2h",
            "max_backoff_duration": 0,
            "output_buffer_timeout": "0",
            "output_buffer_size": -1,
            "msg_timeout": "0",
            "snappy": "true",
            "tls_server_name": "nsqd.internal"
        }"#,
    )
    .unwrap();
    let p = c.producer_config(no_files).unwrap();
    assert_eq!(p.routing, Routing::RoundRobin);
    assert_eq!(p.publish_timeout, 2 * SEC);
    assert_eq!(p.reply_timeout, None);
    assert_eq!(p.max_outstanding, Some(1000));
    assert_eq!(p.max_pending, 50);
    assert_eq!(p.close_timeout, 10 * SEC);
    assert_eq!(p.reconnect_initial_delay, 250 * MS);
    assert_eq!(p.connection.drain_timeout, 10 * SEC);
    assert_eq!(p.connection.limits.max_msg_size, 2 * 1024 * 1024);
    assert_eq!(p.connection.limits.max_req_timeout, 7200 * SEC);
    assert_eq!(p.connection.output_buffer_size, Some(-1));
    // 0 disables the output buffer timeout (-1 on the wire), as go-nsq documents.
    assert_eq!(p.connection.output_buffer_timeout, Some(Duration::ZERO));
    assert_eq!(p.connection.identify().unwrap().output_buffer_timeout, -1);
    assert_eq!(p.connection.msg_timeout, None);
    assert_eq!(p.connection.compression, Compression::Snappy);
    let consumer = c.consumer_config(no_files).unwrap();
    assert!(
        !consumer.backoff_enabled,
        "max_backoff_duration 0 disables backoff"
    );
    assert_eq!(consumer.lookupd_timeout, 5 * SEC);
    assert_eq!(consumer.low_rdy_max_wait, 30 * SEC);
    assert_eq!(consumer.reconnect_max_delay, 30 * SEC);
    assert_eq!(consumer.reconnect_reset_after, 60 * SEC);
    assert_eq!(consumer.close_timeout, 10 * SEC);
}

/// go-nsq's own default user agent, which every configuration go-nsq marshals carries, is
/// replaced by this client's; a user's own stays.
#[test]
fn a_ported_go_nsq_user_agent_becomes_ours() {
    for (ua, sent) in [
        ("go-nsq/1.1.0", nsq_proto::connection::DEFAULT_USER_AGENT),
        ("go-nsq/1.0.8", nsq_proto::connection::DEFAULT_USER_AGENT),
        ("go-nsq/custom", "go-nsq/custom"),
        ("my-app/2.0", "my-app/2.0"),
    ] {
        let c: Config = serde_json::from_str(&format!(r#"{{"user_agent": "{ua}"}}"#)).unwrap();
        assert_eq!(
            c.connection_config(no_files).unwrap().user_agent,
            sent,
            "{ua}"
        );
    }
}

#[test]
fn defaults_equal_go_nsq_and_the_core_defaults() {
    let c = Config::default();
    c.validate().unwrap();
    // go-nsq's documented defaults.
    assert_eq!(c.dial_timeout, SEC);
    // Unset: twice heartbeat_interval, which is go-nsq's 60 s at the default heartbeat.
    assert_eq!(c.read_timeout, None);
    assert_eq!(
        c.connection_config(no_files)
            .unwrap()
            .effective_read_timeout(),
        60 * SEC
    );
    assert_eq!(c.write_timeout, SEC);
    assert_eq!(c.lookupd_poll_interval, 60 * SEC);
    assert!((c.lookupd_poll_jitter - 0.3).abs() < f64::EPSILON);
    assert_eq!(c.max_requeue_delay, 15 * 60 * SEC);
    assert_eq!(c.default_requeue_delay, 90 * SEC);
    assert_eq!(c.backoff_strategy, BackoffStrategy::Exponential);
    assert_eq!(c.max_backoff_duration, 120 * SEC);
    assert_eq!(c.backoff_multiplier, SEC);
    assert_eq!(c.max_attempts, 5);
    // Deliberately shorter than go-nsq's 10 s / 30 s: no nsqd waits half a minute for RDY.
    assert_eq!(c.low_rdy_idle_timeout, SEC);
    assert_eq!(c.low_rdy_timeout, 2 * SEC);
    assert_eq!(c.low_rdy_max_wait, 10 * SEC);
    assert_eq!(c.rdy_redistribute_interval, 5 * SEC);
    assert_eq!(c.heartbeat_interval, 30 * SEC);
    assert_eq!(c.sample_rate, 0);
    assert_eq!(c.deflate_level, 6);
    assert_eq!(c.output_buffer_size, 16384);
    assert_eq!(c.output_buffer_timeout, 250 * MS);
    assert_eq!(c.max_in_flight, 1);
    assert_eq!(c.msg_timeout, Duration::ZERO);
    assert!(!c.tls_v1 && !c.deflate && !c.snappy && !c.tls_insecure_skip_verify);

    // The derived consumer settings equal the core's defaults for every shared concept.
    let derived = c.consumer_config(no_files).unwrap();
    let core = ConsumerConfig::default();
    assert_eq!(derived.max_in_flight, core.max_in_flight);
    assert_eq!(derived.max_attempts, core.max_attempts);
    assert_eq!(derived.default_requeue_delay, core.default_requeue_delay);
    assert_eq!(derived.max_requeue_delay, core.max_requeue_delay);
    assert_eq!(derived.backoff_enabled, core.backoff_enabled);
    assert_eq!(derived.backoff_strategy, core.backoff_strategy);
    assert_eq!(derived.backoff_multiplier, core.backoff_multiplier);
    assert_eq!(derived.max_backoff_duration, core.max_backoff_duration);
    assert_eq!(derived.lookupd_poll_interval, core.lookupd_poll_interval);
    assert!((derived.lookupd_poll_jitter - core.lookupd_poll_jitter).abs() < f64::EPSILON);
    assert_eq!(derived.lookupd_timeout, core.lookupd_timeout);
    assert_eq!(
        derived.rdy_redistribute_interval,
        core.rdy_redistribute_interval
    );
    assert_eq!(derived.low_rdy_idle_timeout, core.low_rdy_idle_timeout);
    assert_eq!(derived.low_rdy_timeout, core.low_rdy_timeout);
    assert_eq!(derived.low_rdy_max_wait, core.low_rdy_max_wait);
    assert_eq!(
        derived.reconnect_initial_delay,
        core.reconnect_initial_delay
    );
    assert_eq!(derived.reconnect_max_delay, core.reconnect_max_delay);
    assert_eq!(derived.reconnect_reset_after, core.reconnect_reset_after);
    assert_eq!(derived.close_timeout, core.close_timeout);
    assert_eq!(
        derived.connection.heartbeat_interval,
        core.connection.heartbeat_interval
    );
    assert_eq!(
        derived.connection.effective_read_timeout(),
        core.connection.effective_read_timeout()
    );
    assert_eq!(derived.connection.user_agent, core.connection.user_agent);
    assert_eq!(derived.connection.limits, core.connection.limits);
    assert_eq!(
        derived.connection.drain_timeout,
        core.connection.drain_timeout
    );

    let derived = c.producer_config(no_files).unwrap();
    let core = ProducerConfig::default();
    assert_eq!(derived.routing, core.routing);
    assert_eq!(derived.connect_timeout, core.connect_timeout);
    assert_eq!(derived.publish_timeout, core.publish_timeout);
    assert_eq!(derived.reply_timeout, core.reply_timeout);
    assert_eq!(derived.max_outstanding, core.max_outstanding);
    assert_eq!(derived.max_pending, core.max_pending);
    assert_eq!(derived.close_timeout, core.close_timeout);
}

fn err(json: &str) -> OptionError {
    Config::from_json(json).expect_err(json)
}

#[test]
fn invalid_values_name_the_option() {
    let cases = [
        (r#"{"read_timeout": "50ms"}"#, "read_timeout"),
        (r#"{"read_timeout": "6m"}"#, "read_timeout"),
        (r#"{"write_timeout": "soon"}"#, "write_timeout"),
        (
            r#"{"lookupd_poll_interval": "1ms"}"#,
            "lookupd_poll_interval",
        ),
        (r#"{"lookupd_poll_jitter": 1.5}"#, "lookupd_poll_jitter"),
        (r#"{"max_requeue_delay": "61m"}"#, "max_requeue_delay"),
        (
            r#"{"default_requeue_delay": "-1s"}"#,
            "default_requeue_delay",
        ),
        (r#"{"backoff_strategy": "linear"}"#, "backoff_strategy"),
        (r#"{"max_backoff_duration": "2h"}"#, "max_backoff_duration"),
        (r#"{"max_attempts": 70000}"#, "max_attempts"),
        (
            r#"{"low_rdy_idle_timeout": "500ms"}"#,
            "low_rdy_idle_timeout",
        ),
        (r#"{"low_rdy_timeout": "10m"}"#, "low_rdy_timeout"),
        (r#"{"low_rdy_max_wait": "500ms"}"#, "low_rdy_max_wait"),
        (
            r#"{"rdy_redistribute_interval": "6s"}"#,
            "rdy_redistribute_interval",
        ),
        (r#"{"heartbeat_interval": "500ms"}"#, "heartbeat_interval"),
        (r#"{"sample_rate": 100}"#, "sample_rate"),
        (r#"{"tls_v1": "maybe"}"#, "tls_v1"),
        (r#"{"deflate_level": 0}"#, "deflate_level"),
        (r#"{"output_buffer_size": 10}"#, "output_buffer_size"),
        (r#"{"max_in_flight": -1}"#, "max_in_flight"),
        (r#"{"max_in_flight": 1.5}"#, "max_in_flight"),
        (r#"{"msg_timeout": "500ms"}"#, "msg_timeout"),
        (r#"{"client_id": ""}"#, "client_id"),
        (r#"{"auth_secret": ""}"#, "auth_secret"),
        (r#"{"producer_routing": "random"}"#, "producer_routing"),
        (r#"{"tls_min_version": "tls1.3"}"#, "tls_min_version"),
        (r#"{"max_pending_publishes": -5}"#, "max_pending_publishes"),
        (r#"{"no_such_option": 1}"#, "no_such_option"),
        (r#"{"local_addr": "nsq.internal"}"#, "local_addr"),
        (r#"{"local_addr": 7}"#, "local_addr"),
        // Rules between options.
        (
            r#"{"heartbeat_interval": "50s", "read_timeout": "40s"}"#,
            "heartbeat_interval",
        ),
        (r#"{"snappy": true, "deflate": true}"#, "snappy"),
        (r#"{"tls_cert": "/c.pem"}"#, "tls_key"),
        (
            r#"{"reconnect_initial_delay": "10s", "reconnect_max_delay": "1s"}"#,
            "reconnect_max_delay",
        ),
    ];
    for (json, option) in cases {
        let e = err(json);
        assert_eq!(e.option(), option, "{json}: {e}");
        assert!(e.to_string().contains(option), "{json}: {e}");
    }
    let e = err(r#"{"sample_rate": 100}"#);
    assert_eq!(
        e.to_string(),
        "invalid sample_rate 100: must be within 0..=99"
    );
    let e = err(r#"{"read_timeout": "50ms"}"#);
    assert!(matches!(e, OptionError::OutOfRange { .. }), "{e:?}");
    assert_eq!(err("[1]").option(), "<document>");
    // Through serde too.
    let e = serde_json::from_str::<Config>(r#"{"max_attempts": "x"}"#).unwrap_err();
    assert!(e.to_string().contains("max_attempts"), "{e}");
    // Programmatic edits are checked by validate() and by the derive methods.
    let c = Config {
        deflate_level: 12,
        ..Config::default()
    };
    assert_eq!(c.validate().unwrap_err().option(), "deflate_level");
    assert_eq!(
        c.connection_config(no_files).unwrap_err().option(),
        "deflate_level"
    );
}

#[test]
fn set_accepts_command_line_text_like_go_nsq() {
    let mut c = Config::default();
    c.set_str("max-in-flight", "100").unwrap();
    c.set_str("snappy", "1").unwrap();
    c.set_str("tls_v1", "t").unwrap();
    c.set_str("lookupd_poll_jitter", "0.1").unwrap();
    c.set_str("dangerous_skip_tls_verification", "false")
        .unwrap();
    c.set_str("heartbeat_interval", "10s").unwrap();
    c.set("deflate", &serde_json::json!(0)).unwrap();
    c.set("backoff_multiplier", &serde_json::json!(2000))
        .unwrap();
    assert_eq!(c.max_in_flight, 100);
    assert!(c.snappy && c.tls_v1 && !c.deflate && !c.tls_insecure_skip_verify);
    assert_eq!(c.heartbeat_interval, 10 * SEC);
    assert_eq!(c.backoff_multiplier, 2 * SEC);
    // A bare number in text is what the same number in JSON is: milliseconds.
    let (mut text, mut json) = (c.clone(), c.clone());
    assert_eq!(
        text.set_str("heartbeat_interval", "1500")
            .map(|()| text.heartbeat_interval),
        json.set("heartbeat_interval", &serde_json::json!(1500))
            .map(|()| json.heartbeat_interval)
    );
    assert_eq!(text.heartbeat_interval, 1500 * MS);
    assert!(matches!(
        c.set_str("heartbeat_interval", "10 parsecs"),
        Err(OptionError::Invalid { .. })
    ));
    c.set("client_id", &serde_json::json!("x")).unwrap();
    c.set("client_id", &serde_json::Value::Null).unwrap();
    assert_eq!(c.client_id, None);
    for name in nsq_proto::config::OPTION_NAMES {
        assert!(
            !matches!(
                Config::default().set(name, &serde_json::Value::Null),
                Err(OptionError::Unknown { .. })
            ),
            "{name} is listed but unknown to set()"
        );
    }
    assert_eq!(parse_go_duration("1m30s"), Ok(90 * SEC));
}

/// A CA (PEM) and a server certificate for `name` signed by it, plus a client certificate.
#[cfg(feature = "tls")]
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
    client_cert_pem: String,
    client_key_pem: String,
}

#[cfg(feature = "tls")]
fn pki(name: &str) -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nsq-rs config test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client = rcgen::CertificateParams::new(vec!["client".to_owned()])
        .unwrap()
        .signed_by(&client_key, &ca, &ca_key)
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        server: Arc::new(server),
        client_cert_pem: client.pem(),
        client_key_pem: client_key.serialize_pem(),
    }
}

#[test]
#[cfg(feature = "tls")]
fn tls_files_are_read_through_the_callback_and_used() {
    let pki = pki("nsqd.test");
    let files: HashMap<PathBuf, Vec<u8>> = [
        ("/etc/nsq/ca.pem", pki.ca_pem.as_bytes().to_vec()),
        (
            "/etc/nsq/client.pem",
            pki.client_cert_pem.as_bytes().to_vec(),
        ),
        (
            "/etc/nsq/client.key",
            pki.client_key_pem.as_bytes().to_vec(),
        ),
        ("/etc/nsq/empty.pem", Vec::new()),
    ]
    .into_iter()
    .map(|(p, d)| (PathBuf::from(p), d))
    .collect();
    let read = |path: PathBuf| {
        files
            .get(&path)
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"))
    };
    let c = Config::from_json(
        r#"{"tls_v1": true, "tls_root_ca_file": "/etc/nsq/ca.pem",
            "tls_cert": "/etc/nsq/client.pem", "tls_key": "/etc/nsq/client.key",
            "tls_server_name": "nsqd.test"}"#,
    )
    .unwrap();
    let conn_config = c.connection_config(read).unwrap();
    let tls = conn_config.tls.as_ref().unwrap();
    assert_eq!(tls.server_name(), Some("nsqd.test"));
    assert!(!tls.is_verification_skipped());
    // The roots from the file verify a server certified by that CA.
    #[allow(
        clippy::disallowed_methods,
        reason = "origin of virtual time in a test"
    )]
    let now = Instant::now();
    let mut conn = Connection::new(conn_config, Role::Producer, "127.0.0.1:4150", now).unwrap();
    let mut peer = FakeNsqd::new(FakeNsqdConfig {
        tls: Some(pki.server.clone()),
        ..FakeNsqdConfig::default()
    });
    let events = exchange(&mut conn, &mut peer, now);
    assert!(
        matches!(events.first(), Some(ConnectionEvent::Ready(n)) if n.tls),
        "{events:?}"
    );

    // File problems name the option and the path.
    let mut bad = c.clone();
    bad.tls_root_ca_file = Some("/etc/nsq/missing.pem".into());
    let e = bad.connection_config(read).unwrap_err();
    assert_eq!(e.option(), "tls_root_ca_file");
    assert!(e.to_string().contains("/etc/nsq/missing.pem"), "{e}");
    bad.tls_root_ca_file = Some("/etc/nsq/empty.pem".into());
    assert_eq!(
        bad.connection_config(read).unwrap_err().option(),
        "tls_root_ca_file"
    );
    let mut bad = c.clone();
    bad.tls_key = Some("/etc/nsq/ca.pem".into()); // a certificate, not a key
    assert_eq!(bad.connection_config(read).unwrap_err().option(), "tls_key");

    // Skipping verification is opt-in and visible; no files needed.
    let insecure = Config::from_json(r#"{"tls_v1": true, "tls_insecure_skip_verify": true}"#)
        .unwrap()
        .connection_config(no_files)
        .unwrap();
    assert!(insecure.tls.unwrap().is_verification_skipped());
    // TLS off: files are never read.
    let off = Config::from_json(r#"{"tls_root_ca_file": "/nowhere.pem"}"#)
        .unwrap()
        .connection_config(no_files)
        .unwrap();
    assert!(off.tls.is_none());
    // An in-memory TLS configuration set in code wins.
    let in_memory = Config {
        tls_config: Some(nsq_proto::TlsConfig::webpki_roots().unwrap()),
        tls_server_name: Some("nsq.example".into()),
        ..Config::default()
    }
    .connection_config(no_files)
    .unwrap();
    assert_eq!(in_memory.tls.unwrap().server_name(), Some("nsq.example"));
}

/// go-nsq v1.1.0's `Config` as Go's `encoding/json` marshals it (this document is that
/// output, from `nsq.NewConfig()` with eight fields changed): Go field names, durations in
/// nanoseconds, empty strings for unset ones, interface fields as `{}` or `null`.
const GO_MARSHALLED: &str = r#"{
  "DialTimeout": 1000000000,
  "ReadTimeout": 90000000000,
  "WriteTimeout": 1000000000,
  "LocalAddr": null,
  "LookupdPollInterval": 60000000000,
  "LookupdPollJitter": 0.3,
  "LookupdPollTimeout": 60000000000,
  "MaxRequeueDelay": 900000000000,
  "DefaultRequeueDelay": 45000000000,
  "BackoffStrategy": {},
  "MaxBackoffDuration": 120000000000,
  "BackoffMultiplier": 1000000000,
  "MaxAttempts": 10,
  "LowRdyIdleTimeout": 10000000000,
  "LowRdyTimeout": 30000000000,
  "RDYRedistributeInterval": 5000000000,
  "ClientID": "worker-1",
  "Hostname": "worker-1.example.com",
  "UserAgent": "go-nsq/1.1.0",
  "HeartbeatInterval": 30000000000,
  "SampleRate": 0,
  "TlsV1": false,
  "TlsConfig": null,
  "Deflate": false,
  "DeflateLevel": 6,
  "Snappy": true,
  "OutputBufferSize": 16384,
  "OutputBufferTimeout": 100000000,
  "MaxInFlight": 250,
  "MsgTimeout": 0,
  "AuthSecret": "",
  "LookupdAuthorization": true
}"#;

#[test]
#[cfg(feature = "snappy")]
fn a_config_marshalled_by_go_loads_as_go_wrote_it() {
    let c: Config = serde_json::from_str(GO_MARSHALLED).unwrap();
    assert_eq!(c.max_in_flight, 250);
    assert_eq!(c.read_timeout, Some(90 * SEC));
    assert_eq!(c.dial_timeout, SEC);
    assert_eq!(c.default_requeue_delay, 45 * SEC);
    assert_eq!(c.max_attempts, 10);
    assert_eq!(c.client_id.as_deref(), Some("worker-1"));
    assert_eq!(c.hostname.as_deref(), Some("worker-1.example.com"));
    assert!(c.snappy);
    assert_eq!(c.output_buffer_timeout, 100 * MS);
    assert_eq!(c.lookupd_timeout, 60 * SEC);
    assert_eq!(c.auth_secret, None, "an empty Go string is unset");
    // The rest are go-nsq's defaults, which are ours.
    let defaults = Config::default();
    assert_eq!(c.heartbeat_interval, defaults.heartbeat_interval);
    assert_eq!(c.backoff_strategy, defaults.backoff_strategy);
    assert_eq!(
        c.rdy_redistribute_interval,
        defaults.rdy_redistribute_interval
    );

    // A Go TLS config: what can be read of it is.
    let mut c = Config::default();
    let tls = serde_json::json!({"InsecureSkipVerify": true, "ServerName": "nsq.internal", "MinVersion": 771});
    c.set("TlsConfig", &tls).unwrap();
    assert!(c.tls_insecure_skip_verify);
    assert_eq!(c.tls_server_name.as_deref(), Some("nsq.internal"));
    assert_eq!(c.tls_min_version.as_deref(), Some("tls1.2"));
    // A `*net.TCPAddr` as Go marshals it.
    let addr = serde_json::json!({"IP": "10.0.0.2", "Port": 0, "Zone": ""});
    c.set("LocalAddr", &addr).unwrap();
    assert_eq!(c.local_addr, Some("10.0.0.2:0".parse().unwrap()));
    let addr = serde_json::json!({"IP": "fd00::2", "Port": 7000, "Zone": ""});
    c.set("LocalAddr", &addr).unwrap();
    assert_eq!(c.local_addr, Some("[fd00::2]:7000".parse().unwrap()));
    c.set("LocalAddr", &serde_json::Value::Null).unwrap();
    assert_eq!(c.local_addr, None);
    let e = c
        .set("LocalAddr", &serde_json::json!({"IP": "not an ip"}))
        .unwrap_err();
    assert!(e.to_string().contains("LocalAddr"), "{e}");
    // And by name, as text: with a port or not.
    for (text, expected) in [
        ("10.0.0.5", "10.0.0.5:0"),
        ("10.0.0.5:4000", "10.0.0.5:4000"),
        ("::1", "[::1]:0"),
        ("[::1]:0", "[::1]:0"),
    ] {
        c.set_str("local_addr", text).unwrap();
        assert_eq!(c.local_addr, Some(expected.parse().unwrap()), "{text}");
    }
    c.set_str("local_addr", "").unwrap();
    assert_eq!(c.local_addr, None);
    // An unknown Go field is named as written.
    let e = c.set("NoSuchField", &serde_json::json!(1)).unwrap_err();
    assert!(e.to_string().contains("NoSuchField"), "{e}");
}

#[test]
fn numbers_mean_milliseconds_in_json_and_in_text_alike() {
    let mut a = Config::default();
    a.set_str("default_requeue_delay", "100").unwrap();
    let mut b = Config::default();
    b.set("default_requeue_delay", &serde_json::json!(100))
        .unwrap();
    assert_eq!(a.default_requeue_delay, 100 * MS);
    assert_eq!(b.default_requeue_delay, 100 * MS);
    let e = a.set_str("default_requeue_delay", "soon").unwrap_err();
    assert!(e.to_string().contains("number of milliseconds"), "{e}");
}
