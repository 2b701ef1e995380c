//! Partitioned packing: a frozen plan (`OUTPUT/_plan/`), parts that pack the shards assigned to
//! them and record each one done, and a merge that commits the dataset by writing its manifest.
//!
//! Shard `j` holds positions `[jK, (j+1)K)` of the seeded permutation, so what a shard holds never
//! depends on how many parts run or in what order. A shard is published atomically, then its done
//! record; a part skips shards whose done record matches the plan, and redoing one writes the same
//! bytes, so a repeated or speculative attempt is harmless. The merge (`merge.rs`) reads done
//! records (never directory listings) and writes `errors.jsonl`, then `manifest.json` last.

use crate::listing::{Container, ContainerKind, Origin};
use crate::pipeline::{effective_spec, transform_in_order, write_sample, Ordered, Shared, Tally};
use crate::plan::PackPlan;
use crate::plan_file::{
    bad_plan, check_same_options, make_plan_in, plan_dir, read_inputs, read_plan_in, OutputLock,
    PlanFile, DONE_DIR, PLAN_DIR, PLAN_FILE, STAGED_DIR,
};
use crate::sink::ShardSink;
use crate::store::{is_remote, Store};
use crate::{ErrorRecord, PackError, PackReport, Progress, ProgressSnapshot};
use serde::{Deserialize, Serialize};
use shardtool_manifest::{errors, Manifest, ShardEntry, ERRORS_FILE};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The largest done record read.
const MAX_DONE_BYTES: u64 = 256 << 20;

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

impl PartReport {
    /// The figures of the run as JSON (`assigned`, `skipped`, `packed`, `samples`, `failed`,
    /// `bytes_in`, `bytes_out`, `seconds`), for the CLI's and Python's reports.
    pub fn summary(&self) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(m) = serde_json::json!({
            "assigned": self.assigned,
            "skipped": self.skipped,
            "packed": self.packed,
            "samples": self.samples,
            "failed": self.failed,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "seconds": self.elapsed.as_secs_f64(),
        }) else {
            unreachable!("a JSON object literal")
        };
        m
    }
}

/// A plan loaded for packing.
struct Loaded {
    store: Store,
    file: PlanFile,
    /// The plan, writing under the store's local folder.
    plan: PackPlan,
    ordered: Ordered,
    planned_sizes: Vec<u64>,
    /// Identity of `plan.json` when loaded, to notice a plan replaced while a part runs.
    stamp: Option<String>,
}

/// What identifies the plan file as written: a plan replaced (in a folder or a bucket) has
/// another.
fn plan_stamp(store: &Store) -> Result<Option<String>, PackError> {
    store.stamp(&format!("{PLAN_DIR}/{PLAN_FILE}"))
}

fn load(output: &Path, jobs: Option<usize>) -> Result<Loaded, PackError> {
    let store = Store::open(output)?;
    let stamp = plan_stamp(&store)?;
    let file = read_plan_in(&store, output)?;
    let mut plan = PackPlan::from_frozen(&file.options, store.local().to_path_buf())
        .map_err(|m| bad_plan(&plan_dir(output).join(PLAN_FILE), m))?;
    if let Some(j) = jobs {
        plan.jobs = j;
        if j > crate::plan::MAX_JOBS {
            return Err(PackError::Plan(crate::PlanError::TooManyJobs(j)));
        }
    }
    plan.shard_samples = Some(file.shard_samples);
    let (inputs, planned_sizes) = read_inputs(&store, &file)?;
    let ordered = Ordered::new(
        inputs,
        Origin {
            root: file.root.clone(),
        },
        plan.seed,
        plan.keys,
    )?;
    Ok(Loaded {
        store,
        file,
        plan,
        ordered,
        planned_sizes,
        stamp,
    })
}

impl Loaded {
    /// What the workers need to pack `positions`: the containers (staged ones fetched from an
    /// object-store output when these positions read them). A container these positions read
    /// that changed since the plan fails the part: its samples would all fail, and a merge
    /// would commit the dataset without them.
    fn shared(&self, positions: impl Iterator<Item = usize>) -> Result<Shared, PackError> {
        let mut needed = vec![false; self.file.containers.len()];
        for p in positions {
            let index = self.ordered.order[p];
            if index != crate::pipeline::REJECTED {
                if let Some(c) = self.ordered.inputs.get(index as usize).container {
                    needed[c as usize] = true;
                }
            }
        }
        let plan_path = plan_dir(self.store.local()).join(PLAN_FILE);
        let mut containers = Vec::with_capacity(self.file.containers.len());
        for (c, &used) in self.file.containers.iter().zip(&needed) {
            let path = if c.staged {
                let name = format!("{PLAN_DIR}/{STAGED_DIR}/{}", c.path.to_string_lossy());
                if used {
                    self.store.fetch(&name, u64::MAX)?
                } else {
                    self.store.local().join(name)
                }
            } else {
                c.path.clone()
            };
            if c.staged && used && !path.exists() {
                // Its samples would all fail as "changed since the plan", and a merge would
                // then commit the dataset without them.
                return Err(bad_plan(
                    &plan_path,
                    format!(
                        "the staged copy of {} is gone (merge removes staged inputs once the \
                         dataset is committed): plan again with --overwrite to redo shards",
                        c.source
                    ),
                ));
            }
            let kind = match c.kind.as_str() {
                "tar" => ContainerKind::Tar,
                "parquet" => ContainerKind::Parquet,
                "jsonl" => ContainerKind::Jsonl,
                "csv" => ContainerKind::Csv {
                    headers: c.headers.clone(),
                },
                other => {
                    return Err(bad_plan(
                        &plan_path,
                        format!("unknown container kind {other:?}"),
                    ))
                }
            };
            if let Some(what) = used.then(|| c.change(&path)).flatten() {
                return Err(bad_plan(
                    &plan_path,
                    format!(
                        "{} changed since the plan was made ({what}): plan again with --overwrite",
                        c.source
                    ),
                ));
            }
            containers.push(Container {
                etag: c.etag.clone(),
                path,
                source: c.source.clone(),
                kind,
            });
        }
        Ok(Shared {
            containers,
            columns: self.plan.columns.clone(),
            renumbered: self.ordered.renumbered,
            planned_sizes: self.planned_sizes.clone(),
        })
    }
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
pub(crate) fn read_done(
    store: &Store,
    hash: &str,
    shard: u64,
) -> Result<Option<DoneRecord>, PackError> {
    let Some(bytes) = store.read(&done_name(shard), MAX_DONE_BYTES)? else {
        return Ok(None);
    };
    let Some(rec) = parse_done(&bytes, hash, shard) else {
        return Ok(None);
    };
    if let Some(e) = &rec.entry {
        if store.size(&e.file)? != Some(e.bytes) {
            return Ok(None);
        }
    }
    Ok(Some(rec))
}

/// A done record's bytes, if they parse and name this plan and shard.
pub(crate) fn parse_done(bytes: &[u8], hash: &str, shard: u64) -> Option<DoneRecord> {
    let rec = serde_json::from_slice::<DoneRecord>(bytes).ok()?;
    (rec.plan == hash && rec.shard == shard).then_some(rec)
}

fn done_name(shard: u64) -> String {
    format!("{PLAN_DIR}/{DONE_DIR}/{shard:06}.json")
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
    // Shared with other parts and merges; a plan or pack beside it is refused, as it beside one.
    let _lock = OutputLock::share(output)?;
    let loaded = load(output, jobs)?;
    // The limit (the part's own, else the plan's) is the whole pack's: the listing's failures
    // count in every part, and a part past it alone would pass it.
    let max_errors = max_errors.or(loaded.file.max_errors);
    let listing_errors = &loaded.file.errors[..];
    let name = match assignment {
        Assignment::Part { index, count } => format!("part-{index}-of-{count}"),
        // The set it names, as ranges: `--shards 0,9` and `--shards 0-9` differ. A long one
        // is its ends and a hash of the whole.
        Assignment::Shards(_) => {
            let set = assigned(assignment, loaded.file.shards)?;
            let ranges = crate::shard_ranges(&set);
            if ranges.len() <= 64 {
                format!("shards-{ranges}")
            } else {
                let sum = shardtool_core::Checksum::of(ranges.as_bytes());
                let (a, b) = (set.first().unwrap_or(&0), set.last().unwrap_or(&0));
                format!("shards-{a}-{b}-{:08x}", sum.0 as u32)
            }
        }
    };
    let failures = FailureReport {
        name: format!("{PLAN_DIR}/failures-{name}.jsonl"),
        shown: plan_dir(output).join(format!("failures-{name}.jsonl")),
    };
    let mut report = run_part(
        &loaded,
        assignment,
        max_errors,
        listing_errors,
        &failures,
        progress,
    )?;
    // A list an earlier, stopped run left is stale now (best effort).
    let _ = loaded.store.delete(&failures.name);
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Where a run that passes `--max-errors` lists the failures it counted: a store name, and how
/// it is shown in the error.
struct FailureReport {
    name: String,
    shown: std::path::PathBuf,
}

/// What `run_part` keeps of the shard being written and of the run.
#[derive(Default)]
struct Progressing {
    /// The open shard's failures, by position.
    shard_errors: Vec<(usize, ErrorRecord)>,
    /// The field counts when the open shard started.
    counts_before: BTreeMap<String, u64>,
    /// With `--max-errors`: every failure counted so far but the open shard's (the failures of
    /// earlier runs' shards and the refused inputs up front, then each shard's as it is done),
    /// for the report of a run that stops on it.
    counted: Vec<ErrorRecord>,
    /// The shard this attempt could not publish because another attempt and a merge overtook
    /// it: every shard is then done and merged, so the attempt stops there, touching nothing
    /// more.
    abandoned: Option<u64>,
    report: PartReport,
}

impl Progressing {
    /// Forgets the open shard, which another attempt did: its failures stay counted (they are
    /// the other attempt's too).
    fn drop_shard(&mut self, keep: bool) {
        if keep {
            self.counted
                .extend(self.shard_errors.drain(..).map(|(_, e)| e));
        }
        self.shard_errors.clear();
    }
}

/// Packs the undone shards of `assignment`; `listing_errors`, inputs that failed while listing,
/// count towards `max_errors` too (a whole pack's, not a part's). A run stopped by `max_errors`
/// lists what it counted in `failures`.
fn run_part(
    loaded: &Loaded,
    assignment: &Assignment,
    max_errors: Option<u64>,
    listing_errors: &[ErrorRecord],
    failures: &FailureReport,
    progress: &dyn Progress,
) -> Result<PartReport, PackError> {
    let file = &loaded.file;
    let store = &loaded.store;
    let shards = assigned(assignment, file.shards)?;
    let keep = max_errors.is_some();
    let mut st = Progressing::default();
    if keep {
        st.counted.extend_from_slice(listing_errors);
    }
    let mut todo: Vec<u64> = Vec::new();
    // Failures of this assignment's shards done by earlier runs count towards --max-errors: a
    // resumed pack must not pass the limit one run at a time.
    let mut failed_before = listing_errors.len() as u64;
    let done = store.each(&shards, |j| read_done(store, &file.hash, j))?;
    for (&j, rec) in shards.iter().zip(done) {
        match rec {
            Some(rec) => {
                failed_before += rec.errors.len() as u64;
                if keep {
                    st.counted.extend(rec.errors);
                }
            }
            None => todo.push(j),
        }
    }
    st.report = PartReport {
        assigned: shards.len() as u64,
        skipped: (shards.len() - todo.len()) as u64,
        ..Default::default()
    };
    let k = file.shard_samples;
    let n = loaded.ordered.len() as u64;
    let range = |j: u64| (j * k) as usize..((j + 1) * k).min(n) as usize;
    let plan = &loaded.plan;
    let spec = effective_spec(plan);
    // Shards are published only in `finish`, never on size or count inside the writer: each is
    // checked first against the plan and other attempts.
    let mut sink = ShardSink::new(plan);
    sink.rolls_itself = false;
    let mut tally = Tally {
        snapshot: ProgressSnapshot {
            total: todo.iter().map(|&j| range(j).len() as u64).sum(),
            ..Default::default()
        },
        ..Default::default()
    };
    progress.update(&tally.snapshot);
    let rejected = &loaded.ordered.rejected;
    // Inputs refused before transforming (a bad or repeated key) fail in their shard: counted
    // from the start, as a whole pack counts them.
    // The refused inputs of shard j, by position.
    let refused = |j: u64| {
        let r = range(j);
        &rejected[rejected.partition_point(|(p, _)| *p < r.start)
            ..rejected.partition_point(|(p, _)| *p < r.end)]
    };
    for &j in &todo {
        failed_before += refused(j).len() as u64;
        if keep {
            st.counted.extend(refused(j).iter().map(|(_, e)| e.clone()));
        }
    }

    let mut open: Option<u64> = None;
    let mut cursor = 0usize;
    let finish =
        |j: u64, sink: &mut ShardSink<'_>, st: &mut Progressing| -> Result<(), PackError> {
            // Shard j is the open one, if any of its inputs made it. Just before its file takes
            // its name (or, with none, before it is recorded done), two checks:
            // - a plan replaced meanwhile: the shard is neither published nor recorded;
            // - done by another attempt meanwhile: its bytes stand. This attempt's copy may hold
            //   failures of inputs a merge has removed since, so it never replaces them.
            let verdict = std::cell::Cell::new(Elsewhere::No);
            let check = || -> Result<bool, PackError> {
                if plan_stamp(store)? != loaded.stamp {
                    return Err(PackError::PlanChanged {
                        path: store.shown(&format!("{PLAN_DIR}/{PLAN_FILE}")),
                    });
                }
                verdict.set(done_elsewhere(store, &file.hash, j)?);
                Ok(verdict.get() == Elsewhere::No)
            };
            match (sink.roll_checked(&check), verdict.get()) {
                (Err(e), _) => {
                    if overtaken(&e, store, &file.hash, j)? {
                        st.abandoned = Some(j);
                    }
                    return Err(e);
                }
                (Ok(_), Elsewhere::Merged) => {
                    st.abandoned = Some(j);
                    return Err(merged_meanwhile(j));
                }
                (Ok(_), Elsewhere::Done) => {
                    st.drop_shard(keep);
                    st.counts_before.clone_from(sink.field_counts());
                    st.report.skipped += 1;
                    return Ok(());
                }
                (Ok(_), Elsewhere::No) => {}
            }
            let name = sink.file_name(j as usize);
            let entry = match sink.entries.last() {
                Some(e) if e.file == name => sink.entries.pop(),
                _ => None,
            };
            if keep {
                st.counted
                    .extend(st.shard_errors.iter().map(|(_, e)| e.clone()));
            }
            let mut errors: Vec<(usize, ErrorRecord)> = refused(j).to_vec();
            errors.append(&mut st.shard_errors);
            errors.sort_by_key(|(p, _)| *p);
            let counts = sink.field_counts();
            let fields = counts
                .iter()
                .map(|(f, &c)| (f.clone(), c - st.counts_before.get(f).copied().unwrap_or(0)))
                .filter(|(_, c)| *c > 0)
                .collect();
            st.counts_before = counts.clone();
            let rec = DoneRecord {
                plan: file.hash.clone(),
                shard: j,
                entry,
                fields,
                input_json: std::mem::take(&mut sink.input_json),
                errors: errors.into_iter().map(|(_, e)| e).collect(),
            };
            if let Some(e) = &rec.entry {
                store.publish(&e.file)?;
            }
            let bytes =
                serde_json::to_vec(&rec).map_err(|e| PackError::io(done_name(j), e.into()))?;
            // Of two attempts at once (a part run twice), the first record counts.
            if !store.write_new(&done_name(j), &bytes)? {
                if read_done(store, &file.hash, j)?.is_some() {
                    st.report.skipped += 1;
                    return Ok(());
                }
                store.write(&done_name(j), &bytes)?;
            }
            if let Some(e) = &rec.entry {
                st.report.samples += e.samples;
                st.report.bytes_out += e.bytes;
            }
            st.report.failed += rec.errors.len() as u64;
            st.report.packed += 1;
            Ok(())
        };
    let check_max = |failed: u64| -> Result<(), PackError> {
        match max_errors {
            Some(max) if failed_before + failed > max => Err(PackError::TooManyErrors {
                failed: failed_before + failed,
                max,
                report: failures.shown.clone(),
                kept: false,
            }),
            _ => Ok(()),
        }
    };
    let positions = todo.iter().flat_map(|&j| range(j));
    let result = check_max(0).and_then(|()| {
        let shared = std::sync::Arc::new(loaded.shared(positions.clone())?);
        transform_in_order(
            &loaded.ordered,
            &file.classes,
            &shared,
            &spec,
            plan.jobs,
            positions,
            |position, r| {
                let j = position as u64 / k;
                while todo[cursor] < j {
                    finish(todo[cursor], &mut sink, &mut st)?;
                    cursor += 1;
                    tally.snapshot.shards += 1;
                }
                if open != Some(j) {
                    // A merged dataset needs nothing more of this attempt.
                    if done_elsewhere(store, &file.hash, j)? == Elsewhere::Merged {
                        st.abandoned = Some(j);
                        return Err(merged_meanwhile(j));
                    }
                    sink.start_shard(j as usize)?;
                    open = Some(j);
                }
                tally.snapshot.done += 1;
                let r = match r {
                    Ok(done) => {
                        match write_sample(&mut sink, &loaded.ordered, position, &done, &mut tally)
                        {
                            Ok(None) => Ok(()),
                            Ok(Some(refused)) => Err(refused),
                            Err(e) => {
                                if overtaken(&e, store, &file.hash, j)? {
                                    st.abandoned = Some(j);
                                }
                                return Err(e);
                            }
                        }
                    }
                    Err(e) => Err(e),
                };
                match r {
                    Ok(()) => {}
                    Err(e) => {
                        st.shard_errors.push((position, e));
                        tally.snapshot.failed += 1;
                        if let Err(stop) = check_max(tally.snapshot.failed) {
                            // Inputs a merge removed fail too: once the dataset is merged,
                            // they are no failures of it, and this attempt is done.
                            if done_elsewhere(store, &file.hash, j)? == Elsewhere::Merged {
                                st.abandoned = Some(j);
                            }
                            return Err(stop);
                        }
                    }
                }
                progress.update(&tally.snapshot);
                if progress.cancelled() {
                    return Err(PackError::Interrupted);
                }
                Ok(())
            },
        )
        .and_then(|()| {
            for &j in &todo[cursor..] {
                finish(j, &mut sink, &mut st)?;
                tally.snapshot.shards += 1;
            }
            Ok(())
        })
    });
    let mut report = match (result, st.abandoned) {
        (Ok(()), _) => st.report,
        // Overtaken: shard `j` and every later one of this attempt were done by another.
        (Err(_), Some(j)) => {
            let mut r = st.report;
            r.skipped += todo.iter().filter(|&&t| t >= j).count() as u64;
            r
        }
        (Err(e @ PackError::TooManyErrors { .. }), None) => {
            // No failure counted goes unlisted: the open shard's have no done record yet.
            let mut all = st.counted;
            all.extend(st.shard_errors.into_iter().map(|(_, e)| e));
            // Best effort: a report that cannot be written must not hide why the run stopped.
            let _ = store.write(&failures.name, &errors::to_jsonl(&all));
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    };
    progress.update(&tally.snapshot);
    report.bytes_in = tally.bytes_in;
    report.stages = tally.stages;
    Ok(report)
}

/// Whether another attempt did a shard this attempt has not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elsewhere {
    /// Not done.
    No,
    /// Done, the dataset not merged yet.
    Done,
    /// Done and the dataset merged: every shard is done.
    Merged,
}

/// Where shard `j` of plan `hash` stands, as seen by an attempt that has not finished it.
fn done_elsewhere(store: &Store, hash: &str, j: u64) -> Result<Elsewhere, PackError> {
    Ok(if read_done(store, hash, j)?.is_none() {
        Elsewhere::No
    } else if store.size(shardtool_manifest::FILE_NAME)?.is_some() {
        Elsewhere::Merged
    } else {
        Elsewhere::Done
    })
}

/// Stops an attempt at shard `j` once the dataset is merged (reported as done, not as this).
fn merged_meanwhile(j: u64) -> PackError {
    PackError::io(done_name(j), std::io::Error::other("merged meanwhile"))
}

/// Whether publishing shard `j` failed with `e` because another attempt of the part finished
/// it and a merge (which runs once every shard is done) then removed this attempt's temporary
/// file as a leftover: the shard is done, not failed.
fn overtaken(e: &PackError, store: &Store, hash: &str, j: u64) -> Result<bool, PackError> {
    let gone = matches!(e, PackError::Io { cause, .. }
        if cause.kind() == std::io::ErrorKind::NotFound);
    Ok(gone && read_done(store, hash, j)?.is_some())
}

/// A single-machine pack with `shard_samples`: plan, one part, merge, in one process (the same
/// bytes as a partitioned run of the same plan). With `resume`, continues an interrupted one.
pub(crate) fn pack_planned(
    plan: &PackPlan,
    progress: &dyn Progress,
) -> Result<PackReport, PackError> {
    let start = Instant::now();
    let output = &plan.output;
    // One process packs here from plan to merge: a second `pack --resume` beside it, or a plain
    // pack with --overwrite, is refused.
    let lock = if is_remote(output) {
        None
    } else {
        Some(OutputLock::take(output)?)
    };
    let store = Store::open(output)?;
    let plan_name = format!("{PLAN_DIR}/{PLAN_FILE}");
    let resuming = plan.resume && store.size(&plan_name)?.is_some();
    // A partitioned pack keeps its plan once merged (late attempts and merges read it): a
    // resume of it changes nothing there.
    let merged_before = resuming && store.size(shardtool_manifest::FILE_NAME)?.is_some();
    if resuming {
        check_same_options(&read_plan_in(&store, output)?, plan)?;
    } else {
        if plan.resume && store.size(shardtool_manifest::FILE_NAME)?.is_some() {
            return finished(plan, &store, start);
        }
        let mut fresh = plan.clone();
        // A resume that finds no plan starts over, clearing what an interrupted plan left.
        fresh.overwrite |= plan.resume;
        make_plan_in(&fresh, &store, lock.as_ref(), progress).map_err(|e| match e {
            // An interrupted pack left its plan: to `pack`, the output is simply not empty.
            PackError::PlanExists { .. } => PackError::OutputNotEmpty {
                path: output.clone(),
            },
            e => e,
        })?;
    }
    drop(store);
    let loaded = load(output, Some(plan.jobs))?;
    // A resume without --max-errors keeps the limit the pack was started with.
    let max_errors = plan.max_errors.or(loaded.file.max_errors);
    // Stopped by --max-errors, the pack lists what it counted where a whole pack would.
    let failures = FailureReport {
        name: ERRORS_FILE.into(),
        shown: output.join(ERRORS_FILE),
    };
    let part = run_part(
        &loaded,
        &Assignment::Part { index: 0, count: 1 },
        max_errors,
        &loaded.file.errors,
        &failures,
        progress,
    )?;
    drop(loaded);
    let merged = crate::merge::merge_held(output, max_errors, false)?;
    if !is_remote(output) && !merged_before {
        let dir = plan_dir(output);
        std::fs::remove_dir_all(&dir).map_err(|e| PackError::io(dir, e))?;
    }
    Ok(PackReport {
        bytes_out: merged.manifest.totals.bytes,
        manifest: merged.manifest,
        errors: merged.errors,
        bytes_in: part.bytes_in,
        packed_now: part.samples,
        finished_before: false,
        elapsed: start.elapsed(),
        stages: part.stages,
    })
}

/// How many inputs a local folder or list input holds now (listed again: cheap for these, not
/// for shards or Parquet files, which are read to be listed), if it is one.
fn found_now(plan: &PackPlan) -> Option<Result<u64, crate::ListError>> {
    if !matches!(
        plan.source,
        crate::InputSource::Folder(_) | crate::InputSource::List(_)
    ) {
        return None;
    }
    let options = crate::ListOptions {
        columns: plan.columns.clone(),
        exclude: Some(plan.output.clone()),
        jobs: plan.jobs,
        ..Default::default()
    };
    Some(
        crate::list_inputs(&plan.source, &options)
            .map(|l| l.inputs.len() as u64 + l.errors.len() as u64),
    )
}

/// Refuses a resume whose local folder or list input holds other than the `then` inputs it held
/// when `done` (planned, packed): one added since would be left out, silently.
pub(crate) fn same_count(plan: &PackPlan, then: u64, done: &str) -> Result<(), PackError> {
    let Some(found) = found_now(plan) else {
        return Ok(());
    };
    let input = plan.frozen().input.join(" ");
    let differs = match found {
        Ok(n) if n == then => return Ok(()),
        Ok(n) => format!("input: {then} inputs when {done}, {n} in {input} now"),
        Err(e) => format!("input: {input} cannot be listed now ({e})"),
    };
    Err(PackError::ResumeMismatch {
        path: plan.output.clone(),
        differs,
    })
}

/// `--resume` of a pack that had already published its manifest (killed while tidying up, or
/// run twice): nothing to pack; what is left of the plan goes, and the dataset is reported.
fn finished(plan: &PackPlan, store: &Store, start: Instant) -> Result<PackReport, PackError> {
    let output = &plan.output;
    let bytes = store
        .read(shardtool_manifest::FILE_NAME, 1 << 30)?
        .unwrap_or_default();
    let manifest = Manifest::from_slice(&bytes, 1 << 30).map_err(|e| PackError::BadPlan {
        path: output.join(shardtool_manifest::FILE_NAME),
        message: e.to_string(),
    })?;
    let (recorded, given) = (
        crate::plan::applied_options(manifest.pack.clone()),
        crate::plan::applied_options(plan.manifest_options()),
    );
    if recorded != given {
        return Err(PackError::ResumeMismatch {
            path: output.clone(),
            differs: crate::plan::option_differences(
                &serde_json::Value::Object(recorded),
                &serde_json::Value::Object(given),
            ),
        });
    }
    // The manifest does not name the input. A plan left beside it (killed while tidying up)
    // does; otherwise a local folder or list is listed again and must hold as many inputs.
    if store.size(&format!("{PLAN_DIR}/{PLAN_FILE}"))?.is_some() {
        check_same_options(&read_plan_in(store, output)?, plan)?;
    } else {
        same_count(plan, manifest.inputs.found, "packed")?;
    }
    if !store.is_remote() {
        let dir = plan_dir(store.local());
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| PackError::io(dir, e))?;
        }
    }
    let mut errors = Vec::new();
    let report = store.read(ERRORS_FILE, 1 << 30)?.unwrap_or_default();
    // The merged report was written by the run that committed; a line it cannot read is skipped.
    errors::read_jsonl(&report[..], |line| errors.extend(line.ok()))
        .map_err(|e| PackError::io(output.join(ERRORS_FILE), e))?;
    Ok(PackReport {
        bytes_out: manifest.totals.bytes,
        manifest,
        errors,
        bytes_in: 0,
        packed_now: 0,
        finished_before: true,
        elapsed: start.elapsed(),
        stages: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_shards_are_named_as_ranges_that_shards_takes() {
        assert_eq!(crate::shard_ranges(&[0, 1, 2, 5, 7, 8, 20]), "0-2,5,7-8,20");
        assert_eq!(crate::shard_ranges(&[4]), "4");
        assert_eq!(crate::shard_ranges(&[]), "");
        let hint = |p: &str| crate::redo_hint(Path::new(p), &[1, 2], false);
        assert_eq!(
            hint("/data/out"),
            "run them again: shardtool pack --plan /data/out --shards 1-2"
        );
        assert_eq!(
            hint("/my data/it's"),
            "run them again: shardtool pack --plan '/my data/it'\\''s' --shards 1-2"
        );
        assert_eq!(
            hint("-out"),
            "run them again: shardtool pack --plan ./-out --shards 1-2"
        );
        // Thousands of odd shards: a command that fits, not one of every shard.
        let odd: Vec<u64> = (0..10_000).filter(|i| i % 2 == 1).collect();
        let long = crate::redo_hint(Path::new("/o"), &odd, false);
        assert!(long.len() < 300, "{long}");
        assert!(
            long.contains("--plan /o --part 0/1")
                && long.contains("5000 shards are missing, the first 1,3,")
        );
    }

    #[test]
    fn parts_split_the_shards_round_robin_and_named_shards_are_checked() {
        let part = |index, count| assigned(&Assignment::Part { index, count }, 7);
        assert_eq!(part(0, 1).unwrap(), (0..7).collect::<Vec<_>>());
        assert_eq!(part(1, 3).unwrap(), vec![1, 4]);
        assert_eq!(part(4, 8).unwrap(), vec![4]);
        assert_eq!(part(7, 8).unwrap(), Vec::<u64>::new());
        let mut all: Vec<u64> = (0..3).flat_map(|i| part(i, 3).unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        assert!(matches!(part(3, 3), Err(PackError::BadPart { .. })));
        assert!(matches!(part(0, 0), Err(PackError::BadPart { .. })));
        let named = assigned(&Assignment::Shards(vec![5, 1, 5]), 7).unwrap();
        assert_eq!(named, vec![1, 5]);
        assert!(matches!(
            assigned(&Assignment::Shards(vec![7]), 7),
            Err(PackError::BadPart { .. })
        ));
    }
}
