//! Output formats: `--encode keep|png|jpeg`, `--format packed` (fixed and variable shards) with
//! pixel parity against the lossless tar path, and `--compress zstd[:LEVEL]` for both formats.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn encode_keep_stores_untouched_jpegs_byte_for_byte() {
    let t = tempdir();
    let root = t.path().join("in");
    let small = jpeg(&pattern(64, 48, 1));
    let big = jpeg(&pattern(320, 240, 2));
    write_file(root.join("c/small.jpg"), &small);
    write_file(root.join("c/big.jpg"), &big);
    save_rgb(root.join("c/pic.png"), &pattern(30, 20, 3));
    let ds = t.path().join("ds");
    // shorter:100 shrinks big.jpg only: small.jpg is below the target and needs no change.
    pack(&root, &ds)
        .args(["--encode", "keep", "--resize", "shorter:100"])
        .ok();
    let m = manifest(&ds);
    assert_eq!(m.fields, ["cls", "jpg", "json"]);
    assert_eq!(m.pack["encode"], "keep");
    let s = by_source(&wds_samples(&ds));
    assert!(
        s["c/small.jpg"].image == small,
        "small.jpg is not stored verbatim"
    );
    assert_eq!(s["c/small.jpg"].size(), (64, 48));
    let b = &s["c/big.jpg"];
    assert_ne!(b.image, big, "a resized JPEG must be re-encoded");
    assert_eq!(b.size(), (133, 100));
    assert_eq!(b.decode().dimensions(), (133, 100));
    let p = &s["c/pic.png"];
    assert_eq!(p.field, "jpg");
    assert_eq!(
        image::guess_format(&p.image).unwrap(),
        image::ImageFormat::Jpeg
    );
    assert!(mean_diff(&p.decode(), &pattern(30, 20, 3)) < 12.0);

    // Without a resize every plain JPEG is kept, and the sample-data photos too.
    let ds2 = t.path().join("ds2");
    pack(&root, &ds2).args(["--encode", "keep"]).ok();
    let s = by_source(&wds_samples(&ds2));
    assert!(s["c/small.jpg"].image == small);
    assert!(s["c/big.jpg"].image == big);
}

#[test]
fn encode_keep_stores_a_jpeg_already_at_the_crop_size() {
    // crop:64x48 of a 64x48 image is no change at all: the JPEG needs no resize, rotation or
    // colour conversion, so --encode keep must store it byte for byte.
    let t = tempdir();
    let root = t.path().join("in");
    let bytes = jpeg(&pattern(64, 48, 7));
    write_file(root.join("c/exact.jpg"), &bytes);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--encode", "keep", "--resize", "crop:64x48"])
        .ok();
    let s = &wds_samples(&ds)[0];
    assert_eq!(s.size(), (64, 48));
    assert!(
        s.image == bytes,
        "a JPEG already at the crop size was re-encoded ({} bytes in, {} out)",
        bytes.len(),
        s.image.len()
    );
}

#[test]
fn encode_jpeg_respects_quality() {
    let t = tempdir();
    let root = t.path().join("in");
    save_rgb(root.join("c/p.png"), &pattern(96, 64, 4));
    let size_at = |q: &str| {
        let ds = t.path().join(format!("q{q}"));
        pack(&root, &ds).args(["--quality", q]).ok();
        assert_eq!(manifest(&ds).pack["quality"], q.parse::<u32>().unwrap());
        let s = wds_samples(&ds).remove(0);
        assert_eq!(s.field, "jpg");
        (s.image.len(), mean_diff(&s.decode(), &pattern(96, 64, 4)))
    };
    let (low, low_err) = size_at("20");
    let (high, high_err) = size_at("98");
    assert!(low < high, "quality 20 gave {low} bytes, 98 gave {high}");
    assert!(high_err < low_err);
}

#[test]
fn encode_png_is_lossless() {
    let t = tempdir();
    let root = t.path().join("in");
    let img = pattern(45, 33, 5);
    save_rgb(root.join("c/a.png"), &img);
    save_rgb(root.join("c/a.webp"), &img);
    save_rgb(root.join("c/a.bmp"), &img);
    write_file(root.join("c/a.jpg"), jpeg(&img));
    let png_ds = t.path().join("png");
    pack(&root, &png_ds).args(["--encode", "png"]).ok();
    assert_eq!(manifest(&png_ds).fields, ["cls", "json", "png"]);
    let s = by_source(&wds_samples(&png_ds));
    for src in ["c/a.png", "c/a.webp", "c/a.bmp"] {
        assert_eq!(s[src].field, "png");
        assert!(s[src].decode() == img, "{src}: pixels changed");
    }
    // For a JPEG the identity path is the raw decode stored by the packed format.
    let raw = t.path().join("raw");
    pack(&root, &raw).args(["--format", "packed"]).ok();
    let (recs, _) = packed_samples(&raw);
    let jpg = recs.iter().find(|r| r.meta["source"] == "c/a.jpg").unwrap();
    assert!(s["c/a.jpg"].decode() == jpg.image());
}

/// Packs `input` twice with the same seed and resize, as lossless PNG tars and as packed shards,
/// and checks that every key has the same label, metadata, size and pixels.
fn check_parity(input: &Path, work: &Path, resize: &str) -> usize {
    let tar = work.join(format!("tar-{}", resize.replace(':', "_")));
    let packed = work.join(format!("packed-{}", resize.replace(':', "_")));
    let common = ["--seed", "5", "--resize", resize, "--shard-samples", "16"];
    pack(input, &tar)
        .args(common)
        .args(["--encode", "png"])
        .ok();
    pack(input, &packed)
        .args(common)
        .args(["--format", "packed"])
        .ok();
    let tar_samples: BTreeMap<String, WdsSample> = wds_samples(&tar)
        .into_iter()
        .map(|s| (s.key.clone(), s))
        .collect();
    let (recs, _) = packed_samples(&packed);
    assert_eq!(recs.len(), tar_samples.len());
    for r in &recs {
        let s = &tar_samples[&r.key];
        assert_eq!(r.label, s.cls, "{}", r.key);
        assert_eq!(r.meta, s.json, "{}: metadata", r.key);
        assert_eq!((r.width, r.height), s.size(), "{}", r.key);
        assert!(
            r.image() == s.decode(),
            "{} ({}): pixels differ between the png tar and the packed shard ({resize})",
            r.key,
            s.source()
        );
        assert_eq!(r.shard, s.shard, "both roll at 16 samples");
    }
    assert_eq!(manifest(&tar).classes, manifest(&packed).classes);
    recs.len()
}

#[test]
fn png_tar_and_packed_shards_hold_the_same_pixels() {
    let t = tempdir();
    assert_eq!(check_parity(&sample_data(), t.path(), "shorter:48"), 45);
    assert_eq!(check_parity(&sample_data(), t.path(), "crop:40x32"), 45);
}

#[test]
fn packed_fixed_mode_with_crop() {
    let t = tempdir();
    let ds = t.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--format", "packed", "--resize", "crop:48x32"])
        .args(["--shard-samples", "20"])
        .ok();
    let m = manifest(&ds);
    assert_eq!(m.fields, ["key", "label", "pixels"]);
    assert_eq!(m.pack["format"], "packed");
    // The options as they applied: raw pixels, no JPEG quality, shards by count not size.
    assert_eq!(m.pack["encode"], "raw");
    assert!(m.pack["quality"].is_null(), "{:?}", m.pack);
    assert!(m.pack["shard_size"].is_null(), "{:?}", m.pack);
    assert_eq!(m.pack["shard_samples"], 20);
    // A finished dataset whose manifest records them as earlier versions did still resumes as
    // finished (the options that did not apply are not compared).
    let path = ds.join("manifest.json");
    let mut old: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    old["pack"]["encode"] = "jpeg".into();
    old["pack"]["quality"] = 90.into();
    old["pack"]["shard_size"] = 268_435_456.into();
    std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
    let again = pack(sample_data(), &ds)
        .args(["--format", "packed", "--resize", "crop:48x32"])
        .args(["--shard-samples", "20", "--resume"])
        .ok();
    assert!(again.stdout.contains("it was finished"), "{}", again.stdout);
    // So does a PNG-encoded tar dataset whose manifest records the default JPEG quality.
    let png = t.path().join("png");
    let opts = ["--encode", "png", "--shard-samples", "20"];
    pack(sample_data(), &png).args(opts).ok();
    let path = png.join("manifest.json");
    let mut old: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(old["pack"]["quality"].is_null(), "{:?}", old["pack"]);
    old["pack"]["quality"] = 90.into();
    std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
    let again = pack(sample_data(), &png).args(opts).arg("--resume").ok();
    assert!(again.stdout.contains("it was finished"), "{}", again.stdout);
    // Packing from it is refused, naming what it is (not "no image files").
    let r = pack(&ds, t.path().join("again")).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("a dataset of packed shards"),
        "{}",
        r.stderr
    );
    for s in &m.shards {
        assert!(s.file.ends_with(".safetensors"), "{}", s.file);
    }
    let (recs, modes) = packed_samples(&ds);
    assert_eq!(recs.len(), 45);
    assert_eq!(modes.len(), 3);
    assert!(modes
        .iter()
        .all(|m| *m == shardtool_packed::ShardMode::Fixed));
    for r in &recs {
        assert_eq!((r.width, r.height), (48, 32));
        assert_eq!(r.meta["label"].as_i64(), Some(r.label));
        let class = r.meta["source"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        assert_eq!(m.classes[r.label as usize], class);
        assert_eq!(json_u32(&r.meta, "width"), 48);
        assert_eq!(json_u32(&r.meta, "height"), 32);
    }
    let orient = recs
        .iter()
        .find(|r| r.meta["source"] == "insect/ladybird_06_orient6.jpg")
        .unwrap();
    assert_eq!(
        (
            json_u32(&orient.meta, "orig_width"),
            json_u32(&orient.meta, "orig_height")
        ),
        (209, 313)
    );
}

#[test]
fn packed_variable_mode_with_shorter() {
    let t = tempdir();
    let ds = t.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--format", "packed", "--resize", "shorter:40"])
        .ok();
    let (recs, modes) = packed_samples(&ds);
    assert_eq!(modes, [shardtool_packed::ShardMode::Variable]);
    assert_eq!(recs.len(), 45);
    let mut sizes = std::collections::HashSet::new();
    for r in &recs {
        let (ow, oh) = (
            json_u32(&r.meta, "orig_width"),
            json_u32(&r.meta, "orig_height"),
        );
        let expect = if ow <= oh {
            (40, scaled(oh, 40, ow))
        } else {
            (scaled(ow, 40, oh), 40)
        };
        assert_eq!((r.width, r.height), expect, "{}", r.meta["source"]);
        sizes.insert(expect);
    }
    assert!(sizes.len() > 5, "the shard holds many shapes");
}

/// `zstd -d FILE -o OUT`, as a user would restore a shard.
fn zstd_to_file(src: &Path, dst: &Path) -> Vec<u8> {
    let st = std::process::Command::new("zstd")
        .args(["-d", "-q", "-f"])
        .arg(src)
        .arg("-o")
        .arg(dst)
        .status()
        .expect("zstd must be installed to check .zst shards");
    assert!(st.success());
    std::fs::read(dst).unwrap()
}

fn check_zstd(format: &str, compress: &str) {
    let t = tempdir();
    let (plain, packed) = (t.path().join("plain"), t.path().join("z"));
    let common = [
        "--format",
        format,
        "--resize",
        "crop:24x24",
        "--shard-samples",
        "20",
    ];
    pack(sample_data(), &plain).args(common).ok();
    pack(sample_data(), &packed)
        .args(common)
        .args(["--compress", compress])
        .ok();
    let (mp, mz) = (manifest(&plain), manifest(&packed));
    let level = compress.split(':').nth(1).unwrap_or("3");
    assert_eq!(mz.pack["compression"], format!("zstd:{level}"));
    assert_eq!(mz.shards.len(), 3);
    let ext = if format == "wds" {
        ".tar.zst"
    } else {
        ".safetensors.zst"
    };
    for (p, z) in mp.shards.iter().zip(&mz.shards) {
        assert!(z.file.ends_with(ext), "{}", z.file);
        assert_eq!(z.compression, Some(shardtool_manifest::Compression::Zstd));
        let stored = std::fs::read(packed.join(&z.file)).unwrap();
        assert_eq!(stored.len() as u64, z.bytes);
        assert_eq!(xxh3(&stored), z.checksum);
        let restored = zstd_to_file(&packed.join(&z.file), &t.path().join("restored"));
        assert_eq!(
            Some(restored.len() as u64),
            z.uncompressed_bytes,
            "{}",
            z.file
        );
        assert_eq!(Some(xxh3(&restored)), z.uncompressed_checksum, "{}", z.file);
        // Compression changes nothing inside: the restored shard is the uncompressed one.
        let original = std::fs::read(plain.join(&p.file)).unwrap();
        assert!(restored == original, "{} differs from {}", z.file, p.file);
        assert!(z.bytes < original.len() as u64);
        assert_eq!(z.samples, p.samples);
    }
    // And the restored bytes are valid shards (read through the helpers, which decompress).
    if format == "wds" {
        assert_eq!(wds_samples(&packed).len(), 45);
    } else {
        assert_eq!(packed_samples(&packed).0.len(), 45);
    }
}

#[test]
fn zstd_wds_default_level() {
    check_zstd("wds", "zstd");
}

#[test]
fn zstd_wds_level_19() {
    check_zstd("wds", "zstd:19");
}

#[test]
fn zstd_packed_default_level() {
    check_zstd("packed", "zstd");
}

#[test]
fn zstd_packed_level_19() {
    check_zstd("packed", "zstd:19");
}
