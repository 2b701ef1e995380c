//! Command-line types only: what the user can type, with help text. Validation into plans
//! happens in `commands/`.

// Doc comments here are `--help` text for people, not rustdoc: `<KEY>`-style placeholders are
// meant literally.
#![allow(rustdoc::invalid_html_tags, rustdoc::bare_urls)]

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Pack image folders into shuffled, pre-resized shards for fast ML training input.
#[derive(Debug, Parser)]
#[command(name = "shardtool", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line: [`Cli`]'s, where a negative number given to an option that takes a
    /// number (or a size, or a resize spec) reaches that option's own check ("invalid value '-1'
    /// for '--seed <N>'") rather than clap's tip to write `-- -1`, which does not work for an
    /// option. Options naming things still refuse a value that looks like a flag (`--prefix -5`).
    pub fn command_line() -> clap::Command {
        fn numeric(a: &clap::Arg) -> bool {
            use std::any::TypeId;
            // Text options whose value is a number of bytes or pixels.
            if ["cache_limit", "shard_size", "resize"].contains(&a.get_id().as_str()) {
                return true;
            }
            let parsed = a.get_value_parser().type_id();
            [
                TypeId::of::<u8>(),
                TypeId::of::<u16>(),
                TypeId::of::<u32>(),
                TypeId::of::<u64>(),
                TypeId::of::<usize>(),
                TypeId::of::<i32>(),
                TypeId::of::<i64>(),
                TypeId::of::<f32>(),
                TypeId::of::<f64>(),
            ]
            .into_iter()
            .any(|t| parsed == t)
        }
        fn negatives_are_values(cmd: clap::Command) -> clap::Command {
            cmd.mut_args(|a| {
                if a.get_action().takes_values() && !a.is_positional() && numeric(&a) {
                    a.allow_negative_numbers(true)
                } else {
                    a
                }
            })
            .mut_subcommands(negatives_are_values)
        }
        negatives_are_values(<Self as clap::CommandFactory>::command())
    }

    /// Parses the process's arguments with [`Cli::command_line`]; exits on an error, printing
    /// it, as `clap::Parser::parse` does, and, when `--json` was asked for, a document saying
    /// it on stdout too (`{"ok": false, "error": {"kind": "usage", …}}`), as the commands do
    /// for the errors they find themselves.
    pub fn from_process_args() -> Self {
        let parsed = Self::command_line()
            .try_get_matches()
            .and_then(|m| <Self as clap::FromArgMatches>::from_arg_matches(&m));
        parsed.unwrap_or_else(|e| {
            if e.use_stderr() && std::env::args_os().any(|a| a == "--json") {
                outln!("{}", usage_error_doc(&e));
            }
            e.exit()
        })
    }
}

/// The `--json` document of an argument error: its first paragraph on one line, without clap's
/// `error: ` (the usage and tips after it are for people).
fn usage_error_doc(e: &clap::Error) -> serde_json::Value {
    let text = e.to_string();
    let first: Vec<&str> = (text.lines())
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let first = first.join(" ");
    let message = first.strip_prefix("error: ").unwrap_or(&first);
    crate::commands::error_doc("usage", &message)
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pack images into globally shuffled, pre-resized WebDataset tar or packed-tensor shards.
    ///
    /// INPUT is an ImageFolder (INPUT/<class>/<image>; with a Hugging Face imagefolder's
    /// metadata.jsonl or .csv at its top, that list and its images), a CSV/JSONL list, WebDataset
    /// .tar shards
    /// (a folder, a file, a brace pattern like shard-{000000..000099}.tar, or a glob), or Parquet
    /// files in the Hugging Face layout (a folder, a file, a pattern); any of the last two may
    /// be http(s)://, s3:// or file:// URLs (a remote folder ends in /). The format is told
    /// from the names; --input-format overrides it. A WebDataset sample's fields other than the
    /// image (a caption's .txt, an input .json, anything else) are carried into each sample byte
    /// for byte (an ImageFolder's other files are not: give captions in a list); list and
    /// Parquet columns go into its .json, and a text column becomes its .txt. A dataset without
    /// labels packs without .cls (label -1 when read). Remote and Parquet inputs are staged in
    /// OUTPUT as hidden .stage-*.tmp files while the pack runs.
    ///
    /// Examples:
    ///   shardtool pack photos/ out/ --resize shorter:256
    ///   shardtool pack --list train.csv out/ --resize crop:224x224 --format packed
    ///   shardtool pack 'laion/{00000..00099}.tar' out/ --resize shorter:384 --shard-size 1GB
    ///   shardtool pack 'hf/imagenet-1k/data/train-*.parquet' out/ --resize shorter:256
    ///   shardtool pack s3://bucket/cc12m/ out/ --input-format wds
    ///   shardtool pack photos/ out/ --shard-size 64MiB --compress zstd --overwrite
    ///
    /// Partitioned packing (many machines, or a resumable pack on one): with --shard-samples K,
    /// shard j holds positions [jK, (j+1)K) of the seeded order, whatever runs it. `shardtool
    /// plan` fixes inputs and options in OUTPUT/_plan/; `pack --plan OUTPUT --part I/N` packs
    /// the shards j with j mod N = I (auto/N takes I from SLURM_ARRAY_TASK_ID or
    /// JOB_COMPLETION_INDEX), skipping those already done, so a killed part is simply run again;
    /// `shardtool merge OUTPUT` commits. A single `pack --shard-samples K` does all three in one
    /// process (the same bytes), and `--resume` continues one that was killed.
    ///
    ///   shardtool pack photos/ out/ --shard-samples 5000 --resume
    ///   shardtool pack --plan out/ --part auto/64 --jobs 8
    #[command(verbatim_doc_comment)]
    Pack(PackArgs),

    /// Fix a partitioned pack: list the inputs once (sorted, with sizes), freeze the options,
    /// the seed and the shard count into OUTPUT/_plan/plan.json with a plan hash.
    ///
    /// Takes INPUT, OUTPUT and the options of `pack`; --shard-samples is required (what a
    /// shard holds is then fixed by the plan, never by how many parts run). Remote and Parquet
    /// inputs are staged once under OUTPUT/_plan/staged/, where every part reads them, so
    /// OUTPUT must be a folder every part can reach: a shared file system, or an empty
    /// s3://bucket/prefix/ folder (AWS_* variables give endpoint and credentials; shards are
    /// uploaded once, create-if-absent). Then run parts
    /// (`shardtool pack --plan OUTPUT --part I/N`) anywhere, in any order, any number of times,
    /// and `shardtool merge OUTPUT` once they are done. Slurm and Kubernetes templates:
    /// scripts/slurm_pack.sh, scripts/k8s_pack_job.yaml.
    ///
    /// Examples:
    ///   shardtool plan photos/ /shared/out --resize shorter:256 --shard-samples 5000
    ///   shardtool plan photos/ /shared/out --resize shorter:256 --shard-samples 5000 --resume
    ///   shardtool pack --plan /shared/out --part 3/16
    ///   shardtool status /shared/out
    ///   shardtool merge /shared/out
    // The flags that run a plan, and --shard-size (a plan needs --shard-samples), are refused
    // here, so not shown.
    #[command(
        verbatim_doc_comment,
        mut_arg("plan", |a| a.hide(true)),
        mut_arg("part", |a| a.hide(true)),
        mut_arg("shards", |a| a.hide(true)),
        mut_arg("resume", |a| a.help(
            "Keep a plan already in OUTPUT when it was made from the same input and options (an \
             error naming the options that differ otherwise): for a job that may run again. \
             Without it a plan there is an error; --overwrite replaces it in a local OUTPUT (in \
             an s3:// one, delete its objects first)"
        )),
        mut_arg("shard_size", |a| a.hide(true)),
        mut_arg("max_errors", |a| a.help(
            "Stop a part with exit code 1 once more than N inputs have failed (those that failed \
             while listing and those of its own shards): the default of every part, and `merge` \
             commits nothing past it"
        ))
    )]
    Plan(PackArgs),

    /// Commit a partitioned pack: check that every shard of the plan is done (listing the
    /// missing ones otherwise, exit 1), gather errors.jsonl, and write manifest.json last.
    ///
    /// Reads the parts' done records, never directory listings, so files left by failed or
    /// repeated attempts never get in. Running it again rewrites the same bytes.
    ///
    /// Examples:
    ///   shardtool merge /shared/out
    ///   shardtool merge /shared/out --json
    #[command(verbatim_doc_comment)]
    Merge(MergeArgs),

    /// Show a partitioned pack's progress: shards done and missing, samples and failures so far.
    ///
    /// Exit status: 0 when every shard is done, 1 while some are missing, 2 when OUTPUT holds no
    /// plan.
    ///
    /// Examples:
    ///   shardtool status /shared/out
    ///   shardtool status /shared/out --json | jq .missing
    #[command(verbatim_doc_comment)]
    Status(StatusArgs),

    /// Check a dataset against its manifest: files, sizes, checksums, sample counts, tar/packed
    /// structure, keys, fields and labels; with --decode also decode every sample's image
    /// (carried fields, image files among them, are checked by checksum only).
    ///
    /// Reads every shard once (in parallel) and reports every problem it finds, each naming the
    /// shard file, the member or record, and the reason. Exit status: 0 when the dataset is
    /// whole, 1 when problems were found or a remote dataset could not be read through (a shard
    /// not fetched, a cache limit too small for the shards read at once; --json says which), 2
    /// when it cannot be opened (no such directory, no or unparsable manifest.json) or on bad
    /// options.
    ///
    /// Examples:
    ///   shardtool verify out/
    ///   shardtool verify out/manifest.json --decode --jobs 8
    ///   shardtool verify out/ --json | jq '.problems[] | select(.kind == "checksum_mismatch")'
    ///   shardtool verify https://host/ds/ --cache-dir /nvme/cache
    // Every shard is fetched here, --fetch-concurrency (or --jobs) at once, each held only while
    // it is checked: reading ahead does not apply.
    #[command(verbatim_doc_comment, mut_arg("prefetch_shards", |a| a.hide(true)))]
    Verify(VerifyArgs),

    /// Summarise a dataset or a single shard: sample and shard counts, class histogram, image
    /// sizes (min/median/max, most common), bytes per sample and per field, pack options.
    ///
    /// For a dataset the counts come from reading its shards and are shown beside the
    /// manifest's; a lone SHARD (.tar, .safetensors, or .zst of either) is read by itself.
    /// Exit status: 0, 1 when a shard could not be read (the rest is still summarised) or a
    /// URL's cache limit cannot hold the shards read at once, 2 when the target cannot be
    /// opened.
    ///
    /// Examples:
    ///   shardtool inspect out/
    ///   shardtool inspect out/shard-000003.tar.zst
    ///   shardtool inspect out/ --json | jq .image_sizes
    ///   shardtool inspect https://host/ds/ --cache-dir /nvme/cache
    #[command(verbatim_doc_comment, mut_arg("prefetch_shards", |a| a.hide(true)))]
    Inspect(InspectArgs),

    /// Draw a contact sheet (PNG) of randomly chosen samples with their class names, to judge
    /// resize quality and labels by eye.
    ///
    /// Samples are chosen with a seeded shuffle (same seed, same samples); each thumbnail fits
    /// a --tile square (aspect kept, never enlarged) with the class name, stored size and key
    /// under it. Only the shards holding chosen samples are read (of a remote dataset, only
    /// they are fetched). The PNG is written atomically.
    ///
    /// Examples:
    ///   shardtool preview out/ -o sheet.png
    ///   shardtool preview out/ -o sheet.png --count 36 --seed 7 --tile 160
    ///   shardtool preview out/shard-000000.safetensors -o s0.png
    ///   shardtool preview s3://bucket/ds/ -o sheet.png
    #[command(verbatim_doc_comment, mut_arg("prefetch_shards", |a| a.hide(true)))]
    Preview(PreviewArgs),

    /// Stream a dataset through the loader (shuffle, partition, batches), optionally printing
    /// keys and carried fields, and save or resume the loader position.
    ///
    /// Examples:
    ///   shardtool read out/ --keys --seed 1 --epoch 2 --rank 0 --world 4
    ///   shardtool read out/ --fields txt,json --limit 10
    ///   shardtool read out/ --keys --limit 100 --state-out pos.json
    ///   shardtool read out/ --keys --resume pos.json
    ///   shardtool read s3://bucket/ds/ --cache-dir /nvme/cache --cache-limit 50GiB
    #[command(verbatim_doc_comment)]
    Read(crate::commands::read::ReadArgs),

    /// Measure the loader alone and beside a simulated training step: samples/s, MB/s,
    /// CPU-ms per sample, data wait p50/p99.
    ///
    /// Examples:
    ///   shardtool bench out/ --batch 64 --step-ms 20
    ///   shardtool bench https://host/ds/ --cache-dir /nvme/cache --cache-limit 100GiB
    #[command(verbatim_doc_comment)]
    Bench(crate::commands::bench::BenchArgs),

    /// Manage the local cache of remote shards: list it, fill it ahead of training, clear it.
    ///
    /// Remote datasets (http://, https://, s3://) are read through this cache: each shard is
    /// fetched once per node, checked against the manifest (size and checksum), decompressed
    /// once if it is .zst, and kept under --cache-limit by evicting least recently used shards
    /// that no process is reading. S3 endpoint, region and credentials come from the standard
    /// AWS_* environment variables, so S3-compatible stores work (AWS_ENDPOINT, AWS_ALLOW_HTTP).
    ///
    /// Examples:
    ///   shardtool cache prefetch https://data.example.com/imagenet/ --cache-dir /nvme/cache
    ///   shardtool cache ls --cache-dir /nvme/cache
    ///   shardtool cache clear s3://bucket/imagenet/ --cache-dir /nvme/cache
    #[command(subcommand, verbatim_doc_comment)]
    Cache(crate::commands::cache::CacheCommand),
}

/// Shard container format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// WebDataset tar shards (`<key>.cls`, `<key>.jpg|png`, `<key>.json` per sample).
    Wds,
    /// Packed-tensor safetensors shards holding decoded RGB8 pixels.
    Packed,
}

/// Arguments of `shardtool pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The inputs: an ImageFolder, a list, .tar shards or .parquet files (a folder, a file, a
    /// brace pattern or glob, or URLs); omit with --list (and, for pack, --plan).
    #[arg(value_name = "INPUT", required_unless_present_any = ["list", "plan"])]
    pub input: Option<String>,

    /// Output directory for shards, manifest.json and errors.jsonl (created if missing).
    #[arg(value_name = "OUTPUT")]
    pub output: Option<PathBuf>,

    /// Read inputs from a CSV (with header) or JSONL list with fields `path`, optional `label`
    /// (integer or class name) and `key`, and any others (carried into each sample's .json;
    /// `text` becomes its .txt); relative paths resolve against the list's folder. A name
    /// ending in .csv or .jsonl says which; otherwise a first row that is a JSON object does.
    #[arg(long, value_name = "FILE")]
    pub list: Option<PathBuf>,

    /// What INPUT holds, when its names do not say: imagefolder, list, wds or parquet.
    #[arg(long, value_name = "FORMAT")]
    pub input_format: Option<String>,

    /// The Parquet column holding the image (a struct with `bytes`, or binary); default `image`,
    /// else the first such column. For a list, the path column (default `path`, or `file_name`
    /// in a list with no `path` column: a Hugging Face imagefolder's metadata, which a folder
    /// holding one at its top is packed by). For WebDataset shards, the image field (default:
    /// the sample's first of jpg, jpeg, png, webp, gif, bmp, tif, tiff): `left.jpg` of a stereo
    /// pair, `webp` beside a `png` mask; the other fields are carried as they are.
    #[arg(long, value_name = "NAME")]
    pub image_column: Option<String>,

    /// The list or Parquet column holding the integer label or class name; default `label` if
    /// present (otherwise the dataset is unlabelled).
    #[arg(long, value_name = "NAME")]
    pub label_column: Option<String>,

    /// The list or Parquet column carried as each sample's .txt (a caption); default `text`
    /// (Parquet: `text`, then `caption`).
    #[arg(long, value_name = "NAME")]
    pub text_column: Option<String>,

    /// A list or Parquet column to leave out, as if the input lacked it (repeat the flag, or
    /// separate names with commas; case is ignored): not carried into .json or as a field, and
    /// never chosen by default (drop `label` for an unlabelled dataset, `text` for no caption).
    /// Parquet files never read it, so a large column (embeddings, a second image) costs
    /// nothing. Each must be a column of the input.
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub drop_column: Vec<String>,

    /// none | shorter:N | longer:N | fit:WxH | crop:WxH. Downscale only unless --upscale
    /// (crop always yields exactly WxH). 640x480 with shorter:256 gives 341x256.
    #[arg(long, default_value = "none", value_name = "MODE")]
    pub resize: String,

    /// Allow enlarging images smaller than the target.
    #[arg(long)]
    pub upscale: bool,

    /// Resampling filter: catmull-rom (default, fast and sharp), lanczos3 (sharpest, slower) or
    /// bilinear (fastest, softest; widened when reducing, as torchvision's antialias).
    #[arg(long, default_value = "catmull-rom")]
    pub filter: String,

    /// Output encoding for wds shards: jpeg, png (lossless after the conversion to 8-bit RGB
    /// every image goes through) or keep (store input JPEGs that need
    /// no resize, rotation or colour conversion byte for byte; re-encode the rest as JPEG).
    #[arg(long, default_value = "jpeg")]
    pub encode: String,

    /// JPEG quality, 1 to 100 [default: 90]. Only wds shards of JPEGs use it (--encode jpeg or
    /// keep): it is refused with --encode png and --format packed.
    #[arg(long, value_name = "QUALITY")]
    pub quality: Option<u8>,

    /// JPEG shrinking while decoding: gap:N (1 to 8, two decimals at most: gap:1.5) stops at N times the target so the resize
    /// filter makes the last step; fast shrinks all the way (quicker, blurs detail); full: never.
    #[arg(long, default_value = "gap:2", value_name = "gap:N|fast|full")]
    pub decode_scale: String,

    /// Shard format.
    #[arg(long, value_enum, default_value_t = FormatArg::Wds)]
    pub format: FormatArg,

    /// Compress whole shards: zstd or zstd:LEVEL (1-22, default 3). Shards get a .zst suffix.
    /// Default: not compressed.
    #[arg(long, value_name = "zstd[:LEVEL]")]
    pub compress: Option<String>,

    /// Sample keys: input keeps an input's own key (a WebDataset sample's, a list's `key`
    /// column), refusing one that breaks the key rules ([A-Za-z0-9_-], 1 to 80, as `bad_key`);
    /// index numbers every sample by its position (000000000, ...), as for inputs without keys,
    /// the input's key staying in the sample's `source` (a list row's in its .json as
    /// `input_key`; for shards made with plain `tar` of folders, whose keys hold '/').
    #[arg(long, value_name = "input|index", default_value = "input")]
    pub keys: String,

    /// Shuffle seed: the order depends only on the inputs and this seed.
    #[arg(long, default_value_t = shardtool_pack::DEFAULT_SEED)]
    pub seed: u64,

    /// Keep the sorted listing order instead of shuffling.
    #[arg(long, conflicts_with = "seed")]
    pub no_shuffle: bool,

    /// Roll to a new shard once one reaches this size (64MiB, 1GB, plain bytes; K, M, G and T
    /// alone are powers of 1000, as KB, MB, GB, TB; default 256MiB). A shard exceeds it by less
    /// than one sample.
    #[arg(long, value_name = "SIZE", conflicts_with = "shard_samples")]
    pub shard_size: Option<String>,

    /// Shards of N positions of the shuffled order each (fewer samples where inputs failed):
    /// shard j holds positions [jN, (j+1)N). Needed for plans, parts and --resume.
    #[arg(long, value_name = "N")]
    pub shard_samples: Option<u64>,

    /// Continue a pack with --shard-samples that was interrupted in OUTPUT: shards already
    /// published are kept, the rest are packed (the inputs and options must be the same).
    #[arg(long, requires = "shard_samples", conflicts_with = "overwrite")]
    pub resume: bool,

    /// Run a part of the partitioned pack planned in this OUTPUT (see `shardtool plan`); the
    /// options come from the plan.
    #[arg(long, value_name = "OUTPUT", conflicts_with_all = [
        "list", "input_format", "image_column", "label_column", "text_column", "drop_column",
        "resize",
        "upscale", "filter", "encode", "quality", "decode_scale", "format", "compress", "keys",
        "seed", "no_shuffle", "shard_size", "shard_samples", "prefix", "max_pixels", "overwrite",
        "resume"])]
    pub plan: Option<PathBuf>,

    /// Which part of the plan: I/N packs shards j with j mod N = I (I from 0); auto/N takes I
    /// from SLURM_ARRAY_TASK_ID (submit --array=0-(N-1)) or JOB_COMPLETION_INDEX (a
    /// Kubernetes indexed Job). Default with --plan: every shard.
    #[arg(
        long,
        value_name = "I/N|auto/N",
        requires = "plan",
        conflicts_with = "shards"
    )]
    pub part: Option<String>,

    /// Pack these shards of the plan (indices and ranges, e.g. 3,17,20-29), redoing them unless
    /// done.
    #[arg(long, value_name = "LIST", requires = "plan")]
    pub shards: Option<String>,

    /// Shard file name prefix: <prefix>-000000.tar, …
    #[arg(long, default_value = "shard")]
    pub prefix: String,

    /// Worker threads (default: all cores). Never changes the output bytes.
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    /// Refuse to decode images larger than this many pixels (decompression-bomb guard).
    #[arg(long, default_value_t = 100_000_000, value_name = "PIXELS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pixels: u64,

    /// Stop with exit code 1 once more than N inputs have failed (with --resume, counting those
    /// of the shards earlier runs finished; for a part, those that failed while listing and
    /// those of its own shards). Given to `plan`, it is the default of every part, and `merge`
    /// commits nothing past it. Default: no limit (every failure is listed in errors.jsonl).
    #[arg(long, value_name = "N")]
    pub max_errors: Option<u64>,

    /// Replace an existing dataset in OUTPUT. The earlier dataset is deleted only just before
    /// the new one's first shard is published, so a pack that fails or is stopped before then
    /// leaves it whole; a pack with --shard-samples (which plans its shards) and `plan` delete
    /// it once the inputs are listed. In an s3:// OUTPUT nothing published is deleted: it
    /// removes only what an unfinished plan staged, and the folder must otherwise be empty.
    #[arg(long)]
    pub overwrite: bool,

    /// Print only errors.
    #[arg(long, short)]
    pub quiet: bool,

    /// Print the summary as one JSON object on stdout (counts, bytes, seconds, stage times).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `shardtool merge` and `shardtool status`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The output folder of a planned pack (holding _plan/plan.json).
    #[arg(value_name = "OUTPUT")]
    pub output: PathBuf,

    /// Commit only if at most N inputs failed in the whole pack (default: the plan's
    /// --max-errors, if it was given one); past it nothing is committed and the exit code is 1.
    #[arg(long, value_name = "N")]
    pub max_errors: Option<u64>,

    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,

    /// Print only errors.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `shardtool status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The output folder of a planned pack (holding _plan/plan.json).
    #[arg(value_name = "OUTPUT")]
    pub output: PathBuf,

    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,

    /// Print only errors.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `shardtool verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The dataset: a directory holding manifest.json, or the manifest itself; or the
    /// http(s):// or s3:// URL of either, whose shards are fetched through the shard cache
    /// (each checked against the manifest on the way in) and then verified there.
    #[arg(value_name = "DATASET_DIR | manifest.json | URL")]
    pub dataset: PathBuf,

    #[command(flatten)]
    pub cache: crate::commands::cache::CacheArgs,

    /// Also decode every image and check its size against its metadata (<key>.json width and
    /// height, unless the json is the input's, carried as it was: the manifest's pack option
    /// "json": "input"); much slower than the default checks, and scales with --jobs.
    #[arg(long)]
    pub decode: bool,

    /// Print one JSON document on stdout (the whole report, clean or not) instead of text.
    #[arg(long)]
    pub json: bool,

    /// Worker threads (default: all cores). Shards are checked in parallel, one per thread;
    /// with 1, everything runs on one thread, but a URL's shards are held in the cache
    /// max(--jobs, --fetch-concurrency) at a time (--fetch-concurrency of them downloading,
    /// --jobs being checked). Without --decode a plain tar shard is read
    /// through a 128 KiB buffer; any other shard is held in memory whole while it is checked.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,

    /// Map plain shards that are checked whole (packed shards, tar shards with --decode) instead
    /// of reading them into memory: one copy fewer, but a shard that another process truncates
    /// during the run kills the run (SIGBUS). Shards written by shardtool are never modified in
    /// place.
    #[arg(long, conflicts_with = "no_mmap")]
    pub mmap: bool,

    /// Read shards, never map them: the default (kept for scripts that pass it).
    #[arg(long, hide = true)]
    pub no_mmap: bool,

    /// No progress bar (it is only drawn when stderr is a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `shardtool inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A dataset directory, its manifest.json, or one shard file; or the http(s):// or s3://
    /// URL of a dataset folder or manifest, whose shards are fetched through the shard cache.
    #[arg(value_name = "DATASET | SHARD | URL")]
    pub target: PathBuf,

    #[command(flatten)]
    pub cache: crate::commands::cache::CacheArgs,

    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,

    /// Worker threads (default: all cores); a URL's shards are held in the cache
    /// max(--jobs, --fetch-concurrency) at a time (--fetch-concurrency of them downloading).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,
}

/// Arguments of `shardtool preview`.
#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// A dataset directory, its manifest.json, or one shard file; or the http(s):// or s3://
    /// URL of a dataset folder or manifest, whose chosen shards are fetched through the cache.
    #[arg(value_name = "DATASET | SHARD | URL")]
    pub target: PathBuf,

    #[command(flatten)]
    pub cache: crate::commands::cache::CacheArgs,

    /// Where to write the contact sheet (PNG).
    #[arg(long, short = 'o', value_name = "PNG")]
    pub output: PathBuf,

    /// Number of samples on the sheet.
    #[arg(long, short = 'n', default_value_t = 16, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub count: u32,

    /// Shuffle seed choosing the samples.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,

    /// Thumbnail box in pixels: images are fitted into TILExTILE, aspect kept, never enlarged.
    #[arg(long, default_value_t = 128, value_name = "PX",
          value_parser = clap::value_parser!(u32).range(16..=1024))]
    pub tile: u32,

    /// Columns of the grid (default: about square).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub columns: Option<u32>,

    /// Print what is on the sheet as one JSON document on stdout.
    #[arg(long)]
    pub json: bool,

    /// Worker threads (default: all cores).
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_whole_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_negative_number_for_an_option_is_its_invalid_value_not_a_stray_argument() {
        for args in [
            &["shardtool", "pack", "in", "out", "--seed", "-1"][..],
            &["shardtool", "read", "ds", "--epoch", "-2"],
            &[
                "shardtool",
                "cache",
                "prefetch",
                "http://h/ds/",
                "--fetch-concurrency",
                "-4",
            ],
        ] {
            let e = Cli::command_line().try_get_matches_from(args).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("invalid value '-"), "{args:?}: {text}");
            assert!(!text.contains("-- -"), "{args:?}: {text}");
        }
        // Sizes and resize specs are text parsed later, by the option's own check.
        for args in [
            &["shardtool", "read", "ds", "--cache-limit", "-5"][..],
            &["shardtool", "pack", "in", "out", "--shard-size", "-1"],
            &["shardtool", "pack", "in", "out", "--resize", "-1"],
        ] {
            let parsed = Cli::command_line().try_get_matches_from(args);
            assert!(parsed.is_ok(), "{args:?}: {parsed:?}");
        }
        // Under --json, the same error as a document.
        let e = Cli::command_line()
            .try_get_matches_from(["shardtool", "verify", "ds", "--json", "--jobs", "0"])
            .unwrap_err();
        let doc = usage_error_doc(&e);
        assert_eq!(
            (&doc["ok"], &doc["error"]["kind"]),
            (&false.into(), &"usage".into())
        );
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("invalid value '0' for '--jobs"),
            "{message}"
        );
        // A text option still takes no value that looks like a flag: `-5` is not a prefix.
        let e = Cli::command_line()
            .try_get_matches_from(["shardtool", "pack", "in", "out", "--prefix", "-5"])
            .unwrap_err();
        assert!(e.to_string().contains("unexpected argument '-5'"), "{e}");
        // A number in range parses as before.
        let m = Cli::command_line()
            .try_get_matches_from(["shardtool", "read", "ds", "--seed", "3"])
            .unwrap();
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&m).unwrap();
        assert!(matches!(cli.command, Command::Read(_)));
    }

    #[test]
    fn subcommands_keep_their_own_about_and_parse() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut seen = 0;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            let long = sub
                .get_long_about()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(!about.is_empty(), "{}", sub.get_name());
            // The arguments types' own doc comments ("Arguments of …", "… subcommands.") must
            // not replace the subcommand's.
            assert!(
                !about.contains("Arguments of"),
                "{}: {about}",
                sub.get_name()
            );
            assert!(
                !about.contains("subcommands."),
                "{}: {about}",
                sub.get_name()
            );
            assert!(long.contains("Examples:"), "{}: {long}", sub.get_name());
            assert!(
                sub.get_arguments().next().is_some() || sub.has_subcommands(),
                "{} has no arguments once built",
                sub.get_name()
            );
            seen += 1;
        }
        assert_eq!(seen, 10);
        // So do the cache subcommands.
        let cache = cmd.find_subcommand("cache").unwrap();
        for sub in cache.get_subcommands().filter(|s| s.get_name() != "help") {
            let long = sub.get_long_about().map(ToString::to_string);
            assert!(
                long.as_deref().unwrap_or("").contains("Examples:"),
                "cache {}: {long:?}",
                sub.get_name()
            );
        }
        let cli = Cli::try_parse_from(["shardtool", "verify", "ds/", "--jobs", "3"]).unwrap();
        match cli.command {
            Command::Verify(a) => {
                assert_eq!(a.jobs, Some(3));
                assert_eq!(a.dataset, PathBuf::from("ds/"));
            }
            other => panic!("parsed as {other:?}"),
        }
        let cli = Cli::try_parse_from(["shardtool", "cache", "ls", "--cache-dir", "c"]).unwrap();
        assert!(matches!(cli.command, Command::Cache(_)));
        let err = Cli::try_parse_from(["shardtool", "verify", "--bogus"]).unwrap_err();
        assert!(err.to_string().contains("--bogus"), "{err}");
    }
}
