//! Raw HTTP, as the fixtures were captured: one request per connection with the capture
//! client's headers, and the reply as it came (status line, headers in order, chunking).

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::WAIT;

/// A raw HTTP response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) reason: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) chunked: bool,
}

impl Reply {
    pub(crate) fn parse(raw: &[u8]) -> Self {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(n) = r.parse(raw).expect("an HTTP response") else {
            panic!("partial HTTP response: {}", String::from_utf8_lossy(raw));
        };
        let headers: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        let body = if chunked {
            dechunk(&raw[n..])
        } else {
            raw[n..].to_vec()
        };
        Self {
            status: r.code.unwrap_or(0),
            reason: r.reason.unwrap_or("").to_owned(),
            headers,
            body,
            chunked,
        }
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&data[..end]).unwrap().trim(), 16)
            .expect("hex chunk size");
        data = &data[end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Reads until EOF (or a reset, which only ends the reading).
pub(crate) fn read_all(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

/// One request per connection, with the capture client's headers.
pub(crate) fn send(addr: SocketAddr, method: &str, target: &str, body: &[u8]) -> Reply {
    let mut s = TcpStream::connect_timeout(&addr, WAIT).expect("connect");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: nsq-proto-fixture-capture/1.0\r\nAccept: */*\r\n"
    );
    if method == "POST" || method == "PUT" {
        let _ = write!(head, "Content-Length: {}\r\n", body.len());
    }
    head.push_str("Connection: close\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    Reply::parse(&read_all(&mut s).expect("a response"))
}
