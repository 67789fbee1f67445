//! cargo-fuzz entry for bessemer_fuzz_targets::http_endpoints.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| bessemer_fuzz_targets::http_endpoints(data));
