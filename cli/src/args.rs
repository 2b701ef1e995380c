//! Command-line types only: what the user can type, with help text. Validation into plans
//! happens in `commands/`.

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

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pack images into globally shuffled, pre-resized WebDataset tar or packed-tensor shards.
    ///
    /// Examples:
    ///   shardtool pack photos/ out/ --resize shorter:256
    ///   shardtool pack --list train.csv out/ --resize crop:224x224 --format packed
    ///   shardtool pack photos/ out/ --shard-size 64MiB --compress zstd --overwrite
    #[command(verbatim_doc_comment)]
    Pack(PackArgs),
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
    /// ImageFolder directory (INPUT/<class>/<image>); omit when using --list.
    #[arg(value_name = "INPUT", required_unless_present = "list")]
    pub input: Option<PathBuf>,

    /// Output directory for shards, manifest.json and errors.jsonl (created if missing).
    #[arg(value_name = "OUTPUT")]
    pub output: Option<PathBuf>,

    /// Read inputs from a CSV (with header) or JSONL list with fields `path`, `label` (integer
    /// or class name) and optional `key`; relative paths resolve against the list's folder.
    #[arg(long, value_name = "FILE")]
    pub list: Option<PathBuf>,

    /// none | shorter:N | longer:N | fit:WxH | crop:WxH. Downscale only unless --upscale
    /// (crop always yields exactly WxH). 640x480 with shorter:256 gives 341x256.
    #[arg(long, default_value = "none", value_name = "MODE")]
    pub resize: String,

    /// Allow enlarging images smaller than the target.
    #[arg(long)]
    pub upscale: bool,

    /// Resampling filter: catmull-rom (default, fast and sharp) or lanczos3.
    #[arg(long, default_value = "catmull-rom")]
    pub filter: String,

    /// Output encoding for wds shards: jpeg, png (lossless) or keep (store input JPEGs that need
    /// no resize, rotation or colour conversion byte for byte; re-encode the rest as JPEG).
    #[arg(long, default_value = "jpeg")]
    pub encode: String,

    /// JPEG quality, 1 to 100.
    #[arg(long, default_value_t = 90)]
    pub quality: u8,

    /// Shard format.
    #[arg(long, value_enum, default_value_t = FormatArg::Wds)]
    pub format: FormatArg,

    /// Compress whole shards: zstd or zstd:LEVEL (1-22, default 3). Shards get a .zst suffix.
    #[arg(long, value_name = "zstd[:LEVEL]")]
    pub compress: Option<String>,

    /// Shuffle seed: the order depends only on the inputs and this seed.
    #[arg(long, default_value_t = shardtool_pack::DEFAULT_SEED)]
    pub seed: u64,

    /// Keep the sorted listing order instead of shuffling.
    #[arg(long, conflicts_with = "seed")]
    pub no_shuffle: bool,

    /// Roll to a new shard once one reaches this size (64MiB, 1GB, plain bytes). A shard exceeds
    /// it by less than one sample.
    #[arg(long, default_value = "256MiB", value_name = "SIZE")]
    pub shard_size: String,

    /// Roll to a new shard after this many samples.
    #[arg(long, value_name = "N")]
    pub shard_samples: Option<u64>,

    /// Shard file name prefix: <prefix>-000000.tar, …
    #[arg(long, default_value = "shard")]
    pub prefix: String,

    /// Worker threads (default: all cores). Never changes the output bytes.
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    /// Refuse to decode images larger than this many pixels (decompression-bomb guard).
    #[arg(long, default_value_t = 100_000_000, value_name = "PIXELS")]
    pub max_pixels: u64,

    /// Stop with exit code 1 once more than N inputs have failed.
    #[arg(long, value_name = "N")]
    pub max_errors: Option<u64>,

    /// Replace an existing dataset in OUTPUT.
    #[arg(long)]
    pub overwrite: bool,

    /// Print only errors.
    #[arg(long, short)]
    pub quiet: bool,
}
