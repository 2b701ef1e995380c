//! The staging ring: K reused host buffers handed to the reader through its `BatchAllocator`, so
//! each batch is assembled once, straight into memory the copy engine reads. Pinned (page-locked)
//! on the CUDA path, plain page-aligned heap memory in the CPU twin; the bookkeeping is shared.
//! Pinned memory comes through the small [`PinnedAllocator`] trait, so this module knows no
//! backend and imports nothing from the crate.
//!
//! The ring never blocks: an in-order reader whose workers all wait for a buffer while the
//! consumer waits for the one batch they have not built would deadlock. When more than K buffers
//! are live it allocates anyway and counts an overflow; size K from the loader (see
//! [`StagingRing::capacity_for`]) and the count stays at zero.

use shardtool_reader::{AllocError, BatchAllocator, HostBuffer};
use std::any::Any;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Page alignment of ring buffers, like the reader's CPU buffers (aligned destinations keep
/// record copies at memcpy speed).
const ALIGN: usize = 4096;

/// Counters of a [`StagingRing`], for tests and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Buffers the ring aims to keep (K).
    pub capacity: usize,
    /// Buffers allocated (new or regrown) over the ring's life.
    pub allocations: u64,
    /// Requests served from a free buffer without allocating.
    pub reuses: u64,
    /// Requests served while K buffers were already live (the ring was too small).
    pub overflows: u64,
    /// Pinned allocations that failed and fell back to pageable memory.
    pub pageable_fallbacks: u64,
    /// Free buffers found still marked as being copied (skipped, never handed out). Always 0
    /// unless the copy pipeline releases a batch before its copy finished.
    pub busy_skipped: u64,
    /// Buffers live now (handed out and not yet returned).
    pub live: u64,
}

/// Page-locked host memory made by a backend (the CUDA driver's `cuMemHostAlloc`). The ring only
/// needs its bytes; the backend owns how it is allocated and freed.
pub(crate) trait PinnedBuffer: Send {
    /// Usable bytes.
    fn capacity(&self) -> usize;
    /// All `capacity` bytes.
    fn as_slice(&self) -> &[u8];
    /// All `capacity` bytes, writable.
    fn as_mut_slice(&mut self) -> &mut [u8];
}

/// Makes [`PinnedBuffer`]s; `None` when page-locked memory is exhausted (the ring then falls back
/// to pageable memory and counts it).
pub(crate) trait PinnedAllocator: Send + Sync {
    /// A page-locked buffer of at least `capacity` bytes.
    fn alloc(&self, capacity: usize) -> Option<Box<dyn PinnedBuffer>>;
}

/// Where a ring buffer's bytes live.
enum Storage {
    /// Page-aligned heap memory (the CPU twin, or the fallback when pinning fails).
    Host { storage: Vec<u8>, offset: usize },
    /// Page-locked memory from a backend.
    Pinned(Box<dyn PinnedBuffer>),
}

impl Storage {
    fn host(capacity: usize) -> Result<Self, AllocError> {
        // Over-allocate by one alignment unit and start at the first aligned byte: no unsafe.
        let refused = AllocError { bytes: capacity };
        let total = capacity.checked_add(ALIGN).ok_or(refused)?;
        let mut storage = Vec::new();
        storage.try_reserve_exact(total).map_err(|_| refused)?;
        storage.resize(total, 0);
        let offset = storage.as_ptr().align_offset(ALIGN).min(ALIGN);
        Ok(Storage::Host { storage, offset })
    }

    fn capacity(&self) -> usize {
        match self {
            Storage::Host { storage, .. } => storage.len() - ALIGN,
            Storage::Pinned(p) => p.capacity(),
        }
    }

    fn bytes(&self, len: usize) -> &[u8] {
        match self {
            Storage::Host { storage, offset } => &storage[*offset..*offset + len],
            Storage::Pinned(p) => &p.as_slice()[..len],
        }
    }

    fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        match self {
            Storage::Host { storage, offset } => &mut storage[*offset..*offset + len],
            Storage::Pinned(p) => &mut p.as_mut_slice()[..len],
        }
    }

    fn addr(&self) -> usize {
        self.bytes(0).as_ptr() as usize
    }

    fn is_pinned(&self) -> bool {
        matches!(self, Storage::Pinned(_))
    }
}

/// One buffer of the ring, lent to a batch.
pub struct RingBuffer {
    storage: Storage,
    len: usize,
}

impl RingBuffer {
    /// Whether the bytes are page-locked (an asynchronous copy source).
    pub fn is_pinned(&self) -> bool {
        self.storage.is_pinned()
    }
}

impl HostBuffer for RingBuffer {
    fn bytes(&self) -> &[u8] {
        self.storage.bytes(self.len)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.storage.bytes_mut(self.len)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// How new buffers are made.
enum Backing {
    Host,
    Pinned(Box<dyn PinnedAllocator>),
}

/// K reused staging buffers behind the reader's [`BatchAllocator`].
pub struct StagingRing {
    backing: Backing,
    capacity: usize,
    free: Mutex<Vec<Storage>>,
    /// Start addresses of buffers whose device copy has been issued and not yet finished.
    copying: Mutex<HashSet<usize>>,
    allocations: AtomicU64,
    reuses: AtomicU64,
    overflows: AtomicU64,
    pageable_fallbacks: AtomicU64,
    busy_skipped: AtomicU64,
    live: AtomicU64,
}

impl StagingRing {
    /// A ring of plain page-aligned heap buffers (the CPU twin of the pinned ring).
    pub fn host(capacity: usize) -> Self {
        Self::with_backing(Backing::Host, capacity)
    }

    /// A ring of page-locked buffers from `alloc` (pageable when pinning fails).
    pub(crate) fn pinned(alloc: Box<dyn PinnedAllocator>, capacity: usize) -> Self {
        Self::with_backing(Backing::Pinned(alloc), capacity)
    }

    fn with_backing(backing: Backing, capacity: usize) -> Self {
        Self {
            backing,
            capacity: capacity.max(1),
            free: Mutex::new(Vec::new()),
            copying: Mutex::new(HashSet::new()),
            allocations: AtomicU64::new(0),
            reuses: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            pageable_fallbacks: AtomicU64::new(0),
            busy_skipped: AtomicU64::new(0),
            live: AtomicU64::new(0),
        }
    }

    /// The K that never overflows: every worker may hold `prefetch` queued batches plus the one
    /// it is building, the copy pipeline holds `in_flight` more, and one is being handed over.
    pub fn capacity_for(workers: usize, prefetch: usize, in_flight: usize) -> usize {
        workers.max(1) * (prefetch.max(1) + 1) + in_flight + 1
    }

    /// The counters so far.
    pub fn stats(&self) -> RingStats {
        RingStats {
            capacity: self.capacity,
            allocations: self.allocations.load(Ordering::Relaxed),
            reuses: self.reuses.load(Ordering::Relaxed),
            overflows: self.overflows.load(Ordering::Relaxed),
            pageable_fallbacks: self.pageable_fallbacks.load(Ordering::Relaxed),
            busy_skipped: self.busy_skipped.load(Ordering::Relaxed),
            live: self.live.load(Ordering::Relaxed),
        }
    }

    /// Whether buffers of this ring are pinned when pinning succeeds.
    pub fn is_pinned(&self) -> bool {
        !matches!(self.backing, Backing::Host)
    }

    /// Marks the buffer holding `bytes` as the source of an issued device copy.
    pub(crate) fn copy_started(&self, bytes: &[u8]) {
        if let Ok(mut c) = self.copying.lock() {
            c.insert(bytes.as_ptr() as usize);
        }
    }

    /// The copy from the buffer holding `bytes` has finished; it may be reused.
    pub(crate) fn copy_finished(&self, bytes: &[u8]) {
        if let Ok(mut c) = self.copying.lock() {
            c.remove(&(bytes.as_ptr() as usize));
        }
    }

    fn new_storage(&self, capacity: usize) -> Result<Storage, AllocError> {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        match &self.backing {
            Backing::Host => Storage::host(capacity),
            Backing::Pinned(alloc) => match alloc.alloc(capacity) {
                Some(p) => Ok(Storage::Pinned(p)),
                None => {
                    // Out of page-locked memory: a pageable buffer still works (the driver
                    // stages it synchronously), so the run continues and the report counts it.
                    self.pageable_fallbacks.fetch_add(1, Ordering::Relaxed);
                    Storage::host(capacity)
                }
            },
        }
    }

    /// A free buffer not marked as being copied, preferring one that is large enough.
    fn take_free(&self, len: usize) -> Option<Storage> {
        let mut free = self.free.lock().ok()?;
        let copying = self.copying.lock().ok()?;
        let usable = |s: &Storage| !copying.contains(&s.addr());
        let busy = free.iter().filter(|s| !usable(s)).count() as u64;
        if busy > 0 {
            self.busy_skipped.fetch_add(busy, Ordering::Relaxed);
        }
        let pick = free
            .iter()
            .position(|s| usable(s) && s.capacity() >= len)
            .or_else(|| free.iter().position(usable))?;
        Some(free.swap_remove(pick))
    }
}

impl BatchAllocator for StagingRing {
    fn allocate(&self, len: usize) -> Result<Box<dyn HostBuffer>, AllocError> {
        let live = self.live.fetch_add(1, Ordering::Relaxed) + 1;
        let storage = match self.take_free(len) {
            Some(s) if s.capacity() >= len => {
                self.reuses.fetch_add(1, Ordering::Relaxed);
                Ok(s)
            }
            // Too small: replace it (batches of variable-shape records differ in size). Grow
            // with headroom so a slowly rising size does not reallocate every time.
            Some(small) => {
                let cap = len.max(small.capacity() + small.capacity() / 4);
                drop(small);
                self.new_storage(cap).or_else(|_| self.new_storage(len))
            }
            None => {
                if live > self.capacity as u64 {
                    self.overflows.fetch_add(1, Ordering::Relaxed);
                }
                self.new_storage(len)
            }
        };
        match storage {
            Ok(storage) => Ok(Box::new(RingBuffer { storage, len })),
            Err(e) => {
                self.live.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    fn release(&self, buffer: Box<dyn HostBuffer>) {
        let Ok(b) = buffer.into_any().downcast::<RingBuffer>() else {
            return; // not ours: dropped
        };
        self.live.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut free) = self.free.lock() {
            if free.len() < self.capacity {
                free.push(b.storage);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_reused_and_bounded() {
        let r = StagingRing::host(2);
        let mut a = r.allocate(10_000).unwrap();
        assert_eq!(a.bytes().len(), 10_000);
        assert_eq!(a.bytes().as_ptr() as usize % ALIGN, 0);
        a.bytes_mut()[9_999] = 7;
        let b = r.allocate(100).unwrap();
        let c = r.allocate(100).unwrap(); // third live buffer in a ring of 2
        assert_eq!(r.stats().overflows, 1);
        let a_addr = a.bytes().as_ptr() as usize;
        r.release(a);
        r.release(b);
        r.release(c); // beyond K: freed, not pooled
        assert_eq!(r.free.lock().unwrap().len(), 2);
        let d = r.allocate(8_000).unwrap();
        assert_eq!(
            d.bytes().as_ptr() as usize,
            a_addr,
            "the large free buffer is preferred"
        );
        let s = r.stats();
        assert_eq!((s.allocations, s.reuses, s.live), (3, 1, 1));
    }

    #[test]
    fn a_buffer_being_copied_is_never_handed_out() {
        let r = StagingRing::host(4);
        let a = r.allocate(64).unwrap();
        r.copy_started(a.bytes());
        let addr = a.bytes().as_ptr() as usize;
        r.release(a); // a buggy early release
        let b = r.allocate(64).unwrap();
        assert_ne!(b.bytes().as_ptr() as usize, addr);
        assert_eq!(r.stats().busy_skipped, 1);
        r.copy_finished(&[]); // unrelated address: no effect
        r.release(b);
    }

    #[test]
    fn small_buffers_are_regrown() {
        let r = StagingRing::host(1);
        let a = r.allocate(10).unwrap();
        r.release(a);
        let b = r.allocate(20_000).unwrap();
        assert_eq!(b.bytes().len(), 20_000);
        assert_eq!(r.stats().allocations, 2);
    }

    /// Stands in for page-locked memory: heap bytes, and "out of pinned memory" after `limit`
    /// buffers.
    struct FakePinned {
        limit: usize,
        made: std::sync::atomic::AtomicUsize,
    }

    struct FakeBuffer(Vec<u8>);

    impl PinnedBuffer for FakeBuffer {
        fn capacity(&self) -> usize {
            self.0.len()
        }
        fn as_slice(&self) -> &[u8] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    impl PinnedAllocator for FakePinned {
        fn alloc(&self, capacity: usize) -> Option<Box<dyn PinnedBuffer>> {
            (self.made.fetch_add(1, Ordering::Relaxed) < self.limit)
                .then(|| Box::new(FakeBuffer(vec![0; capacity])) as Box<dyn PinnedBuffer>)
        }
    }

    #[test]
    fn pinned_buffers_fall_back_to_pageable_and_are_counted() {
        let alloc = FakePinned {
            limit: 1,
            made: Default::default(),
        };
        let r = StagingRing::pinned(Box::new(alloc), 4);
        assert!(r.is_pinned());
        let a = r.allocate(100).unwrap();
        let b = r.allocate(100).unwrap();
        let pinned = |buf: Box<dyn HostBuffer>| buf.into_any().downcast::<RingBuffer>().unwrap();
        let (a, b) = (pinned(a), pinned(b));
        assert!(a.is_pinned());
        assert!(
            !b.is_pinned(),
            "the second allocation is past the pinned limit"
        );
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        let s = r.stats();
        assert_eq!((s.allocations, s.pageable_fallbacks, s.live), (2, 1, 2));
        r.release(a);
        r.release(b);
    }
}
