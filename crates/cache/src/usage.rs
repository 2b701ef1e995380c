//! The cache folder's running count of cached bytes and each process's queue of eviction
//! candidates, so that a download under a byte limit reads one small record instead of listing
//! every cached shard of every dataset.
//!
//! The count lives in `evict.lock` itself and is read and written only under its lock. Every
//! process that publishes or removes a shard adjusts it; a full listing sets it again when it
//! is older than [`RESCAN_AFTER`], when it cannot be read (a new folder, a torn write after a
//! power cut, a folder an older build used), and when the queue runs out of candidates. So a
//! count left wrong by a process killed between publishing and counting, or by files deleted
//! by hand, lasts at most that long.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, SystemTime};

/// How old the count may grow before the next reservation lists the folder again.
pub(crate) const RESCAN_AFTER: Duration = Duration::from_secs(60);

/// The most eviction candidates a process keeps between listings (oldest use first).
const QUEUE_LEN: usize = 1024;

const HEAD: &str = "shardtool cache usage v1 bytes ";

/// The count read from `evict.lock`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Usage {
    /// Bytes of shard files the cache holds.
    pub bytes: u64,
    /// When a listing last set it, in seconds since the epoch.
    pub listed: u64,
}

impl Usage {
    /// Whether it is too old to trust without a listing.
    pub fn is_stale(&self, now: u64) -> bool {
        now.saturating_sub(self.listed) >= RESCAN_AFTER.as_secs() || self.listed > now
    }
}

/// Seconds since the epoch, now.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads the count from the locked `evict.lock`; `None` when there is none or it is damaged.
pub(crate) fn read(lock: &File) -> Option<Usage> {
    let mut buf = [0u8; 128];
    let n = lock.read_at(&mut buf, 0).ok()?;
    // The first line only: what follows it (another version's longer record, a note) is cut
    // off by the next write.
    let line = buf[..n].split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    // The record ends in " end": a write cut short is never read as a smaller count.
    let rest = text.strip_prefix(HEAD)?.strip_suffix(" end")?;
    let (bytes, listed) = rest.split_once(" listed ")?;
    Some(Usage {
        bytes: bytes.parse().ok()?,
        listed: listed.parse().ok()?,
    })
}

/// Writes the count into the locked `evict.lock`, in place and of a fixed length. It is not
/// synced: after a power cut it is either whole or unreadable, and unreadable means a listing.
pub(crate) fn write(lock: &File, usage: Usage) {
    let text = format!(
        "{HEAD}{:020} listed {:020} end\n",
        usage.bytes, usage.listed
    );
    if lock.write_all_at(text.as_bytes(), 0).is_ok() {
        // Anything past the record would make the file unreadable as one.
        let _ = lock.set_len(text.len() as u64);
    }
}

/// Marks the count as needing a listing.
pub(crate) fn invalidate(lock: &File) {
    write(
        lock,
        Usage {
            bytes: 0,
            listed: 0,
        },
    );
}

/// Adds `delta` bytes (negative: removes) to a count that is there; one that is not is left
/// for the next listing.
pub(crate) fn adjust(lock: &File, delta: i64) {
    if let Some(u) = read(lock) {
        write(
            lock,
            Usage {
                bytes: u.bytes.saturating_add_signed(delta),
                ..u
            },
        );
    }
}

/// An eviction candidate: a cached shard as a listing saw it.
pub(crate) struct Candidate {
    /// The dataset folder holding it.
    pub dataset: PathBuf,
    /// Its file name under `shards/`.
    pub name: String,
    /// Its size when listed.
    pub bytes: u64,
    /// Its last use when listed (its stamp's modification time).
    pub used: SystemTime,
}

impl Candidate {
    /// Whether the shard is still as listed: not used, replaced or removed since. One that
    /// changed is dropped from the queue; the next listing places it again.
    pub fn unchanged(&self) -> bool {
        let p = crate::dir::CacheDir::shard_paths(&self.dataset, &self.name);
        let Ok(md) = fs::symlink_metadata(&p.data) else {
            return false;
        };
        md.is_file() && md.len() == self.bytes && last_use(&p.meta, &md) == self.used
    }
}

/// A shard's last use: its stamp's modification time, else its own.
pub(crate) fn last_use(meta: &Path, data: &fs::Metadata) -> SystemTime {
    fs::metadata(meta)
        .and_then(|m| m.modified())
        .or_else(|_| data.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Each cache folder's candidates left over from this process's last listing.
type Queues = Option<HashMap<PathBuf, VecDeque<Candidate>>>;
static QUEUES: Mutex<Queues> = Mutex::new(None);

/// The queues, unless busy. Callers hold the eviction lock, which no two threads hold at once,
/// so they are never busy, unless this process was forked while another thread of its parent
/// held them: that copy stays locked for good, and every reservation lists the folder (slower,
/// still right).
fn queues() -> Option<MutexGuard<'static, Queues>> {
    match QUEUES.try_lock() {
        Ok(all) => Some(all),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Takes this process's queue of the cache folder `root` (empty when there is none).
pub(crate) fn take_queue(root: &Path) -> VecDeque<Candidate> {
    queues()
        .and_then(|mut all| all.get_or_insert_with(Default::default).remove(root))
        .unwrap_or_default()
}

/// Keeps the oldest [`QUEUE_LEN`] of `queue` as the queue of the cache folder `root`.
pub(crate) fn keep_queue(root: &Path, mut queue: VecDeque<Candidate>) {
    queue.truncate(QUEUE_LEN);
    if let Some(mut all) = queues() {
        all.get_or_insert_with(Default::default)
            .insert(root.to_path_buf(), queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_survives_a_round_trip_and_a_cut_short_record_is_not_read() {
        let t = tempfile::tempdir().unwrap();
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(t.path().join("evict.lock"))
            .unwrap();
        assert_eq!(read(&f), None, "an empty lock file holds no count");
        let u = Usage {
            bytes: 12_345_678_901,
            listed: 1_800_000_000,
        };
        write(&f, u);
        assert_eq!(read(&f), Some(u));
        adjust(&f, -1);
        assert_eq!(read(&f).unwrap().bytes, 12_345_678_900);
        adjust(&f, i64::MIN);
        assert_eq!(read(&f).unwrap().bytes, 0, "never below zero");
        let len = fs::metadata(t.path().join("evict.lock")).unwrap().len();
        f.set_len(len - 3).unwrap();
        assert_eq!(read(&f), None, "a record without its end is not trusted");
        // Bytes past a record (a longer one of another version, a note): unreadable only until
        // the next write, which cuts them off.
        write(&f, u);
        f.write_all_at(b"\nleft by someone else, longer than a record", len)
            .unwrap();
        assert_eq!(read(&f), Some(u), "the first line is the record");
        f.write_all_at(b"garbage", 0).unwrap();
        assert_eq!(read(&f), None);
        write(&f, u);
        assert_eq!(read(&f), Some(u));
        assert_eq!(
            fs::metadata(t.path().join("evict.lock")).unwrap().len(),
            len
        );
        invalidate(&f);
        assert!(read(&f).unwrap().is_stale(now_secs()));
        assert!(!Usage {
            bytes: 0,
            listed: now_secs()
        }
        .is_stale(now_secs()));
    }

    /// Bytes of the shard files under `dataset`.
    fn du(dataset: &Path) -> u64 {
        fs::read_dir(dataset.join("shards"))
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum()
    }

    #[test]
    fn eviction_follows_the_count_and_a_count_gone_wrong_is_listed_again() {
        use crate::dir::CacheDir;
        let t = tempfile::tempdir().unwrap();
        let cache = CacheDir::open(t.path().join("c"), Some(1000)).unwrap();
        let d = cache.dataset_dir("https://h/d/").unwrap();
        let then = SystemTime::now() - Duration::from_secs(3600);
        let put = |i: u64, counted: bool| {
            let p = CacheDir::shard_paths(&d, &format!("s{i}.tar"));
            fs::write(&p.data, [0u8; 100]).unwrap();
            CacheDir::stamp(&p, 100, shardtool_core::Checksum(0)).unwrap();
            let meta = fs::OpenOptions::new().append(true).open(&p.meta).unwrap();
            meta.set_modified(then + Duration::from_secs(i)).unwrap();
            if counted {
                cache.account(100, true).unwrap();
            }
        };
        let gone = |i: u64| !d.join(format!("shards/s{i}.tar")).exists();
        let fetch = |i: u64, counted: bool| {
            let (r, evicted) = cache.reserve(100).unwrap();
            put(i, counted);
            drop(r);
            evicted
        };
        for i in 0..10 {
            assert_eq!(fetch(i, true), 0, "shard {i} fits");
        }
        assert_eq!(fetch(10, true), 1);
        assert!(gone(0), "the least recently used goes first");
        // Used since the listing: spared, the next oldest goes.
        CacheDir::touch(&CacheDir::shard_paths(&d, "s1.tar"), SystemTime::now());
        assert_eq!(fetch(11, true), 1);
        assert!(!gone(1) && gone(2));
        assert_eq!(du(&d), 1000);
        // Two shards published and never counted (their process killed in between): the count
        // is short, so the cache runs over its limit until the count is listed again.
        put(12, false);
        put(13, false);
        assert_eq!(fetch(14, true), 1);
        assert_eq!(du(&d), 1200);
        let lock = crate::dir::open_lock(&cache.root().join("evict.lock")).unwrap();
        let u = read(&lock).unwrap();
        assert_eq!(u.bytes, 1000, "the count missed the uncounted shards");
        write(
            &lock,
            Usage {
                listed: now_secs() - RESCAN_AFTER.as_secs(),
                ..u
            },
        );
        assert_eq!(fetch(15, true), 3, "a stale count is listed again");
        assert_eq!(du(&d), 1000);
        assert_eq!(read(&lock).unwrap().bytes, 1000);
        // Cleared: every later reservation lists the folder first.
        cache.clear(None).unwrap();
        assert!(read(&lock).unwrap().is_stale(now_secs()));
        assert_eq!(fetch(16, true), 0);
        assert_eq!(read(&lock).unwrap().bytes, 100);
        // The queues locked for good, as in a child forked while a thread of its parent held
        // them (this test holds them, so no other test may): every reservation lists instead.
        for i in 17..26 {
            fetch(i, true);
        }
        assert_eq!(du(&d), 1000);
        let held = QUEUES.lock().unwrap();
        assert_eq!(fetch(26, true), 1);
        assert_eq!(fetch(27, true), 1);
        drop(held);
        assert_eq!(du(&d), 1000);
        assert!(gone(16) && gone(17) && !gone(18));
    }

    #[test]
    fn a_shard_fetched_ahead_goes_after_every_shard_already_read() {
        use crate::dir::{CacheDir, AHEAD_GRACE};
        let t = tempfile::tempdir().unwrap();
        let cache = CacheDir::open(t.path().join("c"), Some(300)).unwrap();
        let d = cache.dataset_dir("https://h/d/").unwrap();
        let then = SystemTime::now() - Duration::from_secs(3600);
        for i in 0..3u64 {
            let (r, _) = cache.reserve(100).unwrap();
            let p = CacheDir::shard_paths(&d, &format!("s{i}.tar"));
            fs::write(&p.data, [0u8; 100]).unwrap();
            cache.account(100, true).unwrap();
            CacheDir::stamp(&p, 100, shardtool_core::Checksum(0)).unwrap();
            CacheDir::touch(&p, then + Duration::from_secs(i));
            drop(r);
        }
        // s0, the oldest, was fetched ahead by a prefetcher and not read yet.
        CacheDir::touch(
            &CacheDir::shard_paths(&d, "s0.tar"),
            SystemTime::now() + AHEAD_GRACE,
        );
        let gone = |i: u64| !d.join(format!("shards/s{i}.tar")).exists();
        let (_r, evicted) = cache.reserve(100).unwrap();
        assert_eq!(evicted, 1);
        assert!(
            !gone(0) && gone(1) && !gone(2),
            "the read shard s1 goes first"
        );
    }
}
