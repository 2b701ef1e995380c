//! EXIF orientation: images come out upright, `orig_width`/`orig_height` are the upright size,
//! for the real orientation-6 photo of sample-data, for Pillow-made fixtures and for every one of
//! the eight orientations, on the full-size and the DCT-scaled JPEG paths and in packed shards.

use crate::common::*;
use image::RgbImage;
use std::path::Path;

/// The upright quadrant colours `(top-left, top-right, bottom-left, bottom-right)` of
/// [`quadrants`] stored with EXIF orientation `o` (the EXIF definition: 6 means the stored image
/// must be turned 90° clockwise to be upright, and so on).
fn upright_corners(o: u16) -> [[u8; 3]; 4] {
    let [tl, tr, bl, br] = [RED, GREEN, BLUE, WHITE];
    match o {
        1 => [tl, tr, bl, br],
        2 => [tr, tl, br, bl],
        3 => [br, bl, tr, tl],
        4 => [bl, br, tl, tr],
        5 => [tl, bl, tr, br],
        6 => [bl, tl, br, tr],
        7 => [br, tr, bl, tl],
        8 => [tr, br, tl, bl],
        _ => unreachable!(),
    }
}

#[track_caller]
fn check_corners(img: &RgbImage, o: u16, what: &str) {
    let (w, h) = img.dimensions();
    let at = [
        (w / 4, h / 4),
        (3 * w / 4, h / 4),
        (w / 4, 3 * h / 4),
        (3 * w / 4, 3 * h / 4),
    ];
    for ((x, y), c) in at.into_iter().zip(upright_corners(o)) {
        let p = img.get_pixel(x, y).0;
        assert!(
            near(p, c, 40),
            "{what}, orientation {o}: pixel ({x},{y}) = {p:?}, expected {c:?}"
        );
    }
}

fn pack_png(root: &Path, ds: &Path, extra: &[&str]) -> Vec<WdsSample> {
    pack(root, ds).args(["--encode", "png"]).args(extra).ok();
    assert!(errors(ds).is_empty(), "{:?}", errors(ds));
    wds_samples(ds)
}

#[test]
fn sample_orientation_6_photo_is_upright() {
    let t = tempdir();
    let root = t.path().join("in");
    copy(
        sample_data().join("insect/ladybird_06_orient6.jpg"),
        root.join("insect/ladybird_06_orient6.jpg"),
    );
    let stored = image::open(root.join("insect/ladybird_06_orient6.jpg")).unwrap();
    assert_eq!((stored.width(), stored.height()), (313, 209), "fixture");

    // Default JPEG output: json and the decoded jpg are 209 wide, 313 tall.
    let ds = t.path().join("jpg");
    pack(&root, &ds).ok();
    let s = &wds_samples(&ds)[0];
    assert_eq!(s.field, "jpg");
    assert_eq!(s.orig_size(), (209, 313));
    assert_eq!(s.size(), (209, 313));
    assert_eq!(s.decode().dimensions(), (209, 313));

    // Upright means: the stored picture turned 90° clockwise.
    let ds = t.path().join("png");
    let s = &pack_png(&root, &ds, &[])[0];
    let got = s.decode();
    let turned = image::imageops::rotate90(&stored.into_rgb8());
    assert!(
        mean_diff(&got, &turned) < 3.0,
        "{}",
        mean_diff(&got, &turned)
    );

    // With a resize, the plan uses the upright size.
    let ds = t.path().join("small");
    let s = &pack_png(&root, &ds, &["--resize", "shorter:100"])[0];
    assert_eq!(s.orig_size(), (209, 313));
    assert_eq!(s.size(), (100, scaled(313, 100, 209)));
    assert_eq!(s.decode().dimensions(), s.size());
}

#[test]
fn pillow_fixtures_with_orientation_3_6_8_are_upright() {
    let t = tempdir();
    let root = t.path().join("in");
    for o in [3, 6, 8] {
        copy(
            fixture(&format!("orient{o}.jpg")),
            root.join(format!("c/orient{o}.jpg")),
        );
    }
    let ds = t.path().join("ds");
    let samples = by_source(&pack_png(&root, &ds, &[]));
    for o in [3u16, 6, 8] {
        let s = &samples[&format!("c/orient{o}.jpg")];
        let expect = if o == 3 { (48, 32) } else { (32, 48) };
        assert_eq!(s.orig_size(), expect, "orientation {o}");
        assert_eq!(s.size(), expect, "orientation {o}");
        check_corners(&s.decode(), o, "pillow fixture");
    }
}

/// Writes the quadrant picture stored `w`x`h` with every orientation 1..=8.
fn all_orientations(root: &Path, w: u32, h: u32) {
    let base = jpeg(&quadrants(w, h));
    for o in 1..=8u16 {
        write_file(
            root.join(format!("c/o{o}.jpg")),
            with_exif_orientation(&base, o),
        );
    }
}

#[test]
fn every_orientation_full_size() {
    let t = tempdir();
    let root = t.path().join("in");
    all_orientations(&root, 64, 40);
    let ds = t.path().join("ds");
    let samples = by_source(&pack_png(&root, &ds, &[]));
    for o in 1..=8u16 {
        let s = &samples[&format!("c/o{o}.jpg")];
        let expect = if o >= 5 { (40, 64) } else { (64, 40) };
        assert_eq!(s.orig_size(), expect, "orientation {o}");
        assert_eq!(s.size(), expect, "orientation {o}");
        check_corners(&s.decode(), o, "full size");
        // The json says which it was turned from (carried fields are not turned).
        let said = s.json.get("orientation").and_then(|v| v.as_u64());
        assert_eq!(said, (o > 1).then_some(u64::from(o)), "orientation {o}");
    }
    // Packed again, the image is upright: the turn is the input's, not the new sample's.
    let again = t.path().join("again");
    let repacked = pack_png(&ds, &again, &[]);
    for s in &repacked {
        let o = s.json["input_source"].as_str().unwrap().to_string();
        let o: u64 = o
            .trim_start_matches("c/o")
            .trim_end_matches(".jpg")
            .parse()
            .unwrap();
        assert!(s.json.get("orientation").is_none(), "{:?}", s.json);
        let was = s.json.get("input_orientation").and_then(|v| v.as_u64());
        assert_eq!(was, (o > 1).then_some(o), "{:?}", s.json);
    }
}

#[test]
fn every_orientation_with_dct_scaled_decode() {
    // Stored 640x320: shorter:40 lets libjpeg-turbo decode at 1/8 scale, then the picture is
    // turned; size and content must be as on the full-size path.
    let t = tempdir();
    let root = t.path().join("in");
    all_orientations(&root, 640, 320);
    let ds = t.path().join("ds");
    let samples = by_source(&pack_png(&root, &ds, &["--resize", "shorter:40"]));
    for o in 1..=8u16 {
        let s = &samples[&format!("c/o{o}.jpg")];
        let (orig, size) = if o >= 5 {
            ((320, 640), (40, 80))
        } else {
            ((640, 320), (80, 40))
        };
        assert_eq!(s.orig_size(), orig, "orientation {o}");
        assert_eq!(s.size(), size, "orientation {o}");
        check_corners(&s.decode(), o, "DCT-scaled");
    }
}

#[test]
fn every_orientation_in_packed_crop_shards() {
    let t = tempdir();
    let root = t.path().join("in");
    all_orientations(&root, 96, 48);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--format", "packed", "--resize", "crop:24x24"])
        .ok();
    let (recs, _) = packed_samples(&ds);
    assert_eq!(recs.len(), 8);
    for r in &recs {
        let src = r.meta["source"].as_str().unwrap();
        let o: u16 = src["c/o".len()..src.len() - 4].parse().unwrap();
        assert_eq!((r.width, r.height), (24, 24));
        let expect = if o >= 5 { (48, 96) } else { (96, 48) };
        assert_eq!(
            (
                json_u32(&r.meta, "orig_width"),
                json_u32(&r.meta, "orig_height")
            ),
            expect
        );
        // The centre crop of a 2:1 picture: for 1..=4 it is the middle half, whose quadrants are
        // the picture's; for 5..=8 (1:2) likewise.
        check_corners(&r.image(), o, "packed crop");
    }
}

#[test]
fn png_exif_orientation_is_applied() {
    // Orientation is read from any container that carries EXIF; PNG has the eXIf chunk.
    let t = tempdir();
    let root = t.path().join("in");
    let base = png(&image::DynamicImage::ImageRgb8(quadrants(64, 40)));
    for o in [3u16, 6, 8] {
        write_file(
            root.join(format!("c/o{o}.png")),
            png_with_exif_orientation(&base, o),
        );
    }
    let ds = t.path().join("ds");
    let samples = by_source(&pack_png(&root, &ds, &[]));
    for o in [3u16, 6, 8] {
        let s = &samples[&format!("c/o{o}.png")];
        let expect = if o >= 5 { (40, 64) } else { (64, 40) };
        assert_eq!(s.orig_size(), expect, "orientation {o}");
        assert_eq!(s.decode().dimensions(), expect, "orientation {o}");
        check_corners(&s.decode(), o, "png eXIf");
    }
}

#[test]
fn keep_re_encodes_a_jpeg_that_needs_rotation() {
    let t = tempdir();
    let root = t.path().join("in");
    let bytes = with_exif_orientation(&jpeg(&quadrants(64, 40)), 6);
    write_file(root.join("c/o6.jpg"), &bytes);
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--encode", "keep"]).ok();
    let s = &wds_samples(&ds)[0];
    assert_ne!(s.image, bytes, "a rotated JPEG cannot be stored verbatim");
    assert_eq!(s.decode().dimensions(), (40, 64));
    check_corners(&s.decode(), 6, "keep");
}
