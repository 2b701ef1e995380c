//! Structure checks of a WebDataset tar shard, read front to back through a small buffer: every
//! member regular and safe, names following the key rules, members grouped into samples (whose
//! own checks are in `sample`), the end-of-archive marker. Images to decode are handed back, by
//! position, for the caller to decode in parallel.

use crate::keys::Keys;
use crate::loader::STREAM_BUFFER;
use crate::report::{Problem, ProblemKind};
use crate::sample::finish_sample;
use shardtool_core::{validate_key, Checksum, HashingReader};
use shardtool_wds::{split_name, EntryKind, ReadError, StreamError, Tail, TarStream, BLOCK};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io::Read;
use std::ops::Range;

/// No fields (for a test context without optional fields).
#[cfg(test)]
pub(crate) static NO_FIELDS: BTreeSet<String> = BTreeSet::new();

/// Largest `.json`, `.cls` or `.txt` member read; anything larger is reported rather than parsed.
pub(crate) const MAX_META_BYTES: usize = shardtool_wds::MAX_TEXT_BYTES;

/// Most problems listed for one shard; the rest are counted (see [`ProblemKind::MoreProblems`]).
pub(crate) const MAX_SHARD_PROBLEMS: usize = 1000;

/// Most members of one sample that are checked: a sample has a handful, and a shard of millions
/// of members under one key must not cost memory or time in proportion (the field checks are
/// quadratic in a sample's members). The rest are reported once and only hashed.
pub(crate) use shardtool_wds::MAX_SAMPLE_MEMBERS;

/// What the checks of one shard need to know about the dataset.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// The shard file name (for problems).
    pub shard: &'a str,
    /// Fields every sample must carry (with `optional` empty too: not known, not checked).
    pub fields: &'a BTreeSet<String>,
    /// Fields a sample may carry besides those.
    pub optional: &'a BTreeSet<String>,
    /// A sample's json may be its input's own (the manifest's pack option `"json": "input"`):
    /// its `width` and `height` describe the original, not the stored image.
    pub json_input: bool,
    /// Samples were numbered by position (the manifest's pack option `"keys": "index"`): such an
    /// input json states the input's key, not the sample's.
    pub renumbered: bool,
    /// Class names (empty: not known, labels are only checked to be integers).
    pub classes: &'a [String],
    /// Collect images to decode.
    pub decode: bool,
    /// Samples the manifest says the shard holds (untrusted: only sizes the key set, capped).
    pub expected_samples: u64,
}

/// An image to decode and the size its metadata promises.
pub(crate) struct ImageJob {
    /// Member name (`<key>.<field>`).
    pub member: String,
    /// Where its data lies in the shard: offset and length.
    pub at: u64,
    pub len: u64,
    /// `(width, height)` from the sample's metadata, when it states one.
    pub expect: Option<(u64, u64)>,
}

/// The outcome of scanning one shard.
#[derive(Default)]
pub(crate) struct Scan {
    /// The first [`MAX_SHARD_PROBLEMS`] problems, and how many more were found.
    pub problems: Vec<Problem>,
    pub unlisted: u64,
    /// Keys in shard order, each once (repeats inside the shard are reported here).
    pub keys: Keys,
    pub samples: u64,
    pub images: Vec<ImageJob>,
}

impl Scan {
    /// Checks a sample's key and adds it to the shard's keys; `again` says, for a key the shard
    /// has used already, where.
    pub(crate) fn key(&mut self, ctx: &Ctx<'_>, key: &str, again: impl FnOnce() -> String) {
        if let Err(e) = validate_key(key) {
            self.member(ctx, key, ProblemKind::BadKey, format!("key {key:?}: {e}"));
        }
        if !self.keys.insert(key) {
            let message = format!("key {key:?} {}", again());
            self.member(ctx, key, ProblemKind::DuplicateKey, message);
        }
    }

    pub(crate) fn member(
        &mut self,
        ctx: &Ctx<'_>,
        member: &str,
        kind: ProblemKind,
        message: String,
    ) {
        if self.problems.len() < MAX_SHARD_PROBLEMS {
            self.problems
                .push(Problem::member(ctx.shard, member, kind, message));
        } else {
            self.unlisted += 1;
        }
    }
}

/// A field of a sample: where its data lies in the shard, and where in the sample's kept bytes
/// lies the data of the fields the checks read (`.cls`, `.json` and `.txt` up to
/// [`MAX_META_BYTES`]; an empty range for the others).
#[derive(Clone, Default)]
pub(crate) struct FieldData {
    pub at: u64,
    pub len: u64,
    pub kept: Range<usize>,
}

/// The fields whose data the checks read (up to [`MAX_META_BYTES`] each).
const READ_FIELDS: [&str; 3] = ["cls", "json", "txt"];

/// Checks a whole tar shard held in memory (see [`stream_tar`]).
pub(crate) fn check_tar(bytes: &[u8], ctx: &Ctx<'_>) -> Scan {
    let (streamed, _) = stream_tar(bytes, bytes.len() as u64, vec![0; STREAM_BUFFER], ctx);
    match streamed {
        Ok(s) => s.scan,
        // Reading a slice does not fail; should it, the shard is reported, not skipped.
        Err(e) => {
            let mut scan = Scan::default();
            scan.problems.push(Problem::shard(
                ctx.shard,
                ProblemKind::Unreadable,
                format!("cannot read: {e}"),
            ));
            scan
        }
    }
}

/// A tar shard read front to back: its scan and what was read.
pub(crate) struct Streamed {
    pub scan: Scan,
    /// Bytes read, and their checksum.
    pub len: u64,
    pub sum: Checksum,
}

/// Checks the tar shard that `src` yields (`len` bytes long by its metadata) by reading it front
/// to back through `buf`, hashing every byte on the way; only the data of `.cls`, `.json` and
/// `.txt` members is kept. Returns the buffer for reuse, and the error when the source could not
/// be read to its end.
pub(crate) fn stream_tar<R: Read>(
    src: R,
    len: u64,
    buf: Vec<u8>,
    ctx: &Ctx<'_>,
) -> (Result<Streamed, std::io::Error>, Vec<u8>) {
    let mut scan = Scan::default();
    let mut stream = TarStream::new(HashingReader::new(src), len, buf);
    // Sized for the manifest's count, capped, since the count is untrusted (the set still grows
    // past it).
    scan.keys =
        Keys::with_capacity(usize::try_from(ctx.expected_samples).map_or(0, |n| n.min(1 << 16)));
    let mut g = Gather::default();
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
        let (at, len) = (h.header_offset + BLOCK as u64, h.size);
        let Some(field) = g.member(ctx, &mut scan, &h.name, h.kind) else {
            continue;
        };
        // Only a field's first member is read (a repeat is a problem of its own), so a sample
        // keeps at most one of each of the three, each at most MAX_META_BYTES.
        let read = READ_FIELDS.iter().position(|f| *f == field);
        let keep = g.first_read(read) && len <= MAX_META_BYTES as u64;
        let start = g.kept.len();
        if keep {
            // At most MAX_META_BYTES.
            g.kept.reserve(len as usize);
            if let Err(e) = stream.read_data(len, &mut g.kept) {
                io_error = Some(e);
                break;
            }
        }
        g.set_data(FieldData {
            at,
            len,
            kept: start..g.kept.len(),
        });
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

pub(crate) fn empty_shard(ctx: &Ctx<'_>) -> Problem {
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

/// Why a member cannot join a sample: its type or its path is unsafe, or it is not a member
/// shardtool writes.
fn member_problem(name: &str, kind: EntryKind) -> Option<(ProblemKind, String)> {
    use ProblemKind::{UnexpectedMember as Unexpected, UnsafeMember as Unsafe};
    let (kind, message) = match kind {
        EntryKind::Regular if name.starts_with('/') => (Unsafe, "has an absolute path"),
        EntryKind::Regular if name.split(['/', '\\']).any(|c| c == "..") => {
            (Unsafe, "path has a '..' component")
        }
        EntryKind::Regular if shardtool_wds::is_metadata_member(name) => (
            Unexpected,
            "is a WebDataset metadata member (__*__), which shardtool never writes",
        ),
        EntryKind::Regular => return None,
        EntryKind::Link => (
            Unsafe,
            "is a hard or symbolic link, which can point outside an extraction directory",
        ),
        EntryKind::Device => (Unsafe, "is a device or FIFO, not a regular file"),
        EntryKind::Directory => (Unexpected, "is a directory; shards hold regular files only"),
        EntryKind::Extension => (
            Unexpected,
            "is a pax or GNU extension header, which shardtool never writes",
        ),
        EntryKind::Other(t) => {
            let t = char::from(t);
            return Some((Unexpected, format!("member has unknown tar type {t:?}")));
        }
    };
    Some((kind, format!("member {message}")))
}

/// Groups members into samples, checking each member's type and name on the way and each sample
/// when it is complete.
#[derive(Default)]
struct Gather<'a> {
    /// The sample being gathered (none when `fields` is empty): its key, its fields in archive
    /// order (names borrowed from the declared fields where they are one) and the data kept of
    /// them. All three are reused from sample to sample.
    key: String,
    fields: Vec<(Cow<'a, str>, FieldData)>,
    kept: Vec<u8>,
    /// Which of [`READ_FIELDS`] the sample has had a member of.
    read_seen: [bool; 3],
    /// The sample has had members past [`MAX_SAMPLE_MEMBERS`] (reported once).
    overflowed: bool,
}

impl<'a> Gather<'a> {
    /// Checks one member; when it joins a sample, adds it as a field (without data: see
    /// [`set_data`](Self::set_data)) and returns the field's (lowercased) name.
    fn member(
        &mut self,
        ctx: &Ctx<'a>,
        scan: &mut Scan,
        name: &str,
        kind: EntryKind,
    ) -> Option<&str> {
        if let Some((kind, message)) = member_problem(name, kind) {
            scan.member(ctx, name, kind, message);
            return None;
        }
        let (key, field) = split_name(name);
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
        let field: Cow<'a, str> = if field.bytes().any(|b| b.is_ascii_uppercase()) {
            scan.member(
                ctx,
                name,
                ProblemKind::BadMemberName,
                format!("field {field:?} is not lowercase"),
            );
            Cow::Owned(field.to_ascii_lowercase())
        } else {
            match ctx.fields.get(field).or_else(|| ctx.optional.get(field)) {
                Some(f) => Cow::Borrowed(f.as_str()),
                None => Cow::Owned(field.to_owned()),
            }
        };
        if self.fields.is_empty() || self.key != key {
            self.finish(ctx, scan, false);
            self.key.clear();
            self.key.push_str(key);
        }
        if self.fields.len() == MAX_SAMPLE_MEMBERS {
            if !std::mem::replace(&mut self.overflowed, true) {
                scan.member(
                    ctx,
                    key,
                    ProblemKind::UnexpectedMember,
                    format!(
                        "sample {key} has more than {MAX_SAMPLE_MEMBERS} members; the rest are \
                         not checked"
                    ),
                );
            }
            return None;
        }
        self.fields.push((field, FieldData::default()));
        self.fields.last().map(|(f, _)| &**f)
    }

    /// Whether the field added last, the `read`-th of [`READ_FIELDS`] (`None`: none of them), is
    /// the sample's first member of that field.
    fn first_read(&mut self, read: Option<usize>) -> bool {
        read.is_some_and(|i| !std::mem::replace(&mut self.read_seen[i], true))
    }

    /// Sets the data of the field added last.
    fn set_data(&mut self, data: FieldData) {
        if let Some(last) = self.fields.last_mut() {
            last.1 = data;
        }
    }

    /// Finishes the last sample. After a read error it may have lost members to the damage: it
    /// is then not counted or checked, so the error is reported once rather than as missing
    /// fields.
    fn finish(&mut self, ctx: &Ctx<'_>, scan: &mut Scan, broken: bool) {
        if !self.fields.is_empty() && !broken {
            finish_sample(&self.key, &self.fields, &self.kept, ctx, scan);
        }
        self.fields.clear();
        self.kept.clear();
        self.read_seen = [false; 3];
        self.overflowed = false;
    }
}

/// The archive must end with two zero blocks; only zero bytes may follow them.
fn check_end(tail: &Tail, ctx: &Ctx<'_>, scan: &mut Scan) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use shardtool_wds::tar_bytes;

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
            optional: &NO_FIELDS,
            json_input: false,
            renumbered: false,
            classes,
            decode,
            expected_samples: 2,
        }
    }

    fn tar<N: AsRef<str>, D: AsRef<[u8]>>(members: &[(N, D)]) -> Vec<u8> {
        tar_bytes(members.iter().map(|(n, d)| (n, d))).unwrap()
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
        let bytes = tar(members);
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, decode);
        let s = check_tar(&bytes, &ctx);
        if !decode {
            assert_streams_alike(&bytes, &ctx);
        }
        for job in &s.images {
            // Each image's position in the shard is its member's data.
            let data = &bytes[job.at as usize..][..job.len as usize];
            let member = members.iter().find(|(n, _)| *n == job.member).unwrap();
            assert_eq!(data, &member.1[..], "{}", job.member);
        }
        (
            s.problems.iter().map(|p| p.kind).collect(),
            s.samples,
            s.images.len(),
        )
    }

    /// Reading `bytes` through buffers of several sizes finds exactly what the default buffer
    /// finds, and hashes the same bytes.
    fn assert_streams_alike(bytes: &[u8], ctx: &Ctx<'_>) {
        let whole = check_tar(bytes, ctx);
        for buf in [1024, 1536, 4096, 128 << 10] {
            let (streamed, back) = stream_tar(bytes, bytes.len() as u64, vec![0; buf], ctx);
            assert_eq!(back.len(), buf, "the buffer comes back");
            let streamed = streamed.expect("reading a slice cannot fail");
            assert_eq!(streamed.scan.problems, whole.problems, "buffer {buf}");
            assert_eq!(streamed.scan.samples, whole.samples, "buffer {buf}");
            assert!(
                streamed.scan.keys.iter().eq(whole.keys.iter()),
                "buffer {buf}"
            );
            assert_eq!(streamed.len, bytes.len() as u64);
            assert_eq!(streamed.sum, Checksum::of(bytes));
            assert!(streamed.scan.images.is_empty());
        }
    }

    #[test]
    fn every_buffer_size_finds_the_same_in_damaged_shards() {
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, false);
        let whole = tar(&good());
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
            odd.extend_from_slice(&shardtool_wds::ustar_header(name, 1, kind, "").unwrap());
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
            .flat_map(|b| check_tar(b, &ctx).problems)
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
        let bytes = tar(&good());
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
    fn a_sample_of_countless_members_is_checked_up_to_the_bound() {
        // One key, many repeats of each field: reported as a duplicate field and as an overlong
        // sample, once each, and only the first .json is read (the later ones would be bad).
        let mut m = good()[..3].to_vec();
        for i in 0..2 * MAX_SAMPLE_MEMBERS {
            m.push((format!("k1.x{}", i % 7), Vec::new()));
            m.push(("k1.json".into(), b"not json".to_vec()));
        }
        let (f, c) = (fields(), classes());
        let one = tar(&m);
        let s = check_tar(&one, &ctx(&f, &c, false));
        assert_eq!(s.samples, 1);
        let count = |k| s.problems.iter().filter(|p| p.kind == k).count();
        assert_eq!(count(ProblemKind::UnexpectedMember), 1, "{:?}", s.problems);
        assert_eq!(count(ProblemKind::BadMetadata), 0, "{:?}", s.problems);
        // Found: the overlong sample; each checked member but the first of each of its 10 names
        // (cls, jpg, json, x0 to x6); the 7 undeclared fields x0 to x6. Listed up to
        // MAX_SHARD_PROBLEMS, counted past it.
        assert_eq!(s.problems.len(), MAX_SHARD_PROBLEMS);
        assert_eq!(
            s.problems.len() as u64 + s.unlisted,
            1 + (MAX_SAMPLE_MEMBERS - 10) as u64 + 7
        );
        // A shard of many such samples takes time in proportion to its size.
        let sample_bytes = one.len();
        let many: Vec<(String, Vec<u8>)> = (0..50)
            .flat_map(|k| {
                m.iter()
                    .map(move |(n, d)| (n.replacen("k1", &format!("k{k}"), 1), d.clone()))
            })
            .collect();
        let start = std::time::Instant::now();
        let s = check_tar(&tar(&many), &ctx(&f, &c, false));
        assert_eq!(s.samples, 50);
        assert!(
            start.elapsed().as_secs() < 5,
            "50 samples of {sample_bytes} bytes took {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_member_without_a_field_is_named_whole() {
        let members: Vec<(&str, &[u8])> = vec![("nodot", b"0"), ("d.1/x", b"0")];
        let bytes = tar(&members);
        let (f, c) = (fields(), classes());
        let s = check_tar(&bytes, &ctx(&f, &c, false));
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
    fn truncation_and_trailing_bytes() {
        let bytes = tar(&good());
        let (f, c) = (fields(), classes());
        let ctx = ctx(&f, &c, false);
        for cut in [0, 100, 512, bytes.len() - 1024, bytes.len() - 1] {
            let s = check_tar(&bytes[..cut], &ctx);
            assert!(
                s.problems.iter().any(|p| p.kind == ProblemKind::Truncated),
                "cut at {cut}: {:?}",
                s.problems
            );
        }
        let mut long = bytes.clone();
        long.extend_from_slice(&[0; 512]);
        assert!(check_tar(&long, &ctx).problems.is_empty());
        long.push(1);
        let s = check_tar(&long, &ctx);
        assert_eq!(s.problems[0].kind, ProblemKind::TrailingData);
    }
}
