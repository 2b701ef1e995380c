//! `shardtool_verify`'s one-pass reader of a sample's `.json` (`scan_flat`) over arbitrary bytes.
//!
//! Invariants under test: it never panics, and whatever it reads, serde_json (the reader verify
//! falls back to, `serde_meta`) reads the same fields with the same values: the fast path may give
//! up where serde succeeds, never answer differently.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shardtool_verify::fuzzing::{scan_flat, serde_meta};

fuzz_target!(|data: &[u8]| {
    if let Some(fast) = scan_flat(data) {
        assert_eq!(Some(fast), serde_meta(data), "{:?}", String::from_utf8_lossy(data));
    }
});
