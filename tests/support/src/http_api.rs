//! The HTTP API tests of the async adapters, written once over the client layer's generic
//! types and run by each adapter on its runtime(s): every endpoint of nsqd and nsqlookupd
//! through `HttpClient`, then the cluster operations through `Cluster`, against the test
//! broker (which answers as nsqd and nsqlookupd v1.3.0 do).

use nsq_client::{Cluster, Error, HttpClient, HttpFailure};

use nsq_proto::http::{ApiError, HttpError, ServerMessage, lookupd, nsqd};
use nsq_proto::{Channel, Topic};
use nsq_test_broker::{Lookupd, Nsqd};
use std::time::Duration;

fn topic(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

fn channel(name: &str) -> Channel {
    Channel::new(name).unwrap()
}

/// The server's message of a failed call.
fn message(e: &Error) -> Option<&ServerMessage> {
    e.api_error().and_then(ApiError::server_message)
}

/// A broker nsqd with its HTTP API, registered with `lookupd`.
pub fn nsqd_with(lookupd: &Lookupd) -> Nsqd {
    Nsqd::builder().http(true).lookupd(lookupd).start().unwrap()
}

/// Every endpoint of nsqd and nsqlookupd through `HttpClient`.
pub async fn every_endpoint() {
    let lookupd = Lookupd::start().unwrap();
    let broker = nsqd_with(&lookupd);
    let n = HttpClient::new(&broker.http_address().unwrap().to_string()).unwrap();
    let l = HttpClient::new(&format!("http://{}", lookupd.http_address())).unwrap();
    let (t, c) = (topic("http_orders"), channel("billing"));

    n.call(nsqd::ping()).await.unwrap();
    let info = n.call(nsqd::info()).await.unwrap();
    assert_eq!(info.version, "1.3.0");
    assert_eq!(
        i64::from(info.tcp_port),
        i64::from(broker.tcp_address().port())
    );
    n.call(nsqd::create_topic(&t)).await.unwrap();
    n.call(nsqd::create_channel(&t, &c)).await.unwrap();
    let missing = n
        .call(nsqd::create_channel(&topic("nosuch"), &c))
        .await
        .unwrap_err();
    assert_eq!(
        message(&missing),
        Some(&ServerMessage::TopicNotFound),
        "{missing}"
    );
    n.call(nsqd::publish(&t, "one")).await.unwrap();
    n.call(nsqd::deferred_publish(&t, Duration::from_secs(60), "later"))
        .await
        .unwrap();
    n.call(nsqd::multi_publish(&t, ["a\nb", "c"]))
        .await
        .unwrap();
    let empty = n.call(nsqd::publish(&t, "")).await.unwrap_err();
    assert_eq!(message(&empty), Some(&ServerMessage::MsgEmpty));

    let q = nsqd::StatsQuery::new().topic(&t).channel(&c);
    let stats = n.call(nsqd::stats(&q)).await.unwrap();
    assert_eq!(stats.version, "1.3.0");
    let ch = &stats.topics[0].channels[0];
    assert_eq!(
        (ch.channel_name.as_str(), ch.depth, ch.deferred_count),
        ("billing", 3, 1)
    );
    assert!(stats.memory.is_some(), "include_mem defaults to true");
    let lean = nsqd::StatsQuery::new()
        .include_clients(false)
        .include_mem(false);
    assert!(n.call(nsqd::stats(&lean)).await.unwrap().memory.is_none());

    n.call(nsqd::pause_channel(&t, &c)).await.unwrap();
    assert!(n.call(nsqd::stats(&q)).await.unwrap().topics[0].channels[0].paused);
    n.call(nsqd::unpause_channel(&t, &c)).await.unwrap();
    n.call(nsqd::empty_channel(&t, &c)).await.unwrap();
    assert_eq!(
        n.call(nsqd::stats(&q)).await.unwrap().topics[0].channels[0].depth,
        0
    );
    n.call(nsqd::pause_topic(&t)).await.unwrap();
    assert!(n.call(nsqd::stats(&q)).await.unwrap().topics[0].paused);
    n.call(nsqd::unpause_topic(&t)).await.unwrap();
    n.call(nsqd::empty_topic(&t)).await.unwrap();

    let addrs = n
        .call(nsqd::set_lookupd_tcp_addresses(&["127.0.0.1:4160"]))
        .await
        .unwrap();
    assert!(addrs.is_array(), "{addrs}");
    let level = n.call(nsqd::set_log_level("debug")).await.unwrap();
    assert_eq!(level, n.call(nsqd::get_config("log_level")).await.unwrap());
    let broadcast = n.call(nsqd::get_config("broadcast_address")).await.unwrap();
    assert!(
        broadcast.is_string(),
        "a string option comes as text: {broadcast}"
    );
    let bad = n
        .call(nsqd::get_config("no_such_option"))
        .await
        .unwrap_err();
    assert_eq!(message(&bad), Some(&ServerMessage::InvalidOption));

    l.call(lookupd::ping()).await.unwrap();
    assert_eq!(l.call(lookupd::info()).await.unwrap().version, "1.3.0");
    let found = l.call(lookupd::lookup(&t)).await.unwrap();
    assert_eq!(found.producers.len(), 1);
    assert_eq!(
        found.producers[0].tcp_address(),
        broker.tcp_address().to_string()
    );
    assert!(
        l.call(lookupd::topics())
            .await
            .unwrap()
            .contains(&t.as_str().to_owned())
    );
    assert!(
        l.call(lookupd::channels(&t))
            .await
            .unwrap()
            .contains(&c.as_str().to_owned())
    );
    let nodes = l.call(lookupd::nodes()).await.unwrap();
    assert_eq!(nodes.len(), 1);
    let node = nodes[0].http_address();
    let other = topic("lookupd_only");
    l.call(lookupd::create_topic(&other)).await.unwrap();
    l.call(lookupd::create_channel(&other, &c)).await.unwrap();
    l.call(lookupd::delete_channel(&other, &c)).await.unwrap();
    let gone = l
        .call(lookupd::delete_channel(&other, &c))
        .await
        .unwrap_err();
    assert_eq!(message(&gone), Some(&ServerMessage::ChannelNotFound));
    l.call(lookupd::delete_topic(&other)).await.unwrap();
    l.call(lookupd::tombstone_topic(&t, &node)).await.unwrap();
    assert!(
        l.call(lookupd::lookup(&t))
            .await
            .unwrap()
            .producers
            .is_empty(),
        "tombstoned"
    );

    n.call(nsqd::delete_channel(&t, &c)).await.unwrap();
    n.call(nsqd::delete_topic(&t)).await.unwrap();
    let deleted = n.call(nsqd::delete_topic(&t)).await.unwrap_err();
    assert_eq!(message(&deleted), Some(&ServerMessage::TopicNotFound));
}

/// Wrong addresses (refused, not HTTP, not found ...) are typed errors.
pub async fn wrong_addresses_are_typed_errors() {
    let lookupd = Lookupd::start().unwrap();
    let broker = nsqd_with(&lookupd);
    // nsqd's TCP port for its HTTP port.
    let tcp = HttpClient::new(&broker.tcp_address().to_string()).unwrap();
    let e = tcp.call(nsqd::ping()).await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Http {
                failure: HttpFailure::Api(ApiError::Http(HttpError::NotHttp)),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("wrong port"), "{e}");
    // The nsqd's HTTP port asked for a lookupd's path.
    let nsqd_http = HttpClient::new(&broker.http_address().unwrap().to_string()).unwrap();
    let e = nsqd_http.call(lookupd::nodes()).await.unwrap_err();
    assert_eq!(message(&e), Some(&ServerMessage::NotFound), "{e}");
    // A closed port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = HttpClient::new(&closed.to_string())
        .unwrap()
        .call(nsqd::ping())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Http {
                failure: HttpFailure::Connect(_),
                ..
            }
        ),
        "{e:?}"
    );
    // A server that accepts and never answers: the timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = nsq_client::HttpConfig::new()
        .with_timeouts(Duration::from_millis(500), Duration::from_millis(300));
    let e = HttpClient::with_config(&silent.local_addr().unwrap().to_string(), config)
        .unwrap()
        .call(nsqd::ping())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Http {
                failure: HttpFailure::Timeout(_),
                ..
            }
        ),
        "{e:?}"
    );
    // Not an address.
    assert!(HttpClient::new("no-port").is_err());
    assert!(HttpClient::new("http://host:1/path").is_err());
}

/// The cluster operations through `Cluster`.
pub async fn cluster_operations() {
    let lookupd = Lookupd::start().unwrap();
    let a = nsqd_with(&lookupd);
    let b = nsqd_with(&lookupd);
    let (t, c) = (topic("cluster_orders"), channel("billing"));
    for broker in [&a, &b] {
        let n = HttpClient::new(&broker.http_address().unwrap().to_string()).unwrap();
        n.call(nsqd::create_topic(&t)).await.unwrap();
        n.call(nsqd::publish(&t, "x")).await.unwrap();
    }
    let cluster = Cluster::new([lookupd.http_address().to_string()]).unwrap();
    assert!(
        cluster
            .topics()
            .await
            .into_result()
            .unwrap()
            .contains(&t.as_str().to_owned())
    );
    assert_eq!(cluster.producers(&t).await.into_result().unwrap().len(), 2);
    assert_eq!(cluster.nodes().await.into_result().unwrap().len(), 2);
    cluster.create_channel(&t, &c).await.into_result().unwrap();
    assert_eq!(
        cluster.channels(&t).await.into_result().unwrap(),
        ["billing"]
    );
    let stats = cluster.topic_stats(&t).await.into_result().unwrap();
    assert_eq!(stats.nodes.len(), 2);
    assert_eq!(stats.total.message_count, 2);
    let ch = cluster.channel_stats(&t, &c).await.into_result().unwrap();
    assert_eq!(ch.nodes.len(), 2, "the channel exists on both nsqd");
    cluster.pause_channel(&t, &c).await.into_result().unwrap();
    assert!(
        cluster
            .channel_stats(&t, &c)
            .await
            .value
            .nodes
            .iter()
            .all(|(_, s)| s.paused)
    );
    cluster.unpause_channel(&t, &c).await.into_result().unwrap();
    cluster.empty_channel(&t, &c).await.into_result().unwrap();
    cluster.pause_topic(&t).await.into_result().unwrap();
    cluster.unpause_topic(&t).await.into_result().unwrap();
    cluster.empty_topic(&t).await.into_result().unwrap();
    cluster.delete_channel(&t, &c).await.into_result().unwrap();
    let before = lookupd.requests().len();
    cluster.delete_topic(&t).await.into_result().unwrap();
    // nsqadmin's order at the lookupd: every producer tombstoned, then the topic deleted
    // (the nsqd deletes come in between).
    let asked: Vec<String> = lookupd.requests()[before..]
        .iter()
        .filter(|r| r.starts_with("/topic/"))
        .cloned()
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(
        asked[..2]
            .iter()
            .all(|r| r.starts_with("/topic/tombstone?")),
        "{asked:?}"
    );
    assert!(asked[2].starts_with("/topic/delete?"), "{asked:?}");
    for broker in [&a, &b] {
        assert!(broker.topic(t.as_str()).is_none(), "deleted on every nsqd");
    }
    assert!(
        !cluster
            .topics()
            .await
            .into_result()
            .unwrap()
            .contains(&t.as_str().to_owned())
    );

    // A dead lookupd beside a live one: the live one's answer, and the dead one named.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let partial = Cluster::new([lookupd.http_address().to_string(), dead.to_string()])
        .unwrap()
        .nodes()
        .await;
    assert_eq!(partial.value.len(), 2);
    assert_eq!(partial.failures.len(), 1);
    assert_eq!(partial.failures[0].node, dead.to_string());
    assert!(matches!(partial.into_result(), Err(Error::Cluster(f)) if f.len() == 1));

    // Without lookupd: the nsqd themselves.
    let direct = Cluster::from_nsqds(
        [
            a.http_address().unwrap().to_string(),
            b.http_address().unwrap().to_string(),
        ],
        nsq_client::HttpConfig::new(),
    )
    .unwrap();
    direct.create_channel(&t, &c).await.into_result().unwrap();
    assert_eq!(direct.producers(&t).await.into_result().unwrap().len(), 2);
    assert_eq!(
        direct
            .channel_stats(&t, &c)
            .await
            .into_result()
            .unwrap()
            .nodes
            .len(),
        2
    );
    direct.delete_topic(&t).await.into_result().unwrap();
    assert!(direct.topics().await.into_result().unwrap().is_empty());
}

/// The configured headers are sent with every call.
pub async fn configured_headers_are_sent() {
    use std::io::{Read, Write};
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let seen = std::thread::spawn(move || {
        let (mut conn, _) = server.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.ends_with(b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "the request ended early");
            request.extend_from_slice(&buf[..n]);
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
            .unwrap();
        String::from_utf8(request).unwrap()
    });
    let config = nsq_client::HttpConfig::new()
        .with_header("Authorization", "Basic dXNlcjpwYXNz")
        .unwrap();
    HttpClient::with_config(&addr, config)
        .unwrap()
        .call(nsqd::ping())
        .await
        .unwrap();
    let request = seen.join().unwrap();
    assert!(request.starts_with("GET /ping HTTP/1.1\r\n"), "{request}");
    assert!(
        request.contains("\r\nAuthorization: Basic dXNlcjpwYXNz\r\n"),
        "{request}"
    );
    assert!(
        nsq_client::HttpConfig::new()
            .with_header("X", "a\r\nInjected: 1")
            .is_err()
    );
}
