//! Structure and cheap content checks of a WebDataset tar shard: every member regular and safe,
//! names following the key rules, samples holding exactly the declared fields once each, labels
//! and metadata consistent. Images to decode are handed back for the caller to decode in parallel.

use crate::ahead::AheadHasher;
use crate::loader::HashingReader;
use crate::meta_scan::{self, Meta};
use crate::report::{Problem, ProblemKind};
use serde::Deserialize;
use serde_json::Value;
use shardtool_core::{validate_key, Checksum};
use shardtool_wds::{
    split_name, EntryKind, ReadError, StreamError, Tail, TarReader, TarStream, BLOCK,
};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

/// Keys seen in one shard. foldhash: seeded per process like std's SipHash, several times faster
/// on short keys, and this set is probed once per sample.
type KeySet<'d> = HashSet<Cow<'d, str>, foldhash::fast::RandomState>;

/// Largest `.json` or `.cls` member read; anything larger is reported rather than parsed.
const MAX_META_BYTES: usize = 1 << 20;

/// Fields whose data is an image.
pub(crate) const IMAGE_FIELDS: &[&str] = &[
    "jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm",
];

/// What the checks of one shard need to know about the dataset.
pub(crate) struct Ctx<'a> {
    /// The shard file name (for problems).
    pub shard: &'a str,
    /// Fields every sample must carry (empty: not known, not checked).
    pub fields: &'a BTreeSet<String>,
    /// Class names (empty: not known, labels are only checked to be integers).
    pub classes: &'a [String],
    /// Collect images to decode.
    pub decode: bool,
    /// Samples the manifest says the shard holds (untrusted: only sizes the key set, capped).
    pub expected_samples: u64,
}

/// An image to decode and the size its metadata promises.
pub(crate) struct ImageJob<'d> {
    /// Member name (`<key>.<field>`).
    pub member: String,
    /// Its bytes.
    pub data: Cow<'d, [u8]>,
    /// `(width, height)` from the sample's metadata, when it states one.
    pub expect: Option<(u64, u64)>,
}

/// The outcome of scanning one shard.
#[derive(Default)]
pub(crate) struct Scan<'d> {
    pub problems: Vec<Problem>,
    /// Keys in shard order, each once (repeats inside the shard are reported here).
    pub keys: Vec<String>,
    pub samples: u64,
    pub images: Vec<ImageJob<'d>>,
    /// Checksum of the whole shard, when the scan computed it on the way.
    pub file_sum: Option<shardtool_core::Checksum>,
}

impl Scan<'_> {
    pub(crate) fn member(
        &mut self,
        ctx: &Ctx<'_>,
        member: &str,
        kind: ProblemKind,
        message: String,
    ) {
        self.problems
            .push(Problem::member(ctx.shard, member, kind, message));
    }
}

/// A field's bytes as the checks see them. In memory every field has all its bytes; a streamed
/// shard keeps only the fields the checks read (`.cls` and `.json` up to [`MAX_META_BYTES`]), the
/// others have none. `len` is the field's size either way.
#[derive(Clone, Default)]
pub(crate) struct FieldData<'d> {
    bytes: Cow<'d, [u8]>,
    len: u64,
}

impl<'d> FieldData<'d> {
    fn whole(bytes: &'d [u8]) -> Self {
        Self {
            bytes: Cow::Borrowed(bytes),
            len: bytes.len() as u64,
        }
    }
}

/// A sample's fields, `(field, data)` in archive order. Names borrow from the shard (or, for a
/// streamed shard, from the declared field names) unless a copy was necessary.
type Fields<'d> = Vec<(Cow<'d, str>, FieldData<'d>)>;

/// Whether a streamed shard keeps the data of `field` (as lowercased) of `len` bytes: the checks
/// read only these.
fn keeps(field: &str, len: u64) -> bool {
    matches!(field, "cls" | "json") && len <= MAX_META_BYTES as u64
}

/// Checks a whole tar shard held in `bytes`. With `hash_file`, the file checksum is computed in the
/// same pass, a little ahead of the parser ([`AheadHasher`]), and returned in [`Scan::file_sum`].
pub(crate) fn check_tar<'d>(bytes: &'d [u8], ctx: &Ctx<'_>, hash_file: bool) -> Scan<'d> {
    let mut ahead = hash_file.then(|| AheadHasher::new(bytes));
    let mut scan = scan_tar(bytes, ctx, &mut ahead);
    scan.file_sum = ahead.map(AheadHasher::finish);
    scan
}

fn scan_tar<'d>(bytes: &'d [u8], ctx: &Ctx<'_>, ahead: &mut Option<AheadHasher<'d>>) -> Scan<'d> {
    let mut scan = Scan::default();
    if bytes.is_empty() {
        scan.problems.push(empty_shard(ctx));
        return scan;
    }
    let mut g = Gather::new(ctx);
    scan.keys.reserve(g.seen.capacity());
    let mut end = 0usize;
    let mut broken = false;
    let mut reader = TarReader::new(bytes);
    loop {
        if let Some(h) = ahead.as_mut() {
            h.cover(end);
        }
        let Some(entry) = reader.next() else { break };
        let e = match entry {
            Ok(e) => e,
            Err(err) => {
                scan.problems.push(read_problem(ctx, &err));
                broken = true;
                break;
            }
        };
        // Where the reader continues: header, data, padding to the block size.
        end = usize::try_from(e.header_offset)
            .unwrap_or(usize::MAX)
            .saturating_add(BLOCK)
            .saturating_add(e.data.len().div_ceil(BLOCK) * BLOCK);
        let data = FieldData::whole(e.data);
        match e.name {
            Cow::Borrowed(name) => g.member(
                ctx,
                &mut scan,
                name,
                e.kind,
                data,
                (Cow::Borrowed, Cow::Borrowed),
            ),
            Cow::Owned(name) => {
                let own = |s: &str| Cow::Owned(s.to_owned());
                g.member(ctx, &mut scan, &name, e.kind, data, (own, own))
            }
        };
    }
    g.finish(ctx, &mut scan, broken);
    if !broken {
        let rest = bytes.get(end..).unwrap_or(&[]);
        let tail = Tail {
            end: end as u64,
            len: rest.len() as u64,
            first_nonzero: rest.iter().position(|&b| b != 0).map(|p| (end + p) as u64),
        };
        check_end(&tail, ctx, &mut scan);
    }
    scan
}

/// A tar shard streamed from a file: its scan (owning everything it holds, or borrowing only
/// from the declared field names) and what was read.
pub(crate) struct Streamed<'a> {
    pub scan: Scan<'a>,
    /// Bytes read, and their checksum.
    pub len: u64,
    pub sum: Checksum,
}

/// Checks the tar shard that `file` yields (`len` bytes long by its metadata) by reading it front
/// to back through `buf`, hashing every byte on the way; the data of members the checks do not
/// read is not kept. Reports what [`check_tar`] reports for the same bytes. Images are never
/// collected (decoding needs them whole: use [`check_tar`]). Returns the buffer for reuse, and
/// the error when the file could not be read to its end.
pub(crate) fn stream_tar<'a, R: std::io::Read>(
    file: R,
    len: u64,
    buf: Vec<u8>,
    ctx: &Ctx<'a>,
) -> (Result<Streamed<'a>, std::io::Error>, Vec<u8>) {
    debug_assert!(!ctx.decode);
    let mut scan = Scan::default();
    let mut stream = TarStream::new(HashingReader::new(file), len, buf);
    // A declared field name is borrowed rather than copied for every member.
    let own_field = |s: &str| -> Cow<'a, str> {
        match ctx.fields.get(s) {
            Some(f) => Cow::Borrowed(f.as_str()),
            None => Cow::Owned(s.to_owned()),
        }
    };
    let own_key = |s: &str| -> Cow<'a, str> { Cow::Owned(s.to_owned()) };
    let mut g = Gather::new(ctx);
    scan.keys.reserve(g.seen.capacity());
    let mut broken = false;
    let mut io_error = None;
    if len == 0 {
        scan.problems.push(empty_shard(ctx));
        broken = true;
    }
    while !broken {
        let h = match stream.next_header() {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(StreamError::Tar(err)) => {
                scan.problems.push(read_problem(ctx, &err));
                broken = true;
                break;
            }
            Err(StreamError::Io(e)) => {
                io_error = Some(e);
                break;
            }
        };
        let (kind, size) = (h.kind, h.size);
        let joined = g.member(
            ctx,
            &mut scan,
            &h.name,
            kind,
            FieldData::default(),
            (own_key, own_field),
        );
        let keep = joined.filter(|f| keeps(f, size)).is_some();
        let mut data = FieldData {
            bytes: Cow::Borrowed(&[]),
            len: size,
        };
        if keep {
            // `size` is at most MAX_META_BYTES here.
            let mut bytes = Vec::with_capacity(size as usize);
            if let Err(e) = stream.read_data(size, &mut bytes) {
                io_error = Some(e);
                break;
            }
            data.bytes = Cow::Owned(bytes);
        }
        if joined.is_some() {
            g.set_data(data);
        }
    }
    let tail = stream.tail();
    let (reader, buf) = stream.into_parts();
    if let Some(e) = io_error {
        return (Err(e), buf);
    }
    let tail = match tail {
        Ok(t) => t,
        Err(e) => return (Err(e), buf),
    };
    g.finish(ctx, &mut scan, broken);
    if !broken {
        check_end(&tail, ctx, &mut scan);
    }
    let (len, sum) = reader.finish();
    (Ok(Streamed { scan, len, sum }), buf)
}

fn empty_shard(ctx: &Ctx<'_>) -> Problem {
    Problem::shard(
        ctx.shard,
        ProblemKind::Truncated,
        "the shard is empty (0 bytes)",
    )
}

fn read_problem(ctx: &Ctx<'_>, err: &ReadError) -> Problem {
    let kind = match err {
        ReadError::Truncated { .. } => ProblemKind::Truncated,
        _ => ProblemKind::Malformed,
    };
    Problem::shard(ctx.shard, kind, err.to_string())
}

/// Groups members into samples, checking each member's type and name on the way and each sample
/// when it is complete: the part of a scan that does not depend on where the bytes are.
struct Gather<'d> {
    /// Keys of finished samples.
    seen: KeySet<'d>,
    /// The sample being gathered: its key and fields (the vector is reused from sample to
    /// sample).
    current: Option<Cow<'d, str>>,
    fields: Fields<'d>,
    /// The declared fields (by their place among `Ctx::fields`) the current sample holds, and
    /// whether it holds anything else (a field twice, an undeclared one): the common sample,
    /// holding each declared field once, then skips the field checks that compare names.
    declared: u64,
    irregular: bool,
}

impl<'d> Gather<'d> {
    fn new(ctx: &Ctx<'_>) -> Self {
        // Sized for the manifest's count, so that the set does not grow step by step; capped,
        // since the count is untrusted (the set still grows past it).
        let keys = usize::try_from(ctx.expected_samples)
            .unwrap_or(0)
            .min(1 << 16);
        Self {
            seen: KeySet::with_capacity_and_hasher(keys, Default::default()),
            current: None,
            fields: Vec::new(),
            declared: 0,
            irregular: false,
        }
    }

    /// Checks one member; when it joins a sample, adds it as a field with `data` and returns the
    /// field's (lowercased) name. `own_key` and `own_field` turn parts of `name` into what the
    /// sample keeps.
    fn member<'n>(
        &mut self,
        ctx: &Ctx<'_>,
        scan: &mut Scan<'d>,
        name: &'n str,
        kind: EntryKind,
        data: FieldData<'d>,
        (own_key, own_field): (
            impl Fn(&'n str) -> Cow<'d, str>,
            impl Fn(&'n str) -> Cow<'d, str>,
        ),
    ) -> Option<&str> {
        let unsafe_or_unexpected = match kind {
            EntryKind::Regular => None,
            EntryKind::Link => Some((
                ProblemKind::UnsafeMember,
                "is a hard or symbolic link, which can point outside an extraction directory"
                    .to_string(),
            )),
            EntryKind::Device => Some((
                ProblemKind::UnsafeMember,
                "is a device or FIFO, not a regular file".to_string(),
            )),
            EntryKind::Directory => Some((
                ProblemKind::UnexpectedMember,
                "is a directory; shards hold regular files only".to_string(),
            )),
            EntryKind::Extension => Some((
                ProblemKind::UnexpectedMember,
                "is a pax or GNU extension header, which shardtool never writes".to_string(),
            )),
            EntryKind::Other(t) => Some((
                ProblemKind::UnexpectedMember,
                format!("has unknown tar type {:?}", char::from(t)),
            )),
        };
        if let Some((kind, message)) = unsafe_or_unexpected {
            scan.member(ctx, name, kind, format!("member {message}"));
            return None;
        }
        if name.starts_with('/') {
            scan.member(
                ctx,
                name,
                ProblemKind::UnsafeMember,
                "member has an absolute path".into(),
            );
            return None;
        }
        // One pass over the name's bytes (it is short, and this runs for every member) instead of
        // a substring search, a split and two reverse searches.
        let bytes = name.as_bytes();
        let mut slash = None;
        let mut dots = false;
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'/' {
                slash = Some(i);
            } else if b == b'.' && i > 0 && bytes[i - 1] == b'.' {
                dots = true;
            }
        }
        if dots && name.split(['/', '\\']).any(|c| c == "..") {
            scan.member(
                ctx,
                name,
                ProblemKind::UnsafeMember,
                "member path has a '..' component".into(),
            );
            return None;
        }
        let base_start = slash.map_or(0, |i| i + 1);
        let base = &name[base_start..];
        if base.starts_with("__") && base.ends_with("__") {
            scan.member(
                ctx,
                name,
                ProblemKind::UnexpectedMember,
                "member is a WebDataset metadata member (__*__), which shardtool never writes"
                    .into(),
            );
            return None;
        }
        // `split_name`'s rule: the key ends at the first '.' of the last path component.
        let (key, field) = match base.find('.') {
            Some(dot) => (&name[..base_start + dot], &base[dot + 1..]),
            None => (name, ""),
        };
        debug_assert_eq!((key, field), split_name(name));
        if field.is_empty() {
            // Without a field, the key is the whole member name.
            scan.member(
                ctx,
                key,
                ProblemKind::BadMemberName,
                "member name has no field (no '.' after the key)".into(),
            );
            return None;
        }
        let field = if field.bytes().any(|b| b.is_ascii_uppercase()) {
            scan.member(
                ctx,
                name,
                ProblemKind::BadMemberName,
                format!("field {field:?} is not lowercase"),
            );
            Cow::Owned(field.to_ascii_lowercase())
        } else {
            own_field(field)
        };
        if self.current.as_deref() != Some(key) {
            if let Some(done) = self.current.take() {
                let regular = self.regular(ctx);
                finish_sample(done, &self.fields, regular, ctx, scan, &mut self.seen);
            }
            self.fields.clear();
            (self.declared, self.irregular) = (0, false);
            self.current = Some(own_key(key));
        }
        match ctx.fields.iter().position(|d| *d == *field) {
            Some(i) if i < 64 && self.declared & (1 << i) == 0 => self.declared |= 1 << i,
            _ => self.irregular = true,
        }
        self.fields.push((field, data));
        self.fields.last().map(|(f, _)| &**f)
    }

    /// Replaces the data of the field added last.
    fn set_data(&mut self, data: FieldData<'d>) {
        if let Some(last) = self.fields.last_mut() {
            last.1 = data;
        }
    }

    /// Finishes the last sample. After a read error it may have lost members to the damage: it
    /// is then not counted or checked, so the error is reported once rather than as missing
    /// fields.
    fn finish(mut self, ctx: &Ctx<'_>, scan: &mut Scan<'d>, broken: bool) {
        if let Some(done) = self.current.take().filter(|_| !broken) {
            let regular = self.regular(ctx);
            finish_sample(done, &self.fields, regular, ctx, scan, &mut self.seen);
        }
    }

    /// Whether the current sample holds every declared field once and nothing else.
    fn regular(&self, ctx: &Ctx<'_>) -> bool {
        let n = ctx.fields.len();
        !self.irregular && (1..=64).contains(&n) && self.declared == u64::MAX >> (64 - n)
    }
}

/// The archive must end with two zero blocks; only zero bytes may follow them.
fn check_end(tail: &Tail, ctx: &Ctx<'_>, scan: &mut Scan<'_>) {
    let marker_end = tail.end.saturating_add(2 * BLOCK as u64);
    let end = tail.end;
    if tail.len < 2 * BLOCK as u64 || tail.first_nonzero.is_some_and(|p| p < marker_end) {
        scan.problems.push(Problem::shard(
            ctx.shard,
            ProblemKind::Truncated,
            format!(
                "no complete end-of-archive marker (two zero blocks) after the last member at byte \
                 {end}; the shard was cut short"
            ),
        ));
        return;
    }
    if let Some(pos) = tail.first_nonzero {
        scan.problems.push(Problem::shard(
            ctx.shard,
            ProblemKind::TrailingData,
            format!("non-zero bytes at byte {pos} follow the end-of-archive marker"),
        ));
    }
}

/// Checks a finished sample. `regular`: it is known to hold every declared field once and
/// nothing else (see `Gather::regular`), so the checks of its field names are skipped.
fn finish_sample<'d>(
    key: Cow<'d, str>,
    fields: &[(Cow<'d, str>, FieldData<'d>)],
    regular: bool,
    ctx: &Ctx<'_>,
    scan: &mut Scan<'d>,
    seen: &mut KeySet<'d>,
) {
    scan.samples += 1;
    if let Err(e) = validate_key(&key) {
        scan.member(ctx, &key, ProblemKind::BadKey, format!("key {key:?}: {e}"));
    }
    // Looked up now, stored at the end: an owned key then moves into the set instead of being
    // copied for it.
    let new_key = !seen.contains(&key);
    if new_key {
        scan.keys.push(key.to_string());
    } else {
        scan.member(
            ctx,
            &key,
            ProblemKind::DuplicateKey,
            format!("key {key:?} appears again, apart from its first sample, in this shard"),
        );
    }
    // A sample holding every declared field once and nothing else has nothing to report about
    // its field names.
    if !regular {
        // A sample has a handful of fields: linear scans beat building a set for each sample.
        for (i, (field, _)) in fields.iter().enumerate() {
            if fields[..i].iter().any(|(f, _)| f == field) {
                scan.member(
                    ctx,
                    &format!("{key}.{field}"),
                    ProblemKind::DuplicateField,
                    format!("sample {key} holds field {field} more than once"),
                );
            }
        }
        if !ctx.fields.is_empty() {
            // Built only for a problem: this runs once per sample.
            let declared = || {
                ctx.fields
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            for f in ctx.fields {
                if !fields.iter().any(|(n, _)| n == f) {
                    scan.member(
                        ctx,
                        &format!("{key}.{f}"),
                        ProblemKind::MissingField,
                        format!(
                            "sample {key} has no .{f} member (the manifest declares {})",
                            declared()
                        ),
                    );
                }
            }
            // Reported once per field name, in name order (no allocation when there are none).
            let mut unexpected: Vec<&str> = fields
                .iter()
                .map(|(f, _)| &**f)
                .filter(|f| !ctx.fields.contains(*f))
                .collect();
            unexpected.sort_unstable();
            unexpected.dedup();
            for f in unexpected {
                scan.member(
                    ctx,
                    &format!("{key}.{f}"),
                    ProblemKind::UnexpectedField,
                    format!("sample {key} has a .{f} member, which the manifest does not declare"),
                );
            }
        }
    }
    let get = |f: &str| fields.iter().find(|(n, _)| n == f).map(|(_, d)| d);

    // Labels: `.cls` must be an integer index of the class list.
    let mut label = None;
    if let Some(cls) = get("cls") {
        let member = || format!("{key}.cls");
        if cls.len > MAX_META_BYTES as u64 {
            scan.member(
                ctx,
                &member(),
                ProblemKind::BadLabel,
                format!(
                    "is {} bytes, over the {MAX_META_BYTES}-byte limit for a label",
                    cls.len
                ),
            );
        } else {
            let cls = &cls.bytes[..];
            match std::str::from_utf8(cls)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
            {
                None => scan.member(
                    ctx,
                    &member(),
                    ProblemKind::BadLabel,
                    format!("holds {}, not an integer label", quote(cls)),
                ),
                Some(l) => {
                    check_label_range(l, ctx, scan, member);
                    label = Some(l);
                }
            }
        }
    }

    // Metadata: `.json` must be an object consistent with the key and label.
    let mut expect = None;
    if let Some(json) = get("json") {
        let member = || format!("{key}.json");
        if json.len > MAX_META_BYTES as u64 {
            scan.member(
                ctx,
                &member(),
                ProblemKind::BadMetadata,
                format!(
                    "is {} bytes, over the {MAX_META_BYTES}-byte limit for metadata",
                    json.len
                ),
            );
        } else if let Some(stated) = clean_meta(&json.bytes, &key, label, ctx) {
            expect = stated;
        } else {
            match serde_json::from_slice::<Value>(&json.bytes) {
                Ok(Value::Object(meta)) => {
                    expect = check_meta(&meta, &key, label, ctx, scan, &member());
                }
                Ok(_) => scan.member(
                    ctx,
                    &member(),
                    ProblemKind::BadMetadata,
                    "is JSON but not an object".into(),
                ),
                Err(e) => scan.member(
                    ctx,
                    &member(),
                    ProblemKind::BadMetadata,
                    format!("is not valid JSON: {e}"),
                ),
            }
        }
    }

    if ctx.decode {
        for (field, data) in fields {
            if IMAGE_FIELDS.contains(&&**field) {
                scan.images.push(ImageJob {
                    member: format!("{key}.{field}"),
                    data: data.bytes.clone(),
                    expect,
                });
            }
        }
    }
    if new_key {
        seen.insert(key);
    }
}

/// A field that, when present, must hold a `T` (JSON `null` included in what it must not be).
struct Present<T>(Option<T>);

impl<T> Default for Present<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Present<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(|v| Self(Some(v)))
    }
}

/// The metadata fields the checks read, borrowed from the member's bytes; other fields are
/// skipped (their syntax is still checked).
#[derive(Deserialize)]
struct MetaView<'a> {
    #[serde(default, borrow)]
    key: Present<&'a str>,
    #[serde(default)]
    label: Present<i64>,
    #[serde(default, borrow)]
    class: Present<&'a str>,
    #[serde(default)]
    width: Present<u64>,
    #[serde(default)]
    height: Present<u64>,
}

/// Reads the fields the metadata checks compare with serde, borrowing from `json`; `None` when
/// it is not an object, or a field of [`Meta`] does not hold its type or is repeated.
pub fn serde_meta(json: &[u8]) -> Option<Meta<'_>> {
    // serde also reads a struct from a JSON array; metadata must be an object.
    if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let v: MetaView<'_> = serde_json::from_slice(json).ok()?;
    Some(Meta {
        key: v.key.0,
        label: v.label.0,
        class: v.class.0,
        width: v.width.0,
        height: v.height.0,
    })
}

/// The fast path of the metadata checks, for the common case of metadata with nothing to report:
/// reads the fields the checks compare (with [`meta_scan::scan_flat`], or, for an object beyond
/// it, into a borrowed [`MetaView`]) without building a JSON tree and returns the
/// `(width, height)` it states. Returns `None` whenever [`check_meta`] might report something (or
/// the view cannot represent the input: an escaped string, a duplicate field, a wrong type); the
/// caller then runs the full checks, so every finding and message comes from one place.
fn clean_meta(
    json: &[u8],
    key: &str,
    cls_label: Option<i64>,
    ctx: &Ctx<'_>,
) -> Option<Option<(u64, u64)>> {
    let m = meta_scan::scan_flat(json).or_else(|| serde_meta(json))?;
    if m.key.is_some_and(|k| k != key) {
        return None;
    }
    let mut label = cls_label;
    if let Some(l) = m.label {
        match cls_label {
            Some(c) if c != l => return None,
            Some(_) => {}
            None if !label_in_range(l, ctx) => return None,
            None => label = Some(l),
        }
    }
    if let (Some(class), Some(l)) = (m.class, label) {
        let named = usize::try_from(l).ok().and_then(|i| ctx.classes.get(i));
        if named.is_some_and(|n| n != class) {
            return None;
        }
    }
    match (m.width, m.height) {
        (None, None) => Some(None),
        (Some(w), Some(h)) => Some(Some((w, h))),
        _ => None,
    }
}

/// Checks the metadata object of a sample; returns the `(width, height)` it states, if any.
fn check_meta(
    meta: &serde_json::Map<String, Value>,
    key: &str,
    cls_label: Option<i64>,
    ctx: &Ctx<'_>,
    scan: &mut Scan<'_>,
    member: &str,
) -> Option<(u64, u64)> {
    if let Some(k) = meta.get("key") {
        if k.as_str() != Some(key) {
            scan.member(
                ctx,
                member,
                ProblemKind::BadMetadata,
                format!("states key {k}, but the sample's key is {key:?}"),
            );
        }
    }
    let mut label = cls_label;
    match meta.get("label") {
        None => {}
        Some(v) => match v.as_i64() {
            None => scan.member(
                ctx,
                member,
                ProblemKind::BadLabel,
                format!("label {v} is not an integer"),
            ),
            Some(l) => match cls_label {
                Some(c) if c != l => scan.member(
                    ctx,
                    member,
                    ProblemKind::LabelMismatch,
                    format!("states label {l}, but {key}.cls holds {c}"),
                ),
                Some(_) => {}
                None => {
                    check_label_range(l, ctx, scan, || member.to_string());
                    label = Some(l);
                }
            },
        },
    }
    if let (Some(Value::String(class)), Some(l)) = (meta.get("class"), label) {
        let named = usize::try_from(l).ok().and_then(|i| ctx.classes.get(i));
        if let Some(named) = named {
            if named != class {
                scan.member(
                    ctx,
                    member,
                    ProblemKind::LabelMismatch,
                    format!("states class {class:?}, but label {l} is class {named:?}"),
                );
            }
        }
    }
    let dim = |k: &str| meta.get(k).and_then(Value::as_u64);
    match (meta.get("width"), meta.get("height")) {
        (None, None) => None,
        _ => match (dim("width"), dim("height")) {
            (Some(w), Some(h)) => Some((w, h)),
            _ => {
                scan.member(
                    ctx,
                    member,
                    ProblemKind::BadMetadata,
                    "width and height must both be non-negative integers".into(),
                );
                None
            }
        },
    }
}

/// Whether `label` indexes the class list (any label does when the list is not known).
fn label_in_range(label: i64, ctx: &Ctx<'_>) -> bool {
    ctx.classes.is_empty() || usize::try_from(label).is_ok_and(|i| i < ctx.classes.len())
}

/// Reports `label` when it is not an index of the class list; `member` names the member or record
/// (built only then).
pub(crate) fn check_label_range(
    label: i64,
    ctx: &Ctx<'_>,
    scan: &mut Scan<'_>,
    member: impl FnOnce() -> String,
) {
    if label_in_range(label, ctx) {
        return;
    }
    let n = ctx.classes.len();
    scan.member(
        ctx,
        &member(),
        ProblemKind::BadLabel,
        format!(
            "label {label} is not in the class list ({n} classes, labels 0 to {})",
            n - 1
        ),
    );
}

/// A short, printable rendering of untrusted bytes.
fn quote(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(24)];
    let s = format!("{:?}", String::from_utf8_lossy(head));
    if bytes.len() > head.len() {
        format!("{s}…")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardtool_wds::TarWriter;

    fn fields() -> BTreeSet<String> {
        ["cls", "jpg", "json"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn classes() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    /// The checks' context for shard `s.tar` with the test fields and classes.
    fn ctx<'a>(fields: &'a BTreeSet<String>, classes: &'a [String], decode: bool) -> Ctx<'a> {
        Ctx {
            shard: "s.tar",
            fields,
            classes,
            decode,
            expected_samples: 2,
        }
    }

    fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = TarWriter::new(Vec::new());
        for (n, d) in members {
            w.append(n, d).unwrap();
        }
        w.finish().unwrap()
    }

    fn good() -> Vec<(String, Vec<u8>)> {
        let mut v = Vec::new();
        for (k, l) in [("k1", 0), ("k2", 1)] {
            v.push((format!("{k}.cls"), l.to_string().into_bytes()));
            v.push((format!("{k}.jpg"), b"\xff\xd8not really".to_vec()));
            v.push((
                format!("{k}.json"),
                format!(
                    r#"{{"key":"{k}","label":{l},"class":"{}","width":2,"height":3}}"#,
                    ["a", "b"][l]
                )
                .into_bytes(),
            ));
        }
        v
    }

    /// A tar of owned members.
    fn tar_of(members: &[(String, Vec<u8>)]) -> Vec<u8> {
        let refs: Vec<(&str, &[u8])> = members
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        tar(&refs)
    }

    fn scan_of(members: &[(String, Vec<u8>)], decode: bool) -> (Vec<ProblemKind>, u64, usize) {
        let bytes = tar_of(members);
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, decode);
        let s = check_tar(&bytes, &ctx, false);
        let hashed = check_tar(&bytes, &ctx, true);
        let kinds = |s: &Scan<'_>| s.problems.iter().map(|p| p.kind).collect::<Vec<_>>();
        assert_eq!(
            kinds(&s),
            kinds(&hashed),
            "hashing on the way changes no finding"
        );
        assert_eq!(s.file_sum, None);
        assert_eq!(hashed.file_sum, Some(shardtool_core::Checksum::of(&bytes)));
        if !decode {
            assert_streams_alike(&bytes, &ctx);
        }
        (
            s.problems.iter().map(|p| p.kind).collect(),
            s.samples,
            s.images.len(),
        )
    }

    /// Streaming `bytes` (through buffers of several sizes) finds exactly what the in-memory scan
    /// finds, and hashes the same bytes.
    fn assert_streams_alike(bytes: &[u8], ctx: &Ctx<'_>) {
        let whole = check_tar(bytes, ctx, true);
        for buf in [1024, 1536, 4096, 128 << 10] {
            let (streamed, back) = stream_tar(bytes, bytes.len() as u64, vec![0; buf], ctx);
            assert_eq!(back.len(), buf, "the buffer comes back");
            let streamed = streamed.expect("reading a slice cannot fail");
            assert_eq!(streamed.scan.problems, whole.problems, "buffer {buf}");
            assert_eq!(streamed.scan.samples, whole.samples, "buffer {buf}");
            assert_eq!(streamed.scan.keys, whole.keys, "buffer {buf}");
            assert_eq!(streamed.len, bytes.len() as u64);
            assert_eq!(Some(streamed.sum), whole.file_sum);
            assert!(streamed.scan.images.is_empty());
        }
    }

    #[test]
    fn streaming_finds_what_the_in_memory_scan_finds_in_damaged_shards() {
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, false);
        let whole = tar_of(&good());
        let mut cases: Vec<Vec<u8>> = Vec::new();
        // Cut everywhere a block starts, and inside blocks.
        for cut in (0..whole.len()).step_by(256) {
            cases.push(whole[..cut].to_vec());
        }
        // A flipped byte in each header, and in each member's data.
        for at in (0..whole.len() - 1024)
            .step_by(512)
            .flat_map(|b| [b + 3, b + 130, b + 600])
        {
            let mut b = whole.clone();
            b[at] ^= 0x20;
            cases.push(b);
        }
        // Non-zero bytes after the marker, and a marker missing its second block.
        let mut trailing = whole.clone();
        trailing.extend_from_slice(&[0, 0, 9]);
        cases.push(trailing);
        cases.push(whole[..whole.len() - 512].to_vec());
        // Oversized metadata and label, and members that are not regular files.
        let big = vec![b' '; MAX_META_BYTES + 1];
        let more: Vec<(&str, &[u8])> = vec![("k3.cls", &big), ("k3.json", &big), ("k3.jpg", b"x")];
        cases.push(tar(&more));
        let mut odd = whole[..whole.len() - 1024].to_vec();
        for (name, kind) in [
            ("k4.jpg", b'2'),
            ("k4", b'5'),
            ("../k5.cls", b'0'),
            ("__k__.x", b'0'),
        ] {
            let mut h = [0u8; 512];
            h[..name.len()].copy_from_slice(name.as_bytes());
            h[100..107].copy_from_slice(b"0000644");
            h[124..135].copy_from_slice(b"00000000001");
            h[156] = kind;
            h[257..263].copy_from_slice(b"ustar\0");
            h[148..156].copy_from_slice(b"        ");
            let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
            h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
            odd.extend_from_slice(&h);
            if kind == b'0' {
                let mut d = [0u8; 512];
                d[0] = b'0';
                odd.extend_from_slice(&d);
            }
        }
        odd.extend_from_slice(&[0; 1024]);
        cases.push(odd);
        for bytes in &cases {
            assert_streams_alike(bytes, &ctx);
        }
        // The cases do reach the checks they are meant for.
        let kinds: BTreeSet<ProblemKind> = cases
            .iter()
            .flat_map(|b| check_tar(b, &ctx, false).problems)
            .map(|p| p.kind)
            .collect();
        for k in [
            ProblemKind::Truncated,
            ProblemKind::Malformed,
            ProblemKind::TrailingData,
            ProblemKind::BadLabel,
            ProblemKind::BadMetadata,
            ProblemKind::UnsafeMember,
            ProblemKind::UnexpectedMember,
        ] {
            assert!(kinds.contains(&k), "{k:?} not reached: {kinds:?}");
        }
    }

    #[test]
    fn a_read_error_while_streaming_is_returned_with_the_buffer() {
        /// Yields `ok` bytes of `bytes`, then fails.
        struct Failing<'a> {
            bytes: &'a [u8],
            ok: usize,
        }
        impl std::io::Read for Failing<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.ok == 0 {
                    return Err(std::io::Error::other("injected"));
                }
                let n = buf.len().min(self.ok).min(self.bytes.len());
                buf[..n].copy_from_slice(&self.bytes[..n]);
                self.bytes = &self.bytes[n..];
                self.ok -= n;
                Ok(n)
            }
        }
        let bytes = tar_of(&good());
        let (f, c) = (fields(), classes());
        for ok in [0, 700, 2048, bytes.len() - 100] {
            let src = Failing { bytes: &bytes, ok };
            let (r, back) = stream_tar(src, bytes.len() as u64, vec![0; 1024], &ctx(&f, &c, false));
            assert_eq!(back.len(), 1024);
            match r {
                Err(e) => assert_eq!(e.to_string(), "injected", "after {ok} bytes"),
                Ok(_) => panic!("a failed read after {ok} bytes went unnoticed"),
            }
        }
    }

    #[test]
    fn a_good_shard_has_no_problems() {
        let (p, n, images) = scan_of(&good(), true);
        assert_eq!(p, vec![]);
        assert_eq!(n, 2);
        assert_eq!(images, 2);
    }

    #[test]
    fn missing_duplicate_and_unexpected_fields() {
        let mut m = good();
        m.remove(0); // k1.cls
        m.push(("k2.txt".into(), b"x".to_vec()));
        m.push(("k2.txt".into(), b"y".to_vec()));
        let (p, n, _) = scan_of(&m, false);
        assert_eq!(n, 2);
        assert_eq!(
            p,
            vec![
                ProblemKind::MissingField,
                ProblemKind::DuplicateField,
                ProblemKind::UnexpectedField
            ]
        );
    }

    #[test]
    fn a_declared_field_twice_is_reported_even_when_none_is_missing() {
        // k1 holds cls, jpg, jpg, json: every declared field, one of them twice.
        let mut m = good();
        m.insert(2, ("k1.jpg".into(), b"\xff\xd8again".to_vec()));
        let (p, n, _) = scan_of(&m, false);
        assert_eq!(n, 2);
        assert_eq!(p, vec![ProblemKind::DuplicateField]);
    }

    #[test]
    fn labels_and_metadata_must_agree() {
        let mut m = good();
        m[0].1 = b"7".to_vec(); // out of range, and differs from json label 0
        m[3].1 = b"one".to_vec(); // not an integer
        m[5].1 = b"[1]".to_vec(); // json not an object
        let (p, _, _) = scan_of(&m, false);
        assert_eq!(
            p,
            vec![
                ProblemKind::BadLabel,
                ProblemKind::LabelMismatch,
                ProblemKind::BadLabel,
                ProblemKind::BadMetadata
            ]
        );
    }

    #[test]
    fn repeated_keys_and_bad_names() {
        let mut m = good();
        let again = m[0..3].to_vec();
        m.extend(again);
        m.push(("bad key!.cls".into(), b"0".to_vec()));
        m.push(("nodot".into(), b"0".to_vec()));
        m.push(("k9.CLS".into(), b"0".to_vec()));
        let (p, n, _) = scan_of(&m, false);
        assert_eq!(n, 5);
        assert!(p.contains(&ProblemKind::DuplicateKey), "{p:?}");
        assert!(p.contains(&ProblemKind::BadKey), "{p:?}");
        assert!(p.contains(&ProblemKind::BadMemberName), "{p:?}");
    }

    #[test]
    fn a_member_without_a_field_is_named_whole() {
        let members: Vec<(&str, &[u8])> = vec![("nodot", b"0"), ("d.1/x", b"0")];
        let bytes = tar(&members);
        let (f, c) = (fields(), classes());
        let s = check_tar(&bytes, &ctx(&f, &c, false), false);
        let named: Vec<_> = s
            .problems
            .iter()
            .filter(|p| p.kind == ProblemKind::BadMemberName)
            .map(|p| (p.shard.as_deref(), p.member_or_record.as_deref()))
            .collect();
        assert_eq!(
            named,
            [
                (Some("s.tar"), Some("nodot")),
                (Some("s.tar"), Some("d.1/x"))
            ]
        );
        assert_eq!(s.samples, 0);
    }

    #[test]
    fn the_metadata_fast_path_agrees_with_the_full_checks() {
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, false);
        // (document, whether the fast path must take it when the sample has no .cls)
        let docs = [
            (
                r#"{"key":"k1","label":0,"class":"a","width":2,"height":3}"#,
                true,
            ),
            (r#"{"key":"k1","label":1}"#, true),
            (
                r#" {"extra":[1,{"x":null}],"key":"k1","note":"\u00e9"}"#,
                true,
            ),
            ("{}", true),
            (r#"{"key":"k2"}"#, false),
            (r#"{"key":"k\u0031"}"#, false),
            (r#"{"key":null}"#, false),
            (r#"{"key":"k1","key":"k1"}"#, false),
            (r#"{"label":null}"#, false),
            (r#"{"label":1.0}"#, false),
            (r#"{"label":5}"#, false),
            (r#"{"label":-1}"#, false),
            (r#"{"label":0,"label":1}"#, false),
            (r#"{"class":"b","label":0}"#, false),
            (r#"{"class":3,"label":0}"#, false),
            (r#"{"width":2}"#, false),
            (r#"{"width":-1,"height":2}"#, false),
            (r#"{"width":2,"height":"3"}"#, false),
            ("[1]", false),
            ("[]", false),
            ("{", false),
            (r#"{"key":"k1"} x"#, false),
        ];
        for cls in [None, Some(0), Some(1)] {
            for (doc, clean) in docs {
                let fast = clean_meta(doc.as_bytes(), "k1", cls, &ctx);
                if cls.is_none() {
                    assert_eq!(fast.is_some(), clean, "{doc}");
                }
                let Some(expect) = fast else { continue };
                let Ok(Value::Object(meta)) = serde_json::from_slice::<Value>(doc.as_bytes())
                else {
                    panic!("the fast path took {doc}, which is not a JSON object");
                };
                let mut scan = Scan::default();
                let full = check_meta(&meta, "k1", cls, &ctx, &mut scan, "k1.json");
                assert!(
                    scan.problems.is_empty(),
                    "the fast path took {doc} (cls {cls:?}), which the full checks report: {:?}",
                    scan.problems
                );
                assert_eq!(full, expect, "{doc}");
            }
        }
    }

    #[test]
    fn truncation_and_trailing_bytes() {
        let m = good();
        let refs: Vec<(&str, &[u8])> = m.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        let bytes = tar(&refs);
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, false);
        for cut in [0, 100, 512, bytes.len() - 1024, bytes.len() - 1] {
            let s = check_tar(&bytes[..cut], &ctx, true);
            assert_eq!(
                s.file_sum,
                Some(shardtool_core::Checksum::of(&bytes[..cut])),
                "a broken shard is still hashed whole"
            );
            assert!(
                s.problems.iter().any(|p| p.kind == ProblemKind::Truncated),
                "cut at {cut}: {:?}",
                s.problems
            );
        }
        let mut long = bytes.clone();
        long.extend_from_slice(&[0; 512]);
        assert!(check_tar(&long, &ctx, false).problems.is_empty());
        long.push(1);
        let s = check_tar(&long, &ctx, true);
        assert_eq!(s.problems[0].kind, ProblemKind::TrailingData);
    }
}
