//! Remote datasets seen as local ones: shards fetched through the local cache and held there,
//! behind a folder whose manifest describes them as the cache stores them (`RemoteView`), which
//! verify (and inspect and preview) read like any local dataset, naming shards as the server
//! stores them.

use crate::run::verify_in;
use crate::{HoldShards, Problem, ProblemKind, Progress, Report, VerifyError, VerifyOptions};
use shardtool_cache::{Lease, RemoteDataset};
use shardtool_manifest::{ERRORS_FILE, FILE_NAME as MANIFEST_FILE};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Largest `errors.jsonl` fetched for a remote verify.
const MAX_ERRORS_FILE: u64 = 64 << 20;

/// How a view's folder in the dataset's cache folder is named.
const VIEW_PREFIX: &str = "view-";

/// Removes the views in `cache` (a dataset's cache folder) that killed processes left: those
/// whose lock is free, and those without a lock over an hour old (killed while being made).
fn remove_stale_views(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_view = entry.file_name().to_string_lossy().starts_with(VIEW_PREFIX);
        if !is_view || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let stale = match std::fs::File::open(path.join(".lock")) {
            Ok(lock) => lock.try_lock().is_ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(3600)),
            Err(_) => false,
        };
        if stale {
            // Links to cached shards and small files: removing them frees no shard.
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Which shards a [`RemoteView`] fetches, and how.
#[derive(Debug, Clone, Copy)]
pub enum Fetch<'a> {
    /// Every shard, as the cache has it (a cached copy is trusted), each fetched when it is
    /// read ([`RemoteView::hold_shard`]) and held only while it is read.
    All,
    /// [`Fetch::All`], a cached copy fetched again and checked: the server's copies are proven.
    AllAtSource,
    /// These shards only (by manifest index), fetched when the view is made and held while it
    /// lives; the others are absent from the view.
    Some(&'a [usize]),
}

/// The shards of a remote dataset in the cache, behind a temporary folder (inside the cache)
/// holding a manifest that describes them as the cache stores them (decompressed) and links to
/// those held: all of them from the start ([`Fetch::Some`]), or each while it is read
/// ([`RemoteView::hold_shard`]), so that a dataset larger than the cache's limit can be read whole.
/// Removed, and the shards released, when it drops.
pub struct RemoteView<'a> {
    dir: tempfile::TempDir,
    /// Held locked while the view lives: a view whose lock is free was left by a killed process.
    _lock: std::fs::File,
    ds: &'a RemoteDataset,
    _held: Vec<Lease>,
    /// Shards are fetched as they are read (`Some`), at the source when `Some(true)`.
    one_by_one: Option<bool>,
    at_once: usize,
    /// Downloads under way, at most `fetching` (`--fetch-concurrency`) at once.
    fetches: Permits,
    /// Shards that could not be fetched, by cached name, with why.
    failed: Mutex<HashMap<String, String>>,
    /// Why the dataset's `errors.jsonl` could not be fetched, when it was asked for.
    errors_failed: Option<String>,
    /// Cached name → the name the server stores it under.
    remote_names: HashMap<String, String>,
    shown: String,
}

impl HoldShards for RemoteView<'_> {
    /// How many shards may be read at once (the room the cache was checked for).
    fn at_once(&self) -> usize {
        self.at_once
    }

    fn hold(&self, index: usize) -> Option<Box<dyn Send + '_>> {
        let held = self.hold_shard(index)?;
        Some(Box::new(held))
    }
}

/// A shard of a [`RemoteView`] held in the cache and linked into the view while it is read.
pub struct Held {
    link: PathBuf,
    _lease: Lease,
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
    }
}

/// A count of permits: at most so many holders at once.
struct Permits {
    free: Mutex<usize>,
    freed: std::sync::Condvar,
}

/// One of [`Permits`], given back when dropped.
struct Permit<'a>(&'a Permits);

impl Permits {
    fn new(n: usize) -> Self {
        Self {
            free: Mutex::new(n.max(1)),
            freed: std::sync::Condvar::new(),
        }
    }

    fn take(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

impl<'a> RemoteView<'a> {
    /// Makes the view of the shards `which` names from `ds`, downloading `fetching` at a time,
    /// with the dataset's `errors.jsonl` when `with_errors` (verify checks it; others do not
    /// read it). [`Fetch::Some`]'s shards are fetched now and held while the view lives; the
    /// others' are read `at_once` at a time, each held while it is read. The cache's limit must
    /// hold the shards in hand at once: `at_once` of them (the largest), or every one
    /// [`Fetch::Some`] names.
    pub fn fetch(
        ds: &'a RemoteDataset,
        fetching: usize,
        at_once: usize,
        which: Fetch<'_>,
        with_errors: bool,
    ) -> Result<Self, VerifyError> {
        let too_small = |e: &dyn std::fmt::Display| VerifyError::CacheTooSmall(e.to_string());
        let specs = ds.specs();
        let (fetching, at_once) = (fetching.max(1), at_once.max(1));
        let (one_by_one, (held, failed)) = match which {
            Fetch::All | Fetch::AllAtSource => {
                ds.check_room_one_by_one(at_once)
                    .map_err(|e| too_small(&e))?;
                let at_source = matches!(which, Fetch::AllAtSource);
                (Some(at_source), (Vec::new(), Vec::new()))
            }
            Fetch::Some(v) => {
                ds.check_room(v, fetching).map_err(|e| too_small(&e))?;
                (None, ds.acquire_some(v, fetching))
            }
        };
        // A shard that could not be fetched is absent from the view: reported as such, not as
        // missing from the dataset.
        let failed: HashMap<String, String> = failed
            .into_iter()
            .filter_map(|(i, e)| Some((specs.get(i)?.cached_name().to_string(), e.to_string())))
            .collect();
        let held_paths: std::collections::HashSet<&Path> = held.iter().map(Lease::path).collect();
        remove_stale_views(ds.cache_dir());
        let dir = tempfile::Builder::new()
            .prefix(VIEW_PREFIX)
            .tempdir_in(ds.cache_dir())
            .map_err(|e| VerifyError::io(ds.cache_dir(), e))?;
        // Locked before it is named: another process never sees this view's lock free.
        let (locking, lock_path) = (dir.path().join(".lock.new"), dir.path().join(".lock"));
        let lock = std::fs::File::create(&locking)
            .and_then(|f| f.lock().map(|()| f))
            .and_then(|f| std::fs::rename(&locking, &lock_path).map(|()| f))
            .map_err(|e| VerifyError::io(&lock_path, e))?;
        let mut manifest = ds.manifest().clone();
        for (entry, spec) in manifest.shards.iter_mut().zip(specs) {
            entry.file = spec.cached_name().to_string();
            if let (Some(b), Some(c)) = (
                entry.uncompressed_bytes.take(),
                entry.uncompressed_checksum.take(),
            ) {
                entry.bytes = b;
                entry.checksum = c;
            }
            entry.compression = None;
            // Only shards held for this view: a copy another process cached, not fetched or
            // checked here, is not what was asked for.
            let cached = ds.cache_dir().join("shards").join(&entry.file);
            if held_paths.contains(cached.as_path()) {
                let link = dir.path().join(&entry.file);
                std::os::unix::fs::symlink(&cached, &link)
                    .map_err(|e| VerifyError::io(&link, e))?;
            }
        }
        manifest.totals.bytes = manifest.shards.iter().map(|s| s.bytes).sum();
        let path = dir.path().join(MANIFEST_FILE);
        std::fs::write(&path, manifest.to_json()).map_err(|e| VerifyError::io(&path, e))?;
        let mut errors_failed = None;
        if with_errors {
            // One that cannot be fetched (too large, the server failing) is a problem of the
            // dataset, as a local one verify cannot read.
            match ds.fetch_small(ERRORS_FILE, MAX_ERRORS_FILE) {
                Ok(Some(errors)) => {
                    let path = dir.path().join(ERRORS_FILE);
                    std::fs::write(&path, errors).map_err(|e| VerifyError::io(&path, e))?;
                }
                Ok(None) => {}
                Err(e) => errors_failed = Some(e.to_string()),
            }
        }
        let remote_names = specs
            .iter()
            .map(|s| (s.cached_name().to_string(), s.file.clone()))
            .collect();
        Ok(Self {
            dir,
            _lock: lock,
            ds,
            _held: held,
            one_by_one,
            at_once,
            fetches: Permits::new(fetching),
            failed: Mutex::new(failed),
            errors_failed,
            remote_names,
            shown: ds.url().shown(&ds.url().manifest),
        })
    }

    /// The view's folder: a local dataset.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes shard `index` (of the manifest) readable in the view until what this returns is
    /// dropped: fetched into the cache (at the source for [`Fetch::AllAtSource`]), held, and
    /// linked. `None` where the view holds its shards already ([`Fetch::Some`]), or where the
    /// shard could not be fetched: it is then absent, and [`RemoteView::rename`] names why.
    pub fn hold_shard(&self, index: usize) -> Option<Held> {
        let at_source = self.one_by_one?;
        let spec = self.ds.specs().get(index)?;
        let name = spec.cached_name();
        let failed = |why: String| {
            let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            f.insert(name.to_string(), why);
        };
        let permit = self.fetches.take();
        // Stopped (Ctrl-C), before or while it waited for its turn (the fetches under way end
        // at once then): the shards left are not read, cached or not.
        if self.ds.is_stopped() {
            drop(permit);
            failed("the check was stopped".into());
            return None;
        }
        let lease = self.ds.acquire_once(index, at_source);
        drop(permit);
        let lease = match lease {
            Ok(lease) => lease,
            Err(e) => {
                failed(e.to_string());
                return None;
            }
        };
        // The manifest lists each shard once (checked when it was opened): the link is new.
        let link = self.dir.path().join(name);
        if let Err(e) = std::os::unix::fs::symlink(lease.path(), &link) {
            let shown = self.dir.path().display();
            failed(format!("cannot link it into {shown}: {e}"));
            return None;
        }
        Some(Held {
            link,
            _lease: lease,
        })
    }

    /// The URL of the dataset's manifest, to show in place of the view's folder.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The name the server stores the shard cached as `cached` under.
    pub fn stored_name<'b>(&'b self, cached: &'b str) -> &'b str {
        self.remote_names.get(cached).map_or(cached, String::as_str)
    }

    /// What to say of the shard cached as `cached`, if it could not be fetched.
    pub fn fetch_failure(&self, cached: &str) -> Option<String> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        let why = failed.get(cached)?;
        Some(format!("could not be fetched whole: {why}"))
    }

    /// Names problem `p`'s shard as the server stores it; a missing shard that could not be
    /// fetched is a fetch failure, with the reason.
    pub fn rename(&self, p: &mut Problem) {
        let Some(shard) = p.shard.as_mut() else {
            return;
        };
        if p.kind == ProblemKind::MissingShard {
            if let Some(message) = self.fetch_failure(shard) {
                p.kind = ProblemKind::FetchFailed;
                p.message = message;
            }
        }
        *shard = self.stored_name(shard).to_string();
    }
}

/// Verifies the remote dataset `ds` with `workers` fetch threads: every shard is fetched into
/// the cache (the size and checksum of the stored file, and of the decompressed one for `.zst`,
/// are checked on the way in; a shard already cached is streamed again through the same
/// checks, nothing kept, so a copy changed on the server since it was cached is found) and held
/// there while its cached copy is verified like a local dataset, through a [`RemoteView`].
/// Shards are fetched `workers` at a time and checked `opts.jobs` at a time, the larger of the
/// two held at once, and the cache's limit needs room for those only: older shards make room
/// for newer ones. An `errors.jsonl` that cannot be fetched is an `error_report` problem.
///
/// A shard that could not be fetched is a [`ProblemKind::FetchFailed`] problem; problems name
/// shards as the server stores them (`.tar.zst`, not the cache's decompressed `.tar`). A cached
/// copy is hashed too: one damaged in place is fetched again, counted in
/// [`Report::cache_repaired`], and not blamed on the server.
pub fn verify_remote(
    ds: &RemoteDataset,
    workers: usize,
    opts: &VerifyOptions,
    progress: &dyn Progress,
) -> Result<Report, VerifyError> {
    let repaired = ds.metrics().repaired;
    let at_once = workers.max(opts.jobs_or_cores());
    let view = RemoteView::fetch(ds, workers, at_once, Fetch::AllAtSource, true)?;
    let mut report = verify_in(view.path(), opts, progress, Some(&view))?;
    report.cache_repaired = Some(ds.metrics().repaired - repaired);
    for p in &mut report.problems {
        view.rename(p);
    }
    if let Some(why) = &view.errors_failed {
        // Not fetched, so verify found none: the reason replaces what it said of a missing one.
        report
            .problems
            .retain(|p| p.kind != ProblemKind::ErrorReport);
        report.problems.push(Problem::dataset(
            ProblemKind::ErrorReport,
            format!("{ERRORS_FILE} could not be fetched: {why}"),
        ));
    }
    report.finish();
    report.dataset = view.shown().to_string();
    report.manifest = view.shown().to_string();
    Ok(report)
}
