//! Input colour types and container formats: every one ends up as RGB8 with the right pixels.
//! Outputs are packed with `--encode png` (lossless), so the decoded PNG is exactly what the
//! pipeline produced.

use crate::common::*;
use image::{DynamicImage, ImageBuffer, Luma, LumaA, Rgb, RgbImage, Rgba};
use std::collections::BTreeMap;
use std::path::Path;

/// Packs `root` with `--encode png` and returns the decoded outputs by source.
fn pack_png(root: &Path) -> BTreeMap<String, RgbImage> {
    let ds = root.join("../ds");
    pack(root, &ds).args(["--encode", "png"]).ok();
    let samples = wds_samples(&ds);
    assert!(errors(&ds).is_empty(), "{:?}", errors(&ds));
    samples
        .iter()
        .map(|s| {
            assert_eq!(s.field, "png");
            let img = s.decode();
            assert_eq!(img.dimensions(), s.size());
            assert_eq!(img.dimensions(), s.orig_size(), "no resize was asked");
            (s.source().to_string(), img)
        })
        .collect()
}

fn input_root() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempdir();
    let root = t.path().join("in");
    (t, root)
}

/// Flattening onto white as documented: `c' = (c·a + 255·(255 − a)) / 255`, rounded.
fn on_white(c: u8, a: u8) -> u8 {
    let (c, a) = (u32::from(c), u32::from(a));
    ((c * a + 255 * (255 - a) + 127) / 255) as u8
}

#[test]
fn lossless_rgb_containers_keep_exact_pixels() {
    let (_t, root) = input_root();
    let img = pattern(37, 23, 1);
    for ext in ["png", "bmp", "tif", "tiff", "webp"] {
        save_rgb(root.join(format!("c/rgb.{ext}")), &img);
    }
    let out = pack_png(&root);
    assert_eq!(out.len(), 5);
    for (src, got) in &out {
        assert_eq!(got, &img, "{src} pixels changed");
    }
}

#[test]
fn grayscale_l8_becomes_equal_rgb_channels() {
    let (_t, root) = input_root();
    let gray = ImageBuffer::from_fn(31, 17, |x, y| Luma([(x * 8 + y) as u8]));
    let dynimg = DynamicImage::ImageLuma8(gray.clone());
    save(root.join("c/gray.png"), &dynimg);
    save(root.join("c/gray.tif"), &dynimg);
    save(root.join("c/gray.jpg"), &dynimg);
    let out = pack_png(&root);
    for src in ["c/gray.png", "c/gray.tif"] {
        let got = &out[src];
        for (x, y, p) in got.enumerate_pixels() {
            let v = gray.get_pixel(x, y).0[0];
            assert_eq!(p.0, [v, v, v], "{src} ({x},{y})");
        }
    }
    // A greyscale JPEG: lossy, but still grey, and close to its source.
    let got = &out["c/gray.jpg"];
    let expect = DynamicImage::ImageLuma8(gray).into_rgb8();
    assert!(got.pixels().all(|p| p[0] == p[1] && p[1] == p[2]));
    assert!(mean_diff(got, &expect) < 3.0);
}

#[test]
fn luma_alpha_is_flattened_onto_white() {
    let (_t, root) = input_root();
    // Column x has alpha [0, 255, 128, 64][x % 4]; the grey level varies by row.
    let alphas = [0u8, 255, 128, 64];
    let la = ImageBuffer::from_fn(8, 6, |x, y| LumaA([(y * 40) as u8, alphas[x as usize % 4]]));
    save(
        root.join("c/la.png"),
        &DynamicImage::ImageLumaA8(la.clone()),
    );
    let got = &pack_png(&root)["c/la.png"];
    for (x, y, p) in got.enumerate_pixels() {
        let [l, a] = la.get_pixel(x, y).0;
        match a {
            0 => assert_eq!(p.0, [255, 255, 255], "transparent ({x},{y})"),
            255 => assert_eq!(p.0, [l, l, l], "opaque ({x},{y})"),
            _ => {
                let e = on_white(l, a);
                assert!(near(p.0, [e, e, e], 1), "({x},{y}) = {p:?}, expected {e}");
            }
        }
    }
}

#[test]
fn rgba_is_flattened_onto_white() {
    let (_t, root) = input_root();
    let alphas = [0u8, 255, 200, 30];
    let rgba = ImageBuffer::from_fn(12, 5, |x, y| {
        Rgba([(x * 20) as u8, (y * 50) as u8, 77, alphas[x as usize % 4]])
    });
    let dynimg = DynamicImage::ImageRgba8(rgba.clone());
    save(root.join("c/rgba.png"), &dynimg);
    save(root.join("c/rgba.webp"), &dynimg);
    save(root.join("c/rgba.tif"), &dynimg);
    let out = pack_png(&root);
    for src in ["c/rgba.png", "c/rgba.webp", "c/rgba.tif"] {
        let got = &out[src];
        for (x, y, p) in got.enumerate_pixels() {
            let [r, g, b, a] = rgba.get_pixel(x, y).0;
            match a {
                0 => assert_eq!(p.0, [255, 255, 255], "{src}: transparent ({x},{y})"),
                255 => assert_eq!(p.0, [r, g, b], "{src}: opaque ({x},{y})"),
                _ => {
                    let e = [on_white(r, a), on_white(g, a), on_white(b, a)];
                    assert!(near(p.0, e, 1), "{src} ({x},{y}) = {p:?}, expected {e:?}");
                }
            }
        }
    }
}

#[test]
fn sample_rgba_png_is_flattened_onto_white() {
    // The real RGBA photo of sample-data, checked against the documented flattening computed here
    // from an independent decode.
    let (_t, root) = input_root();
    let src = sample_data().join("flower/garden_04_rgba.png");
    copy(&src, root.join("flower/garden_04_rgba.png"));
    let got = &pack_png(&root)["flower/garden_04_rgba.png"];
    let rgba = image::open(&src).unwrap().into_rgba8();
    assert!(
        rgba.pixels().any(|p| p[3] == 0),
        "the sample has transparent pixels"
    );
    for (x, y, p) in got.enumerate_pixels() {
        let [r, g, b, a] = rgba.get_pixel(x, y).0;
        let e = [on_white(r, a), on_white(g, a), on_white(b, a)];
        assert!(near(p.0, e, 1), "({x},{y}) = {p:?}, expected {e:?}");
        if a == 0 {
            assert_eq!(p.0, [255, 255, 255]);
        }
    }
}

#[test]
fn sixteen_bit_png_is_reduced_to_eight_bits() {
    let (_t, root) = input_root();
    // 16-bit values v·257 are exactly representable as v in 8 bits.
    let base = pattern(19, 11, 5);
    let wide: ImageBuffer<Rgb<u16>, Vec<u16>> = ImageBuffer::from_fn(19, 11, |x, y| {
        let p = base.get_pixel(x, y).0;
        Rgb(p.map(|c| u16::from(c) * 257))
    });
    save(root.join("c/rgb16.png"), &DynamicImage::ImageRgb16(wide));
    let gray16: ImageBuffer<Luma<u16>, Vec<u16>> =
        ImageBuffer::from_fn(9, 4, |x, y| Luma([(x * 20 + y) as u16 * 257]));
    save(
        root.join("c/gray16.png"),
        &DynamicImage::ImageLuma16(gray16),
    );
    let out = pack_png(&root);
    assert_eq!(out["c/rgb16.png"], base);
    for (x, y, p) in out["c/gray16.png"].enumerate_pixels() {
        let v = (x * 20 + y) as u8;
        assert_eq!(p.0, [v, v, v]);
    }
}

#[test]
fn palette_images_are_expanded() {
    let (_t, root) = input_root();
    // GIF: palette-based; an image with 4 colours is stored exactly.
    let colours = [RED, GREEN, BLUE, [255, 255, 0]];
    let img = RgbImage::from_fn(16, 8, |x, _| Rgb(colours[(x / 4) as usize]));
    save_rgb(root.join("c/stripes.gif"), &img);
    // Palette PNGs made by Pillow; in the second, palette index 3 (yellow) is transparent.
    copy(fixture("palette.png"), root.join("c/palette.png"));
    copy(fixture("palette_trns.png"), root.join("c/palette_trns.png"));
    let out = pack_png(&root);
    assert_eq!(out["c/stripes.gif"], img);
    assert_eq!(out["c/palette.png"], img);
    let mut flattened = img.clone();
    for x in 12..16 {
        for y in 0..8 {
            flattened.put_pixel(x, y, Rgb(WHITE));
        }
    }
    assert_eq!(out["c/palette_trns.png"], flattened);
}

#[test]
fn rgb_jpeg_is_close_to_its_source() {
    let (_t, root) = input_root();
    let img = quadrants(64, 48);
    save_rgb(root.join("c/q.jpg"), &img);
    let got = &pack_png(&root)["c/q.jpg"];
    assert!(mean_diff(got, &img) < 4.0, "{}", mean_diff(got, &img));
}

#[test]
fn cmyk_jpeg_is_converted_to_rgb() {
    // Pillow fixture: left half RGB (200, 30, 40), right half (30, 60, 200), stored as CMYK.
    let (_t, root) = input_root();
    copy(fixture("cmyk.jpg"), root.join("c/cmyk.jpg"));
    let got = &pack_png(&root)["c/cmyk.jpg"];
    assert_eq!(got.dimensions(), (32, 24));
    for (x, y) in [(2, 2), (8, 12), (12, 20)] {
        let p = got.get_pixel(x, y).0;
        assert!(near(p, [200, 30, 40], 16), "left ({x},{y}) = {p:?}");
        let p = got.get_pixel(31 - x, y).0;
        assert!(near(p, [30, 60, 200], 16), "right ({},{y}) = {p:?}", 31 - x);
    }
}

#[test]
fn sample_grayscale_jpeg_is_packed_as_grey_rgb() {
    let (_t, root) = input_root();
    let src = sample_data().join("landscape/storm_02_gray.jpg");
    copy(&src, root.join("landscape/storm_02_gray.jpg"));
    let got = &pack_png(&root)["landscape/storm_02_gray.jpg"];
    assert!(got.pixels().all(|p| p[0] == p[1] && p[1] == p[2]));
    let reference = image::open(&src).unwrap().into_rgb8();
    assert!(mean_diff(got, &reference) < 2.0);
}
