//! Drives a Connection through start-up (plain, snappy or deflate; producer or consumer; with
//! or without AUTH) and then feeds arbitrary server bytes, time jumps and commands.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nsq_proto::fuzzing::connection(data);
});
