//! The verification run: open the manifest, compare it with the directory, then read and check
//! every shard once, in parallel, and merge the per-shard findings in shard order.

use crate::dataset::{open_dataset, unlisted_shards};
use crate::error_report::check_error_report;
use crate::loader::BufferPool;
use crate::report::{Problem, ProblemKind, Report};
use crate::shard::{verify_shard, Shared};
use crate::{VerifyError, DEFAULT_MAX_SHARD_BYTES};
use foldhash::fast::RandomState as FoldHash;
use rayon::prelude::*;
use shardtool_core::Limits;
use shardtool_manifest::ShardEntry;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Instant;

/// What to check and with how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Decode every image and compare its size with its metadata.
    pub decode: bool,
    /// Worker threads; 0 (the default): one per core the process may use.
    pub jobs: usize,
    /// Limits for decoding images (`max_pixels`) and reading the manifest (`max_header_bytes`).
    /// `max_pixels` left at its default follows the dataset's own limit (a pack may have raised
    /// it); another value caps what is decoded, the dataset's limit aside.
    pub limits: Limits,
    /// Largest (uncompressed) shard read into memory; larger ones are only checksummed. Streamed
    /// tar shards (checked without `decode`) and mapped shards (see `mmap`) take no memory of
    /// their own and have no such limit.
    pub max_shard_bytes: u64,
    /// Map plain shards that are checked whole (packed shards, and tar shards with `decode`)
    /// instead of reading them into memory: one copy fewer. Off by default: a mapped file that
    /// another process truncates during the run kills the process with SIGBUS. Tar shards
    /// checked without `decode` are always streamed.
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
            mmap: false,
        }
    }

    /// `jobs`, or the number of cores the process may use when it is 0.
    pub fn jobs_or_cores(&self) -> usize {
        match self.jobs {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// Maps `items` in order with `f`, one item per task, on a pool of `jobs` threads named
/// `<name>-<i>`; with one job, on the calling thread (no thread is started; fan-outs inside `f`
/// must then run in order themselves, or they would start rayon's global pool).
pub fn map_on_threads<T: Sync, R: Send>(
    jobs: usize,
    name: &'static str,
    items: &[T],
    f: impl Fn(&T) -> R + Sync + Send,
) -> Result<Vec<R>, VerifyError> {
    if jobs <= 1 {
        return Ok(items.iter().map(f).collect());
    }
    let pool = pool_within(jobs, move |i| format!("{name}-{i}"))?;
    Ok(pool.install(|| items.par_iter().with_max_len(1).map(f).collect()))
}

/// Maps `items` in order with `f` on `threads` plain threads (fewer where the system starts no
/// more), each taking the next item as it comes free. Unlike rayon's work stealing, a thread
/// waiting inside `f` never starts another item: no more than `threads` items are in hand at
/// once, as the room held for remote shards ([`HoldShards`]) counts on. Fan-outs inside `f`
/// run on a pool `f` installs.
pub fn map_in_turn<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = shardtool_core::on_threads(threads.clamp(1, items.len().max(1)), || {
        let mut mine = Vec::new();
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(k) else {
                return mine;
            };
            mine.push((k, f(item)));
        }
    });
    let mut all: Vec<(usize, R)> = done.into_iter().flatten().collect();
    all.sort_unstable_by_key(|(k, _)| *k);
    all.into_iter().map(|(_, r)| r).collect()
}

/// A pool of `jobs` threads, or of as many as a thread limit (`ulimit -u`) leaves: the work
/// inside it uses it too (outside any pool, rayon's global one would panic where none starts).
pub fn pool_within(
    jobs: usize,
    name: impl Fn(usize) -> String + Clone + Send + Sync + 'static,
) -> Result<rayon::ThreadPool, VerifyError> {
    let build = |n: usize| {
        let name = name.clone();
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(name)
            .build()
    };
    let mut last = None;
    for n in (1..=jobs.max(1)).rev() {
        match build(n) {
            Ok(pool) => return Ok(pool),
            Err(e) => last = Some(e),
        }
    }
    Err(VerifyError::Usage(format!(
        "cannot start a thread: {} (a thread limit: ulimit -u)",
        last.map_or_else(String::new, |e| e.to_string())
    )))
}

/// Makes each shard of the folder being read there while it is read, for a folder whose shards
/// are not all there from the start: a remote dataset's view (`RemoteView`) fetches each into
/// the cache when it is held.
pub trait HoldShards: Sync {
    /// Shards that may be held at once (the room kept for them).
    fn at_once(&self) -> usize;
    /// Called before shard `index` (of the manifest) is read: it stays there until what this
    /// returns is dropped. `None` where it could not be made so; the shard is then missing.
    fn hold(&self, index: usize) -> Option<Box<dyn Send + '_>>;
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

/// Verifies the dataset at `target` (a directory holding `manifest.json`, or a manifest path).
///
/// Returns `Err` only when the dataset cannot be opened at all; everything found wrong inside it
/// is a [`Problem`] in the report.
pub fn verify(
    target: &Path,
    opts: &VerifyOptions,
    progress: &dyn Progress,
) -> Result<Report, VerifyError> {
    verify_in(target, opts, progress, None)
}

/// [`verify`]; with `view`, the folder's shards are held as they are read (a remote dataset's,
/// fetched then), as many at once as the view allows.
pub(crate) fn verify_in(
    target: &Path,
    opts: &VerifyOptions,
    progress: &dyn Progress,
    view: Option<&dyn HoldShards>,
) -> Result<Report, VerifyError> {
    let start = Instant::now();
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
    let optional = m.optional_fields.iter().cloned().collect();
    progress.start(
        m.shards.len() as u64,
        m.shards.iter().fold(0u64, |a, s| a.saturating_add(s.bytes)),
    );
    let jobs = opts.jobs_or_cores();
    let shared = Shared {
        dir: &ds.dir,
        fields: &fields,
        optional: &optional,
        classes: &m.classes,
        json_input: m.pack.get("json").and_then(|v| v.as_str()) == Some("input"),
        renumbered: m.pack.get("keys").and_then(|v| v.as_str()) == Some("index"),
        max_pixels: Limits::dataset_max_pixels(m.pack.get("max_pixels").and_then(|v| v.as_u64())),
        opts,
        jobs,
        buffers: BufferPool::default(),
    };
    // One shard per task, handed out as threads come free; with `decode` a shard's images fan
    // out over the same pool.
    let indexed: Vec<(usize, &ShardEntry)> = m.shards.iter().enumerate().collect();
    let mut outcomes = match view {
        None => map_on_threads(jobs, "verify", &m.shards, |entry| {
            let o = verify_shard(entry, &shared);
            progress.shard_done(&entry.file, o.bytes_read);
            o
        })?,
        // Shards held as they are read, each by a thread of its own (as many as the view
        // holds at once), and checked on a pool of `jobs` threads, which hold none: a check
        // waiting on its images may take up another held shard's check meanwhile, but never
        // a shard not yet held.
        Some(view) => {
            let check = pool_within(jobs, |i| format!("verify-{i}"))?;
            map_in_turn(view.at_once(), &indexed, |&(i, entry)| {
                let _held = view.hold(i);
                let o = check.install(|| verify_shard(entry, &shared));
                progress.shard_done(&entry.file, o.bytes_read);
                o
            })
        }
    };

    // Merged in shard order: a key repeated across shards is reported with the later shard.
    let capacity = usize::try_from(m.totals.samples).map_or(0, |n| n.min(1 << 24));
    let mut first: HashMap<&str, usize, _> =
        HashMap::with_capacity_and_hasher(capacity, FoldHash::default());
    let mut samples = 0u64;
    let mut all_parsed = true;
    let mut shards_read = 0u64;
    let (mut bytes_read, mut decoded) = (0u64, 0u64);
    for (i, (o, entry)) in outcomes.iter_mut().zip(&m.shards).enumerate() {
        problems.append(&mut o.problems);
        bytes_read += o.bytes_read;
        decoded += o.decoded;
        match o.samples {
            Some(n) => {
                samples += n;
                shards_read += 1;
            }
            None => all_parsed = false,
        }
        for key in o.keys.iter() {
            if let Some(&j) = first.get(key) {
                problems.push(Problem::member(
                    &entry.file,
                    key,
                    ProblemKind::DuplicateKey,
                    format!(
                        "key {key:?} is also used in shard {}; keys must be unique in a dataset",
                        m.shards[j].file
                    ),
                ));
            } else {
                first.insert(key, i);
            }
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
        cache_repaired: None,
    };
    report.finish();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardtool_core::Checksum;
    use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
    use shardtool_wds::TarWriter;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A tar whose `.jpg` members are `image`.
    fn tar_of(keys: &[&str], image: &[u8]) -> Vec<u8> {
        let mut w = TarWriter::new(Vec::new());
        for k in keys {
            w.append(&format!("{k}.cls"), b"0").unwrap();
            w.append(&format!("{k}.jpg"), image).unwrap();
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
        let image: Vec<u8> = (0..jpg).map(|i| (i % 251) as u8).collect();
        dataset_of(dir, shards, &image);
    }

    /// `dataset` with `.jpg` members of `image`.
    fn dataset_of(dir: &Path, shards: &[&[&str]], image: &[u8]) {
        let mut entries = Vec::new();
        for (i, keys) in shards.iter().enumerate() {
            let bytes = tar_of(keys, image);
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

    /// Counts the shards held at once, each hold lasting a moment.
    struct Holds {
        at_once: usize,
        now: AtomicU64,
        most: AtomicU64,
    }

    struct Hold<'a>(&'a AtomicU64);

    impl Drop for Hold<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl HoldShards for Holds {
        fn at_once(&self) -> usize {
            self.at_once
        }
        fn hold(&self, _: usize) -> Option<Box<dyn Send + '_>> {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(2));
            Some(Box::new(Hold(&self.now)))
        }
    }

    #[test]
    fn held_shards_are_never_more_than_the_view_allows_though_images_fan_out() {
        // With --decode a shard's images fan out over threads; a thread waiting on them must
        // not start (and hold) another shard, or a cache limit sized for `at_once` overflows.
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<Vec<String>> = (0..24)
            .map(|s| (0..40).map(|k| format!("s{s}k{k}")).collect())
            .collect();
        let shards: Vec<Vec<&str>> = (names.iter())
            .map(|v| v.iter().map(String::as_str).collect())
            .collect();
        let shards: Vec<&[&str]> = shards.iter().map(Vec::as_slice).collect();
        // Images that take a moment to decode, so that threads wait on each other's.
        let noise = shardtool_core::Rgb8Image {
            width: 192,
            height: 192,
            pixels: (0..192 * 192 * 3u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect(),
        };
        let png = shardtool_image::encode_png_rgb8(&noise).unwrap();
        dataset_of(dir.path(), &shards, &png);
        // Rounds: the overflow it guards against came in some runs only. Fewer shards at once
        // than decoding threads, and more.
        for at_once in [1, 3, 6, 1, 3, 6] {
            let holds = Holds {
                at_once,
                now: AtomicU64::new(0),
                most: AtomicU64::new(0),
            };
            let opts = VerifyOptions {
                decode: true,
                jobs: 4,
                ..Default::default()
            };
            let r = verify_in(dir.path(), &opts, &NoProgress, Some(&holds)).unwrap();
            assert_eq!(r.samples, 24 * 40);
            let most = holds.most.load(Ordering::SeqCst);
            assert!(
                most <= at_once as u64,
                "{most} held at once, {at_once} allowed"
            );
            assert_eq!(holds.now.load(Ordering::SeqCst), 0);
        }
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
    fn streamed_tar_shards_have_the_findings_of_damaged_bytes() {
        // Samples of about 2 KB and of about 100 KB (shorter and longer than the 128 KiB
        // buffer), clean but for a key repeated across shards, then with a byte of an image
        // flipped; `mmap` changes nothing for tar shards checked without decoding.
        for jpg in [2 << 10, 100 << 10] {
            let dir = tempfile::tempdir().unwrap();
            dataset_sized(dir.path(), &[&["a", "b"], &["c", "a"]], jpg);
            let run = |mmap| {
                let opts = VerifyOptions {
                    jobs: 2,
                    mmap,
                    ..Default::default()
                };
                verify(dir.path(), &opts, &NoProgress).unwrap()
            };
            let (mapped, read) = (run(true), run(false));
            assert_eq!(mapped.problems, read.problems, "jpg of {jpg} bytes");
            assert_eq!(
                kinds(&read),
                [(ProblemKind::DuplicateKey, Some("s-000001.tar"))]
            );
            assert_eq!(read.bytes_read, mapped.bytes_read);
            let shard = dir.path().join("s-000000.tar");
            let mut bytes = std::fs::read(&shard).unwrap();
            bytes[512 * 3 + jpg / 2] ^= 1; // inside a.jpg's data
            std::fs::write(&shard, &bytes).unwrap();
            let (mapped, read) = (run(true), run(false));
            assert_eq!(mapped.problems, read.problems, "jpg of {jpg} bytes");
            assert!(
                kinds(&read).contains(&(ProblemKind::ChecksumMismatch, Some("s-000000.tar"))),
                "{:?}",
                read.problems
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
    fn a_shard_lists_its_first_thousand_problems_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        // 1,200 samples whose keys break the key rules: one problem each.
        let keys: Vec<String> = (0..1200).map(|i| format!("bad key {i}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        dataset(dir.path(), &[&keys]);
        let r = verify(dir.path(), &VerifyOptions::default(), &NoProgress).unwrap();
        assert_eq!(r.problem_counts[&ProblemKind::BadKey], 1000);
        assert_eq!(r.problem_counts[&ProblemKind::MoreProblems], 1);
        let last = r.problems.last().unwrap();
        assert_eq!(last.kind, ProblemKind::MoreProblems);
        assert!(last.message.starts_with("200 more problems"), "{last}");
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
        // A manifest that cannot be read: the cause is in the message, and only there (so a
        // chain printed cause by cause shows it once).
        std::fs::create_dir(dir.path().join("manifest.json")).unwrap();
        let err = verify(dir.path(), &o, &NoProgress).unwrap_err();
        assert!(matches!(err, VerifyError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("directory"), "{err}");
        assert!(std::error::Error::source(&err).is_none());
        std::fs::remove_dir(dir.path().join("manifest.json")).unwrap();
        std::fs::write(dir.path().join("manifest.json"), "[]").unwrap();
        assert!(matches!(
            verify(dir.path(), &o, &NoProgress),
            Err(VerifyError::Manifest { .. })
        ));
    }

    #[test]
    fn map_on_threads_keeps_order_and_one_job_stays_on_the_calling_thread() {
        let items: Vec<u32> = (0..50).collect();
        let me = std::thread::current().id();
        for jobs in [1, 2, 4] {
            let out = map_on_threads(jobs, "t", &items, |&i| {
                (i * 3, std::thread::current().id() == me)
            })
            .unwrap();
            let values: Vec<u32> = out.iter().map(|o| o.0).collect();
            assert_eq!(values, items.iter().map(|i| i * 3).collect::<Vec<_>>());
            let here = out.iter().filter(|o| o.1).count();
            // One job: everything on this thread; more: everything on the pool's threads.
            assert_eq!(here, if jobs == 1 { items.len() } else { 0 }, "jobs {jobs}");
        }
    }
}
