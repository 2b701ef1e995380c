//! `shardtool_wds::TarReader` over arbitrary bytes, then `group_samples`.
//!
//! Invariant under test: the reader never panics, stops after its first error, and every member it
//! yields borrows bytes from inside the input at or after its header.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shardtool_wds::{group_samples, split_name, TarReader, BLOCK};

fuzz_target!(|data: &[u8]| {
    let mut members = 0usize;
    let mut regular = 0usize;
    let mut errors = 0usize;
    let start = data.as_ptr() as usize;
    for entry in TarReader::new(data) {
        match entry {
            Ok(e) => {
                members += 1;
                assert_eq!(e.header_offset % BLOCK as u64, 0);
                assert!(e.header_offset + BLOCK as u64 <= data.len() as u64);
                if !e.data.is_empty() {
                    let off = e.data.as_ptr() as usize - start;
                    assert!(off as u64 >= e.header_offset + BLOCK as u64);
                    assert!(off + e.data.len() <= data.len());
                }
                if e.kind == shardtool_wds::EntryKind::Regular {
                    regular += 1;
                }
                let _ = split_name(&e.name);
            }
            Err(_) => {
                errors += 1;
                assert_eq!(errors, 1, "the reader must stop after its first error");
            }
        }
        // Every member takes at least one block.
        assert!(members <= data.len() / BLOCK);
    }

    let (samples, err) = group_samples(data);
    assert_eq!(err.is_some(), errors == 1);
    let fields: usize = samples.iter().map(|s| s.fields.len()).sum();
    assert!(fields <= regular);
    for s in &samples {
        assert!(!s.fields.is_empty());
        if let Some((name, _)) = s.fields.first() {
            let _ = s.get(name);
        }
    }
});
