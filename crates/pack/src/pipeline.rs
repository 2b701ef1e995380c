//! The pack run: plan the order, transform in parallel inside a bounded window, write in order.

use crate::list_file::row_columns;
use crate::listing::{Columns, Container, ContainerKind};
use crate::plan::{KeyChoice, PackPlan, ShardFormatChoice};
use crate::sample_read::{
    carried_problem, machine_fault, packed_record_problem, read_bounded, read_span,
    tar_member_problem, MAX_CARRIED_BYTES, NUMBERED,
};
use crate::sink::{Payload, ShardSink};
use crate::{failure, ErrorRecord, PackError};
use shardtool_core::AtomicFile;
use shardtool_core::{index_key, shuffle, validate_key};
use shardtool_image::{transform, Encode, Output, Timings, TransformSpec};
use shardtool_manifest::{self as manifest, errors, InputCounts, Manifest, ERRORS_FILE};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Summed time per stage over all images (worker time, so it can exceed wall time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Reading input files.
    pub read: Duration,
    /// Decoding, orientation, colour conversion.
    pub decode: Duration,
    /// Resizing.
    pub resize: Duration,
    /// Encoding.
    pub encode: Duration,
    /// Shard writing, checksums and compression (on the writer thread).
    pub write: Duration,
}

/// What a pack did.
#[derive(Debug, Clone)]
pub struct PackReport {
    /// The manifest that was published.
    pub manifest: Manifest,
    /// Inputs that failed (also in `errors.jsonl`): those failed while listing, then the rest in
    /// packing order.
    pub errors: Vec<ErrorRecord>,
    /// Bytes of input files read.
    pub bytes_in: u64,
    /// Bytes of shard files written.
    pub bytes_out: u64,
    /// Images this run packed: the manifest's count less what earlier runs of a resumed pack
    /// had packed (0 when the dataset was already finished). Speeds are per these.
    pub packed_now: u64,
    /// A `--resume` found the dataset finished: this run packed and failed nothing.
    pub finished_before: bool,
    /// Wall time.
    pub elapsed: Duration,
    /// Time per stage.
    pub stages: StageTimes,
}

/// A progress update, sent after every written or failed input.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressSnapshot {
    /// Inputs to process.
    pub total: u64,
    /// Inputs written or failed so far.
    pub done: u64,
    /// Inputs failed so far.
    pub failed: u64,
    /// Input bytes read so far.
    pub bytes_in: u64,
    /// Shards published so far.
    pub shards: u64,
}

/// Receives progress; called on the writer thread.
pub trait Progress {
    /// Called after each input.
    fn update(&self, snapshot: &ProgressSnapshot);

    /// Whether the run should stop (asked after each input): it then ends with
    /// [`PackError::Interrupted`], cleaning up as after any error.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Ignores progress.
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _: &ProgressSnapshot) {}
}

/// Marks a position of the shuffled order whose input was rejected before transforming.
pub(crate) const REJECTED: u32 = u32::MAX;

/// An input in flight: where it goes, under which key and report name.
struct Job {
    /// The image file (for a plain input or a list row).
    path: std::path::PathBuf,
    /// The container and span it is read from, if any.
    container: Option<(u32, (u64, u64))>,
    /// Its size when the plan was made, if known: a plain file of another size has changed.
    planned_size: Option<u64>,
    label: i64,
    key: String,
    source: String,
    /// The key the input states, where samples are numbered instead (`--keys index`).
    own_key: Option<String>,
}

/// A finished transform.
pub(crate) struct Done {
    output: Output,
    meta: serde_json::Value,
    /// Fields carried from the input byte for byte (`txt`, an input `json`, …), sorted by name.
    carried: Vec<(String, Vec<u8>)>,
    bytes_in: u64,
    read: Duration,
    timings: Timings,
}

/// What the workers share: where containers are and which columns a list row carries.
pub(crate) struct Shared {
    pub(crate) containers: Vec<Container>,
    pub(crate) columns: Columns,
    /// Samples are numbered by position (`KeyChoice::Index`): a carried input `.json` states the
    /// input's key, not the sample's.
    pub(crate) renumbered: bool,
    /// Per input (listing order), its size when the plan was made; empty when there is no plan.
    pub(crate) planned_sizes: Vec<u64>,
}

/// A planned size that was not known (the file could not be read when planning).
pub(crate) const UNKNOWN_SIZE: u64 = u64::MAX;

/// Removes the files a pack staged (fetched inputs, Parquet files as tars) when it ends, however
/// it ends.
pub(crate) struct StagedFiles(pub(crate) Vec<std::path::PathBuf>);

impl Drop for StagedFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The inputs in pack order: position `p` of the seeded permutation holds input `order[p]`
/// (or [`REJECTED`]), and its generated key is made from `p`.
pub(crate) struct Ordered {
    pub(crate) inputs: crate::Inputs,
    pub(crate) origin: crate::Origin,
    pub(crate) order: Vec<u32>,
    /// Every sample keyed by its position, whatever its input's key.
    pub(crate) renumbered: bool,
    /// Inputs refused for their key, by position (ascending).
    pub(crate) rejected: Vec<(usize, ErrorRecord)>,
    /// Keyless inputs at a position whose key an input states: (position, the key number they
    /// take instead), by position.
    spare_keys: Vec<(u32, u64)>,
}

impl Ordered {
    /// Shuffles `inputs` with `seed` (none keeps the listing order) and, unless `keys` numbers
    /// every sample, refuses bad or clashing input keys.
    pub(crate) fn new(
        inputs: crate::Inputs,
        origin: crate::Origin,
        seed: Option<u64>,
        keys: KeyChoice,
    ) -> Result<Self, PackError> {
        let n = inputs.len();
        if n >= REJECTED as usize {
            return Err(PackError::TooManyInputs {
                count: n as u64,
                max: u64::from(REJECTED - 1),
            });
        }
        // The order depends only on the listing (sorted) and the seed. Shuffling indices moves
        // exactly as shuffling the inputs themselves would (Fisher–Yates only swaps positions),
        // and costs 4 bytes per input.
        let mut order: Vec<u32> = (0..n as u32).collect();
        if let Some(seed) = seed {
            shuffle(&mut order, seed);
        }
        let mut rejected = Vec::new();
        // Keys given by the input (a list, a WebDataset shard) must be valid and unique, and must
        // not take a generated key; generated keys are unique by construction. Rejected positions
        // are marked in `order` rather than removed.
        let renumbered = keys == KeyChoice::Index;
        let mut spare_keys = Vec::new();
        if inputs.has_keys() && !renumbered {
            // Inputs with keys of their own, sorted by key (4 bytes each, where sets of borrowed
            // keys cost tens of bytes per input): equal keys are neighbours, and a generated key
            // is looked up by binary search.
            let key_of = |i: u32| inputs.get(i as usize).key.unwrap_or_default();
            let mut by_key: Vec<u32> = (0..n as u32)
                .filter(|&i| inputs.get(i as usize).key.is_some())
                .collect();
            by_key.sort_unstable_by(|&a, &b| key_of(a).cmp(key_of(b)));
            // Of inputs sharing a key, the first listed keeps it, whatever the seed.
            let mut duplicate = vec![false; n];
            for group in by_key.chunk_by(|&a, &b| key_of(a) == key_of(b)) {
                if let Some(&first) = group.iter().min() {
                    for &i in group.iter().filter(|&&i| i != first) {
                        duplicate[i as usize] = true;
                    }
                }
            }
            let taken = |k: &str| by_key.binary_search_by(|&i| key_of(i).cmp(k)).is_ok();
            // An input without a key gets its position's key, or, when an input states that
            // one, the next key past every position's that none states.
            let mut spare = n as u64;
            for (position, slot) in order.iter_mut().enumerate() {
                let item = inputs.get(*slot as usize);
                let generated;
                let (key, clash) = match item.key {
                    Some(k) => (k, duplicate[*slot as usize]),
                    None => {
                        generated = if taken(&index_key(position as u64)) {
                            while taken(&index_key(spare)) {
                                spare += 1;
                            }
                            spare_keys.push((position as u32, spare));
                            spare += 1;
                            index_key(spare - 1)
                        } else {
                            index_key(position as u64)
                        };
                        (generated.as_str(), false)
                    }
                };
                let problem = match validate_key(key) {
                    Err(e) => Some((
                        "bad_key",
                        format!("key {key:?}: {e}; {NUMBERED} numbers samples instead"),
                    )),
                    Ok(()) if clash => Some((
                        "duplicate_key",
                        format!(
                            "key {key:?} is used by another input; {NUMBERED} numbers \
                             samples instead"
                        ),
                    )),
                    Ok(()) => None,
                };
                if let Some((kind, message)) = problem {
                    rejected.push((position, failure(origin.source(&item), kind, message)));
                    *slot = REJECTED;
                }
            }
        }
        Ok(Self {
            inputs,
            origin,
            order,
            renumbered,
            rejected,
            spare_keys,
        })
    }

    /// Positions in the order.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// The key of the input at `position`.
    fn key(&self, position: usize) -> String {
        let own = self.inputs.get(self.order[position] as usize).key;
        match own.filter(|_| !self.renumbered) {
            Some(k) => k.to_string(),
            None => match (self.spare_keys).binary_search_by_key(&(position as u32), |&(p, _)| p) {
                Ok(i) => index_key(self.spare_keys[i].1),
                Err(_) => index_key(position as u64),
            },
        }
    }

    /// The label of the input at `position` (not a rejected one).
    fn label(&self, position: usize) -> i64 {
        self.inputs.get(self.order[position] as usize).label
    }
}

/// Time and bytes summed over the inputs written, and the progress so far.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) stages: StageTimes,
    pub(crate) bytes_in: u64,
    pub(crate) snapshot: ProgressSnapshot,
}

/// Adds one transformed input to `sink` as the sample at `position`. `Ok(Some(failure))`: the
/// sink refused it, and it fails as an input would.
pub(crate) fn write_sample(
    sink: &mut ShardSink<'_>,
    ordered: &Ordered,
    position: usize,
    done: &Done,
    tally: &mut Tally,
) -> Result<Option<ErrorRecord>, PackError> {
    tally.bytes_in += done.bytes_in;
    tally.snapshot.bytes_in = tally.bytes_in;
    tally.stages.read += done.read;
    tally.stages.decode += done.timings.decode;
    tally.stages.resize += done.timings.resize;
    tally.stages.encode += done.timings.encode;
    let t = Instant::now();
    let payload = match &done.output {
        Output::Encoded { bytes, field, .. } => Payload::Encoded(bytes, field),
        Output::Pixels(img) => Payload::Pixels {
            height: img.height,
            width: img.width,
            pixels: &img.pixels,
        },
    };
    let res = sink.add(
        &ordered.key(position),
        ordered.label(position),
        payload,
        &done.meta,
        &done.carried,
    );
    tally.stages.write += t.elapsed();
    Ok(res?.map(|why| {
        let item = ordered.inputs.get(ordered.order[position] as usize);
        failure(ordered.origin.source(&item), "too_large", why)
    }))
}

/// Transforms the inputs at `positions` (ascending; rejected ones are skipped) on `jobs` worker
/// threads, handing each result to `each` in position order. At most a small window of inputs
/// is in flight, so memory does not grow with the dataset. Stops at the first error `each`
/// returns.
pub(crate) fn transform_in_order(
    ordered: &Ordered,
    classes: &[String],
    shared: &std::sync::Arc<Shared>,
    spec: &TransformSpec,
    jobs: usize,
    positions: impl Iterator<Item = usize>,
    mut each: impl FnMut(usize, Result<Done, ErrorRecord>) -> Result<(), PackError>,
) -> Result<(), PackError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("pack-{i}"))
        .build()
        .map_err(|e| PackError::ThreadSpawn {
            threads: jobs,
            cause: e.to_string(),
        })?;
    let window = (jobs * 4).max(8);
    let (tx, rx) = mpsc::channel::<(usize, Result<Done, ErrorRecord>)>();
    let mut positions = positions.filter(|&p| ordered.order[p] != REJECTED);
    // Positions submitted and not yet handed over, in order; results that arrived early.
    let mut queue: VecDeque<usize> = VecDeque::with_capacity(window);
    let mut arrived: HashMap<usize, Result<Done, ErrorRecord>> = HashMap::with_capacity(window);
    loop {
        while queue.len() < window {
            let Some(position) = positions.next() else {
                break;
            };
            let index = ordered.order[position] as usize;
            let item = ordered.inputs.get(index);
            let job = Job {
                key: ordered.key(position),
                // A list row's key (a tar sample's ends its source), kept as `input_key`.
                own_key: (item.key.filter(|_| ordered.renumbered))
                    .filter(|_| {
                        item.container
                            .is_none_or(|c| shared.containers[c as usize].kind.is_list())
                    })
                    .map(str::to_string),
                source: ordered.origin.source(&item),
                path: ordered.origin.resolve(&item),
                container: item.container.zip(item.span),
                planned_size: shared
                    .planned_sizes
                    .get(index)
                    .copied()
                    .filter(|&s| s != UNKNOWN_SIZE),
                label: item.label,
            };
            let class = class_name(classes, job.label);
            let tx = tx.clone();
            let shared = shared.clone();
            let spec = *spec;
            pool.spawn(move || {
                let r = std::panic::catch_unwind(|| process(&job, &class, &spec, &shared))
                    .unwrap_or_else(|_| {
                        Err(failure(&job.source, "internal", "the image stage panicked"))
                    });
                let _ = tx.send((position, r));
            });
            queue.push_back(position);
        }
        let Some(&next) = queue.front() else {
            return Ok(());
        };
        if !arrived.contains_key(&next) {
            let Ok((i, r)) = rx.recv() else {
                return Ok(());
            };
            arrived.insert(i, r);
        }
        while let Some(r) = queue.front().and_then(|p| arrived.remove(p)) {
            let position = queue.pop_front().unwrap_or_default();
            match r {
                Err(e) if machine_fault(&e) => return Err(PackError::MachineFault(e)),
                r => each(position, r)?,
            }
        }
    }
}

/// The transform a plan applies (packed shards hold raw pixels).
pub(crate) fn effective_spec(plan: &PackPlan) -> TransformSpec {
    let mut spec = plan.transform;
    if plan.format == ShardFormatChoice::Packed {
        spec.encode = Encode::Raw;
    }
    spec
}

/// Runs a whole pack.
pub fn pack(plan: &PackPlan, progress: &dyn Progress) -> Result<PackReport, PackError> {
    plan.validate()?;
    if plan.shard_samples.is_some() {
        return crate::partition::pack_planned(plan, progress);
    }
    let start = Instant::now();
    // Held to the end: a plan or another pack beside this one is refused, and this one is
    // refused beside them, before it clears anything.
    let mut _lock = None;
    let mut listing = crate::output::list_for(
        plan,
        &plan.output,
        || {
            _lock = Some(crate::plan_file::OutputLock::take(&plan.output)?);
            Ok(())
        },
        progress,
        true,
    )?;
    // An earlier dataset `--overwrite` replaces stays whole until the first new shard is ready:
    // inputs that all fail, or a stop, leave it as it was.
    let replaces = crate::output::holds_a_pack(&plan.output);
    let _staged = StagedFiles(std::mem::take(&mut listing.staged));
    if listing.inputs.is_empty() && listing.errors.is_empty() {
        return Err(PackError::NoImages {
            looked_for: listing.looked_for,
            failed: 0,
            summary: String::new(),
            report: plan.output.join(ERRORS_FILE),
            kept: false,
        });
    }
    let spec = effective_spec(plan);
    let ordered = Ordered::new(
        std::mem::take(&mut listing.inputs),
        listing.origin.clone(),
        plan.seed,
        plan.keys,
    )?;
    let n = ordered.len();
    let found = n as u64 + listing.errors.len() as u64;
    let mut errors: Vec<(usize, ErrorRecord)> = ordered.rejected.clone();
    let mut failed_early: Vec<ErrorRecord> = std::mem::take(&mut listing.errors);

    let mut tally = Tally {
        snapshot: ProgressSnapshot {
            total: found,
            done: failed_early.len() as u64 + errors.len() as u64,
            failed: failed_early.len() as u64 + errors.len() as u64,
            ..Default::default()
        },
        ..Default::default()
    };
    progress.update(&tally.snapshot);
    let errors_path = plan.output.join(ERRORS_FILE);
    let check_max = |failed: u64| -> Result<(), PackError> {
        match plan.max_errors {
            Some(max) if failed > max => Err(PackError::TooManyErrors {
                failed,
                max,
                report: errors_path.clone(),
                kept: false,
            }),
            _ => Ok(()),
        }
    };
    // Written before the first shard: the mark by which a later `--overwrite` knows this pack's
    // shards if it is stopped before its manifest.
    let mark = {
        let errors_path = errors_path.clone();
        move || write_errors(&errors_path, &[])
    };
    let mut sink = ShardSink::new(plan);
    if replaces {
        let staged = _staged.0.clone();
        sink.before_first = Some(Box::new(move |shard: &Path| {
            let keep: Vec<PathBuf> = staged.into_iter().chain([shard.to_path_buf()]).collect();
            crate::output::clear_output(plan, Some(&keep))?;
            mark()
        }));
    } else {
        mark()?;
    }
    let shared = std::sync::Arc::new(Shared {
        containers: std::mem::take(&mut listing.containers),
        columns: plan.columns.clone(),
        renumbered: ordered.renumbered,
        planned_sizes: Vec::new(),
    });
    let mut outcome = check_max(tally.snapshot.failed).and_then(|()| {
        transform_in_order(
            &ordered,
            &listing.classes,
            &shared,
            &spec,
            plan.jobs,
            0..n,
            |position, r| {
                tally.snapshot.done += 1;
                let r = match r {
                    Ok(done) => {
                        match write_sample(&mut sink, &ordered, position, &done, &mut tally)? {
                            Some(refused) => Err(refused),
                            None => Ok(()),
                        }
                    }
                    Err(e) => Err(e),
                };
                match r {
                    Ok(()) => tally.snapshot.shards = sink.entries.len() as u64,
                    Err(e) => {
                        errors.push((position, e));
                        tally.snapshot.failed += 1;
                        check_max(tally.snapshot.failed)?;
                    }
                }
                progress.update(&tally.snapshot);
                if progress.cancelled() {
                    return Err(PackError::Interrupted);
                }
                Ok(())
            },
        )
    });
    if outcome.is_ok() {
        let t = Instant::now();
        outcome = sink.roll();
        tally.stages.write += t.elapsed();
        tally.snapshot.shards = sink.entries.len() as u64;
        progress.update(&tally.snapshot);
    }

    // The report is written even when the run aborts, so no failure is ever silent; only an
    // earlier dataset still whole keeps its own (the error then says how to see every failure).
    errors.sort_by_key(|(i, _)| *i);
    failed_early.extend(errors.into_iter().map(|(_, e)| e));
    let errors = failed_early;
    let kept = sink.before_first.is_some();
    if !kept {
        write_errors(&errors_path, &errors)?;
    }
    if let Err(PackError::TooManyErrors { kept: k, .. }) = &mut outcome {
        *k = kept;
    }
    outcome?;
    if sink.samples == 0 {
        return Err(PackError::NoImages {
            looked_for: listing.looked_for,
            failed: errors.len() as u64,
            summary: crate::failure_summary(&errors),
            report: errors_path,
            kept,
        });
    }

    let (fields, optional_fields) = sink.fields();
    let manifest = build_manifest(
        plan,
        &listing,
        ManifestParts {
            entries: std::mem::take(&mut sink.entries),
            fields,
            optional_fields,
            input_json: sink.input_json,
            found,
            failed: errors.len() as u64,
        },
    );
    debug_assert_eq!(manifest.totals.bytes, sink.bytes_out);
    publish_manifest(&plan.output, &manifest)?;
    Ok(PackReport {
        bytes_out: manifest.totals.bytes,
        packed_now: manifest.inputs.packed,
        finished_before: false,
        manifest,
        errors,
        bytes_in: tally.bytes_in,
        elapsed: start.elapsed(),
        stages: tally.stages,
    })
}

/// What a manifest is made of besides the plan and the listing.
pub(crate) struct ManifestParts {
    pub(crate) entries: Vec<shardtool_manifest::ShardEntry>,
    pub(crate) fields: Vec<String>,
    pub(crate) optional_fields: Vec<String>,
    pub(crate) input_json: bool,
    pub(crate) found: u64,
    pub(crate) failed: u64,
}

/// The manifest of a finished pack (one place for a whole pack and a merge).
pub(crate) fn build_manifest(
    plan: &PackPlan,
    listing: &crate::Listing,
    parts: ManifestParts,
) -> Manifest {
    let mut manifest = Manifest::new(
        format!("shardtool {}", env!("CARGO_PKG_VERSION")),
        if listing.labelled {
            listing.classes.clone()
        } else {
            Vec::new()
        },
        parts.fields,
        parts.entries,
    );
    manifest.optional_fields = parts.optional_fields;
    manifest.pack = plan.manifest_options();
    if parts.input_json {
        manifest
            .pack
            .insert("json".into(), serde_json::Value::String("input".into()));
    }
    manifest.inputs = InputCounts {
        found: parts.found,
        packed: manifest.totals.samples,
        failed: parts.failed,
        ignored: listing.ignored,
    };
    manifest
}

/// Writes `manifest.json`: the dataset's commit, always the last file written.
pub(crate) fn publish_manifest(output: &Path, manifest: &Manifest) -> Result<(), PackError> {
    let path = output.join(manifest::FILE_NAME);
    AtomicFile::write(&path, &manifest.to_json()).map_err(|e| PackError::io(&path, e))
}

fn class_name(classes: &[String], label: i64) -> String {
    usize::try_from(label)
        .ok()
        .and_then(|i| classes.get(i))
        .cloned()
        .unwrap_or_else(|| label.to_string())
}

/// Reads and transforms one input. Runs on a worker thread.
fn process(
    job: &Job,
    class: &str,
    spec: &TransformSpec,
    shared: &Shared,
) -> Result<Done, ErrorRecord> {
    let src = &job.source;
    let fail = |kind: &str, m: String| failure(src, kind, m);
    let t = Instant::now();
    let mut carried: Vec<(String, Vec<u8>)> = Vec::new();
    let mut columns = serde_json::Map::new();
    // The sample's bytes, and where its image is in them.
    let (bytes, image) = match job.container {
        None => {
            let b = read_bounded(&job.path, spec.limits.max_input_bytes, job.planned_size)
                .map_err(|(kind, m)| fail(kind, m))?;
            let n = b.len();
            (b, 0..n)
        }
        Some((ci, span)) => {
            let c = &shared.containers[ci as usize];
            // Extra fields ride along with the image, within a bound of their own.
            let limit = spec
                .limits
                .max_input_bytes
                .saturating_add(MAX_CARRIED_BYTES);
            let span_bytes = read_span(&c.path, span, limit).map_err(|(kind, m)| fail(kind, m))?;
            match &c.kind {
                ContainerKind::Tar | ContainerKind::Parquet => {
                    let parquet = c.kind == ContainerKind::Parquet;
                    let (samples, err) = shardtool_wds::group_samples(&span_bytes);
                    // The sample the listing found here, by the key its source ends with: a
                    // shard replaced by another of the same size since is read at old places.
                    let listed = (job.source.strip_prefix(c.source.as_str()))
                        .and_then(|k| k.strip_prefix(':'));
                    let changed = |found: String| {
                        fail(
                            "changed",
                            format!(
                                "{} changed since its samples were listed: {found} where sample \
                                 {:?} was",
                                c.source,
                                listed.unwrap_or_default()
                            ),
                        )
                    };
                    let sample = match (samples.len(), err) {
                        (1, None) => &samples[0],
                        _ if !parquet && listed.is_some() => {
                            return Err(changed("no whole sample".into()))
                        }
                        (_, Some(e)) => return Err(fail("bad_shard", e.to_string())),
                        (n, None) => {
                            return Err(fail(
                                "bad_shard",
                                format!("{n} samples where one was indexed"),
                            ))
                        }
                    };
                    if !parquet && listed.is_some_and(|k| k != sample.key) {
                        return Err(changed(format!("sample {:?}", sample.key)));
                    }
                    let fields = || sample.fields.iter().map(|(f, _)| f.as_str());
                    // A named image field (WebDataset input); Parquet's image is staged as one.
                    let image_field = match shared.columns.image.as_deref() {
                        Some(named) if !parquet => fields().find(|f| f.eq_ignore_ascii_case(named)),
                        _ => shardtool_wds::image_field(fields()),
                    }
                    .ok_or_else(|| fail("no_image", "the sample has no image field".into()))?;
                    let mut image = 0..0;
                    for (field, data) in &sample.fields {
                        if field == image_field && image.is_empty() {
                            let at = data.as_ptr() as usize - span_bytes.as_ptr() as usize;
                            image = at..at + data.len();
                        } else if field == shardtool_wds::LABEL_FIELD {
                            // The label is the input's; the shard gets it as `.cls` again.
                        } else if parquet && field == crate::parquet::COLUMNS_FIELD {
                            if let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(data) {
                                columns = m;
                            }
                        } else if let Some(m) = (field == "json")
                            .then(|| crate::sample_read::own_metadata(data))
                            .flatten()
                        {
                            // Re-packing shardtool's shards: the metadata is made anew for the
                            // new image (a carried copy would state the old size); what else it
                            // held is kept as columns (its source as `input_source`).
                            columns = m;
                        } else if !shardtool_manifest::is_field_name(field) {
                            return Err(fail(
                                "bad_field",
                                format!(
                                    "field {field:?} cannot be carried: a field name is 1 to 64 \
                                     of a-z 0-9 _ - . (not starting or ending with .)"
                                ),
                            ));
                        } else if carried.iter().all(|(f, _)| f != field) {
                            carried.push((field.clone(), data.to_vec()));
                        }
                    }
                    if image.len() as u64 > spec.limits.max_input_bytes {
                        return Err(fail(
                            "too_large",
                            format!(
                                "{} bytes, over the {}-byte input limit",
                                image.len(),
                                spec.limits.max_input_bytes
                            ),
                        ));
                    }
                    (span_bytes, image)
                }
                ContainerKind::Csv { .. } | ContainerKind::Jsonl => {
                    let (text, cols) = row_columns(&span_bytes, &c.kind, &shared.columns)
                        .map_err(|m| fail("bad_list_row", format!("{}: {m}", c.source)))?;
                    if let Some(text) = text {
                        carried.push(("txt".into(), text.into_bytes()));
                    }
                    columns = cols;
                    let b = read_bounded(&job.path, spec.limits.max_input_bytes, job.planned_size)
                        .map_err(|(kind, m)| fail(kind, m))?;
                    let n = b.len();
                    (b, 0..n)
                }
            }
        }
    };
    if let Some(key) = &job.own_key {
        columns.insert("key".into(), key.as_str().into());
    }
    carried.sort_by(|a, b| a.0.cmp(&b.0));
    // The image, `.json` and `.cls` besides them.
    let most = shardtool_wds::MAX_SAMPLE_MEMBERS - 3;
    if carried.len() > most {
        return Err(fail(
            "bad_field",
            format!(
                "it carries {} fields besides its image, over the {most} a sample may",
                carried.len()
            ),
        ));
    }
    let carried_bytes: u64 = carried.iter().map(|(_, d)| d.len() as u64).sum();
    if carried_bytes > MAX_CARRIED_BYTES {
        return Err(fail(
            "too_large",
            format!(
                "its fields besides the image take {carried_bytes} bytes, over the \
                 {MAX_CARRIED_BYTES} a sample may carry"
            ),
        ));
    }
    if let Some(why) = carried
        .iter()
        .find_map(|(field, data)| carried_problem(field, data, &job.key, shared.renumbered))
    {
        return Err(fail("bad_field", why));
    }
    let read = t.elapsed();
    let out =
        transform(&bytes[image.clone()], spec).map_err(|e| fail(e.kind.as_str(), e.message))?;
    let problem = match &out.output {
        Output::Encoded { field, .. } => tar_member_problem(&job.key, field, &carried),
        Output::Pixels(_) => packed_record_problem(&carried),
    };
    if let Some((kind, why)) = problem {
        return Err(fail(kind, why));
    }
    let mut meta = serde_json::json!({
        "key": job.key,
        "source": src,
        "label": job.label,
        "class": class,
        "orig_width": out.orig_width,
        "orig_height": out.orig_height,
        "width": out.width,
        "height": out.height,
    });
    if let Some(m) = meta.as_object_mut().filter(|_| out.orientation > 1) {
        // Carried fields (a mask, boxes) are not turned: this says how the image was.
        m.insert("orientation".into(), out.orientation.into());
    }
    if job.label < 0 {
        if let Some(m) = meta.as_object_mut() {
            m.remove("label");
            m.remove("class");
        }
    }
    let any_columns = !columns.is_empty();
    if let Some(m) = meta.as_object_mut() {
        // A column named as our metadata (or as a member this sample's has) goes under
        // `input_<name>`, prefixed again while that is taken (a column `input_width` beside
        // `width`, a re-pack of our own output): no value is lost.
        let ours = |k: &str| crate::sample_read::OWN_META.contains(&k) || m.contains_key(k);
        let (own, other): (Vec<_>, Vec<_>) = columns.into_iter().partition(|(k, _)| ours(k));
        m.extend(other);
        for (k, v) in own {
            let mut name = format!("input_{k}");
            while m.contains_key(&name) {
                name.insert_str(0, "input_");
            }
            m.insert(name, v);
        }
    }
    // Carried columns make the sample's `.json`: verify allows 1 MiB.
    let json_len = if any_columns {
        serde_json::to_vec(&meta).map_or(0, |j| j.len())
    } else {
        0
    };
    if json_len > shardtool_wds::MAX_TEXT_BYTES {
        return Err(fail(
            "bad_field",
            format!(
                "its columns make a json of {json_len} bytes, over the {} a sample's json may \
                 take",
                shardtool_wds::MAX_TEXT_BYTES
            ),
        ));
    }
    Ok(Done {
        output: out.output,
        meta,
        carried,
        bytes_in: image.len() as u64,
        read,
        timings: out.timings,
    })
}

pub(crate) fn write_errors(path: &Path, errors: &[ErrorRecord]) -> Result<(), PackError> {
    AtomicFile::write(path, &errors::to_jsonl(errors)).map_err(|e| PackError::io(path, e))
}
