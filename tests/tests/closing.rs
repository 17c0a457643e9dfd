//! How the broker ends a connection after a fatal error, byte for byte as nsqd v1.3.0 does:
//! the error frame is flushed and the socket closed at once, without reading what the client
//! sent after the refused part. An oversize PUB, DPUB or MPUB is refused right after its size
//! is read, so its body is never read, and the kernel answers the unread bytes with a reset:
//! the client's writes fail, and only a client that reads what arrived before the reset sees
//! the error. They run against a real nsqd too when `NSQD_TCP_ADDRESS` is set (see
//! `nsq_test_broker::conformance`).

use std::io::{self, Write};
use std::time::Duration;

use nsq_test_broker::RawFrame;
use nsq_test_broker::conformance::Env;

type R = Result<(), Box<dyn std::error::Error>>;

/// Far more than nsqd reads ahead (its 16 KiB read buffer) and than the loopback's socket
/// buffers hold, so most of it is still unsent or unread when nsqd closes.
const BODY: usize = 8 * 1024 * 1024;

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

/// Sends `head` (a command line and a size nsqd refuses) followed by `BODY` bytes in one
/// write, as a client does that does not read before it writes; then reads. Returns the error
/// frame, after checking that the connection was reset: the write failed with a reset, or a
/// read after the frame says so.
fn refused_with_reset(env: &Env, head: &[u8]) -> Result<String, Box<dyn std::error::Error>> {
    let mut c = env.raw();
    let mut bytes = head.to_vec();
    bytes.resize(head.len() + BODY, b'x');
    let mut tcp = c.tcp().try_clone()?;
    tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
    let written = tcp.write_all(&bytes);
    if let Err(e) = &written {
        assert!(is_reset(e), "the write failed, but not with a reset: {e}");
    }
    // What nsqd sent before the reset is still there to read.
    let error = match c.read_frame()? {
        RawFrame::Error(e) => e,
        other => return Err(format!("expected the error frame, got {other:?}").into()),
    };
    if written.is_ok() {
        // Every byte fitted in the socket buffers: the reset shows on the next read.
        let next = c.read_frame().expect_err("nothing after the error frame");
        assert!(is_reset(&next), "a clean close, not a reset: {next}");
    }
    Ok(error)
}

fn head(line: &str, size: u32) -> Vec<u8> {
    let mut b = format!("{line}\n").into_bytes();
    b.extend_from_slice(&size.to_be_bytes());
    b
}

#[test]
fn an_oversize_pub_is_refused_and_its_body_is_answered_with_a_reset() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("close-pub");
    let e = refused_with_reset(&env, &head(&format!("PUB {t}"), 4_000_000))?;
    assert_eq!(e, "E_BAD_MESSAGE PUB message too big 4000000 > 1048576");
    let e = refused_with_reset(&env, &head(&format!("DPUB {t} 10"), 2_000_000))?;
    assert_eq!(e, "E_BAD_MESSAGE DPUB message too big 2000000 > 1048576");
    Ok(())
}

#[test]
fn an_oversize_mpub_is_refused_and_its_body_is_answered_with_a_reset() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("close-mpub");
    // Over --max-body-size: refused after the body size.
    let e = refused_with_reset(&env, &head(&format!("MPUB {t}"), 6_000_000))?;
    assert_eq!(e, "E_BAD_BODY MPUB body too big 6000000 > 5242880");
    // Within it, but its first message is over --max-msg-size: refused after that
    // message's size, the rest of the body unread.
    let mut h = head(&format!("MPUB {t}"), 4_000_008);
    h.extend_from_slice(&1u32.to_be_bytes());
    h.extend_from_slice(&4_000_000u32.to_be_bytes());
    let e = refused_with_reset(&env, &h)?;
    assert_eq!(e, "E_BAD_MESSAGE MPUB message too big 4000000 > 1048576");
    Ok(())
}

/// Commands written behind a fatal one are never read: they are part of what the reset
/// answers, and none of them runs.
#[test]
fn commands_behind_a_fatal_error_are_reset_unread() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("close-behind");
    let mut bytes = b"BOGUS\n".to_vec();
    let mut publish = format!("PUB {t}\n").into_bytes();
    publish.extend_from_slice(&5u32.to_be_bytes());
    publish.extend_from_slice(b"never");
    bytes.extend_from_slice(&publish);
    let e = refused_with_reset(&env, &bytes)?;
    assert_eq!(e, "E_INVALID invalid command BOGUS");
    // Nothing was published: a fresh connection's PUB is the topic's first message.
    let mut c = env.raw();
    assert_eq!(c.publish(&t, b"first")?, RawFrame::Response(b"OK".to_vec()));
    if let Some(nsqd) = env.nsqd() {
        assert_eq!(nsqd.topic(&t).map(|s| s.message_count), Some(1));
    }
    Ok(())
}

/// nsqd sets a write deadline of the client's heartbeat interval before every write: a
/// client that stops reading while nsqd has messages for it (here, one that only sends NOPs,
/// so its read deadline never passes) has its connection given up. It reads what its socket
/// buffers held, then the connection ends, far from every message and with no heartbeat.
#[test]
fn a_client_that_stops_reading_is_given_up_after_its_heartbeat_interval() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("close-stall");
    // 20 MB in flight for one consumer: more than the loopback's socket buffers hold.
    let mut p = env.raw();
    let body = vec![b'm'; 1_000_000];
    for _ in 0..5 {
        let bodies: Vec<&[u8]> = vec![&body; 4];
        assert_eq!(p.mpub(&t, &bodies)?, RawFrame::Response(b"OK".to_vec()));
    }
    let mut c = env.raw();
    c.identify_negotiate(&serde_json::json!({ "heartbeat_interval": 1000 }))?;
    c.subscribe(&t, "ch")?;
    c.cmd("RDY 100")?;
    // Three heartbeat intervals without reading, sending NOPs all along.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300));
        c.cmd("NOP")?;
    }
    let (mut messages, mut heartbeats) = (0, 0);
    c.set_read_timeout(Duration::from_secs(10))?;
    let end = loop {
        match c.read_frame() {
            Ok(RawFrame::Message(_)) => messages += 1,
            Ok(f) if f.is_heartbeat() => heartbeats += 1,
            Ok(f) => return Err(format!("unexpected frame {f:?}").into()),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            end.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ),
        "the connection ended: {end}"
    );
    assert!(
        messages < 20,
        "{messages} messages: the writes never gave up"
    );
    assert_eq!(heartbeats, 0);
    Ok(())
}
