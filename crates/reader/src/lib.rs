//! The shardtool reader, linked into training code: epoch plans, two-level shuffle,
//! exactly-once partitioning across ranks, resumable state, zero-copy record views over mapped
//! shards, and batches assembled into reused buffers from a pluggable allocator.
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
mod loader;
mod metrics;
mod mmap;
mod plan;

pub use batch::{
    AlignedBuffer, Batch, BatchAllocator, CpuAllocator, HostBuffer, Layout, CPU_BUFFER_ALIGN,
};
pub use dataset::{Dataset, ShardView};
pub use loader::{dataset_fingerprint, CorruptPolicy, Loader, LoaderBuilder, LoaderState, Next};
pub use metrics::{Metrics, SlowRecord};
pub use plan::{
    derive_seed, first_use_order, open_window_bytes, per_rank, rank_order, shard_order,
    OrderOptions, Remainder, SampleRef,
};
pub use shardtool_cache::{CacheMetrics, CacheOptions, FetchPolicy};

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
    /// The epoch ended with a different sample count than planned.
    #[error("epoch delivered {delivered} samples but the plan has {expected}")]
    Incomplete {
        /// Planned.
        expected: u64,
        /// Delivered plus skipped.
        delivered: u64,
    },
}
