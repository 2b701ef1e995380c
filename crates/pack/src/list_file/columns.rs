//! The columns a list row carries besides path, label and key, read back by span when its input
//! is packed: its caption, and the rest as the sample's JSON.

use super::{csv_fields, python_json, ListColumns};
use crate::listing::{Columns, ContainerKind};

/// The extra columns of one list row (read back by span): the text column's value, if any, and
/// the other columns as a JSON object. CSV values are strings; JSONL values keep their JSON type.
pub(crate) fn row_columns(
    row: &[u8],
    kind: &ContainerKind,
    columns: &Columns,
) -> Result<(Option<String>, serde_json::Map<String, serde_json::Value>), String> {
    let cols = ListColumns::new(columns);
    let mut map = serde_json::Map::new();
    match kind {
        ContainerKind::Csv { headers } => {
            let mut unquoted = Vec::new();
            let Some(fields) = csv_fields(row, &mut unquoted)? else {
                return Err("the row is empty".into());
            };
            for (i, (name, value)) in headers.iter().zip(fields).enumerate() {
                // An unnamed column (a spreadsheet's trailing comma) is left out where empty;
                // a value under one is kept under the name pandas gives it.
                let name = match name.is_empty() {
                    true if value.trim().is_empty() => continue,
                    true => format!("Unnamed: {i}"),
                    false => name.clone(),
                };
                if !cols.is_own(&name) {
                    let value = serde_json::Value::String(value.to_string());
                    map.entry(name).or_insert(value);
                }
            }
        }
        ContainerKind::Jsonl => {
            let row = &python_json(row)[..];
            let v: serde_json::Value = serde_json::from_slice(row).map_err(|e| e.to_string())?;
            let serde_json::Value::Object(o) = v else {
                return Err("the row is not a JSON object".into());
            };
            for (name, value) in o {
                if !cols.is_own(&name) {
                    map.insert(name, value);
                }
            }
            // A caption that is a number or `true` is its text as written: `2024.10` stays
            // `2024.10`, not the number printed again. A list (several captions) or an object
            // is no one text: it stays in the `.json`, as a Parquet column of lists does.
            let scalar = |v: &serde_json::Value| v.is_number() || v.is_boolean();
            if let Some((k, _)) = map
                .iter()
                .find(|(k, v)| k.eq_ignore_ascii_case(cols.text) && scalar(v))
            {
                let raw: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
                    serde_json::from_slice(row).map_err(|e| e.to_string())?;
                if let Some(text) = raw.get(k.as_str()) {
                    let text = text.get().to_string();
                    map.remove(&k.clone());
                    return Ok((Some(text), map));
                }
            }
        }
        ContainerKind::Tar | ContainerKind::Parquet => return Err("not a list".into()),
    }
    let text_key = map
        .keys()
        .find(|k| k.eq_ignore_ascii_case(cols.text))
        .cloned();
    let text = match text_key {
        Some(k) if map[&k].is_array() || map[&k].is_object() => None,
        Some(k) => match map.remove(&k) {
            Some(serde_json::Value::String(t)) => Some(t),
            Some(serde_json::Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        },
        None => None,
    };
    Ok((text, map))
}
