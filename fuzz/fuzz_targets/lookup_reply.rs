//! nsqlookupd /lookup reply parsing (first two bytes: HTTP status).
//! The logic lives in `nsq_proto::fuzzing::lookup_reply`, which the corpus replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nsq_proto::fuzzing::lookup_reply(data));
