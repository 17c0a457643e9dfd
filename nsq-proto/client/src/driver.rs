//! The one driver: a future per client ([`Consumer`](super::Consumer) /
//! [`Producer`](super::Producer)) that owns the sans-IO core and every socket, generic over
//! the [`Runtime`].
//!
//! One round of the driver: take every queued command (up to a batch), read every socket
//! until it would block (each read is a chunk handed to the core: message bodies are slices
//! of it), fire the timer, drain the core's actions and events, hand the round's messages to
//! the application at once, and give each connection at most one write. Writes are
//! non-blocking and never stop reading (a peer that stops reading cannot deadlock us). The
//! one timer is re-armed when the earliest deadline (core, dial, write) changes. Nothing
//! here knows which runtime it runs on.

use super::runtime::{BoxFuture, Ended, Runtime, Socket, SocketOptions, Timer, driver_future};
use super::socket_table::{SocketTable, Transport};
use super::sync::Inbox;
use bytes::{Buf, Bytes, BytesMut};
use nsq_proto::driver::{Action, ConnId, Driven, LookupdRequestId};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Reads per socket per round (fairness between sockets and commands).
const READS_PER_ROUND: usize = 4;
/// Rounds per poll before yielding to the executor.
const ROUNDS_PER_POLL: usize = 16;

/// The part of a driver that differs between consumer and producer.
pub(crate) trait Logic: Send + 'static {
    /// The core state machine.
    type Machine: Driven;
    /// Commands from the user-facing handles.
    type Input: Send + 'static;

    /// After a poll that did work, look once more before parking: the tasks that work woke
    /// run first if they share the driver's thread, and what they send at once (a
    /// producer's callers publish again as soon as their replies arrive) is taken without
    /// waking the driver from another thread. Not for a consumer, whose handlers' answers
    /// are better taken in larger batches.
    const LOOK_AGAIN_AFTER_WORK: bool = false;

    /// The core.
    fn machine(&mut self) -> &mut Self::Machine;
    /// One command from a handle.
    fn input(&mut self, now: Instant, input: Self::Input);
    /// One event of the core.
    fn event(&mut self, now: Instant, event: <Self::Machine as Driven>::Event);
    /// A connection is being opened for `conn`.
    fn connecting(&mut self, conn: ConnId, addr: &str) {
        let _ = (conn, addr);
    }
    /// The core forgot `conn`.
    fn disconnected(&mut self, conn: ConnId) {
        let _ = conn;
    }
    /// End of a round's draining: hand out what the round produced. Returns whether the
    /// core was given more input (its output is then drained again).
    fn deliver(&mut self, now: Instant) -> bool {
        let _ = now;
        false
    }
    /// End of a round: publish state (stats) and resolve replies.
    fn after_round(&mut self);
    /// Whether the driver is done (the core has closed).
    fn done(&self) -> bool;
    /// The driver stopped: resolve whoever waits.
    fn finish(self);
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
}

impl<S: Socket> Link<S> {
    fn new(connect: BoxFuture<io::Result<S>>, dial_deadline: Instant, span: tracing::Span) -> Self {
        Link {
            state: State::Connecting(connect),
            span,
            dial_deadline,
            read_done: false,
            failed: false,
            closing: false,
            queue: VecDeque::new(),
            write_blocked_since: None,
        }
    }

    fn deadline(&self, write_timeout: Duration) -> Option<Instant> {
        match self.state {
            State::Connecting(_) => Some(self.dial_deadline),
            State::Open(_) => self.write_blocked_since.map(|t| t + write_timeout),
            State::Done => None,
        }
    }

    /// Polls the link (connect, writes, reads) inside its span. Reports through `report`;
    /// returns whether anything happened and whether the link is finished (to be dropped).
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        now: Instant,
        write_timeout: Duration,
        report: &mut dyn FnMut(SocketEvent),
    ) -> (bool, bool) {
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        let result = span.in_scope(|| self.poll_in_span(cx, now, write_timeout, report));
        self.span = span;
        result
    }

    fn poll_in_span(
        &mut self,
        cx: &mut Context<'_>,
        now: Instant,
        write_timeout: Duration,
        report: &mut dyn FnMut(SocketEvent),
    ) -> (bool, bool) {
        let mut progress = false;
        if let State::Connecting(fut) = &mut self.state {
            match fut.as_mut().poll(cx) {
                Poll::Pending => {
                    if self.dial_deadline <= now {
                        tracing::debug!("connect timed out");
                        report(SocketEvent::ConnectFailed("connect timed out".to_owned()));
                        return (true, true);
                    }
                    return (false, false);
                }
                Poll::Ready(Err(e)) => {
                    tracing::debug!(error = %e, "connect failed");
                    report(SocketEvent::ConnectFailed(e.to_string()));
                    return (true, true);
                }
                Poll::Ready(Ok(socket)) => {
                    tracing::debug!("connected");
                    self.state = State::Open(socket);
                    progress = true;
                    report(SocketEvent::Connected);
                }
            }
        }
        let State::Open(socket) = &mut self.state else {
            return (progress, false);
        };
        // Writes: everything queued, until the socket would block.
        while let Some(front) = self.queue.front_mut() {
            match socket.poll_write(cx, front) {
                Poll::Ready(Ok(0)) => return self.fail(report, "write returned 0 bytes"),
                Poll::Ready(Ok(n)) => {
                    progress = true;
                    front.advance(n.min(front.len()));
                    if front.is_empty() {
                        self.queue.pop_front();
                        self.write_blocked_since = None;
                    }
                }
                Poll::Ready(Err(e)) => return self.fail(report, &e.to_string()),
                Poll::Pending => {
                    let since = *self.write_blocked_since.get_or_insert(now);
                    if since + write_timeout <= now {
                        return self
                            .fail(report, &format!("write timed out after {write_timeout:?}"));
                    }
                    break;
                }
            }
        }
        if self.closing {
            if !self.queue.is_empty() {
                return (progress, false);
            }
            return match socket.poll_close(cx) {
                Poll::Pending => (progress, false),
                Poll::Ready(_) => {
                    tracing::debug!("connection closed");
                    (true, true)
                }
            };
        }
        // Reads.
        for _ in 0..READS_PER_ROUND {
            if self.read_done {
                break;
            }
            match socket.poll_read(cx) {
                Poll::Pending => break,
                Poll::Ready(Ok(data)) if data.is_empty() => {
                    tracing::debug!("EOF");
                    self.read_done = true;
                    progress = true;
                    if !self.failed {
                        self.failed = true;
                        report(SocketEvent::Eof);
                    }
                }
                Poll::Ready(Ok(data)) => {
                    progress = true;
                    report(SocketEvent::Data(data));
                }
                Poll::Ready(Err(e)) => {
                    tracing::warn!(error = %e, "read failed");
                    self.read_done = true;
                    progress = true;
                    if !self.failed {
                        self.failed = true;
                        report(SocketEvent::Failed(e.to_string()));
                    }
                }
            }
        }
        (progress, false)
    }

    fn fail(&mut self, report: &mut dyn FnMut(SocketEvent), reason: &str) -> (bool, bool) {
        tracing::warn!(%reason, "write failed");
        self.read_done = true;
        self.queue.clear();
        self.write_blocked_since = None;
        if !self.failed && !self.closing {
            self.failed = true;
            report(SocketEvent::Failed(reason.to_owned()));
        }
        // A closing link is done; an active one waits for the core's Disconnect.
        (true, self.closing)
    }
}

/// What happened on a link during one poll.
enum SocketEvent {
    Connected,
    ConnectFailed(String),
    Data(BytesMut),
    Eof,
    Failed(String),
}

/// The socket half of performing the core's actions (the shared [`SocketTable`] does the
/// rest): the links are polled by the driver's future, so "sending" queues bytes on a link
/// and "closing" moves it to the links still writing their last bytes.
struct Sockets<R: Runtime> {
    runtime: R,
    /// Disconnected links still writing their last bytes.
    closing: Vec<Link<R::Socket>>,
    /// The time of the current round (dial deadlines are counted from it).
    now: Instant,
    /// Bytes were handed to a link since the last [`Net::flush`].
    sent: bool,
    options: SocketOptions,
    write_timeout: Duration,
}

impl<R: Runtime> Sockets<R> {
    fn link(&self, addr: &str, span: tracing::Span) -> Link<R::Socket> {
        let connect = self.runtime.connect(addr, self.options);
        Link::new(connect, self.now + self.options.dial, span)
    }
}

impl<R: Runtime> Transport for Sockets<R> {
    type Socket = Link<R::Socket>;
    type Lookup = Link<R::Socket>;

    fn connect(&mut self, conn: ConnId, addr: &str) -> Self::Socket {
        self.link(addr, super::connection_span(conn, addr))
    }

    fn send(&mut self, link: &mut Self::Socket, data: Bytes) {
        if !link.failed && !matches!(link.state, State::Done) {
            link.queue.push_back(data);
            self.sent = true;
        }
    }

    fn close(&mut self, mut link: Self::Socket) {
        if matches!(link.state, State::Open(_)) && !link.failed {
            link.closing = true;
            link.read_done = true;
            link.write_blocked_since = None;
            self.closing.push(link);
        }
    }

    fn lookup(&mut self, request: LookupdRequestId, addr: &str, data: Bytes) -> Self::Lookup {
        let mut link = self.link(addr, super::lookupd_span(request, addr));
        link.queue.push_back(data);
        link
    }

    fn close_lookup(&mut self, lookup: Self::Lookup) {
        drop(lookup);
    }
}

/// Every socket of one driver.
pub(crate) struct Net<R: Runtime> {
    sockets: Sockets<R>,
    links: SocketTable<Sockets<R>>,
}

impl<R: Runtime> Net<R> {
    pub(crate) fn new(runtime: R, options: SocketOptions) -> Self {
        let now = runtime.now();
        Net {
            sockets: Sockets {
                runtime,
                closing: Vec::new(),
                now,
                sent: false,
                options,
                write_timeout: options.write,
            },
            links: SocketTable::default(),
        }
    }

    /// Polls every socket, feeding what happened to `m`.
    fn poll<M: Driven>(&mut self, cx: &mut Context<'_>, now: Instant, m: &mut M) -> bool {
        let mut progress = false;
        let write_timeout = self.sockets.write_timeout;
        for (conn, link) in self.links.links_mut() {
            if matches!(link.state, State::Done) {
                continue;
            }
            let (p, finished) = link.poll(cx, now, write_timeout, &mut |event| match event {
                SocketEvent::Connected => m.handle_connected(now, conn),
                SocketEvent::ConnectFailed(reason) => m.handle_connect_failed(now, conn, &reason),
                SocketEvent::Data(mut data) => m.handle_input(now, conn, &mut data),
                SocketEvent::Eof => m.handle_eof(now, conn),
                SocketEvent::Failed(reason) => {
                    tracing::debug!(%conn, %reason, "socket closed");
                    m.handle_eof(now, conn);
                }
            });
            progress |= p;
            if finished {
                link.state = State::Done;
            }
        }
        for (request, link) in self.links.lookups_mut() {
            if matches!(link.state, State::Done) {
                continue;
            }
            let mut over = false;
            let (p, finished) = link.poll(cx, now, write_timeout, &mut |event| match event {
                SocketEvent::Connected => {}
                SocketEvent::ConnectFailed(reason) | SocketEvent::Failed(reason) => {
                    tracing::debug!(%reason, "lookupd request failed");
                    m.handle_lookupd_failed(now, request, &reason);
                    over = true;
                }
                SocketEvent::Data(data) => m.handle_lookupd_input(now, request, &data),
                SocketEvent::Eof => {
                    m.handle_lookupd_eof(now, request);
                    over = true;
                }
            });
            progress |= p;
            if finished || over {
                link.state = State::Done;
            }
        }
        self.sockets.closing.retain_mut(|link| {
            let (p, finished) = link.poll(cx, now, write_timeout, &mut |_| {});
            progress |= p;
            !finished
        });
        progress
    }

    fn act(&mut self, now: Instant, action: Action) {
        self.sockets.now = now;
        self.links.act(&mut self.sockets, action);
    }

    /// Hands each connection's bytes of this round to its socket (one write). Returns
    /// whether any bytes were handed over.
    fn flush(&mut self) -> bool {
        self.sockets.sent = false;
        self.links.flush(&mut self.sockets);
        self.sockets.sent
    }

    /// No disconnected socket is still writing its last bytes.
    fn is_quiet(&self) -> bool {
        self.sockets.closing.is_empty()
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        let write_timeout = self.sockets.write_timeout;
        let links = self
            .links
            .links_mut()
            .filter_map(|(_, l)| l.deadline(write_timeout))
            .min();
        let lookups = self
            .links
            .lookups_mut()
            .filter_map(|(_, l)| l.deadline(write_timeout))
            .min();
        let closing = self.sockets.closing.iter();
        [links, lookups]
            .into_iter()
            .flatten()
            .chain(closing.filter_map(|l| l.deadline(write_timeout)))
            .min()
    }
}

/// Runs a driver until its logic is done (then finishes it).
pub(crate) fn run<L: Logic, R: Runtime>(
    logic: L,
    inbox: Arc<Inbox<L::Input>>,
    net: Net<R>,
) -> impl Future<Output = ()> + Send + 'static {
    // However the driver ends (at the end of `drive`, by a panic, or dropped by its runtime,
    // polled or not), whoever waits on it hears of it.
    let end = Ending {
        logic: Some(logic),
        inbox,
    };
    drive(end, net)
}

async fn drive<L: Logic, R: Runtime>(mut end: Ending<L>, mut net: Net<R>) {
    let inbox = end.inbox.clone();
    let runtime = net.sockets.runtime.clone();
    // Made at the first deadline, armed for it.
    let mut timer: Option<R::Timer> = None;
    let mut armed: Option<Instant> = None;
    let mut started = false;
    let mut commands = Vec::new();
    let mut crashed = false;
    std::future::poll_fn(|cx| {
        let Some(logic) = end.logic.as_mut() else {
            return Poll::Ready(());
        };
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if !started {
                started = true;
                drain(logic, &mut net, runtime.now());
                let _ = net.flush();
            }
            inbox.register(cx.waker());
            for round in 0..ROUNDS_PER_POLL {
                let now = runtime.now();
                let mut progress = false;
                // Commands first, so concurrent publishes leave in one write.
                inbox.take_all(&mut commands);
                progress |= !commands.is_empty();
                for input in commands.drain(..) {
                    logic.input(now, input);
                }
                progress |= net.poll(cx, now, logic.machine());
                if armed.is_some()
                    && timer
                        .as_mut()
                        .is_some_and(|t| t.poll_expired(cx).is_ready())
                {
                    armed = None;
                    progress = true;
                }
                if logic.machine().poll_timeout().is_some_and(|t| t <= now) {
                    logic.machine().handle_timeout(now);
                    progress = true;
                }
                progress |= drain(logic, &mut net, now);
                // Bytes handed over this round are written at the start of the next one.
                progress |= net.flush();
                logic.after_round();
                if logic.done() && net.is_quiet() {
                    return Poll::Ready(());
                }
                let deadline = match (logic.machine().poll_timeout(), net.next_deadline()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if deadline != armed {
                    armed = deadline;
                    if let Some(t) = deadline {
                        let timer = match &mut timer {
                            Some(timer) => {
                                timer.reset(t);
                                timer
                            }
                            None => timer.insert(runtime.timer(t)),
                        };
                        if timer.poll_expired(cx).is_ready() {
                            armed = None;
                            progress = true;
                        }
                    }
                }
                if !progress {
                    if L::LOOK_AGAIN_AFTER_WORK && round > 0 {
                        // Work was done this poll: queued behind the tasks it woke, look once
                        // more. A poll that finds nothing parks.
                        cx.waker().wake_by_ref();
                    }
                    // The waker was registered before the queue was emptied: a command queued
                    // since then wakes us.
                    return Poll::Pending;
                }
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }));
        polled.unwrap_or_else(|panic| {
            tracing::error!(
                panic = %super::panic_message(&*panic),
                "the client's driver panicked: the client is closed"
            );
            crashed = true;
            Poll::Ready(())
        })
    })
    .await;
    if crashed {
        // `end` resolves whoever waits (the client is closed).
        return;
    }
    let Some(mut logic) = end.logic.take() else {
        return;
    };
    // Refuse further commands, and answer the ones already queued (their callers wait).
    let now = runtime.now();
    for input in inbox.close() {
        logic.input(now, input);
    }
    logic.finish();
}

/// A driver that did not finish normally (it panicked, or its runtime dropped it): its inbox
/// refuses further commands and drops the queued ones (their callers see the client closed),
/// and its logic resolves whoever waits.
struct Ending<L: Logic> {
    logic: Option<L>,
    inbox: Arc<Inbox<L::Input>>,
}

impl<L: Logic> Drop for Ending<L> {
    fn drop(&mut self) {
        if let Some(logic) = self.logic.take() {
            drop(self.inbox.close());
            logic.finish();
        }
    }
}

/// Drains every action and event of the core (in the core's order), then lets the logic
/// hand out what the round produced. Returns whether anything happened.
fn drain<L: Logic, R: Runtime>(logic: &mut L, net: &mut Net<R>, now: Instant) -> bool {
    let mut any = false;
    loop {
        let mut progressed = false;
        while let Some(action) = logic.machine().poll_action() {
            progressed = true;
            match &action {
                Action::Connect { conn, addr } => logic.connecting(*conn, addr),
                Action::Disconnect { conn } => logic.disconnected(*conn),
                _ => {}
            }
            net.act(now, action);
        }
        while let Some(event) = logic.machine().poll_event() {
            progressed = true;
            logic.event(now, event);
        }
        if !progressed && !logic.deliver(now) {
            return any;
        }
        any = true;
    }
}

/// Starts a driver on `runtime`, inside its client's `span` for its whole life; what it
/// returns tells when the driver has ended.
pub(crate) fn spawn<L: Logic, R: Runtime>(
    name: &str,
    logic: L,
    inbox: Arc<Inbox<L::Input>>,
    net: Net<R>,
    span: tracing::Span,
) -> io::Result<Arc<Ended>> {
    let runtime = net.sockets.runtime.clone();
    let ended = Arc::new(Ended::default());
    let driver = driver_future(span, ended.clone(), run(logic, inbox, net));
    runtime.spawn(name, Box::pin(driver))?;
    Ok(ended)
}
