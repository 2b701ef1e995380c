//! The pack run: plan the order, transform in parallel inside a bounded window, write in order.

use crate::list_file::row_columns;
use crate::listing::{list_inputs, Columns, Container, ContainerKind, ListOptions};
use crate::plan::{PackPlan, ShardFormatChoice};
use crate::sink::{Payload, ShardSink};
use crate::{ErrorRecord, PackError};
use shardtool_core::AtomicFile;
use shardtool_core::{index_key, shuffle, validate_key};
use shardtool_image::{transform, Encode, Output, Timings, TransformSpec};
use shardtool_manifest::{self as manifest, InputCounts, Manifest};
use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::Path;
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
    /// Inputs that failed, in input order (also in `errors.jsonl`).
    pub errors: Vec<ErrorRecord>,
    /// Bytes of input files read.
    pub bytes_in: u64,
    /// Bytes of shard files written.
    pub bytes_out: u64,
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
}

/// Ignores progress.
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _: &ProgressSnapshot) {}
}

/// Marks a position of the shuffled order whose input was rejected before transforming.
const REJECTED: u32 = u32::MAX;

/// An input in flight: where it goes, under which key and report name.
struct Job {
    /// The image file (for a plain input or a list row).
    path: std::path::PathBuf,
    /// The container and span it is read from, if any.
    container: Option<(u32, (u64, u64))>,
    label: i64,
    key: String,
    source: String,
}

/// A finished transform.
struct Done {
    output: Output,
    meta: serde_json::Value,
    /// Fields carried from the input byte for byte (`txt`, an input `json`, …), sorted by name.
    carried: Vec<(String, Vec<u8>)>,
    bytes_in: u64,
    read: Duration,
    timings: Timings,
}

/// What the workers share: where containers are and which columns a list row carries.
struct Shared {
    containers: Vec<Container>,
    columns: Columns,
}

/// Removes the files a pack staged (fetched inputs, Parquet files as tars) when it ends, however
/// it ends.
struct StagedFiles(Vec<std::path::PathBuf>);

impl Drop for StagedFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Runs a whole pack.
pub fn pack(plan: &PackPlan, progress: &dyn Progress) -> Result<PackReport, PackError> {
    let start = Instant::now();
    plan.validate()?;
    let options = ListOptions {
        columns: plan.columns.clone(),
        stage_dir: plan.output.clone(),
        max_input_bytes: plan.transform.limits.max_input_bytes,
        jobs: plan.jobs,
    };
    // Inputs staged in the output folder need it first; others are listed before touching it.
    let stages = matches!(
        plan.source,
        crate::InputSource::Wds(_) | crate::InputSource::Parquet(_)
    );
    if stages {
        prepare_output(plan)?;
    }
    let mut listing = list_inputs(&plan.source, &options).map_err(PackError::Inputs)?;
    let _staged = StagedFiles(std::mem::take(&mut listing.staged));
    if !stages {
        prepare_output(plan)?;
    }
    if listing.inputs.is_empty() && listing.errors.is_empty() {
        return Err(PackError::NoImages {
            looked_for: listing.looked_for,
            failed: 0,
            report: plan.output.join("errors.jsonl"),
        });
    }

    let mut transform_spec = plan.transform;
    if plan.format == ShardFormatChoice::Packed {
        transform_spec.encode = Encode::Raw;
    }

    let inputs = std::mem::take(&mut listing.inputs);
    let n = inputs.len();
    if n >= REJECTED as usize {
        return Err(PackError::TooManyInputs {
            count: n as u64,
            max: u64::from(REJECTED - 1),
        });
    }
    // The order depends only on the listing (sorted) and the seed. Shuffling indices moves
    // exactly as shuffling the inputs themselves would (Fisher–Yates only swaps positions), and
    // costs 4 bytes per input; `order[p]` is the input at position `p`, whose generated key is
    // made from `p`.
    let mut order: Vec<u32> = (0..n as u32).collect();
    if let Some(seed) = plan.seed {
        shuffle(&mut order, seed);
    }
    let mut errors: Vec<(usize, ErrorRecord)> = Vec::new();
    let origin = listing.origin.clone();
    let found = n as u64 + listing.errors.len() as u64;
    // Keys given by a list must be valid and unique, and must not take a generated key. Only
    // lists can give keys, and only their keys are held (borrowed from the store): generated keys
    // are unique by construction, so a set of them would cost memory per input for nothing.
    // Rejected positions are marked in `order` rather than removed.
    if inputs.has_keys() {
        let explicit: HashSet<&str> = inputs.iter().filter_map(|i| i.key).collect();
        let mut seen_explicit = HashSet::new();
        for (position, slot) in order.iter_mut().enumerate() {
            let item = inputs.get(*slot as usize);
            let generated;
            let (key, clash) = match item.key {
                Some(k) => (k, !seen_explicit.insert(k)),
                None => {
                    generated = index_key(position as u64);
                    (generated.as_str(), explicit.contains(generated.as_str()))
                }
            };
            let problem = match validate_key(key) {
                Err(e) => Some(("bad_key", format!("key {key:?}: {e}"))),
                Ok(()) if clash => Some((
                    "duplicate_key",
                    format!("key {key:?} is used by another input"),
                )),
                Ok(()) => None,
            };
            if let Some((kind, message)) = problem {
                errors.push((
                    position,
                    ErrorRecord::new(origin.source(&item), kind, message),
                ));
                *slot = REJECTED;
            }
        }
    }
    let mut failed_early: Vec<ErrorRecord> = listing.errors;

    let mut snapshot = ProgressSnapshot {
        total: found,
        done: failed_early.len() as u64 + errors.len() as u64,
        failed: failed_early.len() as u64 + errors.len() as u64,
        ..Default::default()
    };
    progress.update(&snapshot);
    let errors_path = plan.output.join("errors.jsonl");
    let check_max = |failed: u64| -> Result<(), PackError> {
        match plan.max_errors {
            Some(max) if failed > max => Err(PackError::TooManyErrors {
                failed,
                max,
                report: errors_path.clone(),
            }),
            _ => Ok(()),
        }
    };

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(plan.jobs)
        .thread_name(|i| format!("pack-{i}"))
        .build()
        .map_err(|e| PackError::ThreadSpawn {
            threads: plan.jobs,
            cause: e.to_string(),
        })?;
    // In-flight images are bounded by the window, so memory does not grow with the dataset.
    let window = (plan.jobs * 4).max(8);
    let (tx, rx) = mpsc::channel::<(usize, Result<Done, ErrorRecord>)>();
    let mut sink = ShardSink::new(plan);
    let mut stages = StageTimes::default();
    let mut bytes_in = 0u64;
    // Results that arrived before their turn; at most `window` entries.
    let mut pending: BTreeMap<usize, Result<Done, ErrorRecord>> = BTreeMap::new();
    let skip_rejected = |p: &mut usize| {
        while *p < n && order[*p] == REJECTED {
            *p += 1;
        }
    };
    let (mut next_submit, mut next_write) = (0usize, 0usize);
    skip_rejected(&mut next_submit);
    skip_rejected(&mut next_write);
    let mut in_flight = 0usize;
    let classes = listing.classes.clone();
    let shared = std::sync::Arc::new(Shared {
        containers: std::mem::take(&mut listing.containers),
        columns: plan.columns.clone(),
    });
    let mut outcome = check_max(snapshot.failed);
    while outcome.is_ok() && next_write < n {
        while next_submit < n && in_flight < window {
            let position = next_submit;
            let item = inputs.get(order[position] as usize);
            let job = Job {
                key: item
                    .key
                    .map_or_else(|| index_key(position as u64), str::to_string),
                source: origin.source(&item),
                path: origin.resolve(&item),
                container: item.container.zip(item.span),
                label: item.label,
            };
            let class = class_name(&classes, job.label);
            let tx = tx.clone();
            let shared = shared.clone();
            pool.spawn(move || {
                let r =
                    std::panic::catch_unwind(|| process(&job, &class, &transform_spec, &shared))
                        .unwrap_or_else(|_| {
                            Err(ErrorRecord::new(
                                &job.source,
                                "internal",
                                "the image stage panicked",
                            ))
                        });
                let _ = tx.send((position, r));
            });
            in_flight += 1;
            next_submit += 1;
            skip_rejected(&mut next_submit);
        }
        let Ok((i, r)) = rx.recv() else { break };
        pending.insert(i, r);
        while let Some(r) = pending.remove(&next_write) {
            let position = next_write;
            let item = inputs.get(order[position] as usize);
            in_flight -= 1;
            next_write += 1;
            skip_rejected(&mut next_write);
            snapshot.done += 1;
            match r {
                Ok(done) => {
                    bytes_in += done.bytes_in;
                    snapshot.bytes_in = bytes_in;
                    stages.read += done.read;
                    stages.decode += done.timings.decode;
                    stages.resize += done.timings.resize;
                    stages.encode += done.timings.encode;
                    let t = Instant::now();
                    let payload = match &done.output {
                        Output::Encoded { bytes, field, .. } => Payload::Encoded(bytes, field),
                        Output::Pixels(img) => Payload::Pixels {
                            height: img.height,
                            width: img.width,
                            pixels: &img.pixels,
                        },
                    };
                    let key = item
                        .key
                        .map_or_else(|| index_key(position as u64), str::to_string);
                    let res = sink.add(&key, item.label, payload, &done.meta, &done.carried);
                    stages.write += t.elapsed();
                    if let Err(e) = res {
                        outcome = Err(e);
                        break;
                    }
                    snapshot.shards = sink.entries.len() as u64;
                }
                Err(e) => {
                    errors.push((position, e));
                    snapshot.failed += 1;
                    if let Err(e) = check_max(snapshot.failed) {
                        outcome = Err(e);
                        break;
                    }
                }
            }
            progress.update(&snapshot);
        }
    }
    drop(tx);
    if outcome.is_ok() {
        let t = Instant::now();
        outcome = sink.roll();
        stages.write += t.elapsed();
        snapshot.shards = sink.entries.len() as u64;
        progress.update(&snapshot);
    }

    // The report is written even when the run aborts, so no failure is ever silent.
    errors.sort_by_key(|(i, _)| *i);
    failed_early.extend(errors.into_iter().map(|(_, e)| e));
    let errors = failed_early;
    write_errors(&errors_path, &errors)?;
    outcome?;

    let (fields, optional_fields) = sink.fields();
    let mut manifest = Manifest::new(
        format!("shardtool {}", env!("CARGO_PKG_VERSION")),
        if listing.labelled {
            listing.classes
        } else {
            Vec::new()
        },
        fields,
        std::mem::take(&mut sink.entries),
    );
    manifest.optional_fields = optional_fields;
    debug_assert_eq!(manifest.totals.bytes, sink.bytes_out);
    manifest.pack = plan.manifest_options();
    if sink.input_json {
        manifest
            .pack
            .insert("json".into(), serde_json::Value::String("input".into()));
    }
    manifest.inputs = InputCounts {
        found,
        packed: manifest.totals.samples,
        failed: errors.len() as u64,
        ignored: listing.ignored,
    };
    let manifest_path = plan.output.join(manifest::FILE_NAME);
    AtomicFile::write(&manifest_path, &manifest.to_json())
        .map_err(|e| PackError::io(&manifest_path, e))?;
    Ok(PackReport {
        bytes_out: manifest.totals.bytes,
        manifest,
        errors,
        bytes_in,
        elapsed: start.elapsed(),
        stages,
    })
}

fn class_name(classes: &[String], label: i64) -> String {
    usize::try_from(label)
        .ok()
        .and_then(|i| classes.get(i))
        .cloned()
        .unwrap_or_else(|| label.to_string())
}

/// Names our metadata uses; a carried column of the same name is stored as `input_<name>`.
const OWN_META: [&str; 8] = [
    "key",
    "source",
    "label",
    "class",
    "orig_width",
    "orig_height",
    "width",
    "height",
];

/// Reads and transforms one input. Runs on a worker thread.
fn process(
    job: &Job,
    class: &str,
    spec: &TransformSpec,
    shared: &Shared,
) -> Result<Done, ErrorRecord> {
    let src = &job.source;
    let fail = |kind: &str, m: String| ErrorRecord::new(src, kind, m);
    let t = Instant::now();
    let mut carried: Vec<(String, Vec<u8>)> = Vec::new();
    let mut columns = serde_json::Map::new();
    // The sample's bytes, and where its image is in them.
    let (bytes, image) = match job.container {
        None => {
            let b = read_bounded(&job.path, spec.limits.max_input_bytes)
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
                    let sample = match (samples.len(), err) {
                        (1, None) => &samples[0],
                        (_, Some(e)) => return Err(fail("bad_shard", e.to_string())),
                        (n, None) => {
                            return Err(fail(
                                "bad_shard",
                                format!("{n} samples where one was indexed"),
                            ))
                        }
                    };
                    let image_field = shardtool_wds::image_field(
                        sample.fields.iter().map(|(f, _)| f.as_str()),
                    )
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
                    let b = read_bounded(&job.path, spec.limits.max_input_bytes)
                        .map_err(|(kind, m)| fail(kind, m))?;
                    let n = b.len();
                    (b, 0..n)
                }
            }
        }
    };
    carried.sort_by(|a, b| a.0.cmp(&b.0));
    let read = t.elapsed();
    let out =
        transform(&bytes[image.clone()], spec).map_err(|e| fail(e.kind.as_str(), e.message))?;
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
    if job.label < 0 {
        if let Some(m) = meta.as_object_mut() {
            m.remove("label");
            m.remove("class");
        }
    }
    if let Some(m) = meta.as_object_mut() {
        for (k, v) in columns {
            let k = if OWN_META.contains(&k.as_str()) {
                format!("input_{k}")
            } else {
                k
            };
            m.entry(k).or_insert(v);
        }
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

/// Bytes a sample may carry besides its image (captions, metadata, other fields).
const MAX_CARRIED_BYTES: u64 = 16 << 20;

/// Reads `[start, end)` of a container file, refusing spans over `limit` bytes.
fn read_span(
    path: &Path,
    (start, end): (u64, u64),
    limit: u64,
) -> Result<Vec<u8>, (&'static str, String)> {
    use std::os::unix::fs::FileExt;
    let len = end - start;
    if len > limit {
        return Err((
            "too_large",
            format!("the sample is {len} bytes, over the {limit}-byte limit"),
        ));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| ("unreadable", format!("{}: {e}", path.display())))?;
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, start)
        .map_err(|e| ("unreadable", format!("{}: {e}", path.display())))?;
    Ok(bytes)
}

/// Reads a whole file, refusing (before reading) files over `limit` bytes.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, (&'static str, String)> {
    let unreadable = |e: std::io::Error| ("unreadable", format!("cannot read: {e}"));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let len = file.metadata().map_err(unreadable)?.len();
    if len > limit {
        return Err((
            "too_large",
            format!("{len} bytes, over the {limit}-byte input limit"),
        ));
    }
    if len == 0 {
        return Err(("decode", "empty file".into()));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // `take` guards against a file that grows while we read it.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > limit {
        return Err(("too_large", format!("over the {limit}-byte input limit")));
    }
    Ok(bytes)
}

fn write_errors(path: &Path, errors: &[ErrorRecord]) -> Result<(), PackError> {
    let mut out = Vec::new();
    for e in errors {
        serde_json::to_writer(&mut out, e).map_err(|e| PackError::io(path, e.into()))?;
        out.push(b'\n');
    }
    AtomicFile::write(path, &out).map_err(|e| PackError::io(path, e))
}

/// Makes sure `output` exists and holds no dataset, clearing an old one with `--overwrite`.
fn prepare_output(plan: &PackPlan) -> Result<(), PackError> {
    let out = &plan.output;
    let io = |e| PackError::io(out, e);
    if out.exists() {
        if !out.is_dir() {
            return Err(PackError::OutputNotAFolder { path: out.clone() });
        }
        let entries: Vec<_> = std::fs::read_dir(out)
            .map_err(io)?
            .collect::<Result<_, _>>()
            .map_err(io)?;
        if entries.is_empty() {
            return Ok(());
        }
        if !plan.overwrite {
            return Err(PackError::OutputNotEmpty { path: out.clone() });
        }
        // The manifest goes first, so an interrupted overwrite leaves a visibly incomplete dataset.
        for e in &entries {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == manifest::FILE_NAME {
                std::fs::remove_file(e.path()).map_err(io)?;
            }
        }
        for e in entries {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let ours = name == "errors.jsonl"
                || (name.starts_with('.') && name.ends_with(".tmp"))
                || manifest::ShardKind::from_name(&name).is_some();
            if ours && e.path().is_file() {
                std::fs::remove_file(e.path()).map_err(io)?;
            }
        }
        Ok(())
    } else {
        std::fs::create_dir_all(out).map_err(io)
    }
}
