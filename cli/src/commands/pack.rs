//! `shardtool pack`: flags → `PackPlan` → `shardtool_pack::pack` → summary.

use crate::args::{FormatArg, PackArgs};
use crate::progress::PackProgress;
use crate::Failure;
use anyhow::anyhow;
use shardtool_pack::{
    pack, resolve_input, Columns, Compression, InputFormat, InputSource, PackError, PackPlan,
    PackReport, PlanError, ShardFormatChoice,
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
    };
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
    t.quality = a.quality;
    t.decode_scale = a
        .decode_scale
        .parse()
        .map_err(|e: shardtool_image::ParseError| e.0)?;
    t.limits.max_pixels = a.max_pixels;
    plan.format = match a.format {
        FormatArg::Wds => ShardFormatChoice::Wds,
        FormatArg::Packed => ShardFormatChoice::Packed,
    };
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
    plan.seed = (!a.no_shuffle).then_some(a.seed);
    plan.shard_bytes =
        shardtool_core::parse_byte_size(&a.shard_size).map_err(|e| format!("--shard-size: {e}"))?;
    plan.shard_samples = a.shard_samples;
    plan.prefix = a.prefix;
    if let Some(j) = a.jobs {
        plan.jobs = j;
    }
    plan.max_errors = a.max_errors;
    plan.overwrite = a.overwrite;
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
        PlanError::NoJobs => "--jobs",
        PlanError::Quality(_) => "--quality",
        PlanError::ZstdLevel(_) => "--compress",
        _ => "options",
    }
}

/// Runs `shardtool pack`.
pub fn run(a: PackArgs) -> Result<(), Failure> {
    let quiet = a.quiet;
    let json = a.json;
    let plan = plan(a).map_err(|e| Failure::usage(anyhow!(e)))?;
    let progress = PackProgress::new(quiet);
    let result = pack(&plan, &progress);
    progress.finish();
    match result {
        Ok(report) => {
            for e in report
                .errors
                .iter()
                .take(if quiet { usize::MAX } else { 10 })
            {
                eprintln!("failed: {} ({}): {}", e.path, e.kind, e.message);
            }
            if json {
                println!("{}", summary_json(&report));
            } else if !quiet {
                print_summary(&plan.output, &report);
            }
            Ok(())
        }
        Err(PackError::OutputNotEmpty { path }) => Err(Failure::usage(anyhow!(
            "output {} is not empty; pass --overwrite to replace the dataset in it",
            path.display()
        ))),
        Err(e) if e.is_usage() => Err(Failure::usage(e)),
        Err(e) => Err(Failure::run(e)),
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
        "seconds": r.elapsed.as_secs_f64(),
        "images_per_s": m.inputs.packed as f64 / r.elapsed.as_secs_f64().max(1e-9),
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

fn print_summary(out: &Path, r: &PackReport) {
    let m = &r.manifest;
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let i = &m.inputs;
    println!(
        "packed {} of {} images into {} shard(s) in {}",
        i.packed,
        i.found,
        m.totals.shards,
        out.display()
    );
    println!(
        "  failed {} (see errors.jsonl), ignored {} non-image or hidden files",
        i.failed, i.ignored
    );
    println!(
        "  classes {}: {}",
        m.classes.len(),
        m.classes
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
            + if m.classes.len() > 8 { ", …" } else { "" }
    );
    println!(
        "  bytes in {:.1} MB, out {:.1} MB; {:.2} s, {:.0} images/s",
        mb(r.bytes_in),
        mb(r.bytes_out),
        secs,
        i.packed as f64 / secs
    );
    let s = &r.stages;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e3 / (i.packed.max(1) as f64);
    println!(
        "  per image (worker ms): read {:.3}, decode {:.3}, resize {:.3}, encode {:.3}, write {:.3}",
        per(s.read),
        per(s.decode),
        per(s.resize),
        per(s.encode),
        per(s.write)
    );
}
