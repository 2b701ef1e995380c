//! List inputs: a CSV (with header) or JSONL file naming one image per row, with an optional
//! label and key and any other columns, which are read again by span when their input is packed.

use crate::failure;
use crate::listing::{
    Columns, Container, ContainerKind, DirInterner, ListError, Listing, Origin,
    MAX_CLASS_NAME_BYTES, MAX_INT_LABEL,
};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

/// A row of a list file, borrowed for the duration of one callback.
struct Row<'a> {
    line: usize,
    path: Option<Cow<'a, str>>,
    label: Option<Cow<'a, str>>,
    key: Option<Cow<'a, str>>,
    /// The row's bytes in the file, `[start, end)`.
    span: (u64, u64),
    /// Whether the row has columns besides path, label and key.
    extra: bool,
    /// Whether the row has the text column.
    text: bool,
    /// Which dropped columns the row has (bits of their places in the drop list).
    dropped: u64,
    /// Whether its label is there but neither a string nor a whole number (a JSON `true`, a
    /// list, `3.5`).
    odd_label: bool,
    /// Why the row cannot be read as it stands (a JSONL member named twice, which JSON parsers
    /// would keep one of silently; a line that is no JSON object; a CSV row with more fields
    /// than the header names): a `bad_list_row` line.
    problem: Option<String>,
}

/// A JSONL row's members in their order, repeats kept: a `serde_json` map keeps only the last.
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = m.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl Members {
    /// The member `name`, its case ignored (as CSV headers are read): `Label` is the label.
    fn get(&self, name: &str) -> Option<&serde_json::Value> {
        (self.0.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The first member named a second time, if any; a column the lister reads (`roles`:
    /// path, label, text, key) counts as named twice in any case (`text` and `Text`), as it is
    /// found ignoring case.
    fn twice(&self, roles: &[&str]) -> Option<&str> {
        let mut seen = std::collections::HashSet::with_capacity(self.0.len());
        self.0
            .iter()
            .find(|(n, _)| {
                let role = roles.iter().find(|r| n.eq_ignore_ascii_case(r));
                !seen.insert(role.map_or(n.as_str(), |r| *r))
            })
            .map(|(n, _)| n.as_str())
    }
}

/// The column names a list is read with.
struct ListColumns<'a> {
    path: &'a str,
    label: &'a str,
    text: &'a str,
    /// Whether the label column was named by the user (then it must exist).
    label_required: bool,
    /// Whether the text column was named by the user (then some row must have it).
    text_required: bool,
    /// Whether the label column is read: not when it is dropped.
    label_on: bool,
    /// The columns asked for (`--drop-column`s are not carried; each must be in some row).
    columns: &'a Columns,
}

impl<'a> ListColumns<'a> {
    fn new(c: &'a Columns) -> Self {
        Self {
            path: c.image.as_deref().unwrap_or("path"),
            label: c.label.as_deref().unwrap_or("label"),
            text: c.text.as_deref().unwrap_or("text"),
            label_required: c.label.is_some(),
            text_required: c.text.is_some(),
            label_on: !c.is_dropped(c.label.as_deref().unwrap_or("label")),
            columns: c,
        }
    }

    /// Whether `name` is read by the lister itself (or dropped) rather than carried.
    fn is_own(&self, name: &str) -> bool {
        [self.path, self.label, "key"]
            .iter()
            .any(|c| c.eq_ignore_ascii_case(name))
            || self.columns.is_dropped(name)
    }
}

/// How a list file is parsed. Rows are streamed to a callback twice (once to learn the labels,
/// once to store the inputs) rather than collected: a list of millions of rows would otherwise
/// hold every row's strings at once.
#[derive(Clone, Copy)]
enum ListKind {
    Csv,
    Jsonl,
}

impl ListKind {
    /// By the name (`.csv`; `.jsonl`, `.json`, `.ndjson`), else by the content: JSONL rows are
    /// objects, so a first character other than `{` (or `[`) is a CSV header (`train.txt`
    /// would otherwise fail every row as "no JSON object").
    fn of(file: &Path, text: &[u8]) -> Self {
        let ext = file
            .extension()
            .and_then(OsStr::to_str)
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv") => Self::Csv,
            Some("jsonl" | "json" | "ndjson") => Self::Jsonl,
            _ => {
                let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
                match text.iter().find(|b| !b.is_ascii_whitespace()) {
                    // A row that is an array is JSON too (and refused as no object).
                    Some(b'{' | b'[') | None => Self::Jsonl,
                    Some(_) => Self::Csv,
                }
            }
        }
    }
}

/// Why `text`, given as a list, is not one: a tar shard, a Parquet file, compressed or other
/// binary data (NUL bytes, which no CSV or JSONL text holds) would otherwise be read as one
/// odd CSV header and fail every row.
fn not_text(text: &[u8]) -> Option<&'static str> {
    // POSIX (`ustar\0`) and GNU (`ustar  \0`) magic: with its NUL, never a text's bytes.
    if [&b"ustar\0"[..], b"ustar "].contains(&text.get(257..263).unwrap_or_default()) {
        return Some(
            "it is a tar archive, not a CSV or JSONL list: give WebDataset shards as INPUT \
             (their folder, or the file with --input-format wds)",
        );
    }
    if text.starts_with(b"PAR1") {
        return Some(
            "it is a Parquet file, not a CSV or JSONL list: give Parquet files as INPUT (with \
             --input-format parquet where the name does not say it)",
        );
    }
    let compressed = [
        &b"\x1f\x8b"[..],
        b"\x28\xb5\x2f\xfd",
        b"BZh",
        b"\xfd7zXZ",
        b"PK\x03\x04",
    ];
    if compressed.iter().any(|m| text.starts_with(m)) {
        return Some(
            "it is compressed (gzip, zstd, bzip2, xz or zip), not a CSV or JSONL list: \
             decompress it and name the text file",
        );
    }
    let head = &text[..text.len().min(64 << 10)];
    head.contains(&0).then_some(
        "it holds NUL bytes, so it is not a UTF-8 CSV or JSONL list (a UTF-16 export? save it \
         as UTF-8)",
    )
}

pub(crate) fn list_file(file: &Path, columns: &Columns) -> Result<Listing, ListError> {
    if crate::sample_read::not_regular(file) {
        return Err(ListError::BadList {
            path: file.to_path_buf(),
            message: crate::sample_read::NOT_REGULAR.into(),
        });
    }
    if let Some(message) = crate::output::dataset_manifest(file) {
        return Err(ListError::BadList {
            path: file.to_path_buf(),
            message,
        });
    }
    // Its buffer reserved fallibly: a list larger than the memory the process may take
    // (`ulimit -v`) is an error that stops the pack, not an abort.
    let text = shardtool_core::read_within(file, u64::MAX).map_err(ListError::io(file))?;
    list_text(file, &text, columns)
}

/// Whether the relative path `path` leaves its folder (absolute, or up through `..`).
fn escapes(path: &str) -> bool {
    let mut depth = 0usize;
    for c in Path::new(path).components() {
        match c {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if depth > 0 => depth -= 1,
            _ => return true,
        }
    }
    false
}

/// Lists the rows of `text`, the content of the list file `file` (CSV or JSONL, by
/// [`ListKind::of`]).
pub(crate) fn list_text(file: &Path, text: &[u8], columns: &Columns) -> Result<Listing, ListError> {
    let bad = |message: String| ListError::BadList {
        path: file.to_path_buf(),
        message,
    };
    if let Some(why) = not_text(text) {
        return Err(bad(why.into()));
    }
    let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let kind = ListKind::of(file, text);
    let cols = ListColumns::new(columns);

    let mut listing = Listing {
        origin: Origin { root: base },
        looked_for: format!("rows with a `{}` column in {}", cols.path, file.display()),
        ..Listing::default()
    };
    // Labels are integers when every present label looks like one (optional sign, digits, and a
    // zero fraction as pandas writes an integer column holding gaps: `3.0`); class names, numbered
    // in sorted order, when none does. A mix is refused: numbering `10` before `2` as names would
    // silently relabel the integers.
    let int_label = |l: &str| {
        int_part(l)
            .and_then(|n| l[..n].parse::<i64>().ok())
            .filter(|v| (0..=MAX_INT_LABEL).contains(v))
    };
    let mut first_int: Option<(String, usize)> = None;
    let mut first_name: Option<(String, usize)> = None;
    let mut all_ints = true;
    let mut any_label = false;
    let mut any_extra = false;
    let mut any_text = false;
    let mut dropped_seen = 0u64;
    let mut max_int: Option<i64> = None;
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    // A Hugging Face imagefolder's metadata names files in its folder, as `datasets` reads it:
    // a downloaded dataset packs no file elsewhere on the machine.
    let confined = is_imagefolder_metadata(file) && cols.path.eq_ignore_ascii_case(HF_IMAGE_COLUMN);
    let mut any_path = false;
    let headers = for_each_row(text, kind, &cols, &mut |row| {
        any_path |= row.path.is_some();
        any_extra |= row.extra;
        any_text |= row.text;
        dropped_seen |= row.dropped;
        any_label |= row.odd_label;
        // Rows reported as errors below teach nothing about the labels.
        if row.problem.is_some() || row.odd_label || too_long(row.label.as_deref()) {
            return Ok(());
        }
        if let Some(l) = row.label.as_deref() {
            any_label = true;
            let first = if whole_number(l) {
                max_int = max_int.max(int_label(l));
                &mut first_int
            } else {
                all_ints = false;
                &mut first_name
            };
            if first.is_none() {
                *first = Some((l.chars().take(40).collect(), row.line));
            }
            if !names.contains_key(l) {
                names.insert(l.to_string(), 0);
            }
        }
        Ok(())
    })
    .map_err(bad)?;
    // A list without a label column (or with no label in any row) is unlabelled.
    let labelled = match &headers {
        Some(h) => cols.label_on && h.iter().any(|c| c.eq_ignore_ascii_case(cols.label)),
        None => any_label,
    };
    if let Some(d) = cols.columns.unseen_drop(dropped_seen) {
        return Err(bad(format!("no row has a `{}` column (--drop-column)", d)));
    }
    if let Some(members) = (!any_path)
        .then(|| first_members(text, cols.path))
        .flatten()
    {
        return Err(bad(format!(
            "no row has a `{}` member; the first row's are {members}: --image-column names the \
             image path's",
            cols.path
        )));
    }
    if cols.label_required && !labelled {
        return Err(bad(format!("no `{}` column (--label-column)", cols.label)));
    }
    if cols.text_required && !any_text {
        return Err(bad(format!("no `{}` column (--text-column)", cols.text)));
    }
    if let (Some((i, il)), Some((n, nl))) = (&first_int, &first_name) {
        return Err(bad(format!(
            "the `{}` column mixes integer labels ({i:?}, line {il}) with class names ({n:?}, \
             line {nl}): use integers (class indices) or names throughout",
            cols.label
        )));
    }
    listing.labelled = labelled;
    if !labelled {
        names.clear();
    } else if all_ints {
        names.clear();
        listing.classes = (0..max_int.map_or(0, |m| m + 1))
            .map(|i| i.to_string())
            .collect();
    } else {
        for (i, v) in names.values_mut().enumerate() {
            *v = u32::try_from(i).map_err(|_| ListError::TooMany { count: i as u64 })?;
        }
        listing.classes = names.keys().cloned().collect();
    }
    // Rows with extra columns are read again, by span, when their input is packed.
    let container = if any_extra {
        listing.containers.push(Container {
            etag: None,
            path: file.to_path_buf(),
            source: file.display().to_string(),
            kind: match (kind, headers) {
                (ListKind::Csv, Some(headers)) => ContainerKind::Csv { headers },
                _ => ContainerKind::Jsonl,
            },
        });
        Some(0)
    } else {
        None
    };
    let mut dirs = DirInterner::default();
    for_each_row(text, kind, &cols, &mut |row| {
        let where_ = || format!("{}:{}", file.display(), row.line);
        let label = row.label.as_deref();
        if let Some(problem) = &row.problem {
            listing
                .errors
                .push(failure(where_(), "bad_list_row", problem.clone()));
            return Ok(());
        }
        if row.odd_label {
            listing.errors.push(failure(
                where_(),
                "bad_label",
                format!(
                    "its {} {}is neither a whole number (a class index) nor a name",
                    cols.label,
                    label.map(|l| format!("{l:?} ")).unwrap_or_default()
                ),
            ));
            return Ok(());
        }
        if let Some(l) = label.filter(|l| too_long(Some(l))) {
            listing.errors.push(failure(
                where_(),
                "bad_label",
                format!(
                    "its {} is a class name of {} bytes, over {MAX_CLASS_NAME_BYTES}",
                    cols.label,
                    l.len()
                ),
            ));
            return Ok(());
        }
        // An empty label is no label (-1), as a null one in Parquet or a sample without `.cls`.
        let Some(path) = row.path.as_deref() else {
            listing.errors.push(failure(
                where_(),
                "bad_list_row",
                format!(
                    "row needs a non-empty {} (--image-column names another)",
                    cols.path
                ),
            ));
            return Ok(());
        };
        // A list names local files; a URL would be taken for a relative path and "not found".
        if ["http://", "https://", "s3://", "file://"].iter().any(|s| {
            path.get(..s.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(s))
        }) {
            listing.errors.push(failure(
                where_(),
                "bad_list_row",
                format!(
                    "its {} is a URL: a list names local files (fetch them first, or pack \
                     WebDataset shards or Parquet files by URL)",
                    cols.path
                ),
            ));
            return Ok(());
        }
        if confined && escapes(path) {
            listing.errors.push(failure(
                where_(),
                "bad_list_row",
                format!(
                    "its {} names a file outside the folder of {}: an imagefolder's metadata \
                     names images in its own folder",
                    cols.path,
                    file.display()
                ),
            ));
            return Ok(());
        }
        let label = match label {
            None => None,
            Some(label) if all_ints => match int_label(label) {
                // In 0..=MAX_INT_LABEL, so it fits.
                Some(v) => Some(v as u32),
                None => {
                    listing.errors.push(failure(
                        where_(),
                        "bad_label",
                        format!("integer label {label} is outside 0..={MAX_INT_LABEL}"),
                    ));
                    return Ok(());
                }
            },
            Some(label) => Some(names.get(label).copied().unwrap_or(0)),
        };
        // The directory part (up to the last `/`) is stored once per distinct directory; the
        // path is rebuilt byte for byte as listed.
        let split = path.rfind('/').map_or(0, |i| i + 1);
        let (dir, name) = path.as_bytes().split_at(split);
        let dir = dirs.get(&mut listing.inputs, dir, container);
        let key = row.key.as_deref();
        let r = if container.is_some() {
            listing.inputs.push_span(dir, name, label, key, row.span)
        } else {
            listing.inputs.push(dir, name, label, key)
        };
        r.map_err(|e| e.to_string())
    })
    .map_err(bad)?;
    Ok(listing)
}

/// The length of `l`'s integer part when it writes a whole number: an optional `-`, digits, and
/// an optional all-zero fraction (`3.0`).
fn int_part(l: &str) -> Option<usize> {
    let d = l.strip_prefix('-').unwrap_or(l);
    let whole = match d.split_once('.') {
        Some((w, f)) if !f.is_empty() && f.bytes().all(|b| b == b'0') => w,
        Some(_) => return None,
        None => d,
    };
    (!whole.is_empty() && whole.bytes().all(|b| b.is_ascii_digit()))
        .then_some(l.len() - d.len() + whole.len())
}

/// A JSONL row as Python's `json.dumps` writes it, its `NaN`, `Infinity` and `-Infinity` read
/// as `null`, as a Parquet float NaN is (a NaN label is no label).
fn python_json(line: &[u8]) -> Cow<'_, [u8]> {
    let has = |w: &[u8]| line.windows(w.len()).any(|x| x == w);
    if !has(b"NaN") && !has(b"Infinity") {
        return Cow::Borrowed(line);
    }
    shardtool_wds::replace_nonfinite(line, |_| b"null").map_or(Cow::Borrowed(line), Cow::Owned)
}

/// Whether a present label `l` is one: -1 (`-1.0`) is no label, as the Hugging Face
/// `ClassLabel` and the reader write it, so the row is unlabelled.
#[allow(clippy::ptr_arg)] // `Option<Cow<str>>::filter` hands a `&Cow`.
fn is_label(l: &Cow<'_, str>) -> bool {
    let l: &str = l;
    int_part(l).and_then(|n| l[..n].parse::<i64>().ok()) != Some(-1)
}

/// Whether `l` writes a decimal number with a fraction that is not zero (`3.5`, `-0.25`).
fn fractional(l: &str) -> bool {
    let l = l.trim();
    let d = l.strip_prefix('-').unwrap_or(l);
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    d.split_once('.')
        .is_some_and(|(w, f)| digits(w) && !f.is_empty() && digits(f) && !whole_number(l))
}

fn whole_number(l: &str) -> bool {
    int_part(l).is_some()
}

/// Whether label `l` is a class name longer than a class name may be.
fn too_long(l: Option<&str>) -> bool {
    l.is_some_and(|l| l.len() > MAX_CLASS_NAME_BYTES && !whole_number(l))
}

/// `s` as written unless blank: a path keeps spaces at its ends, as pandas and `datasets` do.
fn as_written(s: &str) -> Option<Cow<'_, str>> {
    (!s.trim().is_empty()).then_some(Cow::Borrowed(s))
}

/// Calls `f` with every row of a list file, in order; returns a CSV file's header.
fn for_each_row(
    text: &[u8],
    kind: ListKind,
    cols: &ListColumns<'_>,
    f: &mut dyn FnMut(Row<'_>) -> Result<(), String>,
) -> Result<Option<Vec<String>>, String> {
    match kind {
        ListKind::Csv => csv_rows(text, cols, f).map(Some),
        ListKind::Jsonl => jsonl_rows(text, cols, f).map(|()| None),
    }
}

/// The member names of a JSONL list's first row (at most 10, each cut to 40 characters) when
/// none is `path` (ignoring case): `None` for CSV text, or a first row that names it.
fn first_members(text: &[u8], path: &str) -> Option<String> {
    let line = text
        .split(|&b| b == b'\n')
        .find(|l| !l.trim_ascii().is_empty())?;
    let row: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line).ok()?;
    if row.keys().any(|k| k.eq_ignore_ascii_case(path)) {
        return None;
    }
    let cut = |k: &String| k.chars().take(40).collect::<String>();
    Some(row.keys().take(10).map(cut).collect::<Vec<_>>().join(", "))
}

fn csv_rows(
    text: &[u8],
    cols: &ListColumns<'_>,
    f: &mut dyn FnMut(Row<'_>) -> Result<(), String>,
) -> Result<Vec<String>, String> {
    let file = text;
    let mut rdr = csv::ReaderBuilder::new().flexible(true).from_reader(text);
    let headers = rdr.headers().map_err(|e| e.to_string())?.clone();
    let names: Vec<String> = headers.iter().map(|h| h.trim().to_string()).collect();
    // Columns are found by name, ignoring case: a name given twice would leave one unread.
    // (Unnamed columns, as spreadsheets write trailing commas, are never looked up.)
    let mut seen = std::collections::HashSet::new();
    for n in names.iter().filter(|n| !n.is_empty()) {
        if !seen.insert(n.to_ascii_lowercase()) {
            return Err(format!("the CSV header names the column `{n}` twice"));
        }
    }
    // An unnamed column's values go under pandas' name for it, which must be free.
    for i in (0..names.len()).filter(|&i| names[i].is_empty()) {
        if seen.contains(&format!("unnamed: {i}")) {
            return Err(format!(
                "the CSV header names a column `Unnamed: {i}`, the name its unnamed column {i} \
                 takes: name that one"
            ));
        }
    }
    let col = |name: &str| names.iter().position(|h| h.eq_ignore_ascii_case(name));
    let Some(p) = col(cols.path) else {
        let cut = |n: &String| n.chars().take(40).collect::<String>();
        let named: Vec<String> = names.iter().take(10).map(cut).collect();
        return Err(format!(
            "the CSV list needs a header row with a `{}` column (and optionally `{}`, `key`); its \
             header names {}: --image-column names the path column",
            cols.path,
            cols.label,
            named.join(", ")
        ));
    };
    let l = col(cols.label).filter(|_| cols.label_on);
    let k = col("key");
    let extra = names.iter().any(|n| !cols.is_own(n));
    let text = col(cols.text).is_some();
    let dropped = cols.columns.dropped_bits(names.iter().map(String::as_str));
    // One record buffer for the whole file.
    let mut rec = csv::StringRecord::new();
    // The line the last row started on, and its byte.
    let (mut line, mut counted) = (1, 0);
    loop {
        // The line the row starts on: one more than the line breaks before it (`\n`, `\r\n` or
        // a lone `\r`, as old spreadsheets end lines), counting those inside quoted fields and
        // the blank lines the reader skips (the reader stops a CRLF row at its `\r`).
        let start = rdr.position().byte();
        let rest = file.get(start as usize..).unwrap_or_default();
        let upto = start as usize
            + rest
                .iter()
                .take_while(|&&b| b == b'\r' || b == b'\n')
                .count();
        line += line_breaks(file, counted.min(upto)..upto);
        counted = upto;
        let read = rdr.read_record(&mut rec);
        let span = (start, rdr.position().byte());
        // A quote left open swallows the rest of the file into one field: no row after it can
        // be told apart, so the list is refused (as pandas does).
        if matches!(read, Ok(true)) && span.1 as usize >= file.len() {
            if let Some(open) = open_quote(file.get(start as usize..).unwrap_or_default()) {
                return Err(format!(
                    "line {line}: a quoted field opened there{open} is not closed before the end \
                     of the file"
                ));
            }
        }
        match read {
            Ok(false) => return Ok(names),
            Ok(true) => f(Row {
                line,
                path: rec.get(p).and_then(as_written),
                label: l
                    .and_then(|l| rec.get(l))
                    .and_then(|s| as_written(s.trim()))
                    .filter(is_label),
                key: k
                    .and_then(|k| rec.get(k))
                    .and_then(|s| as_written(s.trim())),
                span,
                extra,
                dropped,
                text,
                // A number that is not whole is no class index, and no name either (as in
                // JSONL), whatever the other rows hold.
                odd_label: l.and_then(|l| rec.get(l)).is_some_and(fractional),
                // Text past the named columns: an unquoted comma shifted the row's columns.
                // (Empty ones are trailing commas, as spreadsheets write them.)
                problem: (rec.iter().skip(names.len()).any(|f| !f.trim().is_empty())).then(|| {
                    format!(
                        "the row has {} fields where the header names {} columns (a field \
                         holding a comma must be quoted)",
                        rec.len(),
                        names.len()
                    )
                }),
            })?,
            Err(e) => f(Row {
                line,
                path: None,
                label: None,
                key: None,
                span,
                extra,
                dropped,
                text,
                odd_label: false,
                problem: Some(format!("the row cannot be read: {e}")),
            })?,
        }
    }
}

/// Whether the CSV text of one record ends inside a quoted field (`Some`, with where it opened
/// when not at the record's start: a field opens a quote only at its start).
fn open_quote(record: &[u8]) -> Option<String> {
    let (mut quoted, mut field_start, mut opened) = (false, true, 0usize);
    let mut bytes = record.iter().enumerate().peekable();
    while let Some((i, &b)) = bytes.next() {
        if quoted {
            if b == b'"' {
                if bytes.peek().is_some_and(|&(_, &n)| n == b'"') {
                    bytes.next();
                } else {
                    quoted = false;
                }
            }
        } else if b == b'"' && field_start {
            (quoted, opened) = (true, i);
        } else {
            field_start = b == b',' || b == b'\n' || b == b'\r';
            continue;
        }
        field_start = false;
    }
    quoted.then(|| match opened {
        0 => String::new(),
        at => format!(" (byte {at} of the row)"),
    })
}

fn jsonl_rows(
    text: &[u8],
    cols: &ListColumns<'_>,
    f: &mut dyn FnMut(Row<'_>) -> Result<(), String>,
) -> Result<(), String> {
    // A byte order mark, as some editors write, is no part of the first row.
    let bom = if text.starts_with(b"\xef\xbb\xbf") {
        3
    } else {
        0
    };
    let mut start = bom as u64;
    for (i, line) in text[bom..].split(|&b| b == b'\n').enumerate() {
        let span = (start, start + line.len() as u64);
        start = span.1 + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = python_json(line);
        let parsed: Result<Members, _> = serde_json::from_slice(&line);
        let not_object = parsed
            .as_ref()
            .err()
            .map(|e| format!("the row is no JSON object: {e}"));
        let object = parsed.ok();
        let field = |name: &str| -> Option<Cow<'_, str>> {
            match object.as_ref()?.get(name)? {
                serde_json::Value::String(s) if name == cols.path => as_written(s),
                serde_json::Value::String(s) => as_written(s.trim()),
                serde_json::Value::Number(n) => Some(Cow::Owned(n.to_string())),
                _ => None,
            }
        };
        let names = || {
            object
                .iter()
                .flat_map(|o| o.0.iter().map(|(n, _)| n.as_str()))
        };
        let extra = names().any(|k| !cols.is_own(k));
        let text = names().any(|k| k.eq_ignore_ascii_case(cols.text));
        let dropped = cols.columns.dropped_bits(names());
        let odd_label = object
            .as_ref()
            .filter(|_| cols.label_on)
            .and_then(|o| o.get(cols.label))
            .is_some_and(|v| match v {
                serde_json::Value::Number(n) => !whole_number(&n.to_string()),
                v => v.is_boolean() || v.is_array() || v.is_object(),
            });
        f(Row {
            line: i + 1,
            path: field(cols.path),
            label: field(cols.label).filter(|_| cols.label_on).filter(is_label),
            key: field("key"),
            span,
            extra,
            dropped,
            text,
            odd_label,
            problem: not_object.or_else(|| {
                let roles = [cols.path, cols.label, cols.text, "key"];
                let twice = object.as_ref().and_then(|o| o.twice(&roles))?;
                Some(format!("the row names `{twice}` twice"))
            }),
        })?;
    }
    Ok(())
}

thread_local! {
    /// The parser of rows read back, one per thread: making one (csv_core's state machine) took
    /// about 30 µs, far longer than reading the row.
    static ROW_PARSER: RefCell<csv_core::Reader> = RefCell::new(csv_core::Reader::new());
}

/// The line breaks that end in `file[range]`: `\n`, and `\r` not followed by `\n`.
fn line_breaks(file: &[u8], range: std::ops::Range<usize>) -> usize {
    file[range.clone()]
        .iter()
        .zip(range)
        .filter(|&(&b, i)| b == b'\n' || (b == b'\r' && file.get(i + 1) != Some(&b'\n')))
        .count()
}

/// The fields of one CSV row as the whole file was read (the `csv` crate's defaults: commas,
/// double quotes, any line ending), each checked to be UTF-8 and unquoted into `out`; `None`
/// for a blank row.
pub(crate) fn csv_fields<'b>(
    row: &[u8],
    out: &'b mut Vec<u8>,
) -> Result<Option<Vec<&'b str>>, String> {
    // Unquoting only removes bytes, and a row has at most one more field than it has bytes.
    out.clear();
    out.resize(row.len(), 0);
    let mut ends = vec![0usize; row.len() + 1];
    let (mut nin, mut nout, mut nend) = (0, 0, 0);
    let found = ROW_PARSER.with(|p| {
        let mut p = p.borrow_mut();
        p.reset();
        loop {
            // An empty input is the end of the row: the parser then ends the record in hand.
            // Field ends count from the record's start, across calls.
            let (res, i, o, e) = p.read_record(&row[nin..], &mut out[nout..], &mut ends[nend..]);
            (nin, nout, nend) = (nin + i, nout + o, nend + e);
            match res {
                csv_core::ReadRecordResult::InputEmpty => continue,
                csv_core::ReadRecordResult::Record => return Ok(true),
                csv_core::ReadRecordResult::End => return Ok(false),
                csv_core::ReadRecordResult::OutputFull
                | csv_core::ReadRecordResult::OutputEndsFull => {
                    return Err("the row parsed into more than its own bytes".to_string())
                }
            }
        }
    })?;
    if !found {
        return Ok(None);
    }
    let mut fields = Vec::with_capacity(nend);
    let mut start = 0;
    for (i, &end) in ends[..nend].iter().enumerate() {
        let field = std::str::from_utf8(&out[start..end])
            .map_err(|_| format!("field {} of the row is not UTF-8", i + 1))?;
        fields.push(field);
        start = end;
    }
    Ok(Some(fields))
}

/// The first record a fresh `csv` reader with the whole-file read's settings reads from
/// `bytes`: the reference `csv_fields` is tested and fuzzed against.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn csv_crate_first_record(bytes: &[u8]) -> Result<Option<Vec<String>>, String> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut rec = csv::StringRecord::new();
    match rdr.read_record(&mut rec) {
        Ok(true) => Ok(Some(rec.iter().map(str::to_string).collect())),
        Ok(false) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

mod columns;
pub(crate) use columns::row_columns;
mod hf;
pub(crate) use hf::{
    is_imagefolder_metadata, metadata_in, names_file_not_path, unlisted_images, HF_IMAGE_COLUMN,
};

#[cfg(test)]
mod tests;
