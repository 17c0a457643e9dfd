//! NSQ client adapter for tokio.
//!
//! This crate will move bytes between tokio sockets and the sans-IO state machines of
//! [`nsq_proto`]; every protocol decision stays in the core. The Producer and Consumer APIs land
//! with the adapter issues; today the crate only re-exports the core so the workspace layout is
//! in place.

pub use nsq_proto as proto;
