//! Parquet files, as `pack` lists and stages them: see `shardtool_fuzz_checks::parquet` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::parquet(data));
