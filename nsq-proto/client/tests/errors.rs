//! Errors a user can act on: every error says each thing once (`Display` never repeats
//! itself, and a cause shown in `Display` is not also returned by `source()`, so `{:#}` of
//! anyhow/eyre prints it once), a program can match on what went wrong, and a handler can use
//! `?` on any error and keep its chain.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use nsq_client::{
    AnswerKind, Backpressure, Error, HandlerError, InputError, IntoChannel, IntoTopic, Outcome,
};
use nsq_proto::config::OptionError;
use nsq_proto::consumer::{ConsumerError, LookupdAddress, LookupdError, LookupdResponseParser};
use nsq_proto::producer::{ProducerError, PublishFailure};
use nsq_proto::{
    CloseReason, CommandError, ConfigError, ConnectionError, ErrorCode, NameError, ServerError,
};

/// The chain of messages, outermost first.
fn chain(e: &(dyn StdError + 'static)) -> Vec<String> {
    std::iter::successors(Some(e), |e| (*e).source())
        .map(ToString::to_string)
        .collect()
}

/// Checks the rule for one error and returns its `Display` and anyhow `{:#}` forms.
fn check<E: StdError + Send + Sync + 'static>(e: E) -> (String, String) {
    let links = chain(&e);
    for pair in links.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "{:?} shows its source {:?} and returns it too",
            pair[0],
            pair[1]
        );
    }
    for text in &links {
        assert_no_repeat(text);
    }
    let display = e.to_string();
    let alternate = format!("{:#}", anyhow::Error::new(e));
    assert_no_repeat(&alternate);
    (display, alternate)
}

/// No phrase of `text` is said twice ("nsqd error: nsqd error: ...", "invalid input: invalid
/// publish: ...").
fn assert_no_repeat(text: &str) {
    let parts: Vec<&str> = text.split(": ").collect();
    for pair in parts.windows(2) {
        assert_ne!(pair[0], pair[1], "{text:?} repeats itself");
    }
    for phrase in [
        "nsqd error",
        "invalid input",
        "invalid publish",
        "invalid name",
        "invalid configuration",
    ] {
        assert!(
            text.matches(phrase).count() <= 1,
            "{text:?} says {phrase:?} twice"
        );
    }
    assert!(
        !text.contains("invalid input: invalid"),
        "{text:?} says invalid twice"
    );
}

fn server(code: ErrorCode, text: &str) -> ServerError {
    ServerError::new(code, text)
}

#[test]
fn server_errors_say_nsqd_once_and_carry_their_code() {
    let e = Error::Server(server(
        ErrorCode::BadMessage,
        "PUB invalid message body size 0",
    ));
    assert_eq!(e.server_code(), Some(ErrorCode::BadMessage));
    assert!(matches!(&e, Error::Server(s) if s.code() == ErrorCode::BadMessage));
    let (display, alternate) = check(e);
    assert_eq!(
        display,
        "nsqd error E_BAD_MESSAGE: PUB invalid message body size 0"
    );
    assert_eq!(alternate, display);

    // Through the core's publish failure: still one "nsqd error".
    let failure = PublishFailure::Server(server(ErrorCode::PubFailed, "PUB failed"));
    let (display, _) = check(failure.clone());
    assert_eq!(
        display,
        "publish rejected: nsqd error E_PUB_FAILED: PUB failed"
    );
    let e = Error::from(failure);
    assert_eq!(e.server_code(), Some(ErrorCode::PubFailed));
    assert_eq!(check(e).0, "nsqd error E_PUB_FAILED: PUB failed");

    // Without a description, and with a code this client does not know.
    assert_eq!(
        server(ErrorCode::Invalid, "").to_string(),
        "nsqd error E_INVALID"
    );
    let unknown = ServerError::from_frame_data(Bytes::from_static(b"E_NEW_THING it broke"));
    assert_eq!(check(unknown).0, "nsqd error E_NEW_THING: it broke");
    assert_eq!(Error::Timeout.server_code(), None);
}

#[test]
fn invalid_names_say_which_name_and_what_value() {
    let e = "bad topic!".into_topic().unwrap_err();
    match &e {
        Error::InvalidTopic {
            name,
            reason: NameError::InvalidChar { index: 3, ch: ' ' },
        } => assert_eq!(name, "bad topic!"),
        other => panic!("{other:?}"),
    }
    let (display, alternate) = check(e);
    assert_eq!(
        display,
        "invalid topic name \"bad topic!\": invalid character ' ' at byte 3: \
         names use only [.a-zA-Z0-9_-] with an optional #ephemeral suffix"
    );
    assert_eq!(alternate, display);

    let e = String::new().into_channel().unwrap_err();
    assert!(matches!(
        &e,
        Error::InvalidChannel { name, reason: NameError::Empty } if name.is_empty()
    ));
    assert_eq!(check(e).0, "invalid channel name \"\": name is empty");

    let long = "x".repeat(65);
    let e = (&long).into_channel().unwrap_err();
    assert!(matches!(
        &e,
        Error::InvalidChannel { name, reason: NameError::TooLong { len: 65 } } if *name == long
    ));
    assert!(
        check(e)
            .0
            .ends_with("name is 65 bytes long, the limit is 64")
    );
}

#[test]
fn input_errors_are_an_enum_of_causes() {
    let e = Error::from(ProducerError::Invalid(CommandError::EmptyBody));
    assert!(matches!(
        e,
        Error::InvalidInput(InputError::Publish(CommandError::EmptyBody))
    ));
    let (display, alternate) = check(e);
    assert_eq!(display, "invalid publish: message body is empty");
    assert_eq!(alternate, display);

    let e = Error::from(ProducerError::Invalid(CommandError::DelayTooLong {
        delay: Duration::from_secs(7200),
        max: Duration::from_secs(3600),
    }));
    assert!(matches!(
        e,
        Error::InvalidInput(InputError::Publish(CommandError::DelayTooLong { .. }))
    ));
    assert_eq!(
        check(e).0,
        "invalid publish: delay 7200s exceeds max_req_timeout 3600s"
    );

    let e = Error::from(ConsumerError::InvalidAddress("nope".into()));
    assert!(matches!(&e, Error::InvalidInput(InputError::NsqdAddress(a)) if a == "nope"));
    assert_eq!(
        check(e).0,
        "invalid nsqd address \"nope\": expected host:port"
    );
    let e = Error::from(ProducerError::InvalidAddress("nope".into()));
    assert!(matches!(
        &e,
        Error::InvalidInput(InputError::NsqdAddress(_))
    ));

    let bad = LookupdAddress::parse("https://lookupd:4161").unwrap_err();
    let e = Error::from(ConsumerError::InvalidLookupd(bad.clone()));
    assert!(matches!(&e, Error::InvalidInput(InputError::LookupdAddress(b)) if *b == bad));
    assert!(
        check(e)
            .0
            .starts_with("unsupported lookupd URL scheme \"https\"")
    );

    let e = Error::from(ProducerError::Config(ConfigError::InvalidServerName(
        "bad name".into(),
    )));
    assert!(matches!(e, Error::InvalidInput(InputError::Connection(_))));
    assert_eq!(check(e).0, "invalid TLS server name \"bad name\"");

    let e = Error::from(PublishFailure::Refused(ConnectionError::Command(
        CommandError::EmptyBatch,
    )));
    assert!(matches!(e, Error::InvalidInput(InputError::Refused(_))));
    assert_eq!(
        check(e).0,
        "publish refused: MPUB needs at least one message"
    );
}

#[test]
fn transport_and_state_errors() {
    let e = Error::from(PublishFailure::ConnectionLost(CloseReason::Eof));
    assert!(matches!(e, Error::ConnectionLost(CloseReason::Eof)));
    assert!(e.maybe_published());
    let (display, alternate) = check(e);
    assert_eq!(
        display,
        "connection lost before nsqd answered: the server closed the connection"
    );
    assert_eq!(alternate, display);

    let lost = CloseReason::Server(server(ErrorCode::BadBody, "bad body"));
    let (display, _) = check(PublishFailure::ConnectionLost(lost.clone()));
    assert_eq!(
        display,
        "connection lost before nsqd confirmed the publish: nsqd error E_BAD_BODY: bad body"
    );
    assert_eq!(
        check(Error::ConnectionLost(lost)).0,
        "connection lost before nsqd answered: nsqd error E_BAD_BODY: bad body"
    );

    let e = Error::from(PublishFailure::TimedOut {
        waited: Duration::from_secs(5),
    });
    assert!(matches!(e, Error::Timeout) && e.maybe_published());
    assert_eq!(check(e).0, "no answer from nsqd in time");

    let e = Error::from(PublishFailure::NoServerAvailable {
        last_error: Some("connection refused".into()),
    });
    assert!(matches!(&e, Error::NoServerAvailable(Some(_))) && !e.maybe_published());
    assert_eq!(
        check(e).0,
        "no nsqd available (last error: connection refused)"
    );

    let e = Error::from(ProducerError::TooManyOutstanding { limit: 10 });
    assert!(matches!(
        e,
        Error::Backpressure(Backpressure::TooManyOutstanding { limit: 10 })
    ));
    assert_eq!(check(e).0, "10 publishes are already outstanding");
    let e = Error::from(ProducerError::PendingQueueFull { limit: 3 });
    assert!(matches!(
        e,
        Error::Backpressure(Backpressure::PendingQueueFull { limit: 3 })
    ));
    assert_eq!(check(e).0, "3 publishes already wait for a connection");

    assert!(matches!(Error::from(ProducerError::Closed), Error::Closed));
    assert!(matches!(Error::from(ConsumerError::Closing), Error::Closed));
    assert_eq!(
        check(Error::Closed).0,
        "the client is closed (it was stopped or closed, or its driver ended: see the log)"
    );
    assert_eq!(
        check(Error::NoRuntime("no tokio runtime here")).0,
        "no tokio runtime here"
    );
    assert_eq!(
        check(Error::Spawn("out of threads".into())).0,
        "could not start the driver: out of threads"
    );
}

#[test]
fn consumer_and_config_errors() {
    let e = Error::from(ConsumerError::Connection(ConnectionError::RdyTooHigh {
        requested: 5000,
        max: 2500,
    }));
    assert!(matches!(
        e,
        Error::Consumer(ConsumerError::Connection(
            ConnectionError::RdyTooHigh { .. }
        ))
    ));
    assert_eq!(
        check(e).0,
        "RDY 5000 exceeds the server's max_rdy_count 2500"
    );
    let closed = ConnectionError::Closed(CloseReason::Timeout {
        idle: Duration::from_secs(60),
    });
    assert_eq!(
        check(ConsumerError::Connection(closed)).0,
        "connection closed: no data from the server for 60s: connection presumed dead"
    );

    let mut config = nsq_proto::Config::default();
    let option = config.set_str("max_in_flight", "lots").unwrap_err();
    assert_eq!(option.option(), "max_in_flight");
    let e = Error::from(option);
    assert!(matches!(&e, Error::Config(o) if o.option() == "max_in_flight"));
    let (display, _) = check(e);
    assert_eq!(
        display,
        "invalid max_in_flight \"lots\": expected an integer"
    );
    let e = Error::Config(OptionError::Unknown {
        option: "max_in_flite".into(),
    });
    assert_eq!(check(e).0, "unknown option \"max_in_flite\"");
}

#[test]
fn lookupd_errors() {
    let parse = |bytes: &[u8]| {
        let mut p = LookupdResponseParser::new(1024);
        match p.feed(bytes) {
            Err(e) => e,
            Ok(_) => p.eof().unwrap_err(),
        }
    };
    // nsqd's TCP port given as a lookupd address: it answers the GET with a protocol error.
    let e = parse(b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL");
    assert!(matches!(e, LookupdError::NotHttp), "{e:?}");
    let (display, _) = check(e);
    assert!(display.contains("wrong port?"), "{display}");
    let e = parse(b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\n[]");
    assert!(matches!(e, LookupdError::Reply(_)), "{e:?}");
    check(e);
}

// ------------------------------------------------------------------------ handler errors

#[derive(Debug)]
struct Outer(std::io::Error);

impl fmt::Display for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("could not store the message")
    }
}

impl StdError for Outer {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.0)
    }
}

fn io_failure() -> Result<(), std::io::Error> {
    Err(std::io::Error::other("disk full"))
}

#[test]
fn handlers_use_question_mark_on_io_errors() {
    fn handler() -> Result<(), HandlerError> {
        io_failure()?;
        Ok(())
    }
    let e = handler().unwrap_err();
    assert_eq!(e.to_string(), "disk full");
    assert!(e.source().downcast_ref::<std::io::Error>().is_some());
    assert_eq!(
        Outcome::Failed(e).answer_kind(),
        AnswerKind::Requeue {
            delay: None,
            backoff: true
        }
    );
}

#[test]
fn handlers_use_question_mark_on_custom_errors_and_keep_the_chain() {
    fn handler() -> Result<(), HandlerError> {
        io_failure().map_err(Outer)?;
        Ok(())
    }
    let e = handler().unwrap_err();
    assert_eq!(e.to_string(), "could not store the message");
    assert_eq!(format!("{e:#}"), "could not store the message: disk full");
    let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
    assert_eq!(chain, ["could not store the message", "disk full"]);
    assert!(e.into_inner().downcast::<Outer>().is_ok());
}

#[test]
fn handlers_use_question_mark_on_boxed_errors() {
    fn boxed() -> Result<(), Box<dyn StdError + Send + Sync>> {
        io_failure().map_err(Outer)?;
        Ok(())
    }
    fn handler() -> Result<(), HandlerError> {
        boxed()?;
        Ok(())
    }
    let e = handler().unwrap_err();
    assert_eq!(format!("{e:#}"), "could not store the message: disk full");
    // Not boxed twice: the error itself is the source.
    assert!(e.source().downcast_ref::<Outer>().is_some());

    fn text() -> Result<(), HandlerError> {
        Err("no such user")?
    }
    assert_eq!(text().unwrap_err().to_string(), "no such user");
}

#[test]
fn handlers_use_question_mark_on_anyhow_errors() {
    fn work() -> anyhow::Result<()> {
        use anyhow::Context;
        io_failure().context("writing the row")?;
        Ok(())
    }
    fn handler() -> Result<(), HandlerError> {
        work()?;
        Ok(())
    }
    let e = handler().unwrap_err();
    assert_eq!(e.to_string(), "writing the row");
    assert_eq!(format!("{e:#}"), "writing the row: disk full");
    let delayed = HandlerError::from(work().unwrap_err()).with_delay(Duration::from_secs(3));
    assert_eq!(delayed.delay(), Some(Duration::from_secs(3)));
    assert_eq!(format!("{delayed:#}"), "writing the row: disk full");
}

/// Every kind of the core's errors, alone and inside the adapters' `Error`: nothing is said
/// twice and no displayed cause is also a source.
#[test]
fn every_core_error_kind_says_each_thing_once() {
    #[cfg(feature = "tls")]
    use nsq_proto::connection::TlsError;
    use nsq_proto::consumer::LookupdAddressError;
    use nsq_proto::{DecodeError, MessageId, PublishError};

    let decode = [
        DecodeError::HttpPort,
        DecodeError::LookupdTcpPort,
        DecodeError::FrameTooSmall { size: 2 },
        DecodeError::FrameTooLarge { size: 9, max: 4 },
        DecodeError::UnknownFrameType(7),
        DecodeError::MessageTooShort { len: 3 },
    ];
    let mut reasons = vec![
        CloseReason::Graceful { unanswered: 0 },
        CloseReason::Graceful { unanswered: 2 },
        CloseReason::Server(server(ErrorCode::Invalid, "cannot SUB in current state")),
        CloseReason::Protocol("response before IDENTIFY".into()),
        CloseReason::Timeout {
            idle: Duration::from_secs(60),
        },
        CloseReason::Eof,
        CloseReason::TlsNotGranted,
        CloseReason::AuthSecretMissing,
    ];
    #[cfg(feature = "tls")] // without it no TlsError is ever made
    reasons.push(CloseReason::Tls(TlsError::Buffer(
        "record too large".into(),
    )));
    reasons.extend(decode.iter().cloned().map(CloseReason::Decode));
    let commands = [
        CommandError::EmptyBody,
        CommandError::EmptyBatch,
        CommandError::EmptyBodyInBatch { index: 2 },
        CommandError::BatchTooLarge { len: 10, max: 5 },
        CommandError::EmptySecret,
    ];
    let mut connection = vec![
        ConnectionError::Closing,
        ConnectionError::NotReady,
        ConnectionError::WrongRole,
        ConnectionError::TooManyOutstanding { limit: 3 },
        ConnectionError::NotInFlight(MessageId::from(*b"0123456789abcdef")),
    ];
    connection.extend(reasons.iter().cloned().map(ConnectionError::Closed));
    connection.extend(commands.iter().cloned().map(ConnectionError::Command));
    let lookupd = [
        LookupdError::HeadTooLarge,
        LookupdError::BadHead("invalid status".into()),
        LookupdError::NotHttp,
        LookupdError::BodyTooLarge { max: 10 },
        LookupdError::BadChunk("size"),
        LookupdError::UnsupportedEncoding("gzip".into()),
        LookupdError::UnexpectedEof,
        LookupdError::AlreadyComplete,
        LookupdError::Transport("connection refused".into()),
        LookupdError::Timeout,
    ];
    let addresses = [
        LookupdAddressError::Empty,
        LookupdAddressError::UnsupportedScheme("https".into()),
        LookupdAddressError::InvalidHost("a b".into()),
        LookupdAddressError::InvalidPort("0".into()),
    ];

    let mut adapter: Vec<Error> = Vec::new();
    for e in &decode {
        check(e.clone());
    }
    for r in &reasons {
        check(r.clone());
        check(PublishError::Closed(r.clone()));
        check(PublishFailure::ConnectionLost(r.clone()));
        adapter.push(PublishFailure::ConnectionLost(r.clone()).into());
    }
    for c in &commands {
        check(c.clone());
        check(ProducerError::Invalid(c.clone()));
        adapter.push(ProducerError::Invalid(c.clone()).into());
    }
    for c in &connection {
        check(c.clone());
        check(ConsumerError::Connection(c.clone()));
        check(PublishFailure::Refused(c.clone()));
        adapter.push(ConsumerError::Connection(c.clone()).into());
        adapter.push(PublishFailure::Refused(c.clone()).into());
    }
    for l in lookupd {
        check(l);
    }
    for a in addresses {
        check(a.clone());
        check(ConsumerError::InvalidLookupd(a.clone()));
        adapter.push(ConsumerError::InvalidLookupd(a).into());
    }
    check(PublishError::Server(server(
        ErrorCode::BadTopic,
        "PUB topic name x is not valid",
    )));
    for name in ["", "a b", &"x".repeat(70)] {
        adapter.push(name.into_topic().unwrap_err());
        adapter.push(name.into_channel().unwrap_err());
    }
    for (option, value) in [
        ("max_in_flight", "x"),
        ("nope", "1"),
        ("max_attempts", "70000"),
        ("dial_timeout", "-1s"),
    ] {
        let e = nsq_proto::Config::default()
            .set_str(option, value)
            .unwrap_err();
        check(e.clone());
        adapter.push(e.into());
    }
    adapter.extend([
        ProducerError::Config(ConfigError::Invalid("heartbeat_interval out of range")).into(),
        ProducerError::InvalidAddress("x".into()).into(),
        PublishFailure::NoServerAvailable { last_error: None }.into(),
        Error::NoRuntime("no runtime"),
        Error::Misconfigured {
            nsqd: "127.0.0.1:4151".into(),
            problem: nsq_proto::Misconfiguration::HttpPort,
        },
        Error::Misconfigured {
            nsqd: "127.0.0.1:4150".into(),
            problem: nsq_proto::Misconfiguration::AuthRefused(server(
                ErrorCode::AuthFailed,
                "AUTH failed",
            )),
        },
        Error::Closed,
    ]);
    for e in adapter {
        let (display, alternate) = check(e);
        // Nothing is hidden in a source: `{}` is the whole story.
        assert_eq!(display, alternate);
    }
}
