//! `shardtool inspect`: counts, class histogram, image sizes, fields and pack options of a
//! dataset or a single shard, as text or one JSON document.

use crate::args::InspectArgs;
use crate::commands::verify::{fetched, local_target, open_remote, opened};
use crate::Failure;
use anyhow::anyhow;
use shardtool_inspect::{inspect, inspect_remote, InspectReport};
use shardtool_verify::{ProblemKind, VerifyOptions};

/// Runs `shardtool inspect`.
pub fn run(a: InspectArgs) -> Result<(), Failure> {
    let mut opts = VerifyOptions::default();
    if let Some(j) = a.jobs {
        opts.jobs = j as usize;
    }
    let report = match open_remote(&a.target, &a.cache, a.json)? {
        Some((ds, workers)) => fetched(inspect_remote(&ds, workers, &opts), a.json)?,
        None => opened(inspect(&local_target(&a.target), &opts), a.json)?,
    };
    if a.json {
        let text = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
        outln!("{text}");
    } else {
        print_human(&report);
    }
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::run(anyhow!(
            "{} problem(s) found: the figures leave out what could not be read (shardtool \
             verify checks the whole dataset)",
            report.problems.len()
        )))
    }
}

/// `1234567` → `1.2 MB`.
fn human_bytes(b: f64) -> String {
    match b {
        b if b >= 1e9 => format!("{:.2} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.1} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.1} KB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

fn print_human(r: &InspectReport) {
    use crate::stdout::name;
    outln!(
        "{} {}{}",
        r.kind,
        r.target,
        r.tool
            .as_deref()
            .map(|t| format!("  (packed by {})", crate::stdout::printable(t)))
            .unwrap_or_default()
    );
    let formats: Vec<String> = r.formats.iter().map(|(f, n)| format!("{f}: {n}")).collect();
    outln!("  shards    {}  ({})", r.shards, formats.join(", "));
    match r.samples_in_manifest {
        Some(m) if m != r.samples => outln!(
            "  samples   {}  (the manifest says {m}; run shardtool verify)",
            r.samples
        ),
        _ => outln!("  samples   {}", r.samples),
    }
    let compressed = if r.uncompressed_bytes != r.stored_bytes {
        format!(
            ", {} uncompressed",
            human_bytes(r.uncompressed_bytes as f64)
        )
    } else {
        String::new()
    };
    outln!(
        "  bytes     {} stored{compressed}; {} per sample",
        human_bytes(r.stored_bytes as f64),
        human_bytes(r.bytes_per_sample)
    );
    let fields: Vec<String> = r
        .fields
        .iter()
        .map(|(f, s)| format!("{f} {}", human_bytes(s.mean_bytes)))
        .collect();
    outln!("  fields    {}  (mean per sample)", fields.join(", "));
    if let Some(declared) = &r.declared_fields {
        let optional = match r.optional_fields.as_deref() {
            Some(o) if !o.is_empty() => format!("; in some: {}", o.join(", ")),
            _ => String::new(),
        };
        outln!(
            "  declared  in every sample: {}{optional}",
            declared.join(", ")
        );
    }
    match r.unlabelled {
        0 => outln!("  classes   {}", r.classes.len()),
        n => outln!("  classes   {}  ({n} samples unlabelled)", r.classes.len()),
    }
    let total: u64 = r.classes.iter().map(|c| c.count).sum::<u64>().max(1);
    let max = r.classes.iter().map(|c| c.count).max().unwrap_or(1).max(1);
    let width = r
        .classes
        .iter()
        .map(|c| name(c.name.as_deref().unwrap_or("?")).chars().count())
        .max()
        .unwrap_or(1)
        .min(32);
    // ImageNet's thousand fit; past that the text shows the first and `--json` lists them all.
    const MAX_SHOWN: usize = 1000;
    for c in r.classes.iter().take(MAX_SHOWN) {
        let full = name(c.name.as_deref().unwrap_or("?"));
        let shown: String = match full.chars().count() > 32 {
            true => full.chars().take(31).chain(['…']).collect(),
            false => full.into_owned(),
        };
        let bar = "#".repeat(((c.count * 30).div_ceil(max)) as usize);
        outln!(
            "    {:>4} {shown:<width$} {:>8} {:>5.1}%  {bar}",
            c.label,
            c.count,
            c.count as f64 * 100.0 / total as f64
        );
    }
    if r.classes.len() > MAX_SHOWN {
        outln!(
            "    … {} more classes (--json lists every one)",
            r.classes.len() - MAX_SHOWN
        );
    }
    let s = &r.image_sizes;
    outln!("  image sizes ({} images)", s.images);
    if s.images > 0 {
        outln!(
            "    width   min {:>5}  median {:>5}  max {:>5}",
            s.width.min,
            s.width.median,
            s.width.max
        );
        outln!(
            "    height  min {:>5}  median {:>5}  max {:>5}",
            s.height.min,
            s.height.median,
            s.height.max
        );
        let common: Vec<String> = s
            .most_common
            .iter()
            .map(|c| format!("{}x{} ({})", c.width, c.height, c.count))
            .collect();
        outln!("    most common: {}", common.join(", "));
    }
    if let Some(pack) = &r.pack {
        outln!("  pack options");
        for (k, v) in pack {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            outln!("    {k:<14} {v}");
        }
    }
    for p in &r.problems {
        match p.kind {
            ProblemKind::ManifestInvalid => outln!("  manifest: {p}"),
            _ => outln!("  not counted: {p}"),
        }
    }
}
