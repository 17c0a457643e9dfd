//! The shared adapter scenarios with every client's driver a task on async-std's executor, its
//! sockets and timer on async-io's reactor ([`nsq_async_std::AsyncStd::on_executor`]), instead of
//! on a thread of its own.

mod common;

use common::AsyncStdExecutor;

mod on_executor {
    nsq_test_broker::adapter_scenario_tests!(crate::common::clients::<crate::AsyncStdExecutor>);
}

/// A client given the executor runs no thread of its own: its driver is a task.
#[cfg(target_os = "linux")]
#[test]
fn drivers_are_tasks_not_threads() {
    common::drivers_are_tasks_not_threads::<AsyncStdExecutor>();
}
