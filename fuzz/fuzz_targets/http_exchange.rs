//! One HTTP response (first byte: the size of the pieces it is fed in), read by the shared
//! HTTP machine and decoded by every typed call of nsqd's and nsqlookupd's APIs.
//! The logic lives in `nsq_proto::fuzzing::http_exchange`, which the corpus replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nsq_proto::fuzzing::http_exchange(data));
