//! Client-to-server commands, encoded into any [`BufMut`].
//!
//! Every encoder validates its input first and writes nothing when it returns an error, so a
//! rejected command can never leave half a frame in an output buffer.

use crate::frame::MessageId;
use crate::identify::Identify;
use crate::names::{Channel, Topic};
use bytes::BufMut;
use std::time::Duration;

/// The protocol magic, sent once before anything else: two spaces and `V2`.
pub const MAGIC_V2: &[u8; 4] = b"  V2";

pub use crate::limits::{CommandError, DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_REQ_TIMEOUT, Limits};

/// Writes an unsigned integer in decimal ASCII.
fn put_decimal(buf: &mut impl BufMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&digits[i..]);
}

fn delay_ms(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn check_body(index: usize, body: &[u8], limits: &Limits) -> Result<(), CommandError> {
    if body.is_empty() {
        return Err(CommandError::EmptyBody);
    }
    if body.len() > limits.max_msg_size as usize {
        return Err(CommandError::BodyTooLarge {
            index,
            len: body.len(),
            max: limits.max_msg_size,
        });
    }
    Ok(())
}

fn check_delay(delay: Duration, limits: &Limits) -> Result<(), CommandError> {
    // Compared in whole milliseconds, the unit that goes on the wire: a delay that only
    // exceeds the limit by a fraction of a millisecond is sent as the limit itself.
    if delay_ms(delay) > delay_ms(limits.max_req_timeout) {
        return Err(CommandError::DelayTooLong {
            delay,
            max: limits.max_req_timeout,
        });
    }
    Ok(())
}

/// Writes the protocol magic `"  V2"`.
pub fn magic(buf: &mut impl BufMut) {
    buf.put_slice(MAGIC_V2);
}

/// Writes `IDENTIFY\n` + u32 length + JSON, after checking every field against nsqd's ranges.
pub fn identify(buf: &mut impl BufMut, identify: &Identify) -> Result<(), CommandError> {
    identify.validate()?;
    let json = serde_json::to_vec(identify).map_err(|e| CommandError::Serialize(e.to_string()))?;
    buf.put_slice(b"IDENTIFY\n");
    buf.put_u32(json.len() as u32);
    buf.put_slice(&json);
    Ok(())
}

/// Writes `AUTH\n` + u32 length + secret.
pub fn auth(buf: &mut impl BufMut, secret: &[u8]) -> Result<(), CommandError> {
    if secret.is_empty() {
        return Err(CommandError::EmptySecret);
    }
    buf.put_slice(b"AUTH\n");
    buf.put_u32(secret.len() as u32);
    buf.put_slice(secret);
    Ok(())
}

/// Writes `SUB <topic> <channel>\n`.
pub fn sub(buf: &mut impl BufMut, topic: &Topic, channel: &Channel) {
    buf.put_slice(b"SUB ");
    buf.put_slice(topic.as_str().as_bytes());
    buf.put_u8(b' ');
    buf.put_slice(channel.as_str().as_bytes());
    buf.put_u8(b'\n');
}

/// Writes `PUB <topic>\n` + u32 length + body.
pub fn publish(
    buf: &mut impl BufMut,
    topic: &Topic,
    body: &[u8],
    limits: &Limits,
) -> Result<(), CommandError> {
    check_body(0, body, limits)?;
    buf.put_slice(b"PUB ");
    buf.put_slice(topic.as_str().as_bytes());
    buf.put_u8(b'\n');
    buf.put_u32(body.len() as u32);
    buf.put_slice(body);
    Ok(())
}

/// Writes `MPUB <topic>\n` + u32 body length + u32 count + (u32 length + body) per message.
pub fn multi_publish<B: AsRef<[u8]>>(
    buf: &mut impl BufMut,
    topic: &Topic,
    bodies: &[B],
    limits: &Limits,
) -> Result<(), CommandError> {
    let total = check_batch(bodies, limits)?;
    buf.put_slice(b"MPUB ");
    buf.put_slice(topic.as_str().as_bytes());
    buf.put_u8(b'\n');
    buf.put_u32(total as u32);
    buf.put_u32(bodies.len() as u32);
    for body in bodies {
        let body = body.as_ref();
        buf.put_u32(body.len() as u32);
        buf.put_slice(body);
    }
    Ok(())
}

/// Checks the bodies of an MPUB (not empty, each body within the message limit, the whole body
/// within the MPUB limit) and returns the MPUB body's length (count + entries).
fn check_batch<B: AsRef<[u8]>>(bodies: &[B], limits: &Limits) -> Result<u64, CommandError> {
    if bodies.is_empty() {
        return Err(CommandError::EmptyBatch);
    }
    let mut total: u64 = 4;
    for (index, body) in bodies.iter().enumerate() {
        let body = body.as_ref();
        if body.is_empty() {
            return Err(CommandError::EmptyBodyInBatch { index });
        }
        check_body(index, body, limits)?;
        total += 4 + body.len() as u64;
    }
    if total > u64::from(limits.max_body_size) {
        return Err(CommandError::BatchTooLarge {
            len: total,
            max: limits.max_body_size,
        });
    }
    Ok(total)
}

/// Checks one PUB or DPUB body (and the DPUB delay) without encoding anything.
pub(crate) fn check_publish(
    body: &[u8],
    delay: Option<Duration>,
    limits: &Limits,
) -> Result<(), CommandError> {
    if let Some(delay) = delay {
        check_delay(delay, limits)?;
    }
    check_body(0, body, limits)
}

/// Appends one MPUB entry: u32 length + body.
// Into a `Vec`, not a `BytesMut`, whose `put_slice` checks and advances twice per entry
// (measured: see BENCHMARKS-HISTORY.md, the third round's MPUB encoding).
pub(crate) fn put_entry(buf: &mut Vec<u8>, body: &[u8]) {
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
}

/// The bytes a producer keeps in front of a publish's MPUB entries, where
/// [`put_publish_line`] writes its command line once the batch is complete: the length of
/// `MPUB <topic>\n` plus the body size and the count (a PUB's line is shorter).
pub(crate) fn publish_room(topic: &Topic) -> usize {
    14 + topic.as_str().len()
}

/// Writes the command line of a publish of `count` MPUB entries (`entries_len` bytes) at the
/// end of `room` ([`publish_room`] bytes), so that the command runs on into the entries:
/// `PUB <topic>\n` when there is one entry and `multi` is false (a PUB's body is exactly one
/// entry), else `MPUB <topic>\n` + u32 body size + u32 count. Returns where in `room` the
/// command starts.
pub(crate) fn put_publish_line(
    room: &mut [u8],
    topic: &Topic,
    count: u32,
    entries_len: usize,
    multi: bool,
) -> usize {
    let name = topic.as_str().as_bytes();
    let end = room.len();
    let mut line: &mut [u8] = if count == 1 && !multi {
        &mut room[end - (5 + name.len())..]
    } else {
        &mut room[end - (14 + name.len())..]
    };
    let start = end - line.len();
    if count == 1 && !multi {
        line.put_slice(b"PUB ");
        line.put_slice(name);
        line.put_u8(b'\n');
    } else {
        line.put_slice(b"MPUB ");
        line.put_slice(name);
        line.put_u8(b'\n');
        line.put_u32((entries_len + 4) as u32);
        line.put_u32(count);
    }
    start
}

/// Writes `DPUB <topic> <defer_ms>\n` + u32 length + body.
pub fn deferred_publish(
    buf: &mut impl BufMut,
    topic: &Topic,
    delay: Duration,
    body: &[u8],
    limits: &Limits,
) -> Result<(), CommandError> {
    check_delay(delay, limits)?;
    check_body(0, body, limits)?;
    buf.put_slice(b"DPUB ");
    buf.put_slice(topic.as_str().as_bytes());
    buf.put_u8(b' ');
    put_decimal(buf, delay_ms(delay));
    buf.put_u8(b'\n');
    buf.put_u32(body.len() as u32);
    buf.put_slice(body);
    Ok(())
}

/// Writes `RDY <count>\n`. Checking `count` against the server's max_rdy_count is the
/// connection's job, which knows the negotiated value.
pub fn rdy(buf: &mut impl BufMut, count: u32) {
    buf.put_slice(b"RDY ");
    put_decimal(buf, u64::from(count));
    buf.put_u8(b'\n');
}

/// Writes `FIN <id>\n`.
pub fn fin(buf: &mut impl BufMut, id: &MessageId) {
    buf.put_slice(b"FIN ");
    buf.put_slice(id.as_bytes());
    buf.put_u8(b'\n');
}

/// Writes `REQ <id> <delay_ms>\n`.
pub fn req(
    buf: &mut impl BufMut,
    id: &MessageId,
    delay: Duration,
    limits: &Limits,
) -> Result<(), CommandError> {
    check_delay(delay, limits)?;
    buf.put_slice(b"REQ ");
    buf.put_slice(id.as_bytes());
    buf.put_u8(b' ');
    put_decimal(buf, delay_ms(delay));
    buf.put_u8(b'\n');
    Ok(())
}

/// Writes `TOUCH <id>\n`.
pub fn touch(buf: &mut impl BufMut, id: &MessageId) {
    buf.put_slice(b"TOUCH ");
    buf.put_slice(id.as_bytes());
    buf.put_u8(b'\n');
}

/// Writes `CLS\n`.
pub fn cls(buf: &mut impl BufMut) {
    buf.put_slice(b"CLS\n");
}

/// Writes `NOP\n`.
pub fn nop(buf: &mut impl BufMut) {
    buf.put_slice(b"NOP\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal() {
        for n in [0u64, 7, 10, 99, 100, 2500, u64::MAX] {
            let mut v = Vec::new();
            put_decimal(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }
}
