//! The verification run: open the manifest, compare it with the directory, then read and check
//! every shard once, in parallel, and merge the per-shard findings in shard order.

use crate::check_packed::{check_packed, Records};
use crate::check_tar::{check_tar, stream_tar, Ctx, ImageJob, Scan};
use crate::dataset::{open_dataset, unlisted_shards, Dataset};
use crate::error_report::check_error_report;
use crate::loader::{load, maps_cheaply, BufferPool, Incomplete, Loaded, ShardBytes};
use crate::report::{Problem, ProblemKind, Report};
use crate::{VerifyError, DEFAULT_MAX_SHARD_BYTES};
use rayon::prelude::*;
use shardtool_core::{Checksum, Limits};
use shardtool_image::{transform, Encode, Resize, TransformSpec};
use shardtool_manifest::{is_safe_file_name, Compression, ShardEntry, ShardFormat};
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// What to check and with how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Decode every image and compare its size with its metadata.
    pub decode: bool,
    /// Worker threads; 0 (the default): one per core the process may use (at least two when
    /// checking without decoding), counted while the dataset is opened.
    pub jobs: usize,
    /// Limits for decoding images (`max_pixels`) and reading the manifest (`max_header_bytes`).
    pub limits: Limits,
    /// Largest (uncompressed) shard read into memory; larger ones are only checksummed. Mapped
    /// shards (see `mmap`) and streamed tar shards take no memory of their own (beyond a
    /// 128 KiB buffer) and have no such limit.
    pub max_shard_bytes: u64,
    /// Map plain shards instead of reading them into memory: no copy, about `cat`'s speed. Sound
    /// because shards are write-once; turn it off when another process may truncate shard files
    /// during the run (a mapped file that shrinks kills the process with SIGBUS). Without it, a
    /// plain tar shard checked without decoding is streamed through a small buffer (see
    /// `stream_shard`); with it too once the first mapped one shows its page cache in small
    /// folios, where streaming is faster (see `loader::maps_cheaply`).
    pub mmap: bool,
}

impl Default for VerifyOptions {
    /// One job per core (`jobs: 0`), and the default limits.
    fn default() -> Self {
        Self::with_jobs(0)
    }
}

impl VerifyOptions {
    /// The defaults with `jobs` worker threads (0: one per core).
    pub fn with_jobs(jobs: usize) -> Self {
        Self {
            decode: false,
            jobs,
            limits: Limits::default(),
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            mmap: true,
        }
    }

    /// `jobs`, or the number of cores the process may use when it is 0 (reads cgroup files:
    /// about 0.1 ms).
    pub fn jobs_or_cores(&self) -> usize {
        match self.jobs {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// Receives progress; called from worker threads.
pub trait Progress: Sync {
    /// Called once before any shard is read, with the totals from the manifest.
    fn start(&self, shards: u64, bytes: u64);
    /// Called after each shard, with the stored bytes it had.
    fn shard_done(&self, shard: &str, bytes: u64);
}

/// Ignores progress.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: u64, _: u64) {}
    fn shard_done(&self, _: &str, _: u64) {}
}

/// What one shard contributed.
#[derive(Default)]
struct ShardOutcome {
    problems: Vec<Problem>,
    /// Samples found, when the shard could be parsed to its end.
    samples: Option<u64>,
    keys: Vec<String>,
    bytes_read: u64,
    decoded: u64,
}

/// Verifies the dataset at `target` (a directory holding `manifest.json`, or a manifest path).
///
/// Returns `Err` only when the dataset cannot be opened at all; everything found wrong inside it
/// is a [`Problem`] in the report.
pub fn verify(
    target: &Path,
    opts: &VerifyOptions,
    progress: &dyn Progress,
) -> Result<Report, VerifyError> {
    let start = Instant::now();
    let prepare = || Prepared::new(target, opts, progress);
    let check = |p: &Prepared, i: usize, entry: &ShardEntry| {
        let mut o = verify_shard(
            &p.ds.dir,
            entry,
            &p.fields,
            &p.ds.manifest.classes,
            opts,
            &p.buffers,
            &p.small_folios,
        );
        // Poisoned only if another worker panicked, which the caller raises.
        if let Ok(mut keys) = p.keys.lock() {
            keys.record(i, std::mem::take(&mut o.keys));
        }
        progress.shard_done(&entry.file, o.bytes_read);
        o
    };
    let (p, outcomes, jobs) = if opts.decode {
        // Decoding fans out inside a shard too (its images), which wants a work-stealing pool.
        let p = prepare()?;
        let jobs = opts.jobs_or_cores();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .thread_name(|i| format!("verify-{i}"))
            .build()
            .map_err(|e| VerifyError::Usage(format!("cannot start {jobs} threads: {e}")))?;
        let outcomes = pool.install(|| {
            p.ds.manifest
                .shards
                .par_iter()
                .enumerate()
                .with_max_len(1)
                .map(|(i, e)| check(&p, i, e))
                .collect()
        });
        (p, outcomes, jobs)
    } else {
        // Without decoding a shard is one thread's work: plain threads, started before the
        // manifest is read, which matters on small datasets (see `prepare_then_map`).
        prepare_then_map(
            opts.jobs,
            prepare,
            |p| &p.ds.manifest.shards,
            check,
            Checksum::warm_up,
        )?
    };
    let Prepared {
        ds,
        mut problems,
        keys,
        ..
    } = p;
    let m = &ds.manifest;
    let KeyIndex { first, mut later } = keys.into_inner().unwrap_or_else(|e| e.into_inner());
    // Reported with the later shard, in shard order and each shard's key order.
    later.sort_unstable_by_key(|&(shard, pos, _)| (shard, pos));
    let mut later = later.into_iter().peekable();

    let mut samples = 0u64;
    let mut all_parsed = true;
    let mut shards_read = 0u64;
    let (mut bytes_read, mut decoded) = (0u64, 0u64);
    for (i, (o, entry)) in outcomes.into_iter().zip(&m.shards).enumerate() {
        problems.extend(o.problems);
        bytes_read += o.bytes_read;
        decoded += o.decoded;
        match o.samples {
            Some(n) => {
                samples += n;
                shards_read += 1;
            }
            None => all_parsed = false,
        }
        while let Some((_, _, key)) = later.next_if(|&(shard, _, _)| shard == i) {
            let j = first.get(&key).map_or(i, |&(j, _)| j);
            problems.push(Problem::member(
                &entry.file,
                key.as_str(),
                ProblemKind::DuplicateKey,
                format!(
                    "key {key:?} is also used in shard {}; keys must be unique in a dataset",
                    m.shards[j].file
                ),
            ));
        }
    }
    if all_parsed && samples != m.totals.samples {
        problems.push(Problem::dataset(
            ProblemKind::CountMismatch,
            format!(
                "the shards hold {samples} samples in total; the manifest says {}",
                m.totals.samples
            ),
        ));
    }
    let mut report = Report {
        ok: false,
        dataset: ds.dir.display().to_string(),
        manifest: ds.manifest_path.display().to_string(),
        decode: opts.decode,
        jobs,
        shards: m.shards.len() as u64,
        shards_read,
        samples,
        samples_expected: m.totals.samples,
        bytes_read,
        images_decoded: decoded,
        elapsed_secs: start.elapsed().as_secs_f64(),
        problem_counts: Default::default(),
        problems,
    };
    report.finish();
    Ok(report)
}

/// The opened dataset with what the shard checks share, and the problems found before reading
/// any shard (the manifest's own, unlisted shard files, the error report).
struct Prepared {
    ds: Dataset,
    problems: Vec<Problem>,
    fields: BTreeSet<String>,
    buffers: BufferPool,
    keys: Mutex<KeyIndex>,
    /// Set once a tar shard's page cache was found in small folios (see `maps_cheaply`): the
    /// rest of the run then streams tar shards without trying to map them first.
    small_folios: AtomicBool,
}

/// Every key of the dataset with the shard (and position in it) where it first appears. The
/// workers fill it as they finish shards, so the end of the run, which waits for them, is left
/// only the last shard's keys to add rather than all of them.
#[derive(Default)]
struct KeyIndex {
    first: HashMap<String, (usize, usize), foldhash::fast::RandomState>,
    /// Every other occurrence: shard, position in it, key.
    later: Vec<(usize, usize, String)>,
}

impl KeyIndex {
    /// An index sized for `samples` keys (the manifest's count, which is untrusted: capped, and
    /// the map grows past it).
    fn with_capacity(samples: u64) -> Self {
        Self {
            first: HashMap::with_capacity_and_hasher(
                usize::try_from(samples).unwrap_or(0).min(1 << 16),
                Default::default(),
            ),
            later: Vec::new(),
        }
    }

    /// Adds the keys of shard `shard`, each once, in its order. Shards may come in any order.
    fn record(&mut self, shard: usize, keys: Vec<String>) {
        for (pos, key) in keys.into_iter().enumerate() {
            match self.first.entry(key) {
                Entry::Vacant(v) => {
                    v.insert((shard, pos));
                }
                Entry::Occupied(mut o) => {
                    let here = (shard, pos);
                    let seen = *o.get();
                    let (first, other) = if here < seen {
                        (here, seen)
                    } else {
                        (seen, here)
                    };
                    *o.get_mut() = first;
                    self.later.push((other.0, other.1, o.key().clone()));
                }
            }
        }
    }
}

impl Prepared {
    fn new(
        target: &Path,
        opts: &VerifyOptions,
        progress: &dyn Progress,
    ) -> Result<Self, VerifyError> {
        let mut ds = open_dataset(target, &opts.limits)?;
        let mut problems = std::mem::take(&mut ds.problems);
        let m = &ds.manifest;
        let listed: BTreeSet<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
        for name in unlisted_shards(&ds.dir, &listed)? {
            problems.push(Problem::shard(
                &name,
                ProblemKind::UnexpectedShard,
                "looks like a shard but is not listed in the manifest",
            ));
        }
        problems.extend(check_error_report(&ds.dir, m.inputs.failed));
        let fields = m.fields.iter().cloned().collect();
        progress.start(
            m.shards.len() as u64,
            m.shards.iter().fold(0u64, |a, s| a.saturating_add(s.bytes)),
        );
        let keys = Mutex::new(KeyIndex::with_capacity(ds.manifest.totals.samples));
        Ok(Self {
            ds,
            problems,
            fields,
            buffers: BufferPool::default(),
            keys,
            small_folios: AtomicBool::new(false),
        })
    }
}

/// Runs `prepare` on the calling thread while `jobs` worker threads start (0: one per core, at
/// least two), the first running `warm` before it waits, then has the workers apply `f` to every
/// item of the prepared value (with its index), handed out one at a time so a slow item does not
/// hold up the others; returns the prepared value, the results in item order and the number of
/// threads that worked.
///
/// Starting the threads first matters on small datasets: their creation and first scheduling
/// overlap opening the manifest and listing the directory (about 0.1 ms of a 2.5 ms `verify` on
/// the benchmark VM; traced, both workers had started by the time the manifest was read). The
/// calling thread only waits: when it worked alongside one helper, a 25 MB `verify` took 4.2 ms
/// instead of 3.2. With one job (or if no thread can be started) the calling thread does the
/// work. If `prepare` fails or panics, the threads stop without work.
fn prepare_then_map<P: Send + Sync, I: Sync, T: Send, E>(
    jobs: usize,
    prepare: impl FnOnce() -> Result<P, E>,
    items: impl Fn(&P) -> &[I] + Sync,
    f: impl Fn(&P, usize, &I) -> T + Sync,
    warm: impl Fn() + Sync,
) -> Result<(P, Vec<T>, usize), E> {
    // `None` once `prepare` has failed: the threads then return at once.
    let slot: OnceLock<Option<P>> = OnceLock::new();
    let next = AtomicUsize::new(0);
    let work = |p: &P| {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items(p).get(i) else { break };
            done.push((i, f(p, i, item)));
        }
        done
    };
    // Results go to a shared list rather than through the threads' join handles: the scope
    // returns once every worker's closure has returned, without waiting for the threads to
    // finish exiting (glibc frees their stacks, then wakes the joiner), which was about a tenth
    // of a millisecond of a small `verify` on the benchmark VM.
    let results = Mutex::new(Vec::new());
    let started = AtomicUsize::new(0);
    // One thread warms up: others that got to the same work (a first-use check, say) would
    // only repeat it.
    let worker = |k: usize| {
        if k == 0 {
            warm();
        }
        if let Some(p) = slot.wait() {
            let done = work(p);
            // Poisoned only if another worker panicked; the scope raises that panic.
            if let Ok(mut all) = results.lock() {
                all.extend(done);
            }
        }
    };
    std::thread::scope(|s| {
        let (worker, started) = (&worker, &started);
        let spawn = move |k: usize| {
            std::thread::Builder::new()
                .name(format!("verify-{k}"))
                .spawn_scoped(s, move || worker(k))
                .is_ok()
        };
        match jobs {
            1 => {}
            // One per core, at least two (a second thread on a lone core costs little): two start
            // at once, and the second counts the cores (cgroup files, about 0.1 ms) and starts
            // the others, so that neither the count nor those starts hold up the first item.
            0 => {
                started.fetch_add(usize::from(spawn(0)), Ordering::Relaxed);
                let _ = std::thread::Builder::new()
                    .name("verify-1".into())
                    .spawn_scoped(s, move || {
                        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                        let others = (2..n).filter(|&k| spawn(k)).count();
                        started.fetch_add(1 + others, Ordering::Relaxed);
                        worker(1);
                    });
            }
            _ => {
                let n = (0..jobs).filter(|&k| spawn(k)).count();
                started.fetch_add(n, Ordering::Relaxed);
            }
        }
        /// Releases the threads when `prepare` returns an error or unwinds.
        struct Release<'a, P>(&'a OnceLock<Option<P>>);
        impl<P> Drop for Release<'_, P> {
            fn drop(&mut self) {
                let _ = self.0.set(None);
            }
        }
        let _release = Release(&slot);
        let prepared = prepare()?;
        slot.get_or_init(|| Some(prepared));
        Ok(())
    })?;
    let p = slot.into_inner().flatten().expect("set above");
    let mut all = results.into_inner().unwrap_or_else(|e| e.into_inner());
    // Whatever no thread took (none could be started, or one job).
    all.extend(work(&p));
    let threads = started.into_inner().max(1);
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok((p, all.into_iter().map(|(_, t)| t).collect(), threads))
}

/// Reads one shard and runs every check on it.
fn verify_shard(
    dir: &Path,
    entry: &ShardEntry,
    fields: &BTreeSet<String>,
    classes: &[String],
    opts: &VerifyOptions,
    buffers: &BufferPool,
    small_folios: &AtomicBool,
) -> ShardOutcome {
    let mut out = ShardOutcome::default();
    let name = entry.file.as_str();
    if !is_safe_file_name(name) {
        // Reported with the manifest's problems; never joined to a path.
        return out;
    }
    let path = dir.join(name);
    let problem = |kind, message: String| Problem::shard(name, kind, message);
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.problems.push(problem(
                ProblemKind::MissingShard,
                "listed in the manifest but not in the directory".into(),
            ));
            return out;
        }
        Err(e) => {
            out.problems.push(problem(
                ProblemKind::Unreadable,
                format!("cannot stat: {e}"),
            ));
            return out;
        }
        Ok(meta) if !meta.is_file() => {
            out.problems.push(problem(
                ProblemKind::Unreadable,
                "is not a regular file".into(),
            ));
            return out;
        }
        Ok(_) => {}
    }
    // A tar shard checked without decoding streams as well as it maps, and better when the page
    // cache holds it in small folios (see `maps_cheaply`).
    let streamable = entry.format == ShardFormat::Wds
        && entry.compression != Some(Compression::Zstd)
        && !opts.decode;
    if streamable && (!opts.mmap || small_folios.load(Ordering::Relaxed)) {
        stream_shard(&path, entry, fields, classes, buffers, &mut out);
        return out;
    }
    let loaded = load(
        &path,
        entry.compression == Some(Compression::Zstd),
        entry.uncompressed_bytes,
        opts.max_shard_bytes,
        opts.mmap,
        buffers,
    );
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            out.problems.push(problem(
                ProblemKind::Unreadable,
                format!("cannot read: {e}"),
            ));
            return out;
        }
    };
    if streamable && matches!(loaded.data, ShardBytes::Mapped(_)) && !maps_cheaply(&loaded.data) {
        small_folios.store(true, Ordering::Relaxed);
        buffers.give(loaded.data);
        stream_shard(&path, entry, fields, classes, buffers, &mut out);
        return out;
    }
    out.bytes_read = loaded.stored_len;
    let mut content = Vec::new();
    let mut stored_sum = loaded.stored_sum;
    if loaded.incomplete.is_none() {
        let records = if entry.format == ShardFormat::Wds {
            // Not used for tar shards, which hash in the same pass as their parse.
            Records::Skip
        } else if opts.decode {
            // The deep check recomputes every record checksum; for a mapped file, in the same
            // pass as the file checksum.
            if stored_sum.is_none() {
                Records::CheckAndHashFile
            } else {
                Records::Check
            }
        } else {
            // Hash the file first (one pass at memory speed); record checksums are needed only
            // to name damaged records when it does not match (see `check_packed`).
            let sum = *stored_sum.get_or_insert_with(|| Checksum::of(&loaded.data));
            if matches_manifest(entry, sum, loaded.uncompressed) {
                Records::Skip
            } else {
                Records::Check
            }
        };
        let sum = check_content(
            entry,
            &loaded.data,
            records,
            stored_sum.is_none(),
            fields,
            classes,
            opts,
            &mut out,
            &mut content,
        );
        stored_sum = stored_sum.or(sum);
    }
    let stored_sum = stored_sum.unwrap_or_else(|| Checksum::of(&loaded.data));
    compare_with_manifest(entry, &loaded, stored_sum, &mut out.problems);
    out.problems.extend(content);
    buffers.give(loaded.data);
    out
}

/// Bytes read per step when streaming a tar shard: `cat`'s read size, small enough that the
/// hash and the header checks that follow each read find the bytes in cache.
const STREAM_BUFFER: usize = 128 << 10;

/// Checks a plain tar shard without decoding and without mapping it, by reading it front to back
/// through a small buffer (see [`stream_tar`]): the data of members no check reads is hashed and
/// dropped, so memory stays bounded whatever the shard's size. It serves `--no-mmap`, and shards
/// whose page cache is in small folios, where it beats mapping (see `loader::maps_cheaply`);
/// on the 2 MiB folios pack leaves, mapping is faster (docs/benchmarks.md, sixth round).
fn stream_shard(
    path: &Path,
    entry: &ShardEntry,
    fields: &BTreeSet<String>,
    classes: &[String],
    buffers: &BufferPool,
    out: &mut ShardOutcome,
) {
    let name = entry.file.as_str();
    let unreadable = |e: std::io::Error| {
        Problem::shard(name, ProblemKind::Unreadable, format!("cannot read: {e}"))
    };
    let opened = std::fs::File::open(path).and_then(|f| {
        let len = f.metadata()?.len();
        Ok((f, len))
    });
    let (file, len) = match opened {
        Ok(o) => o,
        Err(e) => {
            out.problems.push(unreadable(e));
            return;
        }
    };
    let ctx = Ctx {
        shard: name,
        fields,
        classes,
        decode: false,
        expected_samples: entry.samples,
    };
    let mut buf = buffers.take();
    if buf.len() < STREAM_BUFFER {
        buf.resize(STREAM_BUFFER, 0);
    }
    let (streamed, buf) = stream_tar(file, len, buf, &ctx);
    buffers.give(ShardBytes::Owned(buf));
    let mut s = match streamed {
        Ok(s) => s,
        Err(e) => {
            out.problems.push(unreadable(e));
            return;
        }
    };
    out.bytes_read = s.len;
    let loaded = Loaded {
        data: ShardBytes::Owned(Vec::new()),
        stored_len: s.len,
        stored_sum: Some(s.sum),
        uncompressed: None,
        incomplete: None,
    };
    compare_with_manifest(entry, &loaded, s.sum, &mut out.problems);
    let mut content = Vec::new();
    take_scan(entry, &mut s.scan, out, &mut content);
    out.problems.extend(content);
}

/// Whether the shard's stored checksum (and, for a compressed shard, its uncompressed checksum
/// when the manifest records one) equals the manifest's. A checksum the manifest lacks or that
/// does not parse never matches.
fn matches_manifest(
    entry: &ShardEntry,
    stored_sum: Checksum,
    uncompressed: Option<(u64, Checksum)>,
) -> bool {
    let stored_ok = Checksum::parse(&entry.checksum) == Some(stored_sum);
    let uncompressed_ok = match (&entry.uncompressed_checksum, uncompressed) {
        (None, _) => true,
        (Some(expected), Some((_, sum))) => Checksum::parse(expected) == Some(sum),
        (Some(_), None) => false,
    };
    stored_ok && uncompressed_ok
}

/// Sizes and checksums, stored and uncompressed, and why the content could not be read whole.
fn compare_with_manifest(
    entry: &ShardEntry,
    l: &Loaded,
    stored_sum: Checksum,
    problems: &mut Vec<Problem>,
) {
    let name = entry.file.as_str();
    let mut push = |kind, message: String| problems.push(Problem::shard(name, kind, message));
    if l.stored_len != entry.bytes {
        push(
            ProblemKind::SizeMismatch,
            format!(
                "the file is {} bytes; the manifest says {}",
                l.stored_len, entry.bytes
            ),
        );
    }
    if let Some(expected) = Checksum::parse(&entry.checksum) {
        if expected != stored_sum {
            push(
                ProblemKind::ChecksumMismatch,
                format!("the file hashes to {stored_sum}; the manifest says {expected}"),
            );
        }
    }
    if let (Some((len, sum)), Some(elen)) = (l.uncompressed, entry.uncompressed_bytes) {
        if len != elen {
            push(
                ProblemKind::UncompressedSizeMismatch,
                format!("it decompresses to {len} bytes; the manifest says {elen}"),
            );
        }
        let expected = entry
            .uncompressed_checksum
            .as_deref()
            .and_then(Checksum::parse);
        if let Some(expected) = expected {
            if expected != sum {
                push(
                    ProblemKind::UncompressedChecksumMismatch,
                    format!(
                        "it decompresses to bytes hashing to {sum}; the manifest says {expected}"
                    ),
                );
            }
        }
    }
    match &l.incomplete {
        None => {}
        Some(Incomplete::TooLarge { limit }) => push(
            ProblemKind::TooLarge,
            format!(
                "over the {limit}-byte in-memory limit for a shard; only its checksum was checked"
            ),
        ),
        Some(Incomplete::OverCap { cap }) => push(
            ProblemKind::UncompressedSizeMismatch,
            format!("it decompresses to more than the {cap} bytes the manifest says"),
        ),
        Some(Incomplete::Decompress(e)) => push(
            ProblemKind::Decompress,
            format!("not a valid zstd stream: {e}"),
        ),
    }
}

/// Structure, labels, metadata and (with `decode`) images of a completely read shard. Problems go
/// to `problems`; counts and keys to `out`. `records` applies to packed shards; with `hash_file`,
/// a tar scan hashes `data` on the way and the checksum is returned.
#[allow(clippy::too_many_arguments)]
fn check_content(
    entry: &ShardEntry,
    data: &[u8],
    records: Records,
    hash_file: bool,
    fields: &BTreeSet<String>,
    classes: &[String],
    opts: &VerifyOptions,
    out: &mut ShardOutcome,
    problems: &mut Vec<Problem>,
) -> Option<Checksum> {
    let ctx = Ctx {
        shard: &entry.file,
        fields,
        classes,
        decode: opts.decode,
        expected_samples: entry.samples,
    };
    let mut scan = match entry.format {
        ShardFormat::Wds => check_tar(data, &ctx, hash_file),
        ShardFormat::Packed => check_packed(data, &ctx, records),
    };
    take_scan(entry, &mut scan, out, problems);
    if opts.decode {
        let spec = TransformSpec {
            resize: Resize::None,
            encode: Encode::Raw,
            limits: opts.limits,
            ..TransformSpec::default()
        };
        let results: Vec<Option<Problem>> = scan
            .images
            .par_iter()
            .map(|job| decode_one(&entry.file, job, &spec))
            .collect();
        out.decoded = scan.images.len() as u64;
        problems.extend(results.into_iter().flatten());
    }
    scan.file_sum
}

/// Takes a shard scan's problems, sample count (checked against the manifest's) and keys.
fn take_scan(
    entry: &ShardEntry,
    scan: &mut Scan<'_>,
    out: &mut ShardOutcome,
    problems: &mut Vec<Problem>,
) {
    problems.append(&mut scan.problems);
    let samples = scan.samples;
    if samples != entry.samples {
        problems.push(Problem::shard(
            &entry.file,
            ProblemKind::CountMismatch,
            format!(
                "holds {samples} samples; the manifest says {}",
                entry.samples
            ),
        ));
    }
    out.samples = Some(samples);
    out.keys = std::mem::take(&mut scan.keys);
}

fn decode_one(shard: &str, job: &ImageJob<'_>, spec: &TransformSpec) -> Option<Problem> {
    match transform(&job.data, spec) {
        Err(e) => Some(Problem::member(
            shard,
            job.member.as_str(),
            ProblemKind::Decode,
            format!("does not decode ({}): {}", e.kind.as_str(), e.message),
        )),
        Ok(t) => match job.expect {
            Some((w, h)) if (u64::from(t.width), u64::from(t.height)) != (w, h) => {
                Some(Problem::member(
                    shard,
                    job.member.as_str(),
                    ProblemKind::ImageSizeMismatch,
                    format!(
                        "decodes to {}x{}, but its metadata says {w}x{h}",
                        t.width, t.height
                    ),
                ))
            }
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardtool_manifest::Manifest;
    use shardtool_wds::TarWriter;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn prepare_then_map_keeps_item_order_and_the_thread_bound() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for jobs in [0, 1, 2, 3, 8] {
            for n in [0usize, 1, 2, 5, 40] {
                let names = std::sync::Mutex::new(std::collections::HashSet::new());
                let (items, out, started) = prepare_then_map(
                    jobs,
                    || Ok::<_, ()>((0..n).collect::<Vec<usize>>()),
                    |items| items.as_slice(),
                    |_, j, &i| {
                        assert_eq!(i, j, "the index of each item is passed with it");
                        names.lock().unwrap().insert(std::thread::current().id());
                        i * 10
                    },
                    || {},
                )
                .unwrap();
                assert_eq!(out, items.iter().map(|i| i * 10).collect::<Vec<_>>());
                assert_eq!(items.len(), n);
                let threads = names.into_inner().unwrap().len();
                // 0: one per core, at least two.
                let bound = if jobs == 0 { cores.max(2) } else { jobs };
                assert_eq!(started, bound, "threads started for --jobs {jobs}");
                assert!(threads <= bound, "{threads} threads for --jobs {jobs}");
            }
        }
    }

    #[test]
    fn the_key_index_finds_what_a_merge_in_shard_order_finds_in_any_order() {
        let shards: [&[&str]; 4] = [&["a", "b", "c"], &["d", "a"], &["b", "e", "a"], &["e"]];
        // The merge this replaces: shards in order, a key's first shard wins.
        let mut first = HashMap::new();
        let mut want = Vec::new();
        for (i, keys) in shards.iter().enumerate() {
            for k in *keys {
                match first.get(k) {
                    Some(&j) => want.push((i, k.to_string(), j)),
                    None => {
                        first.insert(*k, i);
                    }
                }
            }
        }
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]] {
            let mut index = KeyIndex::with_capacity(3);
            for i in order {
                index.record(i, shards[i].iter().map(|k| k.to_string()).collect());
            }
            let mut later = index.later.clone();
            later.sort_unstable_by_key(|&(s, pos, _)| (s, pos));
            let got: Vec<_> = later
                .into_iter()
                .map(|(s, _, k)| {
                    let j = index.first[&k].0;
                    (s, k, j)
                })
                .collect();
            assert_eq!(got, want, "shards recorded in the order {order:?}");
        }
    }

    #[test]
    fn a_failed_or_panicking_prepare_releases_the_waiting_threads() {
        // Returning at all proves the started threads were released (0: the first thread
        // starts the others).
        for jobs in [0, 4] {
            let failed = prepare_then_map(
                jobs,
                || Err::<Vec<u8>, _>("no manifest"),
                |v| v.as_slice(),
                |_, _, _| unreachable!("no work after a failed prepare"),
                || {},
            );
            assert_eq!(failed.err(), Some("no manifest"));
            let panicked = std::panic::catch_unwind(|| {
                prepare_then_map(
                    jobs,
                    || -> Result<Vec<u8>, ()> { panic!("prepare broke") },
                    |v| v.as_slice(),
                    |_, _, _| (),
                    || {},
                )
            });
            assert!(panicked.is_err());
        }
    }

    /// A tar whose `.jpg` members are `jpg` bytes long.
    fn tar_sized(keys: &[&str], jpg: usize) -> Vec<u8> {
        let mut w = TarWriter::new(Vec::new());
        let image: Vec<u8> = (0..jpg).map(|i| (i % 251) as u8).collect();
        for k in keys {
            w.append(&format!("{k}.cls"), b"0").unwrap();
            w.append(&format!("{k}.jpg"), &image).unwrap();
            w.append(&format!("{k}.json"), br#"{"label":0}"#).unwrap();
        }
        w.finish().unwrap()
    }

    /// Writes shards holding `keys` and a manifest that describes them exactly.
    fn dataset(dir: &Path, shards: &[&[&str]]) {
        dataset_sized(dir, shards, 2);
    }

    /// `dataset` with `.jpg` members of `jpg` bytes.
    fn dataset_sized(dir: &Path, shards: &[&[&str]], jpg: usize) {
        let mut entries = Vec::new();
        for (i, keys) in shards.iter().enumerate() {
            let bytes = tar_sized(keys, jpg);
            let file = format!("s-{i:06}.tar");
            std::fs::write(dir.join(&file), &bytes).unwrap();
            entries.push(ShardEntry {
                file,
                format: ShardFormat::Wds,
                compression: None,
                samples: keys.len() as u64,
                bytes: bytes.len() as u64,
                checksum: Checksum::of(&bytes).to_string(),
                uncompressed_bytes: None,
                uncompressed_checksum: None,
            });
        }
        let m = Manifest::new(
            "test",
            vec!["only".into()],
            vec!["cls".into(), "jpg".into(), "json".into()],
            entries,
        );
        std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
    }

    struct Count(AtomicU64, AtomicU64);

    impl Progress for Count {
        fn start(&self, shards: u64, _: u64) {
            self.0.store(shards, Ordering::Relaxed);
        }
        fn shard_done(&self, _: &str, _: u64) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn kinds(r: &Report) -> Vec<(ProblemKind, Option<&str>)> {
        r.problems
            .iter()
            .map(|p| (p.kind, p.shard.as_deref()))
            .collect()
    }

    #[test]
    fn a_whole_dataset_passes_and_progress_sees_every_shard() {
        let dir = tempfile::tempdir().unwrap();
        dataset(dir.path(), &[&["a", "b"], &["c"]]);
        for mmap in [true, false] {
            let opts = VerifyOptions {
                jobs: 2,
                mmap,
                ..Default::default()
            };
            let count = Count(AtomicU64::new(0), AtomicU64::new(0));
            let r = verify(dir.path(), &opts, &count).unwrap();
            assert!(r.ok, "{:?}", r.problems);
            assert_eq!((r.shards, r.samples, r.samples_expected), (2, 3, 3));
            assert_eq!(count.0.load(Ordering::Relaxed), 2);
            assert_eq!(count.1.load(Ordering::Relaxed), 2);
        }
    }

    #[test]
    fn mapped_and_streamed_tar_shards_have_the_same_findings() {
        // Samples of about 2 KB and of about 100 KB, mapped, streamed after the probe of the
        // mapping found small folios, and (mmap off) streamed through the 128 KiB buffer; each
        // clean, then with a byte of an image flipped and a key repeated. The probe's answer is
        // forced (other tests running meanwhile take either path, which is the point).
        use crate::loader::{PROBE_ANSWER, PROBE_LOCK};
        let _answer = PROBE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for jpg in [2 << 10, 100 << 10] {
            let dir = tempfile::tempdir().unwrap();
            dataset_sized(dir.path(), &[&["a", "b"], &["c", "a"]], jpg);
            let run = |mmap, answer| {
                PROBE_ANSWER.store(answer, Ordering::Relaxed);
                let opts = VerifyOptions {
                    jobs: 2,
                    mmap,
                    ..Default::default()
                };
                let r = verify(dir.path(), &opts, &NoProgress).unwrap();
                PROBE_ANSWER.store(0, Ordering::Relaxed);
                r
            };
            let (mapped, probed, read) = (run(true, 1), run(true, 2), run(false, 0));
            assert_eq!(mapped.problems, read.problems, "jpg of {jpg} bytes");
            assert_eq!(probed.problems, read.problems, "jpg of {jpg} bytes");
            assert_eq!(probed.bytes_read, read.bytes_read);
            assert_eq!(
                kinds(&mapped),
                [(ProblemKind::DuplicateKey, Some("s-000001.tar"))]
            );
            assert_eq!(
                (mapped.samples, mapped.bytes_read),
                (read.samples, read.bytes_read)
            );
            let shard = dir.path().join("s-000000.tar");
            let mut bytes = std::fs::read(&shard).unwrap();
            bytes[512 * 3 + jpg / 2] ^= 1; // inside a.jpg's data
            std::fs::write(&shard, &bytes).unwrap();
            let (mapped, probed, read) = (run(true, 1), run(true, 2), run(false, 0));
            assert_eq!(mapped.problems, read.problems, "jpg of {jpg} bytes");
            assert_eq!(probed.problems, read.problems, "jpg of {jpg} bytes");
            assert!(
                kinds(&mapped).contains(&(ProblemKind::ChecksumMismatch, Some("s-000000.tar"))),
                "{:?}",
                mapped.problems
            );
        }
    }

    #[test]
    fn keys_repeated_across_shards_name_the_later_shard() {
        let dir = tempfile::tempdir().unwrap();
        dataset(dir.path(), &[&["a", "b"], &["c", "a"]]);
        let r = verify(dir.path(), &VerifyOptions::default(), &NoProgress).unwrap();
        assert_eq!(
            kinds(&r),
            vec![(ProblemKind::DuplicateKey, Some("s-000001.tar"))]
        );
        assert_eq!(r.problems[0].member_or_record.as_deref(), Some("a"));
    }

    #[test]
    fn missing_and_unlisted_shards() {
        let dir = tempfile::tempdir().unwrap();
        dataset(dir.path(), &[&["a"], &["b"]]);
        std::fs::rename(dir.path().join("s-000001.tar"), dir.path().join("x.tar")).unwrap();
        let r = verify(dir.path(), &VerifyOptions::default(), &NoProgress).unwrap();
        assert_eq!(
            kinds(&r),
            vec![
                (ProblemKind::UnexpectedShard, Some("x.tar")),
                (ProblemKind::MissingShard, Some("s-000001.tar")),
            ]
        );
        assert_eq!(r.problem_counts.len(), 2);
    }

    #[test]
    fn unopenable_targets_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let o = VerifyOptions::default();
        assert!(matches!(
            verify(&dir.path().join("no"), &o, &NoProgress),
            Err(VerifyError::NotFound { .. })
        ));
        assert!(matches!(
            verify(dir.path(), &o, &NoProgress),
            Err(VerifyError::NoManifest { .. })
        ));
        std::fs::write(dir.path().join("manifest.json"), "[]").unwrap();
        assert!(matches!(
            verify(dir.path(), &o, &NoProgress),
            Err(VerifyError::Manifest { .. })
        ));
    }
}
