//! The `nsq_to_file` example over the test broker: every message becomes one line in the
//! files (moved from the work dir to the output dir on the way out), each message is finished
//! only after the fsync that covers its line, and a stop hands over the partial batch, which
//! is written, synced and finished before the tool returns.

#[allow(dead_code, reason = "the example's `main` is not called here")]
#[path = "../examples/nsq_to_file.rs"]
mod nsq_to_file;

use nsq_example_cli::Flags;
use nsq_test_broker::Nsqd;
use nsq_to_file::{Tool, USAGE};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A fresh directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nsq-to-file-test-{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every line of every file under `dir`.
fn lines_in(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{}",
            path.display()
        );
        lines.extend(text.lines().map(str::to_owned));
    }
    lines.sort();
    lines
}

fn tool_for(nsqd: &Nsqd, topic: &str, out: &TempDir, work: &TempDir, extra: &[&str]) -> Tool {
    let mut args = vec![
        format!("--nsqd-tcp-address={}", nsqd.tcp_address()),
        format!("--topic={topic}"),
        format!("--output-dir={}", out.0.display()),
        format!("--work-dir={}", work.0.display()),
        "--stats-interval=0".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let flags = Flags::parse_from(args, &USAGE).unwrap();
    Tool::from_flags(&flags).unwrap()
}

/// Runs `f` on a multi-threaded runtime, failing if it takes over 30 s.
fn run(f: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), f)
                .await
                .expect("finished in time");
        });
}

/// Resolves once the channel satisfies `pred`.
async fn until(nsqd: &Nsqd, topic: &str, pred: impl Fn(&nsq_test_broker::ChannelStats) -> bool) {
    loop {
        if nsqd.channel(topic, "nsq_to_file").is_some_and(|c| pred(&c)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn every_message_is_a_line_finished_only_after_its_sync() {
    let nsqd = Nsqd::start().unwrap();
    let (out, work) = (TempDir::new("out"), TempDir::new("work"));
    let total = 1000;
    let mut expected: Vec<String> = (0..total).map(|i| format!("line {i:05}")).collect();
    for line in &expected {
        nsqd.publish("logs", line.as_bytes());
    }
    let mut tool = tool_for(
        &nsqd,
        "logs",
        &out,
        &work,
        &["--max-in-flight=64", "--batch-linger=50ms", "--gzip=false"],
    );
    // When each fsync returned, and how many lines were durable then.
    let synced: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
    let log = synced.clone();
    tool.on_sync = Some(Arc::new(move |lines| {
        let mut log = log.lock().unwrap();
        let before = log.last().map_or(0, |&(_, n)| n);
        log.push((Instant::now(), before + lines));
    }));
    run(async {
        let finished = until(&nsqd, "logs", |c| c.finished == total as u64);
        tool.run(finished).await.unwrap();
    });
    // Every line once, in the output dir; nothing left in the work dir.
    expected.sort();
    assert_eq!(lines_in(&out.0), expected);
    assert!(lines_in(&work.0).is_empty());
    // At every FIN, at least as many lines were already synced as messages finished.
    let synced = synced.lock().unwrap().clone();
    let fins: Vec<Instant> = nsqd
        .commands()
        .iter()
        .filter(|c| c.name() == "FIN")
        .map(|c| c.at)
        .collect();
    assert_eq!(fins.len(), total);
    for (i, at) in fins.iter().enumerate() {
        let durable = synced
            .iter()
            .take_while(|(t, _)| t <= at)
            .last()
            .map_or(0, |&(_, n)| n);
        assert!(durable > i, "FIN #{i} with only {durable} lines synced");
    }
    // Batches of up to 64 (max-in-flight), not one sync per message.
    assert!(synced.len() < total / 4, "{} syncs", synced.len());
    let c = nsqd.channel("logs", "nsq_to_file").unwrap();
    assert_eq!((c.requeued, c.timed_out, c.in_flight), (0, 0, 0));
}

#[test]
fn a_stop_writes_syncs_and_finishes_the_partial_batch() {
    let nsqd = Nsqd::start().unwrap();
    let (out, work) = (TempDir::new("out"), TempDir::new("work"));
    for i in 0..30 {
        nsqd.publish("partial", format!("held {i:02}").as_bytes());
    }
    // The batch could take 100 and lingers 20 s: what it gathered of the 30 is held in it
    // until the stop hands it over.
    let tool = tool_for(
        &nsqd,
        "partial",
        &out,
        &work,
        &[
            "--max-in-flight=100",
            "--batch-linger=20s",
            "--gzip",
            "--gzip-level=1",
        ],
    );
    run(async {
        let held = until(&nsqd, "partial", |c| c.in_flight == 30);
        tool.run(held).await.unwrap();
    });
    // What the partial batch held was written, synced and finished (nothing else could be:
    // the batch lingers 20 s); what had reached the client but not the batch yet went back.
    let c = nsqd.channel("partial", "nsq_to_file").unwrap();
    assert!(c.finished >= 1, "{c:?}");
    assert_eq!((c.finished + c.requeued, c.in_flight), (30, 0), "{c:?}");
    let files: Vec<PathBuf> = std::fs::read_dir(&out.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("partial.") && name.contains("-000000.") && name.ends_with(".log.gz"),
        "{name}"
    );
    assert_eq!(gz_lines(&files[0]).len() as u64, c.finished);
    // A second run takes the rest (the file after it gets the next <REV>): every message is
    // in the files once.
    let tool = tool_for(
        &nsqd,
        "partial",
        &out,
        &work,
        &["--batch-linger=10ms", "--gzip"],
    );
    run(async {
        let drained = until(&nsqd, "partial", |c| c.finished == 30);
        tool.run(drained).await.unwrap();
    });
    let mut lines: Vec<String> = std::fs::read_dir(&out.0)
        .unwrap()
        .flat_map(|e| gz_lines(&e.unwrap().path()))
        .collect();
    lines.sort_unstable();
    let expected: Vec<String> = (0..30).map(|i| format!("held {i:02}")).collect();
    assert_eq!(lines, expected);
}

fn gz_lines(path: &Path) -> Vec<String> {
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap()),
        &mut text,
    )
    .unwrap();
    text.lines().map(str::to_owned).collect()
}

#[test]
fn without_topic_the_lookupds_matching_topics_are_found_and_written() {
    let lookupd = nsq_test_broker::Lookupd::start().unwrap();
    let nsqd = Nsqd::builder()
        .http(true)
        .lookupd(&lookupd)
        .start()
        .unwrap();
    let dir = TempDir::new("discovered");
    for topic in ["app_a", "app_b", "other"] {
        for i in 0..20 {
            nsqd.publish(topic, format!("{topic} {i:02}").as_bytes());
        }
    }
    let args = [
        format!("--lookupd-http-address={}", lookupd.http_address()),
        "--topic-pattern=^app_".to_owned(),
        "--topic-refresh=50ms".to_owned(),
        "--batch-linger=10ms".to_owned(),
        "--stats-interval=0".to_owned(),
        format!("--output-dir={}", dir.0.display()),
    ];
    let tool = Tool::from_flags(&Flags::parse_from(args, &USAGE).unwrap()).unwrap();
    run(async {
        let both = async {
            until(&nsqd, "app_a", |c| c.finished == 20).await;
            until(&nsqd, "app_b", |c| c.finished == 20).await;
        };
        tool.run(both).await.unwrap();
    });
    let mut expected: Vec<String> = ["app_a", "app_b"]
        .iter()
        .flat_map(|t| (0..20).map(move |i| format!("{t} {i:02}")))
        .collect();
    expected.sort();
    assert_eq!(lines_in(&dir.0), expected);
    // The topic that does not match was left alone: no channel, no file.
    assert!(nsqd.channel("other", "nsq_to_file").is_none());
}

#[test]
fn flags_are_checked_as_the_official_tool_does() {
    let refused = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        match Tool::from_flags(&Flags::parse_from(args, &USAGE).unwrap()) {
            Err(e) => e,
            Ok(_) => panic!("accepted"),
        }
    };
    assert_eq!(
        refused(&["--topic=t"]),
        "--nsqd-tcp-address or --lookupd-http-address required."
    );
    assert_eq!(
        refused(&["--nsqd-tcp-address=a:1"]),
        "--topic or --topic-pattern required"
    );
    assert_eq!(
        refused(&["--nsqd-tcp-address=a:1", "--topic-pattern=x"]),
        "--lookupd-http-address must be specified when no --topic specified"
    );
    assert_eq!(
        refused(&["--nsqd-tcp-address=a:1", "--topic=t", "--gzip-level=0"]),
        "invalid --gzip-level value (0), should be 1-9"
    );
    assert_eq!(
        refused(&[
            "--nsqd-tcp-address=a:1",
            "--topic=t",
            "--gzip",
            "--filename-format=<TOPIC>.log"
        ]),
        "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
    );
}
