//! Inspect and preview of a remote (HTTP or S3) dataset: the shards they read are fetched
//! through the local cache into a [`RemoteView`] and read like a local dataset's; reports name
//! the dataset by its URL and shards as the server stores them.

use crate::inspect::inspect_as;
use crate::preview::{preview_shards, preview_titled};
use crate::{InspectReport, PreviewOptions, PreviewSheet};
use shardtool_cache::RemoteDataset;
use shardtool_verify::{Fetch, RemoteView, VerifyError, VerifyOptions};

/// [`inspect`](crate::inspect) of the remote dataset `ds`: every shard is fetched into the cache
/// (a cached copy is used as it is), `workers` at a time, and held while it is read (by as
/// many threads as that or the jobs, when more); formats and stored sizes are the server's (`.zst` shards are
/// cached decompressed). The cache's limit needs room only for the shards in hand: older ones
/// make room for newer. A shard that could not be fetched is a `fetch_failed` problem, left
/// out of the figures.
pub fn inspect_remote(
    ds: &RemoteDataset,
    workers: usize,
    opts: &VerifyOptions,
) -> Result<InspectReport, VerifyError> {
    let at_once = workers.max(opts.jobs_or_cores());
    let view = RemoteView::fetch(ds, workers, at_once, Fetch::All, false)?;
    let mut report = inspect_as(view.path(), opts, Some((&view, &ds.manifest().shards)))?;
    for p in &mut report.problems {
        view.rename(p);
    }
    report.target = ds.url().shown("");
    report.manifest = Some(view.shown().to_string());
    Ok(report)
}

/// [`preview`](crate::preview) of the remote dataset `ds`: only the shards holding the picked
/// samples are fetched (with `workers` threads); the sheet is titled with the dataset's URL and
/// names shards as the server stores them.
pub fn preview_remote(
    ds: &RemoteDataset,
    workers: usize,
    opts: &PreviewOptions,
) -> Result<PreviewSheet, VerifyError> {
    let wanted = preview_shards(ds.manifest(), opts);
    let view = RemoteView::fetch(ds, workers, workers, Fetch::Some(&wanted), false)?;
    let title = ds.url().shown("");
    let mut sheet = preview_titled(view.path(), opts, Some(&title))?;
    for item in &mut sheet.items {
        item.shard = view.stored_name(&item.shard).to_string();
    }
    // A skipped line is `<shard>: <why>`; a shard's name may hold ": " too, so it is found by
    // the names the view knows (skipped lines are few: shards that failed).
    for line in &mut sheet.skipped {
        let shard = ds.specs().iter().map(|s| s.cached_name()).find(|name| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(": "))
        });
        if let Some(shard) = shard {
            let why = view
                .fetch_failure(shard)
                .unwrap_or_else(|| line[shard.len() + 2..].to_string());
            *line = format!("{}: {why}", view.stored_name(shard));
        }
    }
    Ok(sheet)
}
