//! Raw-bytes scenarios proving the broker's command rules: every error code and text, which
//! errors close the connection, and the state machine of a connection. They run against a
//! real nsqd too when `NSQD_TCP_ADDRESS` is set (see `nsq_test_broker::conformance`).
//!
//! The modules: [`framing`] (the magic, command lines, NOP), [`identify`], [`subscribe`],
//! [`publish`] (PUB, MPUB, DPUB), [`consume`] (RDY, FIN, REQ, TOUCH, CLS) and [`auth`], with
//! what they share below.

use nsq_test_broker::conformance::Env;
use nsq_test_broker::{RawClient, RawFrame};

mod auth;
mod consume;
mod framing;
mod identify;
mod publish;
mod subscribe;

type R = Result<(), Box<dyn std::error::Error>>;

fn env() -> Env {
    Env::new(|b| b)
}

/// Proves the connection is still open and usable: PUB works on any connection state.
fn alive(env: &Env, c: &mut RawClient) -> R {
    assert_eq!(
        c.publish(&env.topic("proto-alive"), b"alive")?,
        RawFrame::Response(b"OK".to_vec())
    );
    Ok(())
}

fn fatal_after(env: &Env, setup: &[&str], bytes: &[u8], expected: &str) -> R {
    let mut c = env.raw();
    for line in setup {
        c.cmd(line)?;
        c.expect_ok()?;
    }
    c.send(bytes)?;
    let code = expected.split(' ').next().unwrap_or_default();
    let e = c.expect_fatal(code)?;
    assert_eq!(e, expected);
    Ok(())
}

fn body(line: &str, body: &[u8]) -> Vec<u8> {
    let mut b = format!("{line}\n").into_bytes();
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(body);
    b
}

fn sized(line: &str, size: u32) -> Vec<u8> {
    let mut b = format!("{line}\n").into_bytes();
    b.extend_from_slice(&size.to_be_bytes());
    b
}
