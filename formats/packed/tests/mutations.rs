//! Mutation tests: each corruption of a valid shard must make `open` return
//! the expected typed error, never panic.
#![allow(clippy::unwrap_used)]

mod common;

use common::{fixed_shard, variable_shard, Parts};
use serde_json::{json, Value};
use shardtool_packed::{Error, PackedShard, MAX_HEADER_LEN};

/// Opens `bytes`, expecting an error matching `pat`.
macro_rules! assert_open_err {
    ($bytes:expr, $pat:pat $(if $guard:expr)?) => {{
        let bytes: &[u8] = &$bytes;
        match PackedShard::open(bytes) {
            Ok(_) => panic!("expected {}, but open succeeded", stringify!($pat)),
            Err(e) => {
                assert!(
                    matches!(e, $pat $(if $guard)?),
                    "expected {}, got {e:?} ({e})",
                    stringify!($pat)
                );
                e
            }
        }
    }};
}

#[test]
fn baselines_open() {
    PackedShard::open(variable_shard().0).unwrap();
    PackedShard::open(fixed_shard().0).unwrap();
}

#[test]
fn truncation_at_every_length() {
    for (bytes, _) in [variable_shard(), fixed_shard()] {
        for len in 0..bytes.len() {
            let e = assert_open_err!(bytes[..len], Error::Truncated { .. });
            let Error::Truncated { available, needed } = e else {
                unreachable!()
            };
            assert_eq!(available, len as u64);
            assert!(needed > available);
        }
    }
}

#[test]
fn header_length_past_eof() {
    let (mut bytes, _) = variable_shard();
    let n = bytes.len() as u64; // 8 + n > len
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    assert_open_err!(bytes, Error::Truncated { needed, .. } if needed == n + 8);
}

#[test]
fn header_length_huge() {
    let (mut bytes, _) = variable_shard();
    for n in [MAX_HEADER_LEN + 1, u64::MAX - 7, u64::MAX] {
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        assert_open_err!(bytes, Error::HeaderTooLarge { len, .. } if len == n);
    }
}

#[test]
fn misaligned_buffer() {
    let (bytes, _) = variable_shard();
    let parts = Parts::split(&bytes);
    let json_len = serde_json::to_vec(&parts.header).unwrap().len();
    // Padded to 8 bytes only, as the reference safetensors writer does.
    let n8 = (8 + json_len).next_multiple_of(8) - 8;
    let bad = parts.join_with_header_len(n8);
    assert_open_err!(bad, Error::Misaligned { offset } if offset == 8 + n8 as u64);
    // One page too much, plus 1.
    let bad = parts.join_with_header_len(4096 - 8 + 1);
    assert_open_err!(bad, Error::Misaligned { offset: 4097 });
    // Aligned at two pages: still valid.
    PackedShard::open(parts.join_with_header_len(8192 - 8)).unwrap();
}

#[test]
fn offsets_out_of_range() {
    let (bytes, _) = variable_shard();
    for (i, v) in [(1, 1u64 << 40), (0, u64::MAX - 63), (2, 64 * 1000)] {
        let mut p = Parts::split(&bytes);
        p.put_u64("offsets", i, v);
        assert_open_err!(p.join(), Error::OffsetsOutOfRange { record } if record == i);
    }
    // Sentinel disagrees with the pixels length.
    let mut p = Parts::split(&bytes);
    let s = p.get_u64("offsets", 3);
    p.put_u64("offsets", 3, s + 64);
    assert_open_err!(p.join(), Error::OffsetsOutOfRange { record: 3 });
}

#[test]
fn overlapping_offsets() {
    let (bytes, _) = variable_shard();
    let mut p = Parts::split(&bytes);
    let o0 = p.get_u64("offsets", 0);
    p.put_u64("offsets", 1, o0);
    assert_open_err!(p.join(), Error::OverlappingRecords { record: 1 });

    // Non-monotonic: record 2 placed before record 1.
    let mut p = Parts::split(&bytes);
    let o1 = p.get_u64("offsets", 1);
    let o2 = p.get_u64("offsets", 2);
    p.put_u64("offsets", 2, o1);
    p.put_u64("offsets", 1, o2);
    assert_open_err!(p.join(), Error::OverlappingRecords { record: 2 });
}

#[test]
fn misaligned_record() {
    let (bytes, _) = variable_shard();
    let mut p = Parts::split(&bytes);
    let o1 = p.get_u64("offsets", 1);
    p.put_u64("offsets", 1, o1 + 1); // record 1 is 3 bytes in a 64-byte slot
    assert_open_err!(p.join(), Error::MisalignedRecord { record: 1, offset } if offset == o1 + 1);
}

#[test]
fn bad_record_shapes() {
    let (bytes, _) = variable_shard();
    for (idx, v) in [(2, 4), (0, 0), (4, 0), (5, 1)] {
        let mut p = Parts::split(&bytes);
        p.put_u32("shapes", idx, v);
        assert_open_err!(p.join(), Error::BadRecordShape { record } if record == idx / 3);
    }
    // A shape too large for its slot.
    let mut p = Parts::split(&bytes);
    p.put_u32("shapes", 3, 30); // record 1 becomes 30x1: 90 bytes in a 64-byte slot
    assert_open_err!(p.join(), Error::OverlappingRecords { record: 2 });
}

#[test]
fn wrong_dtype() {
    for (bytes, name, dtype) in [
        (variable_shard().0, "labels", "U64"),
        (variable_shard().0, "pixels", "I8"),
        (variable_shard().0, "offsets", "I64"),
        (variable_shard().0, "shapes", "I32"),
        (fixed_shard().0, "images", "F16"),
        (fixed_shard().0, "checksums", "I64"),
    ] {
        let mut p = Parts::split(&bytes);
        p.set(name, "dtype", json!(dtype));
        assert_open_err!(
            p.join(),
            Error::BadDtype { name: ref n, found: ref f } if n == name && f == dtype
        );
    }
}

#[test]
fn wrong_shape() {
    let (fixed, _) = fixed_shard();
    let (var, _) = variable_shard();
    for (bytes, name, shape) in [
        (&fixed, "images", json!([3, 3, 5, 4])),
        (&fixed, "images", json!([3, 0, 5, 3])),
        (&fixed, "images", json!([3, 15, 3])),
        (&fixed, "labels", json!([3, 1])),
        (&var, "pixels", json!([1, 320])),
        (&var, "shapes", json!([3, 4])),
        (&var, "shapes", json!([9])),
        (&var, "offsets", json!([])),
    ] {
        let mut p = Parts::split(bytes);
        p.set(name, "shape", shape);
        assert_open_err!(p.join(), Error::BadShape { name: ref n, .. } if n == name);
    }
}

#[test]
fn record_counts_disagree() {
    // labels holds 2 entries, consistent with its data_offsets, but N == 3.
    for (bytes, name, n) in [
        (variable_shard().0, "labels", 2),
        (fixed_shard().0, "checksums", 2),
    ] {
        let mut p = Parts::split(&bytes);
        p.shrink(name, 8);
        p.set(name, "shape", json!([n]));
        assert_open_err!(p.join(), Error::BadShape { name: ref found, .. } if found == name);
    }
    // shapes holds 2 rows while offsets says 3 records.
    let mut p = Parts::split(&variable_shard().0);
    p.shrink("shapes", 12);
    p.set("shapes", "shape", json!([2, 3]));
    assert_open_err!(p.join(), Error::BadShape { name: ref n, .. } if n == "shapes");
}

#[test]
fn shape_disagrees_with_data_offsets() {
    let mut p = Parts::split(&variable_shard().0);
    p.set("labels", "shape", json!([4]));
    assert_open_err!(p.join(), Error::BadDataOffsets { name: ref n, .. } if n == "labels");
}

#[test]
fn hole_or_overlap_between_tensors() {
    let (bytes, _) = variable_shard();
    let mut p = Parts::split(&bytes);
    let (b, e) = p.range("shapes");
    p.set("shapes", "data_offsets", json!([b + 8, e + 8]));
    p.data.extend_from_slice(&[0; 8]);
    assert_open_err!(p.join(), Error::BadDataOffsets { name: ref n, .. } if n == "shapes");

    let mut p = Parts::split(&bytes);
    let (b, e) = p.range("shapes");
    p.set("shapes", "data_offsets", json!([b - 8, e - 8]));
    assert_open_err!(p.join(), Error::BadDataOffsets { name: ref n, .. } if n == "shapes");
}

#[test]
fn trailing_bytes() {
    let (mut bytes, _) = fixed_shard();
    bytes.extend_from_slice(b"xyz");
    assert_open_err!(bytes, Error::TrailingData { extra: 3 });
}

#[test]
fn samples_count_mismatch() {
    for (bytes, _) in [variable_shard(), fixed_shard()] {
        let mut p = Parts::split(&bytes);
        let samples = p.meta()["samples"].as_str().unwrap().to_owned();
        let mut arr: Vec<Value> = serde_json::from_str(&samples).unwrap();
        arr.pop();
        p.meta().insert(
            "samples".into(),
            json!(serde_json::to_string(&arr).unwrap()),
        );
        assert_open_err!(
            p.join(),
            Error::MetadataCountMismatch {
                expected: 3,
                found: 2
            }
        );
    }
}

#[test]
fn bad_samples() {
    let (bytes, _) = variable_shard();
    type Edit = Box<dyn Fn(&mut Vec<Value>)>;
    let edits: Vec<Edit> = vec![
        Box::new(|a| {
            a[1].as_object_mut().unwrap().remove("key");
        }),
        Box::new(|a| a[1]["key"] = json!(5)),
        Box::new(|a| a[1]["key"] = json!("")),
        Box::new(|a| a[2]["label"] = json!(123456)),
        Box::new(|a| a[0] = json!("not an object")),
    ];
    for edit in edits {
        let mut p = Parts::split(&bytes);
        let samples = p.meta()["samples"].as_str().unwrap().to_owned();
        let mut arr: Vec<Value> = serde_json::from_str(&samples).unwrap();
        edit(&mut arr);
        p.meta().insert(
            "samples".into(),
            json!(serde_json::to_string(&arr).unwrap()),
        );
        assert_open_err!(p.join(), Error::BadMetadata(_));
    }
    let mut p = Parts::split(&bytes);
    p.meta().insert("samples".into(), json!("{not json"));
    assert_open_err!(p.join(), Error::BadMetadata(_));
    let mut p = Parts::split(&bytes);
    p.meta().remove("samples");
    assert_open_err!(p.join(), Error::BadMetadata(_));
}

/// A label past 64 bits (which JSON readers take as a float) is shown as the integer it is.
#[test]
fn a_label_past_64_bits_is_shown_whole() {
    let (bytes, _) = variable_shard();
    let mut p = Parts::split(&bytes);
    let samples = p.meta()["samples"].as_str().unwrap().to_owned();
    let mut arr: Vec<Value> = serde_json::from_str(&samples).unwrap();
    arr[2]["label"] = json!(987654321);
    let text = serde_json::to_string(&arr).unwrap();
    let text = text.replace("987654321", "1180591620717411303424");
    p.meta().insert("samples".into(), json!(text));
    let e = assert_open_err!(p.join(), Error::BadMetadata(_));
    assert!(
        e.to_string().contains("`label` 1180591620717411303424,"),
        "{e}"
    );
}

#[test]
fn bad_carried_fields_name_the_record() {
    let (bytes, _) = variable_shard();
    let bad = [
        json!("a caption"),
        json!({"txt": 7}),
        json!({"txt": null}),
        json!({"bin": {"base64": "not base64!"}}),
        json!({"bin": {"base64": "AA"}}),
        json!({"bin": {"base64": 5}}),
        json!({"bin": {"hex": "00"}}),
    ];
    for fields in bad {
        let mut p = Parts::split(&bytes);
        let samples = p.meta()["samples"].as_str().unwrap().to_owned();
        let mut arr: Vec<Value> = serde_json::from_str(&samples).unwrap();
        arr[2]["fields"] = fields.clone();
        p.meta().insert(
            "samples".into(),
            json!(serde_json::to_string(&arr).unwrap()),
        );
        let e = assert_open_err!(p.join(), Error::BadFields { record: 2, .. });
        assert!(
            e.to_string().contains("record 2 (sample/0002)"),
            "{fields}: {e}"
        );
    }
}

#[test]
fn bad_metadata_entries() {
    let (bytes, _) = fixed_shard();
    for (key, value) in [
        ("format", Some(json!("safetensors"))),
        ("format", None),
        ("version", Some(json!("2"))),
        ("version", None),
        ("mode", Some(json!("auto"))),
        ("mode", None),
        ("mode", Some(json!(1))),
    ] {
        let mut p = Parts::split(&bytes);
        match value {
            Some(v) => p.meta().insert(key.into(), v),
            None => p.meta().remove(key),
        };
        assert_open_err!(p.join(), Error::BadMetadata(_));
    }
    let mut p = Parts::split(&bytes);
    p.header.remove("__metadata__");
    assert_open_err!(p.join(), Error::BadMetadata(_));
    let mut p = Parts::split(&bytes);
    p.header.insert("__metadata__".into(), json!([1]));
    assert_open_err!(p.join(), Error::BadMetadata(_));
}

#[test]
fn mode_disagrees_with_tensors() {
    let mut p = Parts::split(&fixed_shard().0);
    p.meta().insert("mode".into(), json!("variable"));
    assert_open_err!(p.join(), Error::MissingTensor { name: ref n } if n == "pixels");
    let mut p = Parts::split(&variable_shard().0);
    p.meta().insert("mode".into(), json!("fixed"));
    assert_open_err!(p.join(), Error::MissingTensor { name: ref n } if n == "images");
}

#[test]
fn missing_tensor() {
    for (bytes, name) in [
        (variable_shard().0, "checksums"),
        (variable_shard().0, "offsets"),
        (variable_shard().0, "pixels"),
        (fixed_shard().0, "labels"),
        (fixed_shard().0, "images"),
    ] {
        let mut p = Parts::split(&bytes);
        p.header.remove(name);
        assert_open_err!(p.join(), Error::MissingTensor { name: ref n } if n == name);
    }
}

#[test]
fn unexpected_tensor() {
    let mut p = Parts::split(&fixed_shard().0);
    let end = p.data.len();
    p.header.insert(
        "extra".into(),
        json!({"dtype": "U8", "shape": [1], "data_offsets": [end, end + 1]}),
    );
    p.data.push(0);
    assert_open_err!(p.join(), Error::UnexpectedTensor { name: ref n } if n == "extra");
}

#[test]
fn garbage_json() {
    let (bytes, _) = variable_shard();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let data = &bytes[8 + n..];
    let assemble = |header: &[u8]| {
        let mut out = (n as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header);
        out.resize(8 + n, b' ');
        out.extend_from_slice(data);
        out
    };
    for garbage in [
        &b"{not json"[..],
        b"",
        b"[1, 2, 3]",
        b"{\"a\": 1} trailing",
        b"{\"__metadata__\": {}, \"\xff\xfe\": 1}",
        b"\x00\x01\x02",
    ] {
        assert_open_err!(assemble(garbage), Error::BadJson(_));
    }
    // A tensor entry of the wrong form.
    let mut p = Parts::split(&bytes);
    p.set("labels", "dtype", json!(5));
    assert_open_err!(p.join(), Error::BadJson(_));
    let mut p = Parts::split(&bytes);
    p.set("labels", "data_offsets", json!([0]));
    assert_open_err!(p.join(), Error::BadJson(_));
    let mut p = Parts::split(&bytes);
    p.set("labels", "shape", json!([-1]));
    assert_open_err!(p.join(), Error::BadJson(_));
}

#[test]
fn error_messages_are_specific() {
    let (mut bytes, _) = variable_shard();
    bytes.truncate(100);
    let e = PackedShard::open(&bytes).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
}
