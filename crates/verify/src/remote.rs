//! Verification of a remote dataset: every shard is fetched through the local cache and the
//! cached copies are verified as a local dataset, with problems named as the server stores them.

use crate::{verify, Problem, ProblemKind, Progress, Report, VerifyError, VerifyOptions};
use shardtool_cache::RemoteDataset;
use shardtool_manifest::{ERRORS_FILE, FILE_NAME as MANIFEST_FILE};
use std::collections::HashMap;

/// Largest `errors.jsonl` fetched for a remote verify.
const MAX_ERRORS_FILE: u64 = 64 << 20;

/// Verifies the remote dataset `ds` with `workers` fetch threads: every shard is fetched into
/// the cache (the size and checksum of the stored file, and of the decompressed one for `.zst`,
/// are checked on the way in; a shard already cached is fetched again and checked the same way,
/// so a copy changed on the server since it was cached is found) and held there while its
/// cached copy is verified like a local dataset, through a manifest that describes the shards
/// as the cache stores them. The whole dataset must fit under the cache's limit.
///
/// A shard that could not be fetched is a [`ProblemKind::FetchFailed`] problem; problems name
/// shards as the server stores them (`.tar.zst`, not the cache's decompressed `.tar`).
pub fn verify_remote(
    ds: &RemoteDataset,
    workers: usize,
    opts: &VerifyOptions,
    progress: &dyn Progress,
) -> Result<Report, VerifyError> {
    let remote_error = |e: &dyn std::fmt::Display| VerifyError::Remote(e.to_string());
    let all: u64 = ds.specs().iter().map(|s| s.cached_bytes()).sum();
    ds.check_capacity(all).map_err(|e| remote_error(&e))?;
    // Cached shards are fetched again too: the server's copy is what is verified.
    let (held, failed) = ds.acquire_all_checked_at_source(workers.max(1));
    // A shard that could not be fetched is absent from the view below: reported as such, not
    // as missing from the dataset.
    let failed: HashMap<String, String> = failed
        .into_iter()
        .filter_map(|(i, e)| Some((ds.specs().get(i)?.cached_name().to_string(), e.to_string())))
        .collect();
    // A view folder inside the cache: the manifest as the cache stores the shards, and links to
    // them (removed when it drops).
    let view = tempfile::Builder::new()
        .prefix("verify-")
        .tempdir_in(ds.cache_dir())
        .map_err(|e| VerifyError::io(ds.cache_dir(), e))?;
    let mut manifest = ds.manifest().clone();
    for (entry, spec) in manifest.shards.iter_mut().zip(ds.specs()) {
        entry.file = spec.cached_name().to_string();
        if let (Some(b), Some(c)) = (
            entry.uncompressed_bytes.take(),
            entry.uncompressed_checksum.take(),
        ) {
            entry.bytes = b;
            entry.checksum = c;
        }
        entry.compression = None;
        let cached = ds.cache_dir().join("shards").join(&entry.file);
        if cached.exists() && !failed.contains_key(&entry.file) {
            let link = view.path().join(&entry.file);
            std::os::unix::fs::symlink(&cached, &link).map_err(|e| VerifyError::io(&link, e))?;
        }
    }
    manifest.totals.bytes = manifest.shards.iter().map(|s| s.bytes).sum();
    let path = view.path().join(MANIFEST_FILE);
    std::fs::write(&path, manifest.to_json()).map_err(|e| VerifyError::io(&path, e))?;
    if let Some(errors) = ds
        .fetch_small(ERRORS_FILE, MAX_ERRORS_FILE)
        .map_err(|e| remote_error(&e))?
    {
        let path = view.path().join(ERRORS_FILE);
        std::fs::write(&path, errors).map_err(|e| VerifyError::io(&path, e))?;
    }
    let mut report = verify(view.path(), opts, progress)?;
    drop(held);
    let remote_names: HashMap<&str, &str> = ds
        .specs()
        .iter()
        .map(|s| (s.cached_name(), s.file.as_str()))
        .collect();
    for p in &mut report.problems {
        rename(p, &failed, &remote_names);
    }
    report.finish();
    let shown = ds.url().file_url(&ds.url().manifest);
    report.dataset = shown.clone();
    report.manifest = shown;
    Ok(report)
}

/// Names a problem's shard as the server stores it; a missing shard that could not be fetched
/// is a fetch failure, with the reason.
fn rename(p: &mut Problem, failed: &HashMap<String, String>, remote_names: &HashMap<&str, &str>) {
    let Some(shard) = p.shard.as_mut() else {
        return;
    };
    if let Some(why) = failed.get(shard.as_str()) {
        if p.kind == ProblemKind::MissingShard {
            p.kind = ProblemKind::FetchFailed;
            p.message = format!("could not be fetched whole: {why}");
        }
    }
    if let Some(name) = remote_names.get(shard.as_str()) {
        *shard = name.to_string();
    }
}
