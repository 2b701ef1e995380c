//! `shardtool pack`: flags → `PackPlan` → `shardtool_pack::pack` → summary.

use crate::args::{FormatArg, MergeArgs, PackArgs, StatusArgs};
use crate::progress::PackProgress;
use crate::Failure;
use anyhow::anyhow;
use shardtool_image::Encode;
use shardtool_pack::{
    pack, resolve_input, Assignment, Columns, Compression, InputFormat, InputSource, PackError,
    PackPlan, PackReport, PlanError, ShardFormatChoice,
};
use std::path::{Path, PathBuf};

/// Builds the plan from the flags, without touching the file system.
pub fn plan(a: PackArgs) -> Result<PackPlan, String> {
    let format = a
        .input_format
        .as_deref()
        .map(str::parse::<InputFormat>)
        .transpose()
        .map_err(|e| format!("--input-format: {e}"))?;
    let (source, output) = match (a.list, a.input, a.output) {
        (Some(list), Some(_), None) if list.to_string_lossy().contains("://") => {
            return Err(format!(
                "--list {}: a list is read from a local file (the paths it names are local too); \
                 URLs are inputs for WebDataset shards and Parquet files",
                list.display()
            ))
        }
        (Some(_), Some(_), None) if format.is_some_and(|f| f != InputFormat::List) => {
            return Err(format!(
                "--input-format {}: --list reads a list (CSV or JSONL, by its name's .csv or \
                 .jsonl, else by its first row); give the input as INPUT for another format",
                a.input_format.as_deref().unwrap_or_default()
            ))
        }
        (Some(list), Some(out), None) => (InputSource::List(list), PathBuf::from(out)),
        (Some(_), Some(_), Some(_)) => {
            return Err("with --list, give only OUTPUT (the inputs come from the list)".into())
        }
        (None, Some(input), Some(out)) => (
            resolve_input(&input, format, &Default::default()).map_err(|e| e.to_string())?,
            out,
        ),
        _ => {
            return Err(
                "usage: shardtool pack <INPUT> <OUTPUT> or shardtool pack --list FILE <OUTPUT>"
                    .into(),
            )
        }
    };
    let mut plan = PackPlan::new(source, output);
    plan.columns = Columns {
        image: a.image_column,
        label: a.label_column,
        text: a.text_column,
        drop: a.drop_column,
    }
    .for_source(&plan.source);
    let t = &mut plan.transform;
    t.resize = a
        .resize
        .parse()
        .map_err(|e: shardtool_image::ParseError| e.0)?;
    t.upscale = a.upscale;
    t.filter = a
        .filter
        .parse()
        .map_err(|e: shardtool_image::ParseError| e.0)?;
    t.encode = a
        .encode
        .parse()
        .map_err(|e: shardtool_image::ParseError| e.0)?;
    t.quality = a.quality.unwrap_or(t.quality);
    t.decode_scale = a
        .decode_scale
        .parse()
        .map_err(|e: shardtool_image::ParseError| e.0)?;
    t.limits.max_pixels = a.max_pixels;
    plan.format = match a.format {
        FormatArg::Wds => ShardFormatChoice::Wds,
        FormatArg::Packed => ShardFormatChoice::Packed,
    };
    if plan.format == ShardFormatChoice::Packed
        && plan.transform.encode != shardtool_image::Encode::Jpeg
    {
        return Err(format!(
            "--encode {}: packed shards hold raw pixels; --encode chooses how wds shards store images",
            a.encode
        ));
    }
    if let Some(q) = a.quality {
        if plan.format == ShardFormatChoice::Packed || plan.transform.encode == Encode::Png {
            return Err(format!(
                "--quality {q}: only JPEG-encoded wds shards use it, and {}",
                if plan.format == ShardFormatChoice::Packed {
                    "packed shards hold raw pixels"
                } else {
                    "--encode png is lossless"
                }
            ));
        }
    }
    plan.compression = match a.compress.as_deref() {
        None | Some("none") => Compression::None,
        Some("zstd") => Compression::Zstd(3),
        Some(s) => match s.strip_prefix("zstd:").and_then(|l| l.parse().ok()) {
            Some(level) => Compression::Zstd(level),
            None => {
                return Err(format!(
                    "invalid --compress {s:?}: expected zstd or zstd:LEVEL"
                ))
            }
        },
    };
    plan.keys = a.keys.parse().map_err(|e| format!("--{e}"))?;
    plan.seed = (!a.no_shuffle).then_some(a.seed);
    if let Some(size) = &a.shard_size {
        plan.shard_bytes =
            shardtool_core::parse_byte_size(size).map_err(|e| format!("--shard-size: {e}"))?;
    }
    plan.shard_samples = a.shard_samples;
    plan.prefix = a.prefix;
    if let Some(j) = a.jobs {
        plan.jobs = j;
    }
    plan.max_errors = a.max_errors;
    plan.overwrite = a.overwrite;
    plan.resume = a.resume;
    plan.validate()
        .map_err(|e| format!("{}: {e}", flag_of(&e)))?;
    Ok(plan)
}

/// The flag that sets the option a plan error is about.
fn flag_of(e: &PlanError) -> &'static str {
    match e {
        PlanError::Prefix(_) => "--prefix",
        PlanError::ZeroShardBytes => "--shard-size",
        PlanError::ZeroShardSamples => "--shard-samples",
        PlanError::NoJobs | PlanError::TooManyJobs(_) => "--jobs",
        PlanError::Quality(_) => "--quality",
        PlanError::ZstdLevel(_) => "--compress",
        PlanError::ZstdShardSize(_) => "--shard-size",
        PlanError::PackedShardSamples(_) | PlanError::NeedShardSamples => "--shard-samples",
        PlanError::OutputHoldsInputs { .. } => "OUTPUT",
        _ => "options",
    }
}

// What pack lets a zstd shard grow to is what verify and inspect decompress.
const _: () =
    assert!(shardtool_pack::MAX_ZSTD_SHARD_BYTES == shardtool_verify::DEFAULT_MAX_SHARD_BYTES);

/// Maps a pack error to its exit code.
fn failure(e: PackError) -> Failure {
    match e {
        // Stopped by a signal, cleaned up: the status a shell gives a process the signal ends.
        PackError::Interrupted => {
            Failure::signalled(crate::progress::stopped_by().unwrap_or(libc::SIGINT))
        }
        PackError::OutputNotEmpty { path }
            if !path.join(shardtool_manifest::FILE_NAME).exists()
                && !path.join(shardtool_pack::PLAN_DIR).exists()
                && holds_images(&path) =>
        {
            Failure::usage(anyhow!(
                "output {} holds images and no dataset: are INPUT and OUTPUT the wrong way \
                 round? (shardtool pack INPUT OUTPUT; --overwrite packs into it all the same, \
                 keeping the images)",
                path.display()
            ))
        }
        PackError::OutputNotEmpty { path } => Failure::usage(anyhow!(
            "output {} is not empty; pass --overwrite to {}{}",
            path.display(),
            if path.join(shardtool_manifest::FILE_NAME).exists() {
                "replace the dataset in it"
            } else {
                "remove what a pack left in it and start over (it holds no dataset: no \
                 manifest.json, as a pack stopped before the end leaves it; other files stay)"
            },
            if path.join(shardtool_pack::PLAN_DIR).exists() {
                ", or --resume (with the same options) to continue an interrupted pack"
            } else {
                ""
            }
        )),
        // A plan that cannot be run as it is (an input changed since, a damaged plan file)
        // fails every attempt alike: exit 2, which schedulers are told not to retry.
        e @ PackError::BadPlan { .. } => Failure::usage(e),
        e if e.is_usage() => Failure::usage(e),
        e => Failure::run(e),
    }
}

/// Whether `folder` holds image files, or class folders of them (a look at the first hundred
/// entries of each): an input given as OUTPUT.
fn holds_images(folder: &Path) -> bool {
    let image = |p: &PathBuf| shardtool_pack::has_image_extension(p);
    let entries = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir).map_or_else(
            |_| Vec::new(),
            |d| d.flatten().take(100).map(|e| e.path()).collect(),
        )
    };
    entries(folder)
        .iter()
        .any(|p| image(p) || (p.is_dir() && entries(p).iter().any(image)))
}

/// Most shards `--shards` (or one of its ranges) may name.
const MAX_SHARD_RANGE: u64 = 1 << 24;

/// Parses `--part I/N` or `auto/N` (I from the Slurm array or Kubernetes indexed-Job
/// environment) and `--shards 3,17`.
pub fn assignment(
    part: Option<&str>,
    shards: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Assignment, String> {
    if let Some(list) = shards {
        let bad =
            || format!("--shards {list:?}: expected shard indices and ranges like 3,17,20-29");
        let mut parsed = Vec::new();
        for item in list.split(',') {
            let (a, b) = item.split_once('-').unwrap_or((item, item));
            let (a, b) = (a.trim().parse::<u64>(), b.trim().parse::<u64>());
            let (Ok(a), Ok(b)) = (a, b) else {
                return Err(bad());
            };
            if b < a {
                return Err(format!(
                    "--shards {list:?}: the range {a}-{b} runs backwards"
                ));
            }
            // A plan has at most as many shards as inputs; a range past that is a typo.
            let too_many =
                || format!("--shards {list:?}: more than {MAX_SHARD_RANGE} shards named at once");
            if b - a >= MAX_SHARD_RANGE {
                return Err(too_many());
            }
            parsed.extend(a..=b);
            if parsed.len() as u64 > MAX_SHARD_RANGE {
                return Err(too_many());
            }
        }
        return Ok(Assignment::Shards(parsed));
    }
    let Some(part) = part else {
        return Ok(Assignment::Part { index: 0, count: 1 });
    };
    let bad = || format!("--part {part:?}: expected I/N (0 <= I < N) or auto/N");
    let (i, n) = part.split_once('/').ok_or_else(bad)?;
    let count: u64 = n.parse().map_err(|_| bad())?;
    if count == 0 {
        return Err(format!("--part {part}: the part count must be at least 1"));
    }
    let index = if i == "auto" {
        let num = |name: &str| -> Result<Option<u64>, String> {
            env(name)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{name}={v:?} is not a number"))
                })
                .transpose()
        };
        // The array index itself, not its offset from the array's first: a task resubmitted
        // alone (`sbatch --array=5`) must still pack part 5.
        let (id, var) = match (num("SLURM_ARRAY_TASK_ID")?, num("JOB_COMPLETION_INDEX")?) {
            (Some(id), _) => (id, "SLURM_ARRAY_TASK_ID"),
            (None, Some(id)) => (id, "JOB_COMPLETION_INDEX"),
            (None, None) => {
                return Err(format!(
                    "--part {part}: neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set; \
                     give the part index (I/{n})"
                ))
            }
        };
        // Every task of a 1-based array refuses (its SLURM_ARRAY_TASK_MIN is 1 and MAX reaches
        // N), not only the last: the others would run while part 0 never does. A 0-based array
        // with more tasks than parts runs the parts; the tasks past them refuse.
        let slurm = var == "SLURM_ARRAY_TASK_ID";
        let (min, max) = if slurm {
            (num("SLURM_ARRAY_TASK_MIN")?, num("SLURM_ARRAY_TASK_MAX")?)
        } else {
            (None, None)
        };
        let (top, top_var) = match (min, max) {
            (Some(lo), Some(hi)) if lo >= 1 && hi >= count => (hi, "SLURM_ARRAY_TASK_MAX"),
            _ => (id, var),
        };
        if top >= count {
            let hint = if slurm {
                format!("number the tasks from 0 (sbatch --array=0-{})", count - 1)
            } else {
                format!(
                    "run the Job with completions: {count} (indexes 0-{})",
                    count - 1
                )
            };
            return Err(format!(
                "--part {part}: {top_var} is {top}, not below the part count {count}; {hint}"
            ));
        }
        id
    } else {
        i.parse().map_err(|_| bad())?
    };
    if index >= count {
        return Err(format!(
            "--part {part}: part index {index} is not below the part count {count}"
        ));
    }
    Ok(Assignment::Part { index, count })
}

/// Runs `shardtool pack --plan OUTPUT [--part I/N | --shards LIST]`.
fn run_part(a: PackArgs, output: PathBuf) -> Result<(), Failure> {
    if a.input.is_some() || a.output.is_some() {
        return Err(Failure::usage(anyhow!(
            "with --plan, give no INPUT or OUTPUT: the plan in --plan OUTPUT names them"
        )));
    }
    if let Some(j) = a.jobs.filter(|&j| j == 0 || j > shardtool_pack::MAX_JOBS) {
        let why = match j {
            0 => PlanError::NoJobs,
            _ => PlanError::TooManyJobs(j),
        };
        return Err(Failure::usage(anyhow!("--jobs {j}: {why}")));
    }
    let which = assignment(a.part.as_deref(), a.shards.as_deref(), |k| {
        std::env::var(k).ok()
    })
    .map_err(|e| Failure::usage(anyhow!(e)))?;
    crate::progress::stop_on_signals();
    let progress = PackProgress::new(a.quiet);
    let result = shardtool_pack::pack_part(&output, &which, a.jobs, a.max_errors, &progress);
    progress.finish();
    let r = result.map_err(failure)?;
    // The shards asked for once each, in order: as ranges in the text (thousands of shards
    // make one short line), as a list in `--json`.
    let asked = match &which {
        Assignment::Shards(s) => {
            let mut s = s.clone();
            s.sort_unstable();
            s.dedup();
            s
        }
        Assignment::Part { .. } => Vec::new(),
    };
    let what = match &which {
        Assignment::Part { index, count } => format!("part {index}/{count}"),
        Assignment::Shards(_) => format!("shards {}", shardtool_pack::shard_ranges(&asked)),
    };
    if a.json {
        let mut summary = r.summary();
        // As Python's `pack_part` reports it.
        match &which {
            Assignment::Part { index, count } => {
                summary.insert("part".into(), (*index).into());
                summary.insert("parts".into(), (*count).into());
            }
            Assignment::Shards(_) => {
                summary.insert("shards".into(), asked.into());
            }
        }
        summary.insert(
            "images_per_s".into(),
            (r.samples as f64 / r.elapsed.as_secs_f64().max(1e-9)).into(),
        );
        outln!("{}", serde_json::Value::Object(summary));
    } else if !a.quiet {
        outln!(
            "{what} of {}: {} shard(s) packed, {} already done; {} samples, {} failed, {:.1} MB in {:.2} s",
            output.display(),
            r.packed,
            r.skipped,
            r.samples,
            r.failed,
            mb(r.bytes_out),
            r.elapsed.as_secs_f64()
        );
    }
    Ok(())
}

/// Runs `shardtool plan`.
pub fn run_plan(a: PackArgs) -> Result<(), Failure> {
    if a.plan.is_some() || a.part.is_some() || a.shards.is_some() {
        return Err(Failure::usage(anyhow!(
            "`shardtool plan` takes INPUT OUTPUT and pack options, not --plan, --part or \
             --shards (they run a plan: `shardtool pack --plan OUTPUT --part I/N`)"
        )));
    }
    let (quiet, json, resume) = (a.quiet, a.json, a.resume);
    let plan = plan(a).map_err(|e| match e.strip_prefix("usage: ") {
        Some(usage) => Failure::usage(anyhow!("usage: {}", usage.replace("pack ", "plan "))),
        None => Failure::usage(anyhow!(e)),
    })?;
    if plan.shard_samples.is_none() {
        return Err(Failure::usage(anyhow!(
            "--shard-samples is required: a plan fixes what each shard holds by position"
        )));
    }
    // SIGINT and SIGTERM end it once the inputs are listed, before an earlier dataset is
    // cleared, removing what it staged.
    crate::progress::stop_on_signals();
    let stop = crate::progress::PackProgress::new(true);
    // With --resume a whole plan made from the same input and options is kept; an interrupted
    // one is simply made again.
    let earlier = match resume {
        true => shardtool_pack::read_plan(&plan.output).ok().map(|f| f.hash),
        false => None,
    };
    let made = match resume {
        true => shardtool_pack::make_or_keep_plan(&plan, &stop),
        false => shardtool_pack::make_plan(&plan, &stop),
    };
    let file = made.map_err(|e| match e {
        PackError::OutputNotEmpty { path } => Failure::usage(anyhow!(
            "output {} is not empty; pass --overwrite to replace the dataset or plan in it",
            path.display()
        )),
        e => failure(e),
    })?;
    let out = plan.output.display();
    // --resume found this very plan there: kept, with whatever its parts (or a merge) did.
    let kept = earlier.as_ref() == Some(&file.hash);
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "plan": file.hash,
                "kept": kept,
                "inputs": file.inputs,
                "failed_listing": file.errors.len(),
                "shards": file.shards,
                "shard_samples": file.shard_samples,
            })
        );
    } else if !quiet {
        outln!(
            "{} {} inputs into {} shard(s) of {} in {out} (plan {})",
            match kept {
                true => "kept the plan (same input and options) of",
                false => "planned",
            },
            file.inputs,
            file.shards,
            file.shard_samples,
            file.hash
        );
        if kept {
            let out = shardtool_pack::shell_word(&plan.output);
            outln!("  its shards done so far are kept: shardtool status {out} shows them");
        }
        if !file.errors.is_empty() {
            outln!(
                "  {} input(s) failed while listing (kept for errors.jsonl)",
                file.errors.len()
            );
        }
        let out = shardtool_pack::shell_word(&plan.output);
        outln!("  next: shardtool pack --plan {out} --part I/N   (for each I < N), then shardtool merge {out}");
    }
    file.check_listing_failures(&plan.output).map_err(failure)
}

/// Runs `shardtool merge`.
pub fn run_merge(a: MergeArgs) -> Result<(), Failure> {
    let r = shardtool_pack::merge(&a.output, a.max_errors).map_err(|e| {
        if a.json {
            // Scripts read why, and which shards to redo, from stdout as well.
            let missing = match &e {
                PackError::Incomplete { missing, .. } => missing.clone(),
                _ => Vec::new(),
            };
            outln!(
                "{}",
                serde_json::json!({ "merged": false, "missing": missing, "error": e.to_string() })
            );
        }
        failure(e)
    })?;
    let m = &r.manifest;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "merged": true,
                "inputs": m.inputs,
                "shards": m.totals.shards,
                "samples": m.totals.samples,
                "bytes": m.totals.bytes,
            })
        );
    } else if !a.quiet {
        outln!(
            "merged {} shard(s), {} samples ({} of {} inputs failed, see errors.jsonl) into {}",
            m.totals.shards,
            m.totals.samples,
            m.inputs.failed,
            m.inputs.found,
            a.output.join(shardtool_manifest::FILE_NAME).display()
        );
    }
    Ok(())
}

/// Runs `shardtool status`: exit 0 when every shard is done, 1 otherwise.
pub fn run_status(a: StatusArgs) -> Result<(), Failure> {
    let s = shardtool_pack::status(&a.output).map_err(failure)?;
    if a.json {
        outln!("{}", serde_json::to_string(&s).unwrap_or_default());
    } else if !a.quiet {
        outln!(
            "plan {}: {} of {} shard(s) done, {} samples, {} failed inputs{}",
            s.plan,
            s.done.len(),
            s.shards,
            s.samples,
            s.failed,
            match (s.merged, s.missing.is_empty()) {
                (true, true) => "; merged",
                // Shards the manifest lists went missing or changed size after the merge.
                (true, false) =>
                    "; merged, but shards it lists are missing or changed since \
                                  (shardtool verify checks the dataset)",
                _ => "",
            }
        );
        // Once merged (by a merge given a larger limit), there is nothing left to refuse.
        if let Some(max) = s.max_errors.filter(|&m| s.failed > m && !s.merged) {
            outln!(
                "  more inputs failed than the plan's --max-errors {max}: merge will commit \
                 nothing unless given a larger --max-errors"
            );
        }
        if let Some(note) = shardtool_pack::stopped_runs_note(&s.stopped) {
            outln!("  {note}");
        }
        if !s.missing.is_empty() {
            let list: Vec<String> = s.missing.iter().take(50).map(u64::to_string).collect();
            outln!(
                "  missing: {}{}",
                list.join(","),
                if s.missing.len() > 50 { ",…" } else { "" }
            );
        }
    }
    if s.missing.is_empty() {
        Ok(())
    } else {
        Err(Failure::run(anyhow!(
            "{} shard(s) not done",
            s.missing.len()
        )))
    }
}

/// Runs `shardtool pack`.
pub fn run(a: PackArgs) -> Result<(), Failure> {
    if let Some(output) = a.plan.clone() {
        return run_part(a, output);
    }
    if a.part.is_some() || a.shards.is_some() {
        return Err(Failure::usage(anyhow!(
            "--part and --shards need --plan OUTPUT"
        )));
    }
    let quiet = a.quiet;
    let json = a.json;
    let plan = plan(a).map_err(|e| Failure::usage(anyhow!(e)))?;
    crate::progress::stop_on_signals();
    if !quiet {
        if let Some(what) = slow_listing(&plan.source) {
            // Progress counts inputs once they are listed; until then it would say nothing.
            errln!("listing: {what} before packing…");
        }
    }
    let progress = PackProgress::new(quiet);
    let result = pack(&plan, &progress);
    progress.finish();
    match result {
        Ok(report) => {
            // A resume of a finished pack had no failures of its own to report: `-q` prints none.
            let shown = match (quiet, report.finished_before) {
                (true, true) => 0,
                (true, false) => usize::MAX,
                (false, _) => 10,
            };
            for e in report.errors.iter().take(shown) {
                errln!(
                    "failed: {} ({}): {}",
                    crate::stdout::name(&e.path),
                    e.kind,
                    crate::stdout::printable(&e.message)
                );
            }
            if json {
                outln!("{}", summary_json(&report));
            } else if !quiet {
                print_summary(&plan.output, &report);
            }
            let said = |k: &str| report.manifest.pack.get(k).and_then(|v| v.as_str());
            if said("json") == Some("input") && said("resize") != Some("none") && !quiet {
                errln!(
                    "note: the inputs' own .json is carried in place of shardtool's, which \
                     records each image's size before and after --resize: sizes or boxes in the \
                     inputs' json stay in the input's pixels"
                );
            }
            let several = shardtool_pack::several_images_note(&report.manifest);
            if let Some(note) = several.filter(|_| plan.columns.image.is_none() && !quiet) {
                errln!("note: {note}");
            }
            if let (InputSource::Folder(root), [class]) =
                (&plan.source, &report.manifest.classes[..])
            {
                if let Some(hint) = one_class_of_folders(root, class).filter(|_| !quiet) {
                    errln!("note: {hint}");
                }
            }
            Ok(())
        }
        // Stopped before its first shard was published, an --overwrite leaves the earlier
        // dataset; the user must know whether it is still there.
        Err(PackError::Interrupted)
            if plan.overwrite && plan.output.join(shardtool_manifest::FILE_NAME).exists() =>
        {
            Err(Failure::signalled_after(
                crate::progress::stopped_by().unwrap_or(libc::SIGINT),
                format!(
                    "the earlier dataset in {} is left as it was (--overwrite replaces it only \
                     once the new one's first shard is ready)",
                    plan.output.display()
                ),
            ))
        }
        Err(e) => Err(failure(e)),
    }
}

fn summary_json(r: &PackReport) -> serde_json::Value {
    let m = &r.manifest;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    serde_json::json!({
        "inputs": m.inputs,
        "shards": m.totals.shards,
        "classes": m.classes.len(),
        "bytes_in": r.bytes_in,
        "bytes_out": r.bytes_out,
        "packed_now": r.packed_now,
        "finished_before": r.finished_before,
        "seconds": r.elapsed.as_secs_f64(),
        "images_per_s": r.packed_now as f64 / r.elapsed.as_secs_f64().max(1e-9),
        "stage_ms_total": {
            "read": ms(r.stages.read),
            "decode": ms(r.stages.decode),
            "resize": ms(r.stages.resize),
            "encode": ms(r.stages.encode),
            "write": ms(r.stages.write),
        },
    })
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// A hint when an ImageFolder packed as one class holds its images only in subfolders of that
/// class: the input was most likely named one folder too high (`data/` for `data/train/`).
fn one_class_of_folders(root: &Path, class: &str) -> Option<String> {
    let dir = root.join(class);
    let entries: Vec<_> = std::fs::read_dir(&dir).ok()?.flatten().collect();
    let folders = entries.iter().filter(|e| e.path().is_dir()).count();
    let files = entries
        .iter()
        .any(|e| e.path().is_file() && !e.file_name().to_string_lossy().starts_with('.'));
    (folders >= 2 && !files).then(|| {
        format!(
            "every image is in one class, {class:?}, whose {folders} subfolders hold them all: if \
             those are the classes, pack {} instead",
            dir.display()
        )
    })
}

fn print_summary(out: &Path, r: &PackReport) {
    let m = &r.manifest;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let i = &m.inputs;
    // A resume packs what earlier runs left: its speed is of its own images.
    let earlier = i.packed.saturating_sub(r.packed_now);
    let resumed = match (earlier, r.finished_before) {
        (_, true) => " (all by earlier runs: it was finished)".into(),
        (0, false) => String::new(),
        (e, false) => format!(" ({e} by earlier runs)"),
    };
    outln!(
        "packed {} of {} inputs into {} shard(s) in {}{resumed}",
        i.packed,
        i.found,
        m.totals.shards,
        out.display()
    );
    let ignored = match i.ignored {
        0 => String::new(),
        n => format!(
            ", ignored {n} (hidden files and folders; files not images or beside the class folders)"
        ),
    };
    match i.failed {
        0 => outln!("  failed 0{ignored}"),
        n => outln!("  failed {n} (see errors.jsonl){ignored}"),
    }
    if m.classes.is_empty() {
        // Unlabelled may be a surprise: a float `label` column is carried, not read, unless named.
        outln!(
            "  unlabelled (every label is -1): a WebDataset sample's label is its .cls field; a \
             list's or Parquet file's label column is read by --label-column (a float one only \
             when named)"
        );
    } else {
        outln!(
            "  classes {}: {}",
            m.classes.len(),
            m.classes
                .iter()
                .take(8)
                .map(|c| crate::stdout::name(c))
                .collect::<Vec<_>>()
                .join(", ")
                + if m.classes.len() > 8 { ", …" } else { "" }
        );
    }
    outln!(
        "  bytes in {:.1} MB, out {:.1} MB; {:.2} s, {:.0} images/s",
        mb(r.bytes_in),
        mb(r.bytes_out),
        secs,
        r.packed_now as f64 / secs
    );
    if r.packed_now == 0 {
        return;
    }
    let s = &r.stages;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e3 / (r.packed_now as f64);
    outln!(
        "  per image (worker ms): read {:.3}, decode {:.3}, resize {:.3}, encode {:.3}, write {:.3}",
        per(s.read),
        per(s.decode),
        per(s.resize),
        per(s.encode),
        per(s.write)
    );
}

/// What listing `source` does that takes time before the first input is packed, if anything:
/// fetching remote shards or files, staging Parquet row groups.
fn slow_listing(source: &InputSource) -> Option<String> {
    let remote = |v: &[String]| v.iter().filter(|s| shardtool_pack::is_remote(s)).count();
    match source {
        InputSource::Wds(v) if remote(v) > 0 => Some(format!(
            "fetching {} remote shard(s) into the output folder",
            remote(v)
        )),
        InputSource::Parquet(v) => Some(format!(
            "{}staging the rows of {} Parquet file(s)",
            if remote(v) > 0 { "fetching and " } else { "" },
            v.len()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn parts_come_from_the_flag_or_the_scheduler() {
        let part = |p: &str, vars: &[(&str, &str)]| assignment(Some(p), None, env(vars));
        assert_eq!(
            part("2/5", &[]),
            Ok(Assignment::Part { index: 2, count: 5 })
        );
        assert_eq!(
            part("auto/4", &[("SLURM_ARRAY_TASK_ID", "3")]),
            Ok(Assignment::Part { index: 3, count: 4 })
        );
        // A task resubmitted alone has itself as the array's first: its index is still its part.
        assert_eq!(
            part(
                "auto/4",
                &[("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_MIN", "2")]
            ),
            Ok(Assignment::Part { index: 2, count: 4 })
        );
        let one_based = part("auto/4", &[("SLURM_ARRAY_TASK_ID", "4")]).unwrap_err();
        assert!(one_based.contains("--array=0-3"), "{one_based}");
        // Every task of a 1-based array refuses, not only the one numbered N.
        let first = [
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_MAX", "4"),
        ];
        let refused = part("auto/4", &first).unwrap_err();
        assert!(refused.contains("SLURM_ARRAY_TASK_MAX is 4"), "{refused}");
        assert!(refused.contains("--array=0-3"), "{refused}");
        // A 0-based array with more tasks than parts runs the parts; the others refuse.
        let over = |id: &'static str| {
            [
                ("SLURM_ARRAY_TASK_ID", id),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "5"),
            ]
        };
        assert_eq!(
            part("auto/4", &over("3")),
            Ok(Assignment::Part { index: 3, count: 4 })
        );
        assert!(part("auto/4", &over("4")).is_err());
        // A Kubernetes index past the parts is told about completions, not sbatch; Slurm's
        // variables are not read then.
        let k8s = part(
            "auto/3",
            &[("JOB_COMPLETION_INDEX", "3"), ("SLURM_ARRAY_TASK_MAX", "x")],
        )
        .unwrap_err();
        assert!(k8s.contains("completions: 3"), "{k8s}");
        assert_eq!(
            part(
                "auto/3",
                &[("JOB_COMPLETION_INDEX", "2"), ("SLURM_ARRAY_TASK_MAX", "x")]
            ),
            Ok(Assignment::Part { index: 2, count: 3 })
        );
        // A sparse resubmission within the parts runs (--array=1,3).
        assert_eq!(
            part(
                "auto/4",
                &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_MAX", "3")]
            ),
            Ok(Assignment::Part { index: 1, count: 4 })
        );
        assert!(part("0/0", &[]).unwrap_err().contains("at least 1"));
        assert_eq!(
            part("auto/4", &[("JOB_COMPLETION_INDEX", "0")]),
            Ok(Assignment::Part { index: 0, count: 4 })
        );
        for bad in ["4/4", "1/0", "x/2", "3", "auto/2"] {
            assert!(part(bad, &[]).is_err(), "{bad}");
        }
        assert!(part("auto/2", &[("SLURM_ARRAY_TASK_ID", "2")]).is_err());
        assert!(part("auto/2", &[("JOB_COMPLETION_INDEX", "one")]).is_err());
        assert_eq!(
            assignment(None, Some("3, 17"), env(&[])),
            Ok(Assignment::Shards(vec![3, 17]))
        );
        assert!(assignment(None, Some("3;17"), env(&[])).is_err());
        assert_eq!(
            assignment(None, Some("0-2,7,9-9"), env(&[])),
            Ok(Assignment::Shards(vec![0, 1, 2, 7, 9]))
        );
        let many = ["0-16000000"; 3].join(",");
        for bad in ["3-1", "1-", "-2", "0-99999999999", "1,,2", &many] {
            assert!(assignment(None, Some(bad), env(&[])).is_err(), "{bad}");
        }
        let says = |list: &str| assignment(None, Some(list), env(&[])).unwrap_err();
        assert!(says("3-1").contains("runs backwards"), "{}", says("3-1"));
        assert!(says("0-4000000000").contains("more than"));
        assert!(says(&many).contains("more than"));
        assert_eq!(
            assignment(None, None, env(&[])),
            Ok(Assignment::Part { index: 0, count: 1 })
        );
    }
}
