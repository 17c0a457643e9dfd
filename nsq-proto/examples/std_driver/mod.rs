//! A complete blocking driver for nsq-proto's state machines over `std::net`, shared by the
//! `std_producer` and `std_consumer` examples: it follows the contract of `nsq_proto::driver`
//! for one nsqd at a time (no nsqlookupd), in one thread, with nothing from the adapters.
//!
//! It is also the floor of the benchmarks (the examples' bench mode): one thread, one socket,
//! blocking reads and writes, no task, no wake-up and no thread hop, so what a message costs
//! here is what the core and the kernel cost.

use bytes::BytesMut;
use nsq_proto::driver::{Action, ConnId, Driven};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bytes zeroed per read buffer (std's `Read` wants initialised memory); a read never offers
/// less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;

/// One socket, its read buffer, and a time limit for the whole run.
pub(crate) struct StdDriver {
    socket: Option<(ConnId, TcpStream)>,
    /// Zeroed space read into at its front; what is read is split off and handed to the
    /// core (message bodies are slices of it).
    read_buf: BytesMut,
    /// The socket's read timeout as last set (set again only when it changes).
    read_timeout: Option<Duration>,
    deadline: Instant,
}

impl StdDriver {
    pub(crate) fn new(time_limit: Duration) -> StdDriver {
        StdDriver {
            socket: None,
            read_buf: BytesMut::new(),
            read_timeout: None,
            deadline: Instant::now() + time_limit,
        }
    }

    /// Performs every action of `machine` and appends its events to `events`: call it after
    /// every input and every command.
    pub(crate) fn drain<M: Driven>(&mut self, machine: &mut M, events: &mut Vec<M::Event>) {
        while let Some(action) = machine.poll_action() {
            match action {
                Action::Connect { conn, addr } => match TcpStream::connect(&addr) {
                    Ok(socket) => {
                        let _ = socket.set_nodelay(true);
                        self.socket = Some((conn, socket));
                        self.read_timeout = None;
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
                if self.read_timeout != Some(wait) {
                    socket.set_read_timeout(Some(wait))?;
                    self.read_timeout = Some(wait);
                }
                if self.read_buf.len() < MIN_READ {
                    self.read_buf = BytesMut::zeroed(READ_CHUNK);
                }
                match socket.read(&mut self.read_buf[..]) {
                    Ok(0) => machine.handle_eof(Instant::now(), *conn),
                    Ok(n) => {
                        let mut chunk = self.read_buf.split_to(n);
                        machine.handle_input(Instant::now(), *conn, &mut chunk);
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::Interrupted
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

/// `--nsqd-tcp-address` if given, else an in-process test broker (returned so it lives as
/// long as the caller needs it).
pub(crate) fn nsqd_address(
    flags: &super::support::Flags,
) -> io::Result<(String, Option<nsq_test_broker::Nsqd>)> {
    if let Some(addr) = flags.get("nsqd-tcp-address") {
        return Ok((addr.to_owned(), None));
    }
    let broker = nsq_test_broker::Nsqd::start()?;
    Ok((broker.tcp_address().to_string(), Some(broker)))
}
