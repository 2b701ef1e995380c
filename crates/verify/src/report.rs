//! The typed result of `verify`: one [`Problem`] per thing found wrong, plus what was checked.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Declares [`ProblemKind`] with each kind's stable name stated once, for serde and `as_str`.
macro_rules! problem_kinds {
    ($($(#[$doc:meta])* $kind:ident = $name:literal,)*) => {
        /// What kind of problem was found. Serialised as its `snake_case` name (`missing_shard`,
        /// …), which is the stable name scripts match on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum ProblemKind {
            $($(#[$doc])* #[serde(rename = $name)] $kind,)*
        }

        impl ProblemKind {
            /// The stable `snake_case` name (the same string as in JSON output).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ProblemKind::$kind => $name,)*
                }
            }
        }
    };
}

problem_kinds! {
    /// The manifest parses but breaks a rule of its format (totals, names, checksum syntax …).
    ManifestInvalid = "manifest_invalid",
    /// A shard listed in the manifest is not in the directory.
    MissingShard = "missing_shard",
    /// A file that looks like a shard (`*.tar`, `*.safetensors`, `.zst` of either) is not listed.
    UnexpectedShard = "unexpected_shard",
    /// A shard exists but could not be read (permissions, I/O error, not a regular file).
    Unreadable = "unreadable",
    /// A remote shard could not be fetched whole: on every attempt the server failed or sent
    /// other bytes than the manifest's size and checksum (the message says which).
    FetchFailed = "fetch_failed",
    /// A shard is larger than this run may hold in memory; only its checksum was checked.
    TooLarge = "too_large",
    /// The stored size differs from the manifest's `bytes`.
    SizeMismatch = "size_mismatch",
    /// The stored checksum differs from the manifest's `checksum`.
    ChecksumMismatch = "checksum_mismatch",
    /// The decompressed size differs from the manifest's `uncompressed_bytes`.
    UncompressedSizeMismatch = "uncompressed_size_mismatch",
    /// The decompressed checksum differs from the manifest's `uncompressed_checksum`.
    UncompressedChecksumMismatch = "uncompressed_checksum_mismatch",
    /// A compressed shard is not a valid zstd stream.
    Decompress = "decompress",
    /// A shard holds a different number of samples than the manifest says (or the dataset does).
    CountMismatch = "count_mismatch",
    /// A shard ends early: inside a header or record, or without the tar end-of-archive marker.
    Truncated = "truncated",
    /// A shard's bytes break its format (bad tar header, invalid packed-shard layout).
    Malformed = "malformed",
    /// Non-zero bytes follow the tar end-of-archive marker.
    TrailingData = "trailing_data",
    /// A tar member that could write outside an extraction directory: an absolute path, a `..`
    /// component, a hard or symbolic link, a device or a FIFO.
    UnsafeMember = "unsafe_member",
    /// A tar member that is not a regular file (directory, pax/GNU header), a `__*__` member, or
    /// a sample's members past the 4,096th.
    UnexpectedMember = "unexpected_member",
    /// A sample key breaks the WebDataset key rules (`[A-Za-z0-9_-]`, 1–80 bytes, no `__` start).
    BadKey = "bad_key",
    /// A member name has no field (no `.`) or a field that is not lowercase.
    BadMemberName = "bad_member_name",
    /// A sample lacks a field the manifest declares.
    MissingField = "missing_field",
    /// A sample holds the same field twice.
    DuplicateField = "duplicate_field",
    /// A sample holds a field the manifest does not declare.
    UnexpectedField = "unexpected_field",
    /// A carried field breaks its rule: a `.txt` that is not UTF-8 (or over the size limit).
    BadField = "bad_field",
    /// A key appears twice (in one shard, or in two).
    DuplicateKey = "duplicate_key",
    /// A packed record's pixels do not match its stored checksum.
    RecordChecksum = "record_checksum",
    /// A label is not an integer, or not an index of the class list.
    BadLabel = "bad_label",
    /// Two statements of a sample's label or class disagree (`.cls` against `.json`).
    LabelMismatch = "label_mismatch",
    /// A sample's metadata (`.json`, packed sample object) is missing, unparsable or inconsistent.
    BadMetadata = "bad_metadata",
    /// An image does not decode (`--decode`).
    Decode = "decode",
    /// An image's size differs from its metadata's `width`/`height`.
    ImageSizeMismatch = "image_size_mismatch",
    /// `errors.jsonl` is missing although inputs failed, has a line that is not a pack error
    /// record, or has a different number of lines than the manifest's `inputs.failed`.
    ErrorReport = "error_report",
    /// A shard has more problems than are listed for one shard (the first 1,000); this one
    /// counts the rest, so that a shard of a million damaged members stays a bounded report.
    MoreProblems = "more_problems",
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing found wrong, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The shard file name, when the problem is inside or about one shard.
    pub shard: Option<String>,
    /// The tar member (`000000012.cls`), sample key or packed record key, when there is one.
    pub member_or_record: Option<String>,
    /// The class of problem.
    pub kind: ProblemKind,
    /// A human-readable reason.
    pub message: String,
}

impl Problem {
    /// A problem about the dataset as a whole.
    pub fn dataset(kind: ProblemKind, message: impl Into<String>) -> Self {
        Self {
            shard: None,
            member_or_record: None,
            kind,
            message: message.into(),
        }
    }

    /// A problem about one shard.
    pub fn shard(shard: &str, kind: ProblemKind, message: impl Into<String>) -> Self {
        Self {
            shard: Some(shard.to_string()),
            member_or_record: None,
            kind,
            message: message.into(),
        }
    }

    /// A problem about one member or record of a shard.
    pub fn member(
        shard: &str,
        member: impl Into<String>,
        kind: ProblemKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            shard: Some(shard.to_string()),
            member_or_record: Some(member.into()),
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.shard, &self.member_or_record) {
            (Some(s), Some(m)) => write!(f, "{s} [{m}]: ")?,
            (Some(s), None) => write!(f, "{s}: ")?,
            (None, Some(m)) => write!(f, "[{m}]: ")?,
            (None, None) => write!(f, "dataset: ")?,
        }
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// What a verification run checked and found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// True when no problem was found.
    pub ok: bool,
    /// The dataset directory.
    pub dataset: String,
    /// The manifest that was checked against.
    pub manifest: String,
    /// Whether images were decoded (`--decode`).
    pub decode: bool,
    /// Worker threads used.
    pub jobs: usize,
    /// Shards listed in the manifest.
    pub shards: u64,
    /// Shards that could be read and parsed.
    pub shards_read: u64,
    /// Samples found in the shards that could be parsed.
    pub samples: u64,
    /// Samples the manifest lists.
    pub samples_expected: u64,
    /// Bytes read from shard files.
    pub bytes_read: u64,
    /// Images decoded (only with `--decode`).
    pub images_decoded: u64,
    /// Wall time in seconds.
    pub elapsed_secs: f64,
    /// Number of problems of each kind.
    pub problem_counts: BTreeMap<ProblemKind, u64>,
    /// Every problem found, in shard order.
    pub problems: Vec<Problem>,
    /// Cached copies of a remote dataset's shards found damaged and fetched again (not
    /// problems of the dataset; absent for a local one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_repaired: Option<u64>,
}

impl Report {
    /// Fills `ok` and `problem_counts` from `problems` (again, after they were edited).
    pub fn finish(&mut self) {
        self.problem_counts.clear();
        for p in &self.problems {
            *self.problem_counts.entry(p.kind).or_default() += 1;
        }
        self.ok = self.problems.is_empty();
    }

    /// True when at least one problem of `kind` names `shard`.
    pub fn has(&self, kind: ProblemKind, shard: Option<&str>) -> bool {
        self.problems
            .iter()
            .any(|p| p.kind == kind && (shard.is_none() || p.shard.as_deref() == shard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialise_as_their_names() {
        for k in [
            ProblemKind::ManifestInvalid,
            ProblemKind::UncompressedChecksumMismatch,
            ProblemKind::ImageSizeMismatch,
            ProblemKind::Decode,
            ProblemKind::ErrorReport,
            ProblemKind::BadField,
            ProblemKind::MoreProblems,
        ] {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json, serde_json::Value::String(k.as_str().into()));
        }
    }

    #[test]
    fn report_counts_problems_and_serialises_counts_by_name() {
        let mut r = Report {
            ok: true,
            dataset: "d".into(),
            manifest: "d/manifest.json".into(),
            decode: false,
            jobs: 1,
            shards: 1,
            shards_read: 1,
            samples: 0,
            samples_expected: 0,
            bytes_read: 0,
            images_decoded: 0,
            elapsed_secs: 0.0,
            problem_counts: BTreeMap::new(),
            problems: vec![
                Problem::shard("a.tar", ProblemKind::Truncated, "x"),
                Problem::member("a.tar", "k.cls", ProblemKind::MissingField, "y"),
                Problem::shard("a.tar", ProblemKind::Truncated, "z"),
            ],
            cache_repaired: None,
        };
        r.finish();
        assert!(!r.ok);
        assert_eq!(r.problem_counts[&ProblemKind::Truncated], 2);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["problem_counts"]["missing_field"], 1);
        assert_eq!(v["problems"][1]["member_or_record"], "k.cls");
        assert!(r.has(ProblemKind::MissingField, Some("a.tar")));
        assert_eq!(r.problems[1].to_string(), "a.tar [k.cls]: missing_field: y");
    }
}
