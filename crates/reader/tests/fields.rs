//! Carried fields end to end: `LoaderBuilder::fields` on tar and packed shards delivers each
//! sample's own values (or `None`) in every delivery mode, and unlabelled samples read as -1.

use shardtool_core::Checksum;
use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
use shardtool_packed::{field_value, Mode, PackedWriter};
use shardtool_reader::{Batch, CorruptPolicy, Loader, LoaderBuilder, ReadError, Transform};
use std::path::Path;

/// Sample `i`'s key.
fn key(i: u32) -> String {
    format!("f{i:03}")
}

/// The index in a key written by [`key`].
fn index(key: &str) -> u32 {
    key[1..].parse().unwrap()
}

/// The caption of sample `i`: every third sample has none, one is empty.
fn txt(i: u32) -> Option<Vec<u8>> {
    match i % 3 {
        0 => None,
        _ if i == 4 => Some(Vec::new()),
        _ => Some(format!("caption {i}: a red bus ✓").into_bytes()),
    }
}

/// Bytes that are not UTF-8.
fn npy(i: u32) -> Vec<u8> {
    vec![0x93, b'N', i as u8, 0xff]
}

/// The input's json of sample `i`, carried byte for byte (spacing included).
fn input_json(i: u32) -> Vec<u8> {
    format!("{{\"url\": \"http://x/{i}.jpg\",  \"width\": 1024}}").into_bytes()
}

/// Every fourth sample is unlabelled.
fn label(i: u32) -> i64 {
    if i.is_multiple_of(4) {
        -1
    } else {
        i64::from(i % 3)
    }
}

fn png(i: u32) -> Vec<u8> {
    let mut out = Vec::new();
    image::RgbImage::from_pixel(4, 3, image::Rgb([i as u8, 2, 3]))
        .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

fn entry(dir: &Path, file: String, format: ShardFormat, n: u32, bytes: &[u8]) -> ShardEntry {
    std::fs::write(dir.join(&file), bytes).unwrap();
    ShardEntry {
        file,
        format,
        compression: None,
        samples: u64::from(n),
        bytes: bytes.len() as u64,
        checksum: Checksum::of(bytes).to_string(),
        uncompressed_bytes: None,
        uncompressed_checksum: None,
    }
}

fn write_manifest(dir: &Path, fields: &[&str], optional: &[&str], shards: Vec<ShardEntry>) {
    let names = |l: &[&str]| l.iter().map(|f| f.to_string()).collect();
    // `label` gives 0 to 2 (and -1 where a sample has no `cls`).
    let classes = ["a", "b", "c"].map(String::from).to_vec();
    let mut m = Manifest::new("test", classes, names(fields), shards);
    m.optional_fields = names(optional);
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
}

/// A tar dataset of `sizes` shards; sample `corrupt` (if any) holds a truncated PNG.
fn tar_dataset(dir: &Path, sizes: &[u32], corrupt: Option<u32>) -> u32 {
    let mut shards = Vec::new();
    let mut i = 0;
    for (s, &n) in sizes.iter().enumerate() {
        let mut w = shardtool_wds::TarWriter::new(Vec::new());
        for _ in 0..n {
            let k = key(i);
            if label(i) >= 0 {
                w.append(&format!("{k}.cls"), format!("{}\n", label(i)).as_bytes())
                    .unwrap();
            }
            w.append(&format!("{k}.json"), &input_json(i)).unwrap();
            w.append(&format!("{k}.npy"), &npy(i)).unwrap();
            let mut image = png(i);
            if corrupt == Some(i) {
                image.truncate(20);
            }
            w.append(&format!("{k}.png"), &image).unwrap();
            if let Some(t) = txt(i) {
                w.append(&format!("{k}.txt"), &t).unwrap();
            }
            i += 1;
        }
        let bytes = w.finish().unwrap();
        shards.push(entry(
            dir,
            format!("s-{s:06}.tar"),
            ShardFormat::Wds,
            n,
            &bytes,
        ));
    }
    write_manifest(dir, &["json", "npy", "png"], &["cls", "txt"], shards);
    i
}

/// The same samples in packed shards: txt and npy carried, json carried for odd samples only.
fn packed_dataset(dir: &Path, sizes: &[u32]) -> u32 {
    let mut shards = Vec::new();
    let mut i = 0;
    for (s, &n) in sizes.iter().enumerate() {
        let mut w = PackedWriter::new(Mode::Fixed);
        for _ in 0..n {
            let mut fields = serde_json::Map::new();
            fields.insert("npy".into(), field_value(&npy(i)));
            if let Some(t) = txt(i) {
                fields.insert("txt".into(), field_value(&t));
            }
            if i % 2 == 1 {
                fields.insert("json".into(), field_value(&input_json(i)));
            }
            let meta = serde_json::json!({"source": format!("in/{i}.png"), "fields": fields});
            w.add(&key(i), label(i), 1, 2, &[i as u8; 6], meta).unwrap();
            i += 1;
        }
        let mut bytes = Vec::new();
        w.finish(&mut bytes).unwrap();
        let file = format!("s-{s:06}.safetensors");
        shards.push(entry(dir, file, ShardFormat::Packed, n, &bytes));
    }
    write_manifest(
        dir,
        &["key", "label", "npy", "pixels"],
        &["json", "txt"],
        shards,
    );
    i
}

/// What a packed record's `json` reads as: the carried json, else its sample object less
/// `fields` (keys in order, as serde_json writes them).
fn packed_json(i: u32) -> Vec<u8> {
    if i % 2 == 1 {
        return input_json(i);
    }
    let own =
        serde_json::json!({"key": key(i), "label": label(i), "source": format!("in/{i}.png")});
    serde_json::to_vec(&own).unwrap()
}

/// Checks every delivered sample's label and fields against what was written; returns the keys.
fn check_batches(loader: Loader, packed: bool) -> Vec<String> {
    let mut keys = Vec::new();
    for b in loader {
        let b: Batch = b.unwrap();
        assert_eq!(b.fields.len(), 3);
        let names: Vec<&str> = b.fields.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["txt", "json", "npy"]);
        for (j, k) in b.keys.iter().enumerate() {
            let i = index(k);
            assert_eq!(b.labels[j], label(i), "{k}");
            let field = |n: &str| b.field(n).unwrap().get(j).map(<[u8]>::to_vec);
            assert_eq!(field("txt"), txt(i), "{k}");
            assert_eq!(field("npy"), Some(npy(i)), "{k}");
            let json = if packed {
                packed_json(i)
            } else {
                input_json(i)
            };
            assert_eq!(field("json"), Some(json), "{k}");
        }
        for c in &b.fields {
            assert_eq!(c.len(), b.len());
        }
        keys.extend(b.keys.iter().cloned());
    }
    keys
}

fn builder(dir: &Path) -> LoaderBuilder {
    Loader::builder(dir)
        .batch_size(5)
        .fields(["txt", "json", "npy"])
}

#[test]
fn fields_follow_their_samples_in_every_mode() {
    let tar = tempfile::tempdir().unwrap();
    let packed = tempfile::tempdir().unwrap();
    let n = tar_dataset(tar.path(), &[9, 14, 6], None);
    assert_eq!(packed_dataset(packed.path(), &[9, 14, 6]), n);
    for (dir, is_packed) in [(tar.path(), false), (packed.path(), true)] {
        type Variant = fn(LoaderBuilder) -> LoaderBuilder;
        let variants: [Variant; 5] = [
            |b| b.shuffle(false).workers(1),
            |b| b.seed(3).workers(3),
            |b| b.seed(4).workers(3).in_order(false).prefetch(1),
            |b| b.seed(5).shuffle_buffer(4).interleave(2),
            |b| b.seed(6).transform(Transform::Decode).workers(2),
        ];
        for v in variants {
            let keys = check_batches(v(builder(dir)).build().unwrap(), is_packed);
            assert_eq!(keys.len(), n as usize);
        }
        // Ranks and batch shares: each part checked, together every sample once.
        let mut all = Vec::new();
        for rank in 0..2 {
            for share in 0..2 {
                let b = builder(dir)
                    .seed(8)
                    .partition(rank, 2)
                    .split(share, 2)
                    .remainder(shardtool_reader::Remainder::Pad);
                all.extend(check_batches(b.build().unwrap(), is_packed));
            }
        }
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n as usize);
    }
}

#[test]
fn fields_survive_a_resume_mid_batch() {
    let dir = tempfile::tempdir().unwrap();
    tar_dataset(dir.path(), &[11, 12], None);
    let full = check_batches(builder(dir.path()).seed(2).build().unwrap(), false);
    let mut loader = builder(dir.path()).seed(2).build().unwrap();
    drop(loader.next().unwrap().unwrap());
    let second = loader.next().unwrap().unwrap();
    assert_eq!(second.index, 1);
    let state = loader.state_within(&second, 2);
    drop(second);
    drop(loader);
    let rest = check_batches(builder(dir.path()).resume(state).build().unwrap(), false);
    assert_eq!(rest[..], full[5 + 2..]);
}

#[test]
fn skipped_corrupt_records_take_their_fields_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let n = tar_dataset(dir.path(), &[12], Some(7));
    let mut loader = builder(dir.path())
        .decode(true)
        .on_corrupt(CorruptPolicy::Skip)
        .build()
        .unwrap();
    let mut keys = Vec::new();
    for b in &mut loader {
        let b = b.unwrap();
        for c in &b.fields {
            assert_eq!(c.len(), b.len());
        }
        for (j, k) in b.keys.iter().enumerate() {
            let got = b.field("txt").unwrap().get(j).map(<[u8]>::to_vec);
            assert_eq!(got, txt(index(k)), "{k}");
        }
        keys.extend(b.keys.clone());
    }
    assert_eq!(keys.len(), n as usize - 1);
    assert!(!keys.contains(&key(7)));
    assert_eq!(loader.metrics().corrupt_skipped, 1);
}

#[test]
fn a_tar_sample_without_cls_reads_as_label_minus_one() {
    let dir = tempfile::tempdir().unwrap();
    tar_dataset(dir.path(), &[8], None);
    let loader = Loader::builder(dir.path())
        .shuffle(false)
        .batch_size(8)
        .build()
        .unwrap();
    let batches: Vec<Batch> = loader.map(Result::unwrap).collect();
    assert_eq!(batches[0].labels, (0..8).map(label).collect::<Vec<_>>());
    assert!(batches[0].labels.contains(&-1));
    // Without `fields`, a batch carries none.
    assert!(batches[0].fields.is_empty() && batches[0].field("txt").is_none());
}

/// A `.cls` that is no integer (damaged on disk) makes its record corrupt, not its shard: with
/// skipping, the shard's other samples are read.
#[test]
fn a_cls_that_is_not_an_integer_is_a_corrupt_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for (key, cls) in [("a", &b"seven"[..]), ("b", b"1"), ("c", b"0")] {
        w.append(&format!("{key}.cls"), cls).unwrap();
        w.append(&format!("{key}.png"), &png(0)).unwrap();
    }
    let bytes = w.finish().unwrap();
    let shard = entry(dir.path(), "s.tar".into(), ShardFormat::Wds, 3, &bytes);
    write_manifest(dir.path(), &["cls", "png"], &[], vec![shard]);
    let build = || Loader::builder(dir.path()).shuffle(false).batch_size(3);
    let err = build().build().unwrap().find_map(Result::err).unwrap();
    assert!(
        matches!(&err, ReadError::CorruptRecord { shard, key, message }
            if shard == "s.tar" && key == "a" && message.contains(".cls is not an integer")),
        "{err}"
    );
    let mut skipping = build().on_corrupt(CorruptPolicy::Skip).build().unwrap();
    let batch = skipping.next().unwrap().unwrap();
    assert_eq!(
        (batch.keys.as_slice(), batch.labels.as_slice()),
        (&["b".to_string(), "c".to_string()][..], &[1, 0][..])
    );
    assert_eq!(skipping.metrics().corrupt_skipped, 1);
}

/// The first error of reading the tar `members` (one shard of `n` samples) with fields
/// `cls, png, txt` declared for every sample, asking for `asked`.
fn first_error(members: &[(&str, &[u8])], n: u32, asked: &[&str]) -> Option<ReadError> {
    let dir = tempfile::tempdir().unwrap();
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for (name, data) in members {
        w.append(name, data).unwrap();
    }
    let bytes = w.finish().unwrap();
    let shard = entry(dir.path(), "s.tar".into(), ShardFormat::Wds, n, &bytes);
    write_manifest(dir.path(), &["cls", "png", "txt"], &[], vec![shard]);
    let loader = Loader::builder(dir.path()).fields(asked.iter().copied());
    loader.build().unwrap().find_map(Result::err)
}

#[test]
fn a_field_every_sample_has_by_the_manifest_is_never_delivered_missing() {
    let image = png(0);
    let members: [(&str, &[u8]); 5] = [
        ("a.cls", b"1"),
        ("a.png", &image),
        ("a.txt", b"a red bus"),
        ("b.cls", b"2"),
        ("b.png", &image),
    ];
    // Asked for: `b` lacks it, so the shard is corrupt (it was None, as an optional one's).
    let err = first_error(&members, 2, &["txt"]).expect("a missing required field passed");
    assert!(
        matches!(&err, ReadError::CorruptShard { message, .. } if message.contains("\"b\" has no .txt")),
        "{err}"
    );
    // Not asked for: the images still read.
    assert!(first_error(&members, 2, &[]).is_none());
}

#[test]
fn keys_that_could_name_a_file_elsewhere_are_refused() {
    let image = png(0);
    for key in ["a b", "a+b", "__meta"] {
        let (cls, png) = (format!("{key}.cls"), format!("{key}.png"));
        let txt = format!("{key}.txt");
        let members: [(&str, &[u8]); 3] = [(&cls, b"1"), (&png, &image), (&txt, b"t")];
        let err = first_error(&members, 1, &[]).expect("an unsafe key was delivered");
        assert!(
            matches!(&err, ReadError::CorruptShard { message, .. } if message.contains("is refused")),
            "{key}: {err}"
        );
    }
}

#[test]
fn unknown_or_built_in_fields_are_refused_at_build() {
    let dir = tempfile::tempdir().unwrap();
    tar_dataset(dir.path(), &[3], None);
    let err = |names: &[&str]| match Loader::builder(dir.path())
        .fields(names.iter().copied())
        .build()
    {
        Err(ReadError::BadOptions(m)) => m,
        Err(e) => panic!("{names:?}: {e}"),
        Ok(_) => panic!("{names:?} accepted"),
    };
    let m = err(&["caption"]);
    assert!(m.contains("\"caption\""), "{m}");
    assert!(
        m.contains("json, npy in every sample and cls, txt in some"),
        "{m}"
    );
    let m = err(&["png"]);
    assert!(m.contains("image data"), "{m}");
    // `cls` is a field like the others: its text, absent for unlabelled samples.
    let b = Loader::builder(dir.path())
        .shuffle(false)
        .fields(["cls"])
        .build()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let cls: Vec<Option<&[u8]>> = b.fields[0].iter().collect();
    assert_eq!(cls, [None, Some(&b"1\n"[..]), Some(b"2\n")]);
}
