//! The code this repository's tests share across packages, as code rather than files
//! included with `#[path]`: a dev-dependency of nsq-proto, nsq-test-broker and the adapters,
//! never published (`publish = false`; a dev-dependency without a version, which
//! `cargo package` strips from the packed manifests).
//!
//! * [`sim`]: nsq-proto's sans-IO clients as the test broker's simulated client.
//! * [`log_capture`]: captured `tracing` output for the adapters' log tests.
//! * With the `client` feature, over nsq-client's generic types (`R: nsq_client::Adapter`,
//!   the adapter's runtime): `glue` (the scenarios' nsq-proto side), the adapters' shared
//!   test bodies (`http_api`, `metrics` with its `recorder`), the shared scenarios' clients
//!   (`scenarios`), the conformance suite's (`conformance`), the driver-end runtime and test
//!   (`driver_end`), `stop()` inside a handler (`stop_inside`), max_in_flight at 40 busy
//!   brokers (`in_flight`), the Prometheus rendering of
//!   the client's histograms (`prometheus`), all blocking on an `exec::Exec` (the adapter's way to run a future).

pub mod log_capture;
pub mod sim;

#[cfg(feature = "client")]
pub mod adaptive;
#[cfg(feature = "client")]
pub mod batches;
#[cfg(feature = "client")]
pub mod conformance;
#[cfg(feature = "client")]
pub mod driver_end;
#[cfg(feature = "client")]
pub mod exec;
#[cfg(feature = "client")]
pub mod glue;
#[cfg(feature = "client")]
#[allow(
    clippy::many_single_char_names,
    reason = "t, c: the topic and channel; n, l: the nsqd and lookupd clients"
)]
pub mod http_api;
#[cfg(feature = "client")]
pub mod in_flight;
#[cfg(feature = "client")]
pub mod metrics;
#[cfg(feature = "client")]
pub mod prometheus;
#[cfg(feature = "client")]
pub mod recorder;
#[cfg(feature = "client")]
pub mod scenarios;
#[cfg(feature = "client")]
pub mod stop_inside;
