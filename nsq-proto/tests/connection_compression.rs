//! Snappy and deflate against independent implementations (the snap crate's frame
//! encoder/decoder and flate2's raw deflater/inflater, inside the fake nsqd and directly).
#![cfg(all(feature = "snappy", feature = "deflate"))]

mod common;

use common::{connect, consumer, events, fake, feed, t0, topic};
use nsq_proto::connection::{DeflateError, SnappyError};
use nsq_proto::test_support::{ClientCommand, FakeNsqdConfig, exchange};
use nsq_proto::{
    CloseReason, Compression, Connection, ConnectionConfig, ConnectionEvent, NegotiatedCompression,
    Role, encode_frame,
};
use std::io::{Read, Write};

fn big_body(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i / 1000) as u8)
        .collect()
}

#[test]
fn large_traffic_both_ways() {
    for compression in [Compression::Snappy, Compression::Deflate { level: 9 }] {
        let now = t0();
        let mut peer = fake(FakeNsqdConfig::default());
        let config = ConnectionConfig {
            compression,
            ..ConnectionConfig::default()
        };
        let (mut conn, _) = connect(config.clone(), consumer(), &mut peer, now);
        conn.set_rdy(now, 50).unwrap();
        let _ = exchange(&mut conn, &mut peer, now);
        let bodies: Vec<Vec<u8>> = (0..20).map(|i| big_body(1 + i * 20_000, i as u8)).collect();
        for b in &bodies {
            peer.deliver(b).unwrap();
        }
        let ev = exchange(&mut conn, &mut peer, now);
        let got: Vec<&[u8]> = ev
            .iter()
            .map(|e| match e {
                ConnectionEvent::Message(m) => &m.body[..],
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got.len(), bodies.len());
        for (g, b) in got.iter().zip(&bodies) {
            assert_eq!(g, &&b[..]);
        }

        let mut peer = fake(FakeNsqdConfig::default());
        let (mut conn, _) = connect(config, Role::Producer, &mut peer, now);
        for b in &bodies {
            conn.publish(now, &topic(), b).unwrap();
        }
        conn.multi_publish(now, &topic(), &bodies[..5]).unwrap();
        let ev = exchange(&mut conn, &mut peer, now);
        assert_eq!(ev.len(), 21);
        let mut cmds = peer.take_commands();
        // After IDENTIFY (a producer sends its TLS probe, a NOP, before it).
        let identify = cmds
            .iter()
            .position(|c| matches!(c, ClientCommand::Identify(_)))
            .unwrap();
        let cmds = cmds.split_off(identify + 1);
        for (c, b) in cmds.iter().zip(&bodies) {
            assert!(matches!(c, ClientCommand::Pub { body, .. } if body[..] == b[..]));
        }
        assert!(matches!(&cmds[20], ClientCommand::Mpub { bodies: bs, .. } if bs.len() == 5));
    }
}

/// The client's raw output after the upgrade, decoded directly by snap's / flate2's readers.
#[test]
fn client_output_is_valid_for_independent_decoders() {
    for compression in [Compression::Snappy, Compression::Deflate { level: 4 }] {
        let now = t0();
        let mut conn = Connection::new(
            ConnectionConfig {
                compression,
                ..ConnectionConfig::default()
            },
            Role::Producer,
            "h:4150",
            now,
        )
        .unwrap();
        let _ = conn.poll_transmit();
        let granted = if compression == Compression::Snappy {
            br#"{"snappy":true}"#.as_slice()
        } else {
            br#"{"deflate":true,"deflate_level":4,"max_deflate_level":6}"#.as_slice()
        };
        let mut wire = Vec::new();
        encode_frame(&mut wire, 0, granted);
        let mut ok = Vec::new();
        encode_frame(&mut ok, 0, b"OK");
        // The OK after the upgrade is compressed by an independent encoder, and arrives in
        // the same read as the IDENTIFY reply.
        if compression == Compression::Snappy {
            let mut w = snap::write::FrameEncoder::new(Vec::new());
            w.write_all(&ok).unwrap();
            wire.extend_from_slice(&w.into_inner().unwrap());
        } else {
            let mut w = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
            w.write_all(&ok).unwrap();
            w.flush().unwrap();
            wire.extend_from_slice(w.get_ref());
        }
        feed(&mut conn, now, &wire);
        let ev = events(&mut conn);
        let [ConnectionEvent::Ready(n)] = &ev[..] else {
            panic!("{ev:?}")
        };
        assert_ne!(n.compression, NegotiatedCompression::None);

        let mut expected = Vec::new();
        let mut compressed = Vec::new();
        for i in 0..30 {
            let body = big_body(1000 * i + 1, 3);
            conn.publish(now, &topic(), &body).unwrap();
            nsq_proto::command::publish(
                &mut expected,
                &topic(),
                &body,
                &nsq_proto::Limits::default(),
            )
            .unwrap();
            // One transmit per publish: every batch must stand on its own.
            compressed.extend_from_slice(&conn.poll_transmit().unwrap());
        }
        let mut plain = Vec::with_capacity(expected.len() + 1024);
        if compression == Compression::Snappy {
            snap::read::FrameDecoder::new(&compressed[..])
                .read_to_end(&mut plain)
                .unwrap();
        } else {
            // A sync-flushed stream has no final block: inflate what is there.
            flate2::Decompress::new(false)
                .decompress_vec(&compressed, &mut plain, flate2::FlushDecompress::Sync)
                .unwrap();
        }
        assert_eq!(plain, expected);
    }
}

#[test]
fn corrupt_streams_close_the_connection() {
    let now = t0();
    // Snappy: a data chunk with a wrong checksum.
    let mut peer = fake(FakeNsqdConfig::default());
    let config = ConnectionConfig {
        compression: Compression::Snappy,
        ..ConnectionConfig::default()
    };
    let (mut conn, _) = connect(config, Role::Producer, &mut peer, now);
    peer.send_wire(b"\x01\x08\x00\x00\x00\x00\x00\x00OK!!");
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(
        matches!(
            &ev[..],
            [ConnectionEvent::Closed(CloseReason::Snappy(
                SnappyError::ChecksumMismatch { .. }
            ))]
        ),
        "{ev:?}"
    );

    // Snappy: the stream must start with the stream identifier.
    let mut conn = Connection::new(
        ConnectionConfig {
            compression: Compression::Snappy,
            ..ConnectionConfig::default()
        },
        Role::Producer,
        "h:4150",
        now,
    )
    .unwrap();
    let mut wire = Vec::new();
    encode_frame(&mut wire, 0, br#"{"snappy":true}"#);
    wire.extend_from_slice(b"\x01\x06\x00\x00\x00\x00\x00\x00OK");
    feed(&mut conn, now, &wire);
    assert_eq!(
        events(&mut conn),
        vec![ConnectionEvent::Closed(CloseReason::Snappy(
            SnappyError::MissingStreamIdentifier
        ))]
    );

    // Deflate: garbage.
    let mut peer = fake(FakeNsqdConfig::default());
    let config = ConnectionConfig {
        compression: Compression::Deflate { level: 6 },
        ..ConnectionConfig::default()
    };
    let (mut conn, _) = connect(config, consumer(), &mut peer, now);
    peer.send_wire(&[0xff; 32]);
    let ev = exchange(&mut conn, &mut peer, now);
    assert!(
        matches!(
            &ev[..],
            [ConnectionEvent::Closed(CloseReason::Deflate(
                DeflateError::Corrupt(_)
            ))]
        ),
        "{ev:?}"
    );
}

#[test]
fn decompression_bombs_stay_bounded() {
    // 16 MiB of zeros compress to ~16 KiB of deflate; the client must not inflate it all at
    // once: it decodes in bounded steps and fails on the first oversized frame.
    let now = t0();
    let mut peer = fake(FakeNsqdConfig::default());
    let config = ConnectionConfig {
        compression: Compression::Deflate { level: 6 },
        ..ConnectionConfig::default()
    };
    let (mut conn, _) = connect(config, consumer(), &mut peer, now);
    let mut w = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(9));
    // A frame header announcing a size far over the limit, then zeros.
    w.write_all(&[0x7f, 0, 0, 0, 0, 0, 0, 2]).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..16 {
        w.write_all(&zeros).unwrap();
    }
    w.flush().unwrap();
    let bomb = w.get_ref().clone();
    assert!(bomb.len() < 200_000);
    feed(&mut conn, now, &bomb);
    assert!(matches!(
        &events(&mut conn)[..],
        [ConnectionEvent::Closed(CloseReason::Decode(
            nsq_proto::DecodeError::FrameTooLarge { .. }
        ))]
    ));
    assert!(conn.buffered_input() < 1 << 20);
}
