//! Smoke test.
use nsq_test_broker::conformance::Env;
use serde_json::json;
use std::time::Duration;

#[test]
fn smoke() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new(|b| b);
    let mut p = env.raw();
    assert_eq!(
        p.identify(&json!({}))?,
        nsq_test_broker::RawFrame::Response(b"OK".to_vec())
    );
    p.publish("t", b"hello")?;
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"msg_timeout": 1000}))?;
    assert_eq!(r["msg_timeout"], 1000);
    c.subscribe("t", "c")?;
    c.cmd("RDY 1")?;
    let m = c.expect_message()?;
    assert_eq!(m.body, b"hello");
    assert_eq!(m.attempts, 1);
    let m2 = c.expect_message()?;
    assert_eq!(m2.attempts, 2);
    c.cmd(&format!("FIN {}", m2.id_str()))?;
    assert!(c.quiet_for(Duration::from_millis(100))?);
    Ok(())
}
