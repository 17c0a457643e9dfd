//! The capture session, replayed: the servers started like the capture's (or real ones from
//! the environment), the state the README's "Server setup" creates, then every captured
//! request in the capture's order, each reply checked against its fixture.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use nsq_test_broker::{Lookupd, Nsqd, Options, RawClient, RawFrame, http_get_json, wait_until};
use serde_json::json;

use crate::WAIT;
use crate::checker::{check, fixture, fixture_path};
use crate::raw::{read_all, send};

struct Servers {
    tcp: SocketAddr,
    http: SocketAddr,
    lookupd: SocketAddr,
    /// nsqd as a lookupd lists it (`/topic/tombstone`'s node).
    node: String,
    local: Option<(Nsqd, Lookupd)>,
}

fn env_addr(var: &str) -> Option<SocketAddr> {
    std::env::var(var).ok()?.to_socket_addrs().ok()?.next()
}

/// The servers for the replay: real ones from the environment (they must be fresh), or the
/// local broker started like the capture's nsqd (`--e2e-processing-latency-percentile=0.5,0.99`,
/// `--lookupd-tcp-address=127.0.0.1:4160`, on a host named `vm`).
fn replay_servers() -> Option<Servers> {
    if let (Some(tcp), Some(http), Some(lookupd)) = (
        env_addr("NSQD_TCP_ADDRESS"),
        env_addr("NSQD_HTTP_ADDRESS"),
        env_addr("NSQLOOKUPD_HTTP_ADDRESS"),
    ) {
        let (_, stats) = http_get_json(http, "/stats?format=json").ok()?;
        if stats["topics"] != json!([]) {
            nsq_test_broker::conformance::skip(
                "the_capture_session_replayed_matches_the_fixtures",
                "the external nsqd is not fresh",
            );
            return None;
        }
        return Some(Servers {
            tcp,
            http,
            lookupd,
            node: format!("127.0.0.1:{}", http.port()),
            local: None,
        });
    }
    let lookupd = Lookupd::start().expect("lookupd");
    let opts = Options {
        hostname: "vm".to_owned(),
        e2e_processing_latency_percentiles: vec![0.5, 0.99],
        nsqlookupd_tcp_addresses: vec!["127.0.0.1:4160".to_owned()],
        ..Options::default()
    };
    let nsqd = Nsqd::builder()
        .options(opts)
        .http(true)
        .lookupd(&lookupd)
        .start()
        .expect("nsqd");
    let http = nsqd.http_address().expect("http");
    Some(Servers {
        tcp: nsqd.tcp_address(),
        http,
        lookupd: lookupd.http_address(),
        node: format!("127.0.0.1:{}", http.port()),
        local: Some((nsqd, lookupd)),
    })
}

fn ok(frame: &RawFrame) {
    assert_eq!(*frame, RawFrame::Response(b"OK".to_vec()));
}

/// The state created before the captures (README, "Server setup"); returns the consumer
/// and producer connections, which stay open.
fn setup(s: &Servers) -> (RawClient, RawClient) {
    for target in [
        "/topic/create?topic=orders",
        "/channel/create?topic=orders&channel=billing",
        "/channel/create?topic=orders&channel=audit",
        "/channel/pause?topic=orders&channel=audit",
        "/topic/create?topic=empty",
        "/topic/create?topic=tmp%23ephemeral",
    ] {
        assert_eq!(send(s.http, "POST", target, b"").status, 200, "{target}");
    }
    let identify = |id: &str| {
        json!({"client_id": id, "hostname": "fixture-host", "user_agent": "fixture/1.0",
            "feature_negotiation": true})
    };
    let mut consumer = RawClient::connect_v2(s.tcp).unwrap();
    assert!(matches!(
        consumer.identify(&identify("fixture")).unwrap(),
        RawFrame::Response(_)
    ));
    consumer.subscribe("orders", "billing").unwrap();
    consumer.cmd("RDY 5").unwrap();
    let mut producer = RawClient::connect_v2(s.tcp).unwrap();
    assert!(matches!(
        producer.identify(&identify("fixture-producer")).unwrap(),
        RawFrame::Response(_)
    ));
    for i in 0..20 {
        ok(&producer
            .publish("orders", format!("order-{i:02}").as_bytes())
            .unwrap());
    }
    producer
        .cmd_body("DPUB orders 1800000", b"deferred-order")
        .unwrap();
    ok(&producer.read_frame_skip_heartbeats().unwrap());
    // The README does not give the MPUB's bodies; orders' message_bytes (215) says they
    // were 7 bytes each.
    ok(&producer.mpub("orders", &[b"mpub-01", b"mpub-02"]).unwrap());
    ok(&producer.publish("tmp#ephemeral", b"eph-1").unwrap());
    // FIN 6, REQ the 7th, hold the next 5.
    for i in 0..12 {
        let m = consumer.expect_message().unwrap();
        match i {
            0..6 => consumer.cmd(&format!("FIN {}", m.id_str())).unwrap(),
            6 => consumer.cmd(&format!("REQ {} 0", m.id_str())).unwrap(),
            _ => {}
        }
    }
    let settled = wait_until(WAIT, || {
        http_get_json(s.http, "/stats?format=json&topic=orders&channel=billing").is_ok_and(
            |(_, v)| {
                let c = &v["topics"][0]["channels"][0];
                c["in_flight_count"] == 5
                    && c["requeue_count"] == 1
                    && c["clients"][0]["finish_count"] == 6
            },
        )
    });
    assert!(settled, "the consumer's FIN/REQ were not seen");
    (consumer, producer)
}

/// One test, not one per endpoint family: each step's fixture was captured after the steps
/// before it (the stats count their publishes, the lookupd lists what nsqd registered), and a
/// real server must be fresh, so the steps run in the capture's order on one pair of servers.
#[test]
fn the_capture_session_replayed_matches_the_fixtures() {
    let Some(s) = replay_servers() else {
        return;
    };
    let (_consumer, _producer) = setup(&s);
    publishing_and_stats(&s);
    topics_and_channels(&s);
    config_and_errors(&s);
    lookupd_endpoints(&s);
}

/// `/ping`, `/info`, `/pub`, `/mpub` and `/stats` in its forms.
fn publishing_and_stats(s: &Servers) {
    let http = s.http;
    let nsqd = |name: &str, method: &str, target: &str, body: &[u8]| {
        check(name, &send(http, method, target, body));
    };

    nsqd("nsqd_ping", "GET", "/ping", b"");
    nsqd("nsqd_info", "GET", "/info", b"");
    nsqd("nsqd_pub_ok", "POST", "/pub?topic=orders", b"hello");
    nsqd(
        "nsqd_pub_deferred",
        "POST",
        "/pub?topic=orders&defer=5000",
        b"later",
    );
    nsqd(
        "nsqd_pub_invalid_topic",
        "POST",
        "/pub?topic=bad!name",
        b"x",
    );
    nsqd("nsqd_pub_missing_topic", "POST", "/pub", b"x");
    nsqd("nsqd_pub_empty_body", "POST", "/pub?topic=orders", b"");
    nsqd(
        "nsqd_pub_invalid_defer",
        "POST",
        "/pub?topic=orders&defer=-1",
        b"x",
    );
    nsqd("nsqd_mpub_text", "POST", "/mpub?topic=orders", b"a\nb\nc");
    let two = RawClient::mpub_body(&[b"bin-one", b"bin-two"]);
    nsqd(
        "nsqd_mpub_binary",
        "POST",
        "/mpub?topic=orders&binary=true",
        &two,
    );
    nsqd(
        "nsqd_mpub_binary_truncated",
        "POST",
        "/mpub?topic=orders&binary=true",
        b"\x00\x00\x00\x02\x00\x00\x00\x05hello\x00\x00\x00\nabc",
    );
    nsqd(
        "nsqd_mpub_binary_zero_count",
        "POST",
        "/mpub?topic=orders&binary=true",
        b"\x00\x00\x00\x00",
    );
    nsqd("nsqd_stats_full", "GET", "/stats?format=json", b"");
    if s.local.is_some() {
        // The broker lists the first topic published to where nsqd picks one at random.
        let (_, v) = http_get_json(http, "/stats?format=json").unwrap();
        assert_eq!(
            v["producers"][0]["pub_counts"],
            json!([{"topic": "orders", "count": 23}])
        );
    }
    nsqd(
        "nsqd_stats_topic",
        "GET",
        "/stats?format=json&topic=orders",
        b"",
    );
    nsqd(
        "nsqd_stats_topic_channel",
        "GET",
        "/stats?format=json&topic=orders&channel=billing",
        b"",
    );
    nsqd(
        "nsqd_stats_no_clients",
        "GET",
        "/stats?format=json&include_clients=false",
        b"",
    );
    nsqd(
        "nsqd_stats_include_mem",
        "GET",
        "/stats?format=json&include_mem=true",
        b"",
    );
    nsqd(
        "nsqd_stats_nosuch_topic",
        "GET",
        "/stats?format=json&topic=nosuch",
        b"",
    );
    nsqd("nsqd_stats_text", "GET", "/stats", b"");
    nsqd(
        "nsqd_stats_no_mem",
        "GET",
        "/stats?format=json&include_mem=false",
        b"",
    );
}

/// `/topic/*` and `/channel/*`.
fn topics_and_channels(s: &Servers) {
    let http = s.http;
    let nsqd = |name: &str, method: &str, target: &str, body: &[u8]| {
        check(name, &send(http, method, target, body));
    };

    nsqd("nsqd_topic_create", "POST", "/topic/create?topic=newt", b"");
    nsqd(
        "nsqd_topic_create_invalid_topic",
        "POST",
        "/topic/create?topic=bad!name",
        b"",
    );
    nsqd(
        "nsqd_topic_create_missing_topic",
        "POST",
        "/topic/create",
        b"",
    );
    nsqd(
        "nsqd_topic_delete_nosuch",
        "POST",
        "/topic/delete?topic=nosuch",
        b"",
    );
    for body in [b"s1", b"s2", b"s3"] {
        assert_eq!(send(http, "POST", "/pub?topic=scratch", body).status, 200);
    }
    nsqd(
        "nsqd_topic_empty",
        "POST",
        "/topic/empty?topic=scratch",
        b"",
    );
    nsqd(
        "nsqd_topic_pause",
        "POST",
        "/topic/pause?topic=scratch",
        b"",
    );
    nsqd(
        "nsqd_stats_paused_topic",
        "GET",
        "/stats?format=json&topic=scratch&include_mem=false",
        b"",
    );
    nsqd(
        "nsqd_topic_unpause",
        "POST",
        "/topic/unpause?topic=scratch",
        b"",
    );
    nsqd(
        "nsqd_topic_delete",
        "POST",
        "/topic/delete?topic=scratch",
        b"",
    );

    nsqd(
        "nsqd_channel_create",
        "POST",
        "/channel/create?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_create_topic_not_found",
        "POST",
        "/channel/create?topic=nosuch&channel=c",
        b"",
    );
    nsqd(
        "nsqd_channel_create_invalid_channel",
        "POST",
        "/channel/create?topic=orders&channel=bad!name",
        b"",
    );
    nsqd(
        "nsqd_channel_create_missing_channel",
        "POST",
        "/channel/create?topic=orders",
        b"",
    );
    nsqd(
        "nsqd_channel_create_invalid_topic",
        "POST",
        "/channel/create?topic=bad!name&channel=c",
        b"",
    );
    nsqd(
        "nsqd_channel_delete_nosuch",
        "POST",
        "/channel/delete?topic=orders&channel=nosuch",
        b"",
    );
    nsqd(
        "nsqd_channel_empty",
        "POST",
        "/channel/empty?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_empty_nosuch",
        "POST",
        "/channel/empty?topic=orders&channel=nosuch",
        b"",
    );
    nsqd(
        "nsqd_channel_pause",
        "POST",
        "/channel/pause?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_unpause",
        "POST",
        "/channel/unpause?topic=orders&channel=newc",
        b"",
    );
    nsqd(
        "nsqd_channel_delete",
        "POST",
        "/channel/delete?topic=orders&channel=newc",
        b"",
    );
}

/// `/config/:opt`, the router's 404 and 405, nsqd's HTTP port asked for `/lookup`, and its TCP
/// port answering an HTTP request.
fn config_and_errors(s: &Servers) {
    let http = s.http;
    let nsqd = |name: &str, method: &str, target: &str, body: &[u8]| {
        check(name, &send(http, method, target, body));
    };

    let lookupd_tcp = std::env::var("NSQLOOKUPD_TCP_ADDRESS")
        .ok()
        .filter(|_| s.local.is_none())
        .unwrap_or_else(|| "127.0.0.1:4160".to_owned());
    let addresses = format!("[\"{lookupd_tcp}\"]");
    // The address is the one nsqd was given (the capture's unless external): compared, then
    // swapped for the fixture's so the rest of the reply is checked too.
    let mut got = send(http, "GET", "/config/nsqlookupd_tcp_addresses", b"");
    assert_eq!(got.text(), addresses);
    got.body = fixture("nsqd_config_get_lookupd_addresses").body;
    check("nsqd_config_get_lookupd_addresses", &got);
    nsqd("nsqd_config_get_log_level", "GET", "/config/log_level", b"");
    nsqd("nsqd_config_get_nosuchopt", "GET", "/config/nosuchopt", b"");
    nsqd(
        "nsqd_config_put_log_level_json_quoted",
        "PUT",
        "/config/log_level",
        b"\"debug\"",
    );
    nsqd(
        "nsqd_config_put_log_level_raw",
        "PUT",
        "/config/log_level",
        b"debug",
    );
    nsqd(
        "nsqd_config_get_log_level_after_put",
        "GET",
        "/config/log_level",
        b"",
    );
    let mut got = send(
        http,
        "PUT",
        "/config/nsqlookupd_tcp_addresses",
        addresses.as_bytes(),
    );
    assert_eq!(got.text(), addresses);
    got.body = fixture("nsqd_config_put_lookupd_addresses").body;
    check("nsqd_config_put_lookupd_addresses", &got);
    nsqd(
        "nsqd_config_put_nosuchopt",
        "PUT",
        "/config/nosuchopt",
        b"1",
    );
    nsqd(
        "nsqd_config_put_empty_body",
        "PUT",
        "/config/log_level",
        b"",
    );
    nsqd("nsqd_not_found", "GET", "/nosuch", b"");
    nsqd("nsqd_method_not_allowed", "DELETE", "/ping", b"");
    nsqd(
        "nsqd_http_port_answering_lookup",
        "GET",
        "/lookup?topic=orders",
        b"",
    );

    // nsqd's TCP port answering an HTTP request: one E_BAD_PROTOCOL frame, then close.
    let mut tcp = TcpStream::connect_timeout(&s.tcp, WAIT).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    tcp.write_all(
        format!(
            "GET /ping HTTP/1.1\r\nHost: {}\r\nUser-Agent: nsq-proto-fixture-capture/1.0\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            s.tcp
        )
        .as_bytes(),
    )
    .unwrap();
    let want = std::fs::read(fixture_path("nsqd_tcp_port_answering_http.bin")).unwrap();
    assert_eq!(read_all(&mut tcp).unwrap(), want);
}

/// nsqlookupd's endpoints, once nsqd's last change has reached it.
fn lookupd_endpoints(s: &Servers) {
    let lookupd = s.lookupd;
    // nsqd registers in-process with the local lookupd, over TCP with a real one: wait until
    // the last change (newc's deletion) is there.
    assert!(wait_until(WAIT, || {
        http_get_json(lookupd, "/debug").is_ok_and(|(_, v)| v.get("channel:orders:newc").is_none())
    }));
    let lookup = |name: &str, method: &str, target: &str| {
        check(name, &send(lookupd, method, target, b""));
    };
    lookup("lookupd_ping", "GET", "/ping");
    lookup("lookupd_info", "GET", "/info");
    lookup("lookupd_lookup", "GET", "/lookup?topic=orders");
    lookup(
        "lookupd_lookup_topic_not_found",
        "GET",
        "/lookup?topic=nosuch",
    );
    lookup("lookupd_lookup_missing_topic", "GET", "/lookup");
    lookup("lookupd_topics", "GET", "/topics");
    lookup("lookupd_channels", "GET", "/channels?topic=orders");
    lookup("lookupd_channels_nosuch", "GET", "/channels?topic=nosuch");
    lookup("lookupd_channels_missing_topic", "GET", "/channels");
    lookup("lookupd_nodes", "GET", "/nodes");
    lookup("lookupd_topic_create", "POST", "/topic/create?topic=lt1");
    lookup(
        "lookupd_topic_create_invalid_topic",
        "POST",
        "/topic/create?topic=bad!name",
    );
    lookup(
        "lookupd_topic_create_missing_topic",
        "POST",
        "/topic/create",
    );
    lookup(
        "lookupd_channel_create",
        "POST",
        "/channel/create?topic=lt1&channel=lc1",
    );
    lookup("lookupd_channels_created", "GET", "/channels?topic=lt1");
    lookup(
        "lookupd_lookup_registered_no_producers",
        "GET",
        "/lookup?topic=lt1",
    );
    lookup(
        "lookupd_channel_delete",
        "POST",
        "/channel/delete?topic=lt1&channel=lc1",
    );
    lookup(
        "lookupd_channel_delete_nosuch",
        "POST",
        "/channel/delete?topic=lt1&channel=nosuch",
    );
    lookup(
        "lookupd_channel_create_invalid_channel",
        "POST",
        "/channel/create?topic=lt1&channel=bad!name",
    );
    lookup(
        "lookupd_topic_tombstone",
        "POST",
        &format!("/topic/tombstone?topic=orders&node={}", s.node),
    );
    lookup(
        "lookupd_topic_tombstone_nosuch_node",
        "POST",
        "/topic/tombstone?topic=orders&node=nosuch:1",
    );
    lookup(
        "lookupd_topic_tombstone_missing_node",
        "POST",
        "/topic/tombstone?topic=orders",
    );
    lookup(
        "lookupd_lookup_after_tombstone",
        "GET",
        "/lookup?topic=orders",
    );
    lookup("lookupd_nodes_after_tombstone", "GET", "/nodes");
    lookup("lookupd_topic_delete", "POST", "/topic/delete?topic=lt1");
    lookup(
        "lookupd_topic_delete_nosuch",
        "POST",
        "/topic/delete?topic=nosuch",
    );
    lookup("lookupd_debug", "GET", "/debug");
    lookup("lookupd_not_found", "GET", "/nosuch");
    lookup("lookupd_method_not_allowed", "DELETE", "/ping");
}
