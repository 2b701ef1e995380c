//! a one-shard dataset through `verify`, `inspect` and the reader: see `shardtool_fuzz_checks::dataset` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::dataset(data));
