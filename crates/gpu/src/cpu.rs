//! The CPU twin of the CUDA backend: batches are copied synchronously into reused host buffers
//! (normalised on the host when asked), so every test of the pipeline runs without a GPU and the
//! same code paths (ring, in-flight window, host-free fences) are exercised.

use crate::backend::{Backend, Normalize, Payload};
use crate::error::GpuError;
use crate::ring::PinnedAllocator;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A reused host destination.
#[derive(Default)]
struct HostSlot {
    bytes: Vec<u8>,
    floats: Vec<f32>,
    normalized: bool,
}

/// The twin's pool of destinations.
#[derive(Default)]
struct HostPool {
    free: Mutex<Vec<HostSlot>>,
    allocations: AtomicU64,
}

impl HostPool {
    fn take(&self) -> HostSlot {
        if let Some(s) = self.free.lock().ok().and_then(|mut f| f.pop()) {
            return s;
        }
        self.allocations.fetch_add(1, Ordering::Relaxed);
        HostSlot::default()
    }

    fn put(&self, slot: HostSlot) {
        if let Ok(mut f) = self.free.lock() {
            f.push(slot);
        }
    }
}

/// A delivered batch of the twin; its slot goes back to the pool on drop.
pub(crate) struct HostPayload {
    slot: Option<HostSlot>,
    pool: Arc<HostPool>,
}

impl Drop for HostPayload {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.put(slot);
        }
    }
}

impl Payload for HostPayload {
    fn on_gpu(&self) -> bool {
        false
    }

    fn host_bytes(&self, _len: usize) -> Option<&[u8]> {
        self.slot.as_ref().map(|s| s.bytes.as_slice())
    }

    fn host_floats(&self, _len: usize) -> Option<&[f32]> {
        self.slot
            .as_ref()
            .filter(|s| s.normalized)
            .map(|s| s.floats.as_slice())
    }

    fn to_host_bytes(&self, len: usize) -> Result<Vec<u8>, GpuError> {
        Ok(self.host_bytes(len).map(<[u8]>::to_vec).unwrap_or_default())
    }

    fn to_host_floats(&self, len: usize) -> Result<Option<Vec<f32>>, GpuError> {
        Ok(self.host_floats(len).map(<[f32]>::to_vec))
    }

    fn wait_ready(&self) -> Result<(), GpuError> {
        Ok(())
    }
}

/// The CPU twin: a synchronous copy into a reused destination. Its host-free fence is complete
/// as soon as `copy` returns.
#[derive(Default)]
pub(crate) struct CpuBackend {
    pool: Arc<HostPool>,
}

impl Backend for CpuBackend {
    type Payload = HostPayload;
    type HostFree = ();

    fn pinned_allocator(&self) -> Option<Box<dyn PinnedAllocator>> {
        None
    }

    fn copy(
        &mut self,
        data: &[u8],
        normalize: Option<&Normalize>,
    ) -> Result<(HostPayload, ()), GpuError> {
        let mut slot = self.pool.take();
        slot.bytes.clear();
        slot.bytes.extend_from_slice(data);
        slot.normalized = normalize.is_some();
        if let Some(n) = normalize {
            n.apply(data, &mut slot.floats);
        }
        let payload = HostPayload {
            slot: Some(slot),
            pool: self.pool.clone(),
        };
        Ok((payload, ()))
    }

    fn host_free(&self, _fence: &(), _block: bool) -> Result<bool, GpuError> {
        Ok(true)
    }

    fn hand_out(&self, _payload: &mut HostPayload) -> Result<(), GpuError> {
        Ok(())
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        Ok(())
    }

    fn target_allocations(&self) -> u64 {
        self.pool.allocations.load(Ordering::Relaxed)
    }
}
