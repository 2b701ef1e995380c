//! The validated pack plan: everything `pack` needs, checked before any file is touched.

use crate::listing::InputSource;
use shardtool_image::TransformSpec;
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

/// Everything a pack needs.
#[derive(Debug, Clone)]
pub struct PackPlan {
    /// Inputs.
    pub source: InputSource,
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
    /// Roll a shard once it holds this many samples.
    pub shard_samples: Option<u64>,
    /// Worker threads.
    pub jobs: usize,
    /// Abort once more than this many inputs failed.
    pub max_errors: Option<u64>,
    /// Replace an existing dataset in `output`.
    pub overwrite: bool,
}

impl PackPlan {
    /// A plan with the documented defaults.
    pub fn new(source: InputSource, output: PathBuf) -> Self {
        Self {
            source,
            output,
            transform: TransformSpec::default(),
            seed: Some(DEFAULT_SEED),
            format: ShardFormatChoice::Wds,
            compression: Compression::None,
            prefix: "shard".into(),
            shard_bytes: 256 << 20,
            shard_samples: None,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_errors: None,
            overwrite: false,
        }
    }

    /// Checks the options that do not need the file system.
    pub fn validate(&self) -> Result<(), String> {
        let p = &self.prefix;
        if p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "--prefix {p:?} must be non-empty ASCII letters, digits, '_' or '-'"
            ));
        }
        if self.shard_bytes == 0 {
            return Err("--shard-size must be positive".into());
        }
        if self.shard_samples == Some(0) {
            return Err("--shard-samples must be positive".into());
        }
        if self.jobs == 0 {
            return Err("--jobs must be at least 1".into());
        }
        if !(1..=100).contains(&self.transform.quality) {
            return Err("--quality must be from 1 to 100".into());
        }
        if let Compression::Zstd(l) = self.compression {
            if !(1..=22).contains(&l) {
                return Err(format!("zstd level {l} is outside 1..=22"));
            }
        }
        Ok(())
    }

    /// The options recorded in the manifest. `jobs` is left out: it never changes the output.
    pub fn manifest_options(&self) -> serde_json::Map<String, serde_json::Value> {
        let t = &self.transform;
        let v = serde_json::json!({
            "resize": t.resize.to_string(),
            "upscale": t.upscale,
            "filter": t.filter.to_string(),
            "encode": t.encode.to_string(),
            "quality": t.quality,
            "max_pixels": t.limits.max_pixels,
            "shuffle": self.seed.is_some(),
            "seed": self.seed,
            "format": match self.format { ShardFormatChoice::Wds => "wds", ShardFormatChoice::Packed => "packed" },
            "compression": match self.compression { Compression::None => "none".to_string(), Compression::Zstd(l) => format!("zstd:{l}") },
            "prefix": self.prefix,
            "shard_size": self.shard_bytes,
            "shard_samples": self.shard_samples,
        });
        match v {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        }
    }
}

/// Parses `64MiB`, `1GB`, `1.5GiB`, `4096` (bytes). Units: B, KB/MB/GB/TB (powers of 1000),
/// KiB/MiB/GiB/TiB (powers of 1024); case-insensitive.
pub fn parse_byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(format!("invalid size {s:?}: unknown unit {unit:?}")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected a number such as 64MiB"))?;
    let bytes = value * mult as f64;
    if !(1.0..1.8e19).contains(&bytes) {
        return Err(format!("invalid size {s:?}: out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_byte_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("1.5kib"), Ok(1536));
        for bad in ["", "MiB", "12 parsecs", "-1", "0"] {
            assert!(parse_byte_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_catches_bad_options() {
        let base = PackPlan::new(InputSource::Folder("in".into()), "out".into());
        assert!(base.validate().is_ok());
        let mut p = base.clone();
        p.prefix = "a/b".into();
        assert!(p.validate().is_err());
        let mut p = base.clone();
        p.transform.quality = 0;
        assert!(p.validate().is_err());
        let mut p = base.clone();
        p.compression = Compression::Zstd(40);
        assert!(p.validate().is_err());
        let mut p = base;
        p.jobs = 0;
        assert!(p.validate().is_err());
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
}
