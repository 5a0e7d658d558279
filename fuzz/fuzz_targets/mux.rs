//! Arbitrary bytes as a relay's multiplexed watch → `k8s::mux`'s outer
//! decoder (whole and cut in two) → each inner watch's compact decoder →
//! slim Protobuf decode → convert.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podns_server::fuzzing::mux(data));
