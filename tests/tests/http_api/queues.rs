//! Pause, empty and delete, of topics and of channels: what they do to the messages and to
//! the subscribers.

use std::io;
use std::time::Duration;

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{http_get_json, http_request, wait_until};
use serde_json::{Value, json};

use crate::support::{channel_stats, no_message_for, post, subscriber, topic_stats};
use crate::{R, WAIT};

#[test]
fn a_paused_channel_delivers_nothing_until_unpaused() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("a_paused_channel_delivers_nothing_until_unpaused") else {
        return Ok(());
    };
    let t = env.topic("http");
    assert_eq!(post(http, &format!("/topic/create?topic={t}")).0, 200);
    assert_eq!(
        post(http, &format!("/channel/create?topic={t}&channel=c")).0,
        200
    );
    let mut c = subscriber(&env, &t, "c", 10);
    assert_eq!(
        post(http, &format!("/channel/pause?topic={t}&channel=c")),
        (200, String::new())
    );
    for body in ["p1", "p2", "p3"] {
        assert_eq!(
            http_request(http, "POST", &format!("/pub?topic={t}"), body.as_bytes())?.0,
            200
        );
    }
    // The messages queue in the channel; none goes out.
    assert!(wait_until(WAIT, || channel_stats(http, &t, "c")["depth"] == 3));
    assert!(no_message_for(&mut c, Duration::from_millis(300)));
    let s = channel_stats(http, &t, "c");
    assert_eq!(
        (s["paused"].clone(), s["in_flight_count"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(
        post(http, &format!("/channel/unpause?topic={t}&channel=c")),
        (200, String::new())
    );
    let mut got: Vec<Vec<u8>> = (0..3)
        .map(|_| c.expect_message().map(|m| m.body))
        .collect::<io::Result<_>>()?;
    got.sort();
    assert_eq!(got, [b"p1", b"p2", b"p3"]);
    assert_eq!(channel_stats(http, &t, "c")["paused"], false);
    Ok(())
}

#[test]
fn a_paused_topic_keeps_its_messages_until_unpaused() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("a_paused_topic_keeps_its_messages_until_unpaused") else {
        return Ok(());
    };
    let t = env.topic("http");
    assert_eq!(
        post(http, &format!("/channel/create?topic={t}&channel=c")).0,
        404
    );
    assert_eq!(post(http, &format!("/topic/create?topic={t}")).0, 200);
    assert_eq!(
        post(http, &format!("/channel/create?topic={t}&channel=c")).0,
        200
    );
    let mut sub = subscriber(&env, &t, "c", 10);
    assert_eq!(
        post(http, &format!("/topic/pause?topic={t}")),
        (200, String::new())
    );
    let body = format!("{}\n{}", "m1", "m2");
    assert_eq!(
        http_request(http, "POST", &format!("/mpub?topic={t}"), body.as_bytes())?.0,
        200
    );
    // Held by the topic: nothing copied to the channel.
    assert!(wait_until(WAIT, || topic_stats(http, &t)["depth"] == 2));
    let s = topic_stats(http, &t);
    assert_eq!(s["paused"], true);
    assert_eq!(s["message_count"], 2);
    assert_eq!(s["channels"][0]["message_count"], 0);
    assert!(no_message_for(&mut sub, Duration::from_millis(300)));
    assert_eq!(
        post(http, &format!("/topic/unpause?topic={t}")),
        (200, String::new())
    );
    for _ in 0..2 {
        sub.expect_message()?;
    }
    let s = topic_stats(http, &t);
    assert_eq!(
        (s["depth"].clone(), s["paused"].clone()),
        (json!(0), json!(false))
    );
    assert_eq!(s["channels"][0]["message_count"], 2);
    // Pausing needs an existing topic; the name is not checked.
    assert_eq!(
        post(http, "/topic/pause?topic=bad!name"),
        (404, r#"{"message":"TOPIC_NOT_FOUND"}"#.to_owned())
    );
    assert_eq!(
        post(http, "/topic/pause"),
        (400, r#"{"message":"MISSING_ARG_TOPIC"}"#.to_owned())
    );
    Ok(())
}

#[test]
fn empty_drops_queued_deferred_and_in_flight_messages() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("empty_drops_queued_deferred_and_in_flight_messages") else {
        return Ok(());
    };
    let t = env.topic("http");
    // A topic without channels holds its messages; /topic/empty drops them.
    for _ in 0..2 {
        assert_eq!(
            http_request(http, "POST", &format!("/pub?topic={t}"), b"x")?.0,
            200
        );
    }
    assert!(wait_until(WAIT, || topic_stats(http, &t)["depth"] == 2));
    assert_eq!(
        post(http, &format!("/topic/empty?topic={t}")),
        (200, String::new())
    );
    assert!(wait_until(WAIT, || topic_stats(http, &t)["depth"] == 0));
    assert_eq!(topic_stats(http, &t)["message_count"], 2);
    assert_eq!(
        post(http, "/topic/empty?topic=bad!name"),
        (400, r#"{"message":"INVALID_TOPIC"}"#.to_owned())
    );
    // A channel: one message in flight, one deferred, two queued.
    let mut c = subscriber(&env, &t, "c", 1);
    for body in ["a", "b", "c"] {
        assert_eq!(
            http_request(http, "POST", &format!("/pub?topic={t}"), body.as_bytes())?.0,
            200
        );
    }
    assert_eq!(
        http_request(http, "POST", &format!("/pub?topic={t}&defer=60000"), b"d")?.0,
        200
    );
    let m = c.expect_message()?;
    assert!(wait_until(WAIT, || {
        let s = channel_stats(http, &t, "c");
        s["depth"] == 2 && s["in_flight_count"] == 1 && s["deferred_count"] == 1
    }));
    assert_eq!(
        post(http, &format!("/channel/empty?topic={t}&channel=c")),
        (200, String::new())
    );
    let s = channel_stats(http, &t, "c");
    assert_eq!(
        (
            s["depth"].clone(),
            s["in_flight_count"].clone(),
            s["deferred_count"].clone()
        ),
        (json!(0), json!(0), json!(0))
    );
    assert_eq!(s["clients"][0]["in_flight_count"], 0);
    // The dropped in-flight message can no longer be finished.
    c.cmd(&format!("FIN {}", m.id_str()))?;
    c.expect_error("E_FIN_FAILED")?;
    // The subscriber is ready again and gets what comes next.
    assert_eq!(
        http_request(http, "POST", &format!("/pub?topic={t}"), b"e")?.0,
        200
    );
    assert_eq!(c.expect_message()?.body, b"e");
    assert_eq!(
        post(http, &format!("/channel/empty?topic={t}&channel=nosuch")),
        (404, r#"{"message":"CHANNEL_NOT_FOUND"}"#.to_owned())
    );
    Ok(())
}

#[test]
fn delete_removes_topics_and_channels_and_closes_their_subscribers() -> R {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("delete_removes_topics_and_channels") else {
        return Ok(());
    };
    let t = env.topic("http");
    let mut sub_a = subscriber(&env, &t, "a", 1);
    let mut sub_b = subscriber(&env, &t, "b", 1);
    assert_eq!(
        post(http, &format!("/channel/delete?topic={t}&channel=a")),
        (200, String::new())
    );
    sub_a.expect_closed()?;
    let names: Vec<Value> = topic_stats(http, &t)["channels"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| c["channel_name"].clone())
        .collect();
    assert_eq!(names, [json!("b")]);
    assert_eq!(
        post(http, &format!("/topic/delete?topic={t}")),
        (200, String::new())
    );
    sub_b.expect_closed()?;
    let (_, stats) = http_get_json(http, &format!("/stats?format=json&topic={t}"))?;
    assert_eq!(
        (stats["topics"].clone(), stats["producers"].clone()),
        (Value::Null, Value::Null)
    );
    assert_eq!(
        post(http, &format!("/topic/delete?topic={t}")),
        (404, r#"{"message":"TOPIC_NOT_FOUND"}"#.to_owned())
    );
    // An ephemeral topic goes with its last channel.
    let eph = format!("{t}#ephemeral");
    let q = eph.replace('#', "%23");
    assert_eq!(
        post(http, &format!("/channel/create?topic={q}&channel=c")).0,
        404
    );
    assert_eq!(post(http, &format!("/topic/create?topic={q}")).0, 200);
    assert_eq!(
        post(http, &format!("/channel/create?topic={q}&channel=c")).0,
        200
    );
    assert_eq!(
        post(http, &format!("/channel/delete?topic={q}&channel=c")).0,
        200
    );
    assert!(wait_until(WAIT, || {
        http_get_json(http, &format!("/stats?format=json&topic={q}"))
            .is_ok_and(|(_, v)| v["topics"].is_null())
    }));
    Ok(())
}
