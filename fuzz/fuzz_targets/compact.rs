//! Arbitrary bytes as a relay's compact watch stream → `k8s::compact`'s
//! decoder (whole and cut in two) → slim Protobuf decode → convert.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podns_server::fuzzing::compact(data));
