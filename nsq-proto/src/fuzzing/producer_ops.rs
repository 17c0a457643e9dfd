//! The `producer_ops` fuzz entry point, re-exported from [`crate::fuzzing`]. Not a stable API.

use crate::driver::{Action, ConnId};
use crate::frame::{FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Message, MessageId};
use crate::fuzzing::{Input, frame, identify_reply_with};
use crate::names::Topic;
use crate::producer::{Producer, ProducerConfig, ProducerEvent, Routing};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a `producer_ops` run reached, so corpus replay tests can check their seeds exercise
/// something.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpsSummary {
    /// Publishes confirmed.
    pub published: u64,
    /// Publishes failed.
    pub failed: u64,
    /// Pings resolved.
    pub pings: usize,
    /// `ConnectionReady` events.
    pub ready: usize,
}

/// What the harness saw.
#[derive(Default)]
struct Book {
    ready: usize,
    /// Resolutions per publish id (must end at exactly 1 for every accepted id).
    publishes: BTreeMap<u64, u32>,
    pings: BTreeMap<u64, u32>,
    closed: u32,
    conns: Vec<ConnId>,
    connecting: Vec<ConnId>,
}

impl Book {
    fn drain(&mut self, producer: &mut Producer) {
        while let Some(action) = producer.poll_action() {
            match action {
                Action::Connect { conn, .. } => self.connecting.push(conn),
                Action::Disconnect { conn } => {
                    self.conns.retain(|&c| c != conn);
                    self.connecting.retain(|&c| c != conn);
                }
                _ => {}
            }
        }
        while let Some(event) = producer.poll_event() {
            match event {
                ProducerEvent::Published(id) | ProducerEvent::PublishFailed(id, _) => {
                    let n = self
                        .publishes
                        .get_mut(&id.get())
                        .unwrap_or_else(|| panic!("{id} resolved but never accepted"));
                    *n += 1;
                    assert!(*n == 1, "{id} resolved twice");
                }
                ProducerEvent::PingOk(id) | ProducerEvent::PingFailed(id, _) => {
                    let n = self
                        .pings
                        .get_mut(&id.get())
                        .unwrap_or_else(|| panic!("{id} resolved but never accepted"));
                    *n += 1;
                    assert!(*n == 1, "{id} resolved twice");
                }
                ProducerEvent::Closed => self.closed += 1,
                ProducerEvent::ConnectionReady { .. } => self.ready += 1,
                _ => {}
            }
        }
        let unresolved = self.publishes.values().filter(|&&n| n == 0).count();
        assert_eq!(
            producer.stats().outstanding,
            unresolved,
            "outstanding count disagrees with the unresolved publishes"
        );
    }
}

/// Drives a [`Producer`] with an arbitrary sequence of operations decoded from `data`:
/// nsqd addresses added, connects succeeding or failing, server bytes (IDENTIFY replies, OK,
/// heartbeats, fatal and non-fatal errors, message frames, garbage), EOF, publishes of every
/// kind (valid and invalid), pings, time jumps and close. After every step it checks that no
/// publish or ping resolved twice and that the outstanding count is right; at the end it
/// closes the producer, runs its timers out and checks that every accepted publish and ping
/// resolved exactly once and `Closed` came exactly once.
pub fn producer_ops(data: &[u8]) {
    let _ = producer_ops_summary(data);
}

/// [`producer_ops`], returning what the run reached.
pub fn producer_ops_summary(data: &[u8]) -> OpsSummary {
    let mut input = Input::new(data);
    let mut now = crate::fuzzing::virtual_time_origin();
    let flags = input.byte();
    let config = ProducerConfig {
        routing: if flags & 1 == 0 {
            Routing::Failover
        } else {
            Routing::RoundRobin
        },
        max_outstanding: (flags & 2 != 0).then(|| usize::from(input.byte() % 16) + 1),
        max_pending: usize::from(input.byte() % 16),
        publish_timeout: Duration::from_millis(u64::from(input.u16()) * 4),
        reply_timeout: (flags & 4 != 0).then_some(Duration::from_secs(5)),
        close_timeout: Duration::from_secs(u64::from(input.byte() % 40)),
        // Off unless asked, so the committed seeds keep one reply per publish.
        batching: flags & 8 != 0,
        ..ProducerConfig::default()
    };
    let seed = u64::from(input.u16());
    let Ok(mut producer) = Producer::new(config, seed) else {
        return OpsSummary::default();
    };
    let topic = Topic::new("fuzz").expect("valid topic");
    let mut book = Book::default();
    let mut steps = 0;
    while !input.is_empty() && steps < 4096 {
        steps += 1;
        let op = input.byte() % 16;
        let pick = usize::from(input.byte());
        match op {
            0 => {
                let _ = producer.add_nsqd(now, &format!("10.0.0.{}:4150", pick % 4));
            }
            1 if !book.connecting.is_empty() => {
                let c = book.connecting.remove(pick % book.connecting.len());
                producer.handle_connected(now, c);
                book.conns.push(c);
            }
            2 if !book.connecting.is_empty() => {
                let c = book.connecting.remove(pick % book.connecting.len());
                producer.handle_connect_failed(now, c, "refused");
            }
            3..=6 if !book.conns.is_empty() => {
                let c = book.conns[pick % book.conns.len()];
                let mut bytes = match op {
                    3 => frame(FRAME_TYPE_RESPONSE, identify_reply_with(2500).as_bytes()),
                    4 => {
                        let mut b = BytesMut::new();
                        for _ in 0..=(input.byte() % 8) {
                            b.extend_from_slice(&frame(FRAME_TYPE_RESPONSE, b"OK"));
                        }
                        b
                    }
                    5 => match pick % 5 {
                        0 => frame(FRAME_TYPE_RESPONSE, b"_heartbeat_"),
                        1 => frame(FRAME_TYPE_ERROR, b"E_BAD_TOPIC PUB bad topic"),
                        2 => frame(FRAME_TYPE_ERROR, b"E_FIN_FAILED x"),
                        3 => {
                            let m = Message {
                                timestamp: 0,
                                attempts: 1,
                                id: MessageId::new(*b"0123456789abcdef"),
                                body: Bytes::from_static(b"x"),
                            };
                            let mut b = BytesMut::new();
                            crate::frame::encode_message_frame(&mut b, &m);
                            b
                        }
                        _ => frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT"),
                    },
                    _ => BytesMut::from(input.slice(64)),
                };
                producer.handle_input(now, c, &mut bytes);
            }
            7 if !book.conns.is_empty() => {
                let c = book.conns[pick % book.conns.len()];
                producer.handle_eof(now, c);
            }
            8 | 9 => {
                let body = input.slice(8).to_vec();
                if let Ok(id) = producer.publish(now, &topic, &body) {
                    book.publishes.insert(id.get(), 0);
                }
            }
            10 => {
                let bodies: Vec<Vec<u8>> = (0..pick % 4).map(|k| vec![k as u8; k]).collect();
                if let Ok(id) = producer.multi_publish(now, &topic, &bodies) {
                    book.publishes.insert(id.get(), 0);
                }
            }
            11 => {
                let delay = Duration::from_secs(u64::from(input.u16()));
                if let Ok(id) = producer.deferred_publish(now, &topic, delay, b"d") {
                    book.publishes.insert(id.get(), 0);
                }
            }
            12 => {
                if let Ok(id) = producer.ping(now) {
                    book.pings.insert(id.get(), 0);
                }
            }
            13 => {
                now += Duration::from_millis(u64::from(input.u16()) * 16);
                producer.handle_timeout(now);
            }
            14 => {
                if let Some(t) = producer.poll_timeout() {
                    now = now.max(t);
                    producer.handle_timeout(now);
                }
            }
            15 => producer.close(now),
            _ => {}
        }
        book.drain(&mut producer);
    }
    // Wind down: nothing more from the servers; every timer runs out.
    producer.close(now);
    book.drain(&mut producer);
    let mut rounds = 0;
    while let Some(t) = producer.poll_timeout() {
        rounds += 1;
        assert!(rounds < 10_000, "timers never run out");
        now = now.max(t);
        producer.handle_timeout(now);
        book.drain(&mut producer);
    }
    assert!(producer.is_closed(), "not closed after every timer ran out");
    assert_eq!(book.closed, 1, "Closed emitted {} times", book.closed);
    for (id, n) in book.publishes.iter().chain(&book.pings) {
        assert_eq!(*n, 1, "id {id} resolved {n} times");
    }
    let stats = producer.stats();
    OpsSummary {
        published: stats.published,
        failed: stats.failed,
        pings: book.pings.len(),
        ready: book.ready,
    }
}
