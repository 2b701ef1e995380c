//! Parquet inputs in the Hugging Face `datasets` layout: each row group is streamed row by row
//! (memory bounded by the pages in flight, not the file) into a staged tar of `r<row>.jpg`,
//! `r<row>.txt` and `r<row>.columns.json` members, whose spans the pack then reads like a
//! WebDataset shard's; row groups are staged in parallel.
//!
//! Columns: the image is the `image` column (or `--image-column`), a struct with `bytes` (and
//! `path`) or a binary column, else the first such column; the label is `label` (or
//! `--label-column`), an integer, with class names from the `ClassLabel` feature in the file's
//! `huggingface` metadata when present (a negative label leaves the row unlabelled); the text is
//! `text` or `caption` (or `--text-column`); other scalar columns go to the sample's metadata.

use crate::containers::{fetch_input, parallel_map, Fetched};
use crate::listing::{Columns, Container, ContainerKind, ListError, ListOptions, Listing};
use crate::listing::{MAX_INT_LABEL, MAX_LABEL};
use crate::{failure, ErrorRecord};
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::page::Page;
use parquet::file::reader::{FileReader, RowGroupReader, SerializedFileReader};
use parquet::record::{Field, Row};
use parquet::schema::types::Type;
use shardtool_wds::TarWriter;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The staged member holding a row's other columns, merged into the sample's metadata.
pub(crate) const COLUMNS_FIELD: &str = "columns.json";

/// Default text columns, in order of preference.
const TEXT_COLUMNS: [&str; 2] = ["text", "caption"];

/// A staged row.
struct StagedRow {
    row: u64,
    span: (u64, u64),
    label: Option<u32>,
}

/// One Parquet file, opened: where it is, how it is read, and its row groups.
struct Opened {
    fetched: Option<Fetched>,
    chosen: Option<Chosen>,
    class_names: Option<Vec<String>>,
    /// Per row group, its first row's number in the file and its row count.
    groups: Vec<(u64, u64)>,
    /// A problem with the whole file (unreadable, no image column).
    failure: Option<String>,
}

/// One row group, staged as its own tar.
struct StagedGroup {
    tar: Option<PathBuf>,
    rows: Vec<StagedRow>,
    errors: Vec<ErrorRecord>,
    /// A problem that stopped this row group; its rows before it are kept.
    failure: Option<String>,
}

/// The columns a file is read with.
#[derive(Clone)]
struct Chosen {
    image: String,
    /// Whether the image column is a struct (`bytes`, `path`) rather than binary.
    image_struct: bool,
    label: Option<String>,
    text: Option<String>,
}

fn is_binary(t: &Type) -> bool {
    t.is_primitive()
        && t.get_physical_type() == Physical::BYTE_ARRAY
        && !matches!(
            t.get_basic_info().logical_type_ref(),
            Some(LogicalType::String)
        )
        && t.get_basic_info().converted_type() != ConvertedType::UTF8
}

fn is_image_struct(t: &Type) -> bool {
    t.is_group()
        && t.get_fields()
            .iter()
            .any(|f| f.name() == "bytes" && is_binary(f))
}

fn is_string(t: &Type) -> bool {
    t.is_primitive()
        && t.get_physical_type() == Physical::BYTE_ARRAY
        && (matches!(
            t.get_basic_info().logical_type_ref(),
            Some(LogicalType::String)
        ) || t.get_basic_info().converted_type() == ConvertedType::UTF8)
}

fn choose(fields: &[std::sync::Arc<Type>], columns: &Columns) -> Result<Chosen, String> {
    let find = |n: &str| fields.iter().find(|f| f.name() == n);
    let names = || {
        fields
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let image = match &columns.image {
        Some(n) => {
            find(n).ok_or_else(|| format!("no column {n:?} (the columns are {})", names()))?
        }
        None => find("image")
            .filter(|f| is_image_struct(f) || is_binary(f))
            .or_else(|| fields.iter().find(|f| is_image_struct(f)))
            .or_else(|| fields.iter().find(|f| is_binary(f)))
            .ok_or_else(|| {
                format!(
                    "no image column: looked for a struct column with a binary `bytes` field, or \
                     a binary column (the columns are {}); name one with --image-column",
                    names()
                )
            })?,
    };
    if !(is_image_struct(image) || is_binary(image)) {
        return Err(format!(
            "column {:?} holds neither image bytes nor a struct with `bytes`",
            image.name()
        ));
    }
    let label = match &columns.label {
        Some(n) => {
            Some(find(n).ok_or_else(|| format!("no column {n:?} (the columns are {})", names()))?)
        }
        None => find("label"),
    };
    let is_int = |l: &Type| {
        l.is_primitive() && matches!(l.get_physical_type(), Physical::INT32 | Physical::INT64)
    };
    if let Some(l) = label.filter(|l| columns.label.is_some() && !is_int(l)) {
        return Err(format!(
            "label column {:?} is not an integer column",
            l.name()
        ));
    }
    let label = label.filter(|l| is_int(l));
    let text = match &columns.text {
        Some(n) => {
            Some(find(n).ok_or_else(|| format!("no column {n:?} (the columns are {})", names()))?)
        }
        None => TEXT_COLUMNS
            .iter()
            .find_map(|n| find(n).filter(|f| is_string(f))),
    };
    Ok(Chosen {
        image: image.name().to_string(),
        image_struct: is_image_struct(image),
        label: label.map(|l| l.name().to_string()),
        text: text.map(|t| t.name().to_string()),
    })
}

/// Class names of `label` from the `huggingface` key-value metadata (a `ClassLabel` feature).
fn hf_class_names(reader: &SerializedFileReader<Bounded>, label: &str) -> Option<Vec<String>> {
    let kv = reader.metadata().file_metadata().key_value_metadata()?;
    let hf = kv.iter().find(|k| k.key == "huggingface")?.value.as_ref()?;
    let v: serde_json::Value = serde_json::from_str(hf).ok()?;
    let feature = v.get("info")?.get("features")?.get(label)?;
    let names = feature.get("names")?.as_array()?;
    let names: Vec<String> = names
        .iter()
        .map(|n| n.as_str().map(str::to_string))
        .collect::<Option<_>>()?;
    (names.len() <= MAX_INT_LABEL as usize + 1).then_some(names)
}

/// A scalar column value as JSON; `None` for binary and nested values, which are not carried.
fn scalar_json(f: &Field) -> Option<serde_json::Value> {
    use serde_json::Value as V;
    Some(match f {
        Field::Null => V::Null,
        Field::Bool(b) => V::Bool(*b),
        Field::Byte(v) => V::from(*v),
        Field::Short(v) => V::from(*v),
        Field::Int(v) => V::from(*v),
        Field::Long(v) => V::from(*v),
        Field::UByte(v) => V::from(*v),
        Field::UShort(v) => V::from(*v),
        Field::UInt(v) => V::from(*v),
        Field::ULong(v) => V::from(*v),
        Field::Float(v) => serde_json::Number::from_f64(f64::from(*v)).map_or(V::Null, V::Number),
        Field::Double(v) => serde_json::Number::from_f64(*v).map_or(V::Null, V::Number),
        Field::Str(s) => V::String(s.clone()),
        Field::Date(_)
        | Field::TimeMillis(_)
        | Field::TimeMicros(_)
        | Field::TimestampMillis(_)
        | Field::TimestampMicros(_)
        | Field::Decimal(_)
        | Field::Float16(_) => V::String(f.to_string()),
        Field::Bytes(_) | Field::Group(_) | Field::ListInternal(_) | Field::MapInternal(_) => {
            return None
        }
    })
}

/// What one row contributes.
struct RowParts<'r> {
    image: Option<&'r [u8]>,
    image_path: Option<&'r str>,
    label: Option<i64>,
    text: Option<String>,
    columns: serde_json::Map<String, serde_json::Value>,
}

fn row_parts<'r>(row: &'r Row, chosen: &Chosen) -> RowParts<'r> {
    let mut p = RowParts {
        image: None,
        image_path: None,
        label: None,
        text: None,
        columns: serde_json::Map::new(),
    };
    for (name, field) in row.get_column_iter() {
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
                Field::Int(v) => Some(i64::from(*v)),
                Field::Long(v) => Some(*v),
                _ => None,
            };
        } else if Some(name) == chosen.text.as_ref() {
            p.text = match field {
                Field::Str(s) => Some(s.clone()),
                Field::Null => None,
                other => Some(other.to_string()),
            };
        } else if let Some(v) = scalar_json(field) {
            p.columns.insert(name.clone(), v);
        }
    }
    if let Some(path) = p.image_path {
        p.columns
            .insert("image_path".into(), serde_json::Value::String(path.into()));
    }
    p
}

/// Fetches file `index` (a path or URL) and reads its footer: columns, class names, row groups.
fn open_file(name: &str, index: usize, options: &ListOptions) -> Opened {
    let mut out = Opened {
        fetched: None,
        chosen: None,
        class_names: None,
        groups: Vec::new(),
        failure: None,
    };
    let fetched = match fetch_input(name, index, options) {
        Ok(f) => f,
        Err(e) => {
            out.failure = Some(format!("cannot fetch: {e}"));
            return out;
        }
    };
    let path = fetched.path.clone();
    out.fetched = Some(fetched);
    // The Parquet reader is not hardened against hostile files: a panic is that file's failure.
    let r = contain(|| -> Result<_, String> {
        let reader = open_reader(&path)?;
        let meta = reader.metadata();
        let schema = meta.file_metadata().schema_descr().root_schema();
        let chosen = choose(schema.get_fields(), &options.columns)?;
        let names = chosen
            .label
            .as_ref()
            .and_then(|l| hf_class_names(&reader, l));
        let mut groups = Vec::with_capacity(meta.num_row_groups());
        let mut first = 0u64;
        for g in meta.row_groups() {
            let n = u64::try_from(g.num_rows()).unwrap_or(0);
            groups.push((first, n));
            first = first.saturating_add(n);
        }
        Ok((chosen, names, groups))
    });
    match r {
        Ok(Ok((chosen, names, groups))) => {
            out.chosen = Some(chosen);
            out.class_names = names;
            out.groups = groups;
        }
        Ok(Err(e)) => out.failure = Some(e),
        Err(panic) => {
            out.failure = Some(format!("the Parquet reader failed on this file: {panic}"))
        }
    }
    out
}

fn open_reader(path: &Path) -> Result<SerializedFileReader<Bounded>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    check_footer(&file)?;
    SerializedFileReader::new(Bounded(file)).map_err(|e| format!("not a Parquet file: {e}"))
}

/// Refuses a footer whose Thrift declares more list, set or map elements than it has bytes
/// before the `parquet` crate reads it. The crate skips an unknown field's list of booleans (or
/// map of booleans to booleans) without reading a byte per element, so a few bytes declaring
/// 2^31 of them cost it seconds; an honest encoding spends at least a byte on each. A footer
/// this walk cannot follow is left to the crate, which reports it.
fn check_footer(file: &std::fs::File) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read: {e}"))?
        .len();
    let mut tail = [0u8; 8];
    if len < 8 || file.read_exact_at(&mut tail, len - 8).is_err() || &tail[4..] != b"PAR1" {
        return Ok(());
    }
    let meta_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if meta_len + 8 > len {
        return Ok(());
    }
    let mut meta = vec![0u8; meta_len as usize];
    file.read_exact_at(&mut meta, len - 8 - meta_len)
        .map_err(|e| format!("cannot read its footer: {e}"))?;
    let mut walk = ThriftWalk {
        buf: &meta,
        budget: meta.len() as u64,
    };
    // The crate allows 64 levels below each skipped field, which may lie deep in its structs.
    match walk.value(12, 128) {
        Err(WalkStop::TooManyElements) => Err(format!(
            "not a Parquet file: its {meta_len}-byte footer declares more list or map elements \
             than it has bytes"
        )),
        _ => Ok(()),
    }
}

/// The largest page, uncompressed, that pack lets the `parquet` crate decode: the crate reserves
/// a page's declared uncompressed size before decompressing it (up to 2 GiB, declared in a few
/// bytes). A page's values are inputs, each at most `max_input_bytes`, and writers close a page
/// at one value past their page size (1 MiB by default; 64 MiB is allowed whatever the inputs).
fn max_page_bytes(options: &ListOptions) -> u64 {
    options
        .max_input_bytes
        .saturating_add(1 << 20)
        .max(64 << 20)
}

/// Reads every page header of the row group's column chunks (pack's own walk, before the crate
/// reads a page) and refuses a page declaring more than `max` bytes uncompressed, or a header
/// that declares more list or map elements than it has bytes (see [`check_footer`]). A chunk
/// this walk cannot follow is left to the crate, which reports it.
/// Returns how many pages it read.
fn check_pages(path: &Path, row_group: &dyn RowGroupReader, max: u64) -> Result<u64, String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let file_len = file
        .metadata()
        .map_err(|e| format!("cannot read: {e}"))?
        .len();
    let mut pages = 0;
    for (i, column) in row_group.metadata().columns().iter().enumerate() {
        let data = column.data_page_offset();
        let start = column
            .dictionary_page_offset()
            .filter(|&d| (0..data).contains(&d))
            .unwrap_or(data);
        let (Ok(start), Ok(size)) = (
            u64::try_from(start),
            u64::try_from(column.compressed_size()),
        ) else {
            continue;
        };
        let end = start.saturating_add(size).min(file_len);
        let mut at = start;
        let mut buf = Vec::new();
        'pages: while at < end {
            // A header is read from up to 64 KiB, then more (statistics may be long), to 16 MiB.
            let mut want = 64u64 << 10;
            let (header_len, uncompressed, compressed) = loop {
                let n = want.min(end - at) as usize;
                buf.resize(n, 0);
                if file.read_exact_at(&mut buf, at).is_err() {
                    break 'pages;
                }
                match page_header(&buf) {
                    Ok(Some(h)) => break h,
                    Ok(None) if n as u64 == end - at || want >= 16 << 20 => break 'pages,
                    Ok(None) => want *= 4,
                    Err(WalkStop::TooManyElements) => {
                        return Err(format!(
                            "column {i}: a page header at byte {at} declares more list or map \
                             elements than it has bytes"
                        ))
                    }
                    Err(WalkStop::Malformed) => break 'pages,
                }
            };
            if uncompressed > max {
                return Err(format!(
                    "column {i}: a page at byte {at} declares {uncompressed} bytes uncompressed \
                     (pages of at most {max} bytes are read)"
                ));
            }
            at = at.saturating_add(header_len).saturating_add(compressed);
            pages += 1;
        }
    }
    Ok(pages)
}

/// A page header's length and its uncompressed and compressed sizes (fields 2 and 3, `i32`);
/// `Ok(None)` when `buf` ends first; `Err(Malformed)` when it is no page header.
fn page_header(buf: &[u8]) -> Result<Option<(u64, u64, u64)>, WalkStop> {
    let zigzag = |v: u64| ((v >> 1) as i64) ^ -((v & 1) as i64);
    let mut walk = ThriftWalk {
        buf,
        budget: buf.len() as u64,
    };
    let mut sizes = [None, None];
    let mut id = 0i64;
    let r = (|| loop {
        let header = walk.byte()?;
        let t = header & 0x0f;
        if t == 0 {
            return Ok(());
        }
        id = match header >> 4 {
            0 => zigzag(walk.varint()?),
            delta => id + i64::from(delta),
        };
        if t == 5 && (id == 2 || id == 3) {
            let v = u64::try_from(zigzag(walk.varint()?)).map_err(|_| WalkStop::Malformed)?;
            sizes[id as usize - 2] = Some(v);
        } else {
            walk.value(t, 128)?;
        }
    })();
    match r {
        // Running out of bytes is `Malformed` inside the walk: ask for more.
        Err(WalkStop::Malformed) if walk.buf.is_empty() => Ok(None),
        Err(e) => Err(e),
        Ok(()) => match sizes {
            [Some(u), Some(c)] => Ok(Some(((buf.len() - walk.buf.len()) as u64, u, c))),
            _ => Err(WalkStop::Malformed),
        },
    }
}

/// Why [`ThriftWalk`] stopped early.
enum WalkStop {
    /// More elements than bytes, in all: refused.
    TooManyElements,
    /// Malformed where the crate fails too: left to it.
    Malformed,
}

/// A walk over compact-protocol Thrift that consumes bytes as the `parquet` crate's skipping
/// does, counting every declared list, set and map element against `budget`.
struct ThriftWalk<'a> {
    buf: &'a [u8],
    budget: u64,
}

impl ThriftWalk<'_> {
    fn byte(&mut self) -> Result<u8, WalkStop> {
        let (&b, rest) = self.buf.split_first().ok_or(WalkStop::Malformed)?;
        self.buf = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, WalkStop> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WalkStop::Malformed)
    }

    fn skip(&mut self, n: u64) -> Result<(), WalkStop> {
        let n = usize::try_from(n).map_err(|_| WalkStop::Malformed)?;
        self.buf = self.buf.get(n..).ok_or(WalkStop::Malformed)?;
        Ok(())
    }

    fn elements(&mut self, n: u64) -> Result<(), WalkStop> {
        self.budget = self
            .budget
            .checked_sub(n)
            .ok_or(WalkStop::TooManyElements)?;
        Ok(())
    }

    /// One value of compact type `t` (booleans carry no bytes, as in the crate's skip).
    fn value(&mut self, t: u8, depth: u8) -> Result<(), WalkStop> {
        let depth = depth.checked_sub(1).ok_or(WalkStop::Malformed)?;
        match t {
            1 | 2 => Ok(()),
            3 => self.byte().map(drop),
            // Integers are skipped byte by byte to the last one, however long.
            4..=6 => loop {
                if self.byte()? & 0x80 == 0 {
                    return Ok(());
                }
            },
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let header = self.byte()?;
                if header == 0 {
                    return Ok(());
                }
                let element = match header & 0x0f {
                    1 | 2 => 1,
                    e @ 3..=13 => e,
                    _ => return Err(WalkStop::Malformed),
                };
                let n = match header >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                self.elements(n)?;
                for _ in 0..n {
                    self.value(element, depth)?;
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                let (k, v) = (kv >> 4, kv & 0x0f);
                if !(1..=13).contains(&k) || !(1..=13).contains(&v) {
                    return Err(WalkStop::Malformed);
                }
                self.elements(n)?;
                for _ in 0..n {
                    self.value(k, depth)?;
                    self.value(v, depth)?;
                }
                Ok(())
            }
            12 => loop {
                let header = self.byte()?;
                let t = header & 0x0f;
                if t == 0 {
                    return Ok(());
                }
                if header >> 4 == 0 {
                    self.varint()?;
                }
                self.value(t, depth)?;
            },
            13 => self.skip(16),
            _ => Err(WalkStop::Malformed),
        }
    }
}

/// The Parquet file as the `parquet` crate reads it, refusing what lies past its end: the crate
/// takes a damaged page header's size as is, then reserves that many bytes (`get_bytes`) or keeps
/// calling `read` at the end of the file. Here both fail at once.
struct Bounded(std::fs::File);

/// A reader of the file from some offset on, for which the file's end is an error.
struct NoReadPastEnd(std::io::BufReader<std::fs::File>);

impl std::io::Read for NoReadPastEnd {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 if !buf.is_empty() => Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => Ok(n),
        }
    }
}

impl parquet::file::reader::Length for Bounded {
    fn len(&self) -> u64 {
        parquet::file::reader::Length::len(&self.0)
    }
}

impl parquet::file::reader::ChunkReader for Bounded {
    type T = NoReadPastEnd;

    fn get_read(&self, start: u64) -> parquet::errors::Result<NoReadPastEnd> {
        self.0.get_read(start).map(NoReadPastEnd)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let end = start.checked_add(length as u64);
        if end.is_none_or(|end| end > parquet::file::reader::Length::len(self)) {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "{length} bytes at {start} lie past the end of the file"
            )));
        }
        self.0.get_bytes(start, length)
    }
}

/// Refuses a row group whose dictionary pages declare more values than their bytes could hold
/// (every dictionary value takes at least one byte): the `parquet` crate reserves room for the
/// declared count before it reads a value. Data pages are skipped by their headers, not read.
fn check_dictionaries(row_group: &dyn RowGroupReader) -> Result<(), String> {
    for i in 0..row_group.num_columns() {
        let mut pages = row_group
            .get_column_page_reader(i)
            .map_err(|e| e.to_string())?;
        while let Some(page) = pages.peek_next_page().map_err(|e| e.to_string())? {
            if !page.is_dict {
                pages.skip_next_page().map_err(|e| e.to_string())?;
                continue;
            }
            if let Some(Page::DictionaryPage {
                buf, num_values, ..
            }) = pages.get_next_page().map_err(|e| e.to_string())?
            {
                if num_values as usize > buf.len() {
                    return Err(format!(
                        "column {i}: a dictionary page declares {num_values} values in {} bytes",
                        buf.len()
                    ));
                }
            }
        }
    }
    Ok(())
}

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
        errors: Vec::new(),
        failure: None,
    };
    let (Some(fetched), Some(chosen)) = (&opened.fetched, &opened.chosen) else {
        return out;
    };
    let tar_path = options
        .stage_dir
        .join(format!(".stage-{index:06}-{group:06}-parquet.tar.tmp"));
    let first_row = opened.groups[group].0;
    let r = contain(|| {
        stage_rows(
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
    if tar_path.exists() {
        out.tar = Some(tar_path);
    }
    out
}

// One parameter per piece of the row group's context; a struct would be built for one call.
#[allow(clippy::too_many_arguments)]
fn stage_rows(
    path: &Path,
    name: &str,
    group: usize,
    first_row: u64,
    chosen: &Chosen,
    tar_path: &Path,
    options: &ListOptions,
    out: &mut StagedGroup,
) -> Result<(), String> {
    let reader = open_reader(path)?;
    let row_group = reader
        .get_row_group(group)
        .map_err(|e| format!("row group {group}: {e}"))?;
    check_pages(path, &*row_group, max_page_bytes(options))
        .map_err(|e| format!("row group {group}: {e}"))?;
    check_dictionaries(&*row_group).map_err(|e| format!("row group {group}: {e}"))?;
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(tar_path)
        .map_err(|e| format!("{}: {e}", tar_path.display()))?;
    let mut tar = TarWriter::new(BufWriter::with_capacity(1 << 20, file));
    let rows = row_group
        .get_row_iter(None)
        .map_err(|e| format!("cannot read rows: {e}"))?;
    let io = |e: std::io::Error| format!("{}: {e}", tar_path.display());
    let mut result = Ok(());
    for (k, row) in rows.enumerate() {
        let i = first_row + k as u64;
        let source = || format!("{name}:{i}");
        let row = match row {
            Ok(r) => r,
            Err(e) => {
                result = Err(format!(
                    "row {i}: {e}; the rest of row group {group} is not read"
                ));
                break;
            }
        };
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
        let label = match p.label {
            None => None,
            Some(l) if l < 0 => None,
            Some(l) if l <= i64::from(MAX_LABEL).min(MAX_INT_LABEL) => Some(l as u32),
            Some(l) => {
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
    let opened = parallel_map(files, options.jobs, |i, name| open_file(name, i, options));
    let units: Vec<(usize, usize)> = opened
        .iter()
        .enumerate()
        .flat_map(|(f, o)| (0..o.groups.len()).map(move |g| (f, g)))
        .collect();
    let staged = parallel_map(&units, options.jobs, |_, &(f, g)| {
        stage_group(&files[f], f, g, &opened[f], options)
    });
    let mut staged = staged.into_iter();
    let mut max_label: Option<u32> = None;
    let mut names: Option<Vec<String>> = None;
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
                    if let Some(l) = r.label {
                        max_label = max_label.max(Some(l));
                    }
                    listing.inputs.push_span(
                        dir,
                        r.row.to_string().as_bytes(),
                        r.label,
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
        if names.is_none() {
            names = o.class_names;
        }
        if let Some(message) = o.failure {
            listing
                .errors
                .push(failure(name.clone(), "bad_parquet", message));
        }
    }
    listing.labelled = max_label.is_some() || names.is_some();
    listing.classes = match names {
        Some(n) if max_label.is_none_or(|m| (m as usize) < n.len()) => n,
        _ => (0..max_label.map_or(0, |m| m + 1))
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

    /// pack's page walk finds the pages the crate reads, and refuses one over the limit.
    #[test]
    fn the_page_walk_finds_every_page_and_refuses_one_over_the_limit() {
        for seed in ["hf.parquet", "binary.parquet"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fuzz/seeds/parquet")
                .join(seed);
            let reader = open_reader(&path).unwrap();
            for g in 0..reader.num_row_groups() {
                let row_group = reader.get_row_group(g).unwrap();
                let mut theirs = 0;
                for c in 0..row_group.num_columns() {
                    let mut pages = row_group.get_column_page_reader(c).unwrap();
                    while pages.get_next_page().unwrap().is_some() {
                        theirs += 1;
                    }
                }
                assert!(theirs > 0, "{seed}");
                assert_eq!(
                    check_pages(&path, &*row_group, u64::MAX),
                    Ok(theirs),
                    "{seed}"
                );
                let err = check_pages(&path, &*row_group, 1).unwrap_err();
                assert!(err.contains("bytes uncompressed"), "{seed}: {err}");
            }
        }
    }

    #[test]
    fn a_page_header_reads_its_sizes_or_asks_for_more_bytes() {
        // Fields 1 (type, i32 0), 2 (uncompressed 300), 3 (compressed 7), then the stop.
        let header = [0x15, 0x00, 0x15, 0xD8, 0x04, 0x15, 0x0E, 0x00];
        assert!(matches!(page_header(&header), Ok(Some((8, 300, 7)))));
        for cut in 0..header.len() {
            assert!(matches!(page_header(&header[..cut]), Ok(None)), "{cut}");
        }
        // No sizes: not a page header.
        assert!(matches!(
            page_header(&[0x15, 0x00, 0x00]),
            Err(WalkStop::Malformed)
        ));
        // An unknown field 9 holding a list of 2^31 - 1 booleans in six bytes.
        let bombed = [0x15, 0x00, 0x89, 0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0x07, 0x00];
        assert!(matches!(
            page_header(&bombed),
            Err(WalkStop::TooManyElements)
        ));
    }
}
