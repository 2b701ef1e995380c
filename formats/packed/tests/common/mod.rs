//! Helpers shared by the integration tests: building shards and surgically
//! editing their header and data buffer.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::{json, Map, Value};
use shardtool_packed::{Mode, PackedWriter};

/// A record as the tests add it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rec {
    pub key: String,
    pub label: i64,
    pub height: u32,
    pub width: u32,
    pub pixels: Vec<u8>,
    pub meta: Value,
}

/// Deterministic RGB8 pixels for an `h x w` record.
pub fn rgb(h: u32, w: u32, seed: u32) -> Vec<u8> {
    (0..h * w * 3)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(97)) % 251) as u8)
        .collect()
}

/// Records with the given shapes; labels and metadata derived from the index.
pub fn recs(shapes: &[(u32, u32)]) -> Vec<Rec> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, &(h, w))| Rec {
            key: format!("sample/{i:04}"),
            label: i as i64 * 7 - 3,
            height: h,
            width: w,
            pixels: rgb(h, w, i as u32),
            meta: json!({"src": format!("img{i}.jpg"), "i": i}),
        })
        .collect()
}

/// Writes `records` with `mode` into a byte vector.
pub fn write(mode: Mode, records: &[Rec]) -> Vec<u8> {
    let mut w = PackedWriter::new(mode);
    for r in records {
        w.add(
            &r.key,
            r.label,
            r.height,
            r.width,
            &r.pixels,
            r.meta.clone(),
        )
        .unwrap();
    }
    let est = w.estimated_size();
    let mut out = Vec::new();
    let summary = w.finish(&mut out).unwrap();
    assert_eq!(summary.total_len, out.len() as u64);
    assert_eq!(est, out.len() as u64);
    out
}

/// The standard variable-shape shard used by the mutation tests: record 1 is
/// 1x1 (3 bytes padded to 64), so it can move within its slot.
pub fn variable_shard() -> (Vec<u8>, Vec<Rec>) {
    let r = recs(&[(3, 5), (1, 1), (4, 2)]);
    (write(Mode::Variable, &r), r)
}

/// The standard fixed-shape shard used by the mutation tests.
pub fn fixed_shard() -> (Vec<u8>, Vec<Rec>) {
    let r = recs(&[(3, 5), (3, 5), (3, 5)]);
    (write(Mode::Fixed, &r), r)
}

/// A shard split into its JSON header and its data buffer.
#[derive(Debug, Clone)]
pub struct Parts {
    pub header: Map<String, Value>,
    pub data: Vec<u8>,
}

impl Parts {
    /// Splits a well-formed shard.
    pub fn split(bytes: &[u8]) -> Parts {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        Parts {
            header,
            data: bytes[8 + n..].to_vec(),
        }
    }

    /// Reassembles with the header padded so that the data buffer starts on
    /// a 4096-byte boundary.
    pub fn join(&self) -> Vec<u8> {
        let json = serde_json::to_vec(&self.header).unwrap();
        let n = (8 + json.len()).next_multiple_of(4096) - 8;
        self.join_with_header_len(n)
    }

    /// Reassembles with exactly `n` header bytes (JSON plus spaces).
    pub fn join_with_header_len(&self, n: usize) -> Vec<u8> {
        let json = serde_json::to_vec(&self.header).unwrap();
        assert!(n >= json.len());
        let mut out = (n as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&json);
        out.resize(8 + n, b' ');
        out.extend_from_slice(&self.data);
        out
    }

    /// The `data_offsets` of tensor `name`.
    pub fn range(&self, name: &str) -> (usize, usize) {
        let o = &self.header[name]["data_offsets"];
        (
            o[0].as_u64().unwrap() as usize,
            o[1].as_u64().unwrap() as usize,
        )
    }

    /// Sets a field of tensor `name`'s header entry.
    pub fn set(&mut self, name: &str, field: &str, value: Value) {
        self.header
            .get_mut(name)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(field.into(), value);
    }

    /// The metadata map.
    pub fn meta(&mut self) -> &mut Map<String, Value> {
        self.header
            .get_mut("__metadata__")
            .unwrap()
            .as_object_mut()
            .unwrap()
    }

    /// Reads element `i` of a u64 tensor.
    pub fn get_u64(&self, name: &str, i: usize) -> u64 {
        let (b, _) = self.range(name);
        u64::from_le_bytes(self.data[b + 8 * i..b + 8 * i + 8].try_into().unwrap())
    }

    /// Writes element `i` of a u64 tensor.
    pub fn put_u64(&mut self, name: &str, i: usize, v: u64) {
        let (b, _) = self.range(name);
        self.data[b + 8 * i..b + 8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Writes element `i` of a u32 tensor.
    pub fn put_u32(&mut self, name: &str, i: usize, v: u32) {
        let (b, _) = self.range(name);
        self.data[b + 4 * i..b + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Removes the last `count` bytes of tensor `name` from the data buffer and
    /// shifts the tensors after it, keeping the buffer exactly covered.
    pub fn shrink(&mut self, name: &str, count: usize) {
        let (b, e) = self.range(name);
        self.data.drain(e - count..e);
        let names: Vec<String> = self
            .header
            .keys()
            .filter(|k| *k != "__metadata__")
            .cloned()
            .collect();
        for other in names {
            let (ob, oe) = self.range(&other);
            if other == name {
                self.set(&other, "data_offsets", json!([b, e - count]));
            } else if ob >= e {
                self.set(&other, "data_offsets", json!([ob - count, oe - count]));
            }
        }
    }
}
