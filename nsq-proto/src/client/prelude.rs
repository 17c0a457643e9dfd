//! What every adapter crate re-exports at its root (`pub use nsq_proto::client::prelude::*;`):
//! the types its API names, so a program needs only the adapter crate.

pub use super::{
    AnswerChannel, AnswerKind, Backpressure, Delivery, EVENTS_CAPACITY, Error, Event, GiveUpHook,
    HandlerError, InputError, IntoChannel, IntoTopic, Message, StopReport,
};
pub use crate::config::OptionError;
pub use crate::consumer::{
    BackoffStrategy, ConsumerConfig, ConsumerError, ConsumerStats, LookupdAddressError, NsqdState,
    NsqdStats,
};
pub use crate::driver::ConnId;
pub use crate::producer::{ProducerConfig, ProducerStats, Routing};
pub use crate::{
    Channel, CloseReason, CommandError, Compression, Config, ConfigError, ConnectionConfig,
    ConnectionError, ErrorCode, MessageId, Misconfiguration, NameError, Secret, ServerError,
    TlsConfig, Topic,
};
pub use bytes::Bytes;
pub use serde_json;
