//! The example tools' shared helpers (flag parsing like Go's `flag` package, Go durations,
//! the bench tools' final line), tested where the examples cannot be.

#[path = "../examples/support/mod.rs"]
mod support;

use std::time::Duration;
use support::{Flags, bench_line, go_duration, parse_go_duration};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn flags_take_go_forms_and_repeat() {
    let f = Flags::parse_from(
        args(&[
            "--topic=t",
            "-channel",
            "c",
            "--nsqd-tcp-address",
            "a:1",
            "--nsqd-tcp-address=b:2",
            "--print-topic",
            "--",
            "--ignored",
        ]),
        &["topic", "channel", "nsqd-tcp-address"],
        &["print-topic"],
    )
    .unwrap();
    assert_eq!(f.get("topic"), Some("t"));
    assert_eq!(f.get("channel"), Some("c"));
    assert_eq!(f.all("nsqd-tcp-address"), ["a:1", "b:2"]);
    assert!(f.boolean("print-topic").unwrap());
    assert!(!f.has("ignored"));
}

#[test]
fn undefined_flags_and_missing_values_are_refused() {
    let e = Flags::parse_from(args(&["--snappy"]), &["topic"], &["version"]).unwrap_err();
    assert_eq!(
        e,
        "flag provided but not defined: -snappy (defined: -topic, -version)"
    );
    let e = Flags::parse_from(args(&["--topc=x"]), &["topic"], &[]).unwrap_err();
    assert!(e.starts_with("flag provided but not defined: -topc"), "{e}");
    let e = Flags::parse_from(args(&["--topic"]), &["topic"], &[]).unwrap_err();
    assert_eq!(e, "flag needs an argument: -topic");
    let e = Flags::parse_from(args(&["stray"]), &["topic"], &[]).unwrap_err();
    assert_eq!(e, "unexpected argument \"stray\"");
    let f = Flags::parse_from(args(&["--rdy=x"]), &["rdy"], &[]).unwrap();
    assert_eq!(
        f.number::<u32>("rdy", 1).unwrap_err(),
        "invalid value \"x\" for flag -rdy"
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
