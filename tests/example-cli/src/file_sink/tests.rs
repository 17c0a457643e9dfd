use super::*;
use std::io::BufRead;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

/// 2026-11-28 15:04:05 UTC, a Saturday.
const T0: u64 = 1_795_878_245;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// A fresh directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nsq-file-sink-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn opts(dir: &Path) -> SinkOptions {
    SinkOptions {
        output_dir: dir.to_path_buf(),
        work_dir: dir.to_path_buf(),
        ..SinkOptions::default()
    }
}

fn sink(opts: SinkOptions) -> (FileSink, Arc<Mutex<Vec<String>>>) {
    let template = filename_template(&opts, "t", "box.example.com", 42).unwrap();
    let logged = Arc::new(Mutex::new(Vec::new()));
    let log = logged.clone();
    let sink = FileSink::new(
        opts,
        template,
        Box::new(move |line: &str| log.lock().unwrap().push(line.to_owned())),
    );
    (sink, logged)
}

/// The files of `dir` (names, sorted) with their contents.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn names(dir: &Path) -> Vec<String> {
    files(dir).into_iter().map(|(n, _)| n).collect()
}

fn lines(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|l| l.as_bytes().to_vec()).collect()
}

fn write(sink: &mut FileSink, now: SystemTime, list: &[&str]) {
    let bodies = lines(list);
    sink.write_lines(now, bodies.iter().map(Vec::as_slice))
        .unwrap();
}

#[test]
fn filename_template_as_the_official_tool() {
    let dir = Path::new("/out");
    let plain = opts(dir);
    assert_eq!(
        filename_template(&plain, "events", "box.example.com", 7).unwrap(),
        "events.box.<DATETIME>.log"
    );
    let gz = SinkOptions {
        gzip_level: Some(6),
        ..plain.clone()
    };
    assert_eq!(
        filename_template(&gz, "events", "box", 7).unwrap(),
        "events.box<REV>.<DATETIME>.log.gz"
    );
    let work = SinkOptions {
        work_dir: PathBuf::from("/work"),
        filename_format: "<TOPIC>/<PID>-<HOST>.<DATETIME>.log".to_owned(),
        ..plain.clone()
    };
    assert_eq!(
        filename_template(&work, "events", "box", 7).unwrap_err(),
        "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
    );
    let ident = SinkOptions {
        host_identifier: "<SHORT_HOST>@<HOSTNAME>".to_owned(),
        filename_format: "<HOST>-<PID>.gz".to_owned(),
        gzip_level: Some(1),
        rotate_size: 1,
        ..plain
    };
    assert!(filename_template(&ident, "t", "a.b.c", 9).is_err());
    let ident = SinkOptions {
        filename_format: "<HOST>-<PID><REV>.gz".to_owned(),
        ..ident
    };
    assert_eq!(
        filename_template(&ident, "t", "a.b.c", 9).unwrap(),
        "a@a.b.c-9<REV>.gz"
    );
}

#[test]
fn strftime_has_the_go_tools_directives() {
    let t = at(T0);
    assert_eq!(strftime("%Y-%m-%d_%H", t), "2026-11-28_15");
    assert_eq!(
        strftime("%A %a %B %b %d %I:%M:%S %p %y %Z %z %% %q %", t),
        "Saturday Sat November Nov 28 03:04:05 PM 26 UTC +0000 % %q %"
    );
    assert_eq!(
        strftime("%Y%m%d %I%p %a", at(1_709_164_800)),
        "20240229 12AM Thu"
    );
    assert_eq!(
        strftime("%Y-%m-%d %H:%M:%S", UNIX_EPOCH),
        "1970-01-01 00:00:00"
    );
}

#[test]
fn plain_lines_are_appended_and_a_cut_line_is_ended() {
    let dir = TempDir::new();
    let (mut s, _) = sink(opts(&dir.0));
    write(&mut s, at(T0), &["one", "", "three"]);
    s.sync().unwrap();
    assert_eq!(s.counts().syncs, 1);
    // A sync with nothing new is no fsync.
    s.sync().unwrap();
    assert_eq!(s.counts().syncs, 1);
    s.close().unwrap();
    let name = "t.box.2026-11-28_15.log";
    assert_eq!(
        files(&dir.0),
        [(name.to_owned(), b"one\n\nthree\n".to_vec())]
    );
    // A process killed in a write left a cut line: the next one appends after a `\n`.
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.0.join(name))
        .unwrap();
    f.write_all(b"fou").unwrap();
    let (mut s, logged) = sink(opts(&dir.0));
    write(&mut s, at(T0 + 1), &["four", "five"]);
    s.close().unwrap();
    assert_eq!(
        files(&dir.0),
        [(name.to_owned(), b"one\n\nthree\nfou\nfour\nfive\n".to_vec())]
    );
    assert!(
        logged
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("ending the cut last line")),
        "{logged:?}"
    );
    assert_eq!(s.counts().lines, 2);
}

#[test]
fn rotation_by_size_bumps_rev() {
    let dir = TempDir::new();
    let (mut s, _) = sink(SinkOptions {
        rotate_size: 10,
        ..opts(&dir.0)
    });
    // Each line is 6 bytes: a file passes 10 bytes with its second line, and the third
    // goes to the next file.
    write(
        &mut s,
        at(T0),
        &["line1", "line2", "line3", "line4", "line5"],
    );
    s.close().unwrap();
    assert_eq!(
        files(&dir.0),
        [
            (
                "t.box-000000.2026-11-28_15.log".to_owned(),
                b"line1\nline2\n".to_vec()
            ),
            (
                "t.box-000001.2026-11-28_15.log".to_owned(),
                b"line3\nline4\n".to_vec()
            ),
            (
                "t.box-000002.2026-11-28_15.log".to_owned(),
                b"line5\n".to_vec()
            ),
        ]
    );
    assert_eq!(s.counts().files, 3);
    // A restart skips files already over the size (appending to the last one).
    let (mut s, _) = sink(SinkOptions {
        rotate_size: 10,
        ..opts(&dir.0)
    });
    write(&mut s, at(T0), &["line6"]);
    s.close().unwrap();
    assert_eq!(files(&dir.0)[2].1, b"line5\nline6\n");
}

#[test]
fn rotation_by_interval_and_by_datetime() {
    let dir = TempDir::new();
    let (mut s, _) = sink(SinkOptions {
        rotate_interval: Duration::from_secs(60),
        datetime_format: "%H".to_owned(),
        ..opts(&dir.0)
    });
    write(&mut s, at(T0), &["a"]);
    write(&mut s, at(T0 + 60), &["b"]);
    write(&mut s, at(T0 + 61), &["c"]);
    // 15:59:59 then 16:00:00: a new name, REV back to 0.
    write(&mut s, at(1_795_881_599), &["d"]);
    write(&mut s, at(1_795_881_600), &["e"]);
    s.close().unwrap();
    assert_eq!(
        files(&dir.0),
        [
            ("t.box-000000.15.log".to_owned(), b"a\nb\n".to_vec()),
            ("t.box-000000.16.log".to_owned(), b"e\n".to_vec()),
            ("t.box-000001.15.log".to_owned(), b"c\n".to_vec()),
            ("t.box-000002.15.log".to_owned(), b"d\n".to_vec()),
        ]
    );
}

#[test]
fn work_dir_files_move_to_the_output_dir_without_overwriting() {
    let work = TempDir::new();
    let out = TempDir::new();
    let o = SinkOptions {
        output_dir: out.0.clone(),
        work_dir: work.0.clone(),
        filename_format: "<TOPIC>/<HOST><REV>.log".to_owned(),
        ..SinkOptions::default()
    };
    let topic_out = out.0.join("t");
    fs::create_dir_all(&topic_out).unwrap();
    fs::write(topic_out.join("box-000000.log"), b"old\n").unwrap();
    let (mut s, _) = sink(o.clone());
    // -000000 exists in the output dir: the work file is -000001.
    write(&mut s, at(T0), &["x"]);
    assert_eq!(s.path(), Some(work.0.join("t/box-000001.log").as_path()));
    s.sync().unwrap();
    assert_eq!(names(&work.0.join("t")), ["box-000001.log"]);
    // Someone else takes -000001 in the output dir meanwhile: the move goes to -000002.
    fs::write(topic_out.join("box-000001.log"), b"other\n").unwrap();
    s.close().unwrap();
    assert!(names(&work.0.join("t")).is_empty());
    assert_eq!(
        files(&topic_out),
        [
            ("box-000000.log".to_owned(), b"old\n".to_vec()),
            ("box-000001.log".to_owned(), b"other\n".to_vec()),
            ("box-000002.log".to_owned(), b"x\n".to_vec()),
        ]
    );
}

#[test]
fn gzip_members_end_at_each_sync() {
    let dir = TempDir::new();
    let (mut s, _) = sink(SinkOptions {
        gzip_level: Some(6),
        ..opts(&dir.0)
    });
    write(&mut s, at(T0), &["first", "second"]);
    s.sync().unwrap();
    write(&mut s, at(T0), &["third"]);
    s.sync().unwrap();
    s.close().unwrap();
    let all = files(&dir.0);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].0, "t.box-000000.2026-11-28_15.log.gz");
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(all[0].1.as_slice())
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, "first\nsecond\nthird\n");
    // The first member holds exactly the first sync's lines.
    let mut first = String::new();
    flate2::read::GzDecoder::new(all[0].1.as_slice())
        .read_to_string(&mut first)
        .unwrap();
    assert_eq!(first, "first\nsecond\n");
    // A second sink does not append to a gzip file: it takes the next REV.
    let (mut s, _) = sink(SinkOptions {
        gzip_level: Some(1),
        ..opts(&dir.0)
    });
    write(&mut s, at(T0), &["fourth"]);
    s.close().unwrap();
    assert_eq!(
        names(&dir.0),
        [
            "t.box-000000.2026-11-28_15.log.gz",
            "t.box-000001.2026-11-28_15.log.gz"
        ]
    );
    // A file cut in the middle of its last member still gives every synced line.
    let cut = &all[0].1[..all[0].1.len() - 5];
    let mut reader = std::io::BufReader::new(flate2::read::MultiGzDecoder::new(cut));
    let mut got = Vec::new();
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        got.push(std::mem::take(&mut line));
    }
    assert!(
        got.starts_with(&["first\n".to_owned(), "second\n".to_owned()]),
        "{got:?}"
    );
}

#[test]
fn ticks_open_empty_files_unless_skipped() {
    let dir = TempDir::new();
    let (mut s, _) = sink(SinkOptions {
        rotate_interval: Duration::from_secs(10),
        ..opts(&dir.0)
    });
    s.tick(at(T0)).unwrap();
    assert_eq!(names(&dir.0), ["t.box-000000.2026-11-28_15.log"]);
    s.tick(at(T0 + 5)).unwrap();
    s.tick(at(T0 + 11)).unwrap();
    assert_eq!(s.counts().files, 2);
    s.close().unwrap();

    let dir = TempDir::new();
    let (mut s, _) = sink(SinkOptions {
        rotate_interval: Duration::from_secs(10),
        skip_empty_files: true,
        ..opts(&dir.0)
    });
    s.tick(at(T0)).unwrap();
    assert!(names(&dir.0).is_empty());
    write(&mut s, at(T0), &["a"]);
    s.tick(at(T0 + 11)).unwrap();
    // Rotated by the clock: closed, and no empty file opened after it.
    assert_eq!(s.path(), None);
    assert_eq!(
        files(&dir.0),
        [("t.box-000000.2026-11-28_15.log".to_owned(), b"a\n".to_vec())]
    );
}
