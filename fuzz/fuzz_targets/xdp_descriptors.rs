//! cargo-fuzz entry for bessemer_fuzz_targets::xdp_descriptors.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| bessemer_fuzz_targets::xdp_descriptors(data));
