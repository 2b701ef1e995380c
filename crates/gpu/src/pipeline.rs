//! The device loader: takes the reader's batches (assembled in the staging ring), moves them to
//! the batch target and hands out device batches, keeping `in_flight` copies ahead of the
//! consumer. The CPU twin copies into reused host buffers; the CUDA engine lives in `cuda.rs`.

use crate::device::{Device, Target};
use crate::ring::{RingStats, StagingRing};
use crate::GpuError;
use shardtool_reader::{Batch, Layout, Loader, LoaderBuilder, Metrics};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Options of a [`DeviceLoader`].
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// Batch target (default `cpu`).
    pub device: Device,
    /// Staging ring size K. Default: enough for the reader's defaults (all cores, prefetch 2)
    /// and the copies in flight, see [`StagingRing::capacity_for`].
    pub ring: Option<usize>,
    /// Batches copied ahead of the consumer (default 2, at least 1).
    pub in_flight: usize,
    /// Optional uint8 → float32 normalisation on the target.
    pub normalize: Option<Normalize>,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            ring: None,
            in_flight: 2,
            normalize: None,
        }
    }
}

/// Counters of a [`DeviceLoader`].
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineStats {
    /// The staging ring.
    pub ring: RingStats,
    /// Whether the ring's buffers are page-locked.
    pub pinned: bool,
    /// Target buffers allocated (device memory on CUDA); bounded by `in_flight` plus the
    /// batches the consumer holds.
    pub target_allocations: u64,
    /// Batches handed out.
    pub batches: u64,
    /// Bytes copied to the target.
    pub bytes: u64,
    /// Time the consumer spent inside `next()`, per batch.
    pub waits: Vec<Duration>,
}

/// Where a delivered batch's bytes are.
pub(crate) enum Payload {
    Host(HostSlot, Arc<HostPool>),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaPayload),
}

/// A batch on its target: metadata plus the bytes (and the normalised floats, if asked for).
/// Dropping it returns its target buffers for reuse (on CUDA, once the consumer stream has
/// passed the point where it was dropped).
pub struct DeviceBatch {
    /// Epoch it belongs to.
    pub epoch: u64,
    /// Its index among this rank's batches of the epoch.
    pub index: u64,
    /// Sample keys.
    pub keys: Vec<String>,
    /// Labels.
    pub labels: Vec<i64>,
    /// Byte layout (as in the reader's batch).
    pub layout: Layout,
    pub(crate) len: usize,
    pub(crate) payload: Option<Payload>,
}

impl DeviceBatch {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Bytes of the uint8 batch.
    pub fn num_bytes(&self) -> usize {
        self.len
    }

    /// Whether the batch lives in GPU memory.
    pub fn on_gpu(&self) -> bool {
        !matches!(self.payload, Some(Payload::Host(..)) | None)
    }

    /// The uint8 bytes when the batch is in host memory (CPU twin).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.payload {
            Some(Payload::Host(s, _)) => Some(&s.bytes),
            _ => None,
        }
    }

    /// The normalised floats when the batch is in host memory and normalisation was asked for.
    pub fn host_floats(&self) -> Option<&[f32]> {
        match &self.payload {
            Some(Payload::Host(s, _)) if s.normalized => Some(&s.floats),
            _ => None,
        }
    }

    /// Copies the uint8 bytes back to a host vector (for tests and checks; synchronous).
    pub fn to_host_bytes(&self) -> Result<Vec<u8>, GpuError> {
        match &self.payload {
            Some(Payload::Host(s, _)) => Ok(s.bytes.clone()),
            #[cfg(feature = "cuda")]
            Some(Payload::Cuda(c)) => c.bytes_to_host(self.len),
            None => Ok(Vec::new()),
        }
    }

    /// Copies the normalised floats back to the host; `None` without normalisation.
    pub fn to_host_floats(&self) -> Result<Option<Vec<f32>>, GpuError> {
        match &self.payload {
            Some(Payload::Host(s, _)) => Ok(s.normalized.then(|| s.floats.clone())),
            #[cfg(feature = "cuda")]
            Some(Payload::Cuda(c)) => c.floats_to_host(self.len),
            None => Ok(None),
        }
    }

    /// Blocks the host until the batch's bytes are on the target (a no-op on the CPU). Work on
    /// the consumer stream is already ordered after the copy; this is for host-side timing.
    pub fn wait_ready(&self) -> Result<(), GpuError> {
        match &self.payload {
            #[cfg(feature = "cuda")]
            Some(Payload::Cuda(c)) => c.wait_ready(),
            _ => Ok(()),
        }
    }

    /// The uint8 batch in device memory (exactly [`num_bytes`](Self::num_bytes) long).
    #[cfg(feature = "cuda")]
    pub fn cuda_bytes(&self) -> Option<cudarc::driver::CudaView<'_, u8>> {
        match &self.payload {
            Some(Payload::Cuda(c)) => c.bytes_view(self.len),
            _ => None,
        }
    }

    /// The normalised float32 batch in device memory, when asked for.
    #[cfg(feature = "cuda")]
    pub fn cuda_floats(&self) -> Option<cudarc::driver::CudaView<'_, f32>> {
        match &self.payload {
            Some(Payload::Cuda(c)) => c.floats_view(self.len),
            _ => None,
        }
    }
}

impl Drop for DeviceBatch {
    fn drop(&mut self) {
        match self.payload.take() {
            Some(Payload::Host(slot, pool)) => pool.put(slot),
            #[cfg(feature = "cuda")]
            Some(Payload::Cuda(c)) => c.release(),
            None => {}
        }
    }
}

/// A reused host destination of the CPU twin.
pub(crate) struct HostSlot {
    bytes: Vec<u8>,
    floats: Vec<f32>,
    normalized: bool,
}

/// The CPU twin's pool of destinations.
#[derive(Default)]
pub(crate) struct HostPool {
    free: Mutex<Vec<HostSlot>>,
    allocations: AtomicU64,
}

impl HostPool {
    fn take(&self) -> HostSlot {
        if let Some(s) = self.free.lock().ok().and_then(|mut f| f.pop()) {
            return s;
        }
        self.allocations.fetch_add(1, Ordering::Relaxed);
        HostSlot {
            bytes: Vec::new(),
            floats: Vec::new(),
            normalized: false,
        }
    }

    fn put(&self, slot: HostSlot) {
        if let Ok(mut f) = self.free.lock() {
            f.push(slot);
        }
    }
}

/// The CPU twin of the copy engine: a synchronous copy into a reused destination.
struct CpuEngine {
    pool: Arc<HostPool>,
    ring: Arc<StagingRing>,
    ready: VecDeque<DeviceBatch>,
}

impl CpuEngine {
    fn submit(&mut self, batch: Batch, normalize: Option<&Normalize>) -> Result<(), GpuError> {
        let ring = &self.ring;
        let mut slot = self.pool.take();
        let data = batch.data();
        ring.copy_started(data);
        slot.bytes.clear();
        slot.bytes.extend_from_slice(data);
        slot.normalized = normalize.is_some();
        if let Some(n) = normalize {
            n.apply(data, &mut slot.floats);
        }
        ring.copy_finished(data);
        self.ready
            .push_back(device_batch(&batch, Payload::Host(slot, self.pool.clone())));
        // The copy is done: dropping the reader's batch returns its buffer to the ring.
        drop(batch);
        Ok(())
    }
}

/// The batch's metadata around a payload (the host batch itself is released by the caller).
pub(crate) fn device_batch(batch: &Batch, payload: Payload) -> DeviceBatch {
    let len = batch.data().len();
    DeviceBatch {
        epoch: batch.epoch,
        index: batch.index,
        keys: batch.keys.clone(),
        labels: batch.labels.clone(),
        layout: batch.layout.clone(),
        len,
        payload: Some(payload),
    }
}

enum Engine {
    Cpu(CpuEngine),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaEngine),
}

impl Engine {
    fn pending(&self) -> usize {
        match self {
            Engine::Cpu(e) => e.ready.len(),
            #[cfg(feature = "cuda")]
            Engine::Cuda(e) => e.pending(),
        }
    }

    fn submit(&mut self, batch: Batch, normalize: Option<&Normalize>) -> Result<(), GpuError> {
        match self {
            Engine::Cpu(e) => e.submit(batch, normalize),
            #[cfg(feature = "cuda")]
            Engine::Cuda(e) => e.submit(batch, normalize),
        }
    }

    fn pop(&mut self) -> Option<Result<DeviceBatch, GpuError>> {
        match self {
            Engine::Cpu(e) => e.ready.pop_front().map(Ok),
            #[cfg(feature = "cuda")]
            Engine::Cuda(e) => e.pop(),
        }
    }

    fn target_allocations(&self) -> u64 {
        match self {
            Engine::Cpu(e) => e.pool.allocations.load(Ordering::Relaxed),
            #[cfg(feature = "cuda")]
            Engine::Cuda(e) => e.allocations(),
        }
    }
}

/// Makes the reader for one epoch.
type MakeLoader = Box<dyn FnMut(u64) -> LoaderBuilder + Send>;

/// The host-side source: the current epoch's reader and, when several epochs were asked for,
/// the next one already started so an epoch boundary costs no wait.
struct Source {
    current: Option<Loader>,
    next: Option<Loader>,
    make: Option<MakeLoader>,
    next_epoch: u64,
    end_epoch: u64,
    ring: Arc<StagingRing>,
}

impl Source {
    fn build(&self, builder: LoaderBuilder) -> Result<Loader, GpuError> {
        Ok(builder.allocator(self.ring.clone()).build()?)
    }

    fn start_next(&mut self) -> Result<(), GpuError> {
        if self.next.is_none() && self.next_epoch < self.end_epoch {
            if let Some(make) = self.make.as_mut() {
                let builder = make(self.next_epoch);
                self.next_epoch += 1;
                self.next = Some(self.build(builder)?);
            }
        }
        Ok(())
    }

    fn next_batch(&mut self) -> Option<Result<Batch, GpuError>> {
        loop {
            let current = self.current.as_mut()?;
            match current.next() {
                Some(r) => return Some(r.map_err(GpuError::from)),
                None => {
                    self.current = self.next.take();
                    if let Err(e) = self.start_next() {
                        return Some(Err(e));
                    }
                }
            }
        }
    }
}

/// Streams device batches: the reader assembles into the staging ring, the engine copies
/// `in_flight` batches ahead, the consumer receives batches ready on its stream.
pub struct DeviceLoader {
    target: Target,
    ring: Arc<StagingRing>,
    engine: Engine,
    source: Source,
    normalize: Option<Normalize>,
    in_flight: usize,
    /// A reader error, delivered after the batches copied before it.
    deferred: Option<GpuError>,
    exhausted: bool,
    batches: u64,
    bytes: u64,
    waits: Vec<Duration>,
}

impl DeviceLoader {
    /// One epoch: `builder` is the reader's builder (its allocator is replaced by the ring).
    pub fn new(builder: LoaderBuilder, opts: &DeviceOptions) -> Result<Self, GpuError> {
        let mut me = Self::open(opts, 1)?;
        me.source.current = Some(me.source.build(builder)?);
        Ok(me)
    }

    /// Epochs `epochs` back to back, `make(epoch)` building each epoch's reader. The next
    /// epoch's reader starts when the current one does, so its first batches are ready at the
    /// boundary (the ring is sized for two readers).
    pub fn epochs(
        make: impl FnMut(u64) -> LoaderBuilder + Send + 'static,
        epochs: std::ops::Range<u64>,
        opts: &DeviceOptions,
    ) -> Result<Self, GpuError> {
        let mut me = Self::open(opts, 2)?;
        me.source.make = Some(Box::new(make));
        me.source.next_epoch = epochs.start;
        me.source.end_epoch = epochs.end;
        me.source.start_next()?;
        me.source.current = me.source.next.take();
        me.source.start_next()?;
        Ok(me)
    }

    fn open(opts: &DeviceOptions, readers: usize) -> Result<Self, GpuError> {
        let target = opts.device.resolve()?;
        let in_flight = opts.in_flight.max(1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let k = opts
            .ring
            .unwrap_or(readers * StagingRing::capacity_for(cores, 2, in_flight));
        let (ring, engine) = match &target {
            Target::Cpu { .. } => {
                let ring = Arc::new(StagingRing::host(k));
                let engine = Engine::Cpu(CpuEngine {
                    pool: Arc::default(),
                    ring: ring.clone(),
                    ready: VecDeque::new(),
                });
                (ring, engine)
            }
            #[cfg(feature = "cuda")]
            Target::Cuda { ordinal, .. } => {
                let ctx = crate::cuda::open_context(*ordinal)?;
                let ring = Arc::new(crate::cuda::pinned_ring(&ctx, k));
                let engine = crate::cuda::CudaEngine::new(
                    ctx,
                    ring.clone(),
                    opts.normalize.is_some(),
                    in_flight,
                )?;
                (ring, Engine::Cuda(engine))
            }
            #[cfg(not(feature = "cuda"))]
            Target::Cuda { .. } => {
                return Err(GpuError::Options("CUDA target in a CPU-only build".into()))
            }
        };
        Ok(Self {
            target,
            ring: ring.clone(),
            engine,
            source: Source {
                current: None,
                next: None,
                make: None,
                next_epoch: 0,
                end_epoch: 0,
                ring,
            },
            normalize: opts.normalize,
            in_flight,
            deferred: None,
            exhausted: false,
            batches: 0,
            bytes: 0,
            waits: Vec::new(),
        })
    }

    /// Where batches go.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Why `auto` runs on the CPU, to print once; `None` when the requested target is used.
    pub fn fallback(&self) -> Option<&str> {
        match &self.target {
            Target::Cpu { fallback } => fallback.as_deref(),
            Target::Cuda { .. } => None,
        }
    }

    /// The stream consumers should launch work on: each batch handed out is ordered after its
    /// copy on this stream. `None` on the CPU.
    #[cfg(feature = "cuda")]
    pub fn consumer_stream(&self) -> Option<&Arc<cudarc::driver::CudaStream>> {
        match &self.engine {
            Engine::Cuda(e) => Some(e.consumer()),
            Engine::Cpu(_) => None,
        }
    }

    /// Uses `stream` (same device) instead of the loader's own consumer stream for batches
    /// handed out from now on, e.g. the stream a training framework computes on.
    #[cfg(feature = "cuda")]
    pub fn set_consumer_stream(
        &mut self,
        stream: Arc<cudarc::driver::CudaStream>,
    ) -> Result<(), GpuError> {
        match &mut self.engine {
            Engine::Cuda(e) => e.set_consumer(stream),
            Engine::Cpu(_) => Err(GpuError::Options(
                "a CUDA stream was given to a loader running on the CPU".into(),
            )),
        }
    }

    /// The staging ring (shared with the reader).
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.ring
    }

    /// The current reader's metrics (throughput, its own waits, skipped records).
    pub fn reader_metrics(&self) -> Option<Metrics> {
        self.source.current.as_ref().map(|l| l.metrics())
    }

    /// Counters so far.
    pub fn stats(&self) -> PipelineStats {
        PipelineStats {
            ring: self.ring.stats(),
            pinned: self.ring.is_pinned(),
            target_allocations: self.engine.target_allocations(),
            batches: self.batches,
            bytes: self.bytes,
            waits: self.waits.clone(),
        }
    }

    fn fill(&mut self) {
        while !self.exhausted && self.engine.pending() < self.in_flight {
            match self.source.next_batch() {
                Some(Ok(b)) => {
                    if let Err(e) = self.check(&b) {
                        self.deferred = Some(e);
                        self.exhausted = true;
                    } else if let Err(e) = self.engine.submit(b, self.normalize.as_ref()) {
                        self.deferred = Some(e);
                        self.exhausted = true;
                    }
                }
                Some(Err(e)) => {
                    self.deferred = Some(e);
                    self.exhausted = true;
                }
                None => self.exhausted = true,
            }
        }
    }

    fn check(&self, b: &Batch) -> Result<(), GpuError> {
        if self.normalize.is_some() && !matches!(b.layout, Layout::Fixed { .. }) {
            return Err(GpuError::Options(format!(
                "normalisation needs same-shape decoded images, but batch {} of epoch {} has a \
                 {} layout",
                b.index,
                b.epoch,
                match b.layout {
                    Layout::Variable { .. } => "variable-shape",
                    _ => "encoded (not decoded)",
                }
            )));
        }
        Ok(())
    }
}

impl Iterator for DeviceLoader {
    type Item = Result<DeviceBatch, GpuError>;

    fn next(&mut self) -> Option<Self::Item> {
        let t = Instant::now();
        self.fill();
        let out = match self.engine.pop() {
            Some(r) => Some(r),
            None => self.deferred.take().map(Err),
        };
        if let Some(Ok(b)) = &out {
            self.waits.push(t.elapsed());
            self.batches += 1;
            self.bytes += b.len as u64;
        }
        out
    }
}
