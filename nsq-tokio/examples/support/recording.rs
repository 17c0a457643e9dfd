//! `--metrics` of the tokio bench tools: the client's metrics recorded by a Prometheus
//! recorder (nsq-tokio's `metrics` feature), refused when the tool was built without it.

/// `--metrics`: the client's metrics recorded by a Prometheus recorder (nsq-tokio's `metrics`
/// feature), installed before the first consumer exists, its histograms drained every second
/// (the exporter's upkeep, which `install_recorder` leaves to the application) and rendered
/// once at the end: the whole recording path, paid inside the measured process.
#[cfg(feature = "metrics")]
mod imp {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
    use std::time::Duration;

    /// An installed recorder.
    pub struct Recording(PrometheusHandle);

    impl Recording {
        /// Installs the recorder when `enabled`.
        pub fn start(enabled: bool) -> Result<Option<Recording>, String> {
            if !enabled {
                return Ok(None);
            }
            // As the guide's metrics recipe: the client's histograms with their buckets.
            let mut builder = PrometheusBuilder::new();
            for (name, buckets) in nsq_tokio::HISTOGRAM_BUCKETS {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
                    .map_err(|e| format!("buckets of {name}: {e}"))?;
            }
            builder
                .install_recorder()
                .map(|handle| Some(Recording(handle)))
                .map_err(|e| format!("installing the Prometheus recorder: {e}"))
        }

        /// Runs the upkeep every second on `rt`.
        pub fn spawn_upkeep(&self, rt: &tokio::runtime::Runtime) {
            let handle = self.0.clone();
            rt.spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(1));
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    handle.run_upkeep();
                }
            });
        }

        /// Renders once: `metrics: N lines rendered (COUNTER = X)`, `counter` summed over
        /// its labels.
        pub fn summary(&self, counter: &str) -> String {
            let text = self.0.render();
            let total: f64 = text
                .lines()
                .filter(|l| {
                    l.strip_prefix(counter)
                        .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            format!(
                "metrics: {} lines rendered ({counter} = {total})",
                text.lines().count()
            )
        }
    }
}

/// Without the `metrics` feature `--metrics` is refused; nothing is recorded.
#[cfg(not(feature = "metrics"))]
mod imp {
    /// Never built without the feature.
    pub enum Recording {}

    impl Recording {
        /// Refuses `enabled`.
        pub fn start(enabled: bool) -> Result<Option<Recording>, String> {
            if enabled {
                Err(super::super::METRICS_NOT_BUILT.to_owned())
            } else {
                Ok(None)
            }
        }

        pub fn spawn_upkeep(&self, _: &tokio::runtime::Runtime) {
            match *self {}
        }

        pub fn summary(&self, _: &str) -> String {
            match *self {}
        }
    }
}

#[allow(unused_imports, reason = "the tools that take --metrics use it")]
pub use imp::Recording;
