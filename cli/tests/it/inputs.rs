//! What counts as an input of an ImageFolder, and how odd, broken or hostile inputs are handled:
//! odd names, links, directories that look like images, hidden and non-image files, empty
//! classes, broken and malicious files. Every bad input must be reported exactly once, and
//! `found = packed + failed` must hold.

use crate::common::*;
use std::os::unix::fs::symlink;
use std::path::Path;

/// The JPEG `jpeg` with its frame header (SOF) rewritten to declare `w`x`h`.
fn jpeg_declaring(jpeg: &[u8], w: u16, h: u16) -> Vec<u8> {
    let mut out = jpeg.to_vec();
    let mut i = 2;
    while i + 4 <= out.len() {
        assert_eq!(out[i], 0xFF, "JPEG segment expected at {i}");
        let marker = out[i + 1];
        let len = usize::from(u16::from_be_bytes([out[i + 2], out[i + 3]]));
        if (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker) {
            out[i + 5..i + 7].copy_from_slice(&h.to_be_bytes());
            out[i + 7..i + 9].copy_from_slice(&w.to_be_bytes());
            return out;
        }
        i += 2 + len;
    }
    panic!("no SOF segment found");
}

fn small(seed: u32) -> image::RgbImage {
    pattern(24, 16, seed)
}

#[test]
fn odd_file_names_are_packed() {
    let t = tempdir();
    let root = t.path().join("in");
    let names: Vec<std::ffi::OsString> = vec![
        "a.b.c.jpg".into(),
        "no-dots-here.jpeg".into(),
        "UPPER.JPG".into(),
        "mixed.PnG".into(),
        "spaces in name.png".into(),
        "日本語の名前.jpg".into(),
        "café-ünïcödé.png".into(),
        os(b"latin1-\xe9t\xe9.jpg"),
        os(b"bad-\xff\xfe.png"),
    ];
    for (i, n) in names.iter().enumerate() {
        let p = root.join("cls").join(n);
        if p.to_string_lossy().to_ascii_lowercase().ends_with(".png") {
            save(&p, &image::DynamicImage::ImageRgb8(small(i as u32)));
        } else {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, jpeg(&small(i as u32))).unwrap();
        }
    }
    let ds = t.path().join("ds");
    pack(&root, &ds).ok();
    let samples = wds_samples(&ds);
    let srcs = by_source(&samples);
    assert_eq!(samples.len(), names.len(), "{:?}", srcs.keys());
    for n in &names {
        let expect = format!("cls/{}", n.to_string_lossy());
        assert!(
            srcs.contains_key(&expect),
            "{expect:?} not in {:?}",
            srcs.keys()
        );
    }
    // Keys stay portable whatever the file names were.
    for s in &samples {
        assert!(!s.key.contains(['.', '/']), "{}", s.key);
        assert!(s.key.is_ascii());
    }
    let m = manifest(&ds);
    assert_eq!(
        (m.inputs.found, m.inputs.packed, m.inputs.failed),
        (9, 9, 0)
    );
    // A class is named by its folder: a name that is not UTF-8 cannot be one unchanged (two
    // such names could become one class name), so the pack is refused, naming the folder; a
    // shard's name alike, found in a folder or by a glob (changed, it would name no file).
    for name in [&b"cl\xe9ss"[..], b"cl\xe8ss"] {
        let class = t.path().join("classes").join(os(name));
        write_file(class.join("a.jpg"), jpeg(&small(1)));
    }
    write_file(t.path().join("shards").join(os(b"s\xff.tar")), b"");
    for input in ["classes", "shards", "shards/*.tar"] {
        let r = pack(t.path().join(input), t.path().join("ds2")).run();
        let err = &r.assert_code(2).stderr;
        assert!(err.contains("not UTF-8 text: rename it"), "{input}: {err}");
    }
}

#[test]
fn links_and_directories_named_like_images() {
    let t = tempdir();
    let root = t.path().join("in");
    let outside = t.path().join("outside");
    save_rgb(outside.join("real.png"), &small(1));
    save_rgb(root.join("cls/plain.png"), &small(2));
    // A link to a real file is followed and packed.
    symlink(outside.join("real.png"), root.join("cls/link.png")).unwrap();
    // A directory named like an image is no input: its contents are walked.
    save_rgb(root.join("cls/x.jpg/inner.png"), &small(3));
    save_rgb(root.join("cls/x.jpg/deeper/inner2.jpg"), &small(4));
    // A link to a directory is walked; a link cycle does not loop forever.
    save_rgb(outside.join("dir/linked.png"), &small(5));
    symlink(outside.join("dir"), root.join("cls/dirlink")).unwrap();
    symlink("..", root.join("cls/cycle")).unwrap();
    // A dangling link named like an image fails, and is reported.
    symlink(t.path().join("missing.jpg"), root.join("cls/dangling.jpg")).unwrap();
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--encode", "png"]).ok();
    let samples = wds_samples(&ds);
    let srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
    let mut sorted = srcs.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "cls/dirlink/linked.png",
            "cls/link.png",
            "cls/plain.png",
            "cls/x.jpg/deeper/inner2.jpg",
            "cls/x.jpg/inner.png",
        ]
    );
    let link = samples
        .iter()
        .find(|s| s.source() == "cls/link.png")
        .unwrap();
    assert_eq!(link.decode(), small(1), "the link's target is packed");
    let errs = check_accounting(&ds, &srcs);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs["cls/dangling.jpg"].kind, "unreadable");
}

/// Writes the bad inputs of [`bad_inputs_are_reported_once_each`]; returns `(path, kind)`.
fn bad_inputs(root: &Path) -> Vec<(&'static str, &'static str)> {
    let good = jpeg(&pattern(64, 48, 9));
    write_file(root.join("bad/empty.jpg"), b"");
    write_file(root.join("bad/truncated.jpg"), &good[..good.len() / 2]);
    let png_bytes = png(&image::DynamicImage::ImageRgb8(pattern(64, 48, 10)));
    write_file(
        root.join("bad/truncated.png"),
        &png_bytes[..png_bytes.len() / 2],
    );
    write_file(root.join("bad/random.jpg"), random_bytes(3000, 1));
    write_file(
        root.join("bad/text.jpg"),
        "this is not an image, just text\n".repeat(20),
    );
    write_file(root.join("bad/header-only.png"), &png_bytes[..40]);
    write_file(root.join("bad/bomb.png"), png_bomb(30_000, 30_000));
    write_file(
        root.join("bad/bomb.jpg"),
        jpeg_declaring(&good, 30_000, 30_000),
    );
    symlink(root.join("nowhere.jpg"), root.join("bad/dangling.jpg")).unwrap();
    // A broken file whose name is not UTF-8 is reported under its lossy name.
    std::fs::write(root.join(os(b"bad/\xff-latin1-\xe9.jpg")), b"plain text").unwrap();
    vec![
        ("bad/empty.jpg", "decode"),
        ("bad/truncated.jpg", "decode"),
        ("bad/truncated.png", "decode"),
        ("bad/random.jpg", "unsupported_format"),
        ("bad/text.jpg", "unsupported_format"),
        ("bad/header-only.png", "decode"),
        ("bad/bomb.png", "too_many_pixels"),
        ("bad/bomb.jpg", "too_many_pixels"),
        ("bad/dangling.jpg", "unreadable"),
        ("bad/\u{FFFD}-latin1-\u{FFFD}.jpg", "unsupported_format"),
    ]
}

#[test]
fn bad_inputs_are_reported_once_each() {
    let t = tempdir();
    let root = t.path().join("in");
    let bad = bad_inputs(&root);
    for i in 0..5 {
        save_rgb(root.join(format!("good/{i}.jpg")), &small(i));
    }
    let ds = t.path().join("ds");
    pack(&root, &ds).ok();
    let samples = wds_samples(&ds);
    let srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
    assert_eq!(samples.len(), 5);
    assert!(srcs.iter().all(|s| s.starts_with("good/")));
    let errs = check_accounting(&ds, &srcs);
    let m = manifest(&ds);
    assert_eq!(m.inputs.found, 5 + bad.len() as u64);
    assert_eq!(m.inputs.failed, bad.len() as u64);
    for (path, kind) in &bad {
        let e = errs
            .get(*path)
            .unwrap_or_else(|| panic!("{path} missing from errors.jsonl: {errs:?}"));
        assert_eq!(&e.kind, kind, "{path}: {}", e.message);
    }
    assert_eq!(errs.len(), bad.len());
}

#[test]
fn a_truncated_jpeg_is_an_error_not_a_grey_picture() {
    // libjpeg-turbo "decodes" a truncated JPEG with a warning, filling the rest with grey; such an
    // input must be reported, not silently packed.
    let t = tempdir();
    let root = t.path().join("in");
    let good = jpeg(&pattern(200, 150, 3));
    for cut in [100usize, good.len() / 3, good.len() - 10] {
        write_file(root.join(format!("c/cut{cut}.jpg")), &good[..cut]);
    }
    let ds = t.path().join("ds");
    // Nothing usable at all: exit 1 naming the failures, each one in errors.jsonl, no manifest.
    let r = pack(&root, &ds).run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("every one of the 3 inputs found"),
        "{}",
        r.stderr
    );
    assert!(!ds.join("manifest.json").exists());
    let errs = errors(&ds);
    assert_eq!(errs.len(), 3);
    assert!(errs.iter().all(|e| e.kind == "decode"), "{errs:?}");
    // Beside one good image, the three are reported and the good one packed.
    write_file(root.join("c/good.jpg"), &good);
    pack(&root, &ds).arg("--overwrite").ok();
    let errs = check_accounting(&ds, &["c/good.jpg".to_string()]);
    assert_eq!(manifest(&ds).inputs.packed, 1, "{:?}", wds_samples(&ds));
    assert_eq!(errs.len(), 3);
    assert!(errs.values().all(|e| e.kind == "decode"), "{errs:?}");
}

#[test]
fn a_jpeg_without_a_frame_is_judged_on_its_own_bytes() {
    // `FF D8 FF D9` (SOI, EOI) and a JPEG cut inside its first segment carry no frame header. What
    // is reported for them must depend on their bytes only, not on the JPEG that the same worker
    // thread looked at before: here a 64x48 JPEG over --max-pixels 1000, processed just before
    // them (one job, sorted order).
    let t = tempdir();
    let alone = t.path().join("alone");
    let after = t.path().join("after");
    for root in [&alone, &after] {
        write_file(root.join("c/z1-no-frame.jpg"), b"\xff\xd8\xff\xd9");
        write_file(root.join("c/z2-cut-app0.jpg"), b"\xff\xd8\xff\xe0 broken");
        // One usable image, so the pack succeeds and reports the others.
        write_file(root.join("c/z3-good.jpg"), jpeg(&pattern(20, 20, 2)));
    }
    write_file(after.join("c/a-big.jpg"), jpeg(&pattern(64, 48, 1)));
    let args = ["--jobs", "1", "--no-shuffle", "--max-pixels", "1000"];
    let (ds_alone, ds_after) = (t.path().join("ds-alone"), t.path().join("ds-after"));
    pack(&alone, &ds_alone).args(args).ok();
    pack(&after, &ds_after).args(args).ok();
    let good = ["c/z3-good.jpg".to_string()];
    let (e_alone, e_after) = (
        check_accounting(&ds_alone, &good),
        check_accounting(&ds_after, &good),
    );
    assert_eq!(e_after["c/a-big.jpg"].kind, "too_many_pixels");
    for f in ["c/z1-no-frame.jpg", "c/z2-cut-app0.jpg"] {
        assert_eq!(
            e_after[f], e_alone[f],
            "{f}: the report depends on the image decoded before it"
        );
        assert_eq!(e_after[f].kind, "decode", "{f}: {:?}", e_after[f]);
        assert!(!e_after[f].message.contains("64x48"), "{:?}", e_after[f]);
    }
}

#[test]
fn decompression_bombs_fail_fast_with_too_many_pixels() {
    let t = tempdir();
    let root = t.path().join("in");
    // A real, complete 30000x30000 PNG (about 700 KB, 900 Mpx) and a JPEG declaring 30000x30000.
    let bomb = png_bomb(30_000, 30_000);
    assert!(bomb.len() < 1 << 20);
    write_file(root.join("c/bomb.png"), &bomb);
    write_file(
        root.join("c/bomb.jpg"),
        jpeg_declaring(&jpeg(&small(1)), 30_000, 30_000),
    );
    write_file(root.join("c/good.jpg"), jpeg(&small(2)));
    let ds = t.path().join("ds");
    let start = std::time::Instant::now();
    pack(&root, &ds).ok();
    // Decoding 900 Mpx would take far longer (and about 1 GB); refusing takes milliseconds.
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    let errs = check_accounting(&ds, &["c/good.jpg".to_string()]);
    assert_eq!(errs.len(), 2);
    for e in errs.values() {
        assert_eq!(e.kind, "too_many_pixels", "{e:?}");
        assert!(e.message.contains("30000"), "{e:?}");
    }
}

#[test]
fn a_small_bomb_is_refused_only_by_the_limit() {
    // The same construction at 2000x2000 (4 Mpx) is a valid picture under the default limit, so
    // the bomb test above fails because of the limit, not because the file is broken.
    let t = tempdir();
    let root = t.path().join("in");
    write_file(root.join("c/ok.png"), png_bomb(2000, 2000));
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--resize", "longer:20"]).ok();
    let s = &wds_samples(&ds)[0];
    assert_eq!(s.orig_size(), (2000, 2000));
    assert!(s.decode().pixels().all(|p| p.0.iter().all(|&c| c < 8)));
    let ds2 = t.path().join("ds2");
    let r = pack(&root, &ds2).args(["--max-pixels", "3999999"]).run();
    r.assert_code(1);
    assert_eq!(errors(&ds2)[0].path, "c/ok.png");
    assert_eq!(errors(&ds2)[0].kind, "too_many_pixels");
}

#[test]
fn max_pixels_flag_limits_every_format() {
    let t = tempdir();
    let root = t.path().join("in");
    // 1000 pixels are allowed, 1001 are not.
    for ext in ["jpg", "png", "gif", "bmp", "tif", "webp"] {
        save_rgb(root.join(format!("c/big.{ext}")), &pattern(40, 40, 1)); // 1600 px
        save_rgb(root.join(format!("c/edge.{ext}")), &pattern(25, 40, 2)); // 1000 px
        save_rgb(root.join(format!("c/over.{ext}")), &pattern(7, 143, 3)); // 1001 px
    }
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--max-pixels", "1000"]).ok();
    let samples = wds_samples(&ds);
    let srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
    let errs = check_accounting(&ds, &srcs);
    assert_eq!(samples.len(), 6, "{errs:?}");
    assert!(srcs.iter().all(|s| s.starts_with("c/edge.")));
    assert_eq!(errs.len(), 12);
    assert!(
        errs.values().all(|e| e.kind == "too_many_pixels"),
        "{errs:?}"
    );
    assert_eq!(manifest(&ds).pack["max_pixels"], 1000);
}

#[test]
fn hidden_and_non_image_files_are_ignored_and_counted() {
    let t = tempdir();
    let root = t.path().join("in");
    save_rgb(root.join("a/one.png"), &small(1));
    save_rgb(root.join("b/two.jpg"), &small(2));
    // JPEGs as some cameras and browsers name them (JPEG File Interchange Format).
    save_rgb(root.join("b/three.jpg"), &small(3));
    std::fs::rename(root.join("b/three.jpg"), root.join("b/three.JFIF")).unwrap();
    save_rgb(root.join("b/four.jpg"), &small(4));
    std::fs::rename(root.join("b/four.jpg"), root.join("b/four.jpe")).unwrap();
    // Ignored: hidden files (even with an image extension), non-image extensions, files beside
    // the class folders.
    let ignored = [
        "a/.hidden.jpg",
        "a/.DS_Store",
        "a/notes.txt",
        "a/image.jpg.bak",
        "a/noextension",
        "b/data.json",
        "b/sub/readme.md",
        "root-file.jpg",
        ".hidden-root.png",
        "README",
    ];
    for p in ignored {
        if p.contains(".jpg") || p.contains(".png") {
            save_rgb(root.join("tmp.png"), &small(9));
            std::fs::rename(root.join("tmp.png"), root.join(p)).unwrap();
        } else {
            write_file(root.join(p), b"not an input");
        }
    }
    let ds = t.path().join("ds");
    pack(&root, &ds).ok();
    let samples = wds_samples(&ds);
    let srcs: Vec<String> = samples.iter().map(|s| s.source().to_string()).collect();
    check_accounting(&ds, &srcs);
    let m = manifest(&ds);
    assert_eq!(m.classes, ["a", "b"]);
    assert_eq!((m.inputs.found, m.inputs.packed), (4, 4));
    assert_eq!(m.inputs.ignored, ignored.len() as u64);
    assert!(errors(&ds).is_empty());
}

#[test]
fn hidden_directories_are_skipped() {
    let t = tempdir();
    let root = t.path().join("in");
    save_rgb(root.join("a/one.png"), &small(1));
    save_rgb(root.join("a/.cache/thumb.png"), &small(2));
    save_rgb(root.join(".trash/a/old.png"), &small(3));
    let ds = t.path().join("ds");
    pack(&root, &ds).ok();
    let m = manifest(&ds);
    assert_eq!(m.classes, ["a"], "a hidden folder is no class");
    assert_eq!(
        (m.inputs.found, m.inputs.packed, m.inputs.failed),
        (1, 1, 0)
    );
    assert!(m.inputs.ignored >= 2);
    assert_eq!(wds_samples(&ds)[0].source(), "a/one.png");
}

#[test]
fn labels_follow_sorted_class_folders_and_empty_classes_count() {
    let t = tempdir();
    let root = t.path().join("in");
    for (i, c) in ["zebra", "apple", "mango"].iter().enumerate() {
        for j in 0..3 {
            save_rgb(root.join(format!("{c}/{j}.png")), &small(i as u32 * 10 + j));
        }
    }
    std::fs::create_dir_all(root.join("banana-empty")).unwrap();
    let ds = t.path().join("ds");
    pack(&root, &ds).ok();
    let m = manifest(&ds);
    assert_eq!(m.classes, ["apple", "banana-empty", "mango", "zebra"]);
    let samples = wds_samples(&ds);
    assert_eq!(samples.len(), 9);
    for s in &samples {
        let class = s.source().split('/').next().unwrap();
        assert_eq!(m.classes[s.cls as usize], class, "{}", s.source());
        assert_eq!(s.json["class"], class);
    }
    assert!(
        samples.iter().all(|s| s.cls != 1),
        "the empty class has no samples"
    );
}

#[test]
fn an_input_with_no_image_at_all_is_an_error_naming_what_was_looked_for() {
    let t = tempdir();
    let root = t.path().join("in");
    std::fs::create_dir_all(root.join("only-empty-class")).unwrap();
    let ds = t.path().join("ds");
    let out = pack(&root, &ds).run();
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let err = &out.stderr;
    assert!(err.contains("no usable image"), "{err}");
    assert!(
        err.contains("class folders") && err.contains("in/"),
        "{err}"
    );
    assert!(!ds.join("manifest.json").exists());
}

#[test]
fn output_holds_only_the_dataset_files() {
    // Write-once publishing leaves no temporary files behind.
    let t = tempdir();
    let root = t.path().join("in");
    for i in 0..6 {
        save_rgb(root.join(format!("c/{i}.png")), &small(i));
    }
    write_file(root.join("c/broken.jpg"), b"nope");
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--shard-samples", "2"]).ok();
    let m = manifest(&ds);
    let mut expect: Vec<String> = m.shards.iter().map(|s| s.file.clone()).collect();
    expect.push("errors.jsonl".into());
    expect.push("manifest.json".into());
    expect.sort();
    assert_eq!(file_names(&ds), expect);
}

#[test]
fn a_folder_of_splits_is_not_an_image_folder_of_two_classes() {
    // imagenet/{train,val}/<class>/<image>, given from above the splits.
    let t = tempdir();
    let root = t.path().join("imagenet");
    jpeg_folder(&root.join("train/cat"), 2, 40, 30);
    jpeg_folder(&root.join("val/cat"), 1, 40, 30);
    let r = pack(&root, t.path().join("out")).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("are train, val: dataset splits"),
        "{}",
        r.stderr
    );
    let m = pack(root.join("train"), t.path().join("train")).ok();
    assert!(m.stdout.contains("classes 1: cat"), "{}", m.stdout);
    // The only split there, holding class folders: one class `train` otherwise.
    std::fs::remove_dir_all(root.join("val")).unwrap();
    let r = pack(&root, t.path().join("out")).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("the only class folder") && r.stderr.contains("is train"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_pipe_or_device_named_as_an_image_is_an_error_line_not_silently_ignored() {
    let t = tempdir();
    let root = t.path().join("in");
    jpeg_folder(&root.join("cat"), 2, 40, 30);
    let fifo = root.join("cat/pipe.jpg");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    symlink("/dev/null", root.join("cat/device.jpg")).unwrap();
    let out = t.path().join("out");
    pack(&root, &out).ok();
    let errs = check_accounting(&out, &[]);
    assert_eq!(errs.len(), 2, "{errs:?}");
    for e in errs.values() {
        assert_eq!(e.kind, "unreadable", "{e:?}");
        assert!(e.message.contains("not a regular file"), "{e:?}");
    }
    assert_eq!(manifest(&out).inputs.packed, 2);
    // Named by a list row, or as a shard among shards: an error line, never a wait for a writer.
    let list = root.join("list.csv");
    // jpeg_folder wrote cat/c/0.jpg and cat/c/1.jpg.
    write_file(
        &list,
        "path,label\ncat/pipe.jpg,0\ncat/device.jpg,0\ncat/c/0.jpg,0\n",
    );
    let from_list = t.path().join("from-list");
    pack_list(&list, &from_list).ok();
    let errs = check_accounting(&from_list, &[]);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs.values()
            .all(|e| e.message.contains("not a regular file")),
        "{errs:?}"
    );
    let shards = t.path().join("shards");
    std::fs::create_dir_all(&shards).unwrap();
    std::fs::copy(
        out.join("shard-000000.tar"),
        shards.join("shard-000000.tar"),
    )
    .unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(shards.join("shard-000001.tar"))
        .status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let from_shards = t.path().join("from-shards");
    pack(&shards, &from_shards).ok();
    let errs = errors(&from_shards);
    assert!(
        errs.iter()
            .any(|e| e.path.ends_with("shard-000001.tar")
                && e.message.contains("not a regular file")),
        "{errs:?}"
    );
    assert_eq!(manifest(&from_shards).inputs.packed, 2);
}

#[test]
fn names_holding_glob_characters_are_themselves_where_they_exist() {
    let t = tempdir();
    let one = t.path().join("one");
    jpeg_folder(&t.path().join("in/cat"), 3, 40, 30);
    pack(t.path().join("in"), &one).ok();
    let shard = one.join("shard-000000.tar");
    for name in ["g/b?d.tar", "g/bXd.tar", "g/b*.tar", "q?x/a.tar"] {
        copy(&shard, t.path().join(name));
    }
    let runs = std::cell::Cell::new(0);
    // The samples found (copies of one shard: their keys repeat, so more fail than pack).
    let count = |arg: String| {
        runs.set(runs.get() + 1);
        let out = t.path().join(format!("out-{}", runs.get()));
        pack(&arg, &out).ok();
        manifest(&out).inputs.found
    };
    let root = t.path().display().to_string();
    // As spelled, not as patterns: one shard of 3 samples each (a file:// URL's %3F and %2A
    // are those characters).
    assert_eq!(count(format!("{root}/g/b?d.tar")), 3);
    assert_eq!(count(format!("file://{root}/g/b%3Fd.tar")), 3);
    assert_eq!(count(format!("file://{root}/g/b%2A.tar")), 3);
    assert_eq!(count(format!("{root}/q?x/a.tar")), 3);
    // A pattern no file is named: the files it matches (b?d.tar and bXd.tar).
    assert_eq!(count(format!("{root}/g/b?d*.tar")), 6);
    // A file:// URL's bare `?` or `#` would end its path (refused), and its `%3F` and `%2A` are
    // those characters, never a pattern (no file is named so): never another file read.
    for tail in ["b?d.tar", "b%3Fd.tar#x", "%3FXd.tar", "%2AXd.tar"] {
        let r = pack(format!("file://{root}/g/{tail}"), t.path().join("refused")).run();
        let why = ["spell them %3F and %23", "no such file"][usize::from(tail.starts_with('%'))];
        assert!(r.assert_code(2).stderr.contains(why), "{}", r.stderr);
    }
    let r = pack("http://127.0.0.1:9/x/*.tar", t.path().join("remote")).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("remote inputs are not globbed"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_pack_that_has_not_finished_is_no_input() {
    let t = tempdir();
    let ds = t.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--resize", "crop:16x16", "--shard-samples", "10", "-q"])
        .ok();
    std::fs::remove_file(ds.join("manifest.json")).unwrap();
    let try_pack = |n: u32| {
        pack(&ds, t.path().join(format!("out{n}")))
            .args(["-q"])
            .run()
    };
    // Shards alone (the manifest lost): a WebDataset folder like any other.
    try_pack(0).assert_code(0);
    // A plan beside them, a hidden shard being written, or the folder locked by a pack: refused.
    std::fs::create_dir(ds.join("_plan")).unwrap();
    let r = try_pack(1);
    r.assert_code(2);
    assert!(
        r.stderr
            .contains("a pack that has not finished (it holds a plan"),
        "{}",
        r.stderr
    );
    std::fs::remove_dir(ds.join("_plan")).unwrap();
    std::fs::write(ds.join(".shard-000005.tar.4242.3.tmp"), b"partial").unwrap();
    let r = try_pack(2);
    r.assert_code(2);
    assert!(r.stderr.contains("a shard being written"), "{}", r.stderr);
    std::fs::remove_file(ds.join(".shard-000005.tar.4242.3.tmp")).unwrap();
    let held = std::fs::File::open(&ds).unwrap();
    held.lock().unwrap();
    let r = try_pack(3);
    r.assert_code(2);
    assert!(
        r.stderr.contains("another process is packing into it"),
        "{}",
        r.stderr
    );
    drop(held);
    try_pack(4).assert_code(0);
}

#[test]
fn an_earlier_pack_inside_a_webdataset_folder_is_not_more_of_its_shards() {
    let t = tempdir();
    let d9 = t.path().join("d9");
    pack(sample_data(), &d9)
        .args(["--resize", "crop:16x16", "--shard-samples", "9", "-q"])
        .ok();
    let found = manifest(&d9).inputs.found;
    // A pack of d9 kept inside it, as a user might leave one.
    pack(&d9, t.path().join("sub")).args(["-q"]).ok();
    std::fs::rename(t.path().join("sub"), d9.join("sub")).unwrap();
    let out = t.path().join("out");
    pack(&d9, &out).args(["-q"]).ok();
    let m = manifest(&out);
    assert_eq!((m.inputs.found, m.inputs.failed), (found, 0));
}

/// The Hugging Face imagefolder: images beside a `metadata.jsonl` naming them with captions.
/// Its folder packs as that list (as an ImageFolder its captions would be lost, its images one
/// class), an image no row names is a failed input, and a repository whose splits
/// each hold one is asked about.
#[test]
fn a_hugging_face_imagefolder_packs_by_its_metadata_and_reports_unlisted_images() {
    let t = tempdir();
    let repo = t.path().join("repo");
    let train = repo.join("train");
    jpeg_folder(&train, 3, 24, 16);
    // (`jpeg_folder` writes them under `c/`: HF's file names may hold a folder too.)
    let mut names: Vec<String> = (std::fs::read_dir(train.join("c")).unwrap())
        .map(|e| format!("c/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    names.sort();
    let caption = |n: &str| format!("a caption of {n}");
    let rows: Vec<String> = (names.iter().skip(1))
        .map(|n| format!("{{\"file_name\": \"./{n}\", \"text\": \"{}\"}}", caption(n)))
        .collect();
    write_file(train.join("metadata.jsonl"), rows.join("\n") + "\n");
    write_file(train.join("README.md"), "about");
    let r = pack(&repo, t.path().join("asked")).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("imagefolder's metadata")
            && r.stderr
                .contains(&format!("pack its folder, {}", train.display())),
        "{}",
        r.stderr
    );
    // With a test split beside it (first by name), the training split is still the example.
    write_file(repo.join("test/metadata.jsonl"), &rows[0]);
    let r = pack(&repo, t.path().join("asked")).run();
    let said = format!("pack its folder, {} (one split", train.display());
    assert!(r.stderr.contains(&said), "{}", r.stderr);
    assert!(r.stderr.contains("1 other folder(s)"), "{}", r.stderr);
    std::fs::remove_dir_all(repo.join("test")).unwrap();
    for (input, out) in [
        (train.clone(), "folder"),
        (train.join("metadata.jsonl"), "file"),
    ] {
        let out = t.path().join(out);
        pack(&input, &out).args(["-q"]).ok();
        let m = manifest(&out);
        assert_eq!(m.totals.samples as usize, names.len() - 1, "{out:?}");
        assert_eq!(
            (m.inputs.found as usize, m.inputs.failed, m.inputs.ignored),
            (names.len(), 1, 1)
        );
        let errs = errors(&out);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, "unlisted");
        assert!(errs[0].path.ends_with(&names[0]), "{errs:?}");
        // Each caption travels with its own image; the file name is the image, not metadata.
        let mut seen = Vec::new();
        for entry in &m.shards {
            let bytes = shard_bytes(&out, entry);
            let (samples, err) = shardtool_wds::group_samples(&bytes);
            assert!(err.is_none());
            for s in samples {
                let json: serde_json::Value =
                    serde_json::from_slice(s.get("json").unwrap()).unwrap();
                let source = json["source"].as_str().unwrap().trim_start_matches("./");
                assert!(json.get("file_name").is_none(), "{json}");
                assert_eq!(s.get("txt").unwrap(), caption(source).as_bytes());
                seen.push(source.to_string());
            }
        }
        seen.sort();
        assert_eq!(seen, names[1..]);
        Cmd::new(["verify"]).arg(&out).ok();
    }
    // Asked for by name, the folders are the classes, the metadata left out.
    pack(&train, t.path().join("folders"))
        .args(["--input-format", "imagefolder", "-q"])
        .ok();
    assert_eq!(manifest(&t.path().join("folders")).classes, ["c"]);
}

/// A Hugging Face imagefolder's metadata, less tidy: a byte-order mark, a row naming its image
/// through `..`, a row that fails (its image is named, so not also unlisted), the metadata file
/// given from its own folder (`pack metadata.jsonl`), and the folder as its own output.
#[test]
fn a_hugging_face_imagefolder_with_odd_metadata_counts_each_image_once() {
    let t = tempdir();
    let hf = t.path().join("hf");
    jpeg_folder(&hf, 4, 24, 16);
    let rows = [
        r#"{"file_name": "c/0.jpg", "text": "zero"}"#,
        r#"{"file_name": "c/../c/1.jpg", "text": "one"}"#,
        r#"{"file_name": "c/2.jpg", "text": "two", "text": "twice"}"#,
    ];
    write_file(
        hf.join("metadata.jsonl"),
        [&b"\xEF\xBB\xBF"[..], rows.join("\n").as_bytes()].concat(),
    );
    for (dir, input, out) in [
        (t.path(), "hf", t.path().join("a")),
        (hf.as_path(), "metadata.jsonl", t.path().join("b")),
    ] {
        pack(input, &out).current_dir(dir).args(["-q"]).ok();
        let m = manifest(&out);
        assert_eq!(
            (m.totals.samples, m.inputs.found, m.inputs.failed),
            (2, 4, 2)
        );
        let mut kinds: Vec<(String, String)> = (errors(&out).into_iter())
            .map(|e| (e.kind, e.path.rsplit('/').next().unwrap().to_string()))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                ("bad_list_row".to_string(), "metadata.jsonl:3".to_string()),
                ("unlisted".to_string(), "3.jpg".to_string())
            ]
        );
    }
    let r = pack(&hf, &hf).args(["--overwrite"]).run();
    r.assert_code(2);
    assert!(r.stderr.contains("would take in the input"), "{}", r.stderr);
    assert!(!hf.join("manifest.json").exists());

    // A subfolder with its own metadata (not read): its images are reported, not dropped.
    // The first row's `path` does not displace `file_name`; `Text` beside `text` is refused,
    // as a CSV header naming a column twice is.
    jpeg_folder(&hf.join("sub"), 2, 24, 16);
    write_file(hf.join("sub/metadata.jsonl"), r#"{"file_name": "c/0.jpg"}"#);
    let rows = [
        r#"{"path": "http://x/0.jpg", "file_name": "c/0.jpg", "text": "zero"}"#,
        r#"{"file_name": "c/1.jpg", "text": "one", "Text": "uno"}"#,
        r#"{"file_name": "c/2.jpg", "text": "two"}"#,
        r#"{"file_name": "c/3.jpg", "text": "three"}"#,
    ];
    write_file(hf.join("metadata.jsonl"), rows.join("\n"));
    let out = t.path().join("nested");
    pack(&hf, &out).args(["-q"]).ok();
    let m = manifest(&out);
    assert_eq!((m.totals.samples, m.inputs.failed), (3, 3));
    let errs = errors(&out);
    let nested: Vec<_> = errs.iter().filter(|e| e.path.starts_with("sub/")).collect();
    assert_eq!(nested.len(), 2, "{errs:?}");
    assert!(nested
        .iter()
        .all(|e| e.kind == "unlisted" && e.message.contains("is not read")));
    assert!(errs
        .iter()
        .any(|e| e.kind == "bad_list_row" && e.message.contains("`Text`")));
    // Rows naming images of two splits' folders would mix them: refused.
    let split = t.path().join("split");
    jpeg_folder(&split.join("train"), 1, 24, 16);
    jpeg_folder(&split.join("test"), 1, 24, 16);
    write_file(
        split.join("metadata.jsonl"),
        "{\"file_name\": \"train/c/0.jpg\"}\n{\"file_name\": \"test/c/0.jpg\"}\n",
    );
    let r = pack(&split, t.path().join("mixed")).run();
    r.assert_code(2);
    assert!(r.stderr.contains("splits test, train"), "{}", r.stderr);
}

/// A folder whose very name holds braces is that folder, not a pattern.
#[test]
fn a_folder_named_with_braces_is_packed_as_named() {
    let t = tempdir();
    jpeg_folder(&t.path().join("d{1}"), 2, 24, 16);
    pack(t.path().join("d{1}"), t.path().join("out"))
        .args(["-q"])
        .ok();
    assert_eq!(manifest(&t.path().join("out")).totals.samples, 2);
}

/// A re-pack of a labelled shardtool dataset with plain WebDataset shards (no manifest beside
/// them): those that carry no labels (captions from elsewhere) come unlabelled, the dataset
/// keeping its class names; a plain shard's label numbers a class no manifest names, so its
/// sample fails, naming why.
#[test]
fn a_repack_with_plain_shards_packs_the_unlabelled_and_fails_the_labelled() {
    let t = tempdir();
    jpeg_folder(&t.path().join("imgs"), 3, 24, 16);
    pack(t.path().join("imgs"), t.path().join("a"))
        .args(["-q"])
        .ok();
    let rows: Vec<String> = (0..2)
        .map(|i| {
            t.path()
                .join(format!("imgs/c/{i}.jpg"))
                .display()
                .to_string()
        })
        .collect();
    write_file(
        t.path().join("u.csv"),
        format!("path\n{}\n", rows.join("\n")),
    );
    pack_list(t.path().join("u.csv"), t.path().join("u"))
        .args(["-q"])
        .ok();
    for (from, to) in [("u", "plain"), ("a", "loose")] {
        std::fs::create_dir(t.path().join(to)).unwrap();
        for s in &manifest(&t.path().join(from)).shards {
            let file = |d: &str| t.path().join(d).join(&s.file);
            std::fs::copy(file(from), file(to)).unwrap();
        }
    }
    // Another tool's manifest.json leaves shards plain; one that is no JSON is refused.
    write_file(
        t.path().join("plain/manifest.json"),
        r#"{"name": "captions"}"#,
    );
    write_file(t.path().join("broken/manifest.json"), "{not json");
    std::fs::copy(
        t.path().join("plain/manifest.json"),
        t.path().join("broken/p.tar"),
    )
    .unwrap();
    let r = pack(t.path().join("broken/p.tar"), t.path().join("no"))
        .args(["--input-format", "wds"])
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("cannot be read"), "{}", r.stderr);
    // (The same images packed twice have the same keys: numbered afresh.)
    let out = t.path().join("out");
    pack(
        format!("{}/{{a,plain,loose}}/*.tar", t.path().display()),
        &out,
    )
    .args(["--input-format", "wds", "--keys", "index", "-q"])
    .ok();
    let m = manifest(&out);
    assert_eq!((m.totals.samples, m.inputs.failed), (5, 3));
    assert_eq!(m.classes, ["c"]);
    let samples = wds_samples(&out);
    assert_eq!(samples.iter().filter(|s| s.cls < 0).count(), 2);
    assert_eq!(samples.iter().filter(|s| s.cls == 0).count(), 3);
    let errs = errors(&out);
    assert!(
        errs.iter().all(|e| e.kind == "bad_label"
            && e.path.contains("loose")
            && e.message.contains("pack them apart")),
        "{errs:?}"
    );
}
