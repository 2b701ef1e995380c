//! `shardtool verify`: flags → `VerifyOptions` → `shardtool_verify::verify` → report (text or
//! JSON) and exit status (0 whole, 1 problems found, 2 cannot open).

use crate::args::VerifyArgs;
use crate::Failure;
use anyhow::anyhow;
use indicatif::{ProgressBar, ProgressStyle};
use shardtool_cache::{Location, RemoteDataset};
use shardtool_verify::{verify, Progress, Report, VerifyError, VerifyOptions};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};

/// A byte-based progress bar on a terminal; nothing otherwise.
pub(crate) struct Bar {
    bar: Option<ProgressBar>,
    shards: AtomicU64,
    done: AtomicU64,
}

impl Bar {
    pub(crate) fn new(show: bool) -> Self {
        let bar = (show && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes}  {binary_bytes_per_sec}  {msg}  ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Self {
            bar,
            shards: AtomicU64::new(0),
            done: AtomicU64::new(0),
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn start(&self, shards: u64, bytes: u64) {
        self.shards.store(shards, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.set_length(bytes);
            b.set_message(format!("0/{shards} shards"));
        }
    }

    fn shard_done(&self, _shard: &str, bytes: u64) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(b) = &self.bar {
            b.inc(bytes);
            b.set_message(format!(
                "{done}/{} shards",
                self.shards.load(Ordering::Relaxed)
            ));
        }
    }
}

/// The options the flags ask for.
pub fn options(a: &VerifyArgs) -> VerifyOptions {
    VerifyOptions {
        decode: a.decode,
        mmap: a.mmap,
        // None: 0, one per core (counted while the dataset is opened).
        ..VerifyOptions::with_jobs(a.jobs.map_or(0, |j| j as usize))
    }
}

/// The stable name of an error that stopped verification before it started.
pub(crate) fn error_kind(e: &VerifyError) -> &'static str {
    match e {
        VerifyError::NotFound { .. } => "not_found",
        VerifyError::NoManifest { .. } => "no_manifest",
        VerifyError::Io { .. } => "unreadable",
        VerifyError::Manifest { .. } => "manifest_unparsable",
        VerifyError::UnknownFile { .. } => "unknown_file",
        VerifyError::Shard { .. } => "shard_not_dataset",
        VerifyError::Usage(_) => "usage",
        VerifyError::Remote(_) => "fetch_failed",
        VerifyError::CacheTooSmall(_) => "cache_too_small",
        _ => "error",
    }
}

/// The report of a target that could be opened; otherwise a usage failure, announced as one JSON
/// error document first under `--json` (shared by verify, inspect and preview).
pub(crate) fn opened<R>(result: Result<R, VerifyError>, json: bool) -> Result<R, Failure> {
    result.map_err(|e| {
        if json {
            print_error_json(&e);
        }
        Failure::usage(e)
    })
}

/// Prints `{"ok": false, "error": {...}}` for a target that could not be opened.
fn print_error_json(e: &VerifyError) {
    super::print_error_doc(true, error_kind(e), e);
}

/// Runs `shardtool verify`.
pub fn run(a: VerifyArgs) -> Result<(), Failure> {
    let opts = options(&a);
    let report = match open_remote(&a.dataset, &a.cache, a.json)? {
        Some((ds, workers)) => {
            let bar = Bar::new(!a.quiet && !a.json);
            let result = shardtool_verify::verify_remote(&ds, workers, &opts, &bar);
            bar.finish();
            fetched(result, a.json)?
        }
        None => {
            let bar = Bar::new(!a.quiet && !a.json);
            let result = verify(&local_target(&a.dataset), &opts, &bar);
            bar.finish();
            opened(result, a.json)?
        }
    };
    if a.json {
        let text = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
        outln!("{text}");
    } else {
        print_human(&report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(Failure::run(anyhow!(
            "{} problem(s) found in {}",
            report.problems.len(),
            report.dataset
        )))
    }
}

fn print_human(r: &Report) {
    let secs = r.elapsed_secs.max(1e-9);
    outln!(
        "verify {}: {} shards, {} samples, {:.1} MB read in {:.2} s ({:.0} MB/s){}",
        r.dataset,
        r.shards,
        r.samples,
        r.bytes_read as f64 / 1e6,
        r.elapsed_secs,
        r.bytes_read as f64 / 1e6 / secs,
        if r.decode && r.images_decoded > 0 {
            format!(", {} images decoded", r.images_decoded)
        } else if r.decode {
            ", no encoded images to decode".to_string()
        } else {
            String::new()
        }
    );
    for p in &r.problems {
        outln!("  {p}");
    }
    if let Some(n @ 1..) = r.cache_repaired {
        outln!(
            "  {n} cached cop{} of the shards held other bytes than the manifest names (damaged \
             in the cache, or an earlier version of the shard) and {} fetched again",
            if n == 1 { "y" } else { "ies" },
            if n == 1 { "was" } else { "were" }
        );
    }
    if r.ok {
        outln!(
            "OK: every shard matches the manifest (files, sizes, checksums, counts, structure, \
             keys, fields, labels{})",
            if r.decode { ", images" } else { "" }
        );
        if !r.decode {
            outln!("    (images were not decoded; add --decode to check them too)");
        }
    } else {
        let shards: std::collections::BTreeSet<&str> = r
            .problems
            .iter()
            .filter_map(|p| p.shard.as_deref())
            .collect();
        let kinds: Vec<String> = r
            .problem_counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        outln!(
            "FAILED: {} problem(s) in {} file(s): {}",
            r.problems.len(),
            shards.len(),
            kinds.join(", ")
        );
        if r.samples != r.samples_expected {
            outln!(
                "    samples found: {} of {} listed; shards read: {} of {}",
                r.samples,
                r.samples_expected,
                r.shards_read,
                r.shards
            );
        }
        // An image, or a shard, this machine had no memory for says nothing of the dataset.
        let faults = r.problems.iter().filter(|p| {
            p.message.contains("(machine_fault)") || p.message.contains("of the shard in memory")
        });
        if let n @ 1.. = faults.count() {
            outln!(
                "    {n} of them: no memory here to decode the image or hold the shard (this \
                 machine's fault, not the dataset's: free memory, or raise the memory limit, \
                 ulimit -v, and verify again)"
            );
        }
    }
}

/// The remote dataset `target` names, opened through the cache `cache` describes, with the
/// number of fetch threads; `None` for a local target. A URL that cannot be opened is a usage
/// failure (with `json`, printed as `{"ok": false, "error": …}` first).
pub(crate) fn open_remote(
    target: &std::path::Path,
    cache: &crate::commands::cache::CacheArgs,
    json: bool,
) -> Result<Option<(RemoteDataset, usize)>, Failure> {
    let url = match target.to_str().map(Location::parse) {
        Some(Ok(Location::Remote(url))) => url,
        Some(Err(e)) => return Err(Failure::usage(e)),
        _ => return Ok(None),
    };
    let mut options = cache.options()?;
    let workers = options.concurrency.max(1);
    // Every shard is fetched by the command itself: the reader's prefetch threads are not needed.
    options.concurrency = 0;
    let ds = RemoteDataset::open(url, options).map_err(|e| {
        super::print_error_doc(json, "unreadable", &e);
        Failure::usage(e)
    })?;
    Ok(Some((ds, workers)))
}

/// `target` as a local path: a `file://` URL's path, or `target` itself.
pub(crate) fn local_target(target: &std::path::Path) -> std::path::PathBuf {
    match target.to_str().map(Location::parse) {
        Some(Ok(Location::Local(path))) => path,
        _ => target.to_path_buf(),
    }
}

/// The outcome of a command over a remote dataset: one that could not be fetched (the cache too
/// small, the server failing) is a failed run, not a usage error.
pub(crate) fn fetched<T>(result: Result<T, VerifyError>, json: bool) -> Result<T, Failure> {
    match result {
        Err(e @ (VerifyError::Remote(_) | VerifyError::CacheTooSmall(_))) => {
            if json {
                print_error_json(&e);
            }
            Err(Failure::run(e))
        }
        r => opened(r, json),
    }
}
