//! SUB: parameter and name errors, the consumers limit, and heartbeats that must be on.

use nsq_test_broker::RawFrame;
use nsq_test_broker::conformance::Env;
use serde_json::json;

use crate::{R, alive, env, fatal_after};

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
