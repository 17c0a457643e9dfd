//! The lookupd endpoint, fault injection, shutdown hygiene, and the conformance harness run
//! with a tiny reference client (so the scenarios are proven before any adapter exists).

use std::io;
use std::net::TcpStream;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nsq_test_broker::conformance::{
    self, ClientConfig, ClientFactory, Delivery, Env, Subscription,
};
use nsq_test_broker::{
    Lookupd, Nsqd, PeerInfo, RawClient, RawFrame, RawMessage, Restart, Throttle, http_get_json,
    http_request, wait_until,
};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

// ---- lookupd ----

#[test]
fn lookup_of_unknown_topic_is_404() -> R {
    let env = Env::new(|b| b);
    let Some(addr) = env.lookupd_or_skip("lookup_of_unknown_topic_is_404") else {
        return Ok(());
    };
    let (status, body) = http_get_json(addr, &format!("/lookup?topic={}", env.topic("brk")))?;
    assert_eq!((status, body), (404, json!({"message": "TOPIC_NOT_FOUND"})));
    Ok(())
}

#[test]
fn lookup_without_topic_is_400() -> R {
    let lookupd = Lookupd::start()?;
    let (status, body) = http_get_json(lookupd.http_address(), "/lookup")?;
    assert_eq!(
        (status, body),
        (400, json!({"message": "MISSING_ARG_TOPIC"}))
    );
    let (status, _) = http_request(lookupd.http_address(), "GET", "/ping", b"")?;
    assert_eq!(status, 200);
    let (status, _) = http_request(lookupd.http_address(), "POST", "/lookup?topic=x", b"")?;
    assert_eq!(status, 405);
    Ok(())
}

#[test]
fn nsqd_registers_topics_and_channels_with_lookupd() -> R {
    let env = Env::new(|b| b);
    let Some(addr) = env.lookupd_or_skip("nsqd_registers_topics") else {
        return Ok(());
    };
    let t = env.topic("brk");
    let mut p = env.raw();
    assert_eq!(p.publish(&t, b"x")?, RawFrame::Response(b"OK".to_vec()));
    let mut s = env.raw();
    s.subscribe(&t, "chan")?;
    let mut last = json!(null);
    let ok = wait_until(Duration::from_secs(3), || {
        last = http_get_json(addr, &format!("/lookup?topic={t}"))
            .map(|(_, v)| v)
            .unwrap_or_default();
        last["channels"] == json!(["chan"])
            && last["producers"].as_array().is_some_and(|p| p.len() == 1)
    });
    assert!(ok, "{last}");
    let p = &last["producers"][0];
    for k in [
        "remote_address",
        "hostname",
        "broadcast_address",
        "tcp_port",
        "http_port",
        "version",
    ] {
        assert!(p.get(k).is_some(), "missing {k} in {p}");
    }
    assert_eq!(p["tcp_port"], env.tcp_address().port());
    if let Some(http) = env.http_address() {
        assert_eq!(p["http_port"], http.port());
    }
    Ok(())
}

/// Whether `keys` appear in `body` in this order (Go encodes struct fields in order).
fn in_order(body: &str, keys: &[&str]) -> bool {
    let at: Vec<Option<usize>> = keys
        .iter()
        .map(|k| body.find(&format!("\"{k}\":")))
        .collect();
    at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn lookupd_and_nsqd_json_keep_gos_field_order() -> R {
    let env = Env::new(|b| b);
    let Some(lookupd) = env.lookupd_or_skip("lookupd_json_keeps_gos_field_order") else {
        return Ok(());
    };
    let t = env.topic("brk");
    let mut s = env.raw();
    s.subscribe(&t, "chan")?;
    let peer = [
        "remote_address",
        "hostname",
        "broadcast_address",
        "tcp_port",
        "http_port",
        "version",
    ];
    let mut body = String::new();
    assert!(wait_until(Duration::from_secs(3), || {
        body = http_request(lookupd, "GET", &format!("/lookup?topic={t}"), b"")
            .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        body.contains("\"chan\"")
    }));
    assert!(in_order(&body, &["channels", "producers"]), "{body}");
    assert!(in_order(&body, &peer), "{body}");
    let (_, nodes) = http_request(lookupd, "GET", "/nodes", b"")?;
    let nodes = String::from_utf8_lossy(&nodes);
    let node_keys: Vec<&str> = peer
        .iter()
        .copied()
        .chain(["tombstones", "topics"])
        .collect();
    assert!(in_order(&nodes, &node_keys), "{nodes}");
    let (status, info) = http_get_json(lookupd, "/info")?;
    assert_eq!((status, info["version"].as_str().is_some()), (200, true));
    if let Some(http) = env.http_address() {
        let (status, info) = http_request(http, "GET", "/info", b"")?;
        let info = String::from_utf8_lossy(&info);
        assert_eq!(status, 200);
        let info_keys = [
            "version",
            "broadcast_address",
            "hostname",
            "http_port",
            "tcp_port",
            "start_time",
            "max_heartbeat_interval",
            "max_output_buffer_size",
            "max_output_buffer_timeout",
            "max_deflate_level",
        ];
        assert!(in_order(&info, &info_keys), "{info}");
        let info: serde_json::Value = serde_json::from_str(&info)?;
        assert_eq!(info["tcp_port"], env.tcp_address().port());
        assert_eq!(info["http_port"], http.port());
    }
    Ok(())
}

#[test]
fn big_http_replies_are_chunked_like_gos() -> R {
    let env = Env::new(|b| b);
    let (Some(lookupd), Some(http)) = (
        env.lookupd_or_skip("big_http_replies_are_chunked_like_gos"),
        env.http_or_skip("big_http_replies_are_chunked_like_gos"),
    ) else {
        return Ok(());
    };
    let t = env.topic("brk");
    assert_eq!(
        http_request(http, "POST", &format!("/topic/create?topic={t}"), b"")?.0,
        200
    );
    let channels: Vec<String> = (0..40).map(|i| format!("{i:064}")).collect();
    for c in &channels {
        let target = format!("/channel/create?topic={t}&channel={c}");
        assert_eq!(http_request(http, "POST", &target, b"")?.0, 200);
    }
    // Over 2048 bytes, Go's net/http answers an HTTP/1.1 request chunked.
    let head = |target: &str| -> io::Result<String> {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(lookupd)?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        write!(
            s,
            "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)?;
        Ok(String::from_utf8_lossy(&resp).to_ascii_lowercase())
    };
    let target = format!("/lookup?topic={t}");
    let mut seen = 0;
    assert!(wait_until(Duration::from_secs(3), || {
        seen = http_get_json(lookupd, &target)
            .map_or(0, |(_, v)| v["channels"].as_array().map_or(0, Vec::len));
        seen == channels.len()
    }));
    assert!(head(&target)?.contains("transfer-encoding: chunked"));
    let small = head("/lookup?topic=nope-no-such-topic")?;
    assert!(small.contains("content-length:") && !small.contains("chunked"));
    Ok(())
}

#[test]
fn lookup_url_decodes_the_topic() -> R {
    let env = Env::new(|b| b);
    let Some(addr) = env.lookupd_or_skip("lookup_url_decodes_the_topic") else {
        return Ok(());
    };
    let t = format!("{}#ephemeral", env.topic("brk"));
    let mut s = env.raw();
    s.subscribe(&t, "c#ephemeral")?;
    let query = format!("/lookup?topic={}", t.replace('#', "%23"));
    assert!(wait_until(Duration::from_secs(3), || http_get_json(
        addr, &query
    )
    .is_ok_and(|(st, _)| st == 200)));
    drop(s);
    // The ephemeral topic goes away with its last subscriber, and so does the registration.
    assert!(wait_until(Duration::from_secs(3), || http_get_json(
        addr, &query
    )
    .is_ok_and(|(st, _)| st == 404)));
    Ok(())
}

#[test]
fn several_nsqd_register_with_one_lookupd() -> R {
    let lookupd = Lookupd::start()?;
    let a = Nsqd::builder().lookupd(&lookupd).start()?;
    let b = Nsqd::builder().lookupd(&lookupd).http(true).start()?;
    let t = Env::unique("brk");
    a.publish(&t, b"1");
    b.publish(&t, b"2");
    let (status, v) = http_get_json(lookupd.http_address(), &format!("/lookup?topic={t}"))?;
    assert_eq!(status, 200);
    let mut ports: Vec<u64> = v["producers"]
        .as_array()
        .ok_or("producers")?
        .iter()
        .filter_map(|p| p["tcp_port"].as_u64())
        .collect();
    ports.sort_unstable();
    let mut want = vec![
        u64::from(a.tcp_address().port()),
        u64::from(b.tcp_address().port()),
    ];
    want.sort_unstable();
    assert_eq!(ports, want);
    // Shutting one down removes it.
    a.shutdown();
    assert_eq!(lookupd.producers(&t).len(), 1);
    let (_, nodes) = http_get_json(lookupd.http_address(), "/nodes")?;
    assert_eq!(nodes["producers"].as_array().map(Vec::len), Some(1));
    let (_, topics) = http_get_json(lookupd.http_address(), "/topics")?;
    assert_eq!(topics["topics"], json!([t]));
    Ok(())
}

#[test]
fn one_nsqd_registers_with_several_lookupds() -> R {
    let (l1, l2) = (Lookupd::start()?, Lookupd::start()?);
    let nsqd = Nsqd::builder().lookupd(&l1).lookupd(&l2).start()?;
    let t = Env::unique("brk");
    nsqd.publish(&t, b"x");
    for l in [&l1, &l2] {
        let (status, v) = http_get_json(l.http_address(), &format!("/lookup?topic={t}"))?;
        assert_eq!(status, 200);
        assert_eq!(v["producers"][0]["tcp_port"], nsqd.tcp_address().port());
    }
    drop(nsqd);
    assert!(l1.producers(&t).is_empty() && l2.producers(&t).is_empty());
    Ok(())
}

#[test]
fn producers_can_be_added_and_removed_by_hand() -> R {
    let lookupd = Lookupd::start()?;
    let id = lookupd.add_producer(PeerInfo::local(4150, 4151));
    lookupd.register(id, "hand", Some("c1"));
    let (status, v) = http_get_json(lookupd.http_address(), "/lookup?topic=hand")?;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"channels": ["c1"], "producers": [{
            "remote_address": "127.0.0.1:4150", "hostname": "localhost", "broadcast_address": "127.0.0.1",
            "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}]})
    );
    // Like nsqlookupd, unregistering leaves the keys: the channel stays listed, and once the
    // producer is gone the topic answers 200 with no producers.
    lookupd.unregister(id, "hand", Some("c1"));
    assert_eq!(
        http_get_json(lookupd.http_address(), "/lookup?topic=hand")?.1["channels"],
        json!(["c1"])
    );
    assert!(lookupd.remove_producer(id));
    assert_eq!(
        http_get_json(lookupd.http_address(), "/lookup?topic=hand")?,
        (200, json!({"channels": ["c1"], "producers": []}))
    );
    assert!(!lookupd.remove_producer(id));
    lookupd.set_failure(Some(500));
    assert_eq!(
        http_request(lookupd.http_address(), "GET", "/lookup?topic=hand", b"")?.0,
        500
    );
    lookupd.set_failure(None);
    assert!(lookupd.requests().iter().any(|r| r == "/lookup?topic=hand"));
    Ok(())
}

#[test]
fn nsqd_http_api_subset() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("nsqd_http_api_subset") else {
        return Ok(());
    };
    let t = env.topic("brk");
    assert_eq!(
        http_request(http, "GET", "/ping", b"")?,
        (200, b"OK".to_vec())
    );
    assert_eq!(
        http_request(http, "POST", &format!("/pub?topic={t}"), b"hello")?.0,
        200
    );
    assert_eq!(
        http_request(http, "POST", &format!("/mpub?topic={t}"), b"a\nb\n")?.0,
        200
    );
    assert_eq!(
        http_request(http, "POST", &format!("/pub?topic={t}"), b"")?.0,
        400
    );
    assert_eq!(http_request(http, "POST", "/pub?topic=bad!", b"x")?.0, 400);
    let mut c = env.raw();
    c.subscribe(&t, "c")?;
    c.cmd("RDY 10")?;
    let mut got = vec![
        c.expect_message()?.body,
        c.expect_message()?.body,
        c.expect_message()?.body,
    ];
    got.sort();
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"hello".to_vec()]);
    Ok(())
}

#[test]
fn nsqd_http_api_rules() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("nsqd_http_api_rules") else {
        return Ok(());
    };
    let t = env.topic("brk");
    let req = |method: &str, target: &str, body: &[u8]| -> io::Result<(u16, String)> {
        let (status, body) = http_request(http, method, target, body)?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    let msg = |m: &str| format!("{{\"message\":\"{m}\"}}");
    // Methods are routed exactly (HEAD is not GET).
    assert_eq!(req("POST", "/ping", b"")?, (405, msg("METHOD_NOT_ALLOWED")));
    assert_eq!(req("GET", "/pub", b"")?, (405, msg("METHOD_NOT_ALLOWED")));
    assert_eq!(req("GET", "/nope", b"")?, (404, msg("NOT_FOUND")));
    // /pub checks the body before the topic, and the topic before defer.
    assert_eq!(req("POST", "/pub", b"")?, (400, msg("MSG_EMPTY")));
    assert_eq!(req("POST", "/pub", b"x")?, (400, msg("MISSING_ARG_TOPIC")));
    let target = format!("/pub?topic={t}&defer=-1");
    assert_eq!(req("POST", &target, b"x")?, (400, msg("INVALID_DEFER")));
    // Binary /mpub: nsqd's readMPUB, answered 413 with the code less its E_.
    let target = format!("/mpub?topic={t}&binary=true");
    assert_eq!(
        req("POST", &target, &0u32.to_be_bytes())?,
        (413, msg("BAD_BODY"))
    );
    let short = [&2u32.to_be_bytes()[..], &1u32.to_be_bytes(), b"x"].concat();
    assert_eq!(req("POST", &target, &short)?, (413, msg("BAD_MESSAGE")));
    let two = RawClient::mpub_body(&[b"b1", b"b2"]);
    assert_eq!(req("POST", &target, &two)?, (200, "OK".to_owned()));
    // Text /mpub drops empty lines.
    let target = format!("/mpub?topic={t}");
    assert_eq!(req("POST", &target, b"t1\n\nt2\n")?, (200, "OK".to_owned()));
    let mut c = env.raw();
    c.subscribe(&t, "c")?;
    c.cmd("RDY 10")?;
    let mut got: Vec<Vec<u8>> = (0..4)
        .map(|_| c.expect_message().map(|m| m.body))
        .collect::<io::Result<_>>()?;
    got.sort();
    assert_eq!(got, [b"b1", b"b2", b"t1", b"t2"]);
    // Channels need an existing topic; names are checked with nsqd's ARG texts.
    let other = env.topic("brk");
    let target = format!("/channel/create?topic={other}&channel=c");
    assert_eq!(req("POST", &target, b"")?, (404, msg("TOPIC_NOT_FOUND")));
    let target = format!("/channel/create?topic={t}&channel=c!");
    assert_eq!(
        req("POST", &target, b"")?,
        (400, msg("INVALID_ARG_CHANNEL"))
    );
    let target = format!("/channel/delete?topic={t}&channel=zz");
    assert_eq!(req("POST", &target, b"")?, (404, msg("CHANNEL_NOT_FOUND")));
    // Deleting a channel disconnects its subscribers; then the topic goes.
    let target = format!("/channel/delete?topic={t}&channel=c");
    assert_eq!(req("POST", &target, b"")?, (200, String::new()));
    c.expect_closed()?;
    let target = format!("/topic/delete?topic={t}");
    assert_eq!(req("POST", &target, b"")?, (200, String::new()));
    assert_eq!(req("POST", &target, b"")?, (404, msg("TOPIC_NOT_FOUND")));
    Ok(())
}

#[test]
fn command_log_is_ordered_and_bounded() -> R {
    let nsqd = Nsqd::builder()
        .command_log_limit(3)
        .command_log_body_limit(2)
        .start()?;
    let mut a = RawClient::connect_v2(nsqd.tcp_address())?;
    let mut b = RawClient::connect_v2(nsqd.tcp_address())?;
    for _ in 0..4 {
        a.cmd("NOP")?;
    }
    assert_eq!(
        a.publish("logged", b"abcd")?,
        RawFrame::Response(b"OK".to_vec())
    );
    b.cmd("BAD")?;
    b.expect_fatal("E_INVALID")?;
    let log = nsqd.commands();
    let seqs: Vec<u64> = log.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!(
        (
            log[1].line.as_str(),
            log[1].body.as_deref(),
            log[1].body_len
        ),
        ("PUB logged", Some(&b"ab"[..]), 4)
    );
    assert_eq!(
        log[2].error.as_deref(),
        Some("E_INVALID invalid command BAD")
    );
    assert_ne!(log[2].client, log[1].client);
    assert_eq!(nsqd.commands_of(log[1].client).len(), 2);
    Ok(())
}

// ---- fault injection ----

#[test]
fn drop_connections_closes_every_client() -> R {
    let nsqd = Nsqd::start()?;
    let mut a = RawClient::connect_v2(nsqd.tcp_address())?;
    let mut b = RawClient::connect_v2(nsqd.tcp_address())?;
    b.subscribe(&Env::unique("brk"), "c")?;
    assert!(nsqd.wait_for(Duration::from_secs(2), |s| s.clients.len() == 2));
    nsqd.drop_connections();
    a.expect_closed()?;
    b.expect_closed()?;
    assert!(nsqd.wait_for(Duration::from_secs(2), |s| s.clients.is_empty()));
    // New connections are served.
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    assert_eq!(
        c.publish(&Env::unique("brk"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn drop_client_closes_only_that_client() -> R {
    let nsqd = Nsqd::start()?;
    let mut a = RawClient::connect_v2(nsqd.tcp_address())?;
    a.cmd("NOP")?;
    assert!(nsqd.wait_for(Duration::from_secs(2), |_| !nsqd.commands().is_empty()));
    let a_id = nsqd.commands()[0].client;
    let mut b = RawClient::connect_v2(nsqd.tcp_address())?;
    assert!(nsqd.wait_for(Duration::from_secs(2), |s| s.clients.len() == 2));
    assert!(nsqd.drop_client(a_id));
    assert!(!nsqd.drop_client(a_id));
    a.expect_closed()?;
    assert_eq!(
        b.publish(&Env::unique("brk"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    assert_eq!(nsqd.clients().len(), 1);
    Ok(())
}

#[test]
fn stop_and_start_accepting() -> R {
    let nsqd = Nsqd::start()?;
    let mut existing = RawClient::connect_v2(nsqd.tcp_address())?;
    // Closing the listener resets connections the broker has not accepted yet.
    assert!(nsqd.wait_for(Duration::from_secs(2), |s| s.clients.len() == 1));
    nsqd.stop_accepting();
    let err = TcpStream::connect_timeout(&nsqd.tcp_address(), Duration::from_secs(1))
        .expect_err("refused");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    // Existing connections keep working.
    assert_eq!(
        existing.publish(&Env::unique("brk"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    nsqd.start_accepting()?;
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    assert_eq!(
        c.publish(&Env::unique("brk"), b"x")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn held_accepts_leave_connections_pending() -> R {
    let nsqd = Nsqd::start()?;
    nsqd.hold_accepts(true);
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?; // the kernel completes the handshake
    c.cmd("NOP")?;
    c.cmd_body(&format!("PUB {}", Env::unique("brk")), b"x")?;
    assert!(c.quiet_for(Duration::from_millis(200))?);
    assert!(nsqd.clients().is_empty());
    nsqd.hold_accepts(false);
    c.expect_ok()?;
    Ok(())
}

#[test]
fn pause_is_half_open_and_resume_continues() -> R {
    let nsqd = Nsqd::start()?;
    let t = Env::unique("brk");
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.subscribe(&t, "c")?;
    c.cmd("RDY 5")?;
    assert!(nsqd.wait_for(Duration::from_secs(2), |s| {
        s.clients.iter().any(|x| x.rdy == 5)
    }));
    nsqd.pause();
    nsqd.publish(&t, b"during pause");
    c.cmd_body(&format!("PUB {t}"), b"from client")?;
    assert!(
        c.quiet_for(Duration::from_millis(300))?,
        "a paused broker must not write"
    );
    assert!(
        nsqd.commands().iter().all(|r| r.name() != "PUB"),
        "a paused broker must not read"
    );
    nsqd.resume();
    let mut frames = Vec::new();
    for _ in 0..3 {
        frames.push(c.read_frame_skip_heartbeats()?);
    }
    assert!(
        frames.contains(&RawFrame::Response(b"OK".to_vec())),
        "{frames:?}"
    );
    assert_eq!(
        frames
            .iter()
            .filter(|f| matches!(f, RawFrame::Message(_)))
            .count(),
        2
    );
    Ok(())
}

#[test]
fn restart_keeping_messages() -> R {
    let nsqd = Nsqd::start()?;
    let t = Env::unique("brk");
    let port = nsqd.tcp_address().port();
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.subscribe(&t, "c")?;
    c.cmd("RDY 1")?;
    nsqd.publish(&t, b"in flight");
    nsqd.publish(&t, b"queued");
    let first = c.expect_message()?;
    nsqd.restart(Restart::KeepMessages)?;
    c.expect_closed()?;
    assert_eq!(nsqd.tcp_address().port(), port);
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.subscribe(&t, "c")?;
    c.cmd("RDY 2")?;
    let again = c.expect_message()?;
    let queued = c.expect_message()?;
    assert_eq!((again.id, again.attempts), (first.id, 2));
    assert_eq!(queued.body, b"queued");
    Ok(())
}

#[test]
fn restart_dropping_messages() -> R {
    let nsqd = Nsqd::start()?;
    let t = Env::unique("brk");
    nsqd.publish(&t, b"lost");
    nsqd.restart(Restart::DropMessages)?;
    assert!(nsqd.topic(&t).is_none());
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.subscribe(&t, "c")?;
    c.cmd("RDY 1")?;
    assert!(c.quiet_for(Duration::from_millis(150))?);
    Ok(())
}

#[test]
fn publish_failures_can_be_injected() -> R {
    let nsqd = Nsqd::start()?;
    let t = Env::unique("brk");
    nsqd.fail_publishes(true);
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.cmd_body(&format!("PUB {t}"), b"x")?;
    assert_eq!(
        c.expect_fatal("E_PUB_FAILED")?,
        "E_PUB_FAILED PUB failed exiting"
    );
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.cmd_body(&format!("MPUB {t}"), &RawClient::mpub_body(&[b"x"]))?;
    assert_eq!(
        c.expect_fatal("E_MPUB_FAILED")?,
        "E_MPUB_FAILED MPUB failed exiting"
    );
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    c.cmd_body(&format!("DPUB {t} 10"), b"x")?;
    assert_eq!(
        c.expect_fatal("E_DPUB_FAILED")?,
        "E_DPUB_FAILED DPUB failed exiting"
    );
    nsqd.fail_publishes(false);
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    assert_eq!(c.publish(&t, b"x")?, RawFrame::Response(b"OK".to_vec()));
    assert_eq!(nsqd.topic(&t).map(|s| s.message_count), Some(1));
    Ok(())
}

#[test]
fn slow_reads_throttle_clients() -> R {
    let nsqd = Nsqd::start()?;
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    nsqd.set_read_throttle(Some(Throttle {
        bytes_per_read: 256,
        pause: Duration::from_millis(5),
    }));
    // The connection's reader may be waiting in a read begun before the throttle was set,
    // which takes whatever arrives at once: a small round trip first, so that the timed
    // publish is read by throttled reads only.
    assert_eq!(
        c.publish(&Env::unique("brk"), b"warm-up")?,
        RawFrame::Response(b"OK".to_vec())
    );
    let t0 = Instant::now();
    assert_eq!(
        c.publish(&Env::unique("brk"), &[b'x'; 16 * 1024])?,
        RawFrame::Response(b"OK".to_vec())
    );
    let slow = t0.elapsed();
    assert!(slow >= Duration::from_millis(250), "{slow:?}");
    nsqd.set_read_throttle(None);
    let t0 = Instant::now();
    assert_eq!(
        c.publish(&Env::unique("brk"), &[b'x'; 16 * 1024])?,
        RawFrame::Response(b"OK".to_vec())
    );
    assert!(t0.elapsed() < slow);
    Ok(())
}

#[test]
fn shutdown_is_prompt_and_releases_the_port() -> R {
    let nsqd = Nsqd::builder().http(true).start()?;
    let addr = nsqd.tcp_address();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut c = RawClient::connect_v2(addr)?;
        c.subscribe(&Env::unique("brk"), "c")?;
        clients.push(c);
    }
    // One connection without magic, one half-sent command.
    let idle = TcpStream::connect(addr)?;
    let mut partial = RawClient::connect_v2(addr)?;
    partial.send(b"PUB t\n\0\0")?;
    nsqd.pause();
    let t0 = Instant::now();
    drop(nsqd);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "shutdown took {:?}",
        t0.elapsed()
    );
    for c in &mut clients {
        c.expect_closed()?;
    }
    drop(idle);
    assert_eq!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .map_err(|e| e.kind())
            .err(),
        Some(io::ErrorKind::ConnectionRefused)
    );
    Ok(())
}

// ---- the harness, proven with a reference client ----

/// A minimal correct consumer/producer over [`RawClient`]: answers heartbeats, reconnects.
struct Reference;

fn connect(config: &ClientConfig, topic: &str) -> io::Result<RawClient> {
    let addr = match config.lookupd_http_addresses.first() {
        None => config.nsqd_tcp_addresses[0],
        Some(lookupd) => {
            let (status, v) = http_get_json(*lookupd, &format!("/lookup?topic={topic}"))?;
            let p = &v["producers"][0];
            let (Some(host), Some(port)) =
                (p["broadcast_address"].as_str(), p["tcp_port"].as_u64())
            else {
                return Err(io::Error::other(format!("lookup answered {status} {v}")));
            };
            std::net::ToSocketAddrs::to_socket_addrs(&(host, port as u16))?
                .next()
                .ok_or_else(|| io::Error::other("no address"))?
        }
    };
    let mut c = RawClient::connect_v2(addr)?;
    let mut ident = json!({});
    if let Some(t) = config.msg_timeout {
        ident["msg_timeout"] = json!(t.as_millis() as u64);
    }
    if let Some(h) = config.heartbeat_interval {
        ident["heartbeat_interval"] = json!(h.as_millis() as u64);
    }
    c.identify_negotiate(&ident)?;
    Ok(c)
}

struct RefSub {
    conn: Arc<Mutex<Option<RawClient>>>,
    config: ClientConfig,
    topic: String,
    channel: String,
}

impl RefSub {
    fn open(&self) -> io::Result<RawClient> {
        let mut c = connect(&self.config, &self.topic)?;
        c.subscribe(&self.topic, &self.channel)?;
        c.cmd(&format!("RDY {}", self.config.max_in_flight))?;
        Ok(c)
    }
}

struct RefDelivery {
    conn: Arc<Mutex<Option<RawClient>>>,
    msg: RawMessage,
}

impl RefDelivery {
    fn send(&self, line: &str) -> Result<(), String> {
        let mut guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let c = guard.as_mut().ok_or("connection gone")?;
        c.cmd(line).map_err(|e| e.to_string())
    }
}

impl Delivery for RefDelivery {
    fn body(&self) -> &[u8] {
        &self.msg.body
    }
    fn attempts(&self) -> u16 {
        self.msg.attempts
    }
    fn finish(self: Box<Self>) -> Result<(), String> {
        self.send(&format!("FIN {}", self.msg.id_str()))
    }
    fn requeue(self: Box<Self>, delay: Duration) -> Result<(), String> {
        self.send(&format!("REQ {} {}", self.msg.id_str(), delay.as_millis()))
    }
    fn touch(&self) -> Result<(), String> {
        self.send(&format!("TOUCH {}", self.msg.id_str()))
    }
}

impl Subscription for RefSub {
    fn next(&mut self, timeout: Duration) -> Option<Box<dyn Delivery>> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            let mut guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
            if guard.is_none() {
                *guard = self.open().ok();
                if guard.is_none() {
                    drop(guard);
                    std::thread::sleep(
                        self.config
                            .lookupd_poll_interval
                            .min(Duration::from_millis(50)),
                    );
                    continue;
                }
            }
            let c = guard.as_mut()?;
            if c.quiet_for(Duration::from_millis(20)).unwrap_or(false) {
                continue;
            }
            match c.read_frame() {
                Ok(f) if f.is_heartbeat() => {
                    let _ = c.cmd("NOP");
                }
                Ok(RawFrame::Message(msg)) => {
                    drop(guard);
                    return Some(Box::new(RefDelivery {
                        conn: self.conn.clone(),
                        msg,
                    }));
                }
                Ok(_) => {}
                Err(_) => *guard = None, // reconnect
            }
        }
        None
    }

    fn stop(self: Box<Self>, timeout: Duration) -> Result<(), String> {
        let mut guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(c) = guard.as_mut() else {
            return Ok(());
        };
        c.set_read_timeout(timeout).map_err(|e| e.to_string())?;
        c.cmd("CLS").map_err(|e| e.to_string())?;
        loop {
            match c.read_frame_skip_heartbeats().map_err(|e| e.to_string())? {
                RawFrame::Response(b) if b == b"CLOSE_WAIT" => return Ok(()),
                RawFrame::Message(m) => c
                    .cmd(&format!("REQ {} 0", m.id_str()))
                    .map_err(|e| e.to_string())?,
                other => return Err(format!("unexpected {other:?}")),
            }
        }
    }
}

impl ClientFactory for Reference {
    fn name(&self) -> &'static str {
        "raw reference client"
    }

    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String> {
        let mut c = connect(config, topic).map_err(|e| e.to_string())?;
        match c.publish(topic, body).map_err(|e| e.to_string())? {
            RawFrame::Response(b) if b == b"OK" => Ok(()),
            other => Err(format!("PUB failed: {other:?}")),
        }
    }

    fn subscribe(
        &self,
        config: &ClientConfig,
        topic: &str,
        channel: &str,
    ) -> Result<Box<dyn Subscription>, String> {
        let sub = RefSub {
            conn: Arc::new(Mutex::new(None)),
            config: config.clone(),
            topic: topic.to_owned(),
            channel: channel.to_owned(),
        };
        // Direct connections must work now; through lookupd the topic may not exist yet,
        // then next() keeps polling.
        match sub.open() {
            Ok(c) => *sub.conn.lock().unwrap_or_else(PoisonError::into_inner) = Some(c),
            Err(e) if config.lookupd_http_addresses.is_empty() => return Err(e.to_string()),
            Err(_) => {}
        }
        Ok(Box::new(sub))
    }
}

/// Scenario groups, one test each so they run in parallel (each under ~5 s).
const GROUPS: [&[&str]; 5] = [
    &["publish_then_consume", "requeue_redelivers"],
    &["timeout_redelivers"],
    &[
        "survives_dropped_connections",
        "stop_sends_cls",
        "discovers_via_lookupd",
        "publish_errors_surface_and_recover",
    ],
    &["discovers_a_producer_that_appears_later"],
    &["touch_extends", "answers_heartbeats"],
];

#[test]
fn conformance_group_0() {
    conformance::run_all(&Reference, GROUPS[0]);
}

#[test]
fn conformance_group_1() {
    conformance::run_all(&Reference, GROUPS[1]);
}

#[test]
fn conformance_group_2() {
    conformance::run_all(&Reference, GROUPS[2]);
}

#[test]
fn conformance_group_3() {
    conformance::run_all(&Reference, GROUPS[3]);
}

#[test]
fn conformance_group_4() {
    conformance::run_all(&Reference, GROUPS[4]);
}

#[test]
fn every_scenario_is_in_a_group() {
    let mut grouped: Vec<&str> = GROUPS.iter().flat_map(|g| g.iter().copied()).collect();
    let mut all: Vec<&str> = conformance::scenarios().iter().map(|s| s.name).collect();
    grouped.sort_unstable();
    all.sort_unstable();
    assert_eq!(grouped, all);
}
