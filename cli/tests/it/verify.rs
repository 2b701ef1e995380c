//! `shardtool verify` against real packed datasets of both formats, clean and with injected
//! faults: each fault must be detected, named (problem kind, shard, member) and exit 1; a clean
//! dataset exits 0; a dataset that cannot be opened exits 2.

use serde_json::Value;
use shardtool_packed::{Mode, PackedShard, PackedWriter};
use shardtool_wds::{TarReader, TarWriter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use tempfile::TempDir;

// ---- helpers (private to this file) -------------------------------------------------------

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_shardtool")
}

fn sample_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data/imagefolder")
}

/// Dataset flavours the tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    Wds,
    Packed,
    WdsZstd,
    PackedZstd,
}

impl Flavour {
    fn args(self) -> &'static [&'static str] {
        match self {
            Flavour::Wds => &[],
            Flavour::Packed => &["--format", "packed"],
            Flavour::WdsZstd => &["--compress", "zstd"],
            Flavour::PackedZstd => &["--format", "packed", "--compress", "zstd"],
        }
    }

    fn ext(self) -> &'static str {
        match self {
            Flavour::Wds => "tar",
            Flavour::Packed => "safetensors",
            Flavour::WdsZstd => "tar.zst",
            Flavour::PackedZstd => "safetensors.zst",
        }
    }
}

/// Packs the sample data once per flavour (45 images, 10 per shard → 5 shards) into a template.
fn template(f: Flavour) -> &'static Path {
    static T: [OnceLock<TempDir>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let slot = &T[f as usize];
    slot.get_or_init(|| {
        let dir = TempDir::new().unwrap();
        let out = dir.path().join("ds");
        let status = Command::new(bin())
            .arg("pack")
            .arg(sample_data())
            .arg(&out)
            .args(["--resize", "shorter:64", "--shard-samples", "10", "--quiet"])
            .args(f.args())
            .status()
            .unwrap();
        assert!(status.success(), "pack {f:?} failed");
        dir
    })
    .path()
}

/// A private copy of a freshly packed dataset.
fn dataset(f: Flavour) -> (TempDir, PathBuf) {
    let src = template(f).join("ds");
    let dir = TempDir::new().unwrap();
    let dst = dir.path().join("ds");
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    (dir, dst)
}

fn shard(ds: &Path, f: Flavour, i: usize) -> (String, PathBuf) {
    let name = format!("shard-{i:06}.{}", f.ext());
    let path = ds.join(&name);
    assert!(path.exists(), "{} missing", path.display());
    (name, path)
}

/// Runs `verify --json` and returns the exit code and the parsed document.
fn verify_json(target: &Path, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(bin())
        .arg("verify")
        .arg(target)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {text:?}"));
    (out.status.code().unwrap_or(-1), doc)
}

/// `(kind, shard, member)` of every problem.
fn problems(doc: &Value) -> Vec<(String, Option<String>, Option<String>)> {
    doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["shard"].as_str().map(String::from),
                p["member_or_record"].as_str().map(String::from),
            )
        })
        .collect()
}

/// Asserts a problem of `kind` naming `shard` (and `member`, when given) was reported.
#[track_caller]
fn assert_problem(doc: &Value, kind: &str, shard: Option<&str>, member: Option<&str>) {
    let all = problems(doc);
    let found = all.iter().any(|(k, s, m)| {
        k == kind
            && (shard.is_none() || s.as_deref() == shard)
            && (member.is_none() || m.as_deref() == member)
    });
    assert!(
        found,
        "expected {kind} for {shard:?} {member:?}; got {all:#?}"
    );
}

#[track_caller]
fn assert_broken(code: i32, doc: &Value) {
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["ok"], false);
}

/// Rewrites the members of a tar, mapping each `(name, data)` to zero or more members.
fn rewrite_tar(bytes: &[u8], mut f: impl FnMut(&str, &[u8]) -> Vec<(String, Vec<u8>)>) -> Vec<u8> {
    let mut w = TarWriter::new(Vec::new());
    for e in TarReader::new(bytes) {
        let e = e.unwrap();
        for (n, d) in f(&e.name, e.data) {
            w.append(&n, &d).unwrap();
        }
    }
    w.finish().unwrap()
}

/// A raw USTAR header: `typeflag` b'0' file, b'1' hard link, b'2' symlink.
fn ustar_header(name: &str, size: u64, typeflag: u8, linkname: &str) -> [u8; 512] {
    shardtool_wds::ustar_header(name, size, typeflag, linkname).unwrap()
}

/// Appends raw members before the end-of-archive marker of a shardtool tar.
fn append_raw(tar: &[u8], members: &[([u8; 512], &[u8])]) -> Vec<u8> {
    let body = tar.len() - 1024;
    assert!(tar[body..].iter().all(|&b| b == 0), "no end marker");
    let mut out = tar[..body].to_vec();
    for (h, data) in members {
        out.extend_from_slice(h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(&[0; 1024]);
    out
}

fn edit_manifest(ds: &Path, f: impl FnOnce(&mut Value)) {
    let p = ds.join("manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut m);
    std::fs::write(&p, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// The first key of a tar shard.
fn first_tar_key(bytes: &[u8]) -> String {
    let e = TarReader::new(bytes).next().unwrap().unwrap();
    e.name.split('.').next().unwrap().to_string()
}

// ---- clean datasets ------------------------------------------------------------------------

#[test]
fn clean_datasets_pass_in_every_flavour() {
    for f in [
        Flavour::Wds,
        Flavour::Packed,
        Flavour::WdsZstd,
        Flavour::PackedZstd,
    ] {
        let (_t, ds) = dataset(f);
        let (code, doc) = verify_json(&ds, &[]);
        assert_eq!(code, 0, "{f:?}: {doc:#}");
        assert_eq!(doc["ok"], true);
        assert_eq!(doc["shards"], 5);
        assert_eq!(doc["samples"], 45);
        assert_eq!(doc["samples_expected"], 45);
        assert_eq!(doc["problems"].as_array().unwrap().len(), 0);
        // The manifest path works as a target too; reading instead of mapping gives the same.
        let (code, _) = verify_json(&ds.join("manifest.json"), &["--jobs", "1"]);
        assert_eq!(code, 0, "{f:?} via manifest.json");
        let (code, doc2) = verify_json(&ds, &["--no-mmap"]);
        assert_eq!(code, 0, "{f:?} --no-mmap");
        assert_eq!(doc2["bytes_read"], doc["bytes_read"]);
    }
}

#[test]
fn clean_datasets_pass_with_decode() {
    for f in [Flavour::Wds, Flavour::WdsZstd, Flavour::Packed] {
        let (_t, ds) = dataset(f);
        let (code, doc) = verify_json(&ds, &["--decode"]);
        assert_eq!(code, 0, "{f:?}: {doc:#}");
        let decoded = doc["images_decoded"].as_u64().unwrap();
        match f {
            Flavour::Packed => assert_eq!(decoded, 0),
            _ => assert_eq!(decoded, 45),
        }
    }
}

#[test]
fn human_output_says_ok_or_names_each_problem() {
    let (_t, ds) = dataset(Flavour::Wds);
    let out = Command::new(bin()).arg("verify").arg(&ds).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK:"), "{text}");
    let (name, path) = shard(&ds, Flavour::Wds, 2);
    std::fs::remove_file(path).unwrap();
    let out = Command::new(bin()).arg("verify").arg(&ds).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{name}: missing_shard")), "{text}");
    assert!(text.contains("FAILED"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("problem"));
}

// ---- faults inside shards ------------------------------------------------------------------

#[test]
fn flipped_byte_inside_a_packed_record() {
    let (_t, ds) = dataset(Flavour::Packed);
    let (name, path) = shard(&ds, Flavour::Packed, 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let (offset, key) = {
        let s = PackedShard::open(&bytes[..]).unwrap();
        (s.data_offset() as usize + 100, s.record(0).key.to_string())
    };
    bytes[offset] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    for extra in [&[][..], &["--no-mmap"][..]] {
        let (code, doc) = verify_json(&ds, extra);
        assert_broken(code, &doc);
        assert_problem(&doc, "record_checksum", Some(&name), Some(&key));
        assert_problem(&doc, "checksum_mismatch", Some(&name), None);
        assert_eq!(problems(&doc).len(), 2, "{doc:#}");
    }
}

#[test]
fn flipped_byte_inside_a_tar_record() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, path) = shard(&ds, Flavour::Wds, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    let (jpg_at, jpg_name, cls_at, cls_name) = {
        let entries: Vec<_> = TarReader::new(&bytes).map(|e| e.unwrap()).collect();
        let jpg = entries.iter().find(|e| e.name.ends_with(".jpg")).unwrap();
        let cls = entries.iter().find(|e| e.name.ends_with(".cls")).unwrap();
        (
            jpg.header_offset as usize + 512,
            jpg.name.to_string(),
            cls.header_offset as usize + 512,
            cls.name.to_string(),
        )
    };
    // Break the JPEG signature and turn the label into one outside the class list.
    bytes[jpg_at] ^= 0xff;
    bytes[cls_at] = b'9';
    std::fs::write(&path, &bytes).unwrap();

    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "checksum_mismatch", Some(&name), None);
    assert_problem(&doc, "bad_label", Some(&name), Some(&cls_name));
    assert_problem(&doc, "label_mismatch", Some(&name), None);
    // Without --decode the image is not looked at.
    assert!(!problems(&doc).iter().any(|p| p.0 == "decode"));

    let (code, doc) = verify_json(&ds, &["--decode"]);
    assert_broken(code, &doc);
    assert_problem(&doc, "decode", Some(&name), Some(&jpg_name));
}

#[test]
fn image_size_differing_from_its_metadata_is_found_with_decode() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, path) = shard(&ds, Flavour::Wds, 0);
    let bytes = std::fs::read(&path).unwrap();
    let mut target = None;
    let rewritten = rewrite_tar(&bytes, |n, d| {
        if target.is_none() && n.ends_with(".json") {
            let mut m: Value = serde_json::from_slice(d).unwrap();
            m["width"] = Value::from(m["width"].as_u64().unwrap() + 1);
            target = Some(n.replace(".json", ".jpg"));
            return vec![(n.to_string(), serde_json::to_vec(&m).unwrap())];
        }
        vec![(n.to_string(), d.to_vec())]
    });
    std::fs::write(&path, rewritten).unwrap();
    let (code, doc) = verify_json(&ds, &["--decode"]);
    assert_broken(code, &doc);
    assert_problem(&doc, "image_size_mismatch", Some(&name), target.as_deref());
}

/// A manifest naming no classes is an unlabelled dataset's: labels there are refused by verify
/// and by the reader, in both formats (both took any label when the list was empty).
#[test]
fn labels_in_a_dataset_whose_manifest_names_no_classes_are_problems() {
    for f in [Flavour::Wds, Flavour::Packed] {
        let (_t, ds) = dataset(f);
        edit_manifest(&ds, |m| m["classes"] = Value::Array(vec![]));
        let (code, doc) = verify_json(&ds, &[]);
        assert_broken(code, &doc);
        assert_problem(&doc, "bad_label", None, None);
        let text = doc.to_string();
        assert!(text.contains("but the manifest names no classes"), "{text}");
        let out = Command::new(bin())
            .args(["read", "--keys"])
            .arg(&ds)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{f:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not one of the manifest's 0 classes"), "{err}");
    }
}

#[test]
fn truncated_shards_are_found_in_both_formats() {
    for f in [Flavour::Wds, Flavour::Packed] {
        let (_t, ds) = dataset(f);
        let (name, path) = shard(&ds, f, 2);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let (code, doc) = verify_json(&ds, &[]);
        assert_broken(code, &doc);
        assert_problem(&doc, "truncated", Some(&name), None);
        assert_problem(&doc, "size_mismatch", Some(&name), None);
        assert_problem(&doc, "checksum_mismatch", Some(&name), None);
        assert_problem(&doc, "count_mismatch", Some(&name), None);
    }
}

#[test]
fn zero_length_shards_are_found_in_every_flavour() {
    for f in [
        Flavour::Wds,
        Flavour::Packed,
        Flavour::WdsZstd,
        Flavour::PackedZstd,
    ] {
        let (_t, ds) = dataset(f);
        let (name, path) = shard(&ds, f, 4);
        std::fs::write(&path, b"").unwrap();
        let (code, doc) = verify_json(&ds, &[]);
        assert_broken(code, &doc);
        let structural = match f {
            Flavour::Wds | Flavour::Packed => "truncated",
            _ => "decompress",
        };
        assert_problem(&doc, structural, Some(&name), None);
        assert_problem(&doc, "size_mismatch", Some(&name), None);
    }
}

#[test]
fn truncated_compressed_shard_fails_to_decompress() {
    let (_t, ds) = dataset(Flavour::WdsZstd);
    let (name, path) = shard(&ds, Flavour::WdsZstd, 1);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "decompress", Some(&name), None);
    assert_problem(&doc, "checksum_mismatch", Some(&name), None);
}

#[test]
fn parent_dir_member_appended_to_a_tar_is_unsafe() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, path) = shard(&ds, Flavour::Wds, 0);
    let bytes = std::fs::read(&path).unwrap();
    let data = b"pwned";
    let h = ustar_header("../evil.cls", data.len() as u64, b'0', "");
    std::fs::write(&path, append_raw(&bytes, &[(h, data)])).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "unsafe_member", Some(&name), Some("../evil.cls"));
    assert_problem(&doc, "checksum_mismatch", Some(&name), None);
    // The extra member is not counted as a sample.
    assert!(!problems(&doc).iter().any(|p| p.0 == "count_mismatch"));
}

#[test]
fn symlink_and_hardlink_members_are_unsafe() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, path) = shard(&ds, Flavour::Wds, 1);
    let bytes = std::fs::read(&path).unwrap();
    let sym = ustar_header("000009999.jpg", 0, b'2', "/etc/passwd");
    let hard = ustar_header("000009998.jpg", 0, b'1', "000000010.jpg");
    std::fs::write(&path, append_raw(&bytes, &[(sym, b""), (hard, b"")])).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "unsafe_member", Some(&name), Some("000009999.jpg"));
    assert_problem(&doc, "unsafe_member", Some(&name), Some("000009998.jpg"));
}

#[test]
fn a_key_repeated_across_tar_shards() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (_, first) = shard(&ds, Flavour::Wds, 0);
    let (name, path) = shard(&ds, Flavour::Wds, 1);
    let taken = first_tar_key(&std::fs::read(first).unwrap());
    let bytes = std::fs::read(&path).unwrap();
    let mine = first_tar_key(&bytes);
    let rewritten = rewrite_tar(&bytes, |n, d| {
        let n = n.replacen(&mine, &taken, 1);
        let d = if n.ends_with(".json") {
            String::from_utf8(d.to_vec())
                .unwrap()
                .replace(&mine, &taken)
                .into_bytes()
        } else {
            d.to_vec()
        };
        vec![(n, d)]
    });
    std::fs::write(&path, rewritten).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "duplicate_key", Some(&name), Some(&taken));
    assert_problem(&doc, "checksum_mismatch", Some(&name), None);
}

#[test]
fn a_key_repeated_across_packed_shards() {
    let (_t, ds) = dataset(Flavour::Packed);
    let (_, first) = shard(&ds, Flavour::Packed, 0);
    let (name, path) = shard(&ds, Flavour::Packed, 3);
    let taken = {
        let b = std::fs::read(first).unwrap();
        PackedShard::open(b).unwrap().record(0).key.to_string()
    };
    let bytes = std::fs::read(&path).unwrap();
    let s = PackedShard::open(&bytes[..]).unwrap();
    let mut w = PackedWriter::new(Mode::Variable);
    for i in 0..s.len() {
        let r = s.record(i);
        let mut meta = s.sample_meta(i).clone();
        let key = if i == 2 {
            taken.clone()
        } else {
            r.key.to_string()
        };
        meta["key"] = Value::from(key.clone());
        w.add(&key, r.label, r.shape[0], r.shape[1], r.pixels, meta)
            .unwrap();
    }
    let mut out = Vec::new();
    w.finish(&mut out).unwrap();
    std::fs::write(&path, out).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "duplicate_key", Some(&name), Some(&taken));
}

#[test]
fn a_sample_without_its_label() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, path) = shard(&ds, Flavour::Wds, 2);
    let bytes = std::fs::read(&path).unwrap();
    let mut dropped = None;
    let rewritten = rewrite_tar(&bytes, |n, d| {
        if dropped.is_none() && n.ends_with(".cls") {
            dropped = Some(n.to_string());
            return vec![];
        }
        vec![(n.to_string(), d.to_vec())]
    });
    std::fs::write(&path, rewritten).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "missing_field", Some(&name), dropped.as_deref());
    assert_problem(&doc, "size_mismatch", Some(&name), None);
    // Still ten samples: only the field is missing.
    assert!(!problems(&doc).iter().any(|p| p.0 == "count_mismatch"));
}

#[test]
fn a_field_twice_in_one_sample() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, path) = shard(&ds, Flavour::Wds, 0);
    let bytes = std::fs::read(&path).unwrap();
    let mut doubled = None;
    let rewritten = rewrite_tar(&bytes, |n, d| {
        let mut v = vec![(n.to_string(), d.to_vec())];
        if doubled.is_none() && n.ends_with(".cls") {
            doubled = Some(n.to_string());
            v.push((n.to_string(), d.to_vec()));
        }
        v
    });
    std::fs::write(&path, rewritten).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "duplicate_field", Some(&name), doubled.as_deref());
}

// ---- manifest ⇄ directory ------------------------------------------------------------------

#[test]
fn a_missing_shard() {
    for f in [Flavour::Wds, Flavour::PackedZstd] {
        let (_t, ds) = dataset(f);
        let (name, path) = shard(&ds, f, 3);
        std::fs::remove_file(path).unwrap();
        let (code, doc) = verify_json(&ds, &[]);
        assert_broken(code, &doc);
        assert_problem(&doc, "missing_shard", Some(&name), None);
        assert_eq!(doc["shards_read"], 4);
        assert_eq!(doc["samples"], 35);
    }
}

#[test]
fn an_extra_shard_file() {
    for f in [Flavour::Wds, Flavour::Packed] {
        let (_t, ds) = dataset(f);
        let (_, path) = shard(&ds, f, 0);
        let extra = format!("shard-000099.{}", f.ext());
        std::fs::copy(path, ds.join(&extra)).unwrap();
        // Files that do not look like shards are not reported.
        std::fs::write(ds.join("README.txt"), "notes").unwrap();
        let (code, doc) = verify_json(&ds, &[]);
        assert_broken(code, &doc);
        assert_problem(&doc, "unexpected_shard", Some(&extra), None);
        assert_eq!(problems(&doc).len(), 1, "{doc:#}");
    }
}

#[test]
fn a_manifest_with_a_wrong_count() {
    let (_t, ds) = dataset(Flavour::Packed);
    let (name, _) = shard(&ds, Flavour::Packed, 1);
    // Consistent totals: only the shard's count disagrees with its file.
    edit_manifest(&ds, |m| {
        let n = m["shards"][1]["samples"].as_u64().unwrap();
        m["shards"][1]["samples"] = Value::from(n + 1);
        m["totals"]["samples"] = Value::from(m["totals"]["samples"].as_u64().unwrap() + 1);
        m["inputs"]["packed"] = Value::from(m["inputs"]["packed"].as_u64().unwrap() + 1);
    });
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "count_mismatch", Some(&name), None);
    assert!(
        problems(&doc).contains(&("count_mismatch".into(), None, None)),
        "the dataset total is reported too: {doc:#}"
    );
    assert!(!problems(&doc).iter().any(|p| p.0 == "manifest_invalid"));

    // Totals that do not add up are a manifest problem, reported beside the shard's.
    let (_t, ds) = dataset(Flavour::Wds);
    let (name, _) = shard(&ds, Flavour::Wds, 0);
    edit_manifest(&ds, |m| m["shards"][0]["samples"] = Value::from(3));
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "manifest_invalid", None, None);
    assert_problem(&doc, "count_mismatch", Some(&name), None);
}

#[test]
fn a_manifest_with_a_wrong_checksum() {
    for f in [Flavour::Wds, Flavour::WdsZstd] {
        let (_t, ds) = dataset(f);
        let (name, _) = shard(&ds, f, 2);
        edit_manifest(&ds, |m| {
            m["shards"][2]["checksum"] = Value::from("xxh3:0123456789abcdef");
            if f == Flavour::WdsZstd {
                m["shards"][2]["uncompressed_checksum"] = Value::from("xxh3:fedcba9876543210");
            }
        });
        let (code, doc) = verify_json(&ds, &[]);
        assert_broken(code, &doc);
        assert_problem(&doc, "checksum_mismatch", Some(&name), None);
        if f == Flavour::WdsZstd {
            assert_problem(&doc, "uncompressed_checksum_mismatch", Some(&name), None);
        }
        assert_eq!(problems(&doc).len(), if f == Flavour::Wds { 1 } else { 2 });
    }
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let (_t, ds) = dataset(Flavour::Wds);
    let (missing, p3) = shard(&ds, Flavour::Wds, 3);
    std::fs::remove_file(p3).unwrap();
    let (empty, p4) = shard(&ds, Flavour::Wds, 4);
    std::fs::write(p4, b"").unwrap();
    std::fs::write(ds.join("stray.tar.zst"), b"x").unwrap();
    let (code, doc) = verify_json(&ds, &["--jobs", "2"]);
    assert_broken(code, &doc);
    assert_problem(&doc, "missing_shard", Some(&missing), None);
    assert_problem(&doc, "truncated", Some(&empty), None);
    assert_problem(&doc, "unexpected_shard", Some("stray.tar.zst"), None);
}

// ---- cannot open: exit 2 -------------------------------------------------------------------

#[test]
fn unopenable_datasets_exit_2() {
    let dir = TempDir::new().unwrap();
    // No such directory.
    let (code, doc) = verify_json(&dir.path().join("nope"), &[]);
    assert_eq!(code, 2);
    assert_eq!(doc["error"]["kind"], "not_found");
    // A directory without manifest.json.
    let (code, doc) = verify_json(dir.path(), &[]);
    assert_eq!(code, 2);
    assert_eq!(doc["error"]["kind"], "no_manifest");
    // An unparsable manifest.
    let (_t, ds) = dataset(Flavour::Wds);
    std::fs::write(ds.join("manifest.json"), b"{\"format\": ").unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_eq!(code, 2);
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["error"]["kind"], "manifest_unparsable");
    // A shard is not a dataset (it was read as a manifest).
    let (_t, ds) = dataset(Flavour::WdsZstd);
    let (_, path) = shard(&ds, Flavour::WdsZstd, 0);
    let (code, doc) = verify_json(&path, &[]);
    assert_eq!(code, 2);
    assert_eq!(doc["error"]["kind"], "shard_not_dataset", "{doc}");
    // A usage error.
    let out = Command::new(bin())
        .args(["verify", "--jobs", "0"])
        .arg(&ds)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_teaches_with_examples() {
    let out = Command::new(bin())
        .args(["verify", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Examples:"), "{text}");
    assert!(text.contains("--decode"), "{text}");
    assert!(text.contains("Exit status"), "{text}");
}

// ---- errors.jsonl --------------------------------------------------------------------------

/// Counts one more failed input in the manifest (found and failed both grow).
fn count_one_failure(ds: &Path) {
    edit_manifest(ds, |m| {
        for k in ["found", "failed"] {
            let n = m["inputs"][k].as_u64().unwrap();
            m["inputs"][k] = Value::from(n + 1);
        }
    });
}

#[test]
fn pack_writes_an_error_report_that_verify_accepts() {
    let (_t, ds) = dataset(Flavour::Wds);
    let report = ds.join("errors.jsonl");
    assert!(
        report.is_file(),
        "pack writes errors.jsonl even with no failures"
    );
    let (code, doc) = verify_json(&ds, &[]);
    assert_eq!(code, 0, "{doc:#}");
    // Nothing failed, so a missing report loses nothing.
    std::fs::remove_file(&report).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_eq!(code, 0, "{doc:#}");
}

#[test]
fn error_report_with_a_failure_the_manifest_does_not_count() {
    let (_t, ds) = dataset(Flavour::Packed);
    std::fs::write(
        ds.join("errors.jsonl"),
        "{\"path\":\"a/x.jpg\",\"kind\":\"decode\",\"message\":\"bad\"}\n",
    )
    .unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "error_report", Some("errors.jsonl"), None);
    assert_eq!(problems(&doc).len(), 1, "{doc:#}");
    // Counted in the manifest as well: whole again.
    count_one_failure(&ds);
    let (code, doc) = verify_json(&ds, &[]);
    assert_eq!(code, 0, "{doc:#}");
}

#[test]
fn missing_error_report_when_inputs_failed() {
    let (_t, ds) = dataset(Flavour::Wds);
    count_one_failure(&ds);
    std::fs::remove_file(ds.join("errors.jsonl")).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "error_report", Some("errors.jsonl"), None);
    assert_eq!(problems(&doc).len(), 1, "{doc:#}");
}

#[test]
fn unparsable_and_overlong_error_report_lines_are_named() {
    let (_t, ds) = dataset(Flavour::WdsZstd);
    count_one_failure(&ds);
    count_one_failure(&ds);
    let mut text = b"{\"path\": 1}\n".to_vec();
    text.extend(std::iter::repeat_n(b'x', 1 << 20));
    text.push(b'\n');
    std::fs::write(ds.join("errors.jsonl"), text).unwrap();
    let (code, doc) = verify_json(&ds, &[]);
    assert_broken(code, &doc);
    assert_problem(&doc, "error_report", Some("errors.jsonl"), Some("line 1"));
    assert_problem(&doc, "error_report", Some("errors.jsonl"), Some("line 2"));
    // Two lines, as the manifest counts: only the two bad lines are problems.
    assert_eq!(problems(&doc).len(), 2, "{doc:#}");
}

// ---- record checksums ----------------------------------------------------------------------

/// Damage the file checksum cannot see (a manifest re-hashed over a bad record, as a writer with
/// inconsistent record checksums would leave): the default check trusts the file checksum, which
/// covers every byte; `--decode` recomputes every record checksum and names the record.
#[test]
fn decode_recomputes_record_checksums_even_when_the_file_checksum_matches() {
    let (_t, ds) = dataset(Flavour::Packed);
    let (name, path) = shard(&ds, Flavour::Packed, 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let (offset, key) = {
        let s = PackedShard::open(&bytes[..]).unwrap();
        (s.data_offset() as usize + 100, s.record(0).key.to_string())
    };
    bytes[offset] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let sum = format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes));
    edit_manifest(&ds, |m| m["shards"][1]["checksum"] = Value::from(sum));
    let (code, doc) = verify_json(&ds, &[]);
    assert_eq!(code, 0, "{doc:#}");
    for extra in [&["--decode"][..], &["--decode", "--no-mmap"][..]] {
        let (code, doc) = verify_json(&ds, extra);
        assert_broken(code, &doc);
        assert_problem(&doc, "record_checksum", Some(&name), Some(&key));
        assert_eq!(problems(&doc).len(), 1, "{doc:#}");
    }
}

#[test]
fn verify_inspect_and_preview_take_a_file_url_as_the_reader_does() {
    let t = crate::common::tempdir();
    let dir = t.path().join("ds");
    crate::common::pack(crate::common::sample_data(), &dir)
        .args(["--resize", "shorter:32", "-q"])
        .ok();
    let url = format!("file://{}", dir.display());
    crate::common::Cmd::new(["verify"]).arg(&url).ok();
    let r = crate::common::Cmd::new(["inspect"]).arg(&url).ok();
    assert!(r.stdout.contains("samples   45"), "{}", r.stdout);
    crate::common::Cmd::new(["preview"])
        .arg(&url)
        .arg("-o")
        .arg(t.path().join("p.png"))
        .ok();
    assert!(t.path().join("p.png").exists());
    // With `?` or `#`, whose path would end before them: refused.
    let r = crate::common::Cmd::new(["verify"])
        .arg(format!("{url}?v=2"))
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("spell them %3F and %23"), "{}", r.stderr);
}

/// The library's caller may cap the pixels `verify` decodes below the dataset's limit (a
/// dataset from elsewhere states its own); left at the default, the dataset's applies.
#[test]
fn a_callers_pixel_limit_caps_what_verify_decodes() {
    let t = crate::common::tempdir();
    let ds = t.path().join("ds");
    crate::common::pack(sample_data(), &ds)
        .args(["--resize", "crop:64x64", "-q"])
        .ok();
    let mut opts = shardtool_verify::VerifyOptions::with_jobs(1);
    opts.decode = true;
    let run = |o: &shardtool_verify::VerifyOptions| {
        shardtool_verify::verify(&ds, o, &shardtool_verify::NoProgress).unwrap()
    };
    assert!(run(&opts).ok);
    opts.limits.max_pixels = 1000;
    let capped = run(&opts);
    assert!(!capped.ok, "64x64 images decoded under a 1000-pixel cap");
    assert!(
        capped.problems.iter().any(|p| p.message.contains("1000")),
        "{:?}",
        capped.problems.first()
    );
}

/// Class names of megabytes in an edited manifest break its rules, and the samples' messages
/// show them cut: the report stays small however many samples name them.
#[test]
fn huge_class_names_are_a_broken_rule_and_cut_in_messages() {
    for f in [Flavour::Wds, Flavour::Packed] {
        let (_t, ds) = dataset(f);
        let path = ds.join("manifest.json");
        let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for c in m["classes"].as_array_mut().unwrap() {
            *c = Value::String(format!("{}{}", c.as_str().unwrap(), "x".repeat(200_000)));
        }
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        let out = Command::new(bin()).arg("verify").arg(&ds).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{f:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("name is 200"), "{f:?}: {}", &text[..500]);
        assert!(text.contains("more than 1024"), "{f:?}");
        assert!(text.contains("label_mismatch"), "{f:?}");
        assert!(text.len() < 100_000, "{f:?}: {} bytes", text.len());
    }
}
