//! A tiny hand-rolled NSQ client for tests: writes command bytes as given and reads frames.
//! It validates nothing on the way out, so tests can send anything a buggy client might.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

/// One frame read from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawFrame {
    /// Frame type 0.
    Response(Vec<u8>),
    /// Frame type 1, as text (`E_CODE description`).
    Error(String),
    /// Frame type 2.
    Message(RawMessage),
    /// Any other frame type (a server bug).
    Unknown(u32, Vec<u8>),
}

impl RawFrame {
    /// Whether this is the `_heartbeat_` response.
    pub fn is_heartbeat(&self) -> bool {
        matches!(self, RawFrame::Response(b) if b == b"_heartbeat_")
    }
}

/// A message frame's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawMessage {
    /// Nanoseconds since the epoch.
    pub timestamp: i64,
    /// Delivery attempts, 1 on first delivery.
    pub attempts: u16,
    /// The id (16 ASCII hex characters from nsqd).
    pub id: [u8; 16],
    /// The body.
    pub body: Vec<u8>,
}

impl RawMessage {
    /// The id as text.
    pub fn id_str(&self) -> String {
        String::from_utf8_lossy(&self.id).into_owned()
    }
}

/// Read/Write over one object shared by the read and write halves (for TLS streams).
struct Locked<T>(Arc<Mutex<T>>);

impl<T: Read> Read for Locked<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .read(buf)
    }
}

impl<T: Write> Write for Locked<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flush()
    }
}

/// A raw protocol client over TCP, optionally upgraded to TLS / snappy / deflate.
pub struct RawClient {
    tcp: TcpStream,
    r: Box<dyn Read + Send>,
    w: Box<dyn Write + Send>,
}

impl std::fmt::Debug for RawClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawClient")
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

/// Default read timeout of a [`RawClient`].
pub const READ_TIMEOUT: Duration = Duration::from_secs(3);

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl RawClient {
    /// Connects (no magic sent yet). Reads time out after [`READ_TIMEOUT`].
    pub fn connect(addr: SocketAddr) -> io::Result<Self> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(READ_TIMEOUT))?;
        tcp.set_write_timeout(Some(Duration::from_secs(5)))?;
        let r = Box::new(tcp.try_clone()?);
        let w = Box::new(tcp.try_clone()?);
        Ok(Self { tcp, r, w })
    }

    /// Connects and sends the `"  V2"` magic.
    pub fn connect_v2(addr: SocketAddr) -> io::Result<Self> {
        let mut c = Self::connect(addr)?;
        c.send(b"  V2")?;
        Ok(c)
    }

    /// The underlying socket (timeouts, shutdown, local address).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Changes the read timeout.
    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.tcp.set_read_timeout(Some(timeout))
    }

    /// Writes raw bytes (through the current layers) and flushes.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.w.write_all(bytes)?;
        self.w.flush()
    }

    /// Writes `line` + `\n`.
    pub fn cmd(&mut self, line: &str) -> io::Result<()> {
        self.send(format!("{line}\n").as_bytes())
    }

    /// Writes `line` + `\n` + u32 size + body.
    pub fn cmd_body(&mut self, line: &str, body: &[u8]) -> io::Result<()> {
        let mut b = format!("{line}\n").into_bytes();
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(body);
        self.send(&b)
    }

    /// `PUB topic` with `body`, then reads the reply (skipping heartbeats).
    pub fn publish(&mut self, topic: &str, body: &[u8]) -> io::Result<RawFrame> {
        self.cmd_body(&format!("PUB {topic}"), body)?;
        self.read_frame_skip_heartbeats()
    }

    /// The MPUB body for these messages.
    pub fn mpub_body(bodies: &[&[u8]]) -> Vec<u8> {
        let mut b = (bodies.len() as u32).to_be_bytes().to_vec();
        for m in bodies {
            b.extend_from_slice(&(m.len() as u32).to_be_bytes());
            b.extend_from_slice(m);
        }
        b
    }

    /// `MPUB topic`, then reads the reply (skipping heartbeats).
    pub fn mpub(&mut self, topic: &str, bodies: &[&[u8]]) -> io::Result<RawFrame> {
        self.cmd_body(&format!("MPUB {topic}"), &Self::mpub_body(bodies))?;
        self.read_frame_skip_heartbeats()
    }

    /// IDENTIFY with this JSON body; returns the reply frame (upgrades are not performed).
    pub fn identify(&mut self, body: &Value) -> io::Result<RawFrame> {
        self.cmd_body("IDENTIFY", body.to_string().as_bytes())?;
        self.read_frame_skip_heartbeats()
    }

    /// IDENTIFY with `feature_negotiation: true` plus `extra` fields; returns the parsed reply.
    /// Does not perform upgrades: call the `upgrade_*` methods for what was granted.
    pub fn identify_negotiate(&mut self, extra: &Value) -> io::Result<Value> {
        let mut body = serde_json::json!({ "feature_negotiation": true, "client_id": "raw", "hostname": "localhost", "user_agent": "nsq-test-broker-raw/0.1" });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        match self.identify(&body)? {
            RawFrame::Response(b) => {
                serde_json::from_slice(&b).map_err(|e| invalid(format!("IDENTIFY reply: {e}")))
            }
            other => Err(invalid(format!("IDENTIFY failed: {other:?}"))),
        }
    }

    /// `SUB topic channel`, expecting `OK`.
    pub fn subscribe(&mut self, topic: &str, channel: &str) -> io::Result<()> {
        self.cmd(&format!("SUB {topic} {channel}"))?;
        self.expect_ok()
    }

    /// Reads one frame (heartbeats included).
    pub fn read_frame(&mut self) -> io::Result<RawFrame> {
        let mut head = [0u8; 4];
        self.r.read_exact(&mut head)?;
        let size = u32::from_be_bytes(head);
        if !(4..=64 * 1024 * 1024).contains(&size) {
            return Err(invalid(format!("bad frame size {size}")));
        }
        let mut data = vec![0u8; size as usize];
        self.r.read_exact(&mut data)?;
        let kind = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let data = data.split_off(4);
        Ok(match kind {
            0 => RawFrame::Response(data),
            1 => RawFrame::Error(String::from_utf8_lossy(&data).into_owned()),
            2 => {
                if data.len() < 26 {
                    return Err(invalid("short message frame"));
                }
                let mut id = [0u8; 16];
                id.copy_from_slice(&data[10..26]);
                RawFrame::Message(RawMessage {
                    timestamp: i64::from_be_bytes(
                        data[0..8].try_into().map_err(|_| invalid("ts"))?,
                    ),
                    attempts: u16::from_be_bytes([data[8], data[9]]),
                    id,
                    body: data[26..].to_vec(),
                })
            }
            k => RawFrame::Unknown(k, data),
        })
    }

    /// Reads frames until one that is not a heartbeat; answers heartbeats with NOP.
    pub fn read_frame_skip_heartbeats(&mut self) -> io::Result<RawFrame> {
        loop {
            let f = self.read_frame()?;
            if f.is_heartbeat() {
                self.cmd("NOP")?;
                continue;
            }
            return Ok(f);
        }
    }

    /// Expects an `OK` response.
    pub fn expect_ok(&mut self) -> io::Result<()> {
        self.expect_response(b"OK")
    }

    /// Expects this response body.
    pub fn expect_response(&mut self, expected: &[u8]) -> io::Result<()> {
        match self.read_frame_skip_heartbeats()? {
            RawFrame::Response(b) if b == expected => Ok(()),
            other => Err(invalid(format!(
                "expected {:?}, got {other:?}",
                String::from_utf8_lossy(expected)
            ))),
        }
    }

    /// Expects an error frame with this code; returns its full text.
    pub fn expect_error(&mut self, code: &str) -> io::Result<String> {
        match self.read_frame_skip_heartbeats()? {
            RawFrame::Error(e) if e == code || e.starts_with(&format!("{code} ")) => Ok(e),
            other => Err(invalid(format!("expected error {code}, got {other:?}"))),
        }
    }

    /// Expects a message frame.
    pub fn expect_message(&mut self) -> io::Result<RawMessage> {
        match self.read_frame_skip_heartbeats()? {
            RawFrame::Message(m) => Ok(m),
            other => Err(invalid(format!("expected a message, got {other:?}"))),
        }
    }

    /// Expects the server to close the connection (EOF or reset) within the read timeout,
    /// with no frame but heartbeats before that.
    pub fn expect_closed(&mut self) -> io::Result<()> {
        loop {
            match self.read_frame() {
                Ok(f) if f.is_heartbeat() => {}
                Ok(f) => return Err(invalid(format!("expected close, got {f:?}"))),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::UnexpectedEof
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Expects an error with `code` followed by the server closing the connection.
    pub fn expect_fatal(&mut self, code: &str) -> io::Result<String> {
        let e = self.expect_error(code)?;
        self.expect_closed()?;
        Ok(e)
    }

    /// True if no byte arrives on the socket within `d` (and it is not closed).
    pub fn quiet_for(&self, d: Duration) -> io::Result<bool> {
        self.tcp.set_read_timeout(Some(d))?;
        let mut b = [0u8; 1];
        let r = self.tcp.peek(&mut b);
        self.tcp.set_read_timeout(Some(READ_TIMEOUT))?;
        match r {
            Ok(_) => Ok(false),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Performs the client side of the TLS upgrade, then expects `OK` through TLS.
    pub fn upgrade_tls(
        &mut self,
        config: Arc<rustls::ClientConfig>,
        server_name: &str,
    ) -> io::Result<()> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_owned())
            .map_err(|e| invalid(e.to_string()))?;
        let conn =
            rustls::ClientConnection::new(config, name).map_err(|e| invalid(e.to_string()))?;
        let stream = rustls::StreamOwned::new(conn, self.tcp.try_clone()?);
        let shared = Arc::new(Mutex::new(stream));
        self.r = Box::new(Locked(shared.clone()));
        self.w = Box::new(Locked(shared));
        self.expect_ok()
    }

    /// Wraps the stream in snappy framing, then expects `OK` through it.
    pub fn upgrade_snappy(&mut self) -> io::Result<()> {
        let r = std::mem::replace(&mut self.r, Box::new(io::empty()));
        let w = std::mem::replace(&mut self.w, Box::new(io::sink()));
        self.r = Box::new(snap::read::FrameDecoder::new(r));
        self.w = Box::new(snap::write::FrameEncoder::new(w));
        self.expect_ok()
    }

    /// Wraps the stream in raw deflate (sync flush after each write), then expects `OK`.
    pub fn upgrade_deflate(&mut self, level: u32) -> io::Result<()> {
        let r = std::mem::replace(&mut self.r, Box::new(io::empty()));
        let w = std::mem::replace(&mut self.w, Box::new(io::sink()));
        self.r = Box::new(crate::transport::InflateReader::new(r));
        self.w = Box::new(flate2::write::DeflateEncoder::new(
            w,
            flate2::Compression::new(level),
        ));
        self.expect_ok()
    }
}

/// A minimal HTTP/1.1 request (`Connection: close`); returns the status and the body.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    body: &[u8],
) -> io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    s.set_write_timeout(Some(READ_TIMEOUT))?;
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/vnd.nsq; version=1.0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut headers);
    match r.parse(&resp).map_err(|e| invalid(e.to_string()))? {
        httparse::Status::Complete(n) => {
            let chunked = r.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("transfer-encoding")
                    && String::from_utf8_lossy(h.value)
                        .to_ascii_lowercase()
                        .contains("chunked")
            });
            let body = if chunked {
                dechunk(&resp[n..])?
            } else {
                resp[n..].to_vec()
            };
            Ok((r.code.unwrap_or(0), body))
        }
        httparse::Status::Partial => Err(invalid("partial HTTP response")),
    }
}

/// Decodes a `Transfer-Encoding: chunked` body (Go's HTTP server uses it for bodies that do
/// not fit its buffer, e.g. nsqd's `/stats` or a big `/lookup`).
fn dechunk(mut data: &[u8]) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| invalid("truncated chunk size"))?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("bad chunk size {size_text:?}")))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if data.len() < size + 2 || &data[size..size + 2] != b"\r\n" {
            return Err(invalid("truncated chunk"));
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// `GET target`, body parsed as JSON.
pub fn http_get_json(addr: SocketAddr, target: &str) -> io::Result<(u16, Value)> {
    let (status, body) = http_request(addr, "GET", target, b"")?;
    let v = serde_json::from_slice(&body).map_err(|e| invalid(format!("not JSON: {e}")))?;
    Ok((status, v))
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn chunked_bodies_are_decoded() {
        assert_eq!(
            dechunk(b"4\r\nWiki\r\n6;ext=1\r\npedia \r\n0\r\n\r\n").unwrap(),
            b"Wikipedia "
        );
        assert_eq!(dechunk(b"0\r\n\r\n").unwrap(), b"");
        assert!(dechunk(b"5\r\nabc").is_err());
        assert!(dechunk(b"zz\r\n").is_err());
        assert!(dechunk(b"3\r\nabcX\r\n0\r\n\r\n").is_err());
    }
}
