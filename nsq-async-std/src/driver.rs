//! The driver: one future per [`Consumer`](crate::Consumer) / [`Producer`](crate::Producer)
//! that owns the sans-IO core and every socket, run by `async_io::block_on` on a dedicated
//! thread.
//!
//! One wake-up of the driver is one round: take every queued command (up to a batch), read
//! every socket until it would block (each read is a `BytesMut` chunk handed to the core:
//! message bodies are slices of it), fire the timer, then drain the core's actions and
//! events, and give each connection at most one write. Writes are non-blocking and never stop
//! reading (a peer that stops reading cannot deadlock us). The one timer is re-armed when the
//! earliest deadline (core, dial, write) changes. The sockets' readiness and the timer come
//! from async-io's reactor, so nothing here depends on async-std or smol.

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncWrite};
use nsq_proto::client::{SocketTable, Transport};
use nsq_proto::driver::{Action, ConnId, Driven, LookupdRequestId};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Bytes reserved per read buffer; a read never offers less than [`MIN_READ`] bytes.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;
/// Reads per socket per round (fairness between sockets and commands).
const READS_PER_ROUND: usize = 4;
/// Commands taken per round.
const BATCH: usize = 1024;
/// Rounds per poll before yielding to the reactor.
const ROUNDS_PER_POLL: usize = 16;

/// The part of a driver that differs between consumer and producer.
pub(crate) trait Logic: Send + 'static {
    /// The core state machine.
    type Machine: Driven;
    /// Commands from the user-facing handles.
    type Input: Send + 'static;

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
    /// End of a wake-up: publish state for the handles.
    fn after_wake(&mut self) {}
    /// The driver may stop.
    fn done(&self) -> bool;
    /// The driver stopped: resolve whoever waits.
    fn finish(self);
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<async_net::TcpStream>> + Send>>;

enum State {
    Connecting(Connecting),
    Open(async_net::TcpStream),
    /// Failed to connect, or a lookupd exchange that is over: nothing left to poll, waiting
    /// for the core to close it.
    Done,
}

/// One socket: an nsqd connection or a lookupd exchange.
struct Socket {
    state: State,
    span: tracing::Span,
    /// When the dial is abandoned.
    dial_deadline: Option<Instant>,
    read_buf: BytesMut,
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

impl Socket {
    fn new(addr: String, dial_deadline: Option<Instant>, span: tracing::Span) -> Socket {
        let fut: Connecting = Box::pin(async_net::TcpStream::connect(addr));
        Socket {
            state: State::Connecting(fut),
            span,
            dial_deadline,
            read_buf: BytesMut::new(),
            read_done: false,
            failed: false,
            closing: false,
            queue: VecDeque::new(),
            write_blocked_since: None,
        }
    }

    fn deadline(&self, write_timeout: Duration) -> Option<Instant> {
        match self.state {
            State::Connecting(_) => self.dial_deadline,
            State::Open(_) => self.write_blocked_since.map(|t| t + write_timeout),
            State::Done => None,
        }
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

/// Polls one link: connect, writes, reads. Reports through `report`; returns whether
/// anything happened and whether the link is finished (to be dropped).
fn poll_link(
    link: &mut Socket,
    cx: &mut Context<'_>,
    now: Instant,
    write_timeout: Duration,
    report: &mut dyn FnMut(SocketEvent),
) -> (bool, bool) {
    let span = std::mem::replace(&mut link.span, tracing::Span::none());
    let result = span.in_scope(|| poll_link_in_span(link, cx, now, write_timeout, report));
    link.span = span;
    result
}

fn poll_link_in_span(
    link: &mut Socket,
    cx: &mut Context<'_>,
    now: Instant,
    write_timeout: Duration,
    report: &mut dyn FnMut(SocketEvent),
) -> (bool, bool) {
    let mut progress = false;
    if let State::Connecting(fut) = &mut link.state {
        match fut.as_mut().poll(cx) {
            Poll::Pending => {
                if link.dial_deadline.is_some_and(|d| d <= now) {
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
            Poll::Ready(Ok(stream)) => {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "could not set TCP_NODELAY");
                }
                tracing::debug!("connected");
                link.state = State::Open(stream);
                progress = true;
                report(SocketEvent::Connected);
            }
        }
    }
    let State::Open(stream) = &mut link.state else {
        return (progress, false);
    };
    // Writes: everything queued, until the socket would block.
    while let Some(front) = link.queue.front_mut() {
        match Pin::new(&mut *stream).poll_write(cx, front) {
            Poll::Ready(Ok(0)) => {
                return fail(link, report, "write returned 0 bytes");
            }
            Poll::Ready(Ok(n)) => {
                progress = true;
                front.advance(n);
                if front.is_empty() {
                    link.queue.pop_front();
                    link.write_blocked_since = None;
                }
            }
            Poll::Ready(Err(e)) => return fail(link, report, &e.to_string()),
            Poll::Pending => {
                let since = *link.write_blocked_since.get_or_insert(now);
                if since + write_timeout <= now {
                    return fail(
                        link,
                        report,
                        &format!("write timed out after {write_timeout:?}"),
                    );
                }
                break;
            }
        }
    }
    if link.closing {
        if !link.queue.is_empty() {
            return (progress, false);
        }
        return match Pin::new(&mut *stream).poll_close(cx) {
            Poll::Pending => (progress, false),
            Poll::Ready(_) => {
                tracing::debug!("connection closed");
                (true, true)
            }
        };
    }
    // Reads.
    for _ in 0..READS_PER_ROUND {
        if link.read_done {
            break;
        }
        if link.read_buf.len() < MIN_READ {
            link.read_buf = BytesMut::zeroed(READ_CHUNK);
        }
        match Pin::new(&mut *stream).poll_read(cx, &mut link.read_buf) {
            Poll::Pending => break,
            Poll::Ready(Ok(0)) => {
                tracing::debug!("EOF");
                link.read_done = true;
                progress = true;
                if !link.failed {
                    link.failed = true;
                    report(SocketEvent::Eof);
                }
            }
            Poll::Ready(Ok(n)) => {
                progress = true;
                report(SocketEvent::Data(link.read_buf.split_to(n)));
            }
            Poll::Ready(Err(e)) => {
                tracing::warn!(error = %e, "read failed");
                link.read_done = true;
                progress = true;
                if !link.failed {
                    link.failed = true;
                    report(SocketEvent::Failed(e.to_string()));
                }
            }
        }
    }
    (progress, false)
}

fn fail(link: &mut Socket, report: &mut dyn FnMut(SocketEvent), reason: &str) -> (bool, bool) {
    tracing::warn!(%reason, "write failed");
    link.read_done = true;
    link.queue.clear();
    link.write_blocked_since = None;
    if !link.failed && !link.closing {
        link.failed = true;
        report(SocketEvent::Failed(reason.to_owned()));
    }
    // A closing link is done; an active one waits for the core's Disconnect.
    (true, link.closing)
}

/// The socket half of performing the core's actions (the shared [`SocketTable`] does the rest): the
/// links are polled by the driver's future, so "sending" queues bytes on a link and "closing"
/// moves it to the links still writing their last bytes.
struct Sockets {
    /// Disconnected links still writing their last bytes.
    closing: Vec<Socket>,
    /// The time of the current round (dial deadlines are counted from it).
    now: Instant,
    /// Bytes were handed to a link since the last [`Net::flush`].
    sent: bool,
    dial_timeout: Duration,
    write_timeout: Duration,
}

impl Transport for Sockets {
    type Socket = Socket;
    type Lookup = Socket;

    fn connect(&mut self, conn: ConnId, addr: &str) -> Socket {
        let span = nsq_proto::client::connection_span(conn, addr);
        Socket::new(addr.to_owned(), Some(self.now + self.dial_timeout), span)
    }

    fn send(&mut self, link: &mut Socket, data: Bytes) {
        if !link.failed && !matches!(link.state, State::Done) {
            link.queue.push_back(data);
            self.sent = true;
        }
    }

    fn close(&mut self, mut link: Socket) {
        if matches!(link.state, State::Open(_)) && !link.failed {
            link.closing = true;
            link.read_done = true;
            link.write_blocked_since = None;
            self.closing.push(link);
        }
    }

    fn lookup(&mut self, request: LookupdRequestId, addr: &str, data: Bytes) -> Socket {
        let span = nsq_proto::client::lookupd_span(request, addr);
        let mut link = Socket::new(addr.to_owned(), None, span);
        link.queue.push_back(data);
        link.read_buf = BytesMut::zeroed(16 * 1024);
        link
    }

    fn close_lookup(&mut self, lookup: Socket) {
        drop(lookup);
    }
}

/// Every socket of one driver.
pub(crate) struct Net {
    sockets: Sockets,
    links: SocketTable<Sockets>,
}

impl Net {
    pub(crate) fn new(dial_timeout: Duration, write_timeout: Duration) -> Net {
        Net {
            sockets: Sockets {
                closing: Vec::new(),
                now: Instant::now(),
                sent: false,
                dial_timeout,
                write_timeout,
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
            let (p, finished) = poll_link(link, cx, now, write_timeout, &mut |io| match io {
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
            let (p, finished) = poll_link(link, cx, now, write_timeout, &mut |io| match io {
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
            let (p, finished) = poll_link(link, cx, now, write_timeout, &mut |_| {});
            progress |= p;
            !finished
        });
        progress
    }

    fn act(&mut self, now: Instant, action: Action) {
        self.sockets.now = now;
        self.links.act(&mut self.sockets, action);
    }

    /// Hands each connection's bytes of this wake-up to its socket (one write). Returns
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

/// Commands from the handles to the driver: a lock-free queue and the driver's waker, so a
/// message's answer or a publish costs one queue push and at most one wake-up of the driver.
pub(crate) struct Inbox<T> {
    queue: concurrent_queue::ConcurrentQueue<T>,
    waker: atomic_waker::AtomicWaker,
}

impl<T> Inbox<T> {
    pub(crate) fn new() -> Arc<Inbox<T>> {
        Arc::new(Inbox {
            queue: concurrent_queue::ConcurrentQueue::unbounded(),
            waker: atomic_waker::AtomicWaker::new(),
        })
    }

    /// Queues `item` for the driver; gives it back once the driver has stopped.
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        match self.queue.push(item) {
            Ok(()) => {
                self.waker.wake();
                Ok(())
            }
            Err(e) => Err(e.into_inner()),
        }
    }
}

/// Runs a driver until its logic is done (then finishes it).
pub(crate) async fn run<L: Logic>(mut logic: L, inbox: Arc<Inbox<L::Input>>, mut net: Net) {
    let mut timer = async_io::Timer::never();
    let mut armed: Option<Instant> = None;
    drain(&mut logic, &mut net, Instant::now());
    let _ = net.flush();
    std::future::poll_fn(|cx| {
        inbox.waker.register(cx.waker());
        for _ in 0..ROUNDS_PER_POLL {
            let now = Instant::now();
            let mut progress = false;
            // Commands first, so concurrent publishes leave in one write.
            for _ in 0..BATCH {
                let Ok(input) = inbox.queue.pop() else { break };
                progress = true;
                logic.input(now, input);
            }
            progress |= net.poll(cx, now, logic.machine());
            if armed.is_some() && Pin::new(&mut timer).poll(cx).is_ready() {
                armed = None;
                progress = true;
            }
            if logic.machine().poll_timeout().is_some_and(|t| t <= now) {
                logic.machine().handle_timeout(now);
                progress = true;
            }
            progress |= drain(&mut logic, &mut net, now);
            // Bytes handed over this round are written at the start of the next one.
            progress |= net.flush();
            logic.after_wake();
            if logic.done() && net.is_quiet() {
                return Poll::Ready(());
            }
            let deadline = match (logic.machine().poll_timeout(), net.next_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if deadline != armed {
                armed = deadline;
                match deadline {
                    Some(t) => timer.set_at(t),
                    None => timer = async_io::Timer::never(),
                }
                if armed.is_some() && Pin::new(&mut timer).poll(cx).is_ready() {
                    armed = None;
                    progress = true;
                }
            }
            if !progress {
                // The waker was registered before the queue was emptied: a command queued
                // since then wakes us.
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
    // Refuse further commands, and answer the ones already queued (their callers wait).
    inbox.queue.close();
    let now = Instant::now();
    while let Ok(input) = inbox.queue.pop() {
        logic.input(now, input);
    }
    logic.finish();
}

/// Drains every action and event of the core (in the core's order). Returns whether any.
fn drain<L: Logic>(logic: &mut L, net: &mut Net, now: Instant) -> bool {
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
        if !progressed {
            return any;
        }
        any = true;
    }
}

/// Starts a driver on its own thread, inside its client's `span` for its whole life.
pub(crate) fn spawn<L: Logic>(
    name: &str,
    logic: L,
    inbox: Arc<Inbox<L::Input>>,
    net: Net,
    span: tracing::Span,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || span.in_scope(|| async_io::block_on(run(logic, inbox, net))))
        .map(drop)
}

/// A one-shot reply: one value slot (lock-free) and the waiting task's waker. One allocation,
/// no lock.
struct Slot<T> {
    value: concurrent_queue::ConcurrentQueue<T>,
    waker: atomic_waker::AtomicWaker,
}

/// The sending side of a one-shot reply; dropping it unsent makes the receiver see `Err`.
pub(crate) struct OneshotTx<T>(Arc<Slot<T>>);

/// The receiving side of a one-shot reply.
pub(crate) struct OneshotRx<T>(Arc<Slot<T>>);

/// The sender is gone without a value.
#[derive(Debug)]
pub(crate) struct Canceled;

/// A one-shot reply channel.
pub(crate) fn oneshot<T>() -> (OneshotTx<T>, OneshotRx<T>) {
    let slot = Arc::new(Slot {
        value: concurrent_queue::ConcurrentQueue::bounded(1),
        waker: atomic_waker::AtomicWaker::new(),
    });
    (OneshotTx(slot.clone()), OneshotRx(slot))
}

impl<T> OneshotTx<T> {
    /// Sends the value (the first one wins; the receiver may be gone).
    pub(crate) fn try_send(&self, value: T) -> Result<(), T> {
        let result = self
            .0
            .value
            .push(value)
            .map_err(concurrent_queue::PushError::into_inner);
        self.0.waker.wake();
        result
    }
}

impl<T> Drop for OneshotTx<T> {
    fn drop(&mut self) {
        self.0.value.close();
        self.0.waker.wake();
    }
}

impl<T> OneshotRx<T> {
    /// The value, or `Err` if the sender was dropped without sending.
    pub(crate) async fn recv(&self) -> Result<T, Canceled> {
        std::future::poll_fn(|cx| {
            if let Ok(v) = self.0.value.pop() {
                return Poll::Ready(Ok(v));
            }
            self.0.waker.register(cx.waker());
            if let Ok(v) = self.0.value.pop() {
                return Poll::Ready(Ok(v));
            }
            if self.0.value.is_closed() {
                // Closed after a push: the value is still there.
                return Poll::Ready(self.0.value.pop().map_err(|_| Canceled));
            }
            Poll::Pending
        })
        .await
    }
}

/// A random seed for a state machine's RNG (jitter, random connection choice), from the OS.
pub(crate) fn random_seed() -> u64 {
    nsq_proto::client::seed_or_fallback(
        getrandom::u64(),
        &std::collections::hash_map::RandomState::new(),
        u64::from(std::process::id()),
    )
}

/// The OS hostname, sent in IDENTIFY when the configuration names none (go-nsq sends
/// `os.Hostname()`).
pub(crate) fn os_hostname() -> Option<String> {
    nsq_proto::client::hostname_from_os(&gethostname::gethostname())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    #[test]
    fn oneshot_delivers_once_or_reports_cancel() {
        let (tx, rx) = oneshot();
        tx.try_send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(2), "one value only");
        drop(tx);
        assert_eq!(block_on(rx.recv()).unwrap(), 1);

        let (tx, rx) = oneshot::<u8>();
        drop(tx);
        assert!(block_on(rx.recv()).is_err());

        let (tx, rx) = oneshot();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.try_send("late").unwrap();
        });
        assert_eq!(block_on(rx.recv()).unwrap(), "late");
        t.join().unwrap();
    }

    #[test]
    fn inbox_refuses_after_close() {
        let inbox = Inbox::new();
        inbox.send(1).unwrap();
        inbox.queue.close();
        assert_eq!(inbox.send(2), Err(2));
        assert_eq!(inbox.queue.pop().ok(), Some(1));
    }
}
