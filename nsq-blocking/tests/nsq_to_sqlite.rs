//! The `nsq_to_sqlite` example's logic (the example file itself, included as a module) against
//! the in-process test broker: every message gets its row and is finished only after the
//! transaction holding it committed; a row SQLite refuses fails only its own message; a
//! transaction that cannot commit finishes nothing; a stop commits and finishes the partial
//! batch; a redelivered message keeps one row and is counted as a duplicate.

#[allow(
    dead_code,
    unreachable_pub,
    reason = "the tool's main and flags are not used here"
)]
#[path = "../examples/nsq_to_sqlite.rs"]
mod tool;

use nsq_blocking::{Batch, BatchOptions, Config, Consumer, ConsumerHandle};
use nsq_test_broker::Nsqd;
use nsq_test_broker::scenarios::{WAIT, eventually, run_within};
use rusqlite::Connection;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tool::{Options, Progress, RowOutcome, Sink, SinkOptions, Synchronous};

/// Each test's time limit.
const LIMIT: u64 = 60;

/// A fresh database path of this test (removed, with its WAL files, when dropped).
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> TempDb {
        let path =
            std::env::temp_dir().join(format!("nsq_to_sqlite_{}_{name}.db", std::process::id()));
        let db = TempDb(path);
        db.remove();
        db
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }

    /// The rows' bodies and deliveries, read through a connection of the test's own.
    fn rows(&self) -> HashMap<String, i64> {
        let conn = Connection::open(&self.0).expect("the database");
        let mut stmt = conn
            .prepare("SELECT body, deliveries FROM messages")
            .expect("the query");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("the rows")
            .collect::<Result<_, _>>()
            .expect("the rows")
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        self.remove();
    }
}

fn options(nsqd: &Nsqd, topic: &str, db: &TempDb, max_in_flight: u32) -> Options {
    Options {
        topic: topic.to_owned(),
        channel: "ch".to_owned(),
        nsqd: vec![nsqd.tcp_address().to_string()],
        lookupd: Vec::new(),
        config: Config {
            max_in_flight,
            // Failed messages back soon, short backoff: the tests wait for redeliveries.
            default_requeue_delay: Duration::from_millis(20),
            backoff_multiplier: Duration::from_millis(20),
            max_backoff_duration: Duration::from_millis(100),
            ..Config::default()
        },
        sink: SinkOptions {
            // The tests' durability does not matter; their speed does.
            synchronous: Synchronous::Off,
            ..SinkOptions::new(&db.0)
        },
        batch_size: 64,
        linger: Duration::from_millis(50),
        workers: 2,
        per_message: false,
        max_messages: 0,
        progress_interval: None,
    }
}

fn publish_numbered(nsqd: &Nsqd, topic: &str, n: usize) -> HashSet<String> {
    (0..n)
        .map(|i| {
            let body = format!("{topic} {i:05}");
            nsqd.publish(topic, body.as_bytes());
            body
        })
        .collect()
}

/// The tool's `consume`, stopped by the test once `until` returns (a panic in `until` stops it
/// too, and fails the test once `consume` has returned).
fn consume_until(
    opts: &Options,
    until: impl FnOnce(&ConsumerHandle) + Send + 'static,
) -> (tool::Totals, usize) {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = tool::consume(opts, move |handle| {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| until(&handle)));
        handle.stop();
        let _ = tx.send(outcome);
    })
    .expect("the tool ran");
    if let Err(panic) = rx.recv().expect("the stopper ran") {
        std::panic::resume_unwind(panic);
    }
    result
}

/// Waits until `pred` holds, else panics with `what`.
fn wait_for(what: impl std::fmt::Display, pred: impl FnMut() -> bool) {
    assert!(eventually(WAIT * 4, pred), "timed out waiting for {what}");
}

/// The number of rows in the database at `path`, 0 when it cannot be read.
fn row_count(path: &std::path::Path) -> i64 {
    Connection::open(path)
        .and_then(|c| c.query_row("SELECT count(*) FROM messages", [], |r| r.get(0)))
        .unwrap_or(0)
}

#[test]
fn every_message_has_its_row_and_refused_rows_fail_alone() {
    run_within(LIMIT, || {
        let nsqd = Arc::new(Nsqd::start().unwrap());
        let db = TempDb::new("rows");
        let topic = "to_sqlite_rows";
        let bodies = publish_numbered(&nsqd, topic, 300);
        // Not UTF-8: the TEXT body column refuses it, the rest of its batch commits.
        nsqd.publish(topic, b"\xff\xfe not text");
        let opts = options(&nsqd, topic, &db, 100);
        let path = db.0.clone();
        let watched = nsqd.clone();
        let (totals, unanswered) = consume_until(&opts, move |_| {
            wait_for("300 rows and the refused one requeued", || {
                row_count(&path) == 300
                    && watched
                        .channel(topic, "ch")
                        .is_some_and(|c| c.requeued >= 1)
            });
        });
        assert_eq!(unanswered, 0);
        let rows = db.rows();
        assert_eq!(
            rows.keys().cloned().collect::<HashSet<_>>(),
            bodies,
            "one row per message"
        );
        assert!(rows.values().all(|&d| d == 1), "no duplicates: {rows:?}");
        assert_eq!(totals.committed, 300);
        assert_eq!(totals.duplicates, 0);
        assert!(totals.rejected >= 1, "{totals:?}");
        assert!(totals.transactions < 300, "batched: {totals:?}");
        let ch = nsqd.channel(topic, "ch").expect("the channel");
        assert_eq!(ch.finished, 300, "{ch:?}");
        // The refused message was failed (requeued), never finished.
        assert!(ch.requeued >= 1, "{ch:?}");
        assert_eq!(ch.timed_out, 0, "{ch:?}");
    });
}

/// Each message's FIN reaches nsqd after the transaction holding its row committed: the
/// tool's batch step, on `run_batch`, with the commit's instant noted before the handler
/// returns.
#[test]
fn each_message_is_finished_after_its_commit() {
    run_within(LIMIT, || {
        let nsqd = Nsqd::start().unwrap();
        let db = TempDb::new("fin_after_commit");
        let topic = "to_sqlite_fin";
        let bodies = publish_numbered(&nsqd, topic, 500);
        let opts = options(&nsqd, topic, &db, 100);
        let sink = Mutex::new(Sink::open(&opts.sink).expect("the database"));
        let progress = Progress::default();
        let committed: Mutex<HashMap<String, Instant>> = Mutex::default();
        let consumer = Consumer::builder(topic, "ch")
            .config(&opts.config)
            .nsqd(nsqd.tcp_address().to_string())
            .build()
            .unwrap();
        let handle = consumer.handle();
        let stopper = std::thread::spawn(move || {
            let done = eventually(WAIT * 4, || {
                nsqd.channel(topic, "ch").is_some_and(|c| c.finished == 500)
            });
            handle.stop();
            (done, nsqd)
        });
        let batches = BatchOptions::new()
            .max_messages(opts.batch_size)
            .linger(opts.linger);
        let report = consumer.run_batch(1, batches, |mut batch: Batch| {
            tool::store_batch(&sink, &progress, &mut batch)?;
            let at = Instant::now();
            let mut committed = committed.lock().unwrap();
            for m in &batch {
                committed.insert(m.id().to_string(), at);
            }
            Ok(())
        });
        let (done, nsqd) = stopper.join().unwrap();
        assert!(done, "{:?}", nsqd.channel(topic, "ch"));
        assert_eq!(report.unanswered, 0);
        assert_eq!(db.rows().into_keys().collect::<HashSet<_>>(), bodies);
        let committed = committed.into_inner().unwrap();
        let fins: Vec<_> = nsqd
            .commands()
            .into_iter()
            .filter(|c| c.name() == "FIN")
            .collect();
        assert_eq!(fins.len(), 500);
        for fin in fins {
            let id = fin.line.trim_start_matches("FIN ").to_owned();
            let at = committed
                .get(&id)
                .unwrap_or_else(|| panic!("{id} committed"));
            assert!(fin.at > *at, "{id} finished before its commit");
        }
    });
}

/// While another connection holds the database's write lock, every transaction fails: its
/// batch is requeued and nothing is finished. Once the lock goes, every row commits and every
/// message is finished.
#[test]
fn a_transaction_that_cannot_commit_finishes_nothing() {
    run_within(LIMIT, || {
        let nsqd = Arc::new(Nsqd::start().unwrap());
        let db = TempDb::new("locked");
        let topic = "to_sqlite_locked";
        let mut opts = options(&nsqd, topic, &db, 50);
        opts.sink.busy_timeout = Duration::from_millis(20);
        // The table exists before the lock is taken.
        drop(Sink::open(&opts.sink).expect("the database"));
        let bodies = publish_numbered(&nsqd, topic, 100);
        let locker = Connection::open(&db.0).unwrap();
        locker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let watched = nsqd.clone();
        let (totals, unanswered) = consume_until(&opts, move |_| {
            // Failed transactions (their batches requeued) with nothing finished; then the
            // lock goes.
            let channel = || watched.channel(topic, "ch").expect("the channel");
            wait_for("requeues", || {
                watched
                    .channel(topic, "ch")
                    .is_some_and(|c| c.requeued >= 50)
            });
            let ch = channel();
            assert_eq!(
                ch.finished, 0,
                "finished while the database was locked: {ch:?}"
            );
            locker.execute_batch("ROLLBACK").unwrap();
            wait_for("every message finished", || channel().finished == 100);
        });
        assert_eq!(unanswered, 0);
        assert!(totals.failed >= 1, "{totals:?}");
        assert_eq!(db.rows().into_keys().collect::<HashSet<_>>(), bodies);
        assert_eq!(nsqd.channel(topic, "ch").unwrap().finished, 100);
    });
}

/// A stop while a batch lingers: the partial batch is committed and finished before `consume`
/// returns.
#[test]
fn a_stop_commits_the_partial_batch() {
    run_within(LIMIT, || {
        let nsqd = Arc::new(Nsqd::start().unwrap());
        let db = TempDb::new("stop");
        let topic = "to_sqlite_stop";
        let mut opts = options(&nsqd, topic, &db, 100);
        opts.batch_size = 1000;
        // Long enough that only the stop hands the batch over.
        opts.linger = Duration::from_secs(60);
        let watched = nsqd.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let (totals, unanswered) = consume_until(&opts, move |consumer| {
            // One message first: the consumer starts at RDY 1 and raises it once a message
            // came. That message is either a batch of its own (handed over at the bound, RDY
            // 1) or the first of the lingering batch (RDY raised).
            let mut bodies = publish_numbered(&watched, topic, 1);
            // (finished, in flight)
            let channel = || {
                watched
                    .channel(topic, "ch")
                    .map_or((0, 0), |c| (c.finished, c.in_flight as u64))
            };
            wait_for("RDY up", || {
                let (finished, in_flight) = channel();
                watched.clients().iter().any(|c| c.rdy == 100) && finished + in_flight == 1
            });
            let first_alone = channel().0;
            // Then nine, which join the lingering batch: only the stop hands it over.
            for i in 1..10 {
                let body = format!("{topic} {i:05}");
                watched.publish(topic, body.as_bytes());
                bodies.insert(body);
            }
            let _ = tx.send((bodies, first_alone));
            wait_for("the batch holding the rest", || {
                channel().1 == 10 - first_alone && consumer.stats().received == 10
            });
        });
        let (bodies, first_alone) = rx.recv().expect("published");
        assert_eq!(unanswered, 0);
        assert_eq!(totals.committed, 10);
        assert_eq!(
            totals.transactions,
            1 + first_alone,
            "the partial batch: {totals:?}"
        );
        assert_eq!(db.rows().into_keys().collect::<HashSet<_>>(), bodies);
        let ch = nsqd.channel(topic, "ch").unwrap();
        assert_eq!(
            (ch.finished, ch.requeued, ch.in_flight),
            (10, 0, 0),
            "{ch:?}"
        );
    });
}

/// A message committed but redelivered (as after a kill between the commit and the FIN) keeps one row,
/// with `deliveries` 2, and is counted as a duplicate; and with `--per-message` each message
/// is its own transaction.
#[test]
fn a_redelivered_message_is_counted_not_stored_twice() {
    run_within(LIMIT, || {
        let nsqd = Nsqd::start().unwrap();
        let db = TempDb::new("dup");
        let topic = "to_sqlite_dup";
        let opts = options(&nsqd, topic, &db, 10);
        // Committed once already, as by a run killed before its FINs.
        let mut sink = Sink::open(&opts.sink).unwrap();
        nsqd.publish(topic, b"again");
        nsqd.publish(topic, b"new");
        let (id, addr) = {
            let mut c = Consumer::builder(topic, "ch")
                .config(&opts.config)
                .nsqd(nsqd.tcp_address().to_string())
                .build()
                .unwrap();
            let m = c.recv().expect("a message");
            let m = if m.body().as_ref() == b"again" {
                m
            } else {
                let other = c.recv().expect("the other message");
                m.requeue_without_backoff(Some(Duration::ZERO));
                other
            };
            let outcome = sink.insert_batch([tool::Row::of(&m)]).unwrap();
            assert_eq!(outcome, [RowOutcome::Inserted]);
            // Not finished (as if killed before the FIN): nsqd delivers it again.
            let ids = (m.id(), m.nsqd_address().to_owned());
            m.requeue_without_backoff(Some(Duration::ZERO));
            c.stop();
            ids
        };
        drop(sink);
        let mut opts = opts;
        opts.per_message = true;
        let path = db.0.clone();
        let (totals, unanswered) = consume_until(&opts, move |_| {
            wait_for("three deliveries", || {
                Connection::open(&path)
                    .and_then(|c| {
                        c.query_row("SELECT sum(deliveries) FROM messages", [], |r| r.get(0))
                    })
                    .is_ok_and(|n: i64| n == 3)
            });
        });
        assert_eq!(unanswered, 0);
        assert_eq!(totals.duplicates, 1, "{totals:?}");
        assert_eq!(totals.transactions, 2, "one per message: {totals:?}");
        let rows = db.rows();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows["again"], 2);
        assert_eq!(rows["new"], 1);
        let conn = Connection::open(&db.0).unwrap();
        let kept: (String, String) = conn
            .query_row(
                "SELECT nsqd, id FROM messages WHERE body = 'again'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(kept, (addr, id.to_string()));
    });
}

/// The sink alone: a `--schema` table whose `CHECK` refuses a row refuses only that row, a
/// message twice in one transaction is one row and one duplicate, and a table that does not
/// fit the insert, or a table name that would need quoting, is an error at open.
#[test]
fn the_sink_refuses_rows_one_by_one() {
    let db = TempDb::new("sink");
    let schema = "CREATE TABLE messages (nsqd TEXT NOT NULL, id TEXT NOT NULL, \
                  attempts INTEGER NOT NULL, timestamp INTEGER NOT NULL, \
                  body TEXT NOT NULL CHECK (length(body) <= 5), \
                  deliveries INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (nsqd, id))";
    let opts = SinkOptions {
        schema: Some(schema.to_owned()),
        synchronous: Synchronous::Off,
        ..SinkOptions::new(&db.0)
    };
    let mut sink = Sink::open(&opts).expect("the database");
    let row = |id: u8, body: &'static [u8]| tool::Row {
        nsqd: "127.0.0.1:4150",
        id: [b'0' + id; 16],
        attempts: 1,
        timestamp: 0,
        body,
    };
    let outcomes = sink
        .insert_batch([
            row(1, b"short"),
            row(2, b"too long"),
            row(3, b"ok"),
            row(1, b"short"),
        ])
        .expect("committed");
    assert_eq!(outcomes[0], RowOutcome::Inserted);
    assert!(
        matches!(&outcomes[1], RowOutcome::Rejected(why) if why.contains("CHECK")),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[2..], [RowOutcome::Inserted, RowOutcome::Duplicate]);
    let rows = db.rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows["short"], rows["ok"]), (2, 1));
    drop(sink);

    let misfit = SinkOptions {
        table: "other".to_owned(),
        schema: Some("CREATE TABLE IF NOT EXISTS other (body TEXT)".to_owned()),
        ..opts.clone()
    };
    let e = Sink::open(&misfit).expect_err("no such columns");
    assert!(e.contains("does not fit"), "{e}");
    let quoted = SinkOptions {
        table: "messages; DROP TABLE messages".to_owned(),
        ..opts
    };
    assert!(Sink::open(&quoted).is_err());
    assert_eq!(db.rows().len(), 2);
}
