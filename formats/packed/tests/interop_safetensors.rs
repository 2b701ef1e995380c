//! Interop with the reference Rust `safetensors` crate: our shards deserialize
//! there and its tensors agree with what `PackedShard` returns.
#![allow(clippy::unwrap_used)]

mod common;

use common::{recs, write};
use safetensors::{Dtype, SafeTensors};
use shardtool_packed::{Mode, PackedShard, ShardMode};

fn le_u64s(data: &[u8]) -> Vec<u64> {
    data.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn check_common(st: &SafeTensors<'_>, shard: &PackedShard<&[u8]>) {
    let n = shard.len();
    let labels = st.tensor("labels").unwrap();
    assert_eq!(labels.dtype(), Dtype::I64);
    assert_eq!(labels.shape(), [n]);
    let labels: Vec<i64> = le_u64s(labels.data())
        .into_iter()
        .map(|x| x as i64)
        .collect();
    let checksums = st.tensor("checksums").unwrap();
    assert_eq!(checksums.dtype(), Dtype::U64);
    assert_eq!(checksums.shape(), [n]);
    let checksums = le_u64s(checksums.data());
    for (i, r) in shard.records().enumerate() {
        assert_eq!(labels[i], r.label);
        assert_eq!(checksums[i], r.checksum);
    }
}

fn check_metadata(bytes: &[u8], mode: &str, n: usize) {
    let (header_len, meta) = SafeTensors::read_metadata(bytes).unwrap();
    assert_eq!((8 + header_len) % 4096, 0);
    let map = meta.metadata().as_ref().unwrap();
    assert_eq!(map["format"], "shardtool.packed");
    assert_eq!(map["version"], "1");
    assert_eq!(map["mode"], mode);
    let samples: Vec<serde_json::Value> = serde_json::from_str(&map["samples"]).unwrap();
    assert_eq!(samples.len(), n);
}

#[test]
fn fixed_shard_reads_in_safetensors() {
    let r = recs(&[(5, 7); 4]);
    let bytes = write(Mode::Fixed, &r);
    let shard = PackedShard::open(&bytes[..]).unwrap();
    assert_eq!(shard.mode(), ShardMode::Fixed);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort_unstable();
    assert_eq!(names, ["checksums", "images", "labels"]);

    let images = st.tensor("images").unwrap();
    assert_eq!(images.dtype(), Dtype::U8);
    assert_eq!(images.shape(), [4, 5, 7, 3]);
    let expected: Vec<u8> = shard.records().flat_map(|r| r.pixels.to_vec()).collect();
    assert_eq!(images.data(), &expected[..]);
    // Zero copy: the record views point into the same bytes.
    assert_eq!(images.data().as_ptr(), shard.record(0).pixels.as_ptr());
    check_common(&st, &shard);
    check_metadata(&bytes, "fixed", 4);
}

#[test]
fn variable_shard_reads_in_safetensors() {
    let r = recs(&[(1, 1), (9, 4), (2, 11), (3, 3), (1, 22)]);
    let bytes = write(Mode::Auto, &r);
    let shard = PackedShard::open(&bytes[..]).unwrap();
    assert_eq!(shard.mode(), ShardMode::Variable);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort_unstable();
    assert_eq!(
        names,
        ["checksums", "labels", "offsets", "pixels", "shapes"]
    );

    let pixels = st.tensor("pixels").unwrap();
    assert_eq!(pixels.dtype(), Dtype::U8);
    let offsets = st.tensor("offsets").unwrap();
    assert_eq!(offsets.dtype(), Dtype::U64);
    assert_eq!(offsets.shape(), [6]);
    let offsets = le_u64s(offsets.data());
    assert_eq!(offsets[5] as usize, pixels.data().len());
    assert_eq!(pixels.shape(), [pixels.data().len()]);
    let shapes = st.tensor("shapes").unwrap();
    assert_eq!(shapes.dtype(), Dtype::U32);
    assert_eq!(shapes.shape(), [5, 3]);
    let shapes: Vec<u32> = shapes
        .data()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();

    for (i, rec) in shard.records().enumerate() {
        assert_eq!(&shapes[3 * i..3 * i + 3], &rec.shape);
        let off = offsets[i] as usize;
        assert_eq!(off % 64, 0);
        assert_eq!(&pixels.data()[off..off + rec.pixels.len()], rec.pixels);
        assert_eq!(rec.pixels, &r[i].pixels[..]);
    }
    check_common(&st, &shard);
    check_metadata(&bytes, "variable", 5);
}

#[test]
fn a_shard_with_carried_fields_reads_in_safetensors() {
    let mut r = recs(&[(2, 2); 2]);
    r[0].meta = serde_json::json!({"fields": {
        "txt": shardtool_packed::field_value("a caption".as_bytes()),
        "bin": shardtool_packed::field_value(b"\xff\x00"),
    }});
    let bytes = write(Mode::Fixed, &r);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let shard = PackedShard::open(&bytes[..]).unwrap();
    check_common(&st, &shard);
    check_metadata(&bytes, "fixed", 2);
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let samples: Vec<serde_json::Value> =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["samples"]).unwrap();
    assert_eq!(samples[0]["fields"]["txt"], "a caption");
    assert_eq!(samples[0]["fields"]["bin"]["base64"], "/wA=");
}
