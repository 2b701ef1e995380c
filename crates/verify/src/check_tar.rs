//! Structure and cheap content checks of a WebDataset tar shard: every member regular and safe,
//! names following the key rules, samples holding exactly the declared fields once each, labels
//! and metadata consistent. Images to decode are handed back for the caller to decode in parallel.

use crate::ahead::AheadHasher;
use crate::report::{Problem, ProblemKind};
use serde::Deserialize;
use serde_json::Value;
use shardtool_core::validate_key;
use shardtool_wds::{split_name, EntryKind, ReadError, TarReader, BLOCK};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

/// Keys seen in one shard. foldhash: seeded per process like std's SipHash, several times faster
/// on short keys, and this set is probed once per sample.
type KeySet<'d> = HashSet<Cow<'d, str>, foldhash::fast::RandomState>;

/// Largest `.json` member parsed; anything larger is reported rather than parsed.
const MAX_JSON_BYTES: usize = 1 << 20;

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
}

/// An image to decode and the size its metadata promises.
pub(crate) struct ImageJob<'d> {
    /// Member name (`<key>.<field>`).
    pub member: String,
    /// Its bytes.
    pub data: &'d [u8],
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

/// A sample's fields, `(field, data)` in archive order. Names borrow from the shard unless a
/// USTAR prefix or upper case made a copy necessary.
type Fields<'d> = Vec<(Cow<'d, str>, &'d [u8])>;

/// Splits a member name into key and field, borrowing from the shard when the name does.
fn split_member(name: Cow<'_, str>) -> (Cow<'_, str>, Cow<'_, str>) {
    match name {
        Cow::Borrowed(n) => {
            let (k, f) = split_name(n);
            (Cow::Borrowed(k), Cow::Borrowed(f))
        }
        Cow::Owned(n) => {
            let (k, f) = split_name(&n);
            (Cow::Owned(k.to_string()), Cow::Owned(f.to_string()))
        }
    }
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
        scan.problems.push(Problem::shard(
            ctx.shard,
            ProblemKind::Truncated,
            "the shard is empty (0 bytes)",
        ));
        return scan;
    }
    let mut seen = KeySet::default();
    // The sample being gathered: its key and fields (the vector is reused from sample to sample).
    let mut current: Option<Cow<'d, str>> = None;
    let mut fields: Fields<'d> = Vec::new();
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
                let kind = match err {
                    ReadError::Truncated { .. } => ProblemKind::Truncated,
                    _ => ProblemKind::Malformed,
                };
                scan.problems
                    .push(Problem::shard(ctx.shard, kind, err.to_string()));
                broken = true;
                break;
            }
        };
        // Where the reader continues: header, data, padding to the block size.
        end = usize::try_from(e.header_offset)
            .unwrap_or(usize::MAX)
            .saturating_add(BLOCK)
            .saturating_add(e.data.len().div_ceil(BLOCK) * BLOCK);
        let name: &str = &e.name;
        let unsafe_or_unexpected = match e.kind {
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
            continue;
        }
        if name.starts_with('/') {
            scan.member(
                ctx,
                name,
                ProblemKind::UnsafeMember,
                "member has an absolute path".into(),
            );
            continue;
        }
        if name.contains("..") && name.split(['/', '\\']).any(|c| c == "..") {
            scan.member(
                ctx,
                name,
                ProblemKind::UnsafeMember,
                "member path has a '..' component".into(),
            );
            continue;
        }
        let base = name.rsplit('/').next().unwrap_or(name);
        if base.starts_with("__") && base.ends_with("__") {
            scan.member(
                ctx,
                name,
                ProblemKind::UnexpectedMember,
                "member is a WebDataset metadata member (__*__), which shardtool never writes"
                    .into(),
            );
            continue;
        }
        let data = e.data;
        let (key, mut field) = split_member(e.name);
        if field.is_empty() {
            // Without a field, the key is the whole member name.
            scan.member(
                ctx,
                &key,
                ProblemKind::BadMemberName,
                "member name has no field (no '.' after the key)".into(),
            );
            continue;
        }
        if field.bytes().any(|b| b.is_ascii_uppercase()) {
            let member = format!("{key}.{field}");
            scan.member(
                ctx,
                &member,
                ProblemKind::BadMemberName,
                format!("field {field:?} is not lowercase"),
            );
            field = Cow::Owned(field.to_ascii_lowercase());
        }
        if current.as_ref() != Some(&key) {
            if let Some(done) = current.take() {
                finish_sample(done, &fields, ctx, &mut scan, &mut seen);
            }
            fields.clear();
            current = Some(key);
        }
        fields.push((field, data));
    }
    // After a read error the last sample may have lost members to the damage: it is not
    // counted or checked, so the error is reported once rather than as missing fields.
    if let Some(done) = current.take().filter(|_| !broken) {
        finish_sample(done, &fields, ctx, &mut scan, &mut seen);
    }
    if !broken {
        check_end(bytes, end, ctx, &mut scan);
    }
    scan
}

/// The archive must end with two zero blocks; only zero bytes may follow them.
fn check_end(bytes: &[u8], end: usize, ctx: &Ctx<'_>, scan: &mut Scan<'_>) {
    let rest = bytes.get(end..).unwrap_or(&[]);
    let marker = rest.len().min(2 * BLOCK);
    if marker < 2 * BLOCK || rest[..marker].iter().any(|&b| b != 0) {
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
    if let Some(pos) = rest[marker..].iter().position(|&b| b != 0) {
        scan.problems.push(Problem::shard(
            ctx.shard,
            ProblemKind::TrailingData,
            format!(
                "non-zero bytes at byte {} follow the end-of-archive marker",
                end + marker + pos
            ),
        ));
    }
}

fn finish_sample<'d>(
    key: Cow<'d, str>,
    fields: &[(Cow<'d, str>, &'d [u8])],
    ctx: &Ctx<'_>,
    scan: &mut Scan<'d>,
    seen: &mut KeySet<'d>,
) {
    scan.samples += 1;
    if let Err(e) = validate_key(&key) {
        scan.member(ctx, &key, ProblemKind::BadKey, format!("key {key:?}: {e}"));
    }
    if seen.insert(key.clone()) {
        scan.keys.push(key.to_string());
    } else {
        scan.member(
            ctx,
            &key,
            ProblemKind::DuplicateKey,
            format!("key {key:?} appears again, apart from its first sample, in this shard"),
        );
    }
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
    let get = |f: &str| fields.iter().find(|(n, _)| n == f).map(|(_, d)| *d);

    // Labels: `.cls` must be an integer index of the class list.
    let mut label = None;
    if let Some(cls) = get("cls") {
        match std::str::from_utf8(cls)
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
        {
            None => scan.member(
                ctx,
                &format!("{key}.cls"),
                ProblemKind::BadLabel,
                format!("holds {}, not an integer label", quote(cls)),
            ),
            Some(l) => {
                check_label_range(l, ctx, scan, || format!("{key}.cls"));
                label = Some(l);
            }
        }
    }

    // Metadata: `.json` must be an object consistent with the key and label.
    let mut expect = None;
    if let Some(json) = get("json") {
        let member = || format!("{key}.json");
        if json.len() > MAX_JSON_BYTES {
            scan.member(
                ctx,
                &member(),
                ProblemKind::BadMetadata,
                format!(
                    "is {} bytes, over the {MAX_JSON_BYTES}-byte limit for metadata",
                    json.len()
                ),
            );
        } else if let Some(stated) = clean_meta(json, &key, label, ctx) {
            expect = stated;
        } else {
            match serde_json::from_slice::<Value>(json) {
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
                    data,
                    expect,
                });
            }
        }
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

/// The fast path of the metadata checks, for the common case of metadata with nothing to report:
/// parses into a borrowed [`MetaView`] without building a JSON tree and returns the
/// `(width, height)` it states. Returns `None` whenever [`check_meta`] might report something (or
/// the view cannot represent the input: an escaped string, a duplicate field, a wrong type); the
/// caller then runs the full checks, so every finding and message comes from one place.
fn clean_meta(
    json: &[u8],
    key: &str,
    cls_label: Option<i64>,
    ctx: &Ctx<'_>,
) -> Option<Option<(u64, u64)>> {
    // serde also reads a struct from a JSON array; metadata must be an object.
    if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let m: MetaView<'_> = serde_json::from_slice(json).ok()?;
    if m.key.0.is_some_and(|k| k != key) {
        return None;
    }
    let mut label = cls_label;
    if let Some(l) = m.label.0 {
        match cls_label {
            Some(c) if c != l => return None,
            Some(_) => {}
            None if !label_in_range(l, ctx) => return None,
            None => label = Some(l),
        }
    }
    if let (Some(class), Some(l)) = (m.class.0, label) {
        let named = usize::try_from(l).ok().and_then(|i| ctx.classes.get(i));
        if named.is_some_and(|n| n != class) {
            return None;
        }
    }
    match (m.width.0, m.height.0) {
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

    fn scan_of(members: &[(String, Vec<u8>)], decode: bool) -> (Vec<ProblemKind>, u64, usize) {
        let refs: Vec<(&str, &[u8])> = members
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let bytes = tar(&refs);
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
        (
            s.problems.iter().map(|p| p.kind).collect(),
            s.samples,
            s.images.len(),
        )
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
