//! A capturing recorder for the `metrics` tests of every adapter, and what it recorded for
//! one topic.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::sync::OnceLock;

/// The process's recorder (installed once; tests tell their metrics apart by topic).
pub(crate) fn snapshotter() -> &'static Snapshotter {
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

pub(crate) struct Recorded(Vec<Entry>);

impl Recorded {
    pub(crate) fn take(topic: &str) -> Recorded {
        let all = snapshotter().snapshot().into_vec();
        Recorded(
            all.into_iter()
                .filter_map(|(key, _, _, value)| {
                    let key = key.key();
                    let labels: Vec<(String, String)> = key
                        .labels()
                        .map(|l| (l.key().to_owned(), l.value().to_owned()))
                        .collect();
                    let mine = labels.iter().any(|(k, v)| k == "topic" && v == topic);
                    let unlabelled = !labels.iter().any(|(k, _)| k == "topic");
                    (mine || unlabelled).then(|| {
                        let rest = labels.into_iter().filter(|(k, _)| k != "topic").collect();
                        (key.name().to_owned(), rest, value)
                    })
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

    pub(crate) fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.find(name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("no counter {name} {labels:?}: {other:?}"),
        }
    }

    /// A gauge that holds a count.
    pub(crate) fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
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

    pub(crate) fn observations(&self, name: &str) -> usize {
        match self.find(name, &[]) {
            Some(DebugValue::Histogram(v)) => v.len(),
            other => panic!("no histogram {name}: {other:?}"),
        }
    }
}
