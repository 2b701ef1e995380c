//! Opening a published shard file for reading, the one way the reader, inspect and preview get a
//! shard's bytes: plain files mapped read-only (or read, where mapping is not wanted), `.zst`
//! files decompressed into memory under a size cap. This module holds the workspace's one file
//! mapping, which verify's loader (it hashes every read while in cache) maps through too.

use memmap2::Mmap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The bytes of one shard: a read-only map of a plain file, or a buffer holding a file read or
/// decompressed into memory.
pub enum ShardBytes {
    /// A mapped file.
    Mapped(Mmap),
    /// Read or decompressed into memory.
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for ShardBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            ShardBytes::Mapped(m) => m,
            ShardBytes::Owned(v) => v,
        }
    }
}

impl std::ops::Deref for ShardBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_ref()
    }
}

/// How to open a shard file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenShard {
    /// The file is one or more zstd frames of the shard.
    pub zstd: bool,
    /// The most bytes the shard may hold once decompressed (the manifest's size, or a limit):
    /// a larger one is an error, found without holding more than this plus one byte.
    pub max_bytes: u64,
    /// Map a plain file instead of reading it. Mapping needs the write-once invariant (see
    /// [`map_readonly`]); reading does not.
    pub map: bool,
}

/// Why a shard file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenShardError {
    /// The file could not be opened, read, mapped or decompressed.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: io::Error,
    },
    /// The zstd stream is damaged (truncated, corrupt, not zstd).
    #[error("{path}: the zstd stream cannot be decompressed: {message}")]
    Decompress {
        /// The file.
        path: PathBuf,
        /// The decoder's reason.
        message: String,
    },
    /// The shard is larger than allowed.
    #[error("{path}: holds more than {max_bytes} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap.
        max_bytes: u64,
    },
}

/// Reads `reader` to its end into memory, at most `max` bytes plus one (one more than `max`
/// tells a longer stream). Memory grows with the data actually read, never by a stated size,
/// and fallibly: an allocation the system refuses is an `OutOfMemory` error, not an abort.
pub fn read_to_end_bounded(mut reader: impl Read, max: u64) -> io::Result<Vec<u8>> {
    let limit = max.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    loop {
        let len = out.len() as u64;
        if len >= limit {
            return Ok(out);
        }
        // Doubling, from 64 KiB, up to the limit.
        let want = len.max(64 << 10).min(limit - len);
        out.try_reserve_exact(usize::try_from(want).unwrap_or(usize::MAX))
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!("cannot hold {} bytes in memory: {e}", len + want),
                )
            })?;
        let room = (out.capacity() as u64 - len).min(limit - len);
        // `take` stops at the room reserved, so this never grows `out` itself.
        let n = (&mut reader).take(room).read_to_end(&mut out)?;
        if (n as u64) < room {
            return Ok(out);
        }
    }
}

/// Opens the shard file at `path` as `how` says.
pub fn open_shard(path: &Path, how: OpenShard) -> Result<ShardBytes, OpenShardError> {
    let io = |cause| OpenShardError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let too_large = || OpenShardError::TooLarge {
        path: path.to_path_buf(),
        max_bytes: how.max_bytes,
    };
    let file = crate::open_regular(path).map_err(io)?;
    if how.zstd {
        let max = how.max_bytes;
        // The decoder's own errors say the stream is damaged; the file's (and memory's) are I/O.
        let damaged = |e: io::Error| match e.kind() {
            io::ErrorKind::Other | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => {
                OpenShardError::Decompress {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                }
            }
            _ => io(e),
        };
        let out =
            read_to_end_bounded(zstd::Decoder::new(file).map_err(io)?, max).map_err(damaged)?;
        if out.len() as u64 > max {
            return Err(OpenShardError::TooLarge {
                path: path.to_path_buf(),
                max_bytes: max,
            });
        }
        return Ok(ShardBytes::Owned(out));
    }
    let len = file.metadata().map_err(io)?.len();
    if len > how.max_bytes {
        return Err(too_large());
    }
    if how.map {
        // SAFETY: shards are published write-once (AtomicFile: temp, fsync, rename) and never
        // modified in place; callers that cannot rely on that pass `map: false`.
        #[allow(unsafe_code)]
        let map = unsafe { map_readonly(&file) }.map_err(io)?;
        return Ok(ShardBytes::Mapped(map));
    }
    let mut out = Vec::new();
    file.take(len).read_to_end(&mut out).map_err(io)?;
    Ok(ShardBytes::Owned(out))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn how(zstd: bool, max_bytes: u64, map: bool) -> OpenShard {
        OpenShard {
            zstd,
            max_bytes,
            map,
        }
    }

    #[test]
    fn bounded_reads_keep_what_there_is_and_stop_one_byte_past_the_bound() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for (len, max) in [
            (0, 10),
            (10, 10),
            (11, 10),
            (300_000, 1 << 20),
            (300_000, 70_000),
        ] {
            let got = read_to_end_bounded(&data[..len], max).unwrap();
            let keep = len.min(max as usize + 1);
            assert_eq!(got, data[..keep], "{len} bytes, bound {max}");
            // Room grows with the data, never by the bound.
            assert!(
                got.capacity() <= (2 * keep).max(64 << 10),
                "{}",
                got.capacity()
            );
        }
        // A stream of 256 MiB of zeros that compresses to a few KiB: stopped at the bound.
        let mut bomb = zstd::Encoder::new(Vec::new(), 3).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..256 {
            io::Write::write_all(&mut bomb, &zeros).unwrap();
        }
        let bomb = bomb.finish().unwrap();
        let got = read_to_end_bounded(zstd::Decoder::new(&bomb[..]).unwrap(), 1 << 20).unwrap();
        assert_eq!(got.len(), (1 << 20) + 1);
    }

    #[test]
    fn plain_and_zstd_shards_open_to_the_same_bytes_within_their_cap() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let plain = dir.path().join("a.tar");
        let packed = dir.path().join("a.tar.zst");
        std::fs::write(&plain, &data).unwrap();
        std::fs::write(&packed, zstd::encode_all(&data[..], 3).unwrap()).unwrap();
        let n = data.len() as u64;
        for map in [true, false] {
            let b = open_shard(&plain, how(false, n, map)).unwrap();
            assert_eq!(&*b, &data[..]);
            assert_eq!(matches!(b, ShardBytes::Mapped(_)), map);
        }
        assert_eq!(
            &*open_shard(&packed, how(true, n, true)).unwrap(),
            &data[..]
        );
        for (path, zstd) in [(&plain, false), (&packed, true)] {
            let err = open_shard(path, how(zstd, n - 1, true)).err().unwrap();
            assert!(matches!(err, OpenShardError::TooLarge { .. }), "{err}");
            assert!(err.to_string().contains("a.tar"), "{err}");
        }
        let err = open_shard(&dir.path().join("gone.tar"), how(false, n, true))
            .err()
            .unwrap();
        assert!(err.to_string().contains("gone.tar"), "{err}");
    }

    #[test]
    fn a_damaged_zstd_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.safetensors.zst");
        let mut z = zstd::encode_all(&[1u8; 5000][..], 3).unwrap();
        z.truncate(z.len() / 2);
        std::fs::write(&p, &z).unwrap();
        assert!(open_shard(&p, how(true, 1 << 20, true)).is_err());
    }
}
