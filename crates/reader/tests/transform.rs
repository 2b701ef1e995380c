//! Train-time transforms through the loader, on the sample photos: fixed-shape batches whose
//! pixels are the crop each sample reports, crops that depend only on (seed, epoch, key), and
//! corrupt records skipped out of a fixed-shape batch.

use shardtool_core::{Checksum, Limits};
use shardtool_image::{CropBox, CropOptions, Filter};
use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
use shardtool_reader::{Batch, CorruptPolicy, Layout, Loader, LoaderBuilder, Transform};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The sample photos' bytes by key (JPEGs, one EXIF-rotated, one gray, one PNG).
fn photos() -> BTreeMap<String, Vec<u8>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sample-data/imagefolder");
    let mut out = BTreeMap::new();
    for class in std::fs::read_dir(&root).unwrap() {
        for f in std::fs::read_dir(class.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            let key = p.file_stem().unwrap().to_string_lossy().replace('.', "_");
            out.insert(key, std::fs::read(&p).unwrap());
        }
    }
    assert!(out.len() >= 40);
    out
}

/// A tar dataset of the photos in three shards, with `corrupt` cut short.
fn photo_dataset(dir: &Path, corrupt: Option<&str>) -> BTreeMap<String, Vec<u8>> {
    let photos = photos();
    let keys: Vec<&String> = photos.keys().collect();
    let mut entries = Vec::new();
    for (si, chunk) in keys.chunks(keys.len().div_ceil(3)).enumerate() {
        let mut w = shardtool_wds::TarWriter::new(Vec::new());
        for key in chunk {
            let mut bytes = photos[*key].clone();
            if Some(key.as_str()) == corrupt {
                bytes.truncate(bytes.len() / 3);
            }
            let field = if bytes.starts_with(b"\x89PNG") {
                "png"
            } else {
                "jpg"
            };
            w.append(&format!("{key}.cls"), b"1").unwrap();
            w.append(&format!("{key}.{field}"), &bytes).unwrap();
        }
        let bytes = w.finish().unwrap();
        let file = format!("shard-{si:06}.tar");
        std::fs::write(dir.join(&file), &bytes).unwrap();
        entries.push(ShardEntry {
            file,
            format: ShardFormat::Wds,
            compression: None,
            samples: chunk.len() as u64,
            bytes: bytes.len() as u64,
            checksum: Checksum::of(&bytes).to_string(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        });
    }
    let m = Manifest::new("photos", vec!["0".into(), "1".into()], vec![], entries);
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
    photos
}

fn rrc(size: u32) -> Transform {
    format!("random-resized-crop:{size}").parse().unwrap()
}

/// Every delivered sample: key → (crop, checksum of its pixels).
fn crops_of(b: LoaderBuilder) -> BTreeMap<String, (shardtool_reader::Crop, String)> {
    let mut out = BTreeMap::new();
    for batch in b.build().unwrap() {
        let batch = batch.unwrap();
        for (i, k) in batch.keys.iter().enumerate() {
            let px = Checksum::of(batch.sample(i)).to_string();
            assert!(
                out.insert(k.clone(), (batch.crops[i], px)).is_none(),
                "{k} twice"
            );
        }
    }
    out
}

fn size_of(bytes: &[u8]) -> (u32, u32) {
    // Upright size: the full decode, as the reader sees it.
    let spec = shardtool_image::TransformSpec {
        encode: shardtool_image::Encode::Raw,
        ..Default::default()
    };
    let t = shardtool_image::transform(bytes, &spec).unwrap();
    (t.width, t.height)
}

fn check_batch_pixels(batch: &Batch, photos: &BTreeMap<String, Vec<u8>>, side: u32) {
    assert_eq!(
        batch.layout,
        Layout::Fixed {
            height: side,
            width: side
        }
    );
    assert_eq!(batch.crops.len(), batch.len());
    assert_eq!(batch.data().len(), batch.len() * (side * side * 3) as usize);
    for (i, key) in batch.keys.iter().enumerate() {
        let c = batch.crops[i];
        let b = CropBox {
            x: c.x,
            y: c.y,
            w: c.w,
            h: c.h,
        };
        // The reference: the same box from the full decode, resized with the same filter.
        let o = CropOptions {
            width: side,
            height: side,
            flip: c.flipped,
            filter: Filter::Bilinear,
            fused: false,
        };
        let mut want = vec![0; (side * side * 3) as usize];
        let r = shardtool_image::decode_crop_into(
            &photos[key],
            &Limits::default(),
            |_, _| b,
            &o,
            &mut want,
        )
        .unwrap();
        assert_eq!(r.crop, b, "{key}: the crop reported is the crop made");
        let got = batch.sample(i);
        let mae = got
            .iter()
            .zip(&want)
            .map(|(a, b)| u64::from(a.abs_diff(*b)))
            .sum::<u64>() as f64
            / got.len() as f64;
        assert!(
            mae <= 2.0,
            "{key}: mean abs error {mae:.3} against the full decode"
        );
    }
}

#[test]
fn random_resized_crops_fill_fixed_batches_with_the_reported_crops() {
    let dir = tempfile::tempdir().unwrap();
    let photos = photo_dataset(dir.path(), None);
    let t = rrc(64);
    let loader = Loader::builder(dir.path())
        .batch_size(8)
        .seed(3)
        .transform(t)
        .flip(true)
        .build()
        .unwrap();
    let (mut n, mut flips) = (0, 0);
    for batch in loader {
        let batch = batch.unwrap();
        check_batch_pixels(&batch, &photos, 64);
        for (i, key) in batch.keys.iter().enumerate() {
            let (w, h) = size_of(&photos[key]);
            let c = batch.crops[i];
            assert_eq!(
                t.crop(true, 3, 0, key, w, h),
                Some(c),
                "{key}: not the planned crop"
            );
            assert!(
                c.x + c.w <= f64::from(w) && c.y + c.h <= f64::from(h),
                "{key}"
            );
            flips += usize::from(c.flipped);
        }
        n += batch.len();
    }
    assert_eq!(n, photos.len());
    assert!(flips > 0 && flips < n, "{flips} of {n} flipped");
}

#[test]
fn centre_crops_are_centred_and_never_flipped_without_flip() {
    let dir = tempfile::tempdir().unwrap();
    let photos = photo_dataset(dir.path(), None);
    let t: Transform = "center-crop:48".parse().unwrap();
    for batch in Loader::builder(dir.path())
        .batch_size(16)
        .transform(t)
        .build()
        .unwrap()
    {
        let batch = batch.unwrap();
        check_batch_pixels(&batch, &photos, 48);
        for (i, key) in batch.keys.iter().enumerate() {
            let (w, h) = size_of(&photos[key]);
            let c = batch.crops[i];
            assert!(!c.flipped);
            assert!((c.w - 0.875 * f64::from(w.min(h))).abs() < 1e-9, "{key}");
            assert!(
                (c.x * 2.0 + c.w - f64::from(w)).abs() < 1e-9,
                "{key}: not centred"
            );
        }
    }
}

#[test]
fn crops_do_not_depend_on_workers_ranks_or_resume() {
    let dir = tempfile::tempdir().unwrap();
    photo_dataset(dir.path(), None);
    let base = || {
        Loader::builder(dir.path())
            .batch_size(4)
            .seed(9)
            .epoch(2)
            .transform(rrc(32))
            .flip(true)
    };
    let one = crops_of(base().workers(1));
    assert_eq!(crops_of(base().workers(3).in_order(false)), one);
    let mut ranks = crops_of(base().partition(0, 2));
    ranks.extend(crops_of(base().partition(1, 2)));
    assert_eq!(ranks.len(), one.len() / 2 * 2);
    for (k, v) in &ranks {
        assert_eq!(one.get(k), Some(v), "{k}");
    }
    // Stop after 6 samples (inside the second batch) and resume.
    let mut first = base().build().unwrap();
    let mut seen = BTreeMap::new();
    let b0 = first.next().unwrap().unwrap();
    let b1 = first.next().unwrap().unwrap();
    for (b, take) in [(&b0, 4), (&b1, 2)] {
        for (i, k) in b.keys.iter().enumerate().take(take) {
            seen.insert(
                k.clone(),
                (b.crops[i], Checksum::of(b.sample(i)).to_string()),
            );
        }
    }
    let state = first.state_within(&b1, 2);
    drop((b0, b1, first));
    let resumed = crops_of(base().resume(state));
    assert!(resumed.keys().all(|k| !seen.contains_key(k)));
    seen.extend(resumed);
    assert_eq!(seen, one);
    // Another epoch or seed crops differently.
    let other = crops_of(base().epoch(3));
    assert!(other.iter().filter(|(k, v)| one.get(*k) == Some(v)).count() < one.len() / 4);
}

#[test]
fn corrupt_records_leave_a_smaller_fixed_batch() {
    let dir = tempfile::tempdir().unwrap();
    let photos = photo_dataset(dir.path(), Some("dune_02"));
    let loader = Loader::builder(dir.path())
        .batch_size(64)
        .transform(rrc(24))
        .on_corrupt(CorruptPolicy::Skip)
        .build()
        .unwrap();
    let mut n = 0;
    for batch in loader {
        let batch = batch.unwrap();
        assert!(!batch.keys.iter().any(|k| k == "dune_02"));
        check_batch_pixels(&batch, &photos, 24);
        n += batch.len();
    }
    assert_eq!(n, photos.len() - 1);
    let failing = Loader::builder(dir.path())
        .batch_size(64)
        .transform(rrc(24))
        .build()
        .unwrap();
    let err = failing.filter_map(Result::err).next().unwrap().to_string();
    assert!(err.contains("dune_02"), "{err}");
}

#[test]
fn resize_gives_the_shorter_side_and_flip_needs_a_crop() {
    let dir = tempfile::tempdir().unwrap();
    photo_dataset(dir.path(), None);
    let t: Transform = "resize:40".parse().unwrap();
    for batch in Loader::builder(dir.path())
        .batch_size(16)
        .transform(t)
        .build()
        .unwrap()
    {
        let batch = batch.unwrap();
        let Layout::Variable { shapes, .. } = &batch.layout else {
            panic!("photos of different aspect make a variable batch");
        };
        assert!(shapes.iter().all(|s| s[0].min(s[1]) == 40), "{shapes:?}");
        assert!(batch.crops.is_empty());
    }
    let e = Loader::builder(dir.path())
        .transform(t)
        .flip(true)
        .build()
        .err()
        .unwrap();
    assert!(e.to_string().contains("flip needs a crop"), "{e}");
}
