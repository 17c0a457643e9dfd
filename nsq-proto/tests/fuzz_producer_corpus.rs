//! Replays the committed cargo-fuzz corpus of the `producer_ops` target on stable, plus a
//! proptest sweep over random inputs, so the fuzz entry point is exercised by `cargo test`.

use proptest::prelude::*;
use std::path::Path;

#[test]
fn replay_producer_ops_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/producer_ops");
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
    for path in entries {
        let data = std::fs::read(&path).unwrap();
        nsq_proto::fuzzing::producer_ops(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // Deterministic in CI; change the seed locally to explore.
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xf023),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_producer_ops_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        nsq_proto::fuzzing::producer_ops(&data);
    }
}

#[test]
fn corpus_seeds_reach_confirmations_failures_and_pings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/producer_ops");
    let mut total = nsq_proto::fuzzing::OpsSummary::default();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let s = nsq_proto::fuzzing::producer_ops_summary(
            &std::fs::read(entry.unwrap().path()).unwrap(),
        );
        total.published += s.published;
        total.failed += s.failed;
        total.pings += s.pings;
        total.ready += s.ready;
    }
    assert!(total.published >= 5, "{total:?}");
    assert!(total.failed >= 3, "{total:?}");
    assert!(total.pings >= 2, "{total:?}");
    assert!(total.ready >= 4, "{total:?}");
}
