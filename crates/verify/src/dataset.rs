//! Opening a target: a dataset directory, a `manifest.json`, or (for inspect and preview) a single
//! shard file; checking the manifest's rules one by one so that every broken rule is reported.

use crate::report::{Problem, ProblemKind};
use crate::VerifyError;
use shardtool_core::{Checksum, Limits};
use shardtool_manifest::{self as manifest, Manifest};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use shardtool_manifest::{ShardKind, SHARD_SUFFIXES};

/// An opened dataset: its directory, manifest, and the manifest rules it breaks.
#[derive(Debug, Clone)]
pub(crate) struct Dataset {
    pub dir: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest: Manifest,
    pub problems: Vec<Problem>,
}

/// What a path names.
pub(crate) enum Target {
    Dataset(Box<Dataset>),
    Shard(PathBuf),
}

/// Resolves a dataset directory or manifest path. A directory must hold `manifest.json`.
pub(crate) fn open_dataset(target: &Path, limits: &Limits) -> Result<Dataset, VerifyError> {
    match open_target(target, limits, false)? {
        Target::Dataset(d) => Ok(*d),
        Target::Shard(path) => Err(VerifyError::UnknownFile { path }),
    }
}

/// Resolves a dataset directory, a manifest, or (with `allow_shard`) a shard file.
pub(crate) fn open_target(
    target: &Path,
    limits: &Limits,
    allow_shard: bool,
) -> Result<Target, VerifyError> {
    let meta = std::fs::metadata(target).map_err(|e| VerifyError::io(target, e))?;
    let (dir, manifest_path) = if meta.is_dir() {
        let m = target.join(manifest::FILE_NAME);
        if !m.exists() {
            return Err(VerifyError::NoManifest {
                dir: target.to_path_buf(),
            });
        }
        (target.to_path_buf(), m)
    } else {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if allow_shard && !name.ends_with(".json") {
            return Ok(Target::Shard(target.to_path_buf()));
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (dir, target.to_path_buf())
    };
    let bytes = read_bounded(&manifest_path, limits.max_header_bytes)?;
    let (manifest, problems) = parse_manifest(&manifest_path, &bytes)?;
    Ok(Target::Dataset(Box::new(Dataset {
        dir,
        manifest_path,
        manifest,
        problems,
    })))
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, VerifyError> {
    let file = std::fs::File::open(path).map_err(|e| VerifyError::io(path, e))?;
    // Sized from the file system (within the limit) so that a manifest is read in one or two
    // calls rather than in doubling steps from 32 bytes.
    let hint = file.metadata().map_or(0, |m| m.len()).min(limit);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0).saturating_add(1));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| VerifyError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(VerifyError::Manifest {
            path: path.to_path_buf(),
            message: format!("larger than the {limit}-byte limit for a manifest"),
        });
    }
    Ok(bytes)
}

/// Parses a manifest. Invalid JSON, a foreign `format` or an unknown `version` are errors (the
/// rest of the file cannot be trusted to mean anything); every other broken rule is a
/// [`ProblemKind::ManifestInvalid`] problem, so verification can go on and report the shards too.
pub(crate) fn parse_manifest(
    path: &Path,
    bytes: &[u8],
) -> Result<(Manifest, Vec<Problem>), VerifyError> {
    let err = |message: String| VerifyError::Manifest {
        path: path.to_path_buf(),
        message,
    };
    let m: Manifest = serde_json::from_slice(bytes)
        .map_err(|e| err(format!("not a valid shardtool manifest: {e}")))?;
    if m.format != manifest::FORMAT {
        return Err(err(format!(
            "format is {:?}, expected {:?}",
            m.format,
            manifest::FORMAT
        )));
    }
    if m.version != manifest::VERSION {
        return Err(err(format!(
            "manifest version {} is not supported (this build reads version {})",
            m.version,
            manifest::VERSION
        )));
    }
    let problems = manifest_problems(&m);
    Ok((m, problems))
}

/// Every rule of the manifest format that `m` breaks, one problem each.
pub(crate) fn manifest_problems(m: &Manifest) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut bad = |shard: Option<&str>, message: String| {
        out.push(match shard {
            Some(s) => Problem::shard(s, ProblemKind::ManifestInvalid, message),
            None => Problem::dataset(ProblemKind::ManifestInvalid, message),
        });
    };
    let mut names = BTreeSet::new();
    for s in &m.shards {
        if !manifest::is_safe_file_name(&s.file) {
            bad(
                Some(&s.file),
                format!(
                    "shard file name {:?} is not a plain file name; it is not read",
                    s.file
                ),
            );
            continue;
        }
        if !names.insert(s.file.as_str()) {
            bad(Some(&s.file), "listed twice in the manifest".into());
        }
        if Checksum::parse(&s.checksum).is_none() {
            bad(
                Some(&s.file),
                format!("checksum {:?} is not xxh3:<16 hex digits>", s.checksum),
            );
        }
        match (
            s.compression,
            s.uncompressed_bytes,
            &s.uncompressed_checksum,
        ) {
            (None, None, None) => {}
            (Some(_), Some(_), Some(c)) => {
                if Checksum::parse(c).is_none() {
                    bad(
                        Some(&s.file),
                        format!("uncompressed_checksum {c:?} is not xxh3:<16 hex digits>"),
                    );
                }
            }
            _ => bad(
                Some(&s.file),
                "uncompressed_bytes and uncompressed_checksum must be given exactly when \
                 compression is"
                    .into(),
            ),
        }
        if let Some(kind) = ShardKind::from_name(&s.file) {
            if kind.format != s.format || kind.compression != s.compression {
                bad(
                    Some(&s.file),
                    format!(
                        "the name's ending does not match format {:?}, compression {:?}",
                        s.format, s.compression
                    ),
                );
            }
        }
    }
    // Untrusted numbers: sums saturate instead of overflowing.
    let samples = m
        .shards
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.samples));
    let bytes = m.shards.iter().fold(0u64, |a, s| a.saturating_add(s.bytes));
    if m.totals.samples != samples {
        bad(
            None,
            format!(
                "totals.samples is {}, but the shard entries add up to {samples}",
                m.totals.samples
            ),
        );
    }
    if m.totals.shards != m.shards.len() as u64 {
        bad(
            None,
            format!(
                "totals.shards is {}, but {} shards are listed",
                m.totals.shards,
                m.shards.len()
            ),
        );
    }
    if m.totals.bytes != bytes {
        bad(
            None,
            format!(
                "totals.bytes is {}, but the shard entries add up to {bytes}",
                m.totals.bytes
            ),
        );
    }
    if m.inputs.packed != samples {
        bad(
            None,
            format!(
                "inputs.packed is {}, but the shards hold {samples} samples",
                m.inputs.packed
            ),
        );
    }
    let mut classes = BTreeSet::new();
    for c in &m.classes {
        if !classes.insert(c) {
            bad(None, format!("class {c:?} is listed twice"));
        }
    }
    // A rule added to the format crate later still gets reported.
    if out.is_empty() {
        if let Err(e) = m.validate() {
            out.push(Problem::dataset(
                ProblemKind::ManifestInvalid,
                e.to_string(),
            ));
        }
    }
    out
}

/// Files in `dir` that look like shards but are not in `listed`, sorted by name.
pub(crate) fn unlisted_shards(
    dir: &Path,
    listed: &BTreeSet<&str>,
) -> Result<Vec<String>, VerifyError> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| VerifyError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| VerifyError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if ShardKind::from_name(&name).is_some() && !listed.contains(name.as_str()) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let json = r#"{
          "format": "shardtool.manifest", "version": 1, "tool": "t", "pack": {},
          "classes": ["a", "b"], "fields": ["cls", "jpg", "json"],
          "shards": [{"file": "s-000000.tar", "format": "wds", "samples": 2, "bytes": 10,
                      "checksum": "xxh3:0123456789abcdef"}],
          "totals": {"samples": 2, "shards": 1, "bytes": 10},
          "inputs": {"found": 2, "packed": 2, "failed": 0, "ignored": 0}
        }"#;
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn every_broken_rule_is_reported() {
        assert!(manifest_problems(&manifest()).is_empty());
        let mut m = manifest();
        m.totals.samples = 3;
        m.inputs.packed = 5;
        m.shards[0].checksum = "md5:x".into();
        let p = manifest_problems(&m);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p.iter().all(|p| p.kind == ProblemKind::ManifestInvalid));
        let mut m = manifest();
        m.shards[0].file = "../x.tar".into();
        assert_eq!(manifest_problems(&m).len(), 1);
    }

    #[test]
    fn foreign_or_unparsable_manifests_are_errors() {
        let p = Path::new("m.json");
        assert!(parse_manifest(p, b"{").is_err());
        let mut m = manifest();
        m.version = 2;
        let bytes = serde_json::to_vec(&m).unwrap();
        assert!(matches!(
            parse_manifest(p, &bytes),
            Err(VerifyError::Manifest { .. })
        ));
    }
}
