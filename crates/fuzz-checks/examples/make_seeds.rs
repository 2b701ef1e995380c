//! Writes the seed inputs of every fuzz target under `fuzz/seeds/<target>/`.
//!
//! Run from the repository root with `cargo run -p shardtool-fuzz-checks --example make_seeds`.
//! The output is deterministic (but for the plan records, which name the temporary folder they
//! were made in); the seeds are committed, so this only needs rerunning when a format changes.
//! The Parquet seeds come from pyarrow, the writer users have: `fuzz/make_parquet_seeds.py`.

use std::error::Error;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::{ImageFormat, RgbImage};
use shardtool_manifest::{InputCounts, Manifest, ShardEntry, ShardFormat, Totals};
use shardtool_packed::{Mode, PackedWriter};
use shardtool_wds::TarWriter;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    packed(&root.join("packed_open"))?;
    let images = images()?;
    wds(&root.join("wds_tar"), &images)?;
    manifest(&root.join("manifest"))?;
    let dir = root.join("image_transform");
    for (name, bytes) in &images {
        write(&dir, name, bytes)?;
    }
    // The crop target reads its box and options from eight leading bytes: a centred half-size
    // box, and a corner box with the flip and the unfused path.
    let dir = root.join("crop");
    for (name, bytes) in &images {
        for (tag, head) in [
            ("centre", [31u8, 0, 50, 50, 100, 100, 0, 0]),
            ("corner", [7, 3, 0, 150, 60, 60, 9, 1]),
        ] {
            write(&dir, &format!("{tag}-{name}"), &[&head[..], bytes].concat())?;
        }
    }
    lists(&root.join("list"))?;
    options(&root.join("options"))?;
    planned(&root.join("plan_records"), &root.join("loader_state"))?;
    datasets(&root.join("dataset"), &root.join("wds_input"))?;
    Ok(())
}

/// One-shard datasets packed from a JSONL list with captions (tar, tar + zstd, packed), each
/// as the `dataset` target reads it: flags (bit 0: decode), manifest length, manifest, shard.
/// The tar shard is also a `wds_input` seed.
fn datasets(dir: &Path, wds_dir: &Path) -> Result<()> {
    use shardtool_pack::{Compression, PackPlan, ShardFormatChoice};
    let t = std::env::temp_dir().join(format!("shardtool-seeds-ds-{}", std::process::id()));
    let _ = fs::remove_dir_all(&t);
    fs::create_dir_all(&t)?;
    let mut rows = String::new();
    for (i, fmt) in [ImageFormat::Jpeg, ImageFormat::Png, ImageFormat::Jpeg]
        .into_iter()
        .enumerate()
    {
        let name = format!(
            "{i}.{}",
            if fmt == ImageFormat::Png {
                "png"
            } else {
                "jpg"
            }
        );
        RgbImage::from_raw(6, 5, pixels(5, 6, i as u8))
            .ok_or("bad raw image")?
            .save_with_format(t.join(&name), fmt)?;
        rows.push_str(&format!("{{\"path\": \"{name}\", \"label\": {}, \"text\": \"caption {i}\", \"score\": {i}.5}}\n", i % 2));
    }
    fs::write(t.join("list.jsonl"), rows)?;
    for (name, format, compression) in [
        ("tar", ShardFormatChoice::Wds, Compression::None),
        ("tar_zstd", ShardFormatChoice::Wds, Compression::Zstd(3)),
        ("packed", ShardFormatChoice::Packed, Compression::None),
    ] {
        let out = t.join(name);
        let mut plan = PackPlan::new(
            shardtool_pack::InputSource::List(t.join("list.jsonl")),
            out.clone(),
        );
        plan.format = format;
        plan.compression = compression;
        shardtool_pack::pack(&plan, &shardtool_pack::NoProgress)?;
        let manifest = fs::read(out.join("manifest.json"))?;
        let m = Manifest::from_slice(&manifest, 1 << 20)?;
        let shard = fs::read(out.join(&m.shards[0].file))?;
        let len = u16::try_from(manifest.len())?.to_le_bytes();
        for flags in [0u8, 1] {
            write(
                dir,
                &format!("{name}-{flags}"),
                &[&[flags][..], &len, &manifest, &shard].concat(),
            )?;
        }
        if name == "tar" {
            write(wds_dir, "packed.tar", &shard)?;
        }
    }
    fs::remove_dir_all(&t)?;
    Ok(())
}

/// List files: the first byte picks CSV (even) or JSONL (odd) and the named columns.
fn lists(dir: &Path) -> Result<()> {
    let csv = "path,label,key,text,score\na/1.jpg,cat,k1,a cat,0.5\n\"b/2 ,x.png\",dog,,\"two\nlines\",1\n,cat,,,\n";
    write(dir, "default.csv", &[b"\x00", csv.as_bytes()].concat())?;
    let named = "img,cls,caption\nx.jpg,3,hello\ny.jpg,-1,\nz.jpg,7,bye\n";
    write(dir, "named.csv", &[b"\x0e", named.as_bytes()].concat())?;
    let jsonl = concat!(
        r#"{"path": "a/1.jpg", "label": 0, "text": "a cat", "meta": {"w": 3}}"#,
        "\n\n",
        r#"{"path": "b/2.png", "label": 2, "key": "k2"}"#,
        "\n",
        r#"{"label": 1}"#,
        "\nnot json\n"
    );
    write(dir, "default.jsonl", &[b"\x01", jsonl.as_bytes()].concat())?;
    // Members named twice and labels that are numbers but no class index: error lines.
    let twice = concat!(
        r#"{"path": "a.jpg", "label": 1, "path": "b.jpg"}"#,
        "\n",
        r#"{"path": "c.jpg", "label": 3.5}"#,
        "\n",
        r#"{"path": "d.jpg", "label": 1e20, "x": 1, "x": 2}"#,
        "\n",
        r#"{"path": "e.jpg", "label": 2}"#,
        "\n"
    );
    write(dir, "twice.jsonl", &[b"\x01", twice.as_bytes()].concat())?;
    // A header naming a column twice (ignoring case): the list is refused.
    let header = "path,label,Note,note\na.jpg,1,x,y\n";
    write(
        dir,
        "header_twice.csv",
        &[b"\x00", header.as_bytes()].concat(),
    )
}

/// Option strings, as Python users pass them.
fn options(dir: &Path) -> Result<()> {
    for (name, text) in [
        (
            "rrc",
            "random-resized-crop:224,scale=0.08-1,ratio=0.75-1.3333333333333333",
        ),
        ("center", "center-crop:224,ratio=0.875"),
        ("resize", "shorter:256"),
        ("fit", "fit:640x480"),
        ("decode_scale", "gap:2"),
        ("encode", "jpeg"),
        ("size", "512MiB"),
        ("checksum", "xxh3:0123456789abcdef"),
        ("s3", "s3://bucket/prefix/manifest.json"),
        ("https", "https://user:secret@example.com/data/"),
    ] {
        write(dir, &format!("{name}.txt"), text.as_bytes())?;
    }
    Ok(())
}

/// A planned pack's records (`plan.json`, `inputs.jsonl` and a done record, each behind the byte
/// that picks it) and a saved loader state over the packed dataset.
fn planned(dir: &Path, states: &Path) -> Result<()> {
    let t = std::env::temp_dir().join(format!("shardtool-seeds-{}", std::process::id()));
    let _ = fs::remove_dir_all(&t);
    for (class, name, fmt) in [
        ("a", "x.jpg", ImageFormat::Jpeg),
        ("a", "y.png", ImageFormat::Png),
        ("b", "z.jpg", ImageFormat::Jpeg),
    ] {
        fs::create_dir_all(t.join("in").join(class))?;
        RgbImage::from_raw(4, 4, pixels(4, 4, 1))
            .ok_or("bad raw image")?
            .save_with_format(t.join("in").join(class).join(name), fmt)?;
    }
    let mut plan = shardtool_pack::PackPlan::new(
        shardtool_pack::InputSource::Folder(t.join("in")),
        t.join("out"),
    );
    plan.shard_samples = Some(2);
    let hash = shardtool_pack::make_plan(&plan, &shardtool_pack::NoProgress)?.hash;
    let all = shardtool_pack::Assignment::Part { index: 0, count: 1 };
    shardtool_pack::pack_part(
        &t.join("out"),
        &all,
        None,
        None,
        &shardtool_pack::NoProgress,
    )?;
    let p = t.join("out").join(shardtool_pack::PLAN_DIR);
    write(
        dir,
        "plan.json",
        &[b"\x00", &fs::read(p.join("plan.json"))?[..]].concat(),
    )?;
    write(
        dir,
        "inputs.jsonl",
        &[b"\x01", &fs::read(p.join("inputs.jsonl"))?[..]].concat(),
    )?;
    // The done target checks records against the plan it makes itself: name that plan's hash.
    let done = String::from_utf8(fs::read(p.join("done").join("000000.json"))?)?
        .replace(&hash, shardtool_pack::fuzzing::DONE_PLAN);
    write(dir, "done.json", &[b"\x02", done.as_bytes()].concat())?;
    shardtool_pack::merge(&t.join("out"), None)?;
    let mut loader = shardtool_reader::Loader::builder(t.join("out"))
        .batch_size(2)
        .build()?;
    let first = loader.next().ok_or("no batch")??;
    write(
        states,
        "after_one_batch.json",
        serde_json::to_string(&loader.state_within(&first, 1))?.as_bytes(),
    )?;
    write(
        states,
        "start.json",
        serde_json::to_string(
            &shardtool_reader::Loader::builder(t.join("out"))
                .build()?
                .state(),
        )?
        .as_bytes(),
    )?;
    fs::remove_dir_all(&t)?;
    Ok(())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join(name), bytes)?;
    println!("{} ({} bytes)", dir.join(name).display(), bytes.len());
    Ok(())
}

/// A deterministic gradient, so the seeds compress like photos rather than noise.
fn pixels(h: u32, w: u32, salt: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity((h * w * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            out.extend_from_slice(&[
                (x * 16) as u8 ^ salt,
                (y * 16) as u8,
                ((x + y) * 8) as u8 ^ salt,
            ]);
        }
    }
    out
}

/// One fixed-shape shard and one variable-shape shard, both a few records.
fn packed(dir: &Path) -> Result<()> {
    let mut fixed = PackedWriter::new(Mode::Fixed);
    for i in 0..3u8 {
        fixed.add(
            &format!("f{i}"),
            i64::from(i),
            4,
            4,
            &pixels(4, 4, i),
            serde_json::json!({"src": format!("a/{i}.jpg")}),
        )?;
    }
    let mut bytes = Vec::new();
    fixed.finish(&mut bytes)?;
    write(dir, "fixed.safetensors", &bytes)?;

    let mut variable = PackedWriter::new(Mode::Variable);
    for (i, (h, w)) in [(2u32, 3u32), (5, 1), (1, 7)].into_iter().enumerate() {
        variable.add(
            &format!("v{i}"),
            -(i as i64),
            h,
            w,
            &pixels(h, w, i as u8),
            serde_json::Value::Null,
        )?;
    }
    let mut bytes = Vec::new();
    variable.finish(&mut bytes)?;
    write(dir, "variable.safetensors", &bytes)?;
    Ok(())
}

/// A small JPEG, a JPEG with odd dimensions and a PNG.
fn images() -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for (name, w, h, format) in [
        ("small.jpg", 16, 16, ImageFormat::Jpeg),
        ("odd.jpg", 13, 9, ImageFormat::Jpeg),
        ("small.png", 8, 6, ImageFormat::Png),
    ] {
        let img = RgbImage::from_raw(w, h, pixels(h, w, 7)).ok_or("bad raw image")?;
        let mut bytes = Cursor::new(Vec::new());
        img.write_to(&mut bytes, format)?;
        out.push((name.to_string(), bytes.into_inner()));
    }
    Ok(out)
}

/// A WebDataset tar of two samples with the usual fields.
fn wds(dir: &Path, images: &[(String, Vec<u8>)]) -> Result<()> {
    let mut tar = TarWriter::new(Vec::new());
    tar.append("__meta__.json", b"{}")?;
    tar.append("s/000000.cls", b"0")?;
    tar.append("s/000000.jpg", &images[0].1)?;
    tar.append("s/000000.json", br#"{"src":"a.jpg"}"#)?;
    tar.append("s/000001.cls", b"1")?;
    tar.append("s/000001.png", &images[2].1)?;
    let bytes = tar.finish()?;
    write(dir, "two_samples.tar", &bytes)
}

/// A valid manifest of two shards, one of them compressed.
fn manifest(dir: &Path) -> Result<()> {
    let shards = vec![
        ShardEntry {
            file: "shard-000000.tar".into(),
            format: ShardFormat::Wds,
            compression: None,
            samples: 3,
            bytes: 10_240,
            checksum: "xxh3:0123456789abcdef".into(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        },
        ShardEntry {
            file: "shard-000001.safetensors.zst".into(),
            format: ShardFormat::Packed,
            compression: Some(shardtool_manifest::Compression::Zstd),
            samples: 2,
            bytes: 4_000,
            checksum: "xxh3:fedcba9876543210".into(),
            uncompressed_bytes: Some(8_192),
            uncompressed_checksum: Some("xxh3:00000000ffffffff".into()),
        },
    ];
    let mut pack = serde_json::Map::new();
    pack.insert("resize".into(), "shorter:256".into());
    pack.insert("quality".into(), 90.into());
    pack.insert("seed".into(), 42.into());
    let m = Manifest {
        format: shardtool_manifest::FORMAT.into(),
        version: shardtool_manifest::VERSION,
        tool: "shardtool 0.1.0".into(),
        pack,
        classes: vec!["flower".into(), "leaf".into()],
        fields: vec!["cls".into(), "jpg".into(), "json".into()],
        optional_fields: vec!["txt".into()],
        shards,
        totals: Totals {
            samples: 5,
            shards: 2,
            bytes: 14_240,
        },
        inputs: InputCounts {
            found: 6,
            packed: 5,
            failed: 1,
            ignored: 0,
        },
    };
    m.validate()?;
    write(dir, "manifest.json", &m.to_json())
}
