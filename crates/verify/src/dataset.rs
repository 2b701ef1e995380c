//! Opening a target: a dataset directory, a `manifest.json`, or (for inspect and preview) a single
//! shard file; checking the manifest's rules one by one so that every broken rule is reported.

use crate::report::{Problem, ProblemKind};
use crate::VerifyError;
use shardtool_core::Limits;
use shardtool_manifest::{self as manifest, Manifest};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub use shardtool_manifest::{ShardKind, SHARD_SUFFIXES};

/// An opened dataset: its directory, manifest, and the manifest rules it breaks.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The dataset's directory.
    pub dir: PathBuf,
    /// Its `manifest.json`.
    pub manifest_path: PathBuf,
    /// The manifest, parsed.
    pub manifest: Manifest,
    /// The manifest's rules it breaks (an empty list for a sound manifest).
    pub problems: Vec<Problem>,
}

/// What a path names.
#[derive(Debug)]
pub enum Target {
    /// A dataset directory or its manifest.
    Dataset(Box<Dataset>),
    /// A file that is not a manifest (with `allow_shard`): a shard to look at on its own.
    Shard(PathBuf),
}

/// Resolves a dataset directory or manifest path. A directory must hold `manifest.json`.
pub(crate) fn open_dataset(target: &Path, limits: &Limits) -> Result<Dataset, VerifyError> {
    match open_target(target, limits, false)? {
        Target::Dataset(d) => Ok(*d),
        Target::Shard(path) => Err(VerifyError::UnknownFile { path }),
    }
}

/// Resolves a dataset directory, a manifest, or (with `allow_shard`) a shard file. Only a
/// target that cannot be opened at all is an error; a manifest's broken rules are
/// [`Dataset::problems`].
pub fn open_target(
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
        if manifest::ShardKind::from_name(&name).is_some() {
            return Err(VerifyError::Shard {
                path: target.to_path_buf(),
            });
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (dir, target.to_path_buf())
    };
    let limit = limits.max_header_bytes;
    let bytes =
        shardtool_core::read_regular_within(&manifest_path, limit).map_err(|e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => VerifyError::Manifest {
                path: manifest_path.clone(),
                message: format!("larger than the {limit}-byte limit for a manifest"),
            },
            _ => VerifyError::io(&manifest_path, e),
        })?;
    let (manifest, problems) = parse_manifest(&manifest_path, &bytes)?;
    Ok(Target::Dataset(Box::new(Dataset {
        dir,
        manifest_path,
        manifest,
        problems,
    })))
}

/// Parses a manifest. Invalid JSON, a foreign `format` or an unknown `version` are errors (the
/// rest of the file cannot be trusted to mean anything); every other broken rule (stated once, by
/// [`Manifest::broken_rules`]) is a [`ProblemKind::ManifestInvalid`] problem, so verification can
/// go on and report the shards too.
pub(crate) fn parse_manifest(
    path: &Path,
    bytes: &[u8],
) -> Result<(Manifest, Vec<Problem>), VerifyError> {
    let (m, broken) =
        Manifest::from_slice_reporting(bytes, u64::MAX).map_err(|e| VerifyError::Manifest {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok((m, broken.into_iter().map(problem).collect()))
}

fn problem(b: manifest::BrokenRule) -> Problem {
    match &b.shard {
        Some(s) => Problem::shard(s, ProblemKind::ManifestInvalid, b.message),
        None => Problem::dataset(ProblemKind::ManifestInvalid, b.message),
    }
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
          "shards": [{"file": "s-000000.tar", "format": "wds", "samples": 2, "bytes": 3072,
                      "checksum": "xxh3:0123456789abcdef"}],
          "totals": {"samples": 2, "shards": 1, "bytes": 3072},
          "inputs": {"found": 2, "packed": 2, "failed": 0, "ignored": 0}
        }"#;
        serde_json::from_str(json).unwrap()
    }

    fn problems(m: &Manifest) -> Vec<Problem> {
        m.broken_rules().into_iter().map(problem).collect()
    }

    #[test]
    fn every_broken_rule_is_reported() {
        assert!(problems(&manifest()).is_empty());
        let mut m = manifest();
        m.totals.samples = 3;
        m.inputs.packed = 5;
        m.shards[0].checksum = "md5:x".into();
        let p = problems(&m);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p.iter().all(|p| p.kind == ProblemKind::ManifestInvalid));
        let mut m = manifest();
        m.shards[0].file = "../x.tar".into();
        assert_eq!(problems(&m).len(), 1);
        // Class names are labels' display names, and real ones repeat (ImageNet-1k's label
        // metadata names two classes "crane"): not a broken rule.
        let mut m = manifest();
        m.classes = vec!["crane".into(), "crane".into()];
        assert!(problems(&m).is_empty());
        m.validate().unwrap();
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
