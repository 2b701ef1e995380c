//! Write-then-open round trips for both layouts, mode selection and layout
//! invariants (alignment, tensor order).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{recs, rgb, write, Parts, Rec};
use serde_json::json;
use shardtool_packed::{
    checksum, field_value, Error, FieldValue, Limits, Mode, PackedShard, PackedWriter, ShardMode,
    DATA_ALIGN, RECORD_ALIGN,
};

/// Asserts that `shard` holds exactly `records`, in order.
fn assert_same<B: AsRef<[u8]>>(shard: &PackedShard<B>, records: &[Rec]) {
    assert_eq!(shard.len(), records.len());
    assert_eq!(shard.is_empty(), records.is_empty());
    for (i, r) in records.iter().enumerate() {
        let v = shard.record(i);
        assert_eq!(v.key, r.key);
        assert_eq!(v.label, r.label);
        assert_eq!(v.shape, [r.height, r.width, 3]);
        assert_eq!(v.height(), r.height);
        assert_eq!(v.width(), r.width);
        assert_eq!(v.pixels, &r.pixels[..]);
        assert_eq!(v.checksum, checksum(&r.pixels));
        assert!(v.checksum_ok());
        assert_eq!(shard.get(i), Some(v));
        let meta = shard.sample_meta(i);
        assert_eq!(meta["key"], r.key.as_str());
        assert_eq!(meta["label"], r.label);
        for (k, val) in r.meta.as_object().into_iter().flatten() {
            assert_eq!(&meta[k], val);
        }
    }
    assert_eq!(shard.get(records.len()), None);
    assert!(shard.verify_all().is_empty());
    assert_eq!(shard.records().count(), records.len());
}

/// Tensor names in buffer order with their data_offsets.
fn buffer_order(bytes: &[u8]) -> Vec<(String, usize, usize)> {
    let parts = Parts::split(bytes);
    let mut v: Vec<_> = parts
        .header
        .keys()
        .filter(|k| *k != "__metadata__")
        .map(|k| {
            let (b, e) = parts.range(k);
            (k.clone(), b, e)
        })
        .collect();
    v.sort_by_key(|t| (t.1, t.2));
    v
}

#[test]
fn fixed_round_trip() {
    let r = recs(&[(4, 3); 5]);
    let bytes = write(Mode::Fixed, &r);
    let shard = PackedShard::open(&bytes[..]).unwrap();
    assert_eq!(shard.mode(), ShardMode::Fixed);
    assert_eq!(shard.data_offset() % DATA_ALIGN, 0);
    assert_same(&shard, &r);
    let meta = shard.metadata();
    assert_eq!(meta["format"], "shardtool.packed");
    assert_eq!(meta["version"], "1");
    assert_eq!(meta["mode"], "fixed");

    let order = buffer_order(&bytes);
    let names: Vec<&str> = order.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, ["images", "labels", "checksums"]);
    assert_eq!(order[0].1, 0);
    // 5 * 4 * 3 * 3 = 180 bytes of images: labels start at 180 (4-aligned only).
    assert_eq!(order[1].1, 180);
}

#[test]
fn variable_round_trip_and_alignment() {
    let r = recs(&[(1, 1), (3, 5), (7, 2), (17, 13), (2, 2), (1, 64)]);
    let bytes = write(Mode::Variable, &r);
    let shard = PackedShard::open(bytes.clone()).unwrap();
    assert_eq!(shard.mode(), ShardMode::Variable);
    assert_eq!(shard.metadata()["mode"], "variable");
    assert_same(&shard, &r);

    let base = shard.as_bytes().as_ptr() as usize + shard.data_offset() as usize;
    for v in shard.records() {
        let rel = v.pixels.as_ptr() as usize - base;
        assert_eq!(rel as u64 % RECORD_ALIGN, 0, "record {} misaligned", v.key);
    }

    let order = buffer_order(&bytes);
    let names: Vec<&str> = order.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(
        names,
        ["pixels", "offsets", "labels", "checksums", "shapes"]
    );
    assert_eq!(order[0].1, 0);
    assert_eq!(order[0].2 % 64, 0);
    for t in &order[1..] {
        assert_eq!(t.1 % 8, 0, "{} not 8-byte aligned", t.0);
    }
    // Zero padding between records.
    let parts = Parts::split(&bytes);
    let (pb, pe) = parts.range("pixels");
    let pixels = &parts.data[pb..pe];
    let mut covered = vec![false; pixels.len()];
    for i in 0..r.len() {
        let off = parts.get_u64("offsets", i) as usize;
        covered[off..off + r[i].pixels.len()].fill(true);
    }
    assert!(pixels.iter().zip(&covered).all(|(&b, &c)| c || b == 0));
    assert_eq!(parts.get_u64("offsets", r.len()) as usize, pixels.len());
}

#[test]
fn auto_mode_picks_layout() {
    let same = recs(&[(2, 3); 4]);
    let mixed = recs(&[(2, 3), (2, 3), (3, 2)]);
    let shard = PackedShard::open(write(Mode::Auto, &same)).unwrap();
    assert_eq!(shard.mode(), ShardMode::Fixed);
    assert_same(&shard, &same);
    let shard = PackedShard::open(write(Mode::Auto, &mixed)).unwrap();
    assert_eq!(shard.mode(), ShardMode::Variable);
    assert_same(&shard, &mixed);
    let shard = PackedShard::open(write(Mode::Variable, &same)).unwrap();
    assert_eq!(shard.mode(), ShardMode::Variable);
    assert_same(&shard, &same);

    let mut w = PackedWriter::new(Mode::Auto);
    assert_eq!(w.resolved_mode(), ShardMode::Variable);
    w.add("a", 1, 2, 2, &rgb(2, 2, 0), json!({})).unwrap();
    assert_eq!(w.resolved_mode(), ShardMode::Fixed);
    w.add("b", 1, 2, 1, &rgb(2, 1, 0), json!({})).unwrap();
    assert_eq!(w.resolved_mode(), ShardMode::Variable);
}

#[test]
fn single_odd_records() {
    for mode in [Mode::Fixed, Mode::Variable, Mode::Auto] {
        let r = recs(&[(1, 1)]);
        let shard = PackedShard::open(write(mode, &r)).unwrap();
        assert_same(&shard, &r);
    }
    // Odd image tensor size: 3 * 1 * 3 * 3 = 27 bytes, labels at an odd offset.
    let r = recs(&[(1, 3); 3]);
    let bytes = write(Mode::Fixed, &r);
    assert_eq!(buffer_order(&bytes)[1].1, 27);
    assert_same(&PackedShard::open(&bytes).unwrap(), &r);
}

#[test]
fn many_records() {
    let shapes: Vec<(u32, u32)> = (0..1500u32).map(|i| (1 + i % 13, 1 + i % 7)).collect();
    let r = recs(&shapes);
    let bytes = write(Mode::Auto, &r);
    let shard = PackedShard::open(bytes).unwrap();
    assert_eq!(shard.mode(), ShardMode::Variable);
    assert_same(&shard, &r);

    let r = recs(&vec![(5, 9); 1000]);
    let shard = PackedShard::open(write(Mode::Auto, &r)).unwrap();
    assert_eq!(shard.mode(), ShardMode::Fixed);
    assert_same(&shard, &r);
}

#[test]
fn other_owners() {
    let r = recs(&[(2, 2), (3, 1)]);
    let bytes = write(Mode::Auto, &r);
    let arc: Arc<[u8]> = bytes.clone().into();
    assert_same(&PackedShard::open(arc).unwrap(), &r);
    let boxed: Box<[u8]> = bytes.clone().into_boxed_slice();
    assert_same(&PackedShard::open(boxed).unwrap(), &r);
    let shard = PackedShard::open(bytes.clone()).unwrap();
    assert_eq!(shard.into_inner(), bytes);
}

#[test]
fn unicode_and_escapes_in_metadata() {
    let mut r = recs(&[(2, 2), (1, 2)]);
    r[0].key = "dir/ünïcødé \"quoted\" \\ key\n".into();
    r[1].meta = json!({"caption": "tab\there", "nested": {"a": [1, 2, {"b": null}]}});
    let bytes = write(Mode::Auto, &r);
    assert_same(&PackedShard::open(&bytes).unwrap(), &r);
}

#[test]
fn corrupted_pixels_are_detected() {
    let r = recs(&[(2, 2), (3, 3), (1, 1)]);
    for mode in [Mode::Fixed, Mode::Variable] {
        let r = if mode == Mode::Fixed {
            recs(&[(2, 2); 3])
        } else {
            r.clone()
        };
        let mut bytes = write(mode, &r);
        let shard = PackedShard::open(&bytes).unwrap();
        let base = bytes.as_ptr() as usize;
        let at = shard.record(1).pixels.as_ptr() as usize - base;
        bytes[at] ^= 0xff;
        let shard = PackedShard::open(&bytes).unwrap();
        assert!(shard.verify_checksum(0));
        assert!(!shard.verify_checksum(1));
        assert!(!shard.record(1).checksum_ok());
        assert_eq!(shard.verify_all(), vec![1]);
    }
}

#[test]
#[should_panic(expected = "out of range")]
fn record_out_of_range_panics() {
    let shard = PackedShard::open(write(Mode::Auto, &recs(&[(1, 1)]))).unwrap();
    let _ = shard.record(1);
}

#[test]
fn header_limit_is_configurable() {
    let bytes = write(Mode::Auto, &recs(&[(1, 1)]));
    let limits = Limits::default().with_max_header_len(100);
    let err = PackedShard::open_with_limits(&bytes, &limits).unwrap_err();
    assert!(
        matches!(err, Error::HeaderTooLarge { max: 100, .. }),
        "{err:?}"
    );
}

#[test]
fn summary_describes_output() {
    let mut w = PackedWriter::new(Mode::Auto);
    for i in 0..3 {
        w.add(&format!("k{i}"), i, 2, 2, &rgb(2, 2, 0), json!(null))
            .unwrap();
    }
    let mut out = Vec::new();
    let s = w.finish(&mut out).unwrap();
    assert_eq!(s.mode, ShardMode::Fixed);
    assert_eq!(s.records, 3);
    assert_eq!(s.data_offset, 8 + s.header_len);
    assert_eq!(s.data_offset % DATA_ALIGN, 0);
    assert_eq!(s.data_len, 3 * 12 + 3 * 8 + 3 * 8);
    assert_eq!(s.total_len, out.len() as u64);
    assert_eq!(
        u64::from_le_bytes(out[..8].try_into().unwrap()),
        s.header_len
    );
    assert_eq!(out[8], b'{');
    assert_eq!(out[s.data_offset as usize - 1], b' ');
}

#[test]
fn carried_fields_round_trip_byte_for_byte() {
    let caption = "a red bus, ünïcödé";
    let binary: &[u8] = b"\x00\xff\xfe raw";
    let input_json = r#"{"url":"http://x/1.jpg","width":1024}"#;
    let mut r = recs(&[(2, 3), (2, 3), (2, 3)]);
    r[0].meta = json!({"source": "a.tar:k0", "fields": {
        "txt": field_value(caption.as_bytes()),
        "npy": field_value(binary),
        "json": field_value(input_json.as_bytes()),
    }});
    r[1].meta = json!({"source": "a.tar:k1", "fields": {"txt": field_value(b"")}});
    // Record 2 carries nothing: a version 1 record from before carried fields.
    let bytes = write(Mode::Auto, &r);
    let shard = PackedShard::open(bytes).unwrap();
    assert_same(&shard, &r);

    assert_eq!(shard.field(0, "txt").unwrap(), caption.as_bytes());
    assert_eq!(shard.field(0, "npy").unwrap(), binary);
    assert_eq!(shard.field(0, "json").unwrap(), input_json.as_bytes());
    // All asked for at once, as the reader does: the same values, in the order asked.
    for i in 0..3 {
        let names = ["txt", "nope", "json", "npy"];
        let one_by_one: Vec<_> = names
            .iter()
            .map(|n| shard.field(i, n).map(|v| v.into_owned()))
            .collect();
        assert_eq!(shard.fields(i, &names), one_by_one, "record {i}");
    }
    let names: Vec<String> = shard.carried(0).map(|(n, _)| n).collect();
    assert_eq!(names, ["json", "npy", "txt"]);
    assert!(matches!(
        shard.carried(0).find(|(n, _)| n == "npy").unwrap().1,
        FieldValue::Binary(_)
    ));
    assert_eq!(shard.field(1, "txt").unwrap(), &b""[..]);
    assert_eq!(shard.field(1, "npy"), None);
    assert_eq!(shard.carried(2).count(), 0);
    assert_eq!(shard.field(2, "txt"), None);
    // Without a carried json, `json` is the sample object less its `fields`.
    for i in [1, 2] {
        let own: serde_json::Value =
            serde_json::from_slice(&shard.field(i, "json").unwrap()).unwrap();
        let mut want = shard.sample_meta(i);
        want.as_object_mut().unwrap().remove("fields");
        assert_eq!(own, want);
        assert_eq!(own["key"], r[i].key.as_str());
    }
}

#[test]
fn the_writer_refuses_malformed_carried_fields() {
    let mut w = PackedWriter::new(Mode::Auto);
    for fields in [
        json!("txt"),
        json!({"txt": 1}),
        json!({"b": {"base64": "@@"}}),
    ] {
        let e = w
            .add("k", 0, 1, 1, &[0; 3], json!({ "fields": fields }))
            .unwrap_err();
        assert!(
            matches!(&e, Error::BadInput(m) if m.contains("bad `fields` in record 0 (k)")),
            "{fields}: {e}"
        );
    }
    assert!(w.is_empty());
}

#[test]
fn pixel_span_is_the_bulk_tensor_and_a_shard_opens_without_its_bytes() {
    for (mode, shapes) in [
        (Mode::Auto, vec![(2, 3), (2, 3), (2, 3)]),
        (Mode::Auto, vec![(2, 3), (5, 1), (4, 4)]),
    ] {
        let records = recs(&shapes);
        let bytes = write(mode, &records);
        let shard = PackedShard::open(&bytes[..]).unwrap();
        let data = shard.data_offset() as usize;
        let span = shardtool_packed::pixel_span(&bytes[..data]).unwrap();
        let name = match shard.mode() {
            ShardMode::Fixed => "images",
            ShardMode::Variable => "pixels",
        };
        let (b, e) = Parts::split(&bytes).range(name);
        assert_eq!(span, (data + b) as u64..(data + e) as u64, "{name}");
        // Every check but the pixels' holds with the pixels zeroed.
        let mut blank = bytes.clone();
        blank[span.start as usize..span.end as usize].fill(0);
        let opened = PackedShard::open(&blank[..]).unwrap();
        assert_eq!(opened.len(), records.len());
        assert_eq!(opened.record(1).key, records[1].key);
        assert_eq!(opened.record(2).label, records[2].label);
        // Too short a head, or no header: no span.
        assert_eq!(shardtool_packed::pixel_span(&bytes[..data - 1]), None);
        assert_eq!(shardtool_packed::pixel_span(b"\x02\0\0\0\0\0\0\0{}"), None);
    }
}
