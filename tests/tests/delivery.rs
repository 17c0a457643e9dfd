//! Raw-bytes scenarios for message flow: RDY enforcement, fan-out, spreading, timeouts and
//! redelivery, REQ/DPUB delays, TOUCH, ephemeral topics/channels, heartbeats and liveness.

use std::time::{Duration, Instant};

use nsq_test_broker::conformance::Env;
use nsq_test_broker::raw::READ_TIMEOUT;
use nsq_test_broker::{RawClient, RawFrame, wait_until};
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

fn publish(env: &Env, topic: &str, bodies: &[&[u8]]) -> R {
    let mut p = env.raw();
    for b in bodies {
        assert_eq!(p.publish(topic, b)?, RawFrame::Response(b"OK".to_vec()));
    }
    Ok(())
}

/// Lets `c` wait for a message redelivered by a timeout or released from the deferred
/// queue, which a real nsqd may deliver seconds late (see `external_queue_scan_allowance`).
fn patient(env: &Env, c: &RawClient) -> R {
    c.set_read_timeout(READ_TIMEOUT + env.queue_scan_allowance())?;
    Ok(())
}

/// A consumer with msg_timeout negotiated (ms) and the given RDY.
fn consumer(
    env: &Env,
    topic: &str,
    channel: &str,
    msg_timeout_ms: i64,
    rdy: u32,
) -> Result<RawClient, Box<dyn std::error::Error>> {
    let mut c = env.raw();
    c.identify_negotiate(&json!({ "msg_timeout": msg_timeout_ms }))?;
    c.subscribe(topic, channel)?;
    c.cmd(&format!("RDY {rdy}"))?;
    Ok(c)
}

#[test]
fn message_frame_fields() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as i64;
    publish(&env, &t, &[b"payload"])?;
    let mut c = consumer(&env, &t, "c", 0, 1)?;
    let m = c.expect_message()?;
    assert_eq!(m.body, b"payload");
    assert_eq!(m.attempts, 1);
    assert!(
        m.id.iter().all(u8::is_ascii_hexdigit),
        "id {:?}",
        m.id_str()
    );
    assert!(
        m.timestamp >= before - 1_000_000_000,
        "timestamp {}",
        m.timestamp
    );
    c.cmd(&format!("FIN {}", m.id_str()))?;
    if let Some(nsqd) = env.nsqd() {
        assert!(nsqd.wait_for(Duration::from_secs(2), |s| {
            s.topics.iter().any(|tp| {
                tp.name == t
                    && tp
                        .channels
                        .iter()
                        .any(|ch| ch.finished == 1 && ch.in_flight == 0)
            })
        }));
        let log = nsqd.commands();
        let names: Vec<&str> = log
            .iter()
            .map(nsq_test_broker::CommandRecord::name)
            .collect();
        assert!(
            names.contains(&"FIN") && names.contains(&"SUB") && names.contains(&"RDY"),
            "{names:?}"
        );
        let pub_rec = log.iter().find(|r| r.name() == "PUB").expect("PUB logged");
        assert_eq!(pub_rec.body.as_deref(), Some(&b"payload"[..]));
    }
    Ok(())
}

#[test]
fn nothing_is_sent_while_rdy_is_zero() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 0, 0)?;
    publish(&env, &t, &[b"x"])?;
    assert!(c.quiet_for(Duration::from_millis(150))?);
    c.cmd("RDY 1")?;
    assert_eq!(c.expect_message()?.body, b"x");
    Ok(())
}

#[test]
fn in_flight_never_exceeds_rdy() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    publish(&env, &t, &[b"1", b"2", b"3", b"4", b"5"])?;
    let mut c = consumer(&env, &t, "c", 0, 2)?;
    let a = c.expect_message()?;
    let _b = c.expect_message()?;
    assert!(
        c.quiet_for(Duration::from_millis(150))?,
        "a third message arrived with RDY 2"
    );
    if let Some(nsqd) = env.nsqd() {
        let me = nsqd
            .clients()
            .into_iter()
            .find(|s| s.subscription.is_some())
            .expect("client");
        assert_eq!((me.rdy, me.in_flight), (2, 2));
    }
    c.cmd(&format!("FIN {}", a.id_str()))?;
    c.expect_message()?;
    assert!(c.quiet_for(Duration::from_millis(100))?);
    Ok(())
}

#[test]
fn topic_fans_out_to_every_channel() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut a = consumer(&env, &t, "a", 0, 10)?;
    let mut b = consumer(&env, &t, "b", 0, 10)?;
    publish(&env, &t, &[b"m1", b"m2"])?;
    for c in [&mut a, &mut b] {
        let mut got = vec![c.expect_message()?.body, c.expect_message()?.body];
        got.sort();
        assert_eq!(got, vec![b"m1".to_vec(), b"m2".to_vec()]);
    }
    Ok(())
}

#[test]
fn channel_spreads_over_ready_subscribers() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut a = consumer(&env, &t, "c", 0, 1)?;
    let mut b = consumer(&env, &t, "c", 0, 1)?;
    // Make sure both RDY were processed before publishing.
    assert_eq!(
        a.publish(&env.topic("x"), b"sync")?,
        RawFrame::Response(b"OK".to_vec())
    );
    assert_eq!(
        b.publish(&env.topic("x"), b"sync")?,
        RawFrame::Response(b"OK".to_vec())
    );
    publish(&env, &t, &[b"1", b"2"])?;
    let ma = a.expect_message()?;
    let mb = b.expect_message()?;
    assert_ne!(ma.id, mb.id);
    Ok(())
}

#[test]
fn messages_wait_in_the_output_buffer_while_the_client_is_ready_for_more() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = env.raw();
    // nsqd buffers message frames and flushes them on a ticker started by IDENTIFY, when
    // the client is not ready for more, or with the next response.
    let t0 = Instant::now();
    c.identify_negotiate(&json!({ "output_buffer_timeout": 1000 }))?;
    c.subscribe(&t, "c")?;
    c.cmd("RDY 10")?;
    publish(&env, &t, &[b"buffered"])?;
    let m = c.expect_message()?;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    c.cmd(&format!("FIN {}", m.id_str()))?;
    // A response flushes what is buffered, in order.
    publish(&env, &t, &[b"flushed"])?;
    std::thread::sleep(Duration::from_millis(100));
    let t1 = Instant::now();
    c.cmd_body(&format!("PUB {}", env.topic("deliv")), b"x")?;
    let RawFrame::Message(m) = c.read_frame()? else {
        panic!("the buffered message must come before the PUB reply");
    };
    assert_eq!(m.body, b"flushed");
    c.expect_ok()?;
    assert!(
        t1.elapsed() < Duration::from_millis(500),
        "{:?}",
        t1.elapsed()
    );
    // Not ready for more (in_flight == RDY): flushed at once.
    c.cmd("RDY 2")?;
    publish(&env, &t, &[b"last"])?;
    let t2 = Instant::now();
    assert_eq!(c.expect_message()?.body, b"last");
    assert!(
        t2.elapsed() < Duration::from_millis(500),
        "{:?}",
        t2.elapsed()
    );
    Ok(())
}

#[test]
fn messages_published_before_any_channel_wait_for_the_first() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    publish(&env, &t, &[b"early"])?;
    if let Some(nsqd) = env.nsqd() {
        assert_eq!(nsqd.topic(&t).map(|s| s.depth), Some(1));
    }
    let mut c = consumer(&env, &t, "c", 0, 1)?;
    assert_eq!(c.expect_message()?.body, b"early");
    Ok(())
}

#[test]
fn unanswered_message_times_out_and_is_redelivered_with_attempts_plus_one() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 1000, 1)?;
    publish(&env, &t, &[b"slow"])?;
    let first = c.expect_message()?;
    let t0 = Instant::now();
    patient(&env, &c)?;
    let second = c.expect_message()?;
    let waited = t0.elapsed();
    assert_eq!(first.id, second.id);
    assert_eq!(second.attempts, 2);
    assert!(
        waited >= Duration::from_millis(900),
        "redelivered after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2500) + env.queue_scan_allowance(),
        "redelivered after {waited:?}"
    );
    // The old delivery is gone: nothing to FIN for it but the new one.
    c.cmd(&format!("FIN {}", second.id_str()))?;
    if let Some(nsqd) = env.nsqd() {
        assert!(nsqd.wait_for(Duration::from_secs(2), |s| {
            s.topics.iter().any(|tp| {
                tp.name == t
                    && tp
                        .channels
                        .iter()
                        .any(|ch| ch.timed_out == 1 && ch.finished == 1)
            })
        }));
    }
    Ok(())
}

#[test]
fn a_timed_out_message_cannot_be_answered_by_its_first_receiver() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut a = consumer(&env, &t, "c", 1000, 1)?;
    publish(&env, &t, &[b"expired"])?;
    let m = a.expect_message()?;
    a.cmd("RDY 0")?;
    let mut b = consumer(&env, &t, "c", 1000, 1)?;
    patient(&env, &b)?;
    let again = b.expect_message()?;
    assert_eq!((again.id, again.attempts), (m.id, 2));
    // The timed-out delivery is gone: the id is in flight again, but on b.
    let id = m.id_str();
    for (cmd, code) in [
        (format!("TOUCH {id}"), "E_TOUCH_FAILED"),
        (format!("FIN {id}"), "E_FIN_FAILED"),
        (format!("REQ {id} 0"), "E_REQ_FAILED"),
    ] {
        a.cmd(&cmd)?;
        let verb = cmd.split(' ').next().unwrap_or_default();
        assert_eq!(
            a.expect_error(code)?,
            format!("{code} {verb} {id} failed client does not own message")
        );
    }
    b.cmd(&format!("FIN {id}"))?;
    // Once finished, it is not in flight anywhere.
    assert!(b.quiet_for(Duration::from_millis(50))?);
    a.cmd(&format!("TOUCH {id}"))?;
    assert_eq!(
        a.expect_error("E_TOUCH_FAILED")?,
        format!("E_TOUCH_FAILED TOUCH {id} failed ID not in flight")
    );
    Ok(())
}

#[test]
fn deliveries_keep_the_msg_timeout_of_the_first_identify() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = env.raw();
    c.identify_negotiate(&json!({ "msg_timeout": 1000 }))?;
    // nsqd's message pump ignores a second IDENTIFY, though the reply (and TOUCH) use it.
    let r = c.identify_negotiate(&json!({ "msg_timeout": 60_000 }))?;
    assert_eq!(r["msg_timeout"], 60_000);
    c.subscribe(&t, "c")?;
    c.cmd("RDY 1")?;
    publish(&env, &t, &[b"short"])?;
    let first = c.expect_message()?;
    let t0 = Instant::now();
    patient(&env, &c)?;
    let again = c.expect_message()?;
    let waited = t0.elapsed();
    assert_eq!((again.id, again.attempts), (first.id, 2));
    assert!(
        waited >= Duration::from_millis(900)
            && waited < Duration::from_millis(2500) + env.queue_scan_allowance(),
        "redelivered after {waited:?}"
    );
    c.cmd(&format!("FIN {}", again.id_str()))?;
    Ok(())
}

#[test]
fn disconnected_clients_messages_go_to_others_after_the_timeout() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut a = consumer(&env, &t, "c", 1000, 1)?;
    publish(&env, &t, &[b"orphan"])?;
    let m = a.expect_message()?;
    drop(a);
    let mut b = consumer(&env, &t, "c", 1000, 1)?;
    let t0 = Instant::now();
    patient(&env, &b)?;
    let again = b.expect_message()?;
    assert_eq!(again.id, m.id);
    assert_eq!(again.attempts, 2);
    assert!(t0.elapsed() < Duration::from_millis(2500) + env.queue_scan_allowance());
    Ok(())
}

#[test]
fn req_without_delay_redelivers_at_once_with_attempts_plus_one() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 0, 1)?;
    publish(&env, &t, &[b"r"])?;
    let m = c.expect_message()?;
    c.cmd(&format!("REQ {} 0", m.id_str()))?;
    let t0 = Instant::now();
    let again = c.expect_message()?;
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert_eq!((again.id, again.attempts), (m.id, 2));
    if let Some(nsqd) = env.nsqd() {
        assert_eq!(nsqd.channel(&t, "c").map(|s| s.requeued), Some(1));
    }
    Ok(())
}

#[test]
fn req_with_delay_defers() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 0, 1)?;
    publish(&env, &t, &[b"r"])?;
    let m = c.expect_message()?;
    c.cmd(&format!("REQ {} 300", m.id_str()))?;
    let t0 = Instant::now();
    patient(&env, &c)?;
    let again = c.expect_message()?;
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(280), "{waited:?}");
    assert!(
        waited < Duration::from_millis(1500) + env.queue_scan_allowance(),
        "{waited:?}"
    );
    assert_eq!(again.attempts, 2);
    Ok(())
}

#[test]
fn req_delay_is_clamped_to_max_req_timeout() -> R {
    let env = Env::new(|b| b.max_req_timeout(Duration::from_millis(200)));
    let Some(_) = env.local_only("req_delay_is_clamped", "a custom --max-req-timeout") else {
        return Ok(());
    };
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 0, 1)?;
    publish(&env, &t, &[b"r"])?;
    let m = c.expect_message()?;
    c.cmd(&format!("REQ {} 99999999", m.id_str()))?;
    let t0 = Instant::now();
    c.expect_message()?;
    assert!(t0.elapsed() < Duration::from_millis(1500));
    Ok(())
}

#[test]
fn dpub_defers_delivery() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 0, 1)?;
    let mut p = env.raw();
    let t0 = Instant::now();
    p.cmd_body(&format!("DPUB {t} 300"), b"later")?;
    p.expect_ok()?;
    patient(&env, &c)?;
    let m = c.expect_message()?;
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(280), "{waited:?}");
    assert!(
        waited < Duration::from_millis(1500) + env.queue_scan_allowance(),
        "{waited:?}"
    );
    assert_eq!((m.body.as_slice(), m.attempts), (&b"later"[..], 1));
    if let Some(nsqd) = env.nsqd() {
        assert_eq!(nsqd.channel(&t, "c").map(|s| s.deferred), Some(0));
    }
    Ok(())
}

#[test]
fn touch_extends_the_timeout() -> R {
    let env = Env::new(|b| b);
    let t = env.topic("deliv");
    // Touched half the timeout after the delivery was read: the other half is left for the
    // delivery's and the TOUCH's delays on a busy machine.
    let mut c = consumer(&env, &t, "c", 3000, 1)?;
    publish(&env, &t, &[b"t"])?;
    let m = c.expect_message()?;
    std::thread::sleep(Duration::from_millis(1500));
    c.cmd(&format!("TOUCH {}", m.id_str()))?;
    // 1.5 + 2 s is past the original deadline (by at least 500 ms) but 1 s short of the
    // touched one.
    assert!(
        c.quiet_for(Duration::from_secs(2))?,
        "redelivered despite TOUCH"
    );
    c.cmd(&format!("FIN {}", m.id_str()))?;
    c.cmd(&format!("FIN {}", m.id_str()))?;
    assert!(
        c.expect_error("E_FIN_FAILED")?
            .ends_with("ID not in flight")
    );
    Ok(())
}

#[test]
fn touch_cannot_pass_max_msg_timeout() -> R {
    let env = Env::new(|b| b.max_msg_timeout(Duration::from_millis(1200)));
    let Some(_) = env.local_only(
        "touch_cannot_pass_max_msg_timeout",
        "a custom --max-msg-timeout",
    ) else {
        return Ok(());
    };
    let t = env.topic("deliv");
    let mut c = consumer(&env, &t, "c", 1000, 1)?;
    publish(&env, &t, &[b"t"])?;
    let m = c.expect_message()?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    c.cmd(&format!("TOUCH {}", m.id_str()))?;
    let again = c.expect_message()?;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(1100) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(again.attempts, 2);
    Ok(())
}

#[test]
fn ephemeral_channel_and_topic_vanish_with_last_subscriber() -> R {
    let env = Env::new(|b| b);
    let Some(nsqd) = env.local_only("ephemeral_vanish", "introspection") else {
        return Ok(());
    };
    let tp = format!("{}#ephemeral", env.topic("deliv"));
    let mut first = env.raw();
    first.subscribe(&tp, "c#ephemeral")?;
    let mut second = env.raw();
    second.subscribe(&tp, "c#ephemeral")?;
    let mut durable = env.raw();
    durable.subscribe(&tp, "durable")?;
    assert!(nsqd.channel(&tp, "c#ephemeral").is_some());
    drop(first);
    assert!(wait_until(Duration::from_secs(2), || nsqd
        .channel(&tp, "c#ephemeral")
        .map(|c| c.clients.len())
        == Some(1)));
    drop(second);
    assert!(wait_until(Duration::from_secs(2), || nsqd
        .channel(&tp, "c#ephemeral")
        .is_none()));
    assert!(
        nsqd.topic(&tp).is_some(),
        "topic still has the durable channel"
    );
    drop(durable);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        nsqd.channel(&tp, "durable").is_some(),
        "non-ephemeral channels stay"
    );
    // An ephemeral topic goes when its last (ephemeral) channel goes.
    let t2 = format!("{}#ephemeral", env.topic("deliv"));
    let mut last = env.raw();
    last.subscribe(&t2, "x#ephemeral")?;
    drop(last);
    assert!(wait_until(Duration::from_secs(2), || nsqd
        .topic(&t2)
        .is_none()));
    Ok(())
}

#[test]
fn heartbeats_arrive_at_the_negotiated_interval() -> R {
    let env = Env::new(|b| b);
    let mut c = env.raw();
    c.identify_negotiate(&json!({"heartbeat_interval": 1000}))?;
    let t0 = Instant::now();
    let f = c.read_frame()?;
    assert!(f.is_heartbeat(), "{f:?}");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(1600),
        "{waited:?}"
    );
    c.cmd("NOP")?;
    Ok(())
}

#[test]
fn silent_client_is_dropped_after_two_intervals() -> R {
    let env = Env::new(|b| b);
    let mut c = env.raw();
    c.identify_negotiate(&json!({"heartbeat_interval": 1000}))?;
    let t0 = Instant::now();
    // Read heartbeats without answering until the server closes.
    c.expect_closed()?;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    Ok(())
}

#[test]
fn answering_heartbeats_keeps_the_connection() -> R {
    let env = Env::new(|b| b);
    let mut c = env.raw();
    c.identify_negotiate(&json!({"heartbeat_interval": 1000}))?;
    let end = Instant::now() + Duration::from_millis(2600);
    let mut beats = 0;
    while Instant::now() < end {
        let f = c.read_frame()?;
        assert!(f.is_heartbeat());
        beats += 1;
        c.cmd("NOP")?;
    }
    assert!(beats >= 2);
    assert_eq!(
        c.publish(&env.topic("deliv"), b"still here")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

#[test]
fn default_heartbeat_interval_option_applies_before_identify() -> R {
    let env = Env::new(|b| b.heartbeat_interval(Duration::from_secs(1)));
    let Some(_) = env.local_only(
        "default_heartbeat_interval",
        "a default heartbeat interval other than 30s (not an nsqd flag)",
    ) else {
        return Ok(());
    };
    let mut c = env.raw();
    let t0 = Instant::now();
    assert!(c.read_frame()?.is_heartbeat());
    assert!(t0.elapsed() < Duration::from_millis(1600));
    Ok(())
}
