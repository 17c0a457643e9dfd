//! nsqd's and nsqlookupd's HTTP APIs and the cluster operations with blocking calls, against
//! the test broker: every endpoint, the typed errors, the cluster operations.

#![allow(
    clippy::many_single_char_names,
    reason = "t, c: the topic and channel; n, l: the nsqd and lookupd clients"
)]

use nsq_blocking::http::{ServerMessage, lookupd, nsqd};
use nsq_blocking::{Channel, Cluster, Error, HttpClient, HttpConfig, HttpFailure, Topic};
use nsq_test_broker::{Lookupd, Nsqd};
use std::time::Duration;

fn message(e: &Error) -> Option<&ServerMessage> {
    e.api_error()
        .and_then(nsq_blocking::http::ApiError::server_message)
}

fn broker(lookupd: &Lookupd) -> Nsqd {
    Nsqd::builder().http(true).lookupd(lookupd).start().unwrap()
}

#[test]
fn every_endpoint() {
    let lookupd = Lookupd::start().unwrap();
    let nsqd_broker = broker(&lookupd);
    let n = HttpClient::new(&nsqd_broker.http_address().unwrap().to_string()).unwrap();
    let l = HttpClient::new(&lookupd.http_address().to_string()).unwrap();
    let (t, c) = (
        Topic::new("blocking_http").unwrap(),
        Channel::new("ch").unwrap(),
    );

    n.call(nsqd::ping()).unwrap();
    assert_eq!(n.call(nsqd::info()).unwrap().version, "1.3.0");
    n.call(nsqd::create_topic(&t)).unwrap();
    n.call(nsqd::create_channel(&t, &c)).unwrap();
    n.call(nsqd::publish(&t, "one")).unwrap();
    n.call(nsqd::deferred_publish(&t, Duration::from_secs(60), "later"))
        .unwrap();
    n.call(nsqd::multi_publish(&t, ["a", "b"])).unwrap();
    let q = nsqd::StatsQuery::new().topic(&t).channel(&c);
    let ch = n.call(nsqd::stats(&q)).unwrap().topics[0].channels[0].clone();
    assert_eq!((ch.depth, ch.deferred_count), (3, 1));
    n.call(nsqd::pause_channel(&t, &c)).unwrap();
    n.call(nsqd::unpause_channel(&t, &c)).unwrap();
    n.call(nsqd::empty_channel(&t, &c)).unwrap();
    n.call(nsqd::pause_topic(&t)).unwrap();
    n.call(nsqd::unpause_topic(&t)).unwrap();
    n.call(nsqd::empty_topic(&t)).unwrap();
    assert_eq!(
        n.call(nsqd::stats(&q)).unwrap().topics[0].channels[0].depth,
        0
    );
    let level = n.call(nsqd::set_log_level("warn")).unwrap();
    assert_eq!(level, n.call(nsqd::get_config("log_level")).unwrap());
    n.call(nsqd::set_lookupd_tcp_addresses(&["127.0.0.1:4160"]))
        .unwrap();

    l.call(lookupd::ping()).unwrap();
    assert_eq!(l.call(lookupd::info()).unwrap().version, "1.3.0");
    assert_eq!(l.call(lookupd::lookup(&t)).unwrap().producers.len(), 1);
    assert!(
        l.call(lookupd::topics())
            .unwrap()
            .contains(&"blocking_http".to_owned())
    );
    assert_eq!(l.call(lookupd::channels(&t)).unwrap(), ["ch"]);
    let node = l.call(lookupd::nodes()).unwrap()[0].http_address();
    let other = Topic::new("blocking_lookupd_only").unwrap();
    l.call(lookupd::create_topic(&other)).unwrap();
    l.call(lookupd::create_channel(&other, &c)).unwrap();
    l.call(lookupd::delete_channel(&other, &c)).unwrap();
    l.call(lookupd::delete_topic(&other)).unwrap();
    l.call(lookupd::tombstone_topic(&t, &node)).unwrap();
    assert!(l.call(lookupd::lookup(&t)).unwrap().producers.is_empty());

    n.call(nsqd::delete_channel(&t, &c)).unwrap();
    n.call(nsqd::delete_topic(&t)).unwrap();
    let e = n.call(nsqd::delete_topic(&t)).unwrap_err();
    assert_eq!(message(&e), Some(&ServerMessage::TopicNotFound), "{e}");
    let e = HttpClient::new(&nsqd_broker.tcp_address().to_string())
        .unwrap()
        .call(nsqd::ping())
        .unwrap_err();
    assert!(e.to_string().contains("wrong port"), "{e}");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config =
        HttpConfig::new().with_timeouts(Duration::from_millis(500), Duration::from_millis(300));
    let e = HttpClient::with_config(&silent.local_addr().unwrap().to_string(), config)
        .unwrap()
        .call(nsqd::ping())
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
}

#[test]
fn cluster_operations() {
    let lookupd = Lookupd::start().unwrap();
    let (a, b) = (broker(&lookupd), broker(&lookupd));
    let (t, c) = (
        Topic::new("blocking_cluster").unwrap(),
        Channel::new("ch").unwrap(),
    );
    for n in [&a, &b] {
        let client = HttpClient::new(&n.http_address().unwrap().to_string()).unwrap();
        client.call(nsqd::publish(&t, "x")).unwrap();
    }
    let cluster = Cluster::new([lookupd.http_address().to_string()]).unwrap();
    assert_eq!(cluster.producers(&t).into_result().unwrap().len(), 2);
    cluster.create_channel(&t, &c).into_result().unwrap();
    let stats = cluster.channel_stats(&t, &c).into_result().unwrap();
    assert_eq!(stats.nodes.len(), 2);
    cluster.pause_channel(&t, &c).into_result().unwrap();
    assert!(cluster.channel_stats(&t, &c).value.total.paused);
    cluster.delete_topic(&t).into_result().unwrap();
    assert!(a.topic("blocking_cluster").is_none() && b.topic("blocking_cluster").is_none());
}

#[test]
fn a_large_cluster_is_asked_in_windows_and_every_failure_is_reported() {
    // 40 closed ports: more than one window of calls under way at once.
    let closed: Vec<String> = (0..40)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        })
        .collect();
    let cluster = Cluster::from_nsqds(&closed, HttpConfig::new()).unwrap();
    let report = cluster.topics();
    assert!(report.value.is_empty());
    let mut failed: Vec<String> = report.failures.iter().map(|f| f.node.clone()).collect();
    failed.sort();
    let mut want = closed.clone();
    want.sort();
    assert_eq!(failed, want);
}
