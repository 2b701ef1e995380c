//! The validated pack plan: everything `pack` needs, checked before any file is touched.

use crate::listing::{Columns, InputSource};
use shardtool_image::{Encode, TransformSpec};
use std::path::PathBuf;

/// The default `--seed`.
pub const DEFAULT_SEED: u64 = 0;

/// Shard container format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardFormatChoice {
    /// WebDataset tar shards.
    Wds,
    /// Packed-tensor safetensors shards (RGB8 pixels).
    Packed,
}

/// Whole-shard compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// None.
    None,
    /// zstd at the given level.
    Zstd(i32),
}

/// Where sample keys come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyChoice {
    /// An input's own key where it has one (a WebDataset sample, a list's `key` column), which
    /// must follow the key rules and be unique; otherwise its position's.
    #[default]
    Input,
    /// Every sample numbered by its position in the output (`000000000`, …), as inputs without
    /// keys are: for inputs whose keys break the rules (a WebDataset shard made with plain `tar`
    /// of folders has keys holding `/`). The input's key stays in the sample's `source`, and a
    /// carried input `.json` is not checked against the new key.
    Index,
}

impl KeyChoice {
    /// `input` or `index`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyChoice::Input => "input",
            KeyChoice::Index => "index",
        }
    }
}

impl std::str::FromStr for KeyChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "input" => Ok(KeyChoice::Input),
            "index" => Ok(KeyChoice::Index),
            _ => Err(format!("keys {s:?}: expected input or index")),
        }
    }
}

/// Everything a pack needs.
#[derive(Debug, Clone)]
pub struct PackPlan {
    /// Inputs.
    pub source: InputSource,
    /// Which list or Parquet columns hold the image, label and text.
    pub columns: Columns,
    /// Output directory.
    pub output: PathBuf,
    /// Per-image transform.
    pub transform: TransformSpec,
    /// Shuffle seed, or `None` to keep the sorted listing order.
    pub seed: Option<u64>,
    /// Shard container.
    pub format: ShardFormatChoice,
    /// Compression.
    pub compression: Compression,
    /// Shard file name prefix.
    pub prefix: String,
    /// Roll a shard once it holds at least this many (uncompressed) bytes.
    pub shard_bytes: u64,
    /// Where sample keys come from.
    pub keys: KeyChoice,
    /// Roll a shard once it holds this many samples.
    pub shard_samples: Option<u64>,
    /// Worker threads.
    pub jobs: usize,
    /// Abort once more than this many inputs failed.
    pub max_errors: Option<u64>,
    /// Replace an existing dataset in `output`.
    pub overwrite: bool,
    /// Continue an interrupted pack in `output` (needs `shard_samples`).
    pub resume: bool,
}

/// How two sets of pack options (a plan's, or a manifest's `pack` record) differ, each named by
/// its flag (Python's messages turn flags into keywords).
pub(crate) fn option_differences(a: &serde_json::Value, b: &serde_json::Value) -> String {
    let flagged = |v: &serde_json::Value| {
        let options = (v.as_object().into_iter().flatten()).map(|(k, v)| {
            let v = match (k.as_str(), v) {
                ("seed", serde_json::Value::Null) => "none (--no-shuffle)".into(),
                ("shuffle", serde_json::Value::Bool(on)) => {
                    (if *on { "not given" } else { "given" }).into()
                }
                _ => v.clone(),
            };
            let name = match k.as_str() {
                "shuffle" => "--no-shuffle".into(),
                _ => flag_of(k),
            };
            (name, v)
        });
        serde_json::Value::Object(options.collect())
    };
    json_differences(&flagged(a), &flagged(b), 4)
}

/// A manifest's `pack` record without the options that did not apply, as earlier versions
/// recorded them: `shard_size` when `shard_samples` fixed each shard, `encode` of packed shards
/// (raw pixels), `quality` unless images were JPEG-encoded. Finished datasets are compared by
/// this.
pub(crate) fn applied_options(
    mut m: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    if m.get("shard_samples").is_some_and(|v| !v.is_null()) {
        m.remove("shard_size");
    }
    let packed = m.get("format").and_then(|v| v.as_str()) == Some("packed");
    if packed {
        m.remove("encode");
    }
    let encode = m.get("encode").and_then(|v| v.as_str());
    if packed || !matches!(encode, Some("jpeg" | "keep")) {
        m.remove("quality");
    }
    m
}

/// The flag that sets the plan option `field` (`INPUT` for the inputs).
fn flag_of(field: &str) -> String {
    match field {
        "input" => "INPUT".into(),
        "drop_columns" => "--drop-column".into(),
        "compression" => "--compress".into(),
        "max_input_bytes" => "the input size limit".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// The members of two JSON objects that differ, as `name: a → b` (at most `max`, then `…`).
pub(crate) fn json_differences(a: &serde_json::Value, b: &serde_json::Value, max: usize) -> String {
    let empty = serde_json::Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let null = serde_json::Value::Null;
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .map(|n| {
            let show = |v: Option<&serde_json::Value>| {
                let text = v.unwrap_or(&null).to_string();
                match text.char_indices().nth(60) {
                    Some((i, _)) => format!("{}…", &text[..i]),
                    None => text,
                }
            };
            format!("{n}: {} → {}", show(a.get(n)), show(b.get(n)))
        })
        .collect();
    if out.len() > max {
        out.truncate(max);
        out.push("…".into());
    }
    out.join("; ")
}

impl FrozenOptions {
    /// These options with every local input path made absolute as spelled (not resolving
    /// links: a link may point elsewhere on another host), so that a plan names its inputs the
    /// same whatever folder it is made or resumed from. URLs stand, their credentials masked
    /// (a plan keeps none, and compares what it keeps).
    pub(crate) fn absolute(mut self) -> Self {
        for input in &mut self.input {
            if let std::borrow::Cow::Owned(masked) = shardtool_core::redact_urls(input) {
                *input = masked;
            }
        }
        self.with_local_inputs(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
    }

    /// These options with every local input path absolute and its links resolved, on this host.
    pub(crate) fn resolved(self) -> Self {
        self.with_local_inputs(crate::output::resolved)
    }

    fn with_local_inputs(mut self, f: impl Fn(&std::path::Path) -> std::path::PathBuf) -> Self {
        for input in &mut self.input {
            let url = crate::containers::is_remote(input)
                || input
                    .get(..7)
                    .is_some_and(|p| p.eq_ignore_ascii_case("file://"));
            if !url {
                *input = f(std::path::Path::new(input.as_str()))
                    .to_string_lossy()
                    .into_owned();
            }
        }
        self
    }

    /// How `given` differs from these (planned) options, for an error message: each named by
    /// its flag (Python's messages turn flags into keywords).
    pub(crate) fn differences(&self, given: &FrozenOptions) -> String {
        let json = |o: &FrozenOptions| serde_json::to_value(o).unwrap_or_default();
        option_differences(&json(self), &json(given))
    }
}

/// The options of a plan that decide its output, as `plan.json` records them (`jobs`,
/// `max_errors` and the like are left out: they never change a byte of the dataset).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrozenOptions {
    /// `imagefolder`, `list`, `wds` or `parquet`.
    pub input_format: String,
    /// The input paths or URLs, as given.
    pub input: Vec<String>,
    /// The image column.
    pub image_column: Option<String>,
    /// The label column.
    pub label_column: Option<String>,
    /// The text column.
    pub text_column: Option<String>,
    /// `--drop-column`s (left out when none, as plans before it were written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_columns: Vec<String>,
    /// `--resize`.
    pub resize: String,
    /// `--upscale`.
    pub upscale: bool,
    /// `--filter`.
    pub filter: String,
    /// `--encode`.
    pub encode: String,
    /// `--quality`.
    pub quality: u8,
    /// `--decode-scale`.
    pub decode_scale: String,
    /// `--max-pixels`.
    pub max_pixels: u64,
    /// Largest input read.
    pub max_input_bytes: u64,
    /// The shuffle seed, none for listing order.
    pub seed: Option<u64>,
    /// `wds` or `packed`.
    pub format: String,
    /// `none` or `zstd:LEVEL`.
    pub compression: String,
    /// The shard name prefix.
    pub prefix: String,
    /// Positions per shard.
    pub shard_samples: Option<u64>,
    /// `index` when samples are numbered by position whatever their input keys; absent (the
    /// default, `input`) otherwise, so plans made before the option read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<String>,
}

impl PackPlan {
    /// A plan with the documented defaults. A `file://` output is the local folder it names.
    pub fn new(source: InputSource, output: PathBuf) -> Self {
        Self {
            source,
            columns: Columns::default(),
            output: crate::store::local_path(&output),
            transform: TransformSpec::default(),
            seed: Some(DEFAULT_SEED),
            format: ShardFormatChoice::Wds,
            compression: Compression::None,
            prefix: "shard".into(),
            shard_bytes: 256 << 20,
            keys: KeyChoice::Input,
            shard_samples: None,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_errors: None,
            overwrite: false,
            resume: false,
        }
    }

    /// The options that decide the output, for `plan.json`.
    pub fn frozen(&self) -> FrozenOptions {
        let t = &self.transform;
        let lossy = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let (input_format, input) = match &self.source {
            InputSource::Folder(p) => ("imagefolder", vec![lossy(p)]),
            InputSource::List(p) => ("list", vec![lossy(p)]),
            InputSource::Wds(v) => ("wds", v.clone()),
            InputSource::Parquet(v) => ("parquet", v.clone()),
        };
        FrozenOptions {
            input_format: input_format.into(),
            input,
            image_column: self.columns.image.clone(),
            label_column: self.columns.label.clone(),
            text_column: self.columns.text.clone(),
            drop_columns: self.columns.drop.clone(),
            resize: t.resize.to_string(),
            upscale: t.upscale,
            filter: t.filter.to_string(),
            encode: t.encode.to_string(),
            quality: t.quality,
            decode_scale: t.decode_scale.to_string(),
            max_pixels: t.limits.max_pixels,
            max_input_bytes: t.limits.max_input_bytes,
            seed: self.seed,
            format: match self.format {
                ShardFormatChoice::Wds => "wds",
                ShardFormatChoice::Packed => "packed",
            }
            .into(),
            compression: match self.compression {
                Compression::None => "none".into(),
                Compression::Zstd(l) => format!("zstd:{l}"),
            },
            prefix: self.prefix.clone(),
            shard_samples: self.shard_samples,
            keys: (self.keys == KeyChoice::Index).then(|| self.keys.as_str().into()),
        }
    }

    /// The plan `plan.json` recorded, writing to `output`.
    pub fn from_frozen(f: &FrozenOptions, output: PathBuf) -> Result<Self, String> {
        let one = |v: &[String]| match v {
            [p] => Ok(PathBuf::from(p)),
            _ => Err(format!("{} inputs where one was expected", v.len())),
        };
        let source = match f.input_format.as_str() {
            "imagefolder" => InputSource::Folder(one(&f.input)?),
            "list" => InputSource::List(one(&f.input)?),
            "wds" => InputSource::Wds(f.input.clone()),
            "parquet" => InputSource::Parquet(f.input.clone()),
            other => return Err(format!("unknown input format {other:?}")),
        };
        let mut plan = Self::new(source, output);
        plan.columns = Columns {
            image: f.image_column.clone(),
            label: f.label_column.clone(),
            text: f.text_column.clone(),
            drop: f.drop_columns.clone(),
        };
        let e = |what: &str, m: String| format!("{what}: {m}");
        let t = &mut plan.transform;
        t.resize = f
            .resize
            .parse()
            .map_err(|x: shardtool_image::ParseError| e("resize", x.0))?;
        t.upscale = f.upscale;
        t.filter = f
            .filter
            .parse()
            .map_err(|x: shardtool_image::ParseError| e("filter", x.0))?;
        t.encode = f
            .encode
            .parse()
            .map_err(|x: shardtool_image::ParseError| e("encode", x.0))?;
        t.quality = f.quality;
        t.decode_scale = f
            .decode_scale
            .parse()
            .map_err(|x: shardtool_image::ParseError| e("decode_scale", x.0))?;
        t.limits.max_pixels = f.max_pixels;
        t.limits.max_input_bytes = f.max_input_bytes;
        plan.seed = f.seed;
        plan.format = match f.format.as_str() {
            "wds" => ShardFormatChoice::Wds,
            "packed" => ShardFormatChoice::Packed,
            other => return Err(format!("unknown shard format {other:?}")),
        };
        plan.compression = match f.compression.as_str() {
            "none" => Compression::None,
            c => match c.strip_prefix("zstd:").and_then(|l| l.parse().ok()) {
                Some(l) => Compression::Zstd(l),
                None => return Err(format!("unknown compression {c:?}")),
            },
        };
        plan.prefix = f.prefix.clone();
        plan.shard_samples = f.shard_samples;
        plan.keys = f.keys.as_deref().unwrap_or("input").parse()?;
        plan.validate().map_err(|x| x.to_string())?;
        Ok(plan)
    }

    /// Checks the options that do not need the file system.
    pub fn validate(&self) -> Result<(), PlanError> {
        let p = &self.prefix;
        if p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(PlanError::Prefix(p.clone()));
        }
        if self.shard_bytes == 0 {
            return Err(PlanError::ZeroShardBytes);
        }
        if self.shard_samples == Some(0) {
            return Err(PlanError::ZeroShardSamples);
        }
        if self.format == ShardFormatChoice::Packed
            && self
                .shard_samples
                .is_some_and(|k| k > crate::sink::MAX_PACKED_RECORDS as u64)
        {
            return Err(PlanError::PackedShardSamples(
                crate::sink::MAX_PACKED_RECORDS as u64,
            ));
        }
        if (self.resume || crate::store::is_remote(&self.output)) && self.shard_samples.is_none() {
            return Err(PlanError::NeedShardSamples);
        }
        if self.jobs == 0 {
            return Err(PlanError::NoJobs);
        }
        if self.jobs > MAX_JOBS {
            return Err(PlanError::TooManyJobs(self.jobs));
        }
        if !(1..=100).contains(&self.transform.quality) {
            return Err(PlanError::Quality(self.transform.quality));
        }
        if let Compression::Zstd(l) = self.compression {
            if !(1..=22).contains(&l) {
                return Err(PlanError::ZstdLevel(l));
            }
            if self.shard_samples.is_none() && self.shard_bytes > MAX_ZSTD_SHARD_BYTES {
                return Err(PlanError::ZstdShardSize(self.shard_bytes));
            }
        }
        crate::output::check_apart(self)
    }

    /// The options recorded in the manifest, as they applied: packed shards' `encode` is `raw`,
    /// `quality` is null unless images were JPEG-encoded, and `shard_size` null when
    /// `shard_samples` fixed each shard's samples. `jobs` is left out: it never changes the
    /// output.
    pub fn manifest_options(&self) -> serde_json::Map<String, serde_json::Value> {
        let t = &crate::pipeline::effective_spec(self);
        let jpeg = matches!(t.encode, Encode::Jpeg | Encode::Keep);
        let v = serde_json::json!({
            "resize": t.resize.to_string(),
            "upscale": t.upscale,
            "filter": t.filter.to_string(),
            "encode": t.encode.to_string(),
            "quality": jpeg.then_some(t.quality),
            "decode_scale": t.decode_scale.to_string(),
            "max_pixels": t.limits.max_pixels,
            "shuffle": self.seed.is_some(),
            "seed": self.seed,
            "format": match self.format { ShardFormatChoice::Wds => "wds", ShardFormatChoice::Packed => "packed" },
            "compression": match self.compression { Compression::None => "none".to_string(), Compression::Zstd(l) => format!("zstd:{l}") },
            "prefix": self.prefix,
            "shard_size": self.shard_samples.is_none().then_some(self.shard_bytes),
            "shard_samples": self.shard_samples,
            "input_format": match self.source {
                InputSource::Folder(_) => "imagefolder",
                InputSource::List(_) => "list",
                InputSource::Wds(_) => "wds",
                InputSource::Parquet(_) => "parquet",
            },
        });
        match v {
            serde_json::Value::Object(mut m) => {
                if self.keys == KeyChoice::Index {
                    m.insert("keys".into(), self.keys.as_str().into());
                }
                m
            }
            _ => serde_json::Map::new(),
        }
    }
}

/// The most worker threads a pack starts (each holds a few inputs in flight): a larger `jobs`
/// is refused, not given thousands of threads.
pub const MAX_JOBS: usize = 4096;

/// The largest zstd shard `--shard-size` may ask for: what verify and inspect decompress
/// (`shardtool_verify::DEFAULT_MAX_SHARD_BYTES`).
pub const MAX_ZSTD_SHARD_BYTES: u64 = 4 << 30;

/// An option of a [`PackPlan`] that cannot work, found without touching the file system.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The shard name prefix is empty or has characters other than ASCII letters, digits, `_`, `-`.
    #[error("shard name prefix {0:?} must be non-empty ASCII letters, digits, '_' or '-'")]
    Prefix(String),
    /// A shard size of zero bytes.
    #[error("the shard size must be positive")]
    ZeroShardBytes,
    /// A shard sample count of zero.
    #[error("the samples per shard must be positive")]
    ZeroShardSamples,
    /// No worker threads.
    #[error("at least one worker thread is needed")]
    NoJobs,
    /// More worker threads than [`MAX_JOBS`].
    #[error("{0} worker threads, over the {MAX_JOBS} a pack may start")]
    TooManyJobs(usize),
    /// A JPEG quality outside 1..=100.
    #[error("JPEG quality {0} is outside 1..=100")]
    Quality(u8),
    /// Packed shards hold at most so many records.
    #[error("packed shards hold at most {0} samples")]
    PackedShardSamples(u64),
    /// Planned packing and resuming need shards of a fixed number of samples.
    #[error("partitioned, resumable and object-store packs need --shard-samples (shards by sample count)")]
    NeedShardSamples,
    /// A zstd level outside 1..=22.
    #[error("zstd level {0} is outside 1..=22")]
    ZstdLevel(i32),
    /// zstd shards larger than readers and verify decompress.
    #[error(
        "{0}-byte shards with --compress zstd: a zstd shard is decompressed whole, in memory, by \
         readers, verify and inspect, which take at most {MAX_ZSTD_SHARD_BYTES} bytes; give \
         --shard-size 4GiB or less (256MiB, the default, keeps readers' memory small)"
    )]
    ZstdShardSize(u64),
    /// The output folder is (or is inside) an ImageFolder input, or holds input files.
    #[error("output {} would take in the input {}: choose an output folder outside the inputs", .output.display(), .input.display())]
    OutputHoldsInputs {
        /// The output folder.
        output: PathBuf,
        /// The input it clashes with.
        input: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_catches_bad_options() {
        let base = PackPlan::new(InputSource::Folder("in".into()), "out".into());
        assert!(base.validate().is_ok());
        let mut p = base.clone();
        p.prefix = "a/b".into();
        assert_eq!(p.validate(), Err(PlanError::Prefix("a/b".into())));
        let mut p = base.clone();
        p.transform.quality = 0;
        assert_eq!(p.validate(), Err(PlanError::Quality(0)));
        let mut p = base.clone();
        p.compression = Compression::Zstd(40);
        assert_eq!(p.validate(), Err(PlanError::ZstdLevel(40)));
        // zstd shards past what verify decompresses; by sample count, the size is not asked.
        p.compression = Compression::Zstd(3);
        p.shard_bytes = MAX_ZSTD_SHARD_BYTES + 1;
        let big = Err(PlanError::ZstdShardSize(MAX_ZSTD_SHARD_BYTES + 1));
        assert_eq!(p.validate(), big);
        p.shard_samples = Some(10);
        assert!(p.validate().is_ok());
        p.shard_bytes = MAX_ZSTD_SHARD_BYTES;
        p.shard_samples = None;
        assert!(p.validate().is_ok());
        let mut p = base.clone();
        p.shard_samples = Some(0);
        assert_eq!(p.validate(), Err(PlanError::ZeroShardSamples));
        let mut p = base;
        p.jobs = 0;
        assert_eq!(p.validate(), Err(PlanError::NoJobs));
        p.jobs = MAX_JOBS + 1;
        assert_eq!(p.validate(), Err(PlanError::TooManyJobs(MAX_JOBS + 1)));
    }

    #[test]
    fn manifest_options_leave_out_jobs() {
        let mut a = PackPlan::new(InputSource::Folder("in".into()), "out".into());
        let mut b = a.clone();
        a.jobs = 1;
        b.jobs = 7;
        assert_eq!(a.manifest_options(), b.manifest_options());
        assert!(!a.manifest_options().contains_key("jobs"));
    }

    #[test]
    fn numbered_keys_are_frozen_and_recorded_and_the_default_is_left_out() {
        let mut p = PackPlan::new(InputSource::Wds(vec!["in".into()]), "out".into());
        let text = |p: &PackPlan| String::from_utf8(serde_json::to_vec(&p.frozen()).unwrap());
        assert!(!text(&p).unwrap().contains("keys"));
        assert!(!p.manifest_options().contains_key("keys"));
        let back = PackPlan::from_frozen(&p.frozen(), "out".into()).unwrap();
        assert_eq!(back.keys, KeyChoice::Input);
        p.keys = "index".parse().unwrap();
        assert!(text(&p).unwrap().contains(r#""keys":"index""#));
        assert_eq!(p.manifest_options()["keys"], "index");
        let back = PackPlan::from_frozen(&p.frozen(), "out".into()).unwrap();
        assert_eq!(back.keys, KeyChoice::Index);
        let mut f = p.frozen();
        f.keys = Some("names".into());
        assert!(PackPlan::from_frozen(&f, "out".into())
            .unwrap_err()
            .contains("expected input or index"));
    }
}
