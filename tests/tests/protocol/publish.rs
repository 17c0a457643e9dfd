//! PUB, MPUB and DPUB: parameter, body and size errors, the size limits, and the topic a
//! failed MPUB still creates.

use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{RawClient, RawFrame};

use crate::{R, alive, body, env, fatal_after, sized};

#[test]
fn pub_errors() -> R {
    let env = env();
    let t = env.topic("proto");
    fatal_after(
        &env,
        &[],
        b"PUB\n",
        "E_INVALID PUB insufficient number of parameters",
    )?;
    fatal_after(
        &env,
        &[],
        &body("PUB bad$", b"x"),
        "E_BAD_TOPIC PUB topic name \"bad$\" is not valid",
    )?;
    fatal_after(
        &env,
        &[],
        &sized(&format!("PUB {t}"), 0),
        "E_BAD_MESSAGE PUB invalid message body size 0",
    )?;
    fatal_after(
        &env,
        &[],
        &sized(&format!("PUB {t}"), u32::MAX),
        "E_BAD_MESSAGE PUB invalid message body size -1",
    )?;
    fatal_after(
        &env,
        &[],
        &sized(&format!("PUB {t}"), 1024 * 1024 + 1),
        "E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
    )?;
    Ok(())
}

#[test]
fn pub_limits_follow_options() -> R {
    let env = Env::new(|b| b.max_msg_size(100).max_body_size(300));
    let Some(_) = env.local_only(
        "pub_limits_follow_options",
        "custom --max-msg-size/--max-body-size",
    ) else {
        return Ok(());
    };
    let t = env.topic("proto");
    let mut c = env.raw();
    assert_eq!(
        c.publish(&t, &[b'a'; 100])?,
        RawFrame::Response(b"OK".to_vec())
    );
    fatal_after(
        &env,
        &[],
        &body(&format!("PUB {t}"), &[b'a'; 101]),
        "E_BAD_MESSAGE PUB message too big 101 > 100",
    )?;
    fatal_after(
        &env,
        &[],
        &body(&format!("DPUB {t} 0"), &[b'a'; 101]),
        "E_BAD_MESSAGE DPUB message too big 101 > 100",
    )?;
    let ok = RawClient::mpub_body(&[&[b'a'; 100], &[b'b'; 100]]);
    assert_eq!(
        c.mpub(&t, &[&[b'a'; 100], &[b'b'; 100]])?,
        RawFrame::Response(b"OK".to_vec())
    );
    assert!(ok.len() <= 300);
    fatal_after(
        &env,
        &[],
        &sized(&format!("MPUB {t}"), 301),
        "E_BAD_BODY MPUB body too big 301 > 300",
    )?;
    fatal_after(
        &env,
        &[],
        &body(&format!("MPUB {t}"), &RawClient::mpub_body(&[&[b'a'; 101]])),
        "E_BAD_MESSAGE MPUB message too big 101 > 100",
    )?;
    fatal_after(
        &env,
        &[],
        &sized("IDENTIFY", 301),
        "E_BAD_BODY IDENTIFY body too big 301 > 300",
    )?;
    Ok(())
}

#[test]
fn mpub_errors() -> R {
    let env = env();
    let t = env.topic("proto");
    let mpub = format!("MPUB {t}");
    fatal_after(
        &env,
        &[],
        b"MPUB\n",
        "E_INVALID MPUB insufficient number of parameters",
    )?;
    fatal_after(
        &env,
        &[],
        &body("MPUB a/b", b"x"),
        "E_BAD_TOPIC E_BAD_TOPIC MPUB topic name \"a/b\" is not valid",
    )?;
    fatal_after(
        &env,
        &[],
        &sized(&mpub, 0),
        "E_BAD_BODY MPUB invalid body size 0",
    )?;
    fatal_after(
        &env,
        &[],
        &body(&mpub, &0u32.to_be_bytes()),
        "E_BAD_BODY MPUB invalid message count 0",
    )?;
    let mut two = 2u32.to_be_bytes().to_vec();
    two.extend_from_slice(&1u32.to_be_bytes());
    two.push(b'a');
    two.extend_from_slice(&0u32.to_be_bytes());
    fatal_after(
        &env,
        &[],
        &body(&mpub, &two),
        "E_BAD_MESSAGE MPUB invalid message(1) body size 0",
    )?;
    let mut c = env.raw();
    assert_eq!(
        c.mpub(&t, &[b"a", b"bb", b"ccc"])?,
        RawFrame::Response(b"OK".to_vec())
    );
    if let Some(nsqd) = env.nsqd() {
        assert_eq!(nsqd.topic(&t).map(|s| s.message_count), Some(3));
        assert!(nsqd.warnings().is_empty());
    }
    Ok(())
}

#[test]
fn a_failed_mpub_still_creates_its_topic() -> R {
    let env = env();
    let Some(lookupd) = env.lookupd_or_skip("a_failed_mpub_still_creates_its_topic") else {
        return Ok(());
    };
    let t = env.topic("proto");
    // nsqd creates the topic before it reads the body; PUB reads the body first.
    fatal_after(
        &env,
        &[],
        &body(&format!("MPUB {t}"), &0u32.to_be_bytes()),
        "E_BAD_BODY MPUB invalid message count 0",
    )?;
    let lookup = format!("/lookup?topic={t}");
    assert!(nsq_test_broker::wait_until(Duration::from_secs(3), || {
        nsq_test_broker::http_get_json(lookupd, &lookup).is_ok_and(|(status, _)| status == 200)
    }));
    let t2 = env.topic("proto");
    fatal_after(
        &env,
        &[],
        &sized(&format!("PUB {t2}"), 0),
        "E_BAD_MESSAGE PUB invalid message body size 0",
    )?;
    std::thread::sleep(Duration::from_millis(200));
    let (status, _) = nsq_test_broker::http_get_json(lookupd, &format!("/lookup?topic={t2}"))?;
    assert_eq!(status, 404);
    Ok(())
}

#[test]
fn mpub_with_wrong_body_size_is_accepted_but_flagged() -> R {
    let env = env();
    let Some(nsqd) = env.local_only("mpub_wrong_size", "the warnings introspection") else {
        return Ok(());
    };
    let t = env.topic("proto");
    let mut c = env.raw();
    let mut b = format!("MPUB {t}\n").into_bytes();
    let inner = RawClient::mpub_body(&[b"abc"]);
    b.extend_from_slice(&(inner.len() as u32 + 10).to_be_bytes());
    b.extend_from_slice(&inner);
    c.send(&b)?;
    c.expect_ok()?;
    assert_eq!(nsqd.warnings().len(), 1, "{:?}", nsqd.warnings());
    Ok(())
}

#[test]
fn dpub_errors() -> R {
    let env = env();
    let t = env.topic("proto");
    fatal_after(
        &env,
        &[],
        format!("DPUB {t}\n").as_bytes(),
        "E_INVALID DPUB insufficient number of parameters",
    )?;
    fatal_after(
        &env,
        &[],
        &body("DPUB b@d 10", b"x"),
        "E_BAD_TOPIC DPUB topic name \"b@d\" is not valid",
    )?;
    fatal_after(
        &env,
        &[],
        &body(&format!("DPUB {t} x"), b"x"),
        "E_INVALID DPUB could not parse timeout x",
    )?;
    fatal_after(
        &env,
        &[],
        &body(&format!("DPUB {t} -1"), b"x"),
        "E_INVALID DPUB could not parse timeout -1",
    )?;
    fatal_after(
        &env,
        &[],
        &body(&format!("DPUB {t} 3600001"), b"x"),
        "E_INVALID DPUB timeout 3600001 out of range 0-3600000",
    )?;
    fatal_after(
        &env,
        &[],
        &sized(&format!("DPUB {t} 10"), 0),
        "E_BAD_MESSAGE DPUB invalid message body size 0",
    )?;
    let mut c = env.raw();
    c.cmd_body(&format!("DPUB {t} 3600000"), b"x")?;
    c.expect_ok()?;
    Ok(())
}

#[test]
fn pub_on_a_subscribed_connection_is_allowed() -> R {
    // nsqd does not check the state for PUB.
    let env = env();
    let mut c = env.raw();
    c.subscribe(&env.topic("proto"), "c")?;
    alive(&env, &mut c)
}
