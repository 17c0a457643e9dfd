//! IDENTIFY: the negotiation reply, repeated IDENTIFYs, the heartbeat ticker, range checks,
//! JSON decoding like Go's, body errors, and when IDENTIFY is refused.

use std::time::Duration;

use nsq_test_broker::{RawClient, RawFrame};
use serde_json::json;

use crate::{R, alive, body, env, fatal_after, sized};

#[test]
fn identify_without_negotiation_says_ok() -> R {
    let env = env();
    let mut c = env.raw();
    assert_eq!(
        c.identify(&json!({"client_id": "x", "feature_negotiation": false}))?,
        RawFrame::Response(b"OK".to_vec())
    );
    alive(&env, &mut c)
}

#[test]
fn identify_negotiation_reply_has_every_field() -> R {
    let env = env();
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({"msg_timeout": 5000, "sample_rate": 7, "output_buffer_size": 100, "output_buffer_timeout": 50}))?;
    for k in [
        "max_rdy_count",
        "version",
        "max_msg_timeout",
        "msg_timeout",
        "tls_v1",
        "deflate",
        "deflate_level",
        "max_deflate_level",
        "snappy",
        "sample_rate",
        "auth_required",
        "output_buffer_size",
        "output_buffer_timeout",
    ] {
        assert!(r.get(k).is_some(), "missing {k} in {r}");
    }
    assert_eq!(r["msg_timeout"], 5000);
    assert_eq!(r["sample_rate"], 7);
    assert_eq!(r["output_buffer_size"], 100);
    assert_eq!(r["output_buffer_timeout"], 50);
    assert_eq!(r["tls_v1"], false);
    if env.nsqd().is_some() {
        assert_eq!(r["max_rdy_count"], 2500);
        assert_eq!(r["version"], "1.3.0");
        assert_eq!(r["max_msg_timeout"], 900_000);
        assert_eq!(r["deflate_level"], 6);
        assert_eq!(r["max_deflate_level"], 6);
        assert_eq!(r["auth_required"], false);
    }
    alive(&env, &mut c)
}

#[test]
fn identify_reply_is_nsqds_json_byte_for_byte() -> R {
    let env = env();
    let mut c = env.raw();
    let body = json!({"feature_negotiation": true, "msg_timeout": 5000, "output_buffer_size": 100, "output_buffer_timeout": 50, "sample_rate": 3});
    let RawFrame::Response(raw) = c.identify(&body)? else {
        panic!("IDENTIFY failed");
    };
    let v: serde_json::Value = serde_json::from_slice(&raw)?;
    // Go's encoding/json: struct field order, compact, no trailing newline. The server's own
    // limits are taken from the reply (an external server may have other flags) and, on the
    // local broker, checked against its options.
    let expected = format!(
        "{{\"max_rdy_count\":{},\"version\":{},\"max_msg_timeout\":{},\"msg_timeout\":5000,\
         \"tls_v1\":false,\"deflate\":false,\"deflate_level\":{},\"max_deflate_level\":{},\
         \"snappy\":false,\"sample_rate\":3,\"auth_required\":false,\
         \"output_buffer_size\":100,\"output_buffer_timeout\":50}}",
        v["max_rdy_count"],
        v["version"],
        v["max_msg_timeout"],
        v["deflate_level"],
        v["max_deflate_level"],
    );
    assert_eq!(String::from_utf8_lossy(&raw), expected);
    assert_eq!(
        v["deflate_level"].as_i64(),
        v["max_deflate_level"].as_i64().map(|m| m.min(6))
    );
    if let Some(nsqd) = env.nsqd() {
        let o = nsqd.options();
        assert_eq!(v["max_rdy_count"], o.max_rdy_count);
        assert_eq!(v["version"], o.version.as_str());
        assert_eq!(v["max_msg_timeout"], o.max_msg_timeout.as_millis() as u64);
        assert_eq!(v["max_deflate_level"], o.max_deflate_level);
    }
    alive(&env, &mut c)
}

#[test]
fn a_second_identify_is_allowed() -> R {
    let env = env();
    let mut c = env.raw();
    assert_eq!(
        c.identify(&json!({"msg_timeout": 2000}))?,
        RawFrame::Response(b"OK".to_vec())
    );
    // nsqd only refuses IDENTIFY once subscribed; a second one is answered like the first.
    let r = c.identify_negotiate(&json!({"msg_timeout": 3000}))?;
    assert_eq!(r["msg_timeout"], 3000);
    // Without a field, the value from the first IDENTIFY stays.
    let r = c.identify_negotiate(&json!({}))?;
    assert_eq!(r["msg_timeout"], 3000);
    c.subscribe(&env.topic("proto"), "c")?;
    c.cmd("IDENTIFY")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID cannot IDENTIFY in current state"
    );
    Ok(())
}

#[test]
fn only_the_first_identify_sets_the_heartbeat_ticker() -> R {
    let env = env();
    let mut c = env.raw();
    c.identify(&json!({"heartbeat_interval": 1000}))?;
    // The second IDENTIFY changes the read deadline (2 x 2000 ms) but nsqd's message pump
    // ignores it, so heartbeats keep coming every second.
    let t0 = std::time::Instant::now();
    assert_eq!(
        c.identify(&json!({"heartbeat_interval": 2000}))?,
        RawFrame::Response(b"OK".to_vec())
    );
    c.set_read_timeout(Duration::from_secs(6))?;
    let mut beats = Vec::new();
    loop {
        match c.read_frame() {
            Ok(f) => {
                assert!(f.is_heartbeat(), "{f:?}");
                beats.push(t0.elapsed());
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e.into()),
        }
    }
    let closed = t0.elapsed();
    assert!(
        closed >= Duration::from_millis(3800) && closed < Duration::from_secs(5),
        "closed after {closed:?}"
    );
    assert!(beats.len() >= 3, "heartbeats at {beats:?}");
    assert!(
        beats[0] < Duration::from_millis(1600),
        "heartbeats at {beats:?}"
    );
    Ok(())
}

#[test]
fn identify_reports_defaults_when_fields_are_zero() -> R {
    let env = env();
    let Some(_) = env.local_only("identify_reports_defaults", "default option values") else {
        return Ok(());
    };
    let mut c = env.raw();
    let r = c.identify_negotiate(&json!({}))?;
    assert_eq!(r["msg_timeout"], 60_000);
    assert_eq!(r["output_buffer_size"], 16_384);
    assert_eq!(r["output_buffer_timeout"], 250);
    assert_eq!(r["sample_rate"], 0);
    Ok(())
}

#[test]
fn identify_range_validation() -> R {
    let env = env();
    let cases: &[(&str, i64)] = &[
        ("heartbeat_interval", 999),
        ("heartbeat_interval", 60_001),
        ("heartbeat_interval", -2),
        ("output_buffer_size", 63),
        ("output_buffer_size", 65_537),
        ("output_buffer_size", -2),
        ("output_buffer_timeout", 24),
        ("output_buffer_timeout", 30_001),
        ("sample_rate", -1),
        ("sample_rate", 100),
        ("msg_timeout", 999),
        ("msg_timeout", 900_001),
        ("msg_timeout", -1),
    ];
    for (field, value) in cases {
        let mut c = env.raw();
        c.cmd_body("IDENTIFY", json!({ *field: value }).to_string().as_bytes())?;
        let e = c.expect_fatal("E_BAD_BODY")?;
        let name = field.replace('_', " ");
        assert_eq!(
            e,
            format!("E_BAD_BODY IDENTIFY {name} ({value}) is invalid")
        );
    }
    let accepted: &[(&str, i64)] = &[
        ("heartbeat_interval", 1000),
        ("heartbeat_interval", 60_000),
        ("heartbeat_interval", -1),
        ("output_buffer_size", 64),
        ("output_buffer_size", 65_536),
        ("output_buffer_size", -1),
        ("output_buffer_timeout", 25),
        ("output_buffer_timeout", 30_000),
        ("output_buffer_timeout", -1),
        ("sample_rate", 99),
        ("msg_timeout", 1000),
        ("msg_timeout", 900_000),
    ];
    for (field, value) in accepted {
        let mut c = env.raw();
        assert_eq!(
            c.identify(&json!({ *field: value }))?,
            RawFrame::Response(b"OK".to_vec()),
            "{field}={value}"
        );
    }
    Ok(())
}

#[test]
fn identify_json_is_decoded_like_go() -> R {
    let env = env();
    let identify = |raw: &[u8]| -> Result<RawClient, Box<dyn std::error::Error>> {
        let mut c = env.raw();
        c.cmd_body("IDENTIFY", raw)?;
        Ok(c)
    };
    let negotiated = |raw: &[u8]| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        let mut c = identify(raw)?;
        match c.read_frame()? {
            RawFrame::Response(b) => Ok(serde_json::from_slice(&b)?),
            other => Err(format!("{other:?}").into()),
        }
    };
    // Keys match struct fields case-insensitively (with Go's ſ/K folding).
    let mut c = identify(br#"{"HEARTBEAT_INTERVAL": 999}"#)?;
    assert_eq!(
        c.expect_fatal("E_BAD_BODY")?,
        "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"
    );
    let mut c = identify("{\"\u{17f}ample_rate\": 100}".as_bytes())?;
    assert_eq!(
        c.expect_fatal("E_BAD_BODY")?,
        "E_BAD_BODY IDENTIFY sample rate (100) is invalid"
    );
    // Later keys win, null leaves a field alone, unknown keys of any type are ignored.
    let fields = r#""feature_negotiation": true, "x": [{"y": null}]"#;
    let r = negotiated(
        format!(r#"{{{fields}, "msg_timeout": 2000, "Msg_Timeout": 3000}}"#).as_bytes(),
    )?;
    assert_eq!(r["msg_timeout"], 3000);
    let r = negotiated(
        format!(r#"{{{fields}, "msg_timeout": 2000, "msg_timeout": null}}"#).as_bytes(),
    )?;
    assert_eq!(r["msg_timeout"], 2000);
    // Invalid UTF-8 in a string is replaced, not refused.
    let mut c = identify(b"{\"client_id\": \"\xff\"}")?;
    c.expect_ok()?;
    alive(&env, &mut c)
}

#[test]
fn identify_body_errors() -> R {
    let env = env();
    fatal_after(
        &env,
        &[],
        &body("IDENTIFY", b"not json"),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    )?;
    fatal_after(
        &env,
        &[],
        &body("IDENTIFY", br#"{"heartbeat_interval":"1000"}"#),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    )?;
    fatal_after(
        &env,
        &[],
        &body("IDENTIFY", br#"{"tls_v1":1}"#),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    )?;
    fatal_after(
        &env,
        &[],
        &body("IDENTIFY", br#"{"msg_timeout":1000.5}"#),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    )?;
    fatal_after(
        &env,
        &[],
        &body("IDENTIFY", b"[]"),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    )?;
    fatal_after(
        &env,
        &[],
        &sized("IDENTIFY", 0),
        "E_BAD_BODY IDENTIFY invalid body size 0",
    )?;
    fatal_after(
        &env,
        &[],
        &sized("IDENTIFY", u32::MAX),
        "E_BAD_BODY IDENTIFY invalid body size -1",
    )?;
    fatal_after(
        &env,
        &[],
        &sized("IDENTIFY", 5 * 1024 * 1024 + 1),
        "E_BAD_BODY IDENTIFY body too big 5242881 > 5242880",
    )?;
    // Unknown fields are ignored.
    let mut c = env.raw();
    assert_eq!(
        c.identify(&json!({"whatever": [1, 2], "long_id": "x"}))?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn identify_cannot_enable_two_compressions() -> R {
    let env = env();
    let mut c = env.raw();
    c.cmd_body(
        "IDENTIFY",
        json!({"feature_negotiation": true, "snappy": true, "deflate": true})
            .to_string()
            .as_bytes(),
    )?;
    assert_eq!(
        c.expect_fatal("E_IDENTIFY_FAILED")?,
        "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    );
    Ok(())
}

#[test]
fn identify_after_sub_is_fatal() -> R {
    let env = env();
    let mut c = env.raw();
    c.subscribe(&env.topic("proto"), "c")?;
    c.cmd_body("IDENTIFY", b"{}")?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID cannot IDENTIFY in current state"
    );
    Ok(())
}
