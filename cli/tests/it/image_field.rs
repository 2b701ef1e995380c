//! A WebDataset sample's fields through pack: which is its image (the first of the known image
//! fields, or the one `--image-column` names: a stereo pair's `left.jpg`), the others carried as
//! they are, and what is said when an input's json takes the place of shardtool's or a sample
//! holds several images.

use crate::common::*;
use crate::pack_inputs::tar_fields;

#[test]
fn image_column_names_a_webdataset_samples_image_field() {
    let t = tempdir();
    // The two views differ in shape, so the packed size tells which one was the image.
    let (left, right) = (jpeg(&pattern(64, 48, 1)), jpeg(&pattern(48, 64, 2)));
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for key in ["a", "b"] {
        w.append(&format!("{key}.left.jpg"), &left).unwrap();
        w.append(&format!("{key}.right.jpg"), &right).unwrap();
    }
    w.append("c.right.jpg", &right).unwrap();
    w.append("README", b"a member with no extension").unwrap();
    let input = t.path().join("in");
    write_file(input.join("stereo-000000.tar"), w.finish().unwrap());
    // No field of the default order: nothing to pack, saying what was looked for.
    let r = pack(&input, t.path().join("none")).run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("with an image field (jpg, jpeg"),
        "{}",
        r.stderr
    );
    let ds = t.path().join("ds");
    pack(&input, &ds)
        .args(["--image-column", "Left.JPG", "--resize", "shorter:24"])
        .ok();
    let samples = tar_fields(&ds);
    assert_eq!(samples.len(), 2, "{:?}", samples.keys());
    for fields in samples.values() {
        assert_eq!(decode(&fields["jpg"]).dimensions(), (32, 24));
        assert!(
            fields["right.jpg"] == right,
            "the other view is carried as it was"
        );
        assert!(!fields.contains_key("left.jpg"));
    }
    let errs = check_accounting(&ds, &[]);
    let c = errs
        .values()
        .find(|e| e.path.ends_with(":c"))
        .expect("c fails");
    assert_eq!(c.kind, "no_image", "{c:?}");
    assert!(
        c.message.contains("Left.JPG, named by --image-column"),
        "{c:?}"
    );
    let readme = errs.values().find(|e| e.path.ends_with(":README")).unwrap();
    assert!(readme
        .message
        .ends_with("it has no field (a name without an extension)"));
    // An ImageFolder's images are its files: the option is refused there.
    let r = pack(sample_data(), t.path().join("folder"))
        .args(["--image-column", "x.jpg"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("names a WebDataset sample's image field"),
        "{}",
        r.stderr
    );
    // A misspelt field that no sample has leaves an earlier dataset whole under --overwrite (it
    // was cleared before the samples failed), local or planned; so does an empty input folder.
    let files = |dir: &std::path::Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = files(&ds);
    std::fs::create_dir_all(t.path().join("empty")).unwrap();
    // A list whose paths are all wrong, and a folder of files that are no images, too.
    let list = t.path().join("miss.csv");
    write_file(&list, "path,label\nnope1.jpg,a\nnope2.jpg,b\n");
    let texts = t.path().join("texts");
    write_file(texts.join("c/1.jpg"), "hello");
    // An ICO (a format the image crate knows but shardtool does not decode), and a list naming
    // a FIFO, which is never opened (it would wait for a writer).
    write_file(texts.join("c/2.png"), b"\x00\x00\x01\x00\x01\x00\x10\x10");
    let fifo = t.path().join("ff.jpg");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo_list = t.path().join("fifo.csv");
    write_file(&fifo_list, "path,label\nff.jpg,0\n");
    for (input, extra) in [
        (&input, &["--image-column", "lfet.jpg"][..]),
        (
            &input,
            &["--image-column", "lfet.jpg", "--shard-samples", "1"][..],
        ),
        (&t.path().join("empty"), &[][..]),
        (&list, &["--input-format", "list"][..]),
        (
            &list,
            &["--input-format", "list", "--shard-samples", "1"][..],
        ),
        (&texts, &[][..]),
        (&fifo_list, &["--input-format", "list"][..]),
    ] {
        let r = pack(input, &ds).args(["--overwrite"]).args(extra).run();
        r.assert_code(1);
        assert!(
            r.stderr.contains("no usable image") && r.stderr.contains("is left as it was"),
            "{}",
            r.stderr
        );
        assert_eq!(files(&ds), before, "{extra:?}");
        assert!(!ds.join("_plan").exists());
    }
    // Without --overwrite the output is simply not empty.
    let r = pack(t.path().join("empty"), &ds).run();
    r.assert_code(2);
    assert!(r.stderr.contains("is not empty"), "{}", r.stderr);
}

/// An input's json carried in place of shardtool's records no sizes: a resize says so.
#[test]
fn a_resize_beside_the_inputs_own_json_is_pointed_out() {
    let t = tempdir();
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for key in ["a", "b"] {
        w.append(&format!("{key}.jpg"), &jpeg(&pattern(64, 48, 1)))
            .unwrap();
        w.append(&format!("{key}.json"), br#"{"boxes": [[1, 2, 30, 40]]}"#)
            .unwrap();
    }
    let input = t.path().join("in");
    write_file(input.join("det-000000.tar"), w.finish().unwrap());
    let note = "note: the inputs' own .json is carried in place of shardtool's";
    let resized = pack(&input, t.path().join("resized"))
        .args(["--resize", "shorter:24"])
        .ok();
    assert!(resized.stderr.contains(note), "{}", resized.stderr);
    let kept = pack(&input, t.path().join("kept")).ok();
    assert!(!kept.stderr.contains(note), "{}", kept.stderr);
}

/// Samples holding two image fields (a `.jpg` photo and a `.png` mask): the one transformed is
/// said, unless `--image-column` chose it.
#[test]
fn several_images_in_a_sample_are_pointed_out() {
    let t = tempdir();
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for key in ["a", "b"] {
        w.append(&format!("{key}.jpg"), &jpeg(&pattern(64, 48, 1)))
            .unwrap();
        w.append(
            &format!("{key}.png"),
            &png(&image::DynamicImage::ImageRgb8(pattern(64, 48, 2))),
        )
        .unwrap();
    }
    let input = t.path().join("in");
    write_file(input.join("seg-000000.tar"), w.finish().unwrap());
    let note = "note: samples hold several images (jpg, png): the first";
    let r = pack(&input, t.path().join("a"))
        .args(["--resize", "shorter:24"])
        .ok();
    assert!(r.stderr.contains(note), "{}", r.stderr);
    let samples = tar_fields(&t.path().join("a"));
    assert!(samples
        .values()
        .all(|f| decode(&f["png"]).dimensions() == (64, 48)));
    let r = pack(&input, t.path().join("b"))
        .args(["--resize", "shorter:24", "--image-column", "jpg"])
        .ok();
    assert!(!r.stderr.contains("several images"), "{}", r.stderr);
}

/// A file name's control characters and bidi overrides reach the terminal escaped in pack's
/// `failed:` lines, as class names do elsewhere.
#[test]
fn failed_lines_escape_what_a_terminal_would_act_on() {
    let t = tempdir();
    let input = t.path().join("in");
    save_rgb(input.join("c/ok.png"), &pattern(8, 8, 1));
    write_file(input.join("c/y\u{1b}[31mred.jpg"), "not an image");
    write_file(input.join("c/x\u{202e}gpj.jpg"), "not an image");
    // Names an escape would make look alike are quoted, so each reads back as itself: a newline
    // and a backslash before an n, a trailing space, a combining accent and a composed one.
    write_file(input.join("c/new\nline.jpg"), "not an image");
    write_file(input.join("c/new\\nline.jpg"), "not an image");
    for class in ["trail", "trail ", "caf\u{e9}", "cafe\u{301}"] {
        save_rgb(input.join(class).join("ok.png"), &pattern(8, 8, 1));
    }
    let r = pack(&input, t.path().join("out")).run();
    r.assert_code(0);
    assert!(!r.stderr.contains(['\u{1b}', '\u{202e}']), "{:?}", r.stderr);
    assert!(r.stderr.contains("y\\u{1b}[31mred.jpg"), "{}", r.stderr);
    assert!(r.stderr.contains("x\\u{202e}gpj.jpg"), "{}", r.stderr);
    for quoted in [r#""c/new\nline.jpg""#, r#""c/new\\nline.jpg""#] {
        assert!(r.stderr.contains(quoted), "{quoted} in {}", r.stderr);
    }
    let classes = "classes 5: c, \"cafe\\u{301}\", caf\u{e9}, trail, \"trail \"";
    assert!(r.stdout.contains(classes), "{}", r.stdout);
    // The error of a pack that packs nothing quotes the first name escaped too.
    write_file(t.path().join("only/c\u{1b}[2J/x\ry.jpg"), "not an image");
    let r = pack(t.path().join("only"), t.path().join("none")).run();
    let err = &r.assert_code(1).stderr;
    assert!(
        !err.contains(['\u{1b}', '\r']) && err.contains("c\\u{1b}[2J/x\\ry.jpg"),
        "{err}"
    );
}

/// Under `--overwrite`, inputs that look like images but none of which decodes (or that pass
/// `--max-errors` before a shard is written) leave the earlier dataset whole, report and all; the
/// first new shard ready replaces it.
#[test]
fn an_overwrite_whose_inputs_all_fail_to_decode_keeps_the_earlier_dataset() {
    let t = tempdir();
    let ds = t.path().join("ds");
    let good = t.path().join("good");
    jpeg_folder(&good, 4, 32, 24);
    pack(&good, &ds).ok();
    // Every entry of the folder, hidden ones too, with its bytes.
    let files = |dir: &std::path::Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into();
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        v.sort();
        v
    };
    let before = files(&ds);
    // JPEG signatures with nothing after them: found as images, failed when decoded; in a
    // folder, a tar shard and a gzipped one (staged, decompressed into the output, first).
    let bad = t.path().join("bad");
    let good_jpg = || good.join("c/0.jpg");
    let broken = |i: u32| [&b"\xff\xd8\xff\xe0"[..], format!("broken {i}").as_bytes()].concat();
    let shard = |name: &str, good: bool| {
        let mut w = shardtool_wds::TarWriter::new(Vec::new());
        for i in 0..3 {
            w.append(&format!("s{i}.jpg"), &broken(i)).unwrap();
        }
        if good {
            w.append("ok.jpg", &std::fs::read(good_jpg()).unwrap())
                .unwrap();
        }
        let tar = t.path().join(name);
        write_file(&tar, w.finish().unwrap());
        let gzip = std::process::Command::new("gzip")
            .arg("-kf")
            .arg(&tar)
            .status();
        assert!(gzip.unwrap().success());
        (tar.clone(), tar.with_extension("tar.gz"))
    };
    for i in 0..3 {
        write_file(bad.join(format!("c/{i}.jpg")), broken(i));
    }
    let (tar, gz) = shard("bad-000000.tar", false);
    for (input, extra) in [
        (&bad, &[][..]),
        (&bad, &["--max-errors", "0"][..]),
        (&tar, &["--input-format", "wds"][..]),
        (&gz, &["--input-format", "wds"][..]),
    ] {
        let r = pack(input, &ds).arg("--overwrite").args(extra).run();
        let err = &r.assert_code(1).stderr;
        assert!(err.contains("is left as it was") && err.contains("pack into an empty folder"));
        assert_eq!(files(&ds), before, "{input:?} {extra:?}");
    }
    // With one good image among them, its shard replaces the earlier dataset.
    std::fs::copy(good_jpg(), bad.join("c/ok.jpg")).unwrap();
    let (_, gz) = shard("some-000000.tar", true);
    for input in [&bad, &gz] {
        pack(input, &ds)
            .args(["--overwrite", "--input-format"])
            .arg(match input == &bad {
                true => "imagefolder",
                false => "wds",
            })
            .ok();
        let m = manifest(&ds);
        assert_eq!((m.totals.samples, m.inputs.failed), (1, 3));
        assert_eq!(errors(&ds).len(), 3);
        let mut names: Vec<String> = files(&ds).into_iter().map(|(n, _)| n).collect();
        let mut expected: Vec<String> = m.shards.iter().map(|s| s.file.clone()).collect();
        expected.extend(["errors.jsonl".into(), "manifest.json".into()]);
        names.sort();
        expected.sort();
        assert_eq!(names, expected, "{input:?}");
    }
}
