//! The reader as a Python object: builds a `shardtool_reader::Loader` in the process that
//! iterates, waits for batches with the GIL released (checking for Ctrl-C between waits), and
//! hands each batch over as DLPack views of its buffer.

use crate::dlpack::{DType, Keep, Tensor};
use crate::errors::read_error;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use shardtool_reader::plan::{rank_share, whole_batches};
use shardtool_reader::{
    dataset_fingerprint, Batch, BatchAllocator, CacheOptions, CorruptPolicy, CpuAllocator, Dataset,
    Layout, Loader, LoaderState, Location, Next, Remainder, Transform,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

/// How long one wait for a batch lasts before signals are checked: Ctrl-C is seen within this.
const WAIT_SLICE: Duration = Duration::from_millis(50);

fn remainder(s: &str) -> PyResult<Remainder> {
    match s {
        "drop" => Ok(Remainder::Drop),
        "pad" => Ok(Remainder::Pad),
        _ => Err(PyValueError::new_err(format!(
            "remainder must be \"drop\" or \"pad\", not {s:?}"
        ))),
    }
}

/// The cache options of a `cache_dir` and `cache_limit` argument (defaults for `None`).
pub(crate) fn cache_options(dir: Option<PathBuf>, limit: Option<u64>) -> CacheOptions {
    let mut c = CacheOptions::default();
    if let Some(d) = dir {
        c.dir = d;
    }
    c.limit = limit;
    c
}

fn open(dataset: &str, cache: &CacheOptions) -> Result<Dataset, shardtool_reader::ReadError> {
    match Location::parse(dataset)? {
        Location::Local(path) => Dataset::open(&path),
        Location::Remote(url) => Dataset::open_remote(url, cache.clone()),
    }
}

/// `cache` with a `fetch_timeout` (seconds without a byte), `fetch_attempts` and
/// `fetch_concurrency` (shards fetched at once), where given.
pub(crate) fn fetching(
    mut cache: CacheOptions,
    fetch_timeout: Option<f64>,
    fetch_attempts: Option<u32>,
    fetch_concurrency: Option<usize>,
) -> PyResult<CacheOptions> {
    if let Some(s) = fetch_timeout {
        cache.policy.stall_timeout = Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PyValueError::new_err("fetch_timeout must be > 0 seconds"))?;
    }
    if let Some(n) = fetch_attempts {
        if n == 0 {
            return Err(PyValueError::new_err("fetch_attempts must be at least 1"));
        }
        cache.policy.attempts = n;
    }
    if let Some(n) = fetch_concurrency {
        if n == 0 {
            return Err(PyValueError::new_err(
                "fetch_concurrency must be at least 1",
            ));
        }
        cache.concurrency = n;
    }
    Ok(cache)
}

/// `(fingerprint, samples per rank, batches per rank)` of a dataset for `world_size` ranks,
/// without starting a reader (a remote dataset's manifest is fetched as the reader would).
#[pyfunction]
#[pyo3(signature = (dataset, *, batch_size, world_size, remainder="drop", drop_last=false, cache_dir=None, cache_limit=None, fetch_timeout=None, fetch_attempts=None))]
// One parameter per keyword argument of the Python signature.
#[allow(clippy::too_many_arguments)]
pub fn plan_info(
    py: Python<'_>,
    dataset: String,
    batch_size: usize,
    world_size: u32,
    remainder: &str,
    drop_last: bool,
    cache_dir: Option<PathBuf>,
    cache_limit: Option<u64>,
    fetch_timeout: Option<f64>,
    fetch_attempts: Option<u32>,
) -> PyResult<(String, u64, u64)> {
    let r = self::remainder(remainder)?;
    if batch_size == 0 || world_size == 0 {
        return Err(PyValueError::new_err(
            "batch_size and world_size must be positive",
        ));
    }
    let cache = fetching(
        cache_options(cache_dir, cache_limit),
        fetch_timeout,
        fetch_attempts,
        None,
    )?;
    // Fetching a remote manifest may take long: Ctrl-C is answered meanwhile.
    let d = crate::tools::interruptible(py, move || open(&dataset, &cache))?.map_err(read_error)?;
    let total: u64 = d.counts().iter().sum();
    let samples = rank_share(total, world_size, r).map_err(read_error)?;
    let batches = if drop_last {
        whole_batches(samples, batch_size as u64).map_err(read_error)?
    } else {
        samples.div_ceil(batch_size as u64)
    };
    Ok((dataset_fingerprint(&d), samples, batches))
}

/// Checks `fields` against a local dataset's manifest (the reader's own rule and message);
/// remote datasets are checked when their reader starts, not here (no fetch at construction).
#[pyfunction]
pub fn check_fields(py: Python<'_>, dataset: String, fields: Vec<String>) -> PyResult<()> {
    let Location::Local(path) =
        Location::parse(&dataset).map_err(|e| read_error(shardtool_reader::ReadError::from(e)))?
    else {
        return Ok(());
    };
    let d = py.detach(|| Dataset::open(&path)).map_err(read_error)?;
    shardtool_reader::check_fields(&d.manifest, &fields).map_err(read_error)
}

/// The batch a set of tensors views; freed (its buffer back to the pool) with the last view.
struct Held(Mutex<Batch>);

/// Batch buffers kept from one reader to the next, so every epoch after the first reuses the
/// previous epoch's buffers: no freeing (tens of megabytes unmapped at each epoch's first batch,
/// in the iterating thread) and no first-touch page faults in the reader threads.
#[pyclass(module = "shardtool._shardtool")]
pub struct BufferPool {
    allocator: Arc<CpuAllocator>,
    /// The process the pool belongs to: a forked child starts its own rather than touching a
    /// lock another thread of the parent may have held at the fork.
    pid: u32,
}

#[pymethods]
impl BufferPool {
    #[new]
    fn new() -> Self {
        Self {
            allocator: Arc::new(CpuAllocator::default()),
            pid: std::process::id(),
        }
    }

    /// Buffers waiting in the pool for the next batch.
    fn idle(&self) -> usize {
        self.allocator.idle()
    }

    /// Frees the idle buffers and every buffer its batches give back from now on (the pool of
    /// a closed loader).
    fn retire(&self) {
        self.allocator.retire();
    }
}

impl BufferPool {
    fn allocator(&mut self) -> Arc<dyn BatchAllocator> {
        if self.pid != std::process::id() {
            *self = Self::new();
        }
        self.allocator.clone()
    }
}

/// One epoch of one rank (or of one share of a rank's batches) as a Python iterator of raw
/// batches; `shardtool.Loader` wraps it.
#[pyclass(module = "shardtool._shardtool", name = "Reader")]
pub struct Reader {
    /// Held by `__next__` one wait slice at a time, so that `state` and `metrics` from another
    /// thread (a checkpointing one) wait at most a slice for it.
    loader: Mutex<Option<Loader>>,
    /// Set while a thread is in `__next__`: a second iterating thread is refused.
    iterating: AtomicBool,
    /// The thread in `__next__`, if any: a signal handler it runs that closes the reader need
    /// not wait for the stop it will record itself.
    iterating_thread: Mutex<Option<std::thread::ThreadId>>,
    /// The loader's state (JSON) after the batches handed out so far, written as each is: a
    /// checkpointing thread reads it without waiting for the iterating one.
    position: Mutex<String>,
    /// The loader's metrics, read without it (a monitoring thread need not wait for a batch).
    metrics: shardtool_reader::MetricsSource,
    /// Batches of this rank's epoch.
    batches: u64,
    /// Worker threads this pass started.
    workers: usize,
    /// Set by `close`: a thread waiting in `__next__` stops the reader at its next wait slice.
    closing: AtomicBool,
    /// The position and metrics (JSON) when a thread waiting in `__next__` stopped the reader
    /// for `close` from another thread: `close` could not read them while it was busy.
    stopped_at: Mutex<Option<(String, String)>>,
    /// The process that started the reader threads; a forked child has none of them.
    pid: u32,
}

impl Reader {
    /// The loader's lock, waited for with the GIL released (a thread in `__next__` holds it for
    /// one wait slice at most; blocking on it with the GIL held could wait for a thread that
    /// waits for the GIL).
    fn lock(&self, py: Python<'_>) -> PyResult<std::sync::MutexGuard<'_, Option<Loader>>> {
        loop {
            match self.loader.try_lock() {
                Ok(g) => return Ok(g),
                Err(TryLockError::WouldBlock) => {
                    py.detach(|| std::thread::sleep(Duration::from_micros(200)))
                }
                Err(TryLockError::Poisoned(_)) => {
                    return Err(PyRuntimeError::new_err("a previous call panicked"))
                }
            }
        }
    }

    fn check_process(&self) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(PyRuntimeError::new_err(format!(
                "this shardtool reader was started in process {} and cannot be used in process {} \
                 (a fork copies no threads): start iterating in the process that reads, e.g. \
                 create the iterator inside the DataLoader worker",
                self.pid,
                std::process::id()
            )));
        }
        Ok(())
    }
}

fn to_python(py: Python<'_>, mut batch: Batch) -> PyResult<Bound<'_, PyTuple>> {
    let epoch = batch.epoch;
    let index = batch.index;
    let keys = std::mem::take(&mut batch.keys);
    // Carried fields: `[(name, [bytes | None, ...]), ...]`, copied (they are small).
    let fields = PyList::empty(py);
    for column in std::mem::take(&mut batch.fields) {
        let values = PyList::empty(py);
        for v in column.iter() {
            match v {
                Some(b) => values.append(PyBytes::new(py, b))?,
                None => values.append(py.None())?,
            }
        }
        fields.append((column.name(), values))?;
    }
    let labels = Arc::new(std::mem::take(&mut batch.labels));
    // Each sample's crop box and flip, for the crop transforms: `[(x, y, w, h, flipped), ...]`.
    let crops = match batch.crops.is_empty() {
        true => None,
        false => Some(
            (std::mem::take(&mut batch.crops).iter())
                .map(|c| (c.x, c.y, c.w, c.h, c.flipped))
                .collect::<Vec<_>>(),
        ),
    };
    let layout = std::mem::replace(
        &mut batch.layout,
        Layout::Encoded {
            offsets: Vec::new(),
        },
    );
    let n = labels.len() as i64;
    let label_tensor = Tensor::new(labels.clone(), labels.as_ptr().cast(), vec![n], DType::I64);
    let keep: Arc<Held> = Arc::new(Held(Mutex::new(batch)));
    let (base, len) = {
        let b = keep
            .0
            .lock()
            .map_err(|_| PyRuntimeError::new_err("batch lock poisoned"))?;
        (b.data().as_ptr(), b.data().len())
    };
    let buffer = (base as usize, len);
    let keep: Keep = keep;
    let view = |offset: usize, shape: Vec<i64>| {
        // `wrapping_add`: only an address; the reader's layout keeps it inside the buffer.
        Tensor::new(keep.clone(), base.wrapping_add(offset), shape, DType::U8).in_buffer(buffer)
    };
    let image: Bound<'_, PyAny> = match &layout {
        Layout::Fixed { height, width } => Bound::new(
            py,
            view(0, vec![n, i64::from(*height), i64::from(*width), 3]),
        )?
        .into_any(),
        Layout::Variable { offsets, shapes } => {
            let list = PyList::empty(py);
            for (o, s) in offsets.iter().zip(shapes) {
                list.append(view(
                    *o as usize,
                    vec![i64::from(s[0]), i64::from(s[1]), i64::from(s[2])],
                ))?;
            }
            list.into_any()
        }
        Layout::Encoded { offsets } => {
            let list = PyList::empty(py);
            for w in offsets.windows(2) {
                list.append(view(w[0] as usize, vec![(w[1] - w[0]) as i64]))?;
            }
            list.into_any()
        }
    };
    (epoch, index, keys, label_tensor, image, fields, crops).into_pyobject(py)
}

#[pymethods]
impl Reader {
    /// Opens the dataset, plans the epoch and starts the reader threads (all with the GIL
    /// released).
    #[new]
    #[pyo3(signature = (dataset, *, batch_size, seed, epoch, shuffle, rank, world_size,
        workers=None, transform="decode", flip=false, remainder="drop", drop_last=false, in_order=true, shuffle_buffer=None,
        interleave=None, prefetch=None, skip_corrupt=false, max_pixels=None, split=None, resume=None,
        cache_dir=None, cache_limit=None, fetch_timeout=None, fetch_attempts=None,
        prefetch_shards=None, fetch_concurrency=None, fields=None,
        pool=None, test_delay=None))]
    // One parameter per keyword argument of the Python signature.
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dataset: String,
        batch_size: usize,
        seed: u64,
        epoch: u64,
        shuffle: bool,
        rank: u32,
        world_size: u32,
        workers: Option<usize>,
        transform: &str,
        flip: bool,
        remainder: &str,
        drop_last: bool,
        in_order: bool,
        shuffle_buffer: Option<usize>,
        interleave: Option<usize>,
        prefetch: Option<usize>,
        skip_corrupt: bool,
        max_pixels: Option<u64>,
        split: Option<(u32, u32)>,
        resume: Option<String>,
        cache_dir: Option<PathBuf>,
        cache_limit: Option<u64>,
        fetch_timeout: Option<f64>,
        fetch_attempts: Option<u32>,
        prefetch_shards: Option<usize>,
        fetch_concurrency: Option<usize>,
        fields: Option<Vec<String>>,
        pool: Option<PyRefMut<'_, BufferPool>>,
        test_delay: Option<(String, f64)>,
    ) -> PyResult<Self> {
        let location = Location::parse(&dataset)
            .map_err(|e| read_error(shardtool_reader::ReadError::from(e)))?;
        let mut cache = fetching(
            cache_options(cache_dir, cache_limit),
            fetch_timeout,
            fetch_attempts,
            fetch_concurrency,
        )?;
        if let Some(n) = prefetch_shards {
            cache.ahead = n;
        }
        let mut b = Loader::builder_at(location)
            .cache(cache)
            .batch_size(batch_size)
            .seed(seed)
            .epoch(epoch)
            .shuffle(shuffle)
            .partition(rank, world_size)
            .transform(
                transform
                    .parse::<Transform>()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
            )
            .flip(flip)
            .remainder(self::remainder(remainder)?)
            .drop_last(drop_last)
            .in_order(in_order)
            .on_corrupt(if skip_corrupt {
                CorruptPolicy::Skip
            } else {
                CorruptPolicy::Fail
            });
        if let Some(k) = workers {
            b = b.workers(k);
        }
        if let Some(n) = shuffle_buffer {
            b = b.shuffle_buffer(n);
        }
        if let Some(k) = interleave {
            b = b.interleave(k);
        }
        if let Some(n) = prefetch {
            b = b.prefetch(n);
        }
        if let Some((i, n)) = split {
            b = b.split(i, n);
        }
        if let Some(n) = max_pixels {
            b = b.max_pixels(n);
        }
        if let Some(f) = fields {
            b = b.fields(f);
        }
        if let Some(mut p) = pool {
            b = b.allocator(p.allocator());
        }
        if let Some((key, secs)) = test_delay {
            // Testing aid: reading `key` sleeps, so a test can interrupt a waiting `next`.
            b = b.inject_delay(&key, Duration::from_secs_f64(secs.max(0.0)));
        }
        if let Some(text) = resume {
            let state: LoaderState = serde_json::from_str(&text)
                .map_err(|e| PyValueError::new_err(format!("not a loader state: {e}")))?;
            b = b.resume_matching(state);
        }
        // Opening a remote dataset fetches its manifest: Ctrl-C is answered meanwhile.
        let loader = crate::tools::interruptible(py, move || b.build())?.map_err(read_error)?;
        Ok(Self {
            position: Mutex::new(state_json(&loader)),
            metrics: loader.metrics_source(),
            batches: loader.batches_per_epoch(),
            workers: loader.workers(),
            loader: Mutex::new(Some(loader)),
            closing: AtomicBool::new(false),
            stopped_at: Mutex::new(None),
            iterating: AtomicBool::new(false),
            iterating_thread: Mutex::new(None),
            pid: std::process::id(),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next batch as `(epoch, index, keys, labels, image, fields)`; `image` is one `Tensor`
    /// for a fixed-shape batch, else a list of them; `fields` pairs each asked-for field's name
    /// with its values (`bytes`, or `None` where a sample lacks it).
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.check_process()?;
        if self.iterating.swap(true, Ordering::Acquire) {
            return Err(PyRuntimeError::new_err(
                "this reader is being iterated by another thread",
            ));
        }
        struct Iterating<'a>(&'a Reader);
        impl Drop for Iterating<'_> {
            fn drop(&mut self) {
                if let Ok(mut t) = self.0.iterating_thread.lock() {
                    *t = None;
                }
                self.0.iterating.store(false, Ordering::Release);
            }
        }
        if let Ok(mut t) = self.iterating_thread.lock() {
            *t = Some(std::thread::current().id());
        }
        let _iterating = Iterating(self);
        let closed = || {
            PyRuntimeError::new_err(
                "this reader was closed (Loader.close(), or a later iter() of the same Loader: \
                 one Loader reads one pass at a time)",
            )
        };
        loop {
            let mut guard = self.lock(py)?;
            if guard.is_none() {
                // A closed reader is no finished epoch: ending quietly would cut it short.
                return Err(closed());
            }
            if self.closing.load(Ordering::Relaxed) {
                // Another thread closed the reader while this one holds it: stopped here.
                self.stop_if_closing(py, &mut guard);
                return Err(closed());
            }
            let Some(loader) = guard.as_mut() else {
                return Err(closed());
            };
            match py.detach(|| loader.next_timeout(WAIT_SLICE)) {
                Next::Ready(Ok(batch)) => {
                    // A signal that arrived during the wait fires now, before the batch is
                    // handed over; raised later, in the caller, it would lose the batch to a
                    // resume (counted as delivered, never received). A close meanwhile stops
                    // the reader before it is handed over.
                    if let Err(e) = py.check_signals() {
                        loader.put_back(batch);
                        self.stop_if_closing(py, &mut guard);
                        return Err(e);
                    }
                    if self.closing.load(Ordering::Relaxed) {
                        loader.put_back(batch);
                        continue;
                    }
                    let (index, samples) = (batch.index, batch.len());
                    return match to_python(py, batch) {
                        Ok(t) => {
                            self.set_position(loader);
                            Ok(Some(t))
                        }
                        Err(e) => {
                            // Never handed out: a state taken now resumes with it.
                            loader.forget(index, samples);
                            Err(e)
                        }
                    };
                }
                Next::Ready(Err(e)) => return Err(read_error(e)),
                Next::Done => return Ok(None),
                Next::Pending => {
                    if let Err(e) = py.check_signals() {
                        // A handler that closed the reader: stopped here, its position kept.
                        self.stop_if_closing(py, &mut guard);
                        return Err(e);
                    }
                }
            }
        }
    }

    /// The position and metrics (JSON) recorded as the reader was stopped, by `close` or by a
    /// thread waiting in `__next__` for it, waiting up to `wait_s` seconds for them; `None` if
    /// none were.
    fn stopped_at(&self, py: Python<'_>, wait_s: f64) -> Option<(String, String)> {
        if std::process::id() != self.pid {
            // A forked copy: no thread of it runs here.
            return None;
        }
        let here = Some(std::thread::current().id());
        if self.iterating_thread.lock().is_ok_and(|t| *t == here) {
            // Called from inside `__next__` (a signal handler): it records the stop only once
            // the handler has returned.
            return self.stopped_at.lock().ok().and_then(|s| s.clone());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(wait_s.clamp(0.0, 60.0));
        loop {
            if let Some(s) = self.stopped_at.lock().ok().and_then(|s| s.clone()) {
                return Some(s);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            py.detach(|| std::thread::sleep(Duration::from_millis(5)));
        }
    }

    /// Counts delivered batch `index` (of `samples` samples) as not delivered: the caller lost
    /// it before handing it on (an exception while converting it), so a state taken now resumes
    /// with it.
    fn forget(&self, py: Python<'_>, index: u64, samples: usize) -> PyResult<()> {
        self.check_process()?;
        if let Some(loader) = self.lock(py)?.as_mut() {
            loader.forget(index, samples);
            self.set_position(loader);
        }
        Ok(())
    }

    /// The position after every batch returned so far, as the reader's JSON state (also after
    /// the reader is closed), read without waiting for a thread iterating it.
    fn state(&self) -> PyResult<String> {
        self.check_process()?;
        let position = self
            .position
            .lock()
            .map_err(|_| PyRuntimeError::new_err("a previous call panicked"))?;
        Ok(position.clone())
    }

    /// The reader's metrics so far (throughput, waits, skipped records, lost shards, cache), as
    /// JSON.
    fn metrics(&self) -> PyResult<String> {
        self.check_process()?;
        serde_json::to_string(&self.metrics.metrics())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Batches of this rank's epoch (all shares together).
    fn batches_per_epoch(&self) -> u64 {
        self.batches
    }

    /// Worker threads this pass started (at most one per batch left to read).
    #[getter]
    fn workers(&self) -> usize {
        self.workers
    }

    /// Stops the reader threads (batches already returned stay valid; fetches under way are
    /// cancelled), waiting for them at most [`CLOSE_WAIT`]. A thread
    /// waiting for a batch of this reader meanwhile stops them itself within one wait slice, and
    /// gets `RuntimeError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.check_process()?;
        self.closing.store(true, Ordering::Relaxed);
        // Not waited for: a thread in `__next__` that holds it stops the reader itself.
        let taken = match self.loader.try_lock() {
            Ok(mut g) => self.take_stopped(&mut g),
            Err(_) => None,
        };
        py.detach(move || stop_within(taken, CLOSE_WAIT));
        Ok(())
    }
}

/// `loader`'s state as JSON.
fn state_json(loader: &Loader) -> String {
    serde_json::to_string(&loader.state()).unwrap_or_default()
}

impl Reader {
    /// Records `loader`'s position for [`Reader::state`].
    fn set_position(&self, loader: &Loader) {
        if let Ok(mut p) = self.position.lock() {
            *p = state_json(loader);
        }
    }

    /// Stops the reader if `close` was asked while this thread held it, recording its position.
    /// The threads are joined on a helper thread (a reader thread stuck in a slow read, a
    /// network timeout, must not hold this one too), started without the GIL, so that a failed
    /// start drops them there too.
    fn stop_if_closing(&self, py: Python<'_>, guard: &mut Option<Loader>) {
        if self.closing.load(Ordering::Relaxed) {
            let taken = self.take_stopped(guard);
            py.detach(move || stop_within(taken, Duration::ZERO));
        }
    }

    /// Takes the loader out to stop it, recording its position and metrics for `stopped_at`.
    fn take_stopped(&self, guard: &mut Option<Loader>) -> Option<Loader> {
        let taken = guard.take();
        if let Some(l) = &taken {
            let json = |v: serde_json::Result<String>| v.unwrap_or_default();
            let state = json(serde_json::to_string(&l.state()));
            let metrics = json(serde_json::to_string(&l.metrics()));
            if let Ok(mut s) = self.stopped_at.lock() {
                *s = Some((state, metrics));
            }
        }
        taken
    }
}

/// How long `close` waits for the reader threads to end before leaving them to end by
/// themselves: a thread stuck in a network read ends only at the fetch's timeout (seconds to
/// minutes), and a Ctrl-C'd program must not wait for it.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Stops `loader`'s threads on a helper thread, waiting at most `wait` for them to end (a
/// thread that cannot start is waited for here, where the stop then happens).
fn stop_within(loader: Option<Loader>, wait: Duration) {
    let Some(loader) = loader else {
        return;
    };
    let (done, ended) = std::sync::mpsc::channel::<()>();
    // Until its threads end, a new reader that finds the cache full waits for their room.
    let stopping = shardtool_cache::stopping();
    let stopped = std::thread::Builder::new()
        .name("shardtool-close".into())
        .spawn(move || {
            drop(loader);
            drop(stopping);
            let _ = done.send(());
        });
    if stopped.is_ok() && !wait.is_zero() {
        let _ = ended.recv_timeout(wait);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let loader = match self.loader.get_mut() {
            Ok(l) => l.take(),
            Err(p) => p.into_inner().take(),
        };
        if std::process::id() != self.pid {
            // A forked copy: its threads do not exist here, so joining them would hang.
            std::mem::forget(loader);
        } else {
            // Dropped by the garbage collector, with the GIL held: never wait on a stuck read.
            stop_within(loader, Duration::ZERO);
        }
    }
}
