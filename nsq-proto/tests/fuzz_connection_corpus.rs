//! Replays the connection fuzz corpus (fuzz/corpus/connection) on stable Rust, plus a batch of
//! random inputs, through the same entry point as the fuzz target.

use nsq_proto::CloseReason;
use proptest::prelude::*;
use std::path::Path;

#[test]
fn corpus_replays_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/connection");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let summary = nsq_proto::fuzzing::connection_summary(&data);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // A seed asking for a compression this build leaves out never gets a connection
        // (`Connection::new` refuses the configuration), so nothing happens.
        // The first byte chooses it as `fuzzing::connection_summary` does.
        let compression = data.first().map(|mode| (mode >> 1) % 3);
        if (compression == Some(1) && !cfg!(feature = "snappy"))
            || (compression == Some(2) && !cfg!(feature = "deflate"))
        {
            assert!(
                !summary.ready && summary.closed.is_none(),
                "{name}: {summary:?}"
            );
            count += 1;
            continue;
        }
        // The hand-written seeds reach what their names say.
        match name.as_str() {
            "consumer_plain" | "consumer_snappy_wrapped" | "consumer_deflate_wrapped_auth" => {
                assert!(summary.ready, "{name}: {summary:?}");
                assert_eq!(summary.messages, 2, "{name}: {summary:?}");
                assert_eq!(
                    summary.closed,
                    Some(CloseReason::Graceful { unanswered: 0 }),
                    "{name}"
                );
            }
            "producer_plain" | "producer_deflate_wrapped" => {
                assert_eq!(summary.published, 3, "{name}: {summary:?}");
                assert_eq!(
                    summary.closed,
                    Some(CloseReason::Graceful { unanswered: 0 })
                );
            }
            "consumer_snappy_raw" => {
                assert!(
                    matches!(summary.closed, Some(CloseReason::Snappy(_))),
                    "{summary:?}"
                );
            }
            "producer_fatal" => {
                assert!(
                    matches!(summary.closed, Some(CloseReason::Server(_))),
                    "{summary:?}"
                );
            }
            "http_port" => {
                assert!(
                    matches!(summary.closed, Some(CloseReason::Decode(_))),
                    "{summary:?}"
                );
            }
            "timeout" => {
                assert!(
                    matches!(summary.closed, Some(CloseReason::Timeout { .. })),
                    "{summary:?}"
                );
            }
            _ => {}
        }
        count += 1;
    }
    assert!(count >= 5, "only {count} corpus files in {}", dir.display());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_inputs_do_not_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        nsq_proto::fuzzing::connection(&data);
    }

    #[test]
    fn random_frames_after_start_up_do_not_panic(
        mode in any::<u8>(),
        frames in proptest::collection::vec((0u32..4, proptest::collection::vec(any::<u8>(), 0..64)), 0..20),
    ) {
        // Well-formed frames with arbitrary types and contents, fed in one piece each.
        let mut data = vec![mode | 0x10];
        for (t, body) in frames {
            let mut f = (body.len() as u32 + 4).to_be_bytes().to_vec();
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&body);
            for piece in f.chunks(256) {
                data.push(0);
                data.push((piece.len() - 1) as u8);
                data.extend_from_slice(piece);
            }
            data.extend_from_slice(&[3 | (3 << 2), 5]); // set_rdy(5)
        }
        nsq_proto::fuzzing::connection(&data);
    }
}
