//! [`PackedShard`]: validates a shard once, then serves zero-copy record views.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::error::Error;
use crate::fields::{check_fields, parse_value, FieldValue, SAMPLE_FIELDS};
use crate::format::{
    checksum, record_len, ShardMode, CHANNELS, DATA_ALIGN, FORMAT_NAME, FORMAT_VERSION,
    MAX_HEADER_LEN, METADATA_ENTRY, META_FORMAT, META_MODE, META_SAMPLES, META_VERSION,
    RECORD_ALIGN, SAMPLE_KEY, SAMPLE_LABEL, T_CHECKSUMS, T_IMAGES, T_LABELS, T_OFFSETS, T_PIXELS,
    T_SHAPES,
};

/// Bounds applied by [`PackedShard::open_with_limits`].
///
/// Build one with `Limits::default()` and the `with_*` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest accepted header length `N` (JSON plus padding), in bytes.
    pub max_header_len: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_len: MAX_HEADER_LEN,
        }
    }
}

impl Limits {
    /// Sets [`max_header_len`](Self::max_header_len).
    pub fn with_max_header_len(mut self, max_header_len: u64) -> Self {
        self.max_header_len = max_header_len;
        self
    }
}

/// A borrowed view of one record. Never copies pixels.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The record key (the sample's `key` field).
    pub key: &'a str,
    /// The record label (from the `labels` tensor).
    pub label: i64,
    /// `[height, width, channels]`; channels is always 3.
    pub shape: [u32; 3],
    /// Exactly `height * width * 3` bytes of RGB8, HWC, row-major.
    pub pixels: &'a [u8],
    /// The stored xxh3-64 of `pixels`.
    pub checksum: u64,
}

impl RecordView<'_> {
    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.shape[0]
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.shape[1]
    }

    /// Whether `pixels` hash to the stored checksum.
    pub fn checksum_ok(&self) -> bool {
        checksum(self.pixels) == self.checksum
    }
}

impl fmt::Debug for RecordView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordView")
            .field("key", &self.key)
            .field("label", &self.label)
            .field("shape", &self.shape)
            .field("pixels", &format_args!("<{} bytes>", self.pixels.len()))
            .field("checksum", &format_args!("{:#018x}", self.checksum))
            .finish()
    }
}

/// Per-record index entry, parsed once at open.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Absolute byte offset of the record's pixels in the owner.
    start: usize,
    /// `h * w * 3`.
    len: usize,
    shape: [u32; 3],
    label: i64,
    checksum: u64,
}

/// A validated packed shard over an owner of its bytes.
///
/// [`open`](Self::open) checks everything once; afterwards the accessors never
/// fail (apart from documented index panics) and never copy pixels. The index
/// (labels, checksums, shapes, offsets, keys, sample objects) is parsed into
/// small vectors at open.
///
/// `B::as_ref` must return the same bytes on every call, as it does for
/// `Vec<u8>`, `&[u8]`, `Box<[u8]>`, `Arc<[u8]>` and memory maps.
pub struct PackedShard<B> {
    owner: B,
    mode: ShardMode,
    data_offset: u64,
    metadata: BTreeMap<String, String>,
    entries: Vec<Entry>,
    keys: Vec<String>,
    /// Each record's sample object as its byte range in the `samples` metadata text, parsed
    /// when asked for: parsed trees of every record cost ~1.2 KB each, held for every open
    /// shard of every reader process.
    samples: Vec<Span>,
}

impl<B> fmt::Debug for PackedShard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedShard")
            .field("mode", &self.mode)
            .field("records", &self.entries.len())
            .field("data_offset", &self.data_offset)
            .finish_non_exhaustive()
    }
}

/// A tensor entry as found in the header.
#[derive(Debug, Deserialize)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// Where the pixels (the `pixels` or `images` tensor) lie in a packed file whose first bytes are
/// `head`: `[begin, end)` as file offsets. `head` must hold the 8-byte prefix and the header;
/// `None` when it does not, or when the header names no such tensor. Nothing is validated:
/// [`PackedShard::open`] does that. A reader whose checks need every tensor but the pixels (keys,
/// labels, metadata) can hash this range through a small buffer instead of keeping it.
pub fn pixel_span(head: &[u8]) -> Option<std::ops::Range<u64>> {
    let header_len = usize::try_from(le_u64(head.get(..8)?)).ok()?;
    let data_start = header_len.checked_add(8)?;
    // Parsed as `open` parses it (a name given twice: the last one), so the two agree.
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(head.get(8..data_start)?).ok()?;
    let bulk = header.get(T_PIXELS).or_else(|| header.get(T_IMAGES))?;
    let (begin, end) = RawTensor::deserialize(bulk).ok()?.data_offsets;
    let base = data_start as u64;
    Some(base.checked_add(begin)?..base.checked_add(end)?)
}

/// What a mode expects of one tensor.
struct Spec {
    name: &'static str,
    dtype: &'static str,
    elem_size: u64,
    rank: usize,
}

const FIXED_SPECS: &[Spec] = &[
    Spec {
        name: T_IMAGES,
        dtype: "U8",
        elem_size: 1,
        rank: 4,
    },
    Spec {
        name: T_LABELS,
        dtype: "I64",
        elem_size: 8,
        rank: 1,
    },
    Spec {
        name: T_CHECKSUMS,
        dtype: "U64",
        elem_size: 8,
        rank: 1,
    },
];

const VARIABLE_SPECS: &[Spec] = &[
    Spec {
        name: T_PIXELS,
        dtype: "U8",
        elem_size: 1,
        rank: 1,
    },
    Spec {
        name: T_OFFSETS,
        dtype: "U64",
        elem_size: 8,
        rank: 1,
    },
    Spec {
        name: T_LABELS,
        dtype: "I64",
        elem_size: 8,
        rank: 1,
    },
    Spec {
        name: T_CHECKSUMS,
        dtype: "U64",
        elem_size: 8,
        rank: 1,
    },
    Spec {
        name: T_SHAPES,
        dtype: "U32",
        elem_size: 4,
        rank: 2,
    },
];

fn bad_shape(name: &str, detail: impl Into<String>) -> Error {
    Error::BadShape {
        name: name.into(),
        detail: detail.into(),
    }
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_le_bytes(a)
}

fn to_usize(x: u64, needed: u64, available: u64) -> Result<usize, Error> {
    usize::try_from(x).map_err(|_| Error::Truncated { needed, available })
}

/// Validated tensors: name -> absolute byte range in the file.
struct Tensors {
    ranges: BTreeMap<&'static str, (usize, usize)>,
    shapes: BTreeMap<&'static str, Vec<u64>>,
}

impl Tensors {
    fn bytes<'a>(&self, file: &'a [u8], name: &str) -> &'a [u8] {
        let (a, b) = self.ranges.get(name).copied().unwrap_or((0, 0));
        &file[a..b]
    }

    fn shape(&self, name: &str) -> &[u64] {
        self.shapes.get(name).map_or(&[], Vec::as_slice)
    }
}

impl<B: AsRef<[u8]>> PackedShard<B> {
    /// Validates `owner` as a packed shard with the default [`Limits`].
    pub fn open(owner: B) -> Result<Self, Error> {
        Self::open_with_limits(owner, &Limits::default())
    }

    /// Validates `owner` as a packed shard.
    ///
    /// Checks, in order: the 8-byte prefix and header bounds, 4096-byte
    /// alignment of the data buffer, the JSON header, the metadata
    /// (`format`, `version`, `mode`), the tensor set of the mode, dtypes,
    /// shapes, `data_offsets` (exact, hole-free coverage of the buffer, which
    /// must end at the end of the input), record shapes and offsets, then the
    /// `samples` metadata. The first problem found is returned.
    pub fn open_with_limits(owner: B, limits: &Limits) -> Result<Self, Error> {
        let file = owner.as_ref();
        let available = file.len() as u64;

        // Prefix and header bounds.
        let Some(prefix) = file.get(..8) else {
            return Err(Error::Truncated {
                needed: 8,
                available,
            });
        };
        let header_len = le_u64(prefix);
        if header_len > limits.max_header_len {
            return Err(Error::HeaderTooLarge {
                len: header_len,
                max: limits.max_header_len,
            });
        }
        let data_offset = header_len.checked_add(8).ok_or(Error::HeaderTooLarge {
            len: header_len,
            max: limits.max_header_len,
        })?;
        if data_offset > available {
            return Err(Error::Truncated {
                needed: data_offset,
                available,
            });
        }
        if data_offset % DATA_ALIGN != 0 {
            return Err(Error::Misaligned {
                offset: data_offset,
            });
        }
        // data_offset <= file.len(), so it fits in usize.
        let data_start = to_usize(data_offset, data_offset, available)?;
        let header_bytes = &file[8..data_start];

        // JSON.
        let mut header: serde_json::Map<String, Value> =
            serde_json::from_slice(header_bytes).map_err(Error::BadJson)?;
        let metadata = parse_metadata(header.remove(METADATA_ENTRY))?;
        let mode = check_metadata(&metadata)?;
        let mut raw: BTreeMap<String, RawTensor> = BTreeMap::new();
        for (name, value) in header {
            let t: RawTensor = serde_json::from_value(value).map_err(Error::BadJson)?;
            raw.insert(name, t);
        }

        // Tensor set, dtypes, ranks, sizes, coverage.
        let specs = match mode {
            ShardMode::Fixed => FIXED_SPECS,
            ShardMode::Variable => VARIABLE_SPECS,
        };
        let tensors = check_tensors(specs, &raw, data_offset, available)?;

        // Record counts and the index.
        let (n, entries) = match mode {
            ShardMode::Fixed => index_fixed(&tensors)?,
            ShardMode::Variable => index_variable(&tensors, file)?,
        };
        for name in [T_LABELS, T_CHECKSUMS] {
            if tensors.shape(name) != [n as u64] {
                return Err(bad_shape(
                    name,
                    format!("expected [{n}], found {:?}", tensors.shape(name)),
                ));
            }
        }
        let labels = tensors.bytes(file, T_LABELS);
        let checksums = tensors.bytes(file, T_CHECKSUMS);
        let entries: Vec<Entry> = entries
            .into_iter()
            .zip(labels.chunks_exact(8).zip(checksums.chunks_exact(8)))
            .map(|(mut e, (l, c))| {
                e.label = le_u64(l) as i64;
                e.checksum = le_u64(c);
                e
            })
            .collect();

        // Samples.
        let (keys, samples) = parse_samples(&metadata, &entries)?;

        Ok(PackedShard {
            owner,
            mode,
            data_offset,
            metadata,
            entries,
            keys,
            samples,
        })
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the shard holds no record.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The layout of this shard.
    pub fn mode(&self) -> ShardMode {
        self.mode
    }

    /// Absolute file offset of the data buffer (a multiple of 4096).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole `__metadata__` map (including the JSON-encoded `samples`).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Record `i`, or `None` if `i >= len()`.
    pub fn get(&self, i: usize) -> Option<RecordView<'_>> {
        let e = self.entries.get(i)?;
        let key = self.keys.get(i)?;
        Some(RecordView {
            key,
            label: e.label,
            shape: e.shape,
            pixels: &self.owner.as_ref()[e.start..e.start + e.len],
            checksum: e.checksum,
        })
    }

    /// Record `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn record(&self, i: usize) -> RecordView<'_> {
        self.get(i).unwrap_or_else(|| {
            panic!(
                "record index {i} out of range for a shard of {} records",
                self.len()
            )
        })
    }

    /// Iterates over all records in order.
    pub fn records(&self) -> impl ExactSizeIterator<Item = RecordView<'_>> + '_ {
        (0..self.len()).map(|i| self.record(i))
    }

    /// The JSON text of record `i`'s sample object.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn sample_text(&self, i: usize) -> &str {
        let (start, end) = self.samples[i];
        let text = self.metadata.get(META_SAMPLES).map_or("", String::as_str);
        text.get(start..end).unwrap_or("")
    }

    /// The sample object of record `i` (the caller's metadata plus `key` and
    /// `label`), parsed from its text (it was checked at open).
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn sample_meta(&self, i: usize) -> Value {
        serde_json::from_str(self.sample_text(i)).unwrap_or(Value::Null)
    }

    /// The carried fields of record `i` (the `fields` member of its sample object), by name in
    /// name order; empty when it carries none.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn carried(&self, i: usize) -> impl Iterator<Item = (String, FieldValue<'static>)> {
        let meta = self.sample_meta(i);
        let mut out = Vec::new();
        if let Some(fields) = meta.get(SAMPLE_FIELDS).and_then(Value::as_object) {
            // Every value was checked at open: none is dropped here.
            for (name, v) in fields {
                if let Ok(v) = parse_value(v) {
                    out.push((name.clone(), v.into_owned()));
                }
            }
        }
        out.into_iter()
    }

    /// The bytes of field `name` of record `i`, or `None` when the record does not carry it.
    /// `json` is special: without a carried `json`, it is the record's sample object (shardtool's
    /// metadata) serialised as compact JSON without its `fields` member, so every record has one.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn field(&self, i: usize, name: &str) -> Option<std::borrow::Cow<'_, [u8]>> {
        field_of(&self.sample_meta(i), name).map(std::borrow::Cow::Owned)
    }

    /// [`PackedShard::field`] for each of `names`, in order, parsing record `i`'s sample object
    /// once.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn fields<S: AsRef<str>>(&self, i: usize, names: &[S]) -> Vec<Option<Vec<u8>>> {
        let sample = self.sample_meta(i);
        names
            .iter()
            .map(|n| field_of(&sample, n.as_ref()))
            .collect()
    }

    /// Whether record `i`'s pixels match its stored checksum.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn verify_checksum(&self, i: usize) -> bool {
        self.record(i).checksum_ok()
    }

    /// Indices of all records whose pixels do not match their checksum, in
    /// increasing order (empty when the shard is intact).
    pub fn verify_all(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| !self.verify_checksum(i))
            .collect()
    }

    /// The owner of the bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.owner.as_ref()
    }

    /// Gives the owner back.
    pub fn into_inner(self) -> B {
        self.owner
    }
}

/// The bytes of field `name` of the parsed sample object `sample` (see [`PackedShard::field`]).
fn field_of(sample: &Value, name: &str) -> Option<Vec<u8>> {
    let carried = sample
        .get(SAMPLE_FIELDS)
        .and_then(|f| f.get(name))
        .and_then(|v| parse_value(v).ok());
    match carried {
        Some(v) => Some(v.into_bytes().into_owned()),
        None if name == "json" => {
            let mut own = sample.as_object()?.clone();
            own.remove(SAMPLE_FIELDS);
            serde_json::to_vec(&own).ok()
        }
        None => None,
    }
}

fn parse_metadata(value: Option<Value>) -> Result<BTreeMap<String, String>, Error> {
    let Some(value) = value else {
        return Err(Error::BadMetadata(format!(
            "the header has no `{METADATA_ENTRY}` entry"
        )));
    };
    let Value::Object(obj) = value else {
        return Err(Error::BadMetadata(format!(
            "`{METADATA_ENTRY}` is not an object"
        )));
    };
    obj.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            _ => Err(Error::BadMetadata(format!(
                "metadata entry `{k}` is not a string"
            ))),
        })
        .collect()
}

fn check_metadata(meta: &BTreeMap<String, String>) -> Result<ShardMode, Error> {
    let get = |k: &str| {
        meta.get(k)
            .ok_or_else(|| Error::BadMetadata(format!("metadata entry `{k}` is missing")))
    };
    let format = get(META_FORMAT)?;
    if format != FORMAT_NAME {
        return Err(Error::BadMetadata(format!(
            "format is `{format}`, expected `{FORMAT_NAME}`"
        )));
    }
    let version = get(META_VERSION)?;
    if version != FORMAT_VERSION {
        return Err(Error::BadMetadata(format!(
            "unsupported version `{version}`, expected `{FORMAT_VERSION}`"
        )));
    }
    let mode = get(META_MODE)?;
    ShardMode::parse(mode).ok_or_else(|| {
        Error::BadMetadata(format!("mode is `{mode}`, expected `fixed` or `variable`"))
    })
}

fn check_tensors(
    specs: &[Spec],
    raw: &BTreeMap<String, RawTensor>,
    data_offset: u64,
    available: u64,
) -> Result<Tensors, Error> {
    for spec in specs {
        if !raw.contains_key(spec.name) {
            return Err(Error::MissingTensor {
                name: spec.name.into(),
            });
        }
    }
    if let Some(name) = raw.keys().find(|k| !specs.iter().any(|s| s.name == *k)) {
        return Err(Error::UnexpectedTensor { name: name.clone() });
    }

    let mut placed: Vec<(&'static str, u64, u64)> = Vec::with_capacity(specs.len());
    let mut shapes = BTreeMap::new();
    for spec in specs {
        let Some(t) = raw.get(spec.name) else {
            continue; // checked above
        };
        if t.dtype != spec.dtype {
            return Err(Error::BadDtype {
                name: spec.name.into(),
                found: t.dtype.clone(),
            });
        }
        if t.shape.len() != spec.rank {
            return Err(bad_shape(
                spec.name,
                format!("expected rank {}, found {:?}", spec.rank, t.shape),
            ));
        }
        if spec.name == T_IMAGES {
            let [_, h, w, c] = t.shape[..] else {
                continue; // rank checked above
            };
            if c != u64::from(CHANNELS) {
                return Err(bad_shape(spec.name, format!("{c} channels, expected 3")));
            }
            if h == 0 || w == 0 || h > u64::from(u32::MAX) || w > u64::from(u32::MAX) {
                return Err(bad_shape(
                    spec.name,
                    format!("record shape {h}x{w} is empty or too large"),
                ));
            }
        }
        if spec.name == T_SHAPES && t.shape[1] != 3 {
            return Err(bad_shape(
                spec.name,
                format!("expected [N, 3], found {:?}", t.shape),
            ));
        }
        let nbytes = t
            .shape
            .iter()
            .try_fold(spec.elem_size, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad_shape(spec.name, "byte size overflows"))?;
        let (begin, end) = t.data_offsets;
        if end.checked_sub(begin) != Some(nbytes) {
            return Err(Error::BadDataOffsets {
                name: spec.name.into(),
                detail: format!(
                    "[{begin}, {end}] does not span the {nbytes} bytes its shape needs"
                ),
            });
        }
        placed.push((spec.name, begin, end));
        shapes.insert(spec.name, t.shape.clone());
    }

    // Exact, hole-free coverage of the data buffer, like safetensors requires.
    placed.sort_by_key(|&(_, b, e)| (b, e));
    let mut cursor = 0u64;
    for &(name, begin, end) in &placed {
        if begin != cursor {
            let what = if begin > cursor { "hole" } else { "overlap" };
            return Err(Error::BadDataOffsets {
                name: name.into(),
                detail: format!(
                    "starts at {begin} but the previous tensor ends at {cursor} ({what})"
                ),
            });
        }
        cursor = end;
    }
    let needed = data_offset.saturating_add(cursor);
    if needed > available {
        return Err(Error::Truncated { needed, available });
    }
    if needed < available {
        return Err(Error::TrailingData {
            extra: available - needed,
        });
    }

    // Everything now lies within the input, so offsets fit in usize.
    let mut ranges = BTreeMap::new();
    for &(name, begin, end) in &placed {
        let a = to_usize(data_offset + begin, needed, available)?;
        let b = to_usize(data_offset + end, needed, available)?;
        ranges.insert(name, (a, b));
    }
    Ok(Tensors { ranges, shapes })
}

/// Index of a fixed-shape shard; labels and checksums are filled in later.
fn index_fixed(tensors: &Tensors) -> Result<(usize, Vec<Entry>), Error> {
    let &[n, h, w, _] = tensors.shape(T_IMAGES) else {
        return Err(bad_shape(T_IMAGES, "expected rank 4"));
    };
    let (start, _) = tensors.ranges.get(T_IMAGES).copied().unwrap_or((0, 0));
    // All of these were bounded by check_tensors: the tensor lies within the input.
    let n = usize::try_from(n).map_err(|_| bad_shape(T_IMAGES, "too many records"))?;
    let (h, w) = (h as u32, w as u32);
    let len = record_len(h, w)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or_else(|| bad_shape(T_IMAGES, "record size overflows"))?;
    let entries = (0..n)
        .map(|i| Entry {
            start: start + i * len,
            len,
            shape: [h, w, CHANNELS],
            label: 0,
            checksum: 0,
        })
        .collect();
    Ok((n, entries))
}

/// Index of a variable-shape shard; labels and checksums are filled in later.
fn index_variable(tensors: &Tensors, file: &[u8]) -> Result<(usize, Vec<Entry>), Error> {
    let &[m] = tensors.shape(T_OFFSETS) else {
        return Err(bad_shape(T_OFFSETS, "expected rank 1"));
    };
    if m == 0 {
        return Err(bad_shape(T_OFFSETS, "expected [N + 1], found [0]"));
    }
    let n64 = m - 1;
    if tensors.shape(T_SHAPES) != [n64, 3] {
        return Err(bad_shape(
            T_SHAPES,
            format!("expected [{n64}, 3], found {:?}", tensors.shape(T_SHAPES)),
        ));
    }
    // The offsets tensor lies within the input, so n fits in usize.
    let n = usize::try_from(n64).map_err(|_| bad_shape(T_OFFSETS, "too many records"))?;
    let (pix_start, pix_end) = tensors.ranges.get(T_PIXELS).copied().unwrap_or((0, 0));
    let pixels_len = (pix_end - pix_start) as u64;
    let offsets = tensors.bytes(file, T_OFFSETS);
    let shapes = tensors.bytes(file, T_SHAPES);

    let mut entries = Vec::with_capacity(n);
    let mut prev_end = 0u64;
    for (i, (off, dims)) in offsets
        .chunks_exact(8)
        .zip(shapes.chunks_exact(12))
        .enumerate()
    {
        let (h, w, c) = (le_u32(&dims[..4]), le_u32(&dims[4..8]), le_u32(&dims[8..]));
        if h == 0 || w == 0 || c != CHANNELS {
            return Err(Error::BadRecordShape { record: i });
        }
        let begin = le_u64(off);
        let len = record_len(h, w);
        let end = len.and_then(|l| begin.checked_add(l));
        let (Some(len), Some(end)) = (len, end) else {
            return Err(Error::OffsetsOutOfRange { record: i });
        };
        if end > pixels_len {
            return Err(Error::OffsetsOutOfRange { record: i });
        }
        if begin < prev_end {
            return Err(Error::OverlappingRecords { record: i });
        }
        if !begin.is_multiple_of(RECORD_ALIGN) {
            return Err(Error::MisalignedRecord {
                record: i,
                offset: begin,
            });
        }
        prev_end = end;
        // begin + len <= pixels_len, a length of an in-memory slice.
        entries.push(Entry {
            start: pix_start + begin as usize,
            len: len as usize,
            shape: [h, w, c],
            label: 0,
            checksum: 0,
        });
    }
    let sentinel = offsets.get(n * 8..).map_or(0, le_u64);
    if sentinel != pixels_len {
        return Err(Error::OffsetsOutOfRange { record: n });
    }
    Ok((n, entries))
}

/// A byte range `[start, end)`.
type Span = (usize, usize);

/// Each record's key, and the byte range of its sample object in the `samples` text; every
/// object is parsed and checked once here, one at a time.
fn parse_samples(
    meta: &BTreeMap<String, String>,
    entries: &[Entry],
) -> Result<(Vec<String>, Vec<Span>), Error> {
    let Some(text) = meta.get(META_SAMPLES) else {
        return Err(Error::BadMetadata(format!(
            "metadata entry `{META_SAMPLES}` is missing"
        )));
    };
    let raw: Vec<&serde_json::value::RawValue> = serde_json::from_str(text)
        .map_err(|_| Error::BadMetadata(format!("`{META_SAMPLES}` is not a JSON array")))?;
    if raw.len() != entries.len() {
        return Err(Error::MetadataCountMismatch {
            expected: entries.len(),
            found: raw.len(),
        });
    }
    let mut keys = Vec::with_capacity(raw.len());
    let mut spans = Vec::with_capacity(raw.len());
    for (i, (r, e)) in raw.iter().zip(entries).enumerate() {
        // Borrowed from `text`: its place there.
        let start = r.get().as_ptr() as usize - text.as_ptr() as usize;
        spans.push((start, start + r.get().len()));
        let s: Value = serde_json::from_str(r.get()).map_err(Error::BadJson)?;
        let Value::Object(obj) = &s else {
            return Err(Error::BadMetadata(format!("sample {i} is not an object")));
        };
        let key = match obj.get(SAMPLE_KEY) {
            Some(Value::String(k)) if !k.is_empty() => k,
            _ => {
                return Err(Error::BadMetadata(format!(
                    "sample {i} has no non-empty string `{SAMPLE_KEY}`"
                )))
            }
        };
        if let Some(l) = obj.get(SAMPLE_LABEL) {
            if l.as_i64() != Some(e.label) {
                // An integer past 64 bits parses as a float: shown whole, not as 1.2e21.
                let shown = match l.as_f64().filter(|f| f.fract() == 0.0 && !l.is_i64()) {
                    Some(f) if !l.is_u64() => format!("{f:.0}"),
                    _ => l.to_string(),
                };
                return Err(Error::BadMetadata(format!(
                    "sample {i} has `{SAMPLE_LABEL}` {shown}, but the labels tensor says {}",
                    e.label
                )));
            }
        }
        check_fields(obj, i, key)?;
        keys.push(key.clone());
    }
    Ok((keys, spans))
}
