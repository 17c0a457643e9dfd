//! Replays the committed cargo-fuzz corpus of the `consumer_ops` target on stable, plus a
//! proptest sweep over random inputs, so the fuzz entry point is exercised by `cargo test`.

use proptest::prelude::*;
use std::path::Path;

#[test]
fn replay_consumer_ops_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/consumer_ops");
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
        nsq_proto::fuzzing::consumer_ops(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xf022),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_consumer_ops_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        nsq_proto::fuzzing::consumer_ops(&data);
    }
}
