//! The loader: worker threads in the training process (no pickling, no shared-memory handles)
//! that turn an epoch plan into batches, in order or as they complete.

use crate::batch::{Batch, BatchAllocator, CpuAllocator};
use crate::dataset::Dataset;
use crate::metrics::{Metrics, MetricsRecorder};
use crate::plan::{per_rank, rank_order, OrderOptions};
use crate::state::{dataset_fingerprint, LoaderState};
use crate::transform::Transform;
use crate::work::{worker, Msg, WorkerShared};

mod resume;
use crate::ReadError;
use serde::{Deserialize, Serialize};
#[cfg(feature = "remote")]
use shardtool_cache::CacheOptions;
use shardtool_cache::Location;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to do with a record that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CorruptPolicy {
    /// Stop with an error naming the shard and key.
    #[default]
    Fail,
    /// Leave the record out of its batch and count it in the metrics; a shard that cannot be
    /// opened or fetched at all is left out for this epoch, and its samples are counted as lost.
    Skip,
}

/// What [`Loader::next_timeout`] found.
// Moved out at once, one per batch: boxing the batch would only add an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum Next {
    /// The next batch, or the error that ends the epoch.
    Ready(Result<Batch, ReadError>),
    /// Nothing arrived within the timeout; ask again.
    Pending,
    /// The epoch is over.
    Done,
}

/// Builds a [`Loader`].
pub struct LoaderBuilder {
    location: Location,
    batch_size: usize,
    order: OrderOptions,
    epoch: u64,
    rank: u32,
    world: u32,
    /// Why RANK or WORLD_SIZE could not be used; an error at `build` unless `partition` is given.
    env_partition_error: Option<String>,
    /// None: [`crate::threads::default_workers_here`] at build.
    workers: Option<usize>,
    prefetch: usize,
    in_order: bool,
    transform: Transform,
    flip: bool,
    drop_last: bool,
    region_decode: bool,
    max_pixels: Option<u64>,
    corrupt: CorruptPolicy,
    resume: Option<LoaderState>,
    /// Whether the state must match the builder's order, partition and batch size.
    resume_strict: bool,
    /// Whether [`LoaderBuilder::partition`] was called: a state of another partition then
    /// resumes in this one.
    partition_set: bool,
    split: Option<(u32, u32)>,
    allocator: Arc<dyn BatchAllocator>,
    fields: Vec<String>,
    delays: Vec<(String, Duration)>,
    #[cfg(feature = "remote")]
    cache: Option<CacheOptions>,
}

/// `name` from the environment: `Ok(None)` when unset, an error naming it when it is set but not
/// a whole number (a launcher's typo must not make every rank read the whole dataset).
fn env_u32(name: &str) -> Result<Option<u32>, String> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} is not a whole number")),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("{name}={v:?} is not a number")),
    }
}

/// Most batches each worker may have ready ahead of the consumer: each is a whole batch buffer.
pub const MAX_PREFETCH: usize = 1024;

/// The most bytes one fixed-shape batch may take (batch size x side x side x 3): a larger one is
/// refused before anything is allocated.
pub const MAX_BATCH_BYTES: u64 = 8 << 30;

impl LoaderBuilder {
    fn new(location: Location) -> Self {
        let (rank, world) = (env_u32("RANK"), env_u32("WORLD_SIZE"));
        let env_partition_error = match (&rank, &world) {
            (Err(e), _) | (_, Err(e)) => Some(e.clone()),
            (Ok(Some(r)), Ok(Some(w))) if r >= w => {
                Some(format!("RANK={r} must be below WORLD_SIZE={w}"))
            }
            // One without the other would make every process rank 0 (or all of world 1).
            (Ok(Some(_)), Ok(None)) => Some("RANK is set but WORLD_SIZE is not".to_string()),
            (Ok(None), Ok(Some(_))) => Some("WORLD_SIZE is set but RANK is not".to_string()),
            _ => None,
        };
        Self {
            location,
            batch_size: 64,
            order: OrderOptions::default(),
            epoch: 0,
            rank: rank.ok().flatten().unwrap_or(0),
            world: world.ok().flatten().unwrap_or(1),
            env_partition_error,
            workers: None,
            prefetch: 2,
            in_order: true,
            transform: Transform::None,
            flip: false,
            drop_last: false,
            region_decode: true,
            max_pixels: None,
            corrupt: CorruptPolicy::Fail,
            resume: None,
            resume_strict: false,
            partition_set: false,
            split: None,
            allocator: Arc::new(CpuAllocator::default()),
            fields: Vec::new(),
            delays: Vec::new(),
            #[cfg(feature = "remote")]
            cache: None,
        }
    }

    /// Samples per batch (default 64).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }
    /// Shuffle seed (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.order.seed = seed;
        self
    }
    /// Turn shuffling off (manifest order).
    pub fn shuffle(mut self, on: bool) -> Self {
        self.order.shuffle = on;
        self
    }
    /// Shuffle buffer capacity in samples (default 8192).
    pub fn shuffle_buffer(mut self, n: usize) -> Self {
        self.order.buffer = n;
        self
    }
    /// Shard pieces interleaved into the buffer (default 32).
    pub fn interleave(mut self, k: usize) -> Self {
        self.order.interleave = k;
        self
    }
    /// Remainder policy (default drop).
    pub fn remainder(mut self, r: crate::Remainder) -> Self {
        self.order.remainder = r;
        self
    }
    /// Leaves out the last batch of the epoch when it is short, so every batch holds
    /// `batch_size` samples (fixed shapes for XLA or CUDA graphs; default false).
    pub fn drop_last(mut self, on: bool) -> Self {
        self.drop_last = on;
        self
    }
    /// Epoch (default 0).
    pub fn epoch(mut self, e: u64) -> Self {
        self.epoch = e;
        self
    }
    /// Rank and world size (default from RANK / WORLD_SIZE, else 0 of 1; either one set but not
    /// a whole number makes `build` fail unless this is called).
    pub fn partition(mut self, rank: u32, world: u32) -> Self {
        self.rank = rank;
        self.world = world;
        self.env_partition_error = None;
        self.partition_set = true;
        self
    }
    /// Worker threads (default: the cores, shared among the `LOCAL_WORLD_SIZE` ranks torchrun
    /// starts on the node and among the consumers of a [`split`](Self::split)).
    pub fn workers(mut self, k: usize) -> Self {
        self.workers = Some(k);
        self
    }
    /// Batches each worker may have ready ahead of the consumer (default 2, ≤ [`MAX_PREFETCH`]).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n;
        self
    }
    /// In-order delivery (default) or completion order, so one slow record never holds back the
    /// batches behind it.
    pub fn in_order(mut self, on: bool) -> Self {
        self.in_order = on;
        self
    }
    /// Decode tar image records to RGB8 at their stored size: `transform(Transform::Decode)`
    /// when on, `Transform::None` when off (needs the `decode` feature).
    pub fn decode(mut self, on: bool) -> Self {
        self.transform = if on {
            Transform::Decode
        } else {
            Transform::None
        };
        self
    }
    /// What to do to each image record (default [`Transform::None`]); every transform but
    /// `None` needs the `decode` feature. The crops give fixed-shape batches.
    pub fn transform(mut self, t: Transform) -> Self {
        self.transform = t;
        self
    }
    /// Mirror each crop left to right with probability 0.5, drawn from (seed, epoch, key).
    pub fn flip(mut self, on: bool) -> Self {
        self.flip = on;
        self
    }
    /// Decode only the region a JPEG crop needs, DCT-scaled where the crop allows (default on).
    /// Off decodes every pixel and crops afterwards: the reference for tests and benchmarks.
    pub fn region_decode(mut self, on: bool) -> Self {
        self.region_decode = on;
        self
    }
    /// The most pixels a record may decode to (default: the limit the dataset was packed under,
    /// at least 100 million). A larger record is corrupt. Lower it for datasets from sources you
    /// do not trust: a manifest may state a pack limit up to 2^30 pixels (3.2 GB a decode, per
    /// worker), the most this reader decodes whatever is asked.
    pub fn max_pixels(mut self, n: u64) -> Self {
        self.max_pixels = Some(n);
        self
    }
    /// Corrupt-record policy (default fail).
    pub fn on_corrupt(mut self, p: CorruptPolicy) -> Self {
        self.corrupt = p;
        self
    }
    /// Continue from a saved state (its order, epoch, partition and batch size win; a partition
    /// given with [`partition`](Self::partition) wins over the state's, as in
    /// [`resume_matching`](Self::resume_matching)).
    pub fn resume(mut self, state: LoaderState) -> Self {
        self.resume = Some(state);
        self
    }
    /// Continue from a saved state made with this builder's order and batch size (and epoch):
    /// a state of another seed or shuffle is an error ([`ReadError::BadState`] naming the
    /// difference), not silently followed. For callers whose options are explicit, as a training
    /// script's are. A state of another rank or world size resumes this rank's share of what
    /// the epoch has left, taking every rank of its world to have delivered as many batches as
    /// it did (DDP ranks step together): a checkpoint saved on rank 0 resumes every rank, on as
    /// many hosts or others. Only a state read in order, to a whole batch and not a DataLoader
    /// worker's share, is taken so; another is an error.
    pub fn resume_matching(mut self, state: LoaderState) -> Self {
        self.resume = Some(state);
        self.resume_strict = true;
        self
    }
    /// Read only batches `index`, `index + count`, … of the rank's plan: the share of one of
    /// `count` consumers (DataLoader worker processes) of the same rank. The shares of
    /// `0..count` are disjoint and together hold every batch exactly once.
    pub fn split(mut self, index: u32, count: u32) -> Self {
        self.split = Some((index, count));
        self
    }
    /// Where batch bytes are allocated (default: reused CPU buffers).
    pub fn allocator(mut self, a: Arc<dyn BatchAllocator>) -> Self {
        self.allocator = a;
        self
    }
    /// Carried fields to deliver with each batch ([`Batch::fields`](crate::Batch::fields)), e.g.
    /// `["txt", "json"]`: one value per sample and field, the bytes as stored, `None` where a
    /// sample lacks the field. Any name in the manifest's `fields` or `optional_fields` may be
    /// asked for, `cls` included (its text), except what every batch holds already: the image
    /// field (`jpg`, `png`, …, `pixels`), `key` and `label`. On packed shards `json` is always
    /// there: the input's json when it was carried, else the record's sample object (shardtool's
    /// metadata). [`build`](Self::build) refuses an unknown name, listing the dataset's fields.
    pub fn fields<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields = names.into_iter().map(Into::into).collect();
        self
    }
    /// Testing aid, not part of the API: sleep `delay` whenever the record with `key` is read.
    #[doc(hidden)]
    pub fn inject_delay(mut self, key: &str, delay: Duration) -> Self {
        self.delays.push((key.to_string(), delay));
        self
    }

    /// The shard cache for a remote dataset (`http(s)://`, `s3://`): folder, byte limit,
    /// retries and prefetch. Without it a remote dataset uses the default cache folder.
    #[cfg(feature = "remote")]
    pub fn cache(mut self, options: CacheOptions) -> Self {
        self.cache = Some(options);
        self
    }

    /// Opens the dataset, plans the epoch and starts the workers.
    pub fn build(mut self) -> Result<Loader, ReadError> {
        let mut dataset = match &self.location {
            Location::Local(path) => Dataset::open(path)?,
            #[cfg(feature = "remote")]
            Location::Remote(url) => {
                Dataset::open_remote(url.clone(), self.cache.take().unwrap_or_default())?
            }
            #[cfg(not(feature = "remote"))]
            Location::Remote(url) => {
                return Err(ReadError::RemoteNotBuilt(url.folder.to_string()));
            }
        };
        crate::fields::check_fields(&dataset.manifest, &self.fields)?;
        dataset.carry(self.fields.clone());
        let dataset = Arc::new(dataset);
        let fingerprint = dataset_fingerprint(&dataset);
        let resumed = self.resume.is_some();
        let r = self.take_resume(&fingerprint)?;
        let mut skip: BTreeSet<u64> = r.extra.iter().copied().collect();
        let (delivered_prefix, mut partial, resharded) =
            (r.delivered_prefix, r.partial, r.resharded);
        if self.order.buffer == 0 || self.order.interleave == 0 {
            let what = format!(
                "shuffle buffer {} and interleave {}: both count samples or shards and must be \
                 at least 1",
                self.order.buffer, self.order.interleave
            );
            return Err(match resumed {
                true => ReadError::BadState(format!("the saved state's {what}")),
                false => ReadError::BadOptions(what),
            });
        }
        if self.max_pixels == Some(0) {
            return Err(ReadError::BadOptions(
                "max pixels 0: no record could be decoded".into(),
            ));
        }
        if self.prefetch > MAX_PREFETCH {
            return Err(ReadError::BadOptions(format!(
                "prefetch {} is over {MAX_PREFETCH}: it counts whole batches each worker holds \
                 ready, not bytes",
                self.prefetch
            )));
        }
        if let Some((i, n)) = self.split {
            if i >= n {
                return Err(ReadError::BadOptions(format!(
                    "batch share {i} of {n}: need index < count"
                )));
            }
        }
        if let Some(e) = &self.env_partition_error {
            return Err(ReadError::BadOptions(format!(
                "{e}: set it right, or give the rank and world size explicitly"
            )));
        }
        let threads = self
            .workers
            .unwrap_or_else(|| crate::threads::default_workers_here(self.split));
        if self.batch_size == 0 || threads == 0 || self.world == 0 || self.rank >= self.world {
            return Err(ReadError::BadOptions(format!(
                "need batch size > 0, workers > 0 and rank < world (got batch {}, workers {}, rank {} of {})",
                self.batch_size, threads, self.rank, self.world
            )));
        }
        #[cfg(not(feature = "decode"))]
        if self.transform.decodes() {
            return Err(ReadError::BadOptions(format!(
                "transform {} needs a decoder, and this build has none (feature `decode`)",
                self.transform
            )));
        }
        if self.flip && self.transform.fixed_size().is_none() {
            return Err(ReadError::BadOptions(format!(
                "flip needs a crop transform (center-crop or random-resized-crop), not {}",
                self.transform
            )));
        }
        let counts = dataset.counts();
        let total: u64 = counts.iter().sum();
        let (opts, (rank, world)) = (&self.order, (self.rank, self.world));
        let resumed = crate::plan::resumed_order(
            &counts,
            opts,
            self.epoch,
            &resharded,
            self.batch_size,
            self.drop_last,
            rank,
            world,
        )?;
        let resharded_here = resumed.is_some();
        let mut order = match resumed {
            Some(order) => Ok(order),
            None => rank_order(&counts, opts, self.epoch, rank, world),
        }
        .map_err(|e| ReadError::Manifest {
            path: dataset.dir.join("manifest.json"),
            message: format!(
                "the order of the {} samples it states cannot be held in memory ({e})",
                per_rank(total, self.world, self.order.remainder)
            ),
        })?;
        if !resharded_here {
            crate::plan::rank_share(total, self.world, self.order.remainder)?;
        }
        let planned = order.len() as u64;
        if self.drop_last {
            // What an epoch resumed at another world size has left may fill no batch.
            let whole = match resharded_here {
                false => crate::plan::whole_batches(planned, self.batch_size as u64)?,
                true => planned / self.batch_size as u64,
            };
            order.truncate((whole * self.batch_size as u64) as usize);
        }
        if let Some(side) = self.transform.fixed_size() {
            let batch = self.batch_size.min(order.len()) as u64;
            let bytes = batch * u64::from(side) * u64::from(side) * 3;
            let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
            if bytes > MAX_BATCH_BYTES {
                return Err(ReadError::BadOptions(format!(
                    "a batch of {batch} {side}x{side} RGB images needs {:.1} GiB, over the {} GiB \
                     a batch may take: use a smaller batch or crop size",
                    gib(bytes),
                    MAX_BATCH_BYTES >> 30
                )));
            }
            // Each worker started (at most one per batch) holds the batch it fills and
            // `prefetch` ready ones; the consumer one.
            let workers = threads.min(order.len().div_ceil(self.batch_size).max(1));
            let held = (workers * (self.prefetch.max(1) + 1) + 1) as u64;
            let all = bytes.saturating_mul(held);
            if let Some(memory) = crate::batch::usable_memory().filter(|&m| all > m / 2) {
                return Err(ReadError::BadOptions(format!(
                    "{held} batches of {:.1} GiB in flight ({} workers, prefetch {}) need {:.1} \
                     GiB, over half of the {:.1} GiB this process may use: use a smaller batch \
                     or crop size, fewer workers or less prefetch",
                    gib(bytes),
                    workers,
                    self.prefetch.max(1),
                    gib(all),
                    gib(memory)
                )));
            }
        }
        let batches = order.len().div_ceil(self.batch_size) as u64;
        // The state restored the dataset, epoch, ranks and batch size: its batches are this
        // epoch's. One past them is a damaged or foreign checkpoint, not an epoch to skip.
        let past = skip.last().copied().filter(|&b| b >= batches);
        if let Some(b) = past.or((delivered_prefix > batches).then_some(delivered_prefix)) {
            return Err(ReadError::BadState(format!(
                "the saved state counts {} as delivered, and the epoch has {batches} batches: it \
                 is damaged, or belongs to another loader{}",
                past.map_or(format!("{b} batches"), |b| format!("batch {b} (from 0)")),
                if self.drop_last
                    && past.unwrap_or(delivered_prefix.saturating_sub(1)) == batches
                    && !planned.is_multiple_of(self.batch_size as u64)
                {
                    " (one that kept the short last batch: resume with drop_last off)"
                } else {
                    ""
                }
            )));
        }
        skip.extend(0..delivered_prefix);
        if let Some((b, used)) = partial {
            let len = if b < batches {
                batch_len(order.len(), self.batch_size, b)
            } else {
                0
            };
            if used > len {
                return Err(ReadError::BadState(format!(
                    "the saved state used {used} samples of batch {b}, which has {len} in this epoch"
                )));
            }
            if used == len {
                // Read to its end: delivered.
                skip.insert(b);
                partial = None;
            } else {
                skip.remove(&b);
            }
        }
        if let Some((i, n)) = self.split {
            // Other consumers' batches are theirs: treated as delivered here.
            skip.extend((0..batches).filter(|b| b % u64::from(n) != u64::from(i)));
        }
        // The batches still to read, dealt round-robin to the threads, so a resumed or split
        // loader keeps every thread busy.
        let todo: Vec<u64> = (0..batches).filter(|b| !skip.contains(b)).collect();
        // As many as the system starts: a thread limit (`ulimit -u`) may leave fewer.
        let k = (1..=threads.min(todo.len().max(1)))
            .rev()
            .find(|&n| shardtool_core::can_start_threads(n))
            .unwrap_or(1);
        // Samples still to read per shard: a shard is closed (and evictable) after its last.
        let mut left = vec![0u64; counts.len()];
        for (pos, r) in order.iter().enumerate() {
            let b = (pos / self.batch_size) as u64;
            let skipped_here = match partial {
                Some((pb, c)) if pb == b => pos - b as usize * self.batch_size < c,
                _ => false,
            };
            if !skip.contains(&b) && !skipped_here {
                left[r.shard as usize] += 1;
            }
        }
        #[cfg(feature = "remote")]
        if let Some(remote) = dataset.remote() {
            let sizes: Vec<u64> = dataset
                .manifest
                .shards
                .iter()
                .map(|s| s.uncompressed_bytes.unwrap_or(s.bytes))
                .collect();
            let lookahead = (k * (self.prefetch.max(1) + 1)) as u64;
            remote.check_capacity(crate::plan::open_window_bytes(
                &order,
                self.batch_size,
                lookahead,
                &sizes,
            ))?;
            remote.plan(
                crate::plan::first_use_order(&order)
                    .into_iter()
                    .filter(|&s| left[s] > 0)
                    .collect(),
            );
        }
        let order = Arc::new(order);
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(MetricsRecorder::default());
        let max_pixels = (self.max_pixels).map_or_else(
            || dataset.max_pixels(),
            |m| m.min(shardtool_core::Limits::READER_MAX_PIXELS),
        );
        let shared = Arc::new(WorkerShared {
            dataset: dataset.clone(),
            order: order.clone(),
            batch_size: self.batch_size,
            seed: self.order.seed,
            epoch: self.epoch,
            transform: self.transform,
            flip: self.flip,
            region_decode: self.region_decode,
            max_pixels,
            resize_past_limit_is_corrupt: self.max_pixels.is_some()
                && matches!(self.transform, Transform::Resize { size } if u64::from(size).pow(2) <= max_pixels),
            corrupt: self.corrupt,
            allocator: self.allocator.clone(),
            fields: self.fields,
            stop: stop.clone(),
            metrics: metrics.clone(),
            delays: self.delays,
            partial,
            left: left.into_iter().map(AtomicU64::new).collect(),
        });
        let mut handles = Vec::new();
        let mut receivers = Vec::new();
        let (shared_tx, shared_rx) = mpsc::sync_channel(self.prefetch.max(1) * k);
        for w in 0..k {
            let mine: Vec<u64> = todo.iter().skip(w).step_by(k).copied().collect();
            let tx = if self.in_order {
                let (tx, rx) = mpsc::sync_channel(self.prefetch.max(1));
                receivers.push(rx);
                tx
            } else {
                shared_tx.clone()
            };
            let shared = shared.clone();
            // A probe's threads just ended may count against a thread limit a moment longer.
            let start = || {
                let (shared, tx, mine) = (shared.clone(), tx.clone(), mine.clone());
                std::thread::Builder::new()
                    .name(format!("reader-{w}"))
                    .spawn(move || worker(&shared, &mine, &tx))
            };
            let started = (start().or_else(|_| {
                std::thread::sleep(Duration::from_millis(20));
                start()
            }))
            .map_err(|e| {
                ReadError::BadOptions(format!(
                    "cannot start a reader thread: {e} (a thread limit: ulimit -u)"
                ))
            })?;
            handles.push(started);
        }
        drop(shared_tx);
        let expected_samples = order.len() as u64
            - skip
                .iter()
                .map(|&b| batch_len(order.len(), self.batch_size, b) as u64)
                .sum::<u64>()
            - partial.map_or(0, |(_, c)| c as u64);
        Ok(Loader {
            state: LoaderState {
                version: 1,
                dataset: fingerprint,
                order: self.order,
                epoch: self.epoch,
                rank: self.rank,
                world: self.world,
                batch_size: self.batch_size,
                delivered_prefix: 0,
                delivered_extra: Vec::new(),
                partial,
                split: self.split,
                drop_last: Some(self.drop_last),
                resharded,
            },
            delivered: crate::delivered::Delivered::new(skip.iter().copied(), self.split, batches),
            batches,
            todo: todo.len() as u64,
            workers: k as u64,
            receivers,
            shared_rx: if self.in_order { None } else { Some(shared_rx) },
            next_in_order: 0,
            handles,
            stop,
            live: crate::metrics::MetricsSource::new(metrics.clone(), dataset.clone()),
            metrics,
            dataset,
            expected_samples,
            waiting: Duration::ZERO,
            held: None,
            finished: false,
        })
    }
}

fn batch_len(total: usize, batch: usize, index: u64) -> usize {
    let start = usize::try_from(index).map_or(usize::MAX, |i| i.saturating_mul(batch));
    total.saturating_sub(start).min(batch)
}

/// Streams the batches of one epoch for one rank.
pub struct Loader {
    state: LoaderState,
    delivered: crate::delivered::Delivered,
    batches: u64,
    todo: u64,
    workers: u64,
    receivers: Vec<Receiver<Msg>>,
    shared_rx: Option<Receiver<Msg>>,
    next_in_order: u64,
    handles: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    metrics: Arc<MetricsRecorder>,
    // Read for the cache metrics of a remote dataset.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    dataset: Arc<Dataset>,
    expected_samples: u64,
    /// Samples handed out and the clock, shared with [`Loader::metrics_source`].
    live: crate::metrics::MetricsSource,
    /// How long the consumer has waited for the next batch so far, over calls that timed out.
    waiting: Duration,
    /// A delivered batch its consumer could not take (see [`Loader::put_back`]): delivered next.
    held: Option<Batch>,
    finished: bool,
}

impl Loader {
    /// Starts building a loader over a local dataset directory or `manifest.json` path. The
    /// path is taken as a path even when it looks like a URL: see [`Loader::builder_at`].
    pub fn builder(dataset: impl AsRef<Path>) -> LoaderBuilder {
        LoaderBuilder::new(Location::Local(dataset.as_ref().to_path_buf()))
    }

    /// Starts building a loader over a dataset wherever it lives: a [`Location`] parsed from a
    /// path or an `http(s)://`, `s3://` or `file://` URL (`Location::parse`).
    pub fn builder_at(location: Location) -> LoaderBuilder {
        LoaderBuilder::new(location)
    }

    /// The worker threads reading this pass (at most one per batch left to read).
    pub fn workers(&self) -> usize {
        self.workers as usize
    }

    /// Batches this rank yields this epoch (the same on every rank).
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches
    }

    /// The position after every batch delivered so far.
    pub fn state(&self) -> LoaderState {
        let mut s = self.state.clone();
        s.delivered_prefix = self.delivered.prefix();
        // Other shares' batches are implied by `split`: the state stays small.
        s.delivered_extra = self.delivered.past_prefix().collect();
        // A resumed partial batch not handed out again yet still starts where it was left.
        s.partial = (self.state.partial).filter(|&(b, _)| !self.delivered.contains(b));
        s
    }

    /// The position when only the first `consumed` samples of `batch` (a delivered batch) were
    /// used: resuming yields the rest of that batch first (records skipped as corrupt before
    /// its next sample are not read again).
    pub fn state_within(&self, batch: &Batch, consumed: usize) -> LoaderState {
        let mut s = self.state();
        if consumed < batch.len() {
            let consumed = batch.planned_position(consumed);
            // Samples already skipped by an earlier partial state of the same batch count too.
            let before = match self.state.partial {
                Some((b, c)) if b == batch.index => c,
                _ => 0,
            };
            s.delivered_extra.retain(|&b| b != batch.index);
            if s.delivered_prefix > batch.index {
                s.delivered_extra
                    .extend(batch.index + 1..s.delivered_prefix);
                s.delivered_prefix = batch.index;
            }
            // None used: the position is the batch's start, no partial batch.
            s.partial = Some((batch.index, before + consumed)).filter(|&(_, c)| c > 0);
        }
        s
    }

    /// Throughput, wait times, skipped and slow records so far.
    pub fn metrics(&self) -> Metrics {
        self.live.metrics()
    }

    /// Where [`Loader::metrics`] comes from, for a thread that does not hold the loader.
    pub fn metrics_source(&self) -> crate::metrics::MetricsSource {
        self.live.clone()
    }

    /// The next message; `Err(())` when `timeout` passed first (`None`: no timeout).
    fn receive(&mut self, timeout: Option<Duration>) -> Result<Option<Msg>, ()> {
        let rx = match &self.shared_rx {
            Some(rx) => rx,
            None => {
                // The j-th batch still to read went to thread j mod k, which sends in order.
                if self.next_in_order >= self.todo {
                    return Ok(None);
                }
                &self.receivers[(self.next_in_order % self.workers) as usize]
            }
        };
        let msg = match timeout {
            None => rx.recv().ok(),
            Some(t) => match rx.recv_timeout(t) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => return Err(()),
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            },
        };
        if self.shared_rx.is_none() {
            self.next_in_order += 1;
        }
        Ok(msg)
    }

    /// Like [`Iterator::next`], but gives up after `timeout`, so a caller can check for
    /// interrupts (Ctrl-C in Python) while it waits.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        match self.step(Some(timeout)) {
            Ok(Some(r)) => Next::Ready(r),
            Ok(None) => Next::Done,
            Err(()) => Next::Pending,
        }
    }

    /// Takes back `batch`, the last one delivered, which its consumer could not take (an
    /// interrupt arrived as it was handed over): it no longer counts in [`Loader::state`], and
    /// is delivered again next.
    pub fn put_back(&mut self, batch: Batch) {
        self.forget(batch.index, batch.len());
        self.held = Some(batch);
    }

    /// Counts delivered batch `index` of `samples` samples as not delivered, for a batch lost
    /// after delivery before its consumer had it: a state taken now resumes with it, and this
    /// loader's epoch ends with [`ReadError::Incomplete`] rather than without it.
    pub fn forget(&mut self, index: u64, samples: usize) {
        if self.delivered.remove(index) {
            self.live.sub_delivered(samples);
        }
    }

    fn step(&mut self, timeout: Option<Duration>) -> Result<Option<Result<Batch, ReadError>>, ()> {
        if let Some(batch) = self.held.take() {
            self.delivered.insert(batch.index);
            self.live.add_delivered(batch.len());
            return Ok(Some(Ok(batch)));
        }
        if self.finished {
            return Ok(None);
        }
        let t = Instant::now();
        let msg = self.receive(timeout);
        // A wait given up on (a caller polling in slices) goes on at the next call: one batch,
        // one wait, however many calls it took.
        self.waiting += t.elapsed();
        Ok(match msg? {
            Some((b, Ok(batch))) => {
                self.metrics.wait(std::mem::take(&mut self.waiting));
                self.delivered.insert(b);
                self.live.add_delivered(batch.len());
                Some(Ok(batch))
            }
            Some((_, Err(e))) => {
                self.finished = true;
                Some(Err(e))
            }
            None => {
                self.finished = true;
                // Every planned sample must have been delivered or counted as skipped.
                let got = self.live.delivered()
                    + self.metrics.corrupt_count()
                    + self.metrics.lost_count();
                if got != self.expected_samples {
                    return Ok(Some(Err(ReadError::Incomplete {
                        expected: self.expected_samples,
                        delivered: got,
                    })));
                }
                None
            }
        })
    }
}

impl Iterator for Loader {
    type Item = Result<Batch, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Without a timeout the wait ends only with a message or a closed channel.
        self.step(None).unwrap_or(None)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A worker in a stalled fetch would hold the join up to the fetch's timeout and retries.
        #[cfg(feature = "remote")]
        if let Some(r) = self.dataset.remote() {
            r.stop();
        }
        // Dropping the receivers unblocks workers waiting to send.
        self.receivers.clear();
        self.shared_rx = None;
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
