//! The broker crate's conformance scenarios against nsq-async-std with every client's driver
//! a task on smol's executor ([`nsq_async_std::set_executor`]). A test binary of its own:
//! the executor is chosen process-wide.

mod common;

use common::{Runtime, SmolExecutor};

#[test]
fn conformance_smol_executor() {
    SmolExecutor::setup();
    common::conformance::<SmolExecutor>();
}
