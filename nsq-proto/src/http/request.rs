//! [`Request`]: one HTTP request to nsqd's or nsqlookupd's API, encoded for a fresh
//! connection.

use std::fmt;

/// The HTTP methods of the NSQ APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Method {
    /// `GET`: reads.
    Get,
    /// `POST`: publishes and admin actions.
    Post,
    /// `PUT`: nsqd's `/config/:opt` changes.
    Put,
}

impl Method {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One request: a method, a target (path and query, percent-encoded) and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    method: Method,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    /// A request for `path` with `query` (each value percent-encoded) and no body.
    pub fn new(method: Method, path: &str, query: &[(&str, &str)]) -> Request {
        let mut target = String::with_capacity(path.len() + 16 * query.len());
        target.push_str(path);
        for (i, (key, value)) in query.iter().enumerate() {
            target.push(if i == 0 { '?' } else { '&' });
            percent_encode(&mut target, key);
            target.push('=');
            percent_encode(&mut target, value);
        }
        Request {
            method,
            target,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The same request with `body`.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// The same request with one more header (an `Authorization` for a proxy in front of
    /// nsqd, say). A name or value holding a line break is refused: it would split the
    /// request.
    pub fn with_header(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Request, InvalidHeader> {
        let (name, value) = (name.into(), value.into());
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            return Err(InvalidHeader(name));
        }
        if value.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
            return Err(InvalidHeader(name));
        }
        self.headers.push((name, value));
        Ok(self)
    }

    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The path and query, as written on the request line.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The request's bytes for the server at `host` (`host:port`, the `Host` header), on a
    /// connection of its own (`Connection: close`): the server answers, then closes.
    pub fn encode(&self, host: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(192 + self.target.len() + host.len() + self.body.len());
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(
            b"\r\nAccept: application/vnd.nsq; version=1.0\r\nUser-Agent: nsq-rs/",
        );
        out.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
        for (name, value) in &self.headers {
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
        }
        if self.method != Method::Get || !self.body.is_empty() {
            out.extend_from_slice(b"\r\nContent-Length: ");
            out.extend_from_slice(self.body.len().to_string().as_bytes());
        }
        out.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// A header refused by [`Request::with_header`]: its name is not an HTTP token, or its value
/// holds a line break.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidHeader(pub String);

impl fmt::Display for InvalidHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid HTTP header {:?} (a token name, a value without line breaks)",
            self.0
        )
    }
}

impl std::error::Error for InvalidHeader {}

/// Percent-encodes a query key or value: everything but RFC 3986 unreserved characters (so
/// `#` becomes `%23`).
pub(crate) fn percent_encode(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_with_query_and_body() {
        let r = Request::new(
            Method::Post,
            "/pub",
            &[("topic", "t#ephemeral"), ("defer", "5")],
        )
        .with_body("hi");
        assert_eq!(r.target(), "/pub?topic=t%23ephemeral&defer=5");
        let bytes = String::from_utf8(r.encode("127.0.0.1:4151")).unwrap();
        assert!(bytes.starts_with(
            "POST /pub?topic=t%23ephemeral&defer=5 HTTP/1.1\r\nHost: 127.0.0.1:4151\r\n"
        ));
        assert!(bytes.contains("\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"));
        let get = String::from_utf8(Request::new(Method::Get, "/ping", &[]).encode("h:1")).unwrap();
        assert!(get.starts_with("GET /ping HTTP/1.1\r\n"));
        assert!(!get.contains("Content-Length"));
        let auth = Request::new(Method::Get, "/stats", &[])
            .with_header("Authorization", "Basic dTpw")
            .unwrap();
        let text = String::from_utf8(auth.encode("h:1")).unwrap();
        assert!(text.contains("\r\nAuthorization: Basic dTpw\r\n"), "{text}");
        assert!(
            Request::new(Method::Get, "/", &[])
                .with_header("X", "a\r\nEvil: 1")
                .is_err()
        );
        assert!(
            Request::new(Method::Get, "/", &[])
                .with_header("Bad Name", "v")
                .is_err()
        );
    }
}
