//! Partitioned packing: a frozen plan (`OUTPUT/_plan/`), parts that pack the shards assigned to
//! them and record each one done, and a merge that commits the dataset by writing its manifest.
//!
//! Shard `j` holds positions `[jK, (j+1)K)` of the seeded permutation, so what a shard holds
//! never depends on how many parts run or in what order. A shard is published atomically, then
//! its done record; a part skips shards whose done record matches the plan, and redoing one
//! writes the same bytes, so a repeated or speculative attempt is harmless. The merge reads done
//! records (never directory listings) and writes `errors.jsonl`, then `manifest.json` last.

use crate::listing::{Container, ContainerKind, Inputs, Listing, Origin};
use crate::pipeline::{
    build_manifest, effective_spec, list_for, prepare_output, publish_manifest, transform_in_order,
    write_errors, write_sample, ManifestParts, Ordered, Shared, StagedFiles, Tally, UNKNOWN_SIZE,
};
use crate::plan::{FrozenOptions, PackPlan};
use crate::sink::{split_fields, ShardSink};
use crate::{ErrorRecord, PackError, PackReport, Progress, ProgressSnapshot};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use shardtool_core::{AtomicFile, Checksum, HashingWriter};
use shardtool_manifest::{Manifest, ShardEntry};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The folder in OUTPUT that holds the plan, the staged inputs and the done records.
pub const PLAN_DIR: &str = "_plan";
const PLAN_FILE: &str = "plan.json";
const INPUTS_FILE: &str = "inputs.jsonl";
const DONE_DIR: &str = "done";
const STAGED_DIR: &str = "staged";
const PLAN_VERSION: u32 = 1;
/// The largest `plan.json` read (it holds the listing errors, not the inputs).
const MAX_PLAN_BYTES: u64 = 1 << 30;
/// The largest done record read.
const MAX_DONE_BYTES: u64 = 256 << 20;
/// The largest line of `inputs.jsonl`.
const MAX_INPUT_LINE: u64 = 1 << 20;

/// `OUTPUT/_plan/plan.json`: everything a part needs, fixed once. `hash` covers every other
/// field, and `inputs_checksum` the input list beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Format version.
    pub version: u32,
    /// The plan hash: the checksum of this file with `hash` empty.
    pub hash: String,
    /// The tool that wrote it.
    pub tool: String,
    /// The pack options.
    pub options: FrozenOptions,
    /// Inputs listed (each has a line in `inputs.jsonl`).
    pub inputs: u64,
    /// Positions per shard (K).
    pub shard_samples: u64,
    /// Shards: `ceil(inputs / K)`.
    pub shards: u64,
    /// Inputs found, listed or failed while listing.
    pub found: u64,
    /// Files ignored while listing.
    pub ignored: u64,
    /// Class names.
    pub classes: Vec<String>,
    /// Whether inputs carry labels.
    pub labelled: bool,
    /// What was looked for, and where.
    pub looked_for: String,
    /// What input paths are relative to.
    pub root: PathBuf,
    /// Files inputs are read from by span.
    pub containers: Vec<PlanContainer>,
    /// Inputs that failed while listing.
    pub errors: Vec<ErrorRecord>,
    /// The checksum of `inputs.jsonl`.
    pub inputs_checksum: String,
}

/// A container as the plan records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanContainer {
    /// The local file; relative to `_plan/staged/` when `staged`.
    pub path: PathBuf,
    /// Whether the plan staged it (a fetched URL, a Parquet file as a tar).
    pub staged: bool,
    /// How the user named it.
    pub source: String,
    /// What its spans hold: `tar`, `parquet`, `jsonl` or `csv`.
    pub kind: String,
    /// A CSV list's header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// Its size when planned.
    pub size: Option<u64>,
}

/// `OUTPUT/_plan/done/NNNNNN.json`: shard `shard` is published and holds this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DoneRecord {
    /// The plan hash it was made under.
    pub plan: String,
    /// The shard index.
    pub shard: u64,
    /// Its manifest entry, or none when every input of the shard failed (no file).
    pub entry: Option<ShardEntry>,
    /// How many of its samples carry each field.
    pub fields: BTreeMap<String, u64>,
    /// Whether a sample's `.json` is the input's.
    pub input_json: bool,
    /// Its inputs that failed, in position order.
    pub errors: Vec<ErrorRecord>,
}

/// Which shards a part packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Part `index` of `count`: shards `j` with `j % count == index`.
    Part {
        /// Zero-based part index.
        index: u64,
        /// Number of parts.
        count: u64,
    },
    /// Named shards.
    Shards(Vec<u64>),
}

/// What a part did.
#[derive(Debug, Clone, Default)]
pub struct PartReport {
    /// Shards assigned.
    pub assigned: u64,
    /// Shards already done, skipped.
    pub skipped: u64,
    /// Shards packed by this run.
    pub packed: u64,
    /// Samples written by this run.
    pub samples: u64,
    /// Inputs that failed in this run.
    pub failed: u64,
    /// Input bytes read.
    pub bytes_in: u64,
    /// Shard bytes written.
    pub bytes_out: u64,
    /// Wall time.
    pub elapsed: std::time::Duration,
    /// Time per stage.
    pub stages: crate::StageTimes,
}

/// Where a partitioned pack stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanStatus {
    /// The plan hash.
    pub plan: String,
    /// Shards in the plan.
    pub shards: u64,
    /// Shards done.
    pub done: Vec<u64>,
    /// Shards not done (no done record of this plan, or its shard file is missing).
    pub missing: Vec<u64>,
    /// Samples in done shards.
    pub samples: u64,
    /// Failed inputs in done shards.
    pub failed: u64,
    /// Whether a manifest has been written.
    pub merged: bool,
}

fn plan_dir(output: &Path) -> PathBuf {
    output.join(PLAN_DIR)
}

fn done_path(output: &Path, shard: u64) -> PathBuf {
    plan_dir(output)
        .join(DONE_DIR)
        .join(format!("{shard:06}.json"))
}

fn kind_name(kind: &ContainerKind) -> (&'static str, Vec<String>) {
    match kind {
        ContainerKind::Tar => ("tar", Vec::new()),
        ContainerKind::Parquet => ("parquet", Vec::new()),
        ContainerKind::Jsonl => ("jsonl", Vec::new()),
        ContainerKind::Csv { headers } => ("csv", headers.clone()),
    }
}

fn bad_plan(path: &Path, message: impl Into<String>) -> PackError {
    PackError::BadPlan {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The plan hash of `file` (its JSON with `hash` empty).
fn plan_hash(file: &PlanFile) -> String {
    let mut f = file.clone();
    f.hash.clear();
    Checksum::of(&serde_json::to_vec(&f).unwrap_or_default()).to_string()
}

/// Lists the inputs of `plan` once and writes `OUTPUT/_plan/` (the input list, then `plan.json`
/// last, so a plan exists only whole). Needs `shard_samples`. Remote and Parquet inputs are
/// staged under `_plan/staged/`, where every part reads them, until the merge.
pub fn make_plan(plan: &PackPlan) -> Result<PlanFile, PackError> {
    plan.validate()?;
    let k = plan
        .shard_samples
        .ok_or(PackError::Plan(crate::PlanError::NeedShardSamples))?;
    let output = &plan.output;
    let dir = plan_dir(output);
    if dir.join(PLAN_FILE).exists() && !plan.overwrite {
        return Err(PackError::PlanExists {
            path: dir.join(PLAN_FILE),
        });
    }
    let staged_dir = dir.join(STAGED_DIR);
    let mut listing = list_for(plan, &staged_dir, || prepare_output(plan))?;
    // Staged files stay for the parts, unless planning fails.
    let mut staged = StagedFiles(std::mem::take(&mut listing.staged));
    if listing.inputs.is_empty() && listing.errors.is_empty() {
        return Err(PackError::NoImages {
            looked_for: listing.looked_for,
            failed: 0,
            report: output.join("errors.jsonl"),
        });
    }
    std::fs::create_dir_all(dir.join(DONE_DIR)).map_err(|e| PackError::io(&dir, e))?;
    let root = std::path::absolute(&listing.origin.root)
        .map_err(|e| PackError::io(&listing.origin.root, e))?;
    let staged_abs = std::path::absolute(&staged_dir).map_err(|e| PackError::io(&staged_dir, e))?;
    let mut containers = Vec::with_capacity(listing.containers.len());
    for c in &listing.containers {
        let abs = std::path::absolute(&c.path).map_err(|e| PackError::io(&c.path, e))?;
        let (path, is_staged) = match abs.strip_prefix(&staged_abs) {
            Ok(rel) => (rel.to_path_buf(), true),
            Err(_) => (abs.clone(), false),
        };
        let (kind, headers) = kind_name(&c.kind);
        containers.push(PlanContainer {
            path,
            staged: is_staged,
            source: c.source.clone(),
            kind: kind.into(),
            headers,
            size: std::fs::metadata(&abs).ok().map(|m| m.len()),
        });
    }
    // Sizes of plain inputs, so a part can tell an input that changed since.
    let inputs = &listing.inputs;
    let origin = Origin { root: root.clone() };
    let sizes: Vec<u64> = (0..inputs.len())
        .into_par_iter()
        .map(|i| {
            let item = inputs.get(i);
            if item.container.is_some() && item.span.is_some() {
                return UNKNOWN_SIZE;
            }
            std::fs::metadata(origin.resolve(&item)).map_or(UNKNOWN_SIZE, |m| m.len())
        })
        .collect();
    let inputs_path = dir.join(INPUTS_FILE);
    let io = |e| PackError::io(&inputs_path, e);
    let mut w = std::io::BufWriter::with_capacity(
        1 << 20,
        HashingWriter::new(AtomicFile::create(&inputs_path).map_err(io)?),
    );
    for (i, item) in inputs.iter().enumerate() {
        let line = serde_json::json!([
            path_value(item.dir),
            path_value(item.name),
            item.label,
            item.key,
            item.container,
            item.span,
            (sizes[i] != UNKNOWN_SIZE).then_some(sizes[i]),
        ]);
        serde_json::to_writer(&mut w, &line).map_err(|e| io(e.into()))?;
        w.write_all(b"\n").map_err(io)?;
    }
    let (file, _, inputs_checksum) = w.into_inner().map_err(|e| io(e.into_error()))?.into_parts();
    file.commit().map_err(io)?;

    let n = inputs.len() as u64;
    let mut file = PlanFile {
        version: PLAN_VERSION,
        hash: String::new(),
        tool: format!("shardtool {}", env!("CARGO_PKG_VERSION")),
        options: plan.frozen(),
        inputs: n,
        shard_samples: k,
        shards: n.div_ceil(k),
        found: n + listing.errors.len() as u64,
        ignored: listing.ignored,
        classes: listing.classes.clone(),
        labelled: listing.labelled,
        looked_for: listing.looked_for.clone(),
        root,
        containers,
        errors: listing.errors.clone(),
        inputs_checksum: inputs_checksum.to_string(),
    };
    file.hash = plan_hash(&file);
    let path = dir.join(PLAN_FILE);
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| PackError::io(&path, e.into()))?;
    AtomicFile::write(&path, &bytes).map_err(|e| PackError::io(&path, e))?;
    staged.0.clear();
    Ok(file)
}

/// A path component as JSON: a string, or its bytes when it is not UTF-8.
fn path_value(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.into(),
        Err(_) => bytes.iter().map(|&b| serde_json::Value::from(b)).collect(),
    }
}

fn path_bytes(v: &serde_json::Value) -> Option<Vec<u8>> {
    match v {
        serde_json::Value::String(s) => Some(s.as_bytes().to_vec()),
        serde_json::Value::Array(a) => a
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect(),
        _ => None,
    }
}

/// Reads and checks `OUTPUT/_plan/plan.json`.
pub fn read_plan(output: &Path) -> Result<PlanFile, PackError> {
    let path = plan_dir(output).join(PLAN_FILE);
    let bytes = match read_limited(&path, MAX_PLAN_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PackError::NoPlan {
                path: output.to_path_buf(),
            })
        }
        Err(e) => return Err(PackError::io(&path, e)),
    };
    let file: PlanFile =
        serde_json::from_slice(&bytes).map_err(|e| bad_plan(&path, e.to_string()))?;
    if file.version != PLAN_VERSION {
        return Err(bad_plan(
            &path,
            format!(
                "plan version {} (this shardtool reads {PLAN_VERSION})",
                file.version
            ),
        ));
    }
    if plan_hash(&file) != file.hash {
        return Err(bad_plan(
            &path,
            "its hash does not match its content: it was edited or damaged",
        ));
    }
    if file.shard_samples == 0 || file.shards != file.inputs.div_ceil(file.shard_samples) {
        return Err(bad_plan(&path, "shard counts do not add up"));
    }
    Ok(file)
}

fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!(
            "over the {limit}-byte limit"
        )));
    }
    Ok(bytes)
}

/// A plan loaded for packing.
struct Loaded {
    file: PlanFile,
    plan: PackPlan,
    ordered: Ordered,
    shared: std::sync::Arc<Shared>,
    /// Identity of `plan.json` when loaded, to notice a plan replaced while a part runs.
    stamp: Option<(u64, u64, std::time::SystemTime)>,
}

fn plan_stamp(output: &Path) -> Option<(u64, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(plan_dir(output).join(PLAN_FILE)).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()?))
}

fn load(output: &Path, jobs: Option<usize>) -> Result<Loaded, PackError> {
    let stamp = plan_stamp(output);
    let file = read_plan(output)?;
    let mut plan = PackPlan::from_frozen(&file.options, output.to_path_buf())
        .map_err(|m| bad_plan(&plan_dir(output).join(PLAN_FILE), m))?;
    if let Some(j) = jobs {
        plan.jobs = j;
    }
    plan.shard_samples = Some(file.shard_samples);
    let staged = plan_dir(output).join(STAGED_DIR);
    let mut containers = Vec::with_capacity(file.containers.len());
    let mut changed = Vec::with_capacity(file.containers.len());
    for c in &file.containers {
        let path = if c.staged {
            staged.join(&c.path)
        } else {
            c.path.clone()
        };
        let kind = match c.kind.as_str() {
            "tar" => ContainerKind::Tar,
            "parquet" => ContainerKind::Parquet,
            "jsonl" => ContainerKind::Jsonl,
            "csv" => ContainerKind::Csv {
                headers: c.headers.clone(),
            },
            other => {
                return Err(bad_plan(
                    &plan_dir(output).join(PLAN_FILE),
                    format!("unknown container kind {other:?}"),
                ))
            }
        };
        let now = std::fs::metadata(&path).ok().map(|m| m.len());
        changed.push(c.size.is_some() && now != c.size);
        containers.push(Container {
            path,
            source: c.source.clone(),
            kind,
        });
    }
    let (inputs, planned_sizes) = read_inputs(output, &file)?;
    let ordered = Ordered::new(
        inputs,
        Origin {
            root: file.root.clone(),
        },
        plan.seed,
    )?;
    let shared = std::sync::Arc::new(Shared {
        containers,
        columns: plan.columns.clone(),
        changed,
        planned_sizes,
    });
    Ok(Loaded {
        file,
        plan,
        ordered,
        shared,
        stamp,
    })
}

/// Reads `inputs.jsonl` back into the compact store, checking it against the plan.
fn read_inputs(output: &Path, file: &PlanFile) -> Result<(Inputs, Vec<u64>), PackError> {
    let path = plan_dir(output).join(INPUTS_FILE);
    let bad = |m: String| bad_plan(&path, m);
    let f = std::fs::File::open(&path).map_err(|e| PackError::io(&path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, f);
    let mut hasher = shardtool_core::ChecksumHasher::new();
    let mut inputs = Inputs::default();
    let mut sizes = Vec::with_capacity(usize::try_from(file.inputs).unwrap_or(0).min(1 << 28));
    let mut dirs: HashMap<(Vec<u8>, Option<u32>), u32> = HashMap::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let read = std::io::Read::take(&mut reader, MAX_INPUT_LINE + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| PackError::io(&path, e))?;
        if read == 0 {
            break;
        }
        number += 1;
        if line.last() != Some(&b'\n') {
            return Err(bad(format!("line {number} is cut short or too long")));
        }
        hasher.update(&line);
        let v: serde_json::Value =
            serde_json::from_slice(&line).map_err(|e| bad(format!("line {number}: {e}")))?;
        let parsed = (|| {
            let a = v.as_array().filter(|a| a.len() == 7)?;
            let dir = path_bytes(&a[0])?;
            let name = path_bytes(&a[1])?;
            let label = a[2].as_i64()?;
            let key = match &a[3] {
                serde_json::Value::Null => None,
                k => Some(k.as_str()?.to_string()),
            };
            let container = match &a[4] {
                serde_json::Value::Null => None,
                c => Some(u32::try_from(c.as_u64()?).ok()?),
            };
            let span = match &a[5] {
                serde_json::Value::Null => None,
                s => {
                    let s = s.as_array().filter(|s| s.len() == 2)?;
                    Some((s[0].as_u64()?, s[1].as_u64()?))
                }
            };
            let size = a[6].as_u64().unwrap_or(UNKNOWN_SIZE);
            Some((dir, name, label, key, container, span, size))
        })();
        let Some((dir, name, label, key, container, span, size)) = parsed else {
            return Err(bad(format!("line {number} is not an input record")));
        };
        if container.is_some_and(|c| c as usize >= file.containers.len()) {
            return Err(bad(format!("line {number} names an unknown container")));
        }
        let label = if label < 0 {
            None
        } else {
            Some(u32::try_from(label).map_err(|_| bad(format!("line {number}: bad label")))?)
        };
        let next = dirs.len() as u32;
        let d = *dirs.entry((dir.clone(), container)).or_insert(next);
        if d == next {
            inputs.add_container_dir(&dir, container);
        }
        let pushed = match span {
            Some(span) => inputs.push_span(d, &name, label, key.as_deref(), span),
            None => inputs.push(d, &name, label, key.as_deref()),
        };
        pushed.map_err(|e| bad(format!("line {number}: {e}")))?;
        sizes.push(size);
    }
    if number != file.inputs || hasher.checksum().to_string() != file.inputs_checksum {
        return Err(bad(
            "it does not match the plan (edited, damaged or from another plan)".into(),
        ));
    }
    inputs.shrink_to_fit();
    Ok((inputs, sizes))
}

/// The shards `assignment` names in a plan of `shards` shards, ascending.
fn assigned(assignment: &Assignment, shards: u64) -> Result<Vec<u64>, PackError> {
    match assignment {
        Assignment::Part { index, count } => {
            if *count == 0 || index >= count {
                return Err(PackError::BadPart {
                    message: format!("part {index}/{count}: the index must be below the count"),
                });
            }
            Ok((*index..shards).step_by(*count as usize).collect())
        }
        Assignment::Shards(list) => {
            let mut list = list.clone();
            list.sort_unstable();
            list.dedup();
            if let Some(&bad) = list.iter().find(|&&j| j >= shards) {
                return Err(PackError::BadPart {
                    message: format!(
                        "shard {bad} is not in the plan (shards 0 to {})",
                        shards.saturating_sub(1)
                    ),
                });
            }
            Ok(list)
        }
    }
}

/// The done record of `shard`, if it is done under plan `hash`: the record parses, names this
/// plan, and its shard file is there with the recorded size.
fn read_done(output: &Path, hash: &str, shard: u64) -> Option<DoneRecord> {
    let bytes = read_limited(&done_path(output, shard), MAX_DONE_BYTES).ok()?;
    let rec: DoneRecord = serde_json::from_slice(&bytes).ok()?;
    if rec.plan != hash || rec.shard != shard {
        return None;
    }
    if let Some(e) = &rec.entry {
        let len = std::fs::metadata(output.join(&e.file)).ok()?.len();
        if len != e.bytes {
            return None;
        }
    }
    Some(rec)
}

/// Packs the shards of `assignment` that are not done yet, publishing each with its done record.
/// Succeeds only when every assigned shard is done.
pub fn pack_part(
    output: &Path,
    assignment: &Assignment,
    jobs: Option<usize>,
    max_errors: Option<u64>,
    progress: &dyn Progress,
) -> Result<PartReport, PackError> {
    let start = Instant::now();
    let loaded = load(output, jobs)?;
    let mut report = run_part(&loaded, assignment, max_errors, progress)?;
    report.elapsed = start.elapsed();
    Ok(report)
}

fn run_part(
    loaded: &Loaded,
    assignment: &Assignment,
    max_errors: Option<u64>,
    progress: &dyn Progress,
) -> Result<PartReport, PackError> {
    let file = &loaded.file;
    let output = &loaded.plan.output;
    let shards = assigned(assignment, file.shards)?;
    let todo: Vec<u64> = shards
        .iter()
        .copied()
        .filter(|&j| read_done(output, &file.hash, j).is_none())
        .collect();
    let mut report = PartReport {
        assigned: shards.len() as u64,
        skipped: (shards.len() - todo.len()) as u64,
        ..Default::default()
    };
    let k = file.shard_samples;
    let n = loaded.ordered.len() as u64;
    let range = |j: u64| (j * k) as usize..((j + 1) * k).min(n) as usize;
    // Shards roll only where the plan says: never on size.
    let mut plan = loaded.plan.clone();
    plan.shard_bytes = u64::MAX;
    let spec = effective_spec(&plan);
    let mut sink = ShardSink::new(&plan);
    let mut tally = Tally {
        snapshot: ProgressSnapshot {
            total: todo.iter().map(|&j| range(j).len() as u64).sum(),
            ..Default::default()
        },
        ..Default::default()
    };
    progress.update(&tally.snapshot);
    let rejected = &loaded.ordered.rejected;

    // Per shard being written: its failures, and the field counts when it started.
    let mut shard_errors: Vec<(usize, ErrorRecord)> = Vec::new();
    let mut counts_before: BTreeMap<String, u64> = BTreeMap::new();
    let mut open: Option<u64> = None;
    let mut cursor = 0usize;
    let finish = |j: u64,
                  sink: &mut ShardSink<'_>,
                  shard_errors: &mut Vec<(usize, ErrorRecord)>,
                  counts_before: &mut BTreeMap<String, u64>,
                  report: &mut PartReport|
     -> Result<(), PackError> {
        sink.start_shard(j as usize)?;
        sink.roll()?;
        let name = sink.file_name(j as usize);
        let entry = match sink.entries.last() {
            Some(e) if e.file == name => sink.entries.pop(),
            _ => None,
        };
        let r = range(j);
        let lo = rejected.partition_point(|(p, _)| *p < r.start);
        let hi = rejected.partition_point(|(p, _)| *p < r.end);
        let mut errors: Vec<(usize, ErrorRecord)> = rejected[lo..hi].to_vec();
        errors.append(shard_errors);
        errors.sort_by_key(|(p, _)| *p);
        let counts = sink.field_counts();
        let fields = counts
            .iter()
            .map(|(f, &c)| (f.clone(), c - counts_before.get(f).copied().unwrap_or(0)))
            .filter(|(_, c)| *c > 0)
            .collect();
        *counts_before = counts.clone();
        let rec = DoneRecord {
            plan: file.hash.clone(),
            shard: j,
            entry,
            fields,
            input_json: std::mem::take(&mut sink.input_json),
            errors: errors.into_iter().map(|(_, e)| e).collect(),
        };
        if let Some(e) = &rec.entry {
            report.samples += e.samples;
            report.bytes_out += e.bytes;
        }
        report.failed += rec.errors.len() as u64;
        report.packed += 1;
        if plan_stamp(output) != loaded.stamp {
            return Err(PackError::PlanChanged {
                path: plan_dir(output).join(PLAN_FILE),
            });
        }
        let path = done_path(output, j);
        let bytes = serde_json::to_vec(&rec).map_err(|e| PackError::io(&path, e.into()))?;
        AtomicFile::write(&path, &bytes).map_err(|e| PackError::io(&path, e))
    };
    let check_max = |failed: u64| -> Result<(), PackError> {
        match max_errors {
            Some(max) if failed > max => Err(PackError::TooManyErrors {
                failed,
                max,
                report: plan_dir(output).join(DONE_DIR),
            }),
            _ => Ok(()),
        }
    };
    let positions = todo.iter().flat_map(|&j| range(j));
    transform_in_order(
        &loaded.ordered,
        &file.classes,
        &loaded.shared,
        &spec,
        plan.jobs,
        positions,
        |position, r| {
            let j = position as u64 / k;
            while todo[cursor] < j {
                finish(
                    todo[cursor],
                    &mut sink,
                    &mut shard_errors,
                    &mut counts_before,
                    &mut report,
                )?;
                cursor += 1;
                tally.snapshot.shards += 1;
            }
            if open != Some(j) {
                sink.start_shard(j as usize)?;
                open = Some(j);
            }
            tally.snapshot.done += 1;
            match r {
                Ok(done) => write_sample(&mut sink, &loaded.ordered, position, &done, &mut tally)?,
                Err(e) => {
                    shard_errors.push((position, e));
                    tally.snapshot.failed += 1;
                    check_max(tally.snapshot.failed)?;
                }
            }
            progress.update(&tally.snapshot);
            Ok(())
        },
    )?;
    for &j in &todo[cursor..] {
        finish(
            j,
            &mut sink,
            &mut shard_errors,
            &mut counts_before,
            &mut report,
        )?;
        tally.snapshot.shards += 1;
    }
    progress.update(&tally.snapshot);
    report.bytes_in = tally.bytes_in;
    report.stages = tally.stages;
    Ok(report)
}

/// Where a partitioned pack in `output` stands.
pub fn status(output: &Path) -> Result<PlanStatus, PackError> {
    let file = read_plan(output)?;
    let mut s = PlanStatus {
        plan: file.hash.clone(),
        shards: file.shards,
        done: Vec::new(),
        missing: Vec::new(),
        samples: 0,
        failed: file.errors.len() as u64,
        merged: output.join(shardtool_manifest::FILE_NAME).exists(),
    };
    for j in 0..file.shards {
        match read_done(output, &file.hash, j) {
            Some(rec) => {
                s.samples += rec.entry.as_ref().map_or(0, |e| e.samples);
                s.failed += rec.errors.len() as u64;
                s.done.push(j);
            }
            None => s.missing.push(j),
        }
    }
    Ok(s)
}

/// What a merge published.
#[derive(Debug, Clone)]
pub struct MergeReport {
    /// The manifest written.
    pub manifest: Manifest,
    /// Every failed input, in order (also in `errors.jsonl`).
    pub errors: Vec<ErrorRecord>,
}

/// Commits a partitioned pack: checks that every shard is done (naming the missing ones
/// otherwise), writes `errors.jsonl`, then `manifest.json` last. Running it again rewrites the
/// same bytes.
pub fn merge(output: &Path) -> Result<MergeReport, PackError> {
    let file = read_plan(output)?;
    let plan = PackPlan::from_frozen(&file.options, output.to_path_buf())
        .map_err(|m| bad_plan(&plan_dir(output).join(PLAN_FILE), m))?;
    let mut records = Vec::with_capacity(file.shards as usize);
    let mut missing = Vec::new();
    for j in 0..file.shards {
        match read_done(output, &file.hash, j) {
            Some(r) => records.push(r),
            None => missing.push(j),
        }
    }
    if !missing.is_empty() {
        let sink = ShardSink::new(&plan);
        return Err(PackError::Incomplete {
            names: missing
                .iter()
                .map(|&j| sink.file_name(j as usize))
                .collect(),
            missing,
        });
    }
    let mut errors = file.errors.clone();
    let mut entries = Vec::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut input_json = false;
    for r in records {
        errors.extend(r.errors);
        entries.extend(r.entry);
        for (f, c) in r.fields {
            *counts.entry(f).or_default() += c;
        }
        input_json |= r.input_json;
    }
    let samples: u64 = entries.iter().map(|e| e.samples).sum();
    let errors_path = output.join("errors.jsonl");
    write_errors(&errors_path, &errors)?;
    if samples == 0 {
        return Err(PackError::NoImages {
            looked_for: file.looked_for,
            failed: errors.len() as u64,
            report: errors_path,
        });
    }
    let (fields, optional_fields) = split_fields(&counts, samples);
    let listing = Listing {
        classes: file.classes.clone(),
        labelled: file.labelled,
        ignored: file.ignored,
        ..Default::default()
    };
    let manifest = build_manifest(
        &plan,
        &listing,
        ManifestParts {
            entries,
            fields,
            optional_fields,
            input_json,
            found: file.found,
            failed: errors.len() as u64,
        },
    );
    remove_leftovers(output, &plan.prefix);
    publish_manifest(output, &manifest)?;
    // Staged inputs were only for the parts.
    let _ = std::fs::remove_dir_all(plan_dir(output).join(STAGED_DIR));
    Ok(MergeReport { manifest, errors })
}

/// Removes the temporary files that killed attempts left (a SIGKILL leaves no chance to clean
/// up): once every shard is done, no live attempt of this plan needs one. Best effort.
fn remove_leftovers(output: &Path, prefix: &str) {
    let ours = |name: &str| {
        name.ends_with(".tmp")
            && [
                format!(".{prefix}-"),
                ".errors.jsonl.".into(),
                ".manifest.json.".into(),
            ]
            .iter()
            .any(|p| name.starts_with(p.as_str()))
    };
    let done = plan_dir(output).join(DONE_DIR);
    for (dir, all_hidden) in [(output.to_path_buf(), false), (done, true)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = if all_hidden {
                name.starts_with('.') && name.ends_with(".tmp")
            } else {
                ours(&name)
            };
            if stale {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// A single-machine pack with `shard_samples`: plan, one part, merge, in one process (the same
/// bytes as a partitioned run of the same plan). With `resume`, continues an interrupted one.
pub(crate) fn pack_planned(
    plan: &PackPlan,
    progress: &dyn Progress,
) -> Result<PackReport, PackError> {
    let start = Instant::now();
    let output = &plan.output;
    let resuming = plan.resume && plan_dir(output).join(PLAN_FILE).exists();
    if resuming {
        let file = read_plan(output)?;
        if file.options != plan.frozen() {
            return Err(PackError::ResumeMismatch {
                path: output.clone(),
            });
        }
    } else {
        if plan.resume && output.join(shardtool_manifest::FILE_NAME).exists() {
            return Err(PackError::NothingToResume {
                path: output.clone(),
            });
        }
        let mut fresh = plan.clone();
        // A resume that finds no plan starts over, clearing what an interrupted plan left.
        fresh.overwrite |= plan.resume;
        make_plan(&fresh)?;
    }
    let loaded = load(output, Some(plan.jobs))?;
    let part = run_part(
        &loaded,
        &Assignment::Part { index: 0, count: 1 },
        plan.max_errors,
        progress,
    )?;
    let merged = merge(output)?;
    std::fs::remove_dir_all(plan_dir(output)).map_err(|e| PackError::io(plan_dir(output), e))?;
    Ok(PackReport {
        bytes_out: merged.manifest.totals.bytes,
        manifest: merged.manifest,
        errors: merged.errors,
        bytes_in: part.bytes_in,
        elapsed: start.elapsed(),
        stages: part.stages,
    })
}
