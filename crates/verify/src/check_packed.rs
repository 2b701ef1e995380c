//! Checks of a packed (safetensors) shard: the layout of FORMAT.md (validated by
//! `PackedShard::open`), keys, labels against the class list, record shapes against the sample
//! metadata, and — when asked ([`Records`]) — every record's own checksum.
//!
//! Why record checksums are not always recomputed: the manifest's file checksum covers every
//! byte of the shard, records included, and was computed by pack from the very bytes it wrote.
//! When the file hashes to it, every record is byte for byte as written, so recomputing each
//! record's checksum would hash every pixel a second time to learn nothing about damage. They are
//! recomputed when the file checksum fails or cannot be compared (to name the damaged records),
//! and with `--decode` (the deep check, which also proves the writer's records consistent).

use crate::check_tar::{Ctx, Scan};
use crate::report::{Problem, ProblemKind};
use crate::sample::check_label_range;
use rayon::prelude::*;
use serde_json::Value;
use shardtool_core::validate_key;
use shardtool_packed::{Error, PackedShard};
use std::collections::HashSet;

/// The fields every packed record carries.
pub(crate) const PACKED_FIELDS: [&str; 3] = ["key", "label", "pixels"];

/// Whether and how to recompute record checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Records {
    /// Not at all: the file checksum already matched the manifest.
    Skip,
    /// Every record.
    Check,
}

/// Checks a whole packed shard held in `bytes`; `records` says what to do about record checksums.
pub(crate) fn check_packed(bytes: &[u8], ctx: &Ctx<'_>, records: Records) -> Scan {
    let mut scan = Scan::default();
    if bytes.is_empty() {
        scan.problems.push(Problem::shard(
            ctx.shard,
            ProblemKind::Truncated,
            "the shard is empty (0 bytes)",
        ));
        return scan;
    }
    let shard = match PackedShard::open(bytes) {
        Ok(s) => s,
        Err(e) => {
            let kind = match e {
                Error::Truncated { .. } => ProblemKind::Truncated,
                _ => ProblemKind::Malformed,
            };
            scan.problems
                .push(Problem::shard(ctx.shard, kind, e.to_string()));
            return scan;
        }
    };
    for f in ctx.fields {
        if !PACKED_FIELDS.contains(&f.as_str()) {
            scan.problems.push(Problem::shard(
                ctx.shard,
                ProblemKind::MissingField,
                format!(
                    "the manifest declares field {f:?}, but packed records carry only key, label \
                     and pixels"
                ),
            ));
        }
    }
    let bad: Vec<usize> = match records {
        Records::Skip => Vec::new(),
        // With --decode this fans out over verify's pool; without, each shard is one thread's
        // work (shards run in parallel) and the records are checked in order.
        Records::Check if ctx.decode => (0..shard.len())
            .into_par_iter()
            .filter(|&i| !shard.verify_checksum(i))
            .collect(),
        Records::Check => (0..shard.len())
            .filter(|&i| !shard.verify_checksum(i))
            .collect(),
    };
    for i in bad {
        let rec = shard.record(i);
        scan.problems.push(Problem::member(
            ctx.shard,
            rec.key,
            ProblemKind::RecordChecksum,
            format!(
                "the pixels of record {i} do not match their stored checksum {:016x}",
                rec.checksum
            ),
        ));
    }
    let mut seen = HashSet::with_capacity(shard.len());
    for (i, rec) in shard.records().enumerate() {
        let key = rec.key;
        if let Err(e) = validate_key(key) {
            scan.member(ctx, key, ProblemKind::BadKey, format!("key {key:?}: {e}"));
        }
        if seen.insert(key) {
            scan.keys.push(key.to_string());
        } else {
            scan.member(
                ctx,
                key,
                ProblemKind::DuplicateKey,
                format!("key {key:?} is used by an earlier record of this shard (record {i})"),
            );
        }
        check_label_range(rec.label, ctx, &mut scan, || key.to_string());
        let meta = shard.sample_meta(i);
        let [h, w, _] = rec.shape;
        let dim = |k: &str| meta.get(k).map(|v| v.as_u64());
        match (dim("width"), dim("height")) {
            (None, None) => {}
            (Some(Some(mw)), Some(Some(mh))) => {
                if (mw, mh) != (u64::from(w), u64::from(h)) {
                    scan.member(
                        ctx,
                        key,
                        ProblemKind::ImageSizeMismatch,
                        format!("record is {w}x{h}, but its metadata says {mw}x{mh}"),
                    );
                }
            }
            _ => scan.member(
                ctx,
                key,
                ProblemKind::BadMetadata,
                "width and height must both be non-negative integers".into(),
            ),
        }
        if let Some(Value::String(class)) = meta.get("class") {
            let named = usize::try_from(rec.label)
                .ok()
                .and_then(|l| ctx.classes.get(l));
            if let Some(named) = named {
                if named != class {
                    scan.member(
                        ctx,
                        key,
                        ProblemKind::LabelMismatch,
                        format!(
                            "metadata states class {class:?}, but label {} is class {named:?}",
                            rec.label
                        ),
                    );
                }
            }
        }
    }
    scan.samples = shard.len() as u64;
    scan
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardtool_packed::{Mode, PackedWriter};
    use std::collections::BTreeSet;

    fn shard(keys: &[&str], labels: &[i64]) -> Vec<u8> {
        let mut w = PackedWriter::new(Mode::Variable);
        for (k, l) in keys.iter().zip(labels) {
            w.add(
                k,
                *l,
                2,
                1,
                &[*l as u8; 6],
                serde_json::json!({"width": 1, "height": 2, "class": "a"}),
            )
            .unwrap();
        }
        let mut out = Vec::new();
        w.finish(&mut out).unwrap();
        out
    }

    fn kinds(bytes: &[u8]) -> Vec<ProblemKind> {
        let f: BTreeSet<String> = PACKED_FIELDS.iter().map(|s| s.to_string()).collect();
        let c = vec!["a".to_string(), "b".to_string()];
        let ctx = Ctx {
            shard: "s.safetensors",
            fields: &f,
            classes: &c,
            decode: false,
            expected_samples: 0,
        };
        let checked = check_packed(bytes, &ctx, Records::Check);
        let skipped = check_packed(bytes, &ctx, Records::Skip);
        let kinds: Vec<ProblemKind> = checked.problems.iter().map(|p| p.kind).collect();
        let without_records: Vec<ProblemKind> = kinds
            .iter()
            .copied()
            .filter(|k| *k != ProblemKind::RecordChecksum)
            .collect();
        let skipped_kinds: Vec<ProblemKind> = skipped.problems.iter().map(|p| p.kind).collect();
        assert_eq!(
            skipped_kinds, without_records,
            "skipping record checksums changes nothing else"
        );
        kinds
    }

    #[test]
    fn good_and_broken_packed_shards() {
        let good = shard(&["k1", "k2"], &[0, 0]);
        assert_eq!(kinds(&good), vec![]);
        let mut flipped = good.clone();
        let off = shardtool_packed::DATA_ALIGN as usize + 1;
        flipped[off] ^= 0xff;
        assert_eq!(kinds(&flipped), vec![ProblemKind::RecordChecksum]);
        assert_eq!(kinds(&good[..good.len() / 2]), vec![ProblemKind::Truncated]);
        assert_eq!(kinds(&[]), vec![ProblemKind::Truncated]);
        let mut garbage = good.clone();
        garbage[9] = b'x';
        assert_eq!(kinds(&garbage), vec![ProblemKind::Malformed]);
        // Label 1 is class "b", but the metadata says "a"; label 5 is not a class.
        let wrong = shard(&["k1", "k1", "k3"], &[1, 0, 5]);
        assert_eq!(
            kinds(&wrong),
            vec![
                ProblemKind::LabelMismatch,
                ProblemKind::DuplicateKey,
                ProblemKind::BadLabel
            ]
        );
    }
}
