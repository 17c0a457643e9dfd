//! A minimal HTTP/1.x server loop (one request per connection) shared by the lookupd and the
//! nsqd HTTP endpoints, answering like Go's `net/http` behind nsq's `httprouter` and
//! `http_api` decorators do: the same routing (405 with `Allow`, `OPTIONS`, trailing-slash and
//! case redirects), the same headers in the same order, big bodies chunked.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// The path, percent-decoded (Go's `URL.Path`, which routing uses).
    pub(crate) path: String,
    /// The query as sent (Go's `URL.RawQuery`).
    pub(crate) raw_query: String,
    pub(crate) body: Vec<u8>,
    /// The `Content-Length` header (Go's `ContentLength`; `None` when absent).
    pub(crate) content_length: Option<u64>,
    /// Whether the request was HTTP/1.1 (Go then answers big bodies chunked).
    pub(crate) http11: bool,
    /// The route's `:name` parameters, once routed.
    pub(crate) params: Vec<(String, String)>,
}

/// Go's `url.Values` from `url.ParseQuery`: every key's values in order.
#[derive(Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// `Values[key][0]`, like nsq's `ReqParams.Get`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every `(key, value)` pair in order.
    pub(crate) fn pairs(&self) -> &[(String, String)] {
        &self.0
    }
}

impl Request {
    /// Go's `url.ParseQuery(RawQuery)`: `Err` (nsq answers `INVALID_REQUEST`) when any part is
    /// malformed (a bad `%` escape, a `;` in a key), with the pairs that did parse.
    pub(crate) fn query(&self) -> Result<Query, Query> {
        parse_query(&self.raw_query)
    }

    /// The query pairs that parse, ignoring malformed parts.
    pub(crate) fn lenient_query(&self) -> Query {
        self.query().unwrap_or_else(|q| q)
    }

    /// A route parameter (`:opt` in `/config/:opt`).
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A response, with the headers a handler sets (Go writes them sorted by name, then its own).
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// Handler headers, canonical names; written in Go's (sorted) order.
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

const JSON: &str = "application/json; charset=utf-8";
const NSQ_V1: &str = "nsq; version=1.0";

impl Response {
    /// nsq's `RespondV1` with a value to marshal: JSON, with both content type headers.
    pub(crate) fn v1_json(status: u16, value: &impl serde::Serialize) -> Self {
        Self::v1_raw_json(status, serde_json::to_vec(value).unwrap_or_default())
    }

    /// `RespondV1` with JSON already encoded.
    pub(crate) fn v1_raw_json(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            headers: vec![
                ("Content-Type", JSON.to_owned()),
                ("X-Nsq-Content-Type", NSQ_V1.to_owned()),
            ],
            body,
        }
    }

    /// `RespondV1` of an error: `{"message":"..."}`.
    pub(crate) fn v1_err(status: u16, msg: &str) -> Self {
        Self::v1_json(status, &serde_json::json!({ "message": msg }))
    }

    /// `RespondV1(200, string)`: the text as is, with no `Content-Type` of its own (Go sniffs
    /// one when the body is not empty).
    pub(crate) fn v1_text(body: impl Into<Vec<u8>>) -> Self {
        Self {
            status: 200,
            headers: vec![("X-Nsq-Content-Type", NSQ_V1.to_owned())],
            body: body.into(),
        }
    }

    /// `RespondV1(200, nil)`: an empty body.
    pub(crate) fn v1_empty() -> Self {
        Self::v1_text(Vec::new())
    }

    /// nsq's `PlainText` decorator: the text, no header of its own.
    pub(crate) fn plain(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }
}

/// Decodes `%XX` (and `+` as a space when `plus` is set, as in a query); `None` on a bad
/// escape, as Go's `url.QueryUnescape` / `PathUnescape` fail.
pub(crate) fn url_decode(s: &str, plus: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Go strings hold any bytes; names with invalid UTF-8 are refused later anyway.
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `url.ParseQuery`: `&`-separated, a `;` in a part or a bad escape is an error (the
/// part is skipped and parsing goes on).
fn parse_query(q: &str) -> Result<Query, Query> {
    let mut out = Vec::new();
    let mut failed = false;
    for part in q.split('&') {
        if part.contains(';') {
            failed = true;
            continue;
        }
        if part.is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        match (url_decode(k, true), url_decode(v, true)) {
            (Some(k), Some(v)) => out.push((k, v)),
            _ => failed = true,
        }
    }
    if failed {
        Err(Query(out))
    } else {
        Ok(Query(out))
    }
}

const MAX_HEAD: usize = 64 * 1024;
/// Bodies larger than this are not read (handlers see `content_length` and an empty body;
/// nsqd's size checks answer before reading them anyway).
const MAX_BODY: u64 = 64 * 1024 * 1024;

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

fn bad_request(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
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
                if !target.starts_with('/') {
                    return Err(bad_request("not an origin-form target"));
                }
                let (path, raw_query) = target.split_once('?').unwrap_or((target, ""));
                let path = url_decode(path, false).ok_or_else(|| bad_request("bad path"))?;
                let mut content_length = None;
                for h in req.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        let v = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<u64>().ok())
                            .ok_or_else(|| bad_request("bad content-length"))?;
                        content_length = Some(v);
                    }
                }
                let len = content_length.unwrap_or(0);
                let mut body = Vec::new();
                if len <= MAX_BODY {
                    let len = usize::try_from(len).map_err(|_| bad_request("body too large"))?;
                    body = buf[head_len..].to_vec();
                    while body.len() < len {
                        let n = read_some(stream, &mut tmp, abort)?;
                        if n == 0 {
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                        body.extend_from_slice(&tmp[..n]);
                    }
                    body.truncate(len);
                }
                return Ok(Some(Request {
                    method,
                    path,
                    raw_query: raw_query.to_owned(),
                    body,
                    content_length,
                    http11,
                    params: Vec::new(),
                }));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err(bad_request("head too large")),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

/// Go's `http.StatusText` for the statuses these servers send.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
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

/// `Date` in Go's `http.TimeFormat` (`Thu, 26 Nov 2026 07:15:52 GMT`).
pub(crate) fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let tod = secs % 86_400;
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[((secs / 86_400) % 7) as usize],
        MONTHS[(m - 1) as usize],
        tod / 3600,
        tod / 60 % 60,
        tod % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Writes the response the way Go's `net/http` does: the handler's headers sorted by name,
/// then `Date`, `Content-Length` (or chunked), a sniffed `Content-Type` when the handler set
/// none and there is a body, and `Connection: close` (one request per connection here).
fn write_response(
    stream: &mut TcpStream,
    resp: &Response,
    http11: bool,
    head_only: bool,
) -> io::Result<()> {
    let chunked = http11 && resp.body.len() > GO_CHUNKING_THRESHOLD;
    let mut headers: Vec<&(&'static str, String)> = resp.headers.iter().collect();
    headers.sort_by_key(|(k, _)| *k);
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (k, v) in headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    let _ = write!(head, "Date: {}\r\n", http_date(SystemTime::now()));
    if !chunked {
        let _ = write!(head, "Content-Length: {}\r\n", resp.body.len());
    }
    let has_type = resp.headers.iter().any(|(k, _)| *k == "Content-Type");
    if !has_type && !resp.body.is_empty() {
        // Go's DetectContentType of nsq's plain answers ("OK", text stats).
        head.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    }
    head.push_str("Connection: close\r\n");
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if head_only {
        // Go sends no body to HEAD.
    } else if chunked {
        // Go writes the body in one chunk, then the terminating empty chunk.
        stream.write_all(format!("{:x}\r\n", resp.body.len()).as_bytes())?;
        stream.write_all(&resp.body)?;
        stream.write_all(b"\r\n0\r\n\r\n")?;
    } else {
        stream.write_all(&resp.body)?;
    }
    stream.flush()
}

// ---- routing, as julienschmidt/httprouter v1.3.0 does it for nsq ----

/// A route table: `(method, pattern)`, patterns with `:name` segments.
pub(crate) type Routes = [(&'static str, &'static str)];

/// Matches `path` against `pattern`; `Some(params)` on a match. `:name` matches one
/// non-empty segment.
fn match_pattern(pattern: &str, path: &str, fold_case: bool) -> Option<Vec<(String, String)>> {
    let pat: Vec<&str> = pattern.split('/').collect();
    let segs: Vec<&str> = path.split('/').collect();
    if pat.len() != segs.len() {
        return None;
    }
    let mut params = Vec::new();
    for (p, s) in pat.iter().zip(&segs) {
        if let Some(name) = p.strip_prefix(':') {
            if s.is_empty() {
                return None;
            }
            params.push((name.to_owned(), (*s).to_owned()));
        } else if !(p == s || (fold_case && p.eq_ignore_ascii_case(s))) {
            return None;
        }
    }
    Some(params)
}

/// The path with `pattern`'s case (httprouter's `findCaseInsensitivePath`).
fn fixed_case(pattern: &str, path: &str) -> Option<String> {
    match_pattern(pattern, path, true)?;
    let fixed: Vec<&str> = pattern
        .split('/')
        .zip(path.split('/'))
        .map(|(p, s)| if p.starts_with(':') { s } else { p })
        .collect();
    Some(fixed.join("/"))
}

/// httprouter's `CleanPath`: `path.Clean` keeping a trailing slash.
fn clean_path(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut cleaned = format!("/{}", out.join("/"));
    if p.ends_with('/') && cleaned.len() > 1 {
        cleaned.push('/');
    }
    cleaned
}

/// Escapes a path for a `Location` header (Go's `URL.EscapedPath`, roughly).
fn escape_path(p: &str) -> String {
    let mut out = String::new();
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Go's `http.Redirect` to `path` (plus the request's query).
fn redirect(req: &Request, code: u16, path: &str) -> Response {
    let mut location = escape_path(path);
    if !req.raw_query.is_empty() {
        location.push('?');
        location.push_str(&req.raw_query);
    }
    let mut headers = vec![("Location", location.clone())];
    let mut body = Vec::new();
    if req.method == "GET" || req.method == "HEAD" {
        headers.push(("Content-Type", "text/html; charset=utf-8".to_owned()));
    }
    if req.method == "GET" {
        let href = location
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&#34;")
            .replace('\'', "&#39;");
        body = format!("<a href=\"{href}\">{}</a>.\n\n", reason(code)).into_bytes();
    }
    Response {
        status: code,
        headers,
        body,
    }
}

/// Routes a request like httprouter (with nsq's settings: redirects on, 405 with `Allow`,
/// automatic `OPTIONS`, nsq's JSON `NOT_FOUND`/`METHOD_NOT_ALLOWED`): `Ok(route index)` with
/// `req.params` filled, or the response to send.
pub(crate) fn route(routes: &Routes, req: &mut Request) -> Result<usize, Response> {
    let path = req.path.clone();
    let for_method: Vec<(usize, &str)> = routes
        .iter()
        .enumerate()
        .filter(|(_, (m, _))| *m == req.method)
        .map(|(i, (_, p))| (i, *p))
        .collect();
    for &(i, pattern) in &for_method {
        if let Some(params) = match_pattern(pattern, &path, false) {
            req.params = params;
            return Ok(i);
        }
    }
    if !for_method.is_empty() && req.method != "CONNECT" && path != "/" {
        let code = if req.method == "GET" { 301 } else { 307 };
        // Trailing slash redirect.
        let toggled = match path.strip_suffix('/') {
            Some(p) => p.to_owned(),
            None => format!("{path}/"),
        };
        if path.len() > 1
            && for_method
                .iter()
                .any(|(_, p)| match_pattern(p, &toggled, false).is_some())
        {
            return Err(redirect(req, code, &toggled));
        }
        // Case-insensitive (and trailing-slash-insensitive) fixed path.
        let cleaned = clean_path(&path);
        let cleaned_toggled = match cleaned.strip_suffix('/') {
            Some(p) if !p.is_empty() => p.to_owned(),
            _ => format!("{cleaned}/"),
        };
        for candidate in [&cleaned, &cleaned_toggled] {
            if let Some(fixed) = for_method
                .iter()
                .find_map(|(_, p)| fixed_case(p, candidate))
            {
                return Err(redirect(req, code, &fixed));
            }
        }
    }
    let mut allowed: Vec<&str> = routes
        .iter()
        .filter(|(m, p)| {
            *m != req.method && *m != "OPTIONS" && match_pattern(p, &path, false).is_some()
        })
        .map(|(m, _)| *m)
        .collect();
    allowed.dedup();
    if !allowed.is_empty() {
        allowed.push("OPTIONS");
        allowed.sort_unstable();
        allowed.dedup();
        let allow = allowed.join(", ");
        if req.method == "OPTIONS" {
            return Err(Response {
                status: 200,
                headers: vec![("Allow", allow)],
                body: Vec::new(),
            });
        }
        let mut resp = Response::v1_err(405, "METHOD_NOT_ALLOWED");
        resp.headers.push(("Allow", allow));
        return Err(resp);
    }
    Err(Response::v1_err(404, "NOT_FOUND"))
}

type Handler = Arc<dyn Fn(&mut Request) -> Response + Send + Sync>;

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
            // What Go's server answers to a request it cannot parse.
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
            );
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    if let Some(mut req) = req {
        let resp = handler(&mut req);
        let _ = write_response(stream, &resp, req.http11, req.method == "HEAD");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str) -> Request {
        let (path, q) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            raw_query: q.to_owned(),
            body: Vec::new(),
            content_length: None,
            http11: true,
            params: Vec::new(),
        }
    }

    const ROUTES: &Routes = &[
        ("GET", "/ping"),
        ("POST", "/topic/create"),
        ("GET", "/config/:opt"),
        ("PUT", "/config/:opt"),
    ];

    fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn routes_like_httprouter() {
        assert_eq!(route(ROUTES, &mut req("GET", "/ping")).ok(), Some(0));
        let mut r = req("PUT", "/config/log_level");
        assert_eq!(route(ROUTES, &mut r).ok(), Some(3));
        assert_eq!(r.param("opt"), Some("log_level"));
        // 405 lists the other methods, OPTIONS included, sorted.
        let e = route(ROUTES, &mut req("DELETE", "/config/x")).unwrap_err();
        assert_eq!(e.status, 405);
        assert_eq!(header(&e, "Allow"), Some("GET, OPTIONS, PUT"));
        let e = route(ROUTES, &mut req("HEAD", "/ping")).unwrap_err();
        assert_eq!((e.status, header(&e, "Allow")), (405, Some("GET, OPTIONS")));
        let e = route(ROUTES, &mut req("OPTIONS", "/ping")).unwrap_err();
        assert_eq!((e.status, e.body.len()), (200, 0));
        // Redirects: trailing slash, case, cleaning; 307 keeps the method.
        let e = route(ROUTES, &mut req("GET", "/ping/")).unwrap_err();
        assert_eq!((e.status, header(&e, "Location")), (301, Some("/ping")));
        assert_eq!(e.body, b"<a href=\"/ping\">Moved Permanently</a>.\n\n");
        let e = route(ROUTES, &mut req("POST", "/Topic/Create?topic=x")).unwrap_err();
        assert_eq!(
            (e.status, header(&e, "Location"), e.body.len()),
            (307, Some("/topic/create?topic=x"), 0)
        );
        let e = route(ROUTES, &mut req("GET", "//ping")).unwrap_err();
        assert_eq!(header(&e, "Location"), Some("/ping"));
        let e = route(ROUTES, &mut req("GET", "/CONFIG/Opt")).unwrap_err();
        assert_eq!(header(&e, "Location"), Some("/config/Opt"));
        // No redirect to an empty parameter.
        assert_eq!(
            route(ROUTES, &mut req("GET", "/config/"))
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            route(ROUTES, &mut req("GET", "/config"))
                .unwrap_err()
                .status,
            404
        );
    }

    #[test]
    fn queries_parse_like_go() {
        let q = parse_query("topic=a%23b&x=1+2&topic=second").unwrap();
        assert_eq!(q.get("topic"), Some("a#b"));
        assert_eq!(q.get("x"), Some("1 2"));
        assert!(parse_query("topic=%zz").is_err());
        assert!(parse_query("a;b=1").is_err());
        assert_eq!(
            parse_query("a=%zz&topic=t").unwrap_err().get("topic"),
            Some("t")
        );
    }

    #[test]
    fn dates_are_go_http_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_677_352);
        assert_eq!(http_date(t), "Thu, 26 Nov 2026 07:15:52 GMT");
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
