//! The conformance harness: scenarios written once, run against the in-process broker or a
//! real nsqd, and (as the adapters land) against every adapter.
//!
//! # Environment override
//!
//! When `NSQD_TCP_ADDRESS` is set (optionally with `NSQD_HTTP_ADDRESS` and
//! `NSQLOOKUPD_HTTP_ADDRESS`), [`Env::new`] targets that real server instead of starting a
//! local broker. Scenarios that need introspection or fault injection call
//! [`Env::local_only`], which prints why they are skipped and returns `None`. Options given to
//! [`Env::new`] only shape the local broker: scenarios that depend on non-default server
//! limits must be `local_only` too (or negotiate what they need through IDENTIFY, which works
//! on both). Scenarios must also pass against a *default* nsqd: name topics with
//! [`Env::topic`] (unique, and deleted from the server afterwards when `NSQD_HTTP_ADDRESS` is
//! set), and widen only the upper bounds of timing checks on timeouts and deferred messages by
//! [`Env::queue_scan_allowance`].
//!
//! ```text
//! nsqd --tcp-address=127.0.0.1:4150 --http-address=127.0.0.1:4151 --broadcast-address=127.0.0.1 \
//!      --data-path=$(mktemp -d) --lookupd-tcp-address=127.0.0.1:4160 &
//! NSQD_TCP_ADDRESS=127.0.0.1:4150 NSQD_HTTP_ADDRESS=127.0.0.1:4151 \
//!   NSQLOOKUPD_HTTP_ADDRESS=127.0.0.1:4161 cargo test -p nsq-test-broker
//! ```
//!
//! # Writing scenarios for adapters
//!
//! An adapter's test implements [`ClientFactory`] (a blocking facade over its `Producer` and
//! `Consumer`; async adapters drive their runtime inside) and calls [`run_all`], which runs
//! every scenario of [`scenarios`] and fails listing the ones that failed. Split the names
//! over several `#[test]`s to run them in parallel. `tests/tests/broker.rs` holds a complete
//! example: a small reference client over [`crate::RawClient`] that passes every scenario.
//!
//! # Raw-bytes scenarios
//!
//! The broker's own rules are proven in `tests/tests/*.rs` with [`crate::RawClient`], which
//! writes command bytes exactly as given. They start from [`Env::new`], so with
//! `NSQD_TCP_ADDRESS` set they check a real nsqd v1.3.0 the same way.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::raw::{RawClient, http_get_json, http_request};
use crate::{Lookupd, Nsqd, NsqdBuilder, wait_until};

/// How much later than its deadline a real nsqd v1.3.0 with `channels` channels may deliver
/// a timed-out or deferred message (REQ with a delay, DPUB).
///
/// nsqd notices those deadlines only in its queue scan loop: every 100 ms it looks at 20
/// channels picked at random from a list it refreshes every 5 s. A channel created less than
/// 5 s ago is not on that list yet, so its first timeout or deferred message can come ~5 s
/// late, and with more than 20 channels each one is only checked now and then. Neither
/// interval is a command-line flag. The allowance is the refresh interval, plus enough ticks
/// that a channel among `channels` and the ~40 this suite has open at once is picked with
/// probability 1 - 10⁻⁶, plus a second: 8.8 s for a fresh server. Scenarios add it to their
/// upper bounds when they run against an external server (see
/// [`Env::queue_scan_allowance`]); they never relax their lower bounds, since nsqd never
/// delivers early.
pub fn external_queue_scan_allowance(channels: usize) -> Duration {
    const SUITE_CHANNELS: usize = 40;
    let ticks = 14 * (channels + SUITE_CHANNELS).div_ceil(20);
    Duration::from_secs(6) + Duration::from_millis(100) * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// The allowance for the external server, from its channel count when this process first
/// asks (through `NSQD_HTTP_ADDRESS`; assumed fresh without it).
fn external_allowance(http: Option<SocketAddr>) -> Duration {
    static ALLOWANCE: OnceLock<Duration> = OnceLock::new();
    *ALLOWANCE.get_or_init(|| {
        let channels = http
            .and_then(|h| http_get_json(h, "/stats?format=json").ok())
            .and_then(|(_, v)| {
                v["topics"].as_array().map(|ts| {
                    ts.iter()
                        .filter_map(|t| t["channels"].as_array().map(Vec::len))
                        .sum::<usize>()
                })
            })
            .unwrap_or(0);
        if channels > 100 {
            note(&format!(
                "the external nsqd has {channels} channels, so its queue scan notices timeouts \
                 and deferred messages late; timing scenarios allow for it and run long \
                 (a fresh --data-path avoids this)"
            ));
        }
        external_queue_scan_allowance(channels)
    })
}

/// Where scenarios run: a local broker (with introspection and faults) or an external server.
#[derive(Debug)]
pub struct Env {
    nsqd: Option<Nsqd>,
    lookupd: Option<Lookupd>,
    tcp: SocketAddr,
    http: Option<SocketAddr>,
    lookupd_http: Option<SocketAddr>,
    /// Topics handed out by [`Env::topic`], deleted from an external server on drop.
    topics: Mutex<Vec<String>>,
}

fn env_addr(var: &str) -> Option<SocketAddr> {
    parse_addr(&std::env::var(var).ok()?)
}

/// `host:port`, tolerating an `http://` prefix and a trailing slash.
fn parse_addr(v: &str) -> Option<SocketAddr> {
    let v = v.trim().trim_start_matches("http://").trim_end_matches('/');
    v.to_socket_addrs().ok()?.next()
}

impl Env {
    /// The external server named by `NSQD_TCP_ADDRESS` if set, else a local broker built by
    /// `configure` (registered with a local lookupd, HTTP API on).
    pub fn new(configure: impl FnOnce(NsqdBuilder) -> NsqdBuilder) -> Self {
        Self::external().unwrap_or_else(|| Self::local(configure))
    }

    /// Always a local broker and lookupd.
    pub fn local(configure: impl FnOnce(NsqdBuilder) -> NsqdBuilder) -> Self {
        let lookupd = Lookupd::start().expect("starting the test lookupd");
        let nsqd = configure(Nsqd::builder().http(true).lookupd(&lookupd))
            .start()
            .expect("starting the test nsqd");
        Self {
            tcp: nsqd.tcp_address(),
            http: nsqd.http_address(),
            lookupd_http: Some(lookupd.http_address()),
            nsqd: Some(nsqd),
            lookupd: Some(lookupd),
            topics: Mutex::default(),
        }
    }

    /// The external server from the environment, if `NSQD_TCP_ADDRESS` is set.
    pub fn external() -> Option<Self> {
        let tcp = env_addr("NSQD_TCP_ADDRESS")?;
        Some(Self {
            nsqd: None,
            lookupd: None,
            tcp,
            http: env_addr("NSQD_HTTP_ADDRESS"),
            lookupd_http: env_addr("NSQLOOKUPD_HTTP_ADDRESS"),
            topics: Mutex::default(),
        })
    }

    /// Whether this targets an external server.
    pub fn is_external(&self) -> bool {
        self.nsqd.is_none()
    }

    /// The local broker, or `None` after printing that `scenario` is skipped because it
    /// needs `what` (introspection, fault injection, non-default options ...).
    pub fn local_only(&self, scenario: &str, what: &str) -> Option<&Nsqd> {
        if self.nsqd.is_none() {
            skip(
                scenario,
                &format!("needs {what}, which a real nsqd (NSQD_TCP_ADDRESS) does not offer"),
            );
        }
        self.nsqd.as_ref()
    }

    /// The lookupd HTTP address, or `None` after printing that `scenario` is skipped.
    pub fn lookupd_or_skip(&self, scenario: &str) -> Option<SocketAddr> {
        if self.lookupd_http.is_none() {
            skip(scenario, "NSQLOOKUPD_HTTP_ADDRESS is not set");
        }
        self.lookupd_http
    }

    /// The nsqd HTTP address, or `None` after printing that `scenario` is skipped.
    pub fn http_or_skip(&self, scenario: &str) -> Option<SocketAddr> {
        if self.http.is_none() {
            skip(scenario, "NSQD_HTTP_ADDRESS is not set");
        }
        self.http
    }

    /// The local broker, if any.
    pub fn nsqd(&self) -> Option<&Nsqd> {
        self.nsqd.as_ref()
    }

    /// The local lookupd, if any.
    pub fn lookupd(&self) -> Option<&Lookupd> {
        self.lookupd.as_ref()
    }

    /// nsqd's TCP address.
    pub fn tcp_address(&self) -> SocketAddr {
        self.tcp
    }

    /// nsqd's HTTP address, if known.
    pub fn http_address(&self) -> Option<SocketAddr> {
        self.http
    }

    /// nsqlookupd's HTTP address, if known.
    pub fn lookupd_http_address(&self) -> Option<SocketAddr> {
        self.lookupd_http
    }

    /// A raw client connected to nsqd with the magic sent.
    pub fn raw(&self) -> RawClient {
        RawClient::connect_v2(self.tcp).expect("connecting to nsqd")
    }

    /// How much later than a deadline a timed-out or deferred message may be redelivered:
    /// zero for the local broker (scenario bounds already cover its queue scan tick),
    /// [`external_queue_scan_allowance`] for an external nsqd.
    pub fn queue_scan_allowance(&self) -> Duration {
        if self.is_external() {
            external_allowance(self.http)
        } else {
            Duration::ZERO
        }
    }

    /// A unique topic name (see [`Env::unique`]) that is deleted from an external server
    /// (through `NSQD_HTTP_ADDRESS`, when set) when this `Env` is dropped.
    ///
    /// Scenarios should name their topics with this: nsqd keeps every topic and channel
    /// (even across restarts, in its data path), and the more channels it has, the later its
    /// queue scan loop notices timeouts and deferred messages.
    pub fn topic(&self, prefix: &str) -> String {
        let name = Self::unique(prefix);
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name.clone());
        name
    }

    /// A topic/channel name unique in this process and run, so scenarios sharing a real
    /// server do not see each other's messages. Prefer [`Env::topic`] for topics.
    pub fn unique(prefix: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!(
            "{prefix}-{}-{t}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let (true, Some(http)) = (self.is_external(), self.http) else {
            return;
        };
        let topics = std::mem::take(
            self.topics
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for t in topics {
            // Best effort: the topic may never have been created, or be gone (ephemeral).
            for name in [t.clone(), format!("{t}%23ephemeral")] {
                let _ = http_request(http, "POST", &format!("/topic/delete?topic={name}"), b"");
            }
        }
    }
}

/// Prints (to the test output) that `scenario` is skipped and why.
pub fn skip(scenario: &str, why: &str) {
    note(&format!("skipping {scenario}: {why}"));
}

#[allow(
    clippy::print_stdout,
    reason = "skips and notes about the external server belong in the test output"
)]
fn note(text: &str) {
    println!("{text}");
}

/// How a client under test is configured for a scenario.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// nsqd TCP addresses to use directly.
    pub nsqd_tcp_addresses: Vec<SocketAddr>,
    /// nsqlookupd HTTP addresses (used instead of `nsqd_tcp_addresses` when non-empty).
    pub lookupd_http_addresses: Vec<SocketAddr>,
    /// Consumer max in flight.
    pub max_in_flight: u32,
    /// Message timeout to negotiate (None = server default).
    pub msg_timeout: Option<Duration>,
    /// Heartbeat interval to negotiate (None = server default).
    pub heartbeat_interval: Option<Duration>,
    /// How often to poll nsqlookupd (short in tests).
    pub lookupd_poll_interval: Duration,
}

impl ClientConfig {
    /// Direct connection to the env's nsqd, max in flight 1.
    pub fn direct(env: &Env) -> Self {
        Self {
            nsqd_tcp_addresses: vec![env.tcp_address()],
            lookupd_http_addresses: Vec::new(),
            max_in_flight: 1,
            msg_timeout: None,
            heartbeat_interval: None,
            lookupd_poll_interval: Duration::from_millis(100),
        }
    }
}

/// A received message as the conformance suite sees it.
pub trait Delivery: Send {
    /// Body.
    fn body(&self) -> &[u8];
    /// Attempts (1 on first delivery).
    fn attempts(&self) -> u16;
    /// FIN.
    fn finish(self: Box<Self>) -> Result<(), String>;
    /// REQ with a delay.
    fn requeue(self: Box<Self>, delay: Duration) -> Result<(), String>;
    /// TOUCH.
    fn touch(&self) -> Result<(), String>;
}

/// A running consumer.
pub trait Subscription: Send {
    /// The next message, or `None` if none arrives within `timeout`.
    fn next(&mut self, timeout: Duration) -> Option<Box<dyn Delivery>>;
    /// Graceful stop (CLS, drain); must finish within `timeout`.
    fn stop(self: Box<Self>, timeout: Duration) -> Result<(), String>;
}

/// What an adapter provides to run the scenarios.
pub trait ClientFactory: Sync {
    /// Adapter name, for messages.
    fn name(&self) -> &str;
    /// Publishes one message and waits for the server's answer.
    fn publish(&self, config: &ClientConfig, topic: &str, body: &[u8]) -> Result<(), String>;
    /// Starts a consumer.
    fn subscribe(
        &self,
        config: &ClientConfig,
        topic: &str,
        channel: &str,
    ) -> Result<Box<dyn Subscription>, String>;
}

/// A scenario run against an adapter.
pub struct Scenario {
    /// Name.
    pub name: &'static str,
    /// The body; `Ok(())` also when it skipped itself (it prints why).
    pub run: fn(&dyn ClientFactory) -> Result<(), String>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

const WAIT: Duration = Duration::from_secs(3);

fn check(cond: bool, what: &str) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what.to_owned()) }
}

fn publish_then_consume(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let topic = env.topic("conf-pc");
    let cfg = ClientConfig {
        max_in_flight: 4,
        ..ClientConfig::direct(&env)
    };
    for i in 0..5 {
        f.publish(&cfg, &topic, format!("m{i}").as_bytes())?;
    }
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    let mut got = Vec::new();
    while got.len() < 5 {
        let m = sub
            .next(WAIT)
            .ok_or_else(|| format!("only {} of 5 messages arrived", got.len()))?;
        check(m.attempts() == 1, "first delivery must have attempts 1")?;
        got.push(String::from_utf8_lossy(m.body()).into_owned());
        m.finish()?;
    }
    got.sort();
    check(
        got == ["m0", "m1", "m2", "m3", "m4"],
        &format!("wrong bodies {got:?}"),
    )?;
    if let Some(nsqd) = env.nsqd() {
        check(
            nsqd.wait_for(WAIT, |s| {
                s.topics
                    .iter()
                    .any(|t| t.name == topic && t.channels.iter().any(|c| c.finished == 5))
            }),
            "the broker did not see 5 FIN",
        )?;
        for c in nsqd.clients() {
            check(c.rdy <= 4, "RDY above max_in_flight")?;
        }
    }
    sub.stop(WAIT)
}

fn requeue_redelivers(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let topic = env.topic("conf-req");
    let cfg = ClientConfig::direct(&env);
    f.publish(&cfg, &topic, b"again")?;
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    let m = sub.next(WAIT).ok_or("no message")?;
    check(m.attempts() == 1, "attempts 1")?;
    m.requeue(Duration::ZERO)?;
    let m = sub.next(WAIT).ok_or("requeued message not redelivered")?;
    check(
        m.attempts() == 2,
        &format!("attempts {} after one REQ", m.attempts()),
    )?;
    m.finish()?;
    sub.stop(WAIT)
}

fn timeout_redelivers(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let topic = env.topic("conf-to");
    let cfg = ClientConfig {
        msg_timeout: Some(Duration::from_secs(1)),
        ..ClientConfig::direct(&env)
    };
    f.publish(&cfg, &topic, b"slow")?;
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    let started = Instant::now();
    let first = sub.next(WAIT).ok_or("no message")?;
    // nsqd times it out after 1 s and delivers it again. A client that keeps RDY open hands
    // the redelivery over while the first copy is still held (go-nsq, the raw client). One
    // that bounds the messages in the application by max_in_flight (nsq-rs) hands nothing
    // more while the first copy is held: nsqd's redelivery stands for the copy the
    // application has. Requeued at once, it comes back. A real nsqd notices the timeout in
    // its queue scan loop, possibly seconds late.
    let second = if let Some(second) = sub.next(Duration::from_secs(2)) {
        check(second.attempts() == 2, "attempts must be 2 on redelivery")?;
        drop(first);
        second
    } else {
        // (Refused if this side had already timed it out: nsqd then sends it again.)
        let _ = first.requeue(Duration::ZERO);
        let again = sub
            .next(WAIT + env.queue_scan_allowance())
            .ok_or("not redelivered after msg_timeout")?;
        check(again.attempts() >= 2, "attempts must count the redelivery")?;
        again
    };
    check(
        started.elapsed() >= Duration::from_millis(900),
        "redelivered before msg_timeout",
    )?;
    second.finish()?;
    sub.stop(WAIT)
}

fn survives_dropped_connections(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let Some(nsqd) = env.local_only("survives_dropped_connections", "fault injection") else {
        return Ok(());
    };
    let topic = env.topic("conf-drop");
    let cfg = ClientConfig::direct(&env);
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    check(
        wait_until(WAIT, || nsqd.clients().iter().any(|c| c.rdy > 0)),
        "consumer never sent RDY",
    )?;
    nsqd.drop_connections();
    nsqd.publish(&topic, b"after-drop");
    let m = sub
        .next(Duration::from_secs(5))
        .ok_or("consumer did not reconnect")?;
    check(m.body() == b"after-drop", "wrong body")?;
    m.finish()?;
    sub.stop(WAIT)
}

fn touch_extends(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let topic = env.topic("conf-touch");
    // The TOUCH must reach nsqd before the first deadline: half the timeout after the
    // message was handed out leaves the other half (1.5 s) for the delivery's and the
    // TOUCH's delays on a busy machine (at 1 s and 600 ms, 400 ms were not always enough).
    let cfg = ClientConfig {
        msg_timeout: Some(Duration::from_secs(3)),
        ..ClientConfig::direct(&env)
    };
    f.publish(&cfg, &topic, b"touch me")?;
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    let m = sub.next(WAIT).ok_or("no message")?;
    std::thread::sleep(Duration::from_millis(1500));
    m.touch()?;
    // 1.5 + 2 s is past the first deadline (by at least 500 ms, several of nsqd's 100 ms
    // queue scans) but 1 s short of the touched one.
    check(
        sub.next(Duration::from_secs(2)).is_none(),
        "redelivered despite TOUCH",
    )?;
    m.finish()?;
    if let Some(nsqd) = env.nsqd() {
        check(
            nsqd.wait_for(WAIT, |s| {
                s.topics.iter().any(|t| {
                    t.name == topic
                        && t.channels
                            .iter()
                            .any(|c| c.finished == 1 && c.timed_out == 0)
                })
            }),
            "the broker did not see the FIN in time",
        )?;
    }
    sub.stop(WAIT)
}

fn stop_sends_cls(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let Some(nsqd) = env.local_only("stop_sends_cls", "the command log") else {
        return Ok(());
    };
    let topic = env.topic("conf-cls");
    let cfg = ClientConfig::direct(&env);
    let sub = f.subscribe(&cfg, &topic, "ch")?;
    check(
        wait_until(WAIT, || nsqd.clients().iter().any(|c| c.rdy > 0)),
        "consumer never sent RDY",
    )?;
    sub.stop(WAIT)?;
    check(
        nsqd.commands().iter().any(|r| r.name() == "CLS"),
        "stop() did not send CLS",
    )
}

fn answers_heartbeats(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let topic = env.topic("conf-hb");
    let cfg = ClientConfig {
        heartbeat_interval: Some(Duration::from_secs(1)),
        ..ClientConfig::direct(&env)
    };
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    // Idle for more than two intervals: the server drops clients that do not answer.
    check(
        sub.next(Duration::from_millis(2500)).is_none(),
        "unexpected message",
    )?;
    f.publish(&ClientConfig::direct(&env), &topic, b"still there")?;
    let m = sub.next(WAIT).ok_or("no message after the idle period")?;
    m.finish()?;
    if let Some(nsqd) = env.nsqd() {
        let subs = nsqd
            .commands()
            .iter()
            .filter(|r| r.name() == "SUB" && r.line.contains(&topic))
            .count();
        check(
            subs == 1,
            &format!("the consumer reconnected ({subs} SUB): heartbeats were not answered"),
        )?;
        check(
            nsqd.commands().iter().any(|r| r.name() == "NOP"),
            "no NOP was sent",
        )?;
    }
    sub.stop(WAIT)
}

fn discovers_via_lookupd(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let Some(lookupd) = env.lookupd_or_skip("discovers_via_lookupd") else {
        return Ok(());
    };
    let topic = env.topic("conf-lookup");
    f.publish(&ClientConfig::direct(&env), &topic, b"found")?;
    let cfg = ClientConfig {
        nsqd_tcp_addresses: Vec::new(),
        lookupd_http_addresses: vec![lookupd],
        ..ClientConfig::direct(&env)
    };
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    let m = sub
        .next(WAIT)
        .ok_or("nothing consumed through lookupd discovery")?;
    check(m.body() == b"found", "wrong body")?;
    m.finish()?;
    if let Some(l) = env.lookupd() {
        check(
            l.requests().iter().any(|r| r.starts_with("/lookup?topic=")),
            "lookupd was never asked",
        )?;
    }
    sub.stop(WAIT)
}

fn publish_errors_surface_and_recover(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let Some(nsqd) = env.local_only("publish_errors_surface_and_recover", "fault injection") else {
        return Ok(());
    };
    let topic = env.topic("conf-pubfail");
    let cfg = ClientConfig::direct(&env);
    f.publish(&cfg, &topic, b"before")?;
    nsqd.fail_publishes(true);
    let failed = f.publish(&cfg, &topic, b"refused");
    nsqd.fail_publishes(false);
    check(failed.is_err(), "a publish answered E_PUB_FAILED must fail")?;
    f.publish(&cfg, &topic, b"after")?;
    check(
        nsqd.topic(&topic).map(|t| t.message_count) == Some(2),
        "exactly the two accepted messages must be in the topic",
    )
}

fn discovers_a_producer_that_appears_later(f: &dyn ClientFactory) -> Result<(), String> {
    let env = Env::new(|b| b);
    let Some(lookupd) = env.lookupd_or_skip("discovers_a_producer_that_appears_later") else {
        return Ok(());
    };
    let topic = env.topic("conf-later");
    let cfg = ClientConfig {
        nsqd_tcp_addresses: Vec::new(),
        lookupd_http_addresses: vec![lookupd],
        ..ClientConfig::direct(&env)
    };
    // Nobody has the topic yet: lookupd answers 404 and the consumer must keep polling.
    let mut sub = f.subscribe(&cfg, &topic, "ch")?;
    check(
        sub.next(Duration::from_millis(300)).is_none(),
        "a message out of nowhere",
    )?;
    f.publish(&ClientConfig::direct(&env), &topic, b"late")?;
    let m = sub
        .next(WAIT)
        .ok_or("the consumer never found the new producer")?;
    check(m.body() == b"late", "wrong body")?;
    m.finish()?;
    sub.stop(WAIT)
}

/// Every adapter-level scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "publish_then_consume",
            run: publish_then_consume,
        },
        Scenario {
            name: "requeue_redelivers",
            run: requeue_redelivers,
        },
        Scenario {
            name: "timeout_redelivers",
            run: timeout_redelivers,
        },
        Scenario {
            name: "survives_dropped_connections",
            run: survives_dropped_connections,
        },
        Scenario {
            name: "touch_extends",
            run: touch_extends,
        },
        Scenario {
            name: "stop_sends_cls",
            run: stop_sends_cls,
        },
        Scenario {
            name: "answers_heartbeats",
            run: answers_heartbeats,
        },
        Scenario {
            name: "discovers_via_lookupd",
            run: discovers_via_lookupd,
        },
        Scenario {
            name: "publish_errors_surface_and_recover",
            run: publish_errors_surface_and_recover,
        },
        Scenario {
            name: "discovers_a_producer_that_appears_later",
            run: discovers_a_producer_that_appears_later,
        },
    ]
}

/// Runs the named scenarios (all when `only` is empty) against `factory`; panics listing
/// the failures.
pub fn run_all(factory: &dyn ClientFactory, only: &[&str]) {
    let mut failures = Vec::new();
    for s in scenarios() {
        if !only.is_empty() && !only.contains(&s.name) {
            continue;
        }
        if let Err(e) = (s.run)(factory) {
            failures.push(format!("{}: {e}", s.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed conformance scenarios:\n{}",
        factory.name(),
        failures.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{external_queue_scan_allowance, parse_addr};

    #[test]
    fn queue_scan_allowance_grows_with_the_servers_channels() {
        assert_eq!(
            external_queue_scan_allowance(0),
            Duration::from_millis(8800)
        );
        assert_eq!(
            external_queue_scan_allowance(20),
            Duration::from_millis(10_200)
        );
        // 300 leftover channels: each is picked with p = 1/17 per 100 ms tick.
        assert_eq!(
            external_queue_scan_allowance(300),
            Duration::from_millis(29_800)
        );
    }

    #[test]
    fn addresses_from_the_environment() {
        assert_eq!(
            parse_addr("127.0.0.1:4150"),
            Some(([127, 0, 0, 1], 4150).into())
        );
        assert_eq!(
            parse_addr(" http://127.0.0.1:4161/ "),
            Some(([127, 0, 0, 1], 4161).into())
        );
        assert_eq!(parse_addr("localhost:4150").map(|a| a.port()), Some(4150));
        assert_eq!(parse_addr(""), None);
        assert_eq!(parse_addr("nonsense"), None);
    }
}
