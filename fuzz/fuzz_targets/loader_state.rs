//! a saved loader state resumed on a small dataset: see `shardtool_fuzz_checks::loader_state` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::loader_state(data));
