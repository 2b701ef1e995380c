//! The CUDA backend (feature `cuda`): driver detection that cannot panic, pinned ring storage,
//! asynchronous copies on a dedicated stream with events for "device batch ready" and "host
//! buffer reusable", consumer-stream ordering, the normalisation kernel and the bandwidth probe.
//! Also the CUDA-only accessors of [`DeviceBatch`] and [`DeviceLoader`] (device views, the
//! consumer stream), which find this backend's types by downcasting.
//!
//! cudarc is built with dynamic loading: libcuda is opened on the first driver call, and cudarc
//! panics when it is missing, so every entry point goes through [`driver_present`] first.

use crate::backend::{Backend, Normalize, Payload};
use crate::device::{Device, DeviceError};
use crate::error::GpuError;
use crate::pipeline::{DeviceBatch, DeviceLoader, Pipeline};
use crate::ring::{PinnedAllocator, PinnedBuffer};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, DriverError,
    LaunchConfig, PushKernelArg,
};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn cuda_err(call: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Cuda {
        call,
        message: e.to_string(),
    }
}

/// Whether the CUDA driver library can be loaded. Checked before any other CUDA call, because
/// cudarc's lazily loaded bindings panic when the library is absent.
pub(crate) fn driver_present() -> bool {
    #[allow(unsafe_code)]
    // SAFETY: only tries to dlopen libcuda / nvcuda under their usual names and drops the handle;
    // loading the NVIDIA driver library runs no initialisers with preconditions on our side.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    present
}

/// GPUs the driver reports; a typed error when the driver library is missing.
pub(crate) fn device_count(device: Device) -> Result<usize, DeviceError> {
    if !driver_present() {
        return Err(DeviceError::DriverNotFound { device });
    }
    match CudaContext::device_count() {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        // cuInit reports a driver without any GPU as an error: that is zero devices.
        Err(DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(e) => Err(DeviceError::Driver {
            call: "cuInit / cuDeviceGetCount".into(),
            message: e.to_string(),
        }),
    }
}

/// The name of GPU `ordinal` (which must exist).
pub(crate) fn device_name(ordinal: usize) -> Result<String, DeviceError> {
    let driver = |e: DriverError| DeviceError::Driver {
        call: format!("opening cuda:{ordinal}"),
        message: e.to_string(),
    };
    let ctx = CudaContext::new(ordinal).map_err(driver)?;
    ctx.name().map_err(driver)
}

/// Page-locked host memory from the driver (`cuMemHostAlloc`, cached, not write-combined: the
/// reader's workers and tests also read these bytes).
pub(crate) struct PinnedStorage {
    /// Owns the allocation; freed (after its own event) on drop.
    _slice: cudarc::driver::PinnedHostSlice<u8>,
    /// Start address, kept as an integer so the struct stays `Send` without an unsafe impl.
    addr: usize,
    capacity: usize,
}

impl PinnedStorage {
    pub(crate) fn new(ctx: &Arc<CudaContext>, capacity: usize) -> Result<Self, DriverError> {
        let capacity = capacity.max(1);
        #[allow(unsafe_code)]
        // SAFETY: the memory is uninitialised; it is zeroed below before any reference to it is
        // made. Flags 0 = plain page-locked memory.
        let mut slice = unsafe { ctx.alloc_pinned_with_flags::<u8>(capacity, 0) }?;
        let ptr = slice.as_mut_ptr()?;
        #[allow(unsafe_code)]
        // SAFETY: `ptr` is the start of a live allocation of `capacity` bytes owned by `slice`.
        unsafe {
            std::ptr::write_bytes(ptr, 0, capacity)
        };
        Ok(Self {
            _slice: slice,
            addr: ptr as usize,
            capacity,
        })
    }
}

impl PinnedBuffer for PinnedStorage {
    fn capacity(&self) -> usize {
        self.capacity
    }

    fn as_slice(&self) -> &[u8] {
        #[allow(unsafe_code)]
        // SAFETY: `addr..addr + capacity` is the initialised (zeroed at creation) allocation
        // owned by `_slice`, which lives as long as `self`; the borrow of `self` prevents a
        // concurrent `as_mut_slice`. Device reads of it (async copies) only read.
        unsafe {
            std::slice::from_raw_parts(self.addr as *const u8, self.capacity)
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        #[allow(unsafe_code)]
        // SAFETY: as in `as_slice`, with `&mut self` making this the only reference. The ring
        // never hands out a buffer whose device copy is still running (the pipeline holds the
        // batch until its `host_free` event completes), so no DMA reads it concurrently.
        unsafe {
            std::slice::from_raw_parts_mut(self.addr as *mut u8, self.capacity)
        }
    }
}

/// Pinned ring buffers in one device context.
struct ContextPinned(Arc<CudaContext>);

impl PinnedAllocator for ContextPinned {
    fn alloc(&self, capacity: usize) -> Option<Box<dyn PinnedBuffer>> {
        // The error is dropped: the ring falls back to pageable memory and counts it.
        let p = PinnedStorage::new(&self.0, capacity).ok()?;
        Some(Box::new(p))
    }
}

/// uint8 → float32 normalisation of interleaved RGB, as hand-written PTX: the driver JIT-compiles
/// it, so no libnvrtc is needed at run time. `out[i] = (in[i] - m[i % 3]) * inv[i % 3]`, with
/// explicit round-to-nearest so the compiler cannot fuse it into an FMA and the result matches
/// the CPU reference bit for bit.
const NORMALIZE_PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry shardtool_normalize_u8(
    .param .u64 p_in,
    .param .u64 p_out,
    .param .u64 p_n,
    .param .f32 p_m0,
    .param .f32 p_m1,
    .param .f32 p_m2,
    .param .f32 p_s0,
    .param .f32 p_s1,
    .param .f32 p_s2
)
{
    .reg .pred  %p<4>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<12>;
    .reg .f32   %f<14>;

    ld.param.u64    %rd1, [p_in];
    ld.param.u64    %rd2, [p_out];
    ld.param.u64    %rd3, [p_n];
    mov.u32         %r1, %ctaid.x;
    mov.u32         %r2, %ntid.x;
    mov.u32         %r3, %tid.x;
    mul.wide.u32    %rd4, %r1, %r2;
    cvt.u64.u32     %rd5, %r3;
    add.u64         %rd4, %rd4, %rd5;
    setp.ge.u64     %p1, %rd4, %rd3;
    @%p1 bra        DONE;

    ld.param.f32    %f1, [p_m0];
    ld.param.f32    %f2, [p_m1];
    ld.param.f32    %f3, [p_m2];
    ld.param.f32    %f4, [p_s0];
    ld.param.f32    %f5, [p_s1];
    ld.param.f32    %f6, [p_s2];

    cvta.to.global.u64  %rd1, %rd1;
    cvta.to.global.u64  %rd2, %rd2;
    add.u64         %rd6, %rd1, %rd4;
    ld.global.u8    %r4, [%rd6];
    cvt.rn.f32.u32  %f7, %r4;

    rem.u64         %rd7, %rd4, 3;
    setp.eq.u64     %p2, %rd7, 0;
    setp.eq.u64     %p3, %rd7, 1;
    selp.f32        %f8, %f2, %f3, %p3;
    selp.f32        %f8, %f1, %f8, %p2;
    selp.f32        %f9, %f5, %f6, %p3;
    selp.f32        %f9, %f4, %f9, %p2;

    sub.rn.f32      %f10, %f7, %f8;
    mul.rn.f32      %f11, %f10, %f9;

    shl.b64         %rd8, %rd4, 2;
    add.u64         %rd9, %rd2, %rd8;
    st.global.f32   [%rd9], %f11;
DONE:
    ret;
}
"#;

/// A device destination: the uint8 batch and, with normalisation, its float32 twin.
pub(crate) struct DeviceSlot {
    bytes: CudaSlice<u8>,
    floats: Option<CudaSlice<f32>>,
    /// Recorded on the consumer stream when the batch was dropped: the copy stream waits on it
    /// before overwriting (the `record_stream` rule, without blocking the host).
    released: Option<CudaEvent>,
}

/// Reused device destinations.
#[derive(Default)]
pub(crate) struct DevicePool {
    free: Mutex<Vec<DeviceSlot>>,
    allocations: AtomicU64,
}

/// A device batch's buffers and events.
pub(crate) struct CudaPayload {
    slot: Option<DeviceSlot>,
    /// Recorded on the copy stream after the copy (and normalisation).
    ready: CudaEvent,
    /// The stream the batch was handed to; set when it is handed out.
    consumer: Option<Arc<CudaStream>>,
    pool: Arc<DevicePool>,
}

impl CudaPayload {
    fn stream(&self) -> Result<&Arc<CudaStream>, GpuError> {
        self.consumer.as_ref().ok_or(GpuError::Options(
            "the batch has not been handed out yet".into(),
        ))
    }

    /// `len` is the batch length the slot was chosen for (capacity >= len); the slot is only
    /// taken when the batch is dropped, so this is `Some` for a live batch.
    fn bytes_view(&self, len: usize) -> Option<CudaView<'_, u8>> {
        self.slot.as_ref().map(|s| s.bytes.slice(0..len))
    }

    fn floats_view(&self, len: usize) -> Option<CudaView<'_, f32>> {
        self.slot.as_ref()?.floats.as_ref().map(|f| f.slice(0..len))
    }
}

impl Payload for CudaPayload {
    fn on_gpu(&self) -> bool {
        true
    }

    fn host_bytes(&self, _len: usize) -> Option<&[u8]> {
        None
    }

    fn host_floats(&self, _len: usize) -> Option<&[f32]> {
        None
    }

    fn to_host_bytes(&self, len: usize) -> Result<Vec<u8>, GpuError> {
        let stream = self.stream()?;
        let Some(view) = self.bytes_view(len) else {
            return Ok(Vec::new());
        };
        let v = stream.clone_dtoh(&view).map_err(cuda_err("cuMemcpyDtoH"))?;
        stream
            .synchronize()
            .map_err(cuda_err("cuStreamSynchronize"))?;
        Ok(v)
    }

    fn to_host_floats(&self, len: usize) -> Result<Option<Vec<f32>>, GpuError> {
        let Some(view) = self.floats_view(len) else {
            return Ok(None);
        };
        let stream = self.stream()?;
        let v = stream.clone_dtoh(&view).map_err(cuda_err("cuMemcpyDtoH"))?;
        stream
            .synchronize()
            .map_err(cuda_err("cuStreamSynchronize"))?;
        Ok(Some(v))
    }

    fn wait_ready(&self) -> Result<(), GpuError> {
        self.ready
            .synchronize()
            .map_err(cuda_err("cuEventSynchronize"))
    }
}

impl Drop for CudaPayload {
    fn drop(&mut self) {
        if let Some(mut slot) = self.slot.take() {
            // Errors here cannot be returned from drop; without the event the copy stream would
            // not wait, so drop the slot instead of reusing it (its memory is freed in order on
            // the copy stream after cudarc's own tracked uses).
            match self.consumer.as_ref().map(|s| s.record_event(None)) {
                Some(Ok(ev)) => slot.released = Some(ev),
                Some(Err(_)) => return,
                None => {} // never handed out: no consumer work to wait for
            }
            if let Ok(mut f) = self.pool.free.lock() {
                f.push(slot);
            }
        }
    }
}

/// Copies batches on a dedicated stream and hands them to a consumer stream.
pub(crate) struct CudaBackend {
    ctx: Arc<CudaContext>,
    copy: Arc<CudaStream>,
    consumer: Arc<CudaStream>,
    kernel: Option<CudaFunction>,
    pool: Arc<DevicePool>,
}

/// Opens GPU `ordinal` (which [`Device::resolve`] has checked).
fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, GpuError> {
    CudaContext::new(ordinal).map_err(cuda_err("opening the device context"))
}

impl CudaBackend {
    /// Opens GPU `ordinal` with its copy and consumer streams, loading the normalisation kernel
    /// when `normalize` is set.
    pub(crate) fn open(ordinal: usize, normalize: bool) -> Result<Self, GpuError> {
        let ctx = open_context(ordinal)?;
        let copy = ctx
            .new_stream()
            .map_err(cuda_err("creating the copy stream"))?;
        let consumer = ctx
            .new_stream()
            .map_err(cuda_err("creating the consumer stream"))?;
        let kernel = if normalize {
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(NORMALIZE_PTX))
                .map_err(cuda_err("loading the normalisation kernel (PTX JIT)"))?;
            Some(
                module
                    .load_function("shardtool_normalize_u8")
                    .map_err(cuda_err("finding the normalisation kernel"))?,
            )
        } else {
            None
        };
        Ok(Self {
            ctx,
            copy,
            consumer,
            kernel,
            pool: Arc::default(),
        })
    }

    fn set_consumer(&mut self, stream: Arc<CudaStream>) -> Result<(), GpuError> {
        if stream.context() != &self.ctx {
            return Err(GpuError::Options(
                "the consumer stream belongs to another device or context".into(),
            ));
        }
        self.consumer = stream;
        Ok(())
    }

    /// A destination of at least `len` bytes, the copy stream ordered after its last use.
    fn take_slot(&self, len: usize, floats: bool) -> Result<DeviceSlot, GpuError> {
        let reused = self.pool.free.lock().ok().and_then(|mut f| {
            let i = f.iter().position(|s| {
                s.bytes.len() >= len
                    && (!floats || s.floats.as_ref().is_some_and(|f| f.len() >= len))
            })?;
            Some(f.swap_remove(i))
        });
        if let Some(mut s) = reused {
            if let Some(ev) = s.released.take() {
                self.copy.wait(&ev).map_err(cuda_err("cuStreamWaitEvent"))?;
            }
            return Ok(s);
        }
        // Grow: free one idle, too-small slot (in stream order, after its consumer released it)
        // so a slowly growing batch size does not pile up device memory.
        if let Some(old) = self.pool.free.lock().ok().and_then(|mut f| f.pop()) {
            if let Some(ev) = &old.released {
                self.copy.wait(ev).map_err(cuda_err("cuStreamWaitEvent"))?;
            }
            drop(old);
        }
        self.pool.allocations.fetch_add(1, Ordering::Relaxed);
        let cap = len.max(1);
        let bytes = self
            .copy
            .alloc_zeros::<u8>(cap)
            .map_err(cuda_err("allocating a device batch"))?;
        let floats = if floats {
            Some(
                self.copy
                    .alloc_zeros::<f32>(cap)
                    .map_err(cuda_err("allocating a device float batch"))?,
            )
        } else {
            None
        };
        Ok(DeviceSlot {
            bytes,
            floats,
            released: None,
        })
    }

    /// Enqueues copy (and normalisation) on the copy stream; returns (host_free, ready).
    fn issue(
        &self,
        data: &[u8],
        slot: &mut DeviceSlot,
        normalize: Option<&Normalize>,
    ) -> Result<(CudaEvent, CudaEvent), GpuError> {
        let len = data.len();
        if len > 0 {
            let mut dst = slot.bytes.slice_mut(0..len);
            // Asynchronous: the source is pinned ring memory (or pageable after a failed pin,
            // which the driver stages). Either way the pipeline keeps the batch alive until
            // `host_free` has completed.
            self.copy
                .memcpy_htod(data, &mut dst)
                .map_err(cuda_err("cuMemcpyHtoDAsync"))?;
        }
        let host_free = self
            .copy
            .record_event(None)
            .map_err(cuda_err("cuEventRecord"))?;
        if let (Some(n), Some(kernel), Some(out)) = (normalize, &self.kernel, slot.floats.as_mut())
        {
            if len > 0 {
                let (m, inv) = n.pixel_terms();
                let blocks = u32::try_from(len.div_ceil(256)).map_err(|_| {
                    GpuError::Options(format!("batch of {len} bytes is too large to normalise"))
                })?;
                let n64 = len as u64;
                let src = slot.bytes.slice(0..len);
                let mut dst = out.slice_mut(0..len);
                let mut launch = self.copy.launch_builder(kernel);
                launch
                    .arg(&src)
                    .arg(&mut dst)
                    .arg(&n64)
                    .arg(&m[0])
                    .arg(&m[1])
                    .arg(&m[2])
                    .arg(&inv[0])
                    .arg(&inv[1])
                    .arg(&inv[2]);
                let cfg = LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                #[allow(unsafe_code)]
                // SAFETY: the arguments match the PTX signature (two device pointers, u64 count,
                // six f32); the kernel reads `len` bytes of `src` and writes `len` floats of
                // `dst`, both views exactly `len` long, and guards every thread with `i < n`.
                unsafe { launch.launch(cfg) }.map_err(cuda_err("launching normalisation"))?;
            }
        }
        let ready = self
            .copy
            .record_event(None)
            .map_err(cuda_err("cuEventRecord"))?;
        Ok((host_free, ready))
    }
}

impl Backend for CudaBackend {
    type Payload = CudaPayload;
    type HostFree = CudaEvent;

    fn pinned_allocator(&self) -> Option<Box<dyn PinnedAllocator>> {
        Some(Box::new(ContextPinned(self.ctx.clone())))
    }

    fn copy(
        &mut self,
        data: &[u8],
        normalize: Option<&Normalize>,
    ) -> Result<(CudaPayload, CudaEvent), GpuError> {
        let mut slot = self.take_slot(data.len(), normalize.is_some())?;
        let (host_free, ready) = self.issue(data, &mut slot, normalize)?;
        let payload = CudaPayload {
            slot: Some(slot),
            ready,
            consumer: None,
            pool: self.pool.clone(),
        };
        Ok((payload, host_free))
    }

    fn host_free(&self, fence: &CudaEvent, block: bool) -> Result<bool, GpuError> {
        if block {
            fence.synchronize().map(|()| true)
        } else {
            fence.try_is_complete()
        }
        .map_err(cuda_err("cuEventQuery"))
    }

    fn hand_out(&self, payload: &mut CudaPayload) -> Result<(), GpuError> {
        // Consumer work queued from now on runs after the copy: a stream wait, not a host block.
        self.consumer
            .wait(&payload.ready)
            .map_err(cuda_err("cuStreamWaitEvent"))?;
        payload.consumer = Some(self.consumer.clone());
        Ok(())
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        self.copy
            .synchronize()
            .map_err(cuda_err("cuStreamSynchronize"))
    }

    fn target_allocations(&self) -> u64 {
        self.pool.allocations.load(Ordering::Relaxed)
    }
}

impl DeviceBatch {
    /// The uint8 batch in device memory (exactly [`num_bytes`](Self::num_bytes) long); `None`
    /// on the CPU twin.
    pub fn cuda_bytes(&self) -> Option<CudaView<'_, u8>> {
        let any: &dyn Any = &*self.payload;
        any.downcast_ref::<CudaPayload>()?.bytes_view(self.len)
    }

    /// The normalised float32 batch in device memory, when asked for.
    pub fn cuda_floats(&self) -> Option<CudaView<'_, f32>> {
        let any: &dyn Any = &*self.payload;
        any.downcast_ref::<CudaPayload>()?.floats_view(self.len)
    }
}

impl DeviceLoader {
    /// The stream consumers should launch work on: each batch handed out is ordered after its
    /// copy on this stream. `None` on the CPU.
    pub fn consumer_stream(&self) -> Option<&Arc<CudaStream>> {
        let any: &dyn Any = &*self.engine;
        let p = any.downcast_ref::<Pipeline<CudaBackend>>()?;
        Some(&p.backend.consumer)
    }

    /// Uses `stream` (same device) instead of the loader's own consumer stream for batches
    /// handed out from now on, e.g. the stream a training framework computes on.
    pub fn set_consumer_stream(&mut self, stream: Arc<CudaStream>) -> Result<(), GpuError> {
        let any: &mut dyn Any = &mut *self.engine;
        match any.downcast_mut::<Pipeline<CudaBackend>>() {
            Some(p) => p.backend.set_consumer(stream),
            None => Err(GpuError::Options(
                "a CUDA stream was given to a loader running on the CPU".into(),
            )),
        }
    }
}

/// Host-to-device copy bandwidth from pinned and from pageable memory, plain cudarc copies.
pub(crate) fn h2d(ordinal: usize, bytes: usize, iters: usize) -> Result<(f64, f64), GpuError> {
    let ctx = open_context(ordinal)?;
    let stream = ctx.new_stream().map_err(cuda_err("creating a stream"))?;
    let bytes = bytes.max(1);
    let mut dst = stream
        .alloc_zeros::<u8>(bytes)
        .map_err(cuda_err("allocating device memory"))?;
    let mut pinned = PinnedStorage::new(&ctx, bytes).map_err(cuda_err("cuMemHostAlloc"))?;
    pinned.as_mut_slice().fill(1);
    let pageable = vec![1u8; bytes];
    let time = |src: &[u8], dst: &mut CudaSlice<u8>| -> Result<f64, GpuError> {
        // One warm-up copy, then `iters` timed ones, synchronised at the end.
        stream
            .memcpy_htod(src, dst)
            .map_err(cuda_err("cuMemcpyHtoDAsync"))?;
        stream
            .synchronize()
            .map_err(cuda_err("cuStreamSynchronize"))?;
        let t = Instant::now();
        for _ in 0..iters.max(1) {
            stream
                .memcpy_htod(src, dst)
                .map_err(cuda_err("cuMemcpyHtoDAsync"))?;
        }
        stream
            .synchronize()
            .map_err(cuda_err("cuStreamSynchronize"))?;
        Ok((bytes * iters.max(1)) as f64 / t.elapsed().as_secs_f64().max(1e-12) / 1e9)
    };
    let pinned_gb_s = time(pinned.as_slice(), &mut dst)?;
    let pageable_gb_s = time(&pageable, &mut dst)?;
    Ok((pinned_gb_s, pageable_gb_s))
}
