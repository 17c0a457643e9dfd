//! What every adapter crate re-exports at its root (`pub use nsq_client::prelude::*;`):
//! the types a program names, so it needs only the adapter crate. What it rarely needs
//! (the core's own configuration structs and error types) is in `nsq_proto`, which each
//! adapter re-exports as `proto`.

pub use super::{
    Backpressure, Batch, BatchEnd, BatchEntry, BatchOptions, BatchStats, ChannelStatsReport,
    ClusterReport, Error, Event, HISTOGRAM_BUCKETS, HandlerError, HttpConfig, HttpFailure,
    InputError, IntoChannel, IntoTopic, Message, NodeFailure, StopReport, TopicStatsReport,
};
pub use nsq_proto::consumer::{BackoffStrategy, ConsumerStats, InFlightMode, NsqdState, NsqdStats};
pub use nsq_proto::http;
pub use nsq_proto::producer::{ProducerStats, Routing};
pub use nsq_proto::{
    Channel, CloseReason, Compression, Config, ErrorCode, MessageId, Misconfiguration, NameError,
    Secret, ServerError, TlsConfig, Topic,
};
