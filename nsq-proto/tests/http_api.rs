//! nsqd's and nsqlookupd's HTTP APIs against responses captured from the real v1.3.0 servers
//! (`tests/fixtures/http/`, see its README for the request behind each): every response is
//! read by the one HTTP exchange machine and decoded by the call that asks for it.

use nsq_proto::http::{
    ApiError, Call, HttpError, Method, Response, ResponseParser, ServerMessage, lookupd, nsqd,
};
use nsq_proto::{Channel, Topic};
use std::time::Duration;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/http/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The response in fixture `name`, fed to the parser in small pieces (as sockets deliver).
fn response(name: &str) -> Response {
    let bytes = fixture(name);
    let mut parser = ResponseParser::default();
    for piece in bytes.chunks(7) {
        if let Some(done) = parser.feed(piece).expect(name) {
            return done;
        }
    }
    parser.eof().expect(name)
}

fn decode<T>(call: &Call<T>, name: &str) -> Result<T, ApiError> {
    call.decode(&response(name))
}

fn topic(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

fn channel(name: &str) -> Channel {
    Channel::new(name).unwrap()
}

fn server_error<T: std::fmt::Debug>(result: Result<T, ApiError>) -> (u16, ServerMessage) {
    match result {
        Err(ApiError::Server { status, message }) => (status, message),
        other => panic!("not a server error: {other:?}"),
    }
}

#[test]
fn nsqd_ping_info_and_publishes() {
    decode(&nsqd::ping(), "nsqd_ping.http").unwrap();
    let info = decode(&nsqd::info(), "nsqd_info.http").unwrap();
    assert_eq!(info.version, "1.3.0");
    assert_eq!((info.tcp_port, info.http_port), (4150, 4151));
    assert_eq!(info.broadcast_address, "127.0.0.1");
    assert_eq!(info.max_heartbeat_interval_ns, 60_000_000_000);
    assert!(info.max_output_buffer_size > 0 && info.max_deflate_level > 0);

    let t = topic("orders");
    decode(&nsqd::publish(&t, "hello"), "nsqd_pub_ok.http").unwrap();
    decode(
        &nsqd::deferred_publish(&t, Duration::from_secs(5), "later"),
        "nsqd_pub_deferred.http",
    )
    .unwrap();
    decode(
        &nsqd::multi_publish(&t, ["a", "b"]),
        "nsqd_mpub_binary.http",
    )
    .unwrap();
    for (name, status, message) in [
        (
            "nsqd_pub_invalid_topic.http",
            400,
            ServerMessage::InvalidTopic,
        ),
        (
            "nsqd_pub_missing_topic.http",
            400,
            ServerMessage::MissingArgTopic,
        ),
        ("nsqd_pub_empty_body.http", 400, ServerMessage::MsgEmpty),
        (
            "nsqd_pub_invalid_defer.http",
            400,
            ServerMessage::InvalidDefer,
        ),
        (
            "nsqd_mpub_binary_truncated.http",
            413,
            ServerMessage::BadMessage,
        ),
        (
            "nsqd_mpub_binary_zero_count.http",
            413,
            ServerMessage::BadBody,
        ),
    ] {
        let got = server_error(decode(&nsqd::publish(&t, "x"), name));
        assert_eq!(got, (status, message), "{name}");
    }
}

#[test]
fn requests_are_what_nsqd_takes() {
    let t = topic("tmp#ephemeral");
    let call = nsqd::deferred_publish(&t, Duration::from_secs(5), "later");
    assert_eq!(call.request().method(), Method::Post);
    assert_eq!(
        call.request().target(),
        "/pub?topic=tmp%23ephemeral&defer=5000"
    );
    let mpub = nsqd::multi_publish(&t, [&b"a\nb"[..], b"c"]);
    assert_eq!(
        mpub.request().target(),
        "/mpub?topic=tmp%23ephemeral&binary=true"
    );
    assert_eq!(
        mpub.request().body(),
        b"\x00\x00\x00\x02\x00\x00\x00\x03a\nb\x00\x00\x00\x01c"
    );
    let q = nsqd::StatsQuery::new()
        .topic(&topic("orders"))
        .channel(&channel("billing"))
        .include_clients(false)
        .include_mem(false);
    assert_eq!(
        nsqd::stats(&q).request().target(),
        "/stats?format=json&topic=orders&channel=billing&include_clients=false&include_mem=false"
    );
    let put = nsqd::set_lookupd_tcp_addresses(&["127.0.0.1:4160"]);
    assert_eq!(put.request().method(), Method::Put);
    assert_eq!(put.request().target(), "/config/nsqlookupd_tcp_addresses");
    assert_eq!(put.request().body(), br#"["127.0.0.1:4160"]"#);
    assert_eq!(nsqd::set_log_level("debug").request().body(), b"debug");
    let bytes = String::from_utf8(nsqd::ping().request().encode("127.0.0.1:4151")).unwrap();
    assert!(bytes.starts_with("GET /ping HTTP/1.1\r\nHost: 127.0.0.1:4151\r\n"));
    assert!(bytes.ends_with("Connection: close\r\n\r\n"));
}

#[test]
fn nsqd_stats_every_field() {
    let stats = decode(
        &nsqd::stats(&nsqd::StatsQuery::new()),
        "nsqd_stats_full.http",
    )
    .unwrap();
    assert_eq!(
        (stats.version.as_str(), stats.health.as_str()),
        ("1.3.0", "OK")
    );
    assert!(stats.start_time > 0);
    let names: Vec<_> = stats.topics.iter().map(|t| t.topic_name.as_str()).collect();
    assert_eq!(names, ["empty", "orders", "tmp#ephemeral"]);
    let empty = &stats.topics[0];
    assert!(empty.channels.is_empty());
    assert!(
        empty.e2e_processing_latency.percentiles.is_empty(),
        "null percentiles"
    );
    let orders = &stats.topics[1];
    assert_eq!((orders.message_count, orders.message_bytes), (30, 215));
    assert!(!orders.paused);
    let audit = &orders.channels[0];
    assert_eq!(audit.channel_name, "audit");
    assert!(audit.paused);
    assert_eq!(
        (audit.depth, audit.deferred_count, audit.client_count),
        (28, 2, 0)
    );
    let billing = &orders.channels[1];
    assert_eq!(
        (
            billing.in_flight_count,
            billing.requeue_count,
            billing.client_count
        ),
        (5, 1, 1)
    );
    let e2e = &billing.e2e_processing_latency;
    assert_eq!(e2e.count, 6);
    assert_eq!(e2e.percentiles.len(), 2);
    assert!((e2e.percentiles[0].quantile - 0.99).abs() < 1e-9);
    assert!(e2e.percentiles[0].value > 0.0);
    let client = &billing.clients[0];
    assert_eq!(client.client_id, "fixture");
    assert_eq!(client.hostname, "fixture-host");
    assert_eq!(client.user_agent, "fixture/1.0");
    assert_eq!(
        (client.state, client.ready_count, client.in_flight_count),
        (3, 5, 5)
    );
    assert_eq!((client.finish_count, client.requeue_count), (6, 1));
    assert!(client.connect_time > 0 && !client.tls && !client.authed);
    assert!(client.pub_counts.is_empty());
    let memory = stats.memory.as_ref().expect("include_mem defaults to true");
    assert!(memory.heap_objects > 0);
    assert_eq!(stats.producers.len(), 1);
    let producer = &stats.producers[0];
    assert_eq!(producer.pub_counts[0].topic, "orders");
    assert_eq!(producer.pub_counts[0].count, 23);

    let q = nsqd::stats(&nsqd::StatsQuery::new());
    let no_clients = decode(&q, "nsqd_stats_no_clients.http").unwrap();
    assert!(no_clients.producers.is_empty(), "null producers");
    assert!(
        no_clients
            .topics
            .iter()
            .all(|t| t.channels.iter().all(|c| c.clients.is_empty()))
    );
    assert!(
        decode(&q, "nsqd_stats_no_mem.http")
            .unwrap()
            .memory
            .is_none()
    );
    assert!(
        decode(&q, "nsqd_stats_nosuch_topic.http")
            .unwrap()
            .topics
            .is_empty()
    );
    let one = decode(&q, "nsqd_stats_topic_channel.http").unwrap();
    assert_eq!(one.topics.len(), 1);
    assert_eq!(one.topics[0].channels.len(), 1);
    assert_eq!(one.topics[0].channels[0].channel_name, "billing");
    assert!(
        decode(&q, "nsqd_stats_paused_topic.http")
            .unwrap()
            .topics
            .iter()
            .any(|t| t.paused)
    );
    // The text form is not JSON: a typed error, not a panic.
    assert!(matches!(
        decode(&q, "nsqd_stats_text.http"),
        Err(ApiError::BadReply { .. })
    ));
}

#[test]
fn nsqd_topic_and_channel_admin() {
    let (t, c) = (topic("orders"), channel("newc"));
    for (call, name) in [
        (nsqd::create_topic(&t), "nsqd_topic_create.http"),
        (nsqd::delete_topic(&t), "nsqd_topic_delete.http"),
        (nsqd::empty_topic(&t), "nsqd_topic_empty.http"),
        (nsqd::pause_topic(&t), "nsqd_topic_pause.http"),
        (nsqd::unpause_topic(&t), "nsqd_topic_unpause.http"),
        (nsqd::create_channel(&t, &c), "nsqd_channel_create.http"),
        (nsqd::delete_channel(&t, &c), "nsqd_channel_delete.http"),
        (nsqd::empty_channel(&t, &c), "nsqd_channel_empty.http"),
        (nsqd::pause_channel(&t, &c), "nsqd_channel_pause.http"),
        (nsqd::unpause_channel(&t, &c), "nsqd_channel_unpause.http"),
    ] {
        decode(&call, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let any = nsqd::create_topic(&t);
    for (name, status, message) in [
        (
            "nsqd_topic_create_invalid_topic.http",
            400,
            ServerMessage::InvalidTopic,
        ),
        (
            "nsqd_topic_create_missing_topic.http",
            400,
            ServerMessage::MissingArgTopic,
        ),
        (
            "nsqd_topic_delete_nosuch.http",
            404,
            ServerMessage::TopicNotFound,
        ),
        (
            "nsqd_channel_create_topic_not_found.http",
            404,
            ServerMessage::TopicNotFound,
        ),
        (
            "nsqd_channel_create_invalid_channel.http",
            400,
            ServerMessage::InvalidChannel,
        ),
        (
            "nsqd_channel_create_invalid_topic.http",
            400,
            ServerMessage::InvalidTopic,
        ),
        (
            "nsqd_channel_create_missing_channel.http",
            400,
            ServerMessage::MissingArgChannel,
        ),
        (
            "nsqd_channel_delete_nosuch.http",
            404,
            ServerMessage::ChannelNotFound,
        ),
        (
            "nsqd_channel_empty_nosuch.http",
            404,
            ServerMessage::ChannelNotFound,
        ),
        ("nsqd_not_found.http", 404, ServerMessage::NotFound),
        (
            "nsqd_method_not_allowed.http",
            405,
            ServerMessage::MethodNotAllowed,
        ),
    ] {
        assert_eq!(
            server_error(decode(&any, name)),
            (status, message),
            "{name}"
        );
    }
    let e = decode(&any, "nsqd_channel_create_topic_not_found.http").unwrap_err();
    assert!(e.is_not_found());
    assert_eq!(e.to_string(), "HTTP 404: TOPIC_NOT_FOUND");
}

#[test]
fn nsqd_config() {
    let level = decode(
        &nsqd::get_config("log_level"),
        "nsqd_config_get_log_level.http",
    );
    assert_eq!(level.unwrap(), serde_json::json!(2));
    let after = decode(
        &nsqd::set_log_level("debug"),
        "nsqd_config_put_log_level_raw.http",
    );
    assert_eq!(after.unwrap(), serde_json::json!(1));
    let addrs = decode(
        &nsqd::get_config("nsqlookupd_tcp_addresses"),
        "nsqd_config_get_lookupd_addresses.http",
    );
    assert_eq!(addrs.unwrap(), serde_json::json!(["127.0.0.1:4160"]));
    // A string option is answered in plain text.
    let text = Response {
        status: 200,
        content_type: Some("text/plain; charset=utf-8".into()),
        body: b"127.0.0.1".to_vec(),
    };
    assert_eq!(
        nsqd::get_config("broadcast_address").decode(&text).unwrap(),
        serde_json::json!("127.0.0.1")
    );
    let any = nsqd::get_config("x");
    for (name, status, message) in [
        (
            "nsqd_config_get_nosuchopt.http",
            400,
            ServerMessage::InvalidOption,
        ),
        (
            "nsqd_config_put_nosuchopt.http",
            400,
            ServerMessage::InvalidOption,
        ),
        (
            "nsqd_config_put_log_level_json_quoted.http",
            400,
            ServerMessage::InvalidValue,
        ),
        (
            "nsqd_config_put_empty_body.http",
            413,
            ServerMessage::InvalidValue,
        ),
    ] {
        assert_eq!(
            server_error(decode(&any, name)),
            (status, message),
            "{name}"
        );
    }
}

#[test]
fn wrong_ports_are_named() {
    // nsqd's TCP port answers an HTTP request with an NSQ error frame.
    let mut parser = ResponseParser::default();
    let err = parser
        .feed(&fixture("nsqd_tcp_port_answering_http.bin"))
        .unwrap_err();
    assert_eq!(err, HttpError::NotHttp);
    assert!(ApiError::from(err).to_string().contains("wrong port"));
    // nsqd's HTTP port has no /lookup: NOT_FOUND, with a hint.
    let e = decode(
        &lookupd::lookup(&topic("orders")),
        "nsqd_http_port_answering_lookup.http",
    )
    .unwrap_err();
    assert_eq!(e.server_message(), Some(&ServerMessage::NotFound));
    assert!(e.to_string().contains("right server"), "{e}");
}

#[test]
fn lookupd_reads_and_admin() {
    decode(&lookupd::ping(), "lookupd_ping.http").unwrap();
    assert_eq!(
        decode(&lookupd::info(), "lookupd_info.http")
            .unwrap()
            .version,
        "1.3.0"
    );
    let t = topic("orders");
    let found = decode(&lookupd::lookup(&t), "lookupd_lookup.http").unwrap();
    assert_eq!(found.producers.len(), 1);
    assert_eq!(found.producers[0].tcp_address(), "127.0.0.1:4150");
    assert!(found.channels.iter().any(|c| c == "billing"));
    assert!(
        decode(&lookupd::lookup(&t), "lookupd_lookup_after_tombstone.http")
            .unwrap()
            .producers
            .is_empty()
    );
    let e = decode(&lookupd::lookup(&t), "lookupd_lookup_topic_not_found.http").unwrap_err();
    assert!(e.is_not_found());
    let topics = decode(&lookupd::topics(), "lookupd_topics.http").unwrap();
    assert!(topics.iter().any(|t| t == "orders"));
    let channels = decode(&lookupd::channels(&t), "lookupd_channels.http").unwrap();
    assert!(channels.iter().any(|c| c == "audit"));
    assert!(
        decode(&lookupd::channels(&t), "lookupd_channels_nosuch.http")
            .unwrap()
            .is_empty()
    );
    let nodes = decode(&lookupd::nodes(), "lookupd_nodes.http").unwrap();
    assert_eq!(nodes.len(), 1);
    let node = &nodes[0];
    assert_eq!(node.http_address(), "127.0.0.1:4151");
    assert_eq!(node.tcp_address(), "127.0.0.1:4150");
    assert_eq!(node.topics.len(), node.tombstones.len());
    assert!(node.tombstones.iter().all(|t| !t));
    let after = decode(&lookupd::nodes(), "lookupd_nodes_after_tombstone.http").unwrap();
    let i = after[0].topics.iter().position(|t| t == "orders").unwrap();
    assert!(after[0].tombstones[i]);

    let c = channel("lc1");
    for (call, name) in [
        (lookupd::create_topic(&t), "lookupd_topic_create.http"),
        (lookupd::delete_topic(&t), "lookupd_topic_delete.http"),
        (
            lookupd::delete_topic(&t),
            "lookupd_topic_delete_nosuch.http",
        ),
        (
            lookupd::tombstone_topic(&t, "127.0.0.1:4151"),
            "lookupd_topic_tombstone.http",
        ),
        (
            lookupd::create_channel(&t, &c),
            "lookupd_channel_create.http",
        ),
        (
            lookupd::delete_channel(&t, &c),
            "lookupd_channel_delete.http",
        ),
    ] {
        decode(&call, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let any = lookupd::create_topic(&t);
    for (name, status, message) in [
        (
            "lookupd_topic_create_invalid_topic.http",
            400,
            ServerMessage::InvalidTopic,
        ),
        (
            "lookupd_topic_create_missing_topic.http",
            400,
            ServerMessage::MissingArgTopic,
        ),
        (
            "lookupd_topic_tombstone_missing_node.http",
            400,
            ServerMessage::MissingArgNode,
        ),
        (
            "lookupd_channel_delete_nosuch.http",
            404,
            ServerMessage::ChannelNotFound,
        ),
        (
            "lookupd_channel_create_invalid_channel.http",
            400,
            ServerMessage::InvalidChannel,
        ),
        (
            "lookupd_lookup_missing_topic.http",
            400,
            ServerMessage::MissingArgTopic,
        ),
        ("lookupd_not_found.http", 404, ServerMessage::NotFound),
        (
            "lookupd_method_not_allowed.http",
            405,
            ServerMessage::MethodNotAllowed,
        ),
    ] {
        assert_eq!(
            server_error(decode(&any, name)),
            (status, message),
            "{name}"
        );
    }
}

#[test]
fn bodies_that_are_not_the_reply_are_typed_errors() {
    let odd = Response {
        status: 500,
        content_type: None,
        body: b"<html>proxy error</html>".to_vec(),
    };
    assert!(matches!(
        nsqd::info().decode(&odd),
        Err(ApiError::Status { status: 500, .. })
    ));
    let wrong = Response {
        status: 200,
        content_type: None,
        body: br#"{"version": 3}"#.to_vec(),
    };
    assert!(matches!(
        nsqd::info().decode(&wrong),
        Err(ApiError::BadReply { .. })
    ));
    // Unknown fields (a newer nsqd) are ignored.
    let newer = Response {
        status: 200,
        content_type: None,
        body: br#"{"version":"9.9.9","future_field":[1,2]}"#.to_vec(),
    };
    assert_eq!(nsqd::info().decode(&newer).unwrap().version, "9.9.9");
}
