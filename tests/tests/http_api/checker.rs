//! The checker: a reply against its fixture, by status line, headers, chunking and the body
//! (JSON by shape, key order and every stable value; nsqd's text `/stats` with the
//! run-dependent numbers blanked).

use std::path::PathBuf;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use crate::raw::Reply;

pub(crate) fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../nsq-proto/tests/fixtures/http")
        .join(name)
}

pub(crate) fn fixture(name: &str) -> Reply {
    let path = fixture_path(&format!("{name}.http"));
    Reply::parse(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
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
pub(crate) fn check(name: &str, got: &Reply) {
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
