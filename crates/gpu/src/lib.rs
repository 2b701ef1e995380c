//! GPU batches for shardtool: a ring of pinned host buffers that the reader assembles batches
//! into, asynchronous host-to-device copies on a dedicated stream, and a CPU twin with the same
//! API that every test runs against.
//!
//! Dependency note: the intended design had `gpu → core` only, but the seam this crate plugs
//! into — `BatchAllocator`, `HostBuffer`, `Batch` and `LoaderBuilder` — lives in
//! `shardtool-reader`, so this crate depends on the reader (`gpu → reader → core, formats`).
//! Nothing in the reader depends on this crate; the reader stays CUDA-free.
//!
//! ```text
//! reader workers ──assemble──► StagingRing buffer (pinned) ──Batch──► DeviceLoader
//!   copy stream:  [wait released(slot)] memcpy HtoD ─► record host_free ─► [normalise] ─► record ready
//!   consumer stream: wait ready ─► user kernels ─► (DeviceBatch dropped) record released(slot)
//!   host buffer goes back to the ring once host_free has completed
//! ```
//!
//! Modules in dependency order, each importing only modules listed before it: `device` (the
//! `--device` spec, targets and their errors), `error`, `ring` (the staging ring; pinned memory
//! comes through a small allocator trait), `backend` (the `Backend` trait: what the pipeline
//! needs from a target), `cpu` (the CPU twin), `pipeline` (the loader, written once against the
//! trait), `cuda` (the CUDA backend), `select` (picks the backend for a [`Device`]), `bench`.
//!
//! Without the `cuda` feature only the CPU twin exists and `cuda:N` reports how to build a
//! GPU-capable binary. With it, CUDA is loaded at run time (cudarc, dynamic loading): the
//! binary builds and runs where no CUDA is installed, and `cuda:N` then fails with a typed
//! error naming the missing driver or device.
//!
//! ```no_run
//! use shardtool_gpu::{Device, DeviceLoader, DeviceOptions};
//! use shardtool_reader::Loader;
//! let opts = DeviceOptions { device: "auto".parse()?, ..Default::default() };
//! let mut loader = DeviceLoader::new(Loader::builder("out/sample").batch_size(64), &opts)?;
//! if let Some(note) = loader.fallback() {
//!     eprintln!("{note}");
//! }
//! for batch in &mut loader {
//!     let batch = batch?;
//!     println!("batch {}: {} bytes, on the GPU: {}", batch.index, batch.num_bytes(), batch.on_gpu());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod bench;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod error;
mod pipeline;
mod ring;
mod select;

pub use backend::Normalize;
pub use bench::{bench, h2d_bandwidth, BenchOptions, BenchReport, H2dReport};
pub use device::{Device, DeviceError, ParseDeviceError, Target};
pub use error::GpuError;
pub use pipeline::{DeviceBatch, DeviceLoader, DeviceOptions, PipelineStats};
pub use ring::{RingBuffer, RingStats, StagingRing};

/// Whether this build can use CUDA at all (the `cuda` feature).
pub const CUDA_BUILD: bool = cfg!(feature = "cuda");
