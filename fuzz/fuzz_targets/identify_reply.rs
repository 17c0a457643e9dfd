//! IDENTIFY and AUTH reply parsing.
//! The logic lives in `nsq_proto::fuzzing::identify_reply`, which the corpus replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nsq_proto::fuzzing::identify_reply(data));
