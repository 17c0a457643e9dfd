//! # nsq-client: the client layer
//!
//! Everything between the protocol and a runtime, written once for every adapter
//! (`nsq-tokio`, `nsq-async-std`, `nsq-blocking`), on nsq-proto's public API only.
//! Applications depend on an adapter, which re-exports these types and turns on its
//! runtime; this crate's own page is for those who plug in a runtime of their own.
//!
//! Three layers make a client:
//!
//! 1. the protocol: the sans-IO [`Consumer`](nsq_proto::Consumer) and
//!    [`Producer`](nsq_proto::Producer) state machines (the `nsq-proto` crate);
//! 2. this layer: one driver that owns a client's state machine and the reading and
//!    writing of all its sockets in one task, over the client's [`Runtime`] (held as an
//!    `Arc<dyn Runtime>`: clock, connect, timer, spawn, and how its calls wait), plus the API
//!    on top of it ([`Consumer`], [`ConsumerHandle`], [`Producer`], the builders,
//!    [`Message`], [`Error`], [`HandlerError`], [`StopReport`], [`HttpClient`], [`Cluster`],
//!    the [`blocking`] API) and the `tracing` output;
//! 3. the runtimes: [`Tokio`] (cargo feature `tokio`), [`AsyncStd`] (`async-io`: async-std,
//!    smol, any executor) and [`Blocking`] (`blocking`), each turned on by its adapter crate.
//!    A client finds the runtime of the context it is built in; a runtime of your own is
//!    given to a builder with `runtime(..)` (`examples/own_runtime.rs` plugs one in, in
//!    about a hundred lines; [`dial`] has the name resolution and bound connect a runtime
//!    over `std` sockets needs).
//!
//! The one hook through which a runtime shapes how its clients are driven is how a call
//! waits: an async call through the runtime's [`Waiter`], a blocking one through
//! [`Runtime::block_on`]. The async-io runtime's calls drive their client through a lease
//! (callers poll the driver on their own task), and the blocking runtime's through the
//! client's own poller.
//!
//! A handler's result is an [`Outcome`], and each outcome one answer:
//!
//! ```
//! use nsq_client::{AnswerKind, HandlerError, Outcome};
//! use std::time::Duration;
//!
//! let failed: Result<(), HandlerError> =
//!     Err(HandlerError::msg("database down").with_delay(Duration::from_secs(5)));
//! let kind = Outcome::from(failed).answer_kind();
//! assert_eq!(
//!     kind,
//!     AnswerKind::Requeue { delay: Some(Duration::from_secs(5)), backoff: true }
//! );
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod batch;
pub mod blocking;
mod builder;
mod cluster;
mod consumer;
mod delivery;
pub mod dial;
mod driver;
mod error;
mod events;
pub mod guide;
mod handler;
mod http;
mod link;
mod logging;
mod message;
mod metrics;
mod net;
mod os;
mod outbox;
pub mod prelude;
mod producer;
mod publish;
mod runtime;
mod setup;
mod sync;

pub(crate) use answer::Answer;
pub use answer::AnswerKind;
pub use batch::{Batch, BatchEnd, BatchEntry, BatchOptions, BatchStats};
pub use builder::{ConsumerBuilder, ProducerBuilder};
pub use cluster::{ChannelStatsReport, Cluster, ClusterReport, TopicStatsReport};
pub use consumer::{Batches, Consumer, ConsumerHandle};
pub(crate) use delivery::{AnswerSink, Delivery, Origin};
pub use error::{
    Backpressure, Error, HttpFailure, InputError, IntoChannel, IntoTopic, NodeFailure,
};
pub use events::{EVENTS_CAPACITY, Event, Events};
pub use handler::{HandlerError, Outcome, StopReport};
pub use http::{HttpClient, HttpConfig, PendingCall};
pub use message::{GiveUpHook, Message};
pub use metrics::HISTOGRAM_BUCKETS;
pub use producer::{PendingPublish, Producer};
#[cfg(feature = "async-io")]
#[cfg_attr(docsrs, doc(cfg(feature = "async-io")))]
pub use runtime::AsyncStd;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub use runtime::Blocking;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use runtime::Tokio;
pub use runtime::{
    BoxFuture, Runtime, Socket, SocketOptions, Timer, Waiter, blocking_runtime_here, park_on,
    runtime_here,
};

pub(crate) use logging::{
    connection_span, log_consumer_event, log_max_in_flight, log_producer_event, lookupd_span,
};
pub(crate) use outbox::Outbox;
pub(crate) use publish::{PublishRequest, Replies};
pub(crate) use setup::{ConsumerSetup, ProducerSetup};
#[cfg(test)]
use setup::{consumer_config, producer_config};

pub(crate) use os::{os_hostname, random_seed};

/// What a caught panic said (its `&str` or `String` payload), for the log line.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// A connection id the core made (for a message the tests deliver on it).
#[cfg(test)]
pub(crate) fn test_conn() -> nsq_proto::driver::ConnId {
    #[allow(
        clippy::disallowed_methods,
        reason = "origin of virtual time in a test"
    )]
    let now = std::time::Instant::now();
    let mut c = nsq_proto::Consumer::new(
        nsq_proto::consumer::ConsumerConfig::default(),
        nsq_proto::Topic::new("t").unwrap(),
        nsq_proto::Channel::new("c").unwrap(),
        1,
    );
    c.add_nsqd(now, "127.0.0.1:4150").unwrap();
    match c.poll_action() {
        Some(nsq_proto::driver::Action::Connect { conn, .. }) => conn,
        other => panic!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_proto::command::CommandError;
    use nsq_proto::config::Config;

    use nsq_proto::consumer::{Consumer, ConsumerError, ConsumerEvent};

    use bytes::Bytes;
    use nsq_proto::producer::{ProducerError, ProducerEvent, PublishFailure};
    use nsq_proto::{Message, MessageId};
    use nsq_proto::{NameError, Topic};

    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn outbox_gathers_one_write() {
        let mut o = Outbox::default();
        assert_eq!(o.take(), None);
        o.push(Bytes::from_static(b"ab"));
        o.push(Bytes::new());
        assert_eq!(o.take().as_deref(), Some(&b"ab"[..]));
        o.push(Bytes::from_static(b"ab"));
        o.push(Bytes::from_static(b"cd"));
        o.push(Bytes::from_static(b"e"));
        assert_eq!(o.take().as_deref(), Some(&b"abcde"[..]));
        assert_eq!(o.take(), None);
    }

    #[test]
    fn handler_outcomes() {
        assert_eq!(Outcome::from(Ok(())).answer_kind(), AnswerKind::Finish);
        let e = HandlerError::msg("x").without_backoff();
        assert_eq!(e.to_string(), "x");
        assert_eq!(
            Outcome::Failed(e).answer_kind(),
            AnswerKind::Requeue {
                delay: None,
                backoff: false
            }
        );
        let io: HandlerError = std::io::Error::other("disk").into();
        assert!(io.backoff());
        assert_eq!(io.delay(), None);
        assert_eq!(
            Outcome::Panicked("boom".into()).answer_kind(),
            AnswerKind::Requeue {
                delay: None,
                backoff: true
            }
        );
    }

    #[test]
    fn hostname_is_filled_only_when_unset() {
        let c = consumer_config(&Config::default(), Some("box.example.com\n".into()), |_| {
            Err(std::io::Error::other("no files"))
        })
        .unwrap();
        assert_eq!(
            c.machine.connection.hostname.as_deref(),
            Some("box.example.com")
        );
        let named = Config {
            hostname: Some("mine".into()),
            ..Config::default()
        };
        let p = producer_config(&named, Some("os".into()), |_| {
            Err(std::io::Error::other("no files"))
        })
        .unwrap();
        assert_eq!(p.machine.connection.hostname.as_deref(), Some("mine"));
        assert_eq!(p.dial_timeout, Config::default().dial_timeout);
        let none = consumer_config(&Config::default(), None, |_| {
            Err(std::io::Error::other("no files"))
        })
        .unwrap();
        assert_eq!(none.machine.connection.hostname, None);
    }

    #[test]
    fn replies_follow_the_core() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let mut setup = ProducerSetup::default();
        setup.nsqd.push("127.0.0.1:4150".into());
        setup.seed = Some(7);
        let mut machine = setup.start(now, || unreachable!("seeded")).unwrap().machine;
        let mut replies = Replies::default();
        let topic = Topic::new("t").unwrap();
        let publish = PublishRequest::Publish {
            topic: topic.clone(),
            body: Bytes::from_static(b"x"),
        };
        replies.submit(&mut machine, now, publish, 1).unwrap();
        replies
            .submit(&mut machine, now, PublishRequest::Ping, 2)
            .unwrap();
        // An MPUB encoded under limits higher than the core's is refused by the core.
        let roomy = nsq_proto::Limits {
            max_body_size: 16 << 20,
            ..nsq_proto::Limits::default()
        };
        let bodies = vec![vec![b'x'; 1 << 20]; 6];
        let big = PublishRequest::multi_publish("t", &bodies, &roomy).unwrap();
        let (r, e) = replies.submit(&mut machine, now, big, 3).unwrap_err();
        assert_eq!(r, 3);
        assert!(
            matches!(
                e,
                Error::InvalidInput(InputError::Publish(CommandError::BatchTooLarge { .. }))
            ),
            "{e}"
        );
        // An empty one is refused where it is made.
        let empty = PublishRequest::multi_publish(topic, Vec::<Bytes>::new(), &roomy);
        assert!(matches!(
            empty,
            Err(Error::InvalidInput(InputError::Publish(
                CommandError::EmptyBatch
            )))
        ));
        assert_eq!(replies.len(), 2);
        // The only nsqd cannot be reached: both fail fast.
        let conn = loop {
            match machine.poll_action() {
                Some(nsq_proto::driver::Action::Connect { conn, .. }) => break conn,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        machine.handle_connect_failed(now, conn, "refused");
        let mut resolved = Vec::new();
        while let Some(ev) = machine.poll_event() {
            replies.resolve(&ev);
        }
        for (r, result) in replies.take_resolved() {
            assert!(matches!(result, Err(Error::NoServerAvailable(_))));
            resolved.push(r);
        }
        resolved.sort_unstable();
        assert_eq!(resolved, [1, 2]);
        assert!(replies.is_empty());
        assert_eq!(replies.take_all().count(), 0);
    }

    /// A builder's own setters win over `config`'s values, whichever comes first.
    #[test]
    fn builder_setters_win_over_config_in_any_order() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let config = Config {
            dial_timeout: Duration::from_secs(9),
            write_timeout: Duration::from_secs(8),
            max_in_flight: 7,
            ..Config::default()
        };
        let ours = Duration::from_millis(250);
        type B = ConsumerBuilder;
        let before = B::new("t", "c")
            .dial_timeout(ours)
            .write_timeout(ours)
            .max_in_flight(3)
            .config(&config);
        let after = B::new("t", "c")
            .config(&config)
            .dial_timeout(ours)
            .write_timeout(ours)
            .max_in_flight(3);
        for b in [before, after] {
            let started = b.into_setup().start(now, || 1).unwrap();
            assert_eq!(started.dial_timeout, ours);
            assert_eq!(started.write_timeout, ours);
            assert_eq!(started.machine.max_in_flight(), 3);
        }
        // Not set by name: the configuration's.
        let started = B::new("t", "c")
            .config(&config)
            .into_setup()
            .start(now, || 1)
            .unwrap();
        assert_eq!(started.dial_timeout, Duration::from_secs(9));
        assert_eq!(started.machine.max_in_flight(), 7);
        for p in [
            ProducerBuilder::new().write_timeout(ours).config(&config),
            ProducerBuilder::new().config(&config).write_timeout(ours),
        ] {
            let started = p.into_setup().start(now, || 1).unwrap();
            assert_eq!(started.write_timeout, ours);
        }
    }

    #[test]
    fn consumer_setup_validates() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let bad = ConsumerSetup::new("bad topic!", "ch");
        assert!(matches!(
            bad.start(now, || 1),
            Err(Error::InvalidTopic { name, reason: NameError::InvalidChar { index: 3, ch: ' ' } })
                if name == "bad topic!"
        ));
        let bad = ConsumerSetup::new("t", "");
        assert!(matches!(
            bad.start(now, || 1),
            Err(Error::InvalidChannel { name, reason: NameError::Empty }) if name.is_empty()
        ));
        let mut setup = ConsumerSetup::new("t", "ch");
        setup.nsqd.push("nope".into());
        assert!(matches!(
            setup.start(now, || 1),
            Err(Error::InvalidInput(InputError::NsqdAddress(a))) if a == "nope"
        ));
        let mut setup = ConsumerSetup::new("t", "ch");
        setup.max_in_flight = Some(9);
        setup.nsqd.push("127.0.0.1:4150".into());
        let started = setup.start(now, || 1).unwrap();
        assert_eq!(started.machine.max_in_flight(), 9);
    }

    #[derive(Default)]
    struct Collect(std::sync::Mutex<Vec<(Answer, Bytes)>>);

    impl AnswerSink for Arc<Collect> {
        fn send_answer(&self, answer: Answer, body: Bytes) {
            self.0.lock().unwrap().push((answer, body));
        }
    }

    #[test]
    fn deliveries_answer_themselves_once() {
        let sink = Arc::new(Collect::default());
        let origin = Origin::new(
            "127.0.0.1:4150",
            sink.clone(),
            crate::metrics::ConsumerMetrics::new("t", "c", true).answers(),
        );
        let conn = test_conn();
        let message = |attempts| Message {
            timestamp: 1,
            attempts,
            id: MessageId::from(*b"0123456789abcdef"),
            body: Bytes::from_static(b"body"),
        };
        let kinds =
            || -> Vec<AnswerKind> { sink.0.lock().unwrap().iter().map(|a| a.0.kind).collect() };
        // The body travels back to the driver with a message's last answer only.
        let bodies =
            || -> Vec<Bytes> { sink.0.lock().unwrap().iter().map(|a| a.1.clone()).collect() };

        let d = Delivery::new(conn, message(1), origin.clone());
        assert_eq!(d.nsqd_address(), "127.0.0.1:4150");
        assert_eq!(&d.body()[..], b"body");
        d.touch();
        d.finish();
        assert_eq!(kinds(), [AnswerKind::Touch, AnswerKind::Finish]);
        assert_eq!(bodies(), [Bytes::new(), Bytes::from_static(b"body")]);

        drop(Delivery::new(conn, message(2), origin.clone()));
        assert_eq!(kinds()[2], AnswerKind::DROPPED);
        assert_eq!(sink.0.lock().unwrap()[2].0.attempts, 2);
        assert_eq!(bodies()[2], Bytes::from_static(b"body"));

        let mut d = Delivery::new(conn, message(3), origin.clone());
        let pending = d.take_over();
        drop(d);
        assert_eq!(kinds().len(), 3, "taken over: no answer on drop");
        pending.answer(&Outcome::Failed(
            HandlerError::msg("no").with_delay(Duration::ZERO),
        ));
        assert_eq!(
            kinds()[3],
            AnswerKind::Requeue {
                delay: Some(Duration::ZERO),
                backoff: true
            }
        );

        let d = Delivery::new(conn, message(4), origin.clone());
        let a = d.into_answer(AnswerKind::UNTAKEN);
        assert_eq!(a.attempts, 4);
        assert_eq!(kinds().len(), 4, "into_answer sends nothing");

        Delivery::new(conn, message(5), origin).release();
        assert_eq!(kinds()[4], AnswerKind::UNTAKEN);
        assert_eq!(bodies()[4], Bytes::from_static(b"body"));
    }

    /// A failed connect says when it is retried (the log line needs it); while closing, none.
    #[test]
    fn connection_closed_says_when_it_retries() {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of virtual time in a test"
        )]
        let now = Instant::now();
        let closed_retry = |machine: &mut Consumer| {
            let mut retry = None;
            while let Some(ev) = machine.poll_event() {
                if let ConsumerEvent::ConnectionClosed { retry_in, .. } = ev {
                    retry = Some(retry_in);
                }
            }
            retry.expect("no ConnectionClosed")
        };
        let connect = |machine: &mut Consumer| loop {
            match machine.poll_action() {
                Some(nsq_proto::driver::Action::Connect { conn, .. }) => break conn,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        let mut setup = ConsumerSetup::new("t", "c");
        setup.nsqd.push("127.0.0.1:4150".into());
        let mut machine = setup.start(now, || 3).unwrap().machine;
        let conn = connect(&mut machine);
        machine.handle_connect_failed(now, conn, "refused");
        let retry = closed_retry(&mut machine).expect("a direct nsqd is retried");
        assert!(retry > Duration::ZERO);

        let later = now + retry;
        machine.handle_timeout(later);
        let conn = connect(&mut machine);
        machine.close(later);
        machine.handle_connect_failed(later, conn, "refused");
        assert_eq!(closed_retry(&mut machine), None, "closing: no retry");

        let mut setup = ProducerSetup::default();
        setup.nsqd.push("127.0.0.1:4150".into());
        setup.seed = Some(3);
        let mut producer = setup.start(now, || unreachable!("seeded")).unwrap().machine;
        let conn = loop {
            match producer.poll_action() {
                Some(nsq_proto::driver::Action::Connect { conn, .. }) => break conn,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        producer.handle_connect_failed(now, conn, "refused");
        let mut retries = Vec::new();
        while let Some(ev) = producer.poll_event() {
            if let ProducerEvent::ConnectionClosed { retry_in, .. } = ev {
                retries.push(retry_in);
            }
        }
        assert!(
            matches!(retries[..], [Some(d)] if d > Duration::ZERO),
            "{retries:?}"
        );
    }

    #[test]
    fn errors_map() {
        assert!(matches!(Error::from(ProducerError::Closed), Error::Closed));
        assert!(matches!(
            Error::from(PublishFailure::NoServerAvailable { last_error: None }),
            Error::NoServerAvailable(None)
        ));
        assert!(matches!(Error::from(ConsumerError::Closing), Error::Closed));
        assert!("bad topic!".into_topic().is_err());
        assert!("ok".into_channel().is_ok());
    }
}
