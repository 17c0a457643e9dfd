//! TLS, snappy and deflate upgrades, in nsqd's order, with the client side done by hand
//! (rustls `StreamOwned`, snap framing, flate2 raw deflate).

use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{RawClient, RawFrame, TestPki};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

/// Publishes, subscribes and receives one message on `c` (already upgraded), FINs it.
fn roundtrip(env: &Env, c: &mut RawClient) -> R {
    let t = env.topic("upg");
    // A body big enough to span several compression blocks / TLS records.
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.publish(&t, &big)?, RawFrame::Response(b"OK".to_vec()));
    assert_eq!(
        c.mpub(&t, &[b"a", b"b"])?,
        RawFrame::Response(b"OK".to_vec())
    );
    // Subscribe on the upgraded connection itself.
    c.subscribe(&t, "c")?;
    c.cmd("RDY 3")?;
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let m = c.expect_message()?;
        c.cmd(&format!("FIN {}", m.id_str()))?;
        bodies.push(m.body);
    }
    assert!(bodies.contains(&big));
    c.cmd("CLS")?;
    c.expect_response(b"CLOSE_WAIT")?;
    Ok(())
}

fn tls_env() -> Env {
    Env::local(|b| b.tls(true))
}

#[test]
fn tls_upgrade_then_ok_through_tls() -> R {
    let env = tls_env();
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"tls_v1": true}))?;
    assert_eq!(r["tls_v1"], true);
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    if let Some(nsqd) = env.nsqd() {
        assert!(nsqd.clients().iter().any(|s| s.tls));
    }
    roundtrip(&env, &mut c)
}

#[test]
fn tls_certificate_is_valid_for_the_ip_too() -> R {
    let env = tls_env();
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true}))?;
    c.upgrade_tls(TestPki::global().client_config(), "127.0.0.1")?;
    assert_eq!(
        c.publish(&env.topic("upg"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn tls_not_granted_without_server_tls() -> R {
    let env = Env::new(|b| b);
    let Some(_) = env.local_only("tls_not_granted", "a server without TLS") else {
        return Ok(());
    };
    let mut c = env.raw();
    assert_eq!(
        c.identify_negotiate(&json!({"tls_v1": true}))?["tls_v1"],
        false
    );
    assert_eq!(
        c.publish(&env.topic("upg"), b"plain")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn tls_not_requested_stays_plain() -> R {
    let env = tls_env();
    let mut c = env.raw();
    assert_eq!(c.identify_negotiate(&json!({}))?["tls_v1"], false);
    assert_eq!(
        c.publish(&env.topic("upg"), b"plain")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn tls_required_refuses_plain_commands() -> R {
    let env = Env::local(|b| b.tls_required(true));
    for (cmd, body) in [
        ("NOP", false),
        ("PUB t", true),
        ("SUB t c", false),
        ("AUTH", true),
    ] {
        let mut c = env.raw();
        if body {
            c.cmd_body(cmd, b"x")?;
        } else {
            c.cmd(cmd)?;
        }
        let name = cmd.split(' ').next().unwrap_or_default();
        assert_eq!(
            c.expect_fatal("E_INVALID")?,
            format!("E_INVALID cannot {name} in current state (TLS required)")
        );
    }
    // IDENTIFY without TLS is allowed, but the next command fails.
    let mut c = env.raw();
    assert_eq!(c.identify_negotiate(&json!({}))?["tls_v1"], false);
    c.cmd_body("PUB t", b"x")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID cannot PUB in current state (TLS required)"
    );
    // With TLS everything works.
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true}))?;
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    roundtrip(&env, &mut c)
}

#[test]
fn wrong_hostname_certificate_is_rejected_by_the_client() -> R {
    let env = Env::local(|b| b.tls_server_names(&["wrong.example"]));
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true}))?;
    let err = c
        .upgrade_tls(TestPki::global().client_config(), "localhost")
        .expect_err("must not verify");
    assert!(
        err.to_string().contains("certificate") || err.to_string().contains("Certificate"),
        "{err}"
    );
    // And the certificate does verify for the name it carries.
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true}))?;
    c.upgrade_tls(TestPki::global().client_config(), "wrong.example")?;
    Ok(())
}

#[test]
fn untrusted_ca_is_rejected_by_the_client() -> R {
    let env = tls_env();
    let other = TestPki::generate()?;
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true}))?;
    assert!(c.upgrade_tls(other.client_config(), "localhost").is_err());
    Ok(())
}

#[test]
fn snappy_upgrade() -> R {
    let env = Env::new(|b| b);
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"snappy": true}))?;
    assert_eq!(r["snappy"], true);
    assert_eq!(r["deflate"], false);
    c.upgrade_snappy()?;
    if let Some(nsqd) = env.nsqd() {
        assert!(nsqd.clients().iter().any(|s| s.snappy));
    }
    roundtrip(&env, &mut c)
}

#[test]
fn deflate_upgrade_with_requested_level() -> R {
    let env = Env::new(|b| b);
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"deflate": true, "deflate_level": 3}))?;
    assert_eq!(r["deflate"], true);
    assert_eq!(r["deflate_level"], 3);
    c.upgrade_deflate(3)?;
    roundtrip(&env, &mut c)
}

#[test]
fn deflate_level_is_capped_by_max_deflate_level() -> R {
    let env = Env::new(|b| b.max_deflate_level(4));
    let Some(_) = env.local_only("deflate_level_capped", "a custom --max-deflate-level") else {
        return Ok(());
    };
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"deflate": true, "deflate_level": 9}))?;
    assert_eq!(
        (r["deflate_level"].as_i64(), r["max_deflate_level"].as_i64()),
        (Some(4), Some(4))
    );
    c.upgrade_deflate(9)?;
    assert_eq!(
        c.publish(&env.topic("upg"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    if let Some(nsqd) = env.nsqd() {
        assert!(nsqd.clients().iter().any(|s| s.deflate == Some(4)));
    }
    Ok(())
}

#[test]
fn compression_disabled_on_the_server_is_not_granted() -> R {
    let env = Env::local(|b| b.snappy(false).deflate(false));
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"snappy": true}))?;
    assert_eq!(r["snappy"], false);
    // Not granted: plain protocol continues (so both flags together are no error either).
    assert_eq!(
        c.publish(&env.topic("upg"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"snappy": true, "deflate": true}))?;
    assert_eq!(
        (r["snappy"].as_bool(), r["deflate"].as_bool()),
        (Some(false), Some(false))
    );
    Ok(())
}

#[test]
fn tls_then_snappy() -> R {
    let env = tls_env();
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"tls_v1": true, "snappy": true}))?;
    assert_eq!(
        (r["tls_v1"].as_bool(), r["snappy"].as_bool()),
        (Some(true), Some(true))
    );
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    c.upgrade_snappy()?;
    roundtrip(&env, &mut c)
}

#[test]
fn tls_then_deflate() -> R {
    let env = tls_env();
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true, "deflate": true}))?;
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    c.upgrade_deflate(6)?;
    roundtrip(&env, &mut c)
}

#[test]
fn heartbeats_and_fatal_errors_travel_through_the_layers() -> R {
    let env = tls_env();
    let mut c = env.raw();
    c.identify_negotiate(&json!({"tls_v1": true, "snappy": true, "heartbeat_interval": 1000}))?;
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    c.upgrade_snappy()?;
    assert!(c.read_frame()?.is_heartbeat());
    c.cmd("NOP")?;
    c.cmd("BOGUS")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID invalid command BOGUS"
    );
    Ok(())
}

#[test]
fn bytes_sent_before_reading_the_identify_reply_are_flagged() -> R {
    let env = Env::new(|b| b);
    let Some(nsqd) = env.local_only("bytes_before_upgrade", "the warnings introspection") else {
        return Ok(());
    };
    let mut c = env.raw();
    let body = json!({"feature_negotiation": true, "snappy": true}).to_string();
    let mut b = b"IDENTIFY\n".to_vec();
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(body.as_bytes());
    b.extend_from_slice(b"NOP\n"); // plain bytes where snappy frames are due: a client bug
    c.send(&b)?;
    assert!(nsq_test_broker::wait_until(Duration::from_secs(2), || {
        !nsqd.warnings().is_empty()
    }));
    Ok(())
}
