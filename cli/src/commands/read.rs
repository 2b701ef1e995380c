//! `shardtool read`: runs the loader over a dataset; the same contract for users and tests.

use crate::{stdout, Failure};
use anyhow::Context;
use shardtool_reader::{
    CorruptPolicy, Loader, LoaderBuilder, LoaderState, Location, Next, Remainder, Transform,
};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Loader options shared by `read` and `bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoaderArgs {
    /// Dataset: a local directory or manifest.json (read in place), or the http(s):// or
    /// s3:// URL of a dataset folder or its manifest.json (read through the shard cache).
    #[arg(value_name = "DATASET")]
    pub dataset: PathBuf,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Epoch (changes the shard order and the buffer shuffle).
    #[arg(long, default_value_t = 0)]
    pub epoch: u64,
    /// This process's rank, given with --world. Without both: $RANK and $WORLD_SIZE as torchrun
    /// sets them (an error if either is set but not a whole number), else rank 0 of 1.
    #[arg(long, requires = "world")]
    pub rank: Option<u32>,
    /// Number of ranks, given with --rank (see --rank for the default).
    #[arg(long, requires = "rank")]
    pub world: Option<u32>,
    /// Reader threads (default: all cores, divided by $LOCAL_WORLD_SIZE, the ranks torchrun
    /// starts on this node; at most 4096). Never changes the order.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub workers: Option<u16>,
    /// Samples per batch.
    #[arg(long, default_value_t = 64, value_name = "B", value_parser = at_least_one)]
    pub batch: usize,
    /// Shuffle buffer size in samples (1 keeps the interleaved order).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    pub shuffle_buffer: u64,
    /// Shards interleaved into the shuffle buffer.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub interleave: u64,
    /// Keep manifest order (no shuffle).
    #[arg(long)]
    pub no_shuffle: bool,
    /// pad: every sample is read, ranks that run short repeat samples; drop: the last
    /// N mod world samples of the epoch order are left out.
    #[arg(long, default_value = "drop", value_parser = ["drop", "pad"])]
    pub remainder: String,
    /// Leave out the last batch of the epoch when it is short: every batch holds --batch
    /// samples (fixed shapes for XLA or CUDA graphs).
    #[arg(long)]
    pub drop_last: bool,
    /// Deliver batches as they complete instead of in order.
    #[arg(long)]
    pub out_of_order: bool,
    /// Decode tar image records to RGB8 at their stored size (the same as --transform decode).
    #[arg(long, conflicts_with = "transform")]
    pub decode: bool,
    /// What to do to each image before batching (options after a comma may be left out):
    ///   none                  the stored bytes (tar) or pixels (packed)
    ///   decode                RGB8 at the stored size
    ///   resize:S              shorter side S, aspect kept (longer side truncated, as
    ///                         torchvision's Resize(S))
    ///   center-crop:S,ratio=R
    ///                         the centre square of R × the shorter side (default 0.875),
    ///                         resized to S×S: ImageNet evaluation
    ///   random-resized-crop:S,scale=A-B,ratio=C-D
    ///                         torchvision's RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3),
    ///                         resized to S×S: training. JPEGs decode only the crop's region.
    /// Crops are a function of (--seed, --epoch, sample key) only.
    #[arg(long, value_name = "T", verbatim_doc_comment)]
    pub transform: Option<Transform>,
    /// Mirror each crop left to right with probability 0.5 (needs a crop transform).
    #[arg(long)]
    pub flip: bool,
    /// Decode whole JPEGs and crop afterwards: the reference the region decode is measured
    /// against (docs/benchmarks.md).
    #[arg(long)]
    pub no_region_decode: bool,
    /// Skip (and count) corrupt records, and shards that cannot be opened or fetched after
    /// every retry (their samples are counted as lost), instead of failing.
    #[arg(long)]
    pub skip_corrupt: bool,
    /// The most pixels a record may decode to; a larger one is corrupt (default: the limit the
    /// dataset was packed under, at least 100000000, at most 2^30). Lower it for datasets you do
    /// not trust: each decode takes 3 bytes a pixel, per worker.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pixels: Option<u64>,
    /// Testing aid: reading the record KEY sleeps SECS seconds, so a test can stop a read
    /// that waits.
    #[arg(long, hide = true, value_name = "KEY:SECS")]
    pub test_delay: Option<String>,
    #[command(flatten)]
    pub cache: crate::commands::cache::CacheArgs,
}

impl LoaderArgs {
    /// Applies the flags to a builder.
    pub fn builder(&self) -> Result<LoaderBuilder, Failure> {
        Ok(self.builder_with(self.location()?, self.cache.options()?))
    }

    /// Where the dataset lives: a path, or an `http(s)://`, `s3://` or `file://` URL.
    pub fn location(&self) -> Result<Location, Failure> {
        match self.dataset.to_str() {
            Some(s) => Location::parse(s).map_err(Failure::usage),
            None => Ok(Location::Local(self.dataset.clone())),
        }
    }

    /// Applies the flags to a builder, with the location and cache options already checked.
    pub fn builder_with(
        &self,
        location: Location,
        cache: shardtool_reader::CacheOptions,
    ) -> LoaderBuilder {
        let mut b = Loader::builder_at(location)
            .cache(cache)
            .seed(self.seed)
            .epoch(self.epoch)
            .batch_size(self.batch)
            .shuffle_buffer(usize::try_from(self.shuffle_buffer).unwrap_or(usize::MAX))
            .interleave(usize::try_from(self.interleave).unwrap_or(usize::MAX))
            .shuffle(!self.no_shuffle)
            .drop_last(self.drop_last)
            .remainder(if self.remainder == "pad" {
                Remainder::Pad
            } else {
                Remainder::Drop
            })
            .in_order(!self.out_of_order)
            .transform(self.transform.unwrap_or(if self.decode {
                Transform::Decode
            } else {
                Transform::None
            }))
            .flip(self.flip)
            .region_decode(!self.no_region_decode)
            .on_corrupt(if self.skip_corrupt {
                CorruptPolicy::Skip
            } else {
                CorruptPolicy::Fail
            });
        if let (Some(r), Some(w)) = (self.rank, self.world) {
            b = b.partition(r, w);
        }
        if let Some(k) = self.workers {
            b = b.workers(usize::from(k));
        }
        if let Some(n) = self.max_pixels {
            b = b.max_pixels(n);
        }
        if let Some((key, secs)) = (self.test_delay.as_deref()).and_then(|d| d.rsplit_once(':')) {
            let secs = secs.parse::<f64>().unwrap_or(0.0).max(0.0);
            b = b.inject_delay(key, std::time::Duration::from_secs_f64(secs));
        }
        b
    }
}

/// Arguments of `shardtool read`.
#[derive(Debug, clap::Args)]
pub struct ReadArgs {
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// Print each delivered sample's key, one per line, in delivery order (nothing else on
    /// stdout). With a crop transform each key is followed, tab-separated, by the crop box in
    /// the pixels of the stored (upright, packed) image (x, y, width, height) and 1 if it was
    /// flipped, else 0. Carried fields (masks, boxes in .json) are not cropped or flipped.
    #[arg(long)]
    pub keys: bool,
    /// Carried fields to read with each sample (comma-separated, e.g. txt,json): the lines of
    /// --keys (implied) end with one tab-separated NAME=VALUE per field, in the order given.
    /// VALUE is JSON: a string holding the field's bytes when they are UTF-8 (so a tab or
    /// newline in a caption is escaped), {"base64": "..."} when they are not, null when the
    /// sample lacks the field. Extract one with e.g. `cut -f2 | sed 's/^txt=//' | jq -r .`.
    /// Any field of the manifest's fields or optional_fields but the image (the key and label
    /// come with every sample; cls is the label's text as stored, null where a sample has
    /// none); on packed shards json is the record's metadata unless the input's was carried.
    #[arg(long, value_delimiter = ',', value_name = "F,...")]
    pub fields: Vec<String>,
    /// Stop after N samples. A state saved there resumes at another rank or world size only
    /// when N is a multiple of --batch (ranks step a batch at a time).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Write the loader state (JSON) here when stopping, to resume later: at the epoch's end or
    /// --limit, and also when a batch fails (a shard that cannot be fetched) or SIGTERM or
    /// Ctrl-C stops the read (exit 128 + the signal), with the position of what was printed.
    #[arg(long, value_name = "FILE")]
    pub state_out: Option<PathBuf>,
    /// Continue from a state file written by --state-out. The state decides the order: its
    /// seed, epoch, batch size, shuffle options (shuffle on or off, interleave, buffer,
    /// remainder) and --drop-last are used, and those flags are ignored. Its rank and world are
    /// used too, unless --rank and --world (or RANK and WORLD_SIZE) name others: that rank then
    /// reads its share of what the epoch has left, every rank of the state's world taken to
    /// have read as many batches as the state's (a state read in order, to a batch's end).
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// Do not report slow records on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// The largest state file `--resume` reads.
const MAX_STATE_BYTES: u64 = 64 << 20;

/// Runs `shardtool read`.
pub fn run(a: ReadArgs) -> Result<(), Failure> {
    let mut builder = a.loader.builder()?;
    if let Some(path) = &a.resume {
        // A state file is a few kilobytes; a checkpoint or `/dev/zero` given by mistake must
        // not be read whole.
        let text = shardtool_core::read_within(path, MAX_STATE_BYTES)
            .with_context(|| format!("reading state {}", path.display()))
            .map_err(Failure::usage)?;
        let state: LoaderState = match serde_json::from_slice(&text) {
            Ok(s) => s,
            // A Python `Loader.state_dict()` holds this reader's state as its `reader`.
            Err(e) => {
                let python = serde_json::from_slice::<serde_json::Value>(&text)
                    .is_ok_and(|v| v.get("reader").is_some() && v.get("samples").is_some());
                let hint = match python {
                    true => {
                        " (a Python Loader.state_dict(): resume it in Python, or save its \
                             \"reader\" member as the file)"
                    }
                    false => "",
                };
                return Err(Failure::usage(anyhow::anyhow!(
                    "parsing state {}: {e}{hint}",
                    path.display()
                )));
            }
        };
        // A rank asked for (flags, or torchrun's $RANK and $WORLD_SIZE) other than the state's
        // reads its own share of what the epoch has left (the reader refuses a state that
        // tells only its own rank's position).
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
        let asked = match (a.loader.rank, a.loader.world) {
            (Some(r), Some(w)) => Some((r, w)),
            _ => env("RANK").zip(env("WORLD_SIZE")),
        };
        if let Some((r, w)) = asked {
            builder = builder.partition(r, w);
        }
        builder = builder.resume(state);
    }
    // A symlink's target takes the state, as a shell's `>` would write it.
    let state_out = a.state_out.as_deref().map(link_target);
    if let Some(path) = state_out.as_deref().filter(|p| a_link_loop(p)) {
        return Err(Failure::usage(anyhow::anyhow!(
            "--state-out {}: too many levels of symbolic links",
            path.display()
        )));
    }
    if let Some(path) = &state_out {
        // Found out before reading: the position it is there to keep is lost otherwise.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--state-out {}: its folder does not exist",
                path.display()
            )));
        }
        let named_as_folder = path.as_os_str().to_string_lossy().ends_with('/');
        if path.is_dir() || named_as_folder {
            return Err(Failure::usage(anyhow::anyhow!(
                "--state-out {}: names a folder; name the state's file (such as state.json)",
                path.display()
            )));
        }
        // The write replaces what is there: only a regular file (a device, such as /dev/null,
        // or a FIFO would be replaced by one).
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--state-out {}: is not a regular file; name the state's file (such as \
                 state.json)",
                path.display()
            )));
        }
        // A temporary file made and dropped: the folder takes the state's write.
        if let Err(e) = shardtool_core::AtomicFile::create(path) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--state-out {}: cannot write there: {e}",
                path.display()
            )));
        }
    }
    let keys = a.keys || !a.fields.is_empty();
    if !a.fields.is_empty() {
        builder = builder.fields(a.fields.iter().cloned());
    }
    let mut loader = builder.build().map_err(build_failure)?;
    // With a state to keep, SIGTERM (a preemption) and Ctrl-C stop the read at the next batch
    // and a failed one ends it: either way the position of what was printed is written first.
    if a.state_out.is_some() {
        crate::progress::stop_on_signals();
    }
    let save = |state: &LoaderState| -> Result<(), Failure> {
        let Some(path) = &state_out else {
            return Ok(());
        };
        let json = serde_json::to_vec_pretty(state).map_err(Failure::run)?;
        shardtool_core::AtomicFile::write(path, &json)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::run)
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut count = 0u64;
    let mut state = None;
    loop {
        if let Some(signal) = crate::progress::stopped_by() {
            out.flush().unwrap_or_else(|e| stdout::failed(&e));
            save(&loader.state())?;
            // The process ends now: its threads, maybe waiting on a fetch, are not waited for.
            std::mem::forget(loader);
            let path = a.state_out.as_deref().unwrap_or(Path::new(""));
            return Err(Failure::signalled_after(
                signal,
                format!("the position is in {}", path.display()),
            ));
        }
        let batch = match loader.next_timeout(std::time::Duration::from_millis(200)) {
            Next::Pending => continue,
            Next::Done => break,
            Next::Ready(batch) => batch,
        };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                out.flush().unwrap_or_else(|e| stdout::failed(&e));
                save(&loader.state())?;
                return Err(Failure::run(e));
            }
        };
        let take = match a.limit {
            Some(l) => (l - count).min(batch.len() as u64) as usize,
            None => batch.len(),
        };
        if keys {
            // With a state to keep, each batch is flushed whole, so a stop finds nothing
            // pending; one that cannot be written (the reader of a pipe gone, as Ctrl-C ends a
            // pipeline) is not counted as read.
            let written = (batch.keys[..take].iter().enumerate())
                .try_for_each(|(i, k)| write_sample(&mut out, &batch, i, k))
                .and_then(|()| match a.state_out.is_some() {
                    true => out.flush(),
                    false => Ok(()),
                });
            if let Err(e) = written {
                save(&loader.state_within(&batch, 0))?;
                stdout::failed(&e);
            }
        }
        count += take as u64;
        if a.limit.is_some_and(|l| count >= l) {
            state = Some(loader.state_within(&batch, take));
            break;
        }
    }
    out.flush().unwrap_or_else(|e| stdout::failed(&e));
    save(&state.unwrap_or_else(|| loader.state()))?;
    let m = loader.metrics();
    if !a.quiet {
        report_slow(&m);
    }
    if m.corrupt_skipped > 0 {
        errln!("skipped {} corrupt records", m.corrupt_skipped);
    }
    report_lost_and_cache(&m);
    if !keys {
        outln!(
            "read {count} samples in {:.2} s: {:.0} samples/s, {:.1} MB/s, wait p50 {:.3} ms p99 {:.3} ms",
            m.elapsed.as_secs_f64(),
            m.samples_per_s,
            m.bytes_per_s / 1e6,
            m.wait_p50.as_secs_f64() * 1e3,
            m.wait_p99.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// The `--keys` line of sample `i` (key `k`): the key, its crop box when the transform crops, and
/// `NAME=VALUE` per carried field.
fn write_sample(
    out: &mut impl Write,
    batch: &shardtool_reader::Batch,
    i: usize,
    k: &str,
) -> std::io::Result<()> {
    write!(out, "{k}")?;
    if let Some(c) = batch.crops.get(i) {
        let flipped = u8::from(c.flipped);
        let (x, y, w, h) = (pixels(c.x), pixels(c.y), pixels(c.w), pixels(c.h));
        write!(out, "\t{x}\t{y}\t{w}\t{h}\t{flipped}")?;
    }
    for f in &batch.fields {
        write!(out, "\t{}={}", f.name(), field_json(f.get(i)))?;
    }
    writeln!(out)
}

/// A crop coordinate in source pixels, to a millionth of a pixel without trailing zeros: a
/// centre crop's box is fractional, and `{}` of an f64 prints its binary noise (58.199999999999996).
fn pixels(v: f64) -> String {
    let text = format!("{v:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// A field's value as one line of JSON: a string for UTF-8 bytes, `{"base64": …}` for other
/// bytes (as packed shards store them), `null` when absent.
fn field_json(value: Option<&[u8]>) -> String {
    match value {
        None => "null".into(),
        Some(bytes) => shardtool_packed::field_value(bytes).to_string(),
    }
}

/// One line for the slow records, if any: how many, and the slowest few.
fn report_slow(m: &shardtool_reader::Metrics) {
    if m.slow_count == 0 {
        return;
    }
    let worst: Vec<String> = m
        .slow_records
        .iter()
        .map(|s| {
            format!(
                "{} in {} ({:.0} ms)",
                s.key,
                s.shard,
                s.time.as_secs_f64() * 1e3
            )
        })
        .collect();
    errln!(
        "{} slow record(s) (over {} ms and 10x the median); slowest: {}",
        m.slow_count,
        shardtool_reader::SLOW_FLOOR.as_millis(),
        worst.join(", ")
    );
}

/// Lost shards, loudly, and the cache's counters for a remote dataset (stderr).
pub fn report_lost_and_cache(m: &shardtool_reader::Metrics) {
    if m.lost_samples > 0 {
        errln!(
            "WARNING: {} samples LOST this epoch: {} shard(s) could not be read and were skipped",
            m.lost_samples,
            m.lost_shards.len()
        );
        for (shard, why) in &m.lost_shards {
            errln!("  lost shard {shard}: {why}");
        }
    }
    if let Some(c) = &m.cache {
        errln!(
            "cache: {} hits, {} misses, {} bytes fetched, fetch p50 {:.0} ms max {:.0} ms, {} retries, {} failures, {} evictions, {} repaired",
            c.hits,
            c.misses,
            c.bytes_fetched,
            c.fetch_p50.as_secs_f64() * 1e3,
            c.fetch_max.as_secs_f64() * 1e3,
            c.retries,
            c.failures,
            c.evictions,
            c.repaired
        );
    }
}

/// A dataset that cannot be opened, or options that do not fit it, are usage errors (exit 2);
/// a cache limit too small for the plan is a failed run (exit 1), reported before any read.
pub fn build_failure(e: shardtool_reader::ReadError) -> Failure {
    match e {
        shardtool_reader::ReadError::Cache(shardtool_cache::CacheError::TooSmall { .. }) => {
            Failure::run(e)
        }
        e => Failure::usage(e),
    }
}

/// A count of at least 1 (clap's range would print `1..18446744073709551615`).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Where a write to `path` lands: the file its symlink, or chain of them, names; else `path`.
fn link_target(path: &Path) -> PathBuf {
    let mut path = path.to_path_buf();
    // As many links as Linux follows.
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&path) else {
            break;
        };
        path = path
            .parent()
            .map_or_else(|| next.clone(), |dir| dir.join(&next));
    }
    path
}

/// Whether `path` is still a symlink after [`link_target`]: a loop, or a chain too long.
fn a_link_loop(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[cfg(test)]
mod tests {
    #[test]
    fn crop_coordinates_print_without_binary_noise() {
        assert_eq!(super::pixels(58.199999999999996), "58.2");
        assert_eq!(super::pixels(88.0), "88");
        assert_eq!(super::pixels(0.5), "0.5");
        assert_eq!(super::pixels(-0.0000001), "0");
        assert_eq!(super::pixels(95.999999936), "96");
    }
}
