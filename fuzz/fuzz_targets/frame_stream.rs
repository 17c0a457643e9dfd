//! Frame stream decoding: one-shot vs chunked (chunk sizes from the first bytes), re-encoding.
//! The logic lives in `nsq_proto::fuzzing::frame_stream`, which the corpus replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nsq_proto::fuzzing::frame_stream(data));
