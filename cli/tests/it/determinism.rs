//! Determinism and order: `--jobs` never changes a byte, the seed alone decides the order,
//! `--no-shuffle` keeps the sorted listing order, and keys are unique and portable.

use crate::common::*;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// A mixed tree: several classes, formats and sizes, plus two broken files.
fn make_tree(root: &Path) {
    let classes = ["cat", "dog", "eel"];
    for i in 0..36u32 {
        let c = classes[(i % 3) as usize];
        let (w, h) = (40 + i * 3, 30 + (i * 7) % 50);
        let img = pattern(w, h, i);
        let ext = ["jpg", "png", "webp", "bmp"][(i % 4) as usize];
        save_rgb(root.join(format!("{c}/img_{i:02}.{ext}")), &img);
    }
    write_file(root.join("dog/broken.jpg"), b"\xff\xd8\xff\xe0 broken");
    write_file(root.join("eel/empty.png"), b"");
}

fn key_to_source(ds: &Path) -> BTreeMap<String, String> {
    wds_samples(ds)
        .into_iter()
        .map(|s| (s.key.clone(), s.source().to_string()))
        .collect()
}

/// Shard files and the manifest, byte for byte, plus each error's input and kind in order (the
/// messages are checked separately in `inputs.rs`).
type Output = (BTreeMap<String, Vec<u8>>, Vec<(String, String)>);

/// Reads a dataset's [`Output`].
fn output(ds: &Path) -> Output {
    let mut files = dir_contents(ds);
    files
        .remove("errors.jsonl")
        .expect("errors.jsonl is written");
    let errs = errors(ds).into_iter().map(|e| (e.path, e.kind)).collect();
    (files, errs)
}

#[track_caller]
fn assert_same_output(runs: &[(&str, Output)]) {
    let (_, (first, first_errs)) = &runs[0];
    assert!(first.contains_key("manifest.json"));
    assert_eq!(first_errs.len(), 2);
    for (jobs, (files, errs)) in &runs[1..] {
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            first.keys().collect::<Vec<_>>(),
            "--jobs {jobs}: file names"
        );
        for (name, bytes) in files {
            assert!(
                bytes == &first[name],
                "--jobs {jobs}: {name} differs from --jobs 1"
            );
        }
        assert_eq!(errs, first_errs, "--jobs {jobs}: errors.jsonl");
    }
}

#[test]
fn jobs_never_change_the_output_bytes() {
    let t = tempdir();
    let root = t.path().join("in");
    make_tree(&root);
    let mut runs = Vec::new();
    for jobs in ["1", "2", "3"] {
        let ds = t.path().join(format!("ds-j{jobs}"));
        pack(&root, &ds)
            .args([
                "--jobs",
                jobs,
                "--resize",
                "shorter:24",
                "--shard-samples",
                "7",
            ])
            .ok();
        runs.push((jobs, output(&ds)));
    }
    assert!(runs[0].1 .0.len() >= 6, "several shards expected");
    assert_same_output(&runs);
}

#[test]
fn jobs_never_change_packed_zstd_output() {
    let t = tempdir();
    let root = t.path().join("in");
    make_tree(&root);
    let mut runs = Vec::new();
    for jobs in ["1", "3"] {
        let ds = t.path().join(format!("ds-j{jobs}"));
        pack(&root, &ds)
            .args([
                "--jobs",
                jobs,
                "--format",
                "packed",
                "--resize",
                "crop:16x16",
            ])
            .args(["--compress", "zstd", "--shard-samples", "10"])
            .ok();
        runs.push((jobs, output(&ds)));
    }
    assert!(runs[0].1 .0.len() >= 4);
    assert_same_output(&runs);
}

#[test]
fn the_seed_decides_the_order() {
    let t = tempdir();
    let root = t.path().join("in");
    make_tree(&root);
    let run = |name: &str, seed: &str| {
        let ds = t.path().join(name);
        pack(&root, &ds).args(["--seed", seed, "--jobs", "2"]).ok();
        ds
    };
    let a = run("a", "7");
    let b = run("b", "7");
    let c = run("c", "8");
    let (ma, mb, mc) = (key_to_source(&a), key_to_source(&b), key_to_source(&c));
    assert_eq!(ma, mb, "same seed, same order");
    assert_eq!(dir_contents(&a), dir_contents(&b), "same seed, same bytes");
    assert_ne!(ma, mc, "another seed, another order");
    // The same inputs either way.
    let set = |m: &BTreeMap<String, String>| m.values().cloned().collect::<HashSet<_>>();
    assert_eq!(set(&ma), set(&mc));
    assert_eq!(manifest(&c).pack["seed"], 8);
    // The default is shuffled too, and is the documented default seed's order.
    let d = t.path().join("d");
    pack(&root, &d).ok();
    let sorted: Vec<String> = {
        let mut v: Vec<String> = set(&ma).into_iter().collect();
        v.sort();
        v
    };
    let default_order: Vec<String> = key_to_source(&d).into_values().collect();
    assert_ne!(default_order, sorted, "the default order is shuffled");
    assert_eq!(manifest(&d).pack["shuffle"], true);
}

#[test]
fn no_shuffle_keeps_the_sorted_listing_order() {
    let t = tempdir();
    let root = t.path().join("in");
    make_tree(&root);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--no-shuffle", "--shard-samples", "5"])
        .ok();
    let m = manifest(&ds);
    assert_eq!(m.pack["shuffle"], false);
    let samples = wds_samples(&ds);
    // Keys ascend through the shards, and the sources come class by class in sorted order.
    let keys: Vec<&str> = samples.iter().map(|s| s.key.as_str()).collect();
    let mut sorted_keys = keys.clone();
    sorted_keys.sort_unstable();
    assert_eq!(keys, sorted_keys, "samples are stored in key order");
    let sources: Vec<(i64, String)> = samples
        .iter()
        .map(|s| (s.cls, s.source().to_string()))
        .collect();
    let mut expect = sources.clone();
    expect.sort();
    assert_eq!(sources, expect);
    // And --no-shuffle does not depend on a seed.
    let ds2 = t.path().join("ds2");
    pack(&root, &ds2)
        .args(["--no-shuffle", "--shard-samples", "5"])
        .ok();
    assert_eq!(dir_contents(&ds), dir_contents(&ds2));
}

#[test]
fn no_shuffle_and_seed_conflict() {
    let t = tempdir();
    let root = t.path().join("in");
    make_tree(&root);
    let r = pack(&root, t.path().join("ds"))
        .args(["--no-shuffle", "--seed", "3"])
        .run();
    r.assert_code(2);
}

#[test]
fn keys_are_unique_and_portable() {
    let t = tempdir();
    let root = t.path().join("in");
    make_tree(&root);
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--shard-samples", "4"]).ok();
    let samples = wds_samples(&ds);
    let mut seen = HashSet::new();
    for s in &samples {
        assert!(seen.insert(s.key.clone()), "key {} used twice", s.key);
        assert!(!s.key.is_empty());
        assert!(
            s.key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "key {:?} is not portable",
            s.key
        );
        assert!(!s.key.starts_with("__"));
    }
    assert_eq!(seen.len() as u64, manifest(&ds).inputs.packed);
}

#[test]
fn one_jpeg_that_fails_its_header_fails_alone_whatever_the_jobs() {
    // Its repeated header (a bogus Huffman table) left the worker's decoder failing every JPEG
    // after it: all of them with one worker, a different number each run with two.
    let dir = tempdir();
    let input = dir.path().join("in");
    for i in 0..20 {
        save_rgb(input.join(format!("c/{i:02}.jpg")), &pattern(40 + i, 30, i));
    }
    let photo = std::fs::read(sample_data().join("flower/freshflower_01.jpg")).unwrap();
    write_file(input.join("c/0_bogus.jpg"), photo[..400].repeat(3));
    let mut outputs = Vec::new();
    for jobs in ["1", "2"] {
        let out = dir.path().join(format!("out{jobs}"));
        pack(&input, &out).args(["-j", jobs, "-q"]).ok();
        let errs = errors(&out);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].path.ends_with("0_bogus.jpg"), "{errs:?}");
        assert_eq!(manifest(&out).totals.samples, 20);
        outputs.push(dir_contents(&out));
    }
    assert_eq!(outputs[0], outputs[1]);
}
