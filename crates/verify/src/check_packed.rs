//! Checks of a packed (safetensors) shard: the layout of FORMAT.md (validated by
//! `PackedShard::open`, carried fields' encoding included), keys, labels against the class list,
//! record shapes against the sample metadata, carried fields against the manifest's, and — when
//! asked ([`Records`]) — every record's own checksum.
//!
//! Why record checksums are not always recomputed: the manifest's file checksum covers every
//! byte of the shard, records included, and was computed by pack from the very bytes it wrote.
//! When the file hashes to it, every record is byte for byte as written, so recomputing each
//! record's checksum would hash every pixel a second time to learn nothing about damage. They are
//! recomputed when the file checksum fails or cannot be compared (to name the damaged records),
//! and with `--decode` (the deep check, which also proves the writer's records consistent).

use crate::check_tar::{empty_shard, Ctx, Scan};
use crate::keys::Keys;
use crate::report::{Problem, ProblemKind};
use crate::sample::{check_class_and_size, check_label_range, check_meta};
use rayon::prelude::*;
use serde_json::Value;
use shardtool_packed::{Error, FieldValue, PackedShard, RECORD_FIELDS as PACKED_FIELDS};
use shardtool_wds::txt_problem;

/// Whether and how to recompute record checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Records {
    /// Not at all: the file checksum already matched the manifest.
    Skip,
    /// Every record, in order on the calling thread.
    Check,
    /// Every record, fanned out over the current rayon pool (`--decode` on more than one thread).
    CheckOnPool,
}

/// Checks a whole packed shard held in `bytes`; `records` says what to do about record checksums.
pub(crate) fn check_packed(bytes: &[u8], ctx: &Ctx<'_>, records: Records) -> Scan {
    let mut scan = Scan::default();
    if bytes.is_empty() {
        scan.problems.push(empty_shard(ctx));
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
    // Names the manifest declares beyond key, label and pixels are carried in `fields`.
    let required: Vec<&str> = ctx
        .fields
        .iter()
        .map(String::as_str)
        .filter(|f| !PACKED_FIELDS.contains(f))
        .collect();
    let bad: Vec<usize> = match records {
        Records::Skip => Vec::new(),
        Records::CheckOnPool => (0..shard.len())
            .into_par_iter()
            .filter(|&i| !shard.verify_checksum(i))
            .collect(),
        Records::Check => (0..shard.len())
            .filter(|&i| !shard.verify_checksum(i))
            .collect(),
    };
    for i in bad {
        let rec = shard.record(i);
        scan.member(
            ctx,
            rec.key,
            ProblemKind::RecordChecksum,
            format!(
                "the pixels of record {i} do not match their stored checksum {:016x}",
                rec.checksum
            ),
        );
    }
    scan.keys = Keys::with_capacity(shard.len());
    for (i, rec) in shard.records().enumerate() {
        let key = rec.key;
        scan.key(ctx, key, || {
            format!("is used by an earlier record of this shard (record {i})")
        });
        // -1 is an unlabelled record, in a dataset of classes too.
        if rec.label != -1 {
            check_label_range(rec.label, ctx, &mut scan, || key.to_string());
        }
        let meta = shard.sample_meta(i);
        let [h, w, _] = rec.shape;
        let class = meta.get("class").and_then(Value::as_str);
        let size = |k: &str| meta.get(k).map(Value::as_u64);
        let stated = check_class_and_size(
            (class, Some(rec.label)),
            (size("width"), size("height")),
            ctx,
            &mut scan,
            || key.to_string(),
        );
        if let Some((mw, mh)) = stated.filter(|&s| s != (u64::from(w), u64::from(h))) {
            scan.member(
                ctx,
                key,
                ProblemKind::ImageSizeMismatch,
                format!("record is {w}x{h}, but its metadata says {mw}x{mh}"),
            );
        }
        check_carried(&shard, i, key, &required, ctx, &mut scan);
    }
    scan.samples = shard.len() as u64;
    scan
}

/// Checks record `i`'s carried fields (their encoding was checked at open): every `required` one
/// present, none the manifest does not declare, `txt` text, `json` the input's own json (an
/// object, with the record's key if it states one).
fn check_carried(
    shard: &PackedShard<&[u8]>,
    i: usize,
    key: &str,
    required: &[&str],
    ctx: &Ctx<'_>,
    scan: &mut Scan,
) {
    let member = |f: &str| format!("{key}.{f}");
    let carried: Vec<(String, FieldValue<'_>)> = shard.carried(i).collect();
    for f in required {
        if carried.iter().all(|(n, _)| n != f) {
            scan.member(
                ctx,
                &member(f),
                ProblemKind::MissingField,
                format!("record {key} carries no {f} (the manifest declares it for every sample)"),
            );
        }
    }
    for (name, value) in &carried {
        let name = name.as_str();
        if !(required.contains(&name) || ctx.optional.contains(name)) {
            scan.member(
                ctx,
                &member(name),
                ProblemKind::UnexpectedField,
                format!("record {key} carries {name}, which the manifest does not declare"),
            );
        }
        let bytes = value.bytes();
        let len = bytes.len() as u64;
        match name {
            "txt" => {
                if let Some(why) = txt_problem(len, bytes) {
                    scan.member(ctx, &member(name), ProblemKind::BadField, why);
                }
            }
            "json" => {
                // A carried json is the input's: its width and height are not the record's.
                let input = Ctx {
                    json_input: true,
                    ..*ctx
                };
                check_meta(len, bytes, key, None, &input, scan, || member(name));
            }
            _ => {}
        }
    }
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
            optional: &crate::check_tar::NO_FIELDS,
            json_input: false,
            renumbered: false,
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

    /// A shard whose records carry `fields[i]` (label -1 each: unlabelled).
    fn carrying(fields: &[serde_json::Value]) -> Vec<u8> {
        let mut w = PackedWriter::new(Mode::Fixed);
        for (i, f) in fields.iter().enumerate() {
            let meta = serde_json::json!({"width": 1, "height": 1, "fields": f});
            w.add(&format!("k{i}"), -1, 1, 1, &[0; 3], meta).unwrap();
        }
        let mut out = Vec::new();
        w.finish(&mut out).unwrap();
        out
    }

    /// Problems found in `bytes` against fields key, label, pixels, `required` and `optional`
    /// (no classes), as (kind, record or member).
    fn found(bytes: &[u8], required: &[&str], optional: &[&str]) -> Vec<(ProblemKind, String)> {
        let set = |l: &[&str]| -> BTreeSet<String> { l.iter().map(|s| s.to_string()).collect() };
        let mut f = set(&PACKED_FIELDS);
        f.extend(set(required));
        let o = set(optional);
        let ctx = Ctx {
            shard: "s.safetensors",
            fields: &f,
            optional: &o,
            json_input: false,
            renumbered: false,
            classes: &[],
            decode: false,
            expected_samples: 0,
        };
        check_packed(bytes, &ctx, Records::Check)
            .problems
            .into_iter()
            .map(|p| (p.kind, p.member_or_record.unwrap_or(p.message)))
            .collect()
    }

    #[test]
    fn carried_fields_are_checked_against_the_manifest() {
        use shardtool_packed::field_value;
        let txt = |s: &[u8]| field_value(s);
        let bytes = carrying(&[
            serde_json::json!({"txt": txt(b"a red bus"), "json": txt(br#"{"width": 640}"#)}),
            serde_json::json!({"txt": txt(b"\xff\xfe")}),
            serde_json::json!({"seg": txt(b"x"), "json": txt(br#"{"key": "k0"}"#)}),
            serde_json::json!({"txt": txt(b"ok"), "json": txt(b"[]")}),
        ]);
        // Unlabelled records (-1) are fine without classes; the input json's width is not the
        // record's; txt is required, json optional.
        assert_eq!(
            found(&bytes, &["txt"], &["json"]),
            [
                (ProblemKind::BadField, "k1.txt".to_string()),
                (ProblemKind::MissingField, "k2.txt".into()),
                (ProblemKind::BadMetadata, "k2.json".into()),
                (ProblemKind::UnexpectedField, "k2.seg".into()),
                (ProblemKind::BadMetadata, "k3.json".into()),
            ]
        );
    }

    #[test]
    fn a_record_with_malformed_fields_makes_the_shard_malformed() {
        let good = carrying(&[serde_json::json!({"bin": {"base64": "AAAA"}})]);
        // Same length, so the layout stays intact: "AAAA" becomes "A@AA", not base64.
        let at = good.windows(4).position(|w| w == b"AAAA").unwrap();
        let mut bad = good.clone();
        bad[at + 1] = b'@';
        let p = found(&bad, &[], &["bin"]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, ProblemKind::Malformed);
        assert!(p[0].1.contains("record 0 (k0)"), "{}", p[0].1);
        assert_eq!(found(&good, &[], &["bin"]), []);
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
