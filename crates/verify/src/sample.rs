//! The checks of one tar sample once its members are gathered: key, field names against the
//! manifest's fields, the `.cls` label and the `.json` metadata (the one place that states the
//! metadata rules), and the images to decode.

use crate::check_tar::{Ctx, FieldData, ImageJob, Scan, MAX_META_BYTES};
use crate::report::ProblemKind;
use serde_json::value::RawValue;
use shardtool_wds::{json_string, json_value, SampleMeta};
use std::borrow::Cow;
use std::collections::HashSet;

/// Missing fields of one sample reported one by one; the rest are counted in one more problem.
const MISSING_SHOWN: usize = 8;

/// Checks a finished sample: its key (against the shard's keys so far, in `scan`), its fields
/// (whose kept data lies in `kept`), label and metadata; with `decode`, hands its images to `scan`.
pub(crate) fn finish_sample(
    key: &str,
    fields: &[(Cow<'_, str>, FieldData)],
    kept: &[u8],
    ctx: &Ctx<'_>,
    scan: &mut Scan,
) {
    scan.samples += 1;
    scan.key(ctx, key, || {
        "appears again, apart from its first sample, in this shard".into()
    });
    // A sample has a handful of fields: linear scans beat building a set for each sample, up to
    // a few; a set past that (a hostile sample has up to MAX_SAMPLE_MEMBERS).
    let mut seen = HashSet::new();
    for (i, (field, _)) in fields.iter().enumerate() {
        let repeated = match fields.len() {
            0..=8 => fields[..i].iter().any(|(f, _)| f == field),
            _ => !seen.insert(&**field),
        };
        if repeated {
            scan.member(
                ctx,
                &format!("{key}.{field}"),
                ProblemKind::DuplicateField,
                format!("sample {key} holds field {field} more than once"),
            );
        }
    }
    if !ctx.fields.is_empty() || !ctx.optional.is_empty() {
        // Built only for a problem: this runs once per sample.
        let declared = || {
            let names: Vec<&str> = ctx.fields.iter().map(String::as_str).take(8).collect();
            match ctx.fields.len() - names.len() {
                0 => names.join(", "),
                more => format!("{}, and {more} more", names.join(", ")),
            }
        };
        let mut missing = 0usize;
        for f in ctx.fields {
            if !fields.iter().any(|(n, _)| n == f) {
                // A sample lacking many is one problem, not one per field (a report of
                // thousands of lines, each naming every field).
                missing += 1;
                if missing > MISSING_SHOWN {
                    continue;
                }
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
        if missing > MISSING_SHOWN {
            scan.member(
                ctx,
                key,
                ProblemKind::MissingField,
                format!(
                    "sample {key} lacks {} more of the fields the manifest declares",
                    missing - MISSING_SHOWN
                ),
            );
        }
        // Reported once per field name, in name order (no allocation when there are none).
        let mut unexpected: Vec<&str> = fields
            .iter()
            .map(|(f, _)| &**f)
            .filter(|f| !ctx.fields.contains(*f) && !ctx.optional.contains(*f))
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
    let get = |f: &str| fields.iter().find(|(n, _)| n == f).map(|(_, d)| d);
    let data = |d: &FieldData| kept.get(d.kept.clone()).unwrap_or_default();

    // Labels: `.cls` must be an integer index of the class list.
    let mut label = None;
    if let Some(cls) = get(shardtool_wds::LABEL_FIELD) {
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
            let cls = data(cls);
            match shardtool_wds::parse_cls(cls) {
                None => scan.member(
                    ctx,
                    &member(),
                    ProblemKind::BadLabel,
                    format!("holds {}, not an integer label", shardtool_wds::quote(cls)),
                ),
                Some(l) => {
                    check_label_range(l, ctx, scan, member);
                    label = Some(l);
                }
            }
        }
    }

    // Text: `.txt` must be UTF-8.
    if let Some(txt) = get("txt") {
        if let Some(why) = shardtool_wds::txt_problem(txt.len, data(txt)) {
            scan.member(ctx, &format!("{key}.txt"), ProblemKind::BadField, why);
        }
    }

    // Metadata: `.json` must be an object consistent with the key and label.
    let mut expect = None;
    if let Some(json) = get("json") {
        let member = || format!("{key}.json");
        expect = check_meta(json.len, data(json), key, label, ctx, scan, member);
    }

    if ctx.decode {
        // The image is the first image field, as readers pick it; an image field carried
        // beside it (a mask, the input's original) is the input's bytes, not checked here.
        let image = shardtool_wds::image_field(fields.iter().map(|(f, _)| &**f));
        for (field, data) in fields.iter().filter(|(f, _)| Some(&**f) == image) {
            scan.images.push(ImageJob {
                member: format!("{key}.{field}"),
                at: data.at,
                len: data.len,
                expect,
            });
        }
    }
}

/// Checks a sample's `.json` member of `len` bytes whose data is `json` (empty when not read, over
/// [`MAX_META_BYTES`]); returns the `(width, height)` it states, if any; `member` names it in
/// problems (built only for one). The rules (the first two read by [`SampleMeta`], which pack
/// shares), all optional fields of one JSON object (other fields are free): `key` is the
/// sample's key; `label` is an integer, equal to the `.cls` label when there is one and otherwise
/// a class index; `class` is the name of the label's class; `width` and `height` come together,
/// as non-negative integers.
/// When the dataset's json may be its input's own (`ctx.json_input`), only the first rule holds:
/// such a json is the input's metadata (an img2dataset json's `width` and `height` are the
/// original download's), so nothing else in it is shardtool's to check; and not even the key
/// when pack numbered the samples (`ctx.renumbered`): the json then states the input's key.
pub(crate) fn check_meta(
    len: u64,
    json: &[u8],
    key: &str,
    cls_label: Option<i64>,
    ctx: &Ctx<'_>,
    scan: &mut Scan,
    member: impl Fn() -> String,
) -> Option<(u64, u64)> {
    let meta = match SampleMeta::parse(len, json) {
        Ok(meta) => meta,
        Err(why) => {
            scan.member(ctx, &member(), ProblemKind::BadMetadata, why);
            return None;
        }
    };
    // An input's json states the input's key, which is not the sample's when pack renumbered.
    let key_rule = !(ctx.json_input && ctx.renumbered);
    if let Some(why) = meta.key_problem(key).filter(|_| key_rule) {
        scan.member(ctx, &member(), ProblemKind::BadMetadata, why);
    }
    if ctx.json_input {
        return None;
    }
    let mut label = cls_label;
    if let Some(v) = meta.label {
        match json_value::<i64>(v) {
            None => scan.member(
                ctx,
                &member(),
                ProblemKind::BadLabel,
                format!("label {v} is not an integer"),
            ),
            Some(l) => match cls_label {
                Some(c) if c != l => scan.member(
                    ctx,
                    &member(),
                    ProblemKind::LabelMismatch,
                    format!("states label {l}, but {key}.cls holds {c}"),
                ),
                Some(_) => {}
                None => {
                    check_label_range(l, ctx, scan, &member);
                    label = Some(l);
                }
            },
        }
    }
    let size = |v: Option<&RawValue>| v.map(json_value::<u64>);
    let class = meta.class.and_then(json_string);
    check_class_and_size(
        (class.as_deref(), label),
        (size(meta.width), size(meta.height)),
        ctx,
        scan,
        member,
    )
}

/// A class name as a message shows it: its first 100 characters (a hostile manifest or sample
/// may hold megabytes, repeated in every sample's message).
fn cut(name: &str) -> String {
    match name.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name.to_string(),
    }
}

/// The rules of a sample's metadata that `.json` members and packed records' metadata share: a
/// stated `class` names the label's class; `width` and `height` (each `None` when absent,
/// `Some(None)` when not a non-negative integer) come together. Returns the size stated.
pub(crate) fn check_class_and_size(
    (class, label): (Option<&str>, Option<i64>),
    (width, height): (Option<Option<u64>>, Option<Option<u64>>),
    ctx: &Ctx<'_>,
    scan: &mut Scan,
    member: impl Fn() -> String,
) -> Option<(u64, u64)> {
    if let (Some(class), Some(-1)) = (class, label) {
        scan.member(
            ctx,
            &member(),
            ProblemKind::LabelMismatch,
            format!(
                "states class {:?}, but it is unlabelled (label -1)",
                cut(class)
            ),
        );
    } else if let (Some(class), Some(l)) = (class, label) {
        let named = usize::try_from(l).ok().and_then(|i| ctx.classes.get(i));
        if let Some(named) = named.filter(|named| *named != class) {
            scan.member(
                ctx,
                &member(),
                ProblemKind::LabelMismatch,
                format!(
                    "states class {:?}, but label {l} is class {:?}",
                    cut(class),
                    cut(named)
                ),
            );
        }
    }
    match (width, height) {
        (None, None) => None,
        (Some(Some(w)), Some(Some(h))) => Some((w, h)),
        _ => {
            scan.member(
                ctx,
                &member(),
                ProblemKind::BadMetadata,
                "width and height must both be non-negative integers".into(),
            );
            None
        }
    }
}

/// Reports `label` when it is not an index of the class list (any label is when the list is not
/// known); `member` names the member or record (built only then).
pub(crate) fn check_label_range(
    label: i64,
    ctx: &Ctx<'_>,
    scan: &mut Scan,
    member: impl FnOnce() -> String,
) {
    let n = ctx.classes.len();
    if usize::try_from(label).is_ok_and(|i| i < n) {
        return;
    }
    let message = match n {
        // An unlabelled dataset names no classes; a labelled one names each.
        0 => format!("label {label}, but the manifest names no classes"),
        _ => format!(
            "label {label} is not in the class list ({n} classes, labels 0 to {})",
            n - 1
        ),
    };
    scan.member(ctx, &member(), ProblemKind::BadLabel, message);
}

#[cfg(test)]
mod tests {
    use crate::check_tar::{check_tar, Ctx, Scan, MAX_META_BYTES};
    use crate::report::ProblemKind;
    use shardtool_wds::tar_bytes;
    use std::collections::BTreeSet;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Scans a tar of `members` against fields `json`, `png` and optional `cls`, `txt`.
    fn scan(members: &[(&str, &[u8])], json_input: bool, classes: &[String]) -> Scan {
        let bytes = tar_bytes(members.iter().copied()).unwrap();
        let (fields, optional) = (set(&["json", "png"]), set(&["cls", "txt"]));
        let ctx = Ctx {
            shard: "s.tar",
            fields: &fields,
            optional: &optional,
            json_input,
            renumbered: false,
            classes,
            decode: true,
            expected_samples: 0,
        };
        check_tar(&bytes, &ctx)
    }

    fn problems(s: &Scan) -> Vec<(ProblemKind, &str)> {
        s.problems
            .iter()
            .map(|p| (p.kind, p.member_or_record.as_deref().unwrap_or("")))
            .collect()
    }

    #[test]
    fn optional_fields_may_be_absent_required_ones_may_not() {
        let s = scan(
            &[
                ("a.json", b"{}"),
                ("a.png", b"x"),
                ("a.txt", b"a red bus"),
                ("b.cls", b"1"),
                ("b.json", b"{}"),
                ("b.png", b"x"),
                ("c.png", b"x"),
                ("c.seg", b"x"),
            ],
            false,
            &["a".into(), "b".into()],
        );
        assert_eq!(s.samples, 3);
        assert_eq!(
            problems(&s),
            [
                (ProblemKind::MissingField, "c.json"),
                (ProblemKind::UnexpectedField, "c.seg")
            ]
        );
    }

    #[test]
    fn text_must_be_utf8_and_bounded() {
        let big = vec![b'a'; MAX_META_BYTES + 1];
        let s = scan(
            &[
                ("a.json", b"{}"),
                ("a.png", b"x"),
                ("a.txt", "ünïcödé".as_bytes()),
                ("b.json", b"{}"),
                ("b.png", b"x"),
                ("b.txt", b"caf\xe9"),
                ("c.json", b"{}"),
                ("c.png", b"x"),
                ("c.txt", &big),
            ],
            false,
            &[],
        );
        assert_eq!(
            problems(&s),
            [
                (ProblemKind::BadField, "b.txt"),
                (ProblemKind::BadField, "c.txt")
            ]
        );
        assert!(
            s.problems[0].message.contains("not UTF-8"),
            "{}",
            s.problems[0]
        );
        assert!(s.problems[1].message.contains("limit"), "{}", s.problems[1]);
    }

    #[test]
    fn an_input_json_keeps_only_the_object_and_key_rules() {
        let classes = vec!["a".to_string()];
        let members: [(&str, &[u8]); 6] = [
            (
                "a.json",
                br#"{"key":"a","width":1024,"height":768,"label":"dog"}"#,
            ),
            ("a.png", b"x"),
            ("b.json", br#"{"key":"other"}"#),
            ("b.png", b"x"),
            ("c.json", b"[1]"),
            ("c.png", b"x"),
        ];
        // Shardtool's own json: the label must be an integer and the size is the image's.
        let own = scan(&members, false, &classes);
        assert_eq!(own.images[0].expect, Some((1024, 768)));
        assert_eq!(
            problems(&own),
            [
                (ProblemKind::BadLabel, "a.json"),
                (ProblemKind::BadMetadata, "b.json"),
                (ProblemKind::BadMetadata, "c.json")
            ]
        );
        // The input's json: its width, height and label are the input's business.
        let input = scan(&members, true, &classes);
        assert_eq!(input.images[0].expect, None);
        assert_eq!(
            problems(&input),
            [
                (ProblemKind::BadMetadata, "b.json"),
                (ProblemKind::BadMetadata, "c.json")
            ]
        );
    }

    #[test]
    fn null_members_are_the_wrong_type_not_absent() {
        let classes = vec!["a".to_string()];
        let members: [(&str, &[u8]); 6] = [
            ("a.json", br#"{"key":"a","label":null,"src":{"x":[1,2]}}"#),
            ("a.png", b"x"),
            ("b.json", br#"{"key":"b","width":null,"height":3}"#),
            ("b.png", b"x"),
            ("c.json", br#"["c",0,"a",1,2]"#),
            ("c.png", b"x"),
        ];
        assert_eq!(
            problems(&scan(&members, false, &classes)),
            [
                (ProblemKind::BadLabel, "a.json"),
                (ProblemKind::BadMetadata, "b.json"),
                (ProblemKind::BadMetadata, "c.json")
            ]
        );
    }
}
