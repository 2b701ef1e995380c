//! Reading a whole shard file once, front to back, into a reused buffer (a plain tar shard
//! checked without decoding is streamed instead, by `check_tar::stream_tar`):
//!
//! - **Plain** shards are read in 1 MiB chunks, each hashed while still in cache. With
//!   [`VerifyOptions::mmap`](crate::VerifyOptions::mmap) they are mapped instead ([`shardtool_core::map_readonly`]).
//! - **`.zst`** shards are decompressed as a stream (the uncompressed bytes hashed too) into a
//!   buffer whose size is capped before any byte is decompressed, so a lying manifest or a zstd
//!   bomb cannot make us allocate without bound.

use memmap2::Mmap;
use shardtool_core::{Checksum, ChecksumHasher, HashingReader};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Mutex;

/// Bytes read per step: large enough to amortise the system call, small enough to stay in cache
/// for the hash that follows.
const CHUNK: u64 = 1 << 20;

/// Bytes read per step when a shard is streamed (tar checked without decoding, packed pixels):
/// `cat`'s read size, small enough that the hash and the checks that follow each read find the
/// bytes in cache.
pub(crate) const STREAM_BUFFER: usize = 128 << 10;

/// The page size read buffers are aligned to.
const PAGE: usize = 4096;

/// Buffers returned after use, so that later shards reuse memory that is already paged in.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// An empty buffer, reusing a returned one when there is one.
    pub(crate) fn take(&self) -> Vec<u8> {
        self.free
            .lock()
            .ok()
            .and_then(|mut f| f.pop())
            .unwrap_or_default()
    }

    /// Gives a buffer back for reuse; a mapping is simply unmapped.
    pub(crate) fn give(&self, bytes: ShardBytes) {
        if let ShardBytes::Owned { mut buf, .. } = bytes {
            buf.clear();
            if let Ok(mut f) = self.free.lock() {
                f.push(buf);
            }
        }
    }
}

/// What stopped a shard's content from being read completely (the stored checksum is still
/// computed over the whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Incomplete {
    /// The (uncompressed) shard is over the in-memory limit.
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// Decompression produced more than `cap` bytes and was stopped.
    OverCap {
        /// The cap (declared size, or the limit when smaller).
        cap: u64,
    },
    /// The zstd stream is corrupt.
    Decompress(String),
}

/// The bytes of a shard: read into memory, or mapped.
pub(crate) enum ShardBytes {
    /// Read (and possibly decompressed) into `buf`, from `start` on.
    Owned {
        /// The buffer, reused across shards.
        buf: Vec<u8>,
        /// Where the shard starts: read shards start on a page boundary (see `load_plain`).
        start: usize,
    },
    /// Mapped read-only.
    Mapped(Mmap),
}

impl ShardBytes {
    /// A buffer whose bytes all belong to the shard.
    pub(crate) fn owned(buf: Vec<u8>) -> Self {
        ShardBytes::Owned { buf, start: 0 }
    }
}

impl std::ops::Deref for ShardBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ShardBytes::Owned { buf, start } => &buf[*start..],
            ShardBytes::Mapped(m) => m,
        }
    }
}

/// A shard as read.
pub(crate) struct Loaded {
    /// The (uncompressed) shard bytes; complete only when `incomplete` is `None`.
    pub data: ShardBytes,
    /// Bytes of the file as stored.
    pub stored_len: u64,
    /// Checksum of the file as stored.
    pub stored_sum: Checksum,
    /// Size and checksum after decompression (compressed shards only, complete reads only).
    pub uncompressed: Option<(u64, Checksum)>,
    /// Why `data` is not the whole shard, if it is not.
    pub incomplete: Option<Incomplete>,
}

/// Appends what `reader` yields to `buf`, hashing it chunk by chunk, until EOF or until `cap`
/// bytes were read. With `keep == false` nothing is kept (hash only). Returns the bytes read and
/// whether it stopped at `cap` (so that more may follow).
fn pump(
    reader: &mut dyn Read,
    buf: &mut Vec<u8>,
    cap: u64,
    keep: bool,
    hasher: &mut ChecksumHasher,
) -> io::Result<(u64, bool)> {
    let base = buf.len();
    let mut total = 0u64;
    loop {
        let room = cap - total;
        if room == 0 {
            return Ok((total, true));
        }
        if !keep {
            buf.truncate(base);
        }
        let start = buf.len();
        let want = room.min(CHUNK);
        // Amortised growth (at most doubling), refused rather than aborting when the system
        // has no room: a shard larger than memory is the shard's problem.
        buf.try_reserve(want as usize)
            .map_err(|e| out_of_memory(buf.len() as u64 + want, e))?;
        let n = Read::take(&mut *reader, want).read_to_end(buf)?;
        if n == 0 {
            return Ok((total, false));
        }
        hasher.update(&buf[start..]);
        total += n as u64;
    }
}

fn out_of_memory(bytes: u64, e: std::collections::TryReserveError) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!("cannot hold {bytes} bytes of the shard in memory: {e}"),
    )
}

/// Reads a plain shard. When it is over `limit` bytes it is hashed without being kept.
pub(crate) fn load_plain(path: &Path, limit: u64, pool: &BufferPool) -> io::Result<Loaded> {
    let mut file = shardtool_core::open_regular(path)?;
    let len = file.metadata()?.len();
    let keep = len <= limit;
    let mut data = pool.take();
    // `len` comes from the file system and is within the limit when kept; the slack of a chunk
    // keeps `pump`'s last reserve from moving the whole shard.
    let room = if keep {
        len as usize + CHUNK as usize
    } else {
        CHUNK as usize
    };
    data.try_reserve(room + PAGE)
        .map_err(|e| out_of_memory((room + PAGE) as u64, e))?;
    // Each read() then lands at its page-cache page's own offset within a page: a destination
    // a few bytes past it (as a heap buffer's start is) ran the kernel's copy at a quarter of
    // the speed (4K aliasing).
    let start = data.as_ptr().align_offset(PAGE).min(PAGE);
    data.resize(start, 0);
    let mut hasher = ChecksumHasher::new();
    let cap = if keep {
        limit.saturating_add(1)
    } else {
        u64::MAX
    };
    let (read, _) = pump(&mut file, &mut data, cap, keep, &mut hasher)?;
    let too_large = !keep || read > limit;
    if too_large {
        data.truncate(start);
    }
    Ok(Loaded {
        data: ShardBytes::Owned { buf: data, start },
        stored_len: read,
        stored_sum: hasher.checksum(),
        uncompressed: None,
        incomplete: too_large.then_some(Incomplete::TooLarge { limit }),
    })
}

/// Reads a plain packed shard for the checks that do not read pixels (keys, labels, metadata, the
/// file checksum): the header and the small tensors after the pixels are stored at their file
/// offsets in a zeroed buffer of the file's length, and the pixels are only hashed, through a
/// small buffer, so the shard costs the page cache's copy and the hash, like `cat`. The pixels'
/// pages of the buffer are never written (a fresh zeroed allocation, which the system backs only
/// where written). `None` when the file is over `limit`, or not laid out as pack writes it (pixels
/// first, right after the header), or changed size while read: the caller reads it whole.
pub(crate) fn load_packed_checks(path: &Path, limit: u64) -> io::Result<Option<Loaded>> {
    let mut file = shardtool_core::open_regular(path)?;
    let len = file.metadata()?.len();
    if len > limit || len < 8 {
        return Ok(None);
    }
    let mut prefix = [0u8; 8];
    if !fill(&mut file, &mut prefix)? {
        return Ok(None);
    }
    let head = u64::from_le_bytes(prefix).saturating_add(8);
    if head > len {
        return Ok(None);
    }
    // `len` is within `limit` (4 GiB by default), the bound of every whole read.
    let mut data = vec![0u8; len as usize];
    data[..8].copy_from_slice(&prefix);
    if !fill(&mut file, &mut data[8..head as usize])? {
        return Ok(None);
    }
    let span = shardtool_packed::pixel_span(&data[..head as usize]);
    let Some(span) = span.filter(|s| s.start == head && s.start <= s.end && s.end <= len) else {
        return Ok(None);
    };
    let mut hasher = ChecksumHasher::new();
    hasher.update(&data[..head as usize]);
    let mut chunk = vec![0u8; STREAM_BUFFER + PAGE];
    let at = chunk.as_ptr().align_offset(PAGE).min(PAGE);
    let chunk = &mut chunk[at..at + STREAM_BUFFER];
    let mut left = span.end - span.start;
    while left > 0 {
        let n = file.read(&mut chunk[..left.min(STREAM_BUFFER as u64) as usize])?;
        if n == 0 {
            return Ok(None);
        }
        hasher.update(&chunk[..n]);
        left -= n as u64;
    }
    let tail = &mut data[span.end as usize..];
    if !fill(&mut file, tail)? {
        return Ok(None);
    }
    hasher.update(tail);
    if file.read(&mut chunk[..1])? != 0 {
        return Ok(None);
    }
    Ok(Some(Loaded {
        data: ShardBytes::owned(data),
        stored_len: len,
        stored_sum: hasher.checksum(),
        uncompressed: None,
        incomplete: None,
    }))
}

/// Fills `buf` from `file`; `false` when the file ends first (it shrank while read).
fn fill(file: &mut File, buf: &mut [u8]) -> io::Result<bool> {
    match file.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads a zstd-compressed shard. `declared` is the manifest's uncompressed size, if known: at
/// most `min(declared, limit) + 1` bytes are decompressed, and the rest of the file is still
/// hashed so that the stored checksum covers every byte.
pub(crate) fn load_zstd(
    path: &Path,
    declared: Option<u64>,
    limit: u64,
    pool: &BufferPool,
) -> io::Result<Loaded> {
    let file = shardtool_core::open_regular(path)?;
    let stored = file.metadata()?.len();
    let counted = HashingReader::new(file);
    let cap = declared.unwrap_or(limit).min(limit);
    let mut data = pool.take();
    // Reserve what the manifest promises, but no more than a plausible ratio of the stored size:
    // a lying manifest must not reserve gigabytes. Growth past it is by chunks, up to the cap.
    let promised = cap.min(stored.saturating_mul(8).saturating_add(CHUNK));
    data.try_reserve(promised as usize)
        .map_err(|e| out_of_memory(promised, e))?;
    let mut hasher = ChecksumHasher::new();
    let mut decoder = zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(
        CHUNK as usize,
        counted,
    ))?;
    let outcome = pump(
        &mut decoder,
        &mut data,
        cap.saturating_add(1),
        true,
        &mut hasher,
    );
    // Hash whatever the decoder did not consume, so the stored checksum covers the whole file.
    let mut rest = decoder.finish();
    io::copy(&mut rest, &mut io::sink())?;
    let (stored_len, stored_sum) = rest.into_inner().finish();
    let incomplete = match outcome {
        Ok((n, _)) if n > cap => Some(if declared.is_some_and(|d| d <= limit) {
            Incomplete::OverCap { cap }
        } else {
            Incomplete::TooLarge { limit }
        }),
        Ok(_) => None,
        Err(e) if e.kind() == io::ErrorKind::Other || e.kind() == io::ErrorKind::InvalidData => {
            Some(Incomplete::Decompress(e.to_string()))
        }
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Some(Incomplete::Decompress(
            "the zstd stream ends in the middle of a frame (truncated file)".into(),
        )),
        Err(e) => return Err(e),
    };
    let uncompressed = incomplete
        .is_none()
        .then(|| (data.len() as u64, hasher.checksum()));
    if incomplete.is_some() {
        data.clear();
    }
    Ok(Loaded {
        data: ShardBytes::owned(data),
        stored_len,
        stored_sum,
        uncompressed,
        incomplete,
    })
}

/// Maps a plain shard and hashes it.
pub(crate) fn load_mapped(path: &Path) -> io::Result<Loaded> {
    let file = shardtool_core::open_regular(path)?;
    // SAFETY: `--mmap` is opt-in for datasets nobody modifies while they are checked; shards are
    // published write-once (see `shardtool_core::map_readonly`).
    #[allow(unsafe_code)]
    let map = unsafe { shardtool_core::map_readonly(&file) }?;
    let _ = map.advise(memmap2::Advice::Sequential);
    let data = ShardBytes::Mapped(map);
    Ok(Loaded {
        stored_len: data.len() as u64,
        stored_sum: Checksum::of(&data),
        data,
        uncompressed: None,
        incomplete: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn plain_reads_hash_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.tar");
        let d = data(3 * CHUNK as usize + 17);
        std::fs::write(&p, &d).unwrap();
        let pool = BufferPool::default();
        let l = load_plain(&p, u64::MAX, &pool).unwrap();
        assert_eq!(&l.data[..], &d[..]);
        assert_eq!(l.stored_len, d.len() as u64);
        assert_eq!(l.stored_sum, Checksum::of(&d));
        assert!(l.incomplete.is_none());
        pool.give(l.data);
        let l = load_plain(&p, 100, &pool).unwrap();
        assert!(l.data.is_empty());
        assert_eq!(l.stored_sum, Checksum::of(&d), "hashed even when too large");
        let m = load_mapped(&p).unwrap();
        assert!(matches!(m.data, ShardBytes::Mapped(_)));
        assert_eq!(&m.data[..], &d[..]);
        assert_eq!(m.stored_sum, Checksum::of(&d));
        std::fs::write(&p, b"").unwrap();
        assert!(load_mapped(&p).unwrap().data.is_empty());
        assert_eq!(l.incomplete, Some(Incomplete::TooLarge { limit: 100 }));
    }

    #[test]
    fn packed_shards_are_read_for_their_checks_without_keeping_pixels() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.safetensors");
        let mut w = shardtool_packed::PackedWriter::new(shardtool_packed::Mode::Auto);
        for (i, (h, wd)) in [(300u32, 200u32), (150, 401)].into_iter().enumerate() {
            let px = data((h * wd * 3) as usize);
            w.add(
                &format!("k{i}"),
                i as i64,
                h,
                wd,
                &px,
                serde_json::Value::Null,
            )
            .unwrap();
        }
        let mut bytes = Vec::new();
        w.finish(&mut bytes).unwrap();
        std::fs::write(&p, &bytes).unwrap();
        let l = load_packed_checks(&p, u64::MAX).unwrap().unwrap();
        assert_eq!(l.stored_sum, Checksum::of(&bytes), "every byte hashed");
        assert_eq!(l.stored_len, bytes.len() as u64);
        let span = shardtool_packed::pixel_span(&bytes).unwrap();
        let (b, e) = (span.start as usize, span.end as usize);
        assert!(e - b > 2 * STREAM_BUFFER, "the pixels take several reads");
        assert_eq!(&l.data[..b], &bytes[..b]);
        assert_eq!(&l.data[e..], &bytes[e..]);
        assert!(l.data[b..e].iter().all(|&x| x == 0), "pixels not kept");
        let shard = shardtool_packed::PackedShard::open(&l.data[..]).unwrap();
        assert_eq!((shard.len(), shard.record(1).key), (2, "k1"));
        // Over the limit, not a packed file, or cut inside the pixels: the caller reads it
        // whole. (A file cut after them is read and hashed: its checksum then differs.)
        assert!(load_packed_checks(&p, 100).unwrap().is_none());
        std::fs::write(&p, &bytes[..b + 10]).unwrap();
        assert!(load_packed_checks(&p, u64::MAX).unwrap().is_none());
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        let cut = load_packed_checks(&p, u64::MAX).unwrap().unwrap();
        assert_eq!(cut.stored_sum, Checksum::of(&bytes[..bytes.len() - 1]));
        std::fs::write(&p, data(10_000)).unwrap();
        assert!(load_packed_checks(&p, u64::MAX).unwrap().is_none());
    }

    fn zst(d: &[u8]) -> Vec<u8> {
        zstd::encode_all(d, 3).unwrap()
    }

    #[test]
    fn zstd_reads_hash_both_sides_and_respect_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.tar.zst");
        let d = data(2 * CHUNK as usize + 5);
        let z = zst(&d);
        std::fs::write(&p, &z).unwrap();
        let pool = BufferPool::default();
        let l = load_zstd(&p, Some(d.len() as u64), u64::MAX, &pool).unwrap();
        assert_eq!(&l.data[..], &d[..]);
        assert_eq!(l.stored_sum, Checksum::of(&z));
        assert_eq!(l.uncompressed, Some((d.len() as u64, Checksum::of(&d))));
        // The manifest understates the size: stop one byte past it, still hash the whole file.
        let l = load_zstd(&p, Some(1000), u64::MAX, &pool).unwrap();
        assert_eq!(l.incomplete, Some(Incomplete::OverCap { cap: 1000 }));
        assert_eq!(l.stored_sum, Checksum::of(&z));
        assert_eq!(l.stored_len, z.len() as u64);
        // No declared size: the limit caps it.
        let l = load_zstd(&p, None, 4096, &pool).unwrap();
        assert_eq!(l.incomplete, Some(Incomplete::TooLarge { limit: 4096 }));
    }

    #[test]
    fn corrupt_and_truncated_zstd_are_reported_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.tar.zst");
        let d = data(100_000);
        let z = zst(&d);
        std::fs::write(&p, &z[..z.len() / 2]).unwrap();
        let pool = BufferPool::default();
        let l = load_zstd(&p, Some(d.len() as u64), u64::MAX, &pool).unwrap();
        assert!(
            matches!(l.incomplete, Some(Incomplete::Decompress(_))),
            "{:?}",
            l.incomplete
        );
        assert_eq!(l.stored_sum, Checksum::of(&z[..z.len() / 2]));
        let mut f = File::create(&p).unwrap();
        f.write_all(&z).unwrap();
        f.write_all(b"garbage after the frame").unwrap();
        drop(f);
        let l = load_zstd(&p, Some(d.len() as u64), u64::MAX, &pool).unwrap();
        assert!(matches!(l.incomplete, Some(Incomplete::Decompress(_))));
        std::fs::write(&p, b"").unwrap();
        let l = load_zstd(&p, Some(d.len() as u64), u64::MAX, &pool).unwrap();
        assert_eq!(l.stored_len, 0);
        assert!(matches!(l.incomplete, Some(Incomplete::Decompress(_))));
    }
}
