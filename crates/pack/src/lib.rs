//! The pack pipeline as a library: list inputs → seeded global shuffle → parallel transform in a
//! bounded window → ordered shard writing → manifest, published last.
//!
//! [`pack`] takes a validated [`PackPlan`] and returns a [`PackReport`]; the CLI only parses
//! flags into a plan and prints the report. Nothing here prints.

mod braces;
mod containers;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod imagefolder;
mod labels;
mod list_file;
mod listing;
mod merge;
mod output;
mod parquet;
mod partition;
mod pipeline;
mod plan;
mod plan_file;
#[cfg(test)]
mod robustness;
mod sample_read;
mod sink;
mod splits;
mod store;
mod wds_input;

pub use braces::expand_braces;
pub use containers::{is_remote, resolve_input, InputFormat};
pub use imagefolder::has_image_extension;
pub use listing::{
    list_inputs, Columns, Container, ContainerKind, InputItem, InputSource, Inputs, ListError,
    ListOptions, Listing, Origin, IMAGE_EXTENSIONS, MAX_LABEL,
};
pub use merge::{merge, status, MergeReport, PlanStatus};
pub use partition::{pack_part, Assignment, DoneRecord, PartReport};
pub use pipeline::{pack, NoProgress, PackReport, Progress, ProgressSnapshot, StageTimes};
pub use plan::{
    Compression, FrozenOptions, KeyChoice, PackPlan, PlanError, ShardFormatChoice, DEFAULT_SEED,
    MAX_JOBS, MAX_ZSTD_SHARD_BYTES,
};
pub use plan_file::{make_or_keep_plan, make_plan, read_plan, PlanContainer, PlanFile, PLAN_DIR};

use std::path::PathBuf;

pub use shardtool_manifest::ErrorRecord;

/// Longest path or message an `errors.jsonl` line keeps, in bytes before JSON escaping: the line
/// then stays below what verify and merge read back (`errors::MAX_LINE_BYTES`) even when every
/// byte needs a six-byte escape.
pub(crate) const MAX_REPORTED_TEXT: usize = 4096;
const _: () =
    assert!(2 * 6 * (MAX_REPORTED_TEXT + 64) + 1024 < shardtool_manifest::errors::MAX_LINE_BYTES);

/// The `errors.jsonl` line for input `path` that failed with `kind` because of `message`.
pub(crate) fn failure(
    path: impl Into<String>,
    kind: &str,
    message: impl Into<String>,
) -> ErrorRecord {
    // Inputs named by URL may carry credentials: they never reach a report.
    let (path, message) = (path.into(), message.into());
    ErrorRecord {
        path: bounded(&shardtool_core::redact_urls(&path)),
        kind: kind.to_string(),
        message: bounded(&shardtool_core::redact_urls(&message)),
    }
}

/// `text`, cut at [`MAX_REPORTED_TEXT`] bytes (at a character boundary) with a note of its
/// length when longer.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_REPORTED_TEXT {
        return text.to_string();
    }
    let end = (0..=MAX_REPORTED_TEXT)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// Why a pack could not run or finish. Per-input failures are not errors: they go to
/// `errors.jsonl`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The plan's options cannot work.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The input folder or list cannot be read at all.
    #[error("cannot read the inputs: {0}")]
    Inputs(ListError),
    /// More inputs than one pack can index.
    #[error("{count} inputs: one pack takes at most {max}; split the input")]
    TooManyInputs {
        /// Inputs listed.
        count: u64,
        /// The most one pack takes.
        max: u64,
    },
    /// The output path exists and is not a folder.
    #[error("output {path} is not a directory")]
    OutputNotAFolder {
        /// The output path.
        path: PathBuf,
    },
    /// The output folder holds files and the plan does not allow replacing them.
    #[error("output {path} is not empty")]
    OutputNotEmpty {
        /// The output folder.
        path: PathBuf,
    },
    /// `--overwrite` found a shard-like file that no pack wrote there (not listed by the old
    /// manifest, nor named as shards beside a stopped pack's mark): nothing is removed.
    #[error("output {path} holds {file}, which no earlier pack there accounts for (no manifest there lists it, and it is not named as the shards a stopped pack leaves beside its errors.jsonl or plan); --overwrite removes only an earlier pack's files: move it away or choose another output")]
    OutputHoldsOtherShards {
        /// The output folder.
        path: PathBuf,
        /// The file.
        file: String,
    },
    /// Reading an input failed for a fault of this machine, not of the input.
    #[error(
        "reading {}: {} (this machine's fault, not the input's: {}, and run again)",
        .0.path,
        .0.message,
        match .0.message.contains("no memory") || .0.message.contains("os error 12") {
            true => "free memory, or raise the memory limit (ulimit -v)",
            false => "raise the open-file limit (ulimit -n) or free memory",
        }
    )]
    MachineFault(ErrorRecord),
    /// The worker threads could not be started.
    #[error("cannot start {threads} worker threads: {cause}")]
    ThreadSpawn {
        /// How many were asked for.
        threads: usize,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: String,
    },
    /// More inputs failed than `--max-errors` allows (the CLI exits 1).
    #[error("{failed} inputs failed, more than --max-errors {max}; {}", see(report, *.kept))]
    TooManyErrors {
        /// Failures so far.
        failed: u64,
        /// The limit.
        max: u64,
        /// The error report path.
        report: PathBuf,
        /// Whether the earlier dataset `--overwrite` would replace is left whole (with its own
        /// report): the run stopped before its first shard.
        kept: bool,
    },
    /// The input holds no usable image at all (nothing was found, or every input failed).
    #[error("no usable image: {}", no_images(looked_for, *.failed, summary, report, *.kept))]
    NoImages {
        /// What was looked for, and where.
        looked_for: String,
        /// Inputs found that failed.
        failed: u64,
        /// Their failures by kind, and the first one; empty when none failed.
        summary: String,
        /// The error report, when inputs failed.
        report: PathBuf,
        /// Whether the output, holding an earlier dataset, was left as it was (and so the report
        /// was not written): `--overwrite` clears it only once an input is found that may be
        /// packed.
        kept: bool,
    },
    /// OUTPUT holds no plan.
    #[error(
        "{path} holds no plan (_plan/plan.json); {}",
        if *finished {
            "it holds a finished dataset (manifest.json), whose plan is gone: nothing to run or \
             merge (`shardtool verify` checks it)"
        } else {
            "make one with `shardtool plan`"
        }
    )]
    NoPlan {
        /// The output folder.
        path: PathBuf,
        /// Whether it holds a finished dataset (a manifest) instead.
        finished: bool,
    },
    /// The plan file cannot be used.
    #[error("plan {path}: {message}")]
    BadPlan {
        /// The plan file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// OUTPUT already holds a plan.
    #[error("{path} exists: OUTPUT is already planned; pass --resume to keep that plan (when made from the same input and options), or --overwrite to replace it and everything packed under it")]
    PlanExists {
        /// The plan file.
        path: PathBuf,
    },
    /// Another process holds the output folder: a plan or pack beside anything, or a part or
    /// merge beside a plan or pack. Not a usage error: it passes by itself, so a scheduler
    /// that retries failures (exit 1) but not usage errors (exit 2) runs it again.
    #[error(
        "another shardtool process is using {path} (planning or packing it, or running a part or \
         merge while this plans or packs); wait for it, or stop it and run again"
    )]
    PlanRunning {
        /// The output folder.
        path: PathBuf,
    },
    /// Stopped because its [`Progress`] asked it to (an interrupted caller).
    #[error("interrupted")]
    Interrupted,
    /// The plan was replaced while a part ran; what the part wrote belongs to the old one.
    #[error("{path} was replaced while this part ran; run the part again")]
    PlanChanged {
        /// The plan file.
        path: PathBuf,
    },
    /// A part or shard selection that does not fit the plan.
    #[error("{message}")]
    BadPart {
        /// What is wrong.
        message: String,
    },
    /// Shards without a done record of this plan (or damaged since).
    #[error("{} of the plan's shards are not done: {}{}{}; {}{}",
        missing.len(), names.iter().take(10).cloned().collect::<Vec<_>>().join(", "),
        if names.len() > 10 { ", …" } else { "" },
        damaged_note(damaged),
        redo_hint(output, missing, *staged_gone),
        stopped_note(stopped))]
    Incomplete {
        /// The output folder.
        output: PathBuf,
        /// Their indices.
        missing: Vec<u64>,
        /// Their file names.
        names: Vec<String>,
        /// The file names of those that were done but no longer match their checksums.
        damaged: Vec<String>,
        /// Whether the plan's staged inputs are gone (an earlier merge removed them).
        staged_gone: bool,
        /// The failure lists of runs that stopped past `--max-errors`.
        stopped: Box<[PathBuf]>,
    },
    /// `--resume` (or a plan kept) with options or inputs other than those planned.
    #[error("the pack in {path} was planned with other inputs or options ({differs}); rerun with those, or {}", start_over(path))]
    ResumeMismatch {
        /// The output folder.
        path: PathBuf,
        /// The options that differ, as `name: planned → given`.
        differs: String,
    },
    /// An object-store output could not be read or written.
    #[error("output {location}: {message}")]
    Store {
        /// The output URL.
        location: String,
        /// What failed.
        message: String,
    },
    /// Writing output failed.
    #[error("writing {path}: {cause}")]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: std::io::Error,
    },
    /// A shard could not be encoded.
    #[error("building shard {path}: {message}")]
    Shard {
        /// The shard file.
        path: PathBuf,
        /// The cause.
        message: String,
    },
}

/// Why a rerun of a run that stopped past `--max-errors` stops again, and what to do; `None`
/// when no run stopped. Said by `merge`'s error and by `status`.
pub fn stopped_runs_note(stopped: &[PathBuf]) -> Option<String> {
    let first = stopped.first()?;
    Some(format!(
        "a run stopped past --max-errors, its failures listed in {}{}: a rerun stops again \
         unless those inputs are mended or it and merge are given a larger --max-errors",
        first.display(),
        if stopped.len() > 1 {
            " and others beside it"
        } else {
            ""
        }
    ))
}

/// What to know of a dataset whose samples carry an image beside the one packed (a `.png` beside
/// a `.jpg`): which was transformed, and that the others were not; `None` for one image.
pub fn several_images_note(manifest: &shardtool_manifest::Manifest) -> Option<String> {
    let images: Vec<&str> = (manifest.fields.iter().chain(&manifest.optional_fields))
        .map(String::as_str)
        .filter(|f| shardtool_wds::is_image_field(f))
        .collect();
    (images.len() > 1).then(|| {
        format!(
            "samples hold several images ({}): the first in the order jpg, jpeg, png, webp, … \
             was transformed, the others carried as they were (not resized); name another with \
             --image-column and --encode its format (png: --encode png), so that no carried \
             field takes the name the image is stored under",
            images.join(", ")
        )
    })
}

/// [`stopped_runs_note`] as the end of a message.
fn stopped_note(stopped: &[PathBuf]) -> String {
    stopped_runs_note(stopped).map_or_else(String::new, |n| format!(" ({n})"))
}

/// Which of the shards not done were damaged after they were packed.
fn damaged_note(damaged: &[String]) -> String {
    match damaged {
        [] => String::new(),
        [one] => {
            format!(" ({one} was damaged after it was packed: it no longer matches its checksum)")
        }
        many => format!(
            " ({} of them, the first {}, were damaged after they were packed: they no longer \
             match their checksums)",
            many.len(),
            many[0]
        ),
    }
}

/// `path` as one word of a command line a shell reads back unchanged: quoted when it holds
/// anything but the plainest characters.
pub fn shell_word(path: &std::path::Path) -> String {
    let mut path = path.display().to_string();
    if path.starts_with('-') {
        // Read as a flag otherwise.
        path.insert_str(0, "./");
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./-+=:,@".contains(c);
    match !path.is_empty() && path.chars().all(plain) {
        true => path,
        false => format!("'{}'", path.replace('\'', "'\\''")),
    }
}

/// How to redo the `missing` shards of the plan in `output`, as a command line.
pub fn redo_hint(output: &std::path::Path, missing: &[u64], staged_gone: bool) -> String {
    if staged_gone {
        return "the plan's staged inputs are gone (a merge removed them): plan again with \
                --overwrite to redo them"
            .into();
    }
    let path = shell_word(output);
    let ranges = shard_ranges(missing);
    // Past a screenful, every part again: a part skips the shards already done.
    const MAX_RANGES: usize = 32;
    match ranges.split(',').nth(MAX_RANGES) {
        None => format!("run them again: shardtool pack --plan {path} --shards {ranges}"),
        Some(_) => {
            let first: Vec<&str> = ranges.split(',').take(8).collect();
            format!(
                "run them again: shardtool pack --plan {path} --part 0/1 (it skips the shards \
                 done; spread it with --part I/N); {} shards are missing, the first {}",
                missing.len(),
                first.join(",")
            )
        }
    }
}

/// Ascending shard indices as `0-9,12,15-20`, the form `--shards` takes.
pub fn shard_ranges(shards: &[u64]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < shards.len() {
        let start = shards[i];
        let mut end = start;
        while i + 1 < shards.len() && shards[i + 1] == end + 1 {
            i += 1;
            end += 1;
        }
        out.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// Why nothing was packed: where images were looked for when none was found; otherwise that
/// every input found failed, and why (a sample with an image that failed for its other fields
/// was no "image not found").
fn no_images(
    looked_for: &str,
    failed: u64,
    summary: &str,
    report: &std::path::Path,
    kept: bool,
) -> String {
    let found = match failed {
        0 => format!("looked for {looked_for}"),
        _ => format!("every one of the {failed} inputs found ({looked_for}) failed: {summary}"),
    };
    match (kept, failed) {
        (false, 0) => found,
        (true, 0) => format!(
            "{found}; {} is left as it was",
            report.parent().unwrap_or(report).display()
        ),
        _ => format!("{found}; {}", see(report, kept)),
    }
}

/// Where a failed run's report is; or, when `kept`, that the earlier dataset in its folder is
/// left as it was, with its own report, and how to see this run's every failure.
fn see(report: &std::path::Path, kept: bool) -> String {
    match kept {
        false => format!("see {}", report.display()),
        true => format!(
            "{} is left as it was, with its own {} (--overwrite replaces an earlier dataset only \
             once the new one's first shard is ready; pack into an empty folder to list every \
             failure)",
            report.parent().unwrap_or(report).display(),
            report.file_name().unwrap_or_default().to_string_lossy()
        ),
    }
}

/// Failures counted by kind, most frequent first, then the first failure in full (cut to a
/// line): `45 too_many_pixels; the first, c/a.jpg: 480x640 is 307200 pixels, …`.
pub(crate) fn failure_summary(errors: &[ErrorRecord]) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for e in errors {
        match kinds.iter_mut().find(|(k, _)| *k == e.kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((&e.kind, 1)),
        }
    }
    kinds.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    match errors.first() {
        Some(e) => {
            let full = format!("{}: {}", e.path, e.message);
            let mut first: String = full.chars().take(300).collect();
            if first.len() < full.len() {
                first.push_str(" …");
            }
            format!("{}; the first, {first}", counts.join(", "))
        }
        None => String::new(),
    }
}

impl PackError {
    /// Whether the pack could not start because of what it was given (options, inputs, output
    /// folder), rather than failing while it ran: the CLI's exit 2, Python's `ValueError`.
    pub fn is_usage(&self) -> bool {
        // Inputs that could not be listed for want of file descriptors or memory: a failed run.
        if let PackError::Inputs(ListError::Io { cause, .. }) = self {
            if shardtool_core::machine_fault(cause) {
                return false;
            }
        }
        matches!(
            self,
            PackError::Plan(_)
                | PackError::Inputs(_)
                | PackError::TooManyInputs { .. }
                | PackError::OutputNotAFolder { .. }
                | PackError::OutputNotEmpty { .. }
                | PackError::OutputHoldsOtherShards { .. }
                | PackError::NoPlan { .. }
                | PackError::PlanExists { .. }
                | PackError::BadPart { .. }
                | PackError::ResumeMismatch { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PackError::Io {
            path: path.into(),
            cause: source,
        }
    }
}

/// How to start a pack in `output` over: `--overwrite`, which in an object store deletes
/// nothing shardtool did not stage, so there the objects must go first.
fn start_over(output: &std::path::Path) -> &'static str {
    match store::is_remote(output) {
        false => "with --overwrite to start over",
        true => {
            "delete its objects (or use another prefix) to start over: in an object store \
             --overwrite deletes only what an unfinished plan staged"
        }
    }
}
