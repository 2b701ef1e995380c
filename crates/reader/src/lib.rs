//! The shardtool reader, linked into training code: epoch plans, two-level shuffle,
//! exactly-once partitioning across ranks, resumable state, zero-copy record views over mapped
//! shards, and batches assembled into reused buffers from a pluggable allocator. Carried fields
//! (captions, input json …) come with the batches when asked for ([`LoaderBuilder::fields`]).
//!
//! ```no_run
//! use shardtool_reader::Loader;
//! let mut loader = Loader::builder("out/sample").batch_size(32).seed(7).epoch(0).build()?;
//! for batch in &mut loader {
//!     let batch = batch?;
//!     println!("batch {} with {} samples", batch.index, batch.len());
//! }
//! # Ok::<(), shardtool_reader::ReadError>(())
//! ```

mod batch;
mod dataset;
mod delivered;
mod fields;
mod loader;
mod metrics;
/// The epoch plan's pure functions (shard order, rank order, open-window sizes). Internals of the
/// loader, public only for the shuffle-quality example and tests: not a stable API.
#[doc(hidden)]
pub mod plan;
mod state;
mod threads;
mod transform;
mod work;

pub use batch::{
    AlignedBuffer, AllocError, Batch, BatchAllocator, CpuAllocator, FieldColumn, HostBuffer,
    Layout, CPU_BUFFER_ALIGN,
};
pub use dataset::{Dataset, ShardView};
pub use fields::{available_fields, check_fields};
pub use loader::{CorruptPolicy, Loader, LoaderBuilder, Next, MAX_BATCH_BYTES, MAX_PREFETCH};
pub use metrics::{Metrics, MetricsSource, SlowRecord, SLOW_FLOOR, SLOW_KEPT};
pub use plan::{OrderOptions, Remainder};
pub use shardtool_cache::{CacheMetrics, Location};
#[cfg(feature = "remote")]
pub use shardtool_cache::{CacheOptions, FetchPolicy};
pub use state::{dataset_fingerprint, LoaderState};
pub use transform::{Crop, Transform, TransformParseError, CENTER_RATIO, RRC_RATIO, RRC_SCALE};

use std::path::PathBuf;

/// Why reading failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A file could not be read.
    #[error("reading {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: std::io::Error,
    },
    /// The manifest is invalid.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// Its path.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A shard failed validation.
    #[error("shard {shard} is corrupt: {message}")]
    CorruptShard {
        /// Shard file.
        shard: String,
        /// Why.
        message: String,
    },
    /// A shard could not be had: unreadable, not fetched, or no room for it in the cache.
    #[error("shard {shard} could not be opened: {message}")]
    Unavailable {
        /// Shard file.
        shard: String,
        /// Why.
        message: String,
        /// Whether the shard cache failed it (a failed fetch, no room): a remote dataset's.
        cache: bool,
    },
    /// A record could not be read or decoded.
    #[error("record {key} of shard {shard}: {message}")]
    CorruptRecord {
        /// Shard file.
        shard: String,
        /// Sample key.
        key: String,
        /// Why.
        message: String,
    },
    /// A shard index outside the manifest.
    #[error("no shard #{0} in the manifest")]
    NoSuchShard(usize),
    /// Invalid loader options.
    #[error("{0}")]
    BadOptions(String),
    /// A saved state that does not fit this dataset.
    #[error("cannot resume: {0}")]
    BadState(String),
    /// A remote dataset or its cache failed.
    #[error(transparent)]
    Cache(#[from] shardtool_cache::CacheError),
    /// A remote dataset, in a build without the `remote` feature.
    #[error("{0}: reading remote datasets needs shardtool-reader's `remote` feature")]
    RemoteNotBuilt(String),
    /// A batch's buffer could not be had: the memory was refused.
    #[error("{0}: use a smaller batch or crop size, fewer workers or less prefetch")]
    OutOfMemory(batch::AllocError),
    /// The epoch ended with a different sample count than planned.
    #[error("epoch delivered {delivered} samples but the plan has {expected}")]
    Incomplete {
        /// Planned.
        expected: u64,
        /// Delivered plus skipped.
        delivered: u64,
    },
}

impl From<batch::AllocError> for ReadError {
    // Not thiserror's `#[from]`: that makes the error its source too, printed twice.
    fn from(e: batch::AllocError) -> Self {
        Self::OutOfMemory(e)
    }
}
