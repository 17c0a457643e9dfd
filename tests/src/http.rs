//! A minimal HTTP/1.x server loop (one request per connection) shared by the lookupd and the
//! nsqd HTTP endpoints.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// Whether the request was HTTP/1.1 (Go then answers big bodies chunked).
    pub(crate) http11: bool,
}

impl Request {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A response: status and JSON (or plain) body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// A JSON body; structs keep their field order, as Go's encoder does.
    pub(crate) fn json(status: u16, value: &impl serde::Serialize) -> Self {
        Self {
            status,
            content_type: "application/json; charset=utf-8",
            body: serde_json::to_vec(value).unwrap_or_default(),
        }
    }

    pub(crate) fn message(status: u16, msg: &str) -> Self {
        Self::json(status, &serde_json::json!({ "message": msg }))
    }

    pub(crate) fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
        }
    }
}

/// Decodes `%XX` and `+` in a query component.
pub(crate) fn url_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn parse_query(q: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        out.push((url_decode(k)?, url_decode(v)?));
    }
    Some(out)
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Reads with short timeouts, retrying until `abort` says to give up.
fn read_some(
    stream: &mut TcpStream,
    tmp: &mut [u8],
    abort: &dyn Fn() -> bool,
) -> io::Result<usize> {
    loop {
        match stream.read(tmp) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if abort() {
                    return Err(e);
                }
            }
            other => return other,
        }
    }
}

fn read_request(stream: &mut TcpStream, abort: &dyn Fn() -> bool) -> io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = read_some(stream, &mut tmp, abort)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let method = req.method.unwrap_or("").to_owned();
                let http11 = req.version == Some(1);
                let target = req.path.unwrap_or("/");
                let (path, query) = target.split_once('?').unwrap_or((target, ""));
                let len = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| {
                        std::str::from_utf8(h.value)
                            .ok()?
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
                    .unwrap_or(0);
                if len > MAX_BODY {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
                }
                let query = parse_query(query)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad query"))?;
                let path = path.to_owned();
                let mut body = buf[head_len..].to_vec();
                while body.len() < len {
                    let n = read_some(stream, &mut tmp, abort)?;
                    if n == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    body.extend_from_slice(&tmp[..n]);
                }
                body.truncate(len);
                return Ok(Some(Request {
                    method,
                    path,
                    query,
                    body,
                    http11,
                }));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
            }
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Request Entity Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Go's `net/http` buffers this much of a handler's output; a bigger body goes out chunked
/// (to HTTP/1.1 requests), as nsqd's `/stats` or a big nsqlookupd `/lookup` do.
const GO_CHUNKING_THRESHOLD: usize = 2048;

fn write_response(stream: &mut TcpStream, resp: &Response, http11: bool) -> io::Result<()> {
    let chunked = http11 && resp.body.len() > GO_CHUNKING_THRESHOLD;
    let length = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {}", resp.body.len())
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{length}\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nConnection: close\r\n\r\n",
        resp.status,
        reason(resp.status),
        resp.content_type,
    );
    stream.write_all(head.as_bytes())?;
    if chunked {
        // Go writes the body in one chunk, then the terminating empty chunk.
        stream.write_all(format!("{:x}\r\n", resp.body.len()).as_bytes())?;
        stream.write_all(&resp.body)?;
        stream.write_all(b"\r\n0\r\n\r\n")?;
    } else {
        stream.write_all(&resp.body)?;
    }
    stream.flush()
}

type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// A running HTTP server: an accept thread plus one short-lived thread per connection.
pub(crate) struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl HttpServer {
    pub(crate) fn start(name: &str, handler: Handler) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let acceptor = {
            let stop = stop.clone();
            let workers = workers.clone();
            std::thread::Builder::new()
                .name(format!("{name}-http-accept"))
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        match listener.accept() {
                            Ok((mut stream, _)) => {
                                let handler = handler.clone();
                                let stop = stop.clone();
                                let spawned = std::thread::Builder::new()
                                    .name("nsq-test-http".into())
                                    .spawn(move || {
                                        serve_one(&mut stream, &handler, &stop);
                                    });
                                let mut w = workers.lock().unwrap_or_else(PoisonError::into_inner);
                                w.retain(|h| !h.is_finished());
                                if let Ok(h) = spawned {
                                    w.push(h);
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                std::thread::sleep(Duration::from_millis(2));
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "http accept failed");
                                std::thread::sleep(Duration::from_millis(2));
                            }
                        }
                    }
                })?
        };
        Ok(Self {
            addr,
            stop,
            acceptor: Some(acceptor),
            workers,
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn serve_one(stream: &mut TcpStream, handler: &Handler, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let started = Instant::now();
    // Short read timeouts so a stop is noticed; give up after 5s of nothing.
    let abort = || stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(5);
    let req = match read_request(stream, &abort) {
        Ok(r) => r,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return;
        }
        Err(_) => {
            let _ = write_response(stream, &Response::message(400, "BAD_REQUEST"), false);
            return;
        }
    };
    if let Some(req) = req {
        let resp = handler(&req);
        let _ = write_response(stream, &resp, req.http11);
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for h in workers {
            let _ = h.join();
        }
    }
}
