//! The broker crate's conformance scenarios, run against nsq-async-std twice: every client
//! call inside `async_std::task::block_on`, then inside `smol::block_on`.

mod common;

use common::{AsyncStd, Smol, conformance};

#[test]
fn conformance_async_std() {
    conformance::<AsyncStd>();
}

#[test]
fn conformance_smol() {
    conformance::<Smol>();
}
