//! Memory stays flat as the dataset grows: packing 10x more images must not raise the peak
//! resident set size. The peak RSS of the child is measured with `/usr/bin/time -v`, or, where that
//! is missing, with `resource.getrusage(RUSAGE_CHILDREN)` from a small python3 wrapper.
//!
//! Pack's fixed-size buffers fill once the output passes their size (its shard writer passes
//! writes on in 2 MiB blocks, `WRITE_BLOCK`): the smaller dataset is made large enough to fill
//! them too, so that the comparison measures growth with the dataset rather than that plateau.

use crate::common::*;
use crate::diskfull::bash;
use std::path::Path;
use std::process::Command;

/// Writes `n` 400x300 JPEGs in 3 classes. Encoding is the slow part of making them, so 30
/// different pictures are cycled: every file is still read, decoded and encoded on its own.
fn make_images(root: &Path, n: u32, pictures: &[Vec<u8>]) {
    for i in 0..n {
        let c = ["a", "b", "c"][(i % 3) as usize];
        write_file(
            root.join(format!("{c}/{i:04}.jpg")),
            &pictures[i as usize % pictures.len()],
        );
    }
}

/// Runs `shardtool ARGS` and returns its peak RSS in KiB.
fn peak_rss_kib(args: &[&std::ffi::OsStr]) -> u64 {
    if Path::new("/usr/bin/time").exists() {
        let out = Command::new("/usr/bin/time")
            .arg("-v")
            .arg(BIN)
            .args(args)
            .output()
            .expect("run /usr/bin/time");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "pack failed: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("Maximum resident set size"))
            .unwrap_or_else(|| panic!("no RSS line in /usr/bin/time output: {stderr}"));
        return line.rsplit(':').next().unwrap().trim().parse().unwrap();
    }
    let script = "import resource, subprocess, sys\n\
                  r = subprocess.run(sys.argv[1:])\n\
                  print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n\
                  sys.exit(r.returncode)";
    let out = Command::new("python3")
        .args(["-c", script, BIN])
        .args(args)
        .output()
        .expect("neither /usr/bin/time nor python3 is available to measure peak RSS");
    assert!(
        out.status.success(),
        "pack failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Packs `root` into a fresh `ds` and returns the peak RSS in KiB.
fn measure(root: &Path, ds: &Path, n: u32) -> u64 {
    if ds.exists() {
        std::fs::remove_dir_all(ds).unwrap();
    }
    let args = [
        "pack".as_ref(),
        root.as_os_str(),
        ds.as_os_str(),
        "--jobs".as_ref(),
        "2".as_ref(),
        // A real resize (DCT-scaled decode, then resampling), cheap enough in a debug build,
        // with outputs large enough that 60 of them pass the 2 MiB write block.
        "--resize".as_ref(),
        "shorter:256".as_ref(),
        "--quiet".as_ref(),
    ];
    let kib = peak_rss_kib(&args);
    let m = manifest(ds);
    assert_eq!(m.inputs.packed, u64::from(n));
    assert!(
        m.totals.bytes > shardtool_core::WRITE_BLOCK as u64,
        "{n} images made {} bytes of shards, not enough to fill the {}-byte write block",
        m.totals.bytes,
        shardtool_core::WRITE_BLOCK
    );
    kib
}

#[test]
fn peak_memory_does_not_grow_with_the_dataset() {
    let t = tempdir();
    let pictures: Vec<Vec<u8>> = (0..30).map(|i| jpeg(&pattern(400, 300, i))).collect();
    let (small_in, large_in) = (t.path().join("in60"), t.path().join("in600"));
    make_images(&small_in, 60, &pictures);
    make_images(&large_in, 600, &pictures);
    let ds = t.path().join("ds");
    // The goal is < 10% growth for 10x the images; the bound here is looser (25%), and a failing
    // comparison is measured once more (keeping each size's lower peak), so that allocator and
    // scheduling noise on a shared machine cannot make the test flaky.
    let (mut small, mut large) = (u64::MAX, u64::MAX);
    for attempt in 0..2 {
        small = small.min(measure(&small_in, &ds, 60));
        large = large.min(measure(&large_in, &ds, 600));
        eprintln!("attempt {attempt}: peak RSS 60 images {small} KiB, 600 images {large} KiB");
        if (large as f64) < small as f64 * 1.25 {
            break;
        }
    }
    assert!(
        (large as f64) < small as f64 * 1.25,
        "peak RSS grew from {small} KiB (60 images) to {large} KiB (600 images)"
    );
}

#[test]
fn pack_memory_on_a_100000_input_list_is_its_window_plus_the_listing() {
    // 100,000 list rows over 50 real files: what grows with the rows is the compact listing
    // (a few bytes plus the name per input) and the order (4 bytes per input), never images.
    let t = tempdir();
    let pictures: Vec<Vec<u8>> = (0..50).map(|i| jpeg(&pattern(48, 40, i))).collect();
    for (i, p) in pictures.iter().enumerate() {
        write_file(t.path().join(format!("img/{i:02}.jpg")), p);
    }
    let list = |rows: u32| {
        let path = t.path().join(format!("list{rows}.csv"));
        let mut text = String::from("path,label\n");
        for r in 0..rows {
            text.push_str(&format!("img/{:02}.jpg,{}\n", r % 50, r % 7));
        }
        std::fs::write(&path, text).unwrap();
        path
    };
    let run = |rows: u32| {
        let l = list(rows);
        let out = t.path().join(format!("out{rows}"));
        let kib = peak_rss_kib(&[
            "pack".as_ref(),
            "--list".as_ref(),
            l.as_os_str(),
            out.as_os_str(),
            "--encode".as_ref(),
            "keep".as_ref(),
            "--jobs".as_ref(),
            "2".as_ref(),
            "--quiet".as_ref(),
        ]);
        assert_eq!(manifest(&out).inputs.packed, u64::from(rows));
        kib
    };
    let (small, big) = (run(10_000), run(100_000));
    eprintln!("peak RSS: 10,000 inputs {small} KiB, 100,000 inputs {big} KiB");
    // 90,000 more inputs at well under 100 bytes each, with room for allocator slack.
    assert!(
        big < small + 16 * 1024,
        "peak RSS grew from {small} KiB to {big} KiB for 90,000 more list rows"
    );
}

#[test]
fn reader_memory_stays_flat_over_twenty_epochs() {
    let t = tempdir();
    let ds = t.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--resize", "shorter:64", "--shard-samples", "8", "-q"])
        .ok();
    let peak = |epochs: &str| {
        peak_rss_kib(&[
            "bench".as_ref(),
            ds.as_os_str(),
            "--decode".as_ref(),
            "--batch".as_ref(),
            "8".as_ref(),
            "--epochs".as_ref(),
            epochs.as_ref(),
        ])
    };
    let (two, twenty) = (peak("2"), peak("20"));
    eprintln!("reader peak RSS: 2 epochs {two} KiB, 20 epochs {twenty} KiB");
    assert!(
        (twenty as f64) <= two as f64 * 1.05,
        "peak RSS grew from {two} KiB (2 epochs) to {twenty} KiB (20 epochs)"
    );
}

#[test]
fn an_inflating_png_header_costs_what_its_image_allows_not_the_pixel_bound() {
    // 8x8 pixels whose ICC profile inflates to 400 MB (a 400 KB file): decoders allocated up to
    // the bound of the largest image allowed (864 MB) for it.
    let t = tempdir();
    write_file(t.path().join("in/c/icc.png"), png_icc_bomb(400 << 20));
    let (input, ds) = (t.path().join("in"), t.path().join("ds"));
    let args: Vec<&std::ffi::OsStr> = vec![
        "pack".as_ref(),
        input.as_os_str(),
        ds.as_os_str(),
        "--jobs".as_ref(),
        "1".as_ref(),
        "--quiet".as_ref(),
    ];
    let kib = peak_rss_kib(&args);
    assert!(kib < 250 << 10, "peak RSS {kib} KiB for an 8x8 PNG");
    // Its pixels are not lost: the profile is the header's problem, bounded on its own.
    assert_eq!(manifest(&ds).inputs.packed, 1);
}

/// A packed shard too large for the memory the process may take (`ulimit -v`) is an error that
/// names `--shard-size`, not an abort: its pixels are held until it is written.
#[test]
fn a_packed_shard_past_the_memory_limit_is_an_error() {
    let t = tempdir();
    let input = t.path().join("in");
    let picture = jpeg(&image::RgbImage::from_pixel(
        1000,
        1000,
        image::Rgb([30, 60, 90]),
    ));
    for i in 0..400 {
        write_file(input.join(format!("a/{i}.jpg")), &picture);
    }
    let out = t.path().join("out");
    let (code, err) = bash(&format!(
        "ulimit -v 600000 && exec {BIN} pack {} {} --format packed --shard-size 4GiB -q",
        input.display(),
        out.display()
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("lower --shard-size"), "{err}");
    assert!(!out.join("manifest.json").exists());
    // A JPEG whose decoded pixels do not fit stops the pack (the machine's fault, not the
    // image's), where the allocation aborted the process.
    let colour = image::Rgb([30, 60, 90]);
    let big = jpeg(&image::RgbImage::from_pixel(9900, 9900, colour));
    write_file(t.path().join("big/a/big.jpg"), &big);
    let (code, err) = bash(&format!(
        "ulimit -v 200000 && exec {BIN} pack {} {} --jobs 2 -q",
        t.path().join("big").display(),
        t.path().join("tar").display()
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no memory for the 294030000 bytes"), "{err}");
    // A PNG's likewise: its decoder's allocation aborted.
    let mut png = Vec::new();
    image::RgbImage::from_pixel(9000, 9000, colour)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    write_file(t.path().join("png/a/big.png"), &png);
    let (code, err) = bash(&format!(
        "ulimit -v 200000 && exec {BIN} pack {} {} --jobs 2 -q",
        t.path().join("png").display(),
        t.path().join("png-out").display()
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no memory for the 243000000 bytes"), "{err}");
    // A list file larger than that memory (sparse here) likewise: its read aborted.
    let list = t.path().join("list.jsonl");
    std::fs::File::create(&list)
        .unwrap()
        .set_len(400_000_000)
        .unwrap();
    let (code, err) = bash(&format!(
        "ulimit -v 200000 && exec {BIN} pack --list {} {} -q",
        list.display(),
        t.path().join("list-out").display()
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("no memory to hold its 400000000 bytes"),
        "{err}"
    );
    assert!(err.contains("list.jsonl"), "{err}");
}
