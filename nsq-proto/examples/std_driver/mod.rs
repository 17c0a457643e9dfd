//! A complete blocking driver for nsq-proto's state machines over `std::net`, shared by the
//! `std_producer` and `std_consumer` examples: it follows the contract of `nsq_proto::driver`
//! for one nsqd at a time (no nsqlookupd), in one thread, with nothing from the adapters.

use bytes::BytesMut;
use nsq_proto::driver::{Action, ConnId, Driven};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One socket, its read buffer, and a time limit for the whole run.
pub(crate) struct StdDriver {
    socket: Option<(ConnId, TcpStream)>,
    read_buf: BytesMut,
    deadline: Instant,
}

impl StdDriver {
    pub(crate) fn new(time_limit: Duration) -> StdDriver {
        StdDriver {
            socket: None,
            read_buf: BytesMut::new(),
            deadline: Instant::now() + time_limit,
        }
    }

    /// Performs every action of `machine` and returns its events: call it after every input
    /// and every command.
    pub(crate) fn drain<M: Driven>(&mut self, machine: &mut M) -> Vec<M::Event> {
        let mut events = Vec::new();
        while let Some(action) = machine.poll_action() {
            match action {
                Action::Connect { conn, addr } => match TcpStream::connect(&addr) {
                    Ok(socket) => {
                        let _ = socket.set_nodelay(true);
                        self.socket = Some((conn, socket));
                        self.read_buf.clear();
                        machine.handle_connected(Instant::now(), conn);
                    }
                    Err(e) => machine.handle_connect_failed(Instant::now(), conn, &e.to_string()),
                },
                Action::Transmit { conn, data } => {
                    let failed = match &mut self.socket {
                        Some((c, socket)) if *c == conn => socket.write_all(&data).is_err(),
                        _ => false,
                    };
                    if failed {
                        self.socket = None;
                        machine.handle_eof(Instant::now(), conn);
                    }
                }
                Action::Disconnect { conn } => {
                    if matches!(&self.socket, Some((c, _)) if *c == conn) {
                        self.socket = None; // dropping the stream closes it
                    }
                }
                Action::LookupdRequest { request, .. } => {
                    machine.handle_lookupd_failed(Instant::now(), request, "no lookupd here");
                }
                _ => {} // LookupdClose: nothing open
            }
            while let Some(event) = machine.poll_event() {
                events.push(event);
            }
        }
        while let Some(event) = machine.poll_event() {
            events.push(event);
        }
        events
    }

    /// Waits for bytes or for the machine's next timer, whichever comes first, and feeds
    /// what came. Fails once the time limit has passed.
    pub(crate) fn wait<M: Driven>(&mut self, machine: &mut M) -> io::Result<()> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "time limit reached",
            ));
        }
        let timer = machine.poll_timeout();
        let wait = timer
            .map_or(Duration::from_millis(100), |t| {
                t.saturating_duration_since(now)
            })
            .clamp(Duration::from_millis(1), Duration::from_millis(100));
        match &mut self.socket {
            Some((conn, socket)) => {
                socket.set_read_timeout(Some(wait))?;
                let mut chunk = [0u8; 16 * 1024];
                match socket.read(&mut chunk) {
                    Ok(0) => machine.handle_eof(Instant::now(), *conn),
                    Ok(n) => {
                        self.read_buf.extend_from_slice(&chunk[..n]);
                        machine.handle_input(Instant::now(), *conn, &mut self.read_buf);
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => machine.handle_eof(Instant::now(), *conn),
                }
            }
            None => std::thread::sleep(wait),
        }
        if timer.is_some_and(|t| Instant::now() >= t) {
            machine.handle_timeout(Instant::now());
        }
        Ok(())
    }
}

/// `--nsqd-tcp-address=ADDR` from the command line, else an in-process test broker (returned
/// so it lives as long as the caller needs it).
pub(crate) fn nsqd_address(args: &[String]) -> io::Result<(String, Option<nsq_test_broker::Nsqd>)> {
    if let Some(addr) = flag(args, "nsqd-tcp-address") {
        return Ok((addr.to_owned(), None));
    }
    let broker = nsq_test_broker::Nsqd::start()?;
    Ok((broker.tcp_address().to_string(), Some(broker)))
}

/// The value of `--name=value` or `--name value`.
pub(crate) fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let long = format!("--{name}");
    args.iter().enumerate().find_map(|(i, arg)| {
        let rest = arg.strip_prefix(&long)?;
        match rest.strip_prefix('=') {
            Some(value) => Some(value),
            None if rest.is_empty() => args.get(i + 1).map(String::as_str),
            None => None,
        }
    })
}
