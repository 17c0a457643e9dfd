//! nsqd's and nsqlookupd's HTTP APIs, checked against the responses captured from the real
//! v1.3.0 servers (`nsq-proto/tests/fixtures/http`, see its README): the capture session is
//! replayed request by request, and each answer must have the fixture's status, headers, error
//! text and JSON shape (keys in Go's order, `null` where Go has a nil slice, omitempty fields)
//! with the same deterministic values. Then the semantics behind the endpoints: pause, empty,
//! delete, config, tombstones.
//!
//! The replay runs against the local broker, or against real servers when
//! `NSQD_TCP_ADDRESS`, `NSQD_HTTP_ADDRESS`, `NSQLOOKUPD_HTTP_ADDRESS` are set (fresh ones,
//! started like the README says; `NSQLOOKUPD_TCP_ADDRESS` names the lookupd address nsqd was
//! given), which is how the test itself was checked.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{
    Lookupd, Nsqd, Options, RawClient, RawFrame, http_get_json, http_request, wait_until,
};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value, json};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(5);

// ---- raw HTTP, as the fixtures were captured ----

/// A raw HTTP response.
#[derive(Debug)]
struct Reply {
    status: u16,
    reason: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    chunked: bool,
}

impl Reply {
    fn parse(raw: &[u8]) -> Self {
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

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
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

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../nsq-proto/tests/fixtures/http")
        .join(name)
}

fn fixture(name: &str) -> Reply {
    let path = fixture_path(&format!("{name}.http"));
    Reply::parse(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Reads until EOF (or a reset, which only ends the reading).
fn read_all(s: &mut TcpStream) -> io::Result<Vec<u8>> {
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
fn send(addr: SocketAddr, method: &str, target: &str, body: &[u8]) -> Reply {
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

// ---- JSON with its keys in document order ----

/// A JSON value that keeps object keys in order (Go writes struct fields in declaration
/// order) and numbers as written (`0` is not `0.0`).
#[derive(Clone, Debug, PartialEq)]
enum J {
    Null,
    Bool(bool),
    Num(Number),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<J, E> {
                Ok(J::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> Result<J, E> {
                Ok(J::Num(n.into()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<J, E> {
                Ok(J::Num(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<J, E> {
                Ok(Number::from_f64(n).map_or(J::Null, J::Num))
            }
            fn visit_str<E>(self, s: &str) -> Result<J, E> {
                Ok(J::Str(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(J::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_entry()? {
                    v.push(e);
                }
                Ok(J::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl J {
    fn parse(body: &[u8]) -> J {
        serde_json::from_slice(body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)))
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut J> {
        match self {
            J::Obj(v) => v.iter_mut().find(|(k, _)| k == key).map(|(_, x)| x),
            _ => None,
        }
    }

    /// Makes timing-dependent parts comparable: a channel's deferred messages come back to
    /// its queue after their delay (the `defer=5000` one did during the capture), so only
    /// `depth + deferred_count` is compared; `/nodes` lists topics (and their tombstones) in
    /// Go's random map order, so they are sorted together.
    fn normalize(&mut self) {
        match self {
            J::Arr(v) => v.iter_mut().for_each(J::normalize),
            J::Obj(_) => {
                let deferred = match self.get_mut("deferred_count") {
                    Some(J::Num(n)) => {
                        let d = n.as_u64().unwrap_or(0);
                        *n = 0.into();
                        d
                    }
                    _ => 0,
                };
                if let Some(J::Num(n)) = self.get_mut("depth") {
                    *n = (n.as_u64().unwrap_or(0) + deferred).into();
                }
                let topics = self.get_mut("topics").cloned();
                if let (Some(J::Arr(topics)), Some(J::Arr(tombs))) =
                    (topics, self.get_mut("tombstones").cloned())
                {
                    let mut pairs: Vec<(J, J)> = topics.into_iter().zip(tombs).collect();
                    pairs.sort_by_key(|(t, _)| format!("{t:?}"));
                    let (t, b): (Vec<J>, Vec<J>) = pairs.into_iter().unzip();
                    *self.get_mut("topics").unwrap() = J::Arr(t);
                    *self.get_mut("tombstones").unwrap() = J::Arr(b);
                }
                if let J::Obj(v) = self {
                    for (_, x) in v.iter_mut() {
                        x.normalize();
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether the value at `path` differs from run to run (its type is still compared).
///
/// A producer's `pub_counts` holds one topic, picked from a Go map at random when `/stats`
/// is not filtered by topic (the replay checks the local broker's pick separately).
fn volatile(path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or("");
    path.starts_with("/memory")
        || (last == "value" && path.contains("/percentiles/"))
        || path.contains("/pub_counts/")
        || matches!(
            last,
            "start_time"
                | "connect_ts"
                | "remote_address"
                | "id"
                | "last_update"
                | "tombstoned_at"
                | "http_port"
                | "tcp_port"
        )
}

/// Compares the shape (types, keys in order, array lengths) and every value not
/// [`volatile`]; arrays of strings (Go map keys in random order) are compared sorted.
fn compare(path: &str, want: &J, got: &J, errors: &mut Vec<String>) {
    match (want, got) {
        (J::Obj(w), J::Obj(g)) => {
            let wk: Vec<&str> = w.iter().map(|(k, _)| k.as_str()).collect();
            let gk: Vec<&str> = g.iter().map(|(k, _)| k.as_str()).collect();
            if wk != gk {
                errors.push(format!("{path}: keys {gk:?}, want {wk:?}"));
                return;
            }
            for ((k, w), (_, g)) in w.iter().zip(g) {
                compare(&format!("{path}/{k}"), w, g, errors);
            }
        }
        (J::Arr(w), J::Arr(g)) => {
            if w.len() != g.len() {
                errors.push(format!("{path}: {} elements, want {}", g.len(), w.len()));
                return;
            }
            let strings = |v: &[J]| -> Option<Vec<String>> {
                let mut s: Vec<String> = v
                    .iter()
                    .map(|x| match x {
                        J::Str(s) => Some(s.clone()),
                        _ => None,
                    })
                    .collect::<Option<_>>()?;
                s.sort();
                Some(s)
            };
            if let (Some(ws), Some(gs)) = (strings(w), strings(g)) {
                if ws != gs {
                    errors.push(format!("{path}: {gs:?}, want {ws:?}"));
                }
                return;
            }
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                compare(&format!("{path}/{i}"), w, g, errors);
            }
        }
        (J::Num(_), J::Num(_)) | (J::Str(_), J::Str(_)) | (J::Bool(_), J::Bool(_))
            if volatile(path) => {}
        (w, g) if w == g => {}
        (w, g) => errors.push(format!("{path}: {g:?}, want {w:?}")),
    }
}

/// A channel line of the text `/stats` with its deferred messages counted in its depth
/// (see [`J::normalize`]).
fn fold_deferred_text(line: &str) -> String {
    let number_after = |marker: &str| -> Option<(usize, usize, u64)> {
        let start = line.find(marker)? + marker.len();
        let len = line[start..].find(' ')?;
        Some((start, start + len, line[start..start + len].parse().ok()?))
    };
    match (number_after(" depth: "), number_after(" def: ")) {
        (Some((ds, de, depth)), Some((fs, fe, def))) if de < fs => format!(
            "{}{}{}_{}",
            &line[..ds],
            depth + def,
            &line[de..fs],
            &line[fe..]
        ),
        _ => line.to_owned(),
    }
}

/// nsqd's text `/stats` with the run-dependent numbers blanked.
fn normalize_text_stats(s: &str) -> Vec<String> {
    let blank_after = |line: &str, marker: &str| -> String {
        match line.find(marker) {
            Some(i) => {
                let rest = &line[i + marker.len()..];
                let end = rest.find(' ').unwrap_or(rest.len());
                format!("{}{marker}_{}", &line[..i], &rest[end..])
            }
            None => line.to_owned(),
        }
    };
    s.lines()
        .enumerate()
        .map(|(i, line)| match i {
            // nsqd v1.3.0 (built w/...), start_time, uptime
            0 => line.split(" (").next().unwrap_or("").to_owned(),
            1 | 2 => line.split(' ').next().unwrap_or("").to_owned(),
            _ if line.starts_with("   ") && line.contains('\t') => {
                line.split('\t').next().unwrap_or("").to_owned()
            }
            _ => {
                let line = fold_deferred_text(line);
                let line = blank_after(&line, "fixture-host:");
                let line = blank_after(&line, "connected: ");
                // A producer's topics: nsqd picks one from a Go map, at random.
                let line = match (line.find("] msgs: "), line.find(" connected: ")) {
                    (Some(i), Some(j)) if line.contains(" topics: ") => {
                        format!("{}] msgs: _{}", &line[..i], &line[j..])
                    }
                    _ => line,
                };
                // Latency values (the quantiles of billing and orders; not "0.0ns, 0.0ns").
                match line.find("e2e%: ") {
                    Some(i) if line[i..].contains(|c: char| ('1'..='9').contains(&c)) => {
                        format!("{}e2e%: _", &line[..i])
                    }
                    _ => line,
                }
            }
        })
        .collect()
}

/// Checks a reply against a fixture: status line, the headers Go sets (and their order),
/// chunking by Go's rule, the body (JSON by shape and stable values).
fn check(name: &str, got: &Reply) {
    let want = fixture(name);
    assert_eq!(
        (got.status, got.reason.as_str()),
        (want.status, want.reason.as_str()),
        "{name}: status ({})",
        got.text()
    );
    // Content-Length or chunked depends on the body's size, which differs with ports and
    // names; Go's rule is checked instead.
    let names = |r: &Reply| -> Vec<String> {
        r.headers
            .iter()
            .map(|(k, _)| k.to_ascii_lowercase())
            .filter(|k| k != "content-length" && k != "transfer-encoding")
            .collect()
    };
    assert_eq!(names(got), names(&want), "{name}: header names");
    for h in [
        "content-type",
        "x-nsq-content-type",
        "allow",
        "location",
        "connection",
    ] {
        assert_eq!(got.header(h), want.header(h), "{name}: {h}");
    }
    assert_eq!(got.chunked, got.body.len() > 2048, "{name}: chunking");
    if want
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        let (mut w, mut g) = (J::parse(&want.body), J::parse(&got.body));
        w.normalize();
        g.normalize();
        let mut errors = Vec::new();
        compare("", &w, &g, &mut errors);
        assert!(
            errors.is_empty(),
            "{name}:\n  {}\n got: {}",
            errors.join("\n  "),
            got.text()
        );
    } else if name == "nsqd_stats_text" {
        assert_eq!(
            normalize_text_stats(&got.text()),
            normalize_text_stats(&want.text()),
            "{name}"
        );
    } else {
        assert_eq!(got.text(), want.text(), "{name}: body");
    }
}

#[test]
fn the_checker_tells_shapes_and_values_apart() {
    let errors = |want: &str, got: &str| {
        let mut e = Vec::new();
        compare(
            "",
            &J::parse(want.as_bytes()),
            &J::parse(got.as_bytes()),
            &mut e,
        );
        e.len()
    };
    assert_eq!(errors(r#"{"a":1,"b":[]}"#, r#"{"a":1,"b":[]}"#), 0);
    assert_ne!(
        errors(r#"{"a":1,"b":2}"#, r#"{"b":2,"a":1}"#),
        0,
        "key order"
    );
    assert_ne!(errors(r#"{"a":null}"#, r#"{"a":[]}"#), 0, "nil slice");
    assert_ne!(errors(r#"{"a":1}"#, r#"{"a":1,"b":""}"#), 0, "omitempty");
    assert_ne!(
        errors(r#"{"v":0}"#, r#"{"v":0.0}"#),
        0,
        "Go's number format"
    );
    assert_ne!(
        errors(r#"{"depth":1}"#, r#"{"depth":2}"#),
        0,
        "a stable value"
    );
    assert_eq!(errors(r#"{"start_time":1}"#, r#"{"start_time":2}"#), 0);
    assert_ne!(errors(r#"{"start_time":1}"#, r#"{"start_time":"1"}"#), 0);
    assert_eq!(
        errors(r#"{"topics":["a","b"]}"#, r#"{"topics":["b","a"]}"#),
        0
    );
    assert_ne!(errors(r#"{"topics":["a"]}"#, r#"{"topics":["a","b"]}"#), 0);
}

// ---- the capture session, replayed ----

struct Servers {
    tcp: SocketAddr,
    http: SocketAddr,
    lookupd: SocketAddr,
    /// nsqd as a lookupd lists it (`/topic/tombstone`'s node).
    node: String,
    local: Option<(Nsqd, Lookupd)>,
}

fn env_addr(var: &str) -> Option<SocketAddr> {
    std::env::var(var).ok()?.to_socket_addrs().ok()?.next()
}

/// The servers for the replay: real ones from the environment (they must be fresh), or the
/// local broker started like the capture's nsqd (`--e2e-processing-latency-percentile=0.5,0.99`,
/// `--lookupd-tcp-address=127.0.0.1:4160`, on a host named `vm`).
fn replay_servers() -> Option<Servers> {
    if let (Some(tcp), Some(http), Some(lookupd)) = (
        env_addr("NSQD_TCP_ADDRESS"),
        env_addr("NSQD_HTTP_ADDRESS"),
        env_addr("NSQLOOKUPD_HTTP_ADDRESS"),
    ) {
        let (_, stats) = http_get_json(http, "/stats?format=json").ok()?;
        if stats["topics"] != json!([]) {
            nsq_test_broker::conformance::skip(
                "the_capture_session_replayed_matches_the_fixtures",
                "the external nsqd is not fresh",
            );
            return None;
        }
        return Some(Servers {
            tcp,
            http,
            lookupd,
            node: format!("127.0.0.1:{}", http.port()),
            local: None,
        });
    }
    let lookupd = Lookupd::start().expect("lookupd");
    let opts = Options {
        hostname: "vm".to_owned(),
        e2e_processing_latency_percentiles: vec![0.5, 0.99],
        nsqlookupd_tcp_addresses: vec!["127.0.0.1:4160".to_owned()],
        ..Options::default()
    };
    let nsqd = Nsqd::builder()
        .options(opts)
        .http(true)
        .lookupd(&lookupd)
        .start()
        .expect("nsqd");
    let http = nsqd.http_address().expect("http");
    Some(Servers {
        tcp: nsqd.tcp_address(),
        http,
        lookupd: lookupd.http_address(),
        node: format!("127.0.0.1:{}", http.port()),
        local: Some((nsqd, lookupd)),
    })
}

fn ok(frame: &RawFrame) {
    assert_eq!(*frame, RawFrame::Response(b"OK".to_vec()));
}

/// The state created before the captures (README, "Server setup"); returns the consumer
/// and producer connections, which stay open.
fn setup(s: &Servers) -> (RawClient, RawClient) {
    for target in [
        "/topic/create?topic=orders",
        "/channel/create?topic=orders&channel=billing",
        "/channel/create?topic=orders&channel=audit",
        "/channel/pause?topic=orders&channel=audit",
        "/topic/create?topic=empty",
        "/topic/create?topic=tmp%23ephemeral",
    ] {
        assert_eq!(send(s.http, "POST", target, b"").status, 200, "{target}");
    }
    let identify = |id: &str| {
        json!({"client_id": id, "hostname": "fixture-host", "user_agent": "fixture/1.0",
            "feature_negotiation": true})
    };
    let mut consumer = RawClient::connect_v2(s.tcp).unwrap();
    assert!(matches!(
        consumer.identify(&identify("fixture")).unwrap(),
        RawFrame::Response(_)
    ));
    consumer.subscribe("orders", "billing").unwrap();
    consumer.cmd("RDY 5").unwrap();
    let mut producer = RawClient::connect_v2(s.tcp).unwrap();
    assert!(matches!(
        producer.identify(&identify("fixture-producer")).unwrap(),
        RawFrame::Response(_)
    ));
    for i in 0..20 {
        ok(&producer
            .publish("orders", format!("order-{i:02}").as_bytes())
            .unwrap());
    }
    producer
        .cmd_body("DPUB orders 1800000", b"deferred-order")
        .unwrap();
    ok(&producer.read_frame_skip_heartbeats().unwrap());
    // The README does not give the MPUB's bodies; orders' message_bytes (215) says they
    // were 7 bytes each.
    ok(&producer.mpub("orders", &[b"mpub-01", b"mpub-02"]).unwrap());
    ok(&producer.publish("tmp#ephemeral", b"eph-1").unwrap());
    // FIN 6, REQ the 7th, hold the next 5.
    for i in 0..12 {
        let m = consumer.expect_message().unwrap();
        match i {
            0..6 => consumer.cmd(&format!("FIN {}", m.id_str())).unwrap(),
            6 => consumer.cmd(&format!("REQ {} 0", m.id_str())).unwrap(),
            _ => {}
        }
    }
    let settled = wait_until(WAIT, || {
        http_get_json(s.http, "/stats?format=json&topic=orders&channel=billing").is_ok_and(
            |(_, v)| {
                let c = &v["topics"][0]["channels"][0];
                c["in_flight_count"] == 5
                    && c["requeue_count"] == 1
                    && c["clients"][0]["finish_count"] == 6
            },
        )
    });
    assert!(settled, "the consumer's FIN/REQ were not seen");
    (consumer, producer)
}

#[test]
fn the_capture_session_replayed_matches_the_fixtures() {
    let Some(s) = replay_servers() else {
        return;
    };
    let (_consumer, _producer) = setup(&s);
    let (http, lookupd) = (s.http, s.lookupd);
    let nsqd = |name: &str, method: &str, target: &str, body: &[u8]| {
        check(name, &send(http, method, target, body));
    };

    nsqd("nsqd_ping", "GET", "/ping", b"");
    nsqd("nsqd_info", "GET", "/info", b"");
    nsqd("nsqd_pub_ok", "POST", "/pub?topic=orders", b"hello");
    nsqd(
        "nsqd_pub_deferred",
        "POST",
        "/pub?topic=orders&defer=5000",
        b"later",
    );
    nsqd(
        "nsqd_pub_invalid_topic",
        "POST",
        "/pub?topic=bad!name",
        b"x",
    );
    nsqd("nsqd_pub_missing_topic", "POST", "/pub", b"x");
    nsqd("nsqd_pub_empty_body", "POST", "/pub?topic=orders", b"");
    nsqd(
        "nsqd_pub_invalid_defer",
        "POST",
        "/pub?topic=orders&defer=-1",
        b"x",
    );
    nsqd("nsqd_mpub_text", "POST", "/mpub?topic=orders", b"a\nb\nc");
    let two = RawClient::mpub_body(&[b"bin-one", b"bin-two"]);
    nsqd(
        "nsqd_mpub_binary",
        "POST",
        "/mpub?topic=orders&binary=true",
        &two,
    );
    nsqd(
        "nsqd_mpub_binary_truncated",
        "POST",
        "/mpub?topic=orders&binary=true",
        b"\x00\x00\x00\x02\x00\x00\x00\x05hello\x00\x00\x00\nabc",
    );
    nsqd(
        "nsqd_mpub_binary_zero_count",
        "POST",
        "/mpub?topic=orders&binary=true",
        b"\x00\x00\x00\x00",
    );
    nsqd("nsqd_stats_full", "GET", "/stats?format=json", b"");
    if s.local.is_some() {
        // The broker lists the first topic published to where nsqd picks one at random.
        let (_, v) = http_get_json(http, "/stats?format=json").unwrap();
        assert_eq!(
            v["producers"][0]["pub_counts"],
            json!([{"topic": "orders", "count": 23}])
        );
    }
    nsqd(
        "nsqd_stats_topic",
        "GET",
        "/stats?format=json&topic=orders",
        b"",
    );
    nsqd(
        "nsqd_stats_topic_channel",
        "GET",
        "/stats?format=json&topic=orders&channel=billing",
        b"",
    );
    nsqd(
        "nsqd_stats_no_clients",
        "GET",
        "/stats?format=json&include_clients=false",
        b"",
    );
    nsqd(
        "nsqd_stats_include_mem",
        "GET",
        "/stats?format=json&include_mem=true",
        b"",
    );
    nsqd(
        "nsqd_stats_nosuch_topic",
        "GET",
        "/stats?format=json&topic=nosuch",
        b"",
    );
    nsqd("nsqd_stats_text", "GET", "/stats", b"");
    nsqd(
        "nsqd_stats_no_mem",
        "GET",
        "/stats?format=json&include_mem=false",
        b"",
    );

    nsqd("nsqd_topic_create", "POST", "/topic/create?topic=newt", b"");
    nsqd(
        "nsqd_topic_create_invalid_topic",
        "POST",
        "/topic/create?topic=bad!name",
        b"",
    );
    nsqd(
        "nsqd_topic_create_missing_topic",
        "POST",
        "/topic/create",
        b"",
    );
    nsqd(
        "nsqd_topic_delete_nosuch",
        "POST",
        "/topic/delete?topic=nosuch",
        b"",
    );
    for body in [b"s1", b"s2", b"s3"] {
        assert_eq!(send(http, "POST", "/pub?topic=scratch", body).status, 200);
    }
    nsqd(
        "nsqd_topic_empty",
        "POST",
        "/topic/empty?topic=scratch",
        b"",
    );
    nsqd(
        "nsqd_topic_pause",
        "POST",
        "/topic/pause?topic=scratch",
        b"",
    );
    nsqd(
        "nsqd_stats_paused_topic",
        "GET",
        "/stats?format=json&topic=scratch&include_mem=false",
        b"",
    );
    nsqd(
        "nsqd_topic_unpause",
        "POST",
        "/topic/unpause?topic=scratch",
        b"",
    );
    nsqd(
        "nsqd_topic_delete",
        "POST",
        "/topic/delete?topic=scratch",
        b"",
    );

    nsqd(
        "nsqd_channel_create",
        "POST",
        "/channel/create?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_create_topic_not_found",
        "POST",
        "/channel/create?topic=nosuch&channel=c",
        b"",
    );
    nsqd(
        "nsqd_channel_create_invalid_channel",
        "POST",
        "/channel/create?topic=orders&channel=bad!name",
        b"",
    );
    nsqd(
        "nsqd_channel_create_missing_channel",
        "POST",
        "/channel/create?topic=orders",
        b"",
    );
    nsqd(
        "nsqd_channel_create_invalid_topic",
        "POST",
        "/channel/create?topic=bad!name&channel=c",
        b"",
    );
    nsqd(
        "nsqd_channel_delete_nosuch",
        "POST",
        "/channel/delete?topic=orders&channel=nosuch",
        b"",
    );
    nsqd(
        "nsqd_channel_empty",
        "POST",
        "/channel/empty?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_empty_nosuch",
        "POST",
        "/channel/empty?topic=orders&channel=nosuch",
        b"",
    );
    nsqd(
        "nsqd_channel_pause",
        "POST",
        "/channel/pause?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_unpause",
        "POST",
        "/channel/unpause?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_delete",
        "POST",
        "/channel/delete?topic=orders&channel=newc",
        b"",
    );

    let lookupd_tcp = std::env::var("NSQLOOKUPD_TCP_ADDRESS")
        .ok()
        .filter(|_| s.local.is_none())
        .unwrap_or_else(|| "127.0.0.1:4160".to_owned());
    let addresses = format!("[\"{lookupd_tcp}\"]");
    // The address is the one nsqd was given (the capture's unless external): compared, then
    // swapped for the fixture's so the rest of the reply is checked too.
    let mut got = send(http, "GET", "/config/nsqlookupd_tcp_addresses", b"");
    assert_eq!(got.text(), addresses);
    got.body = fixture("nsqd_config_get_lookupd_addresses").body;
    check("nsqd_config_get_lookupd_addresses", &got);
    nsqd("nsqd_config_get_log_level", "GET", "/config/log_level", b"");
    nsqd("nsqd_config_get_nosuchopt", "GET", "/config/nosuchopt", b"");
    nsqd(
        "nsqd_config_put_log_level_json_quoted",
        "PUT",
        "/config/log_level",
        b"\"debug\"",
    );
    nsqd(
        "nsqd_config_put_log_level_raw",
        "PUT",
        "/config/log_level",
        b"debug",
    );
    nsqd(
        "nsqd_config_get_log_level_after_put",
        "GET",
        "/config/log_level",
        b"",
    );
    let mut got = send(
        http,
        "PUT",
        "/config/nsqlookupd_tcp_addresses",
        addresses.as_bytes(),
    );
    assert_eq!(got.text(), addresses);
    got.body = fixture("nsqd_config_put_lookupd_addresses").body;
    check("nsqd_config_put_lookupd_addresses", &got);
    nsqd(
        "nsqd_config_put_nosuchopt",
        "PUT",
        "/config/nosuchopt",
        b"1",
    );
    nsqd(
        "nsqd_config_put_empty_body",
        "PUT",
        "/config/log_level",
        b"",
    );
    nsqd("nsqd_not_found", "GET", "/nosuch", b"");
    nsqd("nsqd_method_not_allowed", "DELETE", "/ping", b"");
    nsqd(
        "nsqd_http_port_answering_lookup",
        "GET",
        "/lookup?topic=orders",
        b"",
    );

    // nsqd's TCP port answering an HTTP request: one E_BAD_PROTOCOL frame, then close.
    let mut tcp = TcpStream::connect_timeout(&s.tcp, WAIT).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    tcp.write_all(
        format!(
            "GET /ping HTTP/1.1\r\nHost: {}\r\nUser-Agent: nsq-proto-fixture-capture/1.0\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            s.tcp
        )
        .as_bytes(),
    )
    .unwrap();
    let want = std::fs::read(fixture_path("nsqd_tcp_port_answering_http.bin")).unwrap();
    assert_eq!(read_all(&mut tcp).unwrap(), want);

    // nsqd registers in-process with the local lookupd, over TCP with a real one: wait until
    // the last change (newc's deletion) is there.
    assert!(wait_until(WAIT, || {
        http_get_json(lookupd, "/debug").is_ok_and(|(_, v)| v.get("channel:orders:newc").is_none())
    }));
    let lookup = |name: &str, method: &str, target: &str| {
        check(name, &send(lookupd, method, target, b""));
    };
    lookup("lookupd_ping", "GET", "/ping");
    lookup("lookupd_info", "GET", "/info");
    lookup("lookupd_lookup", "GET", "/lookup?topic=orders");
    lookup(
        "lookupd_lookup_topic_not_found",
        "GET",
        "/lookup?topic=nosuch",
    );
    lookup("lookupd_lookup_missing_topic", "GET", "/lookup");
    lookup("lookupd_topics", "GET", "/topics");
    lookup("lookupd_channels", "GET", "/channels?topic=orders");
    lookup("lookupd_channels_nosuch", "GET", "/channels?topic=nosuch");
    lookup("lookupd_channels_missing_topic", "GET", "/channels");
    lookup("lookupd_nodes", "GET", "/nodes");
    lookup("lookupd_topic_create", "POST", "/topic/create?topic=lt1");
    lookup(
        "lookupd_topic_create_invalid_topic",
        "POST",
        "/topic/create?topic=bad!name",
    );
    lookup(
        "lookupd_topic_create_missing_topic",
        "POST",
        "/topic/create",
    );
    lookup(
        "lookupd_channel_create",
        "POST",
        "/channel/create?topic=lt1&channel=lc1",
    );
    lookup("lookupd_channels_created", "GET", "/channels?topic=lt1");
    lookup(
        "lookupd_lookup_registered_no_producers",
        "GET",
        "/lookup?topic=lt1",
    );
    lookup(
        "lookupd_channel_delete",
        "POST",
        "/channel/delete?topic=lt1&channel=lc1",
    );
    lookup(
        "lookupd_channel_delete_nosuch",
        "POST",
        "/channel/delete?topic=lt1&channel=nosuch",
    );
    lookup(
        "lookupd_channel_create_invalid_channel",
        "POST",
        "/channel/create?topic=lt1&channel=bad!name",
    );
    lookup(
        "lookupd_topic_tombstone",
        "POST",
        &format!("/topic/tombstone?topic=orders&node={}", s.node),
    );
    lookup(
        "lookupd_topic_tombstone_nosuch_node",
        "POST",
        "/topic/tombstone?topic=orders&node=nosuch:1",
    );
    lookup(
        "lookupd_topic_tombstone_missing_node",
        "POST",
        "/topic/tombstone?topic=orders",
    );
    lookup(
        "lookupd_lookup_after_tombstone",
        "GET",
        "/lookup?topic=orders",
    );
    lookup("lookupd_nodes_after_tombstone", "GET", "/nodes");
    lookup("lookupd_topic_delete", "POST", "/topic/delete?topic=lt1");
    lookup(
        "lookupd_topic_delete_nosuch",
        "POST",
        "/topic/delete?topic=nosuch",
    );
    lookup("lookupd_debug", "GET", "/debug");
    lookup("lookupd_not_found", "GET", "/nosuch");
    lookup("lookupd_method_not_allowed", "DELETE", "/ping");
}

// ---- semantics ----

fn post(http: SocketAddr, target: &str) -> (u16, String) {
    let (status, body) = http_request(http, "POST", target, b"").expect("HTTP");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// One channel's `/stats` entry (`Null` if it is not listed).
fn channel_stats(http: SocketAddr, topic: &str, channel: &str) -> Value {
    http_get_json(
        http,
        &format!("/stats?format=json&topic={topic}&channel={channel}"),
    )
    .map_or(Value::Null, |(_, v)| v["topics"][0]["channels"][0].clone())
}

fn topic_stats(http: SocketAddr, topic: &str) -> Value {
    http_get_json(http, &format!("/stats?format=json&topic={topic}"))
        .map_or(Value::Null, |(_, v)| v["topics"][0].clone())
}

/// A subscriber of `topic`/`channel` with `RDY rdy`.
fn subscriber(env: &Env, topic: &str, channel: &str, rdy: u32) -> RawClient {
    let mut c = env.raw();
    c.subscribe(topic, channel).unwrap();
    c.cmd(&format!("RDY {rdy}")).unwrap();
    c
}

/// No message frame arrives for a while (heartbeats are answered and skipped).
fn no_message_for(c: &mut RawClient, d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        if c.quiet_for(left).unwrap() {
            return true;
        }
        match c.read_frame().unwrap() {
            f if f.is_heartbeat() => c.cmd("NOP").unwrap(),
            f => panic!("expected nothing, got {f:?}"),
        }
    }
    true
}

#[test]
fn a_paused_channel_delivers_nothing_until_unpaused() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("a_paused_channel_delivers_nothing_until_unpaused") else {
        return Ok(());
    };
    let t = env.topic("http");
    assert_eq!(post(http, &format!("/topic/create?topic={t}")).0, 200);
    assert_eq!(
        post(http, &format!("/channel/create?topic={t}&channel=c")).0,
        200
    );
    let mut c = subscriber(&env, &t, "c", 10);
    assert_eq!(
        post(http, &format!("/channel/pause?topic={t}&channel=c")),
        (200, String::new())
    );
    for body in ["p1", "p2", "p3"] {
        assert_eq!(
            http_request(http, "POST", &format!("/pub?topic={t}"), body.as_bytes())?.0,
            200
        );
    }
    // The messages queue in the channel; none goes out.
    assert!(wait_until(WAIT, || channel_stats(http, &t, "c")["depth"] == 3));
    assert!(no_message_for(&mut c, Duration::from_millis(300)));
    let s = channel_stats(http, &t, "c");
    assert_eq!(
        (s["paused"].clone(), s["in_flight_count"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(
        post(http, &format!("/channel/unpause?topic={t}&channel=c")),
        (200, String::new())
    );
    let mut got: Vec<Vec<u8>> = (0..3)
        .map(|_| c.expect_message().map(|m| m.body))
        .collect::<io::Result<_>>()?;
    got.sort();
    assert_eq!(got, [b"p1", b"p2", b"p3"]);
    assert_eq!(channel_stats(http, &t, "c")["paused"], false);
    Ok(())
}

#[test]
fn a_paused_topic_keeps_its_messages_until_unpaused() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("a_paused_topic_keeps_its_messages_until_unpaused") else {
        return Ok(());
    };
    let t = env.topic("http");
    assert_eq!(
        post(http, &format!("/channel/create?topic={t}&channel=c")).0,
        404
    );
    assert_eq!(post(http, &format!("/topic/create?topic={t}")).0, 200);
    assert_eq!(
        post(http, &format!("/channel/create?topic={t}&channel=c")).0,
        200
    );
    let mut sub = subscriber(&env, &t, "c", 10);
    assert_eq!(
        post(http, &format!("/topic/pause?topic={t}")),
        (200, String::new())
    );
    let body = format!("{}\n{}", "m1", "m2");
    assert_eq!(
        http_request(http, "POST", &format!("/mpub?topic={t}"), body.as_bytes())?.0,
        200
    );
    // Held by the topic: nothing copied to the channel.
    assert!(wait_until(WAIT, || topic_stats(http, &t)["depth"] == 2));
    let s = topic_stats(http, &t);
    assert_eq!(s["paused"], true);
    assert_eq!(s["message_count"], 2);
    assert_eq!(s["channels"][0]["message_count"], 0);
    assert!(no_message_for(&mut sub, Duration::from_millis(300)));
    assert_eq!(
        post(http, &format!("/topic/unpause?topic={t}")),
        (200, String::new())
    );
    for _ in 0..2 {
        sub.expect_message()?;
    }
    let s = topic_stats(http, &t);
    assert_eq!(
        (s["depth"].clone(), s["paused"].clone()),
        (json!(0), json!(false))
    );
    assert_eq!(s["channels"][0]["message_count"], 2);
    // Pausing needs an existing topic; the name is not checked.
    assert_eq!(
        post(http, "/topic/pause?topic=bad!name"),
        (404, r#"{"message":"TOPIC_NOT_FOUND"}"#.to_owned())
    );
    assert_eq!(
        post(http, "/topic/pause"),
        (400, r#"{"message":"MISSING_ARG_TOPIC"}"#.to_owned())
    );
    Ok(())
}

#[test]
fn empty_drops_queued_deferred_and_in_flight_messages() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("empty_drops_queued_deferred_and_in_flight_messages") else {
        return Ok(());
    };
    let t = env.topic("http");
    // A topic without channels holds its messages; /topic/empty drops them.
    for _ in 0..2 {
        assert_eq!(
            http_request(http, "POST", &format!("/pub?topic={t}"), b"x")?.0,
            200
        );
    }
    assert!(wait_until(WAIT, || topic_stats(http, &t)["depth"] == 2));
    assert_eq!(
        post(http, &format!("/topic/empty?topic={t}")),
        (200, String::new())
    );
    assert!(wait_until(WAIT, || topic_stats(http, &t)["depth"] == 0));
    assert_eq!(topic_stats(http, &t)["message_count"], 2);
    assert_eq!(
        post(http, "/topic/empty?topic=bad!name"),
        (400, r#"{"message":"INVALID_TOPIC"}"#.to_owned())
    );
    // A channel: one message in flight, one deferred, two queued.
    let mut c = subscriber(&env, &t, "c", 1);
    for body in ["a", "b", "c"] {
        assert_eq!(
            http_request(http, "POST", &format!("/pub?topic={t}"), body.as_bytes())?.0,
            200
        );
    }
    assert_eq!(
        http_request(http, "POST", &format!("/pub?topic={t}&defer=60000"), b"d")?.0,
        200
    );
    let m = c.expect_message()?;
    assert!(wait_until(WAIT, || {
        let s = channel_stats(http, &t, "c");
        s["depth"] == 2 && s["in_flight_count"] == 1 && s["deferred_count"] == 1
    }));
    assert_eq!(
        post(http, &format!("/channel/empty?topic={t}&channel=c")),
        (200, String::new())
    );
    let s = channel_stats(http, &t, "c");
    assert_eq!(
        (
            s["depth"].clone(),
            s["in_flight_count"].clone(),
            s["deferred_count"].clone()
        ),
        (json!(0), json!(0), json!(0))
    );
    assert_eq!(s["clients"][0]["in_flight_count"], 0);
    // The dropped in-flight message can no longer be finished.
    c.cmd(&format!("FIN {}", m.id_str()))?;
    c.expect_error("E_FIN_FAILED")?;
    // The subscriber is ready again and gets what comes next.
    assert_eq!(
        http_request(http, "POST", &format!("/pub?topic={t}"), b"e")?.0,
        200
    );
    assert_eq!(c.expect_message()?.body, b"e");
    assert_eq!(
        post(http, &format!("/channel/empty?topic={t}&channel=nosuch")),
        (404, r#"{"message":"CHANNEL_NOT_FOUND"}"#.to_owned())
    );
    Ok(())
}

#[test]
fn delete_removes_topics_and_channels_and_closes_their_subscribers() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("delete_removes_topics_and_channels") else {
        return Ok(());
    };
    let t = env.topic("http");
    let mut sub_a = subscriber(&env, &t, "a", 1);
    let mut sub_b = subscriber(&env, &t, "b", 1);
    assert_eq!(
        post(http, &format!("/channel/delete?topic={t}&channel=a")),
        (200, String::new())
    );
    sub_a.expect_closed()?;
    let names: Vec<Value> = topic_stats(http, &t)["channels"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| c["channel_name"].clone())
        .collect();
    assert_eq!(names, [json!("b")]);
    assert_eq!(
        post(http, &format!("/topic/delete?topic={t}")),
        (200, String::new())
    );
    sub_b.expect_closed()?;
    let (_, stats) = http_get_json(http, &format!("/stats?format=json&topic={t}"))?;
    assert_eq!(
        (stats["topics"].clone(), stats["producers"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(
        post(http, &format!("/topic/delete?topic={t}")),
        (404, r#"{"message":"TOPIC_NOT_FOUND"}"#.to_owned())
    );
    // An ephemeral topic goes with its last channel.
    let eph = format!("{t}#ephemeral");
    let q = eph.replace('#', "%23");
    assert_eq!(
        post(http, &format!("/channel/create?topic={q}&channel=c")).0,
        404
    );
    assert_eq!(post(http, &format!("/topic/create?topic={q}")).0, 200);
    assert_eq!(
        post(http, &format!("/channel/create?topic={q}&channel=c")).0,
        200
    );
    assert_eq!(
        post(http, &format!("/channel/delete?topic={q}&channel=c")).0,
        200
    );
    assert!(wait_until(WAIT, || {
        http_get_json(http, &format!("/stats?format=json&topic={q}"))
            .is_ok_and(|(_, v)| v["topics"].is_null())
    }));
    Ok(())
}

#[test]
fn stats_report_clients_producers_and_filters_like_nsqd() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("stats_report_clients_producers_and_filters") else {
        return Ok(());
    };
    let (t, other) = (env.topic("http"), env.topic("http"));
    // A client that never sent IDENTIFY is named after its host; one that did, as it said
    // (empty when it did not say).
    let mut anon = env.raw();
    anon.subscribe(&t, "c")?;
    let mut named = env.raw();
    assert!(matches!(
        named.identify(&json!({"user_agent": "ua/1"}))?,
        RawFrame::Response(_)
    ));
    named.subscribe(&t, "c")?;
    let mut p = env.raw();
    assert_eq!(p.publish(&other, b"1")?, RawFrame::Response(b"OK".to_vec()));
    assert_eq!(
        p.mpub(&t, &[b"2", b"3"])?,
        RawFrame::Response(b"OK".to_vec())
    );
    let (_, v) = http_get_json(http, &format!("/stats?format=json&topic={t}"))?;
    let clients = v["topics"][0]["channels"][0]["clients"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ids: Vec<(Value, Value, Value)> = clients
        .iter()
        .map(|c| {
            (
                c["client_id"].clone(),
                c["hostname"].clone(),
                c["user_agent"].clone(),
            )
        })
        .collect();
    assert!(
        ids.contains(&(json!("127.0.0.1"), json!("127.0.0.1"), json!(""))),
        "{ids:?}"
    );
    assert!(
        ids.contains(&(json!(""), json!(""), json!("ua/1"))),
        "{ids:?}"
    );
    assert!(
        clients
            .iter()
            .all(|c| c["state"] == 3 && c.get("pub_counts").is_none())
    );
    assert_eq!(v["topics"][0]["message_bytes"], 2);
    // Producers: publishing clients, with pub_counts limited to the topic asked for (at most
    // one entry, as nsqd's loop stops after the first).
    let my_address = json!(p.tcp().local_addr()?.to_string());
    let mine = |v: &Value| -> Option<Value> {
        v["producers"]
            .as_array()?
            .iter()
            .find(|c| c["remote_address"] == my_address)
            .cloned()
    };
    let me = mine(&v).ok_or("the producer is listed")?;
    assert_eq!(me["pub_counts"], json!([{"topic": t, "count": 2}]));
    assert_eq!(me["state"], 0);
    let (_, v) = http_get_json(http, &format!("/stats?format=json&topic={other}"))?;
    assert_eq!(
        mine(&v).ok_or("listed")?["pub_counts"],
        json!([{"topic": other, "count": 1}])
    );
    // A channel filter that matches nothing leaves the topic out, not null.
    let (_, v) = http_get_json(
        http,
        &format!("/stats?format=json&topic={t}&channel=nosuch"),
    )?;
    assert_eq!(v["topics"], json!([]));
    // include_clients=false: null clients and producers; anything but a bool means true.
    let (_, v) = http_get_json(
        http,
        &format!("/stats?format=json&topic={t}&include_clients=false"),
    )?;
    assert_eq!(
        (
            v["topics"][0]["channels"][0]["clients"].clone(),
            v["producers"].clone()
        ),
        (Value::Null, Value::Null)
    );
    assert_eq!(v["topics"][0]["channels"][0]["client_count"], 2);
    let (_, v) = http_get_json(
        http,
        &format!("/stats?format=json&topic={t}&include_clients=maybe&include_mem=0"),
    )?;
    assert!(v["topics"][0]["channels"][0]["clients"].is_array());
    assert!(v.get("memory").is_none());
    // Bad query encoding.
    assert_eq!(
        http_request(http, "GET", "/stats?format=json&topic=%zz", b"")?,
        (400, br#"{"message":"INVALID_REQUEST"}"#.to_vec())
    );
    Ok(())
}

#[test]
fn config_options_read_and_change_like_nsqd() {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("config_options_read_and_change_like_nsqd") else {
        return;
    };
    let req = |method: &str, target: &str, body: &[u8]| {
        let r = send(http, method, target, body);
        (
            r.status,
            r.text(),
            r.header("content-type").map(str::to_owned),
        )
    };
    let json_type = Some("application/json; charset=utf-8".to_owned());
    let text_type = Some("text/plain; charset=utf-8".to_owned());
    // Numbers and durations (nanoseconds) as JSON, strings as plain text.
    assert_eq!(
        req("GET", "/config/max_rdy_count", b""),
        (200, "2500".to_owned(), json_type.clone())
    );
    assert_eq!(
        req("GET", "/config/msg_timeout", b""),
        (200, "60000000000".to_owned(), json_type.clone())
    );
    assert_eq!(
        req("GET", "/config/snappy", b""),
        (200, "true".to_owned(), json_type.clone())
    );
    assert_eq!(
        req("GET", "/config/log_prefix", b""),
        (200, "[nsqd] ".to_owned(), text_type)
    );
    assert_eq!(
        req("GET", "/config/statsd_address", b""),
        (200, String::new(), None)
    );
    assert_eq!(
        req("GET", "/config/tcp_address", b"").1,
        env.tcp_address().to_string()
    );
    for unknown in [
        "client_timeout",
        "queue_scan_interval",
        "LOG_LEVEL",
        "logger",
    ] {
        assert_eq!(
            req("GET", &format!("/config/{unknown}"), b"").0,
            400,
            "{unknown}"
        );
    }
    // log_level takes a level name, any case.
    assert_eq!(req("PUT", "/config/log_level", b"WARN").1, "3");
    assert_eq!(req("GET", "/config/log_level", b"").1, "3");
    assert_eq!(req("PUT", "/config/log_level", b"info").1, "2");
    assert_eq!(
        req("PUT", "/config/log_level", b"debug\n").1,
        r#"{"message":"INVALID_VALUE"}"#
    );
    // nsqlookupd_tcp_addresses takes a JSON array; null makes it null.
    let before = req("GET", "/config/nsqlookupd_tcp_addresses", b"").1;
    assert_eq!(
        req("PUT", "/config/nsqlookupd_tcp_addresses", b"null").1,
        "null"
    );
    assert_eq!(
        req("PUT", "/config/nsqlookupd_tcp_addresses", b"[1]"),
        (400, r#"{"message":"INVALID_VALUE"}"#.to_owned(), json_type)
    );
    assert_eq!(
        req("PUT", "/config/nsqlookupd_tcp_addresses", before.as_bytes()).1,
        before
    );
    // Only those two can be changed; the body is checked first.
    assert_eq!(req("PUT", "/config/max_rdy_count", b"5").0, 400);
    assert_eq!(req("PUT", "/config/max_rdy_count", b"").0, 413);
}

#[test]
fn routing_redirects_and_options_like_httprouter() {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("routing_redirects_and_options_like_httprouter") else {
        return;
    };
    let r = send(http, "GET", "/ping/", b"");
    assert_eq!((r.status, r.header("location")), (301, Some("/ping")));
    assert_eq!(r.text(), "<a href=\"/ping\">Moved Permanently</a>.\n\n");
    let r = send(http, "POST", "/Topic/Create?topic=x", b"");
    assert_eq!(
        (r.status, r.header("location"), r.body.len()),
        (307, Some("/topic/create?topic=x"), 0)
    );
    assert_eq!(send(http, "GET", "/p%69ng", b"").text(), "OK");
    let r = send(http, "OPTIONS", "/config/x", b"");
    assert_eq!(
        (r.status, r.header("allow"), r.body.len()),
        (200, Some("GET, OPTIONS, PUT"), 0)
    );
    let r = send(http, "HEAD", "/ping", b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, OPTIONS")));
    assert_eq!(send(http, "GET", "/config/", b"").status, 404);
    // A query that does not parse only matters to handlers that read it.
    assert_eq!(send(http, "GET", "/ping?a=%zz", b"").text(), "OK");
    assert_eq!(
        send(http, "POST", "/topic/create?topic=a;b", b"").text(),
        r#"{"message":"INVALID_REQUEST"}"#
    );
}

#[test]
fn tombstones_hide_a_producer_for_the_tombstone_lifetime() -> R {
    let lookupd = Lookupd::start()?;
    lookupd.set_tombstone_lifetime(Duration::from_millis(300));
    let nsqd = Nsqd::builder().http(true).lookupd(&lookupd).start()?;
    let addr = lookupd.http_address();
    nsqd.publish("tomb", b"x");
    nsqd.publish("other", b"x");
    let node = format!("127.0.0.1:{}", nsqd.http_address().ok_or("http")?.port());
    assert_eq!(
        post(addr, &format!("/topic/tombstone?topic=tomb&node={node}")).0,
        200
    );
    // Hidden from /lookup of that topic only; /nodes shows the tombstone.
    assert!(lookupd.producers("tomb").is_empty());
    assert_eq!(lookupd.producers("other").len(), 1);
    let (_, nodes) = http_get_json(addr, "/nodes")?;
    let node_entry = &nodes["producers"][0];
    let topics = node_entry["topics"].as_array().ok_or("topics")?;
    let i = topics.iter().position(|t| t == "tomb").ok_or("tomb")?;
    assert_eq!(node_entry["tombstones"][i], true);
    // Back once the lifetime is over.
    assert!(wait_until(WAIT, || lookupd.producers("tomb").len() == 1));
    let (_, nodes) = http_get_json(addr, "/nodes")?;
    assert_eq!(nodes["producers"][0]["tombstones"], json!([false, false]));
    // A topic deletion removes the registration and its channels; the producer stays a node.
    nsqd.publish("gone", b"x");
    assert_eq!(post(addr, "/topic/delete?topic=gone").0, 200);
    assert_eq!(http_get_json(addr, "/lookup?topic=gone")?.0, 404);
    assert_eq!(
        post(addr, "/channel/delete?topic=tomb&channel=nosuch"),
        (404, r#"{"message":"CHANNEL_NOT_FOUND"}"#.to_owned())
    );
    // Only the handlers that read the query refuse one that does not parse.
    assert_eq!(http_get_json(addr, "/topics?x=%zz")?.0, 200);
    assert_eq!(http_get_json(addr, "/nodes?x=%zz")?.0, 200);
    assert_eq!(
        http_get_json(addr, "/lookup?topic=%zz")?,
        (400, json!({"message": "INVALID_REQUEST"}))
    );
    let r = send(addr, "OPTIONS", "/topic/tombstone", b"");
    assert_eq!((r.status, r.header("allow")), (200, Some("OPTIONS, POST")));
    Ok(())
}

#[test]
fn tls_required_refuses_plain_http_like_nsqd() -> R {
    let nsqd = Nsqd::builder().tls_required(true).http(true).start()?;
    let r = send(nsqd.http_address().ok_or("http")?, "GET", "/ping", b"");
    assert_eq!(
        (r.status, r.text()),
        (
            403,
            r#"{"message": "TLS_REQUIRED", "https_port": 0}"#.to_owned()
        )
    );
    Ok(())
}

#[test]
fn stats_describe_tls_and_auth_like_nsqd() -> R {
    use nsq_test_broker::{AuthGrant, AuthTable, Authorization, TestPki};
    let nsqd = Nsqd::builder()
        .tls(true)
        .auth(AuthTable::new().with(
            "s3cret",
            AuthGrant {
                identity_url: "https://id.example/u".to_owned(),
                ..AuthGrant::new("someone", vec![Authorization::all()])
            },
        ))
        .http(true)
        .start()?;
    let http = nsqd.http_address().ok_or("http")?;
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    let reply = c.identify_negotiate(&json!({"tls_v1": true}))?;
    assert_eq!(reply["tls_v1"], true);
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    c.cmd_body("AUTH", b"s3cret")?;
    assert!(matches!(
        c.read_frame_skip_heartbeats()?,
        RawFrame::Response(_)
    ));
    c.subscribe("secure", "c")?;
    let s = channel_stats(http, "secure", "c");
    let client = &s["clients"][0];
    assert_eq!(client["tls"], true);
    // Go names only a few TLS 1.2 suites; rustls negotiates TLS 1.3 here, which Go shows
    // as "Unknown <number>".
    assert_eq!(client["tls_version"], "TLS1.3");
    assert!(
        client["tls_cipher_suite"]
            .as_str()
            .is_some_and(|s| s.starts_with("Unknown 48")),
        "{client}"
    );
    assert_eq!(client["tls_negotiated_protocol"], "");
    assert_eq!(client["tls_negotiated_protocol_is_mutual"], true);
    assert_eq!(client["authed"], true);
    assert_eq!(client["auth_identity"], "someone");
    assert_eq!(client["auth_identity_url"], "https://id.example/u");
    assert_eq!(client["client_id"], "raw");
    Ok(())
}
