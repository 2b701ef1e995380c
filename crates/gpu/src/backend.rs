//! What the device pipeline needs from a batch target, as one small trait: staging storage for
//! the ring, an asynchronous copy of a batch (with normalisation) that returns the device batch
//! and a "host buffer free" fence, and a way to hand a copied batch to the consumer. The CPU twin
//! (`cpu.rs`) and CUDA (`cuda.rs`) implement it; `pipeline.rs` is written once against it.

use crate::error::GpuError;
use crate::ring::PinnedAllocator;
use std::any::Any;

/// A batch target's copy engine. Calls come from the one thread that drives the loader.
pub(crate) trait Backend: Send + 'static {
    /// One batch's buffers on the target; dropping it returns them for reuse (in stream order on
    /// a GPU).
    type Payload: Payload;
    /// Completes once the copy no longer reads the host (staging) buffer.
    type HostFree: Send;

    /// Page-locked staging memory for the ring; `None`: plain page-aligned host memory.
    fn pinned_allocator(&self) -> Option<Box<dyn PinnedAllocator>>;

    /// Starts copying `data` to the target, then normalising it when asked. `data` must stay
    /// alive and unchanged until the returned fence completes.
    fn copy(
        &mut self,
        data: &[u8],
        normalize: Option<&Normalize>,
    ) -> Result<(Self::Payload, Self::HostFree), GpuError>;

    /// Whether the fence has completed; with `block`, waits for it (and returns `true`).
    fn host_free(&self, fence: &Self::HostFree, block: bool) -> Result<bool, GpuError>;

    /// Orders the consumer's later work after the payload's copy, as it is handed out.
    fn hand_out(&self, payload: &mut Self::Payload) -> Result<(), GpuError>;

    /// Waits for every copy issued so far (before host buffers are given back after an error or
    /// on shutdown).
    fn synchronize(&self) -> Result<(), GpuError>;

    /// Target buffers allocated so far.
    fn target_allocations(&self) -> u64;
}

/// One delivered batch's bytes on its target, seen through [`crate::DeviceBatch`]. `len` is the
/// batch length in bytes (the buffers may be larger). Backend-specific accessors (the CUDA
/// views) upcast it to `dyn Any` and downcast.
pub(crate) trait Payload: Send + Any {
    /// Whether the bytes are in GPU memory.
    fn on_gpu(&self) -> bool;
    /// The uint8 bytes, when they are in host memory.
    fn host_bytes(&self, len: usize) -> Option<&[u8]>;
    /// The normalised floats, when in host memory and asked for.
    fn host_floats(&self, len: usize) -> Option<&[f32]>;
    /// The uint8 bytes copied to a host vector (synchronous).
    fn to_host_bytes(&self, len: usize) -> Result<Vec<u8>, GpuError>;
    /// The normalised floats copied to the host; `None` without normalisation.
    fn to_host_floats(&self, len: usize) -> Result<Option<Vec<f32>>, GpuError>;
    /// Blocks the host until the bytes are on the target.
    fn wait_ready(&self) -> Result<(), GpuError>;
}

/// On-device uint8 → float32 normalisation: `out = (x / 255 - mean[c]) / std[c]` for channel
/// `c` of interleaved RGB, the torchvision convention. Needs a fixed-shape batch layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Per-channel mean, in [0, 1] units.
    pub mean: [f32; 3],
    /// Per-channel standard deviation, in [0, 1] units (> 0).
    pub std: [f32; 3],
}

impl Normalize {
    /// The ImageNet statistics most vision models are trained with.
    pub const IMAGENET: Normalize = Normalize {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };

    /// Checks the values (finite, std > 0).
    pub fn new(mean: [f32; 3], std: [f32; 3]) -> Result<Self, GpuError> {
        if mean.iter().chain(&std).any(|v| !v.is_finite()) || std.iter().any(|&s| s <= 0.0) {
            return Err(GpuError::Options(format!(
                "normalisation needs finite values and std > 0 (got mean {mean:?}, std {std:?})"
            )));
        }
        Ok(Self { mean, std })
    }

    /// Mean in pixel units and the reciprocal of std in pixel units: the exact f32 values the
    /// kernel and the CPU reference both use, so their results agree bit for bit.
    pub(crate) fn pixel_terms(&self) -> ([f32; 3], [f32; 3]) {
        let m = self.mean.map(|m| m * 255.0);
        let inv = self.std.map(|s| 1.0 / (s * 255.0));
        (m, inv)
    }

    /// The CPU reference: normalises interleaved RGB bytes into `out` (same length).
    pub fn apply(&self, src: &[u8], out: &mut Vec<f32>) {
        let (m, inv) = self.pixel_terms();
        out.clear();
        out.extend(
            src.iter()
                .enumerate()
                .map(|(i, &x)| (f32::from(x) - m[i % 3]) * inv[i % 3]),
        );
    }
}
