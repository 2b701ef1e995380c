//! `shardtool inspect` and `shardtool preview` on real packed datasets and single shards of both
//! formats, plain and zstd-compressed.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use tempfile::TempDir;

// ---- helpers (private to this file) -------------------------------------------------------

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_shardtool")
}

fn sample_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data/imagefolder")
}

/// Datasets packed so far, by pack arguments.
type Cache = std::sync::Mutex<Vec<(&'static [&'static str], TempDir)>>;

/// Packs the sample data once per option set; returns the dataset directory.
fn packed(args: &'static [&'static str]) -> PathBuf {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap();
    if let Some((_, d)) = cache.iter().find(|(a, _)| *a == args) {
        return d.path().join("ds");
    }
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("ds");
    let status = Command::new(bin())
        .arg("pack")
        .arg(sample_data())
        .arg(&out)
        .args(["--resize", "shorter:64", "--shard-samples", "10", "--quiet"])
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "pack {args:?}");
    cache.push((args, dir));
    out
}

const WDS: &[&str] = &[];
const PACKED: &[&str] = &["--format", "packed"];
const WDS_ZSTD: &[&str] = &["--compress", "zstd"];
const PACKED_ZSTD: &[&str] = &["--format", "packed", "--compress", "zstd"];

fn run(args: &[&str], target: &Path) -> Output {
    Command::new(bin())
        .arg(args[0])
        .arg(target)
        .args(&args[1..])
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A copy of the dataset `src` in a new temporary folder, to damage: the folder and the copy.
fn copy_of(src: PathBuf) -> (TempDir, PathBuf) {
    let dir = TempDir::new().unwrap();
    let ds = dir.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), ds.join(e.file_name())).unwrap();
    }
    (dir, ds)
}

fn manifest(ds: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).unwrap()).unwrap()
}

// ---- inspect -------------------------------------------------------------------------------

#[test]
fn inspect_a_dataset_of_each_format() {
    for args in [WDS, PACKED, WDS_ZSTD, PACKED_ZSTD] {
        let ds = packed(args);
        let out = run(&["inspect", "--json"], &ds);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let r = json_of(&out);
        assert_eq!(r["kind"], "dataset");
        assert_eq!(r["samples"], 45);
        assert_eq!(r["samples_in_manifest"], 45);
        assert_eq!(r["shards"], 5);
        let classes = r["classes"].as_array().unwrap();
        let names: Vec<&str> = classes
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["flower", "insect", "landscape", "leaf"], "{args:?}");
        let total: u64 = classes.iter().map(|c| c["count"].as_u64().unwrap()).sum();
        assert_eq!(total, 45);
        let sizes = &r["image_sizes"];
        assert_eq!(sizes["images"], 45);
        // shorter:64 makes the shorter side 64 for every image larger than that.
        let min_side = sizes["width"]["min"]
            .as_u64()
            .unwrap()
            .min(sizes["height"]["min"].as_u64().unwrap());
        assert!(min_side <= 64, "{sizes}");
        assert!(
            sizes["width"]["median"].as_u64().unwrap() >= sizes["width"]["min"].as_u64().unwrap()
        );
        assert!(!sizes["most_common"].as_array().unwrap().is_empty());
        assert_eq!(r["pack"]["resize"], "shorter:64");
        assert!(r["bytes_per_sample"].as_f64().unwrap() > 0.0);
        let compressed = args.contains(&"zstd");
        let fmt = match (args.contains(&"packed"), compressed) {
            (false, false) => "wds",
            (true, false) => "packed",
            (false, true) => "wds+zstd",
            (true, true) => "packed+zstd",
        };
        assert_eq!(r["formats"][fmt], 5, "{r:#}");
    }
}

/// A dataset packed again from shardtool's own shards: inspect reports the sizes of the images
/// stored (their metadata is made anew; a carried copy stated the first pack's sizes).
#[test]
fn inspect_reports_stored_sizes_of_a_dataset_packed_again() {
    let dir = TempDir::new().unwrap();
    let again = dir.path().join("again");
    let status = Command::new(bin())
        .arg("pack")
        .arg(packed(WDS))
        .arg(&again)
        .args(["--resize", "shorter:32", "--quiet"])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(manifest(&again)["pack"]["json"], serde_json::Value::Null);
    let r = json_of(&run(&["inspect", "--json"], &again));
    let sizes = &r["image_sizes"];
    let min_side = sizes["width"]["min"]
        .as_u64()
        .unwrap()
        .min(sizes["height"]["min"].as_u64().unwrap());
    assert!(min_side <= 32, "{sizes}");
    let max_side = sizes["width"]["max"]
        .as_u64()
        .unwrap()
        .max(sizes["height"]["max"].as_u64().unwrap());
    assert!(max_side < 64 * 3, "{sizes}");
    for c in sizes["most_common"].as_array().unwrap() {
        let (w, h) = (c["width"].as_u64().unwrap(), c["height"].as_u64().unwrap());
        assert!(w.min(h) <= 32, "{c}");
    }
}

#[test]
fn inspect_text_output_is_readable() {
    let ds = packed(WDS);
    let out = run(&["inspect"], &ds);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "samples   45",
        "classes   4",
        "flower",
        "median",
        "most common",
        "pack options",
        "shorter:64",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    // Class names (and the tool) from a manifest reach the terminal as text, never as escape
    // sequences or extra lines.
    let (_copy, hostile) = copy_of(ds.clone());
    let mut m = manifest(&hostile);
    m["classes"][0] = "\u{1b}]0;pwned\u{7}red".into();
    m["classes"][1] = "new\nline: OK".into();
    m["classes"][2] = "fdp.\u{202e}gnp".into();
    m["tool"] = "t\u{1b}[2J".into();
    std::fs::write(hostile.join("manifest.json"), m.to_string()).unwrap();
    let out = run(&["inspect"], &hostile);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{text}");
    assert!(text.contains("fdp.\\u{202e}gnp"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("line: OK")), "{text}");
    assert!(
        text.contains("\\u{1b}]0;pwned\\u{7}red") && text.contains("new\\nline"),
        "{text}"
    );
}

#[test]
fn inspect_single_shards_of_every_kind() {
    for (args, ext) in [
        (WDS, "tar"),
        (PACKED, "safetensors"),
        (WDS_ZSTD, "tar.zst"),
        (PACKED_ZSTD, "safetensors.zst"),
    ] {
        let ds = packed(args);
        let m = manifest(&ds);
        let path = ds.join(format!("shard-000004.{ext}"));
        let out = run(&["inspect", "--json"], &path);
        assert_eq!(out.status.code(), Some(0), "{ext}");
        let r = json_of(&out);
        assert_eq!(r["kind"], "shard");
        assert_eq!(r["shards"], 1);
        assert_eq!(r["samples"], m["shards"][4]["samples"], "{ext}");
        assert!(r["pack"].is_null());
        // Class names come from the samples' own metadata.
        for c in r["classes"].as_array().unwrap() {
            assert!(c["name"].is_string(), "{c}");
        }
        // The same shard under a name without a known ending is recognised by its content.
        let dir = TempDir::new().unwrap();
        let anon = dir.path().join("mystery.bin");
        std::fs::copy(&path, &anon).unwrap();
        let out = run(&["inspect", "--json"], &anon);
        assert_eq!(out.status.code(), Some(0), "{ext} sniffed");
        assert_eq!(json_of(&out)["samples"], m["shards"][4]["samples"]);
    }
}

#[test]
fn inspect_reports_what_it_could_not_read() {
    let (dir, ds) = copy_of(packed(WDS));
    std::fs::remove_file(ds.join("shard-000001.tar")).unwrap();
    let out = run(&["inspect", "--json"], &ds);
    assert_eq!(out.status.code(), Some(1));
    let r = json_of(&out);
    assert_eq!(r["samples"], 35);
    assert_eq!(r["problems"][0]["shard"], "shard-000001.tar");

    let out = run(&["inspect", "--json"], &dir.path().join("missing"));
    assert_eq!(out.status.code(), Some(2));
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"definitely not a shard").unwrap();
    assert_eq!(run(&["inspect"], &junk).status.code(), Some(2));
}

// ---- preview -------------------------------------------------------------------------------

fn preview(target: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .arg("preview")
        .arg(target)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn preview_draws_a_seeded_sheet() {
    let ds = packed(WDS);
    let dir = TempDir::new().unwrap();
    let a = dir.path().join("a.png");
    let out = preview(&ds, &a, &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = json_of(&out);
    let items = doc["items"].as_array().unwrap();
    assert_eq!(items.len(), 16);
    let classes = manifest(&ds)["classes"].clone();
    for it in items {
        let label = it["label"].as_u64().unwrap() as usize;
        assert_eq!(it["class"], classes[label], "{it}");
        assert!(it["error"].is_null());
        assert!(it["width"].as_u64().unwrap() > 0);
    }
    let img = image::open(&a).unwrap();
    assert_eq!(img.width(), doc["width"].as_u64().unwrap() as u32);
    assert!(img.width() >= 4 * 128 && img.height() >= 4 * 128);
    // Only the sheet is left in the output directory (written through a temporary name).
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1);

    // Same seed, same bytes; another seed, other samples.
    let b = dir.path().join("b.png");
    assert!(preview(&ds, &b, &[]).status.success());
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let c = dir.path().join("c.png");
    let out = preview(&ds, &c, &["--seed", "9", "--json"]);
    let keys = |d: &Value| -> Vec<String> {
        d["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["key"].as_str().unwrap().to_string())
            .collect()
    };
    assert_ne!(keys(&doc), keys(&json_of(&out)));
}

#[test]
fn preview_of_every_flavour_and_of_single_shards() {
    let dir = TempDir::new().unwrap();
    for (args, ext) in [
        (PACKED, "safetensors"),
        (WDS_ZSTD, "tar.zst"),
        (PACKED_ZSTD, "safetensors.zst"),
    ] {
        let ds = packed(args);
        let png = dir.path().join(format!("{ext}.png"));
        let out = preview(&ds, &png, &["--count", "100", "--tile", "64", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{ext}");
        // More than the dataset holds: every sample, once.
        let doc = json_of(&out);
        let items = doc["items"].as_array().unwrap();
        assert_eq!(items.len(), 45, "{ext}");
        let mut keys: Vec<&str> = items.iter().map(|i| i["key"].as_str().unwrap()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 45);
        assert!(image::open(&png).is_ok());

        let one = ds.join(format!("shard-000002.{ext}"));
        let png = dir.path().join(format!("one-{ext}.png"));
        let out = preview(&one, &png, &["--count", "4", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{ext} shard");
        let doc = json_of(&out);
        assert_eq!(doc["items"].as_array().unwrap().len(), 4);
        assert_eq!(doc["samples_available"], 10);
        assert!(doc["items"][0]["class"].is_string());
    }
}

#[test]
fn preview_says_which_chosen_samples_a_damaged_shard_lost() {
    let (dir, ds) = copy_of(packed(WDS));
    let cut = ds.join("shard-000001.tar");
    let len = std::fs::metadata(&cut).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let out = preview(
        &ds,
        &dir.path().join("p.png"),
        &["--count", "100", "--json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let doc = json_of(&out);
    let shown = doc["items"].as_array().unwrap().len();
    assert!((35..45).contains(&shown), "{shown}");
    let skipped = doc["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{doc}");
    let says = format!(
        "shard-000001.tar: {} of the 10 samples chosen from it could not be read",
        45 - shown
    );
    assert!(skipped[0].as_str().unwrap().starts_with(&says), "{doc}");
    // The shard alone: its samples are what could be read, and the sheet says it stopped early.
    let out = preview(&cut, &dir.path().join("one.png"), &["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = json_of(&out);
    let skipped = doc["skipped"].as_array().unwrap();
    assert!(
        skipped[0]
            .as_str()
            .unwrap()
            .contains("read up to a damaged part"),
        "{doc}"
    );
}

#[test]
fn preview_usage_and_open_errors_exit_2() {
    let dir = TempDir::new().unwrap();
    let png = dir.path().join("x.png");
    assert_eq!(
        preview(&dir.path().join("nope"), &png, &[]).status.code(),
        Some(2)
    );
    let ds = packed(WDS);
    assert_eq!(preview(&ds, &png, &["--count", "0"]).status.code(), Some(2));
    assert!(!png.exists());
    // The sheet is a PNG: another image extension is refused, nothing written.
    let jpg = dir.path().join("x.jpg");
    let out = preview(&ds, &jpg, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name it .png"));
    assert!(!jpg.exists());
}

#[test]
fn help_texts_teach_with_examples() {
    for cmd in ["inspect", "preview"] {
        let out = Command::new(bin()).args([cmd, "--help"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Examples:"), "{cmd}: {text}");
        assert!(
            text.contains(&format!("shardtool {cmd} out/")),
            "{cmd}: {text}"
        );
    }
}

#[test]
fn inspect_text_shows_the_first_thousand_classes_and_says_how_many_more() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    let jpeg = crate::common::jpeg(&crate::common::pattern(8, 8, 1));
    for c in 0..1003 {
        crate::common::write_file(input.join(format!("c{c:04}/a.jpg")), &jpeg);
    }
    let out = dir.path().join("ds");
    crate::common::pack(&input, &out).arg("-q").ok();
    let r = Command::new(bin())
        .arg("inspect")
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success());
    let text = String::from_utf8(r.stdout).unwrap();
    assert!(text.contains("  classes   1003"), "{text}");
    assert!(
        text.contains(" c0999 ") && !text.contains(" c1000 "),
        "{text}"
    );
    assert!(
        text.contains("… 3 more classes (--json lists every one)"),
        "{text}"
    );
    let r = Command::new(bin())
        .args(["inspect", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["classes"].as_array().unwrap().len(), 1003);
}

/// A class whose images all failed (or that has none) is still a class of the dataset: inspect
/// counts it and lists it at 0, as labels index the manifest's classes; a long name is cut with
/// an ellipsis.
#[test]
fn inspect_lists_a_class_no_sample_has_at_zero() {
    let dir = crate::common::tempdir();
    let input = dir.path().join("in");
    let jpeg = crate::common::jpeg(&crate::common::pattern(8, 8, 1));
    let long = "l".repeat(40);
    for c in ["a", "c", long.as_str()] {
        crate::common::write_file(input.join(format!("{c}/a.jpg")), &jpeg);
    }
    crate::common::write_file(input.join("b/broken.jpg"), b"\xff\xd8\xff not a jpeg");
    let out = dir.path().join("ds");
    crate::common::pack(&input, &out).arg("-q").ok();
    let r = run(&["inspect"], &out);
    assert!(r.status.success());
    let text = String::from_utf8(r.stdout).unwrap();
    assert!(text.contains("  classes   4"), "{text}");
    let b = text
        .lines()
        .find(|l| l.trim_start().starts_with("1 b "))
        .unwrap_or_default();
    assert!(b.contains(" 0 ") && b.contains("0.0%"), "{text}");
    let cut = format!("{}…", "l".repeat(31));
    assert!(text.contains(&cut), "{text}");
    let json = json_of(&run(&["inspect", "--json"], &out));
    let counts: Vec<u64> = (json["classes"].as_array().unwrap().iter())
        .map(|c| c["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 0, 1, 1]);
}
