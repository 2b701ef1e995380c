//! [`PackedWriter`]: accumulates records in memory and writes one shard.

use std::io::Write;

use serde_json::{json, Map, Value};

use crate::error::Error;
use crate::format::{
    checksum, record_len, round_up, ShardMode, CHANNELS, DATA_ALIGN, FORMAT_NAME, FORMAT_VERSION,
    MAX_HEADER_LEN, METADATA_ENTRY, META_FORMAT, META_MODE, META_SAMPLES, META_VERSION,
    RECORD_ALIGN, SAMPLE_KEY, SAMPLE_LABEL, T_CHECKSUMS, T_IMAGES, T_LABELS, T_OFFSETS, T_PIXELS,
    T_SHAPES,
};

/// Which layout a [`PackedWriter`] produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Every record must have the same shape; [`PackedWriter::add`] rejects a
    /// record whose shape differs from the first one.
    Fixed,
    /// Always write the variable-shape layout.
    Variable,
    /// Fixed if every record has the same shape, else variable; decided at
    /// [`PackedWriter::finish`].
    #[default]
    Auto,
}

/// What [`PackedWriter::finish`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteSummary {
    /// The layout that was written.
    pub mode: ShardMode,
    /// Number of records.
    pub records: usize,
    /// The header length `N` stored in the 8-byte prefix (JSON plus padding).
    pub header_len: u64,
    /// Absolute file offset of the data buffer (`8 + header_len`, a multiple
    /// of [`DATA_ALIGN`](crate::DATA_ALIGN)).
    pub data_offset: u64,
    /// Length of the data buffer.
    pub data_len: u64,
    /// Total bytes written (`data_offset + data_len`).
    pub total_len: u64,
}

/// One record waiting to be written.
#[derive(Debug)]
struct Pending {
    label: i64,
    height: u32,
    width: u32,
    /// Start of the record in [`PackedWriter::pixels`].
    start: usize,
    /// `height * width * 3`.
    len: usize,
    checksum: u64,
    /// The sample object, serialized to compact JSON.
    sample: String,
}

/// Accumulates records in memory, then writes them as one shard.
///
/// Memory use is bounded only by what the caller adds: the writer keeps a copy
/// of every record's pixels plus its serialized sample metadata until
/// [`finish`](Self::finish). Callers that roll shards at a byte budget should
/// check [`estimated_size`](Self::estimated_size) after each
/// [`add`](Self::add) and finish the shard once it reaches the budget.
///
/// Keys are not checked for uniqueness.
#[derive(Debug, Default)]
pub struct PackedWriter {
    mode: Mode,
    records: Vec<Pending>,
    /// All records' pixels, concatenated without padding.
    pixels: Vec<u8>,
    /// Whether every record so far has the shape of the first.
    uniform: bool,
    /// Sum of the record lengths rounded up to [`RECORD_ALIGN`].
    padded_pixels_len: u64,
    /// Sum over records of the escaped length of the sample JSON when it is
    /// embedded in a JSON string.
    samples_escaped_len: u64,
}

/// A tensor entry of the header, in buffer order.
struct TensorEntry {
    name: &'static str,
    dtype: &'static str,
    shape: Vec<u64>,
    begin: u64,
    end: u64,
}

/// The tensors of a shard and the size of its data buffer.
struct Layout {
    mode: ShardMode,
    tensors: Vec<TensorEntry>,
    data_len: u64,
}

impl Layout {
    /// Appends a tensor after the previous one.
    fn push(&mut self, name: &'static str, dtype: &'static str, shape: Vec<u64>, bytes: u64) {
        let begin = self.data_len;
        self.data_len += bytes;
        self.tensors.push(TensorEntry {
            name,
            dtype,
            shape,
            begin,
            end: self.data_len,
        });
    }
}

/// Room left in [`PackedWriter::add`]'s header bound for the layout's growth by one record.
const HEADER_SLACK: u64 = 1024;

/// Length of `s` once escaped inside a JSON string, quotes excluded.
fn escaped_len(s: &str) -> Result<u64, Error> {
    let quoted = serde_json::to_string(s)
        .map_err(|e| Error::BadInput(format!("sample cannot be encoded: {e}")))?;
    Ok(quoted.len() as u64 - 2)
}

/// Header length `N` after padding a `json_len`-byte header so that the data
/// buffer (at `8 + N`) starts on a [`DATA_ALIGN`] boundary.
fn padded_header_len(json_len: u64) -> u64 {
    // Cannot overflow: json_len is the length of an in-memory buffer.
    round_up(8 + json_len, DATA_ALIGN).unwrap_or(u64::MAX) - 8
}

impl PackedWriter {
    /// Creates an empty writer producing the given layout.
    pub fn new(mode: Mode) -> Self {
        PackedWriter {
            mode,
            uniform: true,
            ..Default::default()
        }
    }

    /// The mode requested at construction.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Number of records added so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record was added yet.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Adds one record.
    ///
    /// `pixels` is RGB8, HWC, row-major, and must be exactly
    /// `height * width * 3` bytes; `height` and `width` must be at least 1 and
    /// `key` non-empty. `meta` is stored as the record's sample object: it must
    /// be a JSON object (or `null`, meaning `{}`). The writer sets its `key`
    /// and `label` fields; if `meta` already has them they must equal `key`
    /// and `label`. Its `fields` member, if any, holds the carried fields and
    /// must be an object of [`field_value`](crate::field_value)s. In
    /// [`Mode::Fixed`] the shape must equal the first record's.
    ///
    /// Fails with [`Error::HeaderTooLarge`] when the shard's header would pass
    /// [`MAX_HEADER_LEN`] with this record (a shard to finish first, or a
    /// record whose metadata alone is too large when the writer is empty), so
    /// [`finish`](Self::finish) never fails for the header's size. On error
    /// nothing is added.
    pub fn add(
        &mut self,
        key: &str,
        label: i64,
        height: u32,
        width: u32,
        pixels: &[u8],
        meta: Value,
    ) -> Result<(), Error> {
        if key.is_empty() {
            return Err(Error::BadInput("record key is empty".into()));
        }
        if height == 0 || width == 0 {
            return Err(Error::BadInput(format!(
                "record `{key}` has an empty shape {height}x{width}"
            )));
        }
        let expected = record_len(height, width).ok_or_else(|| {
            Error::BadInput(format!("record `{key}` shape {height}x{width} overflows"))
        })?;
        if pixels.len() as u64 != expected {
            return Err(Error::BadInput(format!(
                "record `{key}` has {} pixel bytes, expected {height}*{width}*3 = {expected}",
                pixels.len()
            )));
        }
        let same_shape = self
            .records
            .first()
            .is_none_or(|r| r.height == height && r.width == width);
        if self.mode == Mode::Fixed && !same_shape {
            let (h0, w0) = self.records.first().map_or((0, 0), |r| (r.height, r.width));
            return Err(Error::BadInput(format!(
                "record `{key}` is {height}x{width} but this fixed-shape shard holds {h0}x{w0}"
            )));
        }

        let mut obj = match meta {
            Value::Object(obj) => obj,
            Value::Null => Map::new(),
            other => {
                return Err(Error::BadInput(format!(
                    "metadata of record `{key}` must be a JSON object, got {}",
                    json_kind(&other)
                )))
            }
        };
        if let Some(k) = obj.get(SAMPLE_KEY) {
            if k.as_str() != Some(key) {
                return Err(Error::BadInput(format!(
                    "metadata of record `{key}` has a conflicting `key` field"
                )));
            }
        }
        if let Some(l) = obj.get(SAMPLE_LABEL) {
            if l.as_i64() != Some(label) {
                return Err(Error::BadInput(format!(
                    "metadata of record `{key}` has a conflicting `label` field"
                )));
            }
        }
        crate::fields::check_fields(&obj, self.records.len(), key)
            .map_err(|e| Error::BadInput(e.to_string()))?;
        obj.insert(SAMPLE_KEY.into(), Value::String(key.into()));
        obj.insert(SAMPLE_LABEL.into(), Value::from(label));
        let sample = serde_json::to_string(&obj)
            .map_err(|e| Error::BadInput(format!("metadata of record `{key}`: {e}")))?;
        let sample_escaped = escaped_len(&sample)?;
        // An upper bound of the header with this record: the layout's numbers may grow by a
        // digit each and an automatic layout may turn variable (a few tensor entries more).
        let json_len = (header_json(&self.layout(), "").len() as u64 + HEADER_SLACK)
            .saturating_add(self.samples_array_escaped_len() + 1)
            .saturating_add(sample_escaped);
        let header_len = padded_header_len(json_len);
        if header_len > MAX_HEADER_LEN {
            return Err(Error::HeaderTooLarge {
                len: header_len,
                max: MAX_HEADER_LEN,
            });
        }

        let len = pixels.len();
        let padded = round_up(expected, RECORD_ALIGN)
            .ok_or_else(|| Error::BadInput(format!("record `{key}` is too large")))?;

        // The pixels are held until the shard is written: no memory for them is an error, not an
        // abort (doubling may ask for more than is free where the exact need still fits).
        let more = pixels.len();
        let held = &mut self.pixels;
        held.try_reserve(more)
            .or_else(|_| held.try_reserve_exact(more))
            .map_err(|_| {
                Error::Io(std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    format!(
                        "no memory for {more} more bytes of pixels beside the {} held",
                        held.len()
                    ),
                ))
            })?;

        // Everything validated: commit.
        let start = self.pixels.len();
        self.pixels.extend_from_slice(pixels);
        self.uniform &= same_shape;
        self.padded_pixels_len += padded;
        self.samples_escaped_len += sample_escaped;
        self.records.push(Pending {
            label,
            height,
            width,
            start,
            len,
            checksum: checksum(pixels),
            sample,
        });
        Ok(())
    }

    /// The layout [`finish`](Self::finish) would write now.
    pub fn resolved_mode(&self) -> ShardMode {
        match self.mode {
            Mode::Fixed => ShardMode::Fixed,
            Mode::Variable => ShardMode::Variable,
            Mode::Auto if self.uniform && !self.records.is_empty() => ShardMode::Fixed,
            Mode::Auto => ShardMode::Variable,
        }
    }

    /// Exact number of bytes [`finish`](Self::finish) would write if called
    /// now (for an empty writer: the size of an empty variable-shape shard,
    /// although `finish` refuses to write one).
    ///
    /// Adding a record never makes it smaller, except when an
    /// [`Mode::Auto`] writer switches from fixed to variable and loses a few
    /// bytes of header; use it to roll shards at a byte budget. Cost: O(1)
    /// plus a small header rendering.
    pub fn estimated_size(&self) -> u64 {
        let layout = self.layout();
        let json_len = header_json(&layout, "").len() as u64 + self.samples_array_escaped_len();
        8 + padded_header_len(json_len) + layout.data_len
    }

    /// Escaped length of the `samples` array string `[s0,s1,...]`.
    fn samples_array_escaped_len(&self) -> u64 {
        let n = self.records.len() as u64;
        2 + n.saturating_sub(1) + self.samples_escaped_len
    }

    fn layout(&self) -> Layout {
        let n = self.records.len() as u64;
        let mode = self.resolved_mode();
        let mut layout = Layout {
            mode,
            tensors: Vec::with_capacity(5),
            data_len: 0,
        };
        match mode {
            ShardMode::Fixed => {
                let (h, w) = self.records.first().map_or((1, 1), |r| (r.height, r.width));
                let shape = vec![n, u64::from(h), u64::from(w), u64::from(CHANNELS)];
                layout.push(T_IMAGES, "U8", shape, self.pixels.len() as u64);
                layout.push(T_LABELS, "I64", vec![n], 8 * n);
                layout.push(T_CHECKSUMS, "U64", vec![n], 8 * n);
            }
            ShardMode::Variable => {
                let p = self.padded_pixels_len;
                layout.push(T_PIXELS, "U8", vec![p], p);
                layout.push(T_OFFSETS, "U64", vec![n + 1], 8 * (n + 1));
                layout.push(T_LABELS, "I64", vec![n], 8 * n);
                layout.push(T_CHECKSUMS, "U64", vec![n], 8 * n);
                layout.push(T_SHAPES, "U32", vec![n, 3], 12 * n);
            }
        }
        layout
    }

    /// Writes the whole shard to `w`, then flushes it.
    ///
    /// Fails with [`Error::BadInput`] if no record was added, with
    /// [`Error::HeaderTooLarge`] if the header (mostly the samples metadata)
    /// would exceed [`MAX_HEADER_LEN`], and with [`Error::Io`] if `w` fails
    /// (then `w` may hold a partial shard).
    pub fn finish(self, w: &mut impl Write) -> Result<WriteSummary, Error> {
        if self.records.is_empty() {
            return Err(Error::BadInput(
                "cannot write a shard with no records".into(),
            ));
        }
        let layout = self.layout();

        let mut samples = String::with_capacity(
            self.records
                .iter()
                .map(|r| r.sample.len() + 1)
                .sum::<usize>()
                + 2,
        );
        samples.push('[');
        for (i, r) in self.records.iter().enumerate() {
            if i > 0 {
                samples.push(',');
            }
            samples.push_str(&r.sample);
        }
        samples.push(']');

        let header = header_json(&layout, &samples);
        let header_len = padded_header_len(header.len() as u64);
        if header_len > MAX_HEADER_LEN {
            return Err(Error::HeaderTooLarge {
                len: header_len,
                max: MAX_HEADER_LEN,
            });
        }
        let data_offset = 8 + header_len;
        let total_len = data_offset + layout.data_len;
        debug_assert_eq!(total_len, self.estimated_size());

        w.write_all(&header_len.to_le_bytes())?;
        w.write_all(&header)?;
        write_fill(w, b' ', header_len - header.len() as u64)?;

        let n = self.records.len();
        match layout.mode {
            ShardMode::Fixed => w.write_all(&self.pixels)?,
            ShardMode::Variable => {
                for r in &self.records {
                    w.write_all(&self.pixels[r.start..r.start + r.len])?;
                    let len = r.len as u64;
                    write_fill(w, 0, round_up(len, RECORD_ALIGN).unwrap_or(len) - len)?;
                }
            }
        }

        let mut small = Vec::with_capacity(n * 36 + 8);
        if layout.mode == ShardMode::Variable {
            let mut offset = 0u64;
            for r in &self.records {
                small.extend_from_slice(&offset.to_le_bytes());
                let len = r.len as u64;
                offset += round_up(len, RECORD_ALIGN).unwrap_or(len);
            }
            small.extend_from_slice(&offset.to_le_bytes());
        }
        for r in &self.records {
            small.extend_from_slice(&r.label.to_le_bytes());
        }
        for r in &self.records {
            small.extend_from_slice(&r.checksum.to_le_bytes());
        }
        if layout.mode == ShardMode::Variable {
            for r in &self.records {
                for d in [r.height, r.width, CHANNELS] {
                    small.extend_from_slice(&d.to_le_bytes());
                }
            }
        }
        w.write_all(&small)?;
        w.flush()?;

        Ok(WriteSummary {
            mode: layout.mode,
            records: n,
            header_len,
            data_offset,
            data_len: layout.data_len,
            total_len,
        })
    }
}

/// Renders the JSON header (unpadded) with `samples` as the samples string.
fn header_json(layout: &Layout, samples: &str) -> Vec<u8> {
    let mut root = Map::new();
    root.insert(
        METADATA_ENTRY.into(),
        json!({
            META_FORMAT: FORMAT_NAME,
            META_VERSION: FORMAT_VERSION,
            META_MODE: layout.mode.as_str(),
            META_SAMPLES: samples,
        }),
    );
    for t in &layout.tensors {
        root.insert(
            t.name.into(),
            json!({
                "dtype": t.dtype,
                "shape": t.shape,
                "data_offsets": [t.begin, t.end],
            }),
        );
    }
    // Serializing a map of strings and integers cannot fail.
    serde_json::to_vec(&Value::Object(root)).unwrap_or_default()
}

/// Writes `count` copies of `byte`.
fn write_fill(w: &mut impl Write, byte: u8, mut count: u64) -> std::io::Result<()> {
    let chunk = [byte; 4096];
    while count > 0 {
        let step = count.min(chunk.len() as u64) as usize;
        w.write_all(&chunk[..step])?;
        count -= step as u64;
    }
    Ok(())
}

/// A short name for the kind of a JSON value, for error messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rgb(h: u32, w: u32, seed: u8) -> Vec<u8> {
        (0..h * w * 3)
            .map(|i| (i as u8).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn rejects_bad_input() {
        let mut w = PackedWriter::new(Mode::Auto);
        let px = rgb(2, 2, 0);
        for (key, h, wd, px, meta) in [
            ("", 2, 2, &px[..], Value::Null),
            ("k", 0, 2, &[][..], Value::Null),
            ("k", 2, 0, &[][..], Value::Null),
            ("k", 2, 2, &px[..11], Value::Null),
            ("k", 2, 2, &px[..], json!([1])),
            ("k", 2, 2, &px[..], json!("s")),
            ("k", 2, 2, &px[..], json!({"key": "other"})),
            ("k", 2, 2, &px[..], json!({"label": 2})),
            ("k", u32::MAX, u32::MAX, &px[..], Value::Null),
        ] {
            let err = w.add(key, 1, h, wd, px, meta).unwrap_err();
            assert!(matches!(err, Error::BadInput(_)), "{err:?}");
        }
        assert!(w.is_empty());
        w.add("k", 1, 2, 2, &px, json!({"key": "k", "label": 1}))
            .unwrap();
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn fixed_mode_rejects_other_shapes() {
        let mut w = PackedWriter::new(Mode::Fixed);
        w.add("a", 0, 2, 3, &rgb(2, 3, 0), Value::Null).unwrap();
        let err = w.add("b", 0, 3, 2, &rgb(3, 2, 0), Value::Null).unwrap_err();
        assert!(matches!(err, Error::BadInput(_)));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn empty_finish_fails() {
        let w = PackedWriter::new(Mode::Auto);
        let mut out = Vec::new();
        assert!(matches!(w.finish(&mut out), Err(Error::BadInput(_))));
    }

    #[test]
    fn estimate_is_exact() {
        for mode in [Mode::Auto, Mode::Fixed, Mode::Variable] {
            let mut w = PackedWriter::new(mode);
            for i in 0..20u32 {
                let (h, wd) = if mode == Mode::Fixed || i < 10 {
                    (3, 5)
                } else {
                    (i, 7)
                };
                let meta = json!({"note": format!("quote \" backslash \\ tab \t é {i}"), "n": i});
                w.add(
                    &format!("key/{i}"),
                    i64::from(i),
                    h,
                    wd,
                    &rgb(h, wd, 1),
                    meta,
                )
                .unwrap();
                let est = w.estimated_size();
                let mut out = Vec::new();
                let copy = clone_writer(&w);
                let s = copy.finish(&mut out).unwrap();
                assert_eq!(est, out.len() as u64);
                assert_eq!(s.total_len, est);
                assert_eq!(s.data_offset % DATA_ALIGN, 0);
            }
        }
    }

    fn clone_writer(w: &PackedWriter) -> PackedWriter {
        let mut c = PackedWriter::new(w.mode);
        for r in &w.records {
            let v: Value = serde_json::from_str(&r.sample).unwrap();
            let key = v[SAMPLE_KEY].as_str().unwrap().to_owned();
            c.add(
                &key,
                r.label,
                r.height,
                r.width,
                &w.pixels[r.start..r.start + r.len],
                v,
            )
            .unwrap();
        }
        c
    }

    #[test]
    fn a_record_that_would_pass_the_header_cap_is_refused_so_finish_never_fails_for_it() {
        // Captions of 30 MB (`"` escapes twice: 4 bytes each in the header): the first record
        // takes ~126 MB alone, so is refused on an empty writer; of 6 MiB ones (~25 MB each in
        // the header) three fit and the fourth would pass 100 MB.
        let caption = |n: usize| json!({"fields": {"txt": "\"".repeat(n)}});
        let mut w = PackedWriter::new(Mode::Auto);
        let err = (w.add("big", 0, 1, 1, &[1, 2, 3], caption(30 << 20))).unwrap_err();
        assert!(matches!(err, Error::HeaderTooLarge { .. }), "{err:?}");
        assert!(w.is_empty());
        let mut added = 0;
        loop {
            match w.add(&format!("k{added}"), 0, 1, 1, &[1, 2, 3], caption(6 << 20)) {
                Ok(()) => added += 1,
                Err(Error::HeaderTooLarge { len, max }) => {
                    assert!(len > max, "{len} {max}");
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(added, 3);
        assert_eq!(w.len(), added);
        let mut out = Vec::new();
        let s = w.finish(&mut out).unwrap();
        assert!(s.data_offset > 75_000_000, "{}", s.data_offset);
    }

    #[test]
    fn io_errors_are_reported() {
        struct Failing;
        impl Write for Failing {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("nope"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut w = PackedWriter::new(Mode::Auto);
        w.add("a", 0, 1, 1, &[1, 2, 3], Value::Null).unwrap();
        assert!(matches!(w.finish(&mut Failing), Err(Error::Io(_))));
    }
}
