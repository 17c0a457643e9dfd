//! The `consumer_ops` fuzz entry point, re-exported from [`crate::fuzzing`]. Not a stable API.

use crate::consumer::{Consumer, ConsumerConfig, ConsumerEvent, InFlightMode};
use crate::driver::{Action, ConnId, LookupdRequestId};
use crate::frame::{
    FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Message, MessageId, encode_message_frame,
};
use crate::fuzzing::{Input, frame, identify_reply_with};
use crate::names::{Channel, Topic};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeSet;
use std::time::Duration;

/// Drives a [`Consumer`] with an arbitrary sequence of operations decoded from `data`:
/// connections opening, failing, handshaking, delivering messages, errors and garbage;
/// finishes, requeues with and without backoff, touches; `max_in_flight` changes; auto-touch
/// turned on and off; re-plans held over answers in a row; lookupd
/// replies (well-formed and garbage); disconnecting from nsqd and lookupds; time jumps; close.
/// After every operation it checks the flow-control invariants (sum of RDY <= max_in_flight,
/// RDY <= max_rdy_count per connection), that no directly added or connected nsqd was
/// forgotten and that the per-nsqd stats add up to the totals, and panics if one is broken.
pub fn consumer_ops(data: &[u8]) {
    let mut input = Input::new(data);
    let mut now = crate::fuzzing::virtual_time_origin();
    let max_in_flight = u32::from(input.byte() % 12);
    let max_attempts = u16::from(input.byte() % 4);
    let flags = input.byte();
    let config = ConsumerConfig {
        max_in_flight,
        max_attempts,
        backoff_enabled: flags % 4 != 0,
        // The high bit (unused before): the adaptive limit, with a floor of 1 or 2.
        max_in_flight_mode: if flags & 0x80 != 0 {
            InFlightMode::Adaptive
        } else {
            InFlightMode::Static
        },
        min_in_flight: 1 + u32::from(flags & 0x40 != 0),
        backoff_multiplier: Duration::from_millis(100),
        max_backoff_duration: Duration::from_secs(5),
        ..ConsumerConfig::default()
    };
    let seed = u64::from(input.u16());
    let mut consumer = Consumer::new(
        config,
        Topic::new("fuzz").expect("valid topic"),
        Channel::new("ch").expect("valid channel"),
        seed,
    );
    let mut conns: Vec<ConnId> = Vec::new();
    let mut connecting: Vec<ConnId> = Vec::new();
    let mut requests: Vec<LookupdRequestId> = Vec::new();
    let mut messages: Vec<(ConnId, Message)> = Vec::new();
    let mut next_id: u64 = 0;
    let mut direct: BTreeSet<String> = BTreeSet::new();
    let mut steps = 0;
    while !input.is_empty() && steps < 4096 {
        steps += 1;
        let op = input.byte() % 20;
        let pick = usize::from(input.byte());
        match op {
            0 => {
                let addr = format!("10.0.0.{}:4150", pick % 6);
                if pick < 0xc0 {
                    if consumer.add_nsqd(now, &addr).is_ok() {
                        direct.insert(addr);
                    }
                } else if consumer.disconnect_from_nsqd(now, &addr).is_ok() {
                    direct.remove(&addr);
                }
            }
            1 if !connecting.is_empty() => {
                let c = connecting.remove(pick % connecting.len());
                consumer.handle_connected(now, c);
                conns.push(c);
            }
            2 if !connecting.is_empty() => {
                let c = connecting.remove(pick % connecting.len());
                consumer.handle_connect_failed(now, c, "refused");
            }
            3..=8 if !conns.is_empty() => {
                let c = conns[pick % conns.len()];
                let mut bytes = match op {
                    3 => {
                        let max_rdy = [1u32, 2, 5, 2500][usize::from(input.byte() % 4)];
                        let reply = identify_reply_with(max_rdy);
                        frame(FRAME_TYPE_RESPONSE, reply.as_bytes())
                    }
                    4 => frame(FRAME_TYPE_RESPONSE, b"OK"),
                    5 => {
                        next_id += 1;
                        let id = format!("{next_id:016x}");
                        let mut id_bytes = [0u8; 16];
                        id_bytes.copy_from_slice(id.as_bytes());
                        let m = Message {
                            timestamp: 0,
                            attempts: u16::from(input.byte() % 8),
                            id: MessageId::new(id_bytes),
                            body: Bytes::from_static(b"body"),
                        };
                        let mut b = BytesMut::new();
                        encode_message_frame(&mut b, &m);
                        b
                    }
                    6 => frame(
                        FRAME_TYPE_RESPONSE,
                        [&b"_heartbeat_"[..], b"CLOSE_WAIT"][pick % 2],
                    ),
                    7 => frame(
                        FRAME_TYPE_ERROR,
                        [&b"E_FIN_FAILED x"[..], b"E_REQ_FAILED x", b"E_INVALID x"][pick % 3],
                    ),
                    _ => BytesMut::from(input.slice(64)),
                };
                consumer.handle_input(now, c, &mut bytes);
            }
            9 if !conns.is_empty() => {
                let c = conns[pick % conns.len()];
                consumer.handle_eof(now, c);
            }
            10..=12 if !messages.is_empty() => {
                let (c, m) = messages.swap_remove(pick % messages.len());
                let _ = match op {
                    10 => consumer.finish(now, c, &m.id),
                    11 => {
                        let delay = match input.byte() % 3 {
                            0 => None,
                            1 => Some(Duration::ZERO),
                            _ => Some(Duration::from_secs(u64::from(input.u16()))),
                        };
                        consumer.requeue(now, c, &m, delay, pick % 2 == 0)
                    }
                    _ => {
                        let r = consumer.touch(now, c, &m.id);
                        messages.push((c, m));
                        r
                    }
                };
            }
            // The top of the pick range turns auto-touch on or off (as batches do) instead.
            13 if pick >= 0xe0 => {
                let limit = (pick % 2 == 0).then(|| Duration::from_secs((pick % 5) as u64 + 1));
                consumer.set_auto_touch(now, limit);
            }
            // Below it, answers in a row: RDY planned once, after the last.
            13 if pick >= 0xd0 && pick % 2 == 0 => consumer.hold_replans(),
            13 if pick >= 0xd0 => consumer.release_replans(now),
            13 => consumer.set_max_in_flight(now, u32::from(input.byte() % 12)),
            14 => {
                let ms = u64::from(input.u16()) * 16;
                now += Duration::from_millis(ms);
                consumer.handle_timeout(now);
            }
            15 => {
                if let Some(t) = consumer.poll_timeout() {
                    now = now.max(t);
                    consumer.handle_timeout(now);
                }
            }
            16 => {
                let addr = format!("10.1.0.{}:4161", pick % 3);
                let _ = if pick < 0xc0 {
                    consumer.add_lookupd(now, &addr)
                } else {
                    consumer.disconnect_from_lookupd(now, &addr)
                };
            }
            17 if !requests.is_empty() => {
                let r = requests[pick % requests.len()];
                let body = format!(
                    r#"{{"channels":[],"producers":[{{"broadcast_address":"10.0.0.{}","tcp_port":4150}}]}}"#,
                    input.byte() % 6
                );
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                consumer.handle_lookupd_input(now, r, reply.as_bytes());
            }
            18 if !requests.is_empty() => {
                let r = requests[pick % requests.len()];
                match input.byte() % 3 {
                    0 => {
                        let garbage = input.slice(64).to_vec();
                        consumer.handle_lookupd_input(now, r, &garbage);
                    }
                    1 => consumer.handle_lookupd_eof(now, r),
                    _ => consumer.handle_lookupd_failed(now, r, "reset"),
                }
            }
            19 => consumer.close(now),
            _ => {}
        }
        // Drain the outputs, as a driver would.
        while let Some(action) = consumer.poll_action() {
            match action {
                Action::Connect { conn, .. } => connecting.push(conn),
                Action::Disconnect { conn } => {
                    conns.retain(|&c| c != conn);
                    connecting.retain(|&c| c != conn);
                    messages.retain(|(c, _)| *c != conn);
                }
                Action::LookupdRequest { request, .. } => requests.push(request),
                Action::LookupdClose { request } => requests.retain(|&r| r != request),
                _ => {}
            }
        }
        while let Some(event) = consumer.poll_event() {
            if let ConsumerEvent::Message { conn, message } = event {
                messages.push((conn, message));
            }
        }
        check_invariants(&consumer, &direct);
        // Holding every message max_in_flight allows, nothing more can come before an answer.
        let held = u32::try_from(messages.len()).unwrap_or(u32::MAX);
        let full = consumer.is_full(now);
        assert!(
            held < consumer.max_in_flight() || full,
            "{held} held, not full"
        );
    }
}

fn check_invariants(consumer: &Consumer, direct: &BTreeSet<String>) {
    // Forgetting discovered nsqd never drops a directly added or a connected one.
    let held: BTreeSet<&str> = direct
        .iter()
        .map(String::as_str)
        .chain(consumer.connections().map(|(_, addr)| addr))
        .collect();
    let stats = consumer.stats();
    let known = stats.known_nsqd;
    // The per-nsqd breakdown adds up to the totals.
    assert_eq!(stats.nsqd.len(), known);
    let rdy: u64 = stats.nsqd.iter().map(|n| u64::from(n.rdy)).sum();
    let in_flight: usize = stats.nsqd.iter().map(|n| n.in_flight).sum();
    assert_eq!(rdy, stats.total_rdy);
    assert_eq!(in_flight, stats.in_flight);
    let reconnects: u64 = stats.nsqd.iter().map(|n| n.reconnects).sum();
    assert!(reconnects <= stats.reconnects);
    for (per, total) in [
        (
            stats.nsqd.iter().map(|n| n.received).sum::<u64>(),
            stats.received,
        ),
        (stats.nsqd.iter().map(|n| n.finished).sum(), stats.finished),
        (stats.nsqd.iter().map(|n| n.requeued).sum(), stats.requeued),
        (stats.nsqd.iter().map(|n| n.gave_up).sum(), stats.gave_up),
    ] {
        assert!(per <= total, "per-nsqd {per} above the total {total}");
    }
    assert!(
        known >= held.len() && known <= 6,
        "{known} nsqd known, {} held: {held:?}",
        held.len()
    );
    let mut total: u64 = 0;
    for (id, _) in consumer.connections() {
        let rdy = consumer.rdy(id);
        if let Some(c) = consumer.connection(id) {
            assert!(
                rdy <= c.max_rdy(),
                "{id}: RDY {rdy} above max {}",
                c.max_rdy()
            );
        }
        total += u64::from(rdy);
    }
    assert!(
        total <= u64::from(consumer.max_in_flight()),
        "total RDY {total} above max_in_flight {}",
        consumer.max_in_flight()
    );
    let limit = consumer.in_flight_limit();
    assert!(
        limit <= consumer.max_in_flight(),
        "in-flight limit {limit} above max_in_flight {}",
        consumer.max_in_flight()
    );
    assert!(
        total <= u64::from(limit),
        "total RDY {total} above the in-flight limit {limit}"
    );
}
