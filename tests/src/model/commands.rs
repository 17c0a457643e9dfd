//! nsqd's per-command rules of the TCP protocol V2, shared by the socket broker
//! ([`Nsqd`](crate::Nsqd)) and the model ([`Nsqd`](super::Nsqd)): state checks, parameter
//! parsing and validation, with nsqd v1.3.0's error codes and texts.
//!
//! Pure functions: no IO, no locks. Reading bodies (from a socket or from buffered bytes) and
//! acting on the queues stay with the callers.

use std::fmt::Display;
use std::time::Duration;

use super::queues::{AnswerError, ClientState};
use crate::util::{go_quote, is_valid_name};

/// nsqd's IDENTIFY feature negotiation reply, fields in Go's order (both nsqd send it).
#[derive(serde::Serialize)]
pub(crate) struct IdentifyReply<'a> {
    pub(crate) max_rdy_count: i64,
    pub(crate) version: &'a str,
    pub(crate) max_msg_timeout: i64,
    pub(crate) msg_timeout: i64,
    pub(crate) tls_v1: bool,
    pub(crate) deflate: bool,
    pub(crate) deflate_level: i64,
    pub(crate) max_deflate_level: i64,
    pub(crate) snappy: bool,
    pub(crate) sample_rate: i64,
    pub(crate) auth_required: bool,
    pub(crate) output_buffer_size: i64,
    pub(crate) output_buffer_timeout: i64,
    /// nsqd after v1.3.0 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) topology_region: Option<&'a str>,
    /// nsqd after v1.3.0 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) topology_zone: Option<&'a str>,
}

/// A command's failure: the error frame's text, and whether nsqd closes the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CmdErr {
    /// The frame is written and the connection closed.
    Fatal(String),
    /// The frame is written and the connection stays.
    NonFatal(String),
}

impl CmdErr {
    /// The error frame's text.
    pub(crate) fn into_text(self) -> String {
        match self {
            CmdErr::Fatal(t) | CmdErr::NonFatal(t) => t,
        }
    }
}

/// A fatal error: `"{code} {desc}"`.
pub(crate) fn fatal(code: &str, desc: impl Display) -> CmdErr {
    CmdErr::Fatal(format!("{code} {desc}"))
}

/// The bytes as text, invalid UTF-8 replaced.
pub(crate) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// nsqd's `ByteToBase10`: digits only (empty is 0), wrapping on overflow.
pub(crate) fn base10(b: &[u8]) -> Option<u64> {
    let mut n: u64 = 0;
    for &d in b {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
    }
    Some(n)
}

/// `E_INVALID cannot {cmd} in current state`.
pub(crate) fn invalid_state(cmd: &str) -> CmdErr {
    fatal("E_INVALID", format!("cannot {cmd} in current state"))
}

/// An unknown command.
pub(crate) fn invalid_command(cmd: &[u8]) -> CmdErr {
    fatal("E_INVALID", format!("invalid command {}", lossy(cmd)))
}

/// RDY: `Ok(None)` if ignored (the client is closing), else the count, checked against
/// `max_rdy_count` (a missing count is 1).
pub(crate) fn rdy(
    state: ClientState,
    params: &[&[u8]],
    max_rdy_count: i64,
) -> Result<Option<i64>, CmdErr> {
    if state == ClientState::Closing {
        return Ok(None);
    }
    if state != ClientState::Subscribed {
        return Err(invalid_state("RDY"));
    }
    let mut count: i64 = 1;
    if params.len() > 1 {
        let n = base10(params[1]).ok_or_else(|| {
            fatal(
                "E_INVALID",
                format!("RDY could not parse count {}", lossy(params[1])),
            )
        })?;
        count = n as i64;
    }
    if count < 0 || count > max_rdy_count {
        return Err(fatal(
            "E_INVALID",
            format!("RDY count {count} out of range 0-{max_rdy_count}"),
        ));
    }
    Ok(Some(count))
}

/// SUB's checks before nsqd touches its topics: returns `(topic, channel)`.
pub(crate) fn sub<'a>(
    state: ClientState,
    heartbeats: bool,
    params: &[&'a [u8]],
) -> Result<(&'a [u8], &'a [u8]), CmdErr> {
    if state != ClientState::Init {
        return Err(invalid_state("SUB"));
    }
    if !heartbeats {
        return Err(fatal("E_INVALID", "cannot SUB with heartbeats disabled"));
    }
    if params.len() < 3 {
        return Err(fatal("E_INVALID", "SUB insufficient number of parameters"));
    }
    let (topic, channel) = (params[1], params[2]);
    if !is_valid_name(topic) {
        return Err(fatal(
            "E_BAD_TOPIC",
            format!("SUB topic name {} is not valid", go_quote(topic)),
        ));
    }
    if !is_valid_name(channel) {
        return Err(fatal(
            "E_BAD_CHANNEL",
            format!("SUB channel name {} is not valid", go_quote(channel)),
        ));
    }
    Ok((topic, channel))
}

/// SUB into a channel that has `max` consumers already (`--max-channel-consumers`).
pub(crate) fn sub_failed(topic: &str, channel: &str, max: usize) -> CmdErr {
    fatal(
        "E_SUB_FAILED",
        format!("SUB failed consumers for {topic}:{channel} exceeds limit of {max}"),
    )
}

/// The commands that answer a message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Fin,
    Req,
    Touch,
}

impl Answer {
    fn name(self) -> &'static str {
        match self {
            Answer::Fin => "FIN",
            Answer::Req => "REQ",
            Answer::Touch => "TOUCH",
        }
    }
}

/// FIN/REQ/TOUCH's common checks: returns the message id.
pub(crate) fn answer_prelude(
    cmd: Answer,
    state: ClientState,
    params: &[&[u8]],
) -> Result<[u8; 16], CmdErr> {
    let name = cmd.name();
    if state != ClientState::Subscribed && state != ClientState::Closing {
        return Err(invalid_state(name));
    }
    let min_params = if cmd == Answer::Req { 3 } else { 2 };
    if params.len() < min_params {
        return Err(fatal(
            "E_INVALID",
            format!("{name} insufficient number of params"),
        ));
    }
    <[u8; 16]>::try_from(params[1]).map_err(|_| fatal("E_INVALID", "invalid message ID"))
}

/// REQ's timeout (after [`answer_prelude`]), clamped to `max_req_timeout`.
pub(crate) fn req_delay(params: &[&[u8]], max_req_timeout: Duration) -> Result<Duration, CmdErr> {
    let ms = base10(params[2]).ok_or_else(|| {
        fatal(
            "E_INVALID",
            format!("REQ could not parse timeout {}", lossy(params[2])),
        )
    })?;
    Ok(Duration::from_millis(ms).min(max_req_timeout))
}

/// The queues refused to answer message `id`: a non-fatal `E_{cmd}_FAILED`.
pub(crate) fn answer_failed(cmd: Answer, id: &[u8; 16], e: AnswerError) -> CmdErr {
    let name = cmd.name();
    CmdErr::NonFatal(format!(
        "E_{name}_FAILED {name} {} failed {}",
        lossy(id),
        e.text()
    ))
}

/// The publishing commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    Pub,
    Dpub,
    Mpub,
}

impl Publish {
    /// The command's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Publish::Pub => "PUB",
            Publish::Dpub => "DPUB",
            Publish::Mpub => "MPUB",
        }
    }
}

/// PUB/DPUB/MPUB's checks of the command line (before the body): returns the topic and
/// the delay (DPUB's timeout, zero for the others; at most `max_req_timeout`).
pub(crate) fn publish_params<'a>(
    cmd: Publish,
    params: &[&'a [u8]],
    max_req_timeout: Duration,
) -> Result<(&'a [u8], Duration), CmdErr> {
    let name = cmd.name();
    let min_params = if cmd == Publish::Dpub { 3 } else { 2 };
    if params.len() < min_params {
        return Err(fatal(
            "E_INVALID",
            format!("{name} insufficient number of parameters"),
        ));
    }
    let topic = params[1];
    if !is_valid_name(topic) {
        // nsqd repeats the code in MPUB's description.
        let repeat = if cmd == Publish::Mpub {
            "E_BAD_TOPIC "
        } else {
            ""
        };
        return Err(fatal(
            "E_BAD_TOPIC",
            format!("{repeat}{name} topic name {} is not valid", go_quote(topic)),
        ));
    }
    if cmd != Publish::Dpub {
        return Ok((topic, Duration::ZERO));
    }
    let ms = base10(params[2]).ok_or_else(|| {
        fatal(
            "E_INVALID",
            format!("DPUB could not parse timeout {}", lossy(params[2])),
        )
    })?;
    if u128::from(ms) > max_req_timeout.as_millis() {
        return Err(fatal(
            "E_INVALID",
            format!(
                "DPUB timeout {ms} out of range 0-{}",
                max_req_timeout.as_millis()
            ),
        ));
    }
    Ok((topic, Duration::from_millis(ms)))
}

/// PUB/DPUB's message size (read before the message): checked against `max_msg_size`.
pub(crate) fn message_size(cmd: Publish, len: i32, max_msg_size: i64) -> Result<usize, CmdErr> {
    let name = cmd.name();
    if len <= 0 {
        return Err(fatal(
            "E_BAD_MESSAGE",
            format!("{name} invalid message body size {len}"),
        ));
    }
    if i64::from(len) > max_msg_size {
        return Err(fatal(
            "E_BAD_MESSAGE",
            format!("{name} message too big {len} > {max_msg_size}"),
        ));
    }
    Ok(len as usize)
}

/// The body size of IDENTIFY, AUTH or MPUB (read before the body): checked against
/// `max_body_size`, in nsqd's order for each.
pub(crate) fn body_size(cmd: &str, len: i32, max_body_size: i64) -> Result<usize, CmdErr> {
    let invalid = || fatal("E_BAD_BODY", format!("{cmd} invalid body size {len}"));
    // IDENTIFY and AUTH check the maximum first, MPUB the sign.
    if cmd == "MPUB" && len <= 0 {
        return Err(invalid());
    }
    if i64::from(len) > max_body_size {
        return Err(fatal(
            "E_BAD_BODY",
            format!("{cmd} body too big {len} > {max_body_size}"),
        ));
    }
    if len <= 0 {
        return Err(invalid());
    }
    Ok(len as usize)
}

/// Where MPUB's messages are read from, after the body size: the connection itself (nsqd
/// and the socket broker) or the buffered body (the model).
pub(crate) trait MpubSource {
    /// A big-endian i32; `None` if it cannot be read.
    fn read_len(&mut self) -> Option<i32>;
    /// Exactly `n` bytes; `None` if they cannot be read.
    fn read_vec(&mut self, n: usize) -> Option<Vec<u8>>;
}

impl MpubSource for &[u8] {
    fn read_len(&mut self) -> Option<i32> {
        let (len, rest) = self.split_first_chunk::<4>()?;
        *self = rest;
        Some(i32::from_be_bytes(*len))
    }

    fn read_vec(&mut self, n: usize) -> Option<Vec<u8>> {
        let (b, rest) = self.split_at_checked(n)?;
        *self = rest;
        Some(b.to_vec())
    }
}

/// nsqd's `readMPUB`: the message count, then each message's size and body, checked against
/// `max_body_size` and `max_msg_size`.
pub(crate) fn read_mpub(
    src: &mut impl MpubSource,
    max_body_size: i64,
    max_msg_size: i64,
) -> Result<Vec<Vec<u8>>, CmdErr> {
    let count = src
        .read_len()
        .ok_or_else(|| fatal("E_BAD_BODY", "MPUB failed to read message count"))?;
    let max_messages = (max_body_size - 4) / 5;
    if count <= 0 || i64::from(count) > max_messages {
        return Err(fatal(
            "E_BAD_BODY",
            format!("MPUB invalid message count {count}"),
        ));
    }
    let mut bodies = Vec::with_capacity((count as usize).min(1024));
    for i in 0..count {
        let size = src.read_len().ok_or_else(|| {
            fatal(
                "E_BAD_MESSAGE",
                format!("MPUB failed to read message({i}) body size"),
            )
        })?;
        if size <= 0 {
            return Err(fatal(
                "E_BAD_MESSAGE",
                format!("MPUB invalid message({i}) body size {size}"),
            ));
        }
        if i64::from(size) > max_msg_size {
            return Err(fatal(
                "E_BAD_MESSAGE",
                format!("MPUB message too big {size} > {max_msg_size}"),
            ));
        }
        let body = src
            .read_vec(size as usize)
            .ok_or_else(|| fatal("E_BAD_MESSAGE", "MPUB failed to read message body"))?;
        bodies.push(body);
    }
    Ok(bodies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: Result<impl std::fmt::Debug, CmdErr>) -> String {
        r.expect_err("an error").into_text()
    }

    #[test]
    fn base10_is_nsqds() {
        assert_eq!(base10(b""), Some(0));
        assert_eq!(base10(b"0042"), Some(42));
        assert_eq!(base10(b"-1"), None);
        assert_eq!(base10(b"18446744073709551616"), Some(0));
    }

    #[test]
    fn rdy_counts() {
        let sub = ClientState::Subscribed;
        assert_eq!(rdy(ClientState::Closing, &[b"RDY", b"x"], 10), Ok(None));
        assert_eq!(rdy(sub, &[b"RDY"], 10), Ok(Some(1)));
        assert_eq!(rdy(sub, &[b"RDY", b"10"], 10), Ok(Some(10)));
        assert_eq!(
            text(rdy(ClientState::Init, &[b"RDY", b"1"], 10)),
            "E_INVALID cannot RDY in current state"
        );
        assert_eq!(
            text(rdy(sub, &[b"RDY", b"11"], 10)),
            "E_INVALID RDY count 11 out of range 0-10"
        );
        assert_eq!(
            text(rdy(sub, &[b"RDY", b"18446744073709551615"], 10)),
            "E_INVALID RDY count -1 out of range 0-10"
        );
        assert_eq!(
            text(rdy(sub, &[b"RDY", b"a"], 10)),
            "E_INVALID RDY could not parse count a"
        );
    }

    #[test]
    fn names_are_go_quoted() {
        assert_eq!(
            text(sub(ClientState::Init, true, &[b"SUB", b"a\x01", b"c"])),
            "E_BAD_TOPIC SUB topic name \"a\\x01\" is not valid"
        );
        assert_eq!(
            text(publish_params(
                Publish::Mpub,
                &[b"MPUB", b"a b"],
                Duration::ZERO
            )),
            "E_BAD_TOPIC E_BAD_TOPIC MPUB topic name \"a b\" is not valid"
        );
        assert_eq!(
            text(publish_params(
                Publish::Dpub,
                &[b"DPUB", b"t", b"1001"],
                Duration::from_secs(1)
            )),
            "E_INVALID DPUB timeout 1001 out of range 0-1000"
        );
    }

    #[test]
    fn mpub_bodies() {
        let mut body: Vec<u8> = Vec::new();
        body.extend_from_slice(&2i32.to_be_bytes());
        for m in [&b"ab"[..], b"c"] {
            body.extend_from_slice(&(m.len() as i32).to_be_bytes());
            body.extend_from_slice(m);
        }
        assert_eq!(
            read_mpub(&mut &body[..], 1000, 10),
            Ok(vec![b"ab".to_vec(), b"c".to_vec()])
        );
        assert_eq!(
            text(read_mpub(&mut &body[..], 1000, 1)),
            "E_BAD_MESSAGE MPUB message too big 2 > 1"
        );
        assert_eq!(
            text(read_mpub(&mut &body[..body.len() - 1], 1000, 10)),
            "E_BAD_MESSAGE MPUB failed to read message body"
        );
        assert_eq!(
            text(read_mpub(&mut &0i32.to_be_bytes()[..], 1000, 10)),
            "E_BAD_BODY MPUB invalid message count 0"
        );
    }
}
