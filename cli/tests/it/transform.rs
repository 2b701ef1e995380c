//! `read --transform` and `--flip` end to end: `--keys` prints each sample's crop box and flip,
//! boxes lie inside the stored images, and crops stay the same whatever the worker count, the
//! rank layout or a resume from a state file.

use crate::common::{decode, pack, tempdir, wds_samples};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shardtool"))
}

/// Runs `read --keys` and parses `key, x, y, w, h, flip` per line.
fn crops(ds: &Path, args: &[&str]) -> BTreeMap<String, (f64, f64, f64, f64, bool)> {
    let out = bin()
        .arg("read")
        .arg(ds)
        .args(["--keys", "--batch", "4", "--seed", "5", "--epoch", "1"])
        .args(["--transform", "random-resized-crop:24", "--flip"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 6, "{line}");
        let n = |i: usize| f[i].parse::<f64>().unwrap();
        assert!(f[5] == "0" || f[5] == "1", "{line}");
        let crop = (n(1), n(2), n(3), n(4), f[5] == "1");
        assert!(map.insert(f[0].to_string(), crop).is_none(), "{line} twice");
    }
    map
}

#[test]
fn keys_print_crops_that_fit_the_images_and_never_change_with_the_layout() {
    let dir = tempdir();
    let ds = dir.path().join("ds");
    pack(crate::common::sample_data(), &ds)
        .args(["--resize", "shorter:48", "--shard-samples", "8"])
        .ok();
    let all = crops(&ds, &["--workers", "1"]);
    let samples = wds_samples(&ds);
    assert_eq!(all.len(), samples.len());
    let mut flips = 0;
    for s in &samples {
        let img = decode(&s.image);
        let (x, y, w, h, flipped) = all[&s.key];
        assert!(x >= 0.0 && y >= 0.0 && w >= 1.0 && h >= 1.0, "{}", s.key);
        assert!(
            x + w <= f64::from(img.width()) && y + h <= f64::from(img.height()),
            "{}",
            s.key
        );
        // torchvision's rule: area 8–100% of the image, aspect 3/4–4/3 (up to rounding), unless
        // ten tries failed and the centre fallback took the whole image.
        let area = w * h / f64::from(img.width() * img.height());
        assert!((0.07..=1.0).contains(&area), "{}: area {area}", s.key);
        flips += usize::from(flipped);
    }
    assert!(
        flips > 0 && flips < all.len(),
        "{flips} flips of {}",
        all.len()
    );

    assert_eq!(crops(&ds, &["--workers", "3", "--out-of-order"]), all);
    let mut ranks = crops(&ds, &["--rank", "0", "--world", "2"]);
    ranks.extend(crops(&ds, &["--rank", "1", "--world", "2"]));
    assert!(ranks.len() >= all.len() - 1);
    assert!(ranks.iter().all(|(k, v)| all.get(k) == Some(v)));

    // Stop after 7 samples, then resume from the state file: the same crops for the rest.
    let state = dir.path().join("state.json");
    let mut first = crops(
        &ds,
        &["--limit", "7", "--state-out", state.to_str().unwrap()],
    );
    assert_eq!(first.len(), 7);
    let rest = crops(&ds, &["--resume", state.to_str().unwrap()]);
    assert_eq!(rest.len(), all.len() - 7);
    first.extend(rest);
    assert_eq!(first, all);
}

#[test]
fn bad_transforms_and_a_flip_without_a_crop_are_usage_errors() {
    let dir = tempdir();
    let ds = dir.path().join("ds");
    pack(crate::common::sample_data(), &ds)
        .args(["--resize", "shorter:32"])
        .ok();
    for (args, says) in [
        (&["--transform", "random-resized-crop"][..], "needs a size"),
        (&["--transform", "center-crop:32,ratio=2"][..], "(0, 1]"),
        (&["--flip"][..], "flip needs a crop"),
        (
            &["--transform", "resize:32", "--flip"][..],
            "flip needs a crop",
        ),
        (
            &["--decode", "--transform", "decode"][..],
            "cannot be used with",
        ),
        // 45 samples of 16384x16384x3 bytes: refused before the batch is allocated.
        (
            &["--transform", "center-crop:16384", "--batch", "64"][..],
            "a batch of 45 16384x16384 RGB images needs 33.",
        ),
    ] {
        let out = bin().arg("read").arg(&ds).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = bin()
        .args(["bench", ds.to_str().unwrap(), "--batch", "8"])
        .args(["--transform", "center-crop:32", "--epochs", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn resize_of_a_thin_image_past_the_readers_limit_is_an_error_not_an_abort() {
    let dir = tempdir();
    let input = dir.path().join("in");
    crate::common::save_rgb(
        input.join("a/line.png"),
        &crate::common::pattern(1, 2000, 3),
    );
    for format in ["packed", "wds"] {
        let out = dir.path().join(format);
        pack(&input, &out).args(["--format", format, "-q"]).ok();
        // 16384 × 32768000 pixels: the packed path allocated it (and aborted).
        for size in ["16384", "512"] {
            let r = bin()
                .arg("read")
                .arg(&out)
                .args(["--transform", &format!("resize:{size}")])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&r.stderr);
            assert_eq!(r.status.code(), Some(1), "{format} {size}: {stderr}");
            assert!(
                stderr.contains("over the reader's limit of 100000000 pixels")
                    && !stderr.contains("--max-pixels"),
                "{format} {size}: {stderr}"
            );
        }
        for (args, code) in [
            // Options too large for the dataset are no corrupt records: refused when skipping
            // them too (every record was skipped, the epoch read empty, exit 0).
            (&["--transform", "resize:512", "--skip-corrupt"][..], 1),
            // Under a limit the user gave (a dataset not trusted), the thin record is at
            // fault: skipped, the read goes on.
            (
                &[
                    "--transform",
                    "resize:512",
                    "--skip-corrupt",
                    "--max-pixels",
                    "100000000",
                ],
                0,
            ),
            // Unless no record could fit: S×S itself past that limit is the options' fault.
            (
                &[
                    "--transform",
                    "resize:2000",
                    "--skip-corrupt",
                    "--max-pixels",
                    "1000000",
                ],
                1,
            ),
            // A size whose output fits reads.
            (&["--transform", "resize:20"], 0),
        ] {
            let r = bin().arg("read").arg(&out).args(args).output().unwrap();
            let stderr = String::from_utf8_lossy(&r.stderr);
            assert_eq!(r.status.code(), Some(code), "{format} {args:?}: {stderr}");
        }
    }
    // A dataset packed under a larger --max-pixels is read under it: 250 × 500000 pixels.
    let wide = dir.path().join("wide");
    pack(&input, &wide)
        .args(["--format", "packed", "--max-pixels", "200000000", "-q"])
        .ok();
    let r = bin()
        .arg("read")
        .arg(&wide)
        .args(["--transform", "resize:250"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // Unless the reader is given a lower limit (a dataset it does not trust); 0 is refused.
    for (limit, code) in [("100000000", 1), ("0", 2)] {
        let r = bin()
            .arg("read")
            .arg(&wide)
            .args(["--transform", "resize:250", "--max-pixels", limit])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(code), "{limit}: {stderr}");
        assert!(
            code == 2 || stderr.contains("limit of 100000000 pixels"),
            "{stderr}"
        );
    }
}
