//! Arbitrary operation sequences against the sans-IO Producer: addresses added, connects
//! succeeding or failing, server replies, errors and garbage, EOF, publishes of every kind,
//! pings, time jumps, close. Panics when a publish resolves twice or never.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nsq_proto::fuzzing::producer_ops(data);
});
