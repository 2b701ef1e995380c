//! Dataset locations (local paths, `file://`, `http(s)://`, `s3://`) and the local shard cache.
//!
//! Remote shards are fetched whole, sequentially, through `object_store`, checked against the
//! manifest's size and checksum, decompressed once when they are `.zst`, and published into a
//! cache directory with an atomic rename. Several processes share one cache directory: per-shard
//! file locks make each shard download once and keep shards in use from being evicted, and a
//! least-recently-used sweep keeps the directory under its byte limit. Local datasets never enter
//! the cache: they are read in place and nothing here ever copies or deletes them.
//!
//! The API is synchronous; an internal tokio runtime drives the HTTP and S3 clients. Fetching
//! (`RemoteDataset`, `CacheOptions`, `FetchPolicy`) needs the default `remote` feature; without
//! it, locations and cache folders still work and nothing async or TLS is compiled.

#[cfg(feature = "remote")]
mod attempt;
mod dir;
#[cfg(feature = "remote")]
mod inputs;
#[cfg(feature = "remote")]
mod jitter;
mod location;
mod metrics;
#[cfg(feature = "remote")]
mod remote;
#[cfg(feature = "remote")]
mod source;
mod usage;
mod wait;
#[cfg(feature = "remote")]
mod writeback;

pub use dir::{default_cache_dir, stopping, CacheDir, CachedDataset, ClearReport, Stopping};
#[cfg(feature = "remote")]
pub use inputs::{Published, RemoteFolder, RemoteFolders};
pub use location::{Location, RemoteUrl, FILE_URL_QUERY};
pub use metrics::{as_seconds, CacheMetrics};
#[cfg(feature = "remote")]
pub use remote::{cache_key, FetchPolicy, STOP_POLL};
#[cfg(feature = "remote")]
pub use source::{CacheOptions, FetchFailure, Lease, RemoteDataset, ShardSpec};

use shardtool_core::redact_urls;
use std::path::PathBuf;

/// Why a cache or remote operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The dataset argument cannot be understood.
    #[error("bad dataset location {:?}: {}", redact_urls(.location), redact_urls(.message))]
    BadLocation {
        /// As given.
        location: String,
        /// Why.
        message: String,
    },
    /// The cache folder cannot be made or used.
    #[error(
        "cannot use the cache folder {path}: {cause} (choose another with --cache-dir or \
         SHARDTOOL_CACHE_DIR)"
    )]
    Unusable {
        /// The cache folder.
        path: PathBuf,
        /// The cause (part of the message, so it is printed once).
        cause: std::io::Error,
    },
    /// A local file operation failed.
    #[error("{path}: {cause}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause (part of the message, so it is printed once).
        cause: std::io::Error,
    },
    /// A request for a remote object (a read, a listing or an upload) failed on every attempt.
    #[error("{}: failed after {attempts} attempt(s): {}", redact_urls(.url), redact_urls(.message))]
    Fetch {
        /// The object.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        message: String,
    },
    /// The remote dataset's manifest is missing or invalid.
    #[error("manifest {}: {}", redact_urls(.url), redact_urls(.message))]
    Manifest {
        /// Its URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The cache limit cannot hold what must be on disk at once.
    #[error("cache limit {limit} bytes is too small: {message}")]
    TooSmall {
        /// The limit.
        limit: u64,
        /// Why, with the bytes needed.
        message: String,
    },
    /// The cache directory belongs to another user.
    #[error(
        "cache folder {path} belongs to another user (uid {owner}); use a --cache-dir of your own"
    )]
    NotOurs {
        /// The folder.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
    },
    /// The cache directory is not one this tool made.
    #[error("{path} is not a shardtool cache directory (no CACHEDIR.TAG from shardtool); refusing to touch it")]
    NotACache {
        /// The folder.
        path: PathBuf,
    },
}

impl CacheError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CacheError {
        let path = path.into();
        move |cause| CacheError::Io { path, cause }
    }
}
