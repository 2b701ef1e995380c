//! `Manifest::from_slice` and the `errors.jsonl` reader on arbitrary bytes: see `shardtool_fuzz_checks::manifest` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::manifest(data));
