//! Starting the disk write of a download's finished part while the rest arrives (Linux), so the
//! fsync before a shard is published waits only for its tail instead of the whole file.

use std::fs::File;

/// How much downloaded data accumulates before its write-back is started: a multiple of
/// [`shardtool_core::WRITE_BLOCK`], so every byte below a step boundary has left the write buffer.
pub(crate) const STEP: u64 = 4 * shardtool_core::WRITE_BLOCK as u64;

/// Asks the kernel to start writing `len` bytes of `file` from `offset` to disk, without
/// waiting. Only a hint: errors are ignored, because the fsync before publishing is what makes
/// the file durable.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn start(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: sync_file_range takes a descriptor and integers and touches no memory of ours; the
    // descriptor is open for as long as `file` is borrowed, and a bad range is an error return.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Elsewhere the fsync before publishing does all the work.
#[cfg(not(target_os = "linux"))]
pub(crate) fn start(_file: &File, _offset: u64, _len: u64) {}
