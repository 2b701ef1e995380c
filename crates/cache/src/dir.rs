//! The cache directory on local disk: layout, per-shard locks, validity stamps, byte
//! reservations for downloads in flight, least-recently-used eviction, listing and clearing.
//!
//! ```text
//! <root>/CACHEDIR.TAG          marks the folder as ours; nothing is deleted without it
//! <root>/evict.lock            serialises space accounting and eviction across processes, and
//!                              holds the count of cached bytes (see `usage`)
//! <root>/reserve/<pid>.<start>-<n>  bytes promised to a download in flight, locked by its
//!                              process while it lives
//! <root>/<dataset id>/source   the dataset's folder URL
//! <root>/<dataset id>/shards/  published shards (decompressed)
//! <root>/<dataset id>/meta/    per-shard stamp {bytes, checksum, mtime, inode}; its mtime is the LRU clock
//! <root>/<dataset id>/locks/   per-shard lock files: shared while in use, exclusive to fetch or evict
//! <root>/<dataset id>/tmp/     downloads in flight
//! ```
// Parts of this module serve only the fetching side (`remote`).
#![cfg_attr(not(feature = "remote"), allow(dead_code))]

use crate::usage::{self, Candidate};
use crate::CacheError;
use serde::{Deserialize, Serialize};
use shardtool_core::{AtomicFile, Checksum};
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

const TAG: &str = "CACHEDIR.TAG";
/// Prefix of the tag's temporary name while it is being written.
const TAG_TMP: &str = ".shardtool-tag.";
const TAG_TEXT: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file marks a shardtool shard cache (https://bford.info/cachedir/).\n\
# `shardtool cache clear` deletes what is under this folder.\n";

/// The default cache folder: `$SHARDTOOL_CACHE_DIR`, else `$XDG_CACHE_HOME/shardtool`, else
/// `~/.cache/shardtool`, else `$TMPDIR/shardtool-cache-<uid>` (one per user: a shared name
/// would be its first user's alone).
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SHARDTOOL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("shardtool");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache").join("shardtool");
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)] // the user names the fallback folder; std has no safe geteuid
    let uid = unsafe { libc::geteuid() };
    // An empty or relative TMPDIR would put it in the working folder.
    let tmp = Some(std::env::temp_dir()).filter(|t| t.is_absolute());
    tmp.unwrap_or_else(|| PathBuf::from("/tmp"))
        .join(format!("shardtool-cache-{uid}"))
}

/// A cache folder shared by every process on the node.
#[derive(Debug, Clone)]
pub struct CacheDir {
    root: PathBuf,
    limit: Option<u64>,
}

/// One dataset's part of a cache folder.
#[derive(Debug, Clone, Serialize)]
pub struct CachedDataset {
    /// Its folder in the cache.
    pub dir: PathBuf,
    /// The remote folder it mirrors.
    pub source: String,
    /// Shards held.
    pub shards: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Most recent use, as seconds since the epoch.
    pub last_used: u64,
}

/// What `clear` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClearReport {
    /// Shard files deleted.
    pub removed: u64,
    /// Bytes freed.
    pub bytes: u64,
    /// Shards kept because a process is using them.
    pub in_use: Vec<String>,
}

/// What the cache holds about one shard file.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Stamp {
    bytes: u64,
    checksum: String,
    mtime_ns: i128,
    inode: u64,
}

/// A shard's files in one dataset folder.
pub(crate) struct ShardPaths {
    pub data: PathBuf,
    pub meta: PathBuf,
    pub lock: PathBuf,
}

/// Bytes promised to a download; released on drop. Its file stays locked while it lives: a
/// reservation file nobody holds locked is a dead process's, whatever PID namespace (container)
/// made it.
pub(crate) struct Reservation(Option<(PathBuf, Locked)>);

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((p, _lock)) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// This process's mark in the names of the files it makes in a cache folder: its PID and its
/// start time, so that processes of two containers with the same PID (each one's PID 1) never
/// take or remove each other's files.
fn process_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        format!("{}.{nanos:x}", std::process::id())
    })
}

static RESERVATIONS: AtomicU64 = AtomicU64::new(0);

/// Readers of this process that were stopped but whose threads have not ended yet (one stuck in
/// a slow fetch ends at its timeout): the room they hold will be released, so is waited for.
static STOPPING: AtomicUsize = AtomicUsize::new(0);

/// A reader of this process being stopped, until dropped (see [`stopping`]).
pub struct Stopping(());

/// Marks a reader of this process as stopping until the guard is dropped, once its threads have
/// ended: meanwhile a reservation that finds the cache full waits for the room this process
/// holds too, as it does for other processes' (a reader started right after another was closed
/// would otherwise fail "too small" on the room the old one's last fetch still holds).
pub fn stopping() -> Stopping {
    STOPPING.fetch_add(1, Ordering::SeqCst);
    Stopping(())
}

impl Drop for Stopping {
    fn drop(&mut self) {
        STOPPING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Shards this process holds (leases with a shared lock), with how many leases each: a full
/// cache waits for room only when other processes hold what fills it.
static HELD_HERE: std::sync::Mutex<Option<std::collections::HashMap<PathBuf, usize>>> =
    std::sync::Mutex::new(None);

/// Records that this process took (`true`) or dropped a lease on `path`.
pub(crate) fn held_here(path: &Path, taken: bool) {
    let mut map = HELD_HERE.lock().unwrap_or_else(|p| p.into_inner());
    let map = map.get_or_insert_with(Default::default);
    if taken {
        *map.entry(path.to_path_buf()).or_insert(0) += 1;
    } else if let Some(n) = map.get_mut(path) {
        *n -= 1;
        if *n == 0 {
            map.remove(path);
        }
    }
}

fn is_held_here(path: &Path) -> bool {
    let map = HELD_HERE.lock().unwrap_or_else(|p| p.into_inner());
    map.as_ref().is_some_and(|m| m.contains_key(path))
}

/// How far ahead a prefetched shard's last use is set: it goes after every shard already read
/// in the eviction order, for this long if it is never read.
pub(crate) const AHEAD_GRACE: Duration = Duration::from_secs(600);

/// The longest a download waits for other processes to release room in a full cache.
pub(crate) const ROOM_WAIT: Duration = Duration::from_secs(120);

impl CacheDir {
    /// Opens (creating if needed) a cache folder. `limit` caps the bytes of shards it holds.
    ///
    /// An existing non-empty folder without our tag is refused, so a mistyped `--cache-dir`
    /// can never make eviction or `clear` delete someone's data.
    pub fn open(root: impl Into<PathBuf>, limit: Option<u64>) -> Result<Self, CacheError> {
        let root = root.into();
        Self::make(&root, limit).map_err(|e| match e {
            CacheError::Io { cause, .. } => CacheError::Unusable { path: root, cause },
            e => e,
        })
    }

    fn make(root: &Path, limit: Option<u64>) -> Result<Self, CacheError> {
        // Absolute: paths under it are handed out (leases, views linking to shards) and must
        // not depend on the working directory.
        let root = std::path::absolute(root).map_err(CacheError::io(root))?;
        let tag = root.join(TAG);
        if !tag.exists() {
            // Only our own tag being written by a racing process may be there already.
            let empty = match fs::read_dir(&root) {
                Ok(it) => it
                    .flatten()
                    .all(|e| e.file_name().to_string_lossy().starts_with(TAG_TMP)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                Err(e) => return Err(CacheError::io(&root)(e)),
            };
            // A racing opener may have committed the tag (and made more) between the first look
            // and the listing; it always writes the tag first, so a second look settles it.
            if !empty && !tag.is_file() {
                return Err(CacheError::NotACache { path: root });
            }
            if empty {
                // Private to the user: cached shards of one user are not another's to read or swap.
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&root)
                    .map_err(CacheError::io(&root))?;
                let n = RESERVATIONS.fetch_add(1, Ordering::Relaxed);
                // The temporary name starts with TAG_TMP, which the emptiness check above
                // allows, so processes creating one cache at once do not refuse each other's.
                let tmp = root.join(format!("{TAG_TMP}{}.{n}", process_token()));
                let mut f =
                    AtomicFile::create_at(tmp.clone(), &tag).map_err(CacheError::io(&tmp))?;
                f.write_all(TAG_TEXT.as_bytes())
                    .and_then(|()| f.commit())
                    .map_err(CacheError::io(&tag))?;
            }
        }
        check_owner(&root)?;
        let reserve = root.join("reserve");
        fs::create_dir_all(&reserve).map_err(CacheError::io(&reserve))?;
        // A folder that can be read but not written (a read-only mount holding a warm cache)
        // is refused here, not at the first shard lock.
        // Hidden, as a reservation being written: others' reservation counts skip it.
        let probe = reserve.join(format!(
            ".probe.{}.{}",
            process_token(),
            RESERVATIONS.fetch_add(1, Ordering::Relaxed)
        ));
        fs::File::create(&probe).map_err(CacheError::io(&reserve))?;
        let _ = fs::remove_file(&probe);
        Ok(Self { root, limit })
    }

    /// Opens an existing cache folder for listing or clearing; never creates one.
    pub fn existing(root: impl Into<PathBuf>) -> Result<Self, CacheError> {
        let root = root.into();
        if !root.join(TAG).is_file() {
            return Err(CacheError::NotACache { path: root });
        }
        check_owner(&root)?;
        Ok(Self { root, limit: None })
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The byte limit, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The folder of the dataset whose remote folder is `source`: a readable name plus a hash
    /// of the full URL, so two datasets never share a folder.
    pub(crate) fn dataset_dir(&self, source: &str) -> Result<PathBuf, CacheError> {
        let readable: String = source
            .split("://")
            .nth(1)
            .unwrap_or(source)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let readable = readable.trim_matches('_');
        let readable = &readable[..readable.len().min(60)];
        let id = format!("{readable}-{:016x}", Checksum::of(source.as_bytes()).0);
        let dir = self.root.join(id);
        for sub in ["shards", "meta", "locks", "tmp"] {
            fs::create_dir_all(dir.join(sub)).map_err(CacheError::io(dir.join(sub)))?;
        }
        let src = dir.join("source");
        if !src.exists() {
            write_atomic(&src, source.as_bytes())?;
        }
        // Files not named as downloads go only once untouched for ten minutes too, so one of a
        // process this one cannot see (another PID namespace) is spared.
        remove_stale_downloads(&dir.join("tmp"), std::time::Duration::from_secs(600));
        stale::remove_stale_temps(&dir, stale::STALE_TEMP);
        Ok(dir)
    }

    pub(crate) fn shard_paths(dataset: &Path, name: &str) -> ShardPaths {
        ShardPaths {
            data: dataset.join("shards").join(name),
            meta: dataset.join("meta").join(format!("{name}.json")),
            lock: dataset.join("locks").join(format!("{name}.lock")),
        }
    }

    /// Whether the cached file is whole: size and stamp match, or, when the stamp is missing or
    /// stale (file replaced, touched or copied), a full checksum matches. A damaged file is
    /// never served.
    pub(crate) fn is_whole(p: &ShardPaths, bytes: u64, sum: Checksum) -> Result<bool, CacheError> {
        Self::whole(p, bytes, sum, true)
    }

    /// [`CacheDir::is_whole`], the stamp trusted only when `trust_stamp`: otherwise the file is
    /// hashed whatever its stamp says (bytes damaged in place, the size and time kept).
    pub(crate) fn whole(
        p: &ShardPaths,
        bytes: u64,
        sum: Checksum,
        trust_stamp: bool,
    ) -> Result<bool, CacheError> {
        let md = match fs::metadata(&p.data) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(CacheError::io(&p.data)(e)),
        };
        if md.len() != bytes {
            return Ok(false);
        }
        let now = stamp_of(&md, bytes, sum);
        // A stamp is a few hundred bytes: a FIFO or device there is no stamp, never waited on.
        let stamp = || shardtool_core::read_regular_within(&p.meta, 64 << 10);
        if let (true, Ok(text)) = (trust_stamp, stamp()) {
            if serde_json::from_slice::<Stamp>(&text).ok().as_ref() == Some(&now) {
                return Ok(true);
            }
        }
        if hash_file(&p.data)? != sum {
            return Ok(false);
        }
        write_stamp(&p.meta, &serde_json::to_vec(&now).unwrap_or_default())?;
        Ok(true)
    }

    /// Whether the cached file looks whole by its size and stamp alone, hashing and writing
    /// nothing: for a waiter polling, without the shard's lock, whether another process has
    /// published it (the caller then checks it properly under a shared lock).
    pub(crate) fn looks_whole(p: &ShardPaths, bytes: u64, sum: Checksum) -> bool {
        let Ok(md) = fs::metadata(&p.data) else {
            return false;
        };
        md.len() == bytes
            && shardtool_core::read_regular_within(&p.meta, 64 << 10)
                .ok()
                .and_then(|text| serde_json::from_slice::<Stamp>(&text).ok())
                == Some(stamp_of(&md, bytes, sum))
    }

    /// Records a freshly published, already checked file.
    pub(crate) fn stamp(p: &ShardPaths, bytes: u64, sum: Checksum) -> Result<(), CacheError> {
        let md = fs::metadata(&p.data).map_err(CacheError::io(&p.data))?;
        write_stamp(
            &p.meta,
            &serde_json::to_vec(&stamp_of(&md, bytes, sum)).unwrap_or_default(),
        )
    }

    /// Marks a shard as used at `when` (the LRU clock is its stamp's mtime).
    pub(crate) fn touch(p: &ShardPaths, when: SystemTime) {
        if let Ok(f) = OpenOptions::new().append(true).open(&p.meta) {
            let _ = f.set_modified(when);
        }
    }

    /// Promises `need` bytes to a download, evicting least-recently-used shards that nobody
    /// holds until the cache fits under its limit. Returns how many shards were evicted.
    ///
    /// When the room is taken by shards in use or downloads in flight, which their processes
    /// release as they move on, it waits for room (polling with backoff) for at most
    /// [`ROOM_WAIT`]; when nothing will be released, or the wait runs out, it fails with the
    /// bytes held and in use.
    #[cfg(test)]
    pub(crate) fn reserve(&self, need: u64) -> Result<(Reservation, u64), CacheError> {
        self.reserve_unless(need, &|| false)
            .map(|r| r.expect("never stopped"))
    }

    /// [`CacheDir::reserve`], its wait for room ended (`Ok(None)`) once `stopped` says so: a
    /// reader being closed does not wait for other processes to make room.
    pub(crate) fn reserve_unless(
        &self,
        need: u64,
        stopped: &dyn Fn() -> bool,
    ) -> Result<Option<(Reservation, u64)>, CacheError> {
        let Some(limit) = self.limit else {
            return Ok(Some((Reservation(None), 0)));
        };
        let deadline = std::time::Instant::now() + ROOM_WAIT;
        let mut pause = Duration::from_millis(5);
        let mut evicted = 0;
        loop {
            match self.try_reserve(need, limit, &mut evicted)? {
                Ok(r) => return Ok(Some((r, evicted))),
                Err((used, in_use, reserved, others)) => {
                    // Only room that other processes, or readers of this one being stopped,
                    // hold will be released while we wait.
                    let others_release = others > 0 || STOPPING.load(Ordering::SeqCst) > 0;
                    if !others_release || std::time::Instant::now() >= deadline {
                        return Err(CacheError::TooSmall {
                            limit,
                            message: format!(
                                "a shard of {need} bytes does not fit: {used} bytes are held, {in_use} of them by \
                                 shards in use and {reserved} by downloads in flight{} (raise --cache-limit, or \
                                 hold fewer shards at once: a reader with a smaller shuffle buffer, prefetch \
                                 or interleave, or fewer workers (a saved position resumes only with its \
                                 buffer and interleave); verify or inspect with fewer --jobs and \
                                 --fetch-concurrency)",
                                if others_release {
                                    format!(
                                        ", {others} of those by other processes reading from this cache, \
                                         still after waiting {ROOM_WAIT:?} for room: processes sharing a cache \
                                         folder share its limit, which must hold the shards each keeps open"
                                    )
                                } else {
                                    String::new()
                                }
                            ),
                        });
                    }
                    if stopped() {
                        return Ok(None);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
            }
        }
    }

    /// One attempt of [`CacheDir::reserve`] under the eviction lock: the reservation, or the
    /// bytes held, held by shards in use, promised to downloads in flight, and the part of the
    /// last two that other processes hold.
    #[allow(clippy::type_complexity)] // Ok(reservation) or Err of four byte counts, used once.
    fn try_reserve(
        &self,
        need: u64,
        limit: u64,
        evicted: &mut u64,
    ) -> Result<Result<Reservation, (u64, u64, u64, u64)>, CacheError> {
        let lock = self.evict_lock()?;
        let (reserved, reserved_by_others) = self.reserved_bytes()?;
        let now = usage::now_secs();
        // Oldest use first: what this process's last listing left, else a new listing.
        let (mut cached, mut listed, mut listed_at, mut queue) = match usage::read(&lock) {
            Some(u) if !u.is_stale(now) => {
                (u.bytes, false, u.listed, usage::take_queue(&self.root))
            }
            _ => {
                let (total, all) = self.list_for_eviction()?;
                (total, true, now, all)
            }
        };
        loop {
            let (mut in_use, mut others) = (0u64, reserved_by_others);
            let mut kept = Vec::new();
            while reserved + cached + need > limit {
                let Some(c) = queue.pop_front() else { break };
                if !listed && !c.unchanged() {
                    continue;
                }
                match c.remove() {
                    Removed::Yes => {
                        cached = cached.saturating_sub(c.bytes);
                        *evicted += 1;
                    }
                    Removed::InUse => {
                        in_use += c.bytes;
                        if !is_held_here(&c.paths().data) {
                            others += c.bytes;
                        }
                        kept.push(c);
                    }
                    Removed::No => {}
                }
            }
            // Shards in use stay first in line: they are the oldest, and will be released.
            for c in kept.into_iter().rev() {
                queue.push_front(c);
            }
            usage::write(
                &lock,
                usage::Usage {
                    bytes: cached,
                    listed: listed_at,
                },
            );
            let fits = reserved + cached + need <= limit;
            if fits || listed {
                usage::keep_queue(&self.root, queue);
            }
            if fits {
                break;
            }
            if listed {
                return Ok(Err((reserved + cached, in_use, reserved, others)));
            }
            // The queue ran dry: shards published since the last listing, or a count gone wrong.
            (cached, queue) = self.list_for_eviction()?;
            (listed, listed_at) = (true, now);
        }
        let n = RESERVATIONS.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root
            .join("reserve")
            .join(format!("{}-{n}", process_token()));
        write_atomic(&path, need.to_string().as_bytes())?;
        // Locked before the eviction lock is let go, so no one sees it unlocked (dead).
        let lock = open_lock(&path)?;
        lock.lock().map_err(CacheError::io(&path))?;
        Ok(Ok(Reservation(Some((path, Locked::new(lock))))))
    }

    /// The eviction lock, taken: it serialises space accounting across processes and holds the
    /// count of cached bytes (see [`usage`]).
    fn evict_lock(&self) -> Result<Locked, CacheError> {
        let lock_path = self.root.join("evict.lock");
        let lock = open_lock(&lock_path)?;
        lock.lock().map_err(CacheError::io(&lock_path))?;
        Ok(Locked::new(lock))
    }

    /// Lists every cached shard (the caller holds the eviction lock): their bytes, and the
    /// shards as eviction candidates, oldest use first.
    fn list_for_eviction(&self) -> Result<(u64, VecDeque<Candidate>), CacheError> {
        let mut shards = self.all_shards()?;
        shards.sort_by_key(|s| s.used);
        let total = shards.iter().map(|s| s.bytes).sum();
        Ok((total, shards.into()))
    }

    /// Publishes a shard file of `bytes` by `commit` (its rename into `shards/`), counts it and
    /// releases the room `reservation` promised its download, all under the eviction lock: no
    /// listing or reservation sees it uncounted, or counted twice (as cached and as promised).
    pub(crate) fn publish(
        &self,
        bytes: u64,
        reservation: Reservation,
        commit: impl FnOnce() -> Result<(), CacheError>,
    ) -> Result<(), CacheError> {
        let lock = self.evict_lock()?;
        commit()?;
        usage::adjust(&lock, i64::try_from(bytes).unwrap_or(i64::MAX));
        drop(reservation);
        Ok(())
    }

    /// Removes a shard that is not served (damaged, another version) and uncounts it, under the
    /// eviction lock; the caller holds the shard's own lock.
    pub(crate) fn remove_counted(&self, p: &ShardPaths) -> Result<(), CacheError> {
        let lock = self.evict_lock()?;
        let bytes = fs::symlink_metadata(&p.data)
            .ok()
            .filter(fs::Metadata::is_file)
            .map_or(0, |m| m.len());
        let _ = fs::remove_file(&p.meta);
        fs::remove_file(&p.data).map_err(CacheError::io(&p.data))?;
        usage::adjust(&lock, -i64::try_from(bytes).unwrap_or(i64::MAX));
        Ok(())
    }

    /// Counts `bytes` of shard files published by hand (tests).
    #[cfg(test)]
    pub(crate) fn account(&self, bytes: u64, added: bool) -> Result<(), CacheError> {
        let lock = self.evict_lock()?;
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        usage::adjust(&lock, if added { bytes } else { -bytes });
        Ok(())
    }

    /// Bytes promised to downloads of live processes, and the part promised by processes other
    /// than this one; promises of dead ones are dropped.
    fn reserved_bytes(&self) -> Result<(u64, u64), CacheError> {
        let dir = self.root.join("reserve");
        let (mut total, mut others) = (0, 0);
        for e in fs::read_dir(&dir).map_err(CacheError::io(&dir))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                // A reservation still being written (or one its writer died writing).
                stale::remove_if_stale(&e, stale::STALE_TEMP);
                continue;
            }
            let owner = name.rsplit_once('-').map_or("", |(owner, _)| owner);
            let alive = if owner.contains('.') {
                // Its process holds it locked for as long as it lives, in any PID namespace.
                match open_lock(&e.path()) {
                    Ok(f) => match f.try_lock() {
                        Ok(()) => {
                            let _held = Locked::new(f);
                            let _ = fs::remove_file(e.path());
                            false
                        }
                        Err(_) => true,
                    },
                    Err(_) => false,
                }
            } else {
                // An older build's, named by a bare PID and never locked.
                let alive = owner.parse().is_ok_and(shardtool_core::process_alive);
                if !alive {
                    let _ = fs::remove_file(e.path());
                }
                alive
            };
            if !alive {
                continue;
            }
            let mut text = String::new();
            if File::open(e.path())
                .and_then(|f| f.take(32).read_to_string(&mut text))
                .is_ok()
            {
                let n = text.trim().parse::<u64>().unwrap_or(0);
                total += n;
                if owner != process_token() {
                    others += n;
                }
            }
        }
        Ok((total, others))
    }

    fn datasets(&self) -> Result<Vec<PathBuf>, CacheError> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.root)
            .map_err(CacheError::io(&self.root))?
            .flatten()
        {
            let p = e.path();
            // A linked folder would lead eviction and `clear` out of the cache: never followed.
            let real_dir = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
            if real_dir(&p) && p.join("source").is_file() && real_dir(&p.join("shards")) {
                out.push(p);
            }
        }
        out.sort();
        Ok(out)
    }

    fn all_shards(&self) -> Result<Vec<Candidate>, CacheError> {
        let mut out = Vec::new();
        for d in self.datasets()? {
            out.extend(shards_of(&d)?);
        }
        Ok(out)
    }

    /// What the cache holds, per dataset.
    pub fn list(&self) -> Result<Vec<CachedDataset>, CacheError> {
        let mut out = Vec::new();
        for d in self.datasets()? {
            let held = shards_of(&d)?;
            out.push(CachedDataset {
                source: fs::read_to_string(d.join("source")).unwrap_or_default(),
                shards: held.len() as u64,
                bytes: held.iter().map(|h| h.bytes).sum(),
                // A shard fetched ahead and not read yet is stamped ahead of now.
                last_used: held
                    .iter()
                    .map(|h| h.used.min(SystemTime::now()))
                    .max()
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs()),
                dir: d,
            });
        }
        Ok(out)
    }

    /// Deletes cached shards (of one dataset folder URL, or all), skipping shards in use.
    pub fn clear(&self, source: Option<&str>) -> Result<ClearReport, CacheError> {
        let lock = self.evict_lock()?;
        // The next reservation of any process lists the folder again.
        usage::invalidate(&lock);
        let mut report = ClearReport::default();
        for d in self.datasets()? {
            let src = fs::read_to_string(d.join("source")).unwrap_or_default();
            if source.is_some_and(|s| s != src) {
                continue;
            }
            for h in shards_of(&d)? {
                match h.remove() {
                    Removed::Yes => {
                        report.removed += 1;
                        report.bytes += h.bytes;
                    }
                    Removed::InUse => report.in_use.push(h.paths().data.display().to_string()),
                    Removed::No => {}
                }
            }
            // Downloads in flight belong to live processes; stale ones can go.
            remove_stale_downloads(&d.join("tmp"), std::time::Duration::ZERO);
        }
        Ok(report)
    }
}

/// Removes the files in `tmp` (partial downloads, named `NAME.WHAT.PID.N.part`) that no fetch
/// is writing: killed mid-fetch, they are never resumed, and would hold disk the limit does not
/// count. A fetch holds shard NAME's lock exclusively while its files exist, so a file whose
/// shard lock can be taken now is stale, whatever its PID (another container's processes are
/// not in this one's `/proc`). Other files go when their PID is gone and, with an `idle` time,
/// only once untouched for longer.
fn remove_stale_downloads(tmp: &Path, idle: std::time::Duration) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    let locks = tmp.parent().map(|d| d.join("locks"));
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let (Some(shard), Some(locks)) = (crate::wait::part_shard(&name), &locks) {
            let lock = locks.join(format!("{shard}.lock"));
            if let Ok(lock) = open_lock(&lock) {
                if lock.try_lock().is_ok() {
                    let lock = Locked::new(lock);
                    let _ = fs::remove_file(e.path());
                    drop(lock);
                }
            }
            continue;
        }
        let pid = name.rsplit('.').nth(2).unwrap_or("");
        let untouched = idle.is_zero()
            || (e.metadata().and_then(|m| m.modified()).ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|d| d > idle);
        if (idle.is_zero() || name.ends_with(".part"))
            && untouched
            && !pid.parse().is_ok_and(shardtool_core::process_alive)
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// What became of a cached shard asked to go.
enum Removed {
    Yes,
    /// A process holds it (shared lock): kept.
    InUse,
    /// Its lock or file could not be handled: kept.
    No,
}

impl Candidate {
    pub(crate) fn paths(&self) -> ShardPaths {
        CacheDir::shard_paths(&self.dataset, &self.name)
    }

    /// Deletes the shard and its stamp unless a process holds it. Holding the exclusive lock
    /// means no process has the shard open or is fetching it; whoever wants it next waits,
    /// finds it gone, and fetches it again.
    fn remove(&self) -> Removed {
        let paths = self.paths();
        let Ok(lock) = open_lock(&paths.lock) else {
            return Removed::No;
        };
        if lock.try_lock().is_err() {
            return Removed::InUse;
        }
        let _held = Locked::new(lock);
        let _ = fs::remove_file(&paths.meta);
        if fs::remove_file(&paths.data).is_ok() {
            Removed::Yes
        } else {
            Removed::No
        }
    }
}

fn shards_of(dataset: &Path) -> Result<Vec<Candidate>, CacheError> {
    let dir = dataset.join("shards");
    let mut out = Vec::new();
    for e in fs::read_dir(&dir).map_err(CacheError::io(&dir))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // Only files we wrote: a link is neither counted nor followed.
        let Ok(md) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !md.is_file() {
            continue;
        }
        let used = usage::last_use(&CacheDir::shard_paths(dataset, &name).meta, &md);
        out.push(Candidate {
            dataset: dataset.to_path_buf(),
            name,
            bytes: md.len(),
            used,
        });
    }
    Ok(out)
}

fn stamp_of(md: &fs::Metadata, bytes: u64, sum: Checksum) -> Stamp {
    Stamp {
        bytes,
        checksum: sum.to_string(),
        mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        inode: md.ino(),
    }
}

/// An open lock file whose flock this process holds, released explicitly when dropped: closing
/// the file alone leaves the lock held while a forked child (a DataLoader worker) keeps its
/// copy of the descriptor open, stalling every process that needs it.
#[derive(Debug)]
pub(crate) struct Locked(File);

impl Locked {
    /// Wraps `file`, which holds its lock already.
    pub(crate) fn new(file: File) -> Self {
        Self(file)
    }
}

impl std::ops::Deref for Locked {
    type Target = File;
    fn deref(&self) -> &File {
        &self.0
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Opens (making it if missing) the lock file at `path`, which is written to (the eviction
/// lock holds the byte count): a symbolic link planted in its place is refused, not followed
/// to a file outside the cache.
pub(crate) fn open_lock(path: &Path) -> Result<File, CacheError> {
    let mut options = OpenOptions::new();
    options.create(true).truncate(false).read(true).write(true);
    #[cfg(target_os = "linux")]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
    options.open(path).map_err(CacheError::io(path))
}

/// Hashes a whole file, streaming.
pub(crate) fn hash_file(path: &Path) -> Result<Checksum, CacheError> {
    let file = File::open(path).map_err(CacheError::io(path))?;
    let (_, sum) = Checksum::of_reader(file).map_err(CacheError::io(path))?;
    Ok(sum)
}

/// Writes a stamp in place of the old one, whole or not at all (a temporary file renamed), but
/// not synced: it only vouches for a shard file synced before it, and one lost to a power cut
/// (missing, empty or unreadable) makes the next reader hash the shard again.
fn write_stamp(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    let n = RESERVATIONS.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.{n}", process_token()));
    let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map_err(CacheError::io(path))
}

/// Writes a small file atomically (see [`AtomicFile`]); its temporary name starts with a dot.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    AtomicFile::write(path, bytes).map_err(CacheError::io(path))
}

/// Refuses a cache folder owned by another user: its shards could be swapped under us.
fn check_owner(root: &Path) -> Result<(), CacheError> {
    use std::os::unix::fs::MetadataExt;
    let owner = fs::metadata(root).map_err(CacheError::io(root))?.uid();
    // `/proc/self` belongs to the process's effective user (no unsafe `geteuid` needed).
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return Ok(());
    };
    if owner != me {
        return Err(CacheError::NotOurs {
            path: root.to_path_buf(),
            owner,
        });
    }
    Ok(())
}

#[cfg(test)]
mod hardening;
mod stale;
