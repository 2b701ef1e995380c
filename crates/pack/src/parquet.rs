//! Parquet inputs in the Hugging Face `datasets` layout: each row group is streamed row by row
//! (memory bounded by the pages in flight, not the file) into a staged tar of `r<row>.jpg`,
//! `r<row>.txt` and `r<row>.columns.json` members, whose spans the pack then reads like a
//! WebDataset shard's; row groups are staged in parallel.
//!
//! Columns: the image is the `image` column (or `--image-column`), a struct with `bytes` (and
//! `path`) or a binary column, else the first such column; the label is `label` (or
//! `--label-column`), an integer (or, when named, a whole float; NaN leaves the row unlabelled), with class
//! names from the `ClassLabel` feature in the files' `huggingface` metadata when present (every
//! file stating it must name the same classes; an index past them fails the row; -1,
//! `ClassLabel`'s "none", leaves the row unlabelled; any other negative fails it), or a string,
//! a class name (classes numbered in sorted order; an empty one leaves the row unlabelled); the
//! text is `text` or `caption` (or `--text-column`); other columns go to the sample's
//! metadata or fields of their own, and `--drop-column`s are never read.

mod guard;
mod open;
mod schema;
mod values;

use crate::containers::{fetch_input, parallel_map, Fetched};
use crate::listing::{Container, ContainerKind, ListError, ListOptions, Listing};
use crate::listing::{MAX_CLASS_NAME_BYTES, MAX_INT_LABEL, MAX_LABEL};
use crate::{failure, ErrorRecord};
use guard::{check_row_group, max_page_bytes, open_bounded, open_reader};
pub(crate) use open::check_columns;
use open::open_files;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::ReaderProperties;
use parquet::file::reader::{FileReader, RowGroupReader};
use parquet::file::serialized_reader::SerializedRowGroupReader;
use parquet::record::{Field, Row};
use schema::{
    choose, hf_class_label_columns, hf_class_names, hf_features, projection, strings_as_bytes,
    Chosen,
};
use shardtool_wds::TarWriter;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// The staged member holding a row's other columns, merged into the sample's metadata.
pub(crate) const COLUMNS_FIELD: &str = "columns.json";

/// A staged row.
struct StagedRow {
    row: u64,
    span: (u64, u64),
    /// A class index, or a name by its place in the group's [`StagedGroup::names`].
    label: Option<RowLabel<u32, u32>>,
}

/// A row's label: a class index, or a class name numbered once every file is read.
#[derive(Debug, Clone, PartialEq)]
enum RowLabel<I, N> {
    Index(I),
    Name(N),
}

/// One Parquet file, opened: where it is, how it is read, and its row groups.
struct Opened {
    fetched: Option<Fetched>,
    /// The file's footer, parsed once for all its row groups (parsing it per row group made a
    /// file of many small groups cost the square of their count).
    meta: Option<std::sync::Arc<ParquetMetaData>>,
    chosen: Option<Chosen>,
    class_names: Option<Vec<String>>,
    /// Per row group, its first row's number in the file and its row count.
    groups: Vec<(u64, u64)>,
    /// A problem with the whole file (unreadable, no image column).
    failure: Option<String>,
    /// Rows of failed row groups still to be reported one by one (see [`MAX_UNREAD_LINES`]).
    unread_lines: std::sync::atomic::AtomicU64,
}

/// One row group, staged as its own tar.
struct StagedGroup {
    tar: Option<PathBuf>,
    rows: Vec<StagedRow>,
    /// The class names its rows carry, each once.
    names: Vec<String>,
    errors: Vec<ErrorRecord>,
    /// A problem that stopped this row group; its rows before it are kept.
    failure: Option<String>,
}

/// What one row contributes.
struct RowParts<'r> {
    image: Option<&'r [u8]>,
    image_path: Option<&'r str>,
    label: Option<RowLabel<i128, String>>,
    /// A label that is no class index (a float with a fraction, an infinity).
    bad_label: Option<String>,
    text: Option<String>,
    /// A text column's value that is not UTF-8.
    bad_text: Option<String>,
    columns: serde_json::Map<String, serde_json::Value>,
    /// Binary columns carried as fields of their own: (field name, bytes).
    fields: Vec<(String, &'r [u8])>,
}

fn row_parts<'r>(row: &'r Row, chosen: &Chosen) -> RowParts<'r> {
    let mut p = RowParts {
        image: None,
        image_path: None,
        label: None,
        bad_label: None,
        text: None,
        bad_text: None,
        columns: serde_json::Map::new(),
        fields: Vec::new(),
    };
    for (i, (name, field)) in row.get_column_iter().enumerate() {
        // Rows give the columns in the schema's order: the i-th is the i-th worked out.
        let kind = chosen.columns.get(i).filter(|c| c.name == *name);
        if *name == chosen.image {
            match field {
                Field::Bytes(b) if !chosen.image_struct => p.image = Some(b.data()),
                Field::Group(g) => {
                    for (n, f) in g.get_column_iter() {
                        match (n.as_str(), f) {
                            ("bytes", Field::Bytes(b)) => p.image = Some(b.data()),
                            ("path", Field::Str(s)) => p.image_path = Some(s),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        } else if Some(name) == chosen.label.as_ref() {
            p.label = match field {
                Field::Byte(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::Short(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::Int(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::Long(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::UByte(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::UShort(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::UInt(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::ULong(v) => Some(RowLabel::Index(i128::from(*v))),
                Field::Str(name) if !name.is_empty() => Some(RowLabel::Name(name.clone())),
                // A string column read as bytes (see `strings_as_bytes`).
                Field::Bytes(b) if !b.data().is_empty() => match std::str::from_utf8(b.data()) {
                    Ok(name) => Some(RowLabel::Name(name.into())),
                    Err(_) => {
                        p.bad_label = Some(format!(
                            "the label column {name:?} holds bytes that are not UTF-8"
                        ));
                        None
                    }
                },
                // A whole float is a class index (as `3.0` in a list); NaN is a missing label.
                Field::Float(v) => float_label(f64::from(*v), &mut p.bad_label),
                Field::Double(v) => float_label(*v, &mut p.bad_label),
                _ => None,
            };
        } else if Some(name) == chosen.text.as_ref() {
            p.text = match field {
                Field::Str(s) => Some(s.clone()),
                Field::Bytes(b) => match std::str::from_utf8(b.data()) {
                    Ok(text) => Some(text.into()),
                    Err(_) => {
                        p.bad_text = Some(format!(
                            "the text column {name:?} holds bytes that are not UTF-8 text"
                        ));
                        None
                    }
                },
                // `choose` takes only string and binary columns as text.
                _ => None,
            };
        } else if let (Some(time), Field::Long(v)) = (kind.and_then(|k| k.nanos), field) {
            let text = match time {
                true => values::time_nanos(*v),
                false => values::timestamp_nanos(*v),
            };
            p.columns
                .insert(name.clone(), serde_json::Value::String(text));
        } else {
            let string = kind.is_some_and(|k| k.string);
            let nested = kind.and_then(|k| k.nested.as_ref());
            let times = |mut v: serde_json::Value| {
                if let Some(at) = nested {
                    values::nanos_as_text(&mut v, at);
                }
                v
            };
            match values::carried(field, string) {
                values::Carried::Json(v) => {
                    p.columns.insert(name.clone(), times(v));
                }
                values::Carried::Field { ext, bytes, rest } => {
                    // Two columns named alike (`Mask`, `mask`) keep a field each, numbered by
                    // their order among the columns (null or not): `ColumnKind::base`.
                    let base = kind.map_or_else(
                        || values::field_bases(std::iter::once(name.as_str())).swap_remove(0),
                        |k| k.base.clone(),
                    );
                    let field_name = format!("{base}.{ext}");
                    if let Some(rest) = rest.filter(|r| r.as_object().is_none_or(|o| !o.is_empty()))
                    {
                        p.columns.insert(name.clone(), times(rest));
                    }
                    p.fields.push((field_name, bytes));
                }
            }
        }
    }
    if let Some(path) = p.image_path {
        // Beside a column of that name, under `input_image_path` (and so on): both kept.
        let mut name = String::from("image_path");
        while p.columns.contains_key(&name) {
            name.insert_str(0, "input_");
        }
        p.columns
            .insert(name, serde_json::Value::String(path.into()));
    }
    p
}

/// The class index a float label states: a whole number is one, NaN none (pandas' missing
/// value); anything else is no index, said in `bad`.
fn float_label(v: f64, bad: &mut Option<String>) -> Option<RowLabel<i128, String>> {
    if v.is_nan() {
        return None;
    }
    if v.fract() == 0.0 && v.abs() < 1e18 {
        return Some(RowLabel::Index(v as i128));
    }
    *bad = Some(format!("label {v} is not a whole number (a class index)"));
    None
}

/// The most rows of a file's failed row groups reported one by one (a hostile footer may declare
/// any count): past it, a group's failure is one line.
const MAX_UNREAD_LINES: u64 = 100_000;

/// Stages row group `group` of file `index` (opened as `opened`) into its own tar.
fn stage_group(
    name: &str,
    index: usize,
    group: usize,
    opened: &Opened,
    options: &ListOptions,
) -> StagedGroup {
    let mut out = StagedGroup {
        tar: None,
        rows: Vec::new(),
        names: Vec::new(),
        errors: Vec::new(),
        failure: None,
    };
    let (Some(fetched), Some(chosen), Some(meta)) = (&opened.fetched, &opened.chosen, &opened.meta)
    else {
        return out;
    };
    let tar_path = options
        .stage_dir
        .join(format!(".stage-{index:06}-{group:06}-parquet.tar.tmp"));
    let first_row = opened.groups[group].0;
    let r = contain(|| {
        stage_rows(
            meta,
            &fetched.path,
            name,
            group,
            first_row,
            chosen,
            &tar_path,
            options,
            &mut out,
        )
    });
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => out.failure = Some(e),
        Err(panic) => {
            out.failure = Some(format!(
                "the Parquet reader failed on row group {group}: {panic}"
            ))
        }
    }
    // Each row read is staged or failed, in order: the rows after a stop are inputs too, each
    // failed with the reason (one line for the group would leave them out of every count).
    // The count is the file's word: past a bound for the file, the group keeps its one line.
    let (first, rows) = opened.groups[group];
    let handled = (out.rows.len() + out.errors.len()) as u64;
    let unread = rows.saturating_sub(handled);
    let budget = &opened.unread_lines;
    let take = |left: u64| left.checked_sub(unread);
    let fits =
        unread > 0 && (budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, take)).is_ok();
    if let Some(why) = out.failure.take_if(|_| fits) {
        // The crate's message may quote a whole value's bytes: kept short, as it is repeated.
        let mut why = why;
        if why.len() > 400 {
            let cut = (0..=400)
                .rev()
                .find(|&i| why.is_char_boundary(i))
                .unwrap_or(0);
            why.truncate(cut);
            why.push('…');
        }
        for row in first + handled..first + rows {
            out.errors
                .push(failure(format!("{name}:{row}"), "bad_parquet", why.clone()));
        }
    }
    if tar_path.exists() {
        out.tar = Some(tar_path);
    }
    out
}

// One parameter per piece of the row group's context; a struct would be built for one call.
#[allow(clippy::too_many_arguments)]
fn stage_rows(
    meta: &ParquetMetaData,
    path: &Path,
    name: &str,
    group: usize,
    first_row: u64,
    chosen: &Chosen,
    tar_path: &Path,
    options: &ListOptions,
    out: &mut StagedGroup,
) -> Result<(), String> {
    let open = |rg| {
        SerializedRowGroupReader::new(
            std::sync::Arc::new(open_bounded(path)?),
            rg,
            meta.page_index_for_row_group(group),
            std::sync::Arc::new(ReaderProperties::builder().build()),
        )
        .map_err(|e| format!("row group {group}: {e}"))
    };
    let row_group = open(meta.row_group(group))?;
    let columns = &options.columns;
    check_row_group(path, &row_group, max_page_bytes(options), &|c| {
        columns.is_dropped(c)
    })
    .map_err(|e| format!("row group {group}: {e}"))?;
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(tar_path)
        .map_err(|e| format!("{}: {e}", tar_path.display()))?;
    let mut tar = TarWriter::new(BufWriter::with_capacity(1 << 20, file));
    let io = |e: std::io::Error| format!("{}: {e}", tar_path.display());
    let mut result = Ok(());
    // Class name → its place in `out.names`.
    let mut ids: std::collections::HashMap<String, u32> = Default::default();
    let read = projection(meta, columns)?;
    // Set once, if a row needs the group read again (below); they outlive the rows read.
    let (bytes_meta, bytes_reader) = (std::cell::OnceCell::new(), std::cell::OnceCell::new());
    let mut rows =
        (row_group.get_row_iter(read.clone())).map_err(|e| format!("cannot read rows: {e}"))?;
    let mut k = 0usize;
    while let Some(row) = rows.next() {
        let i = first_row + k as u64;
        let source = || format!("{name}:{i}");
        let row = match row {
            Ok(r) => r,
            Err(_) if bytes_meta.get().is_none() => {
                // A string that is not UTF-8 stops the crate's row reader for good: the group
                // is read again with its string columns as bytes, from this row on.
                let _ = bytes_meta.set(strings_as_bytes(meta, group)?);
                let again = open(bytes_meta.get().ok_or("no metadata")?)?;
                let again: &SerializedRowGroupReader<_> = bytes_reader.get_or_init(|| again);
                rows = (again.get_row_iter(read.clone()))
                    .map_err(|e| format!("cannot read rows: {e}"))?;
                for _ in 0..k {
                    rows.next();
                }
                continue;
            }
            Err(e) => {
                result = Err(format!(
                    "row {i}: {e}; the rest of row group {group} is not read"
                ));
                break;
            }
        };
        k += 1;
        let p = row_parts(&row, chosen);
        let Some(image) = p.image.filter(|b| !b.is_empty()) else {
            out.errors.push(failure(
                source(),
                "no_image",
                format!("column {:?} holds no image bytes in this row", chosen.image),
            ));
            continue;
        };
        if image.len() as u64 > options.max_input_bytes {
            out.errors.push(failure(
                source(),
                "too_large",
                format!(
                    "{} bytes, over the {}-byte input limit",
                    image.len(),
                    options.max_input_bytes
                ),
            ));
            continue;
        }
        if let Some(why) = p.bad_label {
            out.errors.push(failure(source(), "bad_label", why));
            continue;
        }
        if let Some(why) = p.bad_text {
            out.errors.push(failure(source(), "bad_field", why));
            continue;
        }
        let label = match p.label {
            None => None,
            Some(RowLabel::Name(n)) if n.len() > MAX_CLASS_NAME_BYTES => {
                out.errors.push(failure(
                    source(),
                    "bad_label",
                    format!(
                        "a class name of {} bytes, over {MAX_CLASS_NAME_BYTES}",
                        n.len()
                    ),
                ));
                continue;
            }
            Some(RowLabel::Name(n)) => match ids.get(&n) {
                Some(&id) => Some(RowLabel::Name(id)),
                None if out.names.len() > MAX_INT_LABEL as usize => {
                    result = Err(format!(
                        "row {i}: more than {} class names; the rest of row group {group} is \
                         not read",
                        MAX_INT_LABEL + 1
                    ));
                    break;
                }
                None => {
                    let id = out.names.len() as u32;
                    ids.insert(n.clone(), id);
                    out.names.push(n);
                    Some(RowLabel::Name(id))
                }
            },
            // -1 is the Hugging Face `ClassLabel` for "no label" (test splits); any other
            // negative is a bad label, as in a list.
            Some(RowLabel::Index(-1)) => None,
            Some(RowLabel::Index(l))
                if (0..=i128::from(i64::from(MAX_LABEL).min(MAX_INT_LABEL))).contains(&l) =>
            {
                Some(RowLabel::Index(l as u32))
            }
            Some(RowLabel::Index(l)) => {
                out.errors.push(failure(
                    source(),
                    "bad_label",
                    format!("label {l} is outside 0..={MAX_INT_LABEL}"),
                ));
                continue;
            }
        };
        let start = tar.written();
        tar.append(&format!("r{i}.jpg"), image).map_err(io)?;
        if let Some(t) = &p.text {
            tar.append(&format!("r{i}.txt"), t.as_bytes()).map_err(io)?;
        }
        for (field, bytes) in &p.fields {
            tar.append(&format!("r{i}.{field}"), bytes).map_err(io)?;
        }
        if !p.columns.is_empty() {
            let json = serde_json::to_vec(&p.columns).map_err(|e| e.to_string())?;
            tar.append(&format!("r{i}.{COLUMNS_FIELD}"), &json)
                .map_err(io)?;
        }
        // The span ends at the end of the last member's data (`written` counts its padding).
        let end = tar.written();
        out.rows.push(StagedRow {
            row: i,
            span: (start, end),
            label,
        });
    }
    let mut w = tar.finish().map_err(io)?;
    w.flush().map_err(io)?;
    result
}

/// Lists the rows of Parquet files (local paths or URLs, in order), staging each file as a tar
/// in [`ListOptions::stage_dir`] on `jobs` threads.
pub(crate) fn list_parquet(files: &[String], options: &ListOptions) -> Result<Listing, ListError> {
    let mut listing = Listing {
        looked_for: format!(
            "rows with image bytes in {} Parquet file(s){}",
            files.len(),
            files
                .first()
                .map(|s| format!(", the first {s}"))
                .unwrap_or_default()
        ),
        ..Listing::default()
    };
    // Files are opened (and fetched) in parallel, then every row group of every file is staged
    // as its own tar in parallel: one large file uses every core. What a row group holds, and so
    // the listing, does not depend on the thread count.
    let (opened, class_label) = open_files(files, options)?;
    let units: Vec<(usize, usize)> = opened
        .iter()
        .enumerate()
        .flat_map(|(f, o)| (0..o.groups.len()).map(move |g| (f, g)))
        .collect();
    let staged = parallel_map(&units, options.jobs, |_, &(f, g)| {
        stage_group(&files[f], f, g, &opened[f], options)
    });
    // Class names, numbered in sorted order across every file; names and indices together
    // are refused (numbering `10` before `2` as names would silently relabel the indices).
    let mut classes: std::collections::BTreeMap<String, u32> = Default::default();
    let (mut first_index, mut first_name) = (None, None);
    for (g, s) in units.iter().zip(&staged) {
        for n in &s.names {
            if !classes.contains_key(n) {
                if classes.len() > MAX_INT_LABEL as usize {
                    return Err(ListError::BadInput {
                        message: format!(
                            "more than {} class names in the Parquet label columns",
                            MAX_INT_LABEL + 1
                        ),
                    });
                }
                classes.insert(n.clone(), 0);
            }
        }
        for r in &s.rows {
            let first = match &r.label {
                Some(RowLabel::Name(_)) => &mut first_name,
                Some(RowLabel::Index(_)) => &mut first_index,
                None => continue,
            };
            first.get_or_insert_with(|| format!("{}:{}", files[g.0], r.row));
        }
    }
    if let (Some(i), Some(n)) = (&first_index, &first_name) {
        return Err(ListError::BadInput {
            message: format!(
                "the Parquet label columns mix class indices ({i}) with class names ({n}): use \
                 one kind throughout"
            ),
        });
    }
    for (k, v) in classes.values_mut().enumerate() {
        *v = k as u32;
    }
    let class_of = |l: &Option<RowLabel<u32, u32>>, names: &[String]| match l {
        Some(RowLabel::Index(i)) => Some(*i),
        Some(RowLabel::Name(id)) => names
            .get(*id as usize)
            .and_then(|n| classes.get(n.as_str()).copied()),
        None => None,
    };
    let mut staged = staged.into_iter();
    let mut max_label: Option<u32> = None;
    let names: Option<Vec<String>> = match classes.is_empty() {
        false => Some(classes.keys().cloned().collect()),
        true => class_label,
    };
    for (name, o) in files.iter().zip(opened) {
        let mut etag = None;
        if let Some(f) = o.fetched.filter(|f| f.staged) {
            listing.staged.push(f.path);
            etag = f.etag;
        }
        // URLs may carry credentials; what is shown never does.
        let shown = shardtool_core::redact_urls(name).into_owned();
        for _ in 0..o.groups.len() {
            let Some(s) = staged.next() else { break };
            if let Some(tar) = s.tar {
                listing.staged.push(tar.clone());
                let ci = listing.containers.len() as u32;
                listing.containers.push(Container {
                    etag: etag.clone(),
                    path: tar,
                    source: shown.clone(),
                    kind: ContainerKind::Parquet,
                });
                let dir = listing
                    .inputs
                    .add_container_dir(format!("{shown}:").as_bytes(), Some(ci));
                for r in &s.rows {
                    let label = class_of(&r.label, &s.names);
                    if let (Some(l), Some(n)) = (label, &names) {
                        if l as usize >= n.len() {
                            listing.errors.push(failure(
                                format!("{shown}:{}", r.row),
                                "bad_label",
                                format!(
                                    "label {l} names no class: the ClassLabel feature names {}",
                                    n.len()
                                ),
                            ));
                            continue;
                        }
                    }
                    if let Some(l) = label {
                        max_label = max_label.max(Some(l));
                    }
                    listing.inputs.push_span(
                        dir,
                        r.row.to_string().as_bytes(),
                        label,
                        None,
                        r.span,
                    )?;
                }
            }
            listing.errors.extend(s.errors);
            if let Some(message) = s.failure {
                listing
                    .errors
                    .push(failure(name.clone(), "bad_parquet", message));
            }
        }
        if let Some(message) = o.failure {
            listing
                .errors
                .push(failure(name.clone(), "bad_parquet", message));
        }
    }
    listing.labelled = max_label.is_some() || names.is_some();
    listing.classes = match names {
        Some(n) => n,
        None => (0..max_label.map_or(0, |m| m + 1))
            .map(|i| i.to_string())
            .collect(),
    };
    Ok(listing)
}

thread_local! {
    /// Set while [`contain`] runs: a panic then is that file's failure, not a bug to print.
    static CONTAINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, which calls the Parquet reader, and returns its panic, if any, as the panic's
/// message. Such a panic is not printed: it is reported as the file's failure. The panic hook
/// this installs once passes every other panic to the hook it replaced.
fn contain<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.get() {
                previous(info);
            }
        }));
    });
    let was = CONTAINED.replace(true);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINED.set(was);
    r.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_carried_as_their_shortest_decimal() {
        let json = |f: Field| values::json(&f).to_string();
        assert_eq!(json(Field::Float(0.1)), "0.1");
        assert_eq!(json(Field::Float(-3.25e-7)), "-3.25e-7");
        assert_eq!(json(Field::Double(0.1)), "0.1");
        assert_eq!(json(Field::Float(f32::NAN)), "null");
    }
}
