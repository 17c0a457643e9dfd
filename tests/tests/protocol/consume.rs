//! A subscriber's commands: RDY and its limit, FIN, REQ and TOUCH (ids, ownership, the REQ
//! delay clamp), and CLS.

use std::time::Duration;

use nsq_test_broker::RawFrame;
use nsq_test_broker::conformance::Env;
use serde_json::json;

use crate::{R, alive, env, fatal_after};

#[test]
fn req_delay_above_max_req_timeout_is_clamped_not_refused() -> R {
    let env = env();
    let t = env.topic("proto");
    let mut c = env.raw();
    c.subscribe(&t, "c")?;
    c.cmd("RDY 1")?;
    let mut p = env.raw();
    assert_eq!(p.publish(&t, b"r")?, RawFrame::Response(b"OK".to_vec()));
    let m = c.expect_message()?;
    // Far above the default --max-req-timeout (1h): clamped, no error, not redelivered now.
    c.cmd(&format!("REQ {} 999999999999", m.id_str()))?;
    assert!(c.quiet_for(Duration::from_millis(300))?);
    c.cmd(&format!("FIN {}", m.id_str()))?;
    assert_eq!(
        c.expect_error("E_FIN_FAILED")?,
        format!("E_FIN_FAILED FIN {} failed ID not in flight", m.id_str())
    );
    if let Some(nsqd) = env.nsqd() {
        let ch = nsqd.channel(&t, "c").ok_or("channel")?;
        assert_eq!((ch.requeued, ch.deferred, ch.in_flight), (1, 1, 0));
    }
    c.cmd(&format!("REQ {} -1", m.id_str()))?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID REQ could not parse timeout -1"
    );
    Ok(())
}

#[test]
fn rdy_rules() -> R {
    let env = env();
    let t = env.topic("proto");
    let sub = format!("SUB {t} c");
    fatal_after(
        &env,
        &[],
        b"RDY 1\n",
        "E_INVALID cannot RDY in current state",
    )?;
    fatal_after(
        &env,
        &[sub.as_str()],
        b"RDY 2501\n",
        "E_INVALID RDY count 2501 out of range 0-2500",
    )?;
    fatal_after(
        &env,
        &[sub.as_str()],
        b"RDY abc\n",
        "E_INVALID RDY could not parse count abc",
    )?;
    fatal_after(
        &env,
        &[sub.as_str()],
        b"RDY -1\n",
        "E_INVALID RDY could not parse count -1",
    )?;
    let mut c = env.raw();
    c.subscribe(&t, "c")?;
    c.cmd("RDY 2500")?;
    c.cmd("RDY 0")?;
    c.cmd("RDY")?;
    alive(&env, &mut c)?;
    if let Some(nsqd) = env.nsqd() {
        // A bare RDY means 1.
        assert!(
            nsqd.clients()
                .iter()
                .any(|s| s.subscription.is_some() && s.rdy == 1)
        );
    }
    Ok(())
}

#[test]
fn rdy_limit_follows_option() -> R {
    let env = Env::new(|b| b.max_rdy_count(10));
    let Some(_) = env.local_only("rdy_limit_follows_option", "custom --max-rdy-count") else {
        return Ok(());
    };
    let mut c = env.raw();
    assert_eq!(c.identify_negotiate(&json!({}))?["max_rdy_count"], 10);
    c.subscribe(&env.topic("proto"), "c")?;
    c.cmd("RDY 10")?;
    c.cmd("RDY 11")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID RDY count 11 out of range 0-10"
    );
    Ok(())
}

#[test]
fn fin_req_touch_rules() -> R {
    let env = env();
    let t = env.topic("proto");
    let sub = format!("SUB {t} c");
    for cmd in ["FIN", "REQ", "TOUCH"] {
        fatal_after(
            &env,
            &[],
            format!("{cmd} 0123456789abcdef 0\n").as_bytes(),
            &format!("E_INVALID cannot {cmd} in current state"),
        )?;
        fatal_after(
            &env,
            &[sub.as_str()],
            format!("{cmd}\n").as_bytes(),
            &format!("E_INVALID {cmd} insufficient number of params"),
        )?;
        fatal_after(
            &env,
            &[sub.as_str()],
            format!("{cmd} abc 0\n").as_bytes(),
            "E_INVALID invalid message ID",
        )?;
    }
    fatal_after(
        &env,
        &[sub.as_str()],
        b"REQ 0123456789abcdef\n",
        "E_INVALID REQ insufficient number of params",
    )?;
    fatal_after(
        &env,
        &[sub.as_str()],
        b"REQ 0123456789abcdef x\n",
        "E_INVALID REQ could not parse timeout x",
    )?;
    // Unknown ids are non-fatal.
    let mut c = env.raw();
    c.subscribe(&t, "c")?;
    c.cmd("FIN 0123456789abcdef")?;
    assert_eq!(
        c.expect_error("E_FIN_FAILED")?,
        "E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"
    );
    c.cmd("REQ 0123456789abcdef 0")?;
    assert_eq!(
        c.expect_error("E_REQ_FAILED")?,
        "E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight"
    );
    c.cmd("TOUCH 0123456789abcdef")?;
    assert_eq!(
        c.expect_error("E_TOUCH_FAILED")?,
        "E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight"
    );
    alive(&env, &mut c)
}

#[test]
fn another_clients_message_cannot_be_answered() -> R {
    let env = env();
    let t = env.topic("proto");
    let mut a = env.raw();
    a.subscribe(&t, "c")?;
    let mut b = env.raw();
    b.subscribe(&t, "c")?;
    a.cmd("RDY 1")?;
    alive(&env, &mut a)?;
    assert_eq!(b.publish(&t, b"x")?, RawFrame::Response(b"OK".to_vec()));
    let m = a.expect_message()?;
    b.cmd(&format!("FIN {}", m.id_str()))?;
    assert_eq!(
        b.expect_error("E_FIN_FAILED")?,
        format!(
            "E_FIN_FAILED FIN {} failed client does not own message",
            m.id_str()
        )
    );
    a.cmd(&format!("FIN {}", m.id_str()))?;
    alive(&env, &mut a)
}

#[test]
fn cls_rules() -> R {
    let env = env();
    fatal_after(&env, &[], b"CLS\n", "E_INVALID cannot CLS in current state")?;
    // A publisher that IDENTIFYed is still not subscribed.
    let mut c = env.raw();
    c.identify(&json!({}))?;
    c.cmd("CLS")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID cannot CLS in current state"
    );
    Ok(())
}

#[test]
fn cls_answers_close_wait_and_stops_delivery() -> R {
    let env = env();
    let t = env.topic("proto");
    let mut c = env.raw();
    c.subscribe(&t, "c")?;
    c.cmd("RDY 5")?;
    let mut p = env.raw();
    assert_eq!(p.publish(&t, b"one")?, RawFrame::Response(b"OK".to_vec()));
    let m = c.expect_message()?;
    c.cmd("CLS")?;
    c.expect_response(b"CLOSE_WAIT")?;
    // RDY after CLS is ignored; messages stop; FIN of in-flight still works.
    c.cmd("RDY 5")?;
    assert_eq!(p.publish(&t, b"two")?, RawFrame::Response(b"OK".to_vec()));
    assert!(c.quiet_for(Duration::from_millis(150))?);
    c.cmd(&format!("FIN {}", m.id_str()))?;
    c.cmd(&format!("FIN {}", m.id_str()))?;
    assert_eq!(
        c.expect_error("E_FIN_FAILED")?,
        format!("E_FIN_FAILED FIN {} failed ID not in flight", m.id_str())
    );
    if let Some(nsqd) = env.nsqd() {
        let me = nsqd
            .clients()
            .into_iter()
            .find(|s| s.subscription.is_some())
            .expect("client");
        assert_eq!(me.rdy, 0);
        assert_eq!(me.state, nsq_test_broker::ClientState::Closing);
    }
    c.cmd("CLS")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID cannot CLS in current state"
    );
    Ok(())
}
