//! `PackedShard::open` on arbitrary bytes, then every accessor on every record: see `shardtool_fuzz_checks::packed_open` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::packed_open(data));
