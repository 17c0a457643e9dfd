//! nsqlookupd's tombstones, topic and channel deletion, and query checks.

use std::time::Duration;

use nsq_test_broker::{Lookupd, Nsqd, http_get_json, wait_until};
use serde_json::json;

use crate::raw::send;
use crate::support::post;
use crate::{R, WAIT};

#[test]
fn tombstones_hide_a_producer_for_the_tombstone_lifetime() -> R {
    let lookupd = Lookupd::start()?;
    lookupd.set_tombstone_lifetime(Duration::from_millis(300));
    let nsqd = Nsqd::builder().http(true).lookupd(&lookupd).start()?;
    let addr = lookupd.http_address();
    nsqd.publish("tomb", b"x");
    nsqd.publish("other", b"x");
    let node = format!("127.0.0.1:{}", nsqd.http_address().ok_or("http")?.port());
    assert_eq!(
        post(addr, &format!("/topic/tombstone?topic=tomb&node={node}")).0,
        200
    );
    // Hidden from /lookup of that topic only; /nodes shows the tombstone.
    assert!(lookupd.producers("tomb").is_empty());
    assert_eq!(lookupd.producers("other").len(), 1);
    let (_, nodes) = http_get_json(addr, "/nodes")?;
    let node_entry = &nodes["producers"][0];
    let topics = node_entry["topics"].as_array().ok_or("topics")?;
    let i = topics.iter().position(|t| t == "tomb").ok_or("tomb")?;
    assert_eq!(node_entry["tombstones"][i], true);
    // Back once the lifetime is over.
    assert!(wait_until(WAIT, || lookupd.producers("tomb").len() == 1));
    let (_, nodes) = http_get_json(addr, "/nodes")?;
    assert_eq!(nodes["producers"][0]["tombstones"], json!([false, false]));
    // A topic deletion removes the registration and its channels; the producer stays a node.
    nsqd.publish("gone", b"x");
    assert_eq!(post(addr, "/topic/delete?topic=gone").0, 200);
    assert_eq!(http_get_json(addr, "/lookup?topic=gone")?.0, 404);
    assert_eq!(
        post(addr, "/channel/delete?topic=tomb&channel=nosuch"),
        (404, r#"{"message":"CHANNEL_NOT_FOUND"}"#.to_owned())
    );
    // Only the handlers that read the query refuse one that does not parse.
    assert_eq!(http_get_json(addr, "/topics?x=%zz")?.0, 200);
    assert_eq!(http_get_json(addr, "/nodes?x=%zz")?.0, 200);
    assert_eq!(
        http_get_json(addr, "/lookup?topic=%zz")?,
        (400, json!({"message": "INVALID_REQUEST"}))
    );
    let r = send(addr, "OPTIONS", "/topic/tombstone", b"");
    assert_eq!((r.status, r.header("allow")), (200, Some("OPTIONS, POST")));
    Ok(())
}
