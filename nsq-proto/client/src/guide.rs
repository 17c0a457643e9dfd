//! # How a client runs
//!
//! Each [`Consumer`](crate::Consumer) and each [`Producer`](crate::Producer) (shared by its
//! clones) has one driver: it owns the client's sans-IO state machine (`nsq_proto`) and
//! reads and writes every socket of the client itself, so bytes read from a socket are
//! decoded, delivered and answered without a hop between tasks other than the hand-off to
//! the application; there is no reader or writer task per connection. Per wake-up the
//! driver takes every queued command (concurrent publishes leave in one write), reads each
//! socket until it would block (message bodies are slices of the read buffer: zero-copy),
//! drains the state machine, hands the wake-up's messages to the application at once, and
//! gives each connection at most one write; a blocked write never stops reading; one timer
//! follows the state machine's next deadline. Messages answer themselves with small
//! commands queued for the driver (no allocation per answer); publishes likewise, each with
//! its own reply, or returning at once with
//! [`Producer::publish_async`](crate::Producer::publish_async). Where the driver runs, and
//! whether the calls that wait drive it, is the runtime's part: the crate's own
//! documentation says.
//!
//! # Runtimes
//!
//! A client runs on a runtime: what lends it sockets, a timer, a place for its driver and the
//! clock. Each adapter crate turns one on, and a client finds it where it is built: on
//! tokio, inside the tokio runtime `build` is called in (with its IO and time drivers, else
//! [`Error::NoRuntime`](crate::Error::NoRuntime)); with nsq-async-std, on async-io's reactor,
//! from any thread, driven by the tasks that wait for it and a thread of its own for the
//! rest; with nsq-blocking, on a poller of the client's own, driven by the blocking calls that
//! wait and a thread of its own for the rest. A builder's `runtime(..)` gives a client
//! another one: nsq-async-std's `AsyncStd::on_executor` (drivers as tasks on the
//! application's executor), tokio's `Tokio::on` (a given tokio runtime), or a runtime of your
//! own ([`Runtime`](crate::Runtime)).
//!
//! # Configuration and errors
//!
//! Clients take a [`Config`](nsq_proto::Config): go-nsq's option names and defaults, set in
//! code, option by option (`config.set_str("max_in_flight", "100")`, like go-nsq's
//! `Config.Set`), or deserialised from JSON/TOML/... so existing go-nsq configurations port;
//! the builders' `core_config` takes the core's own structs (`proto::ConsumerConfig`, ...)
//! for what `Config` does not expose.
//!
//! Every fallible call returns an [`Error`](crate::Error), with variants a program can match
//! on, and a `Display` that says each thing once (no error also returns from `source()` a
//! cause it already shows, so anyhow's or eyre's `{:#}` prints the same single line):
//!
//! | error | `Display` (and `{:#}`) |
//! |---|---|
//! | `Error::InvalidTopic { name, reason }` | `invalid topic name "bad topic!": invalid character ' ' at byte 3: names use only [.a-zA-Z0-9_-] with an optional #ephemeral suffix` |
//! | `Error::Server(e)`, `e.code() == ErrorCode::BadMessage` | `nsqd error E_BAD_MESSAGE: PUB invalid message body size 0` |
//! | `Error::ConnectionLost(CloseReason::Eof)` | `connection lost before nsqd answered: the server closed the connection` |
//! | `Error::Misconfigured { nsqd, problem: Misconfiguration::HttpPort }` | `cannot use nsqd 127.0.0.1:4151 as configured: the address answered in HTTP: it is an HTTP port (nsqd's 4151 or nsqlookupd's 4161 by default), not nsqd's TCP port (4150 by default)` |
//! | `Error::Lookupd { lookupd, error: LookupdError::NotLookupd }` | `cannot use nsqlookupd http://127.0.0.1:4151/lookup as configured: the lookupd address has no /lookup (HTTP 404 NOT_FOUND): it is not an nsqlookupd; ...` |
//!
//! `Error::NoServerAvailable` means no nsqd is reachable now, and the client keeps trying.
//! `Error::Misconfigured` means an nsqd cannot work as configured (a `Misconfiguration`: an
//! HTTP port, nsqlookupd's TCP port, TLS required or not offered, a TLS handshake refused,
//! AUTH secret missing or refused): it is logged once at ERROR and not retried until the
//! address is added again. A lookupd address that is no nsqlookupd is `Error::Lookupd` with
//! `error.is_misconfiguration()`, likewise not polled again. Whether a failed publish is worth
//! trying again:
//!
//! ```
//! # use nsq_client::{Error, InputError};
//! # use nsq_proto::ErrorCode;
//! fn worth_retrying(e: &Error) -> bool {
//!     match e {
//!         // nsqd refused the message itself: retrying cannot help.
//!         Error::Server(s) if s.code() == ErrorCode::BadMessage => false,
//!         Error::InvalidTopic { .. } | Error::InvalidInput(InputError::Publish(_)) => false,
//!         // Perhaps published already: a retry may deliver it twice (NSQ is at-least-once).
//!         e if e.maybe_published() => true,
//!         // None reachable now; the client keeps trying.
//!         Error::NoServerAvailable(_) | Error::Backpressure(_) => true,
//!         // The wrong port, a TLS mismatch, refused credentials: fix the configuration.
//!         _ => false,
//!     }
//! }
//! assert!(!worth_retrying(&Error::Closed));
//! ```
//!
//! A message handler returns `Result<(), HandlerError>` and can use `?` on any error: an
//! `std::error::Error`, a `Box<dyn Error + Send + Sync>`, an `anyhow::Error`. The error keeps
//! its chain, and a failure is logged with it (`error=writing the row: disk full`). The
//! give-up hook (`on_give_up(|m: &Message| ..)`) receives the same `Message` type as the
//! handlers.
//!
//! # Logging
//!
//! Everything goes through `tracing`; install any subscriber (`tracing_subscriber::fmt()`
//! with `RUST_LOG`, as the examples do). Every line of a consumer is inside its span
//! `consumer{id=.. topic=.. channel=..}`, every line of a producer inside `producer{id=..}`
//! (ids unique in the process), and lines about a connection carry `conn` and `nsqd` (its
//! address). Those spans are at ERROR, so they hold under any filter: with `RUST_LOG=warn` a
//! warning still names its client and nsqd. Every line's target is under `nsq_client` (this layer) or `nsq_proto` (the
//! protocol: `nsq_proto::connection`, `nsq_proto::consumer`, ...), whichever adapter runs
//! it, so `RUST_LOG=nsq_client=debug,nsq_proto=debug` selects them all. Each event is
//! logged once. At INFO a consumer's session reads (targets omitted):
//!
//! ```text
//! INFO consumer{id=2 topic=orders channel=billing}: connecting to nsqd conn=conn#1 nsqd=127.0.0.1:4150
//! INFO consumer{id=2 topic=orders channel=billing}: connected to nsqd conn=conn#1 nsqd=127.0.0.1:4150
//! WARN consumer{id=2 topic=orders channel=billing}: nsqd connection failed; retrying in 508.7ms conn=conn#2 nsqd=127.0.0.1:4151 reason=Connection refused (os error 111) retry_in=508.7ms
//! WARN consumer{id=2 topic=orders channel=billing}: handler failed: requeueing the message msg_id=0eac97ff46d5a930 attempts=1 nsqd=127.0.0.1:4150 error=No such file or directory (os error 2)
//! INFO consumer{id=2 topic=orders channel=billing}: max_in_flight is 0: the consumer is paused (RDY 0) until it is raised max_in_flight=0
//! INFO consumer{id=2 topic=orders channel=billing}: nsqd connection closed conn=conn#1 nsqd=127.0.0.1:4150 reason=connection closed
//! ```
//!
//! A handler error is logged at WARN with the message id, attempts and the error's whole
//! chain; a panicking handler at ERROR with the panic's message; a message dropped
//! unanswered, a message given up on (`max_attempts`), an nsqlookupd that does not answer
//! (or answers with something other than HTTP: the wrong port), entering backoff (with its
//! level and window: messages wait meanwhile) and more `run` handlers than `max_in_flight`
//! at WARN; the end of backoff at INFO. DEBUG adds the protocol's details (upgrades, RDY,
//! each step out of backoff, each lookupd query) inside `connection{conn=.. nsqd=..}`
//! spans.
//!
//! Each handler of [`Consumer::run`](crate::Consumer::run) runs inside a
//! `message{id=.. attempts=.. nsqd=..}` span, a child of its consumer's: what a handler logs
//! says which message it is about. That span is at INFO (one per message costs nothing where
//! INFO is off); under a filter above INFO a handler's lines are inside its consumer's span.
//!
//! # Metrics
//!
//! With the `metrics` cargo feature the client records through the
//! [`metrics`](https://docs.rs/metrics) facade, into whatever recorder the application
//! installs (metrics-exporter-prometheus, statsd, OpenTelemetry bridges). Without the feature
//! nothing is recorded and nothing is paid. Names follow Prometheus conventions; label values
//! stay bounded (no message ids, no error text).
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `nsq_consumer_messages_received_total` | counter | topic, channel | messages delivered by nsqd |
//! | `nsq_consumer_messages_finished_total` | counter | topic, channel | FINs sent |
//! | `nsq_consumer_messages_requeued_total` | counter | topic, channel | REQs sent (handler errors, drops, requeues) |
//! | `nsq_consumer_messages_given_up_total` | counter | topic, channel | messages past `max_attempts` |
//! | `nsq_consumer_handler_errors_total` | counter | topic, channel | handlers that returned an error or panicked |
//! | `nsq_consumer_reconnects_total` | counter | topic, channel | connections made again to an nsqd the consumer was connected to before, given directly or found through nsqlookupd (as `stats().reconnects`) |
//! | `nsq_consumer_backoffs_total` | counter | topic, channel | times the consumer entered backoff |
//! | `nsq_consumer_in_flight` | gauge | topic, channel | messages held by the application |
//! | `nsq_consumer_rdy` | gauge | topic, channel, nsqd | RDY per connection |
//! | `nsq_consumer_connections` | gauge | topic, channel | ready connections |
//! | `nsq_consumer_backoff_level` | gauge | topic, channel | 0 when not backing off |
//! | `nsq_consumer_in_flight_limit` | gauge | topic, channel | the in-flight limit in force (`max_in_flight`, or the adaptive limit below it) |
//! | `nsq_consumer_handler_duration_seconds` | histogram | topic, channel | the handler's own time, from its start to its return (for a message taken with `recv`: from `recv` returning it to its `finish`, `requeue` or drop) |
//! | `nsq_consumer_handler_wait_seconds` | histogram | topic, channel | the time before: from the driver handing the message out to a handler starting on it (the queue in front of busy handlers; for `recv`, to `recv` returning it) |
//! | `nsq_consumer_message_age_seconds` | histogram | topic, channel | receipt minus nsqd's timestamp (consumer lag) |
//! | `nsq_consumer_batches_total` | counter | topic, channel, end (`full`/`bytes`/`bound`/`linger`/`stop`) | batches handed over, by why |
//! | `nsq_consumer_batches_failed_total` | counter | topic, channel | batches that failed as a whole |
//! | `nsq_consumer_batch_messages` | histogram | topic, channel | messages per batch |
//! | `nsq_consumer_batch_linger_seconds` | histogram | topic, channel | a batch's first message to its hand-over |
//! | `nsq_producer_messages_total` | counter | topic | messages nsqd accepted |
//! | `nsq_producer_publishes_total` | counter | topic, result (`ok`/`error`), error (kind) | PUB/MPUB/DPUB results |
//! | `nsq_producer_reconnects_total` | counter | nsqd | connection attempts after the nsqd's first, successful or not |
//! | `nsq_producer_pending` | gauge | | publishes waiting for their result |
//! | `nsq_producer_publish_duration_seconds` | histogram | topic | call to nsqd's answer |
//! | `nsq_producer_batch_size` | histogram | topic | messages per publish call |
//!
//! Gauges return to 0 when a client stops. The consumer's counters follow the core's
//! [`ConsumerStats`](nsq_proto::consumer::ConsumerStats), once per round of its driver. The
//! histograms have buckets chosen for each ([`HISTOGRAM_BUCKETS`](crate::HISTOGRAM_BUCKETS),
//! re-exported by every adapter): give them to the recorder, so that Prometheus gets
//! histogram families it can aggregate across instances, not the summaries
//! metrics-exporter-prometheus renders by default:
//!
//! ```ignore
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//!
//! let mut builder = PrometheusBuilder::new();
//! for (name, buckets) in HISTOGRAM_BUCKETS {
//!     builder = builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)?;
//! }
//! let handle = builder.install_recorder()?; // handle.render() is the scrape
//! ```
//!
//! The histograms are most of what recording costs per message (BENCHMARKS.md): with
//! `metrics_histograms = false` in the `Config` the client records counters and gauges only,
//! once per wake-up of its driver. nsq-tokio's `prometheus` example consumes a topic and
//! serves the Prometheus text format with these buckets.
//!
//! # An in-flight limit that finds itself
//!
//! A handler that calls a database, a service or a disk is bounded by that downstream's
//! capacity: beyond it, more messages in flight only queue in front of it, latency grows,
//! messages time out on nsqd and come back as duplicates, and a service that slows down under
//! load collapses. The right `max_in_flight` depends on that capacity, and the capacity
//! changes. Instead of a number picked by hand, let the consumer find it:
//!
//! ```
//! # use nsq_proto::{Config, consumer::InFlightMode};
//! let config = Config {
//!     max_in_flight: 500,                     // the ceiling
//!     max_in_flight_mode: InFlightMode::Adaptive,
//!     min_in_flight: 1,                       // the floor
//!     ..Config::default()
//! };
//! # config.validate().unwrap();
//! ```
//!
//! (`"max_in_flight_mode": "adaptive"`, `"min_in_flight"` in a JSON configuration.) The
//! consumer measures each message's handling latency (hand-out to answer) and keeps the limit
//! at the knee, where the downstream is busy and nothing queues in front of it: it starts at
//! the floor, doubles until latency grows, then follows a gradient over a re-measured
//! uncongested latency (as Envoy's adaptive concurrency filter and Netflix's Gradient2 do),
//! following the capacity when it halves or doubles. Expiries and failed windows shrink it;
//! while backing off it is frozen, so backoff works as before. RDY and `run`'s concurrency
//! follow the limit; it shows in `stats().in_flight_limit`, the `Event::InFlightLimit`
//! events, DEBUG logs and the `nsq_consumer_in_flight_limit` gauge. The limit holds the mean
//! latency, not the tail: set a static ceiling at the capacity where a p99 bound matters. Use
//! a static `max_in_flight` for handlers that wait on nothing (CPU-bound). SIMULATION.md
//! measures it over capacities from 1 to 1,000 and service times from 1 ms to 1 s, and
//! BENCHMARKS.md on a real nsqd against static settings.
//!
//! # Batches
//!
//! Many consumers write what they receive somewhere that is cheaper per message in bulk: a
//! database (one transaction, one multi-row insert), object storage (one upload), a file
//! (one fsync). NSQ's way is to hold the messages unanswered until the bulk write is safe,
//! then finish them (nsqd's own `nsq_to_file` finishes after fsync). The consumers' batches do
//! that, with every duty of the client kept:
//!
//! ```
//! # use nsq_client::{Batch, BatchOptions, Consumer, HandlerError};
//! # use std::time::Duration;
//! # async fn insert(_: Vec<&[u8]>) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn example(consumer: Consumer) {
//! let options = BatchOptions::new()
//!     .max_messages(1_000)                // at most this many messages
//!     .max_bytes(16 << 20)                // and this many bytes of bodies
//!     .linger(Duration::from_millis(500)); // from its first message, at most
//! let report = consumer
//!     .run_batch(2, options, |mut batch: Batch| async move {
//!         let mut rows = Vec::new();
//!         for mut message in batch.iter_mut() {
//!             if message.body().is_empty() {
//!                 message.fail("an empty record"); // this one is requeued, the rest finish
//!             } else {
//!                 rows.push(message.body().to_vec());
//!             }
//!         }
//!         insert(rows.iter().map(Vec::as_slice).collect()).await?; // Err: all requeued
//!         Ok::<(), HandlerError>(()) // every message not failed above: FIN
//!     })
//!     .await;
//! # let _ = report;
//! # }
//! ```
//!
//! A batch is handed over when it holds `max_messages`, when the next message would take it
//! past `max_bytes` (that message starts the next batch), `linger` after its first message,
//! when no message can arrive before the application answers one, or on stop. The
//! batch says which ([`BatchEnd`](crate::BatchEnd): `Full`, `Bytes`, `Linger`, `Bound`,
//! `Stop`). `recv_batch` and `batches` (a `Stream`) give them without a handler; the blocking
//! crate has `recv_batch` and `run_batch` on threads.
//!
//! - **The bound and linger.** `max_in_flight` still bounds every message the application
//!   holds, batches included. A batch never waits for messages that cannot come: once the
//!   application holds all `max_in_flight` allows (or backoff has RDY at 0 or 1), the batch is
//!   handed over at once (`BatchEnd::Bound`) instead of waiting out its linger. So with
//!   `max_in_flight` below `max_messages`, batches hold at most `max_in_flight` messages (less
//!   when several batches are held at once: `run_batch` gathers one batch while the handlers
//!   of up to `workers` others run). For full batches, set `max_in_flight` to at least
//!   `max_messages x (workers + 1)`; `run_batch` says so at WARN when it is below
//!   `max_messages x workers`.
//! - **Held messages do not time out.** Batches turn the consumer's `auto_touch` on: while a
//!   batch fills and while it is handled, each message is touched a little before nsqd's
//!   `msg_timeout` (for up to `auto_touch_limit` after its delivery, 15 minutes by default;
//!   nsqd's `--max-msg-timeout` caps it too). A long linger or a slow bulk write does not make
//!   nsqd redeliver them.
//! - **Answers.** The handler's `Ok` finishes the batch's messages; marked ones
//!   ([`BatchEntry`](crate::BatchEntry): `fail`, `requeue`, `requeue_without_backoff`) are
//!   answered as marked, so one bad record does not fail the batch. An `Err` (or a panic)
//!   requeues the whole batch as the error says, and counts once for backoff, not once per
//!   message (go-nsq's backoff would otherwise climb to its maximum on one failed batch). A
//!   batch taken with `recv_batch` is answered with `finish`, `requeue` or `answer`; one
//!   dropped unanswered is requeued, with a warning.
//! - **Stop.** A stop hands the partial batch to a handler (`BatchEnd::Stop`) and the drain
//!   waits for its answer (up to `drain_timeout`): nothing gathered is lost or left to time
//!   out. Messages received and not taken into a batch yet join it as far as it has room
//!   (`max_messages`, `max_bytes`); the rest are requeued at once.
//! - **Many nsqd.** RDY is spread over the nsqd as without batches; a batch mixes the
//!   messages of every nsqd, each answered on its own connection. Where `max_in_flight` is
//!   spread thin (a few RDY per nsqd), a backlog on one nsqd while the others are idle comes
//!   in at about its RDY per batch, and each batch waits out its `linger` (the idle nsqd's
//!   RDY could still bring messages, so the bound is not reached): keep `linger` short there,
//!   or `max_in_flight` well above the number of nsqd (SIMULATION.md, "Batches across many
//!   nsqd").
//!
//! `ConsumerHandle::batch_stats` counts batches, their messages, why each ended and the
//! failed ones; `Event::BatchFailed` reports a batch that failed as a whole; the metrics
//! above have their sizes and lingers. nsq-tokio's `nsq_to_file` and nsq-blocking's
//! `nsq_to_sqlite` examples are built on batches.
//!
//! # Multi-zone deployments
//!
//! In a deployment over several zones, cross-zone traffic is what the operator pays for.
//! nsqd after v1.3.0 (built from its main branch) knows its place (`--topology-zone`,
//! `--topology-region`), and, with `--enable-experiment=topology-aware-consumption`, hands a
//! channel's messages to a subscriber in its own zone when one is ready for them, then to
//! one in its own region, then to any, counting each kind per channel in `/stats`
//! (`zone_local_msg_count`, `region_local_msg_count`, `global_msg_count`). The client says
//! where it runs with go-nsq's options, sent in IDENTIFY:
//!
//! ```
//! # use nsq_proto::{Config, producer::Routing};
//! let config = Config {
//!     topology_zone: Some("eu-west-1a".into()),
//!     topology_region: Some("eu-west-1".into()),
//!     // Producers: publish to the nearest nsqd: same zone, then same region, then any.
//!     producer_routing: Routing::Topology,
//!     ..Config::default()
//! };
//! # config.validate().unwrap();
//! ```
//!
//! (`"topology_zone"`, `"topology_region"` and `"producer_routing": "topology"` in a ported
//! go-nsq JSON configuration.) A consumer's `stats().nsqd[i]` shows each nsqd's zone and
//! region as its IDENTIFY reply states them; the producer takes them from the same replies,
//! and falls over to the next nearest nsqd while the nearest is down. nsqd v1.3.0 states no
//! topology: the producer then routes as `failover`, and the options are ignored. The test
//! broker implements the experiment the same way (`NsqdBuilder::topology_zone`,
//! `topology_region`, `topology_aware_consumption`).
//!
//! # Administering a cluster
//!
//! nsqd's and nsqlookupd's HTTP APIs are typed: `http::nsqd::*` and `http::lookupd::*` make
//! one call per endpoint of v1.3.0 (its request and its typed reply, sans-IO, in nsq-proto),
//! an `HttpClient` makes them to one address, and a `Cluster` does what nsqadmin does over a
//! set of nsqlookupd (or of nsqd): list topics, channels, nodes and a topic's producers; one
//! topic's or channel's stats over every nsqd that has it, per nsqd and summed; create,
//! delete, pause, unpause and empty everywhere it applies. Errors are typed:
//! `TOPIC_NOT_FOUND` is `ServerMessage::TopicNotFound`, nsqd's TCP port given for its HTTP
//! port is "wrong port?", and a node that fails during a cluster operation is listed in the
//! report's `failures`, never hidden. HTTPS (nsqd's `--https-address`) uses the TCP client's
//! TLS options: `HttpConfig::from_config(&config)`. The crate's own documentation has an
//! example; `nsq_stat` (nsq-tokio's example) is the official tool's twin, built on
//! `Cluster`.
