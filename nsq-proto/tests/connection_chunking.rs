//! proptest: however the server's bytes are split into reads, after each upgrade (none, TLS,
//! snappy, deflate, TLS+snappy, TLS+deflate), the connection reports identical events.
#![cfg(all(feature = "tls", feature = "snappy", feature = "deflate"))]

mod common;

use bytes::BytesMut;
use common::{TestPki, consumer, pki, t0, topic};
use nsq_proto::test_support::{FakeNsqd, FakeNsqdConfig};
use nsq_proto::{
    Compression, Connection, ConnectionConfig, ConnectionEvent, ErrorCode, Role, TlsConfig,
};
use proptest::prelude::*;
use std::sync::OnceLock;
use std::time::Instant;

fn test_pki() -> &'static TestPki {
    static PKI: OnceLock<TestPki> = OnceLock::new();
    PKI.get_or_init(|| pki(&["nsqd.test"]))
}

/// Pumps bytes both ways; the server's output is cut into pieces whose sizes cycle
/// through `chunks`.
fn pump(
    conn: &mut Connection,
    peer: &mut FakeNsqd,
    now: Instant,
    chunks: &[usize],
    at: &mut usize,
    events: &mut Vec<ConnectionEvent>,
) {
    loop {
        let mut progressed = false;
        while let Some(b) = conn.poll_transmit() {
            peer.receive(&b);
            progressed = true;
        }
        let out = peer.take_output();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let n = chunks[*at % chunks.len()].clamp(1, rest.len());
            *at += 1;
            let mut buf = BytesMut::from(&rest[..n]);
            rest = &rest[n..];
            conn.handle_input(now, &mut buf);
            progressed = true;
        }
        events.extend(std::iter::from_fn(|| conn.poll_event()));
        if !progressed {
            return;
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Plain,
    Snappy,
    Deflate,
    Tls,
    TlsSnappy,
    TlsDeflate,
}

fn config(mode: Mode) -> (ConnectionConfig, FakeNsqdConfig) {
    let pki = test_pki();
    let tls = matches!(mode, Mode::Tls | Mode::TlsSnappy | Mode::TlsDeflate);
    let compression = match mode {
        Mode::Snappy | Mode::TlsSnappy => Compression::Snappy,
        Mode::Deflate | Mode::TlsDeflate => Compression::Deflate { level: 5 },
        Mode::Plain | Mode::Tls => Compression::None,
    };
    (
        ConnectionConfig {
            tls: tls.then(|| TlsConfig::with_root_store(pki.roots(), None).unwrap()),
            compression,
            ..ConnectionConfig::default()
        },
        FakeNsqdConfig {
            tls: tls.then(|| pki.server_config()),
            auto_close_wait: true,
            ..FakeNsqdConfig::default()
        },
    )
}

/// A consumer life: start-up, RDY, messages of many sizes with heartbeats between them, a
/// non-fatal error, answers, graceful close.
fn consumer_script(mode: Mode, chunks: &[usize]) -> Vec<ConnectionEvent> {
    let now = t0();
    let (cc, pc) = config(mode);
    let mut peer = FakeNsqd::new(pc);
    let mut conn = Connection::new(cc, consumer(), "nsqd.test:4150", now).unwrap();
    let mut events = Vec::new();
    let mut at = 0;
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    conn.set_rdy(now, 20).unwrap();
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    let mut ids = Vec::new();
    for (i, size) in [1usize, 10, 300, 5000, 70_000, 3].iter().enumerate() {
        let body: Vec<u8> = (0..*size).map(|j| (i * 7 + j) as u8).collect();
        ids.push(peer.deliver(&body).unwrap());
        if i % 2 == 0 {
            peer.send_heartbeat();
        }
    }
    peer.send_error(ErrorCode::TouchFailed, "TOUCH failed");
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    conn.finish(now, &ids[0]).unwrap();
    conn.touch(now, &ids[1]).unwrap();
    conn.close(now);
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    for id in &ids[1..] {
        conn.finish(now, id).unwrap();
    }
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    assert!(peer.failure().is_none(), "{:?}", peer.failure());
    events
}

/// A producer life: pipelined publishes, replies with heartbeats between them.
fn producer_script(mode: Mode, chunks: &[usize]) -> Vec<ConnectionEvent> {
    let now = t0();
    let (cc, mut pc) = config(mode);
    pc.auto_ack_publishes = false;
    let mut peer = FakeNsqd::new(pc);
    let mut conn = Connection::new(cc, Role::Producer, "nsqd.test:4150", now).unwrap();
    let mut events = Vec::new();
    let mut at = 0;
    for i in 0..20u8 {
        conn.publish(now, &topic(), &vec![i; usize::from(i) * 100 + 1])
            .unwrap();
    }
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    for i in 0..20 {
        if i % 3 == 0 {
            peer.send_heartbeat();
        }
        peer.send_ok();
    }
    pump(&mut conn, &mut peer, now, chunks, &mut at, &mut events);
    events
}

const MODES: [Mode; 6] = [
    Mode::Plain,
    Mode::Snappy,
    Mode::Deflate,
    Mode::Tls,
    Mode::TlsSnappy,
    Mode::TlsDeflate,
];

#[test]
fn reference_scripts_behave() {
    for mode in MODES {
        let ev = consumer_script(mode, &[usize::MAX]);
        assert!(matches!(ev[0], ConnectionEvent::Ready(_)), "{mode:?}");
        let messages = ev
            .iter()
            .filter(|e| matches!(e, ConnectionEvent::Message(_)))
            .count();
        assert_eq!(messages, 6, "{mode:?}");
        assert!(matches!(
            ev.last(),
            Some(ConnectionEvent::Closed(nsq_proto::CloseReason::Graceful {
                unanswered: 0
            }))
        ));
        let ev = producer_script(mode, &[usize::MAX]);
        assert_eq!(ev.len(), 21, "{mode:?}: {ev:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn chunking_never_changes_events(
        mode in 0..MODES.len(),
        chunks in proptest::collection::vec(prop_oneof![1usize..8, 1usize..200, 1usize..20_000], 1..12),
    ) {
        let mode = MODES[mode];
        prop_assert_eq!(consumer_script(mode, &chunks), consumer_script(mode, &[usize::MAX]));
        prop_assert_eq!(producer_script(mode, &chunks), producer_script(mode, &[usize::MAX]));
    }
}
