//! Shard files: rolling by `--shard-samples` and `--shard-size`, names and `--prefix`, and the
//! manifest's sizes, checksums and totals against the files on disk.

use crate::common::*;
use std::path::Path;

fn make_inputs(root: &Path, n: u32) {
    for i in 0..n {
        let c = ["a", "b"][(i % 2) as usize];
        save_rgb(
            root.join(format!("{c}/{i:03}.png")),
            &pattern(20 + i % 13, 16 + i % 9, i),
        );
    }
}

#[test]
fn shards_roll_at_the_sample_count() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 10);
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--shard-samples", "4"]).ok();
    let m = manifest(&ds);
    let counts: Vec<u64> = m.shards.iter().map(|s| s.samples).collect();
    assert_eq!(counts, [4, 4, 2]);
    let names: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        names,
        ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    );
    assert_eq!(m.pack["shard_samples"], 4);
    let samples = wds_samples(&ds);
    assert_eq!(samples.len(), 10);
    // An exact multiple leaves no empty shard behind.
    let ds2 = t.path().join("ds2");
    pack(&root, &ds2).args(["--shard-samples", "5"]).ok();
    let counts: Vec<u64> = manifest(&ds2).shards.iter().map(|s| s.samples).collect();
    assert_eq!(counts, [5, 5]);
}

/// Checks the documented rule for every shard but the last: it reaches `limit` bytes, and
/// exceeds it by less than the bytes of the sample that made it reach the limit.
#[track_caller]
fn check_byte_rolling(ds: &Path, limit: u64) {
    let m = manifest(ds);
    let samples = wds_samples(ds);
    assert!(
        m.shards.len() >= 3,
        "expected several shards, got {}",
        m.shards.len()
    );
    for (i, shard) in m.shards.iter().enumerate() {
        let last_sample = samples
            .iter()
            .rfind(|s| s.shard == i)
            .expect("no empty shards");
        if i + 1 == m.shards.len() {
            assert!(shard.bytes > 0);
            continue;
        }
        assert!(
            shard.bytes >= limit,
            "{} is {} bytes, below --shard-size {limit}",
            shard.file,
            shard.bytes
        );
        assert!(
            shard.bytes - limit < last_sample.tar_bytes,
            "{} is {} bytes: it exceeds --shard-size {limit} by {}, more than its last sample ({} bytes)",
            shard.file,
            shard.bytes,
            shard.bytes - limit,
            last_sample.tar_bytes
        );
    }
}

#[test]
fn shards_roll_at_the_byte_size() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 24);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--shard-size", "16KiB", "--encode", "png"])
        .ok();
    assert_eq!(manifest(&ds).pack["shard_size"], 16384);
    check_byte_rolling(&ds, 16 * 1024);
}

#[test]
fn shard_size_counts_the_tar_end_of_archive_blocks() {
    // A tar shard always ends with two 512-byte zero blocks. Choose the limit so that the first
    // three samples plus those blocks already reach it: the shard must close after three samples
    // rather than take a fourth and overshoot by that sample plus 1 KiB.
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 12);
    let probe = t.path().join("probe");
    pack(&root, &probe).args(["--encode", "png"]).ok();
    let samples = wds_samples(&probe);
    let three: u64 = samples[..3].iter().map(|s| s.tar_bytes).sum();
    let limit = three + 1;
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--encode", "png", "--shard-size", &limit.to_string()])
        .ok();
    check_byte_rolling(&ds, limit);
}

#[test]
fn packed_shards_roll_at_the_byte_size() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 24);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--format", "packed", "--resize", "crop:16x16"])
        .args(["--shard-size", "12KB"])
        .ok();
    let m = manifest(&ds);
    let (recs, _) = packed_samples(&ds);
    assert!(m.shards.len() >= 3);
    let record: u64 = 16 * 16 * 3;
    for (i, s) in m.shards.iter().enumerate() {
        if i + 1 < m.shards.len() {
            assert!(s.bytes >= 12_000, "{} is {} bytes", s.file, s.bytes);
            // One more record (pixels, index entries, metadata) plus at most one step of the
            // header's alignment to the data boundary.
            let slack = record + shardtool_packed::DATA_ALIGN + 1024;
            assert!(s.bytes - 12_000 < slack, "{} is {} bytes", s.file, s.bytes);
        }
        assert_eq!(
            recs.iter().filter(|r| r.shard == i).count() as u64,
            s.samples
        );
    }
}

#[test]
fn prefix_names_the_shards() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 5);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--prefix", "train_v2-a", "--shard-samples", "2"])
        .ok();
    let m = manifest(&ds);
    let names: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        names,
        [
            "train_v2-a-000000.tar",
            "train_v2-a-000001.tar",
            "train_v2-a-000002.tar"
        ]
    );
    assert_eq!(m.pack["prefix"], "train_v2-a");
    wds_samples(&ds);
    for bad in ["a/b", "a.b", "", "../x", "sp ace"] {
        let out = t.path().join("bad");
        pack(&root, &out)
            .args(["--prefix", bad])
            .run()
            .assert_code(2);
        assert!(!out.join("manifest.json").exists());
    }
}

#[test]
fn manifest_matches_the_files() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 9);
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--shard-samples", "4"]).ok();
    let m = manifest(&ds);
    let mut total = 0;
    for s in &m.shards {
        let bytes = std::fs::read(ds.join(&s.file)).unwrap();
        assert_eq!(bytes.len() as u64, s.bytes, "{}", s.file);
        assert_eq!(xxh3(&bytes), s.checksum, "{}", s.file);
        assert!(s.checksum.starts_with("xxh3:") && s.checksum.len() == 21);
        assert!(s.compression.is_none() && s.uncompressed_bytes.is_none());
        total += s.bytes;
    }
    assert_eq!(m.totals.bytes, total);
    assert_eq!(m.totals.shards, 3);
    assert_eq!(m.totals.samples, 9);
    assert_eq!(m.format, "shardtool.manifest");
    assert_eq!(m.classes, ["a", "b"]);
    assert_eq!(m.fields, ["cls", "jpg", "json"]);
    // The pack options are recorded, and --jobs is not among them.
    for k in [
        "resize",
        "seed",
        "format",
        "compression",
        "encode",
        "shard_size",
    ] {
        assert!(m.pack.contains_key(k), "pack.{k} missing");
    }
    assert!(!m.pack.contains_key("jobs"));
}
