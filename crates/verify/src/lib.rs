//! Whole-dataset checks and views: [`verify`] (manifest ⇄ files ⇄ checksums ⇄ structure ⇄
//! decodability), [`inspect`] (counts, class histogram, image sizes) and [`preview`] (a contact
//! sheet of sampled images with their class names).
//!
//! Every function here returns a typed value and prints nothing; the CLI formats it. The three
//! share one way of reading shards (`loader`): each shard file is read once, front to back —
//! plain shards mapped read-only and hashed in place (shards are write-once; see
//! [`VerifyOptions::mmap`]), `.zst` shards decompressed as a stream into a buffer capped at the
//! size the manifest declares, both sides hashed on the way. Shards are processed in parallel on
//! `jobs` threads, so memory use is about `jobs` × the largest decompressed shard (mapped shards
//! use page cache, not heap).
//!
//! The problem kinds and their stable names are listed in `README.md` beside this crate.
//!
//! Problems inside the data are never errors: they are collected as [`Problem`]s in the
//! [`Report`], all of them, each naming its shard, member or record and reason. [`VerifyError`] is
//! only for a target that cannot be opened at all (no directory, no manifest, an unparsable or
//! foreign manifest), which the CLI maps to exit code 2.

mod ahead;
mod check_packed;
mod check_tar;
mod dataset;
mod error_report;
mod font;
mod inspect;
mod loader;
mod meta_scan;
mod preview;
mod report;
mod run;

pub use dataset::{ShardKind, SHARD_SUFFIXES};
pub use inspect::{inspect, ClassCount, FieldStats, InspectReport, SizeCount, SizeStats, Spread};
pub use preview::{encode_png, preview, PreviewItem, PreviewOptions, PreviewSheet};
pub use report::{Problem, ProblemKind, Report};
pub use run::{verify, NoProgress, Progress, VerifyOptions};

use std::path::PathBuf;

/// The metadata readers, for the `verify_meta` fuzz target only; not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::check_tar::serde_meta;
    pub use crate::meta_scan::{scan_flat, Meta};
}

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
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
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
    /// An option is unusable.
    #[error("{0}")]
    Usage(String),
}

impl VerifyError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            VerifyError::NotFound { path: path.into() }
        } else {
            VerifyError::Io {
                path: path.into(),
                source,
            }
        }
    }
}
