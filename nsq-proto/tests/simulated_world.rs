//! The consumer and producer in the test broker's simulated world (`nsq_test_broker::sim`):
//! scale the scripted worlds of `consumer_sim.rs` do not reach, on the same nsqd model the
//! socket test broker runs. The campaigns are the `simulate` example's (SIMULATION.md).

use nsq_test_support::sim as sim_glue;

use nsq_test_broker::sim::{self, SimConfig};

/// 100 nsqd and max_in_flight 10, no faults: the low-RDY rotation serves every nsqd within
/// the bound, delivers everything, and stops cleanly.
#[test]
fn a_hundred_nsqd_rotation() {
    let mut cfg = SimConfig::new(3, 100, 10);
    cfg.faults = 0;
    let r = sim::run(&cfg, &mut sim_glue::NsqProtoFactory::default());
    assert!(r.violation.is_none(), "{:?}", r.violation);
    assert!(r.worst_starvation <= r.starvation_bound);
    assert_eq!(r.finished + r.gave_up, r.published, "{r:?}");
}
