//! Whole-dataset checks: [`verify`] (manifest ⇄ files ⇄ checksums ⇄ structure ⇄ decodability),
//! and [`open_target`], the one way a dataset directory, manifest or lone shard path is resolved
//! (`shardtool-inspect` opens its targets with it too).
//!
//! Every function here returns a typed value and prints nothing; the CLI formats it. Each shard
//! file is read once, front to back (a packed one whose checksum fails, twice: the second read
//! names its damaged records): `verify` streams a plain tar shard through a reused 128 KiB
//! buffer unless it decodes images, and a plain packed shard is read without its pixels (hashed
//! through a small buffer); any other shard is read into a reused buffer (or mapped, with
//! [`VerifyOptions::mmap`]), a `.zst` one decompressed as a stream into a buffer capped at the
//! size the manifest declares, both sides hashed on the way. Shards are processed in parallel on
//! `jobs` threads, so memory use is about `jobs` × the largest shard read whole.
//!
//! The problem kinds and their stable names are listed in `README.md` beside this crate.
//!
//! Problems inside the data are never errors: they are collected as [`Problem`]s in the
//! [`Report`], all of them, each naming its shard, member or record and reason. [`VerifyError`] is
//! only for a target that cannot be opened at all (no directory, no manifest, an unparsable or
//! foreign manifest), which the CLI maps to exit code 2.

mod check_packed;
mod check_tar;
mod dataset;
mod error_report;
mod keys;
mod loader;
#[cfg(feature = "remote")]
mod remote;
mod report;
mod run;
mod sample;
mod shard;

pub use dataset::{open_target, Dataset, ShardKind, Target, SHARD_SUFFIXES};
#[cfg(feature = "remote")]
pub use remote::{verify_remote, Fetch, RemoteView};
pub use report::{Problem, ProblemKind, Report};
pub use run::{
    map_in_turn, map_on_threads, pool_within, verify, HoldShards, NoProgress, Progress,
    VerifyOptions,
};

use std::path::PathBuf;

/// Largest shard (after decompression) held in memory by default: 4 GiB.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 4 << 30;

/// Why a dataset or shard could not be opened at all. Problems found inside an opened dataset are
/// [`Problem`]s in a [`Report`], not errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The path does not exist.
    #[error("{path}: no such file or directory")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// A directory without `manifest.json`.
    #[error("{dir} has no manifest.json (an incomplete pack, or not a shardtool dataset)")]
    NoManifest {
        /// The directory.
        dir: PathBuf,
    },
    /// Reading a file or directory failed.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: std::io::Error,
    },
    /// The manifest is not valid JSON of the manifest's shape, or is of an unknown format or
    /// version.
    #[error("{path}: {message}")]
    Manifest {
        /// The manifest path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A file that is neither a manifest nor a shard this tool knows.
    #[error("{path}: not a manifest.json, tar or safetensors shard (optionally .zst)")]
    UnknownFile {
        /// The path.
        path: PathBuf,
    },
    /// A shard where a whole dataset is wanted.
    #[error(
        "{path} is a shard: verify checks a whole dataset, named by its folder or its \
         manifest.json (inspect shows a single shard)"
    )]
    Shard {
        /// The path.
        path: PathBuf,
    },
    /// A remote dataset's shards could not be fetched into the cache (the server failed).
    #[error("{0}")]
    Remote(String),
    /// The cache's limit cannot hold the shards a remote dataset's check holds at once.
    #[error("{0}")]
    CacheTooSmall(String),
    /// An option is unusable.
    #[error("{0}")]
    Usage(String),
}

impl VerifyError {
    pub(crate) fn io(path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        if cause.kind() == std::io::ErrorKind::NotFound {
            VerifyError::NotFound { path: path.into() }
        } else {
            VerifyError::Io {
                path: path.into(),
                cause,
            }
        }
    }
}
