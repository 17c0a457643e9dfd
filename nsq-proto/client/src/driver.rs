//! The one driver: a future per client ([`Consumer`](super::Consumer) /
//! [`Producer`](super::Producer)) that owns the sans-IO machine and every socket, over the
//! runtime it was given ([`Runtime`](super::Runtime)). This file is the loop; [`Net`]
//! carries out the machine's actions on the sockets, each a [`Link`](super::link::Link); a
//! [`Logic`] is what differs between a consumer and a producer.
//!
//! One round of the driver: take every queued command, fire the timer, drain the machine's
//! actions and events, give each connection what was gathered for it in one write, then read
//! every socket until it would block (each read is a chunk handed to the machine: message
//! bodies are slices of it), drain again, and hand the round's messages to the application at
//! once. Writes are non-blocking and never stop reading (a peer that stops reading cannot
//! deadlock us). The one timer is re-armed when the earliest deadline (machine, dial, write)
//! moves earlier.
//!
//! A round that leaves every source with a wake-up registered (the inbox, each socket that
//! would block, the timer) ends the poll: the driver goes round again only for a source that
//! was not, such as a socket whose reads stopped at their per-round limit or bytes gathered
//! after the sockets were polled. A publish is then one round (its command taken and
//! written), and its reply another (read and resolved); before, each took two or three
//! rounds, the last one finding nothing. Nothing here knows which runtime it runs on.

pub(crate) use super::net::Net;
use super::runtime::{Ended, Timer, driver_future};
use super::sync::Inbox;
use nsq_proto::driver::{Action, ConnId, Driven};
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;
/// Rounds per poll before yielding to the executor.
const ROUNDS_PER_POLL: usize = 16;

/// The part of a driver that differs between consumer and producer: its machine, and what
/// it does with the handles' commands and the machine's events.
pub(crate) trait Logic: Send + 'static {
    /// The sans-IO state machine.
    type Machine: Driven;
    /// Commands from the user-facing handles.
    type Input: Send + 'static;

    /// After a poll that did work, look once more before parking (where the runtime says it
    /// pays: [`Runtime::look_again_after_work`](crate::Runtime::look_again_after_work)): what the tasks that work woke send at once
    /// (a producer's callers publish again as soon as their replies arrive) is taken without
    /// waking the driver again. Not for a consumer, whose handlers' answers are better taken
    /// in larger batches.
    const LOOK_AGAIN_AFTER_WORK: bool = false;

    /// The machine.
    fn machine(&mut self) -> &mut Self::Machine;
    /// One command from a handle.
    fn input(&mut self, now: Instant, input: Self::Input);
    /// The commands of one wake-up follow, given to [`input`](Self::input) one by one.
    fn inputs_begin(&mut self) {}
    /// The last of them was given.
    fn inputs_end(&mut self, now: Instant) {
        let _ = now;
    }
    /// One event of the machine.
    fn event(&mut self, now: Instant, event: <Self::Machine as Driven>::Event);
    /// A connection is being opened for `conn`.
    fn connecting(&mut self, conn: ConnId, addr: &str) {
        let _ = (conn, addr);
    }
    /// The machine forgot `conn`.
    fn disconnected(&mut self, conn: ConnId) {
        let _ = conn;
    }
    /// End of a round's draining: hand out what the round produced. Returns whether the
    /// machine was given more input (its output is then drained again).
    fn deliver(&mut self, now: Instant) -> bool {
        let _ = now;
        false
    }
    /// End of a round: publish state (stats) and resolve replies.
    fn after_round(&mut self, now: Instant);
    /// When the logic wants a round of its own even if nothing else happens (published
    /// state left behind, say).
    fn wake_at(&self) -> Option<Instant> {
        None
    }
    /// Whether the driver is done (the machine has closed).
    fn done(&self) -> bool;
    /// The driver has stopped: resolve whoever waits.
    fn stopped(self);
}

/// Runs a driver until its logic is done (then finishes it).
pub(crate) fn run<L: Logic>(
    logic: L,
    inbox: Arc<Inbox<L::Input>>,
    net: Net,
) -> impl Future<Output = ()> + Send + 'static {
    // However the driver ends (at the end of `drive`, by a panic, or dropped by its runtime,
    // polled or not), whoever waits on it hears of it.
    let end = Ending {
        logic: Some(logic),
        inbox,
    };
    drive(end, net)
}

async fn drive<L: Logic>(mut end: Ending<L>, mut net: Net) {
    let inbox = end.inbox.clone();
    let runtime = net.runtime().clone();
    // Made at the first deadline, armed for it.
    let mut timer: Option<Box<dyn Timer>> = None;
    let mut armed: Option<Instant> = None;
    let mut started = false;
    let mut commands = Vec::new();
    let mut crashed = false;
    let look_again = L::LOOK_AGAIN_AFTER_WORK && runtime.look_again_after_work();
    std::future::poll_fn(|cx| {
        let Some(logic) = end.logic.as_mut() else {
            return Poll::Ready(());
        };
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if !started {
                started = true;
                drain(logic, &mut net, runtime.now());
                let _ = net.send_gathered();
            }
            inbox.register(cx.waker());
            // Whether this poll handed the machine's events to the logic (replies resolved,
            // messages handed out): the tasks they woke may send more at once.
            let mut woke = false;
            for _ in 0..ROUNDS_PER_POLL {
                let now = runtime.now();
                // Whether a source was left without a wake-up registered (a socket's reads
                // stopped at their limit, a link just opened or closing, bytes handed to a
                // link after it was polled): then the driver goes round again. Everything
                // else wakes it: the inbox, a socket that would block, the timer.
                let mut again = false;
                // Commands first, so concurrent publishes leave in one write.
                inbox.take_all(&mut commands);
                if !commands.is_empty() {
                    logic.inputs_begin();
                    for input in commands.drain(..) {
                        logic.input(now, input);
                    }
                    logic.inputs_end(now);
                }
                if armed.is_some()
                    && timer
                        .as_mut()
                        .is_some_and(|t| t.poll_expired(cx).is_ready())
                {
                    // Fired: the machine's deadlines are checked next; the timer is armed
                    // again below for whatever deadline is left.
                    armed = None;
                }
                if logic.machine().poll_timeout().is_some_and(|t| t <= now) {
                    logic.machine().handle_timeout(now);
                }
                // What the commands and the timeouts made is written in this round's poll of
                // the sockets, which then reads until each socket would block.
                woke |= drain(logic, &mut net, now);
                net.send_gathered();
                again |= net.poll(cx, now, logic.machine());
                // What the reads made (answers to messages, RDY) is written next round.
                woke |= drain(logic, &mut net, now);
                again |= net.send_gathered() || net.take_changed();
                logic.after_round(now);
                if logic.done() && net.is_quiet() {
                    return Poll::Ready(());
                }
                let deadline = [
                    logic.machine().poll_timeout(),
                    net.next_deadline(),
                    logic.wake_at(),
                ]
                .into_iter()
                .flatten()
                .min();
                // Re-armed only for an earlier deadline: one that moved later (a reply came,
                // a publish's timeout after it) leaves the timer armed for the earlier one,
                // which costs one spare round when it fires instead of a reset per round.
                if deadline.is_some_and(|t| armed.is_none_or(|a| t < a)) {
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
                            again = true;
                        }
                    }
                }
                if !again {
                    if look_again && woke {
                        // Queued behind the tasks this poll woke, look once more: what they
                        // send at once is taken without waking the driver again. A poll
                        // that wakes nobody parks.
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
    logic.stopped();
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
            logic.stopped();
        }
    }
}

/// Drains every action and event of the machine (in the machine's order), then lets the logic
/// hand out what the round produced. Returns whether the logic was given events (and so may
/// have woken tasks).
fn drain<L: Logic>(logic: &mut L, net: &mut Net, now: Instant) -> bool {
    let mut events = false;
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
            events = true;
            logic.event(now, event);
        }
        if !progressed && !logic.deliver(now) {
            return events;
        }
    }
}

/// Starts a driver on `runtime`, inside its client's `span` for its whole life; what it
/// returns tells when the driver has ended.
pub(crate) fn spawn<L: Logic>(
    name: &str,
    logic: L,
    inbox: Arc<Inbox<L::Input>>,
    net: Net,
    span: tracing::Span,
) -> io::Result<Arc<Ended>> {
    let runtime = net.runtime().clone();
    let ended = Arc::new(Ended::default());
    // The client's span is current while the runtime spawns: what the runtime logs for this
    // driver later (a poller of its own failing) can name the client.
    let entered = span.clone().entered();
    let driver = driver_future(span, ended.clone(), run(logic, inbox, net));
    runtime.spawn(name, Box::pin(driver))?;
    drop(entered);
    Ok(ended)
}

#[cfg(test)]
mod tests {
    //! The round rules, on a real producer machine over an in-memory socket: what a round's
    //! commands make is written in that round, a poll ends when every source has a wake-up
    //! registered, reads stopped at their per-round limit go round again, and a producer
    //! looks again only after a poll that resolved something.
    use super::*;
    use crate::link::READS_PER_ROUND;
    use crate::runtime::{BoxFuture, Runtime, Socket, SocketOptions};
    use bytes::{Bytes, BytesMut};
    use nsq_proto::producer::{ProducerConfig, ProducerEvent};
    use nsq_proto::{FRAME_TYPE_RESPONSE, Producer, Topic, encode_frame};
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake, Waker};
    use std::time::Duration;

    const IDENTIFY_REPLY: &[u8] = br#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":0,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#;

    /// The nsqd side of the one socket: what it sends (a chunk per read), what it got, and
    /// the driver's read waker.
    #[derive(Default)]
    struct Wire {
        to_client: VecDeque<BytesMut>,
        from_client: Vec<u8>,
        read_waker: Option<Waker>,
        reads: usize,
    }

    type SharedWire = Arc<Mutex<Wire>>;

    fn lock(w: &SharedWire) -> std::sync::MutexGuard<'_, Wire> {
        w.lock().unwrap()
    }

    /// nsqd sends `chunks` (each one read), waking the driver if it waits to read.
    fn send(w: &SharedWire, chunks: impl IntoIterator<Item = BytesMut>) {
        let waker = {
            let mut w = lock(w);
            w.to_client.extend(chunks);
            w.read_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn response(text: &[u8]) -> BytesMut {
        let mut frame = BytesMut::new();
        encode_frame(&mut frame, FRAME_TYPE_RESPONSE, text);
        frame
    }

    struct MemSocket(SharedWire);

    impl Socket for MemSocket {
        fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
            let mut w = lock(&self.0);
            w.reads += 1;
            if let Some(chunk) = w.to_client.pop_front() {
                return Poll::Ready(Ok(chunk));
            }
            w.read_waker = Some(cx.waker().clone());
            Poll::Pending
        }
        fn poll_write(&mut self, _: &mut Context<'_>, data: &Bytes) -> Poll<io::Result<usize>> {
            lock(&self.0).from_client.extend_from_slice(data);
            Poll::Ready(Ok(data.len()))
        }
        fn poll_close(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A timer that never fires (the test runs in far less than any deadline).
    struct Never;

    impl Timer for Never {
        fn reset(&mut self, _: Instant) {}
        fn poll_expired(&mut self, _: &mut Context<'_>) -> Poll<()> {
            Poll::Pending
        }
    }

    #[derive(Clone)]
    struct MemRuntime(SharedWire);

    impl std::fmt::Debug for MemRuntime {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("MemRuntime")
        }
    }

    impl Runtime for MemRuntime {
        fn connect(&self, _: &str, _: SocketOptions) -> BoxFuture<io::Result<Box<dyn Socket>>> {
            let socket = MemSocket(self.0.clone());
            Box::pin(async move { Ok(Box::new(socket) as Box<dyn Socket>) })
        }
        fn timer(&self, _: Instant) -> Box<dyn Timer> {
            Box::new(Never)
        }
        fn spawn(&self, _: &str, _: BoxFuture<()>) -> io::Result<()> {
            Ok(())
        }
    }

    /// A producer's logic reduced to what the rules need: publish each command's body, count
    /// the rounds and the confirmed publishes.
    struct Counting {
        machine: Producer,
        topic: Topic,
        rounds: Arc<AtomicUsize>,
        published: Arc<AtomicUsize>,
    }

    impl Logic for Counting {
        type Machine = Producer;
        type Input = Vec<u8>;
        const LOOK_AGAIN_AFTER_WORK: bool = true;

        fn machine(&mut self) -> &mut Producer {
            &mut self.machine
        }
        fn input(&mut self, now: Instant, body: Vec<u8>) {
            self.machine
                .publish(now, &self.topic, &body)
                .expect("publish");
        }
        fn event(&mut self, _: Instant, event: ProducerEvent) {
            if matches!(event, ProducerEvent::Published(_)) {
                self.published.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn after_round(&mut self, _: Instant) {
            self.rounds.fetch_add(1, Ordering::SeqCst);
        }
        fn done(&self) -> bool {
            false
        }
        fn stopped(self) {}
    }

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct World {
        wire: SharedWire,
        inbox: Arc<Inbox<Vec<u8>>>,
        rounds: Arc<AtomicUsize>,
        published: Arc<AtomicUsize>,
        wakes: Arc<Wakes>,
        driver: Pin<Box<dyn Future<Output = ()> + Send>>,
    }

    impl World {
        /// A producer of one nsqd whose driver has polled once: connected, IDENTIFY written.
        fn new() -> World {
            #[allow(
                clippy::disallowed_methods,
                reason = "the driver reads the runtime's clock, the system's"
            )]
            let now = Instant::now();
            let mut machine = Producer::new(ProducerConfig::default(), 1).expect("config");
            machine.add_nsqd(now, "127.0.0.1:4150").expect("address");
            let wire = SharedWire::default();
            let (rounds, published) = (Arc::default(), Arc::default());
            let logic = Counting {
                machine,
                topic: Topic::new("t").expect("topic"),
                rounds: Arc::clone(&rounds),
                published: Arc::clone(&published),
            };
            let inbox = Inbox::new();
            let options = SocketOptions::new(Duration::from_secs(5), Duration::from_secs(5));
            let net = Net::new(Arc::new(MemRuntime(wire.clone())), options);
            let mut world = World {
                driver: Box::pin(run(logic, inbox.clone(), net)),
                wire,
                inbox,
                rounds,
                published,
                wakes: Arc::default(),
            };
            world.poll();
            assert!(
                lock(&world.wire).from_client.starts_with(b"  V2"),
                "connected and IDENTIFY written in the first poll"
            );
            send(&world.wire, [response(IDENTIFY_REPLY)]);
            world.poll();
            world
        }

        /// Polls the driver once; returns the rounds it ran.
        fn poll(&mut self) -> usize {
            let before = self.rounds.load(Ordering::SeqCst);
            let waker = Waker::from(Arc::clone(&self.wakes));
            let polled = self.driver.as_mut().poll(&mut Context::from_waker(&waker));
            assert!(
                polled.is_pending(),
                "the driver runs until the producer closes"
            );
            self.rounds.load(Ordering::SeqCst) - before
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }

        fn written(&self) -> usize {
            lock(&self.wire).from_client.len()
        }
    }

    #[test]
    fn a_publish_is_written_in_the_round_that_takes_it_and_its_reply_resolved_in_one() {
        let mut world = World::new();
        let (wakes, written) = (world.wakes(), world.written());
        world.inbox.send(b"hello".to_vec()).expect("open");
        assert_eq!(world.wakes(), wakes + 1, "the command wakes the driver");
        assert_eq!(world.poll(), 1, "one round: taken, gathered, written");
        assert!(
            lock(&world.wire).from_client[written..].starts_with(b"PUB t\n"),
            "the PUB left in that round"
        );
        assert_eq!(world.wakes(), wakes + 1, "a poll that only wrote parks");

        send(&world.wire, [response(b"OK")]);
        assert_eq!(world.wakes(), wakes + 2, "the reply wakes the driver");
        assert_eq!(world.poll(), 1, "one round: read and resolved");
        assert_eq!(world.published.load(Ordering::SeqCst), 1);
        assert_eq!(
            world.wakes(),
            wakes + 3,
            "a poll that resolved a publish looks once more"
        );
        assert_eq!(world.poll(), 1, "the look finds nothing");
        assert_eq!(world.wakes(), wakes + 3, "and parks without looking again");
    }

    #[test]
    fn reads_stopped_at_their_limit_go_round_again_in_the_same_poll() {
        let mut world = World::new();
        world.inbox.send(b"hello".to_vec()).expect("open");
        world.poll();
        // The reply in single bytes: more chunks than one round reads.
        let reply = response(b"OK");
        assert!(reply.len() > READS_PER_ROUND);
        send(&world.wire, reply.iter().map(|&b| BytesMut::from(&[b][..])));
        let reads = lock(&world.wire).reads;
        let rounds = world.poll();
        assert_eq!(
            world.published.load(Ordering::SeqCst),
            1,
            "every byte was read"
        );
        assert_eq!(
            rounds,
            reply.len() / READS_PER_ROUND + 1,
            "a round per {READS_PER_ROUND} reads, the last one ending in a read that would block"
        );
        assert_eq!(
            lock(&world.wire).reads - reads,
            reply.len() + 1,
            "each chunk read once, then one read that would block"
        );
    }

    #[test]
    fn bytes_the_reads_made_are_written_before_the_poll_ends() {
        let mut world = World::new();
        let written = world.written();
        // A heartbeat: the producer answers it with NOP, gathered after the sockets were read.
        send(&world.wire, [response(b"_heartbeat_")]);
        assert_eq!(world.poll(), 2, "a second round writes the NOP");
        assert_eq!(&lock(&world.wire).from_client[written..], b"NOP\n");
    }
}
