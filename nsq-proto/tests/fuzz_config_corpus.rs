//! Replays the committed cargo-fuzz corpus of the `config_json` target on stable, plus a
//! proptest sweep over random option documents, so the entry point is exercised by
//! `cargo test`.

use proptest::prelude::*;
use std::path::Path;

#[test]
fn replay_config_json_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/config_json");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    assert!(
        entries.len() >= 4,
        "corpus seeds missing in {}",
        dir.display()
    );
    let mut accepted = 0;
    for path in entries {
        let data = std::fs::read(&path).unwrap();
        nsq_proto::fuzzing::config_json(&data);
        accepted +=
            usize::from(nsq_proto::Config::from_json(std::str::from_utf8(&data).unwrap()).is_ok());
    }
    // Some seeds are valid documents, some are not. Those asking for TLS or compression are
    // refused (with a typed error) when the cargo feature is off.
    let all_layers = cfg!(all(
        feature = "tls",
        feature = "snappy",
        feature = "deflate"
    ));
    assert!(accepted >= if all_layers { 3 } else { 1 }, "{accepted}");
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,25}",
        "-?[0-9]{1,4}(\\.[0-9]{0,3})?(ns|us|µs|ms|s|m|h|x|)",
        "\"[0-9.]{0,12}(ns|us|ms|s|m|h)?\"",
        "\"(true|false|t|f|1|0|yes|exponential|full_jitter|failover|round_robin|tls1.2|)\"",
        Just("null".to_string()),
        Just("true".to_string()),
        Just("[1]".to_string()),
        Just("1e400".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xc0f1),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_option_documents_never_panic(
        entries in proptest::collection::vec(
            (proptest::sample::select(nsq_proto::config::OPTION_NAMES), value()),
            0..8,
        ),
    ) {
        let body: Vec<String> = entries.iter().map(|(k, v)| format!("{k:?}: {v}")).collect();
        let doc = format!("{{{}}}", body.join(", "));
        nsq_proto::fuzzing::config_json(doc.as_bytes());
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        nsq_proto::fuzzing::config_json(&data);
    }

    #[test]
    fn random_duration_text_never_panics(text in "[0-9.µsmhnu+-]{0,40}") {
        let _ = nsq_proto::config::parse_go_duration(&text);
    }
}
