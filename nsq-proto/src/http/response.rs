//! One HTTP/1.x response, read sans-IO: [`ResponseParser`] is fed the bytes as they arrive
//! (and told about EOF) and yields the [`Response`]. The head is parsed by `httparse`; the
//! framing around it (`Content-Length`, chunked, read-to-EOF) is here, every size bounded.
//! Both nsqlookupd discovery and the typed HTTP API of nsqd and nsqlookupd read through it.

use std::fmt;

/// The largest response head accepted, in bytes.
pub const MAX_HEAD_SIZE: usize = 16 * 1024;
/// The default cap on a response body, in bytes.
pub const DEFAULT_MAX_BODY_SIZE: usize = 4 * 1024 * 1024;
/// The most headers a response may carry.
const MAX_HEADERS: usize = 64;

/// A complete HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

/// Why an HTTP response could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// The response head exceeds [`MAX_HEAD_SIZE`] bytes.
    HeadTooLarge,
    /// The response head is not valid HTTP/1.x.
    BadHead(String),
    /// The answer does not even start like HTTP: the address is most likely a port of
    /// another service (an nsqd's TCP port, 4150 by default, instead of an HTTP port).
    NotHttp,
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
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::HeadTooLarge => {
                write!(f, "HTTP response head exceeds {MAX_HEAD_SIZE} bytes")
            }
            HttpError::BadHead(e) => write!(f, "malformed HTTP response head: {e}"),
            HttpError::NotHttp => f.write_str(
                "the address answered with something other than HTTP: wrong port? (nsqd's \
                 HTTP port is usually 4151 and nsqlookupd's 4161, not nsqd's TCP port 4150)",
            ),
            HttpError::BodyTooLarge { max } => write!(f, "HTTP response body exceeds {max} bytes"),
            HttpError::BadChunk(why) => write!(f, "malformed chunked body: {why}"),
            HttpError::UnsupportedEncoding(e) => {
                write!(f, "unsupported HTTP response encoding: {e}")
            }
            HttpError::UnexpectedEof => f.write_str("the server closed the connection early"),
            HttpError::AlreadyComplete => f.write_str("bytes after a complete response"),
        }
    }
}

impl std::error::Error for HttpError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(usize),
    Chunked(Chunk),
    ToClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// Reading chunk data; bytes left.
    Data(usize),
    /// Expecting the CRLF after chunk data.
    DataEnd,
    /// Reading trailer lines until an empty one.
    Trailers,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Head,
    Body { status: u16, body: Body },
    Done,
    Failed,
}

/// Incremental parser for one HTTP/1.x response.
///
/// Feed it every byte read with [`feed`](Self::feed) and call [`eof`](Self::eof) when the
/// server closes. Exactly one of them returns `Ok(Some(_))` or `Err(_)`; after that the parser
/// is spent. Memory is bounded by [`MAX_HEAD_SIZE`] plus the body cap.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    buf: Vec<u8>,
    body: Vec<u8>,
    state: State,
    max_body: usize,
    content_type: Option<String>,
}

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser::new(DEFAULT_MAX_BODY_SIZE)
    }
}

enum Step {
    NeedMore,
    Progress,
    Complete,
}

impl ResponseParser {
    /// A parser accepting bodies up to `max_body` bytes.
    pub fn new(max_body: usize) -> ResponseParser {
        ResponseParser {
            buf: Vec::new(),
            body: Vec::new(),
            state: State::Head,
            max_body,
            content_type: None,
        }
    }

    /// True once a result (or error) has been returned.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    /// Feeds response bytes. Returns the parsed reply once the response is complete.
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<Response>, HttpError> {
        if self.is_done() {
            return if data.is_empty() {
                Ok(None)
            } else {
                Err(HttpError::AlreadyComplete)
            };
        }
        self.buf.extend_from_slice(data);
        let result = self.advance();
        if result.is_err() {
            self.fail();
        }
        result
    }

    /// The server closed the stream. Completes a read-to-close body, else reports
    /// [`HttpError::UnexpectedEof`].
    pub fn eof(&mut self) -> Result<Response, HttpError> {
        let result = match self.state {
            State::Body {
                status,
                body: Body::ToClose,
            } => Ok(self.complete(status)),
            State::Done | State::Failed => Err(HttpError::AlreadyComplete),
            _ => Err(HttpError::UnexpectedEof),
        };
        self.fail();
        result
    }

    fn fail(&mut self) {
        self.state = State::Failed;
        self.buf = Vec::new();
        self.body = Vec::new();
    }

    fn complete(&mut self, status: u16) -> Response {
        let body = std::mem::take(&mut self.body);
        self.buf = Vec::new();
        self.state = State::Done;
        Response {
            status,
            content_type: self.content_type.take(),
            body,
        }
    }

    fn advance(&mut self) -> Result<Option<Response>, HttpError> {
        loop {
            let step = match self.state.clone() {
                State::Head => self.parse_head()?,
                State::Body { status, body } => self.parse_body(status, body)?,
                State::Done | State::Failed => return Ok(None),
            };
            match step {
                Step::NeedMore => return Ok(None),
                Step::Progress => {}
                Step::Complete => {
                    let State::Body { status, .. } = self.state else {
                        return Ok(None);
                    };
                    return Ok(Some(self.complete(status)));
                }
            }
        }
    }

    fn parse_head(&mut self) -> Result<Step, HttpError> {
        if !looks_like_http(&self.buf) {
            return Err(HttpError::NotHttp);
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let consumed = match response.parse(&self.buf) {
            Ok(httparse::Status::Partial) => {
                if self.buf.len() > MAX_HEAD_SIZE {
                    return Err(HttpError::HeadTooLarge);
                }
                return Ok(Step::NeedMore);
            }
            Ok(httparse::Status::Complete(n)) => n,
            // Only line breaks so far, or line breaks and less than `HTTP/` (which httparse
            // may already refuse): whether this is HTTP gone wrong or not HTTP at all shows
            // within the first five other bytes. Waiting for them keeps the outcome the same
            // however the bytes are split.
            Err(_) if undecided(&self.buf) => {
                if self.buf.len() > MAX_HEAD_SIZE {
                    return Err(HttpError::HeadTooLarge);
                }
                return Ok(Step::NeedMore);
            }
            Err(_) if !looks_like_http(&self.buf) => return Err(HttpError::NotHttp),
            Err(e) => return Err(HttpError::BadHead(e.to_string())),
        };
        if consumed > MAX_HEAD_SIZE {
            return Err(HttpError::HeadTooLarge);
        }
        let status = response.code.unwrap_or(0);
        if (100..200).contains(&status) {
            if status == 101 {
                return Err(HttpError::BadHead(
                    "unexpected 101 Switching Protocols".into(),
                ));
            }
            // Interim response: skip it and parse the real one.
            self.buf.drain(..consumed);
            return Ok(Step::Progress);
        }
        let mut length: Option<usize> = None;
        let mut chunked = false;
        for h in response.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let text = std::str::from_utf8(h.value)
                    .map_err(|_| HttpError::BadHead("non-ASCII Content-Length".into()))?
                    .trim();
                if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(HttpError::BadHead(format!(
                        "invalid Content-Length {text:?}"
                    )));
                }
                let n = text.parse::<usize>().unwrap_or(usize::MAX);
                if length.is_some_and(|l| l != n) {
                    return Err(HttpError::UnsupportedEncoding(
                        "conflicting Content-Length headers".into(),
                    ));
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("content-type") {
                self.content_type = Some(String::from_utf8_lossy(h.value).trim().to_owned());
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                let value = String::from_utf8_lossy(h.value);
                for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                    if coding.eq_ignore_ascii_case("chunked") && !chunked {
                        chunked = true;
                    } else if !coding.eq_ignore_ascii_case("identity") {
                        return Err(HttpError::UnsupportedEncoding(coding.to_string()));
                    }
                }
            }
        }
        let body = if status == 204 || status == 304 {
            Body::Length(0)
        } else if chunked {
            // RFC 9112: Transfer-Encoding overrides Content-Length.
            Body::Chunked(Chunk::Size)
        } else if let Some(n) = length {
            if n > self.max_body {
                return Err(HttpError::BodyTooLarge { max: self.max_body });
            }
            Body::Length(n)
        } else {
            Body::ToClose
        };
        self.buf.drain(..consumed);
        self.state = State::Body { status, body };
        Ok(Step::Progress)
    }

    fn take_body(&mut self, n: usize) -> Result<(), HttpError> {
        if self.body.len() + n > self.max_body {
            return Err(HttpError::BodyTooLarge { max: self.max_body });
        }
        self.body.extend(self.buf.drain(..n));
        Ok(())
    }

    fn parse_body(&mut self, status: u16, body: Body) -> Result<Step, HttpError> {
        match body {
            Body::Length(n) => {
                let missing = n - self.body.len();
                let take = missing.min(self.buf.len());
                self.take_body(take)?;
                if self.body.len() == n {
                    Ok(Step::Complete)
                } else {
                    Ok(Step::NeedMore)
                }
            }
            Body::ToClose => {
                let take = self.buf.len();
                self.take_body(take)?;
                Ok(Step::NeedMore)
            }
            Body::Chunked(chunk) => {
                let next = match chunk {
                    Chunk::Size => {
                        let Some(line) = self.take_line()? else {
                            return Ok(Step::NeedMore);
                        };
                        let size = line.split(|&b| b == b';').next().unwrap_or(&[]);
                        let size = std::str::from_utf8(size)
                            .map_err(|_| HttpError::BadChunk("non-ASCII chunk size"))?
                            .trim();
                        if size.is_empty() || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return Err(HttpError::BadChunk("invalid chunk size"));
                        }
                        let n = usize::from_str_radix(size, 16)
                            .map_err(|_| HttpError::BodyTooLarge { max: self.max_body })?;
                        if n > self.max_body - self.body.len() {
                            return Err(HttpError::BodyTooLarge { max: self.max_body });
                        }
                        if n == 0 {
                            Chunk::Trailers
                        } else {
                            Chunk::Data(n)
                        }
                    }
                    Chunk::Data(left) => {
                        if self.buf.is_empty() {
                            return Ok(Step::NeedMore);
                        }
                        let take = left.min(self.buf.len());
                        self.take_body(take)?;
                        if take == left {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(left - take)
                        }
                    }
                    Chunk::DataEnd => match self.buf.as_slice() {
                        [] | [b'\r'] => return Ok(Step::NeedMore),
                        [b'\r', b'\n', ..] => {
                            self.buf.drain(..2);
                            Chunk::Size
                        }
                        [b'\n', ..] => {
                            self.buf.drain(..1);
                            Chunk::Size
                        }
                        _ => {
                            return Err(HttpError::BadChunk("missing CRLF after chunk data"));
                        }
                    },
                    Chunk::Trailers => {
                        let Some(line) = self.take_line()? else {
                            return Ok(Step::NeedMore);
                        };
                        if line.is_empty() {
                            return Ok(Step::Complete);
                        }
                        Chunk::Trailers
                    }
                };
                self.state = State::Body {
                    status,
                    body: Body::Chunked(next),
                };
                Ok(Step::Progress)
            }
        }
    }

    /// Splits one CRLF- (or LF-) terminated line off the buffer, without its terminator.
    fn take_line(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        let Some(pos) = self.buf.iter().position(|&b| b == b'\n') else {
            if self.buf.len() > MAX_HEAD_SIZE {
                return Err(HttpError::BadChunk("line too long"));
            }
            return Ok(None);
        };
        if pos > MAX_HEAD_SIZE {
            return Err(HttpError::BadChunk("line too long"));
        }
        let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(Some(line))
    }
}

/// Whether `buf` starts like an HTTP/1.x status line (as far as it goes). Leading blank lines
/// are tolerated, as by httparse.
/// Too few bytes after the leading line breaks to tell whether they start `HTTP/`.
fn undecided(buf: &[u8]) -> bool {
    buf.iter()
        .skip_while(|&&b| b == b'\r' || b == b'\n')
        .nth(4)
        .is_none()
}

fn looks_like_http(buf: &[u8]) -> bool {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let n = rest.len().min(5);
    rest[..n] == b"HTTP/"[..n]
}
