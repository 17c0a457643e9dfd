//! `nsq_to_sqlite`: consumes a topic into an SQLite table, one transaction per batch, and
//! finishes each message only once its row is committed (the batch handler's `Ok` is the
//! FIN). nsq-blocking's tool of issue 46, on [`Consumer::run_batch`].
//!
//! ```text
//! cargo run --release -p nsq-blocking --example nsq_to_sqlite -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=events --db=events.db --max-in-flight=2500 \
//!     --batch-size=1000 --linger=1s
//! ```
//!
//! - **Rows.** The table (`--table`, default `messages`) keeps, per message, the nsqd it came
//!   from, its id, its attempts, nsqd's timestamp (nanoseconds since the Unix epoch) and its
//!   body, with `(nsqd, id)` as the primary key, and `deliveries`: how many times the message
//!   was committed. The insert is an upsert: a message nsqd delivers again after it was
//!   committed (the tool was killed between the commit and the FIN, or the FIN was lost)
//!   keeps its one row and has its `deliveries` raised, so nothing is lost and every
//!   duplicate is counted (`SELECT sum(deliveries) - count(*)`; the final line counts this
//!   run's). Ids are unique per nsqd and topic: use one table per topic.
//! - **Durability.** WAL journal mode, `PRAGMA synchronous` from `--synchronous` (default
//!   `FULL`: a commit is on disk before the batch's FINs are sent).
//! - **Batches.** A batch is up to `--batch-size` messages, or what arrived within `--linger`
//!   of its first one (fewer when `--max-in-flight`, or nsqd's `--max-rdy-count`, is below the
//!   batch size: the consumer hands over what the in-flight bound lets arrive). It is
//!   inserted in one `BEGIN IMMEDIATE` ... `COMMIT`; after the commit its messages are
//!   finished. A commit (or any statement) that fails for the database's reasons (disk full,
//!   I/O error, a lock held past `--busy-timeout`) rolls the transaction back and requeues the
//!   whole batch with backoff. `--workers` (default 2) batch handlers take turns on the
//!   database, so the next batch is gathered while one commits.
//! - **Rows refused one by one.** A message whose row cannot be stored is failed on its own
//!   (requeued without backoff; after `max_attempts` the consumer gives up on it and logs it)
//!   while the rest of its batch commits: a body that is not UTF-8 when the body column stores
//!   text (the default; `--blob` stores any bytes), or a row the table's constraints refuse (a
//!   `CHECK` in a table made with `--schema`).
//! - **`--per-message`**: one transaction (so one fsync) per message, with a per-message
//!   handler ([`Consumer::run`]): the comparison mode, same durability settings.
//! - **Progress** on stderr every `--progress-interval`: messages/s and batch sizes; a final
//!   line with the totals.
//! - **SIGINT / SIGTERM** stop the consumer: the partial batch is handed over, committed and
//!   finished before the tool exits; messages received but not yet in a batch are requeued at
//!   once (a second signal exits at once; nsqd redelivers what was not finished).
//!
//! `--schema=FILE` runs the SQL in FILE (once, at start) instead of creating the default table;
//! the table must have the columns `nsqd, id, attempts, timestamp, body, deliveries` and a
//! unique key on `(nsqd, id)`, e.g. the default one with a `CHECK`:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS messages (
//!     nsqd TEXT NOT NULL, id TEXT NOT NULL, attempts INTEGER NOT NULL,
//!     timestamp INTEGER NOT NULL, body TEXT NOT NULL CHECK (length(body) <= 4096),
//!     deliveries INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (nsqd, id)) WITHOUT ROWID;
//! ```
use nsq_example_cli as support;

use nsq_blocking::{Batch, BatchOptions, Config, Consumer, ConsumerHandle, HandlerError, Message};
use rusqlite::{Connection, ErrorCode, TransactionBehavior, params};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};
use support::{
    CONSUMER_OPT_FLAG, Flags, LOOKUPD_HTTP_ADDRESS_FLAG, NSQD_TCP_ADDRESS_FLAG, Usage, fatal,
    go_duration, init_logging, log, switch, value,
};

const PREFIX: &str = "nsq_to_sqlite";

const USAGE: Usage = Usage {
    name: "nsq_to_sqlite",
    about: "Consumes a topic into an SQLite table: each batch in one transaction, its messages \
            finished after the commit.",
    flags: &[
        value("topic", "TOPIC", "NSQ topic"),
        value("channel", "CHANNEL", "NSQ channel (default: nsq_to_sqlite)"),
        NSQD_TCP_ADDRESS_FLAG,
        LOOKUPD_HTTP_ADDRESS_FLAG,
        value("db", "PATH", "SQLite database file (default: nsq.db)"),
        value("table", "NAME", "table of the rows (default: messages)"),
        value(
            "schema",
            "FILE",
            "SQL run at start instead of creating the default table (see the docs)",
        ),
        switch(
            "blob",
            "store bodies as BLOBs (any bytes) instead of TEXT (UTF-8 only)",
        ),
        value(
            "max-in-flight",
            "N",
            "max number of messages to allow in flight (default: 2500)",
        ),
        value(
            "batch-size",
            "N",
            "messages per batch, so per transaction (default: 1000)",
        ),
        value(
            "linger",
            "DURATION",
            "how long a batch waits for more messages after its first one (default: 1s)",
        ),
        value(
            "workers",
            "N",
            "batch handler threads: one gathers the next batch while another commits, SQLite \
             taking one writer at a time (default: 2)",
        ),
        switch(
            "per-message",
            "one transaction per message (the comparison mode)",
        ),
        value(
            "synchronous",
            "MODE",
            "SQLite's PRAGMA synchronous: OFF, NORMAL, FULL or EXTRA (default: FULL)",
        ),
        value(
            "busy-timeout",
            "DURATION",
            "how long a statement waits for a lock held by another connection (default: 5s)",
        ),
        value(
            "max-messages",
            "N",
            "stop once at least N messages are committed (default: 0, run until a signal)",
        ),
        value(
            "progress-interval",
            "DURATION",
            "how often to print progress on stderr, 0 for never (default: 5s)",
        ),
        CONSUMER_OPT_FLAG,
    ],
};

// ----------------------------------------------------------------------------------- sink

/// SQLite's `PRAGMA synchronous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// No fsync: a crash of the OS may lose committed rows.
    Off,
    /// In WAL mode, fsync at checkpoints only: a power loss may lose the last commits.
    Normal,
    /// fsync of the WAL at every commit: a commit is durable.
    Full,
    /// As `Full`, and the directory too.
    Extra,
}

impl Synchronous {
    /// Parses the flag's value (case-insensitive).
    pub fn parse(s: &str) -> Result<Synchronous, String> {
        match s.to_ascii_uppercase().as_str() {
            "OFF" | "0" => Ok(Synchronous::Off),
            "NORMAL" | "1" => Ok(Synchronous::Normal),
            "FULL" | "2" => Ok(Synchronous::Full),
            "EXTRA" | "3" => Ok(Synchronous::Extra),
            _ => Err(format!(
                "invalid value {s:?} for flag -synchronous: OFF, NORMAL, FULL or EXTRA"
            )),
        }
    }

    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Off => "OFF",
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
            Synchronous::Extra => "EXTRA",
        }
    }
}

/// Where and how rows are stored.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    /// The database file.
    pub path: std::path::PathBuf,
    /// The table's name: letters, digits and `_`, not starting with a digit.
    pub table: String,
    /// SQL run at open instead of creating the default table.
    pub schema: Option<String>,
    /// Bodies as BLOBs (any bytes) instead of TEXT (UTF-8 only).
    pub blob: bool,
    /// `PRAGMA synchronous`.
    pub synchronous: Synchronous,
    /// How long a statement waits for another connection's lock.
    pub busy_timeout: Duration,
}

impl SinkOptions {
    /// Defaults for `path`: table `messages`, TEXT bodies, `synchronous = FULL`, 5 s busy
    /// timeout.
    pub fn new(path: impl Into<std::path::PathBuf>) -> SinkOptions {
        SinkOptions {
            path: path.into(),
            table: "messages".to_owned(),
            schema: None,
            blob: false,
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// A message as a row.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The nsqd it came from.
    pub nsqd: &'a str,
    /// Its id (16 ASCII hex digits from nsqd).
    pub id: [u8; 16],
    /// nsqd's attempts counter.
    pub attempts: u16,
    /// nsqd's timestamp, nanoseconds since the Unix epoch.
    pub timestamp: i64,
    /// The body.
    pub body: &'a [u8],
}

impl<'a> Row<'a> {
    /// The row of `m`.
    pub fn of(m: &'a Message) -> Row<'a> {
        Row {
            nsqd: m.nsqd_address(),
            id: *m.id().as_bytes(),
            attempts: m.attempts(),
            timestamp: m.timestamp(),
            body: m.body(),
        }
    }
}

/// What became of one row of a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOutcome {
    /// A new row.
    Inserted,
    /// The message already had its row (a redelivery): its `deliveries` was raised.
    Duplicate,
    /// The row was refused (not UTF-8 for a TEXT body, a constraint): fail this message.
    Rejected(String),
}

/// The SQLite connection and its insert statement.
#[derive(Debug)]
pub struct Sink {
    conn: Connection,
    insert: String,
    blob: bool,
}

/// True for a table name that needs no quoting (and so cannot inject SQL).
fn plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Sink {
    /// Opens (or creates) the database: WAL journal mode, the synchronous setting, the table
    /// (or `schema`), and checks the insert statement against the table.
    pub fn open(opts: &SinkOptions) -> Result<Sink, String> {
        let table = &opts.table;
        if !plain_identifier(table) {
            return Err(format!(
                "invalid table name {table:?}: letters, digits and _ only, not starting with a digit"
            ));
        }
        let path = opts.path.display();
        let conn = Connection::open(&opts.path).map_err(|e| format!("open {path}: {e}"))?;
        conn.busy_timeout(opts.busy_timeout)
            .map_err(|e| e.to_string())?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| format!("{path}: journal_mode: {e}"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("{path}: journal_mode is {mode}, not WAL"));
        }
        conn.pragma_update(None, "synchronous", opts.synchronous.pragma())
            .map_err(|e| format!("{path}: synchronous: {e}"))?;
        let body_type = if opts.blob { "BLOB" } else { "TEXT" };
        let schema = opts.schema.clone().unwrap_or_else(|| {
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                    nsqd TEXT NOT NULL,
                    id TEXT NOT NULL,
                    attempts INTEGER NOT NULL,
                    timestamp INTEGER NOT NULL,
                    body {body_type} NOT NULL,
                    deliveries INTEGER NOT NULL DEFAULT 1,
                    PRIMARY KEY (nsqd, id)
                ) WITHOUT ROWID"
            )
        });
        conn.execute_batch(&schema)
            .map_err(|e| format!("{path}: schema: {e}"))?;
        // The upsert: a redelivered message keeps its row and counts the delivery.
        let insert = format!(
            "INSERT INTO {table} (nsqd, id, attempts, timestamp, body) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (nsqd, id) DO UPDATE
                 SET deliveries = deliveries + 1, attempts = excluded.attempts
             RETURNING deliveries"
        );
        conn.prepare_cached(&insert)
            .map_err(|e| format!("{path}: table {table} does not fit: {e}"))?;
        Ok(Sink {
            conn,
            insert,
            blob: opts.blob,
        })
    }

    /// Inserts `rows` in one transaction and commits it; the outcome of each row, in order.
    /// A row refused on its own does not stop the others; any other error rolls everything
    /// back.
    pub fn insert_batch<'a>(
        &mut self,
        rows: impl IntoIterator<Item = Row<'a>>,
    ) -> rusqlite::Result<Vec<RowOutcome>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut outcomes = Vec::new();
        {
            let mut stmt = tx.prepare_cached(&self.insert)?;
            for row in rows {
                outcomes.push(insert_row(&mut stmt, self.blob, row)?);
            }
        }
        tx.commit()?;
        Ok(outcomes)
    }

    /// The connection, for queries.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Inserts one row with the prepared upsert: its outcome, or the error that must fail the
/// whole transaction.
fn insert_row(
    stmt: &mut rusqlite::CachedStatement<'_>,
    blob: bool,
    row: Row<'_>,
) -> rusqlite::Result<RowOutcome> {
    let id = String::from_utf8_lossy(&row.id);
    let attempts = i64::from(row.attempts);
    let result = if blob {
        stmt.query_row(
            params![row.nsqd, id, attempts, row.timestamp, row.body],
            |r| r.get::<_, i64>(0),
        )
    } else {
        let Ok(text) = std::str::from_utf8(row.body) else {
            return Ok(RowOutcome::Rejected(
                "body is not UTF-8 (the body column stores text; --blob stores any bytes)"
                    .to_owned(),
            ));
        };
        stmt.query_row(params![row.nsqd, id, attempts, row.timestamp, text], |r| {
            r.get::<_, i64>(0)
        })
    };
    match result {
        Ok(1) => Ok(RowOutcome::Inserted),
        Ok(_) => Ok(RowOutcome::Duplicate),
        // A constraint (CHECK, NOT NULL, a type) refuses this row: SQLite undoes only this
        // statement, the transaction goes on.
        Err(rusqlite::Error::SqliteFailure(e, msg)) if e.code == ErrorCode::ConstraintViolation => {
            Ok(RowOutcome::Rejected(msg.unwrap_or_else(|| e.to_string())))
        }
        Err(e) => Err(e),
    }
}

// ------------------------------------------------------------------------------- progress

/// Counters shared by the handler, the progress line and the final line.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    /// Rows committed (inserted or duplicate).
    committed: AtomicU64,
    /// Of those, duplicates.
    duplicates: AtomicU64,
    /// Rows refused (their messages failed).
    rejected: AtomicU64,
    /// Transactions committed.
    transactions: AtomicU64,
    /// Transactions that failed (their batch requeued).
    failed: AtomicU64,
    /// The largest batch since the last progress line.
    max_batch: AtomicU64,
    /// Nanoseconds from `started` to the first transaction's start and to the last commit.
    first_begin: AtomicU64,
    last_commit: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: Instant::now(),
            committed: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            max_batch: AtomicU64::new(0),
            first_begin: AtomicU64::new(u64::MAX),
            last_commit: AtomicU64::new(0),
        }
    }
}

/// A snapshot of [`Progress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Rows committed (inserted or duplicate).
    pub committed: u64,
    /// Of those, duplicates (messages that already had their row).
    pub duplicates: u64,
    /// Rows refused: their messages were failed.
    pub rejected: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// Transactions that failed: their batches were requeued.
    pub failed: u64,
}

impl Progress {
    /// Notes a transaction's start (the rate runs from the first one).
    pub fn begin(&self) {
        let now = self.started.elapsed().as_nanos() as u64;
        self.first_begin.fetch_min(now, Ordering::Relaxed);
    }

    /// Counts one committed transaction.
    pub fn committed(&self, outcomes: &[RowOutcome]) {
        let rejected = outcomes
            .iter()
            .filter(|o| matches!(o, RowOutcome::Rejected(_)))
            .count() as u64;
        let duplicates = outcomes
            .iter()
            .filter(|o| **o == RowOutcome::Duplicate)
            .count() as u64;
        let rows = outcomes.len() as u64 - rejected;
        self.committed.fetch_add(rows, Ordering::Relaxed);
        self.duplicates.fetch_add(duplicates, Ordering::Relaxed);
        self.rejected.fetch_add(rejected, Ordering::Relaxed);
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.max_batch
            .fetch_max(outcomes.len() as u64, Ordering::Relaxed);
        let now = self.started.elapsed().as_nanos() as u64;
        self.last_commit.fetch_max(now, Ordering::Relaxed);
    }

    /// Counts one failed transaction.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn totals(&self) -> Totals {
        Totals {
            committed: self.committed.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            transactions: self.transactions.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// The progress line since `before`, `elapsed` ago; resets the largest batch.
    fn line(&self, before: Totals, elapsed: Duration) -> (Totals, String) {
        let now = self.totals();
        let max = self.max_batch.swap(0, Ordering::Relaxed);
        let rows = now.committed - before.committed;
        let txs = now.transactions - before.transactions;
        let line = format!(
            "{:.0} msgs/s over {}: {txs} transactions, {:.1} rows each (max {max}); \
             total {} rows ({} duplicates), {} refused, {} failed transactions",
            rows as f64 / elapsed.as_secs_f64().max(1e-9),
            go_duration(elapsed),
            rows as f64 / txs.max(1) as f64,
            now.committed,
            now.duplicates,
            now.rejected,
            now.failed,
        );
        (now, line)
    }

    /// The final line: totals and the rate from the first commit to the last.
    pub fn summary(&self) -> String {
        let t = self.totals();
        let first = self.first_begin.load(Ordering::Relaxed);
        let last = self.last_commit.load(Ordering::Relaxed);
        let span = Duration::from_nanos(last.saturating_sub(first));
        format!(
            "committed {} rows ({} duplicates) in {} transactions ({:.1} rows each), {} refused, \
             {} failed transactions; {:.0} msgs/s from the first transaction's start to the last commit ({})",
            t.committed,
            t.duplicates,
            t.transactions,
            t.committed as f64 / t.transactions.max(1) as f64,
            t.rejected,
            t.failed,
            if span.is_zero() {
                0.0
            } else {
                t.committed as f64 / span.as_secs_f64()
            },
            go_duration(span),
        )
    }
}

/// Prints a progress line every `every` until `done` is dropped or sent to.
fn report_progress(progress: &Progress, every: Duration, done: &mpsc::Receiver<()>) {
    let mut before = progress.totals();
    let mut since = Instant::now();
    while let Err(mpsc::RecvTimeoutError::Timeout) = done.recv_timeout(every) {
        let (now, line) = progress.line(before, since.elapsed());
        // Idle: no line until something happens.
        if now != before {
            log(PREFIX, &line);
        }
        (before, since) = (now, Instant::now());
    }
}

// -------------------------------------------------------------------------------- consume

/// What to consume and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The topic.
    pub topic: String,
    /// The channel.
    pub channel: String,
    /// nsqd TCP addresses.
    pub nsqd: Vec<String>,
    /// nsqlookupd HTTP addresses.
    pub lookupd: Vec<String>,
    /// The consumer's configuration (max_in_flight, ...).
    pub config: Config,
    /// Where rows go.
    pub sink: SinkOptions,
    /// Messages per batch.
    pub batch_size: usize,
    /// How long a batch waits for more after its first message.
    pub linger: Duration,
    /// Batch handler threads (`run_batch`'s workers); their transactions take turns.
    pub workers: usize,
    /// One transaction per message instead.
    pub per_message: bool,
    /// Stop once this many rows are committed (0: never).
    pub max_messages: u64,
    /// Progress lines on stderr this often (`None`: never).
    pub progress_interval: Option<Duration>,
}

/// Opens the database, consumes until the consumer is stopped (by `stopper`, which gets the
/// consumer's handle once it runs and may stop it from any thread, or by `max_messages`),
/// and returns the totals and the stop's count of unanswered messages.
pub fn consume(
    opts: &Options,
    stopper: impl FnOnce(ConsumerHandle) + Send + 'static,
) -> Result<(Totals, usize), String> {
    let sink = Mutex::new(Sink::open(&opts.sink)?);
    let consumer = Consumer::builder(opts.topic.as_str(), opts.channel.as_str())
        .config(&opts.config)
        .nsqds(opts.nsqd.iter().cloned())
        .lookupds(opts.lookupd.iter().cloned())
        .build()
        .map_err(|e| e.to_string())?;
    let handle = consumer.handle();
    let progress = Progress::default();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    // Not scoped: it may wait for a signal that never comes.
    let stop_handle = handle.clone();
    std::thread::spawn(move || stopper(stop_handle));
    let max = opts.max_messages;
    let stopping = AtomicBool::new(false);
    let enough = |progress: &Progress| {
        if max > 0 && progress.totals().committed >= max && !stopping.swap(true, Ordering::Relaxed)
        {
            // From another thread: the stop's drain waits for this handler's answer.
            let handle = handle.clone();
            std::thread::spawn(move || handle.stop());
        }
    };
    let report = std::thread::scope(|scope| {
        if let Some(every) = opts.progress_interval.filter(|d| !d.is_zero()) {
            let progress = &progress;
            scope.spawn(move || report_progress(progress, every, &done_rx));
        }
        let report = if opts.per_message {
            consumer.run(1, |m: Message| {
                progress.begin();
                let outcome = lock(&sink).insert_batch([Row::of(&m)]).map_err(|e| {
                    progress.failed();
                    HandlerError::msg(format!("insert failed: {e}"))
                })?;
                progress.committed(&outcome);
                enough(&progress);
                match outcome.into_iter().next() {
                    Some(RowOutcome::Rejected(why)) => {
                        Err(HandlerError::msg(why).without_backoff())
                    }
                    _ => Ok(()),
                }
            })
        } else {
            let batches = BatchOptions::new()
                .max_messages(opts.batch_size.max(1))
                .linger(opts.linger);
            // While one worker commits (SQLite has one writer at a time: the others wait for
            // the lock), another gathers the next batch.
            consumer.run_batch(opts.workers.max(1), batches, |mut batch: Batch| {
                store_batch(&sink, &progress, &mut batch)?;
                enough(&progress);
                Ok(())
            })
        };
        drop(done_tx);
        report
    });
    let totals = progress.totals();
    log(PREFIX, &progress.summary());
    Ok((totals, report.unanswered))
}

/// Inserts `batch` in one transaction and marks each message whose row was refused; `Ok`
/// then finishes the rest. A failed transaction is an `Err`: the whole batch is requeued.
pub fn store_batch(
    sink: &Mutex<Sink>,
    progress: &Progress,
    batch: &mut Batch,
) -> Result<(), HandlerError> {
    progress.begin();
    let outcomes = lock(sink)
        .insert_batch(batch.iter().map(Row::of))
        .map_err(|e| {
            progress.failed();
            HandlerError::msg(format!(
                "transaction of {} messages failed: {e}",
                batch.len()
            ))
        })?;
    for (mut entry, outcome) in batch.iter_mut().zip(&outcomes) {
        if let RowOutcome::Rejected(why) = outcome {
            // The consumer logs it (WARN, with the message's id and attempts).
            entry.fail(HandlerError::msg(format!("row refused: {why}")).without_backoff());
        }
    }
    progress.committed(&outcomes);
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ----------------------------------------------------------------------------------- main

/// Stops the consumer on the first SIGINT or SIGTERM; exits at once on the second.
#[cfg(unix)]
fn stop_on_signals(handle: &ConsumerHandle) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            log(PREFIX, &format!("cannot catch SIGINT/SIGTERM: {e}"));
            return;
        }
    };
    let mut stopping = false;
    for signal in signals.forever() {
        if stopping {
            fatal(PREFIX, &format!("signal {signal} again: exiting at once"));
        }
        stopping = true;
        log(
            PREFIX,
            &format!("signal {signal}: stopping (committing the partial batch)"),
        );
        let handle = handle.clone();
        std::thread::spawn(move || handle.stop());
    }
}

#[cfg(not(unix))]
fn stop_on_signals(_handle: &ConsumerHandle) {}

fn options(flags: &Flags) -> Result<Options, String> {
    let topic = flags.string("topic", "");
    if topic.is_empty() {
        return Err("--topic is required".to_owned());
    }
    let nsqd = flags.all("nsqd-tcp-address");
    let lookupd = flags.all("lookupd-http-address");
    if nsqd.is_empty() && lookupd.is_empty() {
        return Err("--nsqd-tcp-address or --lookupd-http-address required".to_owned());
    }
    let mut config = Config {
        user_agent: Some(format!(
            "nsq_to_sqlite/nsq-blocking-{}",
            env!("CARGO_PKG_VERSION")
        )),
        ..Config::default()
    };
    support::apply_opts(&flags.all("consumer-opt"), |name, value| {
        config.set_str(name, value)
    })?;
    config.max_in_flight = flags.number("max-in-flight", 2500)?;
    let schema = match flags.get("schema") {
        Some(file) => Some(std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?),
        None => None,
    };
    let sink = SinkOptions {
        table: flags.string("table", "messages"),
        schema,
        blob: flags.boolean("blob")?,
        synchronous: Synchronous::parse(&flags.string("synchronous", "FULL"))?,
        busy_timeout: flags.duration("busy-timeout", Duration::from_secs(5))?,
        ..SinkOptions::new(flags.string("db", "nsq.db"))
    };
    Ok(Options {
        topic,
        channel: flags.string("channel", "nsq_to_sqlite"),
        nsqd,
        lookupd,
        config,
        sink,
        batch_size: flags.number("batch-size", 1000)?,
        linger: flags.duration("linger", Duration::from_secs(1))?,
        workers: flags.number("workers", 2)?,
        per_message: flags.boolean("per-message")?,
        max_messages: flags.number("max-messages", 0)?,
        progress_interval: Some(flags.duration("progress-interval", Duration::from_secs(5))?),
    })
}

#[allow(
    dead_code,
    reason = "the tests include this file for its logic, not its main"
)]
fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let result = options(&flags).and_then(|opts| {
        let mode = if opts.per_message {
            "one transaction per message".to_owned()
        } else {
            format!(
                "batches of up to {} messages, linger {}",
                opts.batch_size,
                go_duration(opts.linger)
            )
        };
        log(
            PREFIX,
            &format!(
                "{} -> {} (table {}, synchronous {}): {mode}, max_in_flight {}",
                opts.topic,
                opts.sink.path.display(),
                opts.sink.table,
                opts.sink.synchronous.pragma(),
                opts.config.max_in_flight
            ),
        );
        consume(&opts, |handle| stop_on_signals(&handle))
    });
    match result {
        Ok((_, 0)) => {}
        Ok((_, unanswered)) => log(
            PREFIX,
            &format!("{unanswered} messages left unanswered (nsqd redelivers them)"),
        ),
        Err(e) => fatal(PREFIX, &e),
    }
}
