//! The connection's framing: the magic, command lines (unknown, empty, CRLF, overlong) and NOP.

use std::time::Duration;

use nsq_test_broker::RawClient;

use crate::{R, alive, env, fatal_after};

#[test]
fn bad_magic_is_rejected() -> R {
    let env = env();
    let mut c = RawClient::connect(env.tcp_address())?;
    c.send(b"  V1")?;
    assert_eq!(c.expect_fatal("E_BAD_PROTOCOL")?, "E_BAD_PROTOCOL");
    Ok(())
}

#[test]
fn unknown_and_empty_commands_are_fatal() -> R {
    let env = env();
    fatal_after(&env, &[], b"FOO bar\n", "E_INVALID invalid command FOO")?;
    fatal_after(&env, &[], b"\n", "E_INVALID invalid command ")?;
    fatal_after(&env, &[], b"pub t\n", "E_INVALID invalid command pub")?;
    Ok(())
}

#[test]
fn crlf_line_endings_are_accepted() -> R {
    let env = env();
    let mut c = env.raw();
    c.send(format!("PUB {}\r\n", env.topic("proto")).as_bytes())?;
    c.send(&3u32.to_be_bytes())?;
    c.send(b"abc")?;
    c.expect_ok()?;
    Ok(())
}

#[test]
fn overlong_command_line_closes_without_error() -> R {
    let env = env();
    let mut c = env.raw();
    c.send(&vec![b'A'; 17 * 1024])?;
    c.expect_closed()?;
    Ok(())
}

#[test]
fn nop_has_no_reply() -> R {
    let env = env();
    let mut c = env.raw();
    c.cmd("NOP")?;
    assert!(c.quiet_for(Duration::from_millis(100))?);
    alive(&env, &mut c)
}
