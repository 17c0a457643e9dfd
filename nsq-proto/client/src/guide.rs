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
//! # Configuration and errors
//!
//! Clients take a [`Config`](nsq_proto::Config): go-nsq's option names and defaults, set in
//! code, option by option (`config.set_str("max_in_flight", "100")`, like go-nsq's
//! `Config.Set`), or deserialised from JSON/TOML/... so existing go-nsq configurations port;
//! the builders' `core_config` takes the core's own structs (`proto::ConsumerConfig`, ...)
//! for what `Config` does not expose. Every fallible call returns an
//! [`Error`](crate::Error), whose variants a program can match on and whose `Display` says
//! everything once.
//!
//! # Logging
//!
//! Everything goes through `tracing`; install any subscriber (`tracing_subscriber::fmt()`
//! with `RUST_LOG`, as the examples do). Every line of a consumer is inside its span
//! `consumer{id=.. topic=.. channel=..}`, every line of a producer inside `producer{id=..}`
//! (ids unique in the process), and lines about a connection carry `conn` and `nsqd` (its
//! address). Every line's target is under `nsq_client` (this layer) or `nsq_proto` (the
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
//! says which message it is about.
//!
//! # Metrics
//!
//! With the `metrics` cargo feature the client records through the `metrics` facade, into
//! whatever recorder the application installs: `nsq_consumer_*` (received, finished,
//! requeued, given up, handler errors, reconnects and backoffs counters; in-flight, RDY per
//! nsqd, connections and backoff level gauges; handler duration and message age
//! histograms, labelled with the topic and channel) and `nsq_producer_*` (messages,
//! publishes by result and error kind, reconnects; pending; publish duration and batch
//! size). The consumer's counters follow the core's
//! [`ConsumerStats`](nsq_proto::consumer::ConsumerStats), once per round of its driver.
//! Without the feature nothing is compiled in.
