//! The consumer side: many nsqd connections for one topic/channel.
//!
//! * [`lookupd`]: the sans-IO HTTP exchange with nsqlookupd.
//! * [`policy`]: pure policies (backoff, reconnect schedule, requeue delay, RDY planning).

pub mod lookupd;
pub mod policy;

pub use lookupd::{LookupdAddress, LookupdAddressError, LookupdError, LookupdResponseParser};
pub use policy::{BackoffStrategy, ReconnectSchedule};
