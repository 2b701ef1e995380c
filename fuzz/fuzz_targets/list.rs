//! CSV and JSONL list files, as `pack` lists them: see `shardtool_fuzz_checks::list` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::list(data));
