//! Batches and where their bytes live: the allocator trait lets the GPU path hand in pinned host
//! buffers so a batch is written once, straight into memory the device can copy from.

use std::any::Any;
use std::sync::{Arc, Mutex};

/// A host buffer a batch is assembled into.
pub trait HostBuffer: Send {
    /// The usable bytes.
    fn bytes(&self) -> &[u8];
    /// The usable bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The buffer as `Any`, so its allocator can take its own type back.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl HostBuffer for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// A batch buffer the allocator could not have: the memory was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no memory for a batch buffer of {bytes} bytes")]
pub struct AllocError {
    /// The usable bytes asked for.
    pub bytes: usize,
}

/// Hands out batch buffers and takes them back when a batch is dropped, so steady-state reading
/// allocates nothing.
pub trait BatchAllocator: Send + Sync {
    /// A buffer of exactly `len` usable bytes (contents unspecified), or an error where the
    /// memory is refused (an address-space limit such as `ulimit -v`), never an abort.
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, AllocError>;
    /// Takes back a buffer for reuse.
    fn release(&self, buffer: Box<dyn HostBuffer>);
}

/// Alignment of CPU batch buffers. Page alignment matches the page-aligned records of packed
/// shards; a destination a few bytes past a page boundary ran shuffled record copies at 28% of
/// memcpy speed in `formats/packed/benches/batch_read.rs` (against ~100% when aligned).
pub const CPU_BUFFER_ALIGN: usize = 4096;

/// A reused heap buffer whose usable bytes start on a [`CPU_BUFFER_ALIGN`] boundary.
pub struct AlignedBuffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuffer {
    fn with_len(mut storage: Vec<u8>, len: usize) -> Result<Self, AllocError> {
        // Over-allocate by one alignment unit and start at the first aligned byte: no unsafe.
        let refused = AllocError { bytes: len };
        let total = len.checked_add(CPU_BUFFER_ALIGN).ok_or(refused)?;
        if total > storage.capacity() {
            // Its bytes need not survive the move: nothing is copied.
            storage.clear();
            storage.try_reserve_exact(total).map_err(|_| refused)?;
        }
        storage.resize(total, 0);
        let offset = storage
            .as_ptr()
            .align_offset(CPU_BUFFER_ALIGN)
            .min(CPU_BUFFER_ALIGN);
        Ok(Self {
            storage,
            offset,
            len,
        })
    }
}

impl HostBuffer for AlignedBuffer {
    fn bytes(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Reused page-aligned heap buffers: the CPU twin of the pinned GPU ring.
pub struct CpuAllocator {
    pool: Mutex<Vec<Vec<u8>>>,
    max_pooled: usize,
    /// Set by [`CpuAllocator::retire`]: buffers coming back are freed, not kept.
    retired: std::sync::atomic::AtomicBool,
}

impl CpuAllocator {
    /// A pool keeping at most `max_pooled` idle buffers.
    pub fn new(max_pooled: usize) -> Self {
        Self {
            pool: Mutex::new(Vec::new()),
            max_pooled,
            retired: Default::default(),
        }
    }

    /// Frees the idle buffers, and every buffer released from now on: for an allocator no
    /// reader will use again, whose batches may still come back from their holders.
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut p) = self.pool.lock() {
            p.clear();
        }
    }

    /// Idle buffers in the pool now.
    pub fn idle(&self) -> usize {
        self.pool.lock().map_or(0, |p| p.len())
    }
}

impl Default for CpuAllocator {
    fn default() -> Self {
        Self::new(16)
    }
}

impl BatchAllocator for CpuAllocator {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, AllocError> {
        let reused = self.pool.lock().ok().and_then(|mut p| p.pop());
        // Capacity is kept across batches; only growth allocates.
        Ok(Box::new(AlignedBuffer::with_len(
            reused.unwrap_or_default(),
            len,
        )?))
    }

    fn release(&self, buffer: Box<dyn HostBuffer>) {
        if let Ok(b) = buffer.into_any().downcast::<AlignedBuffer>() {
            if let Ok(mut p) = self.pool.lock() {
                let retired = self.retired.load(std::sync::atomic::Ordering::Relaxed);
                if p.len() < self.max_pooled && !retired {
                    p.push(b.storage);
                }
            }
        }
    }
}

/// The memory this process may use in bytes, if it can be read: the machine's (Linux's
/// `MemTotal`), or its control group's limit where lower (a container's).
pub(crate) fn usable_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let total = line
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)?;
    // cgroup v2 (`max` when unlimited), then v1 (a huge number when unlimited).
    let limit = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    Some(limit.map_or(total, |l| l.min(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_columns_keep_absent_and_empty_values_apart() {
        let mut c = FieldColumn::new("txt".into());
        for v in [Some(&b"a bus"[..]), None, Some(b""), Some(b"\xff")] {
            c.push(v);
        }
        assert_eq!((c.name(), c.len()), ("txt", 4));
        let got: Vec<Option<&[u8]>> = c.iter().collect();
        assert_eq!(got, [Some(&b"a bus"[..]), None, Some(b""), Some(b"\xff")]);
        assert_eq!(c.get(4), None);
    }

    #[test]
    fn cpu_buffers_are_aligned_sized_and_reused() {
        let a = CpuAllocator::new(4);
        let mut b = a.allocate(10_000).unwrap();
        assert_eq!(b.bytes().len(), 10_000);
        assert_eq!(b.bytes().as_ptr() as usize % CPU_BUFFER_ALIGN, 0);
        b.bytes_mut()[9_999] = 7;
        a.release(b);
        assert_eq!(a.idle(), 1);
        let b = a.allocate(5_000).unwrap();
        assert_eq!(b.bytes().len(), 5_000);
        assert_eq!(b.bytes().as_ptr() as usize % CPU_BUFFER_ALIGN, 0);
        assert!(a.pool.lock().unwrap().is_empty());
    }

    #[test]
    fn a_buffer_larger_than_memory_is_an_error_not_an_abort() {
        let a = CpuAllocator::new(4);
        for len in [usize::MAX, usize::MAX / 2, 1 << 62] {
            assert_eq!(a.allocate(len).err(), Some(AllocError { bytes: len }));
        }
        assert_eq!(a.allocate(64).unwrap().bytes().len(), 64);
    }
}

/// How the bytes of a batch are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `[B, H, W, 3]` u8, contiguous.
    Fixed {
        /// Height.
        height: u32,
        /// Width.
        width: u32,
    },
    /// Records of different shapes, each starting at `offsets[i]` (64-byte aligned), `[h, w, 3]`.
    Variable {
        /// Start of each record, plus the end.
        offsets: Vec<u64>,
        /// Shape of each record.
        shapes: Vec<[u32; 3]>,
    },
    /// Encoded images (JPEG/PNG bytes, not decoded), each at `offsets[i]..offsets[i + 1]`.
    Encoded {
        /// Start of each record, plus the end.
        offsets: Vec<u64>,
    },
}

/// One carried field over the samples of a batch: for each sample, in sample order, the field's
/// bytes as stored (copied out of the shard), or `None` where the sample does not carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldColumn {
    name: String,
    /// Every present value, back to back.
    data: Vec<u8>,
    /// Per sample, where its value lies in `data`.
    spans: Vec<Option<(usize, usize)>>,
}

impl FieldColumn {
    pub(crate) fn new(name: String) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }

    pub(crate) fn push(&mut self, value: Option<&[u8]>) {
        self.spans.push(value.map(|v| {
            let start = self.data.len();
            self.data.extend_from_slice(v);
            (start, self.data.len())
        }));
    }

    /// The field's name (`txt`, `json` …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of samples (the batch's length).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The value of sample `i`; `None` when it lacks the field (or `i` is out of range).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let (a, b) = (*self.spans.get(i)?)?;
        self.data.get(a..b)
    }

    /// The values in sample order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Option<&[u8]>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// One batch.
pub struct Batch {
    /// Epoch it belongs to.
    pub epoch: u64,
    /// Its index among this rank's batches of the epoch.
    pub index: u64,
    /// Sample keys.
    pub keys: Vec<String>,
    /// Labels.
    pub labels: Vec<i64>,
    /// Byte layout.
    pub layout: Layout,
    /// Per sample, the region of the source image its pixels came from, when the transform
    /// crops; empty otherwise.
    pub crops: Vec<crate::Crop>,
    /// The carried fields asked for with `LoaderBuilder::fields`, in the order asked, one value
    /// per sample each; empty when none was asked for.
    pub fields: Vec<FieldColumn>,
    /// Places in the batch's planned order of the records skipped as corrupt, ascending: a
    /// state within the batch counts them ([`crate::Loader::state_within`]). Boxed: rare, and
    /// batches travel by value.
    skipped: Option<Box<[u32]>>,
    data: Option<Box<dyn HostBuffer>>,
    allocator: Arc<dyn BatchAllocator>,
}

impl Batch {
    pub(crate) fn new(
        epoch: u64,
        index: u64,
        keys: Vec<String>,
        labels: Vec<i64>,
        layout: Layout,
        data: Box<dyn HostBuffer>,
        allocator: Arc<dyn BatchAllocator>,
    ) -> Self {
        Self {
            epoch,
            index,
            keys,
            labels,
            layout,
            crops: Vec::new(),
            fields: Vec::new(),
            skipped: None,
            data: Some(data),
            allocator,
        }
    }

    pub(crate) fn with_crops(mut self, crops: Vec<crate::Crop>) -> Self {
        self.crops = crops;
        self
    }

    pub(crate) fn with_fields(mut self, fields: Vec<FieldColumn>) -> Self {
        self.fields = fields;
        self
    }

    pub(crate) fn with_skipped(mut self, skipped: Vec<u32>) -> Self {
        self.skipped = (!skipped.is_empty()).then(|| skipped.into_boxed_slice());
        self
    }

    /// The place in the batch's planned order of its `n`-th sample (skipped records before it
    /// counted); the planned length past the last one.
    pub(crate) fn planned_position(&self, n: usize) -> usize {
        let mut p = n;
        for &s in self.skipped.iter().flat_map(|s| s.iter()) {
            if s as usize <= p {
                p += 1;
            }
        }
        p
    }

    /// The values of carried field `name`, if it was asked for.
    pub fn field(&self, name: &str) -> Option<&FieldColumn> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The batch bytes.
    pub fn data(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.bytes())
    }

    /// The bytes of sample `i`.
    pub fn sample(&self, i: usize) -> &[u8] {
        let d = self.data();
        match &self.layout {
            Layout::Fixed { height, width } => {
                let n = *height as usize * *width as usize * 3;
                &d[i * n..(i + 1) * n]
            }
            Layout::Variable { offsets, shapes } => {
                let s = shapes[i];
                let start = offsets[i] as usize;
                &d[start..start + s[0] as usize * s[1] as usize * 3]
            }
            Layout::Encoded { offsets } => &d[offsets[i] as usize..offsets[i + 1] as usize],
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(d) = self.data.take() {
            self.allocator.release(d);
        }
    }
}
