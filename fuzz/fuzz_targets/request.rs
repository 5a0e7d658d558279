//! DNS message bytes → `Answerer::handle`, over UDP and TCP limits.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podns_server::fuzzing::request(data));
