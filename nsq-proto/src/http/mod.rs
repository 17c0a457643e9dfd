//! nsqd's and nsqlookupd's HTTP APIs, sans-IO.
//!
//! An exchange is one request written to a fresh connection (`Connection: close`) and one
//! response read until it is complete: [`Request::encode`] gives the bytes to write,
//! [`ResponseParser`] reads the answer, and each endpoint's typed reply is decoded from it.
//! The same [`ResponseParser`] reads nsqlookupd's `/lookup` for a consumer's discovery.

mod call;
mod exchange;
pub mod lookupd;
pub mod nsqd;
mod request;
mod response;

pub(crate) use call::check_status;
pub use call::{ApiError, Call, ServerMessage};
pub use exchange::{Exchange, ExchangeError};
pub use request::{InvalidHeader, Method, Request};
pub use response::{DEFAULT_MAX_BODY_SIZE, HttpError, MAX_HEAD_SIZE, Response, ResponseParser};

/// A JSON `null` read as the type's default (Go marshals a nil slice as `null`).
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    use serde::Deserialize as _;
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
