//! `--list`: CSV and JSONL inputs with integer or class-name labels, optional keys, paths relative
//! to the list's folder, bad rows reported in `errors.jsonl`, extra columns carried or dropped.

use crate::common::*;
use crate::pack_inputs::{shard_images, tar_fields, verify_ok};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Writes `imgs/0.png` … `imgs/{n-1}.png` under `dir`.
fn make_images(dir: &Path, n: u32) {
    for i in 0..n {
        save_rgb(dir.join(format!("imgs/{i}.png")), &pattern(12 + i, 10, i));
    }
}

fn by_source_map(ds: &Path) -> BTreeMap<String, WdsSample> {
    by_source(&wds_samples(ds))
}

#[test]
fn csv_with_integer_labels_and_keys() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 4);
    write_file(
        data.join("train.csv"),
        "path,label,key\nimgs/0.png,0,first\nimgs/1.png,2,second-one\nimgs/2.png,1,third_3\nimgs/3.png,2,\n",
    );
    let ds = t.path().join("ds");
    // Run from another folder: relative paths resolve against the list's folder, not the cwd.
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    pack_list(data.join("train.csv"), &ds)
        .args(["--encode", "png"])
        .current_dir(&elsewhere)
        .ok();
    let m = manifest(&ds);
    assert!(m.classes.len() >= 3, "labels must index the class list");
    let s = by_source_map(&ds);
    assert_eq!(s.len(), 4);
    let expect = [
        ("imgs/0.png", 0, Some("first")),
        ("imgs/1.png", 2, Some("second-one")),
        ("imgs/2.png", 1, Some("third_3")),
        ("imgs/3.png", 2, None),
    ];
    for (src, label, key) in expect {
        let sample = &s[src];
        assert_eq!(sample.cls, label, "{src}");
        if let Some(k) = key {
            assert_eq!(sample.key, k, "{src}: the listed key is used");
        }
        let i: u32 = src[5..6].parse().unwrap();
        assert_eq!(sample.decode(), pattern(12 + i, 10, i), "{src}: wrong file");
    }
    check_accounting(&ds, &s.keys().cloned().collect::<Vec<_>>());
    // Named otherwise, a list is read by its content: a CSV header, or JSONL objects.
    std::fs::copy(data.join("train.csv"), data.join("train.txt")).unwrap();
    let txt = t.path().join("txt");
    pack_list(data.join("train.txt"), &txt).ok();
    let labels = |s: &BTreeMap<String, WdsSample>| -> Vec<(String, String, i64)> {
        (s.iter().map(|(src, x)| (src.clone(), x.key.clone(), x.cls))).collect()
    };
    assert_eq!(labels(&by_source_map(&txt)), labels(&s));
    // Numbered by position, a row keeps its key in its json.
    let index = t.path().join("index");
    pack_list(data.join("train.csv"), &index)
        .args(["--keys", "index"])
        .ok();
    let numbered = by_source_map(&index);
    assert_eq!(numbered["imgs/1.png"].json["input_key"], "second-one");
    assert_ne!(numbered["imgs/1.png"].key, "second-one");
    assert!(numbered["imgs/3.png"].json.get("input_key").is_none());
    // A column named `orientation` is renamed as our metadata is, in every sample alike (the
    // json holds shardtool's own only where an image was turned).
    write_file(
        data.join("o.csv"),
        "path,orientation\nimgs/2.png,portrait\n",
    );
    let o = t.path().join("o");
    pack_list(data.join("o.csv"), &o).ok();
    assert_eq!(
        by_source_map(&o)["imgs/2.png"].json["input_orientation"],
        "portrait"
    );
    write_file(
        data.join("rows.txt"),
        "{\"path\": \"imgs/1.png\", \"label\": 4}\n",
    );
    let rows = t.path().join("rows");
    pack_list(data.join("rows.txt"), &rows).ok();
    assert_eq!(by_source_map(&rows)["imgs/1.png"].cls, 4);
}

#[test]
fn integer_labels_keep_their_values_next_to_an_odd_row() {
    // Integer labels 0..=11, and one row labelled -1 (a common "unlabelled" marker). Whatever
    // happens to that row, the other rows' labels must stay the integers written in the list:
    // silently renumbering them (for example by sorting "0", "1", "10", "11", "2" … as names)
    // corrupts every label of the dataset.
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 13);
    let mut csv = String::from("path,label\n");
    for i in 0..12 {
        csv.push_str(&format!("imgs/{i}.png,{i}\n"));
    }
    csv.push_str("imgs/12.png,-1\n");
    write_file(data.join("l.csv"), csv);
    let ds = t.path().join("ds");
    pack_list(data.join("l.csv"), &ds).ok();
    let m = manifest(&ds);
    let s = by_source_map(&ds);
    let mut wrong = Vec::new();
    for i in 0..12i64 {
        let src = format!("imgs/{i}.png");
        if s[&src].cls != i {
            wrong.push(format!(
                "{src}: label {i} became {} (class {:?})",
                s[&src].cls,
                m.classes.get(s[&src].cls as usize)
            ));
        }
    }
    assert!(wrong.is_empty(), "labels were renumbered: {wrong:#?}");
    // -1 is no label (the Hugging Face `ClassLabel`'s), as an empty cell is.
    assert_eq!((s["imgs/12.png"].cls, m.inputs.failed), (-1, 0));
}

#[test]
fn a_huge_integer_label_allocates_no_huge_class_list() {
    // One row of an untrusted list labelled 4294967295 must not make the packer build a class list
    // of four billion names: the row may be refused, or packed with that label, but the run must
    // end normally with a manifest of normal size. Run under a 2 GB address-space limit so that a
    // regression cannot take the machine's memory.
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 2);
    write_file(
        data.join("l.csv"),
        "path,label\nimgs/0.png,0\nimgs/1.png,4294967295\n",
    );
    let ds = t.path().join("ds");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec \"$0\" pack --list \"$1\" \"$2\" --quiet")
        .arg(BIN)
        .arg(data.join("l.csv"))
        .arg(&ds)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0) | Some(2)),
        "the run crashed ({:?}): {stderr}",
        out.status
    );
    if out.status.code() == Some(0) {
        let size = std::fs::metadata(ds.join("manifest.json")).unwrap().len();
        assert!(size < 1 << 20, "manifest.json is {size} bytes for 2 inputs");
        let m = manifest(&ds);
        assert_eq!(m.inputs.found, 2);
        assert_eq!(wds_samples(&ds).len() as u64, 2 - m.inputs.failed);
    }
}

#[test]
fn csv_with_class_name_labels() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 5);
    write_file(
        data.join("list.CSV"),
        "label,path\ndog,imgs/0.png\ncat,imgs/1.png\ndog,imgs/2.png\n\"eel, electric\",imgs/3.png\ncat,imgs/4.png\n",
    );
    let ds = t.path().join("ds");
    pack_list(data.join("list.CSV"), &ds).ok();
    let m = manifest(&ds);
    let mut classes = m.classes.clone();
    classes.sort();
    assert_eq!(classes, ["cat", "dog", "eel, electric"]);
    let s = by_source_map(&ds);
    for (src, name) in [
        ("imgs/0.png", "dog"),
        ("imgs/1.png", "cat"),
        ("imgs/2.png", "dog"),
        ("imgs/3.png", "eel, electric"),
        ("imgs/4.png", "cat"),
    ] {
        assert_eq!(m.classes[s[src].cls as usize], name, "{src}");
        assert_eq!(s[src].json["class"], name, "{src}");
    }
}

#[test]
fn jsonl_with_integer_and_name_labels() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 4);
    let abs = data.join("imgs/3.png");
    let lines = [
        r#"{"path": "imgs/0.png", "label": 1, "key": "k0"}"#.to_string(),
        String::new(),
        r#"{"path": "imgs/1.png", "label": 0}"#.to_string(),
        format!(
            r#"{{"path": {}, "label": 1, "extra": [1, 2]}}"#,
            serde_json::to_string(abs.to_str().unwrap()).unwrap()
        ),
    ];
    write_file(data.join("ints.jsonl"), lines.join("\n") + "\n");
    let ds = t.path().join("ints");
    pack_list(data.join("ints.jsonl"), &ds).ok();
    let s = by_source_map(&ds);
    assert_eq!(s.len(), 3, "{:?}", errors(&ds));
    assert_eq!(s["imgs/0.png"].cls, 1);
    assert_eq!(s["imgs/0.png"].key, "k0");
    assert_eq!(s["imgs/1.png"].cls, 0);
    // An absolute path is used as is.
    assert_eq!(s[abs.to_str().unwrap()].cls, 1);

    write_file(
        data.join("names.jsonl"),
        "{\"path\": \"imgs/0.png\", \"label\": \"zebra\"}\n{\"path\": \"imgs/2.png\", \"label\": \"ant\"}\n",
    );
    let ds = t.path().join("names");
    pack_list(data.join("names.jsonl"), &ds).ok();
    let m = manifest(&ds);
    let s = by_source_map(&ds);
    assert_eq!(m.classes[s["imgs/0.png"].cls as usize], "zebra");
    assert_eq!(m.classes[s["imgs/2.png"].cls as usize], "ant");
}

#[test]
fn a_list_named_relative_to_the_working_directory() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 2);
    write_file(
        data.join("l.csv"),
        "path,label\nimgs/0.png,0\nimgs/1.png,1\n",
    );
    // `--list l.csv` from inside its folder, and `--list data/l.csv` from its parent.
    pack_list("l.csv", t.path().join("a"))
        .current_dir(&data)
        .ok();
    pack_list("data/l.csv", t.path().join("b"))
        .current_dir(t.path())
        .ok();
    for ds in ["a", "b"] {
        assert_eq!(manifest(&t.path().join(ds)).inputs.packed, 2, "{ds}");
    }
}

#[test]
fn bad_rows_are_reported_once_each() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 6);
    write_file(data.join("imgs/broken.png"), b"hello, not a png");
    write_file(
        data.join("list.csv"),
        [
            "path,label,key",
            "imgs/0.png,0,a",      // good
            "imgs/1.png,,b",       // no label: unlabelled (-1)
            ",1,c",                // no path
            "imgs/missing.png,1,", // no such file
            "imgs/broken.png,0,",  // not an image
            "imgs/2.png,1,bad.key",
            "imgs/3.png,1,a", // duplicate key
            "imgs/4.png,1,__reserved",
            "imgs/5.png,1,ok-5",
        ]
        .join("\n")
            + "\n",
    );
    let ds = t.path().join("ds");
    pack_list(data.join("list.csv"), &ds)
        .args(["--no-shuffle"])
        .ok();
    let samples = wds_samples(&ds);
    let srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
    let errs = check_accounting(&ds, &srcs);
    let m = manifest(&ds);
    assert_eq!(m.inputs.found, 9);
    let mut packed = srcs.clone();
    packed.sort();
    assert_eq!(
        packed,
        ["imgs/0.png", "imgs/1.png", "imgs/5.png"],
        "{errs:?}"
    );
    assert_eq!(by_source(&samples)["imgs/1.png"].cls, -1);
    assert_eq!(errs.len(), 6, "{errs:?}");
    let kinds: BTreeMap<&str, usize> = errs.values().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.kind.as_str()).or_default() += 1;
        m
    });
    assert_eq!(kinds["bad_list_row"], 1, "{errs:?}");
    assert_eq!(kinds["bad_key"], 2, "{errs:?}");
    assert_eq!(kinds["duplicate_key"], 1, "{errs:?}");
    assert_eq!(errs["imgs/missing.png"].kind, "unreadable");
    assert_eq!(errs["imgs/broken.png"].kind, "unsupported_format");
    // Bad rows name the list and the line.
    for e in errs.values().filter(|e| e.kind == "bad_list_row") {
        assert!(e.path.contains("list.csv"), "{e:?}");
        assert!(e.path.ends_with(":4"), "{e:?}");
    }
    // Of two rows with the same key, the first one listed keeps it.
    assert_eq!(errs["imgs/3.png"].kind, "duplicate_key");
}

#[test]
fn a_shared_key_stays_with_the_first_row_and_a_keyless_row_never_takes_a_stated_key() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 4);
    write_file(
        data.join("list.csv"),
        "path,label,key\n\
         imgs/0.png,0,000000000\n\
         imgs/1.png,0,\n\
         imgs/2.png,1,000000001\n\
         imgs/3.png,1,000000000\n",
    );
    let mut spare_used = false;
    for seed in 0..8 {
        let ds = t.path().join(format!("ds{seed}"));
        pack_list(data.join("list.csv"), &ds)
            .args(["--seed", &seed.to_string()])
            .ok();
        let samples = wds_samples(&ds);
        let srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
        let errs = check_accounting(&ds, &srcs);
        // Whatever the seed: the first row listed keeps the shared key, the keyless row is
        // packed under a key no row states.
        assert_eq!(errs.len(), 1, "seed {seed}: {errs:?}");
        assert_eq!(errs["imgs/3.png"].kind, "duplicate_key");
        let key_of = |src: &str| &samples.iter().find(|s| s.source() == src).unwrap().key;
        assert_eq!(key_of("imgs/0.png"), "000000000");
        assert_eq!(key_of("imgs/2.png"), "000000001");
        let keyless = key_of("imgs/1.png");
        assert!(!["000000000", "000000001"].contains(&keyless.as_str()));
        spare_used |= keyless.as_str() >= "000000004";
    }
    assert!(
        spare_used,
        "no seed put the keyless row where a stated key is"
    );
}

#[test]
fn bad_jsonl_lines_are_reported() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 2);
    write_file(
        data.join("l.jsonl"),
        "{\"path\": \"imgs/0.png\", \"label\": 0}\nnot json at all\n{\"path\": \"imgs/1.png\"}\n{\"label\": 3}\n[1, 2]\n",
    );
    let ds = t.path().join("ds");
    pack_list(data.join("l.jsonl"), &ds).ok();
    let samples = wds_samples(&ds);
    let mut srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
    srcs.sort();
    // A row without a label is unlabelled (-1), as a null label in Parquet.
    assert_eq!(srcs, ["imgs/0.png", "imgs/1.png"]);
    assert_eq!(by_source(&samples)["imgs/1.png"].cls, -1);
    let errs = check_accounting(&ds, &srcs);
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(errs.values().all(|e| e.kind == "bad_list_row"), "{errs:?}");
    let mut lines: Vec<&str> = errs.keys().map(|p| p.rsplit(':').next().unwrap()).collect();
    lines.sort_unstable();
    assert_eq!(lines, ["2", "4", "5"]);
}

#[test]
fn unusable_lists_are_usage_errors() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 1);
    write_file(data.join("noheader.csv"), "imgs/0.png,0\n");
    write_file(data.join("wrongcols.csv"), "file,class\nimgs/0.png,0\n");
    // Another input format beside --list: refused, not ignored.
    let r = pack_list(data.join("wrongcols.csv"), t.path().join("fmt"))
        .args(["--input-format", "wds"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("--list reads a list (CSV or JSONL"),
        "{}",
        r.stderr
    );
    // A list given as shards: refused by its name, not read as a truncated tar.
    let r = pack(data.join("wrongcols.csv"), t.path().join("as-wds"))
        .args(["--input-format", "wds"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr
            .contains("is named as list input, not wds: pass --input-format list"),
        "{}",
        r.stderr
    );
    for l in ["noheader.csv", "wrongcols.csv", "absent.csv"] {
        let ds = t.path().join(format!("ds-{l}"));
        let r = pack_list(data.join(l), &ds).run();
        r.assert_code(2);
        assert!(!ds.join("manifest.json").exists(), "{l}");
    }
    // A header without the path column names its columns and the option that chooses one.
    let r = pack_list(data.join("wrongcols.csv"), t.path().join("ds-named")).run();
    let says = "its header names file, class: --image-column names the path column";
    assert!(r.stderr.contains(says), "{}", r.stderr);
    let r = pack_list(data.join("wrongcols.csv"), t.path().join("ds-named"))
        .args(["--image-column", "file", "--label-column", "class"])
        .ok();
    assert!(r.stdout.contains("packed 1 of 1"), "{}", r.stdout);
    assert!(!r.stdout.contains("ignored"), "{}", r.stdout);
    // A JSONL list whose rows name the path otherwise: refused up front, naming their members.
    write_file(
        data.join("filepath.jsonl"),
        "{\"filepath\": \"imgs/0.png\", \"label\": 0}\n",
    );
    let r = pack_list(data.join("filepath.jsonl"), t.path().join("ds-jsonl")).run();
    r.assert_code(2);
    let says = "no row has a `path` member; the first row's are filepath, label";
    assert!(r.stderr.contains(says), "{}", r.stderr);
    // One column named for two roles: the text was silently none.
    write_file(
        data.join("both.csv"),
        "path,c
imgs/0.png,3
",
    );
    // A list's columns are found ignoring case: `C` and `c` are one column too.
    for text in ["c", "C"] {
        let r = pack_list(data.join("both.csv"), t.path().join("both"))
            .args(["--label-column", "c", "--text-column", text])
            .run();
        r.assert_code(2);
        assert!(r.stderr.contains("both name the column c"), "{}", r.stderr);
    }
}

#[test]
fn binary_files_and_manifests_given_as_lists_are_named() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 2);
    let ds = t.path().join("ds");
    pack(&data, &ds).args(["-q"]).ok();
    let shard = ds.join("shard-000000.tar");
    let csv = data.join("list.csv");
    write_file(&csv, "path\nimgs/0.png\n");
    // A gzip member's header (magic, deflate, no flags, no time, OS unix), then the deflated
    // bytes: only the header is looked at.
    let gz = data.join("list.csv.gz");
    write_file(&gz, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0x2b, 0x48]);
    let utf16: Vec<u8> = "path\nimgs/0.png\n"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let wide = data.join("wide.csv");
    std::fs::write(&wide, [&[0xFF, 0xFE][..], &utf16].concat()).unwrap();
    let manifest = ds.join("manifest.json");
    // Each would otherwise be read as one odd CSV header (or JSON) failing every row.
    let cases: [(&Path, &[&str], &str); 5] = [
        (
            &shard,
            &["--input-format", "list"],
            "it is a tar archive, not a CSV or JSONL list",
        ),
        (&gz, &["--input-format", "list"], "it is compressed"),
        (&wide, &[], "it holds NUL bytes"),
        (
            &manifest,
            &[],
            "the file is a shardtool dataset's manifest, not a list",
        ),
        (&manifest, &["--input-format", "list"], "name its folder"),
    ];
    for (i, (input, args, says)) in cases.into_iter().enumerate() {
        let out = t.path().join(format!("o{i}"));
        let r = pack(input, &out).args(args).run();
        r.assert_code(2);
        assert!(r.stderr.contains(says), "{input:?} {args:?}: {}", r.stderr);
        assert!(!out.join("manifest.json").exists());
    }
    // Given with --list too.
    let r = pack_list(&manifest, t.path().join("by-list")).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("shardtool dataset's manifest"),
        "{}",
        r.stderr
    );
    // The same list as text packs.
    pack(&csv, t.path().join("text")).args(["-q"]).ok();
}

#[test]
fn list_and_folder_give_the_same_pixels() {
    // The same files through --list (with the folder's labels) and as an ImageFolder.
    let t = tempdir();
    let root = t.path().join("in");
    let mut csv = String::from("path,label\n");
    for i in 0..6u32 {
        let c = ["a", "b"][(i % 2) as usize];
        let rel = format!("{c}/{i}.jpg");
        save_rgb(root.join(&rel), &pattern(30, 20, i));
        csv.push_str(&format!("{rel},{c}\n"));
    }
    write_file(root.join("list.csv"), csv);
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    pack(&root, &a).args(["--no-shuffle"]).ok();
    pack_list(root.join("list.csv"), &b)
        .args(["--no-shuffle"])
        .ok();
    let (sa, sb) = (by_source_map(&a), by_source_map(&b));
    assert_eq!(manifest(&a).classes, manifest(&b).classes);
    assert_eq!(sa.len(), 6);
    for (src, x) in &sa {
        let y = &sb[src];
        assert_eq!(x.cls, y.cls, "{src}");
        assert_eq!(x.image, y.image, "{src}");
    }
}

#[test]
fn dropped_columns_are_left_out_and_must_exist() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 3);
    write_file(
        data.join("l.csv"),
        "path,label,note,score\nimgs/0.png,1,a,0.5\nimgs/1.png,0,b,0.7\nimgs/2.png,1,c,0.9\n",
    );
    // JSONL: a column some rows lack is still a column of the list.
    write_file(
        data.join("l.jsonl"),
        "{\"path\":\"imgs/0.png\",\"label\":1,\"note\":\"a\"}\n{\"path\":\"imgs/1.png\",\"label\":0,\"secret\":\"s\"}\n{\"path\":\"imgs/2.png\",\"label\":1}\n",
    );
    let ds = t.path().join("csv");
    pack_list(data.join("l.csv"), &ds)
        .args(["--drop-column", "NOTE", "--drop-column", "score"])
        .ok();
    let s = by_source_map(&ds);
    assert_eq!(s.len(), 3);
    for (src, label) in [("imgs/0.png", 1), ("imgs/1.png", 0), ("imgs/2.png", 1)] {
        let json = &s[src].json;
        assert_eq!(s[src].cls, label, "{src}");
        assert!(
            json.get("note").is_none() && json.get("score").is_none(),
            "{json}"
        );
    }
    let ds = t.path().join("jsonl");
    pack_list(data.join("l.jsonl"), &ds)
        .args(["--drop-column", "secret,note"])
        .ok();
    let s = by_source_map(&ds);
    assert!(s
        .values()
        .all(|x| x.json.get("secret").is_none() && x.json.get("note").is_none()));
    assert_eq!(s["imgs/1.png"].cls, 0);
    // The default label column dropped: unlabelled, and not carried.
    let ds = t.path().join("unlabelled");
    pack_list(data.join("l.csv"), &ds)
        .args(["--drop-column", "label"])
        .ok();
    let s = by_source_map(&ds);
    assert!(s
        .values()
        .all(|x| x.cls == -1 && x.json.get("label").is_none()));
    assert!(manifest(&ds).classes.is_empty());
    // Misspelt, a column the list reads, a column also named for a role, or another input kind:
    // usage errors saying so, nothing written.
    let folder = t.path().join("folder");
    save_rgb(folder.join("cat/0.png"), &pattern(8, 8, 0));
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--drop-column", "nots"], "no row has a `nots` column"),
        (vec!["--drop-column", "path"], "`path` column is read"),
        (vec!["--drop-column", "key"], "`key` column is read"),
        (
            vec!["--drop-column", "note", "--text-column", "Note"],
            "it is the column --text-column names",
        ),
        (vec!["--drop-column", "note"], "applies to list and Parquet"),
    ];
    for (i, (args, says)) in cases.iter().enumerate() {
        let out = t.path().join(format!("bad{i}"));
        let r = if i == 4 {
            pack(&folder, &out).args(args.iter().copied()).run()
        } else {
            pack_list(data.join("l.csv"), &out)
                .args(args.iter().copied())
                .run()
        };
        r.assert_code(2);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
        assert!(!out.join("manifest.json").exists());
    }
}

#[test]
fn columns_named_as_our_metadata_are_renamed_and_none_is_lost() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 1);
    // `width` and `source` are names our metadata uses: carried as `input_width` and
    // `input_source`, except that `input_width` is a column of its own here.
    write_file(
        data.join("l.csv"),
        "path,width,input_width,source\nimgs/0.png,640,99,laion\n",
    );
    let first = t.path().join("first");
    pack_list(data.join("l.csv"), &first).ok();
    let s = wds_samples(&first);
    let json = &s[0].json;
    assert_eq!(json["input_width"], "99", "{json}");
    assert_eq!(json["input_input_width"], "640", "{json}");
    assert_eq!(json["input_source"], "laion", "{json}");
    // Re-packed: this input's source goes under `input_source`, the user's column one further.
    let again = t.path().join("again");
    pack(&first, &again).ok();
    let s2 = wds_samples(&again);
    let json2 = &s2[0].json;
    assert_eq!(json2["input_source"], json["source"], "{json2}");
    assert_eq!(json2["input_input_source"], "laion", "{json2}");
    assert_eq!(json2["input_width"], "99", "{json2}");
    assert_eq!(json2["input_input_width"], "640", "{json2}");
    // Unnamed columns: left out where empty (a trailing comma), else named as pandas names
    // them, so two of them lose no value.
    write_file(
        data.join("u.csv"),
        "path,,label,,\nimgs/0.png,,a,first,second\n",
    );
    let unnamed = t.path().join("unnamed");
    pack_list(data.join("u.csv"), &unnamed).ok();
    let json = &wds_samples(&unnamed)[0].json;
    assert_eq!(json["Unnamed: 3"], "first", "{json}");
    assert_eq!(json["Unnamed: 4"], "second", "{json}");
    assert!(
        json.get("Unnamed: 1").is_none() && json.get("").is_none(),
        "{json}"
    );
    // A column named as pandas would name an unnamed one beside it: refused, not merged.
    write_file(data.join("u2.csv"), "path,,Unnamed: 1\nimgs/0.png,x,u\n");
    let r = pack_list(data.join("u2.csv"), t.path().join("u2")).run();
    assert!(
        r.assert_code(2).stderr.contains("`Unnamed: 1`, the name"),
        "{}",
        r.stderr
    );
}

/// Extra columns of a CSV or JSONL list travel in the `.json` (a caption as `.txt`), for tar
/// and packed output alike; a list without labels packs unlabelled.
#[test]
fn lists_carry_their_extra_columns_and_may_have_no_labels() {
    let t = tempdir();
    let photos: Vec<PathBuf> = shard_images();
    let list = t.path().join("l.csv");
    let mut text = String::from("path,text,score,url\n");
    for (i, p) in photos.iter().enumerate() {
        text.push_str(&format!(
            "{},\"caption, {i}\",{i},http://x/{i}\n",
            p.display()
        ));
    }
    std::fs::write(&list, text).unwrap();
    let ds = t.path().join("ds");
    let r = pack_list(&list, &ds).args(["--resize", "shorter:32"]).ok();
    assert!(
        r.stdout.contains("unlabelled (every label is -1)"),
        "{}",
        r.stdout
    );
    let m = manifest(&ds);
    assert!(m.classes.is_empty(), "unlabelled");
    assert_eq!(m.fields, ["jpg", "json", "txt"], "no .cls");
    for s in tar_fields(&ds).values() {
        let json: Value = serde_json::from_slice(&s["json"]).unwrap();
        let i: usize = json["score"].as_str().unwrap().parse().unwrap();
        assert_eq!(s["txt"], format!("caption, {i}").as_bytes());
        assert_eq!(json["url"], format!("http://x/{i}"));
        assert!(json.get("label").is_none());
    }
    verify_ok(&ds);
    // A text column named on the command line must exist, as a label column must.
    let r = pack_list(&list, t.path().join("ds-typo"))
        .args(["--text-column", "txt"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("no `txt` column (--text-column)"),
        "{}",
        r.stderr
    );
    // JSONL names are read as CSV headers are, their case ignored; a column named as packed
    // metadata's own `fields` is kept as `input_fields`; columns making a json over the 1 MiB
    // verify allows fail their row.
    let list = t.path().join("l.jsonl");
    let rows = [
        serde_json::json!({"Path": photos[0], "Label": "cat", "Key": "k0", "fields": "physics"}),
        serde_json::json!({"path": photos[1], "LABEL": "dog", "key": "k1", "notes": "x".repeat(1 << 20)}),
        serde_json::json!({"path": photos[2], "label": "dog", "key": "k2", "fields": {"a": 1}}),
    ];
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&list, text).unwrap();
    for format in ["wds", "packed"] {
        let ds = t.path().join(format!("ds-jsonl-{format}"));
        pack_list(&list, &ds)
            .args(["--resize", "crop:16x16", "--format", format])
            .ok();
        let m = manifest(&ds);
        assert_eq!(m.classes, ["cat", "dog"], "{format}");
        let errs = check_accounting(&ds, &[]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        let e = errs.values().next().unwrap();
        assert_eq!(e.kind, "bad_field", "{e:?}");
        assert!(e.message.starts_with("its columns make a json of"), "{e:?}");
        assert_eq!(m.inputs.packed, 2, "{format}");
        verify_ok(&ds);
    }
    let samples = tar_fields(&t.path().join("ds-jsonl-wds"));
    let json: Value = serde_json::from_slice(&samples["k0"]["json"]).unwrap();
    assert_eq!(
        (json["class"].as_str(), json["input_fields"].as_str()),
        (Some("cat"), Some("physics"))
    );
}

/// A list of shards given as a WebDataset input is named as text, not as a tar cut short.
#[test]
fn a_list_of_shards_given_as_webdataset_is_named_as_text() {
    let t = tempdir();
    let ds = t.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--shard-samples", "20"])
        .ok();
    let list = t.path().join("shards.txt");
    let names: Vec<String> = std::fs::read_dir(&ds)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".tar"))
        .collect();
    // UTF-8, Latin-1 (a folder named café) and UTF-16 with its byte order mark.
    let utf8 = names.join("\n");
    let latin1: Vec<u8> = format!("/data/caf\u{e9}/{utf8}")
        .chars()
        .map(|c| c as u8)
        .collect();
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(utf8.encode_utf16().flat_map(u16::to_le_bytes));
    for (i, text) in [utf8.into_bytes(), latin1, utf16].into_iter().enumerate() {
        write_file(&list, text);
        let r = pack(&list, t.path().join(format!("out{i}")))
            .args(["--input-format", "wds"])
            .run();
        r.assert_code(1);
        assert!(
            r.stderr.contains("not a tar archive: the file holds text")
                && !r.stderr.contains("truncated"),
            "{i}: {}",
            r.stderr
        );
    }
}

/// A Hugging Face imagefolder's metadata names images in its own folder: a row naming a file
/// elsewhere (absolute, or up through `..`) fails alone and that file is never read.
#[test]
fn an_imagefolders_metadata_names_no_file_outside_its_folder() {
    let t = tempdir();
    let dir = t.path().join("hf/train");
    make_images(&dir, 2);
    save_rgb(t.path().join("secret.png"), &pattern(20, 20, 9));
    let outside = t.path().join("secret.png").display().to_string();
    write_file(
        dir.join("metadata.jsonl"),
        format!(
            "{{\"file_name\":\"imgs/0.png\"}}\n{{\"file_name\":\"imgs/../imgs/1.png\"}}\n\
             {{\"file_name\":\"../../secret.png\"}}\n{{\"file_name\":\"{outside}\"}}\n"
        ),
    );
    let ds = t.path().join("ds");
    pack(&dir, &ds).ok();
    let errs = check_accounting(&ds, &[]);
    assert_eq!(errs.len(), 2, "{errs:?}");
    for e in errs.values() {
        assert_eq!(e.kind, "bad_list_row", "{e:?}");
        assert!(e.message.contains("outside the folder"), "{e:?}");
    }
    let sources: Vec<String> = by_source_map(&ds).into_keys().collect();
    assert_eq!(sources.len(), 2, "{sources:?}");
    assert!(sources.iter().all(|s| !s.contains("secret")), "{sources:?}");
}

/// A list's path is taken as written, spaces at its ends and all (as pandas and `datasets` read
/// it): ` 1.png` is that file, never `1.png`; a missing one whose trimmed path exists says so.
#[test]
fn paths_keep_spaces_at_their_ends() {
    let t = tempdir();
    let data = t.path().join("data");
    make_images(&data, 3);
    std::fs::rename(data.join("imgs/0.png"), data.join("imgs/ 1.png")).unwrap();
    std::fs::rename(data.join("imgs/2.png"), data.join("imgs/2.png ")).unwrap();
    for (name, rows) in [
        (
            "l.csv",
            "path,label\n\"imgs/ 1.png\",a\nimgs/1.png,b\n\"imgs/2.png \",c\n\" imgs/1.png\",d\n",
        ),
        (
            "l.jsonl",
            concat!(
                r#"{"path": "imgs/ 1.png", "label": "a"}"#,
                "\n",
                r#"{"path": "imgs/1.png", "label": "b"}"#,
                "\n",
                r#"{"path": "imgs/2.png ", "label": "c"}"#,
                "\n",
                r#"{"path": " imgs/1.png", "label": "d"}"#,
                "\n",
            ),
        ),
    ] {
        write_file(data.join(name), rows);
        let ds = t.path().join(format!("ds-{name}"));
        let r = pack_list(data.join(name), &ds)
            .args(["--encode", "png"])
            .ok();
        let s = by_source_map(&ds);
        assert_eq!(s.len(), 3, "{name}");
        for (src, i) in [("imgs/ 1.png", 0), ("imgs/1.png", 1), ("imgs/2.png ", 2)] {
            assert_eq!(s[src].decode(), pattern(12 + i, 10, i), "{name}: {src:?}");
        }
        let e = errors(&ds);
        assert_eq!(e.len(), 1, "{name}");
        // Each component trimmed (a CSV written with `, ` puts the space before the folder).
        let hint = format!("{:?} exists", data.join("imgs/1.png").display().to_string());
        assert!(e[0].message.contains(&hint), "{}", e[0].message);
        // The failed line quotes the name, so its leading space shows.
        assert!(r.stderr.contains("failed: \" imgs/1.png\""), "{}", r.stderr);
    }
    // A name that reads like a fault of the machine's is still the input's own failure.
    let odd = data.join("imgs/Too many open files.png");
    std::fs::copy(data.join("imgs/1.png"), odd).unwrap();
    let rows = "path,label\n\"imgs/Too many open files.png \",a\nimgs/1.png,b\n";
    write_file(data.join("t.csv"), rows);
    let r = pack_list(data.join("t.csv"), t.path().join("ds-t")).ok();
    assert_eq!(errors(&t.path().join("ds-t")).len(), 1, "{}", r.stderr);
}
