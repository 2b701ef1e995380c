//! The `packed_open` fuzz target's check.

use shardtool_packed::{pixel_span, Limits, PackedShard};

/// `PackedShard::open` on arbitrary bytes, then every accessor on every record.
///
/// Invariant under test: opening never panics and never allocates without a bound; once a shard
/// opened, record access is infallible slicing (no panic) and every view is self-consistent.
/// `pixel_span` never panics, and for a shard that opens it covers every record's pixels (verify
/// reads such a shard without that span when the checksum matches).
pub fn packed_open(data: &[u8]) {
    let span = pixel_span(data);
    // A tight header limit exercises the `HeaderTooLarge` path on most inputs as well.
    let small = Limits::default().with_max_header_len(1 << 16);
    let _ = PackedShard::open_with_limits(data, &small);

    let Ok(shard) = PackedShard::open(data) else {
        return;
    };
    assert_eq!(shard.data_offset() % 4096, 0);
    assert!(shard.data_offset() <= data.len() as u64);
    let _ = shard.mode();
    let _ = shard.metadata();
    let span = span.expect("a shard that opens has a pixel span");
    assert!(
        span.start <= span.end && span.end <= data.len() as u64,
        "{span:?}"
    );
    let mut total = 0u64;
    for (i, rec) in shard.records().enumerate() {
        let at = rec.pixels.as_ptr() as u64 - data.as_ptr() as u64;
        assert!(
            span.start <= at && at + rec.pixels.len() as u64 <= span.end,
            "record {i}: pixels outside {span:?}"
        );
        let [h, w, c] = rec.shape;
        assert_eq!(c, 3, "record {i}: channels");
        assert!(h >= 1 && w >= 1, "record {i}: empty shape");
        assert_eq!(
            rec.pixels.len() as u64,
            u64::from(h) * u64::from(w) * 3,
            "record {i}: pixel length does not match its shape"
        );
        assert!(!rec.key.is_empty(), "record {i}: empty key");
        // Touch the first and last pixel byte: the view must lie inside the input.
        total += u64::from(rec.pixels[0]) + u64::from(rec.pixels[rec.pixels.len() - 1]);
        let _ = rec.checksum_ok();
        let meta = shard.sample_meta(i);
        assert!(meta.is_object(), "record {i}: sample is not an object");
        // Carried fields were validated at open: each one reads back, and `json` always does.
        for (name, value) in shard.carried(i) {
            assert_eq!(
                shard.field(i, &name).as_deref(),
                Some(value.bytes()),
                "record {i}: field {name}"
            );
        }
        assert!(shard.field(i, "json").is_some(), "record {i}: no json");
        assert!(shard.get(i).is_some());
    }
    assert!(shard.get(shard.len()).is_none());
    let bad = shard.verify_all();
    assert!(bad.len() <= shard.len());
    std::hint::black_box(total);
}
