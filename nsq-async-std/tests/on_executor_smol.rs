//! The shared adapter scenarios with every client's driver a task on smol's executor, its
//! sockets and timer on async-io's reactor ([`nsq_async_std::set_executor`]), instead of on
//! a thread of its own. A test binary of its own: the executor is chosen process-wide.

mod common;
#[path = "../../tests/glue/nsq_proto.rs"]
#[allow(unused, reason = "this binary uses part of the glue")]
mod glue;
mod scenario_adapter;

use common::{Runtime, SmolExecutor};

mod on_executor {
    nsq_test_broker::adapter_scenario_tests!(
        crate::scenario_adapter::adapter::<crate::SmolExecutor>
    );
}

/// A client built after `set_executor` runs no thread of its own: its driver is a task.
#[cfg(target_os = "linux")]
#[test]
fn drivers_are_tasks_not_threads() {
    use nsq_async_std::{Config, Consumer, Producer};
    use std::time::Duration;
    SmolExecutor::setup();
    let nsqd = nsq_test_broker::Nsqd::start().unwrap();
    let addr = nsqd.tcp_address().to_string();
    SmolExecutor::block_on(async {
        common::timeout(Duration::from_secs(20), async {
            let p = Producer::connect(&addr, &Config::default()).await.unwrap();
            let mut c = Consumer::builder("t", "c")
                .nsqd(addr.as_str())
                .build()
                .unwrap();
            p.publish("t", "hello").await.unwrap();
            assert!(
                common::driver_threads().is_empty(),
                "{:?}",
                common::driver_threads()
            );
            p.close().await;
            c.stop().await;
        })
        .await
        .expect("within 20 s");
    });
}
