//! `--resize` end to end: every mode, `--upscale`, the downscale-only default, the documented
//! rounding, centre cropping, and the JPEG DCT-scaling path (every `--decode-scale`) giving the
//! same sizes.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Input sizes used by every mode: landscape, portrait, small landscape, small portrait, square,
/// and an odd size.
const SIZES: &[(u32, u32)] = &[
    (640, 480),
    (480, 640),
    (200, 100),
    (100, 200),
    (64, 64),
    (301, 157),
];

/// Writes one PNG and one JPEG per size: `c/WxH.png`, `c/WxH.jpg`.
fn make_inputs(root: &Path) {
    for (i, &(w, h)) in SIZES.iter().enumerate() {
        let img = pattern(w, h, i as u32);
        save_rgb(root.join(format!("c/{w}x{h}.png")), &img);
        save_rgb(root.join(format!("c/{w}x{h}.jpg")), &img);
    }
}

/// `source → ((orig w, h), (w, h))`.
type Sizes = BTreeMap<String, ((u32, u32), (u32, u32))>;

/// Packs with `args` and returns the [`Sizes`], checking that every decoded image has the size
/// its json claims.
fn sizes(input: &Path, args: &[&str]) -> Sizes {
    let out = tempdir();
    let ds = out.path().join("ds");
    pack(input, &ds).args(args).ok();
    let m = manifest(&ds);
    let mode = args
        .iter()
        .position(|a| *a == "--resize")
        .map_or("none", |i| args[i + 1]);
    assert_eq!(m.pack["resize"], mode, "manifest pack.resize");
    let samples = wds_samples(&ds);
    assert_eq!(samples.len(), 2 * SIZES.len());
    samples
        .iter()
        .map(|s| {
            let img = s.decode();
            assert_eq!(img.dimensions(), s.size(), "{}: decoded size", s.source());
            (s.source().to_string(), (s.orig_size(), s.size()))
        })
        .collect()
}

/// What the mode's documentation says the output size is.
fn expected(mode: &str, upscale: bool, w: u32, h: u32) -> (u32, u32) {
    let (name, arg) = mode.split_once(':').unwrap_or((mode, ""));
    let pair = || {
        let (a, b) = arg.split_once('x').unwrap();
        (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap())
    };
    match name {
        "none" => (w, h),
        "shorter" => {
            let n: u32 = arg.parse().unwrap();
            let s = w.min(h);
            if s < n && !upscale || s == n {
                (w, h)
            } else if w <= h {
                (n, scaled(h, n, w))
            } else {
                (scaled(w, n, h), n)
            }
        }
        "longer" => {
            let n: u32 = arg.parse().unwrap();
            let l = w.max(h);
            if l < n && !upscale || l == n {
                (w, h)
            } else if w >= h {
                (n, scaled(h, n, w))
            } else {
                (scaled(w, n, h), n)
            }
        }
        "fit" => {
            let (bw, bh) = pair();
            if w <= bw && h <= bh && (!upscale || w == bw || h == bh) {
                (w, h)
            } else if u64::from(w) * u64::from(bh) >= u64::from(bw) * u64::from(h) {
                (bw, scaled(h, bw, w).min(bh))
            } else {
                (scaled(w, bh, h).min(bw), bh)
            }
        }
        "crop" => pair(),
        _ => unreachable!("{mode}"),
    }
}

fn check_mode(input: &Path, mode: &str, upscale: bool) {
    let mut args = vec!["--resize", mode, "--no-shuffle"];
    if upscale {
        args.push("--upscale");
    }
    let got = sizes(input, &args);
    for &(w, h) in SIZES {
        for ext in ["png", "jpg"] {
            let src = format!("c/{w}x{h}.{ext}");
            let (orig, size) = got[&src];
            assert_eq!(orig, (w, h), "{mode}: {src} orig size");
            assert_eq!(
                size,
                expected(mode, upscale, w, h),
                "{mode} upscale={upscale}: {src}"
            );
        }
    }
}

#[test]
fn documented_rounding_640x480_shorter_256_is_341x256() {
    let dir = tempdir();
    make_inputs(dir.path());
    let got = sizes(dir.path(), &["--resize", "shorter:256"]);
    for ext in ["png", "jpg"] {
        assert_eq!(got[&format!("c/640x480.{ext}")].1, (341, 256));
        assert_eq!(got[&format!("c/480x640.{ext}")].1, (256, 341));
    }
}

#[test]
fn resize_none_keeps_every_size() {
    let dir = tempdir();
    make_inputs(dir.path());
    check_mode(dir.path(), "none", false);
    // --upscale changes nothing without a target.
    check_mode(dir.path(), "none", true);
}

#[test]
fn shorter_downscales_only_unless_upscale() {
    let dir = tempdir();
    make_inputs(dir.path());
    check_mode(dir.path(), "shorter:150", false);
    let got = sizes(dir.path(), &["--resize", "shorter:150"]);
    // Smaller than the target: untouched by default.
    assert_eq!(got["c/200x100.png"].1, (200, 100));
    assert_eq!(got["c/64x64.jpg"].1, (64, 64));
    check_mode(dir.path(), "shorter:150", true);
    let got = sizes(dir.path(), &["--resize", "shorter:150", "--upscale"]);
    assert_eq!(got["c/200x100.png"].1, (300, 150));
    assert_eq!(got["c/64x64.jpg"].1, (150, 150));
}

#[test]
fn longer_downscales_only_unless_upscale() {
    let dir = tempdir();
    make_inputs(dir.path());
    check_mode(dir.path(), "longer:320", false);
    let got = sizes(dir.path(), &["--resize", "longer:320"]);
    assert_eq!(got["c/640x480.jpg"].1, (320, 240));
    assert_eq!(got["c/100x200.png"].1, (100, 200));
    check_mode(dir.path(), "longer:320", true);
    let got = sizes(dir.path(), &["--resize", "longer:320", "--upscale"]);
    assert_eq!(got["c/100x200.png"].1, (160, 320));
}

#[test]
fn fit_keeps_aspect_inside_the_box() {
    let dir = tempdir();
    make_inputs(dir.path());
    check_mode(dir.path(), "fit:100x80", false);
    let got = sizes(dir.path(), &["--resize", "fit:100x80"]);
    assert_eq!(got["c/640x480.png"].1, (100, 75));
    assert_eq!(got["c/64x64.png"].1, (64, 64));
    check_mode(dir.path(), "fit:100x80", true);
    let got = sizes(dir.path(), &["--resize", "fit:100x80", "--upscale"]);
    assert_eq!(got["c/64x64.png"].1, (80, 80));
    for (_, (_, (w, h))) in got {
        assert!(w <= 100 && h <= 80 && (w == 100 || h == 80), "{w}x{h}");
    }
}

/// An output over --max-pixels (an upscale, a huge crop box) is refused per image before it is
/// made, as an input over the limit is.
#[test]
fn an_output_over_the_pixel_limit_is_refused_per_image() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root);
    let ds = t.path().join("ds");
    let r = pack(&root, &ds)
        .args(["--resize", "crop:400x300", "--max-pixels", "100000"])
        .run();
    r.assert_code(1);
    // The headline says why every input failed, not only where images were looked for.
    let why = format!("{} too_many_pixels; the first, ", errors(&ds).len());
    assert!(r.stderr.contains(&why), "{}", r.stderr);
    let errs = errors(&ds);
    assert!(errs.iter().all(|e| e.kind == "too_many_pixels"), "{errs:?}");
    // Inputs within the limit are refused for their output.
    assert!(
        errs.iter().any(|e| e
            .message
            .contains("the output 400x300 would be 120000 pixels")),
        "{errs:?}"
    );
}

#[test]
fn crop_always_yields_the_box() {
    let dir = tempdir();
    make_inputs(dir.path());
    // Even without --upscale, crop enlarges images smaller than the box.
    check_mode(dir.path(), "crop:96x72", false);
    check_mode(dir.path(), "crop:96x72", true);
}

#[test]
fn crop_takes_the_centre() {
    // Three vertical stripes red | green | blue; a square crop of a 3:1 image keeps the green
    // middle. Two horizontal bands in a 1:3 image likewise keep the middle.
    let dir = tempdir();
    let wide = image::RgbImage::from_fn(300, 100, |x, _| {
        image::Rgb([RED, GREEN, BLUE][(x / 100) as usize])
    });
    let tall = image::RgbImage::from_fn(60, 180, |_, y| {
        image::Rgb([BLUE, WHITE, RED][(y / 60) as usize])
    });
    save_rgb(dir.path().join("c/wide.png"), &wide);
    save_rgb(dir.path().join("c/tall.png"), &tall);
    let ds = dir.path().join("ds");
    pack(dir.path(), &ds)
        .args(["--resize", "crop:40x40", "--encode", "png"])
        .ok();
    let s = by_source(&wds_samples(&ds));
    for (src, colour) in [("c/wide.png", GREEN), ("c/tall.png", WHITE)] {
        let img = s[src].decode();
        assert_eq!(img.dimensions(), (40, 40));
        // Stay away from the edges, where the filter blends in the neighbouring stripe.
        for (x, y) in [(5, 5), (34, 5), (5, 34), (34, 34), (20, 20)] {
            let p = img.get_pixel(x, y).0;
            assert!(near(p, colour, 8), "{src} ({x},{y}) = {p:?}");
        }
    }
}

#[test]
fn jpeg_dct_scaling_keeps_the_planned_size_and_content() {
    // A large JPEG shrunk a lot takes libjpeg-turbo's DCT-scaled decode; the size must still be
    // the planned one and the picture the same as through the full-size PNG path.
    let dir = tempdir();
    let img = quadrants(800, 600);
    save_rgb(dir.path().join("c/big.jpg"), &img);
    save_rgb(dir.path().join("c/big.png"), &img);
    let ds = dir.path().join("ds");
    pack(dir.path(), &ds)
        .args(["--resize", "shorter:60", "--encode", "png"])
        .ok();
    let s = by_source(&wds_samples(&ds));
    let (a, b) = (s["c/big.jpg"].decode(), s["c/big.png"].decode());
    assert_eq!(a.dimensions(), (80, 60));
    assert_eq!(b.dimensions(), (80, 60));
    assert_eq!(s["c/big.jpg"].orig_size(), (800, 600));
    assert!(mean_diff(&a, &b) < 4.0, "{}", mean_diff(&a, &b));
    for (x, y, c) in [
        (10, 10, RED),
        (70, 10, GREEN),
        (10, 50, BLUE),
        (70, 50, WHITE),
    ] {
        let p = a.get_pixel(x, y).0;
        assert!(near(p, c, 24), "({x},{y}) = {p:?}, expected {c:?}");
    }
}

#[test]
fn bad_decode_scales_exit_2_with_the_accepted_forms() {
    let dir = tempdir();
    make_inputs(dir.path());
    for bad in [
        "gap:0",
        "gap:9",
        "gap:0.5",
        "gap:x",
        "gap:1.234",
        "gap",
        "slow",
        "",
    ] {
        let ds = dir.path().join("ds");
        let r = pack(dir.path(), &ds).args(["--decode-scale", bad]).run();
        r.assert_code(2);
        for want in [&format!("decode scale {bad:?}"), "gap:N", "fast", "full"] {
            assert!(
                r.stderr.contains(want),
                "{bad:?}: {want} not in {}",
                r.stderr
            );
        }
        assert!(
            !ds.exists(),
            "{bad:?}: a usage error must not create the output"
        );
    }
}

#[test]
fn decode_scale_is_recorded_and_changes_pixels_not_sizes() {
    // The sample photos shrunk to shorter:64 (every JPEG by DCT scaling), stored losslessly, so
    // that only the decode differs between runs.
    let out = tempdir();
    let mut runs = BTreeMap::new();
    for (flag, recorded) in [
        (None, "gap:2"),
        (Some("fast"), "fast"),
        (Some("full"), "full"),
        (Some("gap:1.50"), "gap:1.5"),
    ] {
        let ds = out.path().join(recorded.replace(':', "_"));
        let mut cmd = pack(sample_data(), &ds).args(["--resize", "shorter:64", "--encode", "png"]);
        if let Some(f) = flag {
            cmd = cmd.args(["--decode-scale", f]);
        }
        cmd.ok();
        assert_eq!(manifest(&ds).pack["decode_scale"], recorded);
        runs.insert(recorded, by_source(&wds_samples(&ds)));
    }
    let full = &runs["full"];
    assert!(full.len() >= 40);
    let mean_error = |mode: &str| {
        let total: f64 = runs[mode]
            .iter()
            .map(|(src, s)| {
                assert_eq!(s.size(), full[src].size(), "{mode}: {src}");
                mean_diff(&s.decode(), &full[src].decode())
            })
            .sum();
        total / full.len() as f64
    };
    let (fast, gap2, gap15) = (
        mean_error("fast"),
        mean_error("gap:2"),
        mean_error("gap:1.5"),
    );
    // A smaller gap allows coarser scales: the error grows as the gap shrinks.
    assert!(
        0.0 < gap2 && gap2 < gap15 && gap15 < fast,
        "gap:2 {gap2}, gap:1.5 {gap15}, fast {fast}"
    );
}

#[test]
fn lanczos3_filter_gives_the_same_sizes() {
    let dir = tempdir();
    make_inputs(dir.path());
    let a = sizes(dir.path(), &["--resize", "shorter:50"]);
    let b = sizes(
        dir.path(),
        &["--resize", "shorter:50", "--filter", "lanczos3"],
    );
    assert_eq!(a, b);
}
