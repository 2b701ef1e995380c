//! Property tests: random byte flips and truncations never make `open` panic,
//! and random record sets round-trip in every mode.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::OnceLock;

use common::{fixed_shard, recs, variable_shard, write, Rec};
use proptest::prelude::*;
use proptest::sample::Index;
use shardtool_packed::{Mode, PackedShard, ShardMode};

/// Valid shards to mutate, with the end of their JSON header and the start of
/// their data buffer.
fn bases() -> &'static [(Vec<u8>, usize, usize)] {
    static BASES: OnceLock<Vec<(Vec<u8>, usize, usize)>> = OnceLock::new();
    BASES.get_or_init(|| {
        [
            variable_shard().0,
            fixed_shard().0,
            write(Mode::Variable, &recs(&[(1, 1)])),
            write(Mode::Fixed, &recs(&[(1, 3); 5])),
        ]
        .into_iter()
        .map(|b| {
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let json_end = 8 + b[8..8 + n].iter().rposition(|&c| c != b' ').unwrap() + 1;
            (b, json_end, 8 + n)
        })
        .collect()
    })
}

/// Opens `bytes`; if that succeeds, every accessor must work in bounds.
fn exercise(bytes: &[u8]) {
    let Ok(shard) = PackedShard::open(bytes) else {
        return;
    };
    for i in 0..shard.len() {
        let r = shard.record(i);
        let [h, w, c] = r.shape;
        assert_eq!(c, 3);
        assert_eq!(r.pixels.len() as u64, u64::from(h) * u64::from(w) * 3);
        assert!(shard.sample_meta(i).is_object());
        assert!(!r.key.is_empty());
        let _ = shard.verify_checksum(i);
    }
    assert!(shard.get(shard.len()).is_none());
    let bad = shard.verify_all();
    assert!(bad.iter().all(|&i| i < shard.len()));
}

/// Where a flip lands: the length prefix, the JSON, or the data buffer.
#[derive(Debug, Clone)]
enum Spot {
    Prefix(Index),
    Json(Index),
    Data(Index),
    Anywhere(Index),
}

fn spot() -> impl Strategy<Value = Spot> {
    prop_oneof![
        1 => any::<Index>().prop_map(Spot::Prefix),
        4 => any::<Index>().prop_map(Spot::Json),
        4 => any::<Index>().prop_map(Spot::Data),
        1 => any::<Index>().prop_map(Spot::Anywhere),
    ]
}

fn position(spot: &Spot, len: usize, json_end: usize, data_start: usize) -> usize {
    match spot {
        Spot::Prefix(i) => i.index(8),
        Spot::Json(i) => 8 + i.index(json_end - 8),
        Spot::Data(i) => data_start + i.index(len - data_start),
        Spot::Anywhere(i) => i.index(len),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn flips_never_panic(
        base in any::<Index>(),
        flips in prop::collection::vec((spot(), 1u8..=255), 1..8),
        cut in prop::option::of(any::<Index>()),
    ) {
        let (orig, json_end, data_start) = &bases()[base.index(bases().len())];
        let mut bytes = orig.clone();
        for (s, x) in &flips {
            let at = position(s, bytes.len(), *json_end, *data_start);
            bytes[at] ^= x;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        exercise(&bytes);
    }

    #[test]
    fn truncations_never_panic(base in any::<Index>(), cut in any::<Index>()) {
        let (orig, _, _) = &bases()[base.index(bases().len())];
        let len = cut.index(orig.len());
        prop_assert!(PackedShard::open(&orig[..len]).is_err());
    }

    #[test]
    fn random_records_round_trip(
        shapes in prop::collection::vec((1u32..12, 1u32..12), 1..24),
        labels in prop::collection::vec(any::<i64>(), 24),
        mode in prop_oneof![Just(Mode::Auto), Just(Mode::Variable)],
        seed in any::<u32>(),
    ) {
        let records: Vec<Rec> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(h, w))| Rec {
                key: format!("k{seed}-{i}"),
                label: labels[i],
                height: h,
                width: w,
                pixels: common::rgb(h, w, seed.wrapping_add(i as u32)),
                meta: serde_json::json!({"seed": seed}),
            })
            .collect();
        let bytes = write(mode, &records);
        let shard = PackedShard::open(&bytes).unwrap();
        let uniform = shapes.iter().all(|s| *s == shapes[0]);
        let expect = if mode == Mode::Auto && uniform { ShardMode::Fixed } else { ShardMode::Variable };
        prop_assert_eq!(shard.mode(), expect);
        prop_assert_eq!(shard.len(), records.len());
        for (i, r) in records.iter().enumerate() {
            let v = shard.record(i);
            prop_assert_eq!(v.key, r.key.as_str());
            prop_assert_eq!(v.label, r.label);
            prop_assert_eq!(v.shape, [r.height, r.width, 3]);
            prop_assert_eq!(v.pixels, &r.pixels[..]);
        }
        prop_assert!(shard.verify_all().is_empty());
    }
}
