//! nsqd without IO: the rules the socket broker ([`Nsqd`](crate::Nsqd)) and the simulator
//! (`sim`) share.
//!
//! * [`Queues`]: topics, channels, messages and each client's flow control (RDY, in flight,
//!   FIN/REQ/TOUCH, timeouts, deferred messages), fed with instants and ids by the caller.
//! * [`Nsqd`]: one nsqd's TCP protocol V2 over plain connections, fed with bytes
//!   and instants, over [`Queues`].
//! * `commands`: each command's state checks, parameter parsing and validation, with nsqd's
//!   error codes and texts (used by both nsqds).

pub(crate) mod commands;
mod nsqd;
mod queues;

pub use nsqd::{Nsqd, NsqdOptions};
pub use queues::{
    AnswerError, Channel, ClientId, ClientState, Flow, IN_FLIGHT_LOG_LEN, InFlight, Msg, Push,
    Queues, Removed, Topic, frame, is_ephemeral,
};
