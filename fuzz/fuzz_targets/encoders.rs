//! A random small index and random questions → the wire fast encoder and
//! the general (hickory-proto) encoder of the same answer plan: whenever
//! the fast one answers, both replies are the same bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podns_server::fuzzing::encoders(data));
