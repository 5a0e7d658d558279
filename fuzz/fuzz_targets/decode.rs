//! Arbitrary bytes as a Pod/Service/Job JSON object → slim decode → convert.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podns_server::fuzzing::decode(data));
