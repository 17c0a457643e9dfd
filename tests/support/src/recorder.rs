//! A capturing recorder for the `metrics` tests of every adapter, and what it recorded for
//! one topic.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The process's recorder (installed once; tests tell their metrics apart by topic).
pub fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

/// What was recorded for `topic`: (name, labels other than topic, value).
/// One metric: its name, its labels but `topic`, its value.
type Entry = (String, Vec<(String, String)>, DebugValue);

/// What the recorder holds for one topic.
pub struct Recorded(Vec<Entry>);

impl Recorded {
    /// What was recorded for `topic` since the process started. A snapshot of the debugging
    /// recorder resets every metric (counters to 0, histograms drained), and tests run in
    /// parallel: every snapshot is folded into one store that adds counters, keeps each
    /// gauge's last value and gathers histogram observations.
    pub fn take(topic: &str) -> Recorded {
        static STORE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
        let mut store = STORE.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            let name = key.name().to_owned();
            match store
                .iter_mut()
                .find(|(n, l, _)| *n == name && *l == labels)
            {
                Some((_, _, kept)) => match (kept, value) {
                    (DebugValue::Counter(total), DebugValue::Counter(n)) => *total += n,
                    (DebugValue::Histogram(all), DebugValue::Histogram(more)) => {
                        all.extend(more);
                    }
                    (kept, value) => *kept = value,
                },
                None => store.push((name, labels, value)),
            }
        }
        Recorded(
            store
                .iter()
                .filter(|(_, labels, _)| {
                    let mine = labels.iter().any(|(k, v)| k == "topic" && v == topic);
                    mine || !labels.iter().any(|(k, _)| k == "topic")
                })
                .map(|(name, labels, value)| {
                    let rest = labels
                        .iter()
                        .filter(|(k, _)| k != "topic")
                        .cloned()
                        .collect();
                    (name.clone(), rest, copy(value))
                })
                .collect(),
        )
    }

    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        self.0.iter().find_map(|(n, l, v)| {
            let matches = labels
                .iter()
                .all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want));
            (n == name && matches).then_some(v)
        })
    }

    /// A counter's total.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.find(name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("no counter {name} {labels:?}: {other:?}"),
        }
    }

    /// A gauge that holds a count.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.find(name, labels) {
            Some(DebugValue::Gauge(g)) => {
                let v = g.into_inner();
                assert!(v >= 0.0 && v.fract() == 0.0, "{name} = {v}");
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "checked"
                )]
                let n = v as u64;
                n
            }
            other => panic!("no gauge {name} {labels:?}: {other:?}"),
        }
    }

    /// How many values a histogram observed.
    pub fn observations(&self, name: &str) -> usize {
        self.values(name).len()
    }

    /// The values a histogram observed, in seconds for a duration.
    pub fn values(&self, name: &str) -> Vec<f64> {
        match self.find(name, &[]) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|x| x.into_inner()).collect(),
            other => panic!("no histogram {name}: {other:?}"),
        }
    }
}

/// What `n` messages of `topic`, all handed out before the first of them was handled, then
/// handled one at a time by a handler that takes at least `took` each, must have recorded,
/// `elapsed` being what the whole test took: each handler duration is the handler's own
/// (at least `took`, and since the handlers ran one after another, together no more than
/// `elapsed`: measured from the hand-out instead, they would add up to about
/// `n * (n + 1) / 2 * took`), and the waits for the handler account for the queue (the
/// message taken `k`-th waited for the `k - 1` handlers before it). Lower bounds and the
/// disjointness of the handlers only: nothing here depends on how busy the machine is.
///
/// # Panics
///
/// When a figure is off.
pub fn check_handler_times(topic: &str, n: usize, took: Duration, elapsed: Duration) {
    let r = Recorded::take(topic);
    let durations = r.values("nsq_consumer_handler_duration_seconds");
    let mut waits = r.values("nsq_consumer_handler_wait_seconds");
    assert_eq!(
        (durations.len(), waits.len()),
        (n, n),
        "{durations:?} {waits:?}"
    );
    let took = took.as_secs_f64();
    for d in &durations {
        assert!(
            *d >= took,
            "a handler duration under the handler's own time: {durations:?}"
        );
    }
    let total: f64 = durations.iter().sum();
    assert!(
        total <= elapsed.as_secs_f64(),
        "handler durations add up to {total:.3} s in a test of {elapsed:?}: they include the \
         queue ({durations:?})"
    );
    // At most `i` messages waited less than `i` handlers: the `i`-th shortest wait (from 0)
    // is at least `i * took`.
    waits.sort_by(f64::total_cmp);
    for (i, w) in waits.iter().enumerate() {
        #[allow(clippy::cast_precision_loss, reason = "a handful of messages")]
        let floor = i as f64 * took;
        assert!(
            *w >= floor,
            "wait {i} is {w:.4} s, under {floor:.4} s: {waits:?}"
        );
    }
}

/// What `n` messages of `topic`, each taken with `recv` and finished at least `held` later,
/// must have recorded: a wait each (hand-out to `recv` returning it) and a duration of at
/// least `held` each (`recv` to `finish`).
///
/// # Panics
///
/// When a figure is off.
pub fn check_recv_times(topic: &str, n: usize, held: Duration) {
    let r = Recorded::take(topic);
    let durations = r.values("nsq_consumer_handler_duration_seconds");
    assert_eq!(durations.len(), n, "{durations:?}");
    assert!(
        durations.iter().all(|d| *d >= held.as_secs_f64()),
        "{durations:?}"
    );
    assert_eq!(r.observations("nsq_consumer_handler_wait_seconds"), n);
}

/// `DebugValue` is not `Clone`.
fn copy(value: &DebugValue) -> DebugValue {
    match value {
        DebugValue::Counter(n) => DebugValue::Counter(*n),
        DebugValue::Gauge(g) => DebugValue::Gauge(*g),
        DebugValue::Histogram(v) => DebugValue::Histogram(v.clone()),
    }
}

/// What the scripted scenario (6 publishes of 10 messages to `topic`, consumed with 2
/// handler failures, from the nsqd at `addr`) must have recorded, on every adapter.
pub fn check_scripted(topic: &str, addr: &str) {
    let r = Recorded::take(topic);
    let ch = [("channel", "metrics")];
    assert_eq!(r.counter("nsq_consumer_messages_received_total", &ch), 12);
    assert_eq!(r.counter("nsq_consumer_messages_finished_total", &ch), 10);
    assert_eq!(r.counter("nsq_consumer_messages_requeued_total", &ch), 2);
    assert_eq!(r.counter("nsq_consumer_messages_given_up_total", &ch), 0);
    assert_eq!(r.counter("nsq_consumer_handler_errors_total", &ch), 2);
    assert_eq!(r.counter("nsq_consumer_reconnects_total", &ch), 0);
    assert_eq!(r.counter("nsq_consumer_backoffs_total", &ch), 0);
    assert_eq!(r.observations("nsq_consumer_handler_duration_seconds"), 12);
    assert_eq!(r.observations("nsq_consumer_handler_wait_seconds"), 12);
    assert_eq!(r.observations("nsq_consumer_message_age_seconds"), 12);
    // After stop, the gauges are back to 0.
    assert_eq!(r.gauge("nsq_consumer_in_flight", &ch), 0);
    assert_eq!(r.gauge("nsq_consumer_connections", &ch), 0);
    assert_eq!(r.gauge("nsq_consumer_backoff_level", &ch), 0);
    assert_eq!(r.gauge("nsq_consumer_in_flight_limit", &ch), 0);
    assert_eq!(r.gauge("nsq_consumer_rdy", &[("nsqd", addr)]), 0);

    assert_eq!(r.counter("nsq_producer_messages_total", &[]), 10);
    assert_eq!(
        r.counter("nsq_producer_publishes_total", &[("result", "ok")]),
        6
    );
    assert_eq!(r.observations("nsq_producer_publish_duration_seconds"), 6);
    assert_eq!(r.observations("nsq_producer_batch_size"), 6);
    assert_eq!(r.gauge("nsq_producer_pending", &[]), 0);
}
