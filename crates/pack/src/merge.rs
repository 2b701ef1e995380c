//! Status and merge of a partitioned pack: where its shards stand, and the commit that writes
//! `errors.jsonl`, then `manifest.json` last, from the done records (never directory listings),
//! removing what killed attempts left.

use crate::listing::Listing;
use crate::partition::read_done;
use crate::pipeline::{build_manifest, ManifestParts};
use crate::plan::PackPlan;
use crate::plan_file::{
    bad_plan, plan_dir, read_plan_in, DONE_DIR, PLAN_DIR, PLAN_FILE, STAGED_DIR,
};
use crate::sink::{split_fields, ShardSink};
use crate::store::Store;
use crate::{DoneRecord, ErrorRecord, PackError, PlanFile};
use serde::Serialize;
use shardtool_manifest::{errors, Manifest, ERRORS_FILE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a partitioned pack stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanStatus {
    /// The plan hash.
    pub plan: String,
    /// Shards in the plan.
    pub shards: u64,
    /// Shards done.
    pub done: Vec<u64>,
    /// Shards not done (no done record of this plan, or its shard file is missing).
    pub missing: Vec<u64>,
    /// Samples in done shards.
    pub samples: u64,
    /// Failed inputs in done shards.
    pub failed: u64,
    /// Whether a manifest has been written.
    pub merged: bool,
    /// The plan's `--max-errors`, if it has one: merge commits nothing past it.
    pub max_errors: Option<u64>,
    /// The failure lists of runs that stopped past `--max-errors` and have not run through
    /// since (paths, or URLs in an object store).
    pub stopped: Vec<PathBuf>,
}

/// The failure lists (`_plan/failures-*.jsonl`) that runs stopped by `--max-errors` left in
/// the output, as store names: a run that ends removes its own, and a merge all of them. A
/// listing that fails shows none (they are advice).
pub(crate) fn stopped_runs(store: &Store) -> Vec<String> {
    let listed = store.list_under(PLAN_DIR).unwrap_or_default();
    (listed.into_iter())
        .filter(|n| {
            let file = n.rsplit('/').next().unwrap_or("");
            file.starts_with("failures-") && file.ends_with(".jsonl")
        })
        .collect()
}

/// [`stopped_runs`] as the user is shown them.
fn stopped_shown(store: &Store) -> Vec<PathBuf> {
    stopped_runs(store).iter().map(|n| store.shown(n)).collect()
}

/// The done record of every shard of the plan, by shard (`None`: not done).
fn every_done(store: &Store, file: &PlanFile) -> Result<Vec<Option<DoneRecord>>, PackError> {
    let all: Vec<u64> = (0..file.shards).collect();
    store.each(&all, |j| read_done(store, &file.hash, j))
}

/// Where a partitioned pack in `output` stands.
pub fn status(output: &Path) -> Result<PlanStatus, PackError> {
    let store = Store::open(output)?;
    let file = read_plan_in(&store, output)?;
    let mut s = PlanStatus {
        plan: file.hash.clone(),
        shards: file.shards,
        done: Vec::new(),
        missing: Vec::new(),
        samples: 0,
        failed: file.errors.len() as u64,
        merged: store.size(shardtool_manifest::FILE_NAME)?.is_some(),
        max_errors: file.max_errors,
        stopped: stopped_shown(&store),
    };
    for (j, rec) in (0..file.shards).zip(every_done(&store, &file)?) {
        match rec {
            Some(rec) => {
                s.samples += rec.entry.as_ref().map_or(0, |e| e.samples);
                s.failed += rec.errors.len() as u64;
                s.done.push(j);
            }
            None => s.missing.push(j),
        }
    }
    Ok(s)
}

/// What a merge published.
#[derive(Debug, Clone)]
pub struct MergeReport {
    /// The manifest written.
    pub manifest: Manifest,
    /// Every failed input, in order (also in `errors.jsonl`).
    pub errors: Vec<ErrorRecord>,
}

/// Commits a partitioned pack: checks that every shard is done and, in a local folder, that
/// each matches its checksum (naming the missing or damaged ones otherwise, whose done records
/// go so that a part redoes them), writes `errors.jsonl`, then `manifest.json` last, unless more
/// inputs failed than `max_errors` (default: the plan's `--max-errors`) allows. Running it again
/// rewrites the same bytes.
pub fn merge(output: &Path, max_errors: Option<u64>) -> Result<MergeReport, PackError> {
    // Shared with parts and other merges; a plan or pack beside it is refused.
    let _lock = crate::plan_file::OutputLock::share(output)?;
    merge_held(output, max_errors, true)
}

/// [`merge`], by a process that holds the output's lock already; `check_sums` hashes each shard
/// (a pack that wrote them just now need not).
pub(crate) fn merge_held(
    output: &Path,
    max_errors: Option<u64>,
    check_sums: bool,
) -> Result<MergeReport, PackError> {
    let store = Store::open(output)?;
    let file = read_plan_in(&store, output)?;
    let max_errors = max_errors.or(file.max_errors);
    let plan = PackPlan::from_frozen(&file.options, store.local().to_path_buf())
        .map_err(|m| bad_plan(&plan_dir(output).join(PLAN_FILE), m))?;
    let mut records = Vec::with_capacity(file.shards as usize);
    let mut missing = Vec::new();
    for (j, rec) in (0..file.shards).zip(every_done(&store, &file)?) {
        match rec {
            Some(r) => records.push(r),
            None => missing.push(j),
        }
    }
    let mut damaged = Vec::new();
    // Hashed once every shard is done (a merge run to see what is missing reads no shard).
    if missing.is_empty() && check_sums && !store.is_remote() {
        for r in damaged_shards(store.local(), &records)? {
            // Not done after all: its record goes, so the part named below redoes the shard;
            // unless a part redid it meanwhile (its file matches now).
            let j = r.shard;
            let entry = (r.entry.as_ref()).map(|e| (store.local().join(&e.file), &e.checksum));
            if entry.is_some_and(|(path, sum)| matches_checksum(&path, sum).unwrap_or(false)) {
                continue;
            }
            let done = plan_dir(store.local())
                .join(DONE_DIR)
                .join(format!("{j:06}.json"));
            match std::fs::remove_file(&done) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(PackError::io(&done, e))
                }
                _ => damaged.push(j),
            }
        }
        missing.extend(&damaged);
    }
    if !missing.is_empty() {
        let sink = ShardSink::new(&plan);
        let staged_gone = file.containers.iter().any(|c| c.staged)
            && !store.is_remote()
            && !plan_dir(store.local()).join(STAGED_DIR).exists();
        return Err(PackError::Incomplete {
            output: output.to_path_buf(),
            names: missing
                .iter()
                .map(|&j| sink.file_name(j as usize))
                .collect(),
            damaged: damaged
                .iter()
                .map(|&j| sink.file_name(j as usize))
                .collect(),
            missing,
            staged_gone,
            stopped: stopped_shown(&store).into(),
        });
    }
    let mut errors = file.errors.clone();
    let mut entries = Vec::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut input_json = false;
    for r in records {
        errors.extend(r.errors);
        entries.extend(r.entry);
        for (f, c) in r.fields {
            *counts.entry(f).or_default() += c;
        }
        input_json |= r.input_json;
    }
    let samples: u64 = entries.iter().map(|e| e.samples).sum();
    let errors_path = output.join(ERRORS_FILE);
    store.write_if_changed(ERRORS_FILE, &errors::to_jsonl(&errors))?;
    if let Some(max) = max_errors.filter(|&m| errors.len() as u64 > m) {
        return Err(PackError::TooManyErrors {
            failed: errors.len() as u64,
            max,
            report: errors_path,
            kept: false,
        });
    }
    if samples == 0 {
        return Err(PackError::NoImages {
            looked_for: file.looked_for,
            failed: errors.len() as u64,
            summary: crate::failure_summary(&errors),
            report: errors_path,
            kept: false,
        });
    }
    let (fields, optional_fields) = split_fields(&counts, samples);
    let listing = Listing {
        classes: file.classes.clone(),
        labelled: file.labelled,
        ignored: file.ignored,
        ..Default::default()
    };
    let manifest = build_manifest(
        &plan,
        &listing,
        ManifestParts {
            entries,
            fields,
            optional_fields,
            input_json,
            found: file.found,
            failed: errors.len() as u64,
        },
    );
    // Done records are files anyone can edit: a manifest made from damaged ones, which every
    // reader would refuse, is not committed.
    if let Err(e) = manifest.validate() {
        return Err(bad_plan(
            &plan_dir(output).join(DONE_DIR),
            format!(
                "its done records make a manifest that breaks the format's rules ({e}): remove \
                 the damaged records and run their parts again"
            ),
        ));
    }
    if !store.is_remote() {
        remove_leftovers(store.local(), &plan.prefix);
    }
    store.write_if_changed(shardtool_manifest::FILE_NAME, &manifest.to_json())?;
    // Staged inputs were only for the parts; lists of failures that stopped runs are stale
    // now that every shard is done (the dataset's are in errors.jsonl).
    for name in stopped_runs(&store) {
        let _ = store.delete(&name);
    }
    if !store.is_remote() {
        let dir = plan_dir(store.local());
        let _ = std::fs::remove_dir_all(dir.join(STAGED_DIR));
    } else {
        // The dataset is committed: a staged copy left behind (a delete that failed) costs
        // storage only, so it does not fail the merge.
        let staged: Vec<String> = (file.containers.iter())
            .filter(|c| c.staged)
            .map(|c| format!("{PLAN_DIR}/{STAGED_DIR}/{}", c.path.to_string_lossy()))
            .collect();
        let all: Vec<u64> = (0..staged.len() as u64).collect();
        let _ = store.each(&all, |i| store.delete(&staged[i as usize]));
    }
    Ok(MergeReport { manifest, errors })
}

/// The records of `records` whose shard files in `output` do not match their checksums
/// (damaged at their size since they were packed, or gone), hashed on a few threads. A file
/// that cannot be read is an error: it may be whole.
fn damaged_shards(
    output: &Path,
    records: &[crate::partition::DoneRecord],
) -> Result<Vec<crate::partition::DoneRecord>, PackError> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found = std::sync::Mutex::new((Vec::new(), None));
    shardtool_core::on_threads(threads, || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(r) = records.get(i) else { break };
        let Some(e) = &r.entry else { continue };
        let path = output.join(&e.file);
        let matches = matches_checksum(&path, &e.checksum);
        let Ok(mut found) = found.lock() else { break };
        match matches {
            Ok(true) => {}
            Ok(false) => found.0.push(r.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => found.0.push(r.clone()),
            Err(e) => {
                found.1.get_or_insert(PackError::io(&path, e));
            }
        }
    });
    let (mut bad, error) = found.into_inner().unwrap_or_default();
    if let Some(e) = error {
        return Err(e);
    }
    bad.sort_unstable_by_key(|r| r.shard);
    Ok(bad)
}

/// Whether the file at `path` has checksum `sum`.
fn matches_checksum(path: &Path, sum: &str) -> std::io::Result<bool> {
    Ok(crate::plan_file::file_checksum(path)? == sum)
}

/// Removes the temporary files that killed attempts left (a SIGKILL leaves no chance to clean
/// up): once every shard is done, no live attempt of this plan needs one. Best effort.
fn remove_leftovers(output: &Path, prefix: &str) {
    let ours = |name: &str| {
        name.ends_with(".tmp")
            && [
                format!(".{prefix}-"),
                ".errors.jsonl.".into(),
                ".manifest.json.".into(),
            ]
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    };
    let done = plan_dir(output).join(DONE_DIR);
    for (dir, all_hidden) in [(output.to_path_buf(), false), (done, true)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = if all_hidden {
                name.starts_with('.') && name.ends_with(".tmp")
            } else {
                ours(&name)
            };
            // A merge beside this one (merges share the folder's lock), on this host or
            // another, writes its own manifest and report, holding each locked while it does
            // (`Store::write`): those are left to it, and the lock is held while one is
            // removed. A redundant part attempt's shard is removed even while it lives: every
            // shard is done, and the attempt ends as done when it goes on.
            if !stale {
                continue;
            }
            let merge_output =
                name.starts_with(".manifest.json.") || name.starts_with(".errors.jsonl.");
            let _held = if merge_output {
                match std::fs::File::open(e.path()) {
                    Ok(f) if f.try_lock().is_ok() => Some(f),
                    _ => continue,
                }
            } else {
                None
            };
            let _ = std::fs::remove_file(e.path());
        }
    }
}
