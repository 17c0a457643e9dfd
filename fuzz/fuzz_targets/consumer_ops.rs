//! Arbitrary operation sequences against the sans-IO Consumer: connections opening, failing,
//! handshaking, receiving messages, errors and garbage; answers; max_in_flight changes;
//! lookupd replies; time jumps; close. Panics on a broken RDY invariant.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nsq_proto::fuzzing::consumer_ops(data);
});
