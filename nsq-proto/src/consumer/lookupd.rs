//! The HTTP/1.1 exchange with nsqlookupd, sans-IO.
//!
//! [`LookupdAddress`] turns a configured address into the request bytes of a `/lookup` query;
//! [`LookupdResponseParser`] is fed the response bytes as they arrive (and told about EOF) and
//! yields the parsed [`LookupResponse`]. The driver only opens the TCP stream and moves bytes.
//!
//! Why not an HTTP client crate: every one of them owns the socket and a runtime (hyper,
//! reqwest, ureq), which a sans-IO core cannot, and each adapter would then pull in a
//! different one. The exchange needed is one `GET` with a bounded response: the head is parsed
//! by `httparse` (the parser hyper uses), and only the framing around it (`Content-Length`,
//! chunked, read-to-EOF, every size bounded) is here, so the three adapters share one
//! implementation and the fuzzers reach it.
//!
//! ```
//! use nsq_proto::Topic;
//! use nsq_proto::consumer::{LookupdAddress, LookupdResponseParser};
//!
//! let addr = LookupdAddress::parse("http://127.0.0.1:4161")?;
//! let request = addr.request(&Topic::new("events#ephemeral")?);
//! assert!(request.starts_with(b"GET /lookup?topic=events%23ephemeral HTTP/1.1\r\n"));
//!
//! let mut parser = LookupdResponseParser::default();
//! let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n{\"channels\":[],\"producers\":[]}";
//! let done = parser.feed(&reply[..20])?;
//! assert!(done.is_none());
//! let done = parser.feed(&reply[20..])?.expect("complete");
//! assert!(done.producers.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::http::{HttpError, Response, ResponseParser};
use crate::identify::ReplyError;
use crate::lookup::LookupResponse;
use crate::names::Topic;
use std::fmt;

pub use crate::http::{DEFAULT_MAX_BODY_SIZE, MAX_HEAD_SIZE};

/// Why a lookupd address was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupdAddressError {
    /// The address is empty.
    Empty,
    /// A scheme other than `http` (for example `https`, which this client does not speak to
    /// nsqlookupd).
    UnsupportedScheme(String),
    /// No host, or a host containing characters that cannot appear in one.
    InvalidHost(String),
    /// `host:port` without a valid port (0 is not valid either).
    InvalidPort(String),
}

impl fmt::Display for LookupdAddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupdAddressError::Empty => f.write_str("lookupd address is empty"),
            LookupdAddressError::UnsupportedScheme(s) => write!(
                f,
                "unsupported lookupd URL scheme {s:?}: use host:port or http://host:port[/path]"
            ),
            LookupdAddressError::InvalidHost(h) => write!(f, "invalid lookupd host {h:?}"),
            LookupdAddressError::InvalidPort(p) => write!(f, "invalid lookupd port {p:?}"),
        }
    }
}

impl std::error::Error for LookupdAddressError {}

/// A parsed nsqlookupd HTTP address: `host:port` or `http://host[:port][/path]`.
///
/// Without a path (or with `/`) queries go to `/lookup`, as go-nsq does; a given path is used
/// as the lookup endpoint itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LookupdAddress {
    /// `host:port` as the driver should connect to it and as the Host header carries it.
    authority: String,
    /// The request path, `/lookup` unless given.
    path: String,
}

impl LookupdAddress {
    /// Parses a configured lookupd address.
    pub fn parse(input: &str) -> Result<LookupdAddress, LookupdAddressError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(LookupdAddressError::Empty);
        }
        let (rest, scheme_given) = match input.find("://") {
            Some(i) => {
                let scheme = &input[..i];
                if !scheme.eq_ignore_ascii_case("http") {
                    return Err(LookupdAddressError::UnsupportedScheme(scheme.to_string()));
                }
                (&input[i + 3..], true)
            }
            None => (input, false),
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        // Query strings and fragments on the configured address are dropped: we build our own.
        let path = path.split(['?', '#']).next().unwrap_or("");
        let path = if path.is_empty() || path == "/" {
            "/lookup".to_string()
        } else {
            path.to_string()
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(LookupdAddressError::InvalidHost(input.to_string()));
        }
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            Some(p) => p,
            None if scheme_given => 80,
            None => return Err(LookupdAddressError::InvalidPort(authority.to_string())),
        };
        Ok(LookupdAddress {
            authority: crate::addr::join_host_port(host, port),
            path,
        })
    }

    /// `host:port` to open a TCP connection to (IPv6 literals bracketed).
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path queried, `/lookup` by default.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The complete HTTP/1.1 request for the producers of `topic`.
    pub fn request(&self, topic: &Topic) -> Vec<u8> {
        crate::http::lookupd::lookup_at(&self.path, topic).encode(&self.authority)
    }
}

impl fmt::Display for LookupdAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), LookupdAddressError> {
    let invalid_host = || LookupdAddressError::InvalidHost(authority.to_string());
    if authority.contains('@') {
        return Err(invalid_host());
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']').ok_or_else(invalid_host)?;
        let host = &rest[..end];
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(invalid_host()),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => {
                if h.contains(':') {
                    // A bare IPv6 literal needs brackets to carry a port.
                    return Err(invalid_host());
                }
                (h, Some(p))
            }
            None => (authority, None),
        }
    };
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'%'))
    {
        return Err(invalid_host());
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(LookupdAddressError::InvalidPort(p.to_string())),
        },
    };
    Ok((host, port))
}

/// Whether a 404's body is the router's `{"message":"NOT_FOUND"}`: no such path, so the server
/// is not an nsqlookupd (which answers `/lookup` for any topic, `TOPIC_NOT_FOUND` when it has
/// none).
fn is_not_found(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        message: &'a str,
    }
    serde_json::from_slice::<Message<'_>>(body).is_ok_and(|m| m.message == "NOT_FOUND")
}

/// Why a lookupd response could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupdError {
    /// The response head exceeds [`MAX_HEAD_SIZE`] bytes.
    HeadTooLarge,
    /// The response head is not valid HTTP/1.x.
    BadHead(String),
    /// The answer does not even start like HTTP: the address is most likely a port of
    /// another service (nsqd's TCP port 4150 instead of nsqlookupd's HTTP port 4161).
    NotHttp,
    /// The server speaks HTTP but has no `/lookup` (`404 NOT_FOUND`): it is not an
    /// nsqlookupd. nsqd's HTTP port (4151 by default) answers like this.
    NotLookupd,
    /// The body exceeds the configured cap.
    BodyTooLarge {
        /// The cap, in bytes.
        max: usize,
    },
    /// A malformed chunk in a chunked body.
    BadChunk(&'static str),
    /// A `Transfer-Encoding` other than `chunked`, or conflicting length headers.
    UnsupportedEncoding(String),
    /// The stream ended before the response was complete.
    UnexpectedEof,
    /// More bytes were fed after the response was already complete.
    AlreadyComplete,
    /// The body is not a valid `/lookup` reply (or an HTTP error other than
    /// `404 TOPIC_NOT_FOUND`).
    Reply(ReplyError),
    /// The driver could not reach the lookupd or the exchange failed at the transport level.
    Transport(String),
    /// The lookupd did not answer within the configured timeout.
    Timeout,
}

impl fmt::Display for LookupdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupdError::HeadTooLarge => {
                write!(f, "lookupd response head exceeds {MAX_HEAD_SIZE} bytes")
            }
            LookupdError::BadHead(e) => write!(f, "malformed lookupd response head: {e}"),
            LookupdError::NotHttp => f.write_str(
                "the lookupd address answered with something other than HTTP: \
                 wrong port? (nsqlookupd's HTTP port is usually 4161, not nsqd's TCP port 4150)",
            ),
            LookupdError::NotLookupd => f.write_str(
                "the lookupd address has no /lookup (HTTP 404 NOT_FOUND): it is not an \
                 nsqlookupd; nsqd's HTTP port (4151 by default) answers like this, a lookupd's \
                 HTTP port is 4161 by default",
            ),
            LookupdError::BodyTooLarge { max } => {
                write!(f, "lookupd response body exceeds {max} bytes")
            }
            LookupdError::BadChunk(why) => write!(f, "malformed chunked body: {why}"),
            LookupdError::UnsupportedEncoding(e) => {
                write!(f, "unsupported lookupd response encoding: {e}")
            }
            LookupdError::UnexpectedEof => f.write_str("lookupd closed the connection early"),
            LookupdError::AlreadyComplete => f.write_str("bytes after a complete response"),
            LookupdError::Reply(e) => write!(f, "{e}"),
            LookupdError::Transport(e) => write!(f, "lookupd unreachable: {e}"),
            LookupdError::Timeout => f.write_str("lookupd did not answer in time"),
        }
    }
}

/// The inner errors are shown by `Display`, so none is returned as a source.
impl std::error::Error for LookupdError {}

impl LookupdError {
    /// Whether the address is not an nsqlookupd's HTTP port at all ([`NotHttp`](Self::NotHttp),
    /// [`NotLookupd`](Self::NotLookupd)): asking again does not help, so a consumer stops
    /// polling it.
    pub fn is_misconfiguration(&self) -> bool {
        matches!(self, LookupdError::NotHttp | LookupdError::NotLookupd)
    }
}

/// Incremental parser for one `/lookup` HTTP response: the shared HTTP exchange machine
/// ([`ResponseParser`]) and the `/lookup` reply read from its body.
///
/// Feed it every byte read with [`feed`](Self::feed) and call [`eof`](Self::eof) when the
/// server closes. Exactly one of them returns `Ok(Some(_))` or `Err(_)`; after that the parser
/// is spent. Memory is bounded by [`MAX_HEAD_SIZE`] plus the body cap.
#[derive(Debug, Clone, Default)]
pub struct LookupdResponseParser {
    http: ResponseParser,
}

impl From<HttpError> for LookupdError {
    fn from(e: HttpError) -> LookupdError {
        match e {
            HttpError::HeadTooLarge => LookupdError::HeadTooLarge,
            HttpError::BadHead(e) => LookupdError::BadHead(e),
            HttpError::NotHttp => LookupdError::NotHttp,
            HttpError::BodyTooLarge { max } => LookupdError::BodyTooLarge { max },
            HttpError::BadChunk(why) => LookupdError::BadChunk(why),
            HttpError::UnsupportedEncoding(e) => LookupdError::UnsupportedEncoding(e),
            HttpError::UnexpectedEof => LookupdError::UnexpectedEof,
            HttpError::AlreadyComplete => LookupdError::AlreadyComplete,
        }
    }
}

impl LookupdResponseParser {
    /// A parser accepting bodies up to `max_body` bytes.
    pub fn new(max_body: usize) -> LookupdResponseParser {
        LookupdResponseParser {
            http: ResponseParser::new(max_body),
        }
    }

    /// True once a result (or error) has been returned.
    pub fn is_done(&self) -> bool {
        self.http.is_done()
    }

    /// Feeds response bytes. Returns the parsed reply once the response is complete.
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<LookupResponse>, LookupdError> {
        match self.http.feed(data)? {
            Some(response) => reply(&response).map(Some),
            None => Ok(None),
        }
    }

    /// The server closed the stream. Completes a read-to-close body, else reports
    /// [`LookupdError::UnexpectedEof`].
    pub fn eof(&mut self) -> Result<LookupResponse, LookupdError> {
        reply(&self.http.eof()?)
    }
}

/// The `/lookup` reply in `response`; nsqd's HTTP port (`404 NOT_FOUND`: no such route) is
/// named as such.
fn reply(response: &Response) -> Result<LookupResponse, LookupdError> {
    if response.status == 404 && is_not_found(&response.body) {
        return Err(LookupdError::NotLookupd);
    }
    LookupResponse::parse(response.status, &response.body).map_err(LookupdError::Reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"channels":["c"],"producers":[{"broadcast_address":"10.0.0.1","hostname":"h","remote_address":"x","tcp_port":4150,"http_port":4151,"version":"1.3.0"}]}"#;

    fn topic(s: &str) -> Topic {
        Topic::new(s).unwrap()
    }

    #[test]
    fn addresses() {
        let a = LookupdAddress::parse("127.0.0.1:4161").unwrap();
        assert_eq!(a.authority(), "127.0.0.1:4161");
        assert_eq!(a.path(), "/lookup");
        let a = LookupdAddress::parse("http://lookupd.local:4161/").unwrap();
        assert_eq!(a.authority(), "lookupd.local:4161");
        assert_eq!(a.path(), "/lookup");
        let a = LookupdAddress::parse("HTTP://h:1/prefix/lookup?x=1").unwrap();
        assert_eq!(a.path(), "/prefix/lookup");
        assert_eq!(a.to_string(), "http://h:1/prefix/lookup");
        let a = LookupdAddress::parse("http://h").unwrap();
        assert_eq!(a.authority(), "h:80");
        let a = LookupdAddress::parse("[::1]:4161").unwrap();
        assert_eq!(a.authority(), "[::1]:4161");
        let a = LookupdAddress::parse("http://[::1]").unwrap();
        assert_eq!(a.authority(), "[::1]:80");

        assert_eq!(
            LookupdAddress::parse("https://h:4161"),
            Err(LookupdAddressError::UnsupportedScheme("https".into()))
        );
        assert_eq!(LookupdAddress::parse("  "), Err(LookupdAddressError::Empty));
        assert!(matches!(
            LookupdAddress::parse("h"),
            Err(LookupdAddressError::InvalidPort(_))
        ));
        assert!(matches!(
            LookupdAddress::parse("h:0"),
            Err(LookupdAddressError::InvalidPort(_))
        ));
        assert!(matches!(
            LookupdAddress::parse("h:+80"),
            Err(LookupdAddressError::InvalidPort(_))
        ));
        assert!(matches!(
            LookupdAddress::parse("::1:4161"),
            Err(LookupdAddressError::InvalidHost(_))
        ));
        assert!(matches!(
            LookupdAddress::parse("user@h:1"),
            Err(LookupdAddressError::InvalidHost(_))
        ));
        assert!(matches!(
            LookupdAddress::parse(":4161"),
            Err(LookupdAddressError::InvalidHost(_))
        ));
        assert!(matches!(
            LookupdAddress::parse("h o:1"),
            Err(LookupdAddressError::InvalidHost(_))
        ));
    }

    #[test]
    fn request_bytes() {
        let a = LookupdAddress::parse("127.0.0.1:4161").unwrap();
        let req = a.request(&topic("a.b_c-d#ephemeral"));
        let expected = format!(
            "GET /lookup?topic=a.b_c-d%23ephemeral HTTP/1.1\r\nHost: 127.0.0.1:4161\r\nAccept: application/vnd.nsq; version=1.0\r\nUser-Agent: nsq-rs/{}\r\nConnection: close\r\n\r\n",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(String::from_utf8(req).unwrap(), expected);
    }

    fn parse_all(chunks: &[&[u8]], eof: bool) -> Result<LookupResponse, LookupdError> {
        let mut p = LookupdResponseParser::default();
        for c in chunks {
            if let Some(r) = p.feed(c)? {
                return Ok(r);
            }
        }
        if eof {
            p.eof()
        } else {
            Err(LookupdError::UnexpectedEof)
        }
    }

    #[test]
    fn content_length_byte_by_byte() {
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        let bytes: Vec<&[u8]> = resp.as_bytes().chunks(1).collect();
        let r = parse_all(&bytes, false).unwrap();
        assert_eq!(r.producers[0].tcp_address(), "10.0.0.1:4150");
    }

    #[test]
    fn chunked_body() {
        let (a, b) = BODY.split_at(40);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x};ext=1\r\n{a}\r\n{:X}\r\n{b}\r\n0\r\nX-Trailer: y\r\n\r\n",
            a.len(),
            b.len()
        );
        for split in [1, 3, 7, resp.len()] {
            let bytes: Vec<&[u8]> = resp.as_bytes().chunks(split).collect();
            let r = parse_all(&bytes, false).unwrap();
            assert_eq!(r.channels, vec!["c".to_string()]);
        }
    }

    #[test]
    fn read_to_close() {
        let resp = format!("HTTP/1.0 200 OK\r\n\r\n{BODY}");
        let r = parse_all(&[resp.as_bytes()], true).unwrap();
        assert_eq!(r.producers.len(), 1);
    }

    #[test]
    fn interim_response_skipped() {
        let resp = format!(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{BODY}",
            BODY.len()
        );
        assert!(parse_all(&[resp.as_bytes()], false).is_ok());
    }

    #[test]
    fn not_found_is_empty() {
        let body = r#"{"message":"TOPIC_NOT_FOUND"}"#;
        let resp = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let r = parse_all(&[resp.as_bytes()], false).unwrap();
        assert!(r.producers.is_empty());
    }

    #[test]
    fn errors() {
        let err = |chunks: &[&[u8]], eof| parse_all(chunks, eof).unwrap_err();
        assert!(matches!(
            err(
                &[b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\n{}"],
                false
            ),
            LookupdError::Reply(_)
        ));
        assert!(matches!(
            err(&[b"NOT HTTP\r\n\r\n"], false),
            LookupdError::NotHttp
        ));
        // nsqd's TCP port answers an HTTP request with an E_BAD_PROTOCOL frame.
        let nsqd = err(&[b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"], true);
        assert!(matches!(nsqd, LookupdError::NotHttp));
        assert!(nsqd.to_string().contains("wrong port?"), "{nsqd}");
        assert!(matches!(
            err(&[b"HTTP/1.1 2x0 OK\r\n\r\n"], false),
            LookupdError::BadHead(_)
        ));
        assert!(matches!(
            err(&[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"], true),
            LookupdError::UnexpectedEof
        ));
        assert!(matches!(
            err(
                &[b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n"],
                false
            ),
            LookupdError::BodyTooLarge { .. }
        ));
        assert!(matches!(
            err(
                &[b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"],
                false
            ),
            LookupdError::UnsupportedEncoding(_)
        ));
        assert!(matches!(
            err(&[b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"], false),
            LookupdError::BadHead(_)
        ));
        assert!(matches!(
            err(
                &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"],
                false
            ),
            LookupdError::UnsupportedEncoding(_)
        ));
        assert!(matches!(
            err(
                &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"],
                false
            ),
            LookupdError::BadChunk(_)
        ));
        assert!(matches!(
            err(
                &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX"],
                false
            ),
            LookupdError::BadChunk(_)
        ));
        assert!(matches!(
            err(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n"], false),
            LookupdError::BodyTooLarge { .. }
        ));
        let huge_head = vec![b'a'; MAX_HEAD_SIZE + 10];
        assert!(matches!(
            err(&[b"HTTP/1.1 200 OK\r\nX: ", &huge_head], false),
            LookupdError::HeadTooLarge
        ));
    }

    #[test]
    fn body_cap_for_chunked_and_close() {
        let mut p = LookupdResponseParser::new(10);
        assert_eq!(
            p.feed(b"HTTP/1.1 200 OK\r\n\r\n01234567890"),
            Err(LookupdError::BodyTooLarge { max: 10 })
        );
        assert!(p.is_done());
        assert_eq!(p.feed(b"x"), Err(LookupdError::AlreadyComplete));
        let mut p = LookupdResponseParser::new(10);
        assert_eq!(
            p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n6\r\n"),
            Err(LookupdError::BodyTooLarge { max: 10 })
        );
    }

    #[test]
    fn bytes_after_complete() {
        let mut p = LookupdResponseParser::default();
        let r = p
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        assert!(r.is_some());
        assert_eq!(p.feed(b""), Ok(None));
        assert_eq!(p.feed(b"x"), Err(LookupdError::AlreadyComplete));
    }
}
