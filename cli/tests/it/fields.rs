//! Carried fields and unlabelled datasets through `read --fields`, `verify` and `inspect`, on
//! the sample data packed by `pack` and then given captions and input jsons the way a pack that
//! carries them lays them out (tar members `KEY.txt`, `KEY.json`; packed `fields` entries).

use crate::common::{manifest, pack, tempdir, xxh3, Cmd};
use serde_json::{json, Value};
use shardtool_manifest::{Manifest, Totals};
use shardtool_packed::{field_value, Mode, PackedShard, PackedWriter};
use shardtool_wds::{split_name, TarReader, TarWriter};
use std::path::{Path, PathBuf};

/// The caption of `key`: about two samples in three have one, with a tab and non-ASCII text.
fn caption(key: &str) -> Option<String> {
    let sum: u32 = key.bytes().map(u32::from).sum();
    (!sum.is_multiple_of(3)).then(|| format!("a photo of {key}\twith a tab, ünïcödé"))
}

/// An img2dataset-like json: its width and height are the original download's.
fn input_json(key: &str) -> String {
    format!(
        r#"{{"key": "{key}", "url": "http://example.invalid/{key}.jpg", "width": 4032, "height": 3024}}"#
    )
}

/// Rewrites every shard of the dataset in `dir` with `edit` (file name, bytes → new bytes) and
/// republishes the manifest with their sizes and checksums, after `change` is applied to it.
fn rewrite(dir: &Path, edit: impl Fn(&[u8]) -> Vec<u8>, change: impl FnOnce(&mut Manifest)) {
    let mut m = manifest(dir);
    for s in &mut m.shards {
        let path = dir.join(&s.file);
        let bytes = edit(&std::fs::read(&path).unwrap());
        std::fs::write(&path, &bytes).unwrap();
        s.bytes = bytes.len() as u64;
        s.checksum = xxh3(&bytes);
    }
    m.totals = Totals::of(&m.shards);
    change(&mut m);
    m.validate().unwrap();
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
}

/// A tar shard with each sample's `.json` replaced by its input json and a `.txt` caption added
/// where [`caption`] gives one; `.cls` members left out when `unlabelled`.
fn tar_with_fields(bytes: &[u8], unlabelled: bool) -> Vec<u8> {
    let mut w = TarWriter::new(Vec::new());
    for e in TarReader::new(bytes) {
        let e = e.unwrap();
        let (key, field) = split_name(&e.name);
        match field {
            "cls" if unlabelled => {}
            "json" => {
                w.append(&e.name, input_json(key).as_bytes()).unwrap();
                if let Some(c) = caption(key) {
                    w.append(&format!("{key}.txt"), c.as_bytes()).unwrap();
                }
            }
            _ => w.append(&e.name, e.data).unwrap(),
        }
    }
    w.finish().unwrap()
}

/// A packed shard whose records carry their caption (where there is one); unlabelled: label -1,
/// and no label or class in the sample object.
fn packed_with_fields(bytes: &[u8], unlabelled: bool) -> Vec<u8> {
    let shard = PackedShard::open(bytes).unwrap();
    let mut w = PackedWriter::new(Mode::Auto);
    for (i, r) in shard.records().enumerate() {
        let mut meta = shard.sample_meta(i).clone();
        let obj = meta.as_object_mut().unwrap();
        if let Some(c) = caption(r.key) {
            obj.insert("fields".into(), json!({ "txt": field_value(c.as_bytes()) }));
        }
        let label = if unlabelled {
            obj.remove("label");
            obj.remove("class");
            -1
        } else {
            r.label
        };
        w.add(r.key, label, r.height(), r.width(), r.pixels, meta)
            .unwrap();
    }
    let mut out = Vec::new();
    w.finish(&mut out).unwrap();
    out
}

/// The sample data packed (`--format packed` when `packed`), with captions carried; tar samples
/// carry their input's json too, and the manifest says so (`"json": "input"`).
fn captioned(root: &Path, packed: bool, unlabelled: bool) -> PathBuf {
    let dir = root.join(if packed { "packed" } else { "wds" });
    let mut p = pack(crate::common::sample_data(), &dir).args([
        "--resize",
        "crop:24x24",
        "--shard-samples",
        "16",
        "-q",
    ]);
    if packed {
        p = p.args(["--format", "packed"]);
    }
    p.ok();
    let edit = |b: &[u8]| {
        if packed {
            packed_with_fields(b, unlabelled)
        } else {
            tar_with_fields(b, unlabelled)
        }
    };
    rewrite(&dir, edit, |m| {
        m.optional_fields = vec!["txt".into()];
        if unlabelled {
            m.classes.clear();
            m.fields.retain(|f| f != "cls");
        }
        if !packed {
            m.pack.insert("json".into(), "input".into());
        }
    });
    dir
}

/// `read DIR ARGS…` lines, each split at tabs.
fn read_lines(dir: &Path, args: &[&str]) -> Vec<Vec<String>> {
    let r = Cmd::new(["read"]).arg(dir).args(args).ok();
    r.stdout
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// The JSON value after `name=` in a `read --fields` column.
fn value(column: &str, name: &str) -> Value {
    let text = column
        .strip_prefix(&format!("{name}="))
        .unwrap_or_else(|| panic!("{column:?} is not {name}=…"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{column:?}: {e}"))
}

#[test]
fn read_prints_each_samples_fields_as_json_columns() {
    let root = tempdir();
    for packed in [false, true] {
        let dir = captioned(root.path(), packed, false);
        let lines = read_lines(
            &dir,
            &["--fields", "txt,json", "--seed", "3", "--workers", "2"],
        );
        assert_eq!(lines.len(), 45, "packed: {packed}");
        let mut captions = 0;
        for cols in &lines {
            assert_eq!(cols.len(), 3, "{cols:?}");
            let key = cols[0].as_str();
            let txt = value(&cols[1], "txt");
            assert_eq!(txt.as_str().map(str::to_string), caption(key), "{key}");
            captions += usize::from(txt.is_string());
            let json: Value =
                serde_json::from_str(value(&cols[2], "json").as_str().unwrap()).unwrap();
            if packed {
                // shardtool's own metadata: the sample object, without `fields`.
                assert_eq!(json["key"], key);
                assert!(
                    json.get("fields").is_none() && json.get("width").is_some(),
                    "{json}"
                );
            } else {
                assert_eq!(cols[2], format!("json={}", Value::from(input_json(key))));
            }
        }
        assert!(captions > 10 && captions < 45, "{captions} captions");
        let mut keys: Vec<&str> = lines.iter().map(|c| c[0].as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 45);
        // The same keys in the same order as a plain --keys run.
        let plain = read_lines(&dir, &["--keys", "--seed", "3"]);
        let plain: Vec<&str> = plain.iter().map(|c| c[0].as_str()).collect();
        let with: Vec<&str> = lines.iter().map(|c| c[0].as_str()).collect();
        assert_eq!(plain, with);
    }
}

#[test]
fn read_refuses_a_field_the_dataset_lacks_and_names_those_it_has() {
    let root = tempdir();
    let dir = captioned(root.path(), false, false);
    let r = Cmd::new(["read"])
        .arg(&dir)
        .args(["--fields", "caption"])
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("no field \"caption\""), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("cls, json in every sample and txt in some"),
        "{}",
        r.stderr
    );
    let r = Cmd::new(["read"]).arg(&dir).args(["--fields", "jpg"]).run();
    r.assert_code(2);
    assert!(r.stderr.contains("image data"), "{}", r.stderr);
}

/// `verify --json DIR ARGS…`: the exit code and the problem kinds found.
fn verify(dir: &Path, args: &[&str]) -> (Option<i32>, Vec<String>) {
    let r = Cmd::new(["verify", "--json"]).arg(dir).args(args).run();
    let report: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    let kinds = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap().to_string())
        .collect();
    (r.code, kinds)
}

#[test]
fn verify_accepts_carried_fields_and_unlabelled_data_and_finds_broken_ones() {
    let root = tempdir();
    for (packed, unlabelled) in [(false, false), (false, true), (true, false), (true, true)] {
        let dir = captioned(
            &root.path().join(format!("{unlabelled}")),
            packed,
            unlabelled,
        );
        assert_eq!(verify(&dir, &["--decode"]), (Some(0), vec![]), "{dir:?}");
    }
    let dir = captioned(&root.path().join("broken"), false, false);
    // Without "json": "input", the input json's 4032x3024 is compared with the 24x24 image.
    let mut m = manifest(&dir);
    m.pack.remove("json");
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
    let (code, kinds) = verify(&dir, &["--decode"]);
    assert_eq!(code, Some(1));
    assert_eq!(kinds.len(), 45);
    assert!(
        kinds.iter().all(|k| k == "image_size_mismatch"),
        "{kinds:?}"
    );
    // Captions that are not UTF-8.
    let captions = std::cell::Cell::new(0);
    rewrite(
        &dir,
        |bytes| {
            let mut w = TarWriter::new(Vec::new());
            for e in TarReader::new(bytes) {
                let e = e.unwrap();
                let txt = e.name.ends_with(".txt");
                captions.set(captions.get() + usize::from(txt));
                let data: &[u8] = if txt { b"caf\xe9" } else { e.data };
                w.append(&e.name, data).unwrap();
            }
            w.finish().unwrap()
        },
        |m| {
            m.pack.insert("json".into(), "input".into());
        },
    );
    let (code, kinds) = verify(&dir, &[]);
    assert_eq!(code, Some(1));
    assert!(captions.get() > 10, "{} captions", captions.get());
    assert_eq!(kinds, vec!["bad_field".to_string(); captions.get()]);
    // A field the manifest does not declare.
    rewrite(&dir, |b| b.to_vec(), |m| m.optional_fields.clear());
    let (_, kinds) = verify(&dir, &[]);
    assert!(kinds.iter().any(|k| k == "unexpected_field"), "{kinds:?}");
}

#[test]
fn inspect_shows_declared_and_carried_fields() {
    let root = tempdir();
    let dir = captioned(root.path(), true, true);
    let r = Cmd::new(["inspect", "--json"]).arg(&dir).ok();
    let report: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report["declared_fields"], json!(["key", "label", "pixels"]));
    assert_eq!(report["optional_fields"], json!(["txt"]));
    assert_eq!(report["unlabelled"], 45);
    assert_eq!(report["classes"], json!([]));
    let with_caption = read_lines(&dir, &["--fields", "txt"])
        .iter()
        .filter(|c| c[1] != "txt=null")
        .count();
    assert_eq!(report["fields"]["txt"]["count"], with_caption);
    let text = Cmd::new(["inspect"]).arg(&dir).ok().stdout;
    assert!(
        text.contains("declared  in every sample: key, label, pixels; in some: txt"),
        "{text}"
    );
    assert!(text.contains("(45 samples unlabelled)"), "{text}");
}

#[test]
fn an_image_named_field_beside_the_image_is_read_and_a_records_own_names_are_not_carried() {
    // WebDataset samples with a `png` (a mask, say) beside each `jpg` image, one with a
    // `label` member too.
    let root = tempdir();
    let photos = crate::common::sample_data().join("flower");
    let first = std::fs::read_dir(photos).unwrap().next().unwrap();
    let image = std::fs::read(first.unwrap().path()).unwrap();
    let mut w = TarWriter::new(Vec::new());
    for i in 0..4 {
        w.append(&format!("s{i}.jpg"), &image).unwrap();
        w.append(&format!("s{i}.png"), format!("mask {i}").as_bytes())
            .unwrap();
    }
    w.append("s3.label", b"its own").unwrap();
    let input = root.path().join("in");
    crate::common::write_file(input.join("shard-000000.tar"), w.finish().unwrap());
    let masks = |dir: &Path, n: usize| {
        let lines = read_lines(dir, &["--fields", "png"]);
        assert_eq!(lines.len(), n, "{lines:?}");
        for cols in &lines {
            let want = format!("mask {}", &cols[0][1..]);
            assert_eq!(value(&cols[1], "png"), Value::from(want), "{cols:?}");
        }
    };
    // Tar shards store both members; a `label` member cannot be asked for by that name.
    let tar = root.path().join("tar");
    pack(&input, &tar).args(["--resize", "shorter:16"]).ok();
    masks(&tar, 4);
    // The `png` members are the input's bytes (here no PNG at all): verify --decode checks
    // the images, not them.
    Cmd::new(["verify", "--decode"]).arg(&tar).ok();
    let r = Cmd::new(["read"])
        .arg(&tar)
        .args(["--fields", "label"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr
            .contains("own \"label\" members cannot be delivered"),
        "{}",
        r.stderr
    );
    // A packed record has its own `label`: that sample is an error line, the others carry
    // their png.
    let packed = root.path().join("packed");
    pack(&input, &packed)
        .args(["--format", "packed", "--resize", "crop:16x16"])
        .ok();
    assert_eq!(manifest(&packed).inputs.packed, 3);
    let errs = crate::common::check_accounting(&packed, &[]);
    let e = errs.values().next().unwrap();
    assert!(e.path.ends_with(":s3") && e.kind == "bad_field", "{errs:?}");
    assert!(e.message.contains("carries a `label` field"), "{e:?}");
    masks(&packed, 3);

    // A real PNG of another size beside each image: verify --decode checks the image's size
    // against its metadata, and only that the png decodes.
    let other = crate::common::png(&image::DynamicImage::ImageRgb8(crate::common::pattern(
        20, 10, 1,
    )));
    let mut w = TarWriter::new(Vec::new());
    for i in 0..3 {
        w.append(&format!("s{i}.jpg"), &image).unwrap();
        w.append(&format!("s{i}.png"), &other).unwrap();
    }
    let input = root.path().join("in-png");
    crate::common::write_file(input.join("shard-000000.tar"), w.finish().unwrap());
    let out = root.path().join("tar-png");
    pack(&input, &out).args(["--resize", "shorter:16"]).ok();
    Cmd::new(["verify", "--decode"]).arg(&out).ok();
}

#[test]
fn labels_no_class_has_are_corrupt_shards_to_the_reader_as_to_verify() {
    let root = tempdir();
    for packed in [false, true] {
        let dir = root.path().join(if packed { "packed" } else { "tar" });
        let format = if packed { "packed" } else { "wds" };
        pack(crate::common::sample_data(), &dir)
            .args(["--resize", "crop:24x24", "--shard-samples", "16"])
            .args(["--format", format])
            .ok();
        // The first sample of each shard labelled 7, of 4 classes.
        let relabel = |b: &[u8]| -> Vec<u8> {
            if packed {
                let shard = PackedShard::open(b).unwrap();
                let mut w = PackedWriter::new(Mode::Auto);
                for (i, r) in shard.records().enumerate() {
                    let label = if i == 0 { 7 } else { r.label };
                    let mut meta = shard.sample_meta(i).clone();
                    let obj = meta.as_object_mut().unwrap();
                    obj.insert("label".into(), label.into());
                    obj.remove("class");
                    w.add(r.key, label, r.height(), r.width(), r.pixels, meta)
                        .unwrap();
                }
                let mut out = Vec::new();
                w.finish(&mut out).unwrap();
                out
            } else {
                let mut w = TarWriter::new(Vec::new());
                let mut first = true;
                for e in TarReader::new(b) {
                    let e = e.unwrap();
                    match split_name(&e.name).1 {
                        "cls" if first => {
                            w.append(&e.name, b"7").unwrap();
                            first = false;
                        }
                        _ => w.append(&e.name, e.data).unwrap(),
                    }
                }
                w.finish().unwrap()
            }
        };
        rewrite(&dir, relabel, |_| {});
        let r = Cmd::new(["read"]).arg(&dir).run();
        assert_ne!(r.code, Some(0), "{r:?}");
        assert!(
            r.stderr
                .contains("has label 7, not one of the manifest's 4 classes"),
            "{}",
            r.stderr
        );
        let (code, kinds) = verify(&dir, &[]);
        assert_eq!(code, Some(1));
        assert!(kinds.iter().any(|k| k == "bad_label"), "{kinds:?}");
    }
    // A tar sample without the .cls the manifest says every sample has: no silent -1.
    let dir = root.path().join("tar");
    let drop_cls = |b: &[u8]| -> Vec<u8> {
        let mut w = TarWriter::new(Vec::new());
        for (i, e) in TarReader::new(b).enumerate() {
            let e = e.unwrap();
            if !(i < 4 && split_name(&e.name).1 == "cls") {
                w.append(&e.name, e.data).unwrap();
            }
        }
        w.finish().unwrap()
    };
    rewrite(&dir, drop_cls, |_| {});
    let r = Cmd::new(["read"]).arg(&dir).run();
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("its .cls is missing"), "{}", r.stderr);
}

#[test]
fn repacking_shardtools_own_shards_states_the_new_sizes() {
    // Re-sizing a dataset shardtool packed: its `.json` is metadata of the old image, made anew
    // (the original's source and size kept as input_*), not carried stale.
    let root = tempdir();
    let first = root.path().join("first");
    pack(crate::common::sample_data(), &first)
        .args(["--resize", "shorter:64", "-q"])
        .ok();
    let again = root.path().join("again");
    pack(&first, &again)
        .args(["--resize", "shorter:32", "-q"])
        .ok();
    let before: std::collections::HashMap<String, Value> = tar_jsons(&first);
    let after = tar_jsons(&again);
    assert_eq!(after.len(), 45);
    for (key, meta) in &after {
        let old = &before[key];
        assert_eq!(
            meta["height"]
                .as_u64()
                .unwrap()
                .min(meta["width"].as_u64().unwrap()),
            32
        );
        assert_eq!(
            (&meta["orig_width"], &meta["orig_height"]),
            (&old["width"], &old["height"])
        );
        assert_eq!(meta["input_source"], old["source"], "{meta}");
        assert_eq!(meta["input_orig_width"], old["orig_width"], "{meta}");
        assert!(meta["source"].as_str().unwrap().contains(".tar:"), "{meta}");
    }
    Cmd::new(["verify", "--decode"]).arg(&again).ok();
    // Once more: the input_* members are the immediate input's.
    let third = root.path().join("third");
    pack(&again, &third)
        .args(["--resize", "shorter:24", "-q"])
        .ok();
    for (key, meta) in tar_jsons(&third) {
        assert_eq!(meta["input_source"], after[&key]["source"], "{meta}");
        assert_eq!(
            meta["input_orig_width"], after[&key]["orig_width"],
            "{meta}"
        );
    }
}

/// Every `.json` of a tar dataset, by key.
fn tar_jsons(dir: &Path) -> std::collections::HashMap<String, Value> {
    let mut out = std::collections::HashMap::new();
    for s in manifest(dir).shards {
        let bytes = std::fs::read(dir.join(&s.file)).unwrap();
        for e in TarReader::new(&bytes) {
            let e = e.unwrap();
            let (key, field) = split_name(&e.name);
            if field == "json" {
                out.insert(key.to_string(), serde_json::from_slice(e.data).unwrap());
            }
        }
    }
    out
}

#[test]
fn samples_with_more_fields_than_verify_checks_are_refused_and_missing_fields_are_bounded() {
    let root = tempdir();
    let image = crate::common::jpeg(&crate::common::pattern(16, 12, 1));
    let most = shardtool_wds::MAX_SAMPLE_MEMBERS - 3;
    // One sample with a field too many, two with 30 each.
    let mut w = TarWriter::new(Vec::new());
    for (key, n) in [("wide", most + 1), ("a", 30), ("b", 30)] {
        w.append(&format!("{key}.jpg"), &image).unwrap();
        for i in 0..n {
            w.append(&format!("{key}.f{i:04}"), b"x").unwrap();
        }
    }
    let input = root.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("s-0.tar"), w.finish().unwrap()).unwrap();
    let dir = root.path().join("ds");
    pack(&input, &dir).args(["-q"]).ok();
    let errors = std::fs::read_to_string(dir.join("errors.jsonl")).unwrap();
    assert!(
        errors.contains(":wide") && errors.contains(&format!("over the {most} a sample may")),
        "{errors}"
    );
    assert_eq!(manifest(&dir).inputs.packed, 2);
    let (code, _) = verify(&dir, &[]);
    assert_eq!(code, Some(0));
    // A sample stripped of its 30 fields: eight named, the rest counted in one more line.
    let strip = |b: &[u8]| -> Vec<u8> {
        let mut w = TarWriter::new(Vec::new());
        let mut keys = Vec::new();
        for e in TarReader::new(b) {
            let e = e.unwrap();
            let (key, field) = split_name(&e.name);
            if keys.is_empty() {
                keys.push(key.to_string());
            }
            if !(key == keys[0] && field.starts_with('f')) {
                w.append(&e.name, e.data).unwrap();
            }
        }
        w.finish().unwrap()
    };
    rewrite(&dir, strip, |_| {});
    let (code, kinds) = verify(&dir, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(kinds, vec!["missing_field".to_string(); 9], "{kinds:?}");
    let r = Cmd::new(["verify"]).arg(&dir).run();
    assert!(
        // 30 carried fields, the image and the json declared; 8 of them named.
        r.stdout.contains("lacks 22 more of the fields") && r.stdout.contains(", and 24 more)"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.len() < 4000, "{}", r.stdout.len());
}
