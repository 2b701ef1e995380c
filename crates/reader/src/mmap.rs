//! The one place shardtool maps files into memory.

use memmap2::Mmap;
use std::fs::File;
use std::io;

/// Maps `file` read-only.
///
/// # Safety
///
/// The caller must make sure nobody truncates or rewrites the file while the map lives: a
/// shrinking file kills the process with SIGBUS and a rewritten one changes bytes that were
/// validated. shardtool publishes shards write-once (temp file, fsync, rename) and never
/// modifies them in place, so mapping a published shard is sound under that invariant.
#[allow(unsafe_code)]
pub unsafe fn map_readonly(file: &File) -> io::Result<Mmap> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { Mmap::map(file) }
}
