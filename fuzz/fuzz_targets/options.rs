//! the option strings Python users and the CLI pass (transforms, sizes, locations): see `shardtool_fuzz_checks::options` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::options(data));
