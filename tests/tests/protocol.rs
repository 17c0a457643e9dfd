//! Raw-bytes scenarios proving the broker's command rules: every error code and text, which
//! errors close the connection, and the state machine of a connection. They run against a
//! real nsqd too when `NSQD_TCP_ADDRESS` is set (see `nsq_test_broker::conformance`).

use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{
    AuthGrant, AuthTable, Authorization, Pattern, Permission, RawClient, RawFrame,
};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

fn env() -> Env {
    Env::new(|b| b)
}

/// Proves the connection is still open and usable: PUB works on any connection state.
fn alive(env: &Env, c: &mut RawClient) -> R {
    assert_eq!(
        c.publish(&env.topic("proto-alive"), b"alive")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

fn fatal_after(env: &Env, setup: &[&str], bytes: &[u8], expected: &str) -> R {
    let mut c = env.raw();
    for line in setup {
        c.cmd(line)?;
        c.expect_ok()?;
    }
    c.send(bytes)?;
    let code = expected.split(' ').next().unwrap_or_default();
    let e = c.expect_fatal(code)?;
    assert_eq!(e, expected);
    Ok(())
}

fn body(line: &str, body: &[u8]) -> Vec<u8> {
    let mut b = format!("{line}\n").into_bytes();
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(body);
    b
}

fn sized(line: &str, size: u32) -> Vec<u8> {
    let mut b = format!("{line}\n").into_bytes();
    b.extend_from_slice(&size.to_be_bytes());
    b
}

#[test]
fn bad_magic_is_rejected() -> R {
    let env = env();
    let mut c = RawClient::connect(env.tcp_address())?;
    c.send(b"  V1")?;
    assert_eq!(c.expect_fatal("E_BAD_PROTOCOL")?, "E_BAD_PROTOCOL");
    Ok(())
}

#[test]
fn unknown_and_empty_commands_are_fatal() -> R {
    let env = env();
    fatal_after(&env, &[], b"FOO bar\n", "E_INVALID invalid command FOO")?;
    fatal_after(&env, &[], b"\n", "E_INVALID invalid command ")?;
    fatal_after(&env, &[], b"pub t\n", "E_INVALID invalid command pub")?;
    Ok(())
}

#[test]
fn crlf_line_endings_are_accepted() -> R {
    let env = env();
    let mut c = env.raw();
    c.send(format!("PUB {}\r\n", env.topic("proto")).as_bytes())?;
    c.send(&3u32.to_be_bytes())?;
    c.send(b"abc")?;
    c.expect_ok()?;
    Ok(())
}

#[test]
fn overlong_command_line_closes_without_error() -> R {
    let env = env();
    let mut c = env.raw();
    c.send(&vec![b'A'; 17 * 1024])?;
    c.expect_closed()?;
    Ok(())
}

#[test]
fn nop_has_no_reply() -> R {
    let env = env();
    let mut c = env.raw();
    c.cmd("NOP")?;
    assert!(c.quiet_for(Duration::from_millis(100))?);
    alive(&env, &mut c)
}

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

#[test]
fn sub_errors() -> R {
    let env = env();
    let t = env.topic("proto");
    fatal_after(
        &env,
        &[],
        b"SUB\n",
        "E_INVALID SUB insufficient number of parameters",
    )?;
    fatal_after(
        &env,
        &[],
        format!("SUB {t}\n").as_bytes(),
        "E_INVALID SUB insufficient number of parameters",
    )?;
    fatal_after(
        &env,
        &[],
        b"SUB bad! c\n",
        "E_BAD_TOPIC SUB topic name \"bad!\" is not valid",
    )?;
    fatal_after(
        &env,
        &[],
        format!("SUB {t} c:d\n").as_bytes(),
        "E_BAD_CHANNEL SUB channel name \"c:d\" is not valid",
    )?;
    fatal_after(
        &env,
        &[],
        format!("SUB {t}  c\n").as_bytes(),
        "E_BAD_CHANNEL SUB channel name \"\" is not valid",
    )?;
    let long = "x".repeat(65);
    fatal_after(
        &env,
        &[],
        format!("SUB {long} c\n").as_bytes(),
        &format!("E_BAD_TOPIC SUB topic name \"{long}\" is not valid"),
    )?;
    fatal_after(
        &env,
        &[],
        b"SUB #ephemeral c\n",
        "E_BAD_TOPIC SUB topic name \"#ephemeral\" is not valid",
    )?;
    let sub = format!("SUB {t} c");
    fatal_after(
        &env,
        &[sub.as_str()],
        format!("SUB {t} d\n").as_bytes(),
        "E_INVALID cannot SUB in current state",
    )?;
    // 64 characters is fine.
    let mut c = env.raw();
    let mut long_topic = env.topic("y");
    long_topic.extend(std::iter::repeat_n('y', 64 - long_topic.len()));
    c.subscribe(&long_topic, &format!("{}#ephemeral", "z".repeat(54)))?;
    Ok(())
}

#[test]
fn sub_beyond_max_channel_consumers_fails() -> R {
    let env = Env::new(|b| b.max_channel_consumers(1));
    let Some(nsqd) = env.local_only(
        "sub_beyond_max_channel_consumers_fails",
        "--max-channel-consumers",
    ) else {
        return Ok(());
    };
    let t = env.topic("proto");
    let mut a = env.raw();
    a.subscribe(&t, "c")?;
    fatal_after(
        &env,
        &[],
        format!("SUB {t} c\n").as_bytes(),
        &format!("E_SUB_FAILED SUB failed consumers for {t}:c exceeds limit of 1"),
    )?;
    // Other channels have their own limit; the failed SUB created nothing new.
    let mut b = env.raw();
    b.subscribe(&t, "d")?;
    assert_eq!(nsqd.channel(&t, "c").map(|c| c.clients.len()), Some(1));
    alive(&env, &mut a)
}

#[test]
fn sub_with_heartbeats_disabled_is_fatal() -> R {
    let env = env();
    let mut c = env.raw();
    assert_eq!(
        c.identify(&json!({"heartbeat_interval": -1}))?,
        RawFrame::Response(b"OK".to_vec())
    );
    c.cmd(&format!("SUB {} c", env.topic("proto")))?;
    assert_eq!(
        c.expect_fatal("E_INVALID")?,
        "E_INVALID cannot SUB with heartbeats disabled"
    );
    Ok(())
}

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
