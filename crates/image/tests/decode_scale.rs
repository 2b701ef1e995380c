//! Pixel fidelity of the DCT scale the pack decode picks, against a full-size decode resized with
//! the same filter: `gap:2` stays closer than `fast`, and no scale shifts the picture.

use shardtool_core::Rgb8Image;
use shardtool_image::{transform, DecodeScale, Encode, Output, ReducingGap, Resize, TransformSpec};
use std::path::PathBuf;

fn sample(rel: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../sample-data/imagefolder")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn pixels(bytes: &[u8], resize: Resize, decode_scale: DecodeScale) -> Rgb8Image {
    let spec = TransformSpec {
        resize,
        decode_scale,
        encode: Encode::Raw,
        ..TransformSpec::default()
    };
    match transform(bytes, &spec).unwrap().output {
        Output::Pixels(p) => p,
        Output::Encoded { .. } => panic!("raw output expected"),
    }
}

/// Mean absolute difference per channel value.
fn mae(a: &Rgb8Image, b: &Rgb8Image) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height));
    let sum: u64 = a
        .pixels
        .iter()
        .zip(&b.pixels)
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    sum as f64 / a.pixels.len() as f64
}

/// A JPEG (the `image` crate's encoder, q95) of diagonal sine stripes, `period` pixels apart.
fn stripes(w: u32, h: u32, period: f64) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        let phase = std::f64::consts::TAU * (f64::from(x) + 0.3 * f64::from(y)) / period;
        let v = 128.0 + 100.0 * phase.sin();
        image::Rgb([v as u8, (255.0 - v) as u8, 128])
    });
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95)
        .encode_image(&img)
        .unwrap();
    out
}

fn gap(hundredths: u16) -> DecodeScale {
    DecodeScale::Gap(ReducingGap::from_hundredths(hundredths).unwrap())
}

#[test]
fn gap_two_is_closer_to_the_full_decode_than_fast_on_the_sample_photos() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sample-data/imagefolder");
    let mut rels: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flat_map(|class| std::fs::read_dir(class.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
        .map(|p| p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned())
        .collect();
    rels.sort();
    assert!(rels.len() >= 40, "sample JPEGs: {rels:?}");
    // Targets small enough that `fast` shrinks every sample in the DCT domain; `gap:2` decodes
    // more than half of them at full size (their 4/8 would not keep the gap).
    let (mut sum_fast, mut sum_gap, mut n) = (0.0, 0.0, 0.0);
    for rel in &rels {
        let bytes = sample(rel);
        for r in [Resize::Shorter(64), Resize::Crop(56, 56)] {
            let full = pixels(&bytes, r, DecodeScale::Full);
            let fast = mae(&pixels(&bytes, r, DecodeScale::Fast), &full);
            let gap2 = mae(&pixels(&bytes, r, DecodeScale::default()), &full);
            assert!(fast > 0.0, "{rel} {r}: fast did not scale");
            // Measured at most 0.67x.
            assert!(gap2 <= fast, "{rel} {r}: gap:2 {gap2:.3}, fast {fast:.3}");
            sum_fast += fast;
            sum_gap += gap2;
            n += 1.0;
        }
    }
    let (fast, gap2) = (sum_fast / n, sum_gap / n);
    // Measured means: fast 0.99, gap:2 0.16 (per channel value, 0..255).
    assert!(
        gap2 < 0.5 * fast,
        "mean MAE gap:2 {gap2:.3}, fast {fast:.3}"
    );
    assert!(gap2 < 0.35, "mean MAE gap:2 {gap2:.3}");
}

#[test]
fn dct_scaled_decodes_are_not_shifted() {
    // Sizes that no scale below 8/8 divides: libjpeg-turbo rounds the scaled side up, and the
    // resampler must read only the fraction of the last column and row that is image. Smooth
    // stripes lose little to DCT scaling itself, so a shift is what an error here would show.
    for (w, h) in [(371, 249), (1001, 667), (333, 500)] {
        let bytes = stripes(w, h, 96.0);
        for r in [
            Resize::Shorter(64),
            Resize::Shorter(100),
            Resize::Crop(56, 56),
        ] {
            let full = pixels(&bytes, r, DecodeScale::Full);
            for d in [DecodeScale::Fast, gap(100), gap(150), gap(200)] {
                let e = mae(&pixels(&bytes, r, d), &full);
                // Measured at most 0.78 where a DCT scale was used; resampling the whole last
                // column and row as image gave 1.05 to 4 in the same cases.
                assert!(e < 1.0, "{w}x{h} {r} {d}: MAE {e:.3}");
            }
        }
    }
}

#[test]
fn the_decode_scale_changes_pixels_only_not_sizes() {
    let bytes = stripes(1001, 667, 16.0);
    for r in [
        Resize::Shorter(64),
        Resize::Fit(90, 90),
        Resize::Crop(112, 80),
    ] {
        let full = pixels(&bytes, r, DecodeScale::Full);
        let fast = pixels(&bytes, r, DecodeScale::Fast);
        let gap2 = pixels(&bytes, r, DecodeScale::default());
        assert_eq!((fast.width, fast.height), (full.width, full.height), "{r}");
        assert_eq!((gap2.width, gap2.height), (full.width, full.height), "{r}");
        // Stripes of period 16 come out of a 1/8 DCT scale at the Nyquist limit.
        let (g, f) = (mae(&gap2, &full), mae(&fast, &full));
        assert!(g < f, "{r}: gap:2 {g:.3}, fast {f:.3}");
    }
}
