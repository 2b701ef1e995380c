//! A remote dataset read through the cache: its manifest, shard leases (fetch on a miss, shared
//! lock while in use) and a bounded prefetcher driven by the epoch plan.

use crate::dir::{open_lock, CacheDir, Locked, ShardPaths};
use crate::location::RemoteUrl;
use crate::metrics::{CacheMetrics, Recorder};
use crate::remote::{FetchPolicy, Remote};
use crate::wait::{lock_within, NotTaken, OTHER_VERSION_WAIT};
use crate::CacheError;
use shardtool_core::{AtomicFile, Checksum};
use shardtool_manifest::{Compression, Manifest};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

mod room;

/// Largest manifest fetched.
const MAX_MANIFEST: u64 = 256 << 20;

/// How a remote dataset is cached and fetched.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// The cache folder (default: [`crate::default_cache_dir`]).
    pub dir: PathBuf,
    /// Most bytes of shards the folder may hold (default: no limit).
    pub limit: Option<u64>,
    /// Retries and timeouts.
    pub policy: FetchPolicy,
    /// Shards fetched at once by the prefetcher (default 4).
    pub concurrency: usize,
    /// Shards fetched ahead of the one being read (default 8; 0: none).
    pub ahead: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self {
            dir: crate::default_cache_dir(),
            limit: None,
            policy: FetchPolicy::default(),
            concurrency: 4,
            ahead: 8,
        }
    }
}

/// What the manifest says about one shard, as the cache needs it.
#[derive(Debug, Clone)]
pub struct ShardSpec {
    /// File name in the dataset folder.
    pub file: String,
    /// Its bytes on the server.
    pub bytes: u64,
    /// Their checksum.
    pub checksum: Checksum,
    /// For `.zst` shards: the decompressed size and checksum (the cache stores this form).
    pub decompressed: Option<(u64, Checksum)>,
}

impl ShardSpec {
    /// Name of the cached file: the decompressed form drops `.zst`.
    pub fn cached_name(&self) -> &str {
        match self.decompressed {
            Some(_) => self.file.strip_suffix(".zst").unwrap_or(&self.file),
            None => &self.file,
        }
    }

    /// Bytes of the cached file.
    pub fn cached_bytes(&self) -> u64 {
        self.decompressed.map_or(self.bytes, |(b, _)| b)
    }

    fn cached_checksum(&self) -> Checksum {
        self.decompressed.map_or(self.checksum, |(_, c)| c)
    }

    /// The most bytes it takes in the cache while it is fetched: a `.zst` shard's compressed
    /// copy beside its decompressed one.
    fn fetch_bytes(&self) -> u64 {
        self.cached_bytes() + self.decompressed.map_or(0, |_| self.bytes)
    }
}

/// A shard held in the cache for reading: while a lease lives, no process evicts the file.
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    // The shared lock is held by this open file and released when it is dropped.
    _lock: Option<Locked>,
    /// Whether this acquisition fetched the shard (rather than finding it cached).
    fetched: bool,
}

impl Lease {
    /// A lease on `path`, holding `lock` (shared) when given.
    fn new(path: PathBuf, lock: Option<Locked>, fetched: bool) -> Self {
        if lock.is_some() {
            crate::dir::held_here(&path, true);
        }
        Self {
            path,
            _lock: lock,
            fetched,
        }
    }

    /// The whole, checked, decompressed shard file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self._lock.is_some() {
            crate::dir::held_here(&self.path, false);
        }
    }
}

/// A shard that could not be fetched, for the skip policy's report.
#[derive(Debug, Clone)]
pub struct FetchFailure {
    /// Shard file.
    pub shard: String,
    /// Its URL.
    pub url: String,
    /// The last error.
    pub message: String,
}

struct Prefetch {
    /// Shards in order of first use this epoch.
    queue: Vec<usize>,
    /// Index into `queue` of the next shard to start fetching.
    next: usize,
    /// Index into `queue` just past the furthest shard opened by the reader.
    reader: usize,
    /// Bytes of shards fetched ahead and not yet opened, and the most allowed.
    ahead_bytes: u64,
    max_ahead_bytes: u64,
    stop: bool,
}

impl Prefetch {
    /// Whether the prefetcher may start on the next shard of the queue (`bytes` of it): one of
    /// the `ahead` shards past the reader, and within the bytes the cache limit leaves beside the
    /// reader's open shards. A shard larger than that is left to the reader, which fetches it
    /// when it opens it; prefetching it anyway took the room the reader's next fetch needed.
    fn may_fetch_next(&self, ahead: usize, bytes: u64) -> bool {
        self.next < self.queue.len()
            && self.next < self.reader + ahead
            && self.ahead_bytes + bytes <= self.max_ahead_bytes
    }
}

struct Shared {
    remote: Remote,
    cache: CacheDir,
    dir: PathBuf,
    specs: Vec<ShardSpec>,
    prefetch: Mutex<Prefetch>,
    wake: Condvar,
    ahead: usize,
    /// How long a lock another process holds is waited for while its download does not move.
    holder_stall: std::time::Duration,
    /// Shards the prefetcher fetched that the reader has not opened yet: counted as misses once
    /// fetched, so their opening is no hit.
    prefetched: Mutex<std::collections::HashSet<usize>>,
}

/// A remote dataset opened through a cache folder.
pub struct RemoteDataset {
    shared: Arc<Shared>,
    manifest: Manifest,
    threads: Vec<JoinHandle<()>>,
}

impl RemoteDataset {
    /// Fetches and parses the manifest; shards are fetched when first acquired or prefetched.
    pub fn open(url: RemoteUrl, options: CacheOptions) -> Result<Self, CacheError> {
        let metrics = Arc::new(Recorder::default());
        let remote = Remote::connect(url.clone(), options.policy.clone(), metrics)?;
        let bytes = remote.get_small(&url.manifest, MAX_MANIFEST)?;
        let manifest_url = url.file_url(&url.manifest);
        let bad = |message: String| CacheError::Manifest {
            url: manifest_url.clone(),
            message,
        };
        let manifest =
            Manifest::from_slice(&bytes, MAX_MANIFEST).map_err(|e| bad(e.to_string()))?;
        let specs = manifest
            .shards
            .iter()
            .map(|s| spec_of(s).map_err(|m| bad(format!("shard {}: {m}", s.file))))
            .collect::<Result<Vec<_>, _>>()?;
        let cache = CacheDir::open(&options.dir, options.limit)?;
        let dir = cache.dataset_dir(&crate::remote::cache_key(&url))?;
        let shared = Arc::new(Shared {
            remote,
            cache,
            dir,
            specs,
            prefetch: Mutex::new(Prefetch {
                queue: Vec::new(),
                next: 0,
                reader: 0,
                ahead_bytes: 0,
                max_ahead_bytes: u64::MAX,
                stop: false,
            }),
            wake: Condvar::new(),
            ahead: options.ahead,
            holder_stall: crate::wait::holder_stall(&options.policy),
            prefetched: Mutex::default(),
        });
        // Each leaves a thread for the reader under a thread limit (`ulimit -u`): a read without
        // prefetching goes on, one without a reader thread cannot.
        let threads = (0..options.concurrency)
            .map_while(|i| {
                if !shardtool_core::can_start_threads(2) {
                    return None;
                }
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("prefetch-{i}"))
                    .spawn(move || s.prefetch_loop())
                    .ok()
            })
            .collect();
        Ok(Self {
            shared,
            manifest,
            threads,
        })
    }

    /// The dataset's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Shard specs in manifest order.
    pub fn specs(&self) -> &[ShardSpec] {
        &self.shared.specs
    }

    /// The dataset's folder in the cache.
    pub fn cache_dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Cache activity so far.
    pub fn metrics(&self) -> CacheMetrics {
        self.shared.remote.metrics.snapshot()
    }

    /// Fails unless the cache limit can hold `open_bytes` (the most bytes of shards that are
    /// open at once in the reader's plan) plus the compressed copy a `.zst` shard needs while it
    /// is decompressed. What is left over bounds how far ahead the prefetcher may fetch.
    pub fn check_capacity(&self, open_bytes: u64) -> Result<(), CacheError> {
        let need = open_bytes
            .saturating_add(self.transient())
            .max(self.largest_fetch());
        let Some(limit) = self.shared.cache.limit() else {
            return Ok(());
        };
        if limit < need && open_bytes == 0 {
            // Fetching alone (`cache prefetch`): one shard at a time must fit.
            return Err(CacheError::TooSmall {
                limit,
                message: format!("the largest shard needs {need} bytes: raise --cache-limit"),
            });
        }
        if limit < need {
            return Err(CacheError::TooSmall {
                limit,
                message: format!(
                    "the reader keeps up to {open_bytes} bytes of shards open at once{}; raise \
                     --cache-limit to at least {need} (for each process reading through this \
                     cache folder: the ranks of a node sharing it need the sum), or open fewer \
                     shards at once (a smaller shuffle buffer, interleave or batch, fewer workers; \
                     a saved position resumes only with its buffer, interleave and batch)",
                    match need - open_bytes {
                        0 => String::new(),
                        more => format!(" and a shard being fetched needs up to {more} more"),
                    }
                ),
            });
        }
        let mut p = self.shared.lock();
        p.max_ahead_bytes = limit - need;
        Ok(())
    }

    /// The most bytes a `.zst` shard's compressed copy takes beside its decompressed one while
    /// it is fetched (0 when no shard is compressed).
    fn transient(&self) -> u64 {
        self.shared
            .specs
            .iter()
            .filter(|s| s.decompressed.is_some())
            .map(|s| s.bytes)
            .max()
            .unwrap_or(0)
    }

    /// The most bytes one shard takes while it is fetched (with a `.zst` shard's compressed
    /// copy beside its decompressed one): the room each download in flight holds.
    pub fn largest_fetch(&self) -> u64 {
        self.shared
            .specs
            .iter()
            .map(ShardSpec::fetch_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Tells the prefetcher the order in which shards will be opened (first use, this epoch).
    pub fn plan(&self, order: Vec<usize>) {
        let mut p = self.shared.lock();
        p.queue = order
            .into_iter()
            .filter(|&i| i < self.shared.specs.len())
            .collect();
        p.next = 0;
        p.reader = 0;
        p.ahead_bytes = 0;
        drop(p);
        self.shared.wake.notify_all();
    }

    /// Makes shard `i` available on local disk and holds it there until the lease is dropped.
    pub fn acquire(&self, i: usize) -> Result<Lease, CacheError> {
        self.shared.note_open(i);
        self.shared.acquire(i, true, true)
    }

    /// Fetches a small file of the dataset folder (such as `errors.jsonl`) into memory,
    /// refusing more than `limit` bytes; `Ok(None)` when the server has no such file.
    pub fn fetch_small(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, CacheError> {
        self.shared.remote.get_small_opt(name, limit)
    }

    /// Fetches every shard with `workers` threads; returns the leases (holding every shard in
    /// the cache when `hold`, else only naming them) and, by shard index, the errors of shards
    /// that could not be fetched.
    pub fn acquire_all(
        &self,
        workers: usize,
        hold: bool,
    ) -> (Vec<Lease>, Vec<(usize, CacheError)>) {
        self.fetch_many(None, workers, hold)
    }

    /// Fetches shards `indices` with `workers` threads and holds them: the leases and, by shard
    /// index, the errors of shards that could not be fetched (an index past the manifest's is
    /// one).
    pub fn acquire_some(
        &self,
        indices: &[usize],
        workers: usize,
    ) -> (Vec<Lease>, Vec<(usize, CacheError)>) {
        self.fetch_many(Some(indices), workers, true)
    }

    /// Makes shard `i` available on local disk and holds it until the lease is dropped, for a
    /// command that reads every shard once (verify, inspect) rather than a reader's pass. With
    /// `at_source`, the dataset is checked where it lives: a shard already cached is fetched
    /// again too (streamed through the checks, nothing kept, so no room is needed for it) and
    /// must match the manifest's size and checksum, so the server's copy is proven as whole as
    /// the cached one, which is left as it is.
    pub fn acquire_once(&self, i: usize, at_source: bool) -> Result<Lease, CacheError> {
        self.fetch_one(i, true, at_source)
    }

    /// Fetches shard `i`; see [`RemoteDataset::acquire_once`].
    fn fetch_one(&self, i: usize, hold: bool, at_source: bool) -> Result<Lease, CacheError> {
        // At source, a cached copy is hashed too: damaged in place (its size and time kept),
        // it is fetched again rather than verified as the server's.
        let lease = self.shared.acquire_with(i, hold, true, at_source)?;
        if at_source && !lease.fetched {
            self.shared.check_at_source(i)?;
        }
        Ok(lease)
    }

    /// Fetches shards `indices` (all when `None`) on `workers` threads.
    fn fetch_many(
        &self,
        indices: Option<&[usize]>,
        workers: usize,
        hold: bool,
    ) -> (Vec<Lease>, Vec<(usize, CacheError)>) {
        let n = indices.map_or(self.shared.specs.len(), <[usize]>::len);
        let next = AtomicU64::new(0);
        let out = Mutex::new((Vec::new(), Vec::new()));
        // Fewer threads, or this one, where the system starts no more.
        shardtool_core::on_threads(workers.clamp(1, n.max(1)), || loop {
            let k = next.fetch_add(1, Ordering::Relaxed) as usize;
            if k >= n {
                break;
            }
            let i = indices.map_or(k, |v| v[k]);
            let r = self.fetch_one(i, hold, false);
            let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
            match r {
                Ok(l) => o.0.push(l),
                Err(e) => o.1.push((i, e)),
            }
        });
        out.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the dataset lives: its folder URL and manifest name.
    pub fn url(&self) -> &crate::RemoteUrl {
        &self.shared.remote.url
    }

    /// The URL of shard `i`.
    pub fn url_of(&self, i: usize) -> String {
        self.shared
            .specs
            .get(i)
            .map(|s| self.shared.remote.url.file_url(&s.file))
            .unwrap_or_default()
    }
}

impl RemoteDataset {
    /// Whether [`RemoteDataset::stop`] stopped its fetching.
    pub fn is_stopped(&self) -> bool {
        self.shared.remote.stopped()
    }

    /// Stops its fetching for good: the prefetcher starts nothing more, and fetches under way
    /// (the prefetcher's and any reader's) end at once. For a reader being closed.
    pub fn stop(&self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        self.shared.remote.cancel();
    }
}

impl Drop for RemoteDataset {
    fn drop(&mut self) {
        self.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The last use to stamp on a shard being acquired: now, or, fetched ahead (`count_hit` false
/// only for the prefetcher), later, so it is last in line for eviction until it is read and
/// other processes' fetches take shards already read first, not this one before this process
/// reads it.
fn last_use(count_hit: bool) -> std::time::SystemTime {
    match count_hit {
        true => std::time::SystemTime::now(),
        false => std::time::SystemTime::now() + crate::dir::AHEAD_GRACE,
    }
}

fn spec_of(s: &shardtool_manifest::ShardEntry) -> Result<ShardSpec, String> {
    let sum = |c: &str| Checksum::parse(c).ok_or_else(|| format!("bad checksum {c:?}"));
    let decompressed = match s.compression {
        None => None,
        Some(Compression::Zstd) => {
            let b = s
                .uncompressed_bytes
                .ok_or("a compressed shard without uncompressed_bytes")?;
            let c = s
                .uncompressed_checksum
                .as_deref()
                .ok_or("a compressed shard without uncompressed_checksum")?;
            Some((b, sum(c)?))
        }
    };
    Ok(ShardSpec {
        file: s.file.clone(),
        bytes: s.bytes,
        checksum: sum(&s.checksum)?,
        decompressed,
    })
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Prefetch> {
        self.prefetch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn note_open(&self, i: usize) {
        let mut p = self.lock();
        if let Some(pos) = p.queue[p.reader.min(p.queue.len())..]
            .iter()
            .take((self.ahead * 4).max(4))
            .position(|&q| q == i)
        {
            let start = p.reader;
            for q in start..start + pos + 1 {
                if q < p.next {
                    let b = self.specs[p.queue[q]].cached_bytes();
                    p.ahead_bytes = p.ahead_bytes.saturating_sub(b);
                }
            }
            p.reader = start + pos + 1;
        }
        p.next = p.next.max(p.reader);
        drop(p);
        self.wake.notify_all();
    }

    fn prefetch_loop(&self) {
        loop {
            let i = {
                let mut p = self.lock();
                loop {
                    if p.stop {
                        return;
                    }
                    let bytes = p
                        .queue
                        .get(p.next)
                        .map_or(0, |&i| self.specs[i].cached_bytes());
                    if p.may_fetch_next(self.ahead, bytes) {
                        let i = p.queue[p.next];
                        if p.next >= p.reader {
                            p.ahead_bytes += bytes;
                        }
                        p.next += 1;
                        break i;
                    }
                    p = self.wake.wait(p).unwrap_or_else(|e| e.into_inner());
                }
            };
            // A failure here is not lost: the reader's own acquire retries and reports it. The
            // reader counts the hit when it opens the shard.
            let _ = self.acquire(i, false, false);
        }
    }

    /// Returns a lease on a whole cached copy of shard `i`, fetching it first on a miss.
    fn acquire(&self, i: usize, hold: bool, count_hit: bool) -> Result<Lease, CacheError> {
        self.acquire_with(i, hold, count_hit, false)
    }

    /// [`Shared::acquire`], a cached copy hashed whatever its stamp says when `rehash`.
    fn acquire_with(
        &self,
        i: usize,
        hold: bool,
        count_hit: bool,
        rehash: bool,
    ) -> Result<Lease, CacheError> {
        let spec = self.specs.get(i).ok_or_else(|| CacheError::Manifest {
            url: self.remote.url.file_url(&self.remote.url.manifest),
            message: format!("no shard #{i}"),
        })?;
        let paths = CacheDir::shard_paths(&self.dir, spec.cached_name());
        let (bytes, sum) = (spec.cached_bytes(), spec.cached_checksum());
        let mut fetched = false;
        loop {
            let lock = open_lock(&paths.lock)?;
            // Shared: waits only while another process (or thread) fetches or evicts this shard.
            if !self.wait_for_holder(&lock, true, spec, &paths, false)? {
                continue;
            }
            let lock = Locked::new(lock);
            if CacheDir::whole(&paths, bytes, sum, fetched || !rehash)? {
                CacheDir::touch(&paths, last_use(count_hit));
                let ahead = count_hit && self.prefetched_set().remove(&i);
                if !fetched && count_hit && !ahead {
                    Recorder::add(&self.remote.metrics.hits, 1);
                }
                return Ok(Lease::new(
                    paths.data.clone(),
                    hold.then_some(lock),
                    fetched,
                ));
            }
            drop(lock);
            // A whole file of other bytes: another version, which readers of other processes
            // may hold (a dataset re-packed on the server, another endpoint under the same URL).
            // Two such readers each waiting for the other's shard would wait forever.
            // Either wait ends untaken once another process has published the shard: it is then
            // read shared, not fetched again after the readers that hold it let go.
            let other_version = paths.data.exists();
            let lock = open_lock(&paths.lock)?;
            let published = || !rehash && CacheDir::looks_whole(&paths, bytes, sum);
            if other_version {
                let over = || self.remote.stopped() || published();
                match lock_within(&lock, OTHER_VERSION_WAIT, &over) {
                    Ok(()) => {}
                    Err(NotTaken::Over) if !self.remote.stopped() => continue,
                    Err(NotTaken::Over) => return Err(self.stopped(spec)),
                    Err(NotTaken::Stalled(_)) => {
                        return Err(CacheError::Fetch {
                            url: self.remote.url.shown(&spec.file),
                            attempts: 1,
                            message: format!(
                                "the cached copy holds other bytes than this manifest names, and \
                                 another process has read it for {}s: the dataset changed on the \
                                 server while it ran, or another endpoint serves other bytes \
                                 under this URL; use another --cache-dir (cache_dir) for one of \
                                 them",
                                OTHER_VERSION_WAIT.as_secs()
                            ),
                        })
                    }
                }
            } else if !self.wait_for_holder(&lock, false, spec, &paths, true)? {
                // Missing when looked at: a copy published meanwhile is checked under the
                // shared lock (hashed whole when `rehash`), so watching cannot spin on a damaged
                // one, which takes the other-version path above.
                continue;
            }
            let lock = Locked::new(lock);
            // Someone may have fetched it while we waited for the exclusive lock.
            if !CacheDir::whole(&paths, bytes, sum, !rehash)? {
                if paths.data.exists() {
                    // Damaged, partial or another version: never served, fetched again.
                    Recorder::add(&self.remote.metrics.repaired, 1);
                    self.cache.remove_counted(&paths)?;
                }
                Recorder::add(&self.remote.metrics.misses, 1);
                self.fetch_locked(spec, &paths)?;
                fetched = true;
                // Marked before the lock goes: a reader waiting for this fetch of its own
                // prefetcher then finds it marked, and counts no hit for it.
                if !count_hit {
                    self.prefetched_set().insert(i);
                }
                if !hold {
                    // Not held: done. Taking the shared lock after this one goes would leave
                    // a moment in which a fetch evicting for room could take it, and it would
                    // be fetched again.
                    CacheDir::touch(&paths, last_use(count_hit));
                    return Ok(Lease::new(paths.data.clone(), None, true));
                }
            }
            drop(lock);
        }
    }

    fn prefetched_set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<usize>> {
        self.prefetched.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the lock of `spec`'s cached copy, shared or exclusive, waiting while its holder's
    /// download moves: a holder stopped or hung for [`Shared::holder_stall`] fails the wait, and
    /// so does this reader being stopped. `Ok(false)`: with `watch`, the wait ended untaken
    /// because the shard was published meanwhile; readers of other processes may hold it for
    /// as long as they read it, and a fetcher waiting behind them waits for nothing.
    fn wait_for_holder(
        &self,
        lock: &File,
        shared: bool,
        spec: &ShardSpec,
        paths: &ShardPaths,
        watch: bool,
    ) -> Result<bool, CacheError> {
        let tmp = self.dir.join("tmp");
        let (bytes, sum) = (spec.cached_bytes(), spec.cached_checksum());
        let over = || self.remote.stopped() || watch && CacheDir::looks_whole(paths, bytes, sum);
        let name = spec.cached_name();
        match crate::wait::lock_while_moving(lock, shared, &tmp, name, self.holder_stall, &over) {
            Ok(()) => Ok(true),
            Err(NotTaken::Over) if !self.remote.stopped() => Ok(false),
            Err(NotTaken::Over) => Err(self.stopped(spec)),
            Err(NotTaken::Stalled(waited)) => Err(CacheError::Fetch {
                url: self.remote.url.shown(&spec.file),
                attempts: 1,
                message: format!(
                    "another process has held this shard's cache lock for {}s, writing nothing \
                     to its download for the last {}s: it is stopped or hung (kill it, or \
                     continue it if it was stopped); the lock is {}",
                    waited.as_secs(),
                    self.holder_stall.as_secs(),
                    paths.lock.display()
                ),
            }),
        }
    }

    /// The error of a wait ended by this reader being stopped.
    fn stopped(&self, spec: &ShardSpec) -> CacheError {
        CacheError::Fetch {
            url: self.remote.url.shown(&spec.file),
            attempts: 1,
            message: crate::remote::STOPPED.into(),
        }
    }

    /// Fetches shard `i` again, checking its size and checksum against the manifest, keeping
    /// nothing: whether the server's copy is whole, whatever is cached.
    fn check_at_source(&self, i: usize) -> Result<(), CacheError> {
        let Some(spec) = self.specs.get(i) else {
            return Ok(());
        };
        self.remote.check(&spec.file, spec.bytes, spec.checksum)
    }

    /// Downloads, checks, decompresses and publishes one shard; the caller holds its lock.
    fn fetch_locked(&self, spec: &ShardSpec, paths: &ShardPaths) -> Result<(), CacheError> {
        let need = spec.fetch_bytes();
        let stopped = || self.remote.stopped();
        let Some((reservation, evicted)) = self.cache.reserve_unless(need, &stopped)? else {
            return Err(self.stopped(spec));
        };
        Recorder::add(&self.remote.metrics.evictions, evicted);
        let tmp_dir = self.dir.join("tmp");
        let tmp = |what: &str| {
            tmp_dir.join(format!(
                "{}.{what}.{}.{}.part",
                spec.cached_name(),
                std::process::id(),
                NEXT_TMP.fetch_add(1, Ordering::Relaxed)
            ))
        };
        let atomic = |tmp: PathBuf| {
            AtomicFile::create_at(tmp.clone(), &paths.data).map_err(CacheError::io(&tmp))
        };
        let download = atomic(tmp("download"))?;
        let mut file = download
            .clone_file()
            .map_err(CacheError::io(download.temp_path()))?;
        self.remote
            .download(&spec.file, spec.bytes, spec.checksum, &mut file)
            .map_err(|e| match e {
                // A local write failed: name the file, so a full disk says which one.
                CacheError::Fetch {
                    url,
                    attempts,
                    message,
                } if message.starts_with("writing the cache") => CacheError::Fetch {
                    url,
                    attempts,
                    message: format!("{message} ({})", download.temp_path().display()),
                },
                e => e,
            })?;
        drop(file);
        let published = match spec.decompressed {
            None => download,
            Some((size, sum)) => {
                let mut out = atomic(tmp("zstd"))?;
                decompress(download.temp_path(), &mut out, size, sum)?;
                // The compressed download is removed as it drops, uncommitted.
                drop(download);
                out
            }
        };
        let mut published = published;
        // The bulk of the flush happens here, outside the eviction lock; the commit under it
        // (a rename and a folder fsync) is counted at once and its reservation released, so
        // no listing or reservation sees the shard uncounted or counted twice.
        published
            .flush()
            .and_then(|()| published.clone_file()?.sync_all())
            .map_err(CacheError::io(published.temp_path()))?;
        self.cache.publish(spec.cached_bytes(), reservation, || {
            published.commit().map_err(CacheError::io(&paths.data))
        })?;
        CacheDir::stamp(paths, spec.cached_bytes(), spec.cached_checksum())
    }
}

static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

/// Decompresses a downloaded `.zst` shard, refusing more than `size` bytes, and checks it.
fn decompress(
    from: &Path,
    to: &mut AtomicFile,
    size: u64,
    sum: Checksum,
) -> Result<(), CacheError> {
    let src = File::open(from).map_err(CacheError::io(from))?;
    let to_path = to.temp_path().to_path_buf();
    let mut w = shardtool_core::HashingWriter::new(to);
    let mut dec = zstd::Decoder::new(src)
        .map_err(CacheError::io(from))?
        .take(size + 1);
    std::io::copy(&mut dec, &mut w).map_err(CacheError::io(from))?;
    let (inner, n, got) = w.into_parts();
    inner.flush().map_err(CacheError::io(&to_path))?;
    if n != size || got != sum {
        return Err(CacheError::Fetch {
            url: from.display().to_string(),
            attempts: 1,
            message: format!(
                "decompressed to {n} bytes with checksum {got}; the manifest says {size} bytes, {sum}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefetch(ahead_bytes: u64, max_ahead_bytes: u64) -> Prefetch {
        Prefetch {
            queue: vec![0, 1, 2, 3],
            next: 1,
            reader: 1,
            ahead_bytes,
            max_ahead_bytes,
            stop: false,
        }
    }

    #[test]
    fn the_prefetcher_stays_within_the_room_the_limit_leaves_and_its_shard_count() {
        assert!(prefetch(0, 10).may_fetch_next(8, 10));
        assert!(prefetch(4, 10).may_fetch_next(8, 6));
        assert!(!prefetch(4, 10).may_fetch_next(8, 7));
        // A shard larger than the room is left to the reader, even with nothing else ahead.
        assert!(!prefetch(0, 4).may_fetch_next(8, 5));
        // --prefetch-shards 0: nothing ahead of the reader.
        assert!(!prefetch(0, u64::MAX).may_fetch_next(0, 1));
        let mut p = prefetch(0, u64::MAX);
        p.next = 3;
        assert!(p.may_fetch_next(8, 1) && !p.may_fetch_next(2, 1));
        p.next = 4;
        assert!(!p.may_fetch_next(8, 1), "the queue is done");
    }
}
