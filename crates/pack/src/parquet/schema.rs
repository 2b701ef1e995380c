//! Which columns of a Parquet file are read for what: the image, label and text chosen from
//! its schema and Hugging Face features, and the projection that leaves dropped columns unread.

use super::guard::Bounded;
use crate::listing::{Columns, MAX_CLASS_NAME_BYTES, MAX_INT_LABEL};
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::Type;

/// Default text columns, in order of preference.
const TEXT_COLUMNS: [&str; 2] = ["text", "caption"];

/// The columns a file is read with.
#[derive(Clone)]
pub(super) struct Chosen {
    pub(super) image: String,
    /// Whether the image column is a struct (`bytes`, `path`) rather than binary.
    pub(super) image_struct: bool,
    pub(super) label: Option<String>,
    /// A `label` column found by its name but left as metadata (floats, which may be scores).
    pub(super) label_left: bool,
    pub(super) text: Option<String>,
    /// Which `--drop-column`s the file has (bits of their places in the list).
    pub(super) dropped: u64,
    /// What each column read is, in the order rows give them.
    pub(super) columns: Vec<ColumnKind>,
}

/// How a column is carried, worked out once a file rather than for every row.
#[derive(Clone)]
pub(super) struct ColumnKind {
    pub(super) name: String,
    /// A string column: read as bytes (a row group holding a value that is not UTF-8), its
    /// UTF-8 values stay text. Other binary columns are bytes in every row.
    pub(super) string: bool,
    /// A timestamp (`Some(false)`) or time (`Some(true)`) in nanoseconds, which rows give as
    /// bare integers (pandas writes `datetime64[ns]`): carried as text, as the others are.
    pub(super) nanos: Option<bool>,
    /// Where nanosecond times lie inside a struct, list or map column.
    pub(super) nested: Option<Nanos>,
    /// Its field name less the `.ext` (`values::field_bases`): from the column names alone, so
    /// a column's field is named alike in every row and two columns named alike apart.
    pub(super) base: String,
}

/// Where nanosecond times lie inside a nested column, so that its JSON carries them as text.
#[derive(Clone, Debug)]
pub(super) enum Nanos {
    /// A timestamp (`false`) or time (`true`) in nanoseconds.
    Leaf(bool),
    /// The members of a struct that hold some.
    Struct(Vec<(String, Nanos)>),
    /// Each element of a list.
    List(Box<Nanos>),
    /// A map's keys, values.
    Map(Option<Box<Nanos>>, Option<Box<Nanos>>),
}

/// The nanosecond times inside `t` (`None`: there are none), by the Parquet rules for nested
/// types: a list is a group holding a repeated group of one element (or, in older files, the
/// repeated element itself); a map a group holding a repeated group of key and value.
fn nested_nanos(t: &Type) -> Option<Nanos> {
    if t.is_primitive() {
        return nanos_kind(t).map(Nanos::Leaf);
    }
    let info = t.get_basic_info();
    let fields = t.get_fields();
    let list = matches!(info.logical_type_ref(), Some(LogicalType::List))
        || info.converted_type() == ConvertedType::LIST;
    let map = matches!(info.logical_type_ref(), Some(LogicalType::Map))
        || matches!(
            info.converted_type(),
            ConvertedType::MAP | ConvertedType::MAP_KEY_VALUE
        );
    if list {
        let repeated = fields.first()?;
        let element = match repeated.is_group() && repeated.get_fields().len() == 1 {
            true => &repeated.get_fields()[0],
            false => repeated,
        };
        return nested_nanos(element).map(|e| Nanos::List(Box::new(e)));
    }
    if map {
        let pair = fields.first().filter(|kv| kv.is_group())?.get_fields();
        let key = pair.first().and_then(|k| nested_nanos(k)).map(Box::new);
        let value = pair.get(1).and_then(|v| nested_nanos(v)).map(Box::new);
        return (key.is_some() || value.is_some()).then_some(Nanos::Map(key, value));
    }
    let members: Vec<(String, Nanos)> = (fields.iter())
        .filter_map(|f| Some((f.name().to_string(), nested_nanos(f)?)))
        .collect();
    (!members.is_empty()).then_some(Nanos::Struct(members))
}

/// Whether `t` is a timestamp (`Some(false)`) or time (`Some(true)`) in nanoseconds.
fn nanos_kind(t: &Type) -> Option<bool> {
    use parquet::basic::TimeUnit;
    match t.get_basic_info().logical_type_ref()? {
        LogicalType::Timestamp(ts) if matches!(ts.unit, TimeUnit::NANOS) => Some(false),
        LogicalType::Time(tt) if matches!(tt.unit, TimeUnit::NANOS) => Some(true),
        _ => None,
    }
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

/// `class_label`: the one column the Hugging Face features declare a `ClassLabel`, if any,
/// taken as the label when no column is named `label`.
pub(super) fn choose(
    fields: &[std::sync::Arc<Type>],
    columns: &Columns,
    class_label: Option<&str>,
) -> Result<Chosen, String> {
    let dropped = columns.dropped_bits(fields.iter().map(|f| f.name()));
    // Dropped columns are as if the file lacked them.
    let fields: Vec<_> = (fields.iter())
        .filter(|f| !columns.is_dropped(f.name()))
        .collect();
    let find = |n: &str| fields.iter().copied().find(|f| f.name() == n);
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
            .or_else(|| fields.iter().copied().find(|f| is_image_struct(f)))
            .or_else(|| fields.iter().copied().find(|f| is_binary(f)))
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
        // The Hub's Parquet conversion of a WebDataset repository (`__key__`, `jpg`, `cls`,
        // `txt`) keeps the label in `cls` and the caption in `txt`.
        None => (find("label").or_else(|| class_label.and_then(find)))
            .or_else(|| find("__key__").and_then(|_| find("cls"))),
    };
    let physical =
        |l: &Type, of: &[Physical]| l.is_primitive() && of.contains(&l.get_physical_type());
    // Floats when named: pandas stores an integer column with missing values as float64 (NaN);
    // a float `label` found by its name alone may be a score, and is carried as metadata.
    let is_int = |l: &Type| {
        physical(l, &[Physical::INT32, Physical::INT64])
            || columns.label.is_some() && physical(l, &[Physical::FLOAT, Physical::DOUBLE])
    };
    let usable = |l: &Type| is_int(l) || is_string(l);
    if let Some(l) = label.filter(|l| columns.label.is_some() && !usable(l)) {
        return Err(format!(
            "label column {:?} holds neither integers (class indices) nor strings (class names)",
            l.name()
        ));
    }
    let label_left = label.is_some_and(|l| !usable(l));
    let label = label.filter(|l| usable(l));
    let text = match &columns.text {
        Some(n) => {
            Some(find(n).ok_or_else(|| format!("no column {n:?} (the columns are {})", names()))?)
        }
        None => (TEXT_COLUMNS.iter())
            .find_map(|n| find(n).filter(|f| is_string(f)))
            .or_else(|| {
                find("__key__")
                    .and_then(|_| find("txt"))
                    .filter(|f| is_string(f))
            }),
    };
    if let Some(t) = text.filter(|t| !(is_string(t) || is_binary(t))) {
        return Err(format!(
            "text column {:?} holds neither strings nor bytes (UTF-8 text)",
            t.name()
        ));
    }
    Ok(Chosen {
        image: image.name().to_string(),
        image_struct: is_image_struct(image),
        label: label.map(|l| l.name().to_string()),
        label_left,
        text: text.map(|t| t.name().to_string()),
        dropped,
        columns: (fields.iter())
            .zip(super::values::field_bases(fields.iter().map(|f| f.name())))
            .map(|(f, base)| ColumnKind {
                name: f.name().to_string(),
                string: is_string(f),
                nanos: f.is_primitive().then(|| nanos_kind(f)).flatten(),
                nested: f.is_group().then(|| nested_nanos(f)).flatten(),
                base,
            })
            .collect(),
    })
}

/// The file's schema without its dropped columns, when it has some: rows then never read them.
pub(super) fn projection(
    meta: &ParquetMetaData,
    columns: &Columns,
) -> Result<Option<Type>, String> {
    let root = meta.file_metadata().schema_descr().root_schema();
    let fields = root.get_fields();
    if !fields.iter().any(|f| columns.is_dropped(f.name())) {
        return Ok(None);
    }
    let kept = (fields.iter())
        .filter(|f| !columns.is_dropped(f.name()))
        .cloned()
        .collect();
    Type::group_type_builder(root.name())
        .with_fields(kept)
        .build()
        .map(Some)
        .map_err(|e| format!("cannot leave out the dropped columns: {e}"))
}

/// The `huggingface` key-value metadata's features, as JSON.
pub(super) fn hf_features(reader: &SerializedFileReader<Bounded>) -> Option<serde_json::Value> {
    let kv = reader.metadata().file_metadata().key_value_metadata()?;
    let hf = kv.iter().find(|k| k.key == "huggingface")?.value.as_ref()?;
    let v: serde_json::Value = serde_json::from_str(hf).ok()?;
    Some(v.get("info")?.get("features")?.clone())
}

/// The columns the features declare a `ClassLabel` (`labels`, `fine_label`), by name.
pub(super) fn hf_class_label_columns(features: &serde_json::Value) -> Vec<&str> {
    let Some(all) = features.as_object() else {
        return Vec::new();
    };
    (all.iter())
        .filter(|(_, f)| f.get("_type").and_then(|t| t.as_str()) == Some("ClassLabel"))
        .map(|(name, _)| name.as_str())
        .collect()
}

/// Class names of `label` from the `huggingface` metadata's features (a `ClassLabel` feature);
/// none when they are too many or not strings, an error when one is longer than a class name may
/// be (the manifest would carry it into every message about its samples).
pub(super) fn hf_class_names(
    features: &serde_json::Value,
    label: &str,
) -> Result<Option<Vec<String>>, String> {
    let Some(names) = (features.get(label))
        .and_then(|f| f.get("names")?.as_array())
        .and_then(|n| {
            n.iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
    else {
        return Ok(None);
    };
    if let Some((i, n)) = names
        .iter()
        .enumerate()
        .find(|(_, n)| n.len() > MAX_CLASS_NAME_BYTES)
    {
        return Err(format!(
            "the ClassLabel feature of column {label:?} names class {i} with {} bytes, over \
             {MAX_CLASS_NAME_BYTES}",
            n.len()
        ));
    }
    Ok((names.len() <= MAX_INT_LABEL as usize + 1).then_some(names))
}

/// Row group `group`'s metadata with its top-level string columns described as plain bytes: the
/// crate fails a row whose string is not UTF-8, and its row reader cannot read past it, while
/// bytes it hands over as they are (a text column's bad value then fails its row alone). The
/// chunks' places, sizes, codecs and encodings are copied: the pages are read as before.
pub(super) fn strings_as_bytes(
    meta: &ParquetMetaData,
    group: usize,
) -> Result<parquet::file::metadata::RowGroupMetaData, String> {
    use parquet::file::metadata::{ColumnChunkMetaData, RowGroupMetaData};
    use parquet::schema::types::SchemaDescriptor;
    use std::sync::Arc;
    let bad = |e: parquet::errors::ParquetError| format!("cannot read strings as bytes: {e}");
    let root = meta.file_metadata().schema_descr().root_schema();
    let fields = (root.get_fields().iter())
        .map(|f| match is_string(f) {
            true => Type::primitive_type_builder(f.name(), Physical::BYTE_ARRAY)
                .with_repetition(f.get_basic_info().repetition())
                .build()
                .map(Arc::new),
            false => Ok(f.clone()),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    let root = Type::group_type_builder(root.name())
        .with_fields(fields)
        .build()
        .map_err(bad)?;
    let schema = Arc::new(SchemaDescriptor::new(Arc::new(root)));
    let rg = meta.row_group(group);
    if schema.num_columns() != rg.num_columns() {
        return Err("cannot read strings as bytes: the columns differ".into());
    }
    let mut columns = Vec::with_capacity(rg.num_columns());
    for (i, c) in rg.columns().iter().enumerate() {
        let copy = ColumnChunkMetaData::builder(schema.column(i))
            .set_encodings_mask(*c.encodings_mask())
            .set_num_values(c.num_values())
            .set_compression(c.compression())
            .set_total_compressed_size(c.compressed_size())
            .set_total_uncompressed_size(c.uncompressed_size())
            .set_data_page_offset(c.data_page_offset())
            .set_dictionary_page_offset(c.dictionary_page_offset())
            .set_index_page_offset(c.index_page_offset())
            .build()
            .map_err(bad)?;
        columns.push(copy);
    }
    RowGroupMetaData::builder(schema)
        .set_num_rows(rg.num_rows())
        .set_total_byte_size(rg.total_byte_size())
        .set_column_metadata(columns)
        .build()
        .map_err(bad)
}
