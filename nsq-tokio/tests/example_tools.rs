//! The example tools' shared helpers (flag parsing that accepts the Go tools' forms, with
//! `--help`; Go durations; the bench tools' final line), tested where the examples cannot be.

#[path = "../examples/support/mod.rs"]
mod support;

use std::time::Duration;
use support::{FlagError, Flags, Usage, bench_line, go_duration, parse_go_duration, switch, value};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

const TAIL: Usage = Usage {
    name: "nsq_tail",
    about: "Consumes topics.",
    flags: &[
        value("topic", "TOPIC", "NSQ topic"),
        value("channel", "CHANNEL", "NSQ channel"),
        value("nsqd-tcp-address", "ADDR", "nsqd TCP address"),
        value("n", "N", "total messages to show"),
        switch("print-topic", "print the topic name"),
        switch("version", "print version string"),
    ],
};

fn parse(list: &[&str]) -> Result<Flags, FlagError> {
    Flags::parse_from(args(list), &TAIL)
}

fn invalid(list: &[&str]) -> String {
    match parse(list) {
        Err(FlagError::Invalid(e)) => e,
        other => panic!("{list:?} was accepted: {other:?}"),
    }
}

#[test]
fn flags_take_go_forms_and_repeat() {
    let f = parse(&[
        "--topic=t",
        "-channel",
        "c",
        "--nsqd-tcp-address",
        "a:1",
        "-nsqd-tcp-address=b:2",
        "-n",
        "5",
        "--print-topic",
        "--",
        "--ignored",
    ])
    .unwrap();
    assert_eq!(f.get("topic"), Some("t"));
    assert_eq!(f.get("channel"), Some("c"));
    assert_eq!(f.all("nsqd-tcp-address"), ["a:1", "b:2"]);
    assert_eq!(f.number::<u64>("n", 0).unwrap(), 5);
    assert!(f.boolean("print-topic").unwrap());
    assert!(!f.has("ignored"));
    let f = parse(&["-n=7", "-print-topic=false", "-version"]).unwrap();
    assert_eq!(f.get("n"), Some("7"));
    assert!(!f.boolean("print-topic").unwrap());
    assert!(f.boolean("version").unwrap());
}

#[test]
fn help_prints_the_usage_text() {
    for flag in ["--help", "-h", "-help"] {
        let Err(FlagError::Help(text)) = parse(&["--topic=t", flag]) else {
            panic!("{flag} did not ask for help");
        };
        assert!(
            text.starts_with("Consumes topics.\n\nUsage: nsq_tail [FLAGS]"),
            "{text}"
        );
        assert!(text.contains("  --topic=TOPIC "), "{text}");
        assert!(text.contains("  --print-topic "), "{text}");
        assert!(text.contains("  -h, --help "), "{text}");
        assert!(text.contains("RUST_LOG"), "{text}");
    }
}

#[test]
fn undefined_flags_and_missing_values_are_refused() {
    let e = invalid(&["--snappy"]);
    assert_eq!(
        e,
        "flag provided but not defined: -snappy (defined: -channel, -n, -nsqd-tcp-address, \
         -print-topic, -topic, -version)"
    );
    let e = invalid(&["--topc=x"]);
    assert!(e.starts_with("flag provided but not defined: -topc"), "{e}");
    assert_eq!(invalid(&["--topic"]), "flag needs an argument: -topic");
    assert_eq!(invalid(&["-n"]), "flag needs an argument: -n");
    assert_eq!(invalid(&["stray"]), "unexpected argument \"stray\"");
    let f = parse(&["--n=x"]).unwrap();
    assert_eq!(
        f.number::<u32>("n", 1).unwrap_err(),
        "invalid value \"x\" for flag -n"
    );
}

#[test]
fn go_durations() {
    assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
    assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
    for bad in ["", "10", "-1s", "s", "1x", "1.2.3s"] {
        assert_eq!(parse_go_duration(bad), None, "{bad}");
    }
    assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
}

#[test]
fn bench_line_has_the_go_tools_format() {
    let line = bench_line(Duration::from_secs(2), 1_000_000, 200);
    assert!(line.starts_with("duration: 2s - "), "{line}");
    assert!(
        line.contains("mb/s - 500000.000ops/s - 2.000us/op"),
        "{line}"
    );
}

#[test]
fn nsq_stat_prints_what_nsq_stat_v1_3_0_prints() {
    use nsq_tokio::http::nsqd::ChannelStats;
    // Two polls of the official tool, 1 s apart (recorded on a real nsqd v1.3.0):
    //      17       0 |      26      26       0     0     0 |       0       0           26       0
    //      14       0 |      40      40       0     0     0 |       0       0           40       0
    let [bar, titles] = support::nsq_stat_header();
    assert_eq!(
        bar,
        "------rate------+----------------depth----------------+--------------metadata---------------"
    );
    assert_eq!(
        titles,
        "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients"
    );
    let poll = |depth: i64, msgs: u64| {
        let mut c = ChannelStats::default();
        c.depth = depth;
        c.message_count = msgs;
        c
    };
    let (first, second, third) = (poll(9, 9), poll(26, 26), poll(40, 40));
    let second_row = support::nsq_stat_row(&first, &second, Duration::from_secs(1));
    assert_eq!(
        second_row,
        "     17       0 |      26      26       0     0     0 |       0       0           26       0"
    );
    assert_eq!(
        support::nsq_stat_row(&second, &third, Duration::from_secs(1)),
        "     14       0 |      40      40       0     0     0 |       0       0           40       0"
    );
    // Draining: egress counts what left; memory depth is depth less disk depth.
    let mut busy = poll(10, 50);
    busy.backend_depth = 4;
    busy.in_flight_count = 3;
    busy.client_count = 2;
    let row = support::nsq_stat_row(&third, &busy, Duration::from_millis(500));
    assert_eq!(
        row,
        "     20      80 |      10       6       4     3     0 |       0       0           50       2"
    );
}
