//! `/stats`: clients, producers and filters, and how TLS and AUTH show in a client's entry.

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{Nsqd, RawClient, RawFrame, http_get_json, http_request};
use serde_json::{Value, json};

use crate::R;
use crate::support::channel_stats;

#[test]
fn stats_report_clients_producers_and_filters_like_nsqd() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("stats_report_clients_producers_and_filters") else {
        return Ok(());
    };
    let (t, other) = (env.topic("http"), env.topic("http"));
    // A client that never sent IDENTIFY is named after its host; one that did, as it said
    // (empty when it did not say).
    let mut anon = env.raw();
    anon.subscribe(&t, "c")?;
    let mut named = env.raw();
    assert!(matches!(
        named.identify(&json!({"user_agent": "ua/1"}))?,
        RawFrame::Response(_)
    ));
    named.subscribe(&t, "c")?;
    let mut p = env.raw();
    assert_eq!(p.publish(&other, b"1")?, RawFrame::Response(b"OK".to_vec()));
    assert_eq!(
        p.mpub(&t, &[b"2", b"3"])?,
        RawFrame::Response(b"OK".to_vec())
    );
    let (_, v) = http_get_json(http, &format!("/stats?format=json&topic={t}"))?;
    let clients = v["topics"][0]["channels"][0]["clients"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ids: Vec<(Value, Value, Value)> = clients
        .iter()
        .map(|c| {
            (
                c["client_id"].clone(),
                c["hostname"].clone(),
                c["user_agent"].clone(),
            )
        })
        .collect();
    assert!(
        ids.contains(&(json!("127.0.0.1"), json!("127.0.0.1"), json!(""))),
        "{ids:?}"
    );
    assert!(
        ids.contains(&(json!(""), json!(""), json!("ua/1"))),
        "{ids:?}"
    );
    assert!(
        clients
            .iter()
            .all(|c| c["state"] == 3 && c.get("pub_counts").is_none())
    );
    assert_eq!(v["topics"][0]["message_bytes"], 2);
    // Producers: publishing clients, with pub_counts limited to the topic asked for (at most
    // one entry, as nsqd's loop stops after the first).
    let my_address = json!(p.tcp().local_addr()?.to_string());
    let mine = |v: &Value| -> Option<Value> {
        v["producers"]
            .as_array()?
            .iter()
            .find(|c| c["remote_address"] == my_address)
            .cloned()
    };
    let me = mine(&v).ok_or("the producer is listed")?;
    assert_eq!(me["pub_counts"], json!([{"topic": t, "count": 2}]));
    assert_eq!(me["state"], 0);
    let (_, v) = http_get_json(http, &format!("/stats?format=json&topic={other}"))?;
    assert_eq!(
        mine(&v).ok_or("listed")?["pub_counts"],
        json!([{"topic": other, "count": 1}])
    );
    // A channel filter that matches nothing leaves the topic out, not null.
    let (_, v) = http_get_json(
        http,
        &format!("/stats?format=json&topic={t}&channel=nosuch"),
    )?;
    assert_eq!(v["topics"], json!([]));
    // include_clients=false: null clients and producers; anything but a bool means true.
    let (_, v) = http_get_json(
        http,
        &format!("/stats?format=json&topic={t}&include_clients=false"),
    )?;
    assert_eq!(
        (
            v["topics"][0]["channels"][0]["clients"].clone(),
            v["producers"].clone()
        ),
        (Value::Null, Value::Null)
    );
    assert_eq!(v["topics"][0]["channels"][0]["client_count"], 2);
    let (_, v) = http_get_json(
        http,
        &format!("/stats?format=json&topic={t}&include_clients=maybe&include_mem=0"),
    )?;
    assert!(v["topics"][0]["channels"][0]["clients"].is_array());
    assert!(v.get("memory").is_none());
    // Bad query encoding.
    assert_eq!(
        http_request(http, "GET", "/stats?format=json&topic=%zz", b"")?,
        (400, br#"{"message":"INVALID_REQUEST"}"#.to_vec())
    );
    Ok(())
}

#[test]
fn stats_describe_tls_and_auth_like_nsqd() -> R {
    use nsq_test_broker::{AuthGrant, AuthTable, Authorization, TestPki};
    let nsqd = Nsqd::builder()
        .tls(true)
        .auth(AuthTable::new().with(
            "s3cret",
            AuthGrant {
                identity_url: "https://id.example/u".to_owned(),
                ..AuthGrant::new("someone", vec![Authorization::all()])
            },
        ))
        .http(true)
        .start()?;
    let http = nsqd.http_address().ok_or("http")?;
    let mut c = RawClient::connect_v2(nsqd.tcp_address())?;
    let reply = c.identify_negotiate(&json!({"tls_v1": true}))?;
    assert_eq!(reply["tls_v1"], true);
    c.upgrade_tls(TestPki::global().client_config(), "localhost")?;
    c.cmd_body("AUTH", b"s3cret")?;
    assert!(matches!(
        c.read_frame_skip_heartbeats()?,
        RawFrame::Response(_)
    ));
    c.subscribe("secure", "c")?;
    let s = channel_stats(http, "secure", "c");
    let client = &s["clients"][0];
    assert_eq!(client["tls"], true);
    // Go names only a few TLS 1.2 suites; rustls negotiates TLS 1.3 here, which Go shows
    // as "Unknown <number>".
    assert_eq!(client["tls_version"], "TLS1.3");
    assert!(
        client["tls_cipher_suite"]
            .as_str()
            .is_some_and(|s| s.starts_with("Unknown 48")),
        "{client}"
    );
    assert_eq!(client["tls_negotiated_protocol"], "");
    assert_eq!(client["tls_negotiated_protocol_is_mutual"], true);
    assert_eq!(client["authed"], true);
    assert_eq!(client["auth_identity"], "someone");
    assert_eq!(client["auth_identity_url"], "https://id.example/u");
    assert_eq!(client["client_id"], "raw");
    Ok(())
}
