//! Replays every file of every committed fuzz corpus (`fuzz/corpus/<target>/`) through the same
//! entry points the cargo-fuzz targets call, so CI exercises them on stable Rust.
//!
//! Adding a fuzz target: add its entry point to `nsq_proto::fuzzing`, its file under
//! `fuzz/fuzz_targets/`, a corpus directory, and one line to [`TARGETS`].
//!
//! The hand-written seeds are defined in [`seeds`]; `seed_corpus_is_committed` checks that each
//! is in the corpus. After editing them, regenerate the files with
//! `NSQ_FUZZ_WRITE_SEEDS=1 cargo test -p nsq-proto --test fuzz_corpus`.

use nsq_proto::fuzzing;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// A fuzzing entry point.
type Entry = fn(&[u8]);

/// Every fuzz target: its name (= its corpus directory and its `fuzz_targets/<name>.rs`) and
/// its entry point.
const TARGETS: &[(&str, Entry)] = &[
    ("frame_stream", fuzzing::frame_stream),
    ("identify_reply", fuzzing::identify_reply),
    ("lookup_reply", fuzzing::lookup_reply),
    ("connection", fuzzing::connection),
    ("consumer_ops", fuzzing::consumer_ops),
    ("producer_ops", fuzzing::producer_ops),
    ("config_json", fuzzing::config_json),
    ("http_exchange", fuzzing::http_exchange),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn corpus_dir(target: &str) -> PathBuf {
    fuzz_dir().join("corpus").join(target)
}

/// The files of a directory, sorted, skipping dotfiles.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}

#[test]
fn replay_every_corpus_file() {
    let mut failures = Vec::new();
    for &(target, entry) in TARGETS {
        let corpus = files(&corpus_dir(target));
        assert!(!corpus.is_empty(), "the {target} corpus is empty");
        for path in corpus {
            let data = std::fs::read(&path).unwrap();
            if catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err() {
                failures.push(path.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "corpus files that fail: {failures:#?}");
}

#[test]
fn every_target_is_replayed() {
    // Every corpus directory and every fuzz target file has a line in TARGETS.
    let names = |dir: PathBuf, strip: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .map(|name| name.trim_end_matches(strip).to_string())
            .collect();
        names.sort();
        names
    };
    let mut known: Vec<String> = TARGETS
        .iter()
        .map(|(name, _)| (*name).to_string())
        .collect();
    known.sort();
    assert_eq!(names(fuzz_dir().join("corpus"), ""), known);
    assert_eq!(names(fuzz_dir().join("fuzz_targets"), ".rs"), known);
}

// ---------------------------------------------------------------------------------------------
// Seeds

/// A frame as nsqd writes it: size, type, data.
fn frame(frame_type: u32, data: &[u8]) -> Vec<u8> {
    let mut out = (4 + data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&frame_type.to_be_bytes());
    out.extend_from_slice(data);
    out
}

fn message(attempts: u16, id: &[u8; 16], body: &[u8]) -> Vec<u8> {
    let mut data = 1_700_000_000_123_456_789i64.to_be_bytes().to_vec();
    data.extend_from_slice(&attempts.to_be_bytes());
    data.extend_from_slice(id);
    data.extend_from_slice(body);
    frame(2, &data)
}

/// `frame_stream` input: control byte (low 4 bits: number of chunk sizes; bit 4: 256-byte
/// frame limit), the chunk sizes, then the stream.
fn chunked(control: u8, sizes: &[u8], stream: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![control];
    out.extend_from_slice(sizes);
    for part in stream {
        out.extend_from_slice(part);
    }
    out
}

/// `lookup_reply` input: a big-endian u16 HTTP status, then the body.
fn http(status: u16, body: &[u8]) -> Vec<u8> {
    let mut out = status.to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

const IDENTIFY_V1_3_0: &[u8] = br#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":0,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#;

/// The hand-written seed corpus: (target, file name, contents).
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let id = b"0a1b2c3d4e5f6789";
    vec![
        (
            "frame_stream",
            "session",
            chunked(
                0x03,
                &[1, 7, 13],
                &[
                    frame(0, IDENTIFY_V1_3_0),
                    frame(0, b"OK"),
                    frame(0, b"_heartbeat_"),
                    message(1, id, b"hello"),
                    message(2, b"0a1b2c3d4e5f678a", &[0, b'\n', 0xff]),
                    frame(1, b"E_FIN_FAILED FIN 0a1b2c3d4e5f6789 failed"),
                    frame(0, b"CLOSE_WAIT"),
                ],
            ),
        ),
        (
            "frame_stream",
            "partial_tail",
            chunked(0x01, &[5], &[frame(0, b"OK"), message(1, id, b"cut")[..20].to_vec()]),
        ),
        (
            "frame_stream",
            "too_large_small_limit",
            chunked(0x10, &[], &[frame(0, b"OK"), message(1, id, &[b'x'; 300])]),
        ),
        (
            "frame_stream",
            "http_port",
            chunked(0x00, &[], &[b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()]),
        ),
        (
            "frame_stream",
            "unknown_type",
            chunked(0x01, &[2], &[frame(0, b"OK"), frame(5, b"??")]),
        ),
        (
            "frame_stream",
            "short_message",
            chunked(0x00, &[], &[frame(2, &[0; 25])]),
        ),
        (
            "frame_stream",
            "fatal_error",
            chunked(0x00, &[], &[frame(1, b"E_INVALID cannot SUB in current state")]),
        ),
        ("identify_reply", "plain_ok", b"OK".to_vec()),
        ("identify_reply", "nsqd_1_3_0", IDENTIFY_V1_3_0.to_vec()),
        (
            "identify_reply",
            "tls_auth_unknown_fields",
            br#"{"max_rdy_count":100,"version":"1.3.0","tls_v1":true,"snappy":true,"auth_required":true,"future":{"a":[1,2]},"msg_timeout":5000}"#.to_vec(),
        ),
        (
            "identify_reply",
            "auth",
            br#"{"identity":"bob","identity_url":"https://auth.example/bob","permission_count":3}"#
                .to_vec(),
        ),
        ("identify_reply", "truncated", br#"{"max_rdy_count":"#.to_vec()),
        (
            "lookup_reply",
            "flat_v1",
            http(
                200,
                br#"{"channels":["archive"],"producers":[{"remote_address":"127.0.0.1:51234","hostname":"nsqd-1","broadcast_address":"nsqd-1.local","tcp_port":4150,"http_port":4151,"version":"1.3.0"},{"broadcast_address":"::1","tcp_port":4250,"http_port":4251}]}"#,
            ),
        ),
        (
            "lookup_reply",
            "envelope",
            http(
                200,
                br#"{"status_code":200,"status_txt":"OK","data":{"channels":[],"producers":[{"broadcast_address":"10.0.0.5","tcp_port":4150}]}}"#,
            ),
        ),
        (
            "lookup_reply",
            "not_found",
            http(404, br#"{"message":"TOPIC_NOT_FOUND"}"#),
        ),
        (
            "lookup_reply",
            "server_error",
            http(500, br#"{"message":"INTERNAL_ERROR"}"#),
        ),
        (
            "lookup_reply",
            "bad_port",
            http(
                200,
                br#"{"status_code":200,"status_txt":"OK","data":{"channels":[],"producers":[{"broadcast_address":"a","tcp_port":70000}]}}"#,
            ),
        ),
    ]
}

#[test]
fn seed_corpus_is_committed() {
    let write = std::env::var_os("NSQ_FUZZ_WRITE_SEEDS").is_some();
    for (target, name, data) in seeds() {
        let dir = corpus_dir(target);
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &data).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "seed {} missing ({e}); regenerate with NSQ_FUZZ_WRITE_SEEDS=1",
                path.display()
            )
        });
        assert_eq!(
            committed,
            data,
            "seed {} differs from its definition",
            path.display()
        );
    }
}
