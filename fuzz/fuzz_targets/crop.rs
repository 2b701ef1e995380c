//! `shardtool_image::decode_crop_into` (the reader's fused JPEG crop) on arbitrary bytes: see `shardtool_fuzz_checks::crop` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::crop(data));
