//! `shardtool_image::transform` on arbitrary bytes, under a small pixel limit: see `shardtool_fuzz_checks::image_transform` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::image_transform(data));
