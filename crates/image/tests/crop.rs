//! Train-time crops against a reference: the same box cut from the full decode and resized with
//! the same filter, on the sample photos and on re-encodings of them at every chroma subsampling.

use shardtool_core::{Limits, Rgb8Image};
use shardtool_image::{
    crop_pixels_into, decode_crop_into, transform, CropBox, CropOptions, Encode, ErrorKind, Filter,
    Output, TransformSpec,
};
use std::path::PathBuf;

fn sample(rel: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../sample-data/imagefolder")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn full_decode(bytes: &[u8]) -> Rgb8Image {
    let spec = TransformSpec {
        encode: Encode::Raw,
        ..TransformSpec::default()
    };
    match transform(bytes, &spec).unwrap().output {
        Output::Pixels(p) => p,
        Output::Encoded { .. } => panic!("raw output expected"),
    }
}

fn options(side: u32, fused: bool) -> CropOptions {
    CropOptions {
        width: side,
        height: side,
        flip: false,
        filter: Filter::Bilinear,
        fused,
    }
}

/// The reference: the box cut from the full upright decode, resized with the same filter.
fn reference(bytes: &[u8], b: CropBox, o: &CropOptions) -> Vec<u8> {
    let img = full_decode(bytes);
    let mut out = vec![0; (o.width * o.height * 3) as usize];
    crop_pixels_into(&img.pixels, img.width, img.height, b, o, &mut out).unwrap();
    out
}

fn mean_abs_error(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let sum: u64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    sum as f64 / a.len() as f64
}

/// Boxes across the image: corners, odd offsets (not on an MCU boundary), thin and whole.
fn boxes(w: u32, h: u32) -> Vec<CropBox> {
    let (w, h) = (f64::from(w), f64::from(h));
    vec![
        CropBox {
            x: 0.0,
            y: 0.0,
            w,
            h,
        },
        CropBox {
            x: 0.0,
            y: 0.0,
            w: w / 2.0,
            h: h / 2.0,
        },
        CropBox {
            x: 37.0,
            y: 21.0,
            w: w / 3.0,
            h: h / 2.0,
        },
        CropBox {
            x: w - 91.0,
            y: h - 77.0,
            w: 91.0,
            h: 77.0,
        },
        CropBox {
            x: 13.5,
            y: 9.25,
            w: w * 0.6,
            h: h * 0.7,
        },
        CropBox {
            x: w / 2.0 - 5.0,
            y: 3.0,
            w: 17.0,
            h: h - 6.0,
        },
    ]
}

fn reencode(bytes: &[u8], subsamp: turbojpeg::Subsamp) -> Vec<u8> {
    let img = full_decode(bytes);
    let image = turbojpeg::Image {
        pixels: img.pixels.as_slice(),
        width: img.width as usize,
        pitch: img.width as usize * 3,
        height: img.height as usize,
        format: turbojpeg::PixelFormat::RGB,
    };
    turbojpeg::compress(image, 90, subsamp).unwrap().to_vec()
}

fn jpegs() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for f in [
        "flower/freshflower_03.jpg",
        "insect/ladybird_02.jpg",
        "landscape/storm_02_gray.jpg",
    ] {
        v.push((f.to_string(), sample(f)));
    }
    let base = sample("landscape/dune_04.jpg");
    for s in [
        turbojpeg::Subsamp::None,
        turbojpeg::Subsamp::Sub2x1,
        turbojpeg::Subsamp::Sub2x2,
        turbojpeg::Subsamp::Sub1x2,
        turbojpeg::Subsamp::Sub4x1,
        turbojpeg::Subsamp::Sub1x4,
        turbojpeg::Subsamp::Gray,
    ] {
        v.push((format!("dune_04 as {s:?}"), reencode(&base, s)));
    }
    v
}

#[test]
fn region_decode_matches_the_full_decode_within_two_levels() {
    let limits = Limits::default();
    for (name, bytes) in jpegs() {
        let full = full_decode(&bytes);
        for b in boxes(full.width, full.height) {
            for side in [32, 96, 224] {
                let o = options(side, true);
                let mut out = vec![0; (side * side * 3) as usize];
                let r = decode_crop_into(&bytes, &limits, |_, _| b, &o, &mut out).unwrap();
                assert_eq!(r.source, (full.width, full.height), "{name}");
                assert!(r.region_decoded, "{name}");
                if r.dct_scale != 8 {
                    continue;
                }
                let mae = mean_abs_error(&out, &reference(&bytes, b, &o));
                assert!(
                    mae <= 2.0,
                    "{name} {b:?} -> {side}: mean abs error {mae:.3}"
                );
            }
        }
    }
}

#[test]
fn the_unfused_path_is_the_reference_exactly() {
    let limits = Limits::default();
    for (name, bytes) in jpegs() {
        let full = full_decode(&bytes);
        for b in boxes(full.width, full.height) {
            let o = options(64, false);
            let mut out = vec![0; 64 * 64 * 3];
            let r = decode_crop_into(&bytes, &limits, |_, _| b, &o, &mut out).unwrap();
            assert_eq!((r.dct_scale, r.region_decoded), (8, false), "{name}");
            assert_eq!(out, reference(&bytes, b, &o), "{name} {b:?}");
        }
    }
}

#[test]
fn dct_scaled_crops_stay_close_to_the_reference() {
    // A 1884x1060 JPEG (dune_04 enlarged 4x), cropped to 64 px: decoded at 1/8 to 3/8 scale.
    let small = full_decode(&sample("landscape/dune_04.jpg"));
    let mut big = vec![0u8; small.pixels.len() * 16];
    let (w, h) = (small.width * 4, small.height * 4);
    for y in 0..h {
        for x in 0..w {
            let s = ((y / 4) * small.width + x / 4) as usize * 3;
            let d = (y * w + x) as usize * 3;
            big[d..d + 3].copy_from_slice(&small.pixels[s..s + 3]);
        }
    }
    let image = turbojpeg::Image {
        pixels: big.as_slice(),
        width: w as usize,
        pitch: w as usize * 3,
        height: h as usize,
        format: turbojpeg::PixelFormat::RGB,
    };
    let bytes = turbojpeg::compress(image, 90, turbojpeg::Subsamp::Sub2x2)
        .unwrap()
        .to_vec();
    let limits = Limits::default();
    let mut scales = Vec::new();
    for b in boxes(w, h) {
        let o = options(64, true);
        let mut out = vec![0; 64 * 64 * 3];
        let r = decode_crop_into(&bytes, &limits, |_, _| b, &o, &mut out).unwrap();
        scales.push(r.dct_scale);
        // The scaled box keeps a reducing gap of 2: at least 128 px each way.
        let s = f64::from(r.dct_scale) / 8.0;
        assert!(
            r.dct_scale == 8 || (b.w * s >= 128.0 && b.h * s >= 128.0),
            "{b:?}"
        );
        let mae = mean_abs_error(&out, &reference(&bytes, b, &o));
        // libjpeg-turbo's reduced IDCT averages each block where the reference filters pixels;
        // with a reducing gap of 2 that stays well under a level on average (0.25 measured).
        assert!(
            mae <= 1.0,
            "{b:?} at {}/8: mean abs error {mae:.3}",
            r.dct_scale
        );
    }
    assert!(
        scales.iter().any(|&m| m < 8),
        "no crop was DCT-scaled: {scales:?}"
    );
}

#[test]
fn flip_mirrors_the_crop() {
    let bytes = sample("insect/ladybird_02.jpg");
    let b = CropBox {
        x: 40.0,
        y: 30.0,
        w: 200.0,
        h: 150.0,
    };
    let limits = Limits::default();
    let mut plain = vec![0; 48 * 48 * 3];
    let mut flipped = plain.clone();
    decode_crop_into(&bytes, &limits, |_, _| b, &options(48, true), &mut plain).unwrap();
    let o = CropOptions {
        flip: true,
        ..options(48, true)
    };
    decode_crop_into(&bytes, &limits, |_, _| b, &o, &mut flipped).unwrap();
    for (p, f) in plain.chunks(48 * 3).zip(flipped.chunks(48 * 3)) {
        let mirrored: Vec<u8> = p.chunks(3).rev().flatten().copied().collect();
        assert_eq!(f, mirrored.as_slice());
    }
}

#[test]
fn rotated_jpegs_and_pngs_take_the_full_decode_with_their_upright_size() {
    let limits = Limits::default();
    for f in [
        "insect/ladybird_06_orient6.jpg",
        "flower/garden_04_rgba.png",
    ] {
        let bytes = sample(f);
        let full = full_decode(&bytes);
        let seen = std::cell::Cell::new(None);
        let b = CropBox {
            x: 10.0,
            y: 20.0,
            w: 100.0,
            h: 120.0,
        };
        let o = options(40, true);
        let mut out = vec![0; 40 * 40 * 3];
        let r = decode_crop_into(
            &bytes,
            &limits,
            |w, h| {
                seen.set(Some((w, h)));
                b
            },
            &o,
            &mut out,
        );
        let r = r.unwrap();
        assert!(!r.region_decoded, "{f}");
        assert_eq!(seen.get(), Some((full.width, full.height)), "{f}");
        assert_eq!(out, reference(&bytes, b, &o), "{f}");
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let limits = Limits::default();
    let good = sample("flower/freshflower_01.jpg");
    let b = |w: u32, h: u32| CropBox {
        x: 0.0,
        y: 0.0,
        w: f64::from(w),
        h: f64::from(h),
    };
    let mut out = vec![0; 16 * 16 * 3];
    for cut in [2, 20, 200, good.len() / 2] {
        let r = decode_crop_into(&good[..cut], &limits, b, &options(16, true), &mut out);
        assert!(r.is_err(), "cut at {cut} decoded");
    }
    assert!(decode_crop_into(b"garbage", &limits, b, &options(16, true), &mut out).is_err());
    let tiny = Limits {
        max_pixels: 1000,
        ..Limits::default()
    };
    let e = decode_crop_into(&good, &tiny, b, &options(16, true), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooManyPixels);
    let e = decode_crop_into(&good, &limits, b, &options(17, true), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Resize);
    // A box outside the image is clamped into it, not read past the end.
    let outside = |_: u32, _: u32| CropBox {
        x: 1e6,
        y: -5.0,
        w: 1e9,
        h: 3.0,
    };
    decode_crop_into(&good, &limits, outside, &options(16, true), &mut out).unwrap();
}

#[test]
fn a_jpeg_that_fails_leaves_the_next_ones_on_its_thread_decoding() {
    // A stream whose header repeats (a bogus Huffman table definition) left the thread's
    // libjpeg-turbo handle failing every later good JPEG, in the pack path and the crop path.
    let limits = Limits::default();
    let good = sample("flower/freshflower_01.jpg");
    let bogus = good[..400].repeat(3);
    let whole = |w: u32, h: u32| CropBox {
        x: 0.0,
        y: 0.0,
        w: f64::from(w),
        h: f64::from(h),
    };
    let raw = TransformSpec {
        encode: Encode::Raw,
        ..TransformSpec::default()
    };
    let jpeg = TransformSpec {
        encode: Encode::Jpeg,
        ..TransformSpec::default()
    };
    let mut out = vec![0; 16 * 16 * 3];
    for fused in [true, false] {
        assert!(transform(&bogus, &raw).is_err());
        let d = transform(&good, &raw).expect("a good JPEG after a bad one decodes");
        assert!(matches!(d.output, Output::Pixels(_)));
        assert!(transform(&good[..good.len() / 3], &jpeg).is_err());
        transform(&good, &jpeg).expect("and after a truncated one");
        assert!(decode_crop_into(&bogus, &limits, whole, &options(16, fused), &mut out).is_err());
        decode_crop_into(&good, &limits, whole, &options(16, fused), &mut out)
            .expect("a good JPEG after a bad one crops");
    }
}
