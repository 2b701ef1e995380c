//! WebDataset shards as `pack` inputs, listed as `pack` lists them: see `shardtool_fuzz_checks::wds_input` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::wds_input(data));
