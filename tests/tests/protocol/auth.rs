//! AUTH on the local broker (with an auth table): disabled, required first, its outcomes, and
//! the permissions it grants.

use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{
    AuthGrant, AuthTable, Authorization, Pattern, Permission, RawClient, RawFrame,
};
use serde_json::json;

use crate::{R, body, env, fatal_after, sized};

fn auth_env() -> Env {
    let table = AuthTable::new()
        .with(
            "s3cret",
            AuthGrant::new("alice", vec![Authorization::all()]),
        )
        .with(
            "limited",
            AuthGrant::new(
                "bob",
                vec![Authorization {
                    topic: Pattern::Prefix("open".into()),
                    channels: vec![
                        Pattern::Exact("allowed".into()),
                        Pattern::Exact(String::new()),
                    ],
                    permissions: vec![Permission::Publish, Permission::Subscribe],
                }],
            ),
        )
        .with("nothing", AuthGrant::new("carol", vec![]));
    Env::local(|b| b.auth(table))
}

#[test]
fn auth_disabled() -> R {
    let env = env();
    let mut c = env.raw();
    c.cmd_body("AUTH", b"secret")?;
    assert_eq!(
        c.expect_fatal("E_AUTH_DISABLED")?,
        "E_AUTH_DISABLED AUTH disabled"
    );
    Ok(())
}

#[test]
fn auth_required_before_pub_and_sub() -> R {
    let env = auth_env();
    let mut c = env.raw();
    assert_eq!(c.identify_negotiate(&json!({}))?["auth_required"], true);
    c.cmd_body("PUB t", b"x")?;
    assert_eq!(
        c.expect_fatal("E_AUTH_FIRST")?,
        "E_AUTH_FIRST AUTH required before PUB"
    );
    fatal_after(
        &env,
        &[],
        b"SUB t c\n",
        "E_AUTH_FIRST AUTH required before SUB",
    )?;
    fatal_after(
        &env,
        &[],
        &body("MPUB t", &RawClient::mpub_body(&[b"x"])),
        "E_AUTH_FIRST AUTH required before MPUB",
    )?;
    fatal_after(
        &env,
        &[],
        &body("DPUB t 5", b"x"),
        "E_AUTH_FIRST AUTH required before DPUB",
    )?;
    Ok(())
}

#[test]
fn auth_outcomes() -> R {
    let env = auth_env();
    fatal_after(
        &env,
        &[],
        &body("AUTH", b"wrong"),
        "E_AUTH_FAILED AUTH failed",
    )?;
    fatal_after(
        &env,
        &[],
        &body("AUTH", b"nothing"),
        "E_UNAUTHORIZED AUTH no authorizations found",
    )?;
    fatal_after(
        &env,
        &[],
        &body("AUTH x", b"s3cret"),
        "E_INVALID AUTH invalid number of parameters",
    )?;
    fatal_after(
        &env,
        &[],
        &sized("AUTH", 0),
        "E_BAD_BODY AUTH invalid body size 0",
    )?;
    let mut c = env.raw();
    c.cmd_body("AUTH", b"s3cret")?;
    match c.read_frame()? {
        RawFrame::Response(b) => {
            let v: serde_json::Value = serde_json::from_slice(&b)?;
            assert_eq!(
                v,
                json!({"identity": "alice", "identity_url": "", "permission_count": 1})
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        c.publish("anything", b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    c.cmd_body("AUTH", b"s3cret")?;
    assert_eq!(c.expect_fatal("E_INVALID")?, "E_INVALID AUTH already set");
    if let Some(nsqd) = env.nsqd() {
        assert!(nsqd.wait_for(Duration::from_secs(2), |s| s.clients.is_empty()));
    }
    Ok(())
}

#[test]
fn auth_permissions_are_enforced() -> R {
    let env = auth_env();
    let mut c = env.raw();
    c.cmd_body("AUTH", b"limited")?;
    assert!(matches!(c.read_frame()?, RawFrame::Response(_)));
    assert_eq!(
        c.publish("open-1", b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    c.cmd_body("PUB closed", b"x")?;
    assert_eq!(
        c.expect_fatal("E_UNAUTHORIZED")?,
        "E_UNAUTHORIZED AUTH failed for PUB on \"closed\" \"\""
    );
    let mut s = env.raw();
    s.cmd_body("AUTH", b"limited")?;
    assert!(matches!(s.read_frame()?, RawFrame::Response(_)));
    s.cmd("SUB open-1 other")?;
    assert_eq!(
        s.expect_fatal("E_UNAUTHORIZED")?,
        "E_UNAUTHORIZED AUTH failed for SUB on \"open-1\" \"other\""
    );
    let mut s = env.raw();
    s.cmd_body("AUTH", b"limited")?;
    assert!(matches!(s.read_frame()?, RawFrame::Response(_)));
    s.subscribe("open-1", "allowed")?;
    Ok(())
}
