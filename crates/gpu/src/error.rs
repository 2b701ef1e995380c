//! The crate's error type: what a caller of the device loader, the benchmark or the bandwidth
//! probe can get back. Causes are either transparent or spelled out in the message, never both,
//! so `{:#}` chains print each cause once.

use crate::device::DeviceError;

/// Why the GPU path failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The requested device is not usable.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The reader failed.
    #[error(transparent)]
    Read(#[from] shardtool_reader::ReadError),
    /// A CUDA call failed after the device was opened. The driver's error is kept as text (its
    /// type exists only in `cuda` builds), so it is in the message and not a `source`.
    #[error("CUDA {call} failed: {message}")]
    Cuda {
        /// What was being done.
        call: &'static str,
        /// The driver's error text.
        message: String,
    },
    /// Invalid options.
    #[error("{0}")]
    Options(String),
}
