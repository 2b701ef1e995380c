//! `TarReader`, `group_samples` and `TarStream` over arbitrary bytes: see `shardtool_fuzz_checks::wds_tar` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::wds_tar(data));
