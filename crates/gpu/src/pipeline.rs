//! The device loader: takes the reader's batches (assembled in the staging ring), moves them to
//! the batch target and hands out device batches, keeping `in_flight` copies ahead of the
//! consumer. Written once against [`Backend`]: [`Pipeline`] holds each reader batch (and so its
//! ring buffer) until its copy's host-free fence has completed, whatever the target.
//!
//! The loader's constructors, which pick the backend from a [`Device`], are in `select.rs`; the
//! CUDA-only accessors (device views, consumer stream) are in `cuda.rs`.

use crate::backend::{Backend, Normalize, Payload};
use crate::device::{Device, Target};
use crate::error::GpuError;
use crate::ring::{RingStats, StagingRing};
use shardtool_reader::{Batch, Layout, Loader, LoaderBuilder, Metrics};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// The target's buffers; dropping it returns them for reuse.
    pub(crate) payload: Box<dyn Payload>,
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
        self.payload.on_gpu()
    }

    /// The uint8 bytes when the batch is in host memory (CPU twin).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        self.payload.host_bytes(self.len)
    }

    /// The normalised floats when the batch is in host memory and normalisation was asked for.
    pub fn host_floats(&self) -> Option<&[f32]> {
        self.payload.host_floats(self.len)
    }

    /// Copies the uint8 bytes back to a host vector (for tests and checks; synchronous).
    pub fn to_host_bytes(&self) -> Result<Vec<u8>, GpuError> {
        self.payload.to_host_bytes(self.len)
    }

    /// Copies the normalised floats back to the host; `None` without normalisation.
    pub fn to_host_floats(&self) -> Result<Option<Vec<f32>>, GpuError> {
        self.payload.to_host_floats(self.len)
    }

    /// Blocks the host until the batch's bytes are on the target (a no-op on the CPU). Work on
    /// the consumer stream is already ordered after the copy; this is for host-side timing.
    pub fn wait_ready(&self) -> Result<(), GpuError> {
        self.payload.wait_ready()
    }
}

/// A device batch's metadata, taken from the reader's batch before that goes back to the ring.
struct Meta {
    epoch: u64,
    index: u64,
    keys: Vec<String>,
    labels: Vec<i64>,
    layout: Layout,
    len: usize,
}

impl Meta {
    fn of(batch: &Batch) -> Self {
        Self {
            epoch: batch.epoch,
            index: batch.index,
            keys: batch.keys.clone(),
            labels: batch.labels.clone(),
            layout: batch.layout.clone(),
            len: batch.data().len(),
        }
    }

    fn with(self, payload: Box<dyn Payload>) -> DeviceBatch {
        DeviceBatch {
            epoch: self.epoch,
            index: self.index,
            keys: self.keys,
            labels: self.labels,
            layout: self.layout,
            len: self.len,
            payload,
        }
    }
}

/// The copy pipeline over one backend: issues copies, keeps the reader batches they read until
/// their host-free fence completes, and hands copied batches out in order.
pub(crate) struct Pipeline<B: Backend> {
    pub(crate) backend: B,
    ring: Arc<StagingRing>,
    /// Batches copied or being copied, not handed out yet.
    pending: VecDeque<(Meta, B::Payload)>,
    /// Reader batches whose copy may still be reading them, with their host-free fence.
    hosts: VecDeque<(Batch, B::HostFree)>,
    /// Reader batches held at most before blocking on the oldest fence; bounds the ring.
    max_hosts: usize,
}

impl<B: Backend> Pipeline<B> {
    /// A pipeline with a staging ring of `ring` buffers from the backend's storage.
    pub(crate) fn new(backend: B, ring: usize, in_flight: usize) -> Self {
        let ring = Arc::new(match backend.pinned_allocator() {
            Some(alloc) => StagingRing::pinned(alloc, ring),
            None => StagingRing::host(ring),
        });
        Self {
            backend,
            ring,
            pending: VecDeque::new(),
            hosts: VecDeque::new(),
            max_hosts: in_flight + 1,
        }
    }

    /// Gives reader batches whose copy has finished back to the ring; blocks on the oldest when
    /// more than `max_hosts` are outstanding.
    fn reap(&mut self) -> Result<(), GpuError> {
        while let Some((batch, fence)) = self.hosts.front() {
            let block = self.hosts.len() > self.max_hosts;
            if !self.backend.host_free(fence, block)? {
                break;
            }
            self.ring.copy_finished(batch.data());
            self.hosts.pop_front();
        }
        Ok(())
    }
}

impl<B: Backend> Drop for Pipeline<B> {
    fn drop(&mut self) {
        // No copy may still read a ring buffer once its batch goes back (or is freed).
        let _ = self.backend.synchronize();
        for (batch, _) in self.hosts.drain(..) {
            self.ring.copy_finished(batch.data());
        }
    }
}

/// A [`Pipeline`] with its backend type erased, as the loader holds it. Backend-specific
/// accessors upcast it to `dyn Any` and downcast to their concrete pipeline.
pub(crate) trait Engine: Any + Send {
    /// Batches issued and not handed out.
    fn pending(&self) -> usize;
    /// Issues the copy of `batch`; the batch is kept until the copy has read it.
    fn submit(&mut self, batch: Batch, normalize: Option<&Normalize>) -> Result<(), GpuError>;
    /// The oldest copied batch, handed to the consumer.
    fn pop(&mut self) -> Option<Result<DeviceBatch, GpuError>>;
    /// The staging ring (shared with the reader).
    fn ring(&self) -> &Arc<StagingRing>;
    /// Target buffers allocated so far.
    fn target_allocations(&self) -> u64;
}

impl<B: Backend> Engine for Pipeline<B> {
    fn pending(&self) -> usize {
        self.pending.len()
    }

    fn submit(&mut self, batch: Batch, normalize: Option<&Normalize>) -> Result<(), GpuError> {
        self.ring.copy_started(batch.data());
        let (payload, fence) = match self.backend.copy(batch.data(), normalize) {
            Ok(issued) => issued,
            Err(e) => {
                // Make sure nothing issued still reads the buffer before it goes back.
                let _ = self.backend.synchronize();
                self.ring.copy_finished(batch.data());
                return Err(e);
            }
        };
        self.pending.push_back((Meta::of(&batch), payload));
        // The reader's batch (and so its ring buffer) is kept until the copy has read it.
        self.hosts.push_back((batch, fence));
        self.reap()
    }

    fn pop(&mut self) -> Option<Result<DeviceBatch, GpuError>> {
        if let Err(e) = self.reap() {
            return Some(Err(e));
        }
        let (meta, mut payload) = self.pending.pop_front()?;
        if let Err(e) = self.backend.hand_out(&mut payload) {
            return Some(Err(e));
        }
        Some(Ok(meta.with(Box::new(payload))))
    }

    fn ring(&self) -> &Arc<StagingRing> {
        &self.ring
    }

    fn target_allocations(&self) -> u64 {
        self.backend.target_allocations()
    }
}

/// Makes the reader for one epoch.
pub(crate) type MakeLoader = Box<dyn FnMut(u64) -> LoaderBuilder + Send>;

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
    /// The copy pipeline; `pub(crate)` for the backend-specific accessors.
    pub(crate) engine: Box<dyn Engine>,
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
    /// A loader around `engine` with no reader yet; `select.rs` picks the engine and starts the
    /// readers.
    pub(crate) fn with_engine(
        target: Target,
        engine: Box<dyn Engine>,
        opts: &DeviceOptions,
    ) -> Self {
        let ring = engine.ring().clone();
        Self {
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
            in_flight: opts.in_flight.max(1),
            deferred: None,
            exhausted: false,
            batches: 0,
            bytes: 0,
            waits: Vec::new(),
        }
    }

    /// Starts the one epoch's reader.
    pub(crate) fn start_one(&mut self, builder: LoaderBuilder) -> Result<(), GpuError> {
        self.source.current = Some(self.source.build(builder)?);
        Ok(())
    }

    /// Starts the first epoch's reader and the next one's behind it.
    pub(crate) fn start_epochs(
        &mut self,
        make: MakeLoader,
        epochs: std::ops::Range<u64>,
    ) -> Result<(), GpuError> {
        let source = &mut self.source;
        source.make = Some(make);
        source.next_epoch = epochs.start;
        source.end_epoch = epochs.end;
        source.start_next()?;
        source.current = source.next.take();
        source.start_next()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuBackend;
    use crate::ring::PinnedAllocator;
    use shardtool_core::Checksum;
    use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
    use shardtool_packed::{Mode, PackedWriter};
    use std::collections::HashSet;
    use std::path::Path;
    use std::sync::Mutex;

    /// One packed shard of `n` 4x4 samples.
    fn dataset(dir: &Path, n: u32) {
        let mut w = PackedWriter::new(Mode::Fixed);
        for i in 0..n {
            let px: Vec<u8> = (0..48).map(|j| (i * 7 + j) as u8).collect();
            w.add(&format!("s{i}"), 0, 4, 4, &px, serde_json::json!({}))
                .unwrap();
        }
        let mut bytes = Vec::new();
        w.finish(&mut bytes).unwrap();
        let file = "shard-000000.safetensors".to_string();
        std::fs::write(dir.join(&file), &bytes).unwrap();
        let entry = ShardEntry {
            file,
            format: ShardFormat::Packed,
            compression: None,
            samples: u64::from(n),
            bytes: bytes.len() as u64,
            checksum: Checksum::of(&bytes).to_string(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        };
        let m = Manifest::new("test", vec!["0".into()], vec![], vec![entry]);
        std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
    }

    /// The CPU twin, except that a copy's host-free fence completes only when the pipeline
    /// blocks on it, as a slow device copy would. Records the source addresses still being
    /// "copied" and fails if a new copy reads one of them: a ring buffer handed back early.
    struct SlowFences {
        inner: CpuBackend,
        busy: Arc<Mutex<HashSet<usize>>>,
        reused_early: Arc<Mutex<u32>>,
    }

    impl Backend for SlowFences {
        type Payload = <CpuBackend as Backend>::Payload;
        type HostFree = usize;

        fn pinned_allocator(&self) -> Option<Box<dyn PinnedAllocator>> {
            None
        }

        fn copy(
            &mut self,
            data: &[u8],
            normalize: Option<&Normalize>,
        ) -> Result<(Self::Payload, usize), GpuError> {
            let addr = data.as_ptr() as usize;
            if !self.busy.lock().unwrap().insert(addr) {
                *self.reused_early.lock().unwrap() += 1;
            }
            let (payload, ()) = self.inner.copy(data, normalize)?;
            Ok((payload, addr))
        }

        fn host_free(&self, fence: &usize, block: bool) -> Result<bool, GpuError> {
            if block {
                self.busy.lock().unwrap().remove(fence);
            }
            Ok(block)
        }

        fn hand_out(&self, _payload: &mut Self::Payload) -> Result<(), GpuError> {
            Ok(())
        }

        fn synchronize(&self) -> Result<(), GpuError> {
            self.busy.lock().unwrap().clear();
            Ok(())
        }

        fn target_allocations(&self) -> u64 {
            self.inner.target_allocations()
        }
    }

    #[test]
    fn reader_batches_are_held_until_their_copy_is_done() {
        let dir = tempfile::tempdir().unwrap();
        dataset(dir.path(), 64);
        let busy = Arc::new(Mutex::new(HashSet::new()));
        let reused_early = Arc::new(Mutex::new(0));
        let backend = SlowFences {
            inner: CpuBackend::default(),
            busy: busy.clone(),
            reused_early: reused_early.clone(),
        };
        let opts = DeviceOptions {
            in_flight: 2,
            ..Default::default()
        };
        let engine = Box::new(Pipeline::new(backend, 4, opts.in_flight));
        let mut loader = DeviceLoader::with_engine(Target::Cpu { fallback: None }, engine, &opts);
        loader
            .start_one(
                Loader::builder(dir.path())
                    .batch_size(4)
                    .workers(2)
                    .prefetch(1),
            )
            .unwrap();
        let mut n = 0;
        for b in &mut loader {
            assert_eq!(b.unwrap().num_bytes(), 4 * 48);
            n += 1;
        }
        assert_eq!(n, 16);
        assert_eq!(
            *reused_early.lock().unwrap(),
            0,
            "a buffer was reused mid-copy"
        );
        assert_eq!(loader.stats().ring.busy_skipped, 0);
    }
}
