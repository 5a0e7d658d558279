//! Arbitrary bytes as a Protobuf list body, watch frame and object → slim
//! Protobuf decode → convert.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podns_server::fuzzing::pb(data));
