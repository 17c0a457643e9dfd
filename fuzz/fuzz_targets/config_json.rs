//! Arbitrary bytes as a JSON configuration document (and as a Go duration): never panics, and
//! an accepted configuration always derives the connection, consumer and producer settings.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nsq_proto::fuzzing::config_json(data);
});
