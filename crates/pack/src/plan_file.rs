//! The frozen plan of a partitioned pack, `OUTPUT/_plan/`: `plan.json` (options, counts,
//! containers, listing errors, under a plan hash) and `inputs.jsonl` (one line per input, so a
//! plan of millions of inputs is streamed, never held as one JSON document).

use crate::listing::{ContainerKind, Inputs, Origin};
use crate::output::list_for;
use crate::pipeline::{Progress, StagedFiles, UNKNOWN_SIZE};
use crate::plan::{FrozenOptions, PackPlan};
use crate::store::Store;
use crate::{ErrorRecord, PackError};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use shardtool_core::{redact_urls, AtomicFile, Checksum, HashingWriter};
use shardtool_manifest::ERRORS_FILE;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// The folder in OUTPUT that holds the plan, the staged inputs and the done records.
pub const PLAN_DIR: &str = "_plan";
pub(crate) const PLAN_FILE: &str = "plan.json";
const INPUTS_FILE: &str = "inputs.jsonl";
pub(crate) const DONE_DIR: &str = "done";
pub(crate) const STAGED_DIR: &str = "staged";
const PLAN_VERSION: u32 = 1;
/// The largest `plan.json` read (it holds the listing errors, not the inputs).
const MAX_PLAN_BYTES: u64 = 1 << 30;
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
    /// The most inputs that may fail in the whole pack (`--max-errors`): parts stop past it,
    /// and the merge does not commit past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_errors: Option<u64>,
}

impl PlanFile {
    /// Refuses a plan (kept in `output`) whose listing failures already pass its
    /// `--max-errors`: every part would stop at once, so it is said now, not by each part.
    pub fn check_listing_failures(&self, output: &Path) -> Result<(), PackError> {
        match self.max_errors.filter(|&m| self.errors.len() as u64 > m) {
            Some(max) => Err(PackError::TooManyErrors {
                failed: self.errors.len() as u64,
                max,
                report: plan_dir(output).join(PLAN_FILE),
                kept: false,
            }),
            None => Ok(()),
        }
    }
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
    /// The entity tag of the URL it was fetched from, when the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// A list's checksum when planned: a list rewritten at the same size (labels or captions
    /// edited) has changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// A shard's modification time when planned (nanoseconds since the epoch; not for staged
    /// copies, which parts may fetch anew): a shard replaced by another of the same size has
    /// changed. A part reads only its spans of a shard, so it is not hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_ns: Option<u64>,
}

impl PlanContainer {
    /// How this container, now at `path`, differs from when it was planned, if it does.
    pub(crate) fn change(&self, path: &Path) -> Option<String> {
        let c = self;
        let now = std::fs::metadata(path).ok().map(|m| m.len());
        if c.size.is_some() && now != c.size {
            return Some(match (now, c.size) {
                (Some(n), Some(p)) => format!("{n} bytes, {p} when planned"),
                _ => "it cannot be read".into(),
            });
        }
        if let Some(sum) = &c.checksum {
            if file_checksum(path).ok().as_ref() != Some(sum) {
                return Some("its checksum differs".into());
            }
        }
        if let Some(t) = c.modified_ns {
            if modified_ns(path) != Some(t) {
                // A shard is not hashed (a part reads only its spans of it): its time stands for it.
                return Some(
                    "its modification time differs; a copy that did not keep times or a touch changes \
                     it too: if its bytes are the planned ones, give it back its time (cp -p, rsync -t)"
                        .into(),
                );
            }
        }
        None
    }
}

/// When the file at `path` was last modified, in nanoseconds since the epoch.
pub(crate) fn modified_ns(path: &Path) -> Option<u64> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_nanos()).ok()
}

/// The checksum of the file at `path`, read whole.
pub(crate) fn file_checksum(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let (_, sum) = Checksum::of_reader(std::io::BufReader::new(file))?;
    Ok(sum.to_string())
}

pub(crate) fn plan_dir(output: &Path) -> PathBuf {
    output.join(PLAN_DIR)
}

fn kind_name(kind: &ContainerKind) -> (&'static str, Vec<String>) {
    match kind {
        ContainerKind::Tar => ("tar", Vec::new()),
        ContainerKind::Parquet => ("parquet", Vec::new()),
        ContainerKind::Jsonl => ("jsonl", Vec::new()),
        ContainerKind::Csv { headers } => ("csv", headers.clone()),
    }
}

pub(crate) fn bad_plan(path: &Path, message: impl Into<String>) -> PackError {
    PackError::BadPlan {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The plan hash of `file` (its JSON with `hash` empty).
pub(crate) fn plan_hash(file: &PlanFile) -> String {
    let mut f = file.clone();
    f.hash.clear();
    Checksum::of(&serde_json::to_vec(&f).unwrap_or_default()).to_string()
}

/// Lists the inputs of `plan` once and writes `OUTPUT/_plan/` (the input list, then `plan.json`
/// last, so a plan exists only whole). Needs `shard_samples`. Remote and Parquet inputs are
/// staged under `_plan/staged/`, where every part reads them, until the merge. A stop asked for
/// (`progress`) once they are listed ends it before an earlier dataset is cleared.
pub fn make_plan(plan: &PackPlan, progress: &dyn Progress) -> Result<PlanFile, PackError> {
    let store = Store::open(&plan.output)?;
    make_plan_in(plan, &store, None, progress)
}

/// A lock on a local output folder: exclusive for the process that plans or packs there, shared
/// by parts and merges (which run side by side), so that a plan or pack is refused beside any
/// of them, and they beside it.
pub(crate) struct OutputLock {
    /// The locked folder (`None` where the file system has no locks).
    file: Option<std::fs::File>,
    /// Whether the folder was made by this lock's taker (missing before).
    made: bool,
}

impl OutputLock {
    /// Takes the lock on `output`, making the folder if missing.
    pub(crate) fn take(output: &Path) -> Result<Self, PackError> {
        if output.exists() && !output.is_dir() {
            return Err(PackError::OutputNotAFolder {
                path: output.to_path_buf(),
            });
        }
        let made = !output.exists();
        std::fs::create_dir_all(output).map_err(|e| PackError::io(output, e))?;
        let dir = std::fs::File::open(output).map_err(|e| PackError::io(output, e))?;
        // Without locks, the checks that follow still refuse a non-empty output, but an
        // interrupted plan then needs --overwrite.
        let file = Self::lock(dir, output, std::fs::File::try_lock)?;
        Ok(Self { file, made })
    }

    /// Takes the shared lock on a local `output` that exists (none on an object-store output,
    /// or when it is no folder: what runs next says what is missing).
    pub(crate) fn share(output: &Path) -> Result<Self, PackError> {
        // A `file://` output is locked as its folder is.
        let file = match std::fs::File::open(crate::store::local_path(output)) {
            Ok(dir) if !crate::store::is_remote(output) => {
                Self::lock(dir, output, std::fs::File::try_lock_shared)?
            }
            _ => None,
        };
        Ok(Self { file, made: false })
    }

    /// `dir` once `try_lock` locked it; `None` where the file system has no locks; refused
    /// while another process holds the lock.
    fn lock(
        dir: std::fs::File,
        output: &Path,
        try_lock: fn(&std::fs::File) -> Result<(), std::fs::TryLockError>,
    ) -> Result<Option<std::fs::File>, PackError> {
        match try_lock(&dir) {
            Ok(()) => Ok(Some(dir)),
            Err(std::fs::TryLockError::WouldBlock) => Err(PackError::PlanRunning {
                path: output.to_path_buf(),
            }),
            Err(std::fs::TryLockError::Error(_)) => Ok(None),
        }
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Unlocked outright, not by closing: a process forked meanwhile (Python's
        // multiprocessing) holds the same open file, and so the lock, until it exits.
        if let Some(f) = &self.file {
            let _ = f.unlock();
        }
    }
}

/// The hold of one planning process on a local output folder, under its [`OutputLock`]: a
/// `_plan` folder without a plan file found under the lock is known to be left by an
/// interrupted plan and is removed.
struct Planning {
    /// The lock, when planning took it itself.
    _lock: Option<OutputLock>,
    /// The folder, when this plan made it: removed again if planning fails and leaves it empty.
    made: Option<PathBuf>,
    done: bool,
}

impl Planning {
    /// Starts planning in `output`, under `held` (the caller's lock) or a lock of its own.
    fn start(output: &Path, held: Option<&OutputLock>) -> Result<Self, PackError> {
        let own = match held {
            Some(_) => None,
            None => Some(OutputLock::take(output)?),
        };
        let (locked, made) = match (held, &own) {
            (Some(l), _) | (None, Some(l)) => (l.file.is_some(), l.made),
            (None, None) => (false, false),
        };
        let mut planning = Planning {
            _lock: own,
            made: None,
            done: false,
        };
        if locked {
            // Made and locked by this process: removed again if planning fails.
            planning.made = made.then(|| output.to_path_buf());
            // A lock granted on a network file system may bind only this host, and a plan being
            // made on another would look interrupted: leftovers are cleared on local ones only.
            let staging = plan_dir(output);
            if staging.is_dir() && !staging.join(PLAN_FILE).exists() && locks_bind_all(output) {
                std::fs::remove_dir_all(&staging).map_err(|e| PackError::io(&staging, e))?;
            }
        }
        Ok(planning)
    }
}

/// Whether `dir` is on a local file system, whose locks bind every process that can reach it:
/// its mount's type (from `/proc/self/mountinfo`, the longest mount point above it) is one of
/// the disk and memory file systems; network, cluster and FUSE file systems are not.
fn locks_bind_all(dir: &Path) -> bool {
    const LOCAL: &[&str] = &[
        "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay", "bcachefs",
        "jfs", "reiserfs", "ramfs",
    ];
    let (Ok(dir), Ok(table)) = (
        std::fs::canonicalize(dir),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return false;
    };
    let mut best: Option<(usize, &str)> = None;
    for line in table.lines() {
        let Some((mount, rest)) = line.split_once(" - ") else {
            continue;
        };
        let (Some(point), Some(kind)) = (mount.split(' ').nth(4), rest.split(' ').next()) else {
            continue;
        };
        // Mount points write a space as \040 (and a few other bytes in octal).
        let point = point.replace("\\040", " ");
        if dir.starts_with(&point) && best.is_none_or(|(len, _)| point.len() >= len) {
            best = Some((point.len(), kind));
        }
    }
    best.is_some_and(|(_, kind)| LOCAL.contains(&kind))
}

impl Drop for Planning {
    fn drop(&mut self) {
        if let (false, Some(dir)) = (self.done, &self.made) {
            // Only an empty folder goes (remove_dir refuses any other).
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// [`make_plan`], unless OUTPUT already holds a whole plan and `overwrite` is off: then that plan, when it was made from
/// the same inputs and options ([`PackError::ResumeMismatch`] naming the differences otherwise).
/// For drivers that run again after a crash.
pub fn make_or_keep_plan(plan: &PackPlan, progress: &dyn Progress) -> Result<PlanFile, PackError> {
    let store = Store::open(&plan.output)?;
    if !plan.overwrite && store.size(&format!("{PLAN_DIR}/{PLAN_FILE}"))?.is_some() {
        let file = read_plan_in(&store, &plan.output)?;
        check_same_options(&file, plan)?;
        return Ok(file);
    }
    make_plan_in(plan, &store, None, progress)
}

/// Refuses to go on with the plan `file` for `plan` unless both were made from the same inputs
/// (wherever they were named from, as many as a local folder or list held then), unchanged
/// since, and options: [`PackError::ResumeMismatch`] names the differences.
pub(crate) fn check_same_options(file: &PlanFile, plan: &PackPlan) -> Result<(), PackError> {
    let same = || -> Result<(), PackError> {
        check_same_containers(file, plan)?;
        crate::partition::same_count(plan, file.found, "planned")
    };
    // The same paths as spelled (absolute), or the same folders once links are resolved here.
    let (planned, given) = (file.options.clone().absolute(), plan.frozen().absolute());
    if planned == given {
        return same();
    }
    let (planned, given) = (planned.resolved(), given.resolved());
    if planned == given {
        return same();
    }
    Err(PackError::ResumeMismatch {
        path: plan.output.clone(),
        differs: planned.differences(&given),
    })
}

/// Refuses to go on with the plan `file` when a list or shard it read in place changed since
/// (a caption list edited at the same size, a shard replaced): its done shards hold the old
/// samples, and a rerun would report them as the dataset. Staged copies (fetched URLs, Parquet
/// files) are the plan's own and are not compared.
fn check_same_containers(file: &PlanFile, plan: &PackPlan) -> Result<(), PackError> {
    for c in file.containers.iter().filter(|c| !c.staged) {
        if let Some(what) = c.change(&c.path) {
            return Err(PackError::ResumeMismatch {
                path: plan.output.clone(),
                differs: format!(
                    "input: {} changed since the plan was made ({what})",
                    redact_urls(&c.source)
                ),
            });
        }
    }
    Ok(())
}

/// [`make_plan`] into an opened output, under `held` (the caller's lock on a local output) or
/// a lock of its own.
pub(crate) fn make_plan_in(
    plan: &PackPlan,
    store: &Store,
    held: Option<&OutputLock>,
    progress: &dyn Progress,
) -> Result<PlanFile, PackError> {
    plan.validate()?;
    let k = plan
        .shard_samples
        .ok_or(PackError::Plan(crate::PlanError::NeedShardSamples))?;
    if store.is_remote() {
        store.ready_for_a_plan(plan.overwrite, &format!("{PLAN_DIR}/"), PLAN_FILE)?;
    } else if store.local().join(PLAN_DIR).join(PLAN_FILE).exists() && !plan.overwrite {
        return Err(PackError::PlanExists {
            path: store.local().join(PLAN_DIR).join(PLAN_FILE),
        });
    }
    let mut _planning = if store.is_remote() {
        None
    } else {
        Some(Planning::start(store.local(), held)?)
    };
    // Files are made under the local folder (the scratch folder of a remote output).
    let mut local_plan = plan.clone();
    local_plan.output = store.local().to_path_buf();
    let plan = &local_plan;
    let output = &plan.output;
    let dir = plan_dir(output);
    let staged_dir = dir.join(STAGED_DIR);
    let mut listing = list_for(plan, &staged_dir, || Ok(()), progress, false)?;
    // Staged files stay for the parts, unless planning fails.
    let mut staged = StagedFiles(std::mem::take(&mut listing.staged));
    if listing.inputs.is_empty() {
        // Every input failed while listing (missing files, a server down): a plan of no
        // shards would let every part and `status` succeed until the merge.
        let report = output.join(ERRORS_FILE);
        if !listing.errors.is_empty() {
            crate::pipeline::write_errors(&report, &listing.errors)?;
        }
        return Err(PackError::NoImages {
            looked_for: listing.looked_for,
            failed: listing.errors.len() as u64,
            summary: crate::failure_summary(&listing.errors),
            report,
            kept: false,
        });
    }
    std::fs::create_dir_all(dir.join(DONE_DIR)).map_err(|e| PackError::io(&dir, e))?;
    // Absolute, so parts may run from another folder (inputs read from containers have none;
    // a list in the working folder names its paths from there).
    let root = match (&plan.source, listing.origin.root.as_os_str().is_empty()) {
        (crate::InputSource::List(_), true) => {
            std::path::absolute(".").map_err(|e| PackError::io(".", e))?
        }
        (_, true) => PathBuf::new(),
        (_, false) => std::path::absolute(&listing.origin.root)
            .map_err(|e| PackError::io(&listing.origin.root, e))?,
    };
    let staged_abs = std::path::absolute(&staged_dir).map_err(|e| PackError::io(&staged_dir, e))?;
    let mut containers = Vec::with_capacity(listing.containers.len());
    for c in &listing.containers {
        let abs = std::path::absolute(&c.path).map_err(|e| PackError::io(&c.path, e))?;
        let (path, is_staged) = match abs.strip_prefix(&staged_abs) {
            Ok(rel) => (rel.to_path_buf(), true),
            Err(_) => (abs.clone(), false),
        };
        let (kind, headers) = kind_name(&c.kind);
        let list = c.kind.is_list();
        containers.push(PlanContainer {
            checksum: list.then(|| file_checksum(&abs).ok()).flatten(),
            modified_ns: (!list && !is_staged).then(|| modified_ns(&abs)).flatten(),
            path,
            staged: is_staged,
            source: redact_urls(&c.source).into_owned(),
            kind: kind.into(),
            headers,
            size: std::fs::metadata(&abs).ok().map(|m| m.len()),
            etag: c.etag.clone(),
        });
    }
    // Sizes of plain inputs, so a part can tell an input that changed since.
    let inputs = &listing.inputs;
    let origin = Origin { root: root.clone() };
    let sizes: Vec<u64> = (0..inputs.len())
        .into_par_iter()
        .map(|i| {
            let item = inputs.get(i);
            // A tar sample or Parquet row is checked by its container; a list row names a file
            // of its own, whose size is kept as a plain input's is.
            if listing.in_container(&item) {
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
        options: plan.frozen().absolute(),
        inputs: n,
        shard_samples: k,
        shards: n.div_ceil(k),
        found: n + listing.errors.len() as u64,
        ignored: listing.ignored,
        classes: listing.classes.clone(),
        labelled: listing.labelled,
        // The plan stays in OUTPUT (a shared folder or bucket) after the merge: no URL in it
        // keeps its credentials. Parts need none: remote inputs are staged.
        looked_for: redact_urls(&listing.looked_for).into_owned(),
        root,
        containers,
        errors: (listing.errors.iter())
            .map(|e| ErrorRecord {
                path: redact_urls(&e.path).into_owned(),
                kind: e.kind.clone(),
                message: redact_urls(&e.message).into_owned(),
            })
            .collect(),
        inputs_checksum: inputs_checksum.to_string(),
        max_errors: plan.max_errors,
    };
    file.hash = plan_hash(&file);
    let path = dir.join(PLAN_FILE);
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| PackError::io(&path, e.into()))?;
    // The staged inputs and the input list first, the plan last: a plan exists only whole.
    for c in file.containers.iter().filter(|c| c.staged) {
        store.publish(&format!(
            "{PLAN_DIR}/{STAGED_DIR}/{}",
            c.path.to_string_lossy()
        ))?;
    }
    store.publish(&format!("{PLAN_DIR}/{INPUTS_FILE}"))?;
    store.write(&format!("{PLAN_DIR}/{PLAN_FILE}"), &bytes)?;
    staged.0.clear();
    if let Some(p) = &mut _planning {
        p.done = true;
    }
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
    read_plan_in(&Store::open(output)?, output)
}

/// [`read_plan`] from an opened output.
pub(crate) fn read_plan_in(store: &Store, output: &Path) -> Result<PlanFile, PackError> {
    let Some(bytes) = store.read(&format!("{PLAN_DIR}/{PLAN_FILE}"), MAX_PLAN_BYTES)? else {
        return Err(PackError::NoPlan {
            path: output.to_path_buf(),
            finished: matches!(store.size(shardtool_manifest::FILE_NAME), Ok(Some(_))),
        });
    };
    parse_plan(&bytes, &plan_dir(output).join(PLAN_FILE))
}

/// Parses and checks the bytes of a `plan.json` (`path` names it in errors).
pub(crate) fn parse_plan(bytes: &[u8], path: &Path) -> Result<PlanFile, PackError> {
    let file: PlanFile =
        serde_json::from_slice(bytes).map_err(|e| bad_plan(path, e.to_string()))?;
    check_plan(&file, path)?;
    Ok(file)
}

/// The checks of a parsed plan: version, hash, and shard counts that add up.
pub(crate) fn check_plan(file: &PlanFile, path: &Path) -> Result<(), PackError> {
    if file.version != PLAN_VERSION {
        return Err(bad_plan(
            path,
            format!(
                "plan version {} (this shardtool reads {PLAN_VERSION})",
                file.version
            ),
        ));
    }
    if plan_hash(file) != file.hash {
        return Err(bad_plan(
            path,
            "its hash does not match its content: it was edited or damaged",
        ));
    }
    if file.shard_samples == 0 || file.shards != file.inputs.div_ceil(file.shard_samples) {
        return Err(bad_plan(path, "shard counts do not add up"));
    }
    Ok(())
}

/// Reads `inputs.jsonl` back into the compact store, checking it against the plan.
pub(crate) fn read_inputs(store: &Store, file: &PlanFile) -> Result<(Inputs, Vec<u64>), PackError> {
    let path = store.fetch(&format!("{PLAN_DIR}/{INPUTS_FILE}"), u64::MAX)?;
    let f = std::fs::File::open(&path).map_err(|e| PackError::io(&path, e))?;
    parse_inputs(std::io::BufReader::with_capacity(1 << 20, f), file, &path)
}

/// Parses the lines of an `inputs.jsonl` (`path` names it in errors) and checks them against
/// the plan: count, checksum, and containers it names.
pub(crate) fn parse_inputs(
    mut reader: impl BufRead,
    file: &PlanFile,
    path: &Path,
) -> Result<(Inputs, Vec<u64>), PackError> {
    let bad = |m: String| bad_plan(path, m);
    let mut hasher = shardtool_core::ChecksumHasher::new();
    let mut inputs = Inputs::default();
    // The plan's count is only a hint (the file may lie): reserve at most a million up front.
    let mut sizes = Vec::with_capacity(usize::try_from(file.inputs).unwrap_or(0).min(1 << 20));
    let mut dirs: HashMap<(Vec<u8>, Option<u32>), u32> = HashMap::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let read = std::io::Read::take(&mut reader, MAX_INPUT_LINE + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| PackError::io(path, e))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::{list_inputs, ListOptions};
    use crate::InputSource;

    #[test]
    fn a_dropped_lock_is_released_though_a_copy_of_its_file_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let lock = OutputLock::take(&out).unwrap();
        // What a process forked while the lock is held keeps: the same open file.
        let forked = lock.file.as_ref().map(|f| f.try_clone().unwrap());
        assert!(forked.is_some(), "this file system has no locks");
        assert!(matches!(
            OutputLock::take(&out),
            Err(PackError::PlanRunning { .. })
        ));
        drop(lock);
        OutputLock::take(&out).unwrap();
        drop(forked);
    }

    #[test]
    fn the_input_list_reads_back_into_the_same_store() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("in");
        for (class, name) in [
            ("b", &b"x.jpg"[..]),
            ("a", b"\xff\xfe-not-utf8.png"),
            ("a", b"plain.jpg"),
        ] {
            std::fs::create_dir_all(root.join(class)).unwrap();
            let path = root.join(class).join(std::ffi::OsStr::from_bytes(name));
            std::fs::write(path, b"bytes").unwrap();
        }
        let out = dir.path().join("out");
        let mut plan = PackPlan::new(InputSource::Folder(root.clone()), out.clone());
        plan.shard_samples = Some(2);
        let file = make_plan(&plan, &crate::NoProgress).unwrap();
        assert_eq!((file.inputs, file.shards), (3, 2));
        assert_eq!(read_plan(&out).unwrap(), file);
        let listed = list_inputs(&InputSource::Folder(root), &ListOptions::default()).unwrap();
        let store = Store::open(&out).unwrap();
        let (inputs, sizes) = read_inputs(&store, &file).unwrap();
        assert_eq!(inputs, listed.inputs);
        assert_eq!(sizes, vec![5, 5, 5]);
        // A plan already there is not replaced without `overwrite`.
        assert!(matches!(
            make_plan(&plan, &crate::NoProgress),
            Err(PackError::PlanExists { .. })
        ));
        // Any change to the input list is noticed.
        let list = out.join(PLAN_DIR).join(INPUTS_FILE);
        let text = std::fs::read(&list).unwrap();
        let edited: Vec<u8> = text
            .iter()
            .map(|&b| if b == b'5' { b'6' } else { b })
            .collect();
        std::fs::write(&list, edited).unwrap();
        assert!(matches!(
            read_inputs(&store, &file),
            Err(PackError::BadPlan { .. })
        ));
    }

    /// What a killed plan left (a `_plan` folder without its plan file) is cleared by the next
    /// plan; a plan still being made (it holds the folder's lock) is not touched; a plan that
    /// fails leaves no output folder it made.
    #[test]
    fn an_interrupted_plan_is_made_again_and_a_running_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("in");
        std::fs::create_dir_all(root.join("c")).unwrap();
        std::fs::write(root.join("c/x.jpg"), b"bytes").unwrap();
        let out = dir.path().join("out");
        let debris = out.join(PLAN_DIR).join(STAGED_DIR).join("half.tar");
        std::fs::create_dir_all(debris.parent().unwrap()).unwrap();
        std::fs::write(&debris, b"half").unwrap();
        let mut plan = PackPlan::new(InputSource::Folder(root.clone()), out.clone());
        plan.shard_samples = Some(2);

        let held = std::fs::File::open(&out).unwrap();
        held.lock().unwrap();
        assert!(matches!(
            make_plan(&plan, &crate::NoProgress),
            Err(PackError::PlanRunning { .. })
        ));
        // Nor may a pack beside it clear it, planned (a second `--resume`) or not.
        let mut single = plan.clone();
        single.overwrite = true;
        for shard_samples in [None, Some(2)] {
            single.shard_samples = shard_samples;
            single.resume = shard_samples.is_some();
            assert!(matches!(
                crate::pack(&single, &crate::NoProgress),
                Err(PackError::PlanRunning { .. })
            ));
        }
        assert!(debris.exists(), "a running plan's files stay");
        drop(held);

        if !locks_bind_all(&out) {
            // A file system whose locks may bind one host only: leftovers need --overwrite.
            assert!(matches!(
                make_plan(&plan, &crate::NoProgress),
                Err(PackError::OutputNotEmpty { .. })
            ));
            assert!(debris.exists());
            plan.overwrite = true;
        }
        let file = make_plan(&plan, &crate::NoProgress).unwrap();
        assert_eq!(file.inputs, 1);
        assert!(!debris.exists());
        assert_eq!(read_plan(&out).unwrap(), file);

        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let never = dir.path().join("never");
        let plan = PackPlan::new(InputSource::Folder(empty), never.clone());
        let mut plan = plan;
        plan.shard_samples = Some(2);
        assert!(matches!(
            make_plan(&plan, &crate::NoProgress),
            Err(PackError::NoImages { .. })
        ));
        assert!(!never.exists());
        // A file as the output is no folder (a usage error, not an I/O one).
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let mut plan = PackPlan::new(InputSource::Folder(root.clone()), file);
        plan.shard_samples = Some(2);
        assert!(matches!(
            make_plan(&plan, &crate::NoProgress),
            Err(PackError::OutputNotAFolder { .. })
        ));
        // Leftovers are cleared only where locks bind every host: never on /proc's kind.
        assert!(!locks_bind_all(Path::new("/proc/self")));
    }

    #[test]
    fn a_damaged_or_edited_plan_is_refused_and_none_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_plan(dir.path()),
            Err(PackError::NoPlan { .. })
        ));
        let p = dir.path().join(PLAN_DIR);
        std::fs::create_dir_all(&p).unwrap();
        for junk in [&b"{"[..], b"[]", b"{\"version\": 1}", &[0xff; 64]] {
            std::fs::write(p.join(PLAN_FILE), junk).unwrap();
            assert!(matches!(
                read_plan(dir.path()),
                Err(PackError::BadPlan { .. })
            ));
        }
        // A file named as the output (the plan file itself, say) holds no plan.
        assert!(matches!(
            read_plan(&p.join(PLAN_FILE)),
            Err(PackError::NoPlan { .. })
        ));
    }
}
