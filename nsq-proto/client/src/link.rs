//! [`Link`]: one socket of a driver (an nsqd connection or a lookupd exchange) as a small
//! state machine: connecting (bounded by the dial timeout), then writing what is queued and
//! reading until the socket would block, then closing once the last bytes are out. It
//! reports what happened ([`SocketEvent`]) and never blocks.

use super::runtime::{BoxFuture, Socket};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Reads per socket per round (fairness between sockets and commands).
pub(crate) const READS_PER_ROUND: usize = 4;

/// What one [`Link::poll`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Polled {
    /// The link wants another poll before the driver waits: its reads stopped at
    /// [`READS_PER_ROUND`] with more perhaps to come, or something rare happened (connected,
    /// EOF, a failure). A poll that read data or wrote bytes and then found the socket
    /// would block does not: the socket wakes the driver when there is more.
    pub(crate) again: bool,
    /// The link is over: drop it.
    pub(crate) finished: bool,
}

impl Polled {
    const IDLE: Polled = Polled {
        again: false,
        finished: false,
    };
    const FINISHED: Polled = Polled {
        again: true,
        finished: true,
    };

    fn open(again: bool) -> Polled {
        Polled {
            again,
            finished: false,
        }
    }
}

enum State<S> {
    Connecting(BoxFuture<io::Result<S>>),
    Open(S),
    /// Failed to connect, or a lookupd exchange that is over: nothing left to poll, waiting
    /// for the core to close it.
    Done,
}

/// One socket: an nsqd connection or a lookupd exchange.
pub(crate) struct Link<S> {
    state: State<S>,
    span: tracing::Span,
    /// When the dial is abandoned.
    dial_deadline: Instant,
    /// Reading stopped (EOF, error, or closing).
    read_done: bool,
    /// Failure already reported to the core.
    failed: bool,
    /// The core disconnected it: write what is queued, then shut down.
    closing: bool,
    queue: VecDeque<Bytes>,
    /// When the write at the front of the queue started to block.
    write_blocked_since: Option<Instant>,
    /// A write failed (the peer reset the connection, say): what the socket still holds is
    /// read before the failure is reported, until this deadline at most.
    write_failed: Option<(String, Instant)>,
}

impl<S: Socket> Link<S> {
    pub(crate) fn new(
        connect: BoxFuture<io::Result<S>>,
        dial_deadline: Instant,
        span: tracing::Span,
    ) -> Self {
        Link {
            state: State::Connecting(connect),
            span,
            dial_deadline,
            read_done: false,
            failed: false,
            closing: false,
            queue: VecDeque::new(),
            write_blocked_since: None,
            write_failed: None,
        }
    }

    /// Queues `data` to be written, unless the link failed or is over. Returns whether it
    /// was queued.
    pub(crate) fn send(&mut self, data: Bytes) -> bool {
        let queued = !self.failed && self.write_failed.is_none() && !self.is_done();
        if queued {
            self.queue.push_back(data);
        }
        queued
    }

    /// The core disconnected the link: an open one writes what is queued, then shuts down
    /// (returned, to be polled until then); any other is dropped.
    pub(crate) fn close(mut self) -> Option<Self> {
        if !matches!(self.state, State::Open(_)) || self.failed || self.write_failed.is_some() {
            return None;
        }
        self.closing = true;
        self.read_done = true;
        self.write_blocked_since = None;
        Some(self)
    }

    /// Nothing is left to poll: it failed to connect, or its exchange is over, and it waits
    /// for the core to close it.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Marks the link as over (see [`is_done`](Self::is_done)), dropping its socket.
    pub(crate) fn set_done(&mut self) {
        self.state = State::Done;
    }

    /// The bytes queued to be written.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> impl Iterator<Item = &Bytes> {
        self.queue.iter()
    }

    pub(crate) fn deadline(&self, write_timeout: Duration) -> Option<Instant> {
        match self.state {
            State::Connecting(_) => Some(self.dial_deadline),
            State::Open(_) => match &self.write_failed {
                Some((_, until)) => Some(*until),
                None => self.write_blocked_since.map(|t| t + write_timeout),
            },
            State::Done => None,
        }
    }

    /// Polls the link (connect, writes, reads), reporting through `report`. The link's span
    /// is entered for what it reports (the core's handling of it logs inside the span) and
    /// for its own log lines, not for the polls: a poll that finds nothing costs no span
    /// enter.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        now: Instant,
        write_timeout: Duration,
        report: &mut dyn FnMut(SocketEvent),
    ) -> Polled {
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        let polled = self.poll_io(&span, cx, now, write_timeout, &mut |event| {
            span.in_scope(|| report(event));
        });
        self.span = span;
        polled
    }

    fn poll_io(
        &mut self,
        span: &tracing::Span,
        cx: &mut Context<'_>,
        now: Instant,
        write_timeout: Duration,
        report: &mut dyn FnMut(SocketEvent),
    ) -> Polled {
        let mut again = false;
        if let State::Connecting(fut) = &mut self.state {
            match fut.as_mut().poll(cx) {
                Poll::Pending => {
                    if self.dial_deadline <= now {
                        span.in_scope(|| tracing::debug!("connect timed out"));
                        report(SocketEvent::ConnectFailed("connect timed out".to_owned()));
                        return Polled::FINISHED;
                    }
                    return Polled::IDLE;
                }
                Poll::Ready(Err(e)) => {
                    span.in_scope(|| tracing::debug!(error = %e, "connect failed"));
                    report(SocketEvent::ConnectFailed(e.to_string()));
                    return Polled::FINISHED;
                }
                Poll::Ready(Ok(socket)) => {
                    span.in_scope(|| tracing::debug!("connected"));
                    self.state = State::Open(socket);
                    again = true;
                    report(SocketEvent::Connected);
                }
            }
        }
        let State::Open(socket) = &mut self.state else {
            return Polled::open(again);
        };
        // Writes: everything queued, until the socket would block (which wakes the driver
        // when it can take more).
        while let Some(front) = self
            .queue
            .front_mut()
            .filter(|_| self.write_failed.is_none())
        {
            match socket.poll_write(cx, front) {
                Poll::Ready(Ok(0)) => {
                    return self.fail(span, report, "write returned 0 bytes");
                }
                Poll::Ready(Ok(n)) => {
                    front.advance(n.min(front.len()));
                    if front.is_empty() {
                        self.queue.pop_front();
                        self.write_blocked_since = None;
                    }
                }
                Poll::Ready(Err(e)) if !self.closing => {
                    // nsqd refuses an oversize PUB after reading its size, writes its error
                    // and closes with the body unread, and the kernel answers the rest of
                    // the body with a reset: the writes fail, but the error was received
                    // before the reset and can still be read. So the failure waits for
                    // the read side to end (for at most the write timeout).
                    span.in_scope(
                        || tracing::debug!(error = %e, "write failed: reading what is left"),
                    );
                    self.queue.clear();
                    self.write_blocked_since = None;
                    self.write_failed = Some((e.to_string(), now + write_timeout));
                    again = true;
                }
                Poll::Ready(Err(e)) => return self.fail(span, report, &e.to_string()),
                Poll::Pending => {
                    let since = *self.write_blocked_since.get_or_insert(now);
                    if since + write_timeout <= now {
                        let reason = format!("write timed out after {write_timeout:?}");
                        return self.fail(span, report, &reason);
                    }
                    break;
                }
            }
        }
        if self.closing {
            if !self.queue.is_empty() {
                return Polled::open(again);
            }
            return match socket.poll_close(cx) {
                Poll::Pending => Polled::open(again),
                Poll::Ready(_) => {
                    span.in_scope(|| tracing::debug!("connection closed"));
                    Polled::FINISHED
                }
            };
        }
        // Reads, until the socket would block (which wakes the driver when there is more)
        // or for at most READS_PER_ROUND chunks (then the driver goes round again).
        let mut reads = 0;
        while !self.read_done {
            if reads == READS_PER_ROUND {
                again = true;
                break;
            }
            reads += 1;
            match socket.poll_read(cx) {
                Poll::Pending => break,
                Poll::Ready(Ok(data)) if data.is_empty() => {
                    span.in_scope(|| tracing::debug!("EOF"));
                    self.read_done = true;
                    again = true;
                    if !self.failed {
                        self.failed = true;
                        report(match self.write_failed.take() {
                            Some((reason, _)) => SocketEvent::Failed(reason),
                            None => SocketEvent::Eof,
                        });
                    }
                }
                Poll::Ready(Ok(data)) => report(SocketEvent::Data(data)),
                Poll::Ready(Err(e)) => {
                    // The connection's end is logged once, with this reason, where the
                    // client acts on it (a retry, or a misconfiguration): DEBUG here.
                    span.in_scope(|| tracing::debug!(error = %e, "read failed"));
                    self.read_done = true;
                    again = true;
                    if !self.failed {
                        self.failed = true;
                        report(SocketEvent::Failed(e.to_string()));
                    }
                }
            }
        }
        // A failed write whose read side has not ended by its deadline.
        if let Some((reason, _)) = self.write_failed.take_if(|(_, until)| *until <= now) {
            return self.fail(span, report, &reason);
        }
        Polled::open(again)
    }

    /// The socket failed (`reason`): stop reading and writing, and report it once.
    fn fail(
        &mut self,
        span: &tracing::Span,
        report: &mut dyn FnMut(SocketEvent),
        reason: &str,
    ) -> Polled {
        span.in_scope(|| tracing::warn!(%reason, "write failed"));
        self.read_done = true;
        self.queue.clear();
        self.write_blocked_since = None;
        if !self.failed && !self.closing {
            self.failed = true;
            report(SocketEvent::Failed(reason.to_owned()));
        }
        // A closing link is done; an active one waits for the core's Disconnect.
        Polled {
            again: true,
            finished: self.closing,
        }
    }
}

/// What happened on a link during one poll.
pub(crate) enum SocketEvent {
    Connected,
    ConnectFailed(String),
    Data(BytesMut),
    Eof,
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// A socket that answers each poll from a script (`Pending` once it runs out).
    #[derive(Default)]
    struct Scripted {
        writes: VecDeque<io::Result<usize>>,
        reads: VecDeque<Poll<io::Result<BytesMut>>>,
    }

    impl Socket for Scripted {
        fn poll_read(&mut self, _: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
            self.reads.pop_front().unwrap_or(Poll::Pending)
        }
        fn poll_write(&mut self, _: &mut Context<'_>, _: &Bytes) -> Poll<io::Result<usize>> {
            self.writes.pop_front().map_or(Poll::Pending, Poll::Ready)
        }
        fn poll_close(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Debug, PartialEq)]
    enum Seen {
        Connected,
        Data(Vec<u8>),
        Eof,
        Failed(String),
    }

    /// Polls `link` once at `now`, returning what it reported.
    fn poll(link: &mut Link<Scripted>, now: Instant) -> Vec<Seen> {
        let mut seen = Vec::new();
        let mut cx = Context::from_waker(Waker::noop());
        let _ = link.poll(&mut cx, now, WRITE_TIMEOUT, &mut |e| {
            seen.push(match e {
                SocketEvent::Connected => Seen::Connected,
                SocketEvent::Data(d) => Seen::Data(d.to_vec()),
                SocketEvent::Eof => Seen::Eof,
                SocketEvent::Failed(r) | SocketEvent::ConnectFailed(r) => Seen::Failed(r),
            });
        });
        seen
    }

    const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

    fn link(socket: Scripted, now: Instant) -> Link<Scripted> {
        let connect: BoxFuture<io::Result<Scripted>> = Box::pin(async { Ok(socket) });
        Link::new(connect, now + WRITE_TIMEOUT, tracing::Span::none())
    }

    fn reset() -> io::Error {
        io::Error::from(io::ErrorKind::ConnectionReset)
    }

    #[test]
    fn a_failed_write_still_hands_over_what_was_received_before_the_reset() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        // nsqd took the command line and the size, answered, and reset the connection: the
        // rest of the body fails to go, the error is still there to read.
        let socket = Scripted {
            writes: VecDeque::from([Ok(20), Err(reset())]),
            // The reactor has not seen the reset yet on the first poll.
            reads: VecDeque::from([
                Poll::Pending,
                Poll::Ready(Ok(BytesMut::from(&b"E_BAD_MESSAGE"[..]))),
                Poll::Ready(Ok(BytesMut::new())),
            ]),
        };
        let mut l = link(socket, now);
        assert!(l.send(Bytes::from(vec![b'x'; 4_000_000])));
        assert_eq!(poll(&mut l, now), [Seen::Connected]);
        assert!(
            !l.send(Bytes::from_static(b"NOP\n")),
            "nothing more is written"
        );
        assert_eq!(l.deadline(WRITE_TIMEOUT), Some(now + WRITE_TIMEOUT));
        assert_eq!(
            poll(&mut l, now),
            [
                Seen::Data(b"E_BAD_MESSAGE".to_vec()),
                Seen::Failed(reset().to_string())
            ]
        );
        assert!(poll(&mut l, now).is_empty(), "reported once");
    }

    #[test]
    fn a_failed_write_whose_read_side_stays_open_fails_at_the_write_timeout() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let socket = Scripted {
            writes: VecDeque::from([Err(reset())]),
            ..Scripted::default()
        };
        let mut l = link(socket, now);
        assert!(l.send(Bytes::from_static(b"PUB t\n")));
        assert_eq!(poll(&mut l, now), [Seen::Connected]);
        assert!(poll(&mut l, now + WRITE_TIMEOUT / 2).is_empty());
        assert_eq!(
            poll(&mut l, now + WRITE_TIMEOUT),
            [Seen::Failed(reset().to_string())]
        );
        assert_eq!(l.deadline(WRITE_TIMEOUT), None);
    }

    #[test]
    fn a_write_failing_while_closing_ends_the_link() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let socket = Scripted {
            writes: VecDeque::from([Ok(1), Err(reset())]),
            ..Scripted::default()
        };
        let mut l = link(socket, now);
        assert_eq!(poll(&mut l, now), [Seen::Connected]);
        assert!(l.send(Bytes::from_static(b"CLS\n")));
        let mut closing = l.close().expect("an open link writes its last bytes");
        let mut cx = Context::from_waker(Waker::noop());
        let polled = closing.poll(&mut cx, now, WRITE_TIMEOUT, &mut |_| {});
        assert!(polled.finished);
    }
}
