//! Shard-cache flags shared by `read`, `bench` and `verify`, and `shardtool cache ls|prefetch|clear`.

// Doc comments of the flags and subcommands are `--help` text for people, not rustdoc: their
// example URLs and `<uid>`-style placeholders are meant literally.
#![allow(rustdoc::bare_urls, rustdoc::invalid_html_tags)]

use crate::Failure;
use anyhow::{anyhow, Context};
use shardtool_cache::{CacheDir, CacheOptions, FetchPolicy, Location, RemoteDataset};
use std::path::PathBuf;
use std::time::Duration;

/// Where and how remote shards are cached (ignored for local datasets, which are read in place).
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// Cache folder for remote shards, shared safely by every process on the node
    /// [default: $SHARDTOOL_CACHE_DIR, else $XDG_CACHE_HOME/shardtool, else ~/.cache/shardtool,
    /// else (no HOME) $TMPDIR/shardtool-cache-<uid>].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Most bytes of shards the cache folder may hold (e.g. 200GB or 200G, 64GiB); least recently used
    /// shards not in use are evicted. Too small for the shards open at once is an error at start.
    /// Processes sharing a cache folder (ranks on one node) share its limit: give it what each
    /// needs times their count, or one that waits for room held by the others fails after 120 s.
    /// [default: no limit]
    #[arg(long, value_name = "SIZE")]
    pub cache_limit: Option<String>,
    /// Shards fetched ahead of the one being read (0: none), within the room --cache-limit
    /// leaves beside the shards open at once; a shard larger than that room is fetched when it
    /// is opened.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub prefetch_shards: usize,
    /// Shards fetched at once.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub fetch_concurrency: u32,
    /// Attempts per shard before it counts as failed (retries back off exponentially, with
    /// jitter); in read and bench, a shard the prefetcher failed is tried as many times again
    /// when it is read.
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub fetch_attempts: u32,
    /// Seconds without a byte before an attempt counts as stalled.
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub fetch_timeout: f64,
}

impl CacheArgs {
    /// The cache options the flags ask for.
    pub fn options(&self) -> Result<CacheOptions, Failure> {
        let limit = match &self.cache_limit {
            Some(s) => Some(
                shardtool_core::parse_byte_size(s)
                    .map_err(|e| Failure::usage(anyhow!("--cache-limit: {e}")))?,
            ),
            None => None,
        };
        // A day at most: a Duration holds any such number, and no stall is meant to last longer.
        if !(self.fetch_timeout > 0.0 && self.fetch_timeout <= 86_400.0) {
            return Err(Failure::usage(anyhow!(
                "--fetch-timeout must be more than 0 and at most 86400 seconds (a day)"
            )));
        }
        Ok(CacheOptions {
            dir: self
                .cache_dir
                .clone()
                .unwrap_or_else(shardtool_cache::default_cache_dir),
            limit,
            policy: FetchPolicy {
                attempts: self.fetch_attempts,
                stall_timeout: Duration::from_secs_f64(self.fetch_timeout),
                ..FetchPolicy::default()
            },
            concurrency: self.fetch_concurrency as usize,
            ahead: self.prefetch_shards,
        })
    }
}

/// `shardtool cache` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// List the datasets a cache folder holds shards of: source URL, shards, bytes, last use.
    ///
    /// Examples:
    ///   shardtool cache ls
    ///   shardtool cache ls --cache-dir /nvme/cache --json | jq '.[] | {source, bytes}'
    #[command(verbatim_doc_comment)]
    Ls {
        /// Cache folder [default: as for read].
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Fetch every shard of a remote dataset into the cache now (each checked against the
    /// manifest), so that training starts warm.
    ///
    /// Under a --cache-limit smaller than the dataset, older shards make room for newer ones
    /// and only part of it stays cached (a warning says so). Exit status: 0 when every shard
    /// was fetched or found cached, 1 when a shard could not be fetched (the others are kept)
    /// or the limit cannot hold the largest shard, 2 on bad options or a dataset that cannot
    /// be opened.
    ///
    /// Examples:
    ///   shardtool cache prefetch https://data.example.com/imagenet/ --cache-dir /nvme/cache
    ///   AWS_ENDPOINT=http://127.0.0.1:9000 AWS_ALLOW_HTTP=true \
    ///     shardtool cache prefetch s3://bucket/ds/ --fetch-concurrency 16 --json
    // Every shard is fetched here, --fetch-concurrency at once: reading ahead does not apply.
    #[command(verbatim_doc_comment, mut_arg("prefetch_shards", |a| a.hide(true)))]
    Prefetch {
        /// The remote dataset: http(s):// or s3:// URL of its folder or manifest.json.
        #[arg(value_name = "URL")]
        dataset: String,
        #[command(flatten)]
        cache: CacheArgs,
        /// One JSON document instead of a line: counts (`shards`, `already_cached`, `fetched`,
        /// `bytes_fetched`, `retries`), each shard that `failed` with why, the bytes the whole
        /// dataset takes in the cache (`dataset_bytes`) and whether the limit holds it
        /// (`fits_limit`); a run stopped before fetching prints `{"ok": false, "error": …}`.
        #[arg(long)]
        json: bool,
    },
    /// Delete cached shards (of one dataset, or all); shards a process is using are kept and
    /// listed. Only a folder marked as a shardtool cache is ever touched.
    ///
    /// Examples:
    ///   shardtool cache clear s3://bucket/imagenet/ --cache-dir /nvme/cache
    ///   shardtool cache clear --cache-dir /nvme/cache     # every dataset's shards
    #[command(verbatim_doc_comment)]
    Clear {
        /// Only this remote dataset (its folder URL as shown by `cache ls`).
        #[arg(value_name = "URL")]
        dataset: Option<String>,
        /// Cache folder [default: as for read].
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// One JSON document (`ok`, `removed`, `bytes`, `in_use`) instead of lines; a refusal
        /// prints `{"ok": false, "error": …}`.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `shardtool cache …`.
pub fn run(c: CacheCommand) -> Result<(), Failure> {
    match c {
        CacheCommand::Ls { cache_dir, json } => {
            let dir = cache_dir.unwrap_or_else(shardtool_cache::default_cache_dir);
            // A cache folder not made yet (before the first remote read) holds nothing.
            let mut list = if dir.exists() {
                let cache = CacheDir::existing(&dir).map_err(Failure::usage)?;
                cache.list().map_err(Failure::run)?
            } else {
                Vec::new()
            };
            // A dataset whose shards were all cleared or evicted holds nothing to show.
            list.retain(|d| d.shards > 0);
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&list).map_err(Failure::run)?
                );
                return Ok(());
            }
            outln!(
                "{:>8} {:>14} {:>20}  source",
                "shards",
                "bytes",
                "last used (UTC)"
            );
            for d in &list {
                outln!(
                    "{:>8} {:>14} {:>20}  {}",
                    d.shards,
                    d.bytes,
                    utc(d.last_used),
                    d.source
                );
            }
            let total: u64 = list.iter().map(|d| d.bytes).sum();
            outln!(
                "{} dataset(s), {total} bytes in {}",
                list.len(),
                dir.display()
            );
            Ok(())
        }
        CacheCommand::Prefetch {
            dataset,
            cache,
            json,
        } => prefetch(&dataset, &cache, json),
        CacheCommand::Clear {
            dataset,
            cache_dir,
            json,
        } => clear(dataset.as_deref(), cache_dir, json).inspect_err(|f| {
            // Printed only once cleared: a failure before then has no document yet.
            super::print_error_doc(json, if f.code == 2 { "usage" } else { "error" }, &f.error)
        }),
    }
}

/// Unix seconds as `YYYY-MM-DD HH:MM` in UTC ("never" for 0).
fn utc(secs: u64) -> String {
    if secs == 0 {
        return "never".into();
    }
    let days = (secs / 86_400) as i64;
    let (h, m) = (secs % 86_400 / 3600, secs % 3600 / 60);
    let (year, month, day) = shardtool_core::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}")
}

/// `shardtool cache clear`: the cached shards of `dataset` (all when `None`) deleted.
fn clear(dataset: Option<&str>, cache_dir: Option<PathBuf>, json: bool) -> Result<(), Failure> {
    let dir = cache_dir.unwrap_or_else(shardtool_cache::default_cache_dir);
    let cache = CacheDir::existing(&dir).map_err(Failure::usage)?;
    let source = match &dataset {
        Some(d) => match Location::parse(d).map_err(Failure::usage)? {
            Location::Remote(r) => Some(shardtool_cache::cache_key(&r)),
            Location::Local(p) => {
                return Err(Failure::usage(anyhow!(
                    "{} is local: local datasets are never cached",
                    p.display()
                )))
            }
        },
        None => None,
    };
    if let Some(src) = &source {
        // A mistyped URL would otherwise clear nothing and say only "removed 0".
        let known = cache.list().map_err(Failure::run)?;
        if !known.iter().any(|d| &d.source == src) {
            let s3 = dataset.is_some_and(|d| d.starts_with("s3://"));
            return Err(Failure::usage(anyhow!(
                "{} holds no dataset {src}; `shardtool cache ls` lists those it holds{}",
                dir.display(),
                if s3 {
                    " (an s3:// dataset is kept under its endpoint too: set AWS_ENDPOINT \
                     as when it was read)"
                } else {
                    ""
                }
            )));
        }
    }
    let r = cache
        .clear(source.as_deref())
        .with_context(|| format!("clearing {}", dir.display()))
        .map_err(Failure::run)?;
    if json {
        let mut doc = serde_json::to_value(&r).map_err(Failure::run)?;
        doc["ok"] = true.into();
        let text = serde_json::to_string_pretty(&doc).map_err(Failure::run)?;
        outln!("{text}");
        return Ok(());
    }
    outln!(
        "removed {} shard(s), {} bytes; kept {} in use",
        r.removed,
        r.bytes,
        r.in_use.len()
    );
    for p in &r.in_use {
        outln!("in use: {p}");
    }
    Ok(())
}

/// `shardtool cache prefetch`: every shard of the remote `dataset` fetched into the cache now.
fn prefetch(dataset: &str, cache: &CacheArgs, json: bool) -> Result<(), Failure> {
    // Under --json, a run stopped before fetching says why in one document on stdout too.
    let error_doc = |kind: &str, e: &dyn std::fmt::Display| super::print_error_doc(json, kind, e);
    let url = match Location::parse(dataset) {
        Ok(Location::Remote(r)) => r,
        Ok(Location::Local(p)) => {
            let e = anyhow!(
                "{} is local: local datasets are read in place and never cached",
                p.display()
            );
            error_doc("usage", &e);
            return Err(Failure::usage(e));
        }
        Err(e) => {
            error_doc("usage", &e);
            return Err(Failure::usage(e));
        }
    };
    let shown = url.shown("");
    let mut options = cache
        .options()
        .inspect_err(|f| error_doc("usage", &f.error))?;
    let workers = options.concurrency.max(1);
    // The prefetch threads of the reader are not needed: every shard is fetched here.
    options.concurrency = 0;
    let limit = options.limit;
    let ds = RemoteDataset::open(url, options).map_err(|e| {
        error_doc("unreadable", &e);
        Failure::usage(e)
    })?;
    ds.check_capacity(0).map_err(|e| {
        error_doc("cache_too_small", &e);
        Failure::run(e)
    })?;
    let n = ds.specs().len();
    // What this command fetches is shards: the manifest's bytes and retries are left out.
    let opened = ds.metrics();
    // No more downloads at once than the limit holds (each reserves its shard's room
    // while it runs): more would fail for want of room, not fetch sooner.
    let largest = ds.largest_fetch();
    let workers = match limit {
        Some(l) if largest > 0 => {
            workers.min(usize::try_from(l / largest).unwrap_or(usize::MAX).max(1))
        }
        _ => workers,
    };
    // Not held: under a limit below the dataset size, older shards make room for newer.
    let (_, mut failures) = ds.acquire_all(workers, false);
    failures.sort_by_key(|(i, _)| *i);
    let mut m = ds.metrics();
    m.bytes_fetched -= opened.bytes_fetched.min(m.bytes_fetched);
    m.retries -= opened.retries.min(m.retries);
    let whole: u64 = ds.specs().iter().map(|s| s.cached_bytes()).sum();
    // Older shards made room for newer ones: a reader fetches those again.
    let partly = limit.filter(|&l| whole > l);
    if json {
        let failed: Vec<serde_json::Value> = (failures.iter())
            .map(|(i, e)| {
                let shard = ds.specs().get(*i).map_or("", |s| s.file.as_str());
                serde_json::json!({ "shard": shard, "message": e.to_string() })
            })
            .collect();
        let doc = serde_json::json!({
            "ok": failures.is_empty(),
            "dataset": shown,
            "cache_dir": ds.cache_dir().display().to_string(),
            "shards": n,
            "already_cached": m.hits,
            "fetched": m.fetches,
            "bytes_fetched": m.bytes_fetched,
            "retries": m.retries,
            "failed": failed,
            "dataset_bytes": whole,
            "fits_limit": partly.is_none(),
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(Failure::run)?
        );
    } else {
        outln!(
            "{n} shards: {} already cached, {} fetched ({} bytes, {} retries), {} failed; cache {}",
            m.hits,
            m.fetches,
            m.bytes_fetched,
            m.retries,
            failures.len(),
            ds.cache_dir().display()
        );
    }
    if let Some(limit) = partly {
        errln!(
            "warning: the dataset takes {whole} bytes in the cache, more than the \
             --cache-limit {limit}: only part of it stays cached"
        );
    }
    if failures.is_empty() {
        return Ok(());
    }
    if !json {
        for (_, f) in &failures {
            errln!("failed: {f}");
        }
    }
    Err(Failure::run(anyhow!(
        "{} shard(s) could not be fetched",
        failures.len()
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn unix_seconds_read_as_utc_dates() {
        assert_eq!(super::utc(0), "never");
        assert_eq!(super::utc(946_684_800), "2000-01-01 00:00");
        assert_eq!(super::utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(super::utc(1_796_505_780), "2026-12-05 21:23");
    }
}
