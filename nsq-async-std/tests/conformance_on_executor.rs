//! The broker crate's conformance scenarios against nsq-async-std with every client's driver
//! a task on smol's executor ([`nsq_async_std::AsyncStd::on_executor`]), given to each
//! client.

mod common;

use common::SmolExecutor;

#[test]
fn conformance_smol_executor() {
    common::conformance::<SmolExecutor>();
}
