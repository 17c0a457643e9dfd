//! What every adapter crate re-exports at its root (`pub use nsq_client::prelude::*;`):
//! the types its API names, so a program needs only the adapter crate.

pub use super::{
    Backpressure, ChannelStatsReport, ClusterReport, EVENTS_CAPACITY, Error, Event, GiveUpHook,
    HandlerError, HttpConfig, HttpFailure, InputError, IntoChannel, IntoTopic, Message,
    NodeFailure, Outcome, StopReport, TopicStatsReport,
};
pub use bytes::Bytes;
pub use nsq_proto::config::OptionError;
pub use nsq_proto::consumer::{
    BackoffStrategy, ConsumerConfig, ConsumerError, ConsumerStats, LookupdAddressError, NsqdState,
    NsqdStats,
};
pub use nsq_proto::http;
pub use nsq_proto::producer::{ProducerConfig, ProducerStats, Routing};
pub use nsq_proto::{
    Channel, CloseReason, CommandError, Compression, Config, ConfigError, ConnectionConfig,
    ConnectionError, ErrorCode, MessageId, Misconfiguration, NameError, Secret, ServerError,
    TlsConfig, Topic,
};
pub use serde_json;
