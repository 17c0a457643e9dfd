//! nsq-tokio's `nsq_to_file`: nsq's `nsq_to_file` (v1.3.0) rebuilt on batches.
//!
//! Consumes one or more topics and writes every message body as a line to a file per topic,
//! with the official tool's flags, file names, rotation, gzip and work dir (the file side is
//! `nsq_example_cli::file_sink`). Like the official tool, a message is finished only after
//! the fsync that covers its line: no message is lost if the process dies, at worst written
//! twice.
//!
//! The official tool holds up to `--max-in-flight` messages, writes each as it arrives (two
//! `write`s per message) and syncs when 85% of them are held (go-nsq's "starved"), or every
//! `--sync-interval`. Here a batch is that unit: `run_batch` hands over up to
//! `--max-in-flight` messages (`--batch-size`), or what has arrived once nothing more can
//! (the in-flight bound), or after `--batch-linger`; the handler writes the batch with one
//! `write`, fsyncs, and returns, and only then are the batch's messages finished. While a
//! batch is held, the consumer touches its messages before nsqd's msg_timeout (the linger is
//! capped at half of it anyway). On SIGINT or SIGTERM the consumer stops and hands over its
//! partial batch, which is written, synced and finished like any other; then the files are
//! closed (and moved from the work dir).
//!
//! ```text
//! cargo run --release -p nsq-tokio --example nsq_to_file -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=events --output-dir=/var/log/nsq --gzip
//! ```
//!
//! Without `--topic`, the topics the lookupds know that match `--topic-pattern` are consumed,
//! looked up at the start and every `--topic-refresh`.
//!
//! Every `--stats-interval` (not a Go flag; default 5s) a line on stderr gives each topic's
//! rate, its batches (count, mean and largest size, what ended them) and fsyncs.
#![allow(clippy::print_stdout, reason = "a command-line tool: --version")]

mod support;

use nsq_tokio::{Batch, BatchOptions, Config, Consumer, HandlerError};
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use support::file_sink::{FileSink, SinkOptions, filename_template, hostname};
use support::{
    CONSUMER_OPT_FLAG, Flags, LOOKUPD_HTTP_ADDRESS_FLAG, NSQD_TCP_ADDRESS_FLAG, Usage, apply_opts,
    fatal, go_duration, init_logging, log, switch, value,
};

const PREFIX: &str = "nsq_to_file";

pub(crate) const USAGE: Usage = Usage {
    name: "nsq_to_file",
    about: "Consumes topics and writes every message body as a line to a file per topic, \
            finishing messages only once their lines are synced to disk.",
    flags: &[
        value("topic", "TOPIC", "nsq topic (may be given multiple times)"),
        value(
            "topic-pattern",
            "REGEX",
            "without --topic: only log topics matching the following pattern",
        ),
        value(
            "topic-refresh",
            "DURATION",
            "without --topic: how frequently the topic list should be refreshed from lookupd \
             (default: 1m)",
        ),
        value("channel", "CHANNEL", "nsq channel (default: nsq_to_file)"),
        NSQD_TCP_ADDRESS_FLAG,
        LOOKUPD_HTTP_ADDRESS_FLAG,
        value(
            "max-in-flight",
            "N",
            "max number of messages to allow in flight (default: 200)",
        ),
        CONSUMER_OPT_FLAG,
        value(
            "output-dir",
            "DIR",
            "directory to write output files to (default: /tmp)",
        ),
        value(
            "work-dir",
            "DIR",
            "directory for in-progress files before moving to output-dir",
        ),
        value(
            "filename-format",
            "FORMAT",
            "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced; \
             <REV> is increased when file already exists) (default: \
             <TOPIC>.<HOST><REV>.<DATETIME>.log)",
        ),
        value(
            "datetime-format",
            "FORMAT",
            "strftime compatible format for <DATETIME> in filename format, in UTC \
             (default: %Y-%m-%d_%H)",
        ),
        value(
            "host-identifier",
            "ID",
            "value to output in log filename in place of hostname; <SHORT_HOST> and \
             <HOSTNAME> are valid replacement tokens",
        ),
        switch("gzip", "gzip output files"),
        value(
            "gzip-level",
            "N",
            "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression) (default: 6)",
        ),
        switch("skip-empty-files", "skip writing empty files"),
        value(
            "rotate-size",
            "BYTES",
            "rotate the file when it grows bigger than rotate-size bytes (default: 0, off)",
        ),
        value(
            "rotate-interval",
            "DURATION",
            "rotate the file every duration (default: 0, off)",
        ),
        value(
            "sync-interval",
            "DURATION",
            "sync file to disk every duration (every batch is synced too) (default: 30s)",
        ),
        value(
            "batch-size",
            "N",
            "messages per batch, one write and one fsync each; not a Go flag (default: \
             --max-in-flight)",
        ),
        value(
            "batch-linger",
            "DURATION",
            "how long a batch waits to fill from its first message, at most --sync-interval; \
             not a Go flag (default: 1s)",
        ),
        value(
            "stats-interval",
            "DURATION",
            "how often to print each topic's rate and batches on stderr, 0 for never; not a \
             Go flag (default: 5s)",
        ),
        switch("version", "print version string"),
    ],
};

fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    if flags.boolean("version").unwrap_or(false) {
        println!("nsq_to_file v{} (nsq-tokio)", env!("CARGO_PKG_VERSION"));
        return;
    }
    let tool = Tool::from_flags(&flags).unwrap_or_else(|e| fatal(PREFIX, &e));
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| fatal(PREFIX, &e.to_string()));
    if let Err(e) = rt.block_on(tool.run(support::terminated())) {
        fatal(PREFIX, &e);
    }
}

/// Called after each fsync with the number of lines it made durable, before their messages
/// are finished.
pub(crate) type SyncHook = Arc<dyn Fn(usize) + Send + Sync>;

/// The tool, set up from its flags.
pub(crate) struct Tool {
    topics: Vec<String>,
    /// Without `topics`: the topics of the lookupds matching this, every `topic_refresh`.
    pattern: Option<regex::Regex>,
    topic_refresh: Duration,
    channel: String,
    nsqd: Vec<String>,
    lookupd: Vec<String>,
    config: Config,
    sink: SinkOptions,
    batch: BatchOptions,
    sync_interval: Duration,
    stats_interval: Duration,
    hostname: String,
    /// Called after each fsync (the automated test watches the order of syncs and FINs).
    pub(crate) on_sync: Option<SyncHook>,
}

impl Tool {
    /// Reads and checks the flags, as the official tool does.
    pub(crate) fn from_flags(flags: &Flags) -> Result<Tool, String> {
        let channel = flags.string("channel", "nsq_to_file");
        if channel.is_empty() {
            return Err("--channel is required".to_owned());
        }
        let nsqd = flags.all("nsqd-tcp-address");
        let lookupd = flags.all("lookupd-http-address");
        if nsqd.is_empty() && lookupd.is_empty() {
            return Err("--nsqd-tcp-address or --lookupd-http-address required.".to_owned());
        }
        if !nsqd.is_empty() && !lookupd.is_empty() {
            return Err("use --nsqd-tcp-address or --lookupd-http-address not both".to_owned());
        }
        let gzip_level: u32 = flags.number("gzip-level", 6)?;
        if !(1..=9).contains(&gzip_level) {
            return Err(format!(
                "invalid --gzip-level value ({gzip_level}), should be 1-9"
            ));
        }
        let topics = flags.all("topic");
        let pattern = flags.string("topic-pattern", "");
        if topics.is_empty() && pattern.is_empty() {
            return Err("--topic or --topic-pattern required".to_owned());
        }
        if topics.is_empty() && lookupd.is_empty() {
            return Err(
                "--lookupd-http-address must be specified when no --topic specified".to_owned(),
            );
        }
        let pattern = match pattern.as_str() {
            "" => None,
            p => Some(regex::Regex::new(p).map_err(|e| format!("--topic-pattern: {e}"))?),
        };
        let topic_refresh = flags.duration("topic-refresh", Duration::from_secs(60))?;
        if topic_refresh.is_zero() {
            return Err("--topic-refresh must be positive".to_owned());
        }
        let output_dir = flags.string("output-dir", "/tmp");
        let work_dir = match flags.string("work-dir", "") {
            w if w.is_empty() => output_dir.clone(),
            w => w,
        };
        let sink = SinkOptions {
            output_dir: output_dir.into(),
            work_dir: work_dir.into(),
            filename_format: flags.string("filename-format", "<TOPIC>.<HOST><REV>.<DATETIME>.log"),
            datetime_format: flags.string("datetime-format", "%Y-%m-%d_%H"),
            host_identifier: flags.string("host-identifier", ""),
            gzip_level: flags.boolean("gzip")?.then_some(gzip_level),
            rotate_size: flags.number("rotate-size", 0)?,
            rotate_interval: flags.duration("rotate-interval", Duration::ZERO)?,
            skip_empty_files: flags.boolean("skip-empty-files")?,
        };
        let max_in_flight: u32 = flags.number("max-in-flight", 200)?;
        let mut config = Config {
            user_agent: Some(format!(
                "nsq_to_file/nsq-tokio-{}",
                env!("CARGO_PKG_VERSION")
            )),
            ..Config::default()
        };
        apply_opts(&mut config, &flags.all("consumer-opt"))?;
        config.max_in_flight = max_in_flight;
        let sync_interval = flags.duration("sync-interval", Duration::from_secs(30))?;
        if sync_interval.is_zero() {
            return Err("--sync-interval must be positive".to_owned());
        }
        // A batch fills for at most the sync interval, and never for long against nsqd's
        // msg_timeout (auto-touch keeps it alive, but a batch is not a place to wait in).
        let msg_timeout = match config.msg_timeout {
            t if t.is_zero() => Duration::from_secs(60),
            t => t,
        };
        let linger = flags
            .duration("batch-linger", Duration::from_secs(1))?
            .min(sync_interval)
            .min(msg_timeout / 2);
        let batch = BatchOptions::new()
            .max_messages(flags.number("batch-size", max_in_flight as usize)?.max(1))
            .max_bytes(64 << 20)
            .linger(linger);
        let hostname = hostname();
        // The template is checked now, so a format without <REV> is refused before starting.
        filename_template(&sink, "topic", &hostname, std::process::id())?;
        Ok(Tool {
            topics,
            pattern,
            topic_refresh,
            channel,
            nsqd,
            lookupd,
            config,
            sink,
            batch,
            sync_interval,
            stats_interval: flags.duration("stats-interval", Duration::from_secs(5))?,
            hostname,
            on_sync: None,
        })
    }

    /// Runs until `stop` resolves (or a file cannot be written): every topic's batches are
    /// written and synced, then finished; on the way out the partial batches too, then the
    /// files are closed.
    pub(crate) async fn run(self, stop: impl Future<Output = ()>) -> Result<(), String> {
        let failed = Arc::new(tokio::sync::Notify::new());
        let error: Arc<Mutex<Option<String>>> = Arc::default();
        let mut topics = Vec::new();
        for topic in &self.topics {
            topics.push(self.start_topic(topic, &failed, &error)?);
        }
        // Without --topic, the lookupds' topics that match --topic-pattern, now and every
        // --topic-refresh (the official tool's first look is after one refresh interval).
        let cluster = if self.topics.is_empty() {
            Some(nsq_tokio::Cluster::new(self.lookupd.iter()).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let mut refresh = tokio::time::interval(self.topic_refresh);
        let mut seen = HashSet::new();
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                () = failed.notified() => break,
                _ = refresh.tick(), if cluster.is_some() => {
                    for topic in self.new_topics(cluster.as_ref(), &mut seen).await {
                        topics.push(self.start_topic(&topic, &failed, &error)?);
                    }
                }
            }
        }
        for t in &topics {
            t.consumer.stop().await;
        }
        for t in topics {
            let _ = t.run.await;
            t.ticker.abort();
            if let Some(stats) = t.stats {
                stats.abort();
            }
            let sink = t.file.sink.clone();
            let closed = tokio::task::spawn_blocking(move || lock(&sink).close()).await;
            if let Err(e) = closed.map_err(io::Error::other).and_then(|r| r) {
                return Err(format!("[{}] closing its file: {e}", t.name));
            }
            log(PREFIX, &t.file.progress.summary(&t.name));
        }
        match lock(&error).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The lookupds' topics not seen before that match `--topic-pattern`.
    async fn new_topics(
        &self,
        cluster: Option<&nsq_tokio::Cluster>,
        seen: &mut HashSet<String>,
    ) -> Vec<String> {
        let Some(cluster) = cluster else {
            return Vec::new();
        };
        let found = cluster.topics().await;
        for failure in &found.failures {
            log(
                PREFIX,
                &format!("ERROR: could not retrieve topic list: {failure}"),
            );
        }
        let mut new = Vec::new();
        for topic in found.value {
            if !seen.insert(topic.clone()) {
                continue;
            }
            match &self.pattern {
                Some(p) if !p.is_match(&topic) => log(
                    PREFIX,
                    &format!("WARN: skipping topic {topic} (doesn't match pattern {p})"),
                ),
                _ => {
                    log(PREFIX, &format!("new topic {topic}: adding a consumer"));
                    new.push(topic);
                }
            }
        }
        new
    }

    /// One topic: its consumer running batches into its file, its sync-interval ticker, its
    /// progress lines.
    fn start_topic(
        &self,
        topic: &str,
        failed: &Arc<tokio::sync::Notify>,
        error: &Arc<Mutex<Option<String>>>,
    ) -> Result<Running, String> {
        let template = filename_template(&self.sink, topic, &self.hostname, std::process::id())?;
        let name = format!("{topic}/{}", self.channel);
        let log_name = name.clone();
        let sink = FileSink::new(
            self.sink.clone(),
            template,
            Box::new(move |line: &str| log(PREFIX, &format!("[{log_name}] {line}"))),
        );
        let file = TopicFile {
            sink: Arc::new(Mutex::new(sink)),
            progress: Arc::new(Progress::new()),
            on_sync: self.on_sync.clone(),
        };
        let consumer = Consumer::builder(topic, self.channel.as_str())
            .config(&self.config)
            .nsqds(self.nsqd.iter().cloned())
            .lookupds(self.lookupd.iter().cloned())
            .build()
            .map_err(|e| e.to_string())?;
        let handle = consumer.handle();
        let handler = {
            let (file, failed, error, name) =
                (file.clone(), failed.clone(), error.clone(), name.clone());
            move |batch: Batch| {
                let (file, failed, error, name) =
                    (file.clone(), failed.clone(), error.clone(), name.clone());
                async move {
                    match file.write(&batch).await {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            // Like the official tool, a file that cannot be written ends the
                            // run; its batch goes back to nsqd.
                            let e = format!("[{name}] writing or syncing a batch: {e}");
                            lock(&error).get_or_insert(e.clone());
                            failed.notify_one();
                            Err(HandlerError::msg(e))
                        }
                    }
                }
            }
        };
        let run = tokio::spawn(consumer.run_batch(1, self.batch, handler));
        let ticker = {
            let (file, every) = (file.clone(), self.sync_interval);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    let sink = file.sink.clone();
                    let ticked =
                        tokio::task::spawn_blocking(move || lock(&sink).tick(SystemTime::now()))
                            .await;
                    if let Err(e) = ticked.map_err(io::Error::other).and_then(|r| r) {
                        log(PREFIX, &format!("ERROR: rotating or syncing: {e}"));
                    }
                }
            })
        };
        let stats = (!self.stats_interval.is_zero()).then(|| {
            let (progress, every, name) =
                (file.progress.clone(), self.stats_interval, name.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    log(PREFIX, &progress.line(&name));
                }
            })
        });
        Ok(Running {
            name,
            consumer: handle,
            run,
            ticker,
            stats,
            file,
        })
    }
}

/// A running topic.
struct Running {
    name: String,
    consumer: nsq_tokio::ConsumerHandle,
    run: tokio::task::JoinHandle<nsq_tokio::StopReport>,
    ticker: tokio::task::JoinHandle<()>,
    stats: Option<tokio::task::JoinHandle<()>>,
    file: TopicFile,
}

/// One topic's file, shared by its batches and its ticker.
#[derive(Clone)]
struct TopicFile {
    sink: Arc<Mutex<FileSink>>,
    progress: Arc<Progress>,
    on_sync: Option<SyncHook>,
}

impl TopicFile {
    /// Writes the batch's bodies as lines and fsyncs them, on a blocking thread; its
    /// messages are finished when the handler returns `Ok` after this.
    async fn write(&self, batch: &Batch) -> io::Result<()> {
        let bodies: Vec<bytes::Bytes> = batch.iter().map(|m| m.body().clone()).collect();
        let (sink, on_sync) = (self.sink.clone(), self.on_sync.clone());
        let lines = bodies.len();
        tokio::task::spawn_blocking(move || {
            let mut sink = lock(&sink);
            sink.write_lines(SystemTime::now(), bodies.iter().map(AsRef::as_ref))?;
            sink.sync()?;
            if let Some(hook) = on_sync {
                hook(lines);
            }
            Ok::<(), io::Error>(())
        })
        .await
        .map_err(io::Error::other)??;
        self.progress.batch(batch);
        Ok(())
    }
}

/// One topic's counts, for the progress lines.
struct Progress {
    start: Instant,
    messages: AtomicU64,
    batches: AtomicU64,
    largest: AtomicU64,
    ended_by: Mutex<BTreeMap<&'static str, u64>>,
    last: Mutex<(Instant, u64)>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            start: Instant::now(),
            messages: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            largest: AtomicU64::new(0),
            ended_by: Mutex::default(),
            last: Mutex::new((Instant::now(), 0)),
        }
    }

    fn batch(&self, batch: &Batch) {
        let n = batch.len() as u64;
        self.messages.fetch_add(n, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.largest.fetch_max(n, Ordering::Relaxed);
        *lock(&self.ended_by)
            .entry(batch.ended_by().as_str())
            .or_default() += 1;
    }

    /// `topic/channel: R msgs/s, N written in B batches (mean M, largest L; ended by: ...)`.
    fn line(&self, name: &str) -> String {
        let messages = self.messages.load(Ordering::Relaxed);
        let mut last = lock(&self.last);
        let secs = last.0.elapsed().as_secs_f64();
        let rate = (messages - last.1) as f64 / secs.max(1e-9);
        *last = (Instant::now(), messages);
        format!("[{name}] {rate:.0} msgs/s, {}", self.totals())
    }

    fn summary(&self, name: &str) -> String {
        let messages = self.messages.load(Ordering::Relaxed);
        let took = self.start.elapsed();
        format!(
            "[{name}] done: {:.0} msgs/s over {}, {}",
            messages as f64 / took.as_secs_f64().max(1e-9),
            go_duration(Duration::from_millis(took.as_millis() as u64)),
            self.totals()
        )
    }

    fn totals(&self) -> String {
        let messages = self.messages.load(Ordering::Relaxed);
        let batches = self.batches.load(Ordering::Relaxed);
        let ends: Vec<String> = lock(&self.ended_by)
            .iter()
            .map(|(end, n)| format!("{end} {n}"))
            .collect();
        format!(
            "{messages} written in {batches} batches, each synced (mean {:.0}, largest {}; \
             ended by: {})",
            messages as f64 / batches.max(1) as f64,
            self.largest.load(Ordering::Relaxed),
            ends.join(", ")
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
