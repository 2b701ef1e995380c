//! What pack checks in a Parquet file before the `parquet` crate reads it, where the crate would
//! trust a declared size or count: the footer's and every page header's Thrift (pack's own walk,
//! counting declared elements against bytes), every page's declared uncompressed size, every
//! dictionary's declared value count, and reads past the end of the file.

use crate::listing::ListOptions;
use parquet::column::page::Page;
use parquet::file::reader::{RowGroupReader, SerializedFileReader};
use std::path::Path;

/// Opens a Parquet file for the `parquet` crate after [`check_footer`].
pub(super) fn open_reader(path: &Path) -> Result<SerializedFileReader<Bounded>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    check_footer(&file)?;
    SerializedFileReader::new(Bounded(file)).map_err(|e| format!("not a Parquet file: {e}"))
}

/// Refuses a footer whose Thrift declares more list, set or map elements than it has bytes
/// before the `parquet` crate reads it. The crate skips an unknown field's list of booleans (or
/// map of booleans to booleans) without reading a byte per element, so a few bytes declaring
/// 2^31 of them cost it seconds; an honest encoding spends at least a byte on each. The walk
/// reads the footer as the crate does ([`file_metadata_field`]): a field the crate knows by the
/// type it should have, whatever type its bytes declare, so that no bytes the crate takes for
/// such a list hide from the walk inside a field it read otherwise. A footer this walk cannot
/// follow is left to the crate, which reports it.
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
    match walk.fields(file_metadata_field, 128, &mut |_, _| {}) {
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
pub(super) fn max_page_bytes(options: &ListOptions) -> u64 {
    options
        .max_input_bytes
        .saturating_add(1 << 20)
        .max(64 << 20)
}

/// Reads every page header of the row group's column chunks as the crate will (pack's own walk,
/// before the crate reads a page) and refuses a page declaring more than `max` bytes
/// uncompressed, a header that declares more list or map elements than it has bytes (see
/// [`check_footer`]), and a header this walk cannot read: the crate fails on those too, or
/// would read sizes no one checked. Each column's dictionary is then checked by
/// [`check_dictionary`], column by column, so the first bad column is the one reported.
/// Columns under a root field `skip` accepts are never read, and not checked. Returns how many
/// pages it read.
pub(super) fn check_row_group(
    path: &Path,
    row_group: &dyn RowGroupReader,
    max: u64,
    skip: &dyn Fn(&str) -> bool,
) -> Result<u64, String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let file_len = file
        .metadata()
        .map_err(|e| format!("cannot read: {e}"))?
        .len();
    let mut pages = 0;
    for (i, column) in row_group.metadata().columns().iter().enumerate() {
        if column
            .column_path()
            .parts()
            .first()
            .is_some_and(|root| skip(root))
        {
            continue;
        }
        // Where the crate starts reading the chunk (`ColumnChunkMetaData::byte_range`, which
        // panics on a negative offset or size).
        let start = column
            .dictionary_page_offset()
            .unwrap_or(column.data_page_offset());
        let (Ok(start), Ok(size)) = (
            u64::try_from(start),
            u64::try_from(column.compressed_size()),
        ) else {
            return Err(format!(
                "column {i}: its chunk declares offset {start} and size {}",
                column.compressed_size()
            ));
        };
        let end = start.saturating_add(size).min(file_len);
        let mut at = start;
        let mut buf = Vec::new();
        while at < end {
            let unreadable = |why: &str| format!("column {i}: the page header at byte {at} {why}");
            // A header is read from up to 64 KiB, then more (statistics may be long), to 16 MiB.
            let mut want = 64u64 << 10;
            let (header_len, uncompressed, compressed) = loop {
                let n = want.min(end - at) as usize;
                buf.resize(n, 0);
                file.read_exact_at(&mut buf, at)
                    .map_err(|e| unreadable(&format!("cannot be read: {e}")))?;
                match page_header(&buf) {
                    Ok(Some(h)) => break h,
                    Ok(None) if n as u64 == end - at => {
                        return Err(unreadable("runs past the end of its column chunk"))
                    }
                    Ok(None) if want >= 16 << 20 => {
                        return Err(unreadable("is longer than 16 MiB"))
                    }
                    Ok(None) => want *= 4,
                    Err(WalkStop::TooManyElements) => {
                        return Err(unreadable(
                            "declares more list or map elements than it has bytes",
                        ))
                    }
                    Err(WalkStop::Malformed) => return Err(unreadable("is malformed")),
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
        check_dictionary(row_group, i)?;
    }
    Ok(pages)
}

/// How the crate reads a field of a struct it knows (the footer's structs, and a page header's
/// in `PageHeader::read_thrift_without_stats`): by the type the field should have, not the type
/// its bytes declare, so a walk by declared types alone could read other sizes than the crate.
#[derive(Clone, Copy)]
enum Field {
    /// An `i16`, `i32`, `i64` or an enum: a zigzag varint whatever the declared type.
    Int,
    /// An `i8`: one byte.
    Byte,
    /// A `bool`, held in the declared type (any other type fails in the crate).
    Bool,
    /// A `double`: eight bytes.
    Double,
    /// A `string` or `binary`: a varint length and that many bytes.
    Binary,
    /// A struct (or union) read field by field as the function says.
    Struct(fn(i16) -> Field),
    /// An empty struct standing for a union's variant: one zero byte.
    Empty,
    /// A list whose declared element type must be the given one (the crate checks it).
    List(Element),
    /// Skipped by its declared type.
    Skip,
}

/// The elements of a [`Field::List`].
#[derive(Clone, Copy)]
enum Element {
    /// Zigzag varints, declared with this compact type (5 for `i32`, 6 for `i64`).
    Int(u8),
    /// Structs read as the function says.
    Struct(fn(i16) -> Field),
}

/// `FileMetaData`, as `parquet_metadata_from_bytes` reads it (built without `encryption`).
fn file_metadata_field(id: i16) -> Field {
    match id {
        1 | 3 => Field::Int,
        2 => Field::List(Element::Struct(schema_element_field)),
        4 => Field::List(Element::Struct(row_group_field)),
        5 => Field::List(Element::Struct(|id| match id {
            1 | 2 => Field::Binary,
            _ => Field::Skip,
        })),
        6 => Field::Binary,
        7 => Field::List(Element::Struct(|id| match id {
            1..=3 => Field::Empty,
            _ => Field::Skip,
        })),
        _ => Field::Skip,
    }
}

/// `SchemaElement`, its `LogicalType` union (field 10) and the structs of that union.
fn schema_element_field(id: i16) -> Field {
    match id {
        1..=3 | 5..=9 => Field::Int,
        4 => Field::Binary,
        10 => Field::Struct(|id| match id {
            1..=4 | 6 | 11..=15 | 19 => Field::Empty,
            5 => Field::Struct(|id| match id {
                1 | 2 => Field::Int,
                _ => Field::Skip,
            }),
            7 | 8 => Field::Struct(time_field),
            10 => Field::Struct(|id| match id {
                1 => Field::Byte,
                2 => Field::Bool,
                _ => Field::Skip,
            }),
            16 => Field::Struct(|id| match id {
                1 => Field::Byte,
                _ => Field::Skip,
            }),
            17 => Field::Struct(|id| match id {
                1 => Field::Binary,
                _ => Field::Skip,
            }),
            18 => Field::Struct(|id| match id {
                1 => Field::Binary,
                2 => Field::Int,
                _ => Field::Skip,
            }),
            _ => Field::Skip,
        }),
        _ => Field::Skip,
    }
}

/// `TimeType` and `TimestampType`: adjusted to UTC, then the `TimeUnit` union.
fn time_field(id: i16) -> Field {
    match id {
        1 => Field::Bool,
        2 => Field::Struct(|id| match id {
            1..=3 => Field::Empty,
            _ => Field::Skip,
        }),
        _ => Field::Skip,
    }
}

/// `RowGroup`, its `ColumnChunk`s and their `SortingColumn`s.
fn row_group_field(id: i16) -> Field {
    match id {
        1 => Field::List(Element::Struct(|id| match id {
            1 => Field::Binary,
            2 | 4..=7 => Field::Int,
            3 => Field::Struct(column_metadata_field),
            _ => Field::Skip,
        })),
        2 | 3 | 5 | 7 => Field::Int,
        4 => Field::List(Element::Struct(|id| match id {
            1 => Field::Int,
            2 | 3 => Field::Bool,
            _ => Field::Skip,
        })),
        _ => Field::Skip,
    }
}

/// `ColumnMetaData` (`read_column_metadata`, default options) and the structs it holds.
fn column_metadata_field(id: i16) -> Field {
    match id {
        1 | 4..=7 | 9..=11 | 14 | 15 => Field::Int,
        2 => Field::List(Element::Int(5)),
        12 => Field::Struct(|id| match id {
            1 | 2 | 5 | 6 => Field::Binary,
            3 | 4 | 9 => Field::Int,
            7 | 8 => Field::Bool,
            _ => Field::Skip,
        }),
        13 => Field::List(Element::Struct(|id| match id {
            1..=3 => Field::Int,
            _ => Field::Skip,
        })),
        16 => Field::Struct(|id| match id {
            1 => Field::Int,
            2 | 3 => Field::List(Element::Int(6)),
            _ => Field::Skip,
        }),
        17 => Field::Struct(|id| match id {
            1 => Field::Struct(|id| match id {
                1..=8 => Field::Double,
                _ => Field::Skip,
            }),
            2 => Field::List(Element::Int(5)),
            _ => Field::Skip,
        }),
        _ => Field::Skip,
    }
}

/// `PageHeader`: type, uncompressed size, compressed size, crc, then the four page kinds.
fn page_header_field(id: i16) -> Field {
    match id {
        1..=4 => Field::Int,
        5 => Field::Struct(|id| {
            if (1..=4).contains(&id) {
                Field::Int
            } else {
                Field::Skip
            }
        }),
        6 => Field::Struct(|_| Field::Skip),
        7 => Field::Struct(|id| match id {
            1 | 2 => Field::Int,
            3 => Field::Bool,
            _ => Field::Skip,
        }),
        8 => Field::Struct(|id| match id {
            1..=6 => Field::Int,
            7 => Field::Bool,
            _ => Field::Skip,
        }),
        _ => Field::Skip,
    }
}

/// A page header's length and its uncompressed and compressed sizes (fields 2 and 3, `i32`, the
/// last of each when repeated, as in the crate); `Ok(None)` when `buf` ends first;
/// `Err(Malformed)` when the crate would fail on it too, or the sizes are negative or missing.
fn page_header(buf: &[u8]) -> Result<Option<(u64, u64, u64)>, WalkStop> {
    let mut walk = ThriftWalk {
        buf,
        budget: buf.len() as u64,
    };
    let mut sizes = [None, None];
    let r = walk.fields(page_header_field, 64, &mut |id, v| {
        if id == 2 || id == 3 {
            sizes[id as usize - 2] = Some(v);
        }
    });
    match r {
        // Running out of bytes is `Malformed` inside the walk: ask for more.
        Err(WalkStop::Malformed) if walk.buf.is_empty() => Ok(None),
        Err(e) => Err(e),
        Ok(()) => match sizes {
            [Some(u), Some(c)] => {
                let size = |v: i32| u64::try_from(v).map_err(|_| WalkStop::Malformed);
                Ok(Some((
                    (buf.len() - walk.buf.len()) as u64,
                    size(u)?,
                    size(c)?,
                )))
            }
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

    /// An unsigned varint read as the crate reads one: of any length, its shift wrapping past
    /// 64 bits. A walk that stopped at ten bytes would leave an 18-byte list size (2^31 booleans
    /// to skip) uncounted.
    fn varint(&mut self) -> Result<u64, WalkStop> {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).wrapping_shl(shift);
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift = shift.wrapping_add(7);
        }
    }

    /// A struct whose fields are read as `schema` says (see [`Field`]), calling `int` with each
    /// top-level `Int` field's id and value. Field ids follow the crate: a delta from the last
    /// id, or a full id truncated to `i16`.
    fn fields(
        &mut self,
        schema: fn(i16) -> Field,
        depth: u8,
        int: &mut dyn FnMut(i16, i32),
    ) -> Result<(), WalkStop> {
        let zigzag = |v: u64| ((v >> 1) as i64) ^ -((v & 1) as i64);
        let depth = depth.checked_sub(1).ok_or(WalkStop::Malformed)?;
        let mut id = 0i16;
        loop {
            let header = self.byte()?;
            let t = header & 0x0f;
            if t == 0 {
                return Ok(());
            }
            if t > 13 {
                return Err(WalkStop::Malformed);
            }
            id = match header >> 4 {
                0 => zigzag(self.varint()?) as i16,
                delta => id
                    .checked_add(i16::from(delta))
                    .ok_or(WalkStop::Malformed)?,
            };
            match schema(id) {
                Field::Int => int(id, zigzag(self.varint()?) as i32),
                Field::Byte => self.byte().map(drop)?,
                Field::Bool if t == 1 || t == 2 => {}
                Field::Bool => return Err(WalkStop::Malformed),
                Field::Double => self.skip(8)?,
                Field::Binary => {
                    let n = self.varint()?;
                    self.skip(n)?;
                }
                Field::Struct(inner) => self.fields(inner, depth, &mut |_, _| {})?,
                Field::Empty => {
                    if self.byte()? != 0 {
                        return Err(WalkStop::Malformed);
                    }
                }
                Field::List(element) => self.list(element, depth)?,
                Field::Skip => self.value(t, 64)?,
            }
        }
    }

    /// A list the crate reads by its schema: the declared element type must be `element`'s, as
    /// the crate checks (an empty list's zero header declares bytes, which none of these are).
    fn list(&mut self, element: Element, depth: u8) -> Result<(), WalkStop> {
        let header = self.byte()?;
        let declared = match element {
            Element::Int(t) => t,
            Element::Struct(_) => 12,
        };
        if header & 0x0f != declared {
            return Err(WalkStop::Malformed);
        }
        let n = match header >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        if n > i32::MAX as u64 {
            return Err(WalkStop::Malformed);
        }
        self.elements(n)?;
        for _ in 0..n {
            match element {
                Element::Int(_) => self.value(5, 1)?,
                Element::Struct(inner) => self.fields(inner, depth, &mut |_, _| {})?,
            }
        }
        Ok(())
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
pub(super) struct Bounded(std::fs::File);

/// The file at `path`, for reading row groups whose footer [`open_reader`] parsed already.
pub(super) fn open_bounded(path: &Path) -> Result<Bounded, String> {
    std::fs::File::open(path)
        .map(Bounded)
        .map_err(|e| format!("cannot open: {e}"))
}

/// A reader of the file from some offset on, for which the file's end is an error.
pub(super) struct NoReadPastEnd(std::io::BufReader<std::fs::File>);

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

/// Refuses column `i` of the row group when its dictionary page declares more values than its
/// bytes could hold (every dictionary value takes at least one byte): the `parquet` crate
/// reserves room for the declared count before it reads a value. Data pages are skipped by
/// their headers, not read.
fn check_dictionary(row_group: &dyn RowGroupReader, i: usize) -> Result<(), String> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::FileReader;

    /// pack's page walk finds the pages the crate reads, and refuses one over the limit.
    #[test]
    fn the_page_walk_finds_every_page_and_refuses_one_over_the_limit() {
        for seed in ["hf.parquet", "binary.parquet"] {
            let path = self::seed(seed);
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
                    check_row_group(&path, &*row_group, u64::MAX, &|_| false),
                    Ok(theirs),
                    "{seed}"
                );
                let err = check_row_group(&path, &*row_group, 1, &|_| false).unwrap_err();
                assert!(err.contains("bytes uncompressed"), "{seed}: {err}");
            }
        }
    }

    fn seed(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/seeds/parquet")
            .join(name)
    }

    /// The footer walk reads real footers by the crate's schema to their last byte: pyarrow's,
    /// with logical types, statistics, size statistics, sorting columns, column orders and
    /// key-value metadata (`types.parquet`). A field read by the wrong type would leave it
    /// elsewhere.
    #[test]
    fn the_footer_walk_reads_real_footers_to_their_end() {
        for name in ["hf.parquet", "binary.parquet", "types.parquet"] {
            let bytes = std::fs::read(seed(name)).unwrap();
            let len = bytes.len();
            let meta_len = u32::from_le_bytes(bytes[len - 8..len - 4].try_into().unwrap()) as usize;
            let meta = &bytes[len - 8 - meta_len..len - 8];
            let mut walk = ThriftWalk {
                buf: meta,
                budget: meta.len() as u64,
            };
            let read = walk.fields(file_metadata_field, 128, &mut |_, _| {});
            assert!(matches!(read, Ok(())), "{name}");
            assert!(walk.buf.is_empty(), "{name}: {} bytes left", walk.buf.len());
        }
    }

    /// `FileMetaData.version` declared as nine bytes of binary: a walk by declared types skips
    /// them, while the crate reads an `i32` (0x09) and then the nine bytes as an unknown field
    /// 100 holding 2^31 - 1 booleans, which it skips for seconds. The walk reads it as the crate.
    #[test]
    fn a_list_of_booleans_hidden_in_a_field_the_crate_reads_otherwise_is_counted() {
        let footer = [
            0x18, 0x09, 0x09, 0xC8, 0x01, 0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0x07, 0x00,
        ];
        let walk = || ThriftWalk {
            buf: &footer,
            budget: footer.len() as u64,
        };
        assert!(matches!(walk().value(12, 128), Ok(())));
        assert!(matches!(
            walk().fields(file_metadata_field, 128, &mut |_, _| {}),
            Err(WalkStop::TooManyElements)
        ));
        // A list the crate reads by its schema must declare the element type the crate checks.
        let encodings_as_i64 = [0x26, 0x00];
        let mut walk = ThriftWalk {
            buf: &encodings_as_i64,
            budget: 2,
        };
        assert!(matches!(
            walk.list(Element::Int(5), 8),
            Err(WalkStop::Malformed)
        ));
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

    #[test]
    fn page_header_sizes_are_read_as_the_crate_reads_them() {
        // Field 2 in a five-byte varint: the crate keeps its low 32 bits after the zigzag.
        let header = [
            0x15, 0x04, 0x15, 0xFF, 0xFF, 0xFF, 0xFF, 0x30, 0x15, 0x0E, 0x00,
        ];
        let wide: u64 = 0x30 << 28 | 0x0FFF_FFFF;
        let theirs = (((wide >> 1) as i64) ^ -((wide & 1) as i64)) as i32;
        assert!(theirs > 0);
        assert!(matches!(
            page_header(&header),
            Ok(Some((11, u, 7))) if u == theirs as u64
        ));
        // Field 2 declared as binary is still an `i32` to the crate: no 300 bytes skipped.
        let header = [0x15, 0x00, 0x18, 0xD8, 0x04, 0x15, 0x0E, 0x00];
        assert!(matches!(page_header(&header), Ok(Some((8, 300, 7)))));
        // A negative size fails in the crate: malformed.
        let header = [0x15, 0x00, 0x15, 0x01, 0x15, 0x0E, 0x00];
        assert!(matches!(page_header(&header), Err(WalkStop::Malformed)));
        // A dictionary page header's `is_sorted` (field 3) must be a bool.
        let header = [
            0x15, 0x04, 0x15, 0x02, 0x15, 0x02, 0x4C, 0x15, 0x02, 0x15, 0x00, 0x15, 0x00,
        ];
        assert!(matches!(page_header(&header), Err(WalkStop::Malformed)));
        let mut sorted = header;
        sorted[11] = 0x11;
        assert!(matches!(page_header(&sorted[..12]), Ok(None)));
        assert!(matches!(
            page_header(&[&sorted[..12], &[0x00, 0x00]].concat()),
            Ok(Some((14, 1, 1)))
        ));
    }

    #[test]
    fn varints_of_any_length_wrap_their_shift_as_the_crate_does() {
        let mut walk = ThriftWalk {
            buf: &[
                0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ],
            budget: 0,
        };
        assert!(matches!(walk.varint(), Ok(64)));
        // A list of 2^24 booleans whose size takes thirteen bytes is still counted.
        let mut list = vec![0xF1];
        list.extend([0x80; 12]);
        list.push(0x10);
        let mut walk = ThriftWalk {
            buf: &list,
            budget: list.len() as u64,
        };
        assert!(matches!(walk.value(9, 64), Err(WalkStop::TooManyElements)));
    }

    /// A page header the walk cannot read is refused, not left to the crate.
    #[test]
    fn a_malformed_page_header_refuses_the_row_group() {
        let seed = seed("hf.parquet");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged.parquet");
        let mut bytes = std::fs::read(&seed).unwrap();
        let reader = open_reader(&seed).unwrap();
        let column = reader.metadata().row_group(0).column(0);
        let start = column
            .dictionary_page_offset()
            .unwrap_or(column.data_page_offset()) as usize;
        // Field type 15 does not exist.
        bytes[start] = 0x1F;
        std::fs::write(&path, &bytes).unwrap();
        let reader = open_reader(&path).unwrap();
        let err = check_row_group(&path, &*reader.get_row_group(0).unwrap(), u64::MAX, &|_| {
            false
        })
        .unwrap_err();
        assert!(
            err.contains(&format!(
                "column 0: the page header at byte {start} is malformed"
            )),
            "{err}"
        );
    }
}
