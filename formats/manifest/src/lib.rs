//! The dataset manifest (`manifest.json`): what a dataset holds and how to check it.
//!
//! The manifest is the last file a pack publishes, so its presence means the dataset is complete.
//! It is specified in `README.md` beside this crate; [`Manifest::from_slice`] checks every field a
//! reader relies on, so later stages can trust it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

pub mod errors;
pub use errors::{ErrorRecord, ERRORS_FILE};

/// The value of the `format` field.
pub const FORMAT: &str = "shardtool.manifest";
/// The manifest version this crate writes and reads.
pub const VERSION: u32 = 1;
/// The file name of a manifest inside a dataset directory.
pub const FILE_NAME: &str = "manifest.json";

/// A whole dataset's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] for manifests this crate writes.
    pub version: u32,
    /// The tool that wrote it, e.g. `shardtool 0.1.0`.
    pub tool: String,
    /// The options the dataset was packed with (free-form JSON object, for people and `inspect`).
    pub pack: serde_json::Map<String, serde_json::Value>,
    /// Class names; a sample's label indexes this list.
    pub classes: Vec<String>,
    /// The fields every sample carries (`cls`, `jpg`, `json` …), sorted. An unlabelled dataset
    /// has no `cls` (tar) and an empty `classes`.
    pub fields: Vec<String>,
    /// The fields only some samples carry (a caption most samples have …), sorted, none of
    /// them in `fields`. Absent from the JSON when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional_fields: Vec<String>,
    /// The shards in order.
    pub shards: Vec<ShardEntry>,
    /// Sums over `shards`.
    pub totals: Totals,
    /// What happened to the inputs.
    pub inputs: InputCounts,
}

/// The container format of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardFormat {
    /// A WebDataset tar archive.
    Wds,
    /// A packed-tensor safetensors file.
    Packed,
}

/// Compression applied to a whole shard file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// One or more plain zstd frames: `zstd -d` restores the exact uncompressed shard.
    Zstd,
}

/// A shard file's container format and whole-file compression, as its name's ending says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardKind {
    /// Tar or packed.
    pub format: ShardFormat,
    /// Whole-file compression.
    pub compression: Option<Compression>,
}

/// Every shard kind with the file name ending that marks it (`.tar`, `.tar.zst`, `.safetensors`,
/// `.safetensors.zst`): the one place these endings are written down.
pub const SHARD_SUFFIXES: [(&str, ShardKind); 4] = [
    (".tar", ShardKind::new(ShardFormat::Wds, None)),
    (
        ".tar.zst",
        ShardKind::new(ShardFormat::Wds, Some(Compression::Zstd)),
    ),
    (".safetensors", ShardKind::new(ShardFormat::Packed, None)),
    (
        ".safetensors.zst",
        ShardKind::new(ShardFormat::Packed, Some(Compression::Zstd)),
    ),
];

impl ShardKind {
    /// A kind from its parts.
    pub const fn new(format: ShardFormat, compression: Option<Compression>) -> Self {
        Self {
            format,
            compression,
        }
    }

    /// The file name ending of this kind (`.tar.zst` …).
    pub fn suffix(self) -> &'static str {
        match (self.format, self.compression) {
            (ShardFormat::Wds, None) => ".tar",
            (ShardFormat::Wds, Some(Compression::Zstd)) => ".tar.zst",
            (ShardFormat::Packed, None) => ".safetensors",
            (ShardFormat::Packed, Some(Compression::Zstd)) => ".safetensors.zst",
        }
    }

    /// The kind a file name's ending says; `None` when it has no shard ending (or is nothing
    /// but the ending).
    pub fn from_name(name: &str) -> Option<Self> {
        SHARD_SUFFIXES
            .iter()
            .filter(|(s, _)| name.len() > s.len() && name.ends_with(s))
            .max_by_key(|(s, _)| s.len())
            .map(|(_, k)| *k)
    }
}

/// One shard file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// File name relative to the manifest's directory (no `/`).
    pub file: String,
    /// Container format.
    pub format: ShardFormat,
    /// Compression, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// Number of samples.
    pub samples: u64,
    /// Size of the file as stored, in bytes.
    pub bytes: u64,
    /// Checksum of the file as stored (`xxh3:<16 hex>`).
    pub checksum: String,
    /// Size after decompression (compressed shards only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncompressed_bytes: Option<u64>,
    /// Checksum after decompression (compressed shards only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncompressed_checksum: Option<String>,
}

/// Dataset totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    /// Samples in all shards.
    pub samples: u64,
    /// Number of shards.
    pub shards: u64,
    /// Bytes of all shard files as stored.
    pub bytes: u64,
}

/// What happened to the inputs of a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputCounts {
    /// Inputs found (recognised as images by extension, or listed).
    pub found: u64,
    /// Inputs packed into shards.
    pub packed: u64,
    /// Inputs that failed (each has a line in `errors.jsonl`).
    pub failed: u64,
    /// Entries ignored: hidden files and folders (each counted once), files without an image
    /// extension, files beside an ImageFolder's class folders.
    pub ignored: u64,
}

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The manifest is larger than the caller's limit.
    #[error("manifest is {size} bytes, over the {limit}-byte limit")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Not valid JSON, or not the expected structure.
    #[error("manifest is not valid: {0}")]
    Json(serde_json::Error),
    /// Valid JSON that breaks a rule of the format.
    #[error("manifest is inconsistent: {0}")]
    Invalid(String),
}

impl Totals {
    /// The totals of `shards` (sums saturate; [`Manifest::validate`] refuses overflowing ones).
    pub fn of(shards: &[ShardEntry]) -> Self {
        let sum =
            |f: fn(&ShardEntry) -> u64| shards.iter().fold(0u64, |a, s| a.saturating_add(f(s)));
        Self {
            samples: sum(|s| s.samples),
            shards: shards.len() as u64,
            bytes: sum(|s| s.bytes),
        }
    }
}

impl Manifest {
    /// A manifest of this format version for `shards`, with totals computed from them, every
    /// sample counted as a packed input (none failed or ignored) and default pack options; set
    /// `pack` and `inputs` afterwards when they differ.
    pub fn new(
        tool: impl Into<String>,
        classes: Vec<String>,
        fields: Vec<String>,
        shards: Vec<ShardEntry>,
    ) -> Self {
        let totals = Totals::of(&shards);
        Self {
            format: FORMAT.into(),
            version: VERSION,
            tool: tool.into(),
            pack: serde_json::Map::new(),
            classes,
            fields,
            optional_fields: Vec::new(),
            totals,
            inputs: InputCounts {
                found: totals.samples,
                packed: totals.samples,
                failed: 0,
                ignored: 0,
            },
            shards,
        }
    }

    /// Parses and validates a manifest of at most `limit` bytes.
    pub fn from_slice(bytes: &[u8], limit: u64) -> Result<Self, ManifestError> {
        let (m, broken) = Self::from_slice_reporting(bytes, limit)?;
        match broken.into_iter().next() {
            Some(b) => Err(ManifestError::Invalid(b.to_string())),
            None => Ok(m),
        }
    }

    /// Parses a manifest of at most `limit` bytes for a checker that reports every broken rule:
    /// bytes that are not a manifest, a foreign `format` or an unknown `version` are the error
    /// (nothing else in such a file can be trusted to mean anything); the other rules it breaks
    /// are returned with it.
    pub fn from_slice_reporting(
        bytes: &[u8],
        limit: u64,
    ) -> Result<(Self, Vec<BrokenRule>), ManifestError> {
        if bytes.len() as u64 > limit {
            return Err(ManifestError::TooLarge {
                size: bytes.len() as u64,
                limit,
            });
        }
        let m: Manifest = serde_json::from_slice(bytes).map_err(ManifestError::Json)?;
        let mut broken = m.broken_rules();
        if broken.first().is_some_and(|b| b.foreign) {
            return Err(ManifestError::Invalid(broken.swap_remove(0).to_string()));
        }
        Ok((m, broken))
    }

    /// Serialises as pretty JSON with a trailing newline (stable field order).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Checks every rule a reader relies on: the first broken one is the error.
    pub fn validate(&self) -> Result<(), ManifestError> {
        match self.broken_rules().into_iter().next() {
            Some(b) => Err(ManifestError::Invalid(b.to_string())),
            None => Ok(()),
        }
    }

    /// Every rule of the format this manifest breaks, one entry each, in a stable order (format
    /// and version first): the one statement of the rules, which [`validate`](Self::validate)
    /// and verify both use.
    pub fn broken_rules(&self) -> Vec<BrokenRule> {
        let mut out = Vec::new();
        let foreign = |message: String| BrokenRule {
            shard: None,
            message,
            foreign: true,
        };
        if self.format != FORMAT {
            out.push(foreign(format!(
                "format is {:?}, expected {FORMAT:?}",
                self.format
            )));
        }
        if self.version != VERSION {
            out.push(foreign(format!(
                "version {} is not supported (this build reads version {VERSION})",
                self.version
            )));
        }
        let mut bad = |shard: Option<&str>, message: String| {
            out.push(BrokenRule {
                shard: shard.map(str::to_owned),
                message,
                foreign: false,
            });
        };
        for (what, list) in [
            ("fields", &self.fields),
            ("optional_fields", &self.optional_fields),
        ] {
            if let Some(m) = field_list_problem(what, list) {
                bad(None, m);
            }
        }
        if let Some(f) =
            (self.optional_fields.iter()).find(|f| self.fields.binary_search(f).is_ok())
        {
            bad(
                None,
                format!("field {f:?} is listed both in fields and in optional_fields"),
            );
        }
        if let Some((i, c)) =
            (self.classes.iter().enumerate()).find(|(_, c)| c.len() > MAX_CLASS_NAME)
        {
            bad(
                None,
                format!(
                    "class {i}'s name is {} bytes long, more than {MAX_CLASS_NAME}",
                    c.len()
                ),
            );
        }
        let mut names = BTreeSet::new();
        for s in &self.shards {
            let shard = Some(s.file.as_str());
            if !is_safe_file_name(&s.file) {
                bad(
                    shard,
                    format!("shard file name {:?} is not a plain file name", s.file),
                );
                continue;
            }
            if !names.insert(s.file.as_str()) {
                bad(shard, "listed twice in the manifest".into());
            }
            if !is_checksum(&s.checksum) {
                bad(
                    shard,
                    format!("checksum {:?} is not xxh3:<16 hex digits>", s.checksum),
                );
            }
            match (
                s.compression,
                &s.uncompressed_bytes,
                &s.uncompressed_checksum,
            ) {
                (None, None, None) => {}
                (Some(_), Some(_), Some(c)) => {
                    if !is_checksum(c) {
                        bad(
                            shard,
                            format!("uncompressed_checksum {c:?} is not xxh3:<16 hex digits>"),
                        );
                    }
                }
                _ => bad(
                    shard,
                    "uncompressed_bytes and uncompressed_checksum must be given exactly when \
                     compression is"
                        .into(),
                ),
            }
            // A tar sample takes at least one 512-byte header, a packed record at least a byte;
            // a reader numbers a shard's records in 32 bits. (A count past these would size
            // its plan from a number no shard can hold.)
            let size = s.uncompressed_bytes.unwrap_or(s.bytes);
            let (most, what) = match s.format {
                ShardFormat::Wds => (size / 512, "tar"),
                ShardFormat::Packed => (size, "packed"),
            };
            let most = most.min(u64::from(u32::MAX));
            if s.samples > most {
                bad(
                    shard,
                    format!(
                        "{} samples cannot fit in {size} bytes of a {what} shard (at most {most})",
                        s.samples
                    ),
                );
            }
            // A compressed shard is cached decompressed under its name less `.zst`, which must
            // be a file name too (`..zst` would be `.`).
            if s.compression.is_some()
                && !(s.file.strip_suffix(".zst")).is_some_and(is_safe_file_name)
            {
                bad(
                    shard,
                    "a compressed shard's name must be a plain file name followed by .zst".into(),
                );
            }
            if ShardKind::from_name(&s.file)
                .is_some_and(|k| k.format != s.format || k.compression != s.compression)
            {
                bad(
                    shard,
                    format!(
                        "the name's ending does not match its entry's format {:?} and \
                         compression {}",
                        match s.format {
                            ShardFormat::Wds => "wds",
                            ShardFormat::Packed => "packed",
                        },
                        s.compression.map_or("none", |_| "zstd")
                    ),
                );
            }
        }
        // A reader's cache keeps a `.zst` shard decompressed under the name without `.zst`:
        // `a.tar` beside `a.tar.zst` would be two shards in one cached file.
        for s in self.shards.iter().filter(|s| s.compression.is_some()) {
            if let Some(plain) = s.file.strip_suffix(".zst").filter(|p| names.contains(p)) {
                bad(
                    Some(s.file.as_str()),
                    format!("decompressed, it would take the name of the shard {plain:?}"),
                );
            }
        }
        // Untrusted counts: an overflowing sum is a broken rule, not a panic or a wrap.
        let sum = |f: fn(&ShardEntry) -> u64| {
            (self.shards.iter()).try_fold(0u64, |a, s| a.checked_add(f(s)))
        };
        let (Some(samples), Some(bytes)) = (sum(|s| s.samples), sum(|s| s.bytes)) else {
            bad(None, "shard counts or sizes overflow".into());
            return out;
        };
        let shards = self.shards.len() as u64;
        for (what, stated, counted) in [
            ("totals.samples", self.totals.samples, samples),
            ("totals.shards", self.totals.shards, shards),
            ("totals.bytes", self.totals.bytes, bytes),
            ("inputs.packed", self.inputs.packed, samples),
        ] {
            if stated != counted {
                bad(
                    None,
                    format!("{what} is {stated}, but the shard entries add up to {counted}"),
                );
            }
        }
        out
    }
}

/// A rule of the format that a manifest breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenRule {
    /// The shard entry it concerns, if one.
    pub shard: Option<String>,
    /// What is wrong.
    pub message: String,
    /// A foreign `format` or an unknown `version`: the file is not a manifest this build reads.
    pub foreign: bool,
}

impl std::fmt::Display for BrokenRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.shard {
            Some(s) => write!(f, "shard {s:?}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A plain file name: non-empty, no path separators, not `.` or `..`, no control characters.
pub fn is_safe_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
}

/// Longest field name: a tar member name holds at most 100 bytes, key and `.` included.
pub const MAX_FIELD_NAME: usize = 64;

/// The longest class name a manifest may hold, in bytes (pack takes at most 255, a folder
/// name's limit, from lists, Parquet and ClassLabel features; a WebDataset input's manifest
/// brings its own): each is repeated in messages about the samples of its class.
pub const MAX_CLASS_NAME: usize = 1024;

/// A field name as WebDataset spells it (the member name after the key's first `.`): 1 to
/// [`MAX_FIELD_NAME`] bytes of lowercase ASCII letters, digits, `_`, `-` and `.`, neither starting
/// nor ending with `.` (`jpg`, `txt`, `seg.png`).
pub fn is_field_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FIELD_NAME
        && !name.starts_with('.')
        && !name.ends_with('.')
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.'))
}

/// `list` holds valid field names, each once, sorted.
fn field_list_problem(what: &str, list: &[String]) -> Option<String> {
    if let Some(f) = list.iter().find(|f| !is_field_name(f)) {
        return Some(format!(
            "{what} holds {f:?}, which is not a field name (1 to {MAX_FIELD_NAME} bytes of a-z, \
             0-9, _, - and ., not starting or ending with .)"
        ));
    }
    let w = list.windows(2).find(|w| w[0] >= w[1])?;
    Some(format!(
        "{what} must be sorted and without repeats, but {:?} comes before {:?}",
        w[0], w[1]
    ))
}

fn is_checksum(s: &str) -> bool {
    s.strip_prefix("xxh3:")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_kinds_round_trip_through_their_suffixes() {
        for (suffix, kind) in SHARD_SUFFIXES {
            assert_eq!(kind.suffix(), suffix);
            assert_eq!(
                ShardKind::from_name(&format!("shard-000001{suffix}")),
                Some(kind)
            );
            assert_eq!(ShardKind::from_name(suffix), None);
        }
        assert_eq!(ShardKind::from_name("manifest.json"), None);
        assert_eq!(ShardKind::from_name("a.zst"), None);
        assert_eq!(ShardKind::from_name("x.tar.gz"), None);
    }

    fn sample() -> Manifest {
        Manifest {
            format: FORMAT.into(),
            version: VERSION,
            tool: "shardtool 0.1.0".into(),
            pack: serde_json::Map::new(),
            classes: vec!["a".into(), "b".into()],
            fields: vec!["cls".into(), "jpg".into(), "json".into()],
            optional_fields: Vec::new(),
            shards: vec![ShardEntry {
                file: "shard-000000.tar".into(),
                format: ShardFormat::Wds,
                compression: None,
                samples: 3,
                bytes: 4096,
                checksum: "xxh3:0123456789abcdef".into(),
                uncompressed_bytes: None,
                uncompressed_checksum: None,
            }],
            totals: Totals {
                samples: 3,
                shards: 1,
                bytes: 4096,
            },
            inputs: InputCounts {
                found: 4,
                packed: 3,
                failed: 1,
                ignored: 0,
            },
        }
    }

    #[test]
    fn new_computes_totals_that_validate() {
        let s = sample();
        let mut m = Manifest::new(
            s.tool.clone(),
            s.classes.clone(),
            s.fields.clone(),
            s.shards.clone(),
        );
        m.validate().unwrap();
        assert_eq!(m.totals, s.totals);
        assert_eq!(
            (m.inputs.found, m.inputs.packed, m.inputs.failed),
            (3, 3, 0)
        );
        m.inputs = s.inputs;
        assert_eq!(m, s);
    }

    #[test]
    fn a_count_no_shard_of_its_size_can_hold_breaks_a_rule() {
        let mut m = sample();
        m.shards[0].samples = 8;
        m.totals.samples = 8;
        m.inputs.packed = 8;
        m.validate().unwrap();
        for (samples, format) in [(9, ShardFormat::Wds), (4097, ShardFormat::Packed)] {
            m.shards[0].samples = samples;
            m.shards[0].format = format;
            m.shards[0].file = format!(
                "s{}",
                ShardKind {
                    format,
                    compression: None
                }
                .suffix()
            );
            m.totals.samples = samples;
            m.inputs.packed = samples;
            let e = m.validate().unwrap_err().to_string();
            assert!(e.contains("cannot fit in 4096 bytes"), "{e}");
        }
        m.shards[0].samples = 4096;
        m.totals.samples = 4096;
        m.inputs.packed = 4096;
        m.validate().unwrap();
    }

    #[test]
    fn round_trips() {
        let m = sample();
        let back = Manifest::from_slice(&m.to_json(), 1 << 20).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn every_broken_rule_is_listed_and_the_first_is_the_error() {
        let mut m = sample();
        m.shards[0].format = ShardFormat::Packed;
        m.shards.push(m.shards[0].clone());
        m.shards[1].samples = u64::MAX;
        m.fields = vec!["jpg".into(), "cls".into()];
        let rules = m.broken_rules();
        let shard = Some("shard-000000.tar".to_string());
        let messages: Vec<(&Option<String>, &str)> = rules
            .iter()
            .map(|b| (&b.shard, b.message.as_str()))
            .collect();
        assert!(
            messages[0].1.starts_with("fields must be sorted"),
            "{rules:?}"
        );
        assert!(
            messages.contains(&(&shard, "listed twice in the manifest")),
            "{rules:?}"
        );
        assert!(
            messages
                .iter()
                .any(|(s, m)| **s == shard && m.contains("name's ending")),
            "{rules:?}"
        );
        assert_eq!(messages.last().unwrap().1, "shard counts or sizes overflow");
        let err = m.validate().unwrap_err().to_string();
        assert!(err.contains(&rules[0].message), "{err}");
        // A checker gets them all with the manifest; only a foreign file is the error.
        let (back, reported) = Manifest::from_slice_reporting(&m.to_json(), 1 << 20).unwrap();
        assert_eq!((back, reported), (m.clone(), rules));
        m.version = 2;
        let err = Manifest::from_slice_reporting(&m.to_json(), 1 << 20).unwrap_err();
        assert!(
            err.to_string().contains("version 2 is not supported"),
            "{err}"
        );
        assert!(m.broken_rules()[0].foreign);
    }

    #[test]
    fn refuses_inconsistent_manifests() {
        let mut m = sample();
        m.totals.samples = 4;
        assert!(Manifest::from_slice(&m.to_json(), 1 << 20).is_err());
        let mut m = sample();
        m.shards[0].file = "../etc/passwd".into();
        assert!(Manifest::from_slice(&m.to_json(), 1 << 20).is_err());
        let mut m = sample();
        m.shards[0].compression = Some(Compression::Zstd);
        assert!(Manifest::from_slice(&m.to_json(), 1 << 20).is_err());
        // `a.tar.zst` beside `a.tar`: one cached file for two shards.
        let mut m = sample();
        let mut zst = m.shards[0].clone();
        zst.file.push_str(".zst");
        zst.compression = Some(Compression::Zstd);
        zst.uncompressed_bytes = Some(zst.bytes);
        zst.uncompressed_checksum = Some(zst.checksum.clone());
        m.shards.push(zst);
        m.totals.shards += 1;
        m.totals.samples += m.shards[0].samples;
        m.totals.bytes += m.shards[0].bytes;
        m.inputs.packed += m.shards[0].samples;
        m.inputs.found += m.shards[0].samples;
        let err = Manifest::from_slice(&m.to_json(), 1 << 20).unwrap_err();
        assert!(
            err.to_string().contains("would take the name of the shard"),
            "{err}"
        );
        m.shards[0].file = "other.tar".into();
        Manifest::from_slice(&m.to_json(), 1 << 20).unwrap();
        // Names that decompressed would be no file name (`.`, `..`, empty).
        for name in ["..zst", "...zst", ".zst", "a.tar"] {
            m.shards[1].file = name.into();
            let err = Manifest::from_slice(&m.to_json(), 1 << 20).unwrap_err();
            assert!(
                err.to_string()
                    .contains("a plain file name followed by .zst"),
                "{name}: {err}"
            );
        }
        let mut m = sample();
        m.version = 99;
        assert!(Manifest::from_slice(&m.to_json(), 1 << 20).is_err());
        let m = sample();
        assert!(matches!(
            Manifest::from_slice(&m.to_json(), 10),
            Err(ManifestError::TooLarge { .. })
        ));
        assert!(Manifest::from_slice(b"{not json", 1 << 20).is_err());
        // Sample counts that overflow u64 when summed (found by the manifest fuzz target).
        let mut m = sample();
        m.shards.push(ShardEntry {
            file: "shard-000001.tar".into(),
            ..m.shards[0].clone()
        });
        m.shards[0].samples = u64::MAX;
        assert!(matches!(
            Manifest::from_slice(&m.to_json(), 1 << 20),
            Err(ManifestError::Invalid(_))
        ));
    }

    #[test]
    fn optional_fields_round_trip_and_are_left_out_when_empty() {
        let m = sample();
        let text = String::from_utf8(m.to_json()).unwrap();
        assert!(!text.contains("optional_fields"), "{text}");
        let mut m = sample();
        m.optional_fields = vec!["seg.png".into(), "txt".into()];
        let back = Manifest::from_slice(&m.to_json(), 1 << 20).unwrap();
        assert_eq!(back.optional_fields, ["seg.png", "txt"]);
        assert_eq!(back, m);
    }

    #[test]
    fn field_lists_must_be_valid_sorted_and_disjoint() {
        let invalid = |f: fn(&mut Manifest)| {
            let mut m = sample();
            f(&mut m);
            match Manifest::from_slice(&m.to_json(), 1 << 20) {
                Err(ManifestError::Invalid(msg)) => msg,
                other => panic!("expected Invalid, got {other:?}"),
            }
        };
        let msg = invalid(|m| m.optional_fields = vec!["jpg".into()]);
        assert!(msg.contains("\"jpg\"") && msg.contains("both"), "{msg}");
        let msg = invalid(|m| m.optional_fields = vec!["txt".into(), "seg".into()]);
        assert!(msg.contains("optional_fields must be sorted"), "{msg}");
        let msg = invalid(|m| m.fields = vec!["jpg".into(), "cls".into()]);
        assert!(msg.contains("fields must be sorted"), "{msg}");
        let msg = invalid(|m| m.fields = vec!["cls".into(), "cls".into()]);
        assert!(msg.contains("without repeats"), "{msg}");
        let msg = invalid(|m| m.optional_fields = vec!["Txt".into()]);
        assert!(
            msg.contains("\"Txt\"") && msg.contains("not a field name"),
            "{msg}"
        );
        for bad in ["", ".txt", "txt.", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(!is_field_name(bad), "{bad:?}");
        }
        for good in ["jpg", "seg.png", "input_json", "x-1", &"x".repeat(64)] {
            assert!(is_field_name(good), "{good:?}");
        }
    }
}
