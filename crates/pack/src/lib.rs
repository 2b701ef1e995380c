//! The pack pipeline as a library: list inputs → seeded global shuffle → parallel transform in a
//! bounded window → ordered shard writing → manifest, published last.
//!
//! [`pack`] takes a validated [`PackPlan`] and returns a [`PackReport`]; the CLI only parses
//! flags into a plan and prints the report. Nothing here prints.

mod atomic;
mod listing;
mod pipeline;
mod plan;
mod sink;

pub use atomic::AtomicFile;
pub use listing::{list_inputs, InputItem, InputSource, Inputs, Listing, Origin, IMAGE_EXTENSIONS};
pub use pipeline::{pack, NoProgress, PackReport, Progress, ProgressSnapshot, StageTimes};
pub use plan::{parse_byte_size, Compression, PackPlan, ShardFormatChoice, DEFAULT_SEED};

use std::path::PathBuf;

/// One input that did not make it into a shard: a line of `errors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ErrorRecord {
    /// The input path (relative to the input folder, or as listed).
    pub path: String,
    /// The failure class (`unreadable`, `decode`, `too_many_pixels`, …).
    pub kind: String,
    /// A human-readable reason.
    pub message: String,
}

/// Why a pack could not run or finish. Per-input failures are not errors: they go to
/// `errors.jsonl`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The options or inputs are unusable (the CLI exits 2).
    #[error("{0}")]
    Usage(String),
    /// More inputs failed than `--max-errors` allows (the CLI exits 1).
    #[error("{failed} inputs failed, more than --max-errors {max}; see {report}")]
    TooManyErrors {
        /// Failures so far.
        failed: u64,
        /// The limit.
        max: u64,
        /// The error report path.
        report: PathBuf,
    },
    /// Writing output failed.
    #[error("writing {path}: {cause}")]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: std::io::Error,
    },
    /// A shard could not be encoded.
    #[error("building shard {path}: {message}")]
    Shard {
        /// The shard file.
        path: PathBuf,
        /// The cause.
        message: String,
    },
}

impl PackError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PackError::Io {
            path: path.into(),
            cause: source,
        }
    }
}
